"""The OpenCL decodes' running max (docs/RESULTS.md): every decode row of bench_ops (fp16 pages, the quantized
blocks, the ragged low-rank pages) for each binary of a file, from
  bench_ops_ocl_lazymax_h200.csv           db78d95 against f2dc79d (the lazily moved running max, kept), two
                                           interleaved passes, visit 62
  bench_ops_ocl_lazymax_ec8fc33_h200.csv   db78d95 against ec8fc33 (its first version), two passes, visits 60 / 60b
  bench_ops_ocl_first_tile_scan_h200.csv   db78d95, ec8fc33 and e872927 (a head's first tile scanned; reverted),
                                           one pass each, visit 61
  bench_ops_ocl_local_alias_h200.csv       ec8fc33 against a variant whose ragged kernels keep the slot
                                           accumulators in the K tile's local memory (not kept), two passes, 60b
  bench_ops_ocl_quant_alpha_h200.csv       1f72e64, 5aeeb7b and qalpha (the softmax state in registers; qalpha
                                           kept), quantized rows, two passes, visit 67
  bench_ops_ocl_private_state2_h200.csv    1f72e64 against 5aeeb7b, every decode, two passes, visit 66
  bench_ops_ocl_private_state_h200.csv     1f72e64, 29d8902 and vpre (an early V' load, not kept), visit 65
  bench_ops_ocl_q4_tc64_h200.csv           db78d95 against 1f72e64, q4 ragged rows at token cost 64, visit 64
  bench_ops_ocl_palu_private_h200.csv      80a0fee against e97928c (Palu's maxima by selects; reverted), visit 69
  bench_ops_ocl_q4_alpha_h200.csv          869660e against q4alpha (8ef0b32's q4 kernel, kept), q4 rows, visit 71
  bench_ops_ocl_ragged_mma_h200.csv        simt against mma (f9c552e's tensor-core scores; reverted), visit 75
  bench_ops_ocl_quant_mma_h200.csv         simt against mma (f5fdc51's tensor-core scores of the quantized
                                           decode; kept), visit 77
  bench_ops_ocl_quant_mma_values_h200.csv  simt, scores (f5fdc51) and values (200b24f, reverted), visit 79
  bench_ops_ocl_quant_warps_lookahead_h200.csv  workgroup against warps (6c39e7c's per-warp kernel with an 8-chunk
                                           register look-ahead), qpf0 and qpf24 (no look-ahead, a whole block's),
                                           visit 111
  bench_ops_ocl_quant_warps_h100.csv       workgroup against warps (ae9a387, kept), two passes, visit 112, on an
                                           NVIDIA H100
  bench_ops_ocl_ragged_warps_h200.csv      a25f955 with KVCOMP_CL_RAGGED_WARPS=0 (the work-group ragged decode)
                                           against the default (kvc_adr_warps, the per-warp tensor-core kernel;
                                           kept), f16 ragged rows, two passes, visit 122
  bench_ops_ocl_ragged_ring_h200.csv       df5a8de with KVCOMP_CL_RAGGED_RING=4,1 (the default) and 2,2 (2 warps of 2
                                           stages; reverted), balanced rows at batch 16, one pass, visit 127
  bench_ops_ocl_ragged_q4_warps_h200.csv  68f3dfc with KVCOMP_CL_RAGGED_WARPS=0 (the work-group q4 ragged decode)
                                           against the default (kvc_adr_q4_warps; kept as 5c56fac), q4 ragged rows,
                                           two passes, visit 128
  bench_ops_ocl_ragged_step_h200.csv       68f3dfc with KVCOMP_CL_RAGGED_STEP=default (ldmatrix fragments and the
                                           next step's scores first), plain (main's step), ldmatrix, pipe; not
                                           kept, balanced rows at batch 16, two passes, visit 128
  bench_ops_ocl_palu_warps_h200.csv        7f95561 with KVCOMP_CL_PALU_WARPS=0 (the CUDA-core Palu decode) against
                                           the default (kvc_adp_warps, kept), two passes, and the same binary's
                                           CUDA rows (commit label without a suffix), visit 130
  bench_ops_ocl_exp2_ftz_h200.csv          abe6ba9 against wip136 (kvc_exp2 and one page lookup per stage; not
                                           kept), fp16 / ragged f16 / quantized rows, two passes, visit 136
  bench_ops_ocl_quant_cp_async_h200.csv    ae9a387 against 63ddb01 (cp.async rings; reverted), two passes, visit 114
  bench_ops_ocl_quant_bulk_dims_h200.csv   8a95c1a with KVCOMP_CL_BULK_COPY=0 against =1 (bulk copies, kept from
                                           4 KiB regions), head widths 64 / 96 / 128, two passes, visit 118
  bench_ops_ocl_quant_bulk_kivi4_h200.csv  0066aef with KVCOMP_CL_BULK_COPY=0 against the default (bulk copies for
                                           KIVI-4's 5 KiB regions), two passes, visit 120
  bench_ops_ocl_quant_vparams_h200.csv     0066aef against 798d9f6 (value-group parameters read a row at a time;
                                           reverted), KIVI-2 / KIVI-4 rows, two passes, visit 121
  bench_ops_ocl_quant_rings_h100.csv       ffac109 with KVCOMP_CL_QUANT_RING=4,0 / default / 2,2 / 4,2 (rings of
  bench_ops_ocl_quant_rings_kivi_h100.csv  bulk-copy stages; not kept), visits 116 / 117, on an NVIDIA H100
all on one NVIDIA H200 through NVIDIA's OpenCL driver unless named (docs/data/gpu_visits_2026-11-28.log for
visits from 111).
"""
import os

from results_data import commits_in_order, read_dicts

_OPS = {"decode_fp16": ("fp16 pages", ""), "decode_kivi2": ("kivi2 blocks", ""),
        "decode_kivi4": ("kivi4 blocks", ""), "decode_zipcache": ("zipcache blocks", "")}


