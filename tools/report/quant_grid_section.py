"""The quantizing methods' accuracy grid on the default model (issue 6's accuracy targets), from
  eval_quant_grid_paged_h200.csv  kvcomp sweep on an H200 (docs/data/gpu_visits_2026-11-27.log, visit 94):
                            none, KIVI-2/4 and ZipCache over ratio x block x tail, line retrieval at 1K
                            and 2K (64 examples), perplexity at 1K and the needle at 1K/2K for a subset,
                            with the decode window paged (a request holds only the pages its window fills);
  eval_quant_lines512_h200.csv  the points near the target, line retrieval at 512 examples (same visit);
  eval_quant_grid_h200.csv  the same grid before the window was paged (h200_visits_2026-11-26b.log,
                            visit 7): each request held a whole window row once decoding started.
  eval_zipcache_blocks_cpu.csv  ZipCache at blocks of 200 and 400 tokens (the CPU reference backend, 64
                            line-retrieval examples per point, the seed of the grid above).
  eval_zipcache_kivi_seed2_cpu.csv  ZipCache (r = 0.3 and 0.4, blocks of 200) and KIVI-2 (about r = 0.3's bytes) on
                            128 other examples (seed 2; the CPU reference backend).
  eval_quant_lines512_fine_h200.csv  a fine grid against KIVI at 512 examples, and ZipCache's other options
                            (quant_frontier_section.py).
Every number is read from those files; nothing is typed here.
"""
import os

from quant_frontier_section import SOURCES as FRONTIER, quant_frontier_section
from quant_heldout_section import SOURCES as HELDOUT, quant_heldout_section
from results_data import provenance

SOURCE = "eval_quant_grid_paged_h200.csv"
LINES512 = "eval_quant_lines512_h200.csv"
ROW_WINDOW = "eval_quant_grid_h200.csv"
BLOCKS_CPU = "eval_zipcache_blocks_cpu.csv"
SEED2_CPU = "eval_zipcache_kivi_seed2_cpu.csv"
SOURCES = (SOURCE, LINES512, ROW_WINDOW, BLOCKS_CPU, SEED2_CPU) + FRONTIER + HELDOUT


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
        zip_ok = [r for r in pts if r["method"] == "zipcache" and _keeps(r)]
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


def _row_window_note(lr, old):
    """The paged window's bytes against the row window's, point for point, at the largest context."""
    if not old or not lr:
        return []
    ctx = max(int(r["context"]) for r in lr)
    before = {_label(r): r for r in old if r["task"] == "line_retrieval" and int(r["context"]) == ctx}
    pairs = [(r, before[_label(r)]) for r in lr
             if int(r["context"]) == ctx and r["method"] != "none" and _label(r) in before]
    if not pairs:
        return []
    ratios = [float(o["kv_bytes"]) / float(r["kv_bytes"]) for r, o in pairs]
    r, o = max(pairs, key=lambda p: float(p[0]["compression_ratio"]) if p[0]["method"] == "zipcache" and
               _keeps(p[0]) else 0.0)
    return [f"Before the window was paged (`{ROW_WINDOW}`, {provenance(old)}), a request held a whole window row "
            f"of `block` (ZipCache) or `residual` (KIVI) fp16 tokens from its first window token on: at {ctx} "
            f"tokens the same points held {min(ratios):.2f}-{max(ratios):.2f}× the bytes they hold now "
            f"({_label(r)}: {float(o['compression_ratio']):.2f}× then, "
            f"{float(r['compression_ratio']):.2f}× now).", ""]


def _keeps(r):
    """The point keeps >= 99 % of none's score."""
    return float(r["value"]) >= 0.99 * float(r["baseline_value"])


