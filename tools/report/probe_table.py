"""The saliency kernel (probe_scores) from bench_ops runs of tools/gpu_host/run_quant.sh: the default
kernels of each backend (bench_ops_probe.csv) and CUDA's SIMT fallback (bench_ops_probe_simt.csv,
KVCOMP_PROBE_SCORES=simt) from the same visit, per case; on the H200 (bench_ops_probe_h200.csv) with
the kernel before and after its shared-memory staging timed interleaved in one visit
(bench_ops_probe_ab_h200.csv)."""
import os
import re

from results_data import commits_in_order, read_dicts


def case_label(shape):
    """"4096 keys, 410 probes" or "16 x (4096 keys, 410 probes)" from a probe_scores shape string."""
    kv = dict(x.split("=", 1) for x in shape.split(",") if "=" in x)
    keys, probes = kv.get("keys", "?"), kv.get("probes", "?")
    if "requests" in kv:
        return f"{kv['requests']} × ({keys.split('/')[0]} keys, {probes.split('/')[0]} probes)"
    return f"{keys} keys, {probes} probes"


def probe_kernel_table(data_dir):
    rows = [r for r in read_dicts(os.path.join(data_dir, "bench_ops_probe.csv")) if r["op"] == "probe_scores"]
    simt = {(r["backend"], r["shape"]): r for r in read_dicts(os.path.join(data_dir, "bench_ops_probe_simt.csv"))
            if r["op"] == "probe_scores"}
    if not rows:
        return []
    out = ["| device | backend | commit | case (32 query / 8 KV heads of 128, f32 keys) | time ms | CUDA SIMT kernels ms | speed-up |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        s = simt.get((r["backend"], r["shape"]))
        t = float(r["time_ms"])
        st = f"{float(s['time_ms']):.3f} | {float(s['time_ms']) / t:.1f}×" if s else "– | –"
        out.append(f"| {r['device']} | {r['backend']} | `{r['commit']}` | {case_label(r['shape'])} | {t:.3f} | {st} |")
    return out


def probe_kernel_table_h200(data_dir):
    rows = [r for r in read_dicts(os.path.join(data_dir, "bench_ops_probe_h200.csv")) if r["op"] == "probe_scores"]
    ab = [r for r in read_dicts(os.path.join(data_dir, "bench_ops_probe_ab_h200.csv")) if r["op"] == "probe_scores"]
    if not rows:
        return []
    out = [f"On {rows[0]['device']} (`{rows[0]['commit']}`, {rows[0]['date'][:10]}), after the column-sum kernel's rework: a "
           "block's 4 warps share each stage of 8 probe-row tiles (q fragments, positions and log-denominators) "
           "copied once into shared memory with cp.async, double-buffered, instead of each warp loading every row "
           "tile from L2. The lse pass (only run when the caller has no lse; the engine passes the prefill's) is "
           "unchanged. Before/after: the binaries of the two commits timed interleaved in one visit, two runs each "
           "(mean ms; `docs/data/bench_ops_probe_ab_h200.csv`).", "",
           "| backend | case (32 query / 8 KV heads of 128, f32 keys) | time ms | before ms | after ms | speed-up |",
           "|---|---|---|---|---|---|"]
    commits = commits_in_order(ab)
    runs = {}
    for r in ab:
        runs.setdefault((r["commit"], r["backend"], r["shape"]), []).append(float(r["time_ms"]))
    for r in rows:
        cells = "– | – | –"
        b = runs.get((commits[0], r["backend"], r["shape"])) if len(commits) == 2 else None
        a = runs.get((commits[1], r["backend"], r["shape"])) if len(commits) == 2 else None
        if a and b:
            mb, ma = sum(b) / len(b), sum(a) / len(a)
            cells = f"{mb:.3f} (`{commits[0]}`) | {ma:.3f} (`{commits[1]}`) | {mb / ma:.2f}×"
        out.append(f"| {r['backend']} | {case_label(r['shape'])} | {float(r['time_ms']):.3f} | {cells} |")
    return out + _engine_profile(os.path.join(data_dir, "h200_visits_2026-11-26b.log"))


def _engine_profile(log_path):
    """The engine's own probe_scores calls (column sums only) in a KVCOMP_PROFILE_OPS run of zipcache at
    1 x 32K, before and after, from visit 1 of the log."""
    if not os.path.exists(log_path):
        return []
    text = open(log_path).read()
    m = re.search(r"== profile zipcache 1x32K: base then new\n(.*?)\n== ", text, re.S)
    if not m:
        return []
    calls = re.findall(r"^\s+probe_scores\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s", m.group(1), re.M)
    if len(calls) != 2:
        return []
    (n0, _, mean0), (n1, _, mean1) = calls
    return ["", f"In the engine (`KVCOMP_PROFILE_OPS=1 kvcomp bench --method zipcache`, one 32K prompt, {n0} calls: "
            "one per layer, column sums only), the mean probe_scores call took "
            f"{float(mean0) / 1000:.2f} ms with the old kernel and {float(mean1) / 1000:.2f} ms with the new one "
            "(`docs/data/h200_visits_2026-11-26b.log`, visit 1)."]
