/*
 * gguf_arch.c — GGUF metadata as tern understands it (gguf_arch.h): special
 * token ids, the config.json a GGUF stands for, Hugging Face tensor names,
 * llama.cpp's q / k row order, and a snapshot-like view of a whole file.
 *
 * How src/model binds a GGUF:
 *
 * 1. Opening. tern_model_open (api/model_api.c) takes a path; a regular file
 *    that starts with "GGUF" goes to tern_gguf_model_open instead of the
 *    snapshot reader. Its `config` is a config.json in every respect that
 *    tern_hparams_read and tern_arch_find look at (architectures, sizes,
 *    rope, eps, vocab, tie, bos / eos), so the hyperparameters are read by
 *    the same code, and errors name "FILE.gguf (GGUF metadata as
 *    config.json)". The tokenizer and template come from text/tok_gguf.h
 *    (tern_tokenizer_from_gguf, tern_chat_template_from_gguf); there is no
 *    generation_config.json: the config's eos_token_id list already holds
 *    eos, eot and eom.
 *
 * 2. Weights. model/load.c asks for tensors by Hugging Face name through
 *    the weight source (io/wsource.h), whose GGUF side is
 *    tern_gguf_model_find. What a GGUF tensor brings that a safetensors one
 *    does not:
 *      - a ggml type: F32 / F16 / BF16 map to tern dtypes
 *        (tern_ggml_type_dtype); the block types (Q4_0 ... Q6_K, IQ4_*) bind
 *        as ggml linears (struct tern_linear's ggml_type, the rows' blocks as
 *        they are) where the backend takes them, else as BF16 dequantized at
 *        load. Norm weights are F32 in every GGUF seen so far.
 *      - shapes: `shape` is already Hugging Face order (ne reversed); the
 *        bytes of row r of a 2-D tensor start at r * row_bytes
 *        (tern_ggml_row_bytes of shape[1] values).
 *      - q / k of the llama architecture (rope_head_dim > 0): the rows are in
 *        llama.cpp's order (see tern_gguf_rope_src_row); the loader copies
 *        them through tern_gguf_rows_unpermute into an owned buffer, per
 *        tensor: the other tensors stay mapped in place on the CPU. A row
 *        permutation is right for every type because a row holds whole
 *        blocks. qwen2 / qwen3 files are not permuted (llama.cpp runs NEOX
 *        rope for them).
 *      - token_embd.weight is usually quantized (Q8_0, Q6_K): the embedding
 *        lookup dequantizes one row; with tie_word_embeddings it is also the
 *        head.
 * 3. Not covered yet: rope_freqs.weight (Llama 3.1's per-dimension rope
 *    factors; tern_gguf_hf_config refuses such files until the rope takes
 *    factors), per-layer head counts (array-valued keys fail as wrong types),
 *    MoE and other architectures.
 *
 * Depends on base/, io/gguf.h, io/config.h, io_internal.h, jansson.
 */
#include "io/gguf_arch.h"
#include "io/io_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- special tokens */

/* Reads one id key into *id (keeping the default when absent), dropping an
 * id outside [0, n). */
static enum tern_status tok_id(const struct tern_gguf *g, const char *key, int32_t n, int32_t *id)
{
    int64_t v;
    TERN_TRY(tern_gguf_get_int_opt(g, key, *id, &v));
    if (v < -1 || v >= n) {
        tern_log(TERN_LOG_WARN,
                 "%s: key '%s' is %lld, outside the vocabulary of %d tokens: ignored",
                 tern_gguf_path(g), key, (long long)v, n);
        v = -1;
    }
    *id = (int32_t)v;
    return TERN_OK;
}

/* The first control token spelled as one of the usual end-of-turn markers. */
static int32_t find_eot(const struct tern_gguf *g, const struct tern_gguf_value *toks, int32_t eos)
{
    static const char *const names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"};
    const struct tern_gguf_value *types = NULL;
    if (tern_gguf_get_arr(g, "tokenizer.ggml.token_type", TERN_GGUF_INT32, &types) != TERN_OK) {
        tern_error_clear();
        return -1;
    }
    for (uint64_t i = 0; i < toks->n && i < types->n; i++) {
        if (tern_gguf_arr_int(types, i) != TERN_GGUF_TOKEN_CONTROL || (int32_t)i == eos) continue;
        size_t len;
        const char *s = tern_gguf_arr_str(toks, i, &len);
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            if (len == strlen(names[k]) && !memcmp(s, names[k], len)) return (int32_t)i;
    }
    return -1;
}

