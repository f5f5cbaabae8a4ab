"""Where the CUDA ragged decode's time goes block by block, and the balanced schedule's tail, from
  timeline_cuda_{b1_32K,b1_128K,b16_32K}_h200.csv.gz  KVCOMP_CUDA_TIMELINE of bench_ops (a build with the stamps,
                                        visit 150): every block of the tensor-core ragged decode and its merge,
                                        start / end ns, SM, tokens and widths; p50 then p70, 1 warm-up + 3 calls
  bench_ops_timeline_off_ab_h200.csv    the stamps compiled in but off, against the binary before them (visit 150)
  bench_ops_tail_h200.csv               bench_ops --tails 0,10,20, cuda:0 and opencl:1, two passes (visit 151)
  bench_ops_tail_rule_h200.csv          bench_ops --tails auto,0 on cuda:0 after the 32768 floor, two passes (152)
(docs/data/gpu_visits_2026-11-28.log). Every number is read from those files.
"""
import collections
import csv
import gzip
import math
import os
import re

from results_data import read_dicts
from task_cost_section import decode_cells

TIMELINES = (("b1_32K", 1, 32768), ("b1_128K", 1, 131072), ("b16_32K", 16, 32768))
OFF_AB = "bench_ops_timeline_off_ab_h200.csv"
SWEEP = "bench_ops_tail_h200.csv"
RULE = "bench_ops_tail_rule_h200.csv"
CALLS_PER_PROFILE = 4  # bench_ops --warmup 1 --reps 3: the first call of each profile is the warm-up


def _timeline(path):
    with gzip.open(path, "rt", newline="") as f:
        calls = collections.defaultdict(list)
        for r in csv.DictReader(f):
            calls[int(r["call"])].append(r)
    return calls


def _call_stats(rows, copy_gbps):
    """One call: tasks, decode span (us), slot use, bytes / span and bytes / (merge end) as fractions of copy,
    the first and last SM to go idle (us), and the fastest SM's mean block time over the slowest's."""
    dec = [r for r in rows if r["kernel"] == "decode"]
    mer = [r for r in rows if r["kernel"] == "merge"]
    t0 = min(int(r["start_ns"]) for r in dec)
    t1 = max(int(r["end_ns"]) for r in dec)
    end = max([int(r["end_ns"]) for r in mer] + [t1])
    info = [int(r["info"]) for r in dec]
    nbytes = sum((i >> 32) * (((i >> 16) & 0xFFFF) + (i & 0xFFFF)) * 2 for i in info)
    slots = collections.Counter(int(r["sm"]) for r in dec)
    per_sm = max(slots.values()) if len(dec) <= len(slots) * 4 else 4  # the kernel's resident blocks per SM
    busy = sum(int(r["end_ns"]) - int(r["start_ns"]) for r in dec)
    by_sm = collections.defaultdict(list)
    for r in dec:
        by_sm[int(r["sm"])].append(int(r["end_ns"]) - int(r["start_ns"]))
    means = [sum(v) / len(v) for v in by_sm.values()]
    idle = sorted(max(int(r["end_ns"]) for r in dec if int(r["sm"]) == s) - t0 for s in by_sm)
    first_end = min(int(r["end_ns"]) for r in dec)
    first_wave = [int(r["start_ns"]) - t0 for r in dec if int(r["start_ns"]) < first_end]
    fastest = set(sorted(by_sm, key=lambda s: sum(by_sm[s]) / len(by_sm[s]))[:12])
    return {"start": max(first_wave) / 1e3, "fastest": fastest,
            "tasks": len(dec), "span": (t1 - t0) / 1e3, "use": busy / (len(slots) * per_sm * (t1 - t0)),
            "decode": nbytes / (t1 - t0) / copy_gbps, "with_merge": nbytes / (end - t0) / copy_gbps,
            "merge": (end - t1) / 1e3, "idle0": idle[0] / 1e3, "idle1": idle[-1] / 1e3,
            "sm_ratio": min(means) / max(means)}


_NUMERIC = ("tasks", "span", "use", "decode", "with_merge", "merge", "idle0", "idle1", "sm_ratio", "start")


