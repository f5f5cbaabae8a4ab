"""ZipCache against KIVI at equal bytes on 512 line-retrieval examples (issue 6's "better than KIVI-2 at equal bytes"
and "≥ 4.5× at ≥ 99 %"), from
  eval_quant_lines512_fine_h200.csv  kvcomp sweep on an H200 (docs/data/gpu_visits_2026-11-28.log, visit 141): none,
                                     KIVI-2 (residual 32 and 128), KIVI-4, ZipCache over a fine grid of the salient
                                     ratio at blocks of 100 and 200, and nnz=causal; line retrieval at 1K and 2K
                                     (512 examples, seed 1) and perplexity at 1K (64 windows).
  eval_quant_options512_h200.csv     visit 144: more prefill probes (probe_recent / probe_random 0.1), 8-bit salient
                                     tokens, tail=window at blocks of 200; the same tasks and examples
  eval_quant_probes512_h200.csv      visit 145: probe_recent 0.1 / 0.2 / 0.3 over r and the block
Every number is read from those files; nothing is typed here.
"""
from results_data import provenance

SOURCE = "eval_quant_lines512_fine_h200.csv"
OPTIONS = ("eval_quant_options512_h200.csv", "eval_quant_probes512_h200.csv")
SOURCES = (SOURCE,) + OPTIONS


def _opts(r):
    return dict(kv.split("=", 1) for kv in r["method_opts"].split(";") if "=" in kv)


def point_label(r):
    o = _opts(r)
    if r["method"] == "zipcache":
        extra = "".join(f" {k}={v}" for k, v in sorted(o.items()) if k not in ("ratio", "block"))
        return f"zipcache r={o.get('ratio')} block={o.get('block', '100')}{extra}"
    return r["method"] + "".join(f" {k}={v}" for k, v in sorted(o.items()))


def _ratio(r):
    return float(r["compression_ratio"])


def is_kivi2(r):
    return r["method"] == "kivi" and _opts(r).get("bits") == "2"


def _zip_default(r):
    """ZipCache with every option but the ratio at its default (block 100, nnz=probe)."""
    return r["method"] == "zipcache" and set(_opts(r)) == {"ratio"}


def _by_context(rows, keep):
    """Per context, ascending: (context, the rows of it that keep() accepts, most compressed first)."""
    for ctx in sorted({int(r["context"]) for r in rows}):
        yield ctx, sorted([r for r in rows if int(r["context"]) == ctx and keep(r)], key=_ratio, reverse=True)


def _versus_kivi(pts, ex):
    """Per KIVI-2 point: the best ZipCache point at no more bytes, and the nearest one with more."""
    out = []
    zips = [r for r in pts if r["method"] == "zipcache"]
    for k in sorted((r for r in pts if is_kivi2(r)), key=_ratio, reverse=True):
        kb, kv = float(k["kv_bytes"]), float(k["value"])
        text = f"{point_label(k)} scores {kv:.3f} at {_ratio(k):.2f}×"
        fewer = [z for z in zips if float(z["kv_bytes"]) <= kb]
        if fewer:
            z = max(fewer, key=lambda r: (float(r["value"]), _ratio(r)))
            d = round((float(z["value"]) - kv) * ex)
            text += (f"; the best ZipCache point at no more bytes, {point_label(z)} ({_ratio(z):.2f}×), scores "
                     f"{float(z['value']):.3f}: {abs(d)} {'more' if d >= 0 else 'fewer'} of the {ex} examples")
        more = [z for z in zips if float(z["kv_bytes"]) > kb]
        if more:
            z = min(more, key=lambda r: float(r["kv_bytes"]))
            d = round((float(z["value"]) - kv) * ex)
            text += (f"; the ZipCache point with the fewest bytes above it, {point_label(z)} "
                     f"({float(z['kv_bytes']) / kb - 1:.1%} more bytes), {float(z['value']):.3f}: {abs(d)} "
                     f"{'more' if d >= 0 else 'fewer'}")
        out.append(text)
    return out


def _options(rows, grid):
    """ZipCache's other options (visits 144-145) by compression, each beside the grid's point of the same r and block
    with the default options, and KIVI-2 of the grid."""
    if not rows:
        return []
    ex = int(rows[0]["examples"])
    out = [f"ZipCache's other options on the same {ex} examples (`{OPTIONS[0]}`, `{OPTIONS[1]}`, "
           f"{provenance(rows)}, visits 144-145): more probe queries from the end of the prompt (`probe_recent`, the "
           "paper's 5 % by default) or random ones (`probe_random`), 8-bit salient tokens (`hi_bits=8`) and, at blocks "
           "of 200, the prompt's last len % block tokens left in the fp16 window (`tail=window`). The last column is the "
           "grid's point of the same r and block with the default options (above).", ""]
    for ctx, pts in _by_context(rows, lambda r: r["method"] == "zipcache"):
        ctx_grid = [g for g in grid if int(g["context"]) == ctx]
        kivi = [g for g in ctx_grid if is_kivi2(g) and "residual" not in _opts(g)]
        out += [f"Line retrieval at {ctx} tokens" + (f" (KIVI-2: {float(kivi[0]['value']):.3f} at "
                                                     f"{_ratio(kivi[0]):.2f}×)" if kivi else "") + ":", "",
                "| method | × smaller | exact match | / none | default options, same r and block |", "|---|---|---|---|---|"]
        for r in pts:
            o = _opts(r)
            same = [g for g in ctx_grid if g["method"] == "zipcache" and _opts(g).get("ratio") == o["ratio"]
                    and _opts(g).get("block", "100") == o.get("block", "100") and not (set(_opts(g)) - {"ratio", "block"})]
            v, b = float(r["value"]), float(r["baseline_value"])
            out.append(f"| {point_label(r)} | {_ratio(r):.2f} | {v:.3f} | {v / b:.3f} | "
                       + (f"{float(same[0]['value']):.3f}" if same else "–") + " |")
        notes = []
        at45 = [r for r in pts if _ratio(r) >= 4.5]
        if at45:
            best = max(at45, key=lambda r: float(r["value"]))
            notes.append(f"At {ctx}, the best of these at ≥ 4.5× is {point_label(best)} ({_ratio(best):.2f}×), "
                         f"{float(best['value']) / float(best['baseline_value']):.3f} of none (target ≥ 0.99).")
        fewer = [r for r in pts if kivi and float(r["kv_bytes"]) <= float(kivi[0]["kv_bytes"])]
        if fewer:
            k, z = kivi[0], max(fewer, key=lambda r: float(r["value"]))
            d = round((float(z["value"]) - float(k["value"])) * ex)
            notes.append(f"At no more bytes than KIVI-2 the best of them is {point_label(z)} ({_ratio(z):.2f}×, "
                         f"{float(z['value']):.3f}): {abs(d)} {'more' if d >= 0 else 'fewer'} of the {ex} examples.")
        if notes:
            out += ["", " ".join(notes)]
        out.append("")
    return out


