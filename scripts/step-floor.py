#!/usr/bin/env python3
"""One `tern bench --json` result against its bandwidth floors, as one line.

Usage: step-floor.py BENCH.json COPY_RATE_FILE LABEL MODEL_DIR

COPY_RATE_FILE holds the device-to-device copy rate in GB/s (bytes read plus
bytes written, scripts/gpu-check.sh). Two floors:
- weights: decode_bytes (every weight a decode step reads: all but the
  embedding table's other rows) over the copy rate: the issue's floor, exact
  when the context is short;
- weights + KV: also the K / V rows the attention reads, at the bench's mean
  context (decode step i of gen attends prompt_len + i positions, i = 1..gen),
  for a BF16 cache of the model's full-attention layers (the decode step
  kernel's case: config.json's num_hidden_layers, num_key_value_heads,
  head_dim or hidden_size / num_attention_heads).
"""
import json
import sys


def kv_bytes_per_token(model_dir, prompt_len, gen):
    c = json.load(open(model_dir + "/config.json"))
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    nkv = c.get("num_key_value_heads", c["num_attention_heads"])
    per_pos = c["num_hidden_layers"] * 2 * nkv * hd * 2
    return per_pos * (prompt_len + (gen + 1) / 2.0)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    j = json.load(open(sys.argv[1]))
    rate = float(open(sys.argv[2]).read()) * 1e9
    floor = rate / j["decode_bytes"]
    kv = kv_bytes_per_token(sys.argv[4], j["prompt_len"], j["gen"])
    floor_kv = rate / (j["decode_bytes"] + kv)
    tps = j["decode_tok_s"]
    print("%s %.1f tok/s (%.1f%% of %.1f; %.1f%% of %.1f with %.0f MB of KV at context %d+%d)"
          % (sys.argv[3], tps, 100 * tps / floor, floor, 100 * tps / floor_kv, floor_kv,
             kv / 1e6, j["prompt_len"], j["gen"]))


if __name__ == "__main__":
    main()
