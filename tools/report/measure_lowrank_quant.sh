#!/usr/bin/env bash
# Measures kivi / zipcache storing the reduced cache of zack / fdc (options lowrank, calib, rank;
# lib/engine/kv_method_lowrank_quant.h) on the default model, into docs/data/eval_lowrank_quant.csv:
# line retrieval and perplexity at 1K next to none, and in the same sweep the same quantizers on the
# full cache and zack / fdc with kv_bits=4 (the ranks-adaptive 4-bit pages) at full rank. Every head at
# rank 64 (= head_dim: the basis rotates, nothing is dropped) or 48 (25 % fewer dims). KIVI at 4 bits
# with groups of 16 (48 is not a multiple of 32), 32 fp16 residual tokens; ZipCache at its defaults.
# Calibrations as measure_lowrank_methods.sh (zack on the default corpus, fdc on random token ids, r = 0).
# Run from the repository root after building.
#   BACKEND (default cpu), BIN (default build/bin), OUT (default docs/data), EXAMPLES (default 8;
#   perplexity uses half), CALIB (default build/calib_lowrank), COMMIT (default git HEAD)
set -euo pipefail
source "$(dirname "$0")/lowrank_measure_setup.sh"
csv="$out/eval_lowrank_quant.csv"
t0=$(date +%s)
kivi="kivi:bits=4,group=16,residual=32"
methods=(--methods none --methods "$kivi" --methods zipcache)
for m in zack fdc; do
  file=$(full_calibration $m)
  for r in 64 48; do methods+=(--methods "$kivi,lowrank=$m,calib=$file,rank=$r"); done
  methods+=(--methods "zipcache:lowrank=$m,calib=$file,rank=48" --methods "$m:calib=$file,kv_bits=4")
done
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$csv" "${methods[@]}" \
  --tasks line_retrieval --contexts 1024 --examples "$examples"
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$csv" "${methods[@]}" \
  --tasks perplexity --contexts 1024 --examples $(( (examples + 1) / 2 ))
echo "measure: took $(( $(date +%s) - t0 )) s" >&2
