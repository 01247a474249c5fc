#!/usr/bin/env python3
"""gpu_table.py OUT — the table scripts/gpu.sh bench prints last: every
benched model against its floors (docs/perf/README.md has the method).

Floors, from OUT/floors.json (the device copy rate in bytes/s counting bytes
read and written, and the bf16 8192^3 GEMM rate in FLOP/s, measured by torch
in the same call):
- decode: copy rate / (decode_bytes + the K/V bytes a step reads at the
  bench's mean context), K/V in bf16, a sliding layer reading at most its
  window;
- prefill: GEMM rate / (2 * matmul parameters + causal attention FLOPs per
  token at the mean position).
"""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def text_config(c):
    return c.get("text_config", c)


def layers(c):
    """(kv bytes per position, q width, is sliding) per layer owning K/V."""
    c = text_config(c)
    n = c["num_hidden_layers"]
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    nkv = c.get("num_key_value_heads", c["num_attention_heads"])
    types = c.get("layer_types") or ["full_attention"] * n
    gd = c.get("global_head_dim") or hd
    gkv = c.get("num_global_key_value_heads") or nkv
    shared = c.get("num_kv_shared_layers") or 0
    out = []
    for i, t in enumerate(types):
        sl = t == "sliding_attention"
        d, k = (hd, nkv) if sl else (gd, gkv)
        owns = i < n - shared
        out.append((2 * k * d * 2 if owns else 0, c["num_attention_heads"] * d, sl))
    return out, c.get("sliding_window") or 0


def kv_read(c, ctx):
    ls, win = layers(c)
    return sum(b * (min(ctx, win) if sl and win else ctx) for b, _, sl in ls)


def attn_flops(c, pos):
    ls, win = layers(c)
    return sum(4 * q * (min(pos, win) if sl and win else pos) for _, q, sl in ls)


def main():
    out = sys.argv[1]
    fl = load(os.path.join(out, "floors.json"))
    copy, gemm = fl.get("copy_bytes_s", 0), fl.get("gemm_flop_s", 0)
    print("floors: copy %.0f GB/s, bf16 GEMM %.1f TFLOP/s" % (copy / 1e9, gemm / 1e12))
    head = ("model", "b1 512+64", "% floor", "b1 16+128", "% floor", "prefill 2048", "% floor",
            "streams", "out tok/s")
    print("%-22s %10s %8s %10s %8s %12s %8s %8s %10s" % head)
    for cfgp in sorted(glob.glob(os.path.join(out, "config-*.json"))):
        tag = os.path.basename(cfgp)[len("config-"):-len(".json")]
        c = load(cfgp)
        row = [tag]
        for kind in ("b1", "b1s"):
            j = load(os.path.join(out, "%s-%s.json" % (kind, tag)))
            tps = j.get("decode_tok_s", 0)
            ctx = j.get("prompt_len", 0) + (j.get("gen", 0) + 1) / 2
            by = j.get("decode_bytes", 0) + kv_read(c, ctx)
            fl_tps = copy / by if by and copy else 0
            row += ["%.1f" % tps, "%.1f%%" % (100 * tps / fl_tps) if fl_tps else "-"]
        j = load(os.path.join(out, "pre-%s.json" % tag))
        tps, n = j.get("prefill_tok_s", 0), j.get("prompt_len", 2048)
        tc = text_config(c)
        emb = tc["vocab_size"] * tc["hidden_size"]
        mm = j.get("n_params", 0) - (0 if tc.get("tie_word_embeddings") else emb)
        fpt = 2 * mm + attn_flops(c, n / 2)
        row += ["%.0f" % tps, "%.1f%%" % (100 * tps * fpt / gemm) if gemm and fpt else "-"]
        j = load(os.path.join(out, "conc-%s.json" % tag))
        r = (j.get("results") or [{}])[0]
        row += [str(r.get("concurrency", "-")), "%.0f" % r.get("output_tok_s", 0)]
        print("%-22s %10s %8s %10s %8s %12s %8s %8s %10s" % tuple(row))


if __name__ == "__main__":
    main()
