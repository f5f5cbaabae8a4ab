"""The low-rank KV methods' part of docs/RESULTS.md (ZACK, FDC, Palu; issue 5), from
  eval_lowrank_methods.csv    kvcomp sweep over compression p (tools/report/measure_lowrank_methods.sh)
  spectrum_default_model.csv  the default model's KV spectra per head (spectrum_section.py)
  bench_ops_lowrank_h100.csv  bench_ops: low-rank decode / prefill kernels next to fp16 (same run)
  bench_ops_methods.csv        a later run of every KV method's decode kernel (incl. kv_bits=4 pages)
  bench_ops_lowrank_q4_h100.csv  the 4-bit page decode after its multi-head kernel (16 x 32K)
  bench_ops_lowrank_warp_h100.csv  the fp16 low-rank decode with per-warp tiles (+ _base: the kernel before,
                              timed in the same visits)
  bench_lowrank.csv           kvcomp bench at Llama-3-8B shapes (tools/gpu_host/run_lowrank.sh)
  bench_ops_lowrank_mma_h200.csv  the tensor-core decodes after their rework on an H200 (f16 and 4-bit pages,
                              fp16 decode of the same run; + _base: the first tensor-core version, an earlier visit)
  bench_lowrank_h200.csv      kvcomp bench on the H200 after that rework (none, fdc, fdc kv_bits=4, palu)
  bench_e2e_palu_mma_h200.csv  the same for none, fdc and palu once Palu's decode ran on the tensor cores (visit 83)
  bench_e2e_palu_workers_h200.csv  palu at 32K with one worker per SM and workers=2 (visit 84)
  bench_e2e_palu_auto_h200.csv  none, fdc and palu after Palu's workers=auto asked the backend (visit 85)
  bench_e2e_palu_half2_h200.csv  the same after Palu's neox rotation moved to f16x2 (visit 86)
  bench_e2e_batch16_h200.csv  none, zack / fdc / palu at p 0.5 and 0.7, kivi and zipcache at batches 1 and 16 x 4K /
                              32K and 1 x 128K (visit 89; the quantizers' rows are make_results' table)
  bench_e2e_batch16_ocl_h200.csv  none, fdc and palu at batch 1 on NVIDIA's OpenCL driver (visit 89)
  bench_e2e_ocl_palu_{blocked,final}_h200.csv  the same after the OpenCL Palu decode's rework (visits 91 and 92;
                              its kernel tables: ocl_palu_section.py)
  bench_e2e_ocl_batch16_h200.csv  none, zack, fdc and palu at p 0.5 on NVIDIA's OpenCL, batches 1 and 16 x 4K (visit 93)
  bench_ops_palu_final_h200.csv  every low-rank decode and fp16 in one --cold run of the final binary (visit 84)
  bench_ops_palu_mma*_h200.csv  Palu's tensor-core decode against the CUDA-core kernel and its own versions
                              (palu_section.py)
  bench_ops_lowrank_ocl_h200.csv  the same decodes on NVIDIA's OpenCL driver (H200), fp16 decode of the same run
  bench_ops_ab_h200.csv       one visit timing three binaries interleaved, two runs each (the commits before and
                              after this session's decode changes), every decode kernel next to fp16
  bench_ops_worker_scales_h200.csv  the balanced schedule built for compute_units x s workers, s = 1..6
  bench_ops_{workers,waves,merge_ab}_h200.csv  workers=auto, the wave count, the merge (schedule_section.py)
  eval_lowrank_q4.csv         zack/fdc with kv_bits=4 against kv_bits=16 (tools/report/measure_lowrank_q4.sh)
  eval_lowrank_q4_cuda.csv    the same on CUDA with more examples, line retrieval at 1K and 2K and p = 0.2
                              (docs/data/gpu_visits_2026-11-27.log, visit 32)
  eval_lowrank_quant.csv      kivi / zipcache on the reduced cache (tools/report/measure_lowrank_quant.sh)
  eval_lowrank_quant_ocl_h200.csv  the same script on NVIDIA OpenCL with 32 examples (visit 36)
  eval_lowrank_quant_cause.csv  kivi 8-bit at rank 64 / 48 next to fp16 zack at removal rate 0.2 (CPU)
  eval_rotated_quant.csv      kivi-2 / zipcache on the rotated cache (tools/report/measure_rotated_quant.sh)
  bench_e2e_combination_h200.csv  kvcomp bench: kivi-4 / zipcache on fdc's cache at rank 64, Llama-3-8B shapes
  bench_e2e_combination_ranks_h200.csv  the same for kivi-4 at ranks 64, 96 and 48 (visit 39)
  bench_e2e_combination_ranks_mma_h200.csv  the same after the tensor-core decode took every width, with none
                              (visit 42); _simt_: ranks 96 and 48 with KVCOMP_QUANT_DECODE=simt, same visit
  eval_lowrank_quant_cuda_h200.csv  measure_lowrank_quant.sh on CUDA with 32 examples (visit 39)
  bench_e2e_ragged_kernels_h100.csv  kvcomp bench of fdc at p = 0.5 / 0.7 by 362aacb's and a later commit's binary,
                              none once (visits 54, 54b; H100)
Every number is read from those files; nothing is typed here.
"""
import os
import re

from bench_table import bench_points, bench_vs_none
from results_data import commits_in_order, provenance, read_dicts
from ocl_palu_section import ocl_palu_section
from palu_section import palu_section
from schedule_section import mean_cell, schedule_section
from spectrum_section import spectrum_section

SOURCES = ("eval_lowrank_methods.csv", "eval_lowrank_methods_512_h200.csv", "bench_lowrank.csv", "ratesearch_default_model.csv",
           "eval_lowrank_q4.csv", "bench_lowrank_h200.csv", "bench_e2e_palu_mma_h200.csv",
           "bench_e2e_palu_auto_h200.csv", "bench_e2e_palu_workers_h200.csv", "bench_e2e_palu_half2_h200.csv",
           "eval_lowrank_q4_cuda.csv",
           "eval_lowrank_quant.csv", "eval_lowrank_quant_ocl_h200.csv",
           "eval_lowrank_quant_cause.csv", "eval_rotated_quant.csv",
           "bench_e2e_combination_h200.csv", "bench_e2e_combination_ranks_h200.csv",
           "eval_lowrank_quant_cuda_h200.csv", "bench_e2e_combination_ranks_mma_h200.csv",
           "bench_e2e_combination_ranks_simt_h200.csv",
           "bench_e2e_ragged_kernels_h100.csv", "bench_e2e_batch16_h200.csv",
           "bench_e2e_batch16_ocl_h200.csv", "bench_e2e_ocl_palu_blocked_h200.csv",
           "bench_e2e_ocl_palu_final_h200.csv", "bench_e2e_ocl_batch16_h200.csv")  # kept out of the generic sections
LOWRANK = ("zack", "fdc", "palu")


