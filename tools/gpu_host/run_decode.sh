#!/usr/bin/env bash
# GPU-host visit for the KV methods' decode kernels: their test_backend_ops cases against the CPU
# reference on CUDA (and NVIDIA OpenCL), the methods' engine tests, then the decode sweeps next to
# the fp16 decode and the copy bandwidth of the same run. Expects the build in .carry (README.md).
#   OPS      test_backend_ops ops (default the decode and quantized-block ops); TESTS=0 skips tests
#   OCL=1    also run those cases on NVIDIA's OpenCL
#   FILTER   gtest filter of kvcomp_unit_tests on cuda:0 (default: none run)
#   SWEEPS   bench_ops decode sweeps (default fp16,quant), CONTEXTS (default 4K,16K,32K,128K),
#            BATCHES (default 1,16), ROWS (a --sweep-rows regex, default every row)
#   BASE     a bench_ops binary built from an earlier commit (its SHA in BASE_COMMIT): its decode
#            sweeps (all of them: older binaries have no --sweeps) run in the same visit, for a
#            before/after table
#   SIMT=1   also run the sweeps with KVCOMP_RAGGED_DECODE=simt (the low-rank decode's SIMT kernel
#            instead of the tensor-core one, same binary) into bench_decode_simt.csv
#   NCU      a bench_ops -p/--contexts/--batches argument string: profile that case with Nsight
#            Compute (when ncu is on the host) into $OUT/ncu.txt
# Writes under $OUT: decode.log, bench_decode.csv (+ bench_decode_simt.csv, bench_decode_base.csv).
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_host/env.sh
ops=${OPS:-attn_decode_quant,kv_quantize,kv_dequantize,attn_decode_ragged,attn_decode_palu}
sweep_args=(--set none --prefill none --contexts "${CONTEXTS:-4K,16K,32K,128K}" --batches "${BATCHES:-1,16}")
[ -n "${ROWS:-}" ] && sweep_args+=(--sweep-rows "$ROWS")
{
  step nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  if [ "${TESTS:-1}" != 0 ]; then
    KVCOMP_TEST_REQUIRE=cuda step $B/test_backend_ops -b cuda -o "$ops"
    [ "${OCL:-0}" = 1 ] && KVCOMP_TEST_REQUIRE=opencl step $B/test_backend_ops -b $OCL_GPU -o "$ops"
    [ -n "${FILTER:-}" ] && KVCOMP_TEST_BACKENDS=cuda:0 step $B/kvcomp_unit_tests --gtest_brief=1 \
      --gtest_filter="$FILTER"
  fi
  step $B/bench_ops -b cuda "${sweep_args[@]}" --sweeps "${SWEEPS:-fp16,quant}" --commit "$commit" --csv "$OUT/bench_decode.csv"
  if [ "${SIMT:-0}" = 1 ]; then
    KVCOMP_RAGGED_DECODE=simt step $B/bench_ops -b cuda "${sweep_args[@]}" --sweeps "${SWEEPS:-fp16,quant}" \
      --commit "$commit-simt" --csv "$OUT/bench_decode_simt.csv"
  fi
  if [ -n "${BASE:-}" ]; then
    step "$BASE" -b cuda "${sweep_args[@]}" --commit "${BASE_COMMIT:-base}" --csv "$OUT/bench_decode_base.csv"
  fi
  if [ -n "${NCU:-}" ] && command -v ncu >/dev/null; then
    # shellcheck disable=SC2086  # NCU is a list of arguments
    step ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
      -k regex:attn_decode -c 4 $B/bench_ops -b cuda --set none --prefill none --reps 1 --warmup 0 $NCU \
      > "$OUT/ncu.txt" 2>&1
  fi
} 2>&1 | tee "$OUT/decode.log"
