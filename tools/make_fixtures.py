"""
make_fixtures.py — builds the tiny random-weight model fixtures under
tests/fixtures/models/<name>/ and their golden outputs, with Hugging Face
transformers (PyTorch, float32) as the oracle.

Run:  tools/setup-oracle.sh && tools/.venv/bin/python tools/make_fixtures.py
      (optional arguments: fixture names to rebuild only those)

Depends on torch, transformers, tokenizers, safetensors, numpy (see
tools/requirements-oracle.txt) and on oracle_tokenizer.py beside this file.

Each fixture is a real HF snapshot (config.json, model.safetensors,
generation_config.json; tiny-llama also tokenizer.json + tokenizer_config.json)
whose weights are stored in bf16, f16 or f32. The golden outputs are computed by
loading that snapshot back with dtype=float32, so the oracle sees exactly the
stored values:

  golden/prompt.npy         int32  [n_prompt]          the prompt ids
  golden/logits.npy         f32    [n_prompt, vocab]   full-sequence forward, every position
  golden/greedy.npy         int32  [32]                greedy tokens after the prompt (EOS ignored)
  golden/greedy_logits.npy  f32    [32, vocab]         row i = the logits that chose greedy[i]
  golden/meta.json          versions, command, seed, checks

Everything is seeded; rerunning with the same package versions gives the same
bytes. A seed is rejected (and the next one tried) when the greedy sequence is
trivial, when some greedy step's top-2 logit gap is razor-thin, or when a
bfloat16-compute run of the same model would pick a different token.
"""

import copy
import json
import os
import re
import shutil
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file
import subprocess
import tempfile

from transformers import (AutoModelForCausalLM, Cohere2Config, Cohere2ForCausalLM, CohereConfig,
                          CohereForCausalLM, Ernie4_5Config, Ernie4_5ForCausalLM, Gemma2Config,
                          Gemma2ForCausalLM, Gemma3Config, Gemma3ForCausalLM,
                          Gemma3ForConditionalGeneration, Gemma3TextConfig, Gemma4Config,
                          Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4TextConfig,
                          Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration, GemmaConfig,
                          GemmaForCausalLM, GenerationConfig, Glm4Config, Glm4ForCausalLM,
                          GraniteConfig, GraniteForCausalLM, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Olmo2Config, Olmo2ForCausalLM, Olmo3Config, Olmo3ForCausalLM, Phi3Config,
                          Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM, SeedOssConfig, SeedOssForCausalLM, SmolLM3Config,
                          SmolLM3ForCausalLM, Starcoder2Config, Starcoder2ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "models")
N_GREEDY = 32
MAX_TRIES = 64
MIN_REL_GAP = 3e-3      # top-2 gap / max |logit| at every greedy step must be at least this
MIN_DISTINCT = 8        # distinct tokens among the 32 greedy ones
MAX_REPEAT = 6          # longest run of one token in them

