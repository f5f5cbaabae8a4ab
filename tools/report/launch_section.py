"""The CUDA decodes' merge launched as a programmatic dependent, and bench_ops' cold timing (docs/RESULTS.md),
from
  bench_ops_dependent_launch_h200.csv        visit 70: f1c9137 with the dependent launch off and on (--cold, two
                                             interleaved passes) and on without --cold (one pass)
  bench_ops_dependent_launch_where_h200.csv  visit 71: off, allowed at each decode block's start (f1c9137) and
                                             after its main loop (57476db's kernels), --cold, two passes
  bench_ops_ragged_merge_early_h200.csv      visit 76: 526300e against the merge's loads issued earlier (not kept)
  bench_ops_split_merge_shared_h200.csv      visit 80: 200b24f against the fp16 decode on the shared split merge
all on one NVIDIA H200 (docs/data/gpu_visits_2026-11-27.log), and the Nsight Compute kernel durations of
ncu_decode_merge_batch1_h200.csv (visit 72).
"""
import csv
import os

from ocl_softmax_section import commits_tables

_TABLES = [
    ("bench_ops_dependent_launch_where_h200.csv",
     "### The decodes' merge as a dependent launch (CUDA, H200, --cold, interleaved A/B)",
     "`bench_ops --cold --sweeps fp16,quant,lowrank` on {device} ({backend}, {date}; 32 query / 8 KV heads, "
     "head dim 128), "
     "two passes of each variant one "
     "after the other (`docs/data/{file}`, mean; visit 71). Every CUDA decode whose rows have several splits or "
     "tasks ends with a merge kernel. Since `f1c9137` the merge is launched as a programmatic dependent of the "
     "decode (sm_90, `cuda_backend/dependent_launch.cuh`): its blocks are made resident before the decode ends and "
     "wait for it in `griddepcontrol.wait`. `off`: the same binary with `KVCOMP_DEPENDENT_LAUNCH=0` (plain "
     "launches, as before); `start`: each decode block allows the merge's launch at its start (`f1c9137`); `end`: "
     "after its main loop (`57476db`, kept). With `end`, batch 1 is 1.00-1.11× faster (the most at 4K, where a "
     "decode takes 18-27 µs) and batch 16 within 0.98-1.03×; with `start`, KIVI-2 lost 2-3 % at 1 × 32K and "
     "1 × 128K. Palu's decode and the SIMT q4 decode call it after their main loops too, untimed there."),
    ("bench_ops_split_merge_shared_h200.csv",
     "### The fp16 decode with the quantized decode's split merge (CUDA, H200, --cold, interleaved A/B)",
     "`bench_ops --cold --sweeps fp16,quant` on {device} ({backend}, {date}; 32 query / 8 KV heads, head dim 128), "
     "two passes of each binary one after "
     "the other (`docs/data/{file}`, mean; visit 80): `200b24f` against `cd779de` (commit column `shared`), where "
     "attn_decode (fp16 pages, the baseline of every comparison) merges its splits with attn_decode_quant's merge "
     "kernel, now `cuda_backend/decode_merge.cu` (block reductions, four partials in flight, 32 channels per block "
     "while the rows are fewer than the SMs). Its own merge walked every split with one thread per channel: 18.7 "
     "µs at 1 × 32K under Nsight Compute (\"Where batch 1 goes\"). fp16 1.02-1.10× at batch 1 (1 × 32K 0.56 → "
     "0.62 of copy), 0.98-1.00× at batch 16; the quantized rows run the same kernel as before (0.998-1.014×).",
     ),
    ("bench_ops_ragged_merge_early_h200.csv",
     "### Experiment, not kept: the ragged merge's loads issued earlier (CUDA, H200, --cold)",
     "`bench_ops --cold --sweeps lowrank` on {device} ({backend}, {date}; 32 query / 8 KV heads, head dim 128), "
     "two passes of each binary one after the "
     "other (`docs/data/{file}`, mean; visit 76): `526300e` against `early` (`docs/data/ragged_merge_early.patch` "
     "on it): the merge kernel reads its first round's task ids before `griddepcontrol.wait` (they are the "
     "schedule, an input) and issues the first group of partial rows together with their lse, instead of after "
     "the lse's warp reductions. Ragged f16 and q4 1.00-1.04× at 4K, 128K and batch 16, but 0.97× (p50) and 0.99× "
     "(p70) at 1 × 32K in both passes; Palu 0.99-1.01×. Not kept.",
     ),
    ("bench_ops_dependent_launch_h200.csv",
     "### The same with the first placement, and warm against cold timing (CUDA, H200)",
     "`bench_ops --sweeps fp16,quant,lowrank` on {device} ({backend}, {date}; 32 query / 8 KV heads, head dim 128) "
     "(`docs/data/{file}`, visit 70): "
     "`f1c9137`'s binary with the dependent launch off (`-nodl+cold`) and on (`+cold`), both with `--cold`, two "
     "interleaved passes; then on without `--cold` (no suffix: the timing of every earlier table), one pass. "
     "`--cold` queues each timed run behind a 256 MiB device copy: the run's data leaves the L2 cache, and the GPU "
     "is busy while the host launches the run, so the CUDA events no longer include the host's launch latency. "
     "The two effects go opposite ways. At batch 1 × 32K the warm runs are faster (ragged f16 p70 0.0272 against "
     "0.0326 ms cold, fp16 0.0529 against 0.0566): the compressed cache of one 32K request (40 MB at p70) fits the "
     "H200's L2, so the warm timing of earlier tables read part of it from the cache. At 4K the cold runs of the "
     "quantized decodes are faster (launch latency). Batch-1 fractions of copy in earlier warm tables are therefore "
     "up to 20 % above the cold ones."),
]

