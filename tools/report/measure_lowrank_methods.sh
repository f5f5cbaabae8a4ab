#!/usr/bin/env bash
# Measures the low-rank KV methods (zack, fdc, palu) on the default model into
# docs/data/eval_lowrank_methods.csv: line retrieval at 1K and 2K tokens and perplexity at 1K, at
# overall KV compressions p = 0.1 .. 0.7 (ranks re-chosen at load from one full calibration file per
# method), each point next to the uncompressed cache (none) of the same run; then prints, per
# method, the largest p that keeps >= 99 % of none's score on every task (perplexity: none / ppl).
# Calibration: zack on the default corpus (MODEL/heldout.txt), fdc on random token ids, palu from
# the weights (kvcomp calibrate defaults), written under $CALIB. The sweep resumes (rows already in
# the CSV are kept). Run from the repository root after building; then
# `python3 tools/report/make_results.py`.
#   BACKEND (default opencl:0; cpu runs the CPU reference, several times slower),
#   BIN (default build/bin), OUT (default docs/data), EXAMPLES (default 4), CALIB (default
#   build/calib_lowrank), POINTS (default 0.1,...,0.7), COMMIT (default git HEAD; the GPU host has no .git),
#   RANK_MULTIPLE (ranks rounded up to a multiple of it; default the method's 16)
set -euo pipefail
bin=${BIN:-build/bin}
backend=${BACKEND:-opencl:0}
out=${OUT:-docs/data}
examples=${EXAMPLES:-4}
calib=${CALIB:-build/calib_lowrank}
points=${POINTS:-0.1,0.2,0.3,0.4,0.5,0.6,0.7}
model=tools/model/default
commit=${COMMIT:-$(git rev-parse --short=12 HEAD)}
csv="$out/eval_lowrank_methods.csv"
mkdir -p "$out" "$calib"
t0=$(date +%s)
methods=(--methods none)
for m in zack fdc palu; do
  file="$calib/$m.safetensors"
  # r = 0: ranks re-chosen per point from the file's singular values (the file's own ranks unused).
  [ -f "$file" ] || "$bin/kvcomp" calibrate -m $model --method $m -b "$backend" --removal-rate 0 --out "$file"
  for p in ${points//,/ }; do methods+=(--methods "$m:calib=$file,compression=$p${RANK_MULTIPLE:+,rank_multiple=$RANK_MULTIPLE}"); done
done
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$csv" "${methods[@]}" \
  --tasks line_retrieval --contexts 1024,2048 --examples "$examples"
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$csv" "${methods[@]}" \
  --tasks perplexity --contexts 1024 --examples "$examples"
echo "measure: took $(( $(date +%s) - t0 )) s" >&2
python3 - "$csv" "${RANK_MULTIPLE:-}" <<'PY'
# Largest compression per method whose every (task, context) keeps >= 99 % of none's score.
import csv, re, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1])))
kept = defaultdict(dict)  # (method, p) -> {(task, context): fraction of none kept}
measured = {}
for r in rows:
    m = re.search(r"compression=([0-9.]+)", r["method_opts"])
    if r["method"] not in ("zack", "fdc", "palu") or not m or not r["baseline_value"]:
        continue
    mult = re.search(r"rank_multiple=([0-9]+)", r["method_opts"])
    if (mult.group(1) if mult else "16") != (sys.argv[2] or "16"):
        continue
    v, b = float(r["value"]), float(r["baseline_value"])
    frac = b / v if r["metric"] == "perplexity" else (v / b if b > 0 else float("nan"))
    key = (r["method"], float(m.group(1)))
    kept[key][(r["task"], r["context"])] = frac
    if r["kv_bytes"] and r["kv_bytes_baseline"]:
        measured[key] = 1 - float(r["kv_bytes"]) / float(r["kv_bytes_baseline"])
for method in ("zack", "fdc", "palu"):
    ps = sorted(p for (mm, p) in kept if mm == method)
    for p in ps:
        cells = ", ".join(f"{t}@{c} {f:.3f}" for (t, c), f in sorted(kept[(method, p)].items()))
        print(f"{method} p={p:.2f} (bytes: {measured.get((method, p), float('nan')):.3f} removed): {cells}")
    ok = [p for p in ps if all(f >= 0.99 for f in kept[(method, p)].values())]
    print(f"{method}: largest p keeping >= 99 % of none on every task: {max(ok) if ok else 'none of the points'}")
PY
