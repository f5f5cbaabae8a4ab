"""The saliency kernel (probe_scores) from bench_ops runs of tools/gpu_host/run_quant.sh: the default
kernels of each backend (bench_ops_probe.csv) and CUDA's SIMT fallback (bench_ops_probe_simt.csv,
KVCOMP_PROBE_SCORES=simt) from the same visit, per case."""
import os

from results_data import read_dicts


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
