"""The CUDA tensor-core quantized decode's instruction diet and the experiments around it (issue 6,
docs/RESULTS.md), from
  bench_ops_quant_ab_h100.csv        5d3ebce against dc2bc81, interleaved, two passes of each binary
  bench_ops_quant_ab_h200.csv        5d3ebce against 4faa381 (the end state), one pass each, H200
  bench_ops_quant_step1_ab_h100.csv  5d3ebce against bf87467 (the first of the two steps), the same way
  bench_ops_quant_merge_ab_h100.csv  e9a54a2 against 4258586 (the split merge), the same way
  bench_ops_quant_merge_split_ab_h100.csv  4258586 against 4478f7d (the merge on more SMs at batch 1), the same way
  bench_ops_quant_merge32_h100.csv   4258586 against 7faf9e2 (every row split into 32-channel blocks; not kept)
  bench_ops_quant_occupancy_h100.csv dc2bc81 against an uncommitted variant (KIVI's kernel at 4 blocks per SM,
                                     2-stage rings), two passes
  bench_ops_quant_ocl_prefetch_h100.csv  NVIDIA's OpenCL driver: 5d3ebce against 21d026b (the next block's
                                     loads in registers; removed in 6850da7), two passes
  bench_ops_quant_ocl_qk_h100.csv    the same: 5d3ebce against 79921af (that prefetch plus scores from the
                                     codes with q * kstep per segment; removed in 6850da7), two passes
  bench_ops_ocl_codes_ab_h200.csv    NVIDIA's OpenCL driver: a27fa24 against 1ae921e (codes to floats by
                                     mask-or and subtract instead of convert_float; reverted), two passes, H200
  bench_ops_ocl_quant_splits_h200.csv  NVIDIA's OpenCL driver: be6ce9a (4 work-groups per CU as the split target)
                                     and binaries built from it with 8 and 16 (commit column g8, g16), two
                                     interleaved passes, H200
  bench_ops_quant_dims_h200.csv      852f16e, the quant sweep at head widths 48 / 64 / 96 / 128 (bench_ops
                                     --quant-dims) on the tensor-core kernel; _simt_: the same binary with
                                     KVCOMP_QUANT_DECODE=simt right after it, same visit (42), H200
Table cells are read from those files; the captions quote Nsight Compute durations from
docs/data/gpu_visits_2026-11-27.log.
"""
import os

from results_data import commits_in_order, read_dicts

_LAYOUT = {"decode_zipcache": "zipcache", "decode_kivi2": "kivi2"}


def _mean(v):
    return sum(v) / len(v)


def ab_table(rows, title, caption):
    """Mean time (fraction of copy) of the old and the new binary per (layout, batch, context), the fp16 decode
    of the same runs, and old / new."""
    commits = commits_in_order(rows)
    if len(commits) != 2:
        return []
    old, new = commits
    cells, fp16 = {}, {}
    for r in rows:
        if not r["time_ms"] or r["op"] == "copy_bw":
            continue
        key = (int(r["batch"]), int(r["context"]))
        if r["op"] == "decode_fp16":
            fp16.setdefault(key, []).append(float(r["time_ms"]))
        elif r["op"] in _LAYOUT:
            cells.setdefault((_LAYOUT[r["op"]],) + key, {}).setdefault(r["commit"], []).append(
                (float(r["time_ms"]), float(r["fraction_of_copy"])))
    out = [title, "", caption, "",
           f"| layout | batch | context | `{old}` ms (of copy) | `{new}` ms (of copy) | old / new | fp16 decode ms |",
           "|---|---|---|---|---|---|---|"]
    for key in sorted(cells):
        c = cells[key]
        if old not in c or new not in c:
            continue
        to, tn = _mean([t for t, _ in c[old]]), _mean([t for t, _ in c[new]])
        f = fp16.get(key[1:])
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {to:.4f} ({_mean([x for _, x in c[old]]):.2f}) | "
                   f"{tn:.4f} ({_mean([x for _, x in c[new]]):.2f}) | {to / tn:.2f}× | "
                   + (f"{_mean(f):.4f} |" if f else "– |"))
    return out + [""]


