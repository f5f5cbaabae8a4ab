"""The quantizing methods' accuracy grid on the default model (issue 6's accuracy targets), from
  eval_quant_grid_h200.csv  kvcomp sweep on an H200 (docs/data/h200_visits_2026-11-26b.log, visit 7):
                            none, KIVI-2/4 and ZipCache over ratio x block x tail, line retrieval at 1K
                            and 2K (64 examples), perplexity at 1K and the needle at 1K/2K for a subset.
Every number is read from that file; nothing is typed here.
"""
import os

from results_data import provenance

SOURCE = "eval_quant_grid_h200.csv"


def _opts(r):
    return dict(kv.split("=", 1) for kv in r["method_opts"].split(";") if "=" in kv)


def _label(r):
    o = _opts(r)
    if r["method"] == "zipcache":
        return f"zipcache r={o.get('ratio')} block={o.get('block')} tail={o.get('tail', 'quantize')}"
    return r["method"] + (f" {r['method_opts']}" if r["method_opts"] else "")


def _line_retrieval(rows):
    out = []
    for ctx in sorted({int(r["context"]) for r in rows}):
        pts = [r for r in rows if int(r["context"]) == ctx and r["method"] != "none"]
        pts.sort(key=lambda r: -float(r["compression_ratio"]))
        ex = pts[0]["examples"] if pts else "?"
        out += [f"Line retrieval at {ctx} tokens ({ex} examples; none scores "
                f"{float(pts[0]['baseline_value']):.3f} on them), by compression:", "",
                "| method | KV bytes | × smaller | exact match | / none | ≥ 0.99 of none |", "|---|---|---|---|---|---|"]
        for r in pts:
            v, b = float(r["value"]), float(r["baseline_value"])
            frac = v / b if b > 0 else float("nan")
            out.append(f"| {_label(r)} | {int(float(r['kv_bytes']))} | {float(r['compression_ratio']):.2f} | {v:.3f} | "
                       f"{frac:.3f} | {'yes' if frac >= 0.99 else 'no'} |")
        zip_ok = [r for r in pts if r["method"] == "zipcache" and float(r["value"]) >= 0.99 * float(r["baseline_value"])]
        best = max(zip_ok, key=lambda r: float(r["compression_ratio"])) if zip_ok else None
        kivi2 = [r for r in pts if r["method"] == "kivi" and _opts(r).get("bits") == "2"]
        lines = []
        if best:
            lines.append(f"the most compressed ZipCache point keeping ≥ 99 % of none is {_label(best)} at "
                         f"{float(best['compression_ratio']):.2f}× (target: ≥ 4.5×)")
        else:
            lines.append("no ZipCache point keeps ≥ 99 % of none (target: ≥ 4.5× at ≥ 99 %)")
        if kivi2:
            k = kivi2[0]
            kb = float(k["kv_bytes"])
            same = [r for r in pts if r["method"] == "zipcache" and float(r["kv_bytes"]) <= kb]
            top = max(same, key=lambda r: float(r["value"])) if same else None
            if top:
                lines.append(f"at no more bytes than KIVI-2 ({float(k['compression_ratio']):.2f}×, exact match "
                             f"{float(k['value']):.3f}) the best ZipCache point is {_label(top)} "
                             f"({float(top['compression_ratio']):.2f}×, {float(top['value']):.3f})")
        if lines:
            out += ["", "At " + str(ctx) + ": " + "; ".join(lines) + "."]
        out.append("")
    return out


def _others(rows, task_prefix, title):
    pts = [r for r in rows if r["task"].startswith(task_prefix) or (r["task"] + ":" + r["task_opts"]).startswith(task_prefix)]
    if not pts:
        return []
    out = [title, "", "| task | context | method | × smaller | value | none |", "|---|---|---|---|---|---|"]
    for r in sorted(pts, key=lambda r: (r["task_opts"], int(r["context"]), -float(r["compression_ratio"]))):
        task = r["task"] + (f" ({r['task_opts']})" if r["task_opts"] else "")
        out.append(f"| {task} | {r['context']} | {_label(r) if r['method'] != 'none' else 'none'} | "
                   f"{float(r['compression_ratio']):.2f} | {float(r['value']):.3f} | {float(r['baseline_value']):.3f} |")
    return out + [""]


def quant_grid_section(results):
    rows = [r for r in results if r["source"] == SOURCE]
    if not rows:
        return []
    lr = [r for r in rows if r["task"] == "line_retrieval"]
    out = ["### ZipCache and KIVI over their options (default model, H200)", "",
           f"`kvcomp sweep` on {provenance(rows)} (`docs/data/h200_visits_2026-11-26b.log`, visit 7): KIVI at 2 and 4",
           "bits (groups of 32, 32 fp16 residual tokens) and ZipCache over the salient ratio r (4 bits for the",
           "salient tokens, 2 for the rest), the block (the streaming gap and fp16 decode window) and `tail`",
           "(`quantize`: the whole prompt is quantized at the prefill, the paper's behaviour and the default;",
           "`window`: the prompt's last len % block tokens wait in the fp16 decode window, as KIVI keeps its residual).",
           "KV bytes are the request's as allocated (pages and the fp16 window row included); every point is",
           "scored next to none on the same examples.", ""]
    out += _line_retrieval(lr)
    out += _others(rows, "perplexity", "Perplexity at 1K (16 windows of `heldout.txt`), for a subset of the points:")
    out += _others(rows, "needle", "The needle (keys haystack; 16 examples per depth and context), the same subset:")
    return out
