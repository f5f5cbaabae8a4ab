"""The balanced decode schedule's worker count and wave count (issue 5, docs/RESULTS.md), from
  bench_ops_workers_h200.csv    35f52fe (schedule for 1 x SMs, the merge before) and the binary with
                                workers=auto (backend::concurrent_workgroups), s = 1, 2, 3, one run each
  bench_ops_waves_h200.csv      the balanced search's largest wave count (bench_ops --waves 1,2,4) at auto and 2 x SMs
  bench_ops_merge_ab_h200.csv   35f52fe and the merge with 32 registers of loads in flight, interleaved, two runs
  bench_ops_merge16_ab_h200.csv  that merge and the one with 16 warps for rows of > 64 tasks, batch 1, two runs
  bench_ops_palu_workers_h200.csv  Palu's decode at auto and 1 x SMs, two runs
  bench_ops_ocl_worker_scales_h200.csv  the balanced decodes on NVIDIA's OpenCL driver at 1, 2, 3 x the compute units
  bench_ops_ocl_q4_ab_h200.csv  NVIDIA OpenCL: 5d3ebce against a27fa24 (the q4 decode with GB query heads per work-group),
                                two interleaved passes
  bench_ops_ocl_codes_ab_h200.csv  a27fa24 against 1ae921e (codes to floats by mask-or and subtract; reverted), two passes
  bench_ops_ocl_worker_scales8_h200.csv  1ae921e cut for auto (then 1 x) and 2, 4, 6, 8 x the compute units, one run
  bench_ops_ocl_auto_ab_h200.csv  1ae921e (auto = 1 x) against 0c39190 (auto = 8 x on OpenCL GPUs), two passes
  bench_ops_ragged_4blocks_ab_h200.csv  362aacb against the tensor-core ragged decodes at 4 blocks per SM (7 KiB
                                stages; commit column stage4), plain and balanced schedules, two interleaved passes
  bench_ops_ragged_stepbound_ab_h200.csv  a6ba09c against the ragged decodes with loops unrolled to the task's head
                                (commit column stepbound), two interleaved passes
  bench_ops_worker_scales4_h200.csv  those kernels cut for auto and 1-3 x SMs at batch 16, one run
  bench_ops_ragged_copy_unroll_h200.csv  aed5df9 against the staging loop unrolled (copyunroll; not kept), two passes
  bench_ops_token_cost_h200.csv  the balanced schedule's per-token cost c = 1 (rows without _tc) and 32, 64, 128,
                                two passes of one binary
  bench_ops_token_cost_ocl_h200.csv  the same at c = 1 and 64 on NVIDIA's OpenCL driver, two passes
  bench_e2e_workers_h100.csv    kvcomp bench, fdc p = 0.5 at Llama-3-8B shapes: workers=1 and workers=auto (CUDA)
  bench_e2e_workers_ocl_h200.csv  the same on NVIDIA OpenCL (auto = 8 x the compute units), batches 1 and 4 at 4K
Every number is read from those files; nothing is typed here.
"""
import os
import re

from results_data import commits_in_order, read_dicts

# kvcomp bench runs at workers=1 and auto: (file, title, what differs), kept out of the generic bench sections.
E2E_TABLES = [
    ("bench_e2e_workers_h100.csv", "### workers=auto end to end (kvcomp bench, H100)",
     "8 × 32K did not fit this card's memory."),
    ("bench_e2e_workers_ocl_h200.csv", "### workers=auto end to end on NVIDIA OpenCL (kvcomp bench, H200)",
     "On OpenCL GPUs auto is 8 × the compute units; prompts of 4K only (a 4 × 4K prefill takes 13 s through "
     "NVIDIA's OpenCL driver)."),
]
E2E_SOURCES = tuple(name for name, _, _ in E2E_TABLES)
_ROW = re.compile(r"decode_(lowrank_balanced|lowrank_plain|lowrank_q4_balanced|palu)_(?:x(\d+)_)?(?:w(\d)_)?"
                  r"(?:tc(\d+)_)?(p\d\d)$")
_PAGES = {"lowrank_balanced": "f16", "lowrank_plain": "f16, plain schedule", "lowrank_q4_balanced": "q4",
          "palu": "palu (f16 latent K)"}