# The fixtures. `config` holds HF config.json fields (rope given as in published
# snapshots: rope_theta + rope_scaling). `style` says how config.json is written:
# "legacy" = the layout of published snapshots (torch_dtype, rope_theta and
# rope_scaling at top level), "v5" = transformers 5's own save_pretrained output
# (dtype, rope_parameters) so loaders see both.
FIXTURES = [
    {
        "name": "tiny-llama", "arch": (LlamaConfig, LlamaForCausalLM), "dtype": torch.bfloat16,
        "seed": 1000, "style": "legacy", "tokenizer": True,
        "config": dict(vocab_size=oracle_tokenizer.VOCAB_SIZE, hidden_size=64, intermediate_size=176,
                       num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
                       tie_word_embeddings=False),
    },
    {
        "name": "tiny-llama3-rope", "arch": (LlamaConfig, LlamaForCausalLM), "dtype": torch.float16,
        "seed": 2000, "style": "legacy", "prompt_len": 14,
        "config": dict(vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                       max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=500000.0,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
    },
    {
        "name": "tiny-llama-linear", "arch": (LlamaConfig, LlamaForCausalLM), "dtype": torch.float32,
        "seed": 3000, "style": "legacy", "prompt_len": 12,
        "config": dict(vocab_size=256, hidden_size=48, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=128,
                       rms_norm_eps=1e-6, rope_theta=10000.0,
                       rope_scaling={"rope_type": "linear", "factor": 2.0},
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    },
    {
        "name": "tiny-llama-yarn", "arch": (LlamaConfig, LlamaForCausalLM), "dtype": torch.bfloat16,
        "seed": 4000, "style": "legacy", "prompt_len": 18,
        "config": dict(vocab_size=320, hidden_size=64, intermediate_size=192, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                       rms_norm_eps=1e-6, rope_theta=10000.0,
                       rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 32},
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    },
    {
        "name": "tiny-mistral", "arch": (MistralConfig, MistralForCausalLM), "dtype": torch.bfloat16,
        "seed": 5000, "style": "legacy", "prompt_len": 16,
        "config": dict(vocab_size=288, hidden_size=64, intermediate_size=224, num_hidden_layers=2,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
                       rms_norm_eps=1e-5, rope_theta=1000000.0, sliding_window=4096,
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    },
    {
        "name": "tiny-qwen2", "arch": (Qwen2Config, Qwen2ForCausalLM), "dtype": torch.bfloat16,
        "seed": 6000, "style": "legacy", "prompt_len": 15,
        "config": dict(vocab_size=352, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False,
                       sliding_window=None, max_window_layers=3, tie_word_embeddings=True,
                       bos_token_id=1, eos_token_id=2),
        # As in published Qwen2.5 snapshots: a window size that use_sliding_window=false turns off
        # (it is shorter than prompt + greedy here, so a loader that applies it fails the test),
        # and no layer_types list.
        "config_json": {"sliding_window": 32, "layer_types": None},
    },
    {
        "name": "tiny-qwen3", "arch": (Qwen3Config, Qwen3ForCausalLM), "dtype": torch.bfloat16,
        "seed": 7000, "style": "v5", "prompt_len": 20,
        "config": dict(vocab_size=384, hidden_size=64, intermediate_size=192, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       attention_bias=False, use_sliding_window=False, sliding_window=None,
                       max_window_layers=3, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
    },
]

# The Gemma family. Keys beyond the llama-family ones above:
#   "norm":        "1+w" (Gemma 1-3 RMSNorm multiplies by 1 + weight: weights drawn around 0) or
#                  "w" (Gemma 4: weights drawn around 1)
#   "layer_scalar": draw each decoder layer's `layer_scalar` buffer (Gemma 4) instead of leaving 1
#   "text_json":   overrides applied to the text part of config.json (text_config in a wrapper)
#   "text_from":   a multimodal wrapper whose text tower is that fixture's weights, re-saved under
#                  the wrapper's names; its prompt and goldens must reproduce that fixture's
# Style "gemma3-legacy" writes the Gemma 3 layout of published snapshots: rope_theta (global
# layers), rope_local_base_freq (sliding layers), rope_scaling (global layers only),
# sliding_window_pattern instead of layer_types, torch_dtype.
S, F = "sliding_attention", "full_attention"
GEMMA3_TEXT = dict(vocab_size=192, hidden_size=96, intermediate_size=32, num_hidden_layers=4,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=48,
                   sliding_window=12, sliding_window_pattern=3, rope_theta=1000000.0,
                   rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 8.0},
                   max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=True,
                   bos_token_id=2, eos_token_id=1, pad_token_id=0)
GEMMA4_TEXT = dict(vocab_size=192, hidden_size=64, intermediate_size=32, num_hidden_layers=6,
                   num_attention_heads=2, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                   num_global_key_value_heads=1, attention_k_eq_v=True, layer_types=[S, S, F, S, S, F],
                   sliding_window=8,
                   rope_parameters={S: {"rope_type": "default", "rope_theta": 10000.0},
                                    F: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                        "rope_theta": 1000000.0}},
                   num_kv_shared_layers=2, use_double_wide_mlp=True, hidden_size_per_layer_input=16,
                   vocab_size_per_layer_input=192, final_logit_softcapping=30.0,
                   max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=True,
                   bos_token_id=2, eos_token_id=1, pad_token_id=0)
# As published Gemma 4 snapshots write it: the global layers' shapes as global_head_dim and
# num_global_key_value_heads, not transformers 5.24's per_layer_config.
GEMMA4_PUBLISHED = {"global_head_dim": 32, "num_global_key_value_heads": 1, "per_layer_config": None}
GEMMA4_PLC_TEXT = dict(vocab_size=256, hidden_size=48, intermediate_size=64, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=12, layer_types=[S, F, S, F],
                       per_layer_config={1: {"head_dim": 24, "num_key_value_heads": 1},
                                         3: {"head_dim": 24, "num_key_value_heads": 1}},
                       attention_k_eq_v=False, sliding_window=8,
                       rope_parameters={S: {"rope_type": "default", "rope_theta": 10000.0},
                                        F: {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                            "rope_theta": 1000000.0}},
                       final_logit_softcapping=30.0, max_position_embeddings=1024, rms_norm_eps=1e-6,
                       tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0)

GEMMA_FIXTURES = [
    {
        "name": "tiny-gemma", "arch": (GemmaConfig, GemmaForCausalLM), "dtype": torch.bfloat16,
        "seed": 8000, "style": "legacy", "prompt_len": 24, "norm": "1+w", "embed_std": 0.05,
        "config": dict(vocab_size=256, hidden_size=40, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=24,
                       max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
                       tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0),
        # Published Gemma 1 snapshots say "gelu"; transformers reads it as the tanh approximation.
        "config_json": {"hidden_act": "gelu"},
    },
    {
        "name": "tiny-gemma2", "arch": (Gemma2Config, Gemma2ForCausalLM), "dtype": torch.bfloat16,
        "seed": 9000, "style": "legacy", "prompt_len": 40, "norm": "1+w", "embed_std": 0.05,
        "config": dict(vocab_size=256, hidden_size=48, intermediate_size=64, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       query_pre_attn_scalar=24, sliding_window=8, attn_logit_softcapping=3.0,
                       final_logit_softcapping=2.0, max_position_embeddings=256, rms_norm_eps=1e-6,
                       rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=2, eos_token_id=1,
                       pad_token_id=0),
        # Published Gemma 2 snapshots have no layer_types (sliding = even layers) and name the
        # activation twice; transformers reads hidden_activation.
        "config_json": {"layer_types": None, "hidden_act": "gelu_pytorch_tanh"},
    },
    {
        "name": "tiny-gemma3", "arch": (Gemma3TextConfig, Gemma3ForCausalLM), "dtype": torch.bfloat16,
        "seed": 10000, "style": "gemma3-legacy", "prompt_len": 24, "norm": "1+w", "embed_std": 0.025,
        "config": GEMMA3_TEXT,
    },
    {
        "name": "tiny-gemma3-mm", "arch": (Gemma3Config, Gemma3ForConditionalGeneration),
        "dtype": torch.bfloat16, "seed": 10500, "style": "gemma3-legacy", "norm": "1+w",
        "text_from": "tiny-gemma3",
        # Published Gemma 3 wrappers leave out of text_config the keys that have their default.
        "text_json": {k: None for k in (
            "rope_theta", "rope_local_base_freq", "rms_norm_eps", "hidden_activation", "attention_bias",
            "attention_dropout", "attn_logit_softcapping", "final_logit_softcapping", "bos_token_id",
            "eos_token_id", "pad_token_id", "tie_word_embeddings", "use_bidirectional_attention",
            "use_cache", "initializer_range")},
        "config": dict(text_config=GEMMA3_TEXT, mm_tokens_per_image=4, boi_token_index=192,
                       eoi_token_index=193, image_token_index=194, tie_word_embeddings=True,
                       vision_config=dict(model_type="siglip_vision_model", hidden_size=32,
                                          intermediate_size=64, num_hidden_layers=1,
                                          num_attention_heads=2, image_size=4, patch_size=2,
                                          vision_use_head=False)),
    },
    {
        "name": "tiny-gemma4", "arch": (Gemma4TextConfig, Gemma4ForCausalLM), "dtype": torch.bfloat16,
        "seed": 11000, "style": "v5", "prompt_len": 24, "norm": "w", "layer_scalar": True, "embed_std": 0.05,
        "qk_norm": 0.5,
        "config": GEMMA4_TEXT, "text_json": GEMMA4_PUBLISHED,
    },
    {
        "name": "tiny-gemma4-mm", "arch": (Gemma4Config, Gemma4ForConditionalGeneration),
        "dtype": torch.bfloat16, "seed": 11500, "style": "v5", "norm": "w", "layer_scalar": True,
        "text_from": "tiny-gemma4", "text_json": GEMMA4_PUBLISHED,
        "config": dict(text_config=GEMMA4_TEXT, audio_config=None, boi_token_id=192, eoi_token_id=193,
                       image_token_id=194, video_token_id=195, boa_token_id=196, eoa_token_index=197,
                       audio_token_id=198, tie_word_embeddings=True,
                       vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, num_key_value_heads=2, head_dim=8,
                                          patch_size=4, pooling_kernel_size=2,
                                          position_embedding_size=64)),
    },
    {
        "name": "tiny-gemma4-plc", "arch": (Gemma4TextConfig, Gemma4ForCausalLM), "dtype": torch.bfloat16,
        "seed": 12000, "style": "v5", "prompt_len": 40, "norm": "w", "layer_scalar": True, "embed_std": 0.05,
        "qk_norm": 0.5,
        "config": dict(GEMMA4_PLC_TEXT, hidden_size_per_layer_input=0, vocab_size_per_layer_input=256),
    },
    {
        "name": "tiny-gemma4-unified", "arch": (Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration),
        "dtype": torch.bfloat16, "seed": 12500, "style": "v5", "norm": "w", "layer_scalar": True,
        "text_from": "tiny-gemma4-plc",
        "config": dict(text_config=dict(GEMMA4_PLC_TEXT, use_bidirectional_attention="vision"),
                       vision_config=None, audio_config=None, boi_token_id=256, eoi_token_id=257,
                       image_token_id=258, video_token_id=259, boa_token_id=260, eoa_token_index=261,
                       audio_token_id=262, tie_word_embeddings=True),
    },
]

FIXTURES += GEMMA_FIXTURES

# The rest of the generic tier. Shared sizes: 2-4 layers, hidden 64, 4 heads / 2 kv heads, vocab
# 192-256, prompts of 16-24 tokens; ids 0 pad, 1 bos, 2 eos. "oracle": "mlx" runs mlx-lm on the
# CPU instead of transformers (tools/oracle_mlx.py, in the venv $TERN_MLX_PYTHON names; default
# tools/.venv-mlx/bin/python): MiniCPM has no transformers class, so its weights are made with
# LlamaForCausalLM (the same tensor names) and its config.json rewritten as MiniCPM's.
IDS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
SMALL = dict(vocab_size=256, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, **IDS)
PHI3_SHORT = [1.0, 1.25, 1.5, 2.0, 2.5, 3.0]
PHI3_LONG = [1.5, 2.0, 3.0, 5.0, 8.0, 12.0]
PHI3_SU_SHORT = [1.0, 1.05, 1.1, 1.2, 1.4, 1.6, 2.0, 2.5]
PHI3_SU_LONG = [2.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0]
GENERIC_FIXTURES = [
    {
        # longrope with the long factors: the prompt alone (20) is past original_max (16), and so
        # is the test engine's context (256)
        "name": "tiny-phi3", "arch": (Phi3Config, Phi3ForCausalLM), "dtype": torch.bfloat16,
        "seed": 13000, "style": "legacy", "prompt_len": 20,
        "config": dict(SMALL, intermediate_size=96, num_hidden_layers=2, rms_norm_eps=1e-5,
                       original_max_position_embeddings=16, partial_rotary_factor=0.75,
                       rope_theta=10000.0, tie_word_embeddings=False,
                       rope_scaling={"type": "longrope", "short_factor": PHI3_SHORT,
                                     "long_factor": PHI3_LONG}),
        # as Phi-3.5 / Phi-4-mini snapshots write it
        "config_json": {"rope_scaling": {"type": "longrope", "short_factor": PHI3_SHORT,
                                         "long_factor": PHI3_LONG}},
    },
    {
        # longrope with the short factors (a context of at most original_max, 256: the test
        # engine's) and a sliding window on every layer
        "name": "tiny-phi3-short", "arch": (Phi3Config, Phi3ForCausalLM), "dtype": torch.bfloat16,
        "seed": 13500, "style": "legacy", "prompt_len": 16,
        "config": dict(SMALL, vocab_size=192, intermediate_size=64, num_hidden_layers=2,
                       max_position_embeddings=1024, original_max_position_embeddings=256,
                       rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=10,
                       tie_word_embeddings=True,
                       rope_scaling={"type": "longrope", "short_factor": PHI3_SU_SHORT,
                                     "long_factor": PHI3_SU_LONG}),
        "config_json": {"rope_scaling": {"type": "longrope", "short_factor": PHI3_SU_SHORT,
                                         "long_factor": PHI3_SU_LONG}},
    },
    {
        "name": "tiny-olmo2", "arch": (Olmo2Config, Olmo2ForCausalLM), "dtype": torch.bfloat16,
        "seed": 14000, "style": "legacy", "prompt_len": 18,
        "config": dict(SMALL, intermediate_size=128, num_hidden_layers=2, rms_norm_eps=1e-6,
                       rope_theta=10000.0, tie_word_embeddings=False),
    },
    {
        "name": "tiny-olmo3", "arch": (Olmo3Config, Olmo3ForCausalLM), "dtype": torch.bfloat16,
        "seed": 15000, "style": "v5", "prompt_len": 24,
        "config": dict(SMALL, intermediate_size=96, num_hidden_layers=4, rms_norm_eps=1e-6,
                       sliding_window=8, layer_types=[S, S, S, F], tie_word_embeddings=False,
                       rope_parameters={F: {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
                                        S: {"rope_type": "default", "rope_theta": 500000.0}}),
    },
    {
        # partial_rotary_factor absent: GLM 4's default 0.5 (12 of head_dim 24, interleaved pairs)
        "name": "tiny-glm4", "arch": (Glm4Config, Glm4ForCausalLM), "dtype": torch.bfloat16,
        "seed": 16000, "style": "legacy", "prompt_len": 18,
        "config": dict(SMALL, intermediate_size=96, num_hidden_layers=2, head_dim=24,
                       rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False),
        "config_json": {"partial_rotary_factor": None},
    },
    {
        "name": "tiny-granite", "arch": (GraniteConfig, GraniteForCausalLM), "dtype": torch.bfloat16,
        "seed": 17000, "style": "legacy", "prompt_len": 18, "embed_std": 0.1,
        "config": dict(SMALL, intermediate_size=128, num_hidden_layers=2, rms_norm_eps=1e-6,
                       rope_theta=10000.0, tie_word_embeddings=False, embedding_multiplier=4.0,
                       residual_multiplier=0.5, attention_multiplier=0.125, logits_scaling=2.0),
    },
    {
        "name": "tiny-starcoder2", "arch": (Starcoder2Config, Starcoder2ForCausalLM),
        "dtype": torch.bfloat16, "seed": 18000, "style": "legacy", "prompt_len": 20,
        "config": dict(SMALL, intermediate_size=128, num_hidden_layers=2, norm_epsilon=1e-5,
                       rope_theta=10000.0, sliding_window=8, use_bias=True,
                       hidden_act="gelu_pytorch_tanh", tie_word_embeddings=True),
    },
    {
        # layer 3 (no_rope_layer_interval 4) has no rope
        "name": "tiny-smollm3", "arch": (SmolLM3Config, SmolLM3ForCausalLM), "dtype": torch.bfloat16,
        "seed": 19000, "style": "legacy", "prompt_len": 18,
        "config": dict(SMALL, vocab_size=192, intermediate_size=96, num_hidden_layers=4,
                       rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True),
    },
    {
        "name": "tiny-cohere", "arch": (CohereConfig, CohereForCausalLM), "dtype": torch.bfloat16,
        "seed": 20000, "style": "legacy", "prompt_len": 18,
        "config": dict(SMALL, intermediate_size=96, num_hidden_layers=2, layer_norm_eps=1e-5,
                       rope_theta=10000.0, logit_scale=0.25, tie_word_embeddings=True),
    },
    {
        # published Command R7B layout: no layer_types, sliding_window_pattern 4 (layer 3 full,
        # without rope)
        "name": "tiny-cohere2", "arch": (Cohere2Config, Cohere2ForCausalLM), "dtype": torch.bfloat16,
        "seed": 21000, "style": "legacy", "prompt_len": 24,
        "config": dict(SMALL, vocab_size=192, intermediate_size=96, num_hidden_layers=4,
                       layer_norm_eps=1e-5, rope_theta=50000.0, logit_scale=0.5, sliding_window=8,
                       tie_word_embeddings=True),
        "config_json": {"layer_types": None, "sliding_window_pattern": 4},
    },
    {
        "name": "tiny-seed-oss", "arch": (SeedOssConfig, SeedOssForCausalLM), "dtype": torch.bfloat16,
        "seed": 22000, "style": "legacy", "prompt_len": 16,
        "config": dict(SMALL, intermediate_size=96, num_hidden_layers=2, head_dim=24,
                       rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=True,
                       attention_out_bias=True, mlp_bias=False, tie_word_embeddings=False),
    },
    {
        "name": "tiny-ernie4_5", "arch": (Ernie4_5Config, Ernie4_5ForCausalLM), "dtype": torch.bfloat16,
        "seed": 23000, "style": "legacy", "prompt_len": 16,
        "config": dict(SMALL, intermediate_size=96, num_hidden_layers=2, head_dim=16,
                       rms_norm_eps=1e-5, rope_theta=10000.0, use_bias=True, tie_word_embeddings=True),
    },
    {
        # mlx-lm's minicpm: embeddings times scale_emb, each block's output times
        # scale_depth / sqrt(layers), logits divided by hidden / dim_model_base (untied: mlx-lm
        # leaves the division out when the head is tied)
        "name": "tiny-minicpm", "arch": (LlamaConfig, LlamaForCausalLM), "dtype": torch.bfloat16,
        "seed": 24000, "style": "legacy", "prompt_len": 16, "oracle": "mlx", "embed_std": 0.05,
        "config": dict(SMALL, intermediate_size=96, num_hidden_layers=2, rms_norm_eps=1e-5,
                       rope_theta=10000.0, tie_word_embeddings=False),
        "config_json": {"architectures": ["MiniCPMForCausalLM"], "model_type": "minicpm",
                        "scale_emb": 12.0, "scale_depth": 1.4, "dim_model_base": 16},
    },
]

FIXTURES += GENERIC_FIXTURES

# Mixtures of experts. transformers 5 saves the Qwen and Mixtral experts one tensor per expert
# (mlp.experts.{e}.gate_proj ..., block_sparse_moe.experts.{e}.w1 ...) and Gemma 4's fused
# (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]), so both layouts are covered;
# make_quant_fixtures.py makes the MLX one (switch_mlp). Each seed must also route robustly:
# at every MoE layer and token of prompt + greedy, the k-th and (k+1)-th router probabilities
# differ by at least MIN_ROUTER_GAP (checks.min_router_gap), so float32 rounding cannot pick
# other experts than the oracle's, and a bf16 run's logits must stay within MAX_MOE_BF16_ERR.
MOE_FIXTURES = [
    {
        "name": "tiny-qwen3-moe", "arch": (Qwen3MoeConfig, Qwen3MoeForCausalLM), "dtype": torch.bfloat16,
        "seed": 13000, "style": "legacy", "prompt_len": 20,
        "config": dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                       norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                       max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       attention_bias=False, use_sliding_window=False, sliding_window=None,
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
        # Published Qwen3-MoE snapshots name the expert count num_experts (transformers 5 writes
        # num_local_experts, and reads either).
        "config_json": {"num_experts": 8, "num_local_experts": None},
    },
    {
        "name": "tiny-mixtral", "arch": (MixtralConfig, MixtralForCausalLM), "dtype": torch.bfloat16,
        "seed": 14000, "style": "legacy", "prompt_len": 16,
        "config": dict(vocab_size=256, hidden_size=48, intermediate_size=32, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
                       num_experts_per_tok=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                       rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=False,
                       bos_token_id=1, eos_token_id=2),
    },
    {
        "name": "tiny-qwen2-moe", "arch": (Qwen2MoeConfig, Qwen2MoeForCausalLM), "dtype": torch.bfloat16,
        "seed": 15000, "style": "legacy", "prompt_len": 18,
        "config": dict(vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, num_experts=8,
                       num_experts_per_tok=4, moe_intermediate_size=24,
                       shared_expert_intermediate_size=64, norm_topk_prob=False,
                       decoder_sparse_step=2, mlp_only_layers=[], qkv_bias=True,
                       max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       use_sliding_window=False, sliding_window=None, max_window_layers=3,
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
        # As in published Qwen1.5-MoE snapshots: no layer_types.
        "config_json": {"layer_types": None},
    },
    {
        "name": "tiny-gemma4-moe", "arch": (Gemma4TextConfig, Gemma4ForCausalLM), "dtype": torch.bfloat16,
        "seed": 16000, "style": "v5", "prompt_len": 24, "norm": "w", "layer_scalar": True,
        "embed_std": 0.05, "qk_norm": 0.5,
        # The 26B-A4B's shape in small: k_eq_v full layers with one kv head, no per-layer
        # inputs or shared K/V, a dense MLP beside 8 experts of which 4 are used.
        "config": dict(vocab_size=192, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                       num_attention_heads=2, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                       num_global_key_value_heads=1, attention_k_eq_v=True, layer_types=[S, S, S, F],
                       sliding_window=8,
                       rope_parameters={S: {"rope_type": "default", "rope_theta": 10000.0},
                                        F: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1000000.0}},
                       enable_moe_block=True, num_experts=8, top_k_experts=4, moe_intermediate_size=16,
                       hidden_size_per_layer_input=0, vocab_size_per_layer_input=192,
                       final_logit_softcapping=30.0, max_position_embeddings=1024, rms_norm_eps=1e-6,
                       tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0),
        "text_json": GEMMA4_PUBLISHED,
    },
]

FIXTURES += MOE_FIXTURES
MIN_ROUTER_GAP = 1e-4
# A token that bf16 compute routes to other experts moves the logits by far more than bf16's
# usual 1e-2; the CUDA golden test's tolerance is this fixture's bf16 error, so keep it small.
MAX_MOE_BF16_ERR = 0.05

TOKENIZER_PROMPT = "Once upon a time, the quick brown fox"


def init_weights(model, gen, norm="w", layer_scalar=False, embed_std=None, qk_norm=None):
    """Random init, larger than HF's 0.02 so logits spread and greedy decoding is not trivial.

    Linear weights ~ N(0, 1/fan_in) (unit gain; o_proj and down_proj gain 2), embeddings
    ~ N(0, 0.5^2), or N(0, 0.2^2) when tied (otherwise the residual stream stays close to the
    input token's own embedding and a tied head just repeats it), biases ~ N(0, 0.2^2),
    RMSNorm weights ~ 1 + N(0, 0.15^2), or N(0, 0.15^2) where the norm multiplies by 1 + weight
    (norm="1+w"), other vectors ~ 1 + N(0, 0.15^2). With layer_scalar, each `layer_scalar`
    buffer ~ exp(N(0, 0.3^2)). `embed_std` overrides the embeddings' std (Gemma scales the
    embedding by sqrt(hidden), so a tied 0.2 would outweigh the layers and greedy would repeat);
    `qk_norm` the centre of q_norm / k_norm weights (Gemma 4 has no attention scale: q·k of two
    unit-rms heads would make every softmax one-hot).
    """
    if embed_std is None:
        embed_std = 0.2 if model.config.tie_word_embeddings else 0.5
    norm_center = 0.0 if norm == "1+w" else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if qk_norm is not None and name.endswith(("q_norm.weight", "k_norm.weight")):
                p.copy_(qk_norm + 0.15 * noise)
            elif name.endswith("norm.weight"):
                p.copy_(norm_center + 0.15 * noise)
            elif p.dim() == 3:  # fused experts [E, out, in]
                gain = 2.0 if name.endswith("down_proj") else 1.0
                p.copy_(gain * noise / np.sqrt(p.shape[2]))
            elif name.endswith("router.proj.weight"):  # Gemma 4 scales its router input by hidden^-1/2
                p.copy_(noise)
            elif name.endswith(".bias"):
                p.copy_(0.2 * noise)
            elif "embed_tokens" in name:
                p.copy_(embed_std * noise)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.15 * noise)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                p.copy_(2.0 * noise / np.sqrt(p.shape[1]))
            else:
                p.copy_(noise / np.sqrt(p.shape[1]))
        if layer_scalar:
            for name, b in model.named_buffers():
                if name.endswith("layer_scalar"):
                    b.copy_(torch.exp(0.3 * torch.randn(b.shape, generator=gen, dtype=torch.float32)))


def build_config(spec, tokenizer_ids):
    cfg = dict(spec["config"])
    if tokenizer_ids is not None:
        bos, eos, pad = tokenizer_ids
        cfg.update(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    config_cls = spec["arch"][0]
    return config_cls(**cfg)


def rewrite_config_json(path, style, overrides, text_overrides=None):
    """Rewrites transformers 5's config.json into the layout published snapshots use ("legacy",
    "gemma3-legacy"), then applies the fixture's overrides (None deletes a key): `overrides` at
    the top level, `text_overrides` in text_config (or at the top level without one)."""
    with open(path) as f:
        cfg = json.load(f)
    text = cfg.get("text_config", cfg)
    if style == "legacy":
        rope = cfg.pop("rope_parameters", None) or {}
        cfg["rope_theta"] = rope.pop("rope_theta")
        cfg["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
        if "dtype" in cfg:
            cfg["torch_dtype"] = cfg.pop("dtype")
    elif style == "gemma3-legacy":
        rope = text.pop("rope_parameters")
        full, local = dict(rope["full_attention"]), dict(rope["sliding_attention"])
        text["rope_theta"] = full.pop("rope_theta")
        text["rope_local_base_freq"] = local.pop("rope_theta")
        text["rope_scaling"] = None if full.get("rope_type", "default") == "default" else full
        text.pop("layer_types")
        text.pop("_sliding_window_pattern", None)
        assert "sliding_window_pattern" in text
        if "dtype" in cfg:
            cfg["torch_dtype"] = cfg.pop("dtype")
    for target, changes in ((cfg, overrides), (text, text_overrides or {})):
        for key, value in changes.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def write_generation_config(path, config, eos_token_id):
    config = config.get_text_config()
    gen = {"bos_token_id": config.bos_token_id, "eos_token_id": eos_token_id,
           "do_sample": False, "transformers_version": transformers.__version__}
    if config.pad_token_id is not None:
        gen["pad_token_id"] = config.pad_token_id
    with open(path, "w") as f:
        json.dump(gen, f, indent=2, sort_keys=True)
        f.write("\n")


def copy_text_tower(model, source_dir):
    """Loads a text-only fixture's weights (model.*) into a multimodal wrapper's text tower
    (model.language_model.*); every text tower tensor must come from the source."""
    src = load_file(os.path.join(source_dir, "model.safetensors"))
    mapped = {"model.language_model." + k.removeprefix("model."): v.to(torch.float32)
              for k, v in src.items()}
    text_keys = {k for k in model.state_dict() if k.startswith("model.language_model.")}
    if set(mapped) != text_keys:
        raise RuntimeError(f"text tower names differ: {sorted(set(mapped) ^ text_keys)}")
    model.load_state_dict(mapped, strict=False)


def save_snapshot(spec, model_dir, seed, tokenizer_ids):
    """Creates the random model and writes it as an HF snapshot; returns its config and the
    in-memory model (in the stored dtype)."""
    if os.path.exists(model_dir):
        shutil.rmtree(model_dir)
    os.makedirs(model_dir)
    config = build_config(spec, tokenizer_ids)
    gen = torch.Generator().manual_seed(seed)
    model = spec["arch"][1](config).to(torch.float32)
    init_weights(model, gen, spec.get("norm", "w"), spec.get("layer_scalar", False), spec.get("embed_std"),
                 spec.get("qk_norm"))
    if spec.get("text_from"):
        copy_text_tower(model, os.path.join(OUT_DIR, spec["text_from"]))
    # What a float32 load of the snapshot holds: parameters and persistent buffers rounded to the
    # stored dtype, the rest (embedding scale, rotary tables) recomputed in float32.
    mem_model = copy.deepcopy(model)
    with torch.no_grad():
        for t in mem_model.state_dict().values():
            t.copy_(t.to(spec["dtype"]).to(torch.float32))
    model = model.to(spec["dtype"])
    model.save_pretrained(model_dir)
    rewrite_config_json(os.path.join(model_dir, "config.json"), spec["style"], spec.get("config_json", {}),
                        spec.get("text_json"))
    eos = config.get_text_config().eos_token_id
    if spec.get("tokenizer"):  # as in Qwen3 / Llama 3 instruct snapshots: a list of stop ids
        eos = [eos, tokenizer_ids[2]]
    write_generation_config(os.path.join(model_dir, "generation_config.json"), config, eos)
    if spec.get("tokenizer"):
        oracle_tokenizer.write_tokenizer(model_dir)
    return config, mem_model


def make_prompt(spec, model_dir, config, seed):
    if spec.get("tokenizer"):
        tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        return np.array(tok(TOKENIZER_PROMPT)["input_ids"], dtype=np.int32)
    if spec.get("text_from"):
        return np.load(os.path.join(OUT_DIR, spec["text_from"], "golden", "prompt.npy"))
    config = config.get_text_config()
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(3, config.vocab_size, (spec["prompt_len"],), generator=gen)
    ids[0] = config.bos_token_id
    return ids.numpy().astype(np.int32)


def snapshot_vs_memory(model, prompt, logits):
    """max |diff| between the oracle's logits (the model read back from config.json and the
    stored weights) and the in-memory model that wrote them: a config.json rewrite that changed
    what the model computes shows here."""
    model.eval()
    model.set_attn_implementation("eager")
    with torch.no_grad():
        mem = model(torch.from_numpy(prompt.astype(np.int64))[None]).logits[0].float().numpy()
    return float(np.abs(mem - logits).max())


def load(model_dir, dtype):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager").eval()


def run_oracle(model_dir, prompt):
    """float32 forward + greedy generation; returns (logits, greedy, greedy_logits)."""
    model = load(model_dir, torch.float32)
    ids = torch.from_numpy(prompt.astype(np.int64))[None]
    with torch.no_grad():
        logits = model(ids).logits[0].float().numpy()
        # Replace the snapshot's generation config outright: generate() merges a passed config
        # with the model's, and an eos_token_id left there would make min_new_tokens suppress EOS.
        model.generation_config = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_GREEDY,
                             output_logits=True, return_dict_in_generate=True)
    greedy = out.sequences[0, len(prompt):].numpy().astype(np.int32)
    greedy_logits = torch.stack(out.logits, 0)[:, 0].float().numpy()
    return model, logits, greedy, greedy_logits


def router_gap(model, ids):
    """The smallest gap between the k-th and (k+1)-th router probability over every MoE layer and
    token of one forward over ids (None without routers). The routers return the logits
    (Qwen, Mixtral) or the probabilities (Gemma 4) first."""
    gaps, hooks = [], []

    def hook(module, args, out):
        first = out[0].float()
        probs = first if type(module).__name__.startswith("Gemma4") else torch.softmax(first, -1)
        k = getattr(module, "top_k", None) or module.config.top_k_experts
        top = torch.sort(probs, -1, descending=True).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    for m in model.modules():
        if type(m).__name__.endswith(("TopKRouter", "TextRouter")):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(torch.from_numpy(ids)[None])
    for h in hooks:
        h.remove()
    return min(gaps) if gaps else None


def sequence_problem(logits, greedy, greedy_logits, stats):
    """The oracle-independent checks of a greedy sequence (fills stats); a problem or None."""
    top2 = np.sort(greedy_logits, -1)[:, -2:]
    rel_gap = (top2[:, 1] - top2[:, 0]) / np.abs(greedy_logits).max(-1)
    stats["min_rel_top2_gap"] = float(rel_gap.min())
    stats["n_distinct_greedy"] = int(len(set(greedy.tolist())))
    stats["max_abs_logit"] = float(np.abs(logits).max())
    runs = np.diff(np.flatnonzero(np.diff(np.r_[-1, greedy, -1]) != 0))
    stats["longest_repeat"] = int(runs.max())
    if (stats["n_distinct_greedy"] < MIN_DISTINCT or stats["longest_repeat"] > MAX_REPEAT
            or len(set(greedy[-12:].tolist())) < 4):
        return "greedy sequence is too repetitive", stats
    if stats["min_rel_top2_gap"] < MIN_REL_GAP:
        return "a greedy step has a razor-thin top-2 gap", stats
    return None, stats


def check(model_dir, model, prompt, logits, greedy, greedy_logits):
    """Returns (problem or None, stats). Accepts only sequences robust to bf16-vs-f32 differences."""
    stats = {}
    if greedy.shape != (N_GREEDY,) or not np.array_equal(greedy_logits.argmax(-1), greedy):
        return "greedy tokens are not the argmax of their logits", stats
    # The cached decode must agree with one uncached forward over prompt + greedy.
    full = np.concatenate([prompt, greedy[:-1]]).astype(np.int64)
    with torch.no_grad():
        ref = model(torch.from_numpy(full)[None]).logits[0, len(prompt) - 1:].float().numpy()
    stats["decode_vs_full_max_abs"] = float(np.abs(ref - greedy_logits).max())
    if stats["decode_vs_full_max_abs"] > 1e-4 * max(1.0, float(np.abs(ref).max())):
        return "cached decode and full forward disagree", stats
    if not np.allclose(logits[-1], greedy_logits[0], atol=1e-5):
        return "prompt forward and first decode step disagree", stats
    gap = router_gap(model, full)
    if gap is not None:
        stats["min_router_gap"] = gap
        if gap < MIN_ROUTER_GAP:
            return "a token's k-th and (k+1)-th experts are razor-close", stats
    problem, stats = sequence_problem(logits, greedy, greedy_logits, stats)
    if problem:
        return problem, stats
    # bf16 compute (what a fast backend does) must pick the same tokens, teacher-forced.
    bf16 = load(model_dir, torch.bfloat16)
    with torch.no_grad():
        lb = bf16(torch.from_numpy(full)[None]).logits[0, len(prompt) - 1:].float().numpy()
    stats["bf16_max_rel_err"] = float(np.abs(lb - greedy_logits).max() / np.abs(greedy_logits).max())
    if not np.array_equal(lb.argmax(-1), greedy):
        return "bf16 compute picks different greedy tokens", stats
    if gap is not None and stats["bf16_max_rel_err"] > MAX_MOE_BF16_ERR:
        return "bf16 compute routes tokens to other experts", stats
    return None, stats


MLX_PYTHON = os.environ.get("TERN_MLX_PYTHON", os.path.join(ROOT, "tools", ".venv-mlx", "bin", "python"))


def run_mlx_oracle(model_dir, prompt):
    """mlx-lm in its own venv (tools/oracle_mlx.py): (logits, greedy, greedy_logits, its stats)."""
    with tempfile.TemporaryDirectory() as tmp:
        pp = os.path.join(tmp, "prompt.npy")
        np.save(pp, prompt.astype(np.int32))
        subprocess.run([MLX_PYTHON, os.path.join(ROOT, "tools", "oracle_mlx.py"), model_dir, pp, tmp,
                        str(N_GREEDY)], check=True)
        out = [np.load(os.path.join(tmp, n + ".npy")) for n in ("logits", "greedy", "greedy_logits")]
        with open(os.path.join(tmp, "stats.json")) as f:
            stats = json.load(f)
    return out[0], out[1], out[2], stats


def check_mlx(logits, greedy, greedy_logits, oracle_stats):
    """check() for the mlx-lm oracle, from the numbers tools/oracle_mlx.py measured."""
    stats = {"decode_vs_full_max_abs": oracle_stats["decode_vs_full_max_abs"],
             "bf16_max_rel_err": oracle_stats["bf16_max_rel_err"]}
    if not np.array_equal(greedy_logits.argmax(-1), greedy):
        return "greedy tokens are not the argmax of their logits", stats
    if stats["decode_vs_full_max_abs"] > 1e-4 * max(1.0, oracle_stats["decode_vs_full_max_ref"]):
        return "cached decode and full forward disagree", stats
    if not np.allclose(logits[-1], greedy_logits[0], atol=1e-5):
        return "prompt forward and first decode step disagree", stats
    problem, stats = sequence_problem(logits, greedy, greedy_logits, stats)
    if problem is None and not oracle_stats["bf16_same_greedy"]:
        problem = "bf16 compute picks different greedy tokens"
    return problem, stats


def rope_meta(model):
    """The rotary table transformers built (what rope_theta + rope_scaling mean), for debugging;
    one per layer type where layer types have their own (Gemma 3 and 4)."""
    text = model.model.language_model if hasattr(model.model, "language_model") else model.model
    rotary = text.rotary_emb
    if hasattr(rotary, "inv_freq"):
        return {"inv_freq": [float(x) for x in rotary.inv_freq.float()],
                "attention_scaling": float(rotary.attention_scaling),
                "note": "cos and sin are both multiplied by attention_scaling"}
    meta = {t: {"inv_freq": [float(x) for x in getattr(rotary, f"{t}_inv_freq").float()],
                "attention_scaling": float(getattr(rotary, f"{t}_attention_scaling"))}
            for t in sorted(set(text.config.layer_types))}
    meta["note"] = ("per layer type; cos and sin are both multiplied by attention_scaling; "
                    "an inv_freq of 0 leaves that pair unrotated")
    return meta


def write_golden(model_dir, spec, seed, model, prompt, logits, greedy, greedy_logits, stats):
    gdir = os.path.join(model_dir, "golden")
    os.makedirs(gdir)
    np.save(os.path.join(gdir, "prompt.npy"), prompt.astype(np.int32))
    np.save(os.path.join(gdir, "logits.npy"), logits.astype(np.float32))
    np.save(os.path.join(gdir, "greedy.npy"), greedy.astype(np.int32))
    np.save(os.path.join(gdir, "greedy_logits.npy"), greedy_logits.astype(np.float32))
    mlx = spec.get("oracle") == "mlx"
    meta = {
        "fixture": spec["name"],
        "command": "tools/setup-oracle.sh && tools/.venv/bin/python tools/make_fixtures.py",
        "oracle": ("mlx-lm on the MLX CPU device (tools/oracle_mlx.py), float32" if mlx else
                   "transformers float32, attn_implementation=eager, weights loaded from this snapshot"),
        "stored_dtype": str(spec["dtype"]).replace("torch.", ""),
        "seed": seed,
        "n_prompt": int(len(prompt)),
        "n_greedy": N_GREEDY,
        "greedy_note": "EOS ignored; greedy_logits[i] are the logits that chose greedy[i]; "
                       "greedy_logits[0] == logits[-1]",
        "checks": stats,
    }
    if mlx:
        meta["versions"] = dict(model, weights_made_by="transformers " + transformers.__version__)
    else:
        meta["rope"] = rope_meta(model)
        meta["versions"] = {"transformers": transformers.__version__, "torch": torch.__version__,
                            "numpy": np.__version__}
    if spec.get("tokenizer"):
        import tokenizers
        meta["versions"]["tokenizers"] = tokenizers.__version__
        meta["prompt_text"] = TOKENIZER_PROMPT
        tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        meta["greedy_text"] = tok.decode(greedy.tolist())
        cases = {"text": oracle_tokenizer.golden_text_cases(tok),
                 "chat": oracle_tokenizer.golden_chat_cases(tok)}
        text = json.dumps(cases, indent=1, ensure_ascii=False)
        # One line per id list keeps the file short and diffable.
        text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
                      lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]", text)
        with open(os.path.join(gdir, "tokenizer_cases.json"), "w") as f:
            f.write(text + "\n")
    with open(os.path.join(gdir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2, ensure_ascii=False)
        f.write("\n")


def make_fixture(spec):
    model_dir = os.path.join(OUT_DIR, spec["name"])
    tokenizer_ids = None
    if spec.get("tokenizer"):
        tok = oracle_tokenizer.train_tokenizer()
        tokenizer_ids = tuple(tok.token_to_id(t) for t in
                              (oracle_tokenizer.BOS, oracle_tokenizer.EOS, oracle_tokenizer.PAD))
    for attempt in range(MAX_TRIES):
        seed = spec["seed"] + attempt
        config, mem_model = save_snapshot(spec, model_dir, seed, tokenizer_ids)
        prompt = make_prompt(spec, model_dir, config, seed)
        if spec.get("oracle") == "mlx":
            logits, greedy, greedy_logits, ostats = run_mlx_oracle(model_dir, prompt)
            problem, stats = check_mlx(logits, greedy, greedy_logits, ostats)
            if problem is None:
                write_golden(model_dir, spec, seed, ostats["versions"], prompt, logits, greedy,
                             greedy_logits, stats)
                print(f"{spec['name']}: seed {seed}, prompt {len(prompt)}, greedy {greedy.tolist()}, {stats}")
                return
            print(f"{spec['name']}: seed {seed} rejected: {problem} {stats}")
            continue
        model, logits, greedy, greedy_logits = run_oracle(model_dir, prompt)
        diff = snapshot_vs_memory(mem_model, prompt, logits)
        if diff > 1e-6 * np.abs(logits).max():
            raise RuntimeError(f"{spec['name']}: the snapshot read back computes other logits than "
                               f"the model that wrote it (max abs {diff:.3e}): check config.json")
        problem, stats = check(model_dir, model, prompt, logits, greedy, greedy_logits)
        if problem is None and spec.get("text_from"):
            stats = dict(stats, vs_source=compare_with_source(spec, logits, greedy, greedy_logits))
        if problem is None:
            write_golden(model_dir, spec, seed, model, prompt, logits, greedy, greedy_logits, stats)
            print(f"{spec['name']}: seed {seed}, prompt {len(prompt)}, greedy {greedy.tolist()}, {stats}")
            return
        if spec.get("text_from"):
            raise RuntimeError(f"{spec['name']}: {problem} (its text tower is {spec['text_from']}'s)")
        print(f"{spec['name']}: seed {seed} rejected: {problem} {stats}")
    raise RuntimeError(f"{spec['name']}: no acceptable seed in {MAX_TRIES} tries")


def compare_with_source(spec, logits, greedy, greedy_logits):
    """A wrapper around a text-only fixture's weights must give that fixture's outputs."""
    gdir = os.path.join(OUT_DIR, spec["text_from"], "golden")
    src_logits = np.load(os.path.join(gdir, "logits.npy"))
    src_glog = np.load(os.path.join(gdir, "greedy_logits.npy"))
    if not np.array_equal(np.load(os.path.join(gdir, "greedy.npy")), greedy):
        raise RuntimeError(f"{spec['name']}: greedy tokens differ from {spec['text_from']}'s")
    out = {"fixture": spec["text_from"],
           "logits_max_abs_diff": float(np.abs(src_logits - logits).max()),
           "greedy_logits_max_abs_diff": float(np.abs(src_glog - greedy_logits).max())}
    if max(out["logits_max_abs_diff"], out["greedy_logits_max_abs_diff"]) > 1e-5 * np.abs(logits).max():
        raise RuntimeError(f"{spec['name']}: logits differ from {spec['text_from']}'s: {out}")
    return out


def main(argv):
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # summation order, hence the last bits, do not depend on the machine's cores
    names = set(argv)
    unknown = names - {s["name"] for s in FIXTURES}
    if unknown:
        raise SystemExit(f"unknown fixtures: {sorted(unknown)}")
    os.makedirs(OUT_DIR, exist_ok=True)
    for spec in FIXTURES:
        if not names or spec["name"] in names:
            make_fixture(spec)


if __name__ == "__main__":
    main(sys.argv[1:])