def _lines512(rows):
    """Line retrieval at 512 examples for the points near the target."""
    if not rows:
        return []
    out = [f"The points near the target again at 512 examples (`{LINES512}`, {provenance(rows)}): at 64 "
           "examples one example moves the score by 1/64, more than the 1 % the target allows.", "",
           "| context | method | × smaller | exact match | / none | ≥ 0.99 of none |", "|---|---|---|---|---|---|"]
    for ctx in sorted({int(r["context"]) for r in rows}):
        pts = sorted([r for r in rows if int(r["context"]) == ctx and r["method"] != "none"],
                     key=lambda r: -float(r["compression_ratio"]))
        for r in pts:
            v, b = float(r["value"]), float(r["baseline_value"])
            out.append(f"| {ctx} | {_label(r)} | {float(r['compression_ratio']):.2f} | {v:.3f} | {v / b:.3f} | "
                       f"{'yes' if v >= 0.99 * b else 'no'} |")
    out.append("")
    for ctx in sorted({int(r["context"]) for r in rows}):
        pts = [r for r in rows if int(r["context"]) == ctx and r["method"] != "none"]
        none = [r for r in rows if int(r["context"]) == ctx and r["method"] == "none"]
        zip_ok = [r for r in pts if r["method"] == "zipcache" and _keeps(r)]
        best = max(zip_ok, key=lambda r: float(r["compression_ratio"])) if zip_ok else None
        kivi2 = [r for r in pts if r["method"] == "kivi" and _opts(r).get("bits") == "2"]
        line = f"At {ctx} (none {float(none[0]['value']):.3f}): " if none else f"At {ctx}: "
        line += (f"the most compressed ZipCache point keeping ≥ 99 % of none is {_label(best)} at "
                 f"{float(best['compression_ratio']):.2f}×" if best else "no ZipCache point keeps ≥ 99 % of none")
        zips = [r for r in pts if r["method"] == "zipcache"]
        if kivi2 and zips:
            k = kivi2[0]
            kb = float(k["kv_bytes"])
            fewer = [r for r in zips if float(r["kv_bytes"]) <= kb]
            line += f"; KIVI-2 scores {float(k['value']):.3f} at {float(k['compression_ratio']):.2f}×, "
            if fewer:
                z = max(fewer, key=lambda r: float(r["value"]))
                line += (f"the best ZipCache point at no more bytes, {_label(z)}, {float(z['value']):.3f} at "
                         f"{float(z['compression_ratio']):.2f}×")
            else:
                z = min(zips, key=lambda r: float(r["kv_bytes"]))
                line += (f"the ZipCache point with the fewest bytes here, {_label(z)}, {float(z['value']):.3f} at "
                         f"{float(z['compression_ratio']):.2f}× ({float(z['kv_bytes']) / kb - 1:.1%} more bytes)")
        out.append(line + ".")
    return out + [""]


