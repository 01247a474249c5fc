/*
 * model_api.c — tern_model_* of the public API: opening a model (a Hugging
 * Face snapshot directory: config.json, generation_config.json, safetensors,
 * tokenizer, chat template, sentence-transformers pooling files; or a GGUF
 * file: the config its metadata stands for, its tensors, the tokenizer and
 * chat template in its metadata) and describing it.
 */
#include "api/api.h"
#include "model/arch.h"
#include "text/tok_gguf.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* A regular file that starts with GGUF's magic. */
static bool is_gguf(const char *path)
{
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    bool yes = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f) fclose(f);
    return yes;
}

static bool is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static enum tern_status open_generation_config(struct tern_model *m)
{
    char *path = tern_path_join(m->dir, "generation_config.json");
    if (!path) return TERN_E_NO_MEMORY;
    enum tern_status st = TERN_OK;
    if (tern_file_exists(path)) {
        st = tern_json_doc_load(path, &m->gen_cfg);
        if (st == TERN_OK) m->has_gen_cfg = true;
    }
    tern_free(path);
    return st;
}

static enum tern_status open_text(struct tern_model *m)
{
    char *path = tern_path_join(m->dir, "tokenizer.json");
    if (!path) return TERN_E_NO_MEMORY;
    bool has = tern_file_exists(path);
    tern_free(path);
    if (has) TERN_TRY(tern_tokenizer_open(m->dir, &m->tok));
    enum tern_status st = tern_chat_template_load(m->dir, NULL, &m->tmpl);
    if (st == TERN_E_NOT_FOUND) {
        m->tmpl = NULL;
        tern_error_clear();
        st = TERN_OK;
    }
    return st;
}

/* A GGUF's tokenizer and chat template, from its metadata (each optional). */
static enum tern_status open_text_gguf(struct tern_model *m)
{
    const struct tern_gguf *g = m->gguf->g;
    if (tern_gguf_find(g, "tokenizer.ggml.tokens")) TERN_TRY(tern_tokenizer_from_gguf(g, &m->tok));
    enum tern_status st = tern_chat_template_from_gguf(g, NULL, &m->tmpl);
    if (st == TERN_E_NOT_FOUND) {
        m->tmpl = NULL;
        tern_error_clear();
        st = TERN_OK;
    }
    return st;
}

/* A snapshot directory's config, generation config and weights. */
static enum tern_status open_snapshot(struct tern_model *m)
{
    char *cfg_path = tern_path_join(m->dir, "config.json");
    if (!cfg_path) return TERN_E_NO_MEMORY;
    enum tern_status st = TERN_OK;
    if (!tern_file_exists(cfg_path))
        st = tern_error(TERN_E_NOT_FOUND, "%s: no config.json (is this a Hugging Face snapshot "
                        "directory or a GGUF file?)", m->dir);
    if (st == TERN_OK) st = tern_json_doc_load(cfg_path, &m->cfg);
    tern_free(cfg_path);
    if (st == TERN_OK) st = open_generation_config(m);
    if (st == TERN_OK) st = tern_snapshot_open(m->dir, &m->snap);
    if (st == TERN_OK) st = tern_wsource_init_snapshot(&m->ws, m->snap);
    return st;
}

/* A GGUF file: its view (config from the metadata, tensors by Hugging Face
 * name). There is no generation_config: the config's eos_token_id list
 * already holds the file's eos, eot and eom ids (the stop ids). */
static enum tern_status open_gguf(struct tern_model *m)
{
    TERN_TRY(tern_gguf_model_open(m->dir, &m->gguf));
    m->cfg.root = json_incref(m->gguf->config.root);
    m->cfg.path = tern_strdup(m->gguf->config.path);
    if (!m->cfg.path) return TERN_E_NO_MEMORY;
    return tern_wsource_init_gguf(&m->ws, m->gguf);
}

