#!/usr/bin/env python3
"""Where a decode step's time goes in the real run (CUDA graph + PDL), from
a kernel time line: the CSV of dev/trace/cupti_trace.c (start,end,gx,gy,gz,
name; scripts/gpu-profile.sh TRACE=1) or an Nsight Systems capture exported
to SQLite (nsys profile -t cuda --cuda-graph-trace=node; nsys export --type
sqlite).
Steps end at each k_argmax / k_sample kernel; the table covers the middle
half of the decode steps (after warm-up). Per kernel name (GEMVs split by
grid): launches per step, mean busy time, and the exclusive time per step
(each instant of the step charged to the kernel that started last among
those running, so overlapped PDL prologues are not counted twice and the
idle time between kernels shows as "(idle)"), and the same charged to the
kernel that started FIRST among those running ("first us"; with PDL a
kernel starts early and waits, so "last" charges it its predecessor's tail
while "first" charges each instant to the kernel still holding it up).
"busy" is a launch's mean start-to-end time, the PDL wait included."""
import collections
import csv
import re
import sqlite3
import sys


def base_of(name):
    m = re.match(r'_Z(\d+)(\w+)', name)  # mangled (CUPTI): _Z<len><name>...
    if m:
        return m.group(2)[:int(m.group(1))]
    return name.split('(')[0].split('<')[0].replace('void ', '').strip()


def kernels(db):
    if db.endswith('.csv'):
        out = []
        for r in csv.DictReader(open(db)):
            base = base_of(r['name'])
            grid = f"{r['gx']}x{r['gy']}x{r['gz']}" if ('gemv' in base or 'q' in base[:4]) else ''
            out.append((int(r['start']), int(r['end']), base, grid))
        return sorted(out)
    con = sqlite3.connect(db)
    q = ("SELECT k.start, k.end, s.value, k.gridX, k.gridY, k.gridZ FROM CUPTI_ACTIVITY_KIND_KERNEL k "
         "JOIN StringIds s ON s.id = COALESCE(k.demangledName, k.shortName) ORDER BY k.start")
    out = []
    for st, en, name, gx, gy, gz in con.execute(q):
        base = base_of(name)
        grid = f"{gx}x{gy}x{gz}" if ('gemv' in base or 'q' in base[:4]) else ''
        out.append((st, en, base, grid))
    return out


def table(db):
    ks = kernels(db)
    ends = [i for i, k in enumerate(ks) if k[2].startswith(('k_sample', 'k_argmax'))]
    if len(ends) < 8:
        print(f"{db}: {len(ks)} kernels, {len(ends)} step ends: too few steps")
        return
    # the longest run of steps of equal kernel count = the decode steps
    lo, hi = len(ends) // 4, 3 * len(ends) // 4
    steps = [(ends[i - 1] + 1, ends[i] + 1) for i in range(max(lo, 1), hi)]
    busy = collections.OrderedDict()
    excl = collections.defaultdict(float)
    lead = collections.defaultdict(float)
    walls = []
    for a, b in steps:
        seg = ks[a:b]
        t0, t1 = ks[a - 1][1], seg[-1][1]  # from the previous step's end to this one's
        walls.append(t1 - t0)
        for st, en, name, grid in seg:
            c, s = busy.get((name, grid), (0, 0.0))
            busy[(name, grid)] = (c + 1, s + (en - st))
        # exclusive attribution on the time line
        ev = sorted(set([t0, t1] + [max(t0, min(t1, x)) for k in seg for x in (k[0], k[1])]))
        for u, v in zip(ev, ev[1:]):
            mid = (u + v) / 2
            run = [k for k in seg if k[0] <= mid < k[1]]
            key = max(run, key=lambda k: k[0])[2:4] if run else ('(idle)', '')
            excl[key] += v - u
            key = min(run, key=lambda k: k[0])[2:4] if run else ('(idle)', '')
            lead[key] += v - u
    n = len(steps)
    wall = sum(walls) / n
    print(f"== {db}: {n} decode steps, {sum(c for c, _ in busy.values()) / n:.0f} kernels per step, "
          f"step {wall / 1e3:.1f} us = {1e9 / wall:.1f} tok/s")
    print(f"{'kernel':30s} {'grid':>12s} {'n':>4s} {'busy us':>8s} {'last us':>8s} {'first us':>8s} {'%':>6s}")
    keys = sorted(set(busy) | set(excl) | set(lead), key=lambda k: -lead.get(k, 0.0))
    for k in keys:
        c, s = busy.get(k, (0, 0.0))
        e, f = excl.get(k, 0.0) / n, lead.get(k, 0.0) / n
        print(f"{k[0][:30]:30s} {k[1]:>12s} {c // n:4d} {s / max(c, 1) / 1e3:8.2f} {e / 1e3:8.1f} "
              f"{f / 1e3:8.1f} {100 * f / wall:6.1f}")


for f in sys.argv[1:]:
    table(f)
