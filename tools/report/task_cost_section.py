"""The balanced decode schedule's per-task cost (decode_schedule_options::task_cost, backend::decode_task_cost), from
  bench_ops_task_cost_h200.csv   bench_ops --task-costs 0,4K,16K,64K, balanced ragged rows (f16 p50 / p70, q4 p70) at
                                 batches 1, 4, 16 and 32K / 128K, cuda:0 and opencl:1, two passes, visit 142
  bench_ops_ocl_scales_task_cost_h200.csv  opencl:1, the same rows cut for 4 and 5 x the compute units with T = 0 and
                                 16K, one pass, visit 144
  bench_ops_ocl_merge_blocks_h200.csv  opencl:1, the ragged merge in 32-channel blocks of 4 task slices (bd8b6f8)
                                 against 6fbf4db's, two interleaved passes, visit 146
  bench_e2e_task_cost_h200.csv   kvcomp bench, fdc at compression 0.5, Llama-3-8B shapes with random weights: cuda:0
                                 1 x 128K task_cost=0 against auto, two runs each; opencl:1 1 x 32K workers=8 against
                                 auto, one each (visit 143)
(docs/data/gpu_visits_2026-11-28.log). Every number is read from those files.
"""
import collections
import math
import os
import re

from ocl_softmax_section import row_label
from results_data import read_dicts

OPS = "bench_ops_task_cost_h200.csv"
E2E = "bench_e2e_task_cost_h200.csv"
SOURCES = (E2E,)
COSTS = (0, 4096, 16384, 65536)


def decode_cells(rows, suffix="tk"):
    """(backend, rows label, batch, context, N) -> (mean ms, mean fraction of copy, tasks, runs) of the balanced
    rows named ..._<suffix>N_<profile> (suffix tk: the per-task cost, tl: the tail); N is -1 for the rows without
    it (the backend's auto)."""
    runs = collections.defaultdict(list)
    for r in rows:
        if r["op"] == "copy_bw" or not r["time_ms"]:
            continue
        m = re.match(rf"(decode_lowrank_(?:q4_)?balanced)(?:_{suffix}(\d+))?_(p\d+)$", r["op"])
        if not m:
            continue
        label = " ".join(p for p in row_label(f"{m.group(1)}_{m.group(3)}") if p)
        tasks = re.search(r"tasks=(\d+)", r["shape"]).group(1)
        runs[(r["backend"], label, int(r["batch"]), int(r["context"]), int(m.group(2) or -1))].append(
            (float(r["time_ms"]), float(r["fraction_of_copy"]), tasks))
    return {k: (sum(t for t, _, _ in v) / len(v), sum(f for _, f, _ in v) / len(v), v[0][2], [t for t, _, _ in v])
            for k, v in runs.items()}


def _ocl_scales(data_dir, cells):
    """opencl:1 at 4 and 5 x the compute units with T = 0 and 16K (visit 144), beside auto at T = 0 (visit 142)."""
    name = "bench_ops_ocl_scales_task_cost_h200.csv"
    rows = read_dicts(os.path.join(data_dir, name))
    got = {}
    for r in rows:
        m = re.match(r"(decode_lowrank_(?:q4_)?balanced)_x(\d)_tk(\d+)_(p\d+)$", r["op"])
        if m and r["time_ms"]:
            label = " ".join(p for p in row_label(f"{m.group(1)}_{m.group(4)}") if p)
            got[(label, int(r["batch"]), int(r["context"]), int(m.group(2)), int(m.group(3)))] = float(r["time_ms"])
    if not got:
        return []
    variants = [(4, 0), (4, 16384), (5, 0), (5, 16384)]
    geo = collections.defaultdict(list)
    out_rows = []
    for k in sorted({k[:3] for k in got}, key=lambda k: (k[0], k[1], k[2])):
        base = cells.get(("opencl:1",) + k + (0,))
        if not base:
            continue
        ts = [got.get(k + v) for v in variants]
        for v, t in zip(variants, ts):
            geo[(k[1],) + v].append(math.log(t / base[0]))
        out_rows.append(f"| {k[0]} | {k[1]} | {k[2]} | {base[0]:.4f} | "
                        + " | ".join(f"{t:.4f} ({t / base[0]:.3f}×)" for t in ts) + " |")
    g = {k: math.exp(sum(v) / len(v)) for k, v in geo.items()}
    summary = "; ".join(f"{s} × CUs, T = {t // 1024}K: " + " / ".join(f"{g[(b, s, t)]:.2f}" for b in (1, 4, 16))
                        for s, t in variants)
    # The 4 x, T = 0 cells are auto's schedule at batches 1 and 4 (at most CUs / 2 rows): how well they repeat it.
    repeat = max(abs(math.exp(x) - 1) for (b, s, t), v in geo.items() if b in (1, 4) and (s, t) == (4, 0) for x in v)
    worst = max(((got[k + (5, 16384)] / cells[("opencl:1",) + k + (0,)][0], k) for k in {k[:3] for k in got}
                 if ("opencl:1",) + k + (0,) in cells), key=lambda w: w[0])
    return [f"The OpenCL rows cut for 4 and 5 × the compute units (`kvc_adr_warps` keeps 5 work-groups per SM, "
            f"`kvc_adr_q4_warps` 4), each with T = 0 and 16K (`docs/data/{name}`, one pass, visit 144, binary "
            f"`{rows[0]['commit'].split('+')[0]}`), against `auto` at T = 0 from visit 142's runs above (another "
            "machine start; the 4 × T = 0 cells, auto's schedule at batches 1 and 4, repeat them within "
            f"{100 * repeat:.1f} %). Geometric means over the rows of batch 1 / 4 / 16: {summary}. 5 × with T = 16K "
            f"is the best on the means but takes {worst[0]:.2f}× auto's time at {worst[1][0]}, {worst[1][1]} × "
            f"{worst[1][2]}; no setting is better in every cell, and OpenCL stays at the rule and T = 0.", "",
            "| rows | batch | context | auto, T = 0 ms | " + " | ".join(f"{s} × CUs, T = {t // 1024}K ms" for s, t in variants)
            + " |", "|---|---|---|---|" + "---|" * len(variants)] + out_rows + [""]


