#!/usr/bin/env bash
# Measures zack / fdc with the reduced cache stored as 4-bit rows (kv_bits=4, lib/core/ragged_q4.h)
# against the same ranks in fp16 (kv_bits=16) and the uncompressed cache (none), on the default
# model, into docs/data/eval_lowrank_q4.csv: line retrieval at 1K tokens and perplexity at 1K, at
# full rank and overall KV compressions p = 0.1, 0.3 and 0.5 (ranks re-chosen at load from one
# full calibration file per method; kv_bits does not change the ranks, only how their dims are
# stored, so the kv_bytes column shows the further ~3.5x); kv_bits=4,equalize=0 is the ablation
# without the channel equalization. Calibration as measure_lowrank_methods.sh (zack on the default
# corpus, fdc on random token ids). Run from the repository root after building. The committed CSV
# was made on PoCL (BACKEND=opencl:0 EXAMPLES=4), about 22 minutes on 2 shared cores.
#   BACKEND (default opencl:0; cpu runs the CPU reference), BIN (default build/bin), OUT (default
#   docs/data), EXAMPLES (default 4), CALIB (default build/calib_lowrank), POINTS (default
#   full,0.1,0.3,0.5; full = the file's r = 0 ranks, every head at head_dim: the quantizer alone),
#   COMMIT (default git HEAD)
set -euo pipefail
default_backend=opencl:0 default_examples=4
source "$(dirname "$0")/lowrank_measure_setup.sh"
points=${POINTS:-full,0.1,0.3,0.5}
csv="$out/eval_lowrank_q4.csv"
t0=$(date +%s)
methods=(--methods none)
for m in zack fdc; do
  file=$(full_calibration $m)
  for p in ${points//,/ }; do
    ranks="compression=$p,"
    [ "$p" = full ] && ranks=""
    for bits in 16 4 "4,equalize=0"; do methods+=(--methods "$m:calib=$file,${ranks}kv_bits=$bits"); done
  done
done
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$csv" "${methods[@]}" \
  --tasks line_retrieval --contexts 1024 --examples "$examples"
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$csv" "${methods[@]}" \
  --tasks perplexity --contexts 1024 --examples "$examples"
echo "measure: took $(( $(date +%s) - t0 )) s" >&2
