"""OpenCL's prefill on NVIDIA's tensor cores (kvc_gemm_mma, attn_prefill with PREFILL_MMA) and what it changes
end to end, from
  bench_ops_ocl_mma_h200.csv           bench_ops -o gemm on opencl:1 at 76818fc, then the same binary with
                                       KVCOMP_CL_TENSOR_CORES=0 (commit suffixed +no_tensor_cores), then cuda:0
                                       (visit 103; its opencl prefill rows are the faulting first version)
  bench_ops_ocl_prefill_mma_h200.csv   bench_ops --prefill on opencl:1 at 2b9c436, then KVCOMP_CL_PREFILL_MMA=0
                                       (+prefill_mma_off), visit 105
  bench_e2e_ocl_gemm_mma_h200.csv      kvcomp bench none, tensor-core GEMMs on and off (visit 102, 5d112ba)
  bench_e2e_ocl_methods_h200.csv       kvcomp bench of every method on opencl:1 at 4K (visit 104, 27956da: the
                                       tensor-core GEMMs, the CUDA-core prefill attention)
  bench_e2e_ocl_prefill_mma_h200.csv   kvcomp bench none at 4K with the tensor-core prefill (visit 105)
Every number here is read from the CSVs.
"""
import os

from results_data import provenance, read_dicts

OPS_GEMM = "bench_ops_ocl_mma_h200.csv"
OPS_PREFILL = "bench_ops_ocl_prefill_mma_h200.csv"
E2E_GEMM = "bench_e2e_ocl_gemm_mma_h200.csv"
E2E_METHODS = "bench_e2e_ocl_methods_h200.csv"
E2E_PREFILL = "bench_e2e_ocl_prefill_mma_h200.csv"
SOURCES = (E2E_GEMM, E2E_METHODS, E2E_PREFILL)


def _ms(r):
    return float(r["time_ms"]) if r["time_ms"] else None


def _ops_table(rows, op, off_suffix, header_off):
    """Per shape of `op`: opencl with the tensor-core kernel, opencl without (commit + off_suffix), cuda."""
    cell = {}
    for r in rows:
        if r["op"] != op or _ms(r) is None:
            continue
        kind = "cuda" if r["backend"].startswith("cuda") else "off" if r["commit"].endswith(off_suffix) else "on"
        cell[(r["shape"], kind)] = r
    shapes = list(dict.fromkeys(s for s, k in cell if k == "on"))
    out = [f"| shape | OpenCL, tensor cores ms (TFLOP/s) | OpenCL, {header_off} ms | speed-up | CUDA ms |",
           "|---|---|---|---|---|"]
    for s in shapes:
        on, off, cu = cell.get((s, "on")), cell.get((s, "off")), cell.get((s, "cuda"))
        tf = float(on["gflops"]) / 1000.0
        off_cells = f"{_ms(off):.4g} | {_ms(off) / _ms(on):.1f}×" if off else "– | –"
        out.append(f"| `{s}` | {_ms(on):.4g} ({tf:.0f}) | {off_cells} | {f'{_ms(cu):.4g}' if cu else '–'} |")
    return out + [""]


def _e2e(rows):
    """(commit, method label, batch, prompt) -> {metric: value} of the point's first run."""
    out = {}
    for r in rows:
        label = r["method"] + (" " + r["method_opts"].split("compression=")[-1] if "compression=" in r["method_opts"]
                               else "")
        out.setdefault((r["commit"], label, int(r["batch"]), int(r["context"])), {}).setdefault(r["metric"],
                                                                                              float(r["value"]))
    return out  # a point run twice keeps its first run


