#!/usr/bin/env bash
# GPU-host visit for the quantizing KV methods (ZipCache, KIVI): their ops against the CPU reference
# on CUDA and NVIDIA OpenCL, the saliency kernel (probe_scores) timed with its tensor-core and SIMT
# kernels, then TTFT/TBT of none / kivi / zipcache at Llama-3-8B shapes with random weights, all
# in one run so every ratio has its baseline from the same visit.
#   OPS (default probe_scores,select_salient,kv_quantize,kv_dequantize,attn_decode_quant; tested on CUDA and NVIDIA OpenCL), PROMPTS (default 4096), BATCHES (default 1,16), LONG (default 32768: batch 1 only;
#   'none' skips), METHODS (default none,kivi,zipcache; zipcache also runs with ratio=0, i.e. without
#   saliency estimation, and with select=host, its prefill ranking on the host instead of
#   select_salient), OCL_METHODS (default empty: methods also timed on NVIDIA OpenCL at
#   batch 1, e.g. none,zipcache), E2E=0 skips the end-to-end part, PROFILE=0 the per-op profile
#   of zipcache's prefill (KVCOMP_PROFILE_OPS).
#   (The decode kernels of every method are timed by run_methods.sh.)
# Writes under $OUT: quant.log, bench_ops_probe.csv (+ _simt), bench_quant_ttft.csv.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_host/env.sh
OPS=${OPS:-probe_scores,select_salient,kv_quantize,kv_dequantize,attn_decode_quant}
{
  step nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  for be in cuda $OCL_GPU; do
    KVCOMP_TEST_REQUIRE=cuda,opencl step $B/test_backend_ops -b $be -o "$OPS"
  done
  step $B/bench_ops -b cuda,$OCL_GPU -o probe_scores --contexts none --prefill none --commit "$commit" \
    --csv "$OUT/bench_ops_probe.csv"
  KVCOMP_PROBE_SCORES=simt step $B/bench_ops -b cuda -o probe_scores --contexts none --prefill none \
    --commit "$commit" --csv "$OUT/bench_ops_probe_simt.csv"
  if [ "${E2E:-1}" != 0 ]; then
    mkdir -p /tmp/l3_8b
    cp tools/gpu_host/llama3_8b_config.json /tmp/l3_8b/config.json
    bench() {
      step $B/kvcomp bench -m /tmp/l3_8b --random-weights --gen 16 --commit "$commit" \
        --csv "$OUT/bench_quant_ttft.csv" "$@"
    }
    for m in $(echo "${METHODS:-none,kivi,zipcache}" | tr ',' ' '); do
      bench -b cuda --batches "${BATCHES:-1,16}" --prompts "${PROMPTS:-4096}" --method "$m"
      [ "${LONG:-32768}" != none ] && bench -b cuda --batches 1 --prompts "${LONG:-32768}" --method "$m"
      if [ "$m" = zipcache ]; then  # the same quantizer without saliency estimation: what it costs
        bench -b cuda --batches "${BATCHES:-1,16}" --prompts "${PROMPTS:-4096}" --method zipcache --method-opt ratio=0
        [ "${LONG:-32768}" != none ] && bench -b cuda --batches 1 --prompts "${LONG:-32768}" --method zipcache \
          --method-opt ratio=0
        # The prefill ranking on the host (one score download per layer) instead of select_salient.
        bench -b cuda --batches "${BATCHES:-1,16}" --prompts "${PROMPTS:-4096}" --method zipcache --method-opt select=host
      fi
    done
    # Where the prefill time goes (PROFILE=0 skips): per-op device time (KVCOMP_PROFILE_OPS) of
    # zipcache and its no-saliency baseline; wall minus the ops' sum is time the GPU sat idle.
    if [ "${PROFILE:-1}" != 0 ]; then
      for opt in ratio=0.4 ratio=0; do
        prof() { KVCOMP_PROFILE_OPS=1 step $B/kvcomp bench -m /tmp/l3_8b --random-weights --gen 2 --warmup 0 \
          -b cuda --method zipcache --method-opt $opt "$@"; }
        prof --batches 16 --prompts "${PROMPTS:-4096}"
        [ "${LONG:-32768}" != none ] && prof --batches 1 --prompts "${LONG:-32768}"
      done
    fi
    for m in $(echo "${OCL_METHODS:-}" | tr ',' ' '); do
      bench -b $OCL_GPU --batches 1 --prompts "${PROMPTS:-4096}" --method "$m"
    done
  fi
} 2>&1 | tee "$OUT/quant.log"
