"""The PNG plots of docs/RESULTS.md, each drawn from CSV rows (results_data.load_results and
docs/data/bench_ops.csv); every function returns the file it wrote, or None when it has no data."""
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from results_data import method_label, num, opts  # noqa: E402

# PNGs without the matplotlib version in their metadata, so regenerating with the same data gives
# the same file.
SAVE = {"dpi": 110, "metadata": {"Software": None}, "bbox_inches": "tight"}


def _save(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.savefig(path, **SAVE)
    plt.close(fig)
    return path


def accuracy_panels(rows):
    """{(task, metric): rows} of eval rows; needle rows of one haystack each, depths averaged later."""
    panels = defaultdict(list)
    for r in rows:
        if r["task"] == "bench" or num(r["value"]) is None:
            continue
        key = r["task"] + (":" + opts(r["task_opts"]).get("haystack", "") if r["task"] == "needle" else "")
        panels[(key, r["metric"])].append(r)
    return dict(sorted(panels.items()))


def mean_over_depths(rows):
    """{(method label, context): (ratio, value, none value)}: means over the rows of a point."""
    acc = defaultdict(list)
    for r in rows:
        acc[(method_label(r), int(r["context"]))].append(r)
    out = {}
    for k, rs in acc.items():
        out[k] = tuple(sum(num(r[c]) for r in rs) / len(rs) for c in ("compression_ratio", "value", "baseline_value"))
    return out


def accuracy_vs_ratio(rows, out_dir):
    """Score kept (method / none on the same examples; perplexity: none / method, so 1 = no loss and
    lower = worse) versus compression ratio: one colour per context, one marker and line per method
    family (window, kivi, zipcache, ...) joining its settings; the uncompressed cache is the line at 1."""
    panels = accuracy_panels(rows)
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.4 * len(panels), 4.4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, ((task, metric), rs) in zip(axes[0], panels.items()):
        pts = mean_over_depths(rs)
        contexts = sorted({c for _, c in pts})
        families = sorted({m.split(":", 1)[0] for m, _ in pts if not m.startswith("none")})
        markers = {f: "osD^v<>"[i % 7] for i, f in enumerate(families)}
        lower_better = metric == "perplexity"
        for i, ctx in enumerate(contexts):
            for fam in families:
                mine = sorted((v[0], (v[2] / v[1]) if lower_better else (v[1] / v[2]) if v[2] else 0.0, m)
                              for (m, c), v in pts.items() if c == ctx and m.split(":", 1)[0] == fam)
                if not mine:
                    continue
                ax.plot([p[0] for p in mine], [p[1] for p in mine], marker=markers[fam], linestyle="-",
                        color=colors[i % len(colors)], label=f"{fam}, {ctx} tokens")
                for x, y, m in mine:
                    ax.annotate(m.split(":", 1)[-1], (x, y), textcoords="offset points", xytext=(4, 3), fontsize=6)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="none (uncompressed)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("compression ratio (none KV bytes / method KV bytes)")
        ax.set_ylabel(("none / method " if lower_better else "method / none ") + metric +
                      (" (mean over depths)" if task.startswith("needle") else ""))
        ax.set_title(task)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle("Score kept versus compression ratio (each point against the uncompressed cache on the same examples)")
    return _save(fig, out_dir, "accuracy_vs_ratio.png")


def needle_by_depth(rows, out_dir):
    rs = [r for r in rows if r["task"] == "needle"]
    if not rs:
        return None
    contexts = sorted({int(r["context"]) for r in rs})
    names = sorted({f"{method_label(r)} ({opts(r['task_opts']).get('haystack', '')})" for r in rs})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # One colour and marker per series in every panel; later series drawn smaller so that equal
    # values (e.g. a window as long as the context) stay visible under each other.
    style = {n: (colors[i % len(colors)], "osD^v"[i % 5], 9 - 1.5 * (i % 4)) for i, n in enumerate(names)}
    fig, axes = plt.subplots(1, len(contexts), figsize=(4.5 * len(contexts), 3.8), squeeze=False, sharey=True)
    for ax, ctx in zip(axes[0], contexts):
        series = defaultdict(dict)
        for r in rs:
            if int(r["context"]) == ctx:
                hay = opts(r["task_opts"]).get("haystack", "")
                series[f"{method_label(r)} ({hay})"][float(opts(r["task_opts"])["depth"])] = num(r["value"])
        for name, pts in sorted(series.items()):
            xs = sorted(pts)
            col, mk, size = style[name]
            ax.plot(xs, [pts[x] for x in xs], "-", marker=mk, markersize=size, color=col, label=name)
        ax.set_title(f"needle, {ctx} tokens")
        ax.set_xlabel("depth of the key line (0 = first, 1 = last)")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("exact match")
    return _save(fig, out_dir, "needle_by_depth.png")


def tbt_vs_context(rows, out_dir):
    rs = [r for r in rows if r["task"] == "bench" and r["metric"] == "tbt_ms"]
    if not rs:
        return None
    groups = defaultdict(list)  # one panel per device: a CPU and a GPU differ by 100x
    for r in rs:
        groups[r["device"]].append(r)
    fig, axes = plt.subplots(1, len(groups), figsize=(5.5 * len(groups), 4), squeeze=False)
    for ax, (dev, grs) in zip(axes[0], sorted(groups.items())):
        series = defaultdict(list)
        for r in grs:
            model = os.path.basename(r["model"].rstrip("/")) or r["source"]
            series[f"{method_label(r)}, {r['backend']}, batch {r['batch']}, {model}"].append(
                (int(r["context"]), num(r["value"])))
        for name, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (prompt tokens)")
        ax.set_ylabel("time between tokens, ms (median)")
        ax.set_title(dev, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Decode time between tokens versus context (kvcomp bench)")
    return _save(fig, out_dir, "tbt_vs_context.png")


def attention_vs_context(ops, out_dir):
    """Decode attention time vs context, one panel per backend: the fp16 cache and the quantized
    layouts (one line per method and batch)."""
    methods = {"decode_fp16": "fp16 (none)", "decode_zipcache": "zipcache 4/2-bit", "decode_kivi2": "kivi 2-bit"}
    rs = [r for r in ops if r["op"] in methods and r["time_ms"]]
    if not rs:
        return None
    backends = sorted({(r["backend"], r["device"][:28]) for r in rs})
    fig, axes = plt.subplots(1, len(backends), figsize=(6.5 * len(backends), 4.5), squeeze=False)
    for ax, (be, dev) in zip(axes[0], backends):
        series = defaultdict(list)
        for r in rs:
            if r["backend"] == be:
                series[f"{methods[r['op']]}, batch {r['batch']}"].append((int(r["context"]), float(r["time_ms"])))
        for name, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-" if "fp16" in name else "s--", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context (cached tokens)")
        ax.set_ylabel("decode attention time, ms (median of 20)")
        ax.set_title(f"{be} ({dev}): decode attention, 32/8 heads of 128", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    return _save(fig, out_dir, "attention_vs_context.png")


def bytes_per_token(rows, out_dir):
    """KV bytes per cached token per method: kv_bytes / context of eval rows (one request each)."""
    series = defaultdict(dict)
    for r in rows:
        if r["task"] == "bench" or num(r["kv_bytes"]) is None:
            continue
        ctx = int(r["context"])
        series[method_label(r)][ctx] = num(r["kv_bytes"]) / ctx
        if num(r["kv_bytes_baseline"]) is not None:
            series["none"][ctx] = num(r["kv_bytes_baseline"]) / ctx
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, pts in sorted(series.items()):
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], "o-", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens per request)")
    ax.set_ylabel("KV bytes allocated per token")
    ax.set_title("KV cache bytes per token per method (as allocated, pages included)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return _save(fig, out_dir, "kv_bytes_per_token.png")
