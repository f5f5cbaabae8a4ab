"""OpenCL's per-task cost after the channel-block merge, and the rule it now follows (batch 1), from
  bench_ops_ocl_task_cost_merge_h200.csv  bench_ops -b opencl:1 --task-costs 0,8K,16K, balanced ragged rows (f16 p50 /
                                          p70, q4 p70) at batches 1, 4, 16 and 32K / 128K, two passes, visit 147
  bench_ops_ocl_task_cost_rule_h200.csv   the same rows with --task-costs auto,0,16K at batches 1 and 2, two passes,
                                          visit 148 (auto: the rule of lib/opencl/attn_decode_ragged.cpp)
  bench_e2e_ocl_task_cost_h200.csv        kvcomp bench, fdc at compression 0.5, Llama-3-8B shapes with random weights,
                                          opencl:1 at 1 x 128K, task_cost=0 against auto, two interleaved runs each
(docs/data/gpu_visits_2026-11-28.log). Every number is read from those files.
"""
import collections
import math
import os

from results_data import read_dicts
from task_cost_section import decode_cells

SWEEP = "bench_ops_ocl_task_cost_merge_h200.csv"
RULE = "bench_ops_ocl_task_cost_rule_h200.csv"
E2E = "bench_e2e_ocl_task_cost_h200.csv"
SOURCES = (E2E,)


def _name(t):
    return "auto" if t < 0 else f"T = {t // 1024}K"


def _table(cells, costs, against):
    """Cells: ms (fraction of copy) [tasks] per cost, and each cost in `against` over T = 0; the geometric means of
    those ratios per batch."""
    geo = collections.defaultdict(list)
    out = ["| rows | batch | context | " + " | ".join(_name(t) for t in costs) + " | "
           + " | ".join(f"{_name(t)} / T = 0" for t in against) + " |", "|---|---|---|" + "---|" * (len(costs) + len(against))]
    for k in sorted({k[1:4] for k in cells}, key=lambda k: (k[0], k[1], k[2])):
        got = {t: cells[("opencl:1",) + k + (t,)] for t in costs}
        ratios = [got[t][0] / got[0][0] for t in against]
        for t, x in zip(against, ratios):
            geo[(t, k[1])].append(math.log(x))
        out.append(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(f"{c[0]:.4f} ({c[1]:.2f}) [{c[2]}]" for c in got.values())
                   + " | " + " | ".join(f"{x:.3f}×" for x in ratios) + " |")
    return out, {k: math.exp(sum(v) / len(v)) for k, v in geo.items()}


def _ranges(cells, t):
    """'batch B, C: lo-hi×' over the rows, per batch and context, of T = t over T = 0."""
    by = collections.defaultdict(list)
    for k, c in cells.items():
        if k[4] == t:
            by[(k[2], k[3])].append(c[0] / cells[k[:4] + (0,)][0])
    return ", ".join(f"{b} × {c // 1024}K {min(v):.2f}-{max(v):.2f}×" for (b, c), v in sorted(by.items()))


def _spread(cells):
    return max(max(c[3]) / min(c[3]) for c in cells.values())


def _e2e(data_dir, sweep):
    rows = [r for r in read_dicts(os.path.join(data_dir, E2E)) if r["metric"] == "tbt_ms"]
    if not rows:
        return []
    runs = collections.defaultdict(list)
    for r in rows:
        runs["task_cost=0" if "task_cost=0" in r["method_opts"].split(";") else "auto"].append(float(r["value"]))
    base = sum(runs["task_cost=0"]) / len(runs["task_cost=0"])
    auto = sum(runs["auto"]) / len(runs["auto"])
    spread = max(max(v) / min(v) for v in runs.values())
    gains = [1000 * (sweep[k[:4] + (0,)][0] - c[0]) for k, c in sweep.items()
             if k[2] == 1 and k[3] == 131072 and k[4] == 16384 and "f16" in k[1]]
    saved, saved_max = min(gains), max(gains)
    return [f"End to end (`kvcomp bench --gen 32`, fdc at compression 0.5 with a calibration of 8192 random tokens, "
            f"Llama-3-8B shapes with random weights, {rows[0]['backend']} at 1 × {rows[0]['context']}; `docs/data/{E2E}`, "
            f"binary `{rows[0]['commit']}`, runs interleaved): TBT "
            + ", ".join(f"{x:.3f}" for x in runs["task_cost=0"]) + f" ms with `task_cost=0` (mean {base:.3f}), "
            + ", ".join(f"{x:.3f}" for x in runs["auto"]) + f" ms with `auto` (mean {auto:.3f}): {auto / base:.3f}×, "
            f"inside the {100 * (spread - 1):.1f} % by which an option's runs differ. The kernel rows above save "
            f"{saved:.1f}-{saved_max:.1f} µs per layer at 1 × 128K, {32 * saved / 1000:.2f}-{32 * saved_max / 1000:.2f} ms "
            "over 32 layers if fdc's calibrated ranks behaved like the bench profiles; the TBT does not show it, and "
            "this run does not say why.", ""]


def task_cost_ocl_section(data_dir):
    sweep = decode_cells(read_dicts(os.path.join(data_dir, SWEEP)))
    rule = decode_cells(read_dicts(os.path.join(data_dir, RULE)))
    if not sweep or not rule:
        return []
    t1, g1 = _table(sweep, (0, 8192, 16384), (8192, 16384))
    t2, g2 = _table(rule, (-1, 0, 16384), (-1, 16384))
    summary = "; ".join(f"T = {t // 1024}K: " + " / ".join(f"{g1[(t, b)]:.3f}" for b in (1, 4, 16)) for t in (8192, 16384))
    return ["### OpenCL's per-task cost with the channel-block merge, and its rule (H200, NVIDIA's driver, visits 147-148)",
            "",
            f"`bench_ops --cold --sweeps lowrank --task-costs 0,8K,16K --batches 1,4,16 --contexts 32K,128K` on opencl:1 "
            f"(`docs/data/{SWEEP}`, two passes, mean; a cell's passes differ by at most {100 * (_spread(sweep) - 1):.1f} %), "
            "after the merge in channel blocks (the section above). Time over T = 0, geometric mean over the rows of "
            f"batch 1 / 4 / 16: {summary}; T = 16K's range per batch and context: {_ranges(sweep, 16384)}. Batch 1 "
            "gains where the search cuts fewer tasks (1 × 128K) and is unchanged where it cuts as many (1 × 32K). "
            "Cells: ms (fraction of copy) [tasks].", "", *t1, "",
            "So OpenCL GPUs now count T = 16384 where a (request, KV head) row has 16 compute units or more "
            "(`lib/opencl/attn_decode_ragged.cpp`, `decode_task_cost`: batch 1 of 8 KV heads on 132 SMs), else 0. "
            f"The rule checked at batches 1 and 2 (`docs/data/{RULE}`, `--task-costs auto,0,16K`, two passes; a cell's "
            f"passes differ by at most {100 * (_spread(rule) - 1):.1f} %): auto / T = 0 "
            + " / ".join(f"{g2[(-1, b)]:.3f}" for b in (1, 2)) + " at batch 1 / 2; T = 16K at batch 2 "
            f"{g2[(16384, 2)]:.3f} on the mean, but it gains at 32K and loses at 128K, so batch 2 keeps 0.", "", *t2, ""] \
        + _e2e(data_dir, sweep)
