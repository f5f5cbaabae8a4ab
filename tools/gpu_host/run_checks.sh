#!/usr/bin/env bash
# GPU-host visit, part 1: correctness of every backend against the CPU reference, the engine on
# CUDA and NVIDIA OpenCL, kernel benchmarks with the copy bandwidth of the same run, the default
# model against Hugging Face transformers, and a random SmolLM3 (layers without RoPE) against
# transformers (smollm3_oracle below; SMOLLM3_ONLY=1 runs only that). Expects the build in
# .carry/bin (see tools/gpu_host/README.md); writes logs and CSVs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_host/env.sh

# SmolLM3 against transformers: a 4-layer random checkpoint written by transformers (hidden 512,
# 8 heads, 2 KV heads, head_dim 64, no_rope_layers [1, 1, 1, 0] from the default interval), loaded
# back with AutoModelForCausalLM, fp32 on both sides. Method none on CUDA and NVIDIA OpenCL; then
# fdc and palu at full rank (removal rate 0), whose layer 3 runs the fully folded mode (R_k in
# W_Q / W_K, ZACK's Lemma 1), against the same reference (their only difference from none is the
# rounding of the fp16 cache in another basis).
smollm3_oracle() {
  local dir=/tmp/smollm3_4l ref=/tmp/ref_smollm3_float32.safetensors
  local common=(--backends cuda,$OCL_GPU --weights f32 --max-batch 1 --max-context 512 --reference $ref)
  step python3 tools/gpu_host/hf_oracle.py --make-random-smollm3 $dir --layers 4
  step python3 tools/gpu_host/hf_oracle.py --model $dir --dtype float32 --random-tokens 64 --steps 64 --out $ref
  step $B/kvcomp compare -m $dir "${common[@]}" --max-nmse 1e-5
  for m in fdc palu; do
    step $B/kvcomp calibrate -m $dir --method $m --tokens 2048 --removal-rate 0 -b cuda \
      -o /tmp/calib_smollm3_$m.safetensors
    step $B/kvcomp compare -m $dir "${common[@]}" --max-nmse 1e-4 --method $m \
      --method-opt calib=/tmp/calib_smollm3_$m.safetensors
  done
}
if [ "${SMOLLM3_ONLY:-0}" = 1 ]; then
  smollm3_oracle 2>&1 | tee "$OUT/oracle_smollm3.log"
  exit 0
fi
{
  step nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  step $B/kvcomp info
  KVCOMP_TEST_REQUIRE=cuda step $B/test_backend_ops -b cuda
  KVCOMP_TEST_REQUIRE=opencl step $B/test_backend_ops -b $OCL_GPU
  # The OpenCL decodes' per-work-item state must stay in registers: the PTX NVIDIA's driver built for
  # them (kvcomp's program cache, now holding every decode the tests compiled) has no ld.local / st.local.
  step python3 tools/report/cl_cache_dump.py "$KVCOMP_CL_CACHE_DIR" \
    --no-private '^kvc_(attn_decode_split|adq_split|adq_warps|attn_decode_ragged|attn_decode_ragged_q4|adr_warps|adr_q4_warps|adp_warps)$'
  step $B/kvcomp_unit_tests --gtest_brief=1
  step $B/kvcomp selfcheck -b cuda
  step $B/kvcomp selfcheck -b $OCL_GPU
  # Kernel timings with the copy bandwidth of the same run: fp16 and quantized decode, prefill.
  step $B/bench_ops -b cuda,$OCL_GPU --contexts ${CONTEXTS:-4k,32k,128k} --prefill ${PREFILL:-1x4k,16x4k,1x32k} \
    --commit "$commit" --csv "$OUT/bench_ops.csv"
  step $B/kvcomp compare -m tools/model/default -n 64
  # Default model against transformers: fp32 weights on both sides (our KV cache is fp16), then fp16.
  for dt in float32 float16; do
    w=f32; tol=1e-5
    [ $dt = float16 ] && w=f16 && tol=1e-3
    step python3 tools/gpu_host/hf_oracle.py --model tools/model/default --dtype $dt --bos 256 \
      --text-file tools/model/default/heldout.txt --max-bytes 600 --steps 128 --out /tmp/ref_default_$dt.safetensors
    step $B/kvcomp compare -m tools/model/default --backends cuda,$OCL_GPU --weights $w --max-nmse $tol \
      --reference /tmp/ref_default_$dt.safetensors
  done
} 2>&1 | tee "$OUT/checks.log"
smollm3_oracle 2>&1 | tee "$OUT/oracle_smollm3.log"
