#!/usr/bin/env python3
"""Writes docs/RESULTS.md and its plots (docs/plots/*.png) from the measurement files in docs/data/
(no number is typed by hand).

Inputs (GPU host: copied from a visit's $OUT, see tools/gpu_host/README.md; default model: written
by tools/report/measure_default_model.sh on any machine):
  *.csv in the results schema (tools/cli/results_csv.h)  kvcomp eval / sweep / bench rows, e.g.
                  eval_default_model.csv, needle_prose_default_model.csv, bench_default_model.csv
  bench_ops.csv   kernel timings and the copy bandwidth of the same run (bench_ops)
  bench_e2e.csv   engine TTFT / TBT (kvcomp bench, the per-point columns it wrote before the shared schema)
  hf_speed.json   transformers at the same shapes, same run (tools/gpu_host/hf_speed.py)
  checks.log      test results and `kvcomp compare` against transformers (tools/gpu_host/run_checks.sh)
Usage: python3 tools/report/make_results.py [--data docs/data] [--out docs/RESULTS.md] [--plots docs/plots]
Needs matplotlib (Debian: python3-matplotlib, installed by tools/setup_deps.sh).
"""
import argparse, json, os, re, sys

try:
    import matplotlib  # noqa: F401
except ImportError:
    # A python3 of its own (pyenv, venv) does not see Debian's python3-matplotlib: use the system one.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("make_results: matplotlib is missing; install python3-matplotlib (bash tools/setup_deps.sh)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plots  # noqa: E402
from bench_table import bench_vs_none  # noqa: E402
from probe_table import probe_kernel_table, probe_kernel_table_h200  # noqa: E402
from lowrank_section import SOURCES as LOWRANK_SOURCES, lowrank_section  # noqa: E402
from requant_section import SOURCE as REQUANT_SOURCE, requant_section  # noqa: E402
from quant_grid_section import SOURCES as QUANT_GRID_SOURCES, quant_grid_section  # noqa: E402
from quant_decode_section import quant_decode_section  # noqa: E402
from paged_window_section import E2E_SOURCE as PAGED_WINDOW_E2E, paged_window_section  # noqa: E402
from ocl_gemm_section import SOURCES as OCL_GEMM_E2E, ocl_gemm_section  # noqa: E402
from ocl_tensor_core_section import SOURCES as OCL_TC_E2E, ocl_tensor_core_section  # noqa: E402
from ocl_softmax_section import ocl_softmax_section  # noqa: E402
from ocl_e2e_section import (SOURCES as OCL_E2E_SOURCES, ocl_bulk_16x32k_section, ocl_e2e_section,  # noqa: E402
                             ocl_decode_warps_section, ocl_projection_section, ocl_q4_palu_section,
                             ocl_quant_warps_section, ocl_ragged_warps_section)
from launch_section import launch_section  # noqa: E402
from decode_cost_section import decode_cost_section  # noqa: E402
from task_cost_section import SOURCES as TASK_COST_E2E, task_cost_section  # noqa: E402
from task_cost_ocl_section import SOURCES as TASK_COST_OCL_E2E, task_cost_ocl_section  # noqa: E402
from tail_section import tail_section  # noqa: E402
from schedule_section import E2E_SOURCES as WORKERS_E2E_SOURCES  # noqa: E402
from results_data import commits_in_order, load_results, method_label, num, opts, provenance, read_dicts  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--data", default="docs/data")
ap.add_argument("--out", default="docs/RESULTS.md")
ap.add_argument("--plots", default="docs/plots")
a = ap.parse_args()
d = a.data
os.makedirs(a.plots, exist_ok=True)
all_results = load_results(d)
# The low-rank methods have their own section (accuracy by compression p, their own GPU visit), and
# so have ZipCache's recompression modes.
TTFT_PREFILL_SOURCE = "bench_ttft_prefill_h200.csv"  # TTFT before / after the prefill change (own table)
results = [r for r in all_results
           if r["source"] not in LOWRANK_SOURCES
           and r["source"] not in (REQUANT_SOURCE, TTFT_PREFILL_SOURCE, PAGED_WINDOW_E2E) + OCL_GEMM_E2E + OCL_TC_E2E
           + QUANT_GRID_SOURCES
           + WORKERS_E2E_SOURCES
           + OCL_E2E_SOURCES
           + TASK_COST_E2E + TASK_COST_OCL_E2E]


def rows(name):
    return read_dicts(os.path.join(d, name))


def img(path, alt):
    """Markdown image link to a plot, relative to the report."""
    return f"![{alt}]({os.path.relpath(path, os.path.dirname(os.path.abspath(a.out)) or '.')})" if path else ""


