#!/usr/bin/env python3
"""Per-head singular-value statistics of kvcomp low-rank calibration files (host/lowrank/calibration_file.h):
how much of each head's spectrum a given rank keeps, the numbers behind "Low-rank KV" accuracy in RESULTS.

usage: calibration_spectrum.py OUT.csv COMMIT BACKEND FILE...
Appends one row per (file, layer, KV head, K or V) to OUT.csv (header if new): the method (from the file's
header), head_dim, the largest singular value, the share of the plain sum of singular values (the removal
rate of ZACK Eq. 6 / FDC Eq. 1) and of their squares (energy) in the dims past half the head (what a rank of
head_dim / 2 removes), and the smallest rank whose removed tail is at most r of the plain sum, for r = 0.05,
0.1, 0.2 (before rounding to the rank multiple). Pure Python: the files are small (head_dim values per head).
"""
import csv
import datetime
import json
import os
import struct
import sys


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} and the __metadata__ dict of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], data[a:b])
    return out, meta


def floats(entry):
    dtype, shape, raw = entry
    if dtype != "F32":
        raise ValueError(f"expected F32 singular values, got {dtype}")
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def tail_share(sigma, k, power=1):
    """Share of sum(sigma^power) in the dims k .. d - 1."""
    total = sum(s ** power for s in sigma)
    return sum(s ** power for s in sigma[k:]) / total if total > 0 else 0.0


def rank_for(sigma, r):
    """Smallest k >= 1 whose removed tail (plain sum) is at most r."""
    for k in range(1, len(sigma) + 1):
        if tail_share(sigma, k) <= r:
            return k
    return len(sigma)


FIELDS = ["date", "commit", "backend", "method", "layer", "kv_head", "which", "head_dim", "sigma_max",
          "tail_sum_half", "tail_energy_half", "rank_r05", "rank_r10", "rank_r20"]


def main(argv):
    if len(argv) < 5:
        sys.exit(__doc__)
    out, commit, backend, files = argv[1], argv[2], argv[3], argv[4:]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    new = not os.path.exists(out)
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for path in files:
            tensors, meta = read_safetensors(path)
            info = json.loads(meta["kvcomp_lowrank"])
            for layer in range(info["num_layers"]):
                for c in range(info["num_kv_heads"]):
                    for which in ("k", "v"):
                        sigma = floats(tensors[f"layers.{layer}.kv_heads.{c}.{which}_sigma"])
                        d = len(sigma)
                        w.writerow({"date": date, "commit": commit, "backend": backend, "method": info["method"],
                                    "layer": layer, "kv_head": c, "which": which, "head_dim": d,
                                    "sigma_max": f"{sigma[0]:.6g}",
                                    "tail_sum_half": f"{tail_share(sigma, d // 2):.4f}",
                                    "tail_energy_half": f"{tail_share(sigma, d // 2, 2):.4f}",
                                    "rank_r05": rank_for(sigma, 0.05), "rank_r10": rank_for(sigma, 0.10),
                                    "rank_r20": rank_for(sigma, 0.20)})


if __name__ == "__main__":
    main(sys.argv)
