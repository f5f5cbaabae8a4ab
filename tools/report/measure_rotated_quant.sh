#!/usr/bin/env bash
# Measures the 2-bit quantizers on the rotated cache of zack / fdc: kivi / zipcache with lowrank=zack|fdc and
# rank = head_dim (kv_method_lowrank_quant.h), where the SVD basis only rotates each K and V head (nothing is
# dropped: the bytes are those of the quantizer alone), next to the same quantizers on the model's own basis.
# ZipCache over its salient ratio r (4 / 2 bits, blocks of 50, tail=window: the grid's smallest bytes per
# point) and KIVI-2 (groups of 32, 32 fp16 residual tokens). Line retrieval at 1K and 2K and perplexity at
# 1K on the default model, every point next to none on the same examples, into
# $OUT/eval_rotated_quant.csv. Calibrations as measure_lowrank_methods.sh (zack on the default corpus, fdc
# on random token ids, removal rate 0). Run from the repository root after building.
#   BACKEND (default cpu), BIN (default build/bin), OUT (default docs/data), EXAMPLES (default 8;
#   perplexity uses half), CALIB (default build/calib_lowrank), COMMIT (default git HEAD),
#   RATIOS (default "0 0.1 0.2 0.3 0.4")
set -euo pipefail
source "$(dirname "$0")/lowrank_measure_setup.sh"
ratios=${RATIOS:-0 0.1 0.2 0.3 0.4}
csv="$out/eval_rotated_quant.csv"
t0=$(date +%s)
hd=$(python3 -c "import json; c = json.load(open('$model/config.json')); print(c.get('head_dim') or c['hidden_size'] // c['num_attention_heads'])")
methods=(--methods none)
for base in none zack fdc; do
  lr=""
  if [ $base != none ]; then
    lr=",lowrank=$base,calib=$(full_calibration $base),rank=$hd"
  fi
  methods+=(--methods "kivi:bits=2$lr")
  for r in $ratios; do methods+=(--methods "zipcache:ratio=$r,block=50,tail=window$lr"); done
done
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$csv" "${methods[@]}" \
  --tasks line_retrieval --contexts 1024,2048 --examples "$examples"
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$csv" "${methods[@]}" \
  --tasks perplexity --contexts 1024 --examples $(( (examples + 1) / 2 ))
echo "measure: took $(( $(date +%s) - t0 )) s" >&2