enum tern_status tern_gguf_tok_ids(const struct tern_gguf *g, struct tern_gguf_tok_ids *out)
{
    memset(out, 0xff, sizeof *out);
    out->add_bos = out->add_eos = false;
    const struct tern_gguf_value *toks;
    TERN_TRY(tern_gguf_get_arr(g, "tokenizer.ggml.tokens", TERN_GGUF_STRING, &toks));
    if (toks->n > INT32_MAX)
        return tern_io_error(TERN_E_FORMAT, "%s: key 'tokenizer.ggml.tokens' has %llu tokens",
                             tern_gguf_path(g), (unsigned long long)toks->n);
    int32_t n = out->n_tokens = (int32_t)toks->n;
    const char *model = "", *pre = "";
    TERN_TRY(tern_gguf_get_str_opt(g, "tokenizer.ggml.model", "", &model));
    TERN_TRY(tern_gguf_get_str_opt(g, "tokenizer.ggml.pre", "", &pre));
    if (!strcmp(model, "llama")) {
        out->bos = 1 < n ? 1 : -1;
        out->eos = 2 < n ? 2 : -1;
        out->unk = 0 < n ? 0 : -1;
        out->add_bos = true;
    }
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3"))
        out->add_bos = true;
    TERN_TRY(tok_id(g, "tokenizer.ggml.bos_token_id", n, &out->bos));
    TERN_TRY(tok_id(g, "tokenizer.ggml.eos_token_id", n, &out->eos));
    TERN_TRY(tok_id(g, "tokenizer.ggml.eot_token_id", n, &out->eot));
    TERN_TRY(tok_id(g, "tokenizer.ggml.eom_token_id", n, &out->eom));
    TERN_TRY(tok_id(g, "tokenizer.ggml.unknown_token_id", n, &out->unk));
    TERN_TRY(tok_id(g, "tokenizer.ggml.padding_token_id", n, &out->pad));
    TERN_TRY(
        tok_id(g, "tokenizer.ggml.seperator_token_id", n, &out->sep)); /* sic, llama.cpp's key */
    TERN_TRY(
        tern_gguf_get_bool_opt(g, "tokenizer.ggml.add_bos_token", out->add_bos, &out->add_bos));
    TERN_TRY(
        tern_gguf_get_bool_opt(g, "tokenizer.ggml.add_eos_token", out->add_eos, &out->add_eos));
    if (!tern_gguf_find(g, "tokenizer.ggml.eot_token_id")) out->eot = find_eot(g, toks, out->eos);
    return TERN_OK;
}

/* ---------------------------------------------------------------- architectures */

struct arch_row {
    const char *gguf;       /* general.architecture */
    const char *hf;         /* config.json architectures[0] */
    const char *model_type; /* config.json model_type */
    bool rope_permuted;     /* llama.cpp's converter permuted q / k rows */
};

static const struct arch_row archs[] = {
    {"llama", "LlamaForCausalLM", "llama", true},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false},
};

static enum tern_status find_arch(const struct tern_gguf *g, const struct arch_row **out)
{
    const char *a;
    TERN_TRY(tern_gguf_get_str(g, "general.architecture", &a, NULL));
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(a, archs[i].gguf)) {
            *out = &archs[i];
            return TERN_OK;
        }
    return tern_io_error(TERN_E_UNSUPPORTED,
                         "%s: general.architecture '%s' is not supported (llama, qwen2, qwen3 are)",
                         tern_gguf_path(g), a);
}

/* ---------------------------------------------------------------- config */

struct cfg_build {
    const struct tern_gguf *g;
    const char *arch;
    json_t *root;
    char key[160];
};