# (file, title, caption); {device}, {backend}, {date}, {old}, {new} and {file} in a caption are filled
# from the file's rows (old, new: its two commits in the order they ran).
_TABLES = [
    ("bench_ops_quant_ab_h100.csv",
     "### The tensor-core quantized decode with fewer instructions per item (H100, interleaved A/B)",
     "`bench_ops --sweeps fp16,quant` on {device} ({backend}, {date}), two passes of each binary one after the "
     "other (`docs/data/{file}`, mean of the two): `{old}` against `{new}`: a block item is two bulk copies "
     "(cp.async.bulk, sm_90) awaited on an mbarrier instead of a 16-byte cp.async per lane and chunk; the kernel is "
     "templated on the value group width, so a token row's value parameters are one load; q' is written pairwise "
     "and the bias reduced in 6 shuffles; no score tile past a segment's end. Shapes as in the table above; cells: "
     "ms (fraction of the copy bandwidth for the bytes read); the fp16 decode column is the mean over both "
     "binaries' runs (the fp16 kernel is unchanged)."),
    ("bench_ops_quant_ab_h200.csv",
     "### The same, end state against 5d3ebce on an H200 (one pass each)",
     "`bench_ops` on {device} ({backend}, {date}, `docs/data/{file}`): `{old}` against `{new}` (the kernel steps and "
     "the split merge above), one pass of each binary one after the other; the fp16 decode column is the mean "
     "over both runs."),
    ("bench_ops_quant_merge_ab_h100.csv",
     "### The split merge with block reductions (H100, interleaved A/B)",
     "The same sweep ({date}, `docs/data/{file}`, mean of two passes): `{old}` against `{new}`, whose merge of the "
     "splits' partials runs 256 threads per row (block reductions for the max and the weight sum, four loads in "
     "flight per thread) instead of one thread per channel walking every split three times. Under Nsight Compute "
     "at batch 1 the merge went from 16.3 to 12.2 us (KIVI-2 1 × 128K, 49 splits) and from 11.6-12.3 to 9.5-9.8 us "
     "(zipcache, 31-33 splits) (`docs/data/gpu_visits_2026-11-27.log`, visits 25-26)."),
    ("bench_ops_quant_merge_split_ab_h100.csv",
     "### The split merge on more SMs at batch 1 (H100, interleaved A/B)",
     "The same sweep ({date}, `docs/data/{file}`, mean of two passes): `{old}` against `{new}`, whose merge runs "
     "one block per 32 channels of a row while the rows are fewer than the SMs (batch 1: 32 rows had used 32 of "
     "132 SMs) and one block per row otherwise. Under Nsight Compute at batch 1 the merge takes 6.0-7.2 us "
     "(`docs/data/gpu_visits_2026-11-27.log`, visit 28). The next table is `7faf9e2`, which split every row "
     "that way."),
    ("bench_ops_quant_merge32_h100.csv",
     "### Experiment, not kept: every row's merge in 32-channel blocks (H100)",
     "`{old}` against `{new}` ({date}, `docs/data/{file}`, two interleaved passes), the step before the one "
     "above: 4 blocks per row at every batch."),
    ("bench_ops_quant_step1_ab_h100.csv",
     "### The first of the two steps alone (H100, interleaved A/B, an earlier visit)",
     "The same sweep on {device} ({date}, `docs/data/{file}`): `{old}` against `{new}` (q' pairwise, the bias in 6 "
     "shuffles, no score tile past a segment's end, no division for the ring stage, pointer steps in the copy)."),
    ("bench_ops_quant_occupancy_h100.csv",
     "### Experiment, not adopted: KIVI's kernel at 4 blocks per SM (H100)",
     "`{old}` against a binary built from it with the non-scaled kernel's launch bound raised from 3 to 4 blocks "
     "per SM (ptxas then spills 12-36 bytes) and 2-stage rings for every layout (shared memory allows 4 blocks only "
     "then); two passes each (`docs/data/{file}`, {date}). Zipcache's kernel keeps 2 blocks per SM in both. No "
     "fp16 rows in this run."),
    ("bench_ops_quant_ocl_prefetch_h100.csv",
     "### Experiment, removed: the OpenCL kernel loading the next block into registers (H100)",
     "NVIDIA's OpenCL driver ({backend}, {date}, two interleaved passes, `docs/data/{file}`): the kernel of "
     "`{old}` (the current one) against `{new}`, which issued the next block's 16-byte loads into registers "
     "before computing the current block. It helped zipcache's 11 KB blocks and slowed KIVI-2's 3 KB blocks; "
     "removed in `6850da7`. (`{new}` is not in the history: an amend meant for its revert renamed it, so "
     "`ad372d1` holds its tree under a message that calls it a revert.)"),
    ("bench_ops_quant_ocl_qk_h100.csv",
     "### Experiment, removed: OpenCL scores from the key codes with q · kstep per segment (H100)",
     "The same way ({date}, `docs/data/{file}`): `{old}` against `{new}`, which kept the prefetch above and "
     "computed the scores from the codes without dequantizing (q' = q · kstep and the bias Σ q · kmin once per "
     "segment in local memory, as the CUDA kernel does). Slower for KIVI-2's 32-token blocks; removed in "
     "`6850da7`."),
    ("bench_ops_ocl_codes_ab_h200.csv",
     "### Experiment, reverted: the OpenCL kernel with codes turned into floats without I2F (H200)",
     "NVIDIA's OpenCL driver ({backend}, {device}, {date}, two interleaved passes, `docs/data/{file}`): `{old}` "
     "against `{new}`, which turns a code c into a float as as_float(0x4B000000 | c) − 2^23 (mask-or and subtract, "
     "full rate) instead of convert_float (I2F, a quarter of the FMA rate on NVIDIA GPUs); exact, so the results "
     "are the same. It was slower, not faster, and `27e7da0` reverted it. The fp16 column is OpenCL's fp16 decode."),
]


