#!/usr/bin/env python3
"""make_model.py — writes a random-weight model with the exact published
shape of a real one, as an HF snapshot tern can open: config.json (the
published config.json values), generation_config.json, weights in BF16
sharded into ~5 GB safetensors files with model.safetensors.index.json (as
HF does), and optionally the real tokenizer files.

Used for speed benchmarks where downloading the real weights is not possible
(the GPU machine has no network): the numbers depend only on the shapes.

    python3 tools/make_model.py --preset llama-3.1-8b --out /tmp/llama8b \
        [--tokenizer-dir DIR] [--device cuda] [--seed 0]

Weights: every matrix is N(0, 0.02^2) (torch.randn on the device, then
BF16), norm weights are ones. Needs torch and safetensors; transformers is
used, when present, to check the preset: its config must parse as the
published model type, and the model transformers builds from it on the meta
device (no memory) must have exactly the tensor names and shapes written
here (`--check` does only that, for one preset or `all`). Experts: Qwen3-MoE's are
written one tensor per expert, as published, and fused for the comparison
(transformers 5 holds [N, 2I, E] / [N, E, I]); Gemma 4's are fused as saved.
"""
import argparse
import json
import os
import shutil
import sys
import time

PRESETS = {
    # meta-llama/Llama-3.1-8B config.json
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 14336,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": 128256,
    },
    # meta-llama/Llama-3.2-1B config.json
    "llama-3.2-1b": {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 8192,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_hidden_layers": 16,
        "num_key_value_heads": 8,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": 128256,
    },
    # Qwen/Qwen3-8B config.json
    "qwen3-8b": {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 12288,
        "max_position_embeddings": 40960,
        "max_window_layers": 36,
        "model_type": "qwen3",
        "num_attention_heads": 32,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    # Qwen/Qwen3-0.6B config.json
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "max_position_embeddings": 40960,
        "max_window_layers": 28,
        "model_type": "qwen3",
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
}

SHARD_BYTES = 5 * 10**9


GEMMA3_12B_TEXT = {
    # google/gemma-3-12b-it text_config (as Gemma3ForCausalLM; the same compute as the wrapper)
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "attention_bias": False,
    "bos_token_id": 2,
    "eos_token_id": [1, 106],
    "final_logit_softcapping": None,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3840,
    "intermediate_size": 15360,
    "max_position_embeddings": 131072,
    "num_attention_heads": 16,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "rope_theta": 1000000.0,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 262208,
}

GEMMA4_ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                       "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
}


def gemma4_layer_types(n, pattern):
    t = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
    t[-1] = "full_attention"
    return t


GEMMA4_E4B = {
    # Gemma 4 e4b's published shape (../shared/SEED-NOTES.md §1: 42 layers, hidden 2560,
    # sliding hd 256 / full hd 512, 5:1, window 512, per-layer inputs 256, KV sharing);
    # heads, kv heads, intermediate and the shared-layer count as in Gemma 3n e4b
    "architectures": ["Gemma4ForCausalLM"],
    "model_type": "gemma4_text",
    "attention_bias": False,
    "attention_k_eq_v": False,
    "bos_token_id": 2,
    "eos_token_id": [1, 106],
    "enable_moe_block": False,
    "final_logit_softcapping": 30.0,
    "global_head_dim": 512,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 2560,
    "hidden_size_per_layer_input": 256,
    "intermediate_size": 10240,
    "layer_types": gemma4_layer_types(42, 6),
    "max_position_embeddings": 131072,
    "num_attention_heads": 8,
    "num_hidden_layers": 42,
    "num_key_value_heads": 2,
    "num_kv_shared_layers": 18,
    "rms_norm_eps": 1e-06,
    "rope_parameters": GEMMA4_ROPE,
    "sliding_window": 512,
    "tie_word_embeddings": True,
    "use_double_wide_mlp": True,
    "vocab_size": 262144,
    "vocab_size_per_layer_input": 262144,
}