static const char *akey(struct cfg_build *c, const char *suffix)
{
    snprintf(c->key, sizeof c->key, "%s.%s", c->arch, suffix);
    return c->key;
}

static enum tern_status set(struct cfg_build *c, const char *name, json_t *v)
{
    if (!v || json_object_set_new(c->root, name, v))
        return tern_error(TERN_E_NO_MEMORY, "config from GGUF: out of memory");
    return TERN_OK;
}

/* Copies ARCH.suffix (an integer) to name; absent and not required: nothing. */
static enum tern_status copy_int(struct cfg_build *c, const char *suffix, const char *name,
                                 bool required)
{
    int64_t v;
    const char *k = akey(c, suffix);
    if (!required && !tern_gguf_find(c->g, k)) return TERN_OK;
    TERN_TRY(tern_gguf_get_int(c->g, k, &v));
    return set(c, name, json_integer(v));
}

static enum tern_status copy_float(struct cfg_build *c, const char *suffix, const char *name,
                                   bool required)
{
    double v;
    const char *k = akey(c, suffix);
    if (!required && !tern_gguf_find(c->g, k)) return TERN_OK;
    TERN_TRY(tern_gguf_get_float(c->g, k, &v));
    return set(c, name, json_real(v));
}

static enum tern_status cfg_head_dim(struct cfg_build *c)
{
    int64_t kl = -1, vl = -1, rot = -1, hidden, heads;
    TERN_TRY(tern_gguf_get_int_opt(c->g, akey(c, "attention.key_length"), -1, &kl));
    TERN_TRY(tern_gguf_get_int_opt(c->g, akey(c, "attention.value_length"), kl, &vl));
    if (kl != vl)
        return tern_io_error(TERN_E_UNSUPPORTED,
                             "%s: %s.attention.key_length %lld differs from value_length %lld",
                             tern_gguf_path(c->g), c->arch, (long long)kl, (long long)vl);
    if (kl > 0) TERN_TRY(set(c, "head_dim", json_integer(kl)));
    TERN_TRY(tern_gguf_get_int(c->g, akey(c, "embedding_length"), &hidden));
    TERN_TRY(tern_gguf_get_int(c->g, akey(c, "attention.head_count"), &heads));
    int64_t hd = kl > 0 ? kl : heads > 0 ? hidden / heads : 0;
    TERN_TRY(tern_gguf_get_int_opt(c->g, akey(c, "rope.dimension_count"), hd, &rot));
    if (hd > 0 && rot != hd)
        TERN_TRY(set(c, "partial_rotary_factor", json_real((double)rot / (double)hd)));
    return TERN_OK;
}

static enum tern_status cfg_rope(struct cfg_build *c)
{
    if (tern_gguf_find_tensor(c->g, "rope_freqs.weight"))
        return tern_io_error(TERN_E_UNSUPPORTED,
                             "%s: tensor 'rope_freqs.weight' (per-dimension rope factors, as "
                             "Llama 3.1 GGUFs carry) is not supported yet",
                             tern_gguf_path(c->g));
    TERN_TRY(copy_float(c, "rope.freq_base", "rope_theta", false));
    const char *type = NULL;
    double factor = 0, linear = 0;
    TERN_TRY(tern_gguf_get_str_opt(c->g, akey(c, "rope.scaling.type"), NULL, &type));
    TERN_TRY(tern_gguf_get_float_opt(c->g, akey(c, "rope.scaling.factor"), 0, &factor));
    TERN_TRY(tern_gguf_get_float_opt(c->g, akey(c, "rope.scale_linear"), 0, &linear));
    if (!type && linear > 0) {
        type = "linear";
        factor = linear;
    }
    if (!type || !strcmp(type, "none") || factor == 0 || factor == 1) return TERN_OK;
    if (strcmp(type, "linear") && strcmp(type, "yarn"))
        return tern_io_error(TERN_E_UNSUPPORTED,
                             "%s: %s.rope.scaling.type '%s' is not supported (none, linear, yarn)",
                             tern_gguf_path(c->g), c->arch, type);
    json_t *rs = json_object();
    if (!rs || json_object_set_new(rs, "rope_type", json_string(type)) ||
        json_object_set_new(rs, "factor", json_real(factor))) {
        json_decref(rs);
        return tern_error(TERN_E_NO_MEMORY, "config from GGUF: out of memory");
    }
    int64_t orig;
    enum tern_status st =
        tern_gguf_get_int_opt(c->g, akey(c, "rope.scaling.original_context_length"), 0, &orig);
    if (!st && orig > 0 &&
        json_object_set_new(rs, "original_max_position_embeddings", json_integer(orig)))
        st = tern_error(TERN_E_NO_MEMORY, "config from GGUF: out of memory");
    if (st) {
        json_decref(rs);
        return st;
    }
    return set(c, "rope_scaling", rs);
}

