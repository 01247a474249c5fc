"""
make_quant_fixtures.py — MLX affine quantized fixtures under tests/fixtures/quant/<name>/,
made by mlx-lm's own converter from the tiny models in tests/fixtures/models, with
mlx-lm (MLX on the CPU) as the oracle for logits and greedy tokens.

Run:  python3 -m venv tools/.venv-mlx && tools/.venv-mlx/bin/pip install -r tools/requirements-mlx.txt
      tools/.venv-mlx/bin/python tools/make_quant_fixtures.py [names... | cases]
(MLX runs on Linux with the `mlx[cpu]` extra, which brings libmlx.so; plain `mlx` does not.)

Each fixture folder is exactly what `mlx_lm.convert(quantize=True, ...)` wrote
(config.json with the `quantization` / `quantization_config` blocks,
model.safetensors with `<m>.weight` U32 + `<m>.scales` + `<m>.biases`), minus the
tokenizer files and model card it adds (tern does not need them here), plus:

  golden/prompt.npy         int32 [n_prompt]         the source fixture's prompt
  golden/logits.npy         f32   [n_prompt, vocab]  full-sequence forward, every position
  golden/greedy.npy         int32 [32]               greedy tokens (EOS ignored)
  golden/greedy_logits.npy  f32   [32, vocab]        row i = the logits that chose greedy[i]
  golden/meta.json          versions, recipe, checks

The cached decode (sliding-window layers through mlx-lm's RotatingKVCache) must
agree with one uncached forward over prompt + greedy, or the script stops.

The oracle runs the quantized model with every floating parameter (norms, any
unquantized weights, and the quantization scales and biases) widened to
float32. Widening bf16/f16 to f32 is exact, so the dequantized weights
scale * q + bias are the same numbers the stored model means, and MLX computes
the quantized matmuls in float32 (its bf16 path accumulates in bf16, which is
too coarse to be an oracle). tern's float32 CPU backend must then agree to
float32 rounding.

A recipe's `override` is a quant_predicate in mlx-lm's form: module path ->
False (keep dense) or {"group_size", "bits"}.
"""

import json
import os
import shutil
import sys
import tempfile

import mlx.core as mx
import mlx_lm
import numpy as np
from mlx.utils import tree_map
from mlx_lm.convert import convert
from mlx_lm.models.cache import make_prompt_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC_DIR = os.path.join(ROOT, "tests", "fixtures", "models")
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "quant")
N_GREEDY = 32

MIXED = {
    "model.layers.0.mlp.up_proj": {"group_size": 32, "bits": 8},
    "model.layers.1.self_attn.v_proj": {"group_size": 32, "bits": 2},
    "model.layers.2.mlp.gate_proj": False,
    "lm_head": False,
}

RECIPES = [
    # name, source fixture, bits, group size, per-module override
    ("llama-q4g64", "tiny-llama", 4, 64, None),
    ("qwen3-q8g32", "tiny-qwen3", 8, 32, None),
    ("qwen2-q3g64", "tiny-qwen2", 3, 64, None),
    ("mistral-q6g64", "tiny-mistral", 6, 64, None),
    ("llama3rope-q5g32", "tiny-llama3-rope", 5, 32, None),
    ("linear-q2g64", "tiny-llama-linear", 2, 64, None),
    ("llama-mixed", "tiny-llama", 4, 64, MIXED),
    ("gemma3-q4g32", "tiny-gemma3", 4, 32, None),
    ("gemma4-q4g32", "tiny-gemma4", 4, 32, None),
    ("phi3-q4g32", "tiny-phi3", 4, 32, None),      # qkv_proj and gate_up_proj quantized as one
    ("cohere-q8g32", "tiny-cohere", 8, 32, None),  # LayerNorms, the parallel block, logit_scale
    # mlx-lm stacks the experts (switch_mlp, each expert quantized on its own rows) and its
    # qwen3_moe quant_predicate keeps the routers (mlp.gate) at 8 bits, group 64
    ("qwen3moe-q4g32", "tiny-qwen3-moe", 4, 32, None),
    # Gemma 4's experts as mlx-lm's switch_glu stacks: gate / up at 4 bits, down (input 16, not
    # a multiple of the group) left bf16 by mlx-lm's predicate, the router at 8 bits
    ("gemma4moe-q4g32", "tiny-gemma4-moe", 4, 32, None),
]

# Fixtures `tern quantize` does not reproduce (tests/quant/test_quant.c skips them): mlx-lm
# stacks the experts (switch_mlp / switch_glu) and applies its model's own quant predicate to
# the routers; tern quantize writes one tensor per source tensor.
NOT_TERN_QUANTIZE = {"qwen3moe-q4g32", "gemma4moe-q4g32"}

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json"]
DROP = TOKENIZER_FILES + ["special_tokens_map.json", "README.md", "chat_template.jinja"]


def quantize(src, out, bits, group, override):
    # mlx_lm.load wants a tokenizer: give the source a copy of tiny-llama's.
    with tempfile.TemporaryDirectory() as tmp:
        s = os.path.join(tmp, "src")
        shutil.copytree(src, s, ignore=shutil.ignore_patterns("golden"))
        for f in TOKENIZER_FILES:
            if not os.path.exists(os.path.join(s, f)):
                shutil.copy(os.path.join(SRC_DIR, "tiny-llama", f), s)
        pred = None
        if override:
            def pred(path, module):
                return override.get(path, True)
        convert(s, out, quantize=True, q_group_size=group, q_bits=bits, quant_predicate=pred)
    for f in DROP:
        p = os.path.join(out, f)
        if os.path.exists(p):
            os.remove(p)


