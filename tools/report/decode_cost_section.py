"""Where the decodes' time goes (docs/RESULTS.md): a fixed cost per call and a streaming rate, and what did not move
them. From, all on one NVIDIA H200 (docs/data/gpu_visits_2026-11-28.log):
  bench_ops_fixed_cost_h200.csv    fp16 and balanced ragged rows at 1K-128K, cuda:0 and opencl:1, --cold, visit 134
  ncu_decode_fixed_cost_h200.csv   Nsight Compute per kernel (decode and merge) at six points, cuda:0, visit 134
  bench_ops_page_sizes_h200.csv    the same rows at pages of 16, 32, 64 and 128 tokens, visit 135
  bench_ops_page_order_h200.csv    the pool's pages shuffled (the default) against each request's contiguous, visit 138
  cl_residency_h200.txt            bench/cl_residency on NVIDIA's OpenCL driver, visit 137
  bench_ops_ocl_worker_scales_warps_h200.csv  the OpenCL ragged decodes cut for 4, 5, 6 and 8 (auto) x the compute
                                   units, one pass, visit 139
  bench_ops_ocl_worker_scales4_h200.csv       8 (auto) against 4 x, two passes, visit 140
  bench_ops_ocl_worker_scales_batches_h200.csv  8 against 4 x at batches 1, 2, 4, 8 and 16, one pass, visit 141
The fit: time = fixed + context / rate over the contexts from 16K (least squares), with rate in tokens per ms; the
streaming rate is the bytes per token times that rate over the copy bandwidth of the same run.
"""
import collections
import math
import os
import re

from ocl_softmax_section import row_label
from results_data import read_dicts

FIT_FROM = 16384  # contexts from here on enter the fit (below, launches and ramps dominate)
TARGET = 0.83     # issue 5's fraction of copy (time <= 1.2 x bytes / copy bandwidth)
def _label(op):
    """ocl_softmax_section's (cache, profile) label of a row, its page-size, page-order and worker-scale
    suffixes (bench_ops --page-sizes, --page-order, --worker-scales) left out."""
    base = re.sub(r"_(pg\d+|seq|x\d+)(?=_|$)", "", op)
    label = row_label(base)
    return " ".join(part for part in label if part) if label else base


def _ops_rows(data_dir, name):
    return [r for r in read_dicts(os.path.join(data_dir, name)) if r["op"] != "copy_bw" and r["time_ms"]]


