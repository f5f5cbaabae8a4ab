#!/usr/bin/env bash
# Measures the quantizing KV methods (kivi, zipcache) on the default model into
# docs/data/eval_quant_methods.csv: line retrieval at 1K and 2K tokens, perplexity at 1K, the needle
# at 1K at depths 0 and 1, each point next to the uncompressed cache (none) of the same run (rows of
# an earlier, larger grid already in the CSV are kept; the sweep resumes). About 40 minutes on PoCL
# with 2 cores. Run from
# the repository root after building; then `python3 tools/report/make_results.py`.
#   BACKEND (default opencl:0), BIN (default build/bin), OUT (default docs/data), EXAMPLES (default 4),
#   METHODS (default "kivi:bits=2 kivi:bits=4 zipcache:ratio=0.2 zipcache:ratio=0.4"; none is always run),
#   COMMIT (default git HEAD; the GPU host has no .git)
set -euo pipefail
bin=${BIN:-build/bin}
backend=${BACKEND:-opencl:0}
out=${OUT:-docs/data}
examples=${EXAMPLES:-4}
model=tools/model/default
commit=${COMMIT:-$(git rev-parse --short=12 HEAD)}
mkdir -p "$out"
methods=(--methods none)
for m in ${METHODS:-kivi:bits=2 kivi:bits=4 zipcache:ratio=0.2 zipcache:ratio=0.4}; do methods+=(--methods "$m"); done
t0=$(date +%s)
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$out/eval_quant_methods.csv" "${methods[@]}" \
  --tasks line_retrieval --contexts 1024,2048 --examples "$examples"
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$out/eval_quant_methods.csv" "${methods[@]}" \
  --tasks perplexity --contexts 1024 --examples "$examples"
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$out/eval_quant_methods.csv" "${methods[@]}" \
  --tasks needle --contexts 1024 --depths 0,1 --examples "$examples"
echo "measure: took $(( $(date +%s) - t0 )) s" >&2