static enum tern_status cfg_vocab(struct cfg_build *c)
{
    int64_t n = -1;
    TERN_TRY(tern_gguf_get_int_opt(c->g, akey(c, "vocab_size"), -1, &n));
    struct tern_gguf_tok_ids ids;
    enum tern_status st = tern_gguf_tok_ids(c->g, &ids);
    if (st == TERN_E_NOT_FOUND)
        tern_error_clear();
    else if (st)
        return st;
    const struct tern_gguf_tensor *emb = tern_gguf_find_tensor(c->g, "token_embd.weight");
    if (n < 0) n = st == TERN_OK ? ids.n_tokens : emb ? emb->ne[1] : -1;
    if (n < 0)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: no vocabulary size (no %s.vocab_size, tokenizer.ggml.tokens or "
                             "token_embd.weight)",
                             tern_gguf_path(c->g), c->arch);
    TERN_TRY(set(c, "vocab_size", json_integer(n)));
    TERN_TRY(
        set(c, "tie_word_embeddings", json_boolean(!tern_gguf_find_tensor(c->g, "output.weight"))));
    if (st) return TERN_OK; /* no tokenizer: no token ids */
    if (ids.bos >= 0) TERN_TRY(set(c, "bos_token_id", json_integer(ids.bos)));
    json_t *eos = json_array();
    if (!eos) return TERN_E_NO_MEMORY;
    int32_t cand[3] = {ids.eos, ids.eot, ids.eom};
    for (int i = 0; i < 3; i++) {
        bool seen = cand[i] < 0;
        for (int j = 0; j < i; j++) seen = seen || cand[j] == cand[i];
        if (!seen) json_array_append_new(eos, json_integer(cand[i]));
    }
    if (ids.pad >= 0) TERN_TRY(set(c, "pad_token_id", json_integer(ids.pad)));
    return set(c, "eos_token_id", eos);
}

enum tern_status tern_gguf_hf_config(const struct tern_gguf *g, struct tern_json_doc *out)
{
    memset(out, 0, sizeof *out);
    const struct arch_row *a = NULL;
    TERN_TRY(find_arch(g, &a));
    struct cfg_build c = {g, a->gguf, json_object(), {0}};
    enum tern_status st = c.root ? TERN_OK : TERN_E_NO_MEMORY;
    json_t *names = json_array();
    if (!st && (!names || json_array_append_new(names, json_string(a->hf)))) st = TERN_E_NO_MEMORY;
    if (!st)
        st = set(&c, "architectures", names);
    else
        json_decref(names);
    if (!st) st = set(&c, "model_type", json_string(a->model_type));
    if (!st) st = copy_int(&c, "block_count", "num_hidden_layers", true);
    if (!st) st = copy_int(&c, "embedding_length", "hidden_size", true);
    if (!st) st = copy_int(&c, "feed_forward_length", "intermediate_size", true);
    if (!st) st = copy_int(&c, "attention.head_count", "num_attention_heads", true);
    if (!st) st = copy_int(&c, "attention.head_count_kv", "num_key_value_heads", false);
    if (!st) st = copy_int(&c, "context_length", "max_position_embeddings", false);
    if (!st) st = copy_float(&c, "attention.layer_norm_rms_epsilon", "rms_norm_eps", true);
    if (!st) st = cfg_head_dim(&c);
    if (!st) st = cfg_rope(&c);
    if (!st) st = cfg_vocab(&c);
    struct tern_str path = {0};
    if (!st) st = tern_str_appendf(&path, "%s (GGUF metadata as config.json)", tern_gguf_path(g));
    if (st) {
        json_decref(c.root);
        tern_str_deinit(&path);
        return st;
    }
    out->root = c.root;
    out->path = tern_str_take(&path);
    return TERN_OK;
}