def row_label(op):
    """(cache, profile) of a decode row, or None for rows these tables leave out. The quant sweep's rows at
    other head widths (decode_<layout>_d<W>) have the width as their profile."""
    if op in _OPS:
        return _OPS[op]
    base, _, width = op.rpartition("_d")
    if base in _OPS and width.isdigit():
        return _OPS[base][0], f"head dim {width}"
    for prefix, pages in (("decode_lowrank_q4_balanced_", "ragged q4, balanced"),
                          ("decode_lowrank_balanced_", "ragged f16, balanced"),
                          ("decode_lowrank_plain_", "ragged f16, plain"), ("decode_palu_", "palu")):
        if op.startswith(prefix):
            return pages, op[len(prefix):]
    return None


def _mean(v):
    return sum(v) / len(v)


def commits_table(rows, title, caption):
    """Mean ms (fraction of copy) per (cache, profile, batch, context) for each commit of the file in the order
    they ran, and the first commit's time over each later one's."""
    commits = commits_in_order([r for r in rows if r["op"] != "copy_bw"])
    if len(commits) < 2:
        return []
    cells = {}
    for r in rows:
        label = row_label(r["op"])
        if label is None or not r["time_ms"]:
            continue
        cells.setdefault(label + (int(r["batch"]), int(r["context"])), {}).setdefault(r["commit"], []).append(
            (float(r["time_ms"]), float(r["fraction_of_copy"])))
    head = " | ".join(f"`{c}` ms (of copy)" for c in commits)
    ratios = " | ".join(f"{commits[0]} / {c}" for c in commits[1:])
    out = [title, "", caption, "", f"| cache | profile | batch | context | {head} | {ratios} |",
           "|---|---|---|---|" + "---|" * (2 * len(commits) - 1)]
    for key in sorted(cells):
        c = cells[key]
        if commits[0] not in c or len(c) < 2:
            continue
        # A variant timed on some rows only (an experiment on one kernel) shows "–" on the others.
        t = [_mean([x for x, _ in c[k]]) if k in c else None for k in commits]
        f = [_mean([y for _, y in c[k]]) if k in c else None for k in commits]
        out.append(f"| {key[0]} | {key[1] or '–'} | {key[2]} | {key[3]} | "
                   + " | ".join("–" if a is None else f"{a:.4f} ({b:.2f})" for a, b in zip(t, f)) + " | "
                   + " | ".join("–" if x is None else f"{t[0] / x:.3f}×" for x in t[1:]) + " |")
    return out + [""]


