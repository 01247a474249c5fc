"""
make_embed_fixture.py — builds tests/fixtures/models/tiny-qwen3-embed, a tiny
Qwen3-Embedding-style snapshot, and its golden vectors, with Hugging Face
transformers (PyTorch, float32) as the oracle.

Run:  tools/setup-oracle.sh && tools/.venv/bin/python tools/make_embed_fixture.py

The snapshot is laid out as Qwen3-Embedding publishes its snapshots:
  config.json                       tiny-qwen3's (Qwen3ForCausalLM), bos/eos <|endoftext|>
  model.safetensors                 tiny-qwen3's weights under the base model's own names
                                    (embed_tokens.weight, layers.N..., norm.weight: no "model."
                                    prefix) and no lm_head (tied)
  tokenizer.json                    tiny-llama's byte-level BPE (same 384 ids), its
                                    post-processor appending <|endoftext|> to every input, as
                                    Qwen3-Embedding's does
  tokenizer_config.json             Qwen2Tokenizer, eos/pad <|endoftext|>, no bos
  modules.json                      Transformer (path ""), Pooling (1_Pooling), Normalize
  1_Pooling/config.json             pooling_mode_lasttoken, include_prompt true
  config_sentence_transformers.json prompts "query" ("Instruct: ...\\nQuery:") and "document"

golden/embeddings.json holds, for each input (text and prompt name): the token ids
(the prompt's text before the input, special tokens added) and
  last      the final hidden state (AutoModel's last_hidden_state, after the final norm) of
            the last token, L2-normalised: what the snapshot's modules compute
  last16    its first 16 values, L2-normalised again (Matryoshka truncation)
  mean      the mean of the rows after the prompt (include_prompt false), not normalised: the
            snapshot read with a mean-pooling config (tests write that config beside it)
  mean_skip how many leading tokens the prompt takes in that reading
Each input runs alone (no padding). The plain transformers oracle needs nothing else:
sentence-transformers' Transformer, Pooling and Normalize modules compute exactly this. When
sentence-transformers is installed its own encode() is run on both readings as a check of
the layout (meta.json checks.sentence_transformers: max |difference|); the goldens are the
transformers ones either way.
"""

import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
SRC = os.path.join(MODELS, "tiny-qwen3")
TOK_SRC = os.path.join(MODELS, "tiny-llama")
OUT = os.path.join(MODELS, "tiny-qwen3-embed")
EOT, EOT_ID = "<|endoftext|>", 1

QUERY = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
INPUTS = [
    ("Once upon a time, the quick brown fox", None),
    ("hello", None),
    ("", None),
    ("The fox jumps over the lazy dog, and the dog runs after the fox across the green field "
     "while the sun goes down behind the hills and the birds sing their evening song.", None),
    ("what does the fox say?", "query"),
    ("the quick brown fox", "document"),
]
MATRYOSHKA = 16


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def build_snapshot():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    with open(os.path.join(SRC, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(bos_token_id=EOT_ID, eos_token_id=EOT_ID, pad_token_id=EOT_ID)
    write_json(os.path.join(OUT, "config.json"), cfg)
    w = load_file(os.path.join(SRC, "model.safetensors"))
    flat = {k[len("model."):]: v.contiguous() for k, v in w.items() if k.startswith("model.")}
    assert len(flat) == len(w), "tiny-qwen3 is tied: every tensor is under model."
    save_file(dict(sorted(flat.items())), os.path.join(OUT, "model.safetensors"),
              metadata={"format": "pt"})
    os.chmod(os.path.join(OUT, "model.safetensors"), 0o644)

    with open(os.path.join(TOK_SRC, "tokenizer.json")) as f:
        tok = json.load(f)
    assert tok["added_tokens"][EOT_ID]["content"] == EOT
    seq = lambda i, t: {"Sequence": {"id": i, "type_id": t}}  # noqa: E731
    eot = lambda t: {"SpecialToken": {"id": EOT, "type_id": t}}  # noqa: E731
    tok["post_processor"] = {
        "type": "TemplateProcessing", "single": [seq("A", 0), eot(0)],
        "pair": [seq("A", 0), eot(0), seq("B", 1), eot(1)],
        "special_tokens": {EOT: {"id": EOT, "ids": [EOT_ID], "tokens": [EOT]}}}
    write_json(os.path.join(OUT, "tokenizer.json"), tok)
    with open(os.path.join(TOK_SRC, "tokenizer_config.json")) as f:
        tc = json.load(f)
    write_json(os.path.join(OUT, "tokenizer_config.json"), {
        "added_tokens_decoder": tc["added_tokens_decoder"], "bos_token": None,
        "clean_up_tokenization_spaces": False, "eos_token": EOT, "errors": "replace",
        "model_max_length": 256, "pad_token": EOT, "padding_side": "left",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None})

    write_json(os.path.join(OUT, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}])
    write_json(os.path.join(OUT, "1_Pooling", "config.json"), pooling_config("lasttoken", True))
    write_json(os.path.join(OUT, "config_sentence_transformers.json"), {
        "prompts": {"query": QUERY, "document": ""}, "default_prompt_name": None,
        "similarity_fn_name": "cosine"})


def pooling_config(mode, include_prompt):
    keys = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
            "max": "pooling_mode_max_tokens", "sqrt": "pooling_mode_mean_sqrt_len_tokens",
            "weighted": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}
    out = {"word_embedding_dimension": 64}
    for k, v in keys.items():
        out[v] = k == mode
    out["include_prompt"] = include_prompt
    return out