GEMMA4_12B = {
    # Gemma 4 12B (gemma4_unified's text model, ../shared/SEED-NOTES.md §1): 48 layers, hidden
    # 3840, 16 / 8 / 256 sliding, full hd 512 with one kv head and k_eq_v, 40:8, window 1024
    "architectures": ["Gemma4ForCausalLM"],
    "model_type": "gemma4_text",
    "attention_bias": False,
    "attention_k_eq_v": True,
    "bos_token_id": 2,
    "eos_token_id": [1, 106],
    "enable_moe_block": False,
    "final_logit_softcapping": 30.0,
    "global_head_dim": 512,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3840,
    "hidden_size_per_layer_input": 0,
    "intermediate_size": 15360,
    "layer_types": gemma4_layer_types(48, 6),
    "max_position_embeddings": 262144,
    "num_attention_heads": 16,
    "num_global_key_value_heads": 1,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "num_kv_shared_layers": 0,
    "rms_norm_eps": 1e-06,
    "rope_parameters": GEMMA4_ROPE,
    "sliding_window": 1024,
    "tie_word_embeddings": True,
    "use_double_wide_mlp": False,
    "vocab_size": 262144,
}

GEMMA4_26B_A4B = {
    # Gemma 4 26B-A4B (../shared/SEED-NOTES.md §1): 30 layers, hidden 2816, 16 / 8 / 256 sliding,
    # full hd 512 with 2 kv heads and k_eq_v, full layers 5, 11, 17, 23, 29, window 1024; every
    # layer a dense MLP of 2112 beside 128 experts of 704, 8 per token
    "architectures": ["Gemma4ForCausalLM"],
    "model_type": "gemma4_text",
    "attention_bias": False,
    "attention_k_eq_v": True,
    "bos_token_id": 2,
    "eos_token_id": [1, 106],
    "enable_moe_block": True,
    "final_logit_softcapping": 30.0,
    "global_head_dim": 512,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 2816,
    "hidden_size_per_layer_input": 0,
    "intermediate_size": 2112,
    "layer_types": gemma4_layer_types(30, 6),
    "max_position_embeddings": 262144,
    "moe_intermediate_size": 704,
    "num_attention_heads": 16,
    "num_experts": 128,
    "num_global_key_value_heads": 2,
    "num_hidden_layers": 30,
    "num_key_value_heads": 8,
    "num_kv_shared_layers": 0,
    "rms_norm_eps": 1e-06,
    "rope_parameters": GEMMA4_ROPE,
    "sliding_window": 1024,
    "tie_word_embeddings": True,
    "top_k_experts": 8,
    "use_double_wide_mlp": False,
    "vocab_size": 262144,
}