def splits_table(rows):
    """The OpenCL split-target variants side by side: mean ms (fraction of copy) per layout and point."""
    commits = commits_in_order(rows)
    if len(commits) < 2:
        return []
    cells = {}
    for r in rows:
        if r["op"] in _LAYOUT and r["time_ms"]:
            key = (_LAYOUT[r["op"]], int(r["batch"]), int(r["context"]))
            cells.setdefault(key, {}).setdefault(r["commit"], []).append(
                (float(r["time_ms"]), float(r["fraction_of_copy"])))
    label = {commits[0]: f"`{commits[0]}` (4 per CU)", "g8": "8 per CU", "g16": "16 per CU"}
    r0 = rows[0]
    out = ["### OpenCL: the quantized decode's split target (H200)", "",
           f"NVIDIA's OpenCL driver ({r0['backend']}, {r0['device']}, {r0['date'][:10]}, two interleaved passes, "
           "`docs/data/bench_ops_ocl_quant_splits_h200.csv`, mean): the splits per row are chosen for a target of "
           f"4 work-groups per compute unit (`{commits[0]}`) or, in binaries built from it with only that constant "
           "changed, 8 and 16. Batch 1 has 8 groups (KV heads), batch 16 has 128: 4 per CU gives 66 / 5 splits per "
           "row, 16 per CU 264 (capped at 128 by the 256-token minimum at 32K) / 17. `fb71434` keeps 16 per CU "
           "unless that makes more than 64 splits per row, then 4: the first column's split counts at batch 1, "
           "the last one's at batch 16. Cells: ms (fraction of copy).", "",
           "| layout | batch | context | " + " | ".join(label.get(c, c) for c in commits) + " |",
           "|---|---|---|" + "---|" * len(commits)]
    for key in sorted(cells):
        c = cells[key]
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(
            f"{_mean([t for t, _ in c[x]]):.4f} ({_mean([f for _, f in c[x]]):.2f})" if x in c else "–"
            for x in commits) + " |")
    return out + [""]


