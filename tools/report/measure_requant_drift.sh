#!/usr/bin/env bash
# Measures what zipcache's recompress=all (re-quantize every token at each flush, the authors' code)
# costs against the default recompress=append (old blocks never touched) on the default model, into
# docs/data/requant_drift.csv, with the run's output in docs/data/requant_drift.log:
#   - perplexity (the second half of each window is teacher-forced through the decode path, every
#     scored token reads the method's cache): context 1024 (512 forced tokens: 5 recompressions at
#     block 100, 16 at block 32) and 2048 (1024 forced: 10 recompressions at block 100);
#   - at ratio 0.4 (default; saliency re-ranks old tokens) and ratio 0 (every token at 2 bits: old
#     tokens move only through regrouping and CST's changing vscale). ratio 0 with block 32 is the
#     control where both modes group the same tokens (prompts of 512 and 1024 are whole blocks), so
#     only the re-rounding differs;
#   - the direct drift tables of the unit tests requant.drift_on_the_default_models_kv (the default
#     model's real K/V of 800 tokens of heldout.txt, every layer, block 100, ratio 0 and 0.4) and
#     requant_ops_on.drift_* (synthetic K/V, random salient sets): relative RMS error of the
#     dequantized cache vs the exact K/V after m = 1..6 recompressions in both modes, emulated with
#     the ops the engine uses (kv_quantize / kv_dequantize on the CPU backend), appended to the log.
# greedy_agreement is not used: on the default model both modes leave the uncompressed run's greedy
# path within the first few tokens (prefix agreement ~0.005 of 500), before any recompression.
# About 25 minutes on PoCL with 2 cores. Run from the repository root after building kvcomp and
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
both() { for mode in append all; do echo --methods "zipcache:${1}recompress=$mode"; done; }
t0=$(date +%s)
# shellcheck disable=SC2046
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$out/requant_drift.csv" \
  $(both "") $(both "ratio=0,") --tasks perplexity --contexts 1024,2048 --examples "$examples"
# shellcheck disable=SC2046
"$bin/kvcomp" sweep -m $model -b "$backend" --commit "$commit" --csv "$out/requant_drift.csv" \
  $(both "block=32,") $(both "block=32,ratio=0,") --tasks perplexity --contexts 1024 --examples "$examples"
echo "== direct drift (tests/unit/test_quant_requant.cpp, cpu backend)"
KVCOMP_TEST_BACKENDS=cpu "${UNIT_TESTS:-build/tests/kvcomp_unit_tests}" \
  --gtest_filter='requant.drift_on_the_default_models_kv:requant_backends/requant_ops_on.drift*' | grep '\[ requant \]'
echo "measure: took $(( $(date +%s) - t0 )) s"
