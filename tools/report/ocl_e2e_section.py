"""Every method end to end on NVIDIA's OpenCL driver at 4K to 128K (docs/RESULTS.md), from
  bench_e2e_ocl_32k_h200.csv  kvcomp bench --random-weights on opencl:1 (visit 109): none, kivi, zipcache, zipcache
                              ratio=0, and zack / fdc / palu at p = 0.5 and 0.7, batches 1 and 16 at 4K and 32K and
                              1 × 128K (p = 0.5 only): the grid of the CUDA run bench_e2e_batch16_h200.csv (visit 89);
  bench_e2e_ocl_projection_h200.csv  the same after head_project's two kernels and probe_scores on the tensor
                              cores (visit 110): none, fdc p = 0.5, zipcache (also with KVCOMP_CL_PROBE_MMA=0, the
                              commit label's +probe_mma_off), zipcache ratio=0;
  bench_e2e_ocl_quant_warps_h100.csv  none, kivi and zipcache with the per-warp tensor-core quantized decode
                              (kvc_adq_warps) and with the work-group kernel (KVCOMP_CL_QUANT_WARPS=0, the commit
                              label's +workgroup), batches 1 and 16 at 4K and 16K and 1 × 32K (visit 113, an H100);
  bench_e2e_ocl_quant_warps_16x32k_h200.csv  none, kivi, zipcache and zipcache ratio=0 at 16 × 32K with the
                              per-warp decode (visit 115, an H200);
  bench_e2e_ocl_bulk_16x32k_h200.csv  none, zipcache (its decode with bulk copies) and fdc p = 0.5 at 16 × 32K
                              (visit 119, an H200);
  bench_e2e_ocl_ragged_warps_16x32k_h200.csv  none, fdc p = 0.5 with the per-warp tensor-core ragged decode
                              (kvc_adr_warps) and with the work-group kernel (KVCOMP_CL_RAGGED_WARPS=0, +workgroup),
                              zack p = 0.5, at 16 × 32K (visits 123-124, an H200);
  bench_e2e_ocl_ragged_warps_1x32k_h200.csv  none, fdc and palu p = 0.5 at 1 × 32K with it (visit 126);
  bench_e2e_lowrank_q4_16x32k_h200.csv  fdc p = 0.5 with 4-bit pages (kv_bits=4, kvc_adr_q4_warps), none and fdc
                              with f16 pages at 16 × 32K on opencl:1, then fdc kv_bits=4 on cuda:0 (the call's time
                              ran out before CUDA's none and f16 pages; visit 129);
  bench_e2e_ocl_palu_warps_h200.csv  palu (its decode on kvc_adp_warps) and fdc p = 0.5 at 1 × 32K, palu at
                              16 × 32K (fdc's run there was cut by the call's limit; visit 130);
  bench_e2e_ocl_decode_warps_h200.csv  none (the fp16 decode on kvc_attn_decode_warps, and with
                              KVCOMP_CL_DECODE_WARPS=0), fdc and palu p = 0.5 at 16 × 32K (visit 131);
  bench_e2e_cuda_16x32k_h200.csv  none, fdc and palu p = 0.5 at 16 × 32K on cuda:0 (visit 131, the same machine);
  bench_e2e_ocl_quant_16x32k_h200.csv  zipcache and kivi (defaults) at 16 × 32K on opencl:1 (visit 133; its none
                              was cut by the device time left);
one H200 (docs/data/gpu_visits_2026-11-27.log) unless named. A point may be missing (a run that timed out): its cells read "–"
and the caption lists it. Every number here is read from the CSV.
"""
import os

from results_data import num, opts, provenance, read_dicts

