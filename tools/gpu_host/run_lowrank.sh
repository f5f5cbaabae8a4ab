#!/usr/bin/env bash
# GPU-host visit, low-rank KV methods at Llama-3-8B shapes with random weights (issue 5's speed
# numbers). Calibrates ZACK, FDC and Palu on the random-weight model itself (8192 uniform token ids:
# the config has no tokenizer), then one kvcomp bench per (backend, method, compression): TTFT and
# TBT at batch 1 and 16 for a 4K prompt and batch 1 for 32K (points whose fp16 cache would exceed
# --max-kv-gib are skipped), next to method none in the same visit.
# PART=cuda|opencl picks the half (one device call each stays under the 10-minute limit);
# RATES (default 0.5,0.7), PROMPTS, BATCHES choose the points; METHODS (default "none zack fdc palu",
# opencl "none fdc palu") a subset, e.g. to finish a visit cut short. Writes $OUT/bench_lowrank.csv and
# $OUT/lowrank_$PART.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_host/env.sh
PART=${PART:-cuda}
mkdir -p /tmp/l3_8b
cp tools/gpu_host/llama3_8b_config.json /tmp/l3_8b/config.json
{
  be=cuda
  [ "$PART" = opencl ] && be=$OCL_GPU
  for m in zack fdc palu; do
    [ -s /tmp/calib_$m.safetensors ] && continue
    step $B/kvcomp calibrate -m /tmp/l3_8b --random-weights --method $m --tokens 8192 --compression 0.5 \
      -b cuda -o /tmp/calib_$m.safetensors
  done
  bench() {
    step $B/kvcomp bench -m /tmp/l3_8b --random-weights -b $be --gen 16 --batches ${BATCHES:-1,16} \
      --prompts ${PROMPTS:-4096,32768} --commit "$commit" --csv "$OUT/bench_lowrank.csv" "$@"
  }
  methods=${METHODS:-none zack fdc palu}
  [ "$PART" = opencl ] && methods=${METHODS:-none fdc palu}
  for m in $methods; do
    if [ $m = none ]; then
      bench --method none
      continue
    fi
    for p in $(echo ${RATES:-0.5,0.7} | tr ',' ' '); do
      bench --method $m --method-opt calib=/tmp/calib_$m.safetensors --method-opt compression=$p
    done
  done
} 2>&1 | tee "$OUT/lowrank_$PART.log"