def rank_multiple_of(r):
    m = re.search(r"rank_multiple=([0-9]+)", r["method_opts"])
    return int(m.group(1)) if m else 16  # the methods' default


def compression_of(r):
    m = re.search(r"compression=([0-9.]+)", r["method_opts"])
    return float(m.group(1)) if m else None


def _accuracy(rows, intro=None):
    if not rows:
        return []
    out = intro or [
           "### Accuracy versus compression (default model)", "",
           f"`tools/report/measure_lowrank_methods.sh` on {provenance(rows)}: one calibration per method at",
           "removal rate 0 (zack: the default corpus `heldout.txt`; fdc: random token ids; palu: SVD of W_K / W_V),",
           "ranks re-chosen at load for each overall KV compression p (rounded up to the rank multiple; head_dim is",
           "64); line retrieval at 1K and 2K",
           "(exact match) and perplexity at 1K on the same examples as the uncompressed cache (`none`) of the same",
           "run. Cells: the fraction of none's score kept (perplexity: none / method). The target is ≥ 0.99 on every",
           "task.", ""]
    cells, removed, ex = {}, {}, {}
    tasks = sorted({(r["task"], int(r["context"])) for r in rows if r["method"] in LOWRANK})
    for r in rows:
        p = compression_of(r)
        if r["method"] not in LOWRANK or p is None or r["baseline_value"] in ("", None):
            continue
        v, b = float(r["value"]), float(r["baseline_value"])
        frac = b / v if r["metric"] == "perplexity" else (v / b if b > 0 else float("nan"))
        key = (r["method"], rank_multiple_of(r), p)
        cells.setdefault(key, {})[(r["task"], int(r["context"]))] = frac
        removed[key] = 1 - float(r["kv_bytes"]) / float(r["kv_bytes_baseline"])
        ex[r["task"]] = r["examples"]
    head = " | ".join(f"{t}@{c}" for t, c in tasks)
    out += [f"| method | rank multiple | p | KV bytes removed | {head} | all ≥ 0.99 |",
            "|---|---|---|---|" + "---|" * len(tasks) + "---|"]
    best = {}
    for key in sorted(cells, key=lambda k: (LOWRANK.index(k[0]), k[1], k[2])):
        m, mult, p = key
        c = cells[key]
        ok = all(c.get(t, 0) >= 0.99 for t in tasks)
        if ok:
            best[(m, mult)] = max(best.get((m, mult), 0), p)
        out.append(f"| {m} | {mult} | {p:.1f} | {removed[key]:.3f} | " +
                   " | ".join(f"{c[t]:.3f}" if t in c else "–" for t in tasks) + f" | {'yes' if ok else 'no'} |")
    base = [r for r in rows if r["method"] == "none"]
    out += ["", "Uncompressed scores (none): " + ", ".join(
        f"{r['task']}@{r['context']} {float(r['value']):.3f}" for r in sorted(base, key=lambda r: (r["task"], int(r["context"])))) +
        f"; examples per point: " + ", ".join(f"{t} {n}" for t, n in sorted(ex.items())) + ".", "",
        "Largest p keeping ≥ 99 % of none on every task: " +
        ", ".join(f"{m} (multiple {mult}) {best[(m, mult)]:.1f}" if (m, mult) in best else
                  f"{m} (multiple {mult}): none of the points"
                  for m, mult in sorted({k[:2] for k in cells}, key=lambda k: (LOWRANK.index(k[0]), k[1]))) + ".", ""]
    return out


def _accuracy_512_intro(rows):
    if not rows:
        return []
    return [f"The same curve at 512 line-retrieval examples and 64 perplexity windows per point (`kvcomp sweep` on "
            f"{provenance(rows)}, `docs/data/gpu_visits_2026-11-27.log` visit 95; calibrations as above, made on the "
            "GPU host): with 8 examples one example is 12.5 % of a score, so the table above cannot resolve the 1 % "
            "the target allows.", ""]


def _ratesearch(rows):
    if not rows:
        return []
    out = ["### Accuracy-constrained search (kvcomp ratesearch)", "",
           f"`kvcomp ratesearch` on {provenance(rows)}: bisection over every compression the calibration file",
           "can realise (rank multiple 16) for the largest one keeping ≥ 99 % of none's score on the validation",
           "split (line retrieval examples drawn with seed 1000003; the reports above use seed 1). Each probe is",
           "a full run of the task; the answer is the largest probe that passed (log: docs/data/ratesearch_default_model.log).", "",
           "| method | task | context | examples | probes (compression: score) | chosen compression |", "|---|---|---|---|---|---|"]
    by = {}
    for r in rows:
        by.setdefault((r["method"], r["task"], r["context"], r["examples"]), []).append(r)
    for (m, task, ctx, ex), rs in sorted(by.items(), key=lambda kv: LOWRANK.index(kv[0][0])):
        probes = sorted(((1 - float(r["kv_bytes"]) / float(r["kv_bytes_baseline"]), float(r["value"]),
                          float(r["value"]) >= 0.99 * float(r["baseline_value"])) for r in rs))
        passed = [c for c, _, ok in probes if ok]
        cells = ", ".join(f"{c:.3f}: {v:.2f}" for c, v, _ in probes)
        out.append(f"| {m} | {task} | {ctx} | {ex} | {cells} | {max(passed):.3f} |" if passed else
                   f"| {m} | {task} | {ctx} | {ex} | {cells} | none passed |")
    return out + ["", "(Compression here is 1 − KV bytes / none's bytes, page rounding included.)", ""]


def _q4_accuracy(rows):
    """kv_bits=4 against kv_bits=16 at the same ranks (and without the channel equalization)."""
    if not rows:
        return []
    cells = {}
    for r in rows:
        if r["method"] not in LOWRANK:
            continue
        o = dict(kv.split("=", 1) for kv in r["method_opts"].split(";") if "=" in kv)
        variant = "16" if o.get("kv_bits", "16") == "16" else ("4, equalize=0" if o.get("equalize") == "0" else "4")
        key = (r["method"], float(o.get("compression", 0)), variant)
        c = cells.setdefault(key, {})
        c[r["task"]] = float(r["value"])
        c[r["task"] + "_none"] = float(r["baseline_value"])
        c["ratio"] = float(r["compression_ratio"])
    out = ["### 4-bit pages on the reduced cache (kv_bits=4, ZACK's combination)", "",
           f"`tools/report/measure_lowrank_q4.sh` on {provenance(rows)} (the commit column holds the branch the rows",
           "were written on before its merge): the default model, line retrieval and perplexity at 1K, calibration",
           "files made by the script, none in the same run. kv_bits=4 stores each (token, head) row of the reduced K″/V″",
           "as 4-bit codes with an f16 min and step; the channels are first equalized by D = max(σ_j/σ_0, 1/64) folded",
           "into the bases (equalize=0: without). Compression p 0 is full rank (ranks of the calibration).", "",
           "| method | p | kv_bits | KV bytes vs none | line retrieval 1K | perplexity 1K | none's perplexity |",
           "|---|---|---|---|---|---|---|"]
    for (m, p, v), c in sorted(cells.items()):
        out.append(f"| {m} | {p:g} | {v} | {c['ratio']:.2f}× smaller | {c.get('line_retrieval', float('nan')):.2f} | "
                   f"{c.get('perplexity', float('nan')):.2f} | {c.get('perplexity_none', float('nan')):.2f} |")
    return out + [""]