def fmt(x, n=3):
    return f"{float(x):.{n}g}" if x not in ("", None) else "–"


def prefill_ab_table(name, title, caption):
    """bench_ops prefill rows of several binaries run one after the other twice: mean ms (TFLOP/s) per
    commit and shape, and the first commit's time over the last's. caption names the commits {c0}, {c1}, ..."""
    ab = [r for r in rows(name) if r["op"] == "prefill_fp16" and r["time_ms"]]
    if not ab:
        return []
    commits = commits_in_order(ab)
    cell = {}
    for r in ab:
        cell.setdefault((int(r["batch"]), int(r["context"])), {}).setdefault(r["commit"], []).append(
            (float(r["time_ms"]), float(r["gflops"]) / 1e3))
    out = ["", f"### {title}", "",
           f"`bench_ops --prefill` on {ab[0]['device']} ({ab[0]['backend']}), {ab[0]['date'][:10]}, the binaries run one "
           f"after the other twice (means; `docs/data/{name}`), " +
           caption.format(**{f"c{i}": c for i, c in enumerate(commits)}), "",
           "| batch | prompt | " + " | ".join(f"`{c}` ms (TFLOP/s)" for c in commits) + " | first / last time |",
           "|---|---|" + "---|" * len(commits) + "---|"]
    for (b, ctx), by in sorted(cell.items()):
        means = [(sum(t for t, _ in by[c]) / len(by[c]), sum(f for _, f in by[c]) / len(by[c])) for c in commits]
        out.append(f"| {b} | {ctx} | " + " | ".join(f"{t:.4g} ({f:.0f})" for t, f in means) +
                   f" | {means[0][0] / means[-1][0]:.2f}× |")
    return out


out = ["# kvcomp results", "",
       "Generated by `python3 tools/report/make_results.py` from the files in `docs/data/` (plots in `docs/plots/`);",
       "every number below is read from them. Device, backend, commit, date, shapes and the baseline of the same",
       "run are named with each table. The default-model data are measured by `tools/report/measure_default_model.sh`.", ""]

# --- the default model on this repository's own machine (any backend; see the rows' device) -------
acc = [r for r in results if r["task"] != "bench" and r["task"] != "needle" or
       r["task"] == "needle" and opts(r["task_opts"]).get("haystack") == "keys"]
prose = [r for r in results if r["task"] == "needle" and opts(r["task_opts"]).get("haystack") == "text"]
# Bench rows of random weights are GPU-host runs at Llama-3-8B shapes (their own tables below).
bench_dm = [r for r in results if r["task"] == "bench" and r["model"] and r["source"] != "bench_e2e.csv"
            and "random_weights" not in opts(r["task_opts"])]
quant_e2e = [r for r in results if r["source"] == "bench_quant_ttft.csv"]
quant_e2e_h200 = [r for r in results if r["source"] == "bench_quant_ttft_h200.csv"]
quant_e2e_h100 = [r for r in results if r["source"] == "bench_quant_e2e_h100.csv"]
quant_e2e_ocl = [r for r in results if r["source"] == "bench_quant_ttft_ocl_h200.csv"]
quant_e2e_b16 = [r for r in all_results if r["source"] == "bench_e2e_batch16_h200.csv"
                 and r["method"] in ("none", "kivi", "zipcache")]


def kv_cell(r):
    ratio = num(r["compression_ratio"])
    return f"{float(r['kv_bytes']):.0f} | {ratio:.2f}" if ratio else f"{float(r['kv_bytes']):.0f} | –"


