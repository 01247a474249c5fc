#!/usr/bin/env python3
"""make_tokenizer_goldens.py — golden token ids and decodes from the oracle.

Encodes a varied corpus (code, many scripts, emoji ZWJ sequences, whitespace
runs, digits, special tokens next to text, invalid UTF-8, very long words)
with Hugging Face `tokenizers` for each fixture tokenizer (qwen3, llama3_1,
gemma3, mistral), with and without add_special_tokens, and decodes the ids
back (skip_special_tokens False and True). Writes JSON lines to
tests/fixtures/text/tok_goldens_<name>.jsonl:

    {"i": 3, "text": "...", "hex": null, "ids": [...], "pre": [...], "post": [...],
     "decode": "..." | null, "decode_skip": "..." | null}

where encode(add_special_tokens=True) == pre + ids + post, and a null decode
means "equal to the input text" (keeps the files small).

Invalid UTF-8: `tokenizers` only takes str, so a byte case (field "hex", the
raw bytes) is given to the oracle as bytes.decode("utf-8", errors="replace");
tern replaces each maximal invalid subsequence by U+FFFD the same way before
encoding, so the ids must match exactly.

The tokenizer files are read from tests/fixtures/data/tokenizers/<name>/*.xz
(decompressed to a temporary directory; never copied into the repo).

usage: tools/.venv/bin/python tools/make_tokenizer_goldens.py
(needs: pip install tokenizers)
"""
import json
import lzma
import os
import random
import sys
import tempfile

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "fixtures", "data")
OUT = os.path.join(ROOT, "tests", "fixtures", "text")
NAMES = ["qwen3", "llama3_1", "gemma3", "mistral"]


def corpus():
    """The corpus: a list of str or bytes (bytes may be invalid UTF-8)."""
    rng = random.Random(1234)
    c = [
        "", " ", "  ", "\n", "\n\n\n", "\t", "\r\n", " \r\n \r\n", "a", "Hello world",
        " Hello world", "Hello  world  ", "   leading and trailing   ",
        "Hello, world! How's it going? I'm fine, they'll see, we've won, you'd know.",
        "THE QUICK BROWN FOX jumps over the lazy dog's back 'quoted' \"double\"",
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
        '{"key": [1, 2.5, -3e10, null, true], "nested": {"a": "b\\u00e9"}}',
        "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
        "    indented with spaces\n\t\tand tabs\n\n\n   \n",
        "line1\r\nline2\r\n\r\nline3\rline4",
        "a\u00a0b\u2003c\u3000d\u200be",  # nbsp, em space, ideographic space, ZWSP
        "中文分词测试：我们今天去北京天安门广场。",
        "日本語のテキスト、カタカナとひらがな。東京タワー",
        "한국어 텍스트입니다. 안녕하세요!",
        "العربية: مرحبا بالعالم، كيف حالك؟",
        "עברית: שלום עולם",
        "हिन्दी: नमस्ते दुनिया, आप कैसे हैं?",
        "ภาษาไทย: สวัสดีชาวโลก ยินดีต้อนรับ",
        "Русский текст: Привет, мир! Ёжик в тумане.",
        "Ελληνικά: Γειά σου Κόσμε",
        "Tiếng Việt: Xin chào thế giới, điều này thật tuyệt vời",
        "Türkçe: İstanbul ışık ğüşöç",
        "Deutsch: Straße, Größe, Äpfel, ÖL, ÜBER",
        "e\u0301 vs \u00e9, A\u030a vs \u00c5, \u1e9b\u0323",  # NFC vs NFD
        "ﬁﬂ ligatures, ＦＵＬＬＷＩＤＴＨ ｋａｔａｋａｎａ ｶﾀｶﾅ, ① ² ½",
        "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇯🇵 ❤️ ✅ 🧑🏿‍💻",
        "👩‍🔬👩‍🔬👩‍🔬",
        "Math: ∑_{i=1}^{n} x_i² ≤ ∞, ∀ε>0 ∃δ, √2 ≈ 1.41421356",
        "Numbers: 0 7 42 123 1234 12345 123456789012345678901234567890",
        "Prices $1,234.56 and €9.99, 3.14159, -0.001, 1e-9, 0x1F, 1_000_000",
        "Dates 2024-01-15T12:34:56Z, phone +1 (555) 123-4567",
        "3333333333 33 3 333",
        "URLs: https://example.com/path?q=1&r=two#frag and user@mail.example.org",
        "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
        "!!!??? ...,,, ;;; ::: ''' \"\"\" ``` ~~~ ___ --- === +++ *** ### @@@",
        "''''''```````\"\"\"\"......!!!!!!??????",
        "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea?",
        "tab\tseparated\tvalues\t\t\tend",
        "trailing newline\n",
        " \n \n \n",
        "mixed 中文 and English 混合 text 123 数字",
        "🦙 llama 🦙🦙 ollama",
        "\u0000 nul \u0001 ctrl \u007f del \u0085 nel",
        "\ufeffBOM at start",
        "Zalgo: Z\u0351\u036b\u0343\u036a\u0302a\u0310\u0352l\u0357g\u0308o",
        "\U0001F600\U0001F601 \U00010348 \U0001D11E astral",
        "A" * 20 + " " + "b" * 37,
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
        "Ｈｅｌｌｏ　Ｗｏｒｌｄ",
        "x" * 3000,
        "ab" * 1500,
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(2000)),
        "9" * 600,
        " " * 1000 + "x",
        "\n" * 300,
        "😀" * 100,
        "的" * 200,
        " ".join("word%d" % i for i in range(150)),
        "".join(rng.choice("abc XYZ 123 中文 é ü \n\t!?") for _ in range(1200)),
    ]
    specials = [
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|> spaced <|im_end|>  <|endoftext|>",
        "<think>reasoning</think>answer <tool_call>{}</tool_call>",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "text<|eot_id|>more text <|eot_id|> spaced",
        "<s>Hello</s> <s> spaced </s>",
        "a<s>b</s>c<unk>d",
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
        "<start_of_image> <image_soft_token> <end_of_image>",
        "<unused0>x<unused1> <mask> [multimodal]",
        "not special: <|im_start and <s and <bos and </s",
        "<|im_end|><|im_end|><|im_end|>",
        "<<|im_start|>> <<s>> <<bos>>",
    ]
    invalid = [
        b"abc\xff\xfedef",
        b"\xe4\xbd",  # truncated 3-byte sequence
        b"trunc \xe4\xbd end",
        b"\xc0\xaf overlong",
        b"\xed\xa0\x80 surrogate",
        b"\xf0\x9f\x98 cut emoji \xf0\x9f\x98\x80",
        b"\x80\x80\x80 lone continuations",
        b"\xf5\xf6\xf7\xf8 out of range",
        b"ok \xe2\x82 then \xe2\x82\xac",
    ]
    return c + specials + invalid