def _column(r, base, base_label, auto_label):
    """The table column of a balanced decode row: its binary, worker count, wave count and token cost."""
    m = _ROW.match(r["op"])
    if not m:
        return None, None
    key = (_PAGES[m.group(1)], m.group(5), int(r["batch"]), int(r["context"]))
    if base and r["commit"].startswith(base):
        col = f"`{base}` {base_label}"
    elif m.group(4):
        col = f"c = {m.group(4)}"
    else:
        col = (f"{m.group(2)}×SMs" if m.group(2) else auto_label) + (f", w ≤ {m.group(3)}" if m.group(3) else "")
    return key, col


def mean_cell(v):
    """'ms (fraction of copy)' of a list of (time_ms, fraction) runs, their means; '–' when empty."""
    if not v:
        return "–"
    return f"{sum(t for t, _ in v) / len(v):.4f} ({sum(f for _, f in v) / len(v):.2f})"


def schedule_table(rows, base, title, caption, base_label="1×SMs", auto_label="auto"):
    """Mean time and fraction of copy per (pages, profile, batch, context) and column; the fp16 decode of
    the same runs in the last column."""
    cells, cols, fp16 = {}, [], {}
    for r in rows:
        if not r["time_ms"] or r["op"] == "copy_bw":
            continue
        if r["op"] == "decode_fp16":
            fp16.setdefault((int(r["batch"]), int(r["context"])), []).append(float(r["time_ms"]))
            continue
        key, col = _column(r, base, base_label, auto_label)
        if key is None:
            continue
        if col not in cols:
            cols.append(col)
        cells.setdefault(key, {}).setdefault(col, []).append((float(r["time_ms"]), float(r["fraction_of_copy"])))
    if not cells:
        return []
    out = [title, "", caption, "",
           "| pages | profile | batch | context | " + " | ".join(cols) + " | fp16 decode |",
           "|---|---|---|---|" + "---|" * (len(cols) + 1)]
    for key in sorted(cells):
        row = [mean_cell(cells[key].get(c)) for c in cols]
        f = fp16.get(key[2:])
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(row) +
                   (f" | {sum(f) / len(f):.4f} |" if f else " | – |"))
    return out + [""]


