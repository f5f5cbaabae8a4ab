#!/usr/bin/env bash
# GPU-host visit for the KV methods: every op against the CPU reference on CUDA and NVIDIA OpenCL,
# the methods' engine tests on both devices, and the kernels the methods add timed next to the fp16
# decode of the same run: the saliency op (tensor-core and SIMT), decode over quantized blocks,
# low-rank decode on fp16 and 4-bit ragged pages. Expects the build in .carry (README.md).
#   TESTS=0 skips the tests; FILTER (gtest filter of kvcomp_unit_tests, default the KV methods').
#   CONTEXTS of the decode sweep (default 4K,32K; batches 1 and 16).
# Writes under $OUT: methods.log, bench_ops_probe.csv (+ _simt), bench_ops_methods.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_host/env.sh
{
  step nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  if [ "${TESTS:-1}" != 0 ]; then
    KVCOMP_TEST_REQUIRE=cuda step $B/test_backend_ops -b cuda
    KVCOMP_TEST_REQUIRE=opencl step $B/test_backend_ops -b $OCL_GPU
    KVCOMP_TEST_BACKENDS=cuda:0,$OCL_GPU step $B/kvcomp_unit_tests --gtest_brief=1 \
      --gtest_filter="${FILTER:-*quant*:*Quant*:*requant*:*lowrank*:*Lowrank*:parallel_for*}"
  fi
  ops() { step $B/bench_ops --prefill none --commit "$commit" "$@"; }
  ops -b cuda,$OCL_GPU -o probe_scores --contexts none --csv "$OUT/bench_ops_probe.csv"
  KVCOMP_PROBE_SCORES=simt ops -b cuda -o probe_scores --contexts none --csv "$OUT/bench_ops_probe_simt.csv"
  # The decode sweep of every KV method's kernel (fp16, quantized blocks, low-rank plain/balanced/
  # Palu, 4-bit low-rank pages) with the copy bandwidth of the same run.
  ops -b cuda --contexts "${CONTEXTS:-4K,32K}" --batches 1,16 --csv "$OUT/bench_ops_methods.csv"
} 2>&1 | tee "$OUT/methods.log"