enum tern_status tern_model_open(const char *dir, const struct tern_model_params *params,
                                 struct tern_model **out)
{
    *out = NULL;
    if (!dir || !*dir) return tern_error(TERN_E_INVALID_ARG, "model directory: empty path");
    struct tern_model_params p = params ? *params : tern_model_default_params();
    struct tern_model *m = tern_calloc(1, sizeof *m);
    if (!m) return TERN_E_NO_MEMORY;
    enum tern_status st;
    m->dir = tern_strdup(dir);
    if (!m->dir) {
        st = TERN_E_NO_MEMORY;
        goto fail;
    }
    bool gguf = is_regular_file(dir);
    if (gguf && !is_gguf(dir)) {
        st = tern_error(TERN_E_FORMAT, "%s: a file that is not GGUF (tern opens a Hugging Face "
                        "snapshot directory or a .gguf file)", dir);
        goto fail;
    }
    if ((st = gguf ? open_gguf(m) : open_snapshot(m)) != TERN_OK) goto fail;
    struct tern_backend_params bp = {p.device, p.device_index, 0, false};
    if ((st = tern_model_core_load(&m->ws, &m->cfg, &bp, p.progress, &m->core)) != TERN_OK)
        goto fail;
    if ((st = gguf ? open_text_gguf(m) : open_text(m)) != TERN_OK) goto fail;
    if (!gguf && (st = tern_embed_cfg_load(m->dir, m->core.hp.hidden_size, &m->embed)) != TERN_OK)
        goto fail;
    if (gguf && !(m->embed.reason = tern_strdup("a GGUF file carries no sentence-transformers "
                                                "pooling config"))) {
        st = TERN_E_NO_MEMORY;
        goto fail;
    }
    *out = m;
    return TERN_OK;
fail:
    tern_model_close(m);
    return st;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

enum tern_status tern_model_check(const char *path, struct tern_model_support *out)
{
    memset(out, 0, sizeof *out);
    if (!path || !*path) return tern_error(TERN_E_INVALID_ARG, "model path: empty");
    struct tern_model *m = tern_calloc(1, sizeof *m);
    if (!m) return TERN_E_NO_MEMORY;
    enum tern_status st = TERN_OK;
    if (!(m->dir = tern_strdup(path))) st = TERN_E_NO_MEMORY;
    bool gguf = is_regular_file(path);
    if (st == TERN_OK && gguf && !is_gguf(path))
        st = tern_error(TERN_E_FORMAT, "%s: a file that is not GGUF (tern opens a Hugging Face "
                        "snapshot directory or a .gguf file)", path);
    if (st == TERN_OK) st = gguf ? open_gguf(m) : open_snapshot(m);
    if (st == TERN_OK) {
        const json_t *a = json_object_get(m->cfg.root, "architectures");
        const json_t *mt = json_object_get(m->cfg.root, "model_type");
        copy_str(out->architecture, sizeof out->architecture,
                 json_string_value(json_is_array(a) ? json_array_get(a, 0) : NULL));
        copy_str(out->model_type, sizeof out->model_type, json_string_value(mt));
        enum tern_status cst = tern_model_core_check(&m->ws, &m->cfg, &m->core);
        out->supported = cst == TERN_OK;
        if (!out->supported) copy_str(out->reason, sizeof out->reason, tern_last_error());
        if (m->core.arch) copy_str(out->family, sizeof out->family, m->core.arch->family->name);
        out->n_unused_tensors = m->core.w.n_unused;
    }
    tern_model_close(m);
    return st;
}

void tern_model_close(struct tern_model *m)
{
    if (!m) return;
    tern_model_core_free(&m->core);
    tern_wsource_deinit(&m->ws);
    tern_snapshot_close(m->snap);
    tern_gguf_model_close(m->gguf);
    tern_json_doc_deinit(&m->cfg);
    if (m->has_gen_cfg) tern_json_doc_deinit(&m->gen_cfg);
    tern_tokenizer_close(m->tok);
    tern_chat_template_destroy(m->tmpl);
    tern_embed_cfg_free(&m->embed);
    tern_free(m->dir);
    tern_free(m);
}

const struct tern_tokenizer *tern_model_tokenizer(const struct tern_model *m)
{
    return m ? m->tok : NULL;
}

const struct tern_chat_template *tern_model_chat_template(const struct tern_model *m)
{
    return m ? m->tmpl : NULL;
}

enum tern_status tern_model_get_info(const struct tern_model *m, struct tern_model_info *out)
{
    memset(out, 0, sizeof *out);
    if (!m) return tern_error(TERN_E_INVALID_ARG, "model is NULL");
    const struct tern_hparams *hp = &m->core.hp;
    const json_t *mt = json_object_get(m->cfg.root, "model_type");
    out->architecture = m->core.arch->hf_name;
    out->model_type = json_is_string(mt) ? json_string_value(mt) : "";
    static const char *const qnames[] = {"", "", "q2", "q3", "q4", "q5", "q6", "", "q8"};
    out->dtype = m->core.w.quant_bits ? qnames[m->core.w.quant_bits]
                 : m->core.w.ggml_type ? tern_ggml_type_name(m->core.w.ggml_type)
                                       : tern_dtype_name(m->core.w.dtype);
    out->n_params = m->core.w.n_params;
    out->weight_bytes = m->core.w.n_bytes;
    const struct tern_linear *emb = &m->core.w.embed_tokens;
    int64_t emb_bytes = (int64_t)tern_dtensor_bytes(&emb->weight);
    if (emb->bits) /* quantized: its scales and biases too */
        emb_bytes += (int64_t)(tern_dtensor_bytes(&emb->scales) + tern_dtensor_bytes(&emb->biases));
    out->decode_bytes = m->core.w.n_bytes;
    if (!hp->tie_word_embeddings && hp->vocab_size > 0)
        out->decode_bytes -= emb_bytes - emb_bytes / hp->vocab_size;
    out->decode_bytes -= m->core.w.expert_bytes_idle;
    out->n_layers = hp->num_hidden_layers;
    out->n_embd = hp->hidden_size;
    out->n_heads = hp->num_attention_heads;
    out->n_kv_heads = hp->num_key_value_heads;
    out->head_dim = hp->head_dim;
    out->n_ff = hp->intermediate_size;
    out->vocab_size = hp->vocab_size;
    out->context_length = hp->max_position_embeddings;
    out->bos_id = hp->bos_token_id;
    out->device = m->core.be->device;
    const struct tern_model_core *c = &m->core;
    for (int32_t l = 0; l < hp->num_hidden_layers; l++) {
        const struct tern_layer_plan *p = &c->plans[l];
        if (p->ffn != TERN_FFN_MLP && p->moe.n_experts > out->n_experts) {
            out->n_experts = p->moe.n_experts;
            out->n_experts_used = p->moe.top_k;
        }
        if (p->kv_source != l) continue; /* reads another layer's */
        int64_t per = 2 * (int64_t)p->attn.n_kv_heads * p->attn.head_dim *
                      (int64_t)tern_dtype_size(c->be->kv_dtype);
        int32_t w = p->attn.sliding_window, bs = 16;
        if (w) out->kv_bytes_windowed += per * bs * ((w - 1 + bs - 1) / bs + 1);
        else out->kv_bytes_per_token += per;
    }
    out->eos_id = hp->n_eos ? hp->eos_token_ids[0] : -1;
    out->tied_embeddings = hp->tie_word_embeddings;
    out->has_tokenizer = m->tok != NULL;
    out->has_chat_template = m->tmpl != NULL;
    out->n_unused_tensors = m->core.w.n_unused;
    return TERN_OK;
}