def _blocks_cpu(rows, grid):
    """ZipCache at larger blocks (fewer per-block key parameters) next to the grid's points of the same r."""
    if not rows:
        return []
    out = [f"ZipCache at blocks of 200 and 400 tokens (`{BLOCKS_CPU}`, {provenance(rows)}; the same tasks, seed and "
           "64 examples per point as the grid above, on the CPU reference backend): a block's keys carry one min and "
           "step per channel and precision group, so longer blocks carry fewer of them per token (a block's slot is "
           "allocated whole, so 1024 tokens in blocks of 400 also pay for the 176 empty rows of the third). The "
           "grid's block-100 point of the same r is beside each (H200, visit 94).", "",
           "| context | method | × smaller | exact match | / none | ≥ 0.99 of none | block 100, same r: × smaller, "
           "exact match |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (int(r["context"]), -float(r["compression_ratio"]))):
        if r["method"] != "zipcache" or r["task"] != "line_retrieval":
            continue
        o = _opts(r)
        same = [g for g in grid if g["method"] == "zipcache" and g["task"] == "line_retrieval"
                and g["context"] == r["context"] and _opts(g).get("ratio") == o.get("ratio")
                and _opts(g).get("block") == "100" and _opts(g).get("tail", "quantize") == o.get("tail", "quantize")]
        ref = (f"{float(same[0]['compression_ratio']):.2f}, {float(same[0]['value']):.3f}" if same else "–")
        v, b = float(r["value"]), float(r["baseline_value"])
        out.append(f"| {r['context']} | {_label(r)} | {float(r['compression_ratio']):.2f} | {v:.3f} | {v / b:.3f} | "
                   f"{'yes' if _keeps(r) else 'no'} | {ref} |")
    # Scores that fall where r rises (same context and block): the sampling noise of single points.
    dips = []
    for key in {(r["context"], _opts(r).get("block")) for r in rows if r["method"] == "zipcache"}:
        pts = sorted((float(_opts(r)["ratio"]), float(r["value"])) for r in rows if r["method"] == "zipcache"
                     and (r["context"], _opts(r).get("block")) == key)
        dips += [(key, a, b) for a, b in zip(pts, pts[1:]) if b[1] < a[1]]
    if dips:
        ex = int(rows[0]["examples"])
        out += ["", "Where r rises the score should not fall, yet "
                + "; ".join(f"at {k[0]} tokens and blocks of {k[1]}, r = {b[0]:g} scores {b[1]:.3f} against "
                            f"{a[1]:.3f} at r = {a[0]:g} ({round((a[1] - b[1]) * ex)} of the {ex} examples)"
                            for k, a, b in sorted(dips))
                + ". Single points at this sample size are that coarse; the ranking of neighbouring points needs "
                "more examples."]
    return out + [""]


def _seed2_cpu(rows, seed1):
    """ZipCache against KIVI-2 at about KIVI-2's bytes on examples the grid did not use."""
    pts = [r for r in rows if r["task"] == "line_retrieval" and r["method"] != "none"]
    if not pts:
        return []
    r0 = pts[0]
    out = [f"ZipCache against KIVI-2 at about the same bytes on other examples (`{SEED2_CPU}`, {provenance(rows)}; "
           f"{r0['examples']} line-retrieval examples at {r0['context']} tokens, seed {r0['seed']}, none scores "
           f"{float(r0['baseline_value']):.3f} on them; the CPU reference backend):", "",
           "| method | × smaller | exact match | / none |", "|---|---|---|---|"]
    for r in sorted(pts, key=lambda r: -float(r["compression_ratio"])):
        v, b = float(r["value"]), float(r["baseline_value"])
        out.append(f"| {_label(r)} | {float(r['compression_ratio']):.2f} | {v:.3f} | {v / b:.3f} |")
    kivi2 = [r for r in pts if r["method"] == "kivi" and _opts(r).get("bits") == "2"]
    if kivi2:
        k, ex = kivi2[0], int(r0["examples"])
        same = [r for r in pts if r["method"] == "zipcache" and float(r["kv_bytes"]) <= float(k["kv_bytes"])]
        for z in same:
            diff = round((float(z["value"]) - float(k["value"])) * ex)
            text = (f"At no more bytes than KIVI-2, {_label(z)} answers {abs(diff)} "
                    f"{'more' if diff >= 0 else 'fewer'} of the {ex} examples than KIVI-2 here")
            # The same two points on the grid's examples (seed 1): ZipCache from the CPU blocks file, KIVI-2 from
            # the grid.
            z1 = [r for r in seed1 if r["method"] == "zipcache" and r["context"] == z["context"]
                  and _opts(r) == _opts(z)]
            k1 = [r for r in seed1 if r["method"] == "kivi" and r["context"] == k["context"] and _opts(r) == _opts(k)]
            if z1 and k1:
                text += (f"; on the grid's {z1[0]['examples']} examples (seed {z1[0]['seed']}) the same two points "
                         f"scored {float(z1[0]['value']):.3f} and {float(k1[0]['value']):.3f}")
            out += ["", text + "."]
    return out + [""]


def quant_grid_section(results):
    rows = [r for r in results if r["source"] == SOURCE]
    if not rows:
        return []
    lr = [r for r in rows if r["task"] == "line_retrieval"]
    out = ["### ZipCache and KIVI over their options (default model, H200)", "",
           f"`kvcomp sweep` on {provenance(rows)} (`docs/data/gpu_visits_2026-11-27.log`, visit 94): KIVI at 2 and 4",
           "bits (groups of 32, 32 fp16 residual tokens) and ZipCache over the salient ratio r (4 bits for the",
           "salient tokens, 2 for the rest), the block (the streaming gap and fp16 decode window) and `tail`",
           "(`quantize`: the whole prompt is quantized at the prefill, the paper's behaviour and the default;",
           "`window`: the prompt's last len % block tokens wait in the fp16 decode window, as KIVI keeps its residual).",
           "KV bytes are the most the request held (its block slots and its window's pages of 16 tokens, taken as",
           "the window fills); every point is scored next to none on the same examples.", ""]
    out += _line_retrieval(lr)
    out += _lines512([r for r in results if r["source"] == LINES512])
    out += quant_frontier_section(results)
    out += quant_heldout_section(results)
    out += _blocks_cpu([r for r in results if r["source"] == BLOCKS_CPU], lr)
    out += _seed2_cpu([r for r in results if r["source"] == SEED2_CPU],
                      [r for r in results if r["source"] == BLOCKS_CPU and r["task"] == "line_retrieval"] + lr)
    out += _row_window_note(lr, [r for r in results if r["source"] == ROW_WINDOW])
    out += _others(rows, "perplexity", "Perplexity at 1K (16 windows of `heldout.txt`), for a subset of the points:")
    out += _others(rows, "needle", "The needle (keys haystack; 16 examples per depth and context), the same subset:")
    return out