def e2e_workers_table(rows, source, title, note):
    """TTFT and TBT of one method at workers=1 and workers=auto per (batch, prompt), from kvcomp bench rows."""
    v, modes = {}, []
    for r in rows:
        m = re.search(r"workers=([a-z0-9]+)", r["method_opts"])
        if not m or r["metric"] not in ("ttft_ms", "tbt_ms"):
            continue
        if m.group(1) not in modes:
            modes.append(m.group(1))
        v[(int(r["batch"]), int(r["context"]), m.group(1), r["metric"])] = float(r["value"])
    if len(modes) != 2:
        return []
    a, b = modes
    r0 = rows[0]
    out = [title, "",
           f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {r0['device']} ({r0['backend']}, commit "
           f"`{r0['commit']}`, {r0['date'][:10]}, `docs/data/{source}`): {r0['method']} calibrated on the "
           "random-weight model for p = 0.5, 16 generated tokens, one run per point, the two settings one after the "
           "other. Random weights give every head the same rank, so the schedule has no uneven ranks to balance. "
           + note, "",
           f"| batch | prompt | TTFT ms workers={a} | TTFT ms workers={b} | TBT ms workers={a} | TBT ms workers={b} | "
           f"TBT {b} / {a} |", "|---|---|---|---|---|---|---|"]
    for (bt, ctx) in sorted({k[:2] for k in v}):
        g = lambda mode, met: v.get((bt, ctx, mode, met))
        if None in (g(a, "ttft_ms"), g(b, "ttft_ms"), g(a, "tbt_ms"), g(b, "tbt_ms")):
            continue
        out.append(f"| {bt} | {ctx} | {g(a, 'ttft_ms'):.1f} | {g(b, 'ttft_ms'):.1f} | {g(a, 'tbt_ms'):.3f} | "
                   f"{g(b, 'tbt_ms'):.3f} | {g(b, 'tbt_ms') / g(a, 'tbt_ms'):.3f} |")
    return out + [""]


# The OpenCL ragged decodes on NVIDIA's driver: (file, title, caption, A/B). {old}, {new}, {date}, {backend}
# and {device} in a caption are filled from the file's rows; an A/B file's first commit is its base column.
_OCL_TABLES = [
    ("bench_ops_ocl_q4_ab_h200.csv",
     "### OpenCL ragged decodes: the q4 kernel with GB query heads per work-group (H200)",
     "NVIDIA's OpenCL driver ({backend}, {device}, {date}), two interleaved passes of each binary "
     "(`docs/data/bench_ops_ocl_q4_ab_h200.csv`, mean): `{old}` runs the q4 pages with one work-group per (task, "
     "query head) and byte loads per channel; `{new}` with one per (task, 4 query heads), the K rows staged word by "
     "word and a code word of 8 channels per work-item in the value phase. The f16 pages' kernel is the same in "
     "both. Both at workers=auto, which was 1 × the compute units on OpenCL then. Cells: ms (fraction of copy).",
     True),
    ("bench_ops_ocl_codes_ab_h200.csv",
     "### Experiment, reverted: OpenCL codes to floats without I2F (q4 pages, H200)",
     "The same way ({date}, `docs/data/bench_ops_ocl_codes_ab_h200.csv`, two interleaved passes): `{old}` against "
     "`{new}`, which turns a code c into a float as as_float(0x4B000000 | c) − 2^23 instead of convert_float (an "
     "I2F, a quarter of the FMA rate on NVIDIA GPUs); the quantized blocks' rows of the same run are in the "
     "quantized decode's section. Not faster; `27e7da0` reverted it. Cells: ms (fraction of copy).",
     True),
    ("bench_ops_ocl_worker_scales8_h200.csv",
     "### OpenCL ragged decodes cut for 1-8 × the compute units (H200)",
     "`{old}` on NVIDIA's OpenCL driver ({date}, one run, `docs/data/bench_ops_ocl_worker_scales8_h200.csv`; its "
     "kernels convert codes as in the experiment above, reverted later); auto was 1 × the compute units at this "
     "commit. The work-groups are 64 work-items (two warps): at 1 × an SM runs two warps and waits on its loads. "
     "Cells: ms (fraction of copy).",
     False),
    ("bench_ops_ocl_auto_ab_h200.csv",
     "### OpenCL workers=auto at 8 × the compute units (H200, interleaved A/B)",
     "`{old}` (auto = 1 × the compute units) against `{new}` (auto = 8 × on OpenCL GPUs) ({date}, "
     "`docs/data/bench_ops_ocl_auto_ab_h200.csv`, two interleaved passes, mean). Both binaries convert codes as in "
     "the reverted experiment above (0-4 % slower than convert_float). Cells: ms (fraction of copy).",
     True),
]


# Interleaved A/Bs of the CUDA tensor-core ragged decodes: (file, title, caption); {prev} (the base commit, the
# file's first), {date} and {file} in a caption are filled from the file; the other binary's commit column is a
# label for the commit that followed.
_KERNEL_AB_TABLES = [
    ("bench_ops_ragged_4blocks_ab_h200.csv",
     "### The tensor-core ragged decodes at 4 blocks per SM (H200, interleaved A/B)",
     "Two passes of each binary, one after the other (`{date}`, `docs/data/{file}`, mean of the two): `{prev}` "
     "against the kernels of the next commit (commit column `stage4`), whose per-warp stages are 7 KiB instead of 9 "
     "(f16 pages, where 16 rows of the widest K and V heads fit: both profiles here) and 8 (q4 pages), so 4 blocks "
     "of 4 warps share an SM instead of 3 (Nsight Compute, p70 16 × 32K: 15.0 warps per SM achieved of 16, 0.60 "
     "issued warps per scheduler). Both at workers=auto, which follows the resident blocks (3 → 4 × 132). Cells: "
     "ms (fraction of copy)."),
    ("bench_ops_ragged_stepbound_ab_h200.csv",
     "### The tensor-core ragged decodes unrolled to the task's head (H200, interleaved A/B)",
     "Two passes of each binary, one after the other (`{date}`, `docs/data/{file}`, mean of the two): `{prev}` "
     "against the kernels of the next commit (commit column `stepbound`): a block's K' and V' step loops are "
     "unrolled to 2, 4 or 8 16-channel steps as its head needs (the larger of its K' and V' steps), not to the "
     "widest head's 8 with a guard per step; q4 pages alike. Both at 4 blocks per SM and workers=auto. Cells: ms "
     "(fraction of copy)."),
    ("bench_ops_ragged_copy_unroll_h200.csv",
     "### Experiment, not kept: the ragged decode's staging loop unrolled (H200, interleaved A/B)",
     "Two passes of each binary, one after the other (`{date}`, `docs/data/{file}`, mean of the two): `{prev}`'s "
     "kernels against an uncommitted variant (commit column `copyunroll`) whose per-lane 16-byte copies of a page "
     "run loop over a pass count fixed per stream, unrolled by 4, instead of testing the row per copy (visit 56's "
     "SASS had a 12-instruction loop body per copy). 0.98-1.01× everywhere: not kept. The q4 rows ran at a "
     "per-token cost of 1 in both binaries (bench_ops' auto took the f16 pages' cost for them until `2364379`; "
     "the engine uses 64). Cells: ms (fraction of copy)."),
]


# One binary's sweeps of the CUDA tensor-core ragged decodes: (file, title, caption, label of the rows without
# a suffix); {commit}, {date} and {file} in a caption are filled from the file.
_SWEEP_TABLES = [
    ("bench_ops_worker_scales4_h200.csv", "### The balanced schedule's worker count at 4 blocks per SM (H200)",
     "`{commit}` (the kernels of `3337129`, \"unrolled to the task's head\" above), {date}, one run "
     "(`docs/data/{file}`): the balanced schedule cut for auto (4 × 132 resident blocks) and for 1-3 × the SMs, "
     "batch 16. Cells: ms (fraction of copy).", "auto"),
    ("bench_ops_token_cost_h200.csv", "### The balanced schedule's per-token cost (H200)",
     "`bench_ops --token-costs 1,32,64,128` ({date}, two passes, `docs/data/{file}`, mean; binary built from "
     "`fae32c8` plus the option): tasks cost s_kv × (k_width + v_width + c); ZACK / FDC use c = 1. With c = 64 the "
     "q4 pages ran 5-13 % faster at batch 16 from 32K (their rows cost little per channel next to a row's "
     "parameters, softmax and addressing); the f16 pages moved by -4 to +11 %, no clear direction. The engine's "
     "default (`token_cost=auto`) is since 64 for kv_bits=4 pages and 1 for f16 pages. Cells: ms (fraction of "
     "copy).", "c = 1"),
    ("bench_ops_token_cost_ocl_h200.csv", "### The per-token cost on NVIDIA's OpenCL driver (H200)",
     "The same sweep through the OpenCL backend (opencl:1, NVIDIA's driver; `{commit}`, {date}, two passes, "
     "`docs/data/{file}`, mean), batch 16, c = 1 and 64 (auto takes 64 for kv_bits=4 pages on every backend): "
     "the q4 pages 1.08× faster at p50 and unchanged at p70, the f16 pages 1.05× and unchanged. Cells: ms "
     "(fraction of copy).", "auto"),
]


def _ocl_ragged(data_dir):
    out = []
    for name, title, caption, ab in _OCL_TABLES:
        rows = read_dicts(os.path.join(data_dir, name))
        commits = commits_in_order(rows)
        if not rows or (ab and len(commits) != 2):
            continue
        r0 = rows[0]
        text = caption.format(old=commits[0], new=commits[-1], date=r0["date"][:10], backend=r0["backend"],
                              device=r0["device"])
        out += (schedule_table(rows, commits[0], title, text, base_label="auto") if ab
                else schedule_table(rows, "", title, text))
    return out


def schedule_section(data_dir):
    workers = read_dicts(os.path.join(data_dir, "bench_ops_workers_h200.csv"))
    waves = read_dicts(os.path.join(data_dir, "bench_ops_waves_h200.csv"))
    merge = read_dicts(os.path.join(data_dir, "bench_ops_merge_ab_h200.csv"))
    merge16 = read_dicts(os.path.join(data_dir, "bench_ops_merge16_ab_h200.csv"))
    palu = read_dicts(os.path.join(data_dir, "bench_ops_palu_workers_h200.csv"))
    ocl = read_dicts(os.path.join(data_dir, "bench_ops_ocl_worker_scales_h200.csv"))
    out = []
    if workers:
        new = commits_in_order(workers)[-1]
        out += schedule_table(
            workers, "35f52fe", "### workers=auto: the schedule cut for the decode tasks that run at once (H200)",
            f"bench_ops on {workers[0]['device']}, {workers[0]['date'][:10]}, one run per binary "
            f"(`docs/data/bench_ops_workers_h200.csv`): `35f52fe` cuts the balanced schedule for 1 × SMs "
            f"workers; `{new}` for the tasks the backend runs at once (auto: SMs × resident blocks of the "
            "kernel = 3 × 132 for the tensor-core decodes) or s × SMs, with the merge that keeps 8 rows' loads in "
            "flight. Cells: ms (fraction of copy). `35f52fe` and 1×SMs differ only in the merge kernel.")
    if waves:
        out += schedule_table(
            waves, "35f52fe", "### The search's wave count (bench_ops --waves, H200)",
            f"The balanced search tries cuts for w = 1 .. W waves of the workers and keeps the smallest LPT makespan "
            f"(`{waves[0]['commit']}`, {waves[0]['date'][:10]}, one run, `docs/data/bench_ops_waves_h200.csv`). "
            "Columns without w: w ≤ 4, the default. Cells: ms (fraction of copy).")
    if merge:
        final = commits_in_order(merge)[-1]
        out += schedule_table(
            merge, "35f52fe", "### The merge kernel, interleaved A/B (H200)",
            f"Two passes of each binary, one after the other (`{merge[0]['date'][:10]}`, "
            "`docs/data/bench_ops_merge_ab_h200.csv`, mean of the two): `35f52fe` against "
            f"`{final}`, whose merge keeps R × J = 32 registers of loads in flight for rows of more than 8 tasks "
            "(one row otherwise), at the same schedule (1×SMs: only the merge differs) and at auto, the new default. "
            "Cells: ms (fraction of copy).")
    if merge16:
        prev, final = commits_in_order(merge16)[0], commits_in_order(merge16)[-1]
        out += schedule_table(
            merge16, prev, "### The merge with 16 warps for rows of many tasks (batch 1, H200)",
            f"Two interleaved passes (`{merge16[0]['date'][:10]}`, `docs/data/bench_ops_merge16_ab_h200.csv`, mean): "
            f"`{prev}` against `{final}`, whose merge runs 16 warps where rows have more than 64 tasks on average "
            "(at auto: 1 × 128K, 198 per row); both at auto. Cells: ms (fraction of copy).", base_label="auto")
    if palu:
        out += schedule_table(
            palu, "", "### Palu's decode at auto and at 1 × SMs (H200)",
            f"`{palu[0]['commit']}`, {palu[0]['date'][:10]}, two passes (`docs/data/bench_ops_palu_workers_h200.csv`, "
            "mean). Palu's kernel keeps 1 block per SM at p50 (auto = 132) and 2 at p70 (auto = 264); it rebuilds "
            "every key at full width and is compute-bound (fractions of copy near 0). Auto was never faster, so the "
            "engine's workers=auto keeps 1 × SMs for palu. Cells: ms (fraction of copy).")
    if ocl:
        out += schedule_table(
            ocl, "", "### The worker count on NVIDIA's OpenCL driver (H200)",
            f"The same balanced decodes through the OpenCL backend ({ocl[0]['backend']}, NVIDIA's driver; "
            f"`{ocl[0]['commit']}`, {ocl[0]['date'][:10]}, one run, `docs/data/bench_ops_ocl_worker_scales_h200.csv`), "
            "cut for s × the compute units; the fp16 column is OpenCL's fp16 decode of the same run. OpenCL has no "
            "occupancy query; at that commit `workers=auto` was 1 × the compute units there (8 × since `0c39190`, "
            "below). Cells: ms (fraction of copy).")
    for name, title, caption in _KERNEL_AB_TABLES:
        rows = read_dicts(os.path.join(data_dir, name))
        if rows:
            prev = commits_in_order(rows)[0]
            text = caption.format(prev=prev, date=rows[0]["date"][:10], file=name)
            out += schedule_table(rows, prev, title, text, base_label="auto")
    for name, title, caption, auto_label in _SWEEP_TABLES:
        rows = read_dicts(os.path.join(data_dir, name))
        if rows:
            text = caption.format(commit=rows[0]["commit"], date=rows[0]["date"][:10], file=name)
            out += schedule_table(rows, "", title, text, auto_label=auto_label)
    out += _ocl_ragged(data_dir)
    for name, title, note in E2E_TABLES:
        out += e2e_workers_table(read_dicts(os.path.join(data_dir, name)), name, title, note)
    return out