def _ocl_merge(data_dir):
    """The OpenCL ragged merge before and after its channel blocks (visit 146): mean of the passes, per row."""
    name = "bench_ops_ocl_merge_blocks_h200.csv"
    rows = [r for r in read_dicts(os.path.join(data_dir, name)) if r["op"] != "copy_bw" and r["time_ms"]]
    if not rows:
        return []
    commits = []
    for r in rows:
        c = r["commit"].split("+")[0]
        if c not in commits:
            commits.append(c)
    base, new = commits[0], commits[-1]
    runs = collections.defaultdict(list)
    for r in rows:
        runs[(r["op"], int(r["batch"]), int(r["context"]), r["commit"].split("+")[0])].append(
            (float(r["time_ms"]), float(r["fraction_of_copy"])))
    mean = {k: (sum(t for t, _ in v) / len(v), sum(f for _, f in v) / len(v)) for k, v in runs.items()}
    spread = max(max(t for t, _ in v) / min(t for t, _ in v) for v in runs.values())
    geo = collections.defaultdict(list)
    table = [f"| rows | batch | context | `{base}` ms (of copy) | `{new}` ms (of copy) | new / old |", "|---|---|---|---|---|---|"]
    for k in sorted({k[:3] for k in mean}, key=lambda k: (k[0], k[1], k[2])):
        a, b = mean[k + (base,)], mean[k + (new,)]
        geo[k[1]].append(math.log(b[0] / a[0]))
        label = " ".join(p for p in row_label(k[0]) if p) or k[0]
        table.append(f"| {label} | {k[1]} | {k[2]} | {a[0]:.4f} ({a[1]:.2f}) | {b[0]:.4f} ({b[1]:.2f}) | "
                     f"{b[0] / a[0]:.3f}× |")
    g = {b: math.exp(sum(v) / len(v)) for b, v in geo.items()}
    return ["### The OpenCL ragged merge in channel blocks (H200, NVIDIA's driver, visit 146)", "",
            f"`bench_ops --cold --sweeps lowrank --batches 1,16 --contexts 32K,128K` on {rows[0]['device']} (opencl:1, "
            f"`docs/data/{name}`, two passes of each binary alternating; a cell's passes differ by at most "
            f"{100 * (spread - 1):.1f} %): `{new}` merges a ragged decode's partials (f16 and q4 pages, Palu) in a "
            "work-group per 32-channel block, request and query head, whose 4 slices of 32 lanes each add a quarter "
            "of the row's tasks; before, one work-group per request and query head walked all of a row's tasks per "
            "channel (32 work-groups at batch 1 for 8 KV heads of 4 query heads, rows of 66-264 tasks). New over old, "
            "geometric mean: " + ", ".join(f"batch {b}: {g[b]:.3f}×" for b in sorted(g))
            + ". Op tests of attn_decode_ragged and attn_decode_palu on the driver with a fresh cache: "
            "`docs/data/gpu_visits_2026-11-28.log`.", "", *table, ""]


