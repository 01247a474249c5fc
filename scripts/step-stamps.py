#!/usr/bin/env python3
"""Where the decode step kernel's time goes, from its stamps.

Usage: scripts/step-stamps.py STAMPS.csv [--json]

STAMPS.csv is what TERN_CUDA_STEP_STAMPS=FILE makes the CUDA backend write
when the model closes (cuda_step.c): for the last decode step, every op and
block, four globaltimer stamps in ns: the op's start (the previous op's
epilogue done), its x ready (norm / attention / LL wait done), its GEMV
done, its epilogue done. Prints, per op kind averaged over the layers, the
median over blocks of each interval, the spread of the x-ready stamps, and
the step's total; then the attention's steps (all items, and the blocks
that merge the splits; att_kv_last_pass: an item's last pass's K / V rows
in, when it had more than one), how far each op's slowest GEMV ends after
the median block's, and gate_up's GEMV per block and SM; then the launch's
prologue (each block's first instruction to op 0's start) and, from
STAMPS.csv.gaps when it is there, the gaps between launches (the latest
block exit of one launch to the next launch's first instruction: the ops
between two decode steps, and the launch itself).
"""
import os
import csv
import json
import statistics
import sys
from collections import defaultdict

KINDS = ["qkv", "o", "gate_up", "down", "lm_head"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = defaultdict(list)
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            rows[int(r["op"])].append(r)
    ops = sorted(rows)
    acc = defaultdict(lambda: defaultdict(list))
    tails = defaultdict(list)  # the slowest block's GEMV done past the median block's
    starts = [statistics.median(int(r["start"]) / 1e3 for r in rows[op]) for op in ops]
    starts.append(statistics.median(int(r["epilogue_done"]) / 1e3 for r in rows[ops[-1]]))
    for i, op in enumerate(ops):
        rs = rows[op]
        kind = KINDS[int(rs[0]["kind"])]
        col = {k: [int(r[k]) / 1e3 for r in rs] for k in ("start", "x_ready", "gemv_done", "epilogue_done")}
        med = {k: statistics.median(v) for k, v in col.items()}
        a = acc[kind]
        a["x wait"].append(med["x_ready"] - med["start"])
        a["gemv"].append(med["gemv_done"] - med["x_ready"])
        a["epilogue"].append(med["epilogue_done"] - med["gemv_done"])
        a["x-ready spread"].append(max(col["x_ready"]) - min(col["x_ready"]))
        a["gemv-done spread"].append(max(col["gemv_done"]) - min(col["gemv_done"]))
        tails[kind].append(max(col["gemv_done"]) - med["gemv_done"])
        a["op (median start to start)"].append(starts[i + 1] - starts[i])
    total = max(int(r["epilogue_done"]) for r in rows[ops[-1]]) / 1e3
    out = {k: {m: statistics.mean(v) for m, v in a.items()} for k, a in acc.items()}
    if "--json" in sys.argv:
        print(json.dumps({"total_us": total, "per_kind_us": out}, indent=1))
        return
    metrics = ["op (median start to start)", "x wait", "gemv", "epilogue", "x-ready spread",
               "gemv-done spread"]
    print("us, mean over layers of the median over blocks (spreads: max - min over blocks)")
    print("%-8s" % "kind" + "".join("%16s" % m[:15] for m in metrics))
    for k in KINDS:
        if k in out:
            print("%-8s" % k + "".join("%16.2f" % out[k].get(m, 0.0) for m in metrics))
    print("step: %.1f us (first start to last epilogue)" % total)
    # the attention phase: from the last qkv epilogue, medians over the
    # blocks that had an item (att_q stamped), mean over layers; mg: the
    # blocks that merge the splits (output stamped after the partials came in)
    att, mg = defaultdict(list), defaultdict(list)
    for i, op in enumerate(ops):
        if KINDS[int(rows[op][0]["kind"])] != "o" or i == 0:
            continue
        t0 = max(int(r["epilogue_done"]) for r in rows[ops[i - 1]]) / 1e3
        items = [r for r in rows[op] if int(r.get("att_q", -1)) >= 0]
        for k in ("att_q", "att_kv", "att_qk", "att_softmax", "att_passes", "att_parts", "att_out"):
            v = [int(r[k]) / 1e3 - t0 for r in items if int(r.get(k, -1)) >= 0]
            if v:
                att[k].append(statistics.median(v))
        # a later pass's K / V rows in (the o op's slot 11: op 0's holds the SM)
        v = [int(r["sm"]) / 1e3 - t0 for r in items if int(r.get("sm", -1)) >= 0]
        if v:
            att["att_kv_last_pass"].append(statistics.median(v))
        att["x_ready"].append(statistics.median(int(r["x_ready"]) / 1e3 for r in rows[op]) - t0)
        ms = [r for r in items if int(r.get("att_out", -1)) > 0 and int(r.get("att_parts", -1)) > 0]
        for k in ("att_passes", "att_parts", "att_out") if ms else ():
            mg[k].append(statistics.median(int(r[k]) / 1e3 - t0 for r in ms))
    if att:
        print("attention, us after the last qkv epilogue: " +
              ", ".join("%s %.2f" % (k, statistics.mean(v)) for k, v in att.items()))
    if mg:
        print("attention mergers, us after the last qkv epilogue: passes %.2f, partials in %.2f, "
              "output out %.2f" % tuple(statistics.mean(mg[k]) for k in ("att_passes", "att_parts", "att_out")))
    print("GEMV done, slowest block after the median (us, mean over layers): " +
          ", ".join("%s %.2f" % (k, statistics.mean(tails[k])) for k in KINDS if k in tails))
    launches(rows, ops, sys.argv[1] + ".gaps")
    per_block(rows, ops)


def launches(rows, ops, gaps_path):
    """The prologue (op 0's att_q: the block's first instruction) and the
    gaps between launches (STAMPS.csv.gaps, ns a line)."""
    pro = [(int(r["start"]) - int(r["att_q"])) / 1e3 for r in rows[ops[0]]
           if int(r.get("att_q", -1)) != -1]
    if pro:
        print("launch prologue (first instruction to op 0's start, us): median %.2f, max %.2f"
              % (statistics.median(pro), max(pro)))
    if not os.path.exists(gaps_path):
        return
    g = sorted(int(x) / 1e3 for x in open(gaps_path) if x.strip())
    g = [x for x in g if x < 1000.0]  # a prefill or a sync between two steps: not a gap
    if g:
        q = lambda f: g[min(len(g) - 1, int(f * len(g)))]
        print("between launches (latest exit to the next first instruction, us, %d launches): "
              "p10 %.2f, p50 %.2f, p90 %.2f" % (len(g), q(0.1), q(0.5), q(0.9)))


def per_block(rows, ops):
    """gate_up's GEMV per block (median over layers 2..), with the block's SM
    (op 0's sm column): are the slow blocks slow for their work or their SM?"""
    sm = {int(r["block"]): int(r.get("sm", -1)) for r in rows[ops[0]]}
    gemv, late = defaultdict(list), defaultdict(int)
    gu = [op for op in ops if KINDS[int(rows[op][0]["kind"])] == "gate_up"][2:]
    for op in gu:
        for r in rows[op]:
            gemv[int(r["block"])].append((int(r["gemv_done"]) - int(r["x_ready"])) / 1e3)
        done = sorted(rows[op], key=lambda r: int(r["epilogue_done"]))
        for r in done[-4:]:
            late[int(r["block"])] += 1
    if not gemv or min(sm.values()) < 0:
        return
    med = {b: statistics.median(v) for b, v in gemv.items()}
    order = sorted(med, key=med.get)
    fmt = lambda b: "%d@sm%d %.2f" % (b, sm[b], med[b])
    print("gate_up GEMV by block (us, median over layers 2..; block@SM): fastest " +
          ", ".join(fmt(b) for b in order[:6]) + "; slowest " + ", ".join(fmt(b) for b in order[-8:]))
    print("latest 4 gate_up epilogues (block@SM: layers): " +
          ", ".join("%d@sm%d: %d" % (b, sm[b], n) for b, n in sorted(late.items(), key=lambda x: -x[1])[:8]))
    tpc = defaultdict(list)
    for b, m in med.items():
        tpc[sm[b] // 2].append(b)
    print("blocks sharing a TPC with one of the 4 slowest: " + ", ".join(
        "sm%d-%d: %s" % (2 * t, 2 * t + 1, " ".join(fmt(b) for b in tpc[t]))
        for t in sorted({sm[b] // 2 for b in order[-4:]})))


if __name__ == "__main__":
    main()
