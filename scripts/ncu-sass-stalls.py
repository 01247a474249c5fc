#!/usr/bin/env python3
"""Where a kernel's warps stall, by source line, from ncu's SASS page.

Usage: scripts/ncu-sass-stalls.py SASS.csv LINEINFO.sass [--top N]

SASS.csv: `ncu --import R.ncu-rep --page source --csv --print-source sass`
(scripts/gpu-profile.sh with PROFILE_EXPORT=1 writes it for a SourceCounters
run). LINEINFO.sass: the same kernel's SASS with line info, made here from
the same sources and compiler (the carry's build has no -lineinfo), e.g.
  nvcc -O3 -std=c++17 -lineinfo -gencode=arch=compute_90a,code=sm_90a \\
    -I src -I include -cubin -o /tmp/k.cubin src/backend/cuda/cuda_step.cu
  nvdisasm -c -g /tmp/k.cubin > /tmp/k.sass
The two are matched instruction by instruction (the opcodes must agree; the
count of mismatches is printed). Prints the stall reasons over the kernel,
then the source lines with the most samples and their top reasons.
"""
import collections
import csv
import re
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 40
    rows = list(csv.reader(open(sys.argv[1], errors="replace")))
    hdr = next(r for r in rows if r and r[0] == "Address")
    data = [r for r in rows[rows.index(hdr) + 1:] if len(r) == len(hdr)]
    ix = {h: i for i, h in enumerate(hdr)}
    cols = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    kernel = None
    ins, loc = [], None
    for line in open(sys.argv[2], errors="replace"):
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            if kernel is not None:
                break  # the first kernel's text only
            kernel = m.group(1)
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            loc = (m.group(1), int(m.group(2)))
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m and kernel is not None:
            ins.append((m.group(1).split()[0], loc))
    ops = [r[ix["Source"]].strip().split()[0] if r[ix["Source"]].strip() else "" for r in data]
    bare = lambda o: o.lstrip("@!P0123456789T ")
    mism = sum(1 for a, b in zip(ins, ops) if bare(a[0]) != bare(b))
    print("%s: %d instructions sampled, %d with line info, %d opcode mismatches"
          % (kernel, len(data), len(ins), mism))
    tot = collections.Counter()
    by = collections.defaultdict(collections.Counter)
    for (op, where), r in zip(ins, data):
        for h in cols:
            v = int(r[ix[h]] or 0)
            tot[h] += v
            by[where][h] += v
    total = sum(tot.values()) or 1
    print("samples %d: " % total + ", ".join("%s %.1f%%" % (h[6:], 100.0 * v / total)
                                             for h, v in tot.most_common(10)))
    text = {}
    for where, c in sorted(by.items(), key=lambda kv: -sum(kv[1].values()))[:top]:
        s = sum(c.values())
        src = ""
        if where:
            path, n = where
            try:
                text.setdefault(path, open(path, errors="replace").read().split("\n"))
                src = text[path][n - 1].strip()[:64]
            except OSError:
                pass
        name = "%s:%d" % (where[0].split("/")[-1], where[1]) if where else "?"
        why = ", ".join("%s %d" % (h[6:], v) for h, v in c.most_common(3))
        print("%-22s %6d %5.1f%%  %-64s  %s" % (name, s, 100.0 * s / total, src, why))


if __name__ == "__main__":
    main()