def prompt_text(name):
    return {"query": QUERY, "document": ""}[name] if name else ""


def goldens():
    tok = AutoTokenizer.from_pretrained(OUT)
    model = AutoModel.from_pretrained(OUT, dtype=torch.float32, attn_implementation="eager").eval()
    assert type(model).__name__ == "Qwen3Model", type(model).__name__
    missing = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    assert not missing
    rows = []
    for text, pname in INPUTS:
        prompt = prompt_text(pname)
        ids = tok(prompt + text)["input_ids"]
        assert ids[-1] == EOT_ID, "the post-processor appends <|endoftext|>"
        p_ids = tok(prompt)["input_ids"] if prompt else []
        skip = len(p_ids) - (1 if p_ids and p_ids[-1] in tok.all_special_ids else 0)
        with torch.no_grad():
            h = model(input_ids=torch.tensor([ids])).last_hidden_state[0].double()
        last = h[-1] / h[-1].norm().clamp_min(1e-12)
        cut = h[-1][:MATRYOSHKA]
        mean = h[skip:].mean(0) if skip < len(ids) else torch.zeros(h.shape[1], dtype=h.dtype)
        rows.append({"text": text, "prompt_name": pname, "ids": ids,
                     "last": [float(x) for x in last.float()],
                     f"last{MATRYOSHKA}": [float(x) for x in (cut / cut.norm()).float()],
                     "mean": [float(x) for x in mean.float()], "mean_skip": skip})
    return rows


def st_check(rows):
    """sentence-transformers' encode() on the snapshot and on its mean-pooling reading."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    worst = {}
    with tempfile.TemporaryDirectory() as tmp:
        mean_dir = os.path.join(tmp, "mean")
        shutil.copytree(OUT, mean_dir)
        write_json(os.path.join(mean_dir, "1_Pooling", "config.json"), pooling_config("mean", False))
        with open(os.path.join(mean_dir, "modules.json")) as f:
            mods = json.load(f)[:2]
        write_json(os.path.join(mean_dir, "modules.json"), mods)
        for key, path in (("last", OUT), ("mean", mean_dir)):
            st = SentenceTransformer(path, device="cpu", model_kwargs={"dtype": torch.float32})
            d = 0.0
            for r in rows:
                v = st.encode([r["text"]], prompt_name=r["prompt_name"], convert_to_numpy=True)[0]
                d = max(d, float(np.abs(v - np.array(r[key], dtype=np.float32)).max()))
            worst[key] = d
            assert d < 1e-5, f"sentence-transformers reads the {key} snapshot differently: {d}"
    import sentence_transformers
    worst["version"] = sentence_transformers.__version__
    return worst


def main():
    build_snapshot()
    rows = goldens()
    checks = {"sentence_transformers": st_check(rows)}
    import tokenizers
    write_json(os.path.join(OUT, "golden", "embeddings.json"), {
        "inputs": rows,
        "meta": {"command": "tools/.venv/bin/python tools/make_embed_fixture.py",
                 "from": "tiny-qwen3 weights, tiny-llama tokenizer",
                 "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                              "tokenizers": tokenizers.__version__},
                 "checks": checks}})
    print(f"wrote {OUT}: {len(rows)} inputs; checks {checks}")


if __name__ == "__main__":
    sys.exit(main())
