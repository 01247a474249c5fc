"""
oracle_mlx.py — mlx-lm (MLX on the CPU) as the float32 oracle for a model fixture whose
architecture transformers lacks (MiniCPM). tools/make_fixtures.py runs it in the MLX venv:

  $TERN_MLX_PYTHON tools/oracle_mlx.py MODEL_DIR PROMPT.npy OUT_DIR N_GREEDY

It loads the snapshot with mlx_lm.utils.load_model, widens every floating parameter to
float32 (exact from bf16/f16), and writes to OUT_DIR:

  logits.npy         f32   [n_prompt, vocab]  full-sequence forward, every position
  greedy.npy         int32 [N_GREEDY]         greedy tokens through mlx-lm's KV cache
  greedy_logits.npy  f32   [N_GREEDY, vocab]  row i = the logits that chose greedy[i]
  stats.json         the cached decode against one uncached forward over prompt + greedy,
                     whether a bfloat16 run (teacher-forced) picks the same tokens, versions
"""

import json
import os
import pathlib
import sys

import mlx.core as mx
import mlx_lm
import numpy as np
from mlx.utils import tree_map
from mlx_lm.models.cache import make_prompt_cache


def cast(model, dtype):
    def f(v):
        return v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) else v
    model.update(tree_map(f, model.parameters()))


def main(model_dir, prompt_path, out_dir, n_greedy):
    mx.set_default_device(mx.cpu)
    model, _ = mlx_lm.utils.load_model(pathlib.Path(model_dir))
    cast(model, mx.float32)
    prompt = np.load(prompt_path).astype(np.int32)
    ids = mx.array(prompt)[None]
    logits = np.array(model(ids)[0].astype(mx.float32))
    cache = make_prompt_cache(model)
    step = model(ids, cache=cache)[0, -1]
    greedy, glog = [], []
    for _ in range(n_greedy):
        row = np.array(step.astype(mx.float32))
        tok = int(row.argmax())
        greedy.append(tok)
        glog.append(row)
        step = model(mx.array([[tok]], dtype=mx.int32), cache=cache)[0, -1]
    greedy, glog = np.array(greedy, np.int32), np.stack(glog).astype(np.float32)
    seq = mx.array(np.concatenate([prompt, greedy[:-1]]).astype(np.int32))[None]
    ref = np.array(model(seq)[0, len(prompt) - 1:].astype(mx.float32))
    cast(model, mx.bfloat16)
    lb = np.array(model(seq)[0, len(prompt) - 1:].astype(mx.float32))
    stats = {
        "decode_vs_full_max_abs": float(np.abs(ref - glog).max()),
        "decode_vs_full_max_ref": float(np.abs(ref).max()),
        "bf16_same_greedy": bool(np.array_equal(lb.argmax(-1), greedy)),
        "bf16_max_rel_err": float(np.abs(lb - glog).max() / np.abs(glog).max()),
        "versions": {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__, "numpy": np.__version__},
    }
    os.makedirs(out_dir, exist_ok=True)
    np.save(os.path.join(out_dir, "logits.npy"), logits.astype(np.float32))
    np.save(os.path.join(out_dir, "greedy.npy"), greedy)
    np.save(os.path.join(out_dir, "greedy_logits.npy"), glog)
    with open(os.path.join(out_dir, "stats.json"), "w") as f:
        json.dump(stats, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
