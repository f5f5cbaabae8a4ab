"""Palu's decode on the tensor cores (docs/RESULTS.md, low-rank part), from
  bench_ops_palu_mma_h200.csv   visit 81: cd779de (the CUDA-core Palu kernel) against 22f1534 (commit column
                                `palu_mma`: the first tensor-core version; the f16 ragged decode refactored onto the
                                shared ragged_mma.cuh), --cold, two interleaved passes; decode_palu_x1 rows: 22f1534
                                at one worker per SM
  bench_ops_palu_mma2_h200.csv  visit 82: 22f1534 against c36d8df
  bench_ops_palu_mma3_h200.csv  visit 83: c36d8df against 6b4c13a
  bench_ops_palu_half2_h200.csv  visit 86: 899f34a against 29ed187
all on one NVIDIA H200 (docs/data/gpu_visits_2026-11-27.log). The end-to-end run of visit 83
(bench_e2e_palu_mma_h200.csv) is lowrank_section's.
"""
import os

from ocl_softmax_section import commits_tables
from results_data import read_dicts

_SHAPES = "32 query / 8 KV heads, head dim 128, full neox rotary; latent K / V widths of the p50 and p70 profiles"

_TABLES = [
    ("bench_ops_palu_mma_h200.csv",
     "### Palu's decode on the tensor cores (CUDA, H200, --cold, interleaved A/B)",
     "`bench_ops --cold --sweeps fp16,lowrank` on {device} ({backend}, {date}; " + _SHAPES + "), two passes of "
     "each binary one after the other (`docs/data/{file}`, mean; visit 81): `cd779de` (the CUDA-core kernel: "
     "k_width × head_dim FMAs per cached key and step) against `22f1534` (commit column `palu_mma`): "
     "`cuda_backend/attn_decode_palu_mma.cu` rebuilds each 16-token step's keys on the tensor cores, rotates "
     "them in registers and scores them with a second mma, as Palu's own kernel fuses reconstruction, RoPE and "
     "attention. Palu 3.4-13.4× faster. The f16 ragged rows (FDC / ZACK) check the refactor that moved their "
     "tile loop into `ragged_mma.cuh` for both kernels: 0.98-1.03×. At one worker per SM (the engine's choice for "
     "Palu, `decode_palu_x1` rows of the file) `22f1534` took {x1} ms at 16 × 32K p50 against {auto} at the "
     "backend's two per SM."),
    ("bench_ops_palu_mma2_h200.csv",
     "### The Palu tensor-core decode, second version (CUDA, H200, --cold, interleaved A/B)",
     "The same sweep ({date}, `docs/data/{file}`, two passes; visit 82): `22f1534` against `c36d8df`: the angle "
     "table's rows padded so that a warp's reads meet no bank twice (Nsight Compute's source counters of "
     "`22f1534`: 8-way conflicts on every table read), the angle reduced with a multiply instead of a double "
     "division, keys as one f16 operand instead of hi + lo (op tests: NMSE 3e-10 to 3e-8, budget 1e-6), 7 KiB "
     "stages. 1.18-1.32×. Executed instructions at 16 × 32K p50: 385 M → 332 M."),
    ("bench_ops_palu_mma3_h200.csv",
     "### The Palu tensor-core decode at the task's exact latent steps (CUDA, H200, --cold, interleaved A/B)",
     "The same sweep ({date}, `docs/data/{file}`, two passes; visit 83): `c36d8df` against `6b4c13a`, whose "
     "rebuild is compiled for each head's exact number of 16-dim latent steps (a bounded loop made every skipped "
     "step a predicated mma behind a WARPSYNC). 1.02-1.12× at batch 16 (332 M → 275 M instructions at 16 × 32K "
     "p50), but 0.83× (p50) and 0.91× (p70) at 1 × 4K, where a step takes 32-43 µs, and 0.97× at 1 × 128K "
     "p70. Kept for batch 16. At 16 × 32K "
     "p50 Palu now takes 0.79 ms, 2.6× the FDC (balanced f16) decode of visit 81 (0.30 ms): 0.32 of the copy "
     "bandwidth for bytes equal to FDC's, at 2 warps per scheduler and 0.42 instructions issued per cycle."),
    ("bench_ops_palu_half2_h200.csv",
     "### The Palu tensor-core decode with its neox rotation in f16x2 (CUDA, H200, --cold, interleaved A/B)",
     "The same sweep ({date}, `docs/data/{file}`, two passes; visit 86): `899f34a` (`6b4c13a`'s Palu kernel, the "
     "engine change and the shared tile loop) against `29ed187`, which rounds a rebuilt block to its f16 score "
     "operand first and rotates the neox pairs there, two per f16x2 operation (the angle sums stay fp32). Palu "
     "1.01-1.07× (16 × 32K p50 0.77 ms, 0.33 of copy); the f16 ragged rows (FDC / ZACK, unchanged) 0.99-1.01×. Op "
     "tests 7/7, then 9/9 with two cases of latents 80-128 wide added (visit 87): NMSE 5e-10 to 3e-8 on the "
     "earlier cases, 1.1e-7 (neox, rotated in f16x2) and 5.5e-8 (interleaved, fp32 rotation) on the wide ones; the "
     "budget is 1e-6."),
]


def _mean_ms(rows, op, batch, context, commit):
    v = [float(r["time_ms"]) for r in rows if r["op"] == op and r["batch"] == batch and r["context"] == context
         and r["commit"] == commit and r["time_ms"]]
    return f"{sum(v) / len(v):.3f}" if v else "–"


def palu_section(data_dir):
    rows = read_dicts(os.path.join(data_dir, _TABLES[0][0]))
    cells = {"x1": _mean_ms(rows, "decode_palu_x1_p50", "16", "32768", "palu_mma+cold"),
             "auto": _mean_ms(rows, "decode_palu_p50", "16", "32768", "palu_mma+cold")}
    # The first caption's two means; the {device}-style fields stay for commits_tables.
    first = _TABLES[0][2].replace("{x1}", cells["x1"]).replace("{auto}", cells["auto"])
    return commits_tables(data_dir, [(_TABLES[0][0], _TABLES[0][1], first)] + _TABLES[1:])