if acc:
    out += ["## Accuracy versus KV bytes: default model", "",
            f"`kvcomp sweep` on {provenance(acc)}. Every row scores the method and the uncompressed cache",
            "(`none`) on the same examples (task data from the seed); KV bytes are per request as allocated (pages",
            "included); ratio = none bytes / method bytes. `window:window=N` keeps the N most recent tokens",
            "(prefill attends over the whole prompt). `kivi:bits=B`: KIVI (2/4-bit, groups of 32, 32 fp16 residual",
            "tokens); `zipcache:ratio=r`: ZipCache (the r most salient tokens at 4 bits, the rest at 2, blocks of",
            "100; these rows predate the paged window (6c2b1e5): their bytes include a whole fp16 window row of 100",
            "tokens, held once decoding starts). Quantized",
            "rows: `tools/report/measure_quant_methods.sh`. Examples per point are few (CPU time): read a value as",
            "k of n, not as a rate.", ""]
    for task in sorted({r["task"] for r in acc}):
        trs = [r for r in acc if r["task"] == task]
        metric = trs[0]["metric"]
        if task == "needle":
            depths = sorted({float(opts(r["task_opts"])["depth"]) for r in trs})
            out += [f"### needle (keys haystack): {metric} by depth of the key line", "",
                    "| method | context | examples | " + " | ".join(f"depth {x:g}" for x in depths) +
                    " | none (same examples) | KV bytes | ratio |",
                    "|---|---|---|" + "---|" * len(depths) + "---|---|---|"]
            points = {}
            for r in trs:
                points.setdefault((method_label(r), int(r["context"])), {})[float(opts(r["task_opts"])["depth"])] = r
            for (m, ctx), by in sorted(points.items(), key=lambda kv: (kv[0][1], kv[0][0])):
                any_r = next(iter(by.values()))
                cells = " | ".join(f"{float(by[x]['value']):.2f}" if x in by else "–" for x in depths)
                none = " / ".join(f"{float(by[x]['baseline_value']):.2f}" if x in by else "–" for x in depths)
                out.append(f"| {m} | {ctx} | {any_r['examples']} | {cells} | {none} | {kv_cell(any_r)} |")
        else:
            out += [f"### {task}: {metric}" + (f" ({trs[0]['task_opts']})" if trs[0]["task_opts"] else ""), "",
                    f"| method | context | examples | {metric} | none (same examples) | KV bytes | ratio |",
                    "|---|---|---|---|---|---|---|"]
            for r in sorted(trs, key=lambda r: (int(r["context"]), method_label(r))):
                out.append(f"| {method_label(r)} | {r['context']} | {r['examples']} | {float(r['value']):.3f} | "
                           f"{float(r['baseline_value']):.3f} | {kv_cell(r)} |")
        out.append("")
    out += [img(plots.accuracy_vs_ratio(acc, a.plots), "accuracy versus compression ratio"), "",
            img(plots.needle_by_depth(acc + prose, a.plots), "needle exact match by depth"), "",
            img(plots.bytes_per_token(acc, a.plots), "KV bytes per token per method"), ""]
if prose:
    keys_same = [r for r in acc if r["task"] == "needle" and r["method"] == "none" and
                 (r["context"], opts(r["task_opts"])["depth"]) in {(p["context"], opts(p["task_opts"])["depth"]) for p in prose}]
    out += ["### Which needle format the default model can solve", "",
            f"The same needle and question in a prose haystack (`--haystack text`, lines of "
            f"`{opts(prose[0]['task_opts']).get('text', '')}`) against the keys haystack, method none; prose rows: "
            f"{provenance(prose)}. The model was trained on records only (tools/model/tasks.py), never on records",
            "inside prose, which is why the sweep uses the keys haystack (RULER's multi-key needle).", "",
            "| haystack | context | depth | examples | exact match |", "|---|---|---|---|---|"]
    for r in sorted(prose + keys_same, key=lambda r: (opts(r["task_opts"])["haystack"], int(r["context"]),
                                                      float(opts(r["task_opts"])["depth"]))):
        out.append(f"| {opts(r['task_opts'])['haystack']} | {r['context']} | {opts(r['task_opts'])['depth']} | "
                   f"{r['examples']} | {float(r['value']):.2f} |")
    out.append("")
