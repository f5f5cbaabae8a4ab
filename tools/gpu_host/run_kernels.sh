#!/usr/bin/env bash
# GPU-host visit, kernels only: every op against the CPU reference on CUDA and NVIDIA OpenCL, then
# bench_ops (copy bandwidth, fp16 / quantized / low-rank decode and prefill) in one run per device
# set. Short enough to run before the engine-level visit (tools/gpu_host/run_checks.sh,
# run_speed.sh). CONTEXTS / BATCHES / LONG choose the decode sweep; writes under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_host/env.sh
{
  step nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  KVCOMP_TEST_REQUIRE=cuda step $B/test_backend_ops -b cuda
  KVCOMP_TEST_REQUIRE=opencl step $B/test_backend_ops -b $OCL_GPU
  step $B/bench_ops -b cuda,$OCL_GPU --set none --contexts ${CONTEXTS:-4k,32k} --batches ${BATCHES:-1,16} \
    --prefill ${PREFILL:-1x4k,16x4k,1x32k} --commit "$commit" --csv "$OUT/bench_ops.csv"
  step $B/bench_ops -b cuda,$OCL_GPU --set none --contexts ${LONG:-128k} --batches 1 --prefill none \
    --commit "$commit" --csv "$OUT/bench_ops.csv"
} 2>&1 | tee "$OUT/kernels.log"