QWEN3_30B_A3B = {
    # Qwen/Qwen3-30B-A3B-Instruct-2507 config.json: 48 layers, hidden 2048, 32 / 4 / 128,
    # 128 experts of 768, 8 per token, renormalised; rope theta 1e7
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 262144,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000000,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

PHI_3_MINI = {
    # microsoft/Phi-3-mini-4k-instruct config.json: 3.8 B, MHA, q|k|v and gate|up stored fused
    "architectures": ["Phi3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "embd_pdrop": 0.0,
    "eos_token_id": 32000,
    "hidden_act": "silu",
    "hidden_size": 3072,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 4096,
    "model_type": "phi3",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096,
    "pad_token_id": 32000,
    "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "sliding_window": 2047,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 32064,
}

PRESETS.update({"gemma-3-12b": GEMMA3_12B_TEXT, "gemma-4-e4b": GEMMA4_E4B,
                "gemma-4-12b": GEMMA4_12B, "phi-3-mini": PHI_3_MINI,
                "gemma-4-26b-a4b": GEMMA4_26B_A4B, "qwen3-30b-a3b": QWEN3_30B_A3B})


def gemma_layer_shapes(c, i, p):
    """A Gemma 2/3/4 layer's tensors (Gemma 4's per-layer geometry and sharing)."""
    E, H = c["hidden_size"], c["num_attention_heads"]
    g4 = c["model_type"] == "gemma4_text"
    n = c["num_hidden_layers"]
    types = c.get("layer_types") or ["sliding_attention"] * n
    full = types[i] == "full_attention"
    hd, kv = c["head_dim"], c["num_key_value_heads"]
    if g4 and full:
        hd = c.get("global_head_dim", 512)
        if c.get("attention_k_eq_v"):
            kv = c.get("num_global_key_value_heads") or kv
    shared = g4 and i >= n - (c.get("num_kv_shared_layers") or 0)
    F = c["intermediate_size"] * (2 if shared and c.get("use_double_wide_mlp") else 1)
    out = [(p + "input_layernorm.weight", (E,)), (p + "self_attn.q_proj.weight", (H * hd, E))]
    if not shared:
        out.append((p + "self_attn.k_proj.weight", (kv * hd, E)))
        if not (g4 and full and c.get("attention_k_eq_v")):
            out.append((p + "self_attn.v_proj.weight", (kv * hd, E)))
    out += [(p + "self_attn.o_proj.weight", (E, H * hd)), (p + "self_attn.q_norm.weight", (hd,))]
    if not shared:
        out.append((p + "self_attn.k_norm.weight", (hd,)))
    out += [(p + "post_attention_layernorm.weight", (E,)),
            (p + "pre_feedforward_layernorm.weight", (E,)),
            (p + "post_feedforward_layernorm.weight", (E,)),
            (p + "mlp.gate_proj.weight", (F, E)), (p + "mlp.up_proj.weight", (F, E)),
            (p + "mlp.down_proj.weight", (E, F))]
    if g4 and c.get("enable_moe_block"):  # experts fused, as transformers saves Gemma 4's
        N, I = c["num_experts"], c["moe_intermediate_size"]
        out += [(p + "router.proj.weight", (N, E)), (p + "router.scale", (E,)),
                (p + "router.per_expert_scale", (N,)),
                (p + "experts.gate_up_proj", (N, 2 * I, E)), (p + "experts.down_proj", (N, E, I)),
                (p + "post_feedforward_layernorm_1.weight", (E,)),
                (p + "pre_feedforward_layernorm_2.weight", (E,)),
                (p + "post_feedforward_layernorm_2.weight", (E,))]
    if g4:
        out.append((p + "layer_scalar", (1,)))
        P = c.get("hidden_size_per_layer_input")
        if P:
            out += [(p + "per_layer_input_gate.weight", (P, E)),
                    (p + "per_layer_projection.weight", (E, P)),
                    (p + "post_per_layer_input_norm.weight", (E,))]
    return out


def moe_layer(c, i):
    """Qwen-MoE: layer i has experts (transformers' rule)."""
    return (c["model_type"] == "qwen3_moe" and i not in (c.get("mlp_only_layers") or [])
            and c["num_experts"] > 0 and (i + 1) % c.get("decoder_sparse_step", 1) == 0)


def tensor_shapes(c):
    """HF tensor names and shapes, in the order HF writes them."""
    E, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, KV = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or E // H
    qk_norm = c["model_type"] in ("qwen3", "qwen3_moe")
    gemma = c["model_type"] in ("gemma3_text", "gemma4_text")
    fused = c["model_type"] == "phi3"  # qkv_proj, gate_up_proj
    out = [("model.embed_tokens.weight", (V, E))]
    P = c.get("hidden_size_per_layer_input") if c["model_type"] == "gemma4_text" else None
    if P:
        L = c["num_hidden_layers"]
        out += [("model.embed_tokens_per_layer.weight", (c["vocab_size_per_layer_input"], L * P)),
                ("model.per_layer_model_projection.weight", (L * P, E)),
                ("model.per_layer_projection_norm.weight", (P,))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if gemma:
            out += gemma_layer_shapes(c, i, p)
            continue
        out.append((p + "input_layernorm.weight", (E,)))
        if fused:
            out.append((p + "self_attn.qkv_proj.weight", ((H + 2 * KV) * hd, E)))
        else:
            out += [(p + "self_attn.q_proj.weight", (H * hd, E)),
                    (p + "self_attn.k_proj.weight", (KV * hd, E)),
                    (p + "self_attn.v_proj.weight", (KV * hd, E))]
        out.append((p + "self_attn.o_proj.weight", (E, H * hd)))
        if qk_norm:
            out += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        out.append((p + "post_attention_layernorm.weight", (E,)))
        if moe_layer(c, i):  # one tensor per expert, as published Qwen3-MoE snapshots are
            N, I = c["num_experts"], c["moe_intermediate_size"]
            out.append((p + "mlp.gate.weight", (N, E)))
            for e in range(N):
                q = f"{p}mlp.experts.{e}."
                out += [(q + "gate_proj.weight", (I, E)), (q + "up_proj.weight", (I, E)),
                        (q + "down_proj.weight", (E, I))]
            continue
        if fused:
            out.append((p + "mlp.gate_up_proj.weight", (2 * F, E)))
        else:
            out += [(p + "mlp.gate_proj.weight", (F, E)), (p + "mlp.up_proj.weight", (F, E))]
        out.append((p + "mlp.down_proj.weight", (E, F)))
    out.append(("model.norm.weight", (E,)))
    if not c.get("tie_word_embeddings"):
        out.append(("lm_head.weight", (V, E)))
    return out


def plan_shards(shapes):
    """Greedy split into files of at most SHARD_BYTES (BF16: 2 bytes each)."""
    shards, cur, size = [], [], 0
    for name, shape in shapes:
        n = 2
        for d in shape:
            n *= d
        if cur and size + n > SHARD_BYTES:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, shape))
        size += n
    if cur:
        shards.append(cur)
    return shards


def fuse_experts(shapes):
    """name -> shape, with one-tensor-per-expert tensors (mlp.experts.{e}.gate_proj ...) as the
    fused [N, 2I, E] gate_up_proj and [N, E, I] down_proj transformers 5 holds."""
    have, experts = {}, {}
    for name, shape in shapes:
        parts = name.split(".")
        if "experts" in parts and parts[parts.index("experts") + 1].isdigit():
            k = parts.index("experts")
            experts.setdefault(".".join(parts[:k + 1]), {}).setdefault(parts[k + 2], []).append(shape)
        else:
            have[name] = tuple(shape)
    for key, by in experts.items():
        (i, e), n = by["gate_proj"][0], len(by["gate_proj"])
        have[key + ".gate_up_proj"] = (n, 2 * i, e)
        have[key + ".down_proj"] = (n,) + tuple(by["down_proj"][0])
    return have


def check_config(c):
    """The preset against transformers: its config parses as the model type, and the model
    transformers builds from it on the meta device has the tensors tensor_shapes() writes."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        return
    try:
        cfg = AutoConfig.for_model(**c)
    except (ValueError, KeyError) as e:  # a transformers without this model type
        print(f"make_model: transformers cannot check {c['model_type']}: {e}", file=sys.stderr)
        return
    cfg = cfg.get_text_config()
    assert cfg.hidden_size == c["hidden_size"], "transformers read a different hidden_size"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if c.get("tie_word_embeddings"):
        want.pop("lm_head.weight", None)
    have = fuse_experts(tensor_shapes(c))
    diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
    if diff:
        raise SystemExit(f"make_model: {c['model_type']} tensors differ from transformers' model: "
                         + ", ".join(f"{k} {have.get(k)} vs {want.get(k)}" for k in diff[:8]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS) + ["all"])
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true",
                    help="only check the preset(s) against transformers; write nothing")
    ap.add_argument("--tokenizer-dir", help="copy tokenizer.json / tokenizer_config.json from here")
    ap.add_argument("--device", default=None, help="torch device for randn (default: cuda if present)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    a = ap.parse_args()

    import torch
    from safetensors.torch import save_file

    if a.check:
        for name in sorted(PRESETS) if a.preset == "all" else [a.preset]:
            check_config(PRESETS[name])
            print(f"{name}: config and {len(tensor_shapes(PRESETS[name]))} tensors match transformers")
        return
    if not a.out or a.preset == "all":
        ap.error("--out and one --preset are needed to write a model")
    c = PRESETS[a.preset]
    check_config(c)
    dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": c["bos_token_id"], "eos_token_id": c["eos_token_id"],
                   "do_sample": False}, f, indent=2)
    if a.tokenizer_dir:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            src = os.path.join(a.tokenizer_dir, name)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(a.out, name))

    g = torch.Generator(device=dev).manual_seed(a.seed)
    shards = plan_shards(tensor_shapes(c))
    n = len(shards)
    weight_map, total = {}, 0
    t0 = time.time()
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors" if n > 1 else "model.safetensors"
        tensors = {}
        for name, shape in shard:
            if len(shape) == 1:
                t = torch.ones(shape, dtype=torch.bfloat16, device=dev)
            else:
                t = (torch.randn(shape, generator=g, device=dev, dtype=torch.float32) * a.std)
                t = t.to(torch.bfloat16)
            tensors[name] = t.cpu()
            total += tensors[name].numel() * 2
            weight_map[name] = fname
        save_file(tensors, os.path.join(a.out, fname), metadata={"format": "pt"})
        del tensors
    if n > 1:
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    print(f"make_model: {a.preset}: {total / 1e9:.2f} GB in {n} file(s) at {a.out} "
          f"({time.time() - t0:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
