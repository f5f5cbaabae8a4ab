#!/usr/bin/env python3
"""Lists the programs in kvcomp's OpenCL program cache (KVCOMP_CL_CACHE_DIR; lib/opencl/program_cache.cpp
writes each as a 48-byte file_header, then the driver's program binary) and, for binaries that are text
(NVIDIA's driver returns PTX), writes them next to an output folder and counts what a kernel comparison
needs: the entry points, the PTX lines, local-memory traffic (ld.local / st.local: private arrays or
structs the compiler did not keep in registers), shared-memory atomics and barriers.

  python3 tools/report/cl_cache_dump.py CACHE_DIR [OUT_DIR] [--no-private REGEX]

--no-private REGEX also lists, per kernel entry whose name matches REGEX, its ld.local / st.local, and
exits 1 if any has some, or if no entry matches (so an empty cache or a renamed kernel cannot pass): a guard for kernels whose per-work-item state must stay in registers (the decodes:
NVIDIA's compiler once kept attn_decode_quant's softmax state in private memory, 55 ld.local / 67 st.local,
and nothing else showed it; docs/kernel_notes.md, "The OpenCL kernels").

A GPU-host visit copies the cache folder of each binary's run into $OUT (a fresh KVCOMP_CL_CACHE_DIR per
binary, so each folder holds only that run's programs); this script then compares them here without
device time.
"""
import os
import re
import struct
import sys

_HEADER = struct.Struct("<8sIIQQQQ")  # magic, format, reserved, key_hash, key_hash2, binary_size, binary_hash
_COUNTS = {"lines": None, "ld.local": r"\bld\.local", "st.local": r"\bst\.local", "atom.shared": r"\batom\.shared",
           "bar.sync": r"\bbar(?:rier)?\.sync"}


def read_program(path):
    """(header fields, binary bytes) of one cache file, or None when it is not one."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < _HEADER.size:
        return None
    magic, fmt, _, _, _, size, _ = _HEADER.unpack_from(raw)
    binary = raw[_HEADER.size:]
    if len(binary) != size:
        return None
    return {"magic": magic.rstrip(b"\0").decode("ascii", "replace"), "format": fmt}, binary


def summarize(text):
    out = {"entries": re.findall(r"\.entry\s+(\w+)", text)}
    for name, pattern in _COUNTS.items():
        out[name] = text.count("\n") + 1 if pattern is None else len(re.findall(pattern, text))
    return out


def entries(text):
    """(name, PTX text) of each kernel entry: from its .entry line to the next entry or function."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"^\s*(?:\.visible\s+)?\.entry\s+(\w+)", text, re.M)]
    ends = [m.start() for m in re.finditer(r"^\s*(?:\.visible\s+)?\.(?:entry|func)\b", text, re.M)]
    out = []
    for pos, name in starts:
        end = min([e for e in ends if e > pos] + [len(text)])
        out.append((name, text[pos:end]))
    return out


def private_traffic(text, pattern):
    """[(entry, ld.local count, st.local count)] for the entries whose name matches pattern."""
    return [(name, len(re.findall(_COUNTS["ld.local"], body)), len(re.findall(_COUNTS["st.local"], body)))
            for name, body in entries(text) if re.search(pattern, name)]


def main(argv):
    args = argv[1:]
    guard = None
    if "--no-private" in args:
        i = args.index("--no-private")
        if i + 1 >= len(args):
            print("--no-private needs a REGEX of kernel entry names", file=sys.stderr)
            return 2
        guard = args[i + 1]
        del args[i:i + 2]
    if not args or len(args) > 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cache, out_dir = args[0], (args[1] if len(args) > 1 else None)
    failed, guarded = [], 0
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    n = 0
    for root, _, files in os.walk(cache):
        for name in sorted(files):
            path = os.path.join(root, name)
            prog = read_program(path)
            if prog is None:
                continue
            n += 1
            header, binary = prog
            try:
                text = binary.decode("ascii")
            except UnicodeDecodeError:
                text = None
            if text is None or ".entry" not in text:
                print(f"{name}: {len(binary)} bytes, not PTX text (format {header['format']})")
                continue
            s = summarize(text)
            print(f"{name}: entries {','.join(s['entries'])}; " +
                  ", ".join(f"{k} {s[k]}" for k in _COUNTS))
            if guard is not None:
                for entry, ld, st in private_traffic(text, guard):
                    guarded += 1
                    verdict = "ok" if ld + st == 0 else "PRIVATE MEMORY"
                    print(f"  {entry}: ld.local {ld}, st.local {st}: {verdict}")
                    if ld + st:
                        failed.append(entry)
            if out_dir:
                with open(os.path.join(out_dir, name + ".ptx"), "w") as f:
                    f.write(text)
    if n == 0:
        print(f"no cached programs under {cache}", file=sys.stderr)
        return 1
    if guard is not None and guarded == 0:
        print(f"no kernel entry under {cache} matches {guard!r}: nothing was checked", file=sys.stderr)
        return 1
    if failed:
        print(f"kernels with private-memory traffic: {', '.join(sorted(set(failed)))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