def _kept_table(rows, head, key_of, key_cols, caption):
    """Scores per method row and task as 'score (kept fraction of none's; perplexity: none / method)',
    the compression and whether every task keeps 0.99. key_of(r, opts) gives a row's key (a tuple of
    key_cols cells) or None to leave the row out."""
    cells, tasks = {}, []
    for r in rows:
        o = dict(kv.split("=", 1) for kv in r["method_opts"].split(";") if "=" in kv)
        key = key_of(r, o)
        if key is None:
            continue
        task = f"{r['task']}@{r['context']}"
        if task not in tasks:
            tasks.append(task)
        v, base = float(r["value"]), float(r["baseline_value"])
        kept = base / v if r["metric"] == "perplexity" else (v / base if base else float("nan"))
        c = cells.setdefault(key, {})
        c[task] = (v, kept, r["examples"])
        c["ratio"] = float(r["compression_ratio"])
    if not cells:
        return []
    examples = sorted({f"{t.split('@')[0]} {c[t][2]}" for c in cells.values() for t in tasks if t in c})
    out = [head, "", caption.format(provenance=provenance(rows), examples=", ".join(examples)), "",
           "| " + " | ".join(key_cols) + " | × smaller | " + " | ".join(tasks) + " | all ≥ 0.99 |",
           "|" + "---|" * (len(key_cols) + len(tasks) + 2)]
    for key, c in sorted(cells.items()):
        row = [f"{c[t][0]:.3f} ({c[t][1]:.3f})" if t in c else "–" for t in tasks]
        ok = all(t in c and c[t][1] >= 0.99 for t in tasks)
        out.append("| " + " | ".join(str(k) for k in key) + f" | {c['ratio']:.2f} | " + " | ".join(row) +
                   f" | {'yes' if ok else 'no'} |")
    return out + [""]


def _q4_accuracy_cuda(rows):
    """kv_bits=4 and kv_bits=16 at the same ranks, every task of the file, as fractions of none's score."""
    return _kept_table(
        rows, "### 4-bit pages on the reduced cache: more examples (CUDA)",
        lambda r, o: (r["method"], f"{float(o.get('compression', 0)):g}", int(o.get("kv_bits", "16")))
        if r["method"] in LOWRANK else None,
        ["method", "p", "kv_bits"],
        "`kvcomp sweep` on {provenance} (`docs/data/eval_lowrank_q4_cuda.csv`; the commands are in\n"
        "`docs/data/gpu_visits_2026-11-27.log`, visit 32): calibrations made on the GPU as above (zack on the default\n"
        "corpus, fdc on random tokens, removal rate 0), ranks re-chosen at load for compression p; every point next to\n"
        "none on the same examples ({examples} examples). Cells: the score (kept fraction of\n"
        "none's; perplexity: none / method). The target is ≥ 0.99 of none on every task.")


def _lowrank_quant_key(r, o):
    """Table key of a row of the quantizers-on-the-reduced-cache files: (storage, bases, rank)."""
    if r["method"] == "none":
        return None
    lowrank = o.get("lowrank") or (r["method"] if r["method"] in LOWRANK else "–")
    if r["method"] in LOWRANK:
        rank = f"per head, removal rate {o['removal_rate']}" if "removal_rate" in o else "per head (full)"
        store = f"kv_bits={o.get('kv_bits', '16')} rows"
    else:
        rank = o.get("rank", "–")
        store = f"{r['method']} {o.get('bits', '')}-bit".replace(" -bit", "")
    return (store, lowrank, rank)


_LOWRANK_QUANT_SETUP = (
    "the default model, calibrations at\n"
    "removal rate 0 (zack on the default corpus, fdc on random token ids); kivi at 4 bits with groups of 16 and 32\n"
    "fp16 residual tokens, zipcache at its defaults (ratio 0.4, 4/2 bits, blocks of 100); with lowrank= every K and V\n"
    "head keeps `rank` dims (64 = head_dim: the basis only rotates), the bases folded into W_V / W_O and q, k\n"
    "projected online; `kv_bits=4 rows` is zack / fdc's own 4-bit pages at full rank. Every point next to none on\n"
    "the same examples ({examples} examples). Cells: score (kept fraction of none's; perplexity: none / method).")

def _rotated_quant_key(r, o):
    """Table key of a row of eval_rotated_quant.csv: (quantizer, bases)."""
    if r["method"] == "none":
        return None
    q = f"kivi {o.get('bits', '2')}-bit" if r["method"] == "kivi" else f"zipcache r={o.get('ratio', '0.4')}"
    return (q, o.get("lowrank", "–"))


_ROTATED_SETUP = (
    "`tools/report/measure_rotated_quant.sh` on {provenance}: the 2-bit quantizers on the model's own basis "
    "(bases –) and on zack's / fdc's SVD basis at rank = head_dim (lowrank=zack|fdc, rank=64: each K and V "
    "head is rotated, nothing is dropped, so the bytes are the quantizer's alone; q and k are projected online, "
    "the V basis is folded into W_V / W_O). ZipCache at 4 / 2 bits with blocks of 50 and tail=window, KIVI-2 with "
    "groups of 32 and 32 fp16 residual tokens; calibrations at removal rate 0 (zack on the default corpus, fdc "
    "on random token ids). Every point next to none on the same examples ({examples} examples). Cells: score "
    "(kept fraction of none's; perplexity: none / method). The issue's target: ≥ 4.5× at ≥ 0.99 of none.")

