#!/usr/bin/env bash
# GPU-host visit, part 2: Llama-3-8B shapes. TTFT/TBT of the full 32-layer shapes with random
# weights on CUDA, in transformers and on NVIDIA OpenCL in one run; then a 2-layer random
# checkpoint made by transformers compared with our engine (logits, 128 greedy tokens) on CUDA
# and NVIDIA OpenCL. POINTS (BATCHxPROMPT list), OPENCL_POINTS, METHODS / METHOD_POINTS (the
# compressed KV methods timed on CUDA) and HF_POINTS choose the shapes.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_host/env.sh
POINTS=${POINTS:-1x4096,16x4096,64x4096,1x32768}
OPENCL_POINTS=${OPENCL_POINTS:-$POINTS}
{
  mkdir -p /tmp/l3_8b
  cp tools/gpu_host/llama3_8b_config.json /tmp/l3_8b/config.json
  bench() {  # backend, points, method options...
    local be=$1 pts=$2; shift 2
    for pt in ${pts//,/ }; do
      step $B/kvcomp bench -m /tmp/l3_8b --random-weights -b $be --batches ${pt%x*} --prompts ${pt#*x} \
        --gen 16 --commit "$commit" --csv "$OUT/bench_e2e.csv" "$@"
    done
  }
  bench cuda "$POINTS"
  for m in ${METHODS:-kivi zipcache}; do bench cuda "${METHOD_POINTS:-1x4096,16x4096,1x32768}" --method $m; done
  step python3 tools/gpu_host/hf_speed.py --points "${HF_POINTS:-$POINTS}" --out "$OUT/hf_speed.json"
  bench $OCL_GPU "$OPENCL_POINTS"
  step python3 tools/gpu_host/hf_oracle.py --make-random /tmp/l3_2layers --layers 2
  step python3 tools/gpu_host/hf_oracle.py --model /tmp/l3_2layers --dtype float32 --random-tokens 64 --steps 128 \
    --out /tmp/ref_l3_f32.safetensors
  step $B/kvcomp compare -m /tmp/l3_2layers --backends cuda,$OCL_GPU --weights f32 --max-nmse 1e-5 \
    --max-batch 1 --max-context 512 --reference /tmp/ref_l3_f32.safetensors
  step python3 tools/gpu_host/hf_oracle.py --model /tmp/l3_2layers --dtype float16 --random-tokens 64 --steps 128 \
    --out /tmp/ref_l3_f16.safetensors
  step $B/kvcomp compare -m /tmp/l3_2layers --backends cuda,$OCL_GPU --weights f16 --max-nmse 1e-3 \
    --max-batch 1 --max-context 512 --reference /tmp/ref_l3_f16.safetensors
} 2>&1 | tee "$OUT/speed.log"