def load(name, tmp):
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    src = os.path.join(DATA, "tokenizers", name, "tokenizer.json.xz")
    with lzma.open(src) as f, open(os.path.join(d, "tokenizer.json"), "wb") as g:
        g.write(f.read())
    return Tokenizer.from_file(os.path.join(d, "tokenizer.json"))


def main():
    if not os.path.isdir(DATA):
        sys.exit("fixture data not found at %s" % DATA)
    os.makedirs(OUT, exist_ok=True)
    cases = corpus()
    with tempfile.TemporaryDirectory() as tmp:
        for name in NAMES:
            tok = load(name, tmp)
            path = os.path.join(OUT, "tok_goldens_%s.jsonl" % name)
            with open(path, "w", encoding="utf-8") as f:
                for i, c in enumerate(cases):
                    hexs = c.hex() if isinstance(c, bytes) else None
                    text = c.decode("utf-8", errors="replace") if isinstance(c, bytes) else c
                    ids = tok.encode(text, add_special_tokens=False).ids
                    ids_sp = tok.encode(text, add_special_tokens=True).ids
                    # ids_special as the ids added before and after `ids`
                    pre = next(k for k in range(len(ids_sp) + 1)
                               if ids_sp[k:k + len(ids)] == ids)
                    dec = tok.decode(ids_sp, skip_special_tokens=False)
                    dec_skip = tok.decode(ids_sp, skip_special_tokens=True)
                    rec = {
                        "i": i,
                        "text": None if hexs else text,
                        "hex": hexs,
                        "ids": ids,
                        "pre": ids_sp[:pre],
                        "post": ids_sp[pre + len(ids):],
                        # null: equal to the input text (after U+FFFD replacement)
                        "decode": None if dec == text else dec,
                        "decode_skip": None if dec_skip == text else dec_skip,
                    }
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            print("%s: %d cases -> %s (%d bytes)" % (name, len(cases), path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