def _timelines(data_dir):
    bench = read_dicts(os.path.join(data_dir, "bench_ops_timeline_off_ab_h200.csv"))
    copy = [float(r["copy_gbps"]) for r in bench if r["op"] == "copy_bw"]
    if not copy:
        return [], None
    copy_gbps = sum(copy) / len(copy)
    out = ["| profile | batch | context | tasks | decode span µs | slot use | decode bytes / span (of copy) | "
           "with the merge | merge after the decode µs | first / last SM idle µs | fastest SM / slowest |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios, uses, starts, merges, fast, n_calls = [], collections.defaultdict(list), [], [], collections.Counter(), 0
    for name, batch, ctx in TIMELINES:
        path = os.path.join(data_dir, f"timeline_cuda_{name}_h200.csv.gz")
        if not os.path.exists(path):
            continue
        calls = _timeline(path)
        for p, prof in enumerate(("p50", "p70")):
            timed = [c for c in calls if c // CALLS_PER_PROFILE == p and c % CALLS_PER_PROFILE]
            st = [_call_stats(calls[c], copy_gbps) for c in timed]
            m = {k: sum(s[k] for s in st) / len(st) for k in _NUMERIC}
            ratios.append(m["sm_ratio"])
            uses[batch].append(m["use"])
            starts.append(max(s["start"] for s in st))
            merges.append(m["merge"])
            for s in st:
                fast.update(s["fastest"])
                n_calls += 1
            out.append(f"| {prof} | {batch} | {ctx} | {st[0]['tasks']} | {m['span']:.1f} | {m['use']:.3f} | "
                       f"{m['decode']:.2f} | {m['with_merge']:.2f} | {m['merge']:.1f} | {m['idle0']:.1f} / "
                       f"{m['idle1']:.1f} | {m['sm_ratio']:.2f} |")
    return out, {"ratio": (min(ratios), max(ratios)), "copy": copy_gbps, "start": max(starts),
                 "merge": (min(merges), max(merges)), "uses": {b: (min(v), max(v)) for b, v in uses.items()},
                 "fast": [(sm, n) for sm, n in fast.most_common() if n >= n_calls // 2], "calls": n_calls,
                 "sms": len(collections.Counter(int(r["sm"]) for r in _timeline(path)[1] if r["kernel"] == "decode"))}


def _off_ab(data_dir):
    rows = [r for r in read_dicts(os.path.join(data_dir, OFF_AB)) if r["op"] != "copy_bw"]
    if not rows:
        return ""
    commits = []
    for r in rows:
        c = r["commit"].split("+")[0]
        if c not in commits:
            commits.append(c)
    t = collections.defaultdict(list)
    for r in rows:
        t[(r["op"], int(r["batch"]), int(r["context"]), r["commit"].split("+")[0])].append(float(r["time_ms"]))
    by_batch = collections.defaultdict(list)
    for k in {k[:3] for k in t}:
        a, b = t[k + (commits[0],)], t[k + (commits[1],)]
        by_batch[k[1]].append((sum(b) / len(b)) / (sum(a) / len(a)))
    return ("Compiled in but off (`KVCOMP_CUDA_TIMELINE` unset), the stamps took " + "; ".join(
        f"{min(v):.3f}-{max(v):.3f}× the time of `{commits[0]}` at batch {b}" for b, v in sorted(by_batch.items()))
        + f" (`docs/data/{OFF_AB}`, f16 p50 / p70 at 32K and 128K, two passes), so they are a build option "
        "(`-DKVCOMP_CUDA_TIMELINE=ON`); the default build compiles them to nothing.")


def _piece_cost(rows):
    """The schedule cost of a quarter of one task of the 1 x 32K p50 row at tail 0: context x sum(k + v + 1)
    over the KV heads / tasks / 4 (decode_schedule.h's units at token cost 1)."""
    for r in rows:
        if r["op"] == "decode_lowrank_balanced_tl0_p50" and r["batch"] == "1" and r["context"] == "32768":
            k = [int(x) for x in re.search(r"k=\[([0-9,]+)\]", r["shape"]).group(1).split(",")]
            v = [int(x) for x in re.search(r"v=\[([0-9,]+)\]", r["shape"]).group(1).split(",")]
            tasks = int(re.search(r"tasks=(\d+)", r["shape"]).group(1))
            return 32768 * sum(a + b + 1 for a, b in zip(k, v)) / tasks / 4
    return float("nan")


def _tail_table(cells, tails, label):
    out = [f"| backend | rows | batch | context | " + " | ".join(label(t) for t in tails) + " | "
           + " | ".join(f"{label(t)} / tail 0" for t in tails if t != 0) + " |",
           "|---|---|---|---|" + "---|" * (2 * len(tails) - 1)]
    geo = collections.defaultdict(list)
    for k in sorted({k[:4] for k in cells}, key=lambda k: (k[0] != "cuda:0", k[1], k[2], k[3])):
        got = {t: cells[k + (t,)] for t in tails}
        ratios = {t: got[t][0] / got[0][0] for t in tails if t != 0}
        for t, x in ratios.items():
            geo[(k[0], t, k[2])].append(math.log(x))
        out.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | "
                   + " | ".join(f"{c[0]:.4f} ({c[1]:.2f}) [{c[2]}]" for c in got.values()) + " | "
                   + " | ".join(f"{x:.3f}×" for x in ratios.values()) + " |")
    return out, {k: math.exp(sum(v) / len(v)) for k, v in geo.items()}


def tail_section(data_dir):
    table, tl = _timelines(data_dir)
    sweep_rows = read_dicts(os.path.join(data_dir, SWEEP))
    sweep = decode_cells(sweep_rows, "tl")
    rule = decode_cells(read_dicts(os.path.join(data_dir, RULE)), "tl")
    if not table or not sweep or not rule:
        return []
    t1, g1 = _tail_table(sweep, (0, 10, 20), lambda t: f"tail {t} %")
    t2, g2 = _tail_table(rule, (0, -1), lambda t: "auto" if t < 0 else f"tail {t} %")
    means = "; ".join(f"{be} tail {t} %: " + " / ".join(f"{g1[(be, t, b)]:.3f}" for b in (1, 4, 16))
                      for be in ("cuda:0", "opencl:1") for t in (10, 20))
    return ["### Where the ragged decode's time goes, block by block (CUDA, H200, visit 150)", "",
            "A build with `-DKVCOMP_CUDA_TIMELINE=ON` stamps every block of the tensor-core ragged decode and of its "
            "merge with its SM and its start and end on `%globaltimer` (`cuda_backend/block_timeline.cuh`); "
            "`KVCOMP_CUDA_TIMELINE=FILE bench_ops -b cuda --sweeps lowrank --sweep-rows lowrank_balanced_p --warmup 1 "
            "--reps 3 --cold` wrote `docs/data/timeline_cuda_*_h200.csv.gz` (the schedules of `task_cost=auto`, no "
            "tail). Mean of the three timed calls; slot use is the blocks' busy time over 4 resident blocks × the SMs "
            f"× the decode's span; fractions of the copy bandwidth of the same visit ({tl['copy']:.0f} GB/s).", "",
            *table, "",
            f"The first wave's blocks all start within {tl['start']:.1f} µs of the first, so the launch costs little; "
            f"the merge ends {tl['merge'][0]:.1f}-{tl['merge'][1]:.1f} µs after the last decode block. What is lost is "
            "the span's end: the slots are busy " + ", ".join(
                f"{lo:.2f}-{hi:.2f} of it at batch {b}" for b, (lo, hi) in sorted(tl["uses"].items()))
            + ", because the same work takes different SMs different times: the fastest SM's mean block time is "
            f"{tl['ratio'][0]:.2f}-{tl['ratio'][1]:.2f} × the slowest's, and the same SMs come first whatever their "
            "tasks: " + ", ".join(f"SM {sm} ({n})" for sm, n in tl["fast"]) + f" are among the 12 fastest in that many "
            f"of the {tl['calls']} timed calls of all shapes, where chance would give {tl['calls'] * 12 / tl['sms']:.1f}. "
            "A static cut of equal costs cannot see that; tasks handed out in list order to the "
            "SMs that free first can, if the last ones are small. "
            + _off_ab(data_dir), "",
            "### The balanced schedule's tail (H200, cuda:0 and NVIDIA's OpenCL driver, visits 151-152)", "",
            "`decode_schedule_options::tail_percent` (method option `tail=auto|N`, `bench_ops --tails`) cuts the last "
            "N % of each (request, KV head)'s tokens into pieces of a quarter chunk listed after every full chunk. "
            f"`bench_ops --cold --tails 0,10,20` (`docs/data/{SWEEP}`, two passes alternating the backends, mean; "
            "task_cost and workers `auto`): geometric means over the rows of batch 1 / 4 / 16: " + means
            + ". On CUDA 10 % gains wherever the pieces are long and loses at 1 × 32K, where a piece of the p50 row "
            f"costs {_piece_cost(sweep_rows):.0f} in the schedule's units (a quarter of one of its tasks); OpenCL's "
            "rows move both ways. Cells: ms (fraction of copy) [tasks].", "", *t1, "",
            "So a piece must cost at least 32768 (`kMinTailPieceCost`, host/lowrank/decode_schedule.cpp; rows whose "
            "pieces would cost less keep their plain cut), and CUDA's `tail=auto` is 10 % for the ragged decodes of f16 "
            "pages (`backend::decode_tail_percent`; q4 pages not measured, 0; OpenCL 0). Checked after the floor "
            f"(`docs/data/{RULE}`, cuda:0, `--tails auto,0`, two passes): auto / tail 0 "
            + " / ".join(f"{g2[('cuda:0', -1, b)]:.3f}" for b in (1, 4, 16))
            + " at batches 1 / 4 / 16. At 1 × 32K both run the same 527-528 tasks, so the 1.030× there is how "
            "closely two rows of one schedule repeat in this run, not the tail.", "", *t2, ""]