def _width(op):
    """(layout, head width) of a quant sweep row: decode_<layout> is 128, decode_<layout>_d<W> is W."""
    for prefix, layout in _LAYOUT.items():
        if op == prefix:
            return layout, 128
        if op.startswith(prefix + "_d") and op[len(prefix) + 2:].isdigit():
            return layout, int(op[len(prefix) + 2:])
    return None


def widths_table(tc_rows, simt_rows):
    """The tensor-core and the SIMT kernel per (layout, width, batch, context), same binary and visit."""
    if not tc_rows or not simt_rows:
        return []
    cells, fp16 = {}, {}
    for kernel, rows in (("tc", tc_rows), ("simt", simt_rows)):
        for r in rows:
            if not r["time_ms"]:
                continue
            key = (int(r["batch"]), int(r["context"])) if r["batch"] else None
            if r["op"] == "decode_fp16" and kernel == "tc":
                fp16[key] = float(r["time_ms"])
            w = _width(r["op"])
            if w:
                cells.setdefault(w + key, {})[kernel] = (float(r["time_ms"]), float(r["fraction_of_copy"]))
    r0 = tc_rows[0]
    out = ["### The tensor-core quantized decode at other head widths (H200)", "",
           f"`bench_ops --sweeps fp16,quant --quant-dims 48,64,96,128` on {r0['device']} ({r0['backend']}), commit "
           f"`{r0['commit']}`, {r0['date'][:10]} (`docs/data/bench_ops_quant_dims_h200.csv`; the SIMT column is the "
           "same binary with `KVCOMP_QUANT_DECODE=simt`, run right after it: `bench_ops_quant_dims_simt_h200.csv`). "
           "8 KV heads, 32 query heads, the widths of kivi / zipcache on a reduced cache (`lowrank=`, `rank=R`); "
           "zipcache blocks of 100 (40 tokens at 4 bits, 60 at 2), kivi-2 groups of 32 tokens and channels (16 at "
           "width 48). Fraction of copy: bytes read / time against the copy bandwidth of the same run. The fp16 "
           "decode is at width 128.", "",
           "| layout | width | batch | context | tensor cores ms (of copy) | SIMT ms (of copy) | SIMT / tensor cores "
           "| fp16 decode (128) ms |",
           "|---|---|---|---|---|---|---|---|"]
    for key in sorted(cells):
        c = cells[key]
        if "tc" not in c or "simt" not in c:
            continue
        (tt, ft), (ts, fs) = c["tc"], c["simt"]
        f = fp16.get(key[2:])
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {tt:.4f} ({ft:.2f}) | {ts:.4f} ({fs:.2f}) | "
                   f"{ts / tt:.2f} | {f'{f:.4f}' if f else '–'} |")
    return out + [""]


def quant_decode_section(data_dir):
    out = []
    for name, title, caption in _TABLES:
        rows = read_dicts(os.path.join(data_dir, name))
        commits = commits_in_order(rows)
        if len(commits) != 2:
            continue
        r0 = rows[0]
        out += ab_table(rows, title, caption.format(device=r0["device"], backend=r0["backend"], date=r0["date"][:10],
                                                    old=commits[0], new=commits[1], file=name))
    return out + splits_table(read_dicts(os.path.join(data_dir, "bench_ops_ocl_quant_splits_h200.csv"))) + \
        widths_table(read_dicts(os.path.join(data_dir, "bench_ops_quant_dims_h200.csv")),
                     read_dicts(os.path.join(data_dir, "bench_ops_quant_dims_simt_h200.csv")))
