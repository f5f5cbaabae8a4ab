#!/usr/bin/env bash
# Measures the default model on one backend into docs/data/ (the data of docs/RESULTS.md's
# default-model section): the accuracy sweep (none and the window baseline; line retrieval, the
# needle over depths, perplexity), the needle on a prose haystack (the format check), and the speed
# bench per method. Run from the repository root after building; then `python3
# tools/report/make_results.py`. About 18 minutes on PoCL with 2 CPU cores (sweep 993 s; examples kept small).
#   BACKEND (default opencl:0), BIN (default build/bin), OUT (default docs/data)
set -euo pipefail
bin=${BIN:-build/bin}
backend=${BACKEND:-opencl:0}
out=${OUT:-docs/data}
model=tools/model/default
commit=$(git rev-parse --short=12 HEAD)
mkdir -p "$out"
t0=$(date +%s)
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$out/eval_default_model.csv" \
  --methods none --methods window:window=128 --methods window:window=512 \
  --tasks line_retrieval,needle,perplexity --contexts 512,1024,2048 --depths 0,0.5,1 --examples 2
echo "measure: sweep took $(( $(date +%s) - t0 )) s" >&2
"$bin/kvcomp" eval -m $model -b "$backend" --commit "$commit" --csv "$out/needle_prose_default_model.csv" \
  -t needle --haystack text --contexts 1024 --depths 0,0.5,1 --examples 2
for method in none window; do
  "$bin/kvcomp" bench -m $model -b "$backend" --commit "$commit" --csv "$out/bench_default_model.csv" \
    --method $method $([ $method = window ] && echo --method-opt window=128) \
    --batches 1 --prompts 256,512,1024,2048 --gen 16 --copy-mib 256
done
echo "measure: all took $(( $(date +%s) - t0 )) s" >&2
