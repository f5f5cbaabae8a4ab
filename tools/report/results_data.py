"""Reads the measurement CSVs of docs/data for the report (no numbers are made here).

One schema for speed and accuracy (tools/cli/results_csv.h): kvcomp eval, sweep and bench rows,
one row per (method, task, task_opts, context, batch, metric). Older bench CSVs from the GPU host
(bench_e2e.csv: one row per point with a column per metric) are read into the same shape, column
for column, so old and new bench rows plot together.
"""
import csv
import os

SCHEMA = ("date,commit,device,backend,model,method,method_opts,task,task_opts,context,batch,examples,seed,"
          "metric,value,baseline_value,kv_bytes,kv_bytes_baseline,compression_ratio").split(",")
# The bench_e2e.csv columns written by kvcomp bench before the shared schema, and the metric each
# becomes (the same names kvcomp bench writes now).
LEGACY_BENCH = ("date,commit,device,backend,method,weights,batch,prompt,gen,ttft_ms,tbt_ms,decode_tok_s,kv_bytes,"
                "weight_bytes,copy_gbps,floor_ms,tbt_over_floor").split(",")
LEGACY_METRICS = {"ttft_ms": "ttft_ms", "tbt_ms": "tbt_ms", "decode_tok_s": "decode_tokens_per_s",
                  "kv_bytes": "kv_bytes_batch", "floor_ms": "floor_ms", "tbt_over_floor": "tbt_over_floor",
                  "copy_gbps": "copy_gbps", "weight_bytes": "weight_bytes"}


def num(x):
    """Float of a CSV cell; None for an empty cell (not measured)."""
    return float(x) if x not in ("", None) else None


def read_csv(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r, None)
        return header, [row for row in r if len(row) == len(header or [])]


def _from_legacy_bench(header, rows, source):
    out = []
    for v in rows:
        old = dict(zip(header, v))
        for col, metric in LEGACY_METRICS.items():
            out.append({"date": old["date"], "commit": old["commit"], "device": old["device"], "backend": old["backend"],
                        "model": "", "method": old["method"], "method_opts": "", "task": "bench",
                        "task_opts": f"gen={old['gen']};weights={old['weights']}", "context": old["prompt"],
                        "batch": old["batch"], "examples": old["batch"], "seed": "", "metric": metric,
                        "value": old[col], "baseline_value": old[col] if old["method"] == "none" else "",
                        "kv_bytes": "", "kv_bytes_baseline": "", "compression_ratio": "", "source": source})
    return out


def load_results(data_dir):
    """Every schema row of every CSV in data_dir (plus legacy bench rows), each with 'source'."""
    out = []
    for name in sorted(os.listdir(data_dir)):
        if not name.endswith(".csv"):
            continue
        header, rows = read_csv(os.path.join(data_dir, name))
        if header == SCHEMA:
            out += [dict(zip(header, v), source=name) for v in rows]
        elif header == LEGACY_BENCH:
            out += _from_legacy_bench(header, rows, name)
    return out


def commits_in_order(rows):
    """The commits of bench rows in the order they first appear (an A/B file: the old binary's first)."""
    return list(dict.fromkeys(r["commit"] for r in rows))


def read_dicts(path):
    """Rows of any CSV as dicts ([] when the file does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def method_label(r):
    return r["method"] + (":" + r["method_opts"] if r["method_opts"] else "")


def opts(s):
    """"depth=0.5;haystack=keys" -> {"depth": "0.5", "haystack": "keys"}."""
    return dict(kv.split("=", 1) if "=" in kv else (kv, "") for kv in s.split(";") if kv)


def provenance(rows):
    """"device (backend), commit C, DATE1 to DATE2" of a set of rows."""
    devs = sorted({f"{r['device']} ({r['backend']})" for r in rows})
    commits = sorted({r["commit"] for r in rows})
    dates = sorted(r["date"][:10] for r in rows)
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    return f"{', '.join(devs)}; commit {', '.join('`' + c + '`' for c in commits)}; {span}"
