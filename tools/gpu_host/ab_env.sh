#!/usr/bin/env bash
# Interleaved A/B of bench_ops over an environment switch, in one visit and one binary: PASSES passes, each running
# bench_ops once per value of VAR (in the order given; "default" leaves VAR unset), every run with its own program
# cache, appending to CSV with the commit labelled "<commit>+<VAR>=<value>"; then a table of the mean time
# (fraction of copy) per decode row and value, and the first value's time over each other's.
#   VAR (required), VALUES (default "default 0"), PASSES (default 2), CSV (default $OUT/ab_<VAR>.csv),
#   TIMEOUT per run in seconds (default 150); the arguments go to bench_ops as they are (give -b and the rows).
# Sources tools/gpu_host/env.sh unless $B is set (a visit script that sourced it already).
# Example: VAR=KVCOMP_CL_RAGGED_WARPS bash tools/gpu_host/ab_env.sh -b "$OCL_GPU" --set none --prefill none \
#   --sweeps lowrank --contexts 32K,128K --batches 16 --cold --sweep-rows 'lowrank_balanced_'
set -uo pipefail
[ -n "${VAR:-}" ] || { echo "ab_env.sh: set VAR to the environment variable to switch" >&2; exit 2; }
if [ -z "${B:-}" ]; then source "$(dirname "$0")/env.sh" 2>/dev/null; fi
values=${VALUES:-default 0}
csv=${CSV:-${OUT:-.}/ab_${VAR}.csv}
label=${commit:-unknown}
t0=$(date +%s)
for pass in $(seq "${PASSES:-2}"); do
  for v in $values; do
    if [ "$v" = default ]; then unset "$VAR"; else export "$VAR=$v"; fi
    KVCOMP_CL_CACHE_DIR=/tmp/ab_cache_$v timeout "${TIMEOUT:-150}" "$B/bench_ops" "$@" --commit "${label:0:7}+$VAR=$v" \
      --csv "$csv" > /dev/null 2>&1
    echo "pass $pass $VAR=$v rc=$? $(( $(date +%s) - t0 )) s"
  done
  unset "$VAR"
done
python3 - "$csv" "$VAR" $values <<'PY'
import collections, csv, sys
path, var, values = sys.argv[1], sys.argv[2], sys.argv[3:]
t = collections.defaultdict(list)
for r in csv.DictReader(open(path)):
    if r["op"] == "copy_bw" or not r["time_ms"] or f"+{var}=" not in r["commit"]:
        continue
    v = r["commit"].split(f"+{var}=")[1].split("+")[0]
    t[(r["op"], int(r["batch"]), int(r["context"]), v)].append((float(r["time_ms"]), float(r["fraction_of_copy"] or 0)))
for k in sorted({k[:3] for k in t}):
    runs = [t.get(k + (v,), []) for v in values]
    means = [sum(x for x, _ in r) / len(r) if r else None for r in runs]
    cells = [f"{v}: {m:.4f} ({sum(y for _, y in r) / len(r):.2f})" if m else f"{v}: -" for v, m, r in zip(values, means, runs)]
    ratios = [f"{means[0] / m:.2f}x" if means[0] and m else "-" for m in means[1:]]
    print(f"{k[0]:<34s} {k[1]:>3d} x {k[2]:>6d}  " + "  ".join(cells) + "  " + " ".join(ratios))
PY