SOURCE = "bench_e2e_ocl_32k_h200.csv"
PROJECTION_SOURCE = "bench_e2e_ocl_projection_h200.csv"
WARPS_SOURCE = "bench_e2e_ocl_quant_warps_h100.csv"
WARPS_16X32K_SOURCE = "bench_e2e_ocl_quant_warps_16x32k_h200.csv"
BULK_16X32K_SOURCE = "bench_e2e_ocl_bulk_16x32k_h200.csv"
RAGGED_16X32K_SOURCE = "bench_e2e_ocl_ragged_warps_16x32k_h200.csv"
RAGGED_1X32K_SOURCE = "bench_e2e_ocl_ragged_warps_1x32k_h200.csv"
Q4_16X32K_SOURCE = "bench_e2e_lowrank_q4_16x32k_h200.csv"
PALU_WARPS_SOURCE = "bench_e2e_ocl_palu_warps_h200.csv"
DECODE_WARPS_SOURCE = "bench_e2e_ocl_decode_warps_h200.csv"
CUDA_16X32K_SOURCE = "bench_e2e_cuda_16x32k_h200.csv"
QUANT_16X32K_SOURCE = "bench_e2e_ocl_quant_16x32k_h200.csv"
# A tuple, as the other modules' (make_results.py adds them up).
SOURCES = (SOURCE, PROJECTION_SOURCE, WARPS_SOURCE, WARPS_16X32K_SOURCE, BULK_16X32K_SOURCE, RAGGED_16X32K_SOURCE,
           RAGGED_1X32K_SOURCE, Q4_16X32K_SOURCE, PALU_WARPS_SOURCE, DECODE_WARPS_SOURCE, CUDA_16X32K_SOURCE,
           QUANT_16X32K_SOURCE)
ORDER = ("none", "kivi", "zipcache", "zack", "fdc", "palu")
# The visit's plan, only to name the points that did not come back; the table shows what the CSV holds.
_PROMPTS = {1: (4096, 32768, 131072), 16: (4096, 32768)}
_PLAN = ([("none", "")] + [(m, "") for m in ("kivi", "zipcache")] + [("zipcache", "ratio=0")]
         + [(m, f"p={p}") for m in ("zack", "fdc", "palu") for p in ("0.5", "0.7")])


def _shown(method_opts):
    """The options column: compression=P as p=P, the calibration file left out (it names the method again)."""
    o = opts(method_opts)
    o.pop("calib", None)
    return ";".join(("p=" + v) if k == "compression" else f"{k}={v}" for k, v in o.items())


def _points(rows):
    """{(method, options shown, batch, prompt): {metric: value}}; a point run twice keeps its first run, and an
    empty cell (not measured) is left out. A commit label's "+suffix" (a run of the same binary with a
    switch, e.g. +probe_mma_off) joins the options."""
    out = {}
    for r in rows:
        shown = ";".join(x for x in (_shown(r["method_opts"]), r["commit"].partition("+")[2]) if x)
        key = (r["method"], shown, int(r["batch"]), int(r["context"]))
        if num(r["value"]) is not None:
            out.setdefault(key, {}).setdefault(r["metric"], num(r["value"]))
    return out


def _order(key):
    m, shown, b, ctx = key
    return (ORDER.index(m) if m in ORDER else len(ORDER), m, shown, b, ctx)


def _ratios(pts, top, den, metric):
    """[(batch, prompt, ratio)] of top = (method, options) over den at every point where both have the metric."""
    out = []
    for key in sorted(k for k in pts if k[:2] == top):
        a, z = pts[key].get(metric), pts.get(den + key[2:], {}).get(metric)
        if a is not None and z:
            out.append((key[2], key[3], a / z))
    return out


def _judged(pts, top, den, metric, ok):
    """[(label, ratio, met)] of top over den at every point (_ratios), met = ok(ratio) (None: not judged)."""
    return [(f"{b} × {c}", r, ok(r)) for b, c, r in _ratios(pts, top, den, metric)]


def _saliency(pts, top=("zipcache", "")):
    """[(label, ratio, met)] of top's TTFT over zipcache ratio=0's (what saliency estimation adds; target 1.10)."""
    return _judged(pts, top, ("zipcache", "ratio=0"), "ttft_ms", lambda r: r <= 1.10)


def _summary(title, target, parts):
    """'<title> (<target>; met at k of n): label: ratio; ...' of [(label, ratio, met)]; met is None at a point the
    target does not cover."""
    if not parts:
        return []
    judged = [ok for _, _, ok in parts if ok is not None]
    met = f"; met at {sum(judged)} of {len(judged)}" if judged else ""
    return [f"{title} ({target}{met}): "
            + "; ".join(f"{label}: {r:.3f}" for label, r, _ in parts) + ".", ""]


def _opening(data_dir, source, title, text):
    """(points, [title, caption]) of a kvcomp bench CSV, or None when it is missing or empty. The caption opens
    with the run's provenance and the file's name; `text` follows the file's name."""
    rows = read_dicts(os.path.join(data_dir, source))
    if not rows:
        return None
    return _points(rows), [title, "", f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {provenance(rows)} "
                                      f"(`docs/data/{source}`" + text, ""]