def _fit(points):
    """Least squares of time (ms) on context: (intercept ms, slope ms per token)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def _fixed_cost_table(rows):
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["op"], r["backend"], int(r["batch"]))].append(r)
    out = ["| rows | backend | batch | streaming rate (of copy) | fixed cost µs | at 32K: of copy | fixed cost for "
           f"{TARGET} at 32K, µs |", "|---|---|---|---|---|---|---|"]
    summary = {}
    for (op, be, batch), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        pts = [(int(r["context"]), float(r["time_ms"])) for r in rs if int(r["context"]) >= FIT_FROM]
        if len(pts) < 2:
            continue
        fixed, slope = _fit(pts)
        copy = sum(float(r["copy_gbps"]) for r in rs) / len(rs)  # GB/s
        per_token = sum(float(r["gbps"]) * float(r["time_ms"]) * 1e6 / int(r["context"]) for r in rs) / len(rs)
        rate = per_token / (slope * 1e-3) / (copy * 1e9)
        at32 = [float(r["fraction_of_copy"]) for r in rs if int(r["context"]) == 32768]
        allowed = (per_token * 32768 / (TARGET * copy * 1e9) - slope * 1e-3 * 32768) * 1e6
        t32 = [float(r["time_ms"]) for r in rs if int(r["context"]) == 32768]
        summary[(op, be, batch)] = (rate, fixed * 1e3, fixed / t32[0] if t32 else None)
        out.append(f"| {_label(op)} | {be} | {batch} | {rate:.2f} | {fixed * 1e3:.1f} | "
                   + (f"{at32[0]:.2f}" if at32 else "–") + " | "
                   + (f"{allowed:.1f}" if allowed > 0 else "none: the rate is below it") + " |")
    return out + [""], summary


def _ncu_table(rows):
    vals = collections.defaultdict(list)
    names = {}
    for r in rows:
        kind = "merge" if "merge" in r["kernel"] else "decode"
        key = (r["point"], r["rows"], kind)
        names[key] = r["kernel"].split("(")[0].replace("void ", "").replace("unnamed>::", "")
        vals[key + (r["metric"],)].append(float(r["value"]))

    def mean(key, metric):
        v = vals.get(key + (metric,))
        return sum(v) / len(v) if v else None

    out = ["| point | rows | kernel | duration µs | grid | registers | SM active, mean / max of elapsed | "
           "DRAM read MB |", "|---|---|---|---|---|---|---|---|"]
    order = {"16x1K": 0, "16x32K": 1, "1x128K": 2}
    for key in sorted(names, key=lambda k: (order.get(k[0], 9), k[1], k[2] != "decode")):
        el = mean(key, "gpc__cycles_elapsed.max")
        out.append(f"| {key[0]} | {_label('decode_' + key[1])} | `{names[key]}` | "
                   f"{mean(key, 'gpu__time_duration.sum') / 1e3:.1f} | {mean(key, 'launch__grid_size'):.0f} | "
                   f"{mean(key, 'launch__registers_per_thread'):.0f} | "
                   f"{mean(key, 'sm__cycles_active.avg') / el:.2f} / {mean(key, 'sm__cycles_active.max') / el:.2f} | "
                   f"{mean(key, 'dram__bytes_read.sum') / 1e6:.1f} |")
    return out + [""]


def _variants_table(rows, variant_of, variants, heads):
    """Rows (backend, rows, batch, context) x variants: ms (of copy), then the largest time over the smallest."""
    runs = collections.defaultdict(list)  # several passes of a cell: their mean
    for r in rows:
        v = variant_of(r["op"])
        runs[(r["backend"], _label(r["op"]), int(r["batch"]), int(r["context"]), v)].append(
            (float(r["time_ms"]), float(r["fraction_of_copy"])))
    cells = {k: (sum(t for t, _ in v) / len(v), sum(f for _, f in v) / len(v)) for k, v in runs.items()}
    keys = sorted({k[:4] for k in cells}, key=lambda k: (k[0] != "cuda:0", k[1], k[2], k[3]))
    out = ["| backend | rows | batch | context | " + " | ".join(heads) + " | slowest / fastest |",
           "|---|---|---|---|" + "---|" * (len(heads) + 1)]
    spread = []
    for k in keys:
        got = [cells.get(k + (v,)) for v in variants]
        times = [g[0] for g in got if g]
        spread.append(max(times) / min(times))
        out.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | "
                   + " | ".join(f"{g[0]:.4f} ({g[1]:.2f})" if g else "–" for g in got)
                   + f" | {max(times) / min(times):.3f}× |")
    return out + [""], spread


def _scales_by_batch(data_dir, scale_of):
    """8 (auto until then) against 4 x the compute units at batches 1-16 (visit 141), and the rule taken from it."""
    name = "bench_ops_ocl_worker_scales_batches_h200.csv"
    rows = _ops_rows(data_dir, name)
    if not rows:
        return []
    table, _ = _variants_table(rows, scale_of, [8, 4], ["8 × CUs ms (of copy)", "4 × CUs ms (of copy)"])
    ratio = collections.defaultdict(dict)
    for r in rows:
        ratio[(r["op"].replace("_x4", ""), int(r["batch"]), r["context"])][scale_of(r["op"])] = float(r["time_ms"])
    by_batch = collections.defaultdict(list)
    for (_, b, _), v in ratio.items():
        by_batch[b].append(math.log(v[4] / v[8]))
    geo = {b: math.exp(sum(v) / len(v)) for b, v in by_batch.items()}
    return [f"### The OpenCL ragged decodes cut for 4 × and 8 × the compute units at batches 1-16 (H200, NVIDIA's "
            "driver, visit 141)", "",
            "`bench_ops --cold --sweeps lowrank --worker-scales auto,4 --batches 1,2,4,8,16 --contexts 32K,128K` on "
            f"{rows[0]['device']} (opencl:1, one pass, `docs/data/{name}`, binary `{rows[0]['commit'].split('+')[0]}`, "
            "whose auto was 8 × everywhere). 4 × over 8 ×, geometric mean over the rows of a batch: "
            + ", ".join(f"batch {b}: {geo[b]:.2f}×" for b in sorted(geo))
            + ". So since this visit `workers=auto` on an OpenCL GPU cuts the ragged decodes (f16 and q4 pages) for "
            "4 × the compute units where the op's (request, KV head) rows are at most half the compute units (batch "
            "≤ 8 at 8 KV heads on 132), and for 8 × otherwise; Palu keeps 8 ×. A row then has 8 × CUs / rows ≥ 16 "
            "tasks at 8 ×, each paying its start and its partial, and its merge reads them all.", "", *table]


def _residency(path):
    """(work-group size, [(local KiB, min, max)]) blocks of cl_residency's output, and its device line."""
    blocks, device = [], ""
    for line in open(path):
        if line.startswith("device:"):
            device = line.split("device: ")[1].split(";")[0].strip()
            wg = int(re.search(r"work-groups of (\d+)", line).group(1))
            blocks.append((wg, []))
        m = re.match(r"\s*(\d+) \| (\d+) / (\d+) \|", line)
        if m and blocks:
            blocks[-1][1].append(tuple(int(x) for x in m.groups()))
    return device, blocks


