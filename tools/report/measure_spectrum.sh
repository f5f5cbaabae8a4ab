#!/usr/bin/env bash
# Measures the singular-value spectra of the default model's KV heads into docs/data/spectrum_default_model.csv:
# one calibration per method at removal rate 0 (zack on the default corpus MODEL/heldout.txt, fdc on random token
# ids, palu from the weights: kvcomp calibrate's defaults, as tools/report/measure_lowrank_methods.sh), then
# tools/report/calibration_spectrum.py's per-head statistics. Run from the repository root after building; then
# `python3 tools/report/make_results.py`.
#   BACKEND (default cpu), BIN (default build/bin), OUT (default docs/data), CALIB (default build/calib_spectrum),
#   COMMIT (default git HEAD)
set -euo pipefail
bin=${BIN:-build/bin}
backend=${BACKEND:-cpu}
out=${OUT:-docs/data}
calib=${CALIB:-build/calib_spectrum}
commit=${COMMIT:-$(git rev-parse --short=12 HEAD)}
csv="$out/spectrum_default_model.csv"
mkdir -p "$out" "$calib"
rm -f "$csv"
files=()
for m in zack fdc palu; do
  "$bin/kvcomp" calibrate -m tools/model/default --method "$m" -b "$backend" --removal-rate 0 \
    --out "$calib/$m.safetensors" | tail -1
  files+=("$calib/$m.safetensors")
done
python3 tools/report/calibration_spectrum.py "$csv" "$commit" "$backend" "${files[@]}"
echo "wrote $csv ($(($(wc -l < "$csv") - 1)) heads)"
