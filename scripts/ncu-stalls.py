#!/usr/bin/env python3
"""Compact summary of an ncu text report (scripts/gpu-profile.sh with
PROFILE_SEC naming stall metrics): per profiled kernel its grid, duration,
DRAM throughput, instructions executed and the largest warp-stall reasons
(cycles per issued instruction)."""
import re
import sys

for f in sys.argv[1:]:
    cur = None
    out = []
    for line in open(f, errors='replace'):
        m = re.match(r'^  (?:void )?([A-Za-z_][\w:]*)(?:<([^>]*)>)?\(.*\) \((\d+), (\d+), (\d+)\)x\((\d+)', line)
        if m:
            cur = {'name': m.group(1), 'tpl': m.group(2) or '', 'grid': m.group(3), 'stalls': {}}
            out.append(cur)
            continue
        if cur is None:
            continue
        parts = line.split()
        if len(parts) >= 2:
            key, val = parts[0], parts[-1].replace(',', '')
            try:
                v = float(val)
            except ValueError:
                continue
            if key.startswith('smsp__average_warps_issue_stalled_'):
                cur['stalls'][key[len('smsp__average_warps_issue_stalled_'):].replace('_per_issue_active.ratio', '')] = v
            elif key in ('smsp__inst_executed.sum', 'dram__bytes_read.sum', 'gpu__time_duration.sum'):
                cur[key] = (v, parts[1] if len(parts) == 3 else '')
            elif line.strip().startswith('Duration'):
                cur['dur'] = (v, parts[1])
            elif line.strip().startswith('DRAM Throughput'):
                cur['dram%'] = v
    for k in out:
        top = sorted(k['stalls'].items(), key=lambda kv: -kv[1])[:7]
        print(f"{k['name']}<{k['tpl']}> grid {k['grid']}: dur {k.get('dur')} dram {k.get('dram%')}% "
              f"inst {k.get('smsp__inst_executed.sum')} dram_read {k.get('dram__bytes_read.sum')}")
        print("   stalls/issue: " + ', '.join(f"{n} {v:.2f}" for n, v in top))
