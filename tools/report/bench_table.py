"""kvcomp bench rows (results schema, task "bench") as a table against method none of the same run:
one row per (method, parameter, backend, batch, prompt) with TTFT, TBT and KV bytes and their ratios
to none at the same point."""


def bench_points(rows, param):
    """{(method, param(row), backend, batch, context): {metric: row}}."""
    pts = {}
    for r in rows:
        pts.setdefault((r["method"], param(r), r["backend"], int(r["batch"]), int(r["context"])), {})[r["metric"]] = r
    return pts


def bench_vs_none(rows, param=lambda r: r["method_opts"] or None, param_name="options"):
    pts = bench_points(rows, param)
    none = {k[2:]: v for k, v in pts.items() if k[0] == "none"}
    out = [f"| method | {param_name} | backend | batch | prompt | TTFT ms | TTFT / none | TBT ms | TBT / none | KV bytes | KV / none |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(pts, key=lambda k: (k[0] != "none", k[0], str(k[1] or ""), k[2], k[3], k[4])):
        m, p, be, b, ctx = key
        v = {k: float(r["value"]) for k, r in pts[key].items()}
        n = {k: float(r["value"]) for k, r in none.get((be, b, ctx), {}).items()}

        def rel(k):
            return f"{v[k] / n[k]:.2f}" if k in n and k in v and n[k] else "–"

        shown = "" if p is None else (f"{p:.1f}" if isinstance(p, float) else str(p))
        out.append(f"| {m} | {shown} | {be} | {b} | {ctx} | {v.get('ttft_ms', float('nan')):.0f} | {rel('ttft_ms')} | "
                   f"{v.get('tbt_ms', float('nan')):.2f} | {rel('tbt_ms')} | {v.get('kv_bytes_batch', float('nan')):.4g} | "
                   f"{rel('kv_bytes_batch')} |")
    return out