def _table(pts):
    """The points' table: TTFT, TBT and KV bytes, each also over none's row of the same batch and prompt."""
    out = ["| method | options | batch | prompt | TTFT ms | TTFT / none | TBT ms | TBT / none | KV bytes | KV / none "
           "| TBT / floor |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(pts, key=_order):
        m, shown, b, ctx = key
        v, n = pts[key], pts.get(("none", "", b, ctx), {})

        def cell(metric, f):
            return format(v[metric], f) if metric in v else "–"

        def rel(metric):
            return f"{v[metric] / n[metric]:.2f}" if metric in v and n.get(metric) else "–"

        out.append(f"| {m} | {shown} | {b} | {ctx} | {cell('ttft_ms', '.0f')} | {rel('ttft_ms')} | "
                   f"{cell('tbt_ms', '.2f')} | {rel('tbt_ms')} | {cell('kv_bytes_batch', '.4g')} | "
                   f"{rel('kv_bytes_batch')} | {cell('tbt_over_floor', '.2f')} |")
    out.append("")
    return out


def ocl_e2e_section(data_dir):
    rows = read_dicts(os.path.join(data_dir, SOURCE))
    if not rows:
        return []
    pts = _points(rows)
    gens = sorted({opts(r["task_opts"]).get("gen", "–") for r in rows})
    missing = [f"{m}{' ' + s if s else ''} {b} × {c}" for m, s in _PLAN for b, prompts in _PROMPTS.items()
               for c in prompts if (m, s, b, c) not in pts and not (s in ("p=0.7", "ratio=0") and c == 131072)]
    out = ["### The methods end to end on NVIDIA's OpenCL driver, 4K to 128K (kvcomp bench, H200)", "",
           f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {provenance(rows)} (`docs/data/{SOURCE}`; "
           "`docs/data/gpu_visits_2026-11-27.log`, visit 109): the grid of CUDA's visit 89 (\"Quantized caches end to "
           "end at batch 16 × 32K\" above, \"End to end at batch 16 × 32K\" in the low-rank part), batches 1 and "
           "16 at 4K and 32K and 1 × 128K, "
           f"{' / '.join(gens)} generated tokens; 16 × 32K prefilled four prompts at a time with "
           "`--prefill-tokens 131072`. zack, fdc and palu load calibrations made on cuda:0 from 8192 random token "
           "ids at p = 0.5, their ranks re-chosen at load for compression p (p = 0.7 at 4K and 32K only); the other "
           "methods at their defaults (kivi: 2 bits, groups of 32, 32 residual tokens; zipcache: ratio 0.4 of 4/2 "
           "bits, blocks of 100, probes 5 % recent + 5 % random; `ratio=0`, at 4K and 32K only: the same quantizer "
           "without saliency estimation); none in the same visit. \"/ none\": over none's row of the same batch and prompt in this "
           "file; KV bytes: the batch's cache at its last step; floor = (weight bytes + the batch's KV bytes) / "
           "the copy bandwidth of the run."
           + (f" Not in the file (timed out or not run): {', '.join(missing)}." if missing else ""), ""]
    out += _table(pts)

    # Palu's TBT over FDC's at the same p (above 1: FDC is faster); the issue's target covers the 32K points only.
    ps = sorted({shown for m, shown, _, _ in pts if m in ("zack", "fdc", "palu")})
    palu = [(f"{p}, {b} × {c}", r, r >= 1.5 if c == 32768 else None)
            for p in ps for b, c, r in _ratios(pts, ("palu", p), ("fdc", p), "tbt_ms")]
    out += _summary("Palu TBT over FDC TBT, FDC's speed-up over Palu", "the issue's target: ≥ 1.5 at 32K", palu)
    if palu:
        out += ["OpenCL's Palu decode rebuilds and rotates its keys on the CUDA cores (`attn_decode_palu.cl`), while "
                "CUDA's runs on the tensor cores, so these ratios are larger than CUDA's at the same points "
                "(\"End to end at batch 16 × 32K\" in the low-rank part).", ""]
    proj = [(f"{m} {p}, {b} × {c}", r, r <= 1.05)
            for m in ("zack", "fdc") for p in ps for b, c, r in _ratios(pts, (m, p), ("none", ""), "ttft_ms")]
    out += _summary("ZACK and FDC TTFT over none's, the online projection's overhead", "target ≤ 1.05", proj)
    out += _summary("ZipCache TTFT over zipcache ratio=0, what saliency estimation adds", "target ≤ 1.10",
                    _saliency(pts))
    return out


def ocl_projection_section(data_dir):
    """Visit 110: the online projection (head_project) and the saliency pass (probe_scores) on NVIDIA's OpenCL
    driver after their rework, against none and zipcache ratio=0 of the same visit; the probe pass on the CUDA
    cores again by KVCOMP_CL_PROBE_MMA=0 in the same binary."""
    rows = read_dicts(os.path.join(data_dir, PROJECTION_SOURCE))
    if not rows:
        return []
    pts = _points(rows)
    before = _points(read_dicts(os.path.join(data_dir, SOURCE)))  # visit 109, the section above

    def span(top, den, metric, b=None):
        """'lo-hi' of top over den at visit 109's points (of batch b if given)."""
        rs = [r for bb, _, r in _ratios(before, top, den, metric) if b is None or bb == b]
        return f"{min(rs):.2f}-{max(rs):.2f}" if rs else "–"

    out = ["### The online projection and the saliency pass on NVIDIA's OpenCL driver, reworked (kvcomp bench, H200)",
           "",
           f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {provenance(rows)} (`docs/data/"
           f"{PROJECTION_SOURCE}`; `docs/data/gpu_visits_2026-11-27.log`, visit 110). Visit 109 (the table above) "
           "found both passes slow on this driver (op profiles at 1 × 32K: `docs/data/ocl_profile_1x32k_h200.log`). "
           "`head_project` ran one work-item per output column, a chain of dependent global loads: fdc's TTFT was "
           f"{span(('fdc', 'p=0.5'), ('none', ''), 'ttft_ms')} × none's and its TBT "
           f"{span(('fdc', 'p=0.5'), ('none', ''), 'tbt_ms', 1)} × at batch 1. ZipCache's `probe_scores` ran on "
           "the CUDA cores with every key in private memory: TTFT "
           f"{span(('zipcache', ''), ('zipcache', 'ratio=0'), 'ttft_ms')} × the same quantizer without saliency. "
           "Now `head_project` runs CUDA's two kernels (a tiled SGEMM per head; a k-split kernel for up to 64 "
           "tokens) and the column sums run on the tensor cores (`PROBE_MMA`); `probe_mma_off` rows run the "
           "CUDA-core column sums of the same binary (`KVCOMP_CL_PROBE_MMA=0`). Op profiles of this binary at 1 × "
           "32K: `docs/data/ocl_profile_projection_1x32k_h200.log`. fdc at p = 0.5 with a calibration of 8192 "
           "random tokens made on cuda:0 in the same visit; 16 generated tokens; 16 × 32K prefilled four prompts "
           "at a time (`--prefill-tokens 131072`) for none and zipcache only (the device time ran out before "
           "zipcache ratio=0 and fdc there). \"/ none\": over none's row of the same batch and prompt in this file.",
           ""]
    out += _table(pts)
    proj = _judged(pts, ("fdc", "p=0.5"), ("none", ""), "ttft_ms", lambda r: r <= 1.05)
    out += _summary("FDC TTFT over none's, the online projection's overhead", "target ≤ 1.05", proj)
    tbt = _judged(pts, ("fdc", "p=0.5"), ("none", ""), "tbt_ms", lambda r: None)
    out += _summary("FDC TBT over none's", "visit 109: 1.20-1.25 at batch 1, 1.10 at 16 × 4K", tbt)
    for label, top in (("tensor cores", ("zipcache", "")), ("CUDA cores (probe_mma=0)", ("zipcache", "probe_mma_off"))):
        out += _summary(f"ZipCache TTFT over zipcache ratio=0 with the column sums on the {label}",
                        "target ≤ 1.10", _saliency(pts, top))
    # 16 x 32K, where ratio=0 did not run in this visit: each over none of its own visit.
    now = _ratios(pts, ("zipcache", ""), ("none", ""), "ttft_ms")
    then = _ratios(before, ("zipcache", "ratio=0"), ("none", ""), "ttft_ms")
    at = [(r, q) for b, c, r in now if (b, c) == (16, 32768) for bb, cc, q in then if (bb, cc) == (16, 32768)]
    if at:
        out += [f"At 16 × 32K, TTFT over none's of the same visit: zipcache {at[0][0]:.3f} (this visit), zipcache "
                f"ratio=0 {at[0][1]:.3f} (visit 109).", ""]
    return out


def ocl_quant_warps_section(data_dir):
    """Visit 113: kivi and zipcache end to end with either OpenCL quantized decode, none in the same visit."""
    opened = _opening(data_dir, WARPS_SOURCE,
                      "### The quantized caches end to end with the per-warp decode on NVIDIA's OpenCL driver (kvcomp "
                      "bench, H100)",
                      ", its printed tables in `docs/data/bench_e2e_ocl_quant_warps_h100.log`; "
                      "`docs/data/gpu_visits_2026-11-28.log`, visit 113): kivi and zipcache at their defaults with "
                      "the quantized decode of \"The OpenCL quantized decode with per-warp streams on the tensor "
                      "cores\" (`kvc_adq_warps`) and, in the `workgroup` rows, the same binary with "
                      "`KVCOMP_CL_QUANT_WARPS=0`; none in the same visit; 16 generated tokens. Batches 1 and 16 at 4K "
                      "and 16K and 1 × 32K; 16 × 32K is left out here, as none's cache there (64 GiB) does not fit "
                      "beside the weights on an H100 (it follows, on an H200). \"/ none\": over none's row of the same "
                      "batch and prompt in this file.")
    if not opened:
        return []
    pts, out = opened
    out += _table(pts)
    for m in ("kivi", "zipcache"):
        parts = _judged(pts, (m, "workgroup"), (m, ""), "tbt_ms", lambda r: None)
        out += _summary(f"{m} TBT with the work-group kernel over its TBT with the per-warp kernel", "same binary",
                        parts)
    big = read_dicts(os.path.join(data_dir, WARPS_16X32K_SOURCE))
    if big:
        bpts = _points(big)
        before = _points(read_dicts(os.path.join(data_dir, SOURCE)))  # visit 109, the work-group kernel
        then = [f"{m} {r:.2f}" for m in ("kivi", "zipcache")
                for b, c, r in _ratios(before, (m, ""), ("none", ""), "tbt_ms") if (b, c) == (16, 32768)]
        out += [f"At 16 × 32K on {provenance(big)} (`docs/data/{WARPS_16X32K_SOURCE}`, printed tables in "
                "`docs/data/bench_e2e_ocl_quant_warps_16x32k_h200.log`; visit 115; the kernels of `ae9a387`), one run "
                "each, none in the same visit."
                + (" Visit 109 (\"The methods end to end on NVIDIA's OpenCL driver\" above, the work-group kernel) "
                   f"had TBT over none's there of {' and '.join(then)}." if then else ""), ""]
        out += _table(bpts)
        out += _summary("ZipCache TTFT over zipcache ratio=0 of the same visit, what saliency estimation adds",
                        "target ≤ 1.10", _saliency(bpts))
    return out


def ocl_bulk_16x32k_section(data_dir):
    """Visit 119: none, zipcache with the bulk-copy decode and fdc after head_project's rework at 16 × 32K."""
    opened = _opening(data_dir, BULK_16X32K_SOURCE,
                      "### ZipCache and FDC at 16 × 32K on NVIDIA's OpenCL driver after the bulk copies and "
                      "head_project's rework (kvcomp bench, H200)",
                      "; `docs/data/gpu_visits_2026-11-28.log`, visit 119), batch 16 × 32K, 16 generated tokens, "
                      "prompts prefilled four at a time (`--prefill-tokens 131072`), one run each, none in the same "
                      "visit: zipcache at its defaults with the quantized decode of \"The OpenCL quantized decode with "
                      "bulk copies\" (ZipCache's 10.4 KiB block regions come in by bulk copies), fdc at p = 0.5 with "
                      "a calibration of 8192 random tokens made on cuda:0 in the same visit, its projection by "
                      "`head_project`'s two kernels (\"The online projection and the saliency pass on NVIDIA's "
                      "OpenCL driver, reworked\" above, which could not reach this point).")
    if not opened:
        return []
    pts, out = opened
    out += _table(pts)
    # The same point in earlier visits: zipcache with the per-warp decode's synchronous copy (115), fdc before
    # head_project's rework (109).
    for (m, o), visit, source in ((("zipcache", ""), "115", WARPS_16X32K_SOURCE), (("fdc", "p=0.5"), "109", SOURCE)):
        now = [r for b, c, r in _ratios(pts, (m, o), ("none", ""), "tbt_ms") if (b, c) == (16, 32768)]
        src = _points(read_dicts(os.path.join(data_dir, source)))
        then = [r for b, c, r in _ratios(src, (m, o), ("none", ""), "tbt_ms") if (b, c) == (16, 32768)]
        if now and then:
            out.append(f"{m}{' ' + o if o else ''} TBT over none's: {now[0]:.3f} (visit {visit}: {then[0]:.3f}).")
    out.append("")
    out += _summary("FDC TTFT over none's, the online projection's overhead", "target ≤ 1.05",
                    _judged(pts, ("fdc", "p=0.5"), ("none", ""), "ttft_ms", lambda r: r <= 1.05))
    out += _summary("ZipCache TTFT over none's of the same visit", "saliency and quantization at the prefill",
                    _judged(pts, ("zipcache", ""), ("none", ""), "ttft_ms", lambda r: None))
    return out


def ocl_ragged_warps_section(data_dir):
    """Visits 123-126: zack / fdc (and palu at batch 1) with the per-warp tensor-core ragged decode at 32K."""
    out = []
    opened = _opening(data_dir, RAGGED_16X32K_SOURCE,
                      "### ZACK and FDC at 16 × 32K on NVIDIA's OpenCL driver with the per-warp ragged decode "
                      "(kvcomp bench, H200)",
                      "; `docs/data/gpu_visits_2026-11-28.log`, visits 123-124, one machine), batch 16 × 32K, 16 "
                      "generated tokens, prompts prefilled four at a time (`--prefill-tokens 131072`), one run each, "
                      "none in the same visit: fdc and zack at p = 0.5 (calibrations of 8192 tokens made on cuda:0 in "
                      "visit 123: fdc random ids, zack the default text), their decode attention on "
                      "`kvc_adr_warps` (\"The OpenCL ragged decode with per-warp streams on the tensor cores\"); "
                      "`workgroup`: the same binary with `KVCOMP_CL_RAGGED_WARPS=0`.")
    if opened:
        pts, head = opened
        out += head + _table(pts)
        out += _summary("TBT over none's", "the decode step; fdc with the work-group kernel for comparison",
                        [(f"{m}{' ' + o if o else ''}", r, None) for m, o in (("fdc", "p=0.5"),
                                                                             ("fdc", "p=0.5;workgroup"),
                                                                             ("zack", "p=0.5"))
                         for b, c, r in _ratios(pts, (m, o), ("none", ""), "tbt_ms")])
        out += _summary("TTFT over none's, the online projection's overhead", "target ≤ 1.05",
                        [(m, r, r <= 1.05) for m in ("fdc", "zack")
                         for _, _, r in _ratios(pts, (m, "p=0.5"), ("none", ""), "ttft_ms")])
    opened = _opening(data_dir, RAGGED_1X32K_SOURCE,
                      "### FDC and Palu at 1 × 32K on NVIDIA's OpenCL driver with the per-warp ragged decode "
                      "(kvcomp bench, H200)",
                      "; `docs/data/gpu_visits_2026-11-28.log`, visit 126, the machine of the table above), batch 1 × "
                      "32K, 16 generated tokens, one run each, none in the same visit: fdc at p = 0.5 (visit 123's "
                      "calibration), palu at p = 0.5 (SVD of W_K / W_V, made on cuda:0 in this visit). FDC's decode "
                      "runs `kvc_adr_warps`; Palu's OpenCL decode is still the CUDA-core kernel of \"The final "
                      "OpenCL Palu decode\" (12× the time of CUDA's tensor-core Palu at 16 × 32K p50, both measured on an "
                      "H200 in earlier visits), so the ratio "
                      "below measures that kernel against FDC's more than the method (visit 130, below, repeats it "
                      "with Palu's decode on the tensor cores).")
    if opened:
        pts, head = opened
        out += head + _table(pts)
        out += _summary("Palu TBT over FDC TBT", "target ≥ 1.5 at 32K",
                        _judged(pts, ("palu", "p=0.5"), ("fdc", "p=0.5"), "tbt_ms", lambda r: r >= 1.5))
        out += _summary("FDC TTFT over none's", "target ≤ 1.05",
                        _judged(pts, ("fdc", "p=0.5"), ("none", ""), "ttft_ms", lambda r: r <= 1.05))
    return out


def _backend_points(data_dir, source, prefix):
    """_points of the rows of `source` whose backend starts with `prefix` (a file holding both backends: the
    points' keys do not name the backend)."""
    return _points([r for r in read_dicts(os.path.join(data_dir, source)) if r["backend"].startswith(prefix)])


def ocl_q4_palu_section(data_dir):
    """Visits 129-130: fdc with 4-bit pages at 16 × 32K (ZACK's combination), and FDC against Palu with Palu's
    decode on the tensor cores."""
    out = []
    opened = _opening(data_dir, Q4_16X32K_SOURCE,
                      "### FDC with 4-bit pages end to end at 16 × 32K (ZACK's combination; kvcomp bench, H200)",
                      "; `docs/data/gpu_visits_2026-11-28.log`, visit 129), batch 16 × 32K, 16 generated tokens, "
                      "prompts prefilled four at a time, one run each, none in the same visit: fdc at p = 0.5 "
                      "(calibration of 8192 random tokens made on cuda:0 in the visit) with f16 pages and with "
                      "`kv_bits=4` (4-bit codes with an f16 min and step per row, the channels equalized first; "
                      "decode attention on `kvc_adr_q4_warps`, \"The OpenCL q4 ragged decode with per-warp streams\" "
                      "above). The table holds the opencl:1 rows.")
    if opened:
        pts, head = opened
        ocl = _backend_points(data_dir, Q4_16X32K_SOURCE, "opencl")
        out += head + _table(ocl)
        out += _summary("TBT over none's", "the decode step",
                        [(f"fdc {o}", r, None) for o in ("p=0.5", "p=0.5;kv_bits=4")
                         for _, _, r in _ratios(ocl, ("fdc", o), ("none", ""), "tbt_ms")])
        out += _summary("TTFT over none's", "target ≤ 1.05",
                        _judged(ocl, ("fdc", "p=0.5;kv_bits=4"), ("none", ""), "ttft_ms", lambda r: r <= 1.05))
        cuda = _backend_points(data_dir, Q4_16X32K_SOURCE, "cuda")
        for key, v in sorted(cuda.items()):
            if "tbt_ms" in v:
                out += [f"On cuda:0 in the same visit, {key[0]} {key[1]} at {key[2]} × {key[3]}: TBT "
                        f"{v['tbt_ms']:.2f} ms, TTFT {v.get('ttft_ms', float('nan')):.0f} ms (CUDA's none and f16 "
                        "pages did not run: the call's 600 s ran out).", ""]
    opened = _opening(data_dir, PALU_WARPS_SOURCE,
                      "### FDC and Palu on NVIDIA's OpenCL driver with Palu's decode on the tensor cores (kvcomp "
                      "bench, H200)",
                      "; `docs/data/gpu_visits_2026-11-28.log`, visit 130), batches 1 and 16 at 32K, 16 generated "
                      "tokens, one run each: palu and fdc at p = 0.5 (calibrations made on cuda:0 in the visit), "
                      "Palu's decode on `kvc_adp_warps` (\"Palu's OpenCL decode on the tensor cores\" above). fdc's "
                      "run at 16 × 32K was cut by the call's limit; the 16 × 32K ratio below takes fdc's f16 TBT "
                      "from visit 129 (the table above: the same FDC kernels, another machine of the same kind), "
                      "so it crosses visits.")
    if opened:
        pts, head = opened
        out += head + _table(pts)
        out += _summary("Palu TBT over FDC TBT, same visit", "target ≥ 1.5 at 32K",
                        _judged(pts, ("palu", "p=0.5"), ("fdc", "p=0.5"), "tbt_ms", lambda r: r >= 1.5))
        fdc16 = _backend_points(data_dir, Q4_16X32K_SOURCE, "opencl").get(("fdc", "p=0.5", 16, 32768), {})
        palu16 = pts.get(("palu", "p=0.5", 16, 32768), {})
        if "tbt_ms" in fdc16 and "tbt_ms" in palu16:
            r = palu16["tbt_ms"] / fdc16["tbt_ms"]
            out += _summary("Palu TBT (visit 130) over FDC TBT (visit 129)", "target ≥ 1.5 at 32K",
                            [("16 × 32768", r, r >= 1.5)])
    return out


def ocl_decode_warps_section(data_dir):
    """Visit 131: none, fdc and palu at 16 × 32K with the fp16 cache's decode on kvc_attn_decode_warps, then the
    same three on CUDA (the same machine, one visit)."""
    out = []
    opened = _opening(data_dir, DECODE_WARPS_SOURCE,
                      "### The methods at 16 × 32K with the per-warp fp16 decode, OpenCL and CUDA in one visit "
                      "(kvcomp bench, H200)",
                      "; `docs/data/gpu_visits_2026-11-28.log`, visit 131, one machine for both tables), batch 16 × "
                      "32K, 16 generated tokens, prompts prefilled four at a time, one run each: none, its fp16 decode "
                      "on `kvc_attn_decode_warps` (\"The OpenCL fp16 decode with per-warp streams\" above) and, "
                      "`decode_warps=0`, on the portable kernel of every earlier OpenCL table (the same binary with "
                      "`KVCOMP_CL_DECODE_WARPS=0`); fdc and palu at p = 0.5 (calibrations of 8192 random tokens made on "
                      "cuda:0 in the visit), their decodes on `kvc_adr_warps` and `kvc_adp_warps`. So this is the "
                      "first OpenCL table whose FDC-against-Palu ratio at 16 × 32K comes from one visit (visit 130's "
                      "crossed two), and whose none decodes at a CUDA-like design.")
    if opened:
        pts, head = opened
        out += head + _table(pts)
        out += _summary("TBT over none's (the per-warp fp16 decode)", "the decode step",
                        [(f"{m}{' ' + o if o else ''}", r, None) for m, o in (("none", "decode_warps=0"),
                                                                             ("fdc", "p=0.5"), ("palu", "p=0.5"))
                         for _, _, r in _ratios(pts, (m, o), ("none", ""), "tbt_ms")])
        out += _summary("Palu TBT over FDC TBT, same visit", "target ≥ 1.5 at 32K",
                        _judged(pts, ("palu", "p=0.5"), ("fdc", "p=0.5"), "tbt_ms", lambda r: r >= 1.5))
        out += _summary("FDC TTFT over none's", "target ≤ 1.05",
                        _judged(pts, ("fdc", "p=0.5"), ("none", ""), "ttft_ms", lambda r: r <= 1.05))
    opened = _opening(data_dir, CUDA_16X32K_SOURCE,
                      "### The same three methods on CUDA (kvcomp bench, H200, visit 131)",
                      "; the machine and calibrations of the table above), batch 16 × 32K, 16 generated tokens, one "
                      "run each. CUDA's none, which visit 129 could not run, next to fdc with f16 pages and palu.")
    if opened:
        pts, head = opened
        out += head + _table(pts)
        out += _summary("TBT over none's", "the decode step",
                        [(f"{m} {o}", r, None) for m, o in (("fdc", "p=0.5"), ("palu", "p=0.5"))
                         for _, _, r in _ratios(pts, (m, o), ("none", ""), "tbt_ms")])
        out += _summary("Palu TBT over FDC TBT, same visit", "target ≥ 1.5 at 32K",
                        _judged(pts, ("palu", "p=0.5"), ("fdc", "p=0.5"), "tbt_ms", lambda r: r >= 1.5))
    opened = _opening(data_dir, QUANT_16X32K_SOURCE,
                      "### The quantized caches at 16 × 32K against the per-warp fp16 decode (kvcomp bench, H200, "
                      "visit 133)",
                      "; `docs/data/gpu_visits_2026-11-28.log`, visit 133), batch 16 × 32K, 16 generated tokens, "
                      "prompts prefilled four at a time, one run each: zipcache and kivi with their defaults "
                      "(ZipCache: 40 % salient tokens at 4 bits, the rest at 2, blocks of 100; KIVI-2, groups of "
                      "32, 32 fp16 tokens), their decodes on `kvc_adq_warps`. The none of this visit was cut by the "
                      "session's device time, so the ratios below divide by visit 131's none (the first table of "
                      "this section: the same fp16 kernels, another machine of the same kind): they cross visits. "
                      "Against the portable fp16 decode the earlier tables gave ZipCache 0.62 × and KIVI 0.64 × none's "
                      "TBT (\"ZipCache and FDC at 16 × 32K ... after the bulk copies\" and \"The quantized caches end "
                      "to end with the per-warp decode\").")
    if opened:
        pts, head = opened
        out += head + _table(pts)
        none = _points(read_dicts(os.path.join(data_dir, DECODE_WARPS_SOURCE))).get(("none", "", 16, 32768), {})
        parts = []
        for m in ("zipcache", "kivi"):
            v = pts.get((m, "", 16, 32768), {})
            if "tbt_ms" in v and none.get("tbt_ms"):
                parts.append((m, v["tbt_ms"] / none["tbt_ms"], None))
        out += _summary("TBT over visit 131's none (across visits)", "the decode step", parts)
    return out
