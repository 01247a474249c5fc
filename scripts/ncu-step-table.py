#!/usr/bin/env python3
"""Groups the kernels of one decode step from `ncu --csv --page raw --metrics
gpu__time_duration.sum` output (scripts/gpu-profile.sh): the step is the
second-to-last run of kernels ending in k_argmax / k_sample; GEMVs are
split by grid size (one line per weight shape)."""
import collections
import csv
import sys

for f in sys.argv[1:]:
    rows = [r for r in csv.reader(open(f)) if r]
    hdr = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
    h = rows[hdr]
    ki, ti, gi = h.index('Kernel Name'), h.index('gpu__time_duration.sum'), h.index('Grid Size')
    ks = []
    for r in rows[hdr + 2:]:
        if len(r) > ti:
            try:
                name = r[ki].split('(')[0].split('<')[0].replace('void ', '').strip()
                ks.append((name, float(r[ti].replace(',', '')), r[gi]))
            except ValueError:
                pass
    ends = [i for i, (k, _, _) in enumerate(ks) if k.startswith(('k_sample', 'k_argmax'))]
    if len(ends) < 3:
        print(f"{f}: {len(ks)} kernels, {len(ends)} step ends: no full step")
        continue
    step = ks[ends[-3] + 1:ends[-2] + 1]
    agg = collections.OrderedDict()
    for k, t, g in step:
        key = (k, g if 'gemv' in k else '')
        c, s = agg.get(key, (0, 0.0))
        agg[key] = (c + 1, s + t)
    tot = sum(t for _, t, _ in step)
    print(f"== {f}: one decode step, {len(step)} kernels, sum {tot / 1e3:.1f} us (serial, ncu)")
    print(f"{'kernel':28s} {'grid':>14s} {'n':>5s} {'sum us':>9s} {'mean us':>8s} {'%':>6s}")
    for (k, g), (c, s) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{k:28s} {g:>14s} {c:5d} {s / 1e3:9.1f} {s / c / 1e3:8.2f} {100 * s / tot:6.1f}")
