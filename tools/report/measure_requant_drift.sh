#!/usr/bin/env bash
# Measures what zipcache's recompress=all (re-quantize every token at each flush, the authors' code)
# costs against the default recompress=append (old blocks never touched) on the default model, into
# docs/data/requant_drift.csv, with the run's output in docs/data/requant_drift.log:
#   - perplexity at context 1024: the second half (512 tokens) is teacher-forced through the decode
#     path, so block 100 (the default) recompresses 5 times and block 32 16 times;
#   - greedy_agreement: 500 greedy tokens after a 128-token prompt (5 recompressions at block 100),
#     the prefix that agrees with the uncompressed cache;
#   each at ratio 0.4 (default; saliency re-ranks old tokens) and ratio 0 (every token at 2 bits:
#   only CST's changing vscale and the regrouping move old tokens);
#   - the direct drift table of the unit test requant_ops_on.drift_* (RMS error of the dequantized
#     cache vs the exact K/V after m = 1..6 recompressions, both modes; synthetic Gaussian K/V with
#     an outlier channel, random salient sets each round), appended to the log.
# About 15 minutes on PoCL with 2 cores. Run from the repository root after building kvcomp and
# kvcomp_unit_tests. The sweep resumes: points already in the CSV are skipped.
#   BACKEND (default opencl:0), BIN (default build/bin), OUT (default docs/data), EXAMPLES (default 3),
#   COMMIT (default git HEAD)
set -euo pipefail
bin=${BIN:-build/bin}
backend=${BACKEND:-opencl:0}
out=${OUT:-docs/data}
examples=${EXAMPLES:-3}
model=tools/model/default
commit=${COMMIT:-$(git rev-parse --short=12 HEAD)}
mkdir -p "$out"
log="$out/requant_drift.log"
exec > >(tee -a "$log") 2>&1
echo "== measure_requant_drift.sh at $commit on $backend, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
methods=()
for opts in "" "ratio=0," "block=32,"; do
  for mode in append all; do methods+=(--methods "zipcache:${opts}recompress=$mode"); done
done
t0=$(date +%s)
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$out/requant_drift.csv" "${methods[@]}" \
  --tasks perplexity --contexts 1024 --examples "$examples"
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$out/requant_drift.csv" \
  --methods "zipcache:recompress=append" --methods "zipcache:recompress=all" \
  --methods "zipcache:ratio=0,recompress=append" --methods "zipcache:ratio=0,recompress=all" \
  --tasks greedy_agreement --contexts 128 --gen 500 --examples "$examples"
echo "== direct drift (tests/unit/test_quant_requant.cpp, cpu backend)"
KVCOMP_TEST_BACKENDS=cpu "${UNIT_TESTS:-build/tests/kvcomp_unit_tests}" \
  --gtest_filter='requant_backends/requant_ops_on.drift*' | grep '\[ requant \]'
echo "measure: took $(( $(date +%s) - t0 )) s"
