"""ZipCache's recompression modes (recompress=append|all) on the default model: perplexity of each
mode against none in the same run, from docs/data/requant_drift.csv (tools/report/measure_requant_drift.sh)."""
import os

from results_data import opts, provenance, read_dicts

SOURCE = "requant_drift.csv"


def requant_section(data_dir):
    rows = [r for r in read_dicts(os.path.join(data_dir, SOURCE)) if r["metric"] == "perplexity"]
    if not rows:
        return []
    # Group by the settings other than recompress, and context.
    points = {}
    for r in rows:
        o = opts(r["method_opts"])
        mode = o.pop("recompress", "append")
        key = (";".join(f"{k}={v}" for k, v in sorted(o.items())), int(r["context"]))
        p = points.setdefault(key, {"none": float(r["baseline_value"]), "block": int(o.get("block", 100))})
        p[mode] = float(r["value"])
    out = ["### ZipCache recompression: append-only versus re-quantize-everything (drift)", "",
           f"`tools/report/measure_requant_drift.sh` on {provenance(rows)}: `kvcomp eval -t perplexity` on the default",
           "model (second half of each window forced through the decode path, so context / 2 / block recompressions),",
           "zipcache `recompress=append` (the default: each full window becomes new blocks) and `recompress=all` (the",
           "authors' code: every token of the request dequantized, re-ranked with the window's probes and re-quantized",
           "at each flush), `none` of the same run. The direct error of the dequantized cache after each round is in",
           "`docs/data/requant_drift.log`.", "",
           "| settings | context | recompressions | none | append | all | all / append |", "|---|---|---|---|---|---|---|"]
    for (settings, ctx), p in sorted(points.items()):
        if "append" not in p or "all" not in p:
            continue
        out.append(f"| {settings or 'defaults'} | {ctx} | {ctx // 2 // p['block']} | {p['none']:.2f} | "
                   f"{p['append']:.2f} | {p['all']:.2f} | {p['all'] / p['append']:.3f} |")
    return out + [""]