def quant_frontier_section(results):
    rows = [r for r in results if r["source"] == SOURCE]
    lines = [r for r in rows if r["task"] == "line_retrieval"]
    if not lines:
        return []
    ex = int(lines[0]["examples"])
    out = [f"ZipCache against KIVI at equal bytes on {ex} examples, with a finer grid of r (`{SOURCE}`, "
           f"{provenance(lines)}, visit 141; the examples of the table above, seed {lines[0]['seed']}). "
           "ZipCache's default options except where named (4-bit salient and 2-bit other tokens, blocks of 100, the "
           "probe count of the paper, `nnz=probe`); KIVI-2 at its default residual of 32 fp16 tokens and at 128 "
           "(the issue's two defaults).", ""]
    for ctx, pts in _by_context(lines, lambda r: r["method"] != "none"):
        none = [r for r in lines if int(r["context"]) == ctx and r["method"] == "none"]
        out += [f"Line retrieval at {ctx} tokens (none {float(none[0]['value']):.3f}):" if none
                else f"Line retrieval at {ctx} tokens:", "",
                "| method | KV bytes | × smaller | exact match | / none | ≥ 0.99 of none |", "|---|---|---|---|---|---|"]
        for r in pts:
            v, b = float(r["value"]), float(r["baseline_value"])
            out.append(f"| {point_label(r)} | {int(float(r['kv_bytes']))} | {_ratio(r):.2f} | {v:.3f} | {v / b:.3f} | "
                       f"{'yes' if v >= 0.99 * b else 'no'} |")
        out.append("")
        zips = [r for r in pts if r["method"] == "zipcache"]
        at45 = [z for z in zips if _ratio(z) >= 4.5]
        best45 = max(at45, key=lambda r: float(r["value"])) if at45 else None
        summary = [f"At {ctx}: " + "; ".join(_versus_kivi(pts, ex)) + "."]
        if best45:
            b = float(best45["baseline_value"])
            summary.append(f"The best ZipCache point at ≥ 4.5× is {point_label(best45)} ({_ratio(best45):.2f}×) at "
                           f"{float(best45['value']) / b:.3f} of none (target ≥ 0.99).")
        keep = [z for z in zips if float(z["value"]) >= 0.99 * float(z["baseline_value"])]
        summary.append(f"The most compressed ZipCache point keeping ≥ 99 % of none: {point_label(max(keep, key=_ratio))}"
                       if keep else "No ZipCache point keeps ≥ 99 % of none.")
        causal = [z for z in zips if _opts(z).get("nnz") == "causal"]
        pairs = []
        for c in sorted(causal, key=lambda r: float(_opts(r)["ratio"])):
            same = [z for z in zips if _zip_default(z) and _opts(z)["ratio"] == _opts(c)["ratio"]]
            if same:
                pairs.append(f"r = {_opts(c)['ratio']}: {float(c['value']):.3f} against {float(same[0]['value']):.3f}")
        if pairs:
            summary.append("`nnz=causal` (the authors' code's count) against the default `nnz=probe` at the same bytes: "
                           + ", ".join(pairs) + ".")
        out += [" ".join(summary), ""]
    ppl = sorted([r for r in rows if r["task"] == "perplexity" and r["method"] != "none"], key=_ratio, reverse=True)
    if ppl:
        none = [r for r in rows if r["task"] == "perplexity" and r["method"] == "none"]
        base = f"; none {float(none[0]['value']):.3f}" if none else ""
        out += [f"Perplexity at {ppl[0]['context']} tokens on the same points ({ppl[0]['examples']} windows of "
                f"`heldout.txt`{base}): the first half of a window is the prompt and the second is fed token by "
                "token, so the bytes include the fp16 decode window those tokens pass through, and the ratios are "
                "lower than line retrieval's:", "",
                "| method | × smaller | perplexity | none / method |", "|---|---|---|---|"]
        for r in ppl:
            v, b = float(r["value"]), float(r["baseline_value"])
            out.append(f"| {point_label(r)} | {_ratio(r):.2f} | {v:.3f} | {b / v:.3f} |")
        out.append("")
    return out + _options([r for r in results if r["source"] in OPTIONS and r["task"] == "line_retrieval"], lines)
