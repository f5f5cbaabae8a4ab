#!/usr/bin/env python3
"""Summarizes an Nsight Compute source-page export (`ncu -i REP --page source --print-source sass --csv`,
gzipped), one block per kernel: instructions executed grouped by how often their SASS line ran (lines that
run once per 16-row step, once per tile, once per copy, ...), and the warp stall reasons summed over lines.

  python3 tools/report/sass_profile.py docs/data/sass_profile_80aa050_h200.csv.gz [--top 12]

(docs/data/sass_profile_80aa050_h200.csv.gz: the tensor-core low-rank decodes of 80aa050 at 16 x 32K,
p50 widths, on an H200; docs/kernel_notes.md reads it.)
"""
import argparse, collections, csv, gzip, io


def kernels(path):
    """(kernel name, rows) per kernel block of the export."""
    block, name = [], None
    for line in gzip.open(path, "rt"):
        if line.startswith('"Kernel Name"'):
            if name:
                yield name, list(csv.DictReader(io.StringIO("".join(block))))
            name, block = line.split(",", 1)[1].strip().strip('",'), []
        else:
            block.append(line)
    if name:
        yield name, list(csv.DictReader(io.StringIO("".join(block))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("export")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    for name, rows in kernels(a.export):
        count = lambda r: int(r["Instructions Executed"] or 0)
        total = sum(count(r) for r in rows)
        by_count, lines = collections.Counter(), collections.Counter()
        stalls = collections.Counter()
        for r in rows:
            by_count[count(r)] += count(r)
            lines[count(r)] += 1
            for k, v in r.items():
                if k.startswith("stall_") and "Not Issued" not in k and v not in ("", "-"):
                    stalls[k] += int(v)
        print(f"{name}\n  instructions executed: {total}")
        print("  by execution count of their line (count = how many times each such line ran):")
        for n, s in by_count.most_common(a.top):
            print(f"    count {n:9d}  lines {lines[n]:4d}  instructions {s:11d}  {100 * s / total:5.1f} %")
        st = sum(stalls.values())
        print("  warp stall samples by reason:")
        for k, v in stalls.most_common(8):
            print(f"    {k:24s} {100 * v / st:5.1f} %")


if __name__ == "__main__":
    main()