# (file, title, caption); {device}, {backend}, {date} and {file} are filled from the file's rows.
_TABLES = [
    ("bench_ops_ocl_decode_warps_h200.csv",
     "### The OpenCL fp16 decode with per-warp streams (H200, NVIDIA's driver and CUDA, interleaved A/B)",
     "`bench_ops --cold --sweeps fp16` on {device} ({date}; 32 query / 8 KV heads, head dim 128, pages of 16), two "
     "passes of each OpenCL variant one after the other, then one CUDA run of the same binary (`docs/data/{file}`, "
     "mean; visit 131): `93f3022`'s default on opencl:1 (the first column: `attn_decode_warps.cl`'s "
     "`kvc_attn_decode_warps`, CUDA's `attn_decode` kernel written in OpenCL C with inline PTX: each warp streams "
     "its own tokens, every lane copying one 16-byte chunk of K and of V per token into its own slots of a "
     "two-stage `cp.async` ring, scores reduce-scattered over the 16 lanes of a row by shuffles, no barrier until "
     "the end), with `KVCOMP_CL_DECODE_WARPS=0` (the second: `attn_decode.cl`'s `kvc_attn_decode_split`, the "
     "portable kernel every earlier OpenCL table's fp16 rows and `none` ran, whose work-group shares each 64-token "
     "tile through local memory with three barriers) and, in the column headed by the full commit, cuda:0 "
     "(`attn_decode.cu`). Op tests of attn_decode 14/14 on the driver with either kernel and a fresh program "
     "cache, no private memory in the 6 `kvc_attn_decode_warps` programs built, `OpenCLDecodeKernel` passed "
     "(`docs/data/ocl_decode_warps_checks_h200.log`); the driver reports 128 registers and no spills for the "
     "variant of these rows (GQA sub-groups of 4; 194 for sub-groups of 8), in "
     "`docs/data/ocl_build_log_verbose_h200.log`. The new kernel takes 0.56-0.79 of the portable one's time; at "
     "batch 16 from 32K it reads the cache at 0.86-0.89 of the copy bandwidth (0.63-0.65 before), and takes "
     "1.14-1.15× the time of CUDA's (0.99-1.02 of copy); at batch 1, 1.23-1.33×. The methods' OpenCL speed-ups "
     "over `none` in the tables before this one are therefore against an fp16 decode 1.27-1.36× slower at batch 16; "
     "\"The methods at 16 × 32K with the per-warp fp16 decode\" below repeats the end-to-end comparison.",
     ),
    ("bench_ops_ocl_exp2_ftz_h200.csv",
     "### Experiment, not kept: the per-warp decodes with ex2.approx.ftz and one page lookup per stage (H200, "
     "NVIDIA's driver, interleaved A/B)",
     "`bench_ops --cold --sweeps fp16,lowrank,quant` on {device} ({backend}, {date}; 32 query / 8 KV heads, the p50 / "
     "p70 ragged profiles, pages of 16), two passes of each binary one after the other (`docs/data/{file}`, mean; "
     "visit 136): `abe6ba9` against `wip136`, whose kernels (the diff is `docs/data/ocl_exp2_ftz_page_once.patch`) "
     "take the shared lazy softmax's exponentials as `ex2.approx.ftz.f32` (CUDA's `exp2_ftz`; `native_exp2` is the "
     "non-ftz `ex2`, which ptxas wraps in a compare and two multiplies for denormals) and whose "
     "`kvc_attn_decode_warps` loads one page number per warp and stage (a warp's 8 tokens of a stage lie in one "
     "page of 16) and keeps that load ahead of the `cp.async` wait with a `bar.warp.sync`. A local ptxas build of "
     "the driver's PTX had put the page-table loads after the wait, where nvcc's SASS has them before it; the "
     "driver's own SASS (from its compute cache, visit 137; `docs/data/ocl_decode_warps_driver_sass_h200.txt`) has "
     "them before the wait, already one load per stage, and 578 instructions on the loop's common path against "
     "nvcc's 614, with the same copies, shuffles and exponentials. Op tests of every "
     "decode passed on the driver with the variant and a fresh cache, and no kernel used private memory "
     "(`docs/data/gpu_visits_2026-11-28.log`). The last column is the base's time over the variant's: neither "
     "change moves any decode, so OpenCL's fp16 decode stays behind CUDA's for a reason outside its loop's "
     "instructions (the sections on page sizes, page order and residency below rule out three more)."),
    ("bench_ops_ocl_ragged_warps_h200.csv",
     "### The OpenCL ragged decode with per-warp streams on the tensor cores (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --cold --sweeps fp16,lowrank` on {device} ({backend}, {date}; 32 query / 8 KV heads, per-KV-head "
     "widths of the p50 and p70 profiles of \"Decode attention on uneven ranks\", page size 16), two passes of each "
     "variant one after the other (`docs/data/{file}`, mean; visit 122): `a25f955`'s binary by default (the first "
     "column: `attn_decode_ragged_mma.cl`'s `kvc_adr_warps`, the form of CUDA's `attn_decode_ragged_mma.cu`: each "
     "warp copies its own tiles of K' and V' rows into its own stage by `cp.async` and computes scores and values "
     "of every 16-row step with `mma.sync`, q and p split into (hi, lo) f16, bar.warp.sync its only barrier until "
     "the end) and with `KVCOMP_CL_RAGGED_WARPS=0` (the second: `attn_decode_ragged.cl`, whose work-group shares "
     "each tile through local memory with three barriers per tile, on the CUDA cores). The default ran first in "
     "each pass, so the last column is the new kernel's time over the old one's (below 1: faster). `plain` and "
     "`balanced` are the two schedules (equal token chunks; tasks costed and placed longest first). The fp16 rows "
     "are the unchanged paged fp16 decode of the same runs. Op tests of attn_decode_ragged and attn_decode_quant "
     "52/52 on the driver with a fresh program cache, every op case 246/246 in visit 125, the kernel's PTX without "
     "private memory, the unit tests `OpenCLRaggedDecodeKernel` and the engine's low-rank ones (134, cpu and "
     "opencl:1) passed (`docs/data/ocl_ragged_warps_checks_h200.log`). The f16 ragged rows take 0.54-0.81 of the "
     "old kernel's time (1.24-1.85× faster); at 16 × 128K the balanced schedule reads the compressed bytes at 0.84 "
     "(p50) and 0.82 (p70) of the copy bandwidth, against 0.50 and 0.45 before (issue 5's target, time ≤ 1.2 × "
     "bytes / copy bandwidth, is a fraction ≥ 0.83). CUDA's tensor-core kernel on an H200 in an earlier visit: 0.92 "
     "and 0.84 (\"Decode attention on uneven ranks\" at `90236fd+cold`). At batch 1 the fractions stay 0.05-0.38: two "
     "launches and a few dependent round trips per block, as on CUDA (\"Batch 1 on CUDA\" in "
     "`docs/kernel_notes.md`).",
     ),
    ("bench_ops_ocl_ragged_ring_h200.csv",
     "### Experiment, reverted: the per-warp ragged decode with two stages per warp (H200, NVIDIA's driver)",
     "`bench_ops --cold --sweeps lowrank --worker-scales auto,4` on {device} ({backend}, {date}), one pass each "
     "(`docs/data/{file}`; visit 127, the device time left): `df5a8de`, whose `kvc_adr_warps` took its warps per "
     "work-group and stages per warp from `KVCOMP_CL_RAGGED_RING=NW,NS`, the copies of a warp's next NS - 1 tiles "
     "in flight while it computes one (`cp.async` groups per tile). `4,1` is the kernel above; `2,2` fits the same "
     "local memory (two stages of 8.5 KiB per warp at heads up to 128 wide). Profiles `x4_*`: the schedule cut for "
     "4 × the compute units instead of the engine's 8 ×. The op tests of attn_decode_ragged passed with `2,2` "
     "(34/34). The last column is `4,1`'s time over `2,2`'s (below 1: `4,1` faster): `2,2` took 1.08-1.26× the time of `4,1`, and the schedule at 4 × was slower than at 8 × at three of "
     "the four points. Reverted; the diff is `docs/data/ocl_ragged_ring.patch`.",
     ),
    ("bench_ops_ocl_ragged_ring2_h200.csv",
     "### Experiment, not kept: the per-warp ragged decode with a ring of 2 smaller stages (H200, NVIDIA's driver)",
     "`bench_ops --cold --sweeps lowrank --sweep-rows lowrank_balanced_p` on {device} ({backend}, {date}), two passes "
     "of each variant one after the other (`docs/data/{file}`, mean; visit 132): `2f51d27` (branch "
     "`wip/ocl-ragged-ring3`, the diff is `docs/data/ocl_ragged_ring2.patch`), whose `kvc_adr_warps` took "
     "`KVCOMP_CL_RAGGED_RING=NW,NS`: the default is the kernel above (4 warps, 1 stage of 8.5 KiB each); `3,2` and "
     "`4,2` give each warp 2 stages, the copies of its next tile in flight while it computes one, as CUDA's "
     "`attn_decode_ragged_mma.cu` does with its 7 KiB stages. The driver's 48 KiB of local memory per work-group "
     "holds that only with smaller stages: 7.7 KiB at 3 warps (16 rows of p50's widest pair of heads), 5.8 KiB at "
     "4 warps (the widest heads then get 8-row tiles). Unlike the table above (2 warps with 2 stages), these keep "
     "the stages' total per SM. Op tests of attn_decode_ragged 34/34 on the driver with each, fresh program caches. "
     "Both are slower at batch 16 (0.84-0.90×: the last columns are the default's time over theirs) and "
     "0.92-1.04× at batch 1. Why was not measured. A guess: with one stage per warp, 5 work-groups of 4 warps fit "
     "an SM (92 registers, `docs/data/ocl_build_log_verbose_h200.log`), and these extra warps hide the copies' "
     "latency better than a second stage per warp does. Not merged.",
     ),
    ("bench_ops_ocl_ragged_q4_warps_h200.csv",
     "### The OpenCL q4 ragged decode with per-warp streams on the tensor cores (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --cold --sweeps lowrank --sweep-rows lowrank_q4_balanced_` on {device} ({backend}, {date}; the "
     "shapes of the table above, pages of 4-bit codes with an f16 min and step per row, `core/ragged_q4.h`), two "
     "passes of each variant one after the other (`docs/data/{file}`, mean; visit 128): `68f3dfc`'s binary by "
     "default (the first column: `attn_decode_ragged_q4_mma.cl`'s `kvc_adr_q4_warps`, the form of CUDA's "
     "`attn_decode_ragged_q4_mma.cu` over `kvc_adr_warps`' per-warp tiles: 4-byte `cp.async` runs of unpadded rows, "
     "the codes themselves as mma operands, the min and step applied to the sums) and with "
     "`KVCOMP_CL_RAGGED_WARPS=0` (the second: `attn_decode_ragged_q4.cl`, the work-group kernel). The last column "
     "is the new kernel's time over the old one's: 0.41-0.94, at 16 × 128K 0.46 (p50) and 0.52 (p70). The fraction "
     "of copy stays far from 0.8 (0.27-0.30 at 16 × 128K): the 4-bit rows are a quarter of the f16 bytes while the "
     "mma and softmax work per token is the same, so the kernel is bound by its instructions, not by memory. "
     "CUDA's tensor-core q4 kernel on an H200 in an earlier visit: 0.98 ms (0.30) at 16 × 128K p50 "
     "(`docs/data/bench_ops_lowrank_mma_h200.csv`). Op tests of attn_decode_ragged 34/34 on the driver with a fresh "
     "program cache (its q4 cases on this kernel), no private memory in its PTX, `OpenCLRaggedDecodeKernel` passed; "
     "`68f3dfc` also held the ldmatrix step of the next table, which the f16 kernel alone uses. Kept as `5c56fac` "
     "(the same q4 kernel: clang's NVPTX of both is identical).",
     ),
    ("bench_ops_ocl_ragged_step_h200.csv",
     "### Experiment, not kept: the per-warp ragged decode's step with ldmatrix fragments (H200, NVIDIA's driver)",
     "`bench_ops --cold --sweeps lowrank --sweep-rows lowrank_balanced_p` at batch 16 on {device} ({backend}, "
     "{date}), two passes of each variant one after the other (`docs/data/{file}`, mean; visit 128): "
     "`68f3dfc`, whose `kvc_adr_warps` took its 16-row step from `KVCOMP_CL_RAGGED_STEP`: unset (the first "
     "column) both changes, `plain` the step of the table \"The OpenCL ragged decode with per-warp streams\" "
     "above, `ldmatrix` the A fragments of K' and (transposed) V' by `ldmatrix.x4` instead of 32-bit loads and "
     "`prmt`, `pipe` the next step's scores computed before this step's values (CUDA's order). Op tests of "
     "attn_decode_ragged 34/34 on the driver for each variant. The ratios are the first column's time over each "
     "other's (above 1: slower): both changes together took 1.13-1.14× `plain`'s time at p50 and the same at "
     "p70; each alone was slower at p50 too, although clang's NVPTX had 7-9 % fewer instructions with ldmatrix "
     "(MW 64 / 128). Why was not measured (`docs/kernel_notes.md` gives a guess). Not merged; the branch is "
     "`wip/ocl-ragged-ldmatrix`.",
     ),
    ("bench_ops_ocl_palu_warps_h200.csv",
     "### Palu's OpenCL decode on the tensor cores (H200, NVIDIA's driver and CUDA, interleaved A/B)",
     "`bench_ops --cold --sweeps lowrank --sweep-rows 'decode_palu_|lowrank_balanced_p'` on {device} ({date}), "
     "two passes of each OpenCL variant one after the other, then one CUDA run of the same binary "
     "(`docs/data/{file}`, mean; visit 130): `7f95561`'s default on opencl:1 (the first column: "
     "`attn_decode_palu_mma.cl`'s `kvc_adp_warps`, the form of CUDA's `attn_decode_palu_mma.cu` in per-warp "
     "tasks: keys rebuilt per 16-channel block from the latents and B_c's f16 fragments by `mma.sync`, rotated on "
     "the accumulators with an angle-sum table, the rotated block the score mma's A operand; the latent and V' "
     "fragments read straight from the pages, as B_c's fragments and the angle table fill the driver's 48 KiB of "
     "local memory), with `KVCOMP_CL_PALU_WARPS=0` (the second: `attn_decode_palu.cl`, the CUDA-core kernel) and, "
     "in the column headed by the bare commit, cuda:0 (`attn_decode_palu_mma.cu`). The `ragged f16` rows are FDC's "
     "decode of the same runs (unchanged; the switch does not touch it). Op tests of attn_decode_palu 11/11 on the "
     "driver with either kernel and a fresh program cache, no private memory in the 9 `kvc_adp_warps` programs "
     "built, `OpenCLPaluDecodeKernel` passed. The new kernel takes 0.10-0.17 of the old one's time (6-10× faster); "
     "against CUDA's it takes 1.08-1.34× the time at p50 and at batch 1, 0.83-0.88× at batch 16 p70. So OpenCL's "
     "FDC-against-Palu comparisons now measure tensor-core kernels on both sides: Palu's decode takes 1.8-3.1× "
     "FDC's on the driver and 2.5-3.7× on CUDA (16 × 32K p50: 2.95× and 2.55×).",
     ),
    ("bench_ops_ocl_palu_maxrreg_h200.csv",
     "### Experiment: Palu's OpenCL decode under -cl-nv-maxrregcount=168 (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --cold --sweeps lowrank --sweep-rows decode_palu_p50` on {device} ({backend}, {date}), two passes "
     "of each variant one after the other (`docs/data/{file}`, mean; visit 131): `93f3022`'s `kvc_adp_warps` "
     "built by default and with `KVCOMP_CL_BUILD_OPTIONS=-cl-nv-maxrregcount=168`, the experiment "
     "`docs/kernel_notes.md` proposed from clang's register estimate (221 registers at p50, which would leave 2 "
     "work-groups per SM). No change (1.000-1.005×): NVIDIA's driver itself gives every variant of `kvc_adp_warps` "
     "in the op tests with head dim 128 and latents 128 wide (p50's widest) 124-128 registers without spills (`-cl-nv-verbose`, same visit, "
     "`docs/data/ocl_build_log_verbose_h200.log`), so the limit never bound and the estimate was wrong for this "
     "kernel by about 90 registers. Why Palu's p50 decode on OpenCL stays slower than CUDA's is still open.",
     ),
    ("bench_ops_ocl_quant_warps_h100.csv",
     "### The OpenCL quantized decode with per-warp streams on the tensor cores (H100, NVIDIA's driver, "
     "interleaved A/B)",
     "`bench_ops --sweeps fp16,quant` on {device} ({backend}, {date}; 32 query / 8 KV heads, head dim 128), two "
     "passes of each variant one after the other (`docs/data/{file}`, mean; visit 112): `ae9a387`'s binary with "
     "`KVCOMP_CL_QUANT_WARPS=0` (`workgroup`: `attn_decode_quant.cl`, whose work-group shares every 64-token tile "
     "through local memory with three barriers per tile, scores on the tensor cores, values on the CUDA cores) and "
     "without (`warps`: `attn_decode_quant_mma.cl`, the form of CUDA's tensor-core kernel: each warp copies its own "
     "blocks into its own stage and computes scores and values of every 16-token tile with `mma.sync`, the codes as "
     "operands, the softmax state in its lanes' registers, bar.warp.sync its only barrier until the end). Op tests "
     "18/18 on the driver (either kernel), no private memory in the PTX, the engine's quantized-cache unit tests "
     "14/14 on the driver (`docs/data/ocl_quant_warps_checks_h100.log`). The fp16 rows are the unchanged paged "
     "fp16 decode of the same runs. At batch 16 from 32K the per-warp kernel takes 0.41-0.46 of the fp16 "
     "decode's time, the work-group one 0.75-0.80; KIVI-2 at 16 × 32K reads its blocks at 0.35 of the copy bandwidth (CUDA on an H100 at `dc2bc81`: 0.47, "
     "the table \"The tensor-core quantized decode with fewer instructions per item\" above).",
     ),
    ("bench_ops_ocl_quant_bulk_dims_h200.csv",
     "### The OpenCL quantized decode with bulk copies (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --sweeps quant --quant-dims 64,96,128` on {device} ({backend}, {date}; 32 query / 8 KV heads; "
     "profile: the head width where it is not 128), two passes of each variant one after the other "
     "(`docs/data/{file}`, mean; visit 118): `8a95c1a`'s binary with `KVCOMP_CL_BULK_COPY=0` (each warp copies a "
     "block's KV-head region into its stage with 16-byte loads of every lane, as in the table below) and `=1` (on "
     "sm_90 lane 0 starts two `cp.async.bulk` copies, the slot's header and the region, and the warp waits on its "
     "mbarrier; inline PTX, as CUDA's kernel since `dc2bc81`). Block regions: ZipCache 5.4 / 7.9 / 10.4 KiB at head "
     "widths 64 / 96 / 128, KIVI-2 1.5 / 2.25 / 3 KiB. ZipCache gains at every width (1.00-1.21×; 1.05-1.21× at batch "
     "16); KIVI-2 loses up to 11 % at widths 64 and 128 (0.89-1.02×) and gains 13-23 % at batch 16 at width 96, "
     "which the region size does not explain. So the launcher takes bulk copies for regions of 4 KiB and more "
     "(every ZipCache row here, no KIVI-2 row); `KVCOMP_CL_BULK_COPY` forces either way. Op tests 18/18 on the "
     "driver by default (with `8a95c1a`'s first threshold of 8 KiB, which no test shape reaches) and with `KVCOMP_CL_BULK_COPY=1` (every program with its two "
     "bulk copies), no private memory, the engine's quantized-cache unit tests 14/14 "
     "(`docs/data/ocl_quant_bulk_checks_h200.log`). ZipCache at 16 × 32K: 0.34 ms, 0.31 of this H200's copy "
     "bandwidth (the kernel takes the same time on an H100, where that is 0.44: visit 116 below).",
     ),
    ("bench_ops_ocl_quant_bulk_kivi4_h200.csv",
     "### The same for KIVI-4 at the 4 KiB threshold (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --sweeps quant` on {device} ({backend}, {date}), two passes (`docs/data/{file}`, mean; visit 120): "
     "`0066aef` (bulk copies from 4 KiB regions) with `KVCOMP_CL_BULK_COPY=0` and without, on KIVI-4's blocks (32 "
     "tokens at 4 bits, values in groups of 32 channels: 5 KiB regions, so bulk copies by default): 1.05-1.13×. "
     "The same binary's op tests on the driver took bulk copies in 5 of their 15 `kvc_adq_warps` programs by "
     "default (18/18 pass), and the unit test `OpenCLQuantDecodeKernel` passed there "
     "(`docs/data/ocl_quant_bulk_checks_h200.log`).",
     ),
    ("bench_ops_ocl_quant_vparams_h200.csv",
     "### Experiment, reverted: the value-group parameters read a row at a time (H200, NVIDIA's driver)",
     "`bench_ops --sweeps quant` on {device} ({backend}, {date}), two passes of each binary one after the other "
     "(`docs/data/{file}`, mean; visit 121): `0066aef` against `798d9f6`, whose value tiles read a token row's "
     "value-group steps and offsets with one 8-byte load per row (KIVI at head dim 128: 4 groups of 32 channels) "
     "and unpack them with `cvt.f32.f16`, where `0066aef` loads each group's f16 alone (32 two-byte loads per tile "
     "and lane for KIVI-2, against 8 eight-byte loads in `798d9f6`). Op tests 18/18 on the driver. KIVI-2 0.89-1.03×, KIVI-4 0.95-1.05× (why the "
     "saved loads did not pay is not known: the driver has no profiler here; in `798d9f6` the parameters stay "
     "live in registers across the tile). Reverted; the diff is `docs/data/ocl_quant_vparams.patch`.",
     ),
    ("bench_ops_ocl_quant_rings_h100.csv",
     "### Experiment, not kept: rings of bulk-copy stages per warp (H100, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --sweeps fp16,quant` on {device} ({backend}, {date}), two passes of each variant one after the "
     "other (`docs/data/{file}`, mean; visit 116): `ffac109`, whose warps kept a ring of NS local stages filled by "
     "bulk copies NS - 1 blocks ahead of the one computed, with `KVCOMP_CL_QUANT_RING=NW,NS` (warps per "
     "work-group, stages per warp; `4,0`: no bulk copies, the 16-byte loads). `default` took the most stages that "
     "fit 4 warps in the driver's 48 KiB of local memory: 3 for KIVI-2's 3 KiB regions, 1 for ZipCache's 10.4 KiB "
     "ones; ZipCache's `4,2` does not fit and ran the work-group kernel `attn_decode_quant.cl` (its 0.58-0.81×). "
     "ZipCache: 1.10-1.21× with one stage per warp, 0.99-1.30× with two stages of 2 warps (faster than one stage at "
     "1 × 4K and 1 × 128K only); KIVI-2: 0.86-1.08× with any ring, no variant faster at every point. The next table "
     "times KIVI-2's rings again with one stage among them. "
     "`8a95c1a` kept one stage per warp and dropped the rings (the table above).",
     ),
    ("bench_ops_ocl_quant_rings_kivi_h100.csv",
     "### The same, KIVI-2 with 1, 2 and 3 bulk-copy stages (H100, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --sweeps quant` on {device} ({backend}, {date}), two passes (`docs/data/{file}`, mean; visit 117, "
     "the machine of visit 116): `ffac109` with `KVCOMP_CL_QUANT_RING=4,0` (16-byte loads), `4,1`, `4,2` and the "
     "default `4,3` on KIVI-2's 3 KiB regions: 0.86-1.02× for every bulk-copy variant.",
     ),
    ("bench_ops_ocl_quant_cp_async_h200.csv",
     "### Experiment, reverted: the per-warp OpenCL decode with cp.async rings (H200, NVIDIA's driver)",
     "`bench_ops --sweeps fp16,quant` on {device} ({backend}, {date}), two passes of each binary one after the other "
     "(`docs/data/{file}`, mean; visit 114): `ae9a387` (a warp copies a block with 16-byte loads and stores, then "
     "computes it) against `63ddb01`, whose warps keep a ring of local stages filled by `cp.async` (inline PTX; a "
     "local pointer's integer value is its shared-window address on NVIDIA's compiler) 1-2 blocks ahead of the "
     "one computed, as CUDA's kernel does: three stages for KIVI-2's 3 KiB blocks, while ZipCache's 10.7 KiB "
     "blocks at head dim 128 fit only one stage per warp in the driver's 48 KiB of local memory and kept the "
     "synchronous copy (their rows here differ by noise). Correct (op tests 18/18, the engine's quantized-cache "
     "unit tests 14/14 on the driver, no private memory). KIVI-2 0.86-1.03×: the copy's latency does not bound "
     "this kernel. Reverted; the diff is `docs/data/ocl_quant_cp_async.patch`.",
     ),
    ("bench_ops_ocl_quant_warps_lookahead_h200.csv",
     "### The first version of it, and the register look-ahead it dropped (H200, NVIDIA's driver)",
     "`bench_ops --sweeps fp16,quant` on {device} ({backend}, {date}), visit 111 (`docs/data/{file}`): `workgroup` "
     "and `warps` two passes each, interleaved; `qpf0` and `qpf24` one pass each. `6c39e7c`'s per-warp kernel "
     "(`warps`) loaded the first 8 16-byte chunks per lane of a warp's next block into registers before computing "
     "the current one (`-DKVC_QPF=8`); `qpf0` loads nothing ahead and `qpf24` a whole ZipCache block (build option "
     "`-DKVC_QPF=N` through `KVCOMP_CL_BUILD_OPTIONS`). No look-ahead beat the 8-chunk one at 9 of 12 points "
     "and the whole block's at 7 (that one won the other 5: ZipCache at 1 × 4K and 1 × 128K by 9-10 %, the rest by 0-1 %; single passes), so "
     "`ae9a387` dropped it; `6c39e7c` also built the code operands with shifts and masks per code and read code rows a word at a "
     "time, where `ae9a387` uses CUDA's channel-pair order (one rotate and one and-or per register), `prmt` for "
     "the value pairs, and 16-byte row loads (the table above).",
     ),
    ("bench_ops_ocl_quant_mma_h200.csv",
     "### The OpenCL quantized decode's scores on the tensor cores (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --sweeps quant` on {device} ({backend}, {date}; 32 query / 8 KV heads, head dim 128), "
     "two passes of each variant one after the other "
     "(`docs/data/{file}`, mean; visit 77): `f5fdc51`'s binary with `KVCOMP_CL_TENSOR_CORES=0` (`simt`: each "
     "work-item dequantizes its token's key row and takes its dot products with q) and without (`mma`): on "
     "NVIDIA's driver, where `kvcomp::cl::inline_ptx_mma` passes, each warp scores 16-token blocks of a segment "
     "with inline PTX `mma.sync`, the codes turned into f16 operands F = 2^b + code and q' = q · kstep in hi/lo "
     "f16 fragments per segment, as the CUDA kernel does. Op tests 18/18 on the driver with a fresh cache; no "
     "private-memory access in the PTX; the engine's quantized-cache unit tests on the driver pass (visit 78). "
     "KIVI-2 1.18-1.33×, ZipCache 1.00-1.13×. The value phase is unchanged (fp32 SIMT).",
     ),
    ("bench_ops_ocl_quant_mma_values_h200.csv",
     "### Experiment, reverted: the OpenCL quantized decode's values on the tensor cores too (H200, NVIDIA's driver)",
     "`bench_ops --sweeps quant` on {device} ({backend}, {date}; 32 query / 8 KV heads, head dim 128), "
     "two passes of each variant one after the other "
     "(`docs/data/{file}`, mean; visit 79): `simt` (`200b24f`'s binary with `KVCOMP_CL_TENSOR_CORES=0`), `scores` "
     "(`f5fdc51`, kept: the scores on the tensor cores) and `values` (`200b24f`: the value phase too, O^T = V^T P'^T "
     "per 16-token block with a token row's code pair as A operands and p' = p · vstep in hi/lo f16 as B; the diff "
     "is `docs/data/ocl_quant_mma_values.patch`). Correct (op tests 18/18, the engine's quantized-cache unit tests "
     "on the driver), no private memory; against `scores` 1.01-1.07× at batch 1 but 0.94-1.00× at batch 16, so it "
     "was reverted (`2db283b`).",
     ),
    ("bench_ops_ocl_ragged_mma_h200.csv",
     "### Experiment, reverted: the OpenCL f16 ragged decode's scores on the tensor cores (H200, NVIDIA's driver)",
     "`bench_ops --sweeps lowrank` on {device} ({backend}, {date}; 32 query / 8 KV heads, head dim 128), "
     "two passes of each variant one after the other "
     "(`docs/data/{file}`, mean; visit 75). NVIDIA's OpenCL driver compiles inline PTX: `kvcomp::cl::inline_ptx_mma` "
     "(`lib/opencl/nv_mma_probe.cpp`, kept, with its unit test) runs one warp of `mma.sync.m16n8k16` from OpenCL C "
     "and the product is exact (visit 72). `f9c552e` used it for phase 1b of `attn_decode_ragged.cl`: each warp "
     "scored 16-row blocks of the staged K' tile against q split into hi/lo f16 (`mma`), where the work-items had "
     "each scored one token (`simt`: the same binary with the path turned off). Op tests 34/34 on the driver; no "
     "private-memory access in its PTX. Equal at p50 (0.98-1.02×) and slower at p70 (0.81-0.93×): the scores' "
     "arithmetic does not bound this kernel, and the mma path adds a round trip through local memory (scores "
     "written by the lanes that hold them, read back by each token's work-item after the barrier). The two "
     "versions before it were slower still: q fragments in registers (`9351710`, visit 73, "
     "`bench_ops_ocl_ragged_mma_regs_h200.csv`) 0.79-0.87×, with 12 `ld.local` / 5 `st.local` in the PTX; "
     "fragments in local memory (`9fb7afd`, visit 74, `bench_ops_ocl_ragged_mma_qfl_h200.csv`) 0.63-0.92×: NVIDIA's "
     "compiler had turned a select over literal heads into `m_run[mt]` and kept the running maxima in private "
     "memory. Reverted in `526300e`.",
     ),
    ("bench_ops_ocl_q4_alpha_h200.csv",
     "### The OpenCL q4 ragged decode's rescale factor from the moved max (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --sweeps lowrank` on {device} ({backend}, {date}; 32 query / 8 KV heads, head dim 128), "
     "q4 rows only, two passes of each binary one "
     "after the other (`docs/data/{file}`, mean; visit 71): `869660e` against the kernel of `8ef0b32` (commit column "
     "`q4alpha`), which computes the rescale factor alpha from the moved max, as the quantized decode does, instead "
     "of from the head's slot. The same number either way; 1.01-1.04× at all eight points. Its PTX has no "
     "private-memory access (the guard of `tools/report/cl_cache_dump.py`, same visit).",
     ),
    ("bench_ops_ocl_quant_alpha_h200.csv",
     "### OpenCL quantized decodes with the softmax state in registers (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --sweeps quant` on {device} ({backend}, {date}), two passes of each binary one after the other "
     "(`docs/data/{file}`, mean; visit 67). The PTX that NVIDIA's driver built for attn_decode_quant at `1f72e64` "
     "(read from kvcomp's program cache with `tools/report/cl_cache_dump.py`) kept the work-item's whole softmax "
     "state, running max, sums and value accumulators, in off-chip private memory: 55 `ld.local` / 67 `st.local` "
     "for ZipCache and 38 / 47 for KIVI-2, against 4 / 18 at `db78d95`, before the lazy running max. The lazy "
     "max's helpers looped over a run-time head count on array parameters, and the kernel's end indexed the state "
     "by a run-time head. Now the helpers take one head, the kernels loop over their literal GB under `#pragma "
     "unroll`, and the quantized decode sums every head at once in the staged block's local memory. Its PTX has no "
     "private-memory access left (`5aeeb7b` in visit 66; the kept code in visit 68, over every quantized-decode "
     "program the op tests build). `5aeeb7b` and `qalpha` differ only in how the softmax tile computes "
     "the rescale factor, which is the same number either way: from the slot, as the other decodes do, or from "
     "the moved max. NVIDIA's compiler made KIVI-2 at batch 1 6-10 % slower with the first, so the kept code "
     "(`qalpha`, committed after this run with a comment added) uses the second. ZipCache's batch-1 loss "
     "since the lazy max (0.92-0.95× of `db78d95`, visit 64: `bench_ops_ocl_zipcache_b1_h200.csv`) is gone. "
     "Shapes: Llama-3-8B's attention (32 query / 8 KV heads, head dim 128); ZipCache blocks of 100 tokens (40 at "
     "4 bits, 60 at 2), KIVI-2 groups of 32. Cells: ms (fraction of the copy bandwidth of the same run for the "
     "bytes read)."),
    ("bench_ops_ocl_private_state2_h200.csv",
     "### The same change on every OpenCL decode (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --sweeps fp16,quant,lowrank` ({date}, `docs/data/{file}`, two passes; visit 66): `1f72e64` against "
     "`5aeeb7b`, whose fp16 and ragged decodes are the kept ones. Their PTX had no private-memory access "
     "before either, and they are unchanged within 1 %; the quantized rows are `5aeeb7b`'s, see the table above "
     "for the kept version."),
    ("bench_ops_ocl_private_state_h200.csv",
     "### The first version, `29d8902`, and an experiment: the f16 ragged decode's first V' rows loaded early (H200)",
     "The same sweep ({date}, `docs/data/{file}`, two passes; visit 65). `29d8902` computed every decode's rescale "
     "factor from the moved max. The fp16 decode was 4-5 % slower than `1f72e64` at all four points, so `5aeeb7b` "
     "went back to the slot's factor there. `vpre` (commit column; `29d8902` plus the f16 ragged decode issuing "
     "its first V_UNROLL V' rows per work-item before the tile's first barrier, so that their latency would pass "
     "during the scores and the softmax) was 1-7 % slower than `29d8902` at all eight points and was not kept."),
    ("bench_ops_ocl_palu_private_h200.csv",
     "### Experiment, reverted: the Palu decode's maxima picked by selects (H200, NVIDIA's driver)",
     "The guard added to `tools/gpu_host/run_checks.sh` (`tools/report/cl_cache_dump.py --no-private`) found "
     "private-memory traffic in one OpenCL decode after this change: Palu's (13 ld.local / 9 st.local; its "
     "probabilities read the running max as `mn[e % G]`). `e97928c` picked it with selects over literal indices; "
     "NVIDIA's PTX then had 27 / 9, and the time moved by 0.3-1 % ({date}, `docs/data/{file}`, two passes, 5 "
     "reps each; visit 69), so it was reverted. Palu's OpenCL kernel rebuilds every key at full width and is "
     "compute-bound. The shapes are those of the tables above."),
    ("bench_ops_ocl_q4_tc64_h200.csv",
     "### The OpenCL q4 ragged decode at the engine's per-token cost of 64 (H200)",
     "`bench_ops --sweeps fp16,lowrank --token-costs 64` ({date}, `docs/data/{file}`, two passes; visit 64): the "
     "rows the tables below timed at a cost of 1, now at the engine's 64 (profile column `tc64_p50` / `tc64_p70`), "
     "`db78d95` against `1f72e64` (the lazy running max). The fp16 rows are the same run's."),
    ("bench_ops_ocl_lazymax_h200.csv",
     "### OpenCL decodes with a lazily moved running max (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --sweeps fp16,quant,lowrank` on {device} ({backend}, {date}), two passes of each binary one after "
     "the other (`docs/data/{file}`, mean): `db78d95` against `f2dc79d`. Before, phase 2 of every tile had each "
     "work-item scan all of the tile's scores for the per-head maximum (64 local loads and 4 × 64 fmax per "
     "work-item at NT = 64, GQA 4); now the running max moves only when a score exceeds it by more than 8 (log2 "
     "units), such a work-item proposes its score with a local atomic max, and every work-item reads the GB slots "
     "after the barrier it already had (`cl_kernels/common.cl`). The one loss is ZipCache at batch 1; the two "
     "experiments below did not find its cause, which was private memory (the section \"OpenCL quantized "
     "decodes with the softmax state in registers\" above). Shapes: Llama-3-8B's attention (32 query / 8 KV heads, head dim "
     "128, pages of 16), ragged caches at the 50 % and 70 % profiles of uneven ranks. The q4 rows ran at a per-token "
     "cost of 1 in both binaries (the engine's auto is 64 for them: bench_ops took auto's cost before marking "
     "the row 4-bit until `2364379`); the same holds for the three tables below. Cells: ms (fraction of the "
     "copy bandwidth of the same run for the bytes read)."),
    ("bench_ops_ocl_lazymax_ec8fc33_h200.csv",
     "### The first version of it, `ec8fc33` (H200, NVIDIA's driver)",
     "The same sweep ({date}, `docs/data/{file}`, two passes in two visits): `ec8fc33` had one more barrier at the "
     "start of every attn_decode_quant work-group (publishing q for a split that holds only the window); "
     "`f2dc79d` has it at the start of the window instead (once per request and KV head). ZipCache at batch 1 "
     "was as slow with either."),
    ("bench_ops_ocl_first_tile_scan_h200.csv",
     "### Experiment, reverted: scanning a head's first tile (H200, NVIDIA's driver, one pass each)",
     "`e872927` scanned the first tile of every head (where every work-item would propose) and kept the "
     "proposals for later tiles, to find out whether 64 work-items' atomics on the same words were what slowed "
     "ZipCache at batch 1. It did not bring ZipCache back and made the fp16 and f16 ragged decodes slower than `ec8fc33` "
     "at 11 of their 12 points (2-10 %; the f16 ragged p70 1 × 32K was 9 % faster); `f2dc79d` went back to the lazy max on "
     "every tile ({date}, `docs/data/{file}`)."),
    ("bench_ops_ocl_local_alias_h200.csv",
     "### Experiment, not kept: the ragged decodes' slot accumulators in the K tile's local memory (H200)",
     "`ec8fc33` against a variant (commit column `alias`) whose f16 and q4 ragged kernels keep their end-of-task "
     "slot accumulators (8 KiB) in the local memory of the K tile, which the last tile no longer reads, so a "
     "work-group needs about a quarter less local memory ({date}, `docs/data/{file}`, two interleaved passes, "
     "batch 16). Within ±0.4 %: local memory does not limit these kernels."),
]


def commits_tables(data_dir, tables):
    """commits_table for each (file, title, caption) of `tables` whose file exists in data_dir; {device},
    {backend}, {date} and {file} in a caption are filled from its file's first row."""
    out = []
    for name, title, caption in tables:
        rows = read_dicts(os.path.join(data_dir, name))
        if not rows:
            continue
        r0 = rows[0]
        out += commits_table(rows, title, caption.format(device=r0["device"], backend=r0["backend"],
                                                         date=r0["date"][:10], file=name))
    return out


def ocl_softmax_section(data_dir):
    return commits_tables(data_dir, _TABLES)
