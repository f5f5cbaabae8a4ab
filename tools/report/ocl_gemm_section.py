"""OpenCL's decode GEMMs on NVIDIA's tensor cores (kvc_gemv_mma), end to end, from
  bench_e2e_ocl_gemv_mma_h100.csv    kvcomp bench --method none on opencl:1, bb40aea (kvc_gemv_small_m)
                                     against f1d79a3 (kvc_gemv_mma), one run each, one visit (98), H100
  bench_e2e_ocl_gemv_mma_u_h200.csv  the same, f1d79a3 against 4d84c80 (U chunks in flight), visit 99, H200
The kernel-level timings are in docs/data/ocl_gemv_h100.log, ocl_gemv_u_h200.log and
docs/kernel_notes.md. Every number here is read from the CSVs.
"""
from results_data import commits_in_order, provenance

SOURCE = "bench_e2e_ocl_gemv_mma_h100.csv"
SOURCE_U = "bench_e2e_ocl_gemv_mma_u_h200.csv"
SOURCES = (SOURCE, SOURCE_U)


def _ab_table(rows):
    commits = commits_in_order(rows)
    if len(commits) != 2:
        return []
    old, new = commits
    cell = {(r["commit"], int(r["batch"]), int(r["context"]), r["metric"]): float(r["value"]) for r in rows}
    out = [f"| batch | prompt | TTFT ms `{old}` / `{new}` | TBT ms `{old}` / `{new}` | old / new TBT |",
           "|---|---|---|---|---|"]
    for b, ctx in sorted({(k[1], k[2]) for k in cell}):
        try:
            to, tn = cell[(old, b, ctx, "tbt_ms")], cell[(new, b, ctx, "tbt_ms")]
            fo, fn = cell[(old, b, ctx, "ttft_ms")], cell[(new, b, ctx, "ttft_ms")]
        except KeyError:
            continue
        out.append(f"| {b} | {ctx} | {fo:.1f} / {fn:.1f} | {to:.3f} / {tn:.3f} | {to / tn:.2f}× |")
    return out + [""]


def ocl_gemm_section(results):
    rows = [r for r in results if r["source"] == SOURCE]
    commits = commits_in_order(rows)
    if len(commits) != 2:
        return []
    old, new = commits
    out = ["### OpenCL decode GEMMs on the tensor cores (NVIDIA's driver)", "",
           f"`kvcomp bench --method none --gen 16 --prompts 512` at Llama-3-8B shapes with random f16 weights on "
           f"{provenance(rows)} (`docs/data/{SOURCE}`, one run of each binary, `docs/data/gpu_visits_2026-11-27.log` "
           f"visit 98). `{old}` runs the decode's weight products (2..16 rows of f32 activations against f16 "
           f"weights) with `kvc_gemv_small_m` on the CUDA cores; `{new}` with `kvc_gemv_mma` (inline PTX "
           "mma.sync, activations split hi + 2^-11 lo in f16 as the CUDA backend's mixed gemm; one row stays on "
           "the old kernel). The kernels alone are timed in `docs/data/ocl_gemv_h100.log` (docs/kernel_notes.md, "
           "\"Decode GEMMs at batch 16\").", ""] + _ab_table(rows)
    u = [r for r in results if r["source"] == SOURCE_U]
    if len(commits_in_order(u)) == 2:
        cu = commits_in_order(u)
        out += [f"Then with each warp's loads of U = 4 chunks (2 where K % 512 != 0) issued before the first is "
                f"used (`{cu[1]}`), against `{cu[0]}` on {provenance(u)} (`docs/data/{SOURCE_U}`, one run each, "
                "visit 99; another card than the table above, so both binaries ran again):", ""] + _ab_table(u)
    return out