def ocl_tensor_core_section(d):
    gemm_ops = read_dicts(os.path.join(d, OPS_GEMM))
    prefill_ops = read_dicts(os.path.join(d, OPS_PREFILL))
    if not gemm_ops or not prefill_ops:
        return []
    out = ["### OpenCL prefill on the tensor cores (NVIDIA's driver)", "",
           "The prefill's weight products (`kvc_gemm_mma`, more than 16 rows against f16 weights) and its causal "
           "attention (`attn_prefill.cl` with `PREFILL_MMA`) run on the tensor cores through inline PTX mma.sync "
           "where NVIDIA's driver takes it (other drivers keep the CUDA-core kernels). Each figure is next to the "
           "same binary with that kernel switched off (`KVCOMP_CL_TENSOR_CORES=0` for the GEMMs, "
           "`KVCOMP_CL_PREFILL_MMA=0` for the attention) in the same visit; CUDA (cuBLAS / the CUDA prefill kernel) "
           "of the same visit for reference. Llama-3-8B shapes; an f32 A is split hi + 2^-11 lo in f16 (two "
           "products), an f16 A (the engine's matmul inputs with f16 weights) is used as it is.", "",
           f"GEMMs, `bench_ops -o gemm` on {provenance([r for r in gemm_ops if r['op'] == 'gemm'])} "
           f"(`docs/data/{OPS_GEMM}`; the tile shapes tried are in `docs/data/ocl_gemm_mma_tiles_h200.log`):", ""]
    out += _ops_table(gemm_ops, "gemm", "+no_tensor_cores", "CUDA cores")
    rows = [r for r in prefill_ops if r["op"] in ("prefill_fp16", "attn_prefill")]
    out += [f"Causal prefill attention, `bench_ops --prefill 1x4K,16x4K,1x32K` on {provenance(rows)} "
            f"(`docs/data/{OPS_PREFILL}`; CUDA column: `docs/data/{OPS_GEMM}`, the visit before, same card type):",
            ""]
    cuda = {r["shape"]: r for r in gemm_ops if r["backend"].startswith("cuda") and r["op"] in ("prefill_fp16",
                                                                                               "attn_prefill")}
    out += _ops_table(rows + list(cuda.values()), "prefill_fp16", "+prefill_mma_off", "CUDA cores")
    out += ["The low-rank prefill (`prefill_lowrank_*` rows of the same file, `attn_prefill_ragged`) still runs "
            "on the CUDA cores on OpenCL.", ""]

    g = {}
    for r in read_dicts(os.path.join(d, E2E_GEMM)):
        g.setdefault((r["backend"], r["commit"], int(r["batch"]), int(r["context"])), {})[r["metric"]] = float(r["value"])
    if g:
        out += ["End to end, `kvcomp bench --method none --gen 16` at Llama-3-8B shapes with random f16 weights "
                f"(`docs/data/{E2E_GEMM}`, visit 102; the GEMMs' tensor-core kernels on and off, the prefill "
                "attention on the CUDA cores in both; one run each):", "",
                "| backend | commit | batch | prompt | GEMMs | TTFT ms | TBT ms |", "|---|---|---|---|---|---|---|"]
        for (be, c, b, pr), v in sorted(g.items(), key=lambda kv: (kv[0][3], kv[0][2], kv[0][0], kv[0][1])):
            kind = "cuBLAS" if be.startswith("cuda") else "CUDA cores" if c.endswith("+no_tensor_cores") else "tensor cores"
            out.append(f"| {be} | `{c.split('+')[0]}` | {b} | {pr} | {kind} | {v['ttft_ms']:.0f} | {v['tbt_ms']:.2f} |")
        out.append("")

    m = _e2e(read_dicts(os.path.join(d, E2E_METHODS)))
    if m:
        mrows = read_dicts(os.path.join(d, E2E_METHODS))
        out += [f"The KV methods on NVIDIA's OpenCL driver with the tensor-core GEMMs, {provenance(mrows)} "
                f"(`docs/data/{E2E_METHODS}`, visit 104; prefill attention still on the CUDA cores; none ran first and "
                "last; fdc / palu at p = 0.5 from calibrations of 8192 random token ids on the random-weight model; "
                "kivi 2-bit groups of 32 with 32 fp16 tokens; zipcache 4/2-bit blocks of 100):", "",
                "| method | batch | prompt | TTFT ms | TBT ms | TBT / none |", "|---|---|---|---|---|---|"]
        base = {}
        for (c, label, b, p), v in m.items():
            if label == "none":
                base.setdefault((b, p), v["tbt_ms"])
        seen = set()
        for r in mrows:
            label = r["method"] + (" " + r["method_opts"].split("compression=")[-1]
                                   if "compression=" in r["method_opts"] else "")
            key = (r["commit"], label, int(r["batch"]), int(r["context"]))
            if key in seen:
                continue
            seen.add(key)
            v = m[key]
            out.append(f"| {label} | {key[2]} | {key[3]} | {v['ttft_ms']:.0f} | {v['tbt_ms']:.2f} | "
                       f"{v['tbt_ms'] / base[(key[2], key[3])]:.2f} |")
        last = {(int(r["batch"]), int(r["context"])): float(r["value"]) for r in mrows
                if r["method"] == "none" and r["metric"] == "tbt_ms"}
        out += ["", "none's second run (the last of the visit): TBT " +
                ", ".join(f"{v:.2f} ms at {b} × {pr}" for (b, pr), v in sorted(last.items())) + "."]
        out.append("")
        fdc, palu = m.get((mrows[0]["commit"], "fdc 0.5", 16, 4096)), m.get((mrows[0]["commit"], "palu 0.5", 16, 4096))
        if fdc and palu:
            out += [f"At 16 × 4K on OpenCL, Palu's TBT is {palu['tbt_ms'] / fdc['tbt_ms']:.2f}× FDC's (one run each; "
                    "where Palu's step goes on OpenCL was not profiled).", ""]

    p = _e2e(read_dicts(os.path.join(d, E2E_PREFILL)))
    if p and m:
        out += [f"The same none points with the tensor-core prefill attention as well (`docs/data/{E2E_PREFILL}`, "
                "visit 105, the next visit: one run):", "", "| batch | prompt | TTFT ms, visit 104 | TTFT ms, visit 105 "
                "| TBT ms, visit 104 | TBT ms, visit 105 |", "|---|---|---|---|---|---|"]
        c104 = read_dicts(os.path.join(d, E2E_METHODS))[0]["commit"]
        for (c, label, b, pr), v in sorted(p.items(), key=lambda kv: kv[0][2]):
            old = m.get((c104, "none", b, pr))
            if old:
                out.append(f"| {b} | {pr} | {old['ttft_ms']:.0f} | {v['ttft_ms']:.0f} | {old['tbt_ms']:.2f} | "
                           f"{v['tbt_ms']:.2f} |")
        out.append("")
    return out