/* ---------------------------------------------------------------- tensor names */

static const struct {
    const char *gguf, *hf;
} top_names[] = {
    {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};

static const struct {
    const char *gguf, *hf;
} blk_names[] = {
    {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

bool tern_gguf_hf_name(const char *gguf_name, char *buf, size_t cap)
{
    const char *dot = strrchr(gguf_name, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias"))) return false;
    size_t stem = (size_t)(dot - gguf_name);
    int n;
    for (size_t i = 0; i < sizeof top_names / sizeof top_names[0]; i++)
        if (strlen(top_names[i].gguf) == stem && !strncmp(gguf_name, top_names[i].gguf, stem)) {
            n = snprintf(buf, cap, "%s%s", top_names[i].hf, dot);
            return n > 0 && (size_t)n < cap;
        }
    if (strncmp(gguf_name, "blk.", 4)) return false;
    const char *p = gguf_name + 4, *q = p;
    while (*q >= '0' && *q <= '9') q++;
    if (q == p || q - p > 6 || *q != '.' || (*p == '0' && q - p > 1)) return false;
    const char *part = q + 1;
    size_t plen = (size_t)(dot - part);
    for (size_t i = 0; i < sizeof blk_names / sizeof blk_names[0]; i++)
        if (strlen(blk_names[i].gguf) == plen && !strncmp(part, blk_names[i].gguf, plen)) {
            n = snprintf(buf, cap, "model.layers.%.*s.%s%s", (int)(q - p), p, blk_names[i].hf, dot);
            return n > 0 && (size_t)n < cap;
        }
    return false;
}

bool tern_gguf_name_from_hf(const char *hf_name, char *buf, size_t cap)
{
    const char *dot = strrchr(hf_name, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias"))) return false;
    size_t stem = (size_t)(dot - hf_name);
    int n;
    for (size_t i = 0; i < sizeof top_names / sizeof top_names[0]; i++)
        if (strlen(top_names[i].hf) == stem && !strncmp(hf_name, top_names[i].hf, stem)) {
            n = snprintf(buf, cap, "%s%s", top_names[i].gguf, dot);
            return n > 0 && (size_t)n < cap;
        }
    static const char layers[] = "model.layers.";
    if (strncmp(hf_name, layers, sizeof layers - 1)) return false;
    const char *p = hf_name + sizeof layers - 1, *q = p;
    while (*q >= '0' && *q <= '9') q++;
    if (q == p || q - p > 6 || *q != '.') return false;
    const char *part = q + 1;
    size_t plen = (size_t)(dot - part);
    for (size_t i = 0; i < sizeof blk_names / sizeof blk_names[0]; i++)
        if (strlen(blk_names[i].hf) == plen && !strncmp(part, blk_names[i].hf, plen)) {
            n = snprintf(buf, cap, "blk.%.*s.%s%s", (int)(q - p), p, blk_names[i].gguf, dot);
            return n > 0 && (size_t)n < cap;
        }
    return false;
}

int64_t tern_gguf_rope_src_row(int64_t hf_row, int64_t head_dim)
{
    int64_t h = hf_row / head_dim, i = hf_row % head_dim, half = head_dim / 2;
    return h * head_dim + 2 * (i % half) + i / half;
}

void tern_gguf_rows_unpermute(const void *src, void *dst, int64_t n_rows, size_t row_bytes,
                              int64_t head_dim)
{
    TERN_ASSERT(head_dim > 0 && head_dim % 2 == 0 && n_rows % head_dim == 0);
    for (int64_t r = 0; r < n_rows; r++)
        memcpy((char *)dst + (size_t)r * row_bytes,
               (const char *)src + (size_t)tern_gguf_rope_src_row(r, head_dim) * row_bytes,
               row_bytes);
}

/* ---------------------------------------------------------------- the view */

static int cmp_weight(const void *a, const void *b)
{
    return strcmp(((const struct tern_gguf_weight *)a)->hf_name,
                  ((const struct tern_gguf_weight *)b)->hf_name);
}

/* q / k of a permuted architecture: the head size their rows are grouped by. */
static int64_t rope_head_dim(const struct tern_gguf_model *m, const char *hf_name)
{
    const char *s = strstr(hf_name, ".self_attn.");
    if (!s || (strncmp(s, ".self_attn.q_proj.", 18) && strncmp(s, ".self_attn.k_proj.", 18)))
        return 0;
    int64_t hd = 0, hidden = 0, heads = 1;
    if (tern_cfg_int_opt(&m->config, "head_dim", 0, &hd) || hd > 0) return hd;
    if (tern_cfg_int(&m->config, "hidden_size", &hidden) ||
        tern_cfg_int(&m->config, "num_attention_heads", &heads) || heads <= 0)
        return 0;
    return hidden / heads;
}

static enum tern_status build_view(struct tern_gguf_model *m, const struct arch_row *a)
{
    size_t n = tern_gguf_n_tensors(m->g);
    m->weights = tern_calloc(n ? n : 1, sizeof *m->weights);
    m->unmapped = tern_calloc(n ? n : 1, sizeof *m->unmapped);
    if (!m->weights || !m->unmapped) return TERN_E_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        const struct tern_gguf_tensor *t = tern_gguf_tensor_at(m->g, i);
        char name[256];
        if (!tern_gguf_hf_name(t->name, name, sizeof name)) {
            m->unmapped[m->n_unmapped++] = t;
            continue;
        }
        struct tern_gguf_weight *w = &m->weights[m->n_weights++];
        if (!(w->hf_name = tern_strdup(name))) return TERN_E_NO_MEMORY;
        w->t = t;
        w->n_dims = t->n_dims;
        for (int d = 0; d < t->n_dims; d++) w->shape[d] = t->ne[t->n_dims - 1 - d];
        if (a->rope_permuted && (w->rope_head_dim = rope_head_dim(m, name)) > 0) {
            int64_t rows = t->n_dims ? t->ne[t->n_dims > 1 ? 1 : 0] : 1;
            if (t->n_dims > 2 || w->rope_head_dim % 2 || rows % w->rope_head_dim)
                return tern_io_error(
                    TERN_E_FORMAT, "%s: tensor '%s' has %lld rows, not whole heads of %lld",
                    tern_gguf_path(m->g), t->name, (long long)rows, (long long)w->rope_head_dim);
        }
    }
    qsort(m->weights, m->n_weights, sizeof *m->weights, cmp_weight);
    return TERN_OK;
}

enum tern_status tern_gguf_model_open(const char *path, struct tern_gguf_model **out)
{
    *out = NULL;
    struct tern_gguf_model *m = tern_calloc(1, sizeof *m);
    if (!m) return TERN_E_NO_MEMORY;
    const struct arch_row *a = NULL;
    enum tern_status st = tern_gguf_open(path, &m->g);
    if (!st) st = find_arch(m->g, &a);
    if (!st) st = tern_gguf_hf_config(m->g, &m->config);
    if (!st) st = build_view(m, a);
    if (st) {
        tern_gguf_model_close(m);
        return st;
    }
    *out = m;
    return TERN_OK;
}

void tern_gguf_model_close(struct tern_gguf_model *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_weights; i++) tern_free(m->weights[i].hf_name);
    tern_free(m->weights);
    tern_free(m->unmapped);
    tern_json_doc_deinit(&m->config);
    tern_gguf_close(m->g);
    tern_free(m);
}

const struct tern_gguf_weight *tern_gguf_model_find(const struct tern_gguf_model *m,
                                                    const char *hf_name)
{
    struct tern_gguf_weight key = {.hf_name = (char *)hf_name};
    return m->n_weights ? bsearch(&key, m->weights, m->n_weights, sizeof key, cmp_weight) : NULL;
}