# kivi / zipcache on the reduced or rotated cache (lowrank=, rank=): (file, title, caption, key).
_LOWRANK_QUANT_TABLES = [
    ("eval_lowrank_quant.csv", "### The quantizers on the reduced cache (kivi / zipcache with lowrank=zack|fdc)",
     "`tools/report/measure_lowrank_quant.sh` on {provenance}: " + _LOWRANK_QUANT_SETUP, _lowrank_quant_key),
    ("eval_lowrank_quant_ocl_h200.csv", "### The quantizers on the reduced cache: more examples (NVIDIA OpenCL)",
     "The same script with BACKEND=opencl:1 EXAMPLES=32 on {provenance} (`docs/data/gpu_visits_2026-11-27.log`, "
     "visit 36): " + _LOWRANK_QUANT_SETUP, _lowrank_quant_key),
    ("eval_lowrank_quant_cuda_h200.csv", "### The quantizers on the reduced cache: the same on CUDA",
     "The same script with BACKEND=cuda EXAMPLES=32 on {provenance} (`docs/data/gpu_visits_2026-11-27.log`, visit "
     "39; rank 48 runs on CUDA since the quantized decode and the prefill take every multiple of 16 from 32 to "
     "128): " + _LOWRANK_QUANT_SETUP, _lowrank_quant_key),
    ("eval_lowrank_quant_cause.csv", "### What loses line retrieval at rank 48: the rank, not the quantizer",
     "`kvcomp sweep --tasks line_retrieval --contexts 1024 --examples 8` on {provenance}, one zack calibration of "
     "the default corpus: kivi at 8 bits (groups of 16) on the reduced cache at rank 64 and 48, next to zack's own "
     "fp16 pages at removal rate 0.2 (per-head ranks: every K head 48, V heads 32-48). At 8 bits the quantizer adds "
     "almost nothing, and rank 48 scores what fp16 zack with 48-dim keys scores ({examples} examples). Cells: "
     "score (kept fraction of none's).", _lowrank_quant_key),
    ("eval_rotated_quant.csv", "### The 2-bit quantizers on the rotated cache (rank = head_dim)", _ROTATED_SETUP,
     _rotated_quant_key),
]


def _lowrank_quant_accuracy(by_source):
    out = []
    for name, title, caption, key in _LOWRANK_QUANT_TABLES:
        cols = ["storage", "bases", "rank"] if key is _lowrank_quant_key else ["quantizer", "bases"]
        out += _kept_table(by_source.get(name, []), title, key, cols, caption)
    return out


def _kernels(ops, palu_kernel="a CUDA-core kernel, no tensor cores"):
    lr = [r for r in ops if r["op"].startswith(("decode_lowrank", "decode_palu")) and r["time_ms"]]
    if not lr:
        return []
    fp16 = {(r["backend"], r["batch"], r["context"]): float(r["time_ms"]) for r in ops
            if r["op"] == "decode_fp16" and r["time_ms"]}
    q4 = any("_q4_" in r["op"] for r in lr)
    out = ["### Decode attention on uneven ranks" + (" with 4-bit pages" if q4 else "") +
           f" (bench_ops at `{ops[0]['commit']}`, same run as its fp16 row)", "",
           f"`bench_ops` decode sweep on {ops[0]['device']}, commit `{ops[0]['commit']}`, {ops[0]['date'][:10]}: 32 query",
           "heads, 8 KV heads (GQA 4), per-KV-head widths of the profile (p50: K 32..128 / V 16..80, half of the",
           "fp16 dims; p70: K 16..80 / V 16..64, 29.7 % of them), page size 16. `plain`: equal token chunks;",
           "`balanced`: tasks costed s_kv·(d_k + d_v + 1), longest first (paper §5.3); `palu`: latent pre-RoPE K",
           f"reconstructed and rotated every step ({palu_kernel}). GB/s counts the compressed",
           "bytes read; the target is time ≤ 1.2 × bytes / copy bandwidth (fraction ≥ 0.83)." +
           (" `lowrank_q4_*`: the same widths stored as 4-bit codes per (token, head) row with an f16 min and step"
            " (zack/fdc `kv_bits=4`), dequantized in registers." if q4 else ""), "",
           "| kernel | backend | batch | context | time ms | fraction of copy | fp16 decode ms | fp16 / this |",
           "|---|---|---|---|---|---|---|---|"]
    for r in lr:
        t = float(r["time_ms"])
        f = fp16.get((r["backend"], r["batch"], r["context"]))
        vs = f"{f:.4g} | {f / t:.2f}" if f else "– | –"
        out.append(f"| {r['op'][7:]} | {r['backend']} | {r['batch']} | {r['context']} | {t:.4g} | "
                   f"{float(r['fraction_of_copy']):.3f} | {vs} |")
    pre = [r for r in ops if r["op"].startswith(("prefill_fp16", "prefill_lowrank")) and r["time_ms"]]
    if pre:
        out += ["", "Prefill attention, same run (`prefill_lowrank_*`: attn_prefill_ragged on the p50 widths, row",
                "blocks balanced per head or plain; `prefill_fp16`: the tensor-core attn_prefill at full width):", "",
                "| kernel | backend | batch | prompt | time ms |", "|---|---|---|---|---|"]
        for r in pre:
            out.append(f"| {r['op']} | {r['backend']} | {r['batch']} | {r['context']} | {float(r['time_ms']):.4g} |")
    return out + [""]


