"""The paged fp16 decode window of kivi / zipcache (issue 6): its cost in the decode kernel and end to end,
from
  bench_ops_quant_paged_window_h200.csv        bb40aea against 6c2b1e5 (the window read through a page
                                               table), two interleaved passes, H200, --cold
  bench_ops_quant_paged_window_shift_h200.csv  bb40aea against 44f4a1d (the lookup without run-time
                                               divisions), the same way
  bench_e2e_paged_window_h200.csv              kvcomp bench, bb40aea against 44f4a1d, one run each
(docs/data/gpu_visits_2026-11-27.log, visit 94). Its bytes are in the accuracy grid (quant_grid_section.py).
Every number is read from those files.
"""
import os

from quant_decode_section import ab_table
from results_data import commits_in_order, provenance, read_dicts

E2E_SOURCE = "bench_e2e_paged_window_h200.csv"

_AB = [
    ("bench_ops_quant_paged_window_h200.csv",
     "The window's tokens read through the page table, the lookup dividing by the page size and the ring size "
     "for every 16-byte chunk"),
    ("bench_ops_quant_paged_window_shift_h200.csv",
     "The ring wrapped by a subtraction and the pages of 16 tokens split by a shift and a mask"),
]


def _e2e(results):
    rows = [r for r in results if r["source"] == E2E_SOURCE]
    commits = commits_in_order(rows)
    if len(commits) != 2:
        return []
    old, new = commits
    cell = {}
    for r in rows:
        cell[(r["method"], int(r["batch"]), r["commit"], r["metric"])] = r
    out = [f"End to end (`kvcomp bench --gen 128 --prompts 4096`, Llama-3-8B shapes with random weights, "
           f"{provenance(rows)}; `docs/data/{E2E_SOURCE}`, one run of each binary): 128 generated tokens cross a "
           "flush of the window (every 100 decode tokens for zipcache, every 32 for kivi), whose windows are now "
           "gathered from their pages. KV bytes: the most one request held.", "",
           f"| method | batch | TTFT ms `{old}` / `{new}` | TBT ms `{old}` / `{new}` | old / new TBT | "
           "KV bytes per request old / new |", "|---|---|---|---|---|---|"]
    for m, b in sorted({(k[0], k[1]) for k in cell}):
        g = {c: {k[3]: v for k, v in cell.items() if k[:3] == (m, b, c)} for c in (old, new)}
        if "tbt_ms" not in g[old] or "tbt_ms" not in g[new]:
            continue
        to, tn = float(g[old]["tbt_ms"]["value"]), float(g[new]["tbt_ms"]["value"])
        out.append(f"| {m} | {b} | {float(g[old]['ttft_ms']['value']):.1f} / {float(g[new]['ttft_ms']['value']):.1f} | "
                   f"{to:.3f} / {tn:.3f} | {to / tn:.3f} | {int(float(g[old]['tbt_ms']['kv_bytes']))} / "
                   f"{int(float(g[new]['tbt_ms']['kv_bytes']))} |")
    return out + [""]


def paged_window_section(data_dir, results):
    out = ["### The paged decode window of kivi / zipcache (H200)", "",
           "The quantizing methods keep decode tokens in an fp16 window until it holds `block` (ZipCache) or "
           "`residual` (KIVI) tokens, then quantize it. A request used to hold a whole window row from its first "
           "window token to its end; now the window lives in pages of the engine's page size, taken as it fills "
           "and returned when it is quantized (`lib/engine/window_pages.h`; attn_decode_quant reads a window "
           "token through its page table, the flushes gather the window into rows). The bytes this saves are in "
           "the accuracy grid below (\"ZipCache and KIVI over their options\").", ""]
    for name, what in _AB:
        rows = read_dicts(os.path.join(data_dir, name))
        commits = commits_in_order(rows)
        if len(commits) != 2 or not rows:
            continue
        r0 = rows[0]
        out += ab_table(rows, "", f"`bench_ops --sweeps fp16,quant --cold` on {r0['device']} ({r0['backend']}, "
                        f"{r0['date'][:10]}), two passes of each binary one after the other (`docs/data/{name}`, "
                        f"mean): `{commits[0]}` against `{commits[1]}`. {what}. ZipCache's window holds "
                        "context mod 100 tokens (96 at 4K, 68 at 32K, 72 at 128K), KIVI-2's none (the contexts "
                        "are multiples of 32). Shapes: 32 query / 8 KV heads, head dim 128. Cells: ms (fraction "
                        "of the copy bandwidth for the bytes read).")[2:]
    return out + _e2e(results)