_KERNELS = [("attn_decode_kernel", "fp16 decode"), ("attn_decode_merge_kernel", "fp16 merge"),
            ("attn_decode_quant_mma_kernel<128, 1", "quantized decode, channel scales (ZipCache)"),
            ("attn_decode_quant_mma_kernel<128, 0", "quantized decode (KIVI-2)"),
            ("attn_decode_quant_merge_kernel", "quantized merge"),
            ("attn_decode_ragged_q4_mma_kernel", "ragged q4 decode"),
            ("attn_decode_ragged_mma_kernel", "ragged f16 decode"), ("ragged_merge_kernel", "ragged merge")]
# bench_ops' case order in that run (one warm-up and two timed runs each): decode kernel, merge kernel.
_CASES = [("fp16", 32768), ("fp16", 131072), ("zipcache", 32768), ("zipcache", 131072), ("kivi2", 32768),
          ("kivi2", 131072), ("ragged f16 p50", 32768), ("ragged f16 p50", 131072), ("ragged f16 p70", 32768),
          ("ragged f16 p70", 131072), ("ragged q4 p70", 32768), ("ragged q4 p70", 131072)]


def _ncu_table(path):
    if not os.path.exists(path):
        return []
    rows = list(csv.DictReader([line for line in open(path) if line.startswith('"')]))
    if len(rows) != 6 * len(_CASES):
        return []
    out = ["### Where batch 1 goes: decode and merge kernels apart (Nsight Compute, H200)", "",
           "`ncu --metrics gpu__time_duration.sum` over `bench_ops --sweeps fp16,quant,lowrank --batches 1 --reps 2 "
           "--warmup 1` at `57476db` (32 query / 8 KV heads, head dim 128; "
           "`docs/data/ncu_decode_merge_batch1_h200.csv`, visit 72). Nsight Compute runs each kernel alone with "
           "its caches flushed, so a merge here reads from memory the partials that in a "
           "real step are still in L2, and by default it locks the clocks at the base frequency (the ZipCache decode "
           "kernel alone takes longer here than bench_ops' whole cold step). So these are upper bounds per kernel, "
           "not the step's time; what they show is the share of the merge: 13-25 % of a batch-1 ragged step, 11-29 % "
           "of the fp16 one. Mean of the three runs, µs.", "",
           "| cache | batch | context | decode kernel | merge kernel | grid (decode, merge) |",
           "|---|---|---|---|---|---|"]
    for i, (cache, ctx) in enumerate(_CASES):
        runs = rows[6 * i:6 * i + 6]
        dec = [float(r["Metric Value"].replace(",", "")) / 1000 for r in runs[0::2]]
        mrg = [float(r["Metric Value"].replace(",", "")) / 1000 for r in runs[1::2]]
        grid = f"{runs[0]['Grid Size']}, {runs[1]['Grid Size']}"
        out.append(f"| {cache} | 1 | {ctx} | {sum(dec) / 3:.1f} | {sum(mrg) / 3:.1f} | {grid} |")
    return out + [""]


def launch_section(data_dir):
    return commits_tables(data_dir, _TABLES) + _ncu_table(os.path.join(data_dir, "ncu_decode_merge_batch1_h200.csv"))
