#!/usr/bin/env bash
# GPU-host visit, part 1: correctness of every backend against the CPU reference, the engine on
# CUDA and NVIDIA OpenCL, kernel benchmarks with the copy bandwidth of the same run, and the
# default model against Hugging Face transformers. Expects the build in .carry/bin (see
# tools/gpu_host/README.md); writes logs and CSVs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_host/env.sh
{
  step nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  step $B/kvcomp info
  KVCOMP_TEST_REQUIRE=cuda step $B/test_backend_ops -b cuda
  KVCOMP_TEST_REQUIRE=opencl step $B/test_backend_ops -b $OCL_GPU
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
