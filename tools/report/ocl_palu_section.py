"""The OpenCL Palu decode's rework (docs/RESULTS.md, low-rank part), from
  bench_ops_ocl_palu_blocked_h200.csv  visit 90: 0dc56d0 (the kernel before), 8edd724 (keys in register blocks, the
                                       split angle; 64 work-items) and 8edd724-nt128 (the same at 128), --cold, two
                                       interleaved passes
  bench_ops_ocl_palu_scales_h200.csv   visit 91: b217780 (128 work-items, unrolled probabilities) at worker scales
                                       auto (then 1 per compute unit), 2, 4, 8; 8edd724-nt128 once
  bench_ops_ocl_palu_final_h200.csv    visit 92: a01b393 (8 per compute unit at auto) against 8edd724-nt128
all on one NVIDIA H200 through NVIDIA's OpenCL driver (docs/data/gpu_visits_2026-11-27.log). The end-to-end rows of
visits 91 and 92 (bench_e2e_ocl_palu_*_h200.csv) are lowrank_section's.
"""
import collections
import os
import re

from ocl_softmax_section import commits_tables
from results_data import read_dicts

_SHAPES = "32 query / 8 KV heads, head dim 128, full neox rotary; latent K / V widths of the p50 and p70 profiles"

_TABLES = [
    ("bench_ops_ocl_palu_blocked_h200.csv",
     "### The OpenCL Palu decode: keys built in register blocks (H200, NVIDIA's driver, interleaved A/B)",
     "`bench_ops --cold --sweeps lowrank` on {device} ({backend}, {date}; " + _SHAPES + "), two passes of each "
     "binary one after the other (`docs/data/{file}`, mean; visit 90). `0dc56d0` is the kernel before: each "
     "work-item summed one key element at a time from local memory, B_c was reloaded into local memory in 16-row "
     "chunks per tile, and every rotated pair took an fp64 sincos. `8edd724` builds keys in blocks of 8 tokens × 4 "
     "dims per work-item (latents transposed in local memory, one 16-byte read per latent row; B_c read through "
     "L1) and splits the angle into an fp64 base per tile and frequency and an fp32 offset, at 64 work-items; "
     "`8edd724-nt128` is the same at 128 work-items, which `b217780` adopted. Palu 1.7-2.0× at 64 and 3.5-4.4× at "
     "128; the balanced f16 rows (kernel unchanged) 0.99-1.01×. Op tests 9/9 on the driver with a fresh program "
     "cache (NMSE ≤ 1.3e-13). The private-memory guard reports the Palu kernel before and after (the new "
     "programs' PTX: 16 ld.local / 11 st.local; the old one's: 9 / 6)."),
    ("bench_ops_ocl_palu_final_h200.csv",
     "### The final OpenCL Palu decode (H200, NVIDIA's driver)",
     "`bench_ops --cold` on {device} ({backend}, {date}, `docs/data/{file}`, one pass each; visit 92; " + _SHAPES
     + "): `a01b393` (128 work-items, the "
     "schedule cut for 8 × the compute units, the bench's auto as the engine's) against `8edd724-nt128` (one per "
     "compute unit); `a01b393` ran first, so the last column is the new time over the old (below 1: faster). Op "
     "tests 9/9 on the driver with a fresh cache."),
]


def _scales_table(rows):
    """Palu rows of one commit at worker scales: ms per scale and 1 x over 8 x."""
    t = collections.defaultdict(dict)
    for r in rows:
        m = re.fullmatch(r"decode_palu(?:_x(\d+))?_(p\d+)", r["op"])
        if m and r["commit"].startswith("b217780") and r["time_ms"]:
            t[(m.group(2), int(r["batch"]), int(r["context"]))][int(m.group(1) or 1)] = float(r["time_ms"])
    if not t:
        return []
    other = {}
    for r in rows:
        if r["op"] in ("decode_palu_p50", "decode_palu_p70") and not r["commit"].startswith("b217780"):
            other[(r["op"][-3:], int(r["batch"]), int(r["context"]))] = float(r["time_ms"])
    out = ["### The OpenCL Palu decode's workers per compute unit (H200, NVIDIA's driver)", "",
           f"`bench_ops --cold --worker-scales auto,2,4,8` ({rows[0]['date'][:10]}, "
           "`docs/data/bench_ops_ocl_palu_scales_h200.csv`, one pass; visit 91; the shapes of the table above) of "
           "`b217780`: the 128-work-item "
           "kernel with the Palu rows' schedule cut for 1 (auto then), 2, 4 and 8 × the compute units. 8 was faster "
           "than 1 at every point but one (1 × 4K p50, 1 %), so `a01b393` made it the OpenCL auto, as for the ragged "
           "decode. `b217780` also computed the probabilities by token with the heads unrolled, which cut the "
           "PTX's private-memory traffic to 9 ld.local / 6 st.local; the same visit timed `8edd724-nt128` once "
           "(last column), and as p50 was 3-20 % slower with it (p70 1-6 % faster), `a01b393` reverted that part.",
           "", "| profile | batch | context | × 1 ms | × 2 | × 4 | × 8 | × 1 / × 8 | `8edd724-nt128` × 1 |",
           "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(t):
        v = t[key]
        cells = " | ".join(f"{v[s]:.3f}" if s in v else "–" for s in (1, 2, 4, 8))
        ratio = f"{v[1] / v[8]:.2f}×" if 1 in v and 8 in v else "–"
        o = f"{other[key]:.3f}" if key in other else "–"
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {cells} | {ratio} | {o} |")
    return out + [""]


def ocl_palu_section(data_dir):
    blocked, final = _TABLES
    return (commits_tables(data_dir, [blocked])
            + _scales_table(read_dicts(os.path.join(data_dir, "bench_ops_ocl_palu_scales_h200.csv")))
            + commits_tables(data_dir, [final]))