def widen(model):
    """Every floating parameter (scales and biases included) to float32; U32 stays."""
    def f(v):
        return v.astype(mx.float32) if mx.issubdtype(v.dtype, mx.floating) else v
    model.update(tree_map(f, model.parameters()))


def run_oracle(out, prompt):
    model, _ = mlx_lm.utils.load_model(__import__("pathlib").Path(out))
    widen(model)
    ids = mx.array(prompt.astype(np.int32))[None]
    logits = np.array(model(ids)[0].astype(mx.float32))
    cache = make_prompt_cache(model)
    step = model(ids, cache=cache)[0, -1]
    greedy, glog = [], []
    for _ in range(N_GREEDY):
        row = np.array(step.astype(mx.float32))
        tok = int(row.argmax())
        greedy.append(tok)
        glog.append(row)
        step = model(mx.array([[tok]], dtype=mx.int32), cache=cache)[0, -1]
    greedy, glog = np.array(greedy, np.int32), np.stack(glog).astype(np.float32)
    # The cached decode (sliding layers through RotatingKVCache) must agree with one uncached
    # forward over prompt + greedy.
    seq = mx.array(np.concatenate([prompt, greedy[:-1]]).astype(np.int32))[None]
    ref = np.array(model(seq)[0, len(prompt) - 1:].astype(mx.float32))
    diff = float(np.abs(ref - glog).max())
    if diff > 1e-4 * float(np.abs(ref).max()):
        raise RuntimeError(f"{out}: cached decode and full forward disagree (max abs {diff:.3e})")
    return logits, greedy, glog


def checks(logits, greedy, glog):
    top2 = np.sort(glog, -1)[:, -2:]
    gap = (top2[:, 1] - top2[:, 0]) / np.abs(glog).max(-1)
    return {
        "first_step_vs_forward_max_abs": float(np.abs(logits[-1] - glog[0]).max()),
        "min_rel_top2_gap": float(gap.min()),
        "n_distinct_greedy": int(len(set(greedy.tolist()))),
        "max_abs_logit": float(np.abs(logits).max()),
    }


def make(name, src_name, bits, group, override):
    src = os.path.join(SRC_DIR, src_name)
    out = os.path.join(OUT_DIR, name)
    if os.path.exists(out):
        shutil.rmtree(out)
    quantize(src, out, bits, group, override)
    prompt = np.load(os.path.join(src, "golden", "prompt.npy"))
    logits, greedy, glog = run_oracle(out, prompt)
    g = os.path.join(out, "golden")
    os.makedirs(g)
    np.save(os.path.join(g, "prompt.npy"), prompt.astype(np.int32))
    np.save(os.path.join(g, "logits.npy"), logits.astype(np.float32))
    np.save(os.path.join(g, "greedy.npy"), greedy)
    np.save(os.path.join(g, "greedy_logits.npy"), glog)
    cfg = json.load(open(os.path.join(out, "config.json")))
    meta = {
        "fixture": name,
        "source": "tests/fixtures/models/" + src_name,
        "command": "tools/.venv-mlx/bin/python tools/make_quant_fixtures.py " + name,
        "converter": "mlx_lm.convert.convert(quantize=True, q_bits=%d, q_group_size=%d%s)"
                     % (bits, group, ", quant_predicate=override" if override else ""),
        "override": override,
        "quantization": cfg.get("quantization"),
        "oracle": "mlx-lm on the MLX CPU device, every floating parameter widened to float32",
        "versions": {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__,
                     "numpy": np.__version__},
        "n_greedy": N_GREEDY,
        "checks": checks(logits, greedy, glog),
    }
    if name in NOT_TERN_QUANTIZE:
        meta["tern_quantize"] = False
    with open(os.path.join(g, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(name, meta["checks"])


def make_cases():
    """mx.quantize / mx.dequantize on a small random matrix [4, 128] for every bits x group size,
    with edge cases (a constant group, an all-zero group, exact ties, one outlier):
    cases.safetensors holds `<dt>.w` inputs and `<dt>.b<bits>g<group>.{weight,scales,biases,deq}`."""
    rng = np.random.default_rng(77)
    w = rng.standard_normal((4, 128)).astype(np.float32) * 0.05
    w[0, :32] = 0.25                      # constant group
    w[1, 32:64] = 0.0                     # zero group
    w[2, :128] = np.round(w[2, :128] * 64) / 64  # values on a grid: exact ties under rint
    w[3, 7] = 3.0                         # one outlier
    out = {}
    for dt in (mx.bfloat16, mx.float16, mx.float32):
        name = str(dt).split(".")[-1]
        x = mx.array(w).astype(dt)
        out[name + ".w"] = x
        combos = [(b, g) for b in (2, 3, 4, 5, 6, 8) for g in (32, 64, 128)]
        if dt != mx.bfloat16:
            combos = [(4, 64), (3, 32), (8, 128)]
        for b, g in combos:
            q, sc, bi = mx.quantize(x, group_size=g, bits=b)
            k = "%s.b%dg%d." % (name, b, g)
            out[k + "weight"], out[k + "scales"], out[k + "biases"] = q, sc, bi
            out[k + "deq"] = mx.dequantize(q, sc, bi, group_size=g, bits=b).astype(mx.float32)
    mx.eval(out)
    mx.save_safetensors(os.path.join(OUT_DIR, "cases.safetensors"), out, metadata={"format": "mlx"})
    print("cases.safetensors", len(out), "tensors")


def main():
    want = set(sys.argv[1:])
    os.makedirs(OUT_DIR, exist_ok=True)
    if not want or "cases" in want:
        make_cases()
    for r in RECIPES:
        if not want or r[0] in want:
            make(*r)


if __name__ == "__main__":
    main()