if bench_dm:
    out += ["## Speed versus context: default model (kvcomp bench)", "",
            f"`kvcomp bench` on {provenance(bench_dm)}; random prompt tokens, batch and generated tokens (gen)",
            "as shown; TTFT until every request of the batch has its first token, TBT the median gap between",
            "tokens; KV bytes per request at its last step. The 2-core machine was shared with other builds during",
            "these runs, so the times are indicative only (compare methods within one run, not across runs).", "",
            "| method | backend | batch | context | gen | TTFT ms | TBT ms | decode tok/s | KV bytes per request |",
            "|---|---|---|---|---|---|---|---|---|"]
    pts = {}
    for r in bench_dm:
        pts.setdefault((method_label(r), r["backend"], int(r["batch"]), int(r["context"])), {})[r["metric"]] = r
    for (m, be, b, ctx), ms in sorted(pts.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        v = {k: float(r["value"]) for k, r in ms.items()}
        kv = next(iter(ms.values()))["kv_bytes"]
        gen = opts(next(iter(ms.values()))["task_opts"]).get("gen", "–")
        out.append(f"| {m} | {be} | {b} | {ctx} | {gen} | {v['ttft_ms']:.0f} | {v['tbt_ms']:.2f} | "
                   f"{v['decode_tokens_per_s']:.1f} | {float(kv):.0f} |")
    out.append("")
tbt_plot = plots.tbt_vs_context([r for r in results if r["task"] == "bench"], a.plots)
if tbt_plot:
    out += [img(tbt_plot, "time between tokens versus context"), "",
            "(The GPU-host panel, if any, is the Llama-3-8B-shape run of the end-to-end table below.)", ""]

ops = rows("bench_ops.csv")
if ops:
    commit = ops[0]["commit"]
    date = ops[0]["date"][:10]
    out += ["## Paged fp16 decode attention (bench_ops)", "",
            f"Run of {date}, commit `{commit}`, `bench_ops -b {','.join(sorted({r['backend'] for r in ops}))}` on the GPU host. 32 query heads, 8 KV heads,",
            "head dim 128, page size 16; time = median of 20 device-timed runs; GB/s counts the K and V bytes of",
            "every cached token plus q and out; the copy bandwidth (bytes read + written) is measured by the same",
            "binary on the same device in the same run.", "",
            "| device | backend | batch | context | time ms | GB/s | copy GB/s | fraction of copy |",
            "|---|---|---|---|---|---|---|---|"]
    for r in ops:
        if r["op"] != "decode_fp16":
            continue
        if r["time_ms"] == "":
            out.append(f"| {r['device']} | {r['backend']} | {r['batch']} | {r['context']} | {r['note']} | | | |")
            continue
        out.append(f"| {r['device']} | {r['backend']} | {r['batch']} | {r['context']} | {fmt(r['time_ms'], 4)} | "
                   f"{float(r['gbps']):.0f} | {float(r['copy_gbps']):.0f} | {float(r['fraction_of_copy']):.2f} |")
    # CUDA vs OpenCL on the same GPU.
    cu = {(r["batch"], r["context"]): float(r["time_ms"]) for r in ops
          if r["op"] == "decode_fp16" and r["api"] == "CUDA" and r["time_ms"]}
    ocl = {(r["batch"], r["context"]): float(r["time_ms"]) for r in ops
           if r["op"] == "decode_fp16" and r["api"] == "OpenCL" and "NVIDIA" in r["device"] and r["time_ms"]}
    common = [k for k in cu if k in ocl]
    if common:
        out += ["", "NVIDIA OpenCL time over CUDA time on the same GPU (target ≤ 1.3): " +
                ", ".join(f"batch {b} × {c}: {ocl[(b, c)] / cu[(b, c)]:.2f}" for b, c in sorted(common, key=lambda k: (int(k[0]), int(k[1]))))]
    peers = rows("peers_h200_sdpa.csv")
    if peers and cu:
        out += ["", "Against PyTorch's `scaled_dot_product_attention` on the same GPU model (a different run: "
                "`docs/data/peers_h200_sdpa.csv`, transcribed from `../shared/research/peers_h200.md`; dense fp16 K/V, "
                "no paging), best of its flash and math backends:", "",
                "| batch | context | PyTorch best ms | kvcomp CUDA ms (paged) | PyTorch / kvcomp |", "|---|---|---|---|---|"]
        for p in peers:
            k = (p["batch"], p["context"])
            if k in cu:
                best = min(float(p["flash_ms"]), float(p["math_ms"]))
                out.append(f"| {p['batch']} | {p['context']} | {best:.4g} | {cu[k]:.4g} | {best / cu[k]:.2f} |")
    pre = [r for r in ops if r["op"] == "prefill_fp16" and r["time_ms"]]
    if pre:
        out += ["", "### Causal prefill attention (attn_prefill, same run)", "",
                "q f32, K/V f16, 32/8 heads of 128; TFLOP/s counts 4 · head_dim · n_q_heads flops per visible",
                "(query, key) pair.", "",
                "| device | backend | batch | prompt | time ms | TFLOP/s |", "|---|---|---|---|---|---|"]
        for r in pre:
            out.append(f"| {r['device']} | {r['backend']} | {r['batch']} | {r['context']} | {fmt(r['time_ms'], 4)} | "
                       f"{float(r['gflops']) / 1e3:.1f} |")
    out += prefill_ab_table(
        "bench_ops_prefill_2blk_ab_h200.csv",
        "The prefill at two blocks of 8 warps per SM (H200)",
        "visit 48: `{c0}` (the kernel above: Q fragments in registers, 239 registers, one block of 8 warps per SM), "
        "`{c1}` (the Q fragments read from shared memory for each key tile: 128 registers, two blocks per SM) and "
        "`{c2}` (that plus the lazy running max; committed as `aa108c7`). Nsight Compute had the first at 2 warps "
        "per scheduler, its issue slots 37 % busy (docs/kernel_notes.md).")
    out += prefill_ab_table(
        "bench_ops_prefill_steps32_ab_h200.csv",
        "The prefill in softmax steps of 32 keys (H200)",
        "visit 50: `{c0}` (the kernel of the table above, committed) and `{c1}` (softmax steps of 32 keys inside "
        "the 64-key staged tile: 16 score registers instead of 32, ptxas spills at head_dim 128 halved to 72 "
        "bytes; committed as `056e9a8`).")
    ttft = [r for r in all_results if r["source"] == TTFT_PREFILL_SOURCE and r["metric"] == "ttft_ms"]
    if ttft:
        out += ["", "TTFT of `kvcomp bench --method none --random-weights` at Llama-3-8B shapes on "
                f"{ttft[0]['device']} ({ttft[0]['backend']}) before and after, from two visits on H200s of the same "
                "kind (43 and 49; `docs/data/bench_ttft_prefill_h200.csv`, `--gen 2`; attn_prefill's share of the "
                "ops in `docs/data/ttft_profile_h200.txt`):", "",
                "| commit | batch | prompt | TTFT ms |", "|---|---|---|---|"]
        for r in sorted(ttft, key=lambda r: (int(r["batch"]), int(r["context"]), r["date"])):
            out.append(f"| `{r['commit']}` | {r['batch']} | {r['context']} | {float(r['value']):.0f} |")
    out += prefill_ab_table(
        "bench_ops_prefill_rowblocks_ab_h200.csv",
        "Experiment, reverted: the prefill with two row blocks per warp (H200)",
        "visit 44: `{c0}` (8 warps of 16 query rows, one block per SM) and `{c1}` (4 warps of 32 rows, two blocks "
        "per SM, each K / V fragment feeding two mma; reverted in the next commit). The prediction, fewer "
        "shared-memory reads per mma, did not hold.")
    out += ["", "Other kernels of the same run (the `perf` case list of test_backend_ops) are in `docs/data/bench_ops.csv`.", "",
            img(plots.attention_vs_context(ops, a.plots), "decode attention time versus context"), ""]

# Quantized decode: the newest dedicated run (bench_ops_methods.csv, with its own fp16 rows) if any,
# else the rows of bench_ops.csv.
qops = rows("bench_ops_quant_decode.csv") or rows("bench_ops_methods.csv") or ops
quant = [r for r in qops if r["op"] in ("decode_zipcache", "decode_kivi2") and r["time_ms"]]
if quant:
    fp16 = {(r["api"], r["device"], r["batch"], r["context"]): float(r["time_ms"]) for r in qops
            if r["op"] == "decode_fp16" and r["time_ms"]}
    out += ["### Decode attention over quantized blocks (attn_decode_quant)", "",
            "`bench_ops` runs on " + "; ".join(sorted({f"{r['device']} ({r['backend']}, commit `{r['commit']}`, "
                                                      f"{r['date'][:10]})" for r in quant})) +
            "; the fp16 decode column is the paged fp16 kernel of the same run and backend. 32 query heads, 8 KV "
            "heads, head dim 128.",
            "`decode_zipcache`: blocks of 100 tokens (40 at 4 bits, 60 at 2 bits, CST",
            "values, per-channel key parameters per segment), `decode_kivi2`: blocks of 32 tokens at 2 bits (value",
            "groups of 32 channels); the remainder of the context in the fp16 window. GB/s counts the slots and",
            "window tokens actually read (all metadata included); the issue's target is time ≤ 1.25 × (these bytes",
            "/ copy bandwidth), i.e. a fraction of copy ≥ 0.8.", "",
            "| layout | device | backend | batch | context | time ms | GB/s | fraction of copy | fp16 decode ms | speed-up over fp16 |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in quant:
        f = fp16.get((r["api"], r["device"], r["batch"], r["context"]))
        out.append(f"| {r['op'][7:]} | {r['device']} | {r['backend']} | {r['batch']} | {r['context']} | "
                   f"{fmt(r['time_ms'], 4)} | {float(r['gbps']):.0f} | {float(r['fraction_of_copy']):.3f} | "
                   f"{fmt(f, 4) if f else '–'} | {f / float(r['time_ms']):.2f}× |" if f else
                   f"| {r['op'][7:]} | {r['device']} | {r['backend']} | {r['batch']} | {r['context']} | "
                   f"{fmt(r['time_ms'], 4)} | {float(r['gbps']):.0f} | {float(r['fraction_of_copy']):.3f} | – | – |")
    out.append("")
    # Kernel versions timed in one visit (bench_ops binaries of two commits; the older one's rows first).
    versions = [r for r in rows("bench_ops_quant_decode_base.csv")
                if r["op"] in ("decode_zipcache", "decode_kivi2") and r["time_ms"]]
    commits = commits_in_order(versions)  # the file lists the older kernel's rows first
    if len(commits) == 2:
        old_c, new_c = commits
        t = {(r["commit"], r["op"], r["batch"], r["context"]): float(r["time_ms"]) for r in versions}
        out += [f"The same sweep with the kernel before and after the per-warp streams, timed in one visit on "
                f"{versions[0]['device']} (`{old_c}`: the 4 warps of a block share each item, two `__syncthreads` per "
                f"item; `{new_c}`: each warp streams its own items; `docs/data/bench_ops_quant_decode_base.csv`, "
                "log and Nsight Compute summaries in `docs/data/quant_decode_h100.log`):", "",
                f"| layout | batch | context | `{old_c}` ms | `{new_c}` ms | speed-up |", "|---|---|---|---|---|---|"]
        for (c, op, b, ctx), v in sorted(t.items(), key=lambda kv: (kv[0][1], int(kv[0][2]), int(kv[0][3]))):
            if c == old_c and (new_c, op, b, ctx) in t:
                w = t[(new_c, op, b, ctx)]
                out.append(f"| {op[7:]} | {b} | {ctx} | {fmt(v, 4)} | {fmt(w, 4)} | {v / w:.2f}× |")
        out.append("")
    out += quant_decode_section(d)
    out += paged_window_section(d, all_results)
    out += ocl_gemm_section(all_results)
    out += ocl_tensor_core_section(d)
    out += ocl_softmax_section(d)
    out += launch_section(d)
    out += decode_cost_section(d)
    out += task_cost_section(d)
    out += task_cost_ocl_section(d)
    out += tail_section(d)

# bench_e2e.csv in either schema: one dict per point with the legacy column names the table uses.
_e2e = {}
for r in results:
    if r["source"] == "bench_e2e.csv":
        p = _e2e.setdefault((r["backend"], r["batch"], r["context"], method_label(r)),
                            {"device": r["device"], "commit": r["commit"], "backend": r["backend"],
                             "batch": r["batch"], "prompt": r["context"], "method": method_label(r),
                             "kv_bytes": r["kv_bytes"]})
        p[{"decode_tokens_per_s": "decode_tok_s"}.get(r["metric"], r["metric"])] = r["value"]
e2e = list(_e2e.values())
hf_path = os.path.join(d, "hf_speed.json")
hf = json.load(open(hf_path)) if os.path.exists(hf_path) else None
if e2e:
    out += ["## End to end: Llama-3-8B shapes, random weights (kvcomp bench vs transformers)", "",
            f"`kvcomp bench --random-weights` on {e2e[0]['device']} (commit `{e2e[0]['commit']}`), fp16 weights (matmul",
            "inputs rounded to fp16), 16 generated tokens, every request of a point prefilled in one step; TTFT until",
            "every request of the batch has its first token; TBT is the median gap between tokens; floor = (weight",
            "bytes + the batch's KV bytes) / copy bandwidth of the run; KV bytes per request = the most the method held",
            "(`none`: fp16 pages; `kivi`: 2-bit blocks of 32 + 32-token fp16 residual; `zipcache`: 4/2-bit blocks of",
            "100 with saliency + its fp16 decode window: a whole row of 100 tokens in these runs, which predate the",
            "paged window of 6c2b1e5). transformers' `LlamaForCausalLM` (bf16, sdpa,",
            f"dynamic cache, last-position logits only; torch {hf['torch'] if hf else '–'}) was timed in the same visit by",
            "`tools/gpu_host/hf_speed.py`.", "",
            "| method | backend | batch | prompt | TTFT ms | TBT ms | decode tok/s | KV bytes / request | floor ms | TBT / floor | transformers TTFT ms | transformers TBT ms | transformers tok/s | speed-up (tok/s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(e2e, key=lambda r: (r["method"] != "none", r["method"], r["backend"], int(r["batch"]), int(r["prompt"]))):
        h = None
        if hf:
            for x in hf["rows"]:
                if str(x["batch"]) == r["batch"] and str(x["prompt"]) == r["prompt"] and "tbt_ms" in x:
                    h = x
        hcols = (f"{h['ttft_ms']:.0f} | {h['tbt_ms']:.1f} | {h['decode_tok_s']:.1f} | {float(r['decode_tok_s']) / h['decode_tok_s']:.2f}×"
                 if h else "– | – | – | –")
        kvb = f"{float(r['kv_bytes']):.4g}" if r.get("kv_bytes") not in ("", None) else "–"
        out.append(f"| {r['method']} | {r['backend']} | {r['batch']} | {r['prompt']} | {float(r['ttft_ms']):.0f} | {float(r['tbt_ms']):.2f} | "
                   f"{float(r['decode_tok_s']):.1f} | {kvb} | {float(r['floor_ms']):.2f} | {float(r['tbt_over_floor']):.2f} | {hcols} |")
    out.append("")

def quant_ttft_section(rows, title, how):
    """TTFT/TBT of the quantizing methods against none, and what saliency estimation adds to the prefill."""
    if not rows:
        return []
    lines = [title, "",
             f"{how} `kvcomp bench --random-weights` at Llama-3-8B shapes on {provenance(rows)},",
             "methods at their defaults (kivi: 2 bits, groups of 32, 32 residual tokens; zipcache: ratio 0.4 of 4/2 bits,",
             "blocks of 100, probes 5 % recent + 5 % random), 16 generated tokens, one untimed run of each bench's first",
             "point first, none in the same visit. ZipCache's TTFT includes the probe attention (probe_scores) and the",
             "per-head top-r selection of every layer; `zipcache` with `ratio=0` is the same quantizer without saliency",
             "estimation (nothing to rank), so zipcache over zipcache ratio=0 is what saliency adds (target ≤ 1.10).", ""]
    lines += bench_vs_none(rows) + [""]
    sal = {}
    for r in rows:
        if r["method"] == "zipcache" and r["metric"] == "ttft_ms":
            sal.setdefault((r["backend"], r["batch"], r["context"]), {})[r["method_opts"]] = float(r["value"])
    parts = [f"{be} batch {b} × {c}: {v[''] / v['ratio=0']:.3f}" for (be, b, c), v in sorted(sal.items())
             if "" in v and "ratio=0" in v]
    if parts:
        lines += ["ZipCache TTFT over zipcache ratio=0 (what saliency estimation adds; target ≤ 1.10): " + "; ".join(parts) + ".",
                  ""]
    host = [f"{be} batch {b} × {c}: {v['select=host'] / v['ratio=0']:.2f}" for (be, b, c), v in sorted(sal.items())
            if "select=host" in v and "ratio=0" in v]
    if host:
        lines += ["The same with the prefill ranking on the host (`select=host`: one download of the probe sums per "
                  "layer, the GPU idle while the host ranks; the default `select=device` runs the `select_salient` "
                  "op instead): " + "; ".join(host) + ".", ""]
    return lines


out += quant_ttft_section(quant_e2e, "### Quantized caches end to end: TTFT with saliency (kvcomp bench)",
                          "`tools/gpu_host/run_quant.sh`:")
out += quant_ttft_section(quant_e2e_h200, "### Quantized caches end to end after the saliency kernel's rework (kvcomp bench, H200)",
                          "The probe_scores column-sum kernel staging each block's probe rows through shared memory "
                          "(`docs/data/h200_visits_2026-11-26b.log`, visit 4):")
out += quant_ttft_section(quant_e2e_h100, "### Quantized caches end to end with the bulk-copy decode (kvcomp bench, H100)",
                          "The tensor-core decode after its two steps of 2026-11-27 (`docs/data/gpu_visits_2026-11-27.log`, "
                          "visit 25; 8 × 32K skipped by `--max-kv-gib 20`):")
out += quant_ttft_section(quant_e2e_ocl, "### What saliency adds to the prefill on NVIDIA's OpenCL driver (kvcomp bench, H200)",
                          "On NVIDIA's OpenCL driver, none / zipcache / zipcache ratio=0 only, batches 1 and 4 × 4096 "
                          "(`docs/data/gpu_visits_2026-11-27.log`, visits 63 / 63b; binaries of `f2dc79d`):")
out += quant_ttft_section(quant_e2e_b16, "### Quantized caches end to end at batch 16 × 32K (kvcomp bench, H200)",
                          "Batches 1 and 16 at 4K and 32K and 1 × 128K (`.carry/visit89.sh` part c in "
                          "`docs/data/gpu_visits_2026-11-27.log`, visit 89; 16 × 32K prefilled four prompts at a time "
                          "with `--prefill-tokens 131072`, its 64 GiB fp16 cache admitted by `--max-kv-gib 70`; "
                          "zipcache ratio=0 at 4K and 32K only):")
# The same grid on NVIDIA's OpenCL driver, every method in one table (visit 109).
out += ocl_e2e_section(d)
out += ocl_projection_section(d)
out += ocl_quant_warps_section(d)
out += ocl_bulk_16x32k_section(d)
out += ocl_ragged_warps_section(d)
out += ocl_q4_palu_section(d)
out += ocl_decode_warps_section(d)
probe_rows = probe_kernel_table(d)
if probe_rows:
    out += ["### Saliency kernel (probe_scores, bench_ops, same visit)", "",
            "The probe attention of one layer for a 4K prompt (10 % probes), for 16 such prompts in one ragged call",
            "and for a 32K prompt (when the run has it): lse pass and column sums (in the engine the prefill attention",
            "returns the probe rows' lse, so the prefill runs the column-sum pass only). CUDA: tensor-core kernels (f16",
            "q and k, fp32 accumulation; NMSE vs the double-precision CPU reference in `docs/data/quant_checks.log`); the",
            "SIMT kernels they replaced run in the same visit with `KVCOMP_PROBE_SCORES=simt`. NVIDIA OpenCL: the",
            "register-tiled kernel of `cl_kernels/probe_scores.cl`.", ""]
    out += probe_rows + [""]
probe_h200 = probe_kernel_table_h200(d)
if probe_h200:
    out += probe_h200 + [""]
out += quant_grid_section(all_results)
out += requant_section(d)
out += lowrank_section(d, all_results)


def compare_lines(log):
    """(our weights, reference file, "backend (device): logits NMSE x, greedy n tokens agree") for every
    `kvcomp compare --reference` result line of a visit log."""
    found = []
    for b in re.split(r"\n=== ", log):
        if "compare -m" in b and "--reference" in b:
            head = b.splitlines()[0]
            w = re.search(r"--weights (\w+)", head).group(1)
            ref = os.path.basename(re.search(r"--reference (\S+)", head).group(1))
            for line in b.splitlines()[1:]:
                mm = re.match(r"(\S+)\s+(.+?)\s+logits NMSE (\S+)\s+greedy (\d+) tokens (.*)", line)
                if mm:
                    found.append((w, ref, f"{mm.group(1)} ({mm.group(2).strip()}): logits NMSE {mm.group(3)}, "
                                          f"greedy {mm.group(4)} tokens {mm.group(5).strip()}"))
    return found


log_path = os.path.join(d, "checks.log")
if os.path.exists(log_path):
    log = open(log_path).read()
    out += ["## Correctness on the GPU host (tools/gpu_host/run_checks.sh, log in docs/data/checks.log)", ""]
    for m in re.finditer(r"=== \S*test_backend_ops -b (\S+)\n(?:.*\n)*?(\d+ passed, \d+ failed, \d+ skipped)", log):
        out.append(f"- `test_backend_ops -b {m.group(1)}`: {m.group(2)}")
    for m in re.finditer(r"=== \S*kvcomp_unit_tests.*\n(?:.*\n)*?\[  (PASSED|FAILED)  \] (\d+ tests?)", log):
        out.append(f"- `kvcomp_unit_tests` (engine and methods on every device of the host): {m.group(1).lower()}, {m.group(2)}")
    out += [f"- default model vs transformers (`{ref}`, our weights {w}): {line}" for w, ref, line in compare_lines(log)]
    out.append("")
l3_path = os.path.join(d, "oracle_l3.log")
if os.path.exists(l3_path):
    out += ["Two-layer random checkpoint with Llama-3-8B shapes written by transformers (`hf_oracle.py --make-random`),",
            "64 random prompt tokens, 128 greedy steps (`docs/data/oracle_l3.log`):", ""]
    out += [f"- Llama-3-8B shapes, 2 layers, weights {w}: {line}" for w, ref, line in compare_lines(open(l3_path).read())]
    out.append("")
smol_path = os.path.join(d, "oracle_smollm3_h200.log")
if os.path.exists(smol_path):
    smol = open(smol_path).read()
    out += ["A four-layer random SmolLM3 checkpoint written by transformers (`hf_oracle.py --make-random-smollm3`:",
            "hidden 512, 8 heads, 2 KV heads, head_dim 64, `no_rope_layers` [1, 1, 1, 0], so layer 3 has no RoPE), fp32,",
            "64 random prompt tokens, 64 greedy steps; fdc and palu at full rank (removal rate 0), whose layer 3 runs",
            "the fully folded mode (R_k in W_Q / W_K, ZACK's Lemma 1) (`tools/gpu_host/run_checks.sh` smollm3_oracle,",
            "`docs/data/oracle_smollm3_h200.log`):", ""]
    for b in re.split(r"\n=== ", smol):
        if "compare -m" in b and "--reference" in b:
            mm = re.search(r"--method (\w+)", b.splitlines()[0])
            method = mm.group(1) if mm else "none"
            out += [f"- SmolLM3, method {method}: {line}" for w, ref, line in compare_lines("\n=== " + b)]
    out.append("")
open(a.out, "w").write("\n".join(out) + "\n")
print(f"wrote {a.out} and {len([f for f in os.listdir(a.plots) if f.endswith('.png')])} plots in {a.plots}")
