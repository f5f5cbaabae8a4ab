#!/usr/bin/env bash
# GPU-host visit, part 2: Llama-3-8B shapes with random weights. A 2-layer random checkpoint made by
# transformers is compared with our engine (logits, 128 greedy tokens; fp32 and fp16 weights) on
# CUDA and NVIDIA OpenCL; then TTFT/TBT of the full 32-layer shapes for the fp16 cache on CUDA and
# NVIDIA OpenCL, kivi and zipcache on CUDA, and transformers at the same shapes in the same run.
# One kvcomp bench call per method and backend: each builds its engine once for all its points.
# PROMPT (default 4096) and BATCHES / OPENCL_BATCHES / METHOD_BATCHES, LONG (default 32768) choose the shapes.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_host/env.sh
P=${PROMPT:-4096}
{
  step python3 tools/gpu_host/hf_oracle.py --make-random /tmp/l3_2layers --layers 2
  for dt in float32 float16; do
    w=f32; tol=1e-5
    [ $dt = float16 ] && w=f16 && tol=1e-3
    step python3 tools/gpu_host/hf_oracle.py --model /tmp/l3_2layers --dtype $dt --random-tokens 64 --steps 128 \
      --out /tmp/ref_l3_$dt.safetensors
    step $B/kvcomp compare -m /tmp/l3_2layers --backends cuda,$OCL_GPU --weights $w --max-nmse $tol \
      --max-batch 1 --max-context 512 --reference /tmp/ref_l3_$dt.safetensors
  done
} 2>&1 | tee "$OUT/oracle_l3.log"
{
  mkdir -p /tmp/l3_8b
  cp tools/gpu_host/llama3_8b_config.json /tmp/l3_8b/config.json
  bench() { step $B/kvcomp bench -m /tmp/l3_8b --random-weights --gen 16 --commit "$commit" --csv "$OUT/bench_e2e.csv" "$@"; }
  bench -b cuda --batches ${BATCHES:-1,16,64} --prompts $P
  bench -b $OCL_GPU --batches ${OPENCL_BATCHES:-1,16} --prompts $P
  for m in kivi zipcache; do bench -b cuda --batches ${METHOD_BATCHES:-1,16} --prompts $P --method $m; done
  step python3 tools/gpu_host/hf_speed.py --points "$(echo ${BATCHES:-1,16,64} | tr ',' '\n' | sed "s/$/x$P/" | paste -sd,)" \
    --out "$OUT/hf_speed.json"
  bench -b cuda --batches 1 --prompts ${LONG:-32768}
} 2>&1 | tee "$OUT/speed.log"
