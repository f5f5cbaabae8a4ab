"""The default model's KV spectra (docs/RESULTS.md, in "Low-rank KV"): per method and K / V, how much of the
heads' singular values a rank of head_dim / 2 removes and what rank a small removal rate needs, from
  spectrum_default_model.csv  tools/report/measure_spectrum.sh (calibration_spectrum.py over one calibration
                              file per method at removal rate 0, made on the CPU reference).
"""
import os
import statistics

from results_data import read_dicts

SOURCE = "spectrum_default_model.csv"
_METHODS = ("zack", "fdc", "palu")


def _span(values, fmt):
    """'mean (min-max)' of values."""
    return f"{format(statistics.mean(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def spectrum_section(data_dir):
    rows = read_dicts(os.path.join(data_dir, SOURCE))
    if not rows:
        return []
    d = int(rows[0]["head_dim"])
    heads = len({(r["layer"], r["kv_head"]) for r in rows if r["method"] == rows[0]["method"]})
    prov = f"commit `{rows[0]['commit']}`, {rows[0]['backend']}, {rows[0]['date'][:10]}"
    out = ["### What the default model's spectra allow (calibration singular values)", "",
           f"`tools/report/measure_spectrum.sh` ({prov}; `docs/data/{SOURCE}`): one calibration per method at "
           f"removal rate 0 (as the accuracy curves above), and per KV head ({heads} of them, head_dim {d}) the share "
           f"of the plain sum of singular values (ZACK Eq. 6 / FDC Eq. 1's removal rate) and of their squares "
           f"(energy) that a rank of {d // 2} removes, and the smallest rank whose removed tail is at most r of the "
           f"plain sum (before rounding to the rank multiple). K: ZACK and FDC the post-RoPE Q-K basis (ZACK from "
           f"the default text, FDC from random ids), Palu W_K's; V: ZACK V stacked with W_O's rows, FDC and Palu "
           f"W_V's. Cells: mean (min-max) over the heads. CV: the coefficient of variation of the heads' largest "
           f"singular value (the papers report 40-58 % on 7-70B models, digest §2).", "",
           f"| method | K / V | removed at rank {d // 2}: sum of σ | energy | rank for r = 0.05 | r = 0.1 | "
           f"r = 0.2 | CV of σ_max |", "|---|---|---|---|---|---|---|---|"]
    for m in _METHODS:
        for which in ("k", "v"):
            sel = [r for r in rows if r["method"] == m and r["which"] == which]
            if not sel:
                continue
            smax = [float(r["sigma_max"]) for r in sel]
            cv = statistics.pstdev(smax) / statistics.mean(smax) if statistics.mean(smax) else 0.0
            out.append(f"| {m} | {which.upper()} | {_span([float(r['tail_sum_half']) for r in sel], '.2f')} | "
                       f"{_span([float(r['tail_energy_half']) for r in sel], '.2f')} | "
                       + " | ".join(_span([int(r[c]) for r in sel], '.0f') for c in ("rank_r05", "rank_r10", "rank_r20"))
                       + f" | {cv:.0%} |")
    k10 = [int(r["rank_r10"]) for r in rows if r["which"] == "k" and r["method"] in ("zack", "fdc")]
    out += ["", f"Keeping the removed tail of the K spectra (ZACK, FDC) at 10 % of the sum of σ takes rank {min(k10)}-"
                f"{max(k10)} of {d}, i.e. {1 - max(k10) / d:.0%}-{1 - min(k10) / d:.0%} fewer K dims: this small model's "
                f"heads spread their keys over most of their dims. That is consistent with the accuracy curves above, "
                f"where ZACK and FDC lose line retrieval from p = 0.3 on, while the papers report up to p = 0.69 at 99 % "
                f"on 7-70B models (spectra of such models were not measured here).", ""]
    return out