def _e2e(data_dir):
    rows = [r for r in read_dicts(os.path.join(data_dir, E2E)) if r["metric"] == "tbt_ms"]
    if not rows:
        return []
    groups = collections.defaultdict(list)
    for r in rows:
        extra = [o for o in r["method_opts"].split(";") if o.startswith(("task_cost=", "workers="))]
        groups[(r["backend"], int(r["batch"]), int(r["context"]), extra[0] if extra else "auto")].append(
            float(r["value"]))
    out = ["End to end (`kvcomp bench --gen 32`, fdc at compression 0.5 with a calibration of 8192 random tokens, "
           f"Llama-3-8B shapes with random weights; `docs/data/{E2E}`, {rows[0]['device']}, binary `{rows[0]['commit']}`): "
           "TBT in ms, each run's and their mean. `task_cost=0` and `workers=8` are the schedules before this "
           "session's two changes.", "",
           "| backend | batch | prompt | option | TBT ms (runs) | mean | against the first |", "|---|---|---|---|---|---|---|"]
    first = {}
    for k in sorted(groups, key=lambda k: (k[0] != "cuda:0", k[3] == "auto")):
        v = groups[k]
        mean = sum(v) / len(v)
        first.setdefault(k[:3], mean)
        out.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + ", ".join(f"{x:.3f}" for x in v)
                   + f" | {mean:.3f} | {mean / first[k[:3]]:.3f}× |")
    spread = max(max(v) / min(v) for v in groups.values() if len(v) > 1)
    return out + ["", f"Where an option ran twice its runs differ by up to {100 * (spread - 1):.1f} %, so a difference "
                  "of that size between two options is not resolved here; an option that ran once has no spread.", ""]


def task_cost_section(data_dir):
    rows = read_dicts(os.path.join(data_dir, OPS))
    cells = decode_cells(rows)
    if not cells:
        return []
    dev = next(r["device"] for r in rows if r["op"] != "copy_bw")
    commit = next(r["commit"] for r in rows if r["op"] != "copy_bw").split("+")[0]
    geo = collections.defaultdict(list)
    spread = max(max(c[3]) / min(c[3]) for c in cells.values())
    for k, c in cells.items():
        geo[(k[0], k[2], k[4])].append(math.log(c[0] / cells[k[:4] + (0,)][0]))
    g = {k: math.exp(sum(v) / len(v)) for k, v in geo.items()}

    def summary(backend):
        return "; ".join(f"T = {t // 1024}K: " + " / ".join(f"{g[(backend, b, t)]:.2f}" for b in (1, 4, 16))
                         for t in COSTS[1:])
    worst = {be: max((c[0] / cells[k[:4] + (0,)][0], k) for k, c in cells.items() if k[0] == be and k[4] == 16384)
             for be in ("cuda:0", "opencl:1")}
    out = ["### The balanced schedule's per-task cost (H200, cuda:0 and NVIDIA's OpenCL driver, visits 142-143)", "",
           f"`bench_ops --cold --sweeps lowrank --task-costs 0,4K,16K,64K --batches 1,4,16 --contexts 32K,128K` on {dev} "
           f"(binary `{commit}`; `docs/data/{OPS}`, two passes alternating the backends, mean; the passes of a cell differ "
           f"by at most {100 * (spread - 1):.1f} %). The balanced search compares cuts of 1-4 waves of the workers by "
           "their LPT makespan; with a per-task cost T (in the schedule's units, tokens × (k_width + v_width + token "
           "cost)) each task adds T, so more waves of smaller tasks must buy their starts, partials and merge reads with "
           "a better tail. Workers are `auto` (CUDA: its resident blocks; OpenCL: 4 × CUs at batches 1 and 4 and 8 × at "
           "16, the rule of the section above). Time over T = 0, geometric mean over the rows of batch 1 / 4 / 16: "
           f"cuda:0 {summary('cuda:0')}; opencl:1 {summary('opencl:1')}. The largest loss at 16K is "
           + ", ".join(f"{w[0]:.3f}× on {be} ({w[1][1]}, {w[1][2]} × {w[1][3]})" for be, w in worst.items())
           + ". So CUDA's ragged decodes now count T = 16384 (`backend::decode_task_cost`, the engine's "
           "`task_cost=auto`); OpenCL keeps 0: there fewer tasks cost up to 15 % at 4 × 128K and 5 % at 16 × 128K, "
           "where its workers (an estimate: OpenCL has no occupancy query) and the work-groups resident per SM differ, "
           "and a finer cut covers that. Cells: ms (fraction of copy) [tasks].", "",
           "| backend | rows | batch | context | " + " | ".join(f"T = {t // 1024}K" for t in COSTS) + " | 16K / 0 |",
           "|---|---|---|---|" + "---|" * (len(COSTS) + 1)]
    for k in sorted({k[:4] for k in cells}, key=lambda k: (k[0] != "cuda:0", k[1], k[2], k[3])):
        got = [cells.get(k + (t,)) for t in COSTS]
        out.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | "
                   + " | ".join(f"{c[0]:.4f} ({c[1]:.2f}) [{c[2]}]" if c else "–" for c in got)
                   + f" | {got[2][0] / got[0][0]:.3f}× |")
    return out + [""] + _ocl_scales(data_dir, cells) + _e2e(data_dir) + _ocl_merge(data_dir)
