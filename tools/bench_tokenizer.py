#!/usr/bin/env python3
"""bench_tokenizer.py — tern's tokenizer vs Hugging Face `tokenizers` (Rust).

Builds a deterministic ~1 MB mixed corpus (English prose, code, CJK,
Cyrillic, Arabic, Hindi, emoji, numbers, whitespace), then for each fixture
tokenizer times, on one thread, encoding the whole corpus as ONE string:

  - HF: Tokenizer.from_file(...).encode(corpus, add_special_tokens=False)
        with TOKENIZERS_PARALLELISM=false and RAYON_NUM_THREADS=1
  - tern: bench/bench_tokenizer.c (tern_tokenize on the same string), built
        here with cc -O2 over src/text/tok_*.c and src/base/*.c

Best of N runs each; the token counts must agree. Prints a markdown table
(ratio = HF time / tern time, > 1 means tern is faster) to paste into
docs/perf/tokenizer.md.

usage: tools/.venv/bin/python tools/bench_tokenizer.py [--repeats 5] [--names qwen3,gemma3]
"""
import argparse
import json
import lzma
import os
import random
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["RAYON_RS_NUM_CPUS"] = "1"

from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "fixtures", "data")

PARAS = [
    "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of "
    "times, it was the age of wisdom, it was the age of foolishness. ",
    "In 1969, Apollo 11 landed on the Moon; the mission lasted 8 days, 3 hours and 18 minutes. ",
    "def tokenize(text: str) -> list[int]:\n    ids = []\n    for word in text.split():\n"
    "        ids.extend(vocab.get(word, [0]))\n    return ids\n\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n\tif (sum > 1e9) break;\n}\n",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习而无需明确编程。",
    "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。",
    "Москва — столица России, крупнейший по численности населения город страны. ",
    "اللغة العربية هي أكثر اللغات السامية تحدثا وإحدى أكثر اللغات انتشارا في العالم. ",
    "हिन्दी विश्व की एक प्रमुख भाषा है और भारत की राजभाषा है। ",
    "Emoji time 😀🎉👍🏽 👨‍👩‍👧‍👦 🇺🇸 — prices: $19.99, €5, 1,234,567.89 units. ",
    "    \n\n\t  trailing spaces   \n",
    '{"id": 12345, "name": "widget", "tags": ["a", "b"], "price": 3.5}\n',
]


def make_corpus(size=1 << 20, seed=7):
    rng = random.Random(seed)
    out, n = [], 0
    while n < size:
        p = rng.choice(PARAS)
        if rng.random() < 0.3:
            p = p.replace("fox", "fox%d" % rng.randint(0, 99999))
        out.append(p)
        n += len(p.encode())
    return "".join(out)


def build_bench(tmp):
    exe = os.path.join(tmp, "bench_tokenizer")
    srcs = [os.path.join(ROOT, "bench", "bench_tokenizer.c")]
    for d in ("src/text", "src/base"):
        for f in sorted(os.listdir(os.path.join(ROOT, d))):
            if f.endswith(".c") and (d == "src/base" or f.startswith("tok_")):
                srcs.append(os.path.join(ROOT, d, f))
    srcs.append(os.path.join(ROOT, "src", "api", "defaults.c"))
    libs = subprocess.check_output(["pkg-config", "--cflags", "--libs", "jansson", "libpcre2-8",
                                    "libutf8proc"], text=True).split()
    cmd = ["cc", "-std=c11", "-O2", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "include"),
           "-I" + os.path.join(ROOT, "src"), "-o", exe] + srcs + libs + ["-lm", "-lpthread"]
    subprocess.check_call(cmd)
    return exe


def unpack(name, tmp):
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(DATA, "tokenizers", name, f + ".xz")
        with lzma.open(src) as a, open(os.path.join(d, f), "wb") as b:
            b.write(a.read())
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--names", default="qwen3,llama3_1,gemma3,mistral")
    args = ap.parse_args()
    corpus = make_corpus()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_bench(tmp)
        cpath = os.path.join(tmp, "corpus.txt")
        with open(cpath, "w", encoding="utf-8") as f:
            f.write(corpus)
        nbytes = len(corpus.encode())
        print("corpus: %d bytes, one string; best of %d" % (nbytes, args.repeats))
        print("| tokenizer | tokens | HF load ms | tern load ms | HF encode ms | tern encode ms "
              "| tern MB/s | ratio HF/tern |")
        print("|---|---|---|---|---|---|---|---|")
        for name in args.names.split(","):
            d = unpack(name, tmp)
            t0 = time.perf_counter()
            tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            hf_load = time.perf_counter() - t0
            hf_best, n_hf = 1e30, 0
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                n_hf = len(tok.encode(corpus, add_special_tokens=False).ids)
                hf_best = min(hf_best, time.perf_counter() - t0)
            out = subprocess.check_output([exe, d, cpath, str(args.repeats)], text=True)
            r = json.loads(out)
            if r["tokens"] != n_hf:
                print("WARNING: %s token counts differ: HF %d, tern %d" % (name, n_hf, r["tokens"]),
                      file=sys.stderr)
            print("| %s | %d | %.0f | %.0f | %.1f | %.1f | %.1f | %.2f |" % (
                name, n_hf, hf_load * 1e3, r["load_s"] * 1e3, hf_best * 1e3, r["encode_s"] * 1e3,
                nbytes / r["encode_s"] / 1e6, hf_best / r["encode_s"]))


if __name__ == "__main__":
    main()