def _before_after(old, new, caption):
    """A decode kernel's rows before and after a change; caption(old commit, new commit, device) the text."""
    key = lambda r: (r["op"], r["backend"], r["batch"], r["context"])
    before = {key(r): float(r["time_ms"]) for r in old if r["op"].startswith("decode_lowrank") and r["time_ms"]}
    rows = [r for r in new if key(r) in before and r["time_ms"]]
    if not rows:
        return []
    out = [caption(old[0]["commit"], rows[0]["commit"], rows[0]["device"]), "",
           "| kernel | backend | batch | context | before ms | after ms | speed-up |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["op"], int(r["batch"]), int(r["context"]))):
        b, t = before[key(r)], float(r["time_ms"])
        out.append(f"| {r['op'][7:]} | {r['backend']} | {r['batch']} | {r['context']} | {b:.4g} | {t:.4g} | {b / t:.2f}× |")
    return out + [""]


def _warp_caption(old, new, device):
    return (f"The same kernels before (`{old}`: the block's 4 warps share each 12 KiB tile, one `__syncthreads` per "
            f"tile) and after (`{new}`: each warp streams its own tiles through its own cp.async ring), timed one "
            f"after the other in the same visits on {device} (`docs/data/bench_ops_lowrank_warp_base_h100.csv`):")


def _mma_caption(old, new, device):
    return (f"The tensor-core kernels as first written (`{old}`: each 16-byte chunk of a tile mapped to its page and "
            f"row by two run-time divisions and a shuffle, ~100 instructions per copy; a merge kernel walking 66 "
            f"partials per head through dependent loads at batch 1) and after (`{new}`: tiles copied as whole page "
            f"runs, each lane one chunk column of every few rows, a parallel merge, a lazy running max, 32-bit shared "
            f"addresses; the 4-bit pages on tensor cores), on {device} in two visits of the same day, each next to "
            "its own fp16 decode (`docs/data/bench_ops_lowrank_mma_base_h200.csv`, `docs/data/lowrank_mma_h200.log`, "
            "`docs/data/h200_visits_2026-11-26b.log`):")


def _ab(rows):
    """bench_ops rows of several binaries timed interleaved in one visit: the mean time of each commit per
    (kernel, batch, context), in the order the commits first appear, and the last over the first."""
    if not rows:
        return []
    commits = commits_in_order(rows)
    times = {}
    for r in rows:
        if r["op"] != "copy_bw" and r["time_ms"]:
            times.setdefault((r["op"], int(r["batch"]), int(r["context"])), {}).setdefault(r["commit"], []).append(
                float(r["time_ms"]))
    out = ["### This session's decode changes, timed interleaved (bench_ops, one visit)", "",
           f"Three binaries on {rows[0]['device']}, {rows[0]['date'][:10]}, run one after the other twice (mean of the "
           "two runs in ms; `docs/data/bench_ops_ab_h200.csv`): " + ", ".join(f"`{c}`" for c in commits) + ". The "
           "second adds the padded tile copy by rows, exp2 with flushed denormals and the one-multiply page address "
           "(ragged_stream.cuh, decode_mma.cuh); the third the lazy running max of the tensor-core softmax. The fp16 "
           "decode is unchanged code (its rows show the run-to-run spread).", "",
           "| kernel | batch | context | " + " | ".join(f"`{c}` ms" for c in commits) + " | speed-up, first / last |",
           "|---|---|---|" + "---|" * len(commits) + "---|"]
    for (op, b, ctx), by in sorted(times.items()):
        means = [sum(by[c]) / len(by[c]) if c in by else None for c in commits]
        cells = " | ".join(f"{m:.4f}" if m else "–" for m in means)
        ratio = f"{means[0] / means[-1]:.3f}×" if means[0] and means[-1] else "–"
        out.append(f"| {op[7:]} | {b} | {ctx} | {cells} | {ratio} |")
    return out + [""]


def _point_of(r):
    """The bench table's parameter of a low-rank row: its compression p, and kv_bits=4 when set."""
    p = compression_of(r)
    if p is None:
        return None
    return f"{p:.1f}" + (", kv_bits=4" if "kv_bits=4" in r["method_opts"] else "")


def _e2e(rows, intro):
    """kvcomp bench rows against none, then FDC against Palu (the paper's comparison: -64 % TBT at 32K) and
    FDC's TTFT against none's (the online projection's cost) at every point both have."""
    if not rows:
        return []
    out = intro(provenance(rows)) + [""] + bench_vs_none(rows, param=_point_of, param_name="p")
    pts = bench_points(rows, _point_of)
    pairs, ttft = [], []
    for (m, p, be, b, ctx), ms in pts.items():
        q, n = pts.get(("palu", p, be, b, ctx)), pts.get(("none", None, be, b, ctx))
        if m == "fdc" and q and "tbt_ms" in ms and "tbt_ms" in q:
            ratio = float(q['tbt_ms']['value']) / float(ms['tbt_ms']['value'])
            pairs.append(f"{be} p {p}, batch {b} × {ctx}: {ratio:.3f}×")
        if m == "fdc" and n and "ttft_ms" in ms and "ttft_ms" in n:
            ttft.append(f"{be} p {p}, batch {b} × {ctx}: {float(ms['ttft_ms']['value']) / float(n['ttft_ms']['value']):.3f}")
    if pairs:
        out += ["", "Palu TBT over FDC TBT (target ≥ 1.5 at 32K): " + "; ".join(sorted(pairs)) + "."]
    if ttft:
        out += ["", "FDC TTFT over none's (the online projection's cost; target ≤ 1.05): " + "; ".join(sorted(ttft)) + "."]
    return out + [""]


def _e2e_h100_intro(prov):
    return ["### End to end at Llama-3-8B shapes, random weights (kvcomp bench)", "",
            f"`tools/gpu_host/run_lowrank.sh` on {prov}: each method calibrated on the random-weight",
            "model itself (8192 uniform token ids; the config has no tokenizer), ranks for compression p re-chosen",
            "at load; prompt attention through the tensor-core attn_prefill on heads zero-padded to 128 (option",
            "prefill=padded, the default); 16 generated tokens; TTFT until every request has its first token, TBT the",
            "median gap; none is the fp16 cache in the same visit. KV bytes: the batch's cache at its last step.",
            "Palu's decode in this run is its CUDA-core kernel; the last two tables of this section run its",
            "tensor-core kernel."]


def _e2e_h200_intro(prov):
    return ["### End to end after the decode kernels' rework (kvcomp bench, H200)", "",
            f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {prov} (commands in",
            "`docs/data/h200_visits_2026-11-26b.log`, visit 5): fdc and palu calibrated on the random-weight model (8192 uniform token",
            "ids) for p = 0.5, fdc also with `kv_bits=4`; 16 generated tokens; none in the same visit; 16 × 32K is",
            "skipped (its fp16 cache exceeds `--max-kv-gib` 40). Random weights give every head the same rank (64 of",
            "128), so this run does not exercise uneven ranks; the kernel tables above do. Palu's decode here is its",
            "CUDA-core kernel; the next two tables run its tensor-core kernel."]


def _e2e_palu_intro(prov):
    return ["### End to end with Palu's tensor-core decode (kvcomp bench, H200)", "",
            f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {prov} (`.carry/visit83.sh` in",
            "`docs/data/gpu_visits_2026-11-27.log`, visit 83): as the table above, fdc and palu calibrated for p = 0.5",
            "on 8192 random token ids, 16 generated tokens, none in the same visit, batches 1 and 8. Palu's decode is",
            "now `attn_decode_palu_mma` (the tables \"Palu's decode on the tensor cores\" above); the table above ran",
            "its CUDA-core kernel. The engine then still cut Palu's schedule for one worker per SM (`workers_for`), a",
            "choice measured on the CUDA-core kernel; the next table is the run after that changed."]


def _tbt_by_workers(rows, batch, ctx):
    """TBT (ms) of the palu rows of one point, by their workers= option ('' when not given)."""
    out = {}
    for r in rows:
        if r["metric"] == "tbt_ms" and r["batch"] == batch and r["context"] == ctx:
            o = dict(kv.split("=", 1) for kv in r["method_opts"].split(";") if "=" in kv)
            out[o.get("workers", "")] = float(r["value"])
    return out


def _e2e_palu_auto_intro(prov, workers_rows):
    w = _tbt_by_workers(workers_rows, "8", "32768")
    ab = (f" In visit 84 (`docs/data/bench_e2e_palu_workers_h200.csv`, the binary before that change) Palu at "
          f"8 × 32K took {w['']:.2f} ms per token at one worker per SM and {w['2']:.2f} ms with `workers=2`."
          if "" in w and "2" in w else "")
    return ["### End to end with Palu's schedule cut for its tensor-core decode (kvcomp bench, H200)", "",
            f"The same grid on {prov} (`.carry/visit85.sh` in `docs/data/gpu_visits_2026-11-27.log`, visit 85), after",
            "the engine began asking the backend how many Palu decode tasks run at once (workers=auto: 2 × 132 on",
            "this GPU for `attn_decode_palu_mma`) instead of cutting Palu's schedule for one per SM." + ab,
            "This is the comparison the issue's target names: FDC against a Palu whose decode runs on the tensor",
            "cores, all three methods in one visit."]


def _palu_target_verdict(rows):
    """Whether Palu's TBT is >= 1.5 x FDC's at every 32K point of a run (the issue's target), from its rows."""
    pts = bench_points(rows, _point_of)
    ratios = [float(q["tbt_ms"]["value"]) / float(f["tbt_ms"]["value"])
              for (m, p, be, b, ctx), f in pts.items() if m == "fdc" and int(ctx) == 32768 and "tbt_ms" in f
              for q in [pts.get(("palu", p, be, b, ctx))] if q and "tbt_ms" in q]
    if not ratios:
        return ""
    met = "met" if min(ratios) >= 1.5 else "not met"
    return f" The issue's target (Palu TBT ≥ 1.5 × FDC's at 32K) is {met} against this Palu."


def _e2e_palu_half2_intro(prov, rows):
    return ["### End to end with the final Palu decode (kvcomp bench, H200)", "",
            f"The same grid on {prov} (`.carry/visit86.sh` in `docs/data/gpu_visits_2026-11-27.log`, visit 86): Palu's",
            "neox rotation in f16x2 (\"The Palu tensor-core decode with its neox rotation in f16x2\" above), all three",
            "methods in one visit." + _palu_target_verdict(rows)]


def _palu_over_fdc_32k(rows):
    """('p P: R×', R) for every 32K point with fdc and palu rows, grouped into (batch 16 or more, smaller)."""
    pts = bench_points(rows, _point_of)
    big, small = [], []
    for (m, p, be, b, ctx), f in sorted(pts.items(), key=lambda kv: str(kv[0])):
        q = pts.get(("palu", p, be, b, ctx))
        if m == "fdc" and int(ctx) == 32768 and q and "tbt_ms" in f and "tbt_ms" in q:
            ratio = float(q["tbt_ms"]["value"]) / float(f["tbt_ms"]["value"])
            (big if int(b) >= 16 else small).append((f"p {p}: {ratio:.3f}×", ratio))
    return big, small


def _e2e_batch16_intro(prov, rows):
    big, small = _palu_over_fdc_32k(rows)

    def listed(pairs):
        return "; ".join(t for t, _ in pairs)
    weights = [float(r["value"]) for r in rows if r["method"] == "fdc" and r["metric"] == "weight_bytes"]
    kv = [float(r["value"]) for r in rows if r["method"] == "fdc" and r["metric"] == "kv_bytes_batch"
          and r["batch"] == "1" and r["context"] == "32768"]
    why = (f", where a step reads {weights[0] / 2**30:.1f} GiB of weights and {kv[0] / 2**30:.1f} GiB of "
           "FDC's cache at p 0.5" if weights and kv else "")
    met = "met" if all(r >= 1.5 for _, r in big) else "not met"
    met_small = "met" if all(r >= 1.5 for _, r in small) else "not"
    target = (f" Against the tensor-core Palu, the issue's target (Palu TBT ≥ 1.5 × FDC's at 32K) is {met} at "
              f"batch 16 ({listed(big)}) and {met_small} at batch 1 ({listed(small)}{why})."
              if big and small else "")
    return ["### End to end at batch 16 × 32K (kvcomp bench, H200)", "",
            f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {prov} (`.carry/visit89.sh` parts a and b in",
            "`docs/data/gpu_visits_2026-11-27.log`, visit 89): zack, fdc and palu calibrated on the random-weight",
            "model (8192 random token ids, p = 0.5; ranks re-chosen at load for 0.7), 16 generated tokens, none in",
            "the same visit; batches 1 and 16 at 4K and 32K, and 1 × 128K at p = 0.5. The grids above stopped at",
            "8 × 32K: a point's prompts were prefilled in one step, and those activations did not fit next to the",
            "64 GiB fp16 cache of 16 × 32K. Here `--prefill-tokens 131072` prefills them four prompts at a time",
            "(a 16 × 32K TTFT covers four prefill steps and three decode steps between them) and `--max-kv-gib 70`",
            "admits the point."
            + target]


def _e2e_batch16_ocl_intro(prov, rows):
    ttft = [float(r["value"]) / 1e3 for r in rows
            if r["method"] == "none" and r["metric"] == "ttft_ms" and r["context"] == "32768"]
    slow = f" (none's TTFT at 1 × 32K: {ttft[0]:.0f} s)" if ttft else ""
    return ["### FDC and Palu on NVIDIA's OpenCL driver (kvcomp bench, H200)", "",
            f"The same calibrations (made on CUDA) on {prov} (`.carry/visit89.sh` part d, visit 89): batch 1 at 4K",
            f"and 32K only, as this backend's prefill is slow{slow}. Palu's OpenCL decode is",
            "`cl_kernels/attn_decode_palu.cl`, a CUDA-core kernel (here the version before its rework in visits 90-92,",
            "below); the tensor-core rebuild is CUDA's only. The ratio is therefore that kernel's cost more than the",
            "method's."]


def _e2e_ocl_blocked_intro(prov):
    return ["### FDC and Palu on NVIDIA's OpenCL driver after the Palu decode's rework (kvcomp bench, H200)", "",
            f"The same grid on {prov} (`.carry/visit91.sh`, visit 91; fresh calibrations on CUDA): `b217780`, whose",
            "Palu decode builds keys in register blocks at 128 work-items (\"The OpenCL Palu decode: keys built in",
            "register blocks\" above), its schedule still cut for one per compute unit."]


def _e2e_ocl_final_intro(prov):
    return ["### FDC and Palu on NVIDIA's OpenCL driver, final (kvcomp bench, H200)", "",
            f"The same grid on {prov} (`.carry/visit92.sh`, visit 92): `a01b393`, Palu's schedule cut for 8 × the",
            "compute units (\"The final OpenCL Palu decode\" above). The Palu kernel is still CUDA-core-style, and",
            "the target (≥ 1.5) is about the method: this ratio still measures that kernel against FDC's."]


def _e2e_ocl_batch16_intro(prov, rows):
    tbt = {(r["method"], r["batch"]): float(r["value"]) for r in rows if r["metric"] == "tbt_ms"}
    step = (f" none's step takes {tbt[('none', '16')]:.1f} ms at batch 16 against {tbt[('none', '1')]:.1f} at batch 1, "
            "and FDC's and ZACK's equal it: at batch 16 this backend's step is bound by something other than the "
            "attention over the cache (not profiled: OpenCL has no per-op profile here)."
            if ("none", "16") in tbt and ("none", "1") in tbt else "")
    return ["### ZACK, FDC and Palu on NVIDIA's OpenCL driver at batch 16 (kvcomp bench, H200)", "",
            f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {prov} (`.carry/visit93.sh`, visit 93): zack,",
            "fdc and palu calibrated on CUDA as above, p = 0.5,",
            "batches 1 and 16 at 4K (16 × 32K would prefill for minutes per method on this backend), none in the",
            "same visit." + step]


def _combination_point(r):
    """The bench table's parameter of a row of the combination's end-to-end run."""
    o = dict(kv.split("=", 1) for kv in r["method_opts"].split(";") if "=" in kv)
    parts = [f"{o['bits']}-bit"] if "bits" in o else []
    if "compression" in o:
        parts.append(f"p {float(o['compression']):g}")
    if "lowrank" in o:
        parts.append(f"{o['lowrank']} rank {o['rank']}")
    return ", ".join(parts) or None


def _none_tbt(rows):
    """' (TBT at B × C: T ms, ...)' of none's rows in a bench file, or '' without any."""
    pts = [f"{r['batch']} × {r['context']}: {float(r['value']):.2f} ms" for r in rows
           if r["method"] == "none" and r["metric"] == "tbt_ms"]
    return f" (TBT {', '.join(pts)})" if pts else ""


def _simt_or_tc_point(r):
    """The combination's parameter, naming the decode kernel of visit 42's two files."""
    kernel = "SIMT decode" if r["source"] == "bench_e2e_combination_ranks_simt_h200.csv" else "tensor-core decode"
    p = _combination_point(r)
    return f"{p}, {kernel}" if p and r["method"] != "none" else p


def _e2e_combination(rows, ranks, ranks_tc=()):
    out = []
    if rows:
        out += ["### The quantizers on the reduced cache end to end (kvcomp bench, H200)", "",
                f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {provenance(rows)} (`docs/data/"
                "bench_e2e_combination_h200.csv`, commands in `docs/data/gpu_visits_2026-11-27.log`, visit 37): fdc "
            "calibrated on the random-weight model (8192 uniform token ids, removal rate 0); kivi at 4 bits (groups "
            "of 32, 32 fp16 residual tokens) and zipcache at its defaults, each on the model's cache and on fdc's "
            "cache at rank 64 of 128 (`lowrank=fdc,rank=64`: the quantizer's blocks at head_dim 64, q and k "
            "projected online); fdc at p = 0.5 (fp16 pages, every head at 64 on random weights); 16 generated "
                "tokens, one run per point, none in the same visit.", ""] + \
            bench_vs_none(rows, param=_combination_point, param_name="options") + [""]
    if ranks:
        out += ["### The quantizers on the reduced cache at other ranks end to end (kvcomp bench, H200)", "",
                f"The same way on {provenance(ranks)} (`docs/data/bench_e2e_combination_ranks_h200.csv`, visit 39): "
                "kivi-4 on fdc's cache at rank 64 of 128 (the quantized decode on tensor cores), 96 and 48 (groups "
                "of 32, 32 and 16 channels; the decode on the SIMT kernel, at that commit the only one for widths "
                "other than 64 and 128). none was not run in this visit; the table above has it" + _none_tbt(rows) +
                ".", ""] + \
            bench_vs_none(ranks, param=_combination_point, param_name="options") + [""]
    if ranks_tc:
        out += ["### The quantizers on the reduced cache at other ranks, decode on tensor cores (kvcomp bench, H200)",
                "", f"The same runs on {provenance(ranks_tc)} (`docs/data/bench_e2e_combination_ranks_mma_h200.csv`, "
                "visit 42), after the tensor-core quantized decode took every width that is a multiple of 16: none, "
                "kivi-4 on fdc's cache at ranks 64, 96 and 48 on the tensor-core decode, and ranks 96 and 48 again "
                "with `KVCOMP_QUANT_DECODE=simt` (the SIMT decode, the path of the table above; "
                "`bench_e2e_combination_ranks_simt_h200.csv`), all in one visit. One run per point.", ""] + \
            bench_vs_none(ranks_tc, param=_simt_or_tc_point, param_name="options") + [""]
    return out


def _worker_scales(rows):
    """Balanced decode rows scheduled for compute_units x s workers (bench_ops --worker-scales): mean time
    and fraction of copy per (pages, profile, batch, context) and scale."""
    import re as _re
    cells, scales = {}, set()
    for r in rows:
        m = _re.match(r"decode_lowrank_(q4_)?balanced(?:_x(\d+))?_(p\d+)$", r["op"])
        if not m or not r["time_ms"]:
            continue
        s = int(m.group(2) or 1)
        scales.add(s)
        key = ("q4" if m.group(1) else "f16", m.group(3), int(r["batch"]), int(r["context"]))
        cells.setdefault(key, {}).setdefault(s, []).append((float(r["time_ms"]), float(r["fraction_of_copy"])))
    if not cells:
        return []
    sc = sorted(scales)
    out = ["### The balanced schedule for more workers than SMs (bench_ops --worker-scales, H200)", "",
           f"The same decodes with the schedule built for compute_units × s workers (`{rows[0]['commit']}`, "
           f"{rows[0]['date'][:10]}, `docs/data/bench_ops_worker_scales_h200.csv`; mean of the runs the visit finished, "
           "one or two). The tensor-core kernels keep 3 blocks per SM resident, so s = 3 makes one worker per "
           "resident block. Cells: ms (fraction of copy).", "",
           "| pages | profile | batch | context | " + " | ".join(f"s = {s}" for s in sc) + " |",
           "|---|---|---|---|" + "---|" * len(sc)]
    for key in sorted(cells):
        row = [mean_cell(cells[key].get(s)) for s in sc]
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(row) + " |")
    return out + [""]


def _e2e_before_after(rows):
    """TTFT and TBT per (method, compression, batch, prompt) for the two binaries of a kvcomp bench file (the one
    that also ran none = after), none as the reference."""
    if not rows:
        return []
    commits = commits_in_order(rows)
    if len(commits) != 2:
        return []
    # The new binary also ran none (first); the old one only the method.
    new = next(r["commit"] for r in rows if r["method"] == "none")
    old = commits[1] if commits[0] == new else commits[0]
    v = {}
    for r in rows:
        m = re.search(r"compression=([0-9.]+)", r["method_opts"])
        key = (r["method"], m.group(1) if m else "", int(r["batch"]), int(r["context"]))
        v[key + (r["commit"], r["metric"])] = float(r["value"])
    out = ["### End to end before and after this session's ragged decode kernels (kvcomp bench, H100)", "",
           f"`kvcomp bench --random-weights` at Llama-3-8B shapes on {provenance(rows)} (`docs/data/"
           "bench_e2e_ragged_kernels_h100.csv`; visits 54 and 54b in `docs/data/gpu_visits_2026-11-27.log`): fdc "
           "calibrated on the random-weight model (8192 uniform token ids, removal rate 0), ranks re-chosen at load "
           f"for compression p (random weights give every head the same rank); `{old}` (before the 4-block and "
           f"unrolled ragged decodes) and `{new}`, one after the other, 16 generated tokens, one run per point; "
           "none once, by the new binary. The 8 × 32K point does not fit this card's memory, so batch 4.", "",
           "| method | p | batch | prompt | TTFT ms before | TTFT ms after | TBT ms before | TBT ms after | "
           "TBT before / after | TBT / none's |", "|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted({k[:4] for k in v}):
        meth, p, b, ctx = key
        none = v.get(("none", "", b, ctx, new, "tbt_ms"))
        if meth == "none":
            out.append(f"| none | | {b} | {ctx} | – | {v[key + (new, 'ttft_ms')]:.0f} | – | "
                       f"{v[key + (new, 'tbt_ms')]:.2f} | – | 1.00 |")
            continue
        g = lambda c, met: v.get(key + (c, met))
        if None in (g(old, "ttft_ms"), g(new, "ttft_ms"), g(old, "tbt_ms"), g(new, "tbt_ms")):
            continue
        out.append(f"| {meth} | {p} | {b} | {ctx} | {g(old, 'ttft_ms'):.0f} | {g(new, 'ttft_ms'):.0f} | "
                   f"{g(old, 'tbt_ms'):.2f} | {g(new, 'tbt_ms'):.2f} | {g(old, 'tbt_ms') / g(new, 'tbt_ms'):.3f}× | "
                   + (f"{g(new, 'tbt_ms') / none:.2f} |" if none else "– |"))
    return out + [""]


_LOWRANK_AND_NONE = ("none", "zack", "fdc", "palu")


def lowrank_section(data_dir, results):
    ev = [r for r in results if r["source"] == "eval_lowrank_methods.csv"]
    ev512 = [r for r in results if r["source"] == "eval_lowrank_methods_512_h200.csv"]
    be = [r for r in results if r["source"] == "bench_lowrank.csv"]
    be_h200 = [r for r in results if r["source"] == "bench_lowrank_h200.csv"]
    be_palu = [r for r in results if r["source"] == "bench_e2e_palu_mma_h200.csv"]
    be_palu_auto = [r for r in results if r["source"] == "bench_e2e_palu_auto_h200.csv"]
    palu_workers = [r for r in results if r["source"] == "bench_e2e_palu_workers_h200.csv"]
    be_palu_half2 = [r for r in results if r["source"] == "bench_e2e_palu_half2_h200.csv"]
    b16 = [r for r in results if r["source"] == "bench_e2e_batch16_h200.csv" and r["method"] in _LOWRANK_AND_NONE]
    b16_ocl = [r for r in results if r["source"] == "bench_e2e_batch16_ocl_h200.csv"]
    ocl_blocked = [r for r in results if r["source"] == "bench_e2e_ocl_palu_blocked_h200.csv"]
    ocl_final = [r for r in results if r["source"] == "bench_e2e_ocl_palu_final_h200.csv"]
    ocl_b16 = [r for r in results if r["source"] == "bench_e2e_ocl_batch16_h200.csv"]
    rs = [r for r in results if r["source"] == "ratesearch_default_model.csv"]
    q4 = [r for r in results if r["source"] == "eval_lowrank_q4.csv"]
    combo = [r for r in results if r["source"] == "bench_e2e_combination_h200.csv"]
    combo_ranks = [r for r in results if r["source"] == "bench_e2e_combination_ranks_h200.csv"]
    combo_ranks_tc = [r for r in results if r["source"] in ("bench_e2e_combination_ranks_mma_h200.csv",
                                                            "bench_e2e_combination_ranks_simt_h200.csv")]
    q4_cuda = [r for r in results if r["source"] == "eval_lowrank_q4_cuda.csv"]
    e2e_kernels = [r for r in results if r["source"] == "bench_e2e_ragged_kernels_h100.csv"]
    lq = {name: [r for r in results if r["source"] == name] for name, _, _, _ in _LOWRANK_QUANT_TABLES}
    # Kernel runs, each with the fp16 decode of its own run: the low-rank kernels, and (a later visit)
    # the kv_bits=4 pages next to the fp16 low-rank pages.
    kernels = []
    for name in ("bench_ops_lowrank_h100.csv", "bench_ops_methods.csv", "bench_ops_lowrank_q4_h100.csv",
                 "bench_ops_lowrank_warp_h100.csv"):
        kernels += _kernels(read_dicts(os.path.join(data_dir, name)))
    kernels += _before_after(read_dicts(os.path.join(data_dir, "bench_ops_lowrank_warp_base_h100.csv")),
                             read_dicts(os.path.join(data_dir, "bench_ops_lowrank_warp_h100.csv")), _warp_caption)
    mma = read_dicts(os.path.join(data_dir, "bench_ops_lowrank_mma_h200.csv"))
    kernels += _kernels(mma)
    kernels += _before_after(read_dicts(os.path.join(data_dir, "bench_ops_lowrank_mma_base_h200.csv")), mma,
                             _mma_caption)
    kernels += _ab(read_dicts(os.path.join(data_dir, "bench_ops_ab_h200.csv")))
    kernels += _worker_scales(read_dicts(os.path.join(data_dir, "bench_ops_worker_scales_h200.csv")))
    kernels += schedule_section(data_dir)
    kernels += _kernels(read_dicts(os.path.join(data_dir, "bench_ops_lowrank_ocl_h200.csv")))
    kernels += palu_section(data_dir)
    kernels += ocl_palu_section(data_dir)
    kernels += _kernels(read_dicts(os.path.join(data_dir, "bench_ops_palu_final_h200.csv")),
                        "on CUDA the tensor-core kernel attn_decode_palu_mma; bench_ops --cold, one pass")
    e2e = (_e2e(be, _e2e_h100_intro) + _e2e(be_h200, _e2e_h200_intro) + _e2e(be_palu, _e2e_palu_intro)
           + _e2e(be_palu_auto, lambda prov: _e2e_palu_auto_intro(prov, palu_workers))
           + _e2e(be_palu_half2, lambda prov: _e2e_palu_half2_intro(prov, be_palu_half2))
           + _e2e(b16, lambda prov: _e2e_batch16_intro(prov, b16))
           + _e2e(b16_ocl, lambda prov: _e2e_batch16_ocl_intro(prov, b16_ocl))
           + _e2e(ocl_blocked, _e2e_ocl_blocked_intro) + _e2e(ocl_final, _e2e_ocl_final_intro)
           + _e2e(ocl_b16, lambda prov: _e2e_ocl_batch16_intro(prov, ocl_b16)))
    body = (_accuracy(ev) + _accuracy(ev512, _accuracy_512_intro(ev512)) + spectrum_section(data_dir) + _ratesearch(rs)
            + _q4_accuracy(q4) + _q4_accuracy_cuda(q4_cuda)
            + _lowrank_quant_accuracy(lq) + kernels + e2e + _e2e_combination(combo, combo_ranks, combo_ranks_tc) + _e2e_before_after(e2e_kernels))
    if not body:
        return []
    return ["## Low-rank KV: ZACK, FDC and Palu", ""] + body