def decode_cost_section(data_dir):
    out = ["### Where the decodes' time goes: a fixed cost per call and a streaming rate (H200, visit 134)", ""]
    fixed_rows = _ops_rows(data_dir, "bench_ops_fixed_cost_h200.csv")
    table, fits = _fixed_cost_table(fixed_rows)
    cu = [v for k, v in fits.items() if k[1] == "cuda:0" and k[2] == 16 and "lowrank" in k[0]]
    cl = [v for k, v in fits.items() if k[1] != "cuda:0" and k[2] == 16 and "lowrank" in k[0]]
    fp = {k[1]: v for k, v in fits.items() if k[0] == "decode_fp16" and k[2] == 16}

    def span(vals, i, f):
        return f"{min(v[i] for v in vals):{f}}-{max(v[i] for v in vals):{f}}"

    ncu = read_dicts(os.path.join(data_dir, "ncu_decode_fixed_cost_h200.csv"))
    merges = [float(r["value"]) / 1e3 for r in ncu if "merge" in r["kernel"] and r["metric"] == "gpu__time_duration.sum"]
    merge_lo, merge_hi = min(merges), max(merges)
    commit = fixed_rows[0]["commit"].split("+")[0][:7]
    out.append(
        f"`bench_ops --cold --sweeps fp16,lowrank --sweep-rows 'fp16|lowrank_balanced' --contexts 1K,4K,16K,32K,64K,128K` "
        f"at `{commit}` on {fixed_rows[0]['device']}, opencl:1 (NVIDIA's driver) then cuda:0, one pass each "
        "(`docs/data/bench_ops_fixed_cost_h200.csv`; 32 query / 8 KV heads, the p50 / p70 widths of \"Decode attention "
        "on uneven ranks\", pages of 16). Each row's times from 16K on are fitted as time = fixed cost + context / "
        "rate (least squares); the streaming rate is the bytes a token adds over the copy bandwidth of the same run, "
        "i.e. the fraction of copy the decode would reach at an infinite context. The last column is the fixed cost "
        f"at which the row's rate would give {TARGET} of copy at 32K (issue 5's target). At batch 16 the ragged rows "
        f"stream at {span(cu, 0, '.2f')} of copy on CUDA and {span(cl, 0, '.2f')} on OpenCL, with fixed costs of "
        f"{span(cu, 1, '.0f')} µs and {span(cl, 1, '.0f')} µs; the fp16 decode streams at "
        + ", ".join(f"{v[0]:.2f} ({be})" for be, v in sorted(fp.items()))
        + " with " + ", ".join(f"{v[1]:.0f} µs ({be})" for be, v in sorted(fp.items()))
        + ". Where a ragged row misses the 32K target it does so on both counts: its rate alone is near it, and the fixed "
        f"cost is {min(v[2] for v in cu + cl):.2f}-{max(v[2] for v in cu + cl):.2f} of their time at 16 × 32K. Of "
        f"that, the merge kernel takes {merge_lo:.0f}-{merge_hi:.0f} µs timed alone under Nsight Compute (below); "
        "the rest would be the decode's start (task, q and page-table loads before the first copy lands) and its "
        "last wave, which the profiler's SM activity shows as idle SM time (not measured apart).")
    out += ["", *table]
    out.append(
        "Nsight Compute on cuda:0 in the same visit (`docs/data/ncu_decode_fixed_cost_h200.csv`; `ncu --metrics` over "
        "`bench_ops --reps 2 --warmup 0`, mean of the two runs): each kernel alone at the profiler's locked clocks, so "
        "durations are longer than the table above and the merge does not overlap the decode as its dependent "
        "launch does. The SM activity columns are the mean and the largest SM's active cycles over the kernel's "
        "elapsed cycles: what the start and the last wave leave idle.")
    out += ["", *_ncu_table(ncu)]

    sizes = _ops_rows(data_dir, "bench_ops_page_sizes_h200.csv")
    size_of = lambda op: int(re.search(r"_pg(\d+)", op).group(1)) if "_pg" in op else 16  # noqa: E731
    table, spread = _variants_table(sizes, size_of, [16, 32, 64, 128], [f"page {n} ms (of copy)" for n in
                                                                          (16, 32, 64, 128)])
    out += ["### The decodes at other page sizes (H200, cuda:0 and NVIDIA's OpenCL driver, visit 135)", "",
            "`bench_ops --cold --page-sizes 16,32,64,128 --sweeps fp16,lowrank --sweep-rows 'fp16|lowrank_balanced' "
            f"--contexts 32K,128K` on {sizes[0]['device']}, one pass per backend (`docs/data/bench_ops_page_sizes_h200.csv`; "
            f"kernels of `{sizes[0]['commit'].split('+')[0][:7]}`'s tree, `06eadbd` adding the option). A ragged head's "
            "part of a page is page_size × width × 2 bytes (512 B for a 16-wide head in pages of 16, 4 KiB for fp16's "
            "128); larger pages give the copies longer contiguous runs. They do not change the time: the slowest "
            f"page size over the fastest is {min(spread):.3f}-{max(spread):.3f}× per row.", "", *table]

    order = _ops_rows(data_dir, "bench_ops_page_order_h200.csv")
    table, spread = _variants_table(order, lambda op: "_seq" in op, [False, True],
                                    ["shuffled pages ms (of copy)", "contiguous pages ms (of copy)"])
    fp16 = {(r["backend"], "_seq" in r["op"]): float(r["time_ms"]) for r in order
            if r["op"].startswith("decode_fp16") and r["batch"] == "16" and r["context"] == "131072"}
    gap = {seq: fp16[(be, seq)] / fp16[("cuda:0", seq)] for be, seq in fp16 if be != "cuda:0"}
    out += ["### The decodes with each request's pages contiguous (H200, cuda:0 and NVIDIA's OpenCL driver, visit 138)",
            "", "`bench_ops --cold --page-order shuffled,sequential --sweeps fp16,lowrank --sweep-rows "
            f"'fp16|lowrank_balanced' --contexts 32K,128K` on {order[0]['device']}, one pass per backend "
            "(`docs/data/bench_ops_page_order_h200.csv`): the benchmark's page tables hand each request pool pages in a "
            "random order, as an engine's pages end up after many requests; `sequential` gives every request contiguous "
            "pages. Locality (DRAM rows, address translation) would show here; the slower order over the faster is "
            f"{min(spread):.3f}-{max(spread):.3f}× per row, and OpenCL's fp16 decode at 16 × 128K takes "
            f"{gap[False]:.2f}× CUDA's time with shuffled pages and {gap[True]:.2f}× with contiguous ones.", "", *table]

    scales = _ops_rows(data_dir, "bench_ops_ocl_worker_scales_warps_h200.csv")

    def tasks_at(backend):
        found = [(r["op"], re.search(r"sched=([a-z]+/\d+),tasks=(\d+)", r["shape"]).groups()) for r in fixed_rows
                 if r["backend"] == backend and "lowrank" in r["op"] and r["batch"] == "16" and r["context"] == "32768"]
        return " and ".join(f"{t} (workers {w.split('/')[1]})" for _, (w, t) in sorted(found))
    scale_of = lambda op: int(re.search(r"_x(\d+)_", op).group(1)) if "_x" in op else 8  # noqa: E731
    table, spread = _variants_table(scales, scale_of, [8, 4, 5, 6],
                                    [f"{s} × CUs ms (of copy)" for s in ("8 (auto)", "4", "5", "6")])
    best = collections.Counter()
    cells = collections.defaultdict(dict)
    for r in scales:
        cells[(_label(r["op"]), r["batch"], r["context"])][scale_of(r["op"])] = float(r["time_ms"])
    for c in cells.values():
        best[min(c, key=c.get)] += 1
    out += ["### The OpenCL ragged decodes cut for fewer workers (H200, NVIDIA's driver, visit 139)", "",
            "`bench_ops --cold --sweeps lowrank --worker-scales auto,4,5,6 --contexts 32K,128K` on "
            f"{scales[0]['device']} (opencl:1, one pass, `docs/data/bench_ops_ocl_worker_scales_warps_h200.csv`): "
            "OpenCL's `workers=auto` cuts the balanced schedule for 8 × the compute units (measured with the "
            "work-group kernels, before the per-warp ones), CUDA's `auto` for its resident blocks: at 16 × 32K in "
            f"visit 134 that was {tasks_at('opencl:1')} tasks on OpenCL against {tasks_at('cuda:0')} on CUDA (p50, "
            "p70). The per-warp kernels keep 5 (`kvc_adr_warps`) and 4 (`kvc_adr_q4_warps`) "
            "work-groups per SM by their registers. Fastest scale per row: "
            + ", ".join(f"{'8 (auto)' if k == 8 else k} × in {n}" for k, n in sorted(best.items()))
            + f" of {len(cells)}; no scale is fastest everywhere (the slowest over the fastest is "
            f"{min(spread):.2f}-{max(spread):.2f}× per row).", "", *table]
    ab = _ops_rows(data_dir, "bench_ops_ocl_worker_scales4_h200.csv")
    table, _ = _variants_table(ab, scale_of, [8, 4], ["8 (auto) × CUs ms (of copy)", "4 × CUs ms (of copy)"])
    ratio = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in ab:
        ratio[(r["op"].replace("_x4", ""), r["batch"], r["context"])][scale_of(r["op"])].append(float(r["time_ms"]))

    pass_spread = max(100 * (max(t) / min(t) - 1) for v in ratio.values() for t in v.values())

    def geo(batch):
        logs = [math.log((sum(v[4]) / len(v[4])) / (sum(v[8]) / len(v[8]))) for k, v in ratio.items() if k[1] == batch]
        return math.exp(sum(logs) / len(logs))
    out += [f"Two more passes of 8 × against 4 × in the next visit (`docs/data/bench_ops_ocl_worker_scales4_h200.csv`, "
            f"mean; the two passes' times of a cell differ by at most {pass_spread:.1f} %): 4 × takes "
            f"{geo('1'):.2f}× auto's time at batch 1 and {geo('16'):.2f}× at batch 16 (geometric means over the rows). "
            "Likely causes, not measured apart: fewer workers mean fewer tasks and partials, and a batch-1 row's "
            "merge (one work-group per query head) reads every partial of the row; at 16 × 128K the finer cut "
            "balances better. `auto` stayed at 8 × then: a rule by "
            "batch (or by rows per compute unit) needed the batches between 1 and 16 measured (below).",
            "", *table]
    out += _scales_by_batch(data_dir, scale_of)
    device, blocks = _residency(os.path.join(data_dir, "cl_residency_h200.txt"))
    held = max(kib * lo for wg, b in blocks for kib, lo, _ in b if wg == 128 and kib >= 24)
    out += ["### Work-groups per SM on NVIDIA's OpenCL driver, by local memory (H200, visit 137)", "",
            f"`bench/cl_residency` on {device} (`docs/data/cl_residency_h200.txt`): 16 work-groups per compute unit "
            "each allocate and touch the given local memory, read the SM id and the global timer by inline PTX and "
            "spin for 50 µs; per SM, the most work-groups whose intervals overlap is the residency (min / max over "
            "the 132 SMs; jitter in starting times lowers the minimum where many fit). The kernel needs few "
            "registers, so only local memory and the threads limit it. The driver caps a work-group at "
            "CL_DEVICE_LOCAL_MEM_SIZE (48 KiB; CUDA kernels may opt into 227 KiB of dynamic shared memory on sm_90), "
            f"but an SM holds at least {held} KiB of such work-groups at once. The per-warp decodes (32 KiB for "
            "`kvc_attn_decode_warps`, 36 KiB for `kvc_adr_warps`) are therefore limited by their registers (128 "
            "and 92 in `docs/data/ocl_build_log_verbose_h200.log`: 4 and 5 work-groups of 128), as CUDA's are, not "
            "by a smaller shared-memory carveout.", ""]
    sizes_kib = sorted({kib for _, b in blocks for kib, _, _ in b})
    out += ["| local KiB | " + " | ".join(f"work-groups of {wg}: resident per SM (min / max)" for wg, _ in blocks) + " |",
            "|---|" + "---|" * len(blocks)]
    for kib in sizes_kib:
        cells = []
        for _, b in blocks:
            hit = [(lo, hi) for k, lo, hi in b if k == kib]
            cells.append(f"{hit[0][0]} / {hit[0][1]}" if hit else "–")
        out.append(f"| {kib} | " + " | ".join(cells) + " |")
    return out + [""]
