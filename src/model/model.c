/*
 * model.c — loading a model: the family reads config.json and plans every
 * layer, the plans are checked against each other, the weights are bound
 * (load.c), the ropes' frequencies are uploaded, and the backend is offered
 * the whole decode step where the plan is one it can take.
 */
#include "model/arch.h"

#include <math.h>
#include <string.h>

/* Checks what a family's plan for layer l promises (so a family cannot
 * hand the forward an inconsistent layer); errors name the config. */
static enum tern_status check_plan(const struct tern_json_doc *cfg, const struct tern_model_core *m,
                                   int32_t l)
{
    const struct tern_layer_plan *p = &m->plans[l];
    const struct tern_attn_params *a = &p->attn;
    const struct tern_hparams *hp = &m->hp;
    if (a->n_heads < 1 || a->n_kv_heads < 1 || a->n_heads % a->n_kv_heads || a->head_dim < 2 ||
        a->head_dim % 2 || a->head_dim > 1024)
        return tern_error(TERN_E_FORMAT, "%s: layer %d: %d heads, %d kv heads of head_dim %d "
                          "(heads a multiple of kv heads, head_dim even and at most 1024)",
                          cfg->path, l, a->n_heads, a->n_kv_heads, a->head_dim);
    if (p->rope < -1 || p->rope >= hp->n_ropes)
        return tern_error(TERN_E_INTERNAL, "layer %d: rope %d of %d", l, p->rope, hp->n_ropes);
    if (p->kv_source < 0 || p->kv_source > l)
        return tern_error(TERN_E_FORMAT, "%s: layer %d reads the K/V of layer %d", cfg->path, l,
                          p->kv_source);
    if (p->kv_source != l) {
        const struct tern_layer_plan *src = &m->plans[p->kv_source];
        if (src->kv_source != p->kv_source || src->attn.n_kv_heads != a->n_kv_heads ||
            src->attn.head_dim != a->head_dim || src->attn.sliding_window != a->sliding_window)
            return tern_error(TERN_E_FORMAT, "%s: layer %d shares the K/V of layer %d, whose "
                              "geometry or window differs", cfg->path, l, p->kv_source);
    }
    if (a->sliding_window < 0 || (p->ffn != TERN_FFN_MOE && p->intermediate < 1))
        return tern_error(TERN_E_FORMAT, "%s: layer %d: window %d, intermediate %lld", cfg->path,
                          l, a->sliding_window, (long long)p->intermediate);
    if ((p->qk_norm && p->qk_norm_full) || (p->mlp_plain && p->act != TERN_ACT_GELU_TANH &&
                                             p->act != TERN_ACT_SILU) ||
        (p->parallel && (p->no_input_norms || p->ffn_post_norm || p->attn_post_norm)))
        return tern_error(TERN_E_INTERNAL, "layer %d: inconsistent plan", l);
    const struct tern_moe_plan *mp = &p->moe;
    if (p->ffn != TERN_FFN_MLP &&
        (mp->n_experts < 1 || mp->n_experts > 65536 || mp->top_k < 1 ||
         mp->top_k > mp->n_experts || mp->top_k > TERN_MOE_MAX_K || mp->intermediate < 1))
        return tern_error(TERN_E_FORMAT, "%s: layer %d: %d experts, %d per token, each of "
                          "intermediate %lld (1 <= per token <= experts, per token at most %d)",
                          cfg->path, l, mp->n_experts, mp->top_k, (long long)mp->intermediate,
                          TERN_MOE_MAX_K);
    return TERN_OK;
}

/* Rope r's table for a forward state whose sequences reach `context`
 * tokens: geometry from the model's, inv_freq a new buffer. */
enum tern_status tern_model_rope_make(struct tern_model_core *m, int32_t r, int64_t context,
                                      struct tern_rope *out)
{
    float inv[512];
    *out = m->ropes[r];
    memset(&out->inv_freq, 0, sizeof out->inv_freq);
    int32_t half = out->rotary_dim / 2;
    tern_rope_inv_freq(&m->hp.ropes[r], out->head_dim, out->rotary_dim, context, inv, &out->mscale);
    TERN_TRY(tern_dtensor_alloc(m->be, TERN_DTYPE_F32, 1, (int64_t[]){half}, &out->inv_freq));
    enum tern_status st =
        m->be->ops->upload(m->be, &out->inv_freq, inv, (size_t)half * sizeof(float));
    if (st != TERN_OK) tern_dtensor_free(m->be, &out->inv_freq);
    return st;
}

/* One rope table per rope of the config, at the head_dim of the layers
 * that use it (they must agree); make false: only the checks. */
static enum tern_status ropes_init(const struct tern_json_doc *cfg, struct tern_model_core *m,
                                   bool make)
{
    const struct tern_hparams *hp = &m->hp;
    for (int32_t r = 0; r < hp->n_ropes; r++) {
        const struct tern_rope_cfg *rc = &hp->ropes[r];
        int32_t hd = 0;
        for (int32_t l = 0; l < hp->num_hidden_layers; l++) {
            const struct tern_layer_plan *p = &m->plans[l];
            if (p->rope != r) continue;
            if (hd && hd != p->attn.head_dim)
                return tern_error(TERN_E_UNSUPPORTED, "%s: layers of head_dim %d and %d share "
                                  "one rope", cfg->path, hd, p->attn.head_dim);
            hd = p->attn.head_dim;
        }
        if (!hd) continue;
        bool prop = rc->kind == TERN_ROPE_PROPORTIONAL;
        int32_t rot = prop ? hd : (int32_t)(hd * rc->partial_rotary_factor);
        if (rot < 2 || rot > hd || rot % 2 || rc->partial_rotary_factor <= 0 ||
            rc->partial_rotary_factor > 1)
            return tern_error(TERN_E_FORMAT, "%s: partial_rotary_factor %g gives rotary dim %d of "
                              "head_dim %d", cfg->path, rc->partial_rotary_factor, rot, hd);
        if (rc->kind == TERN_ROPE_LONGROPE && rc->n_factors != rot / 2)
            return tern_error(TERN_E_FORMAT, "%s: rope long_factor / short_factor have %d "
                              "entries, the rotary dim %d needs %d", cfg->path, rc->n_factors, rot,
                              rot / 2);
        struct tern_rope *rope = &m->ropes[r];
        rope->head_dim = hd;
        rope->rotary_dim = rot;
        rope->interleaved = rc->interleaved;
        rope->mscale = 1.0f;
        /* a rope that depends on the context gets its table per forward state */
        m->rope_by_context[r] = tern_rope_cfg_by_context(rc);
        if (make && !m->rope_by_context[r])
            TERN_TRY(tern_model_rope_make(m, r, rc->max_pos, rope));
    }
    return TERN_OK;
}

/* KV groups: the owning layers by window, full attention first. */
static enum tern_status kv_groups(struct tern_model_core *m)
{
    int32_t L = m->hp.num_hidden_layers, *w = m->kv_group_window, n = 0;
    m->layer_group = tern_calloc((size_t)L, 1);
    if (!m->layer_group) return TERN_E_NO_MEMORY;
    for (int pass = 0; pass < 2; pass++) /* full first, then windows in layer order */
        for (int32_t l = 0; l < L; l++) {
            int32_t win = m->plans[l].attn.sliding_window;
            if (m->plans[l].kv_source != l || (pass == 0) != (win == 0)) continue;
            int32_t g = 0;
            while (g < n && w[g] != win) g++;
            if (g == n) {
                if (n == TERN_MAX_KV_GROUPS)
                    return tern_error(TERN_E_UNSUPPORTED, "more than %d distinct attention "
                                      "windows", TERN_MAX_KV_GROUPS);
                w[n++] = win;
            }
        }
    m->n_kv_groups = n;
    for (int32_t l = 0; l < L; l++) {
        int32_t win = m->plans[m->plans[l].kv_source].attn.sliding_window, g = 0;
        while (w[g] != win) g++;
        m->layer_group[l] = (int8_t)g;
    }
    return TERN_OK;
}

bool tern_model_is_plain(const struct tern_model_core *m)
{
    const struct tern_hparams *hp = &m->hp;
    if (hp->embed_scale > 0 || hp->final_softcap > 0 || hp->per_layer_dim || hp->norm_plus_one ||
        hp->logit_scale > 0 || hp->norm != TERN_NORM_RMS)
        return false;
    for (int32_t r = 0; r < hp->n_ropes; r++)
        if (m->rope_by_context[r]) return false;
    for (int32_t l = 0; l < hp->num_hidden_layers; l++) {
        const struct tern_layer_plan *p = &m->plans[l], *p0 = &m->plans[0];
        if (p->attn.sliding_window || p->attn.softcap != 0.0f || p->v_norm || p->k_eq_v ||
            p->kv_source != l || p->attn_post_norm || p->ffn_post_norm || p->act != TERN_ACT_SILU ||
            p->layer_scalar || p->per_layer_input || p->rope != 0 || p->ffn != TERN_FFN_MLP ||
            p->attn.n_heads != p0->attn.n_heads || p->attn.n_kv_heads != p0->attn.n_kv_heads ||
            p->attn.head_dim != p0->attn.head_dim || p->intermediate != p0->intermediate ||
            p->qk_norm != p0->qk_norm || p->qk_norm_full || p->no_input_norms || p->parallel ||
            (p->residual_scale != 0.0f && p->residual_scale != 1.0f) || p->mlp_plain ||
            p->attn.scale != 1.0f / sqrtf((float)p->attn.head_dim))
            return false;
    }
    return true;
}

/* The backend's one-op decode step, where it has one and the model is the
 * plain block it takes (and not in deterministic mode: its sums run in
 * another order than the op-by-op path's). A model that does not fit runs
 * op by op; the reason goes to the info log. */
static void step_prepare(struct tern_model_core *m)
{
    const struct tern_backend_ops *ops = m->be->ops;
    const struct tern_hparams *hp = &m->hp;
    if (!ops->step_prepare || !ops->step_run || m->be->deterministic || !m->w.lm_head.weight.buf)
        return;
    if (!tern_model_is_plain(m)) {
        tern_log(TERN_LOG_INFO, "forward: decode runs op by op (layers other than the plain "
                 "llama block)");
        return;
    }
    struct tern_step_layer *ly = tern_calloc((size_t)hp->num_hidden_layers, sizeof *ly);
    if (!ly) return;
    for (int l = 0; l < hp->num_hidden_layers; l++) {
        const struct tern_layer *w = &m->w.layers[l];
        ly[l].qkv = &w->qkv_proj;
        ly[l].o = &w->o_proj;
        ly[l].gate_up = &w->gate_up_proj;
        ly[l].down = &w->down_proj;
        ly[l].in_norm = &w->attn_norm;
        ly[l].post_norm = &w->ffn_norm;
    }
    struct tern_step_desc d = {
        .n_layers = hp->num_hidden_layers,
        .layers = ly,
        .final_norm = &m->w.norm,
        .lm_head = &m->w.lm_head,
        .hidden = hp->hidden_size,
        .intermediate = m->plans[0].intermediate,
        .vocab = hp->vocab_size,
        .eps = hp->rms_norm_eps,
        .qk_norm = m->plans[0].qk_norm,
        .rope = &m->ropes[0],
        .attn = &m->plans[0].attn,
    };
    enum tern_status st = ops->step_prepare(m->be, &d, &m->step);
    if (st != TERN_OK) {
        m->step = NULL;
        tern_log(TERN_LOG_INFO, "forward: decode runs op by op (%s)", tern_last_error());
    }
    tern_free(ly);
}

enum tern_status tern_hparams_read(const struct tern_json_doc *cfg, const struct tern_arch *arch,
                                   struct tern_hparams *hp)
{
    const struct tern_family *fam = arch->family;
    void *fh = tern_calloc(1, fam->hparams_bytes ? fam->hparams_bytes : 1);
    if (!fh) return TERN_E_NO_MEMORY;
    enum tern_status st = fam->read_hparams(cfg, arch->variant, hp, fh);
    tern_free(fh);
    return st;
}

/* A multimodal snapshot's text model: config.json's text_config, as a
 * document that borrows it (never deinit). */
static struct tern_json_doc text_config(const struct tern_json_doc *cfg, char *path, size_t cap)
{
    const json_t *tc = json_object_get(cfg->root, "text_config");
    if (!json_is_object(tc)) return *cfg;
    snprintf(path, cap, "%s: text_config", cfg->path);
    struct tern_json_doc d = {(json_t *)tc, path};
    return d;
}

/* The family and its plans from config.json. */
static enum tern_status plan_model(const struct tern_json_doc *top, struct tern_model_core *m)
{
    const json_t *archs = json_object_get(top->root, "architectures");
    const json_t *a0 = json_is_array(archs) ? json_array_get(archs, 0) : NULL;
    if (!json_is_string(a0))
        return tern_error(TERN_E_FORMAT, "%s: key 'architectures' must be a non-empty list of "
                          "strings", top->path);
    const char *name = json_string_value(a0);
    m->arch = tern_arch_find(name);
    if (!m->arch)
        return tern_error(TERN_E_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)",
                          top->path, name, tern_arch_supported());
    char path[512];
    struct tern_json_doc cfg = text_config(top, path, sizeof path);
    const struct tern_family *fam = m->arch->family;
    m->family_hp = tern_calloc(1, fam->hparams_bytes ? fam->hparams_bytes : 1);
    if (!m->family_hp) return TERN_E_NO_MEMORY;
    TERN_TRY(fam->read_hparams(&cfg, m->arch->variant, &m->hp, m->family_hp));
    /* An MLX snapshot (mlx_lm.convert writes "quantization") is mlx-lm's model. */
    if (m->hp.embed_scale_bf16_mlx && json_is_object(json_object_get(top->root, "quantization")))
        m->hp.embed_scale = tern_bf16_to_f32(tern_f32_to_bf16(m->hp.embed_scale));
    m->plans = tern_calloc((size_t)m->hp.num_hidden_layers, sizeof *m->plans);
    if (!m->plans) return TERN_E_NO_MEMORY;
    for (int32_t l = 0; l < m->hp.num_hidden_layers; l++) {
        fam->plan_layer(&m->hp, m->family_hp, m->arch->variant, l, &m->plans[l]);
        TERN_TRY(check_plan(&cfg, m, l));
    }
    return kv_groups(m);
}

enum tern_status tern_model_core_load(struct tern_wsource *ws, const struct tern_json_doc *cfg,
                                      const struct tern_backend_params *bp, bool progress,
                                      struct tern_model_core *m)
{
    memset(m, 0, sizeof *m);
    enum tern_status st = plan_model(cfg, m);
    if (st == TERN_OK) st = tern_backend_create(bp, &m->be);
    if (st == TERN_OK) {
        char path[512];
        struct tern_json_doc tc = text_config(cfg, path, sizeof path);
        st = tern_weights_load(m, ws, cfg, progress); /* quantization is top-level */
        if (st == TERN_OK) st = ropes_init(&tc, m, true);
    }
    if (st != TERN_OK) {
        tern_model_core_free(m);
        return st;
    }
    step_prepare(m);
    return TERN_OK;
}

enum tern_status tern_model_core_check(struct tern_wsource *ws, const struct tern_json_doc *cfg,
                                       struct tern_model_core *m)
{
    memset(m, 0, sizeof *m);
    TERN_TRY(plan_model(cfg, m));
    char path[512];
    struct tern_json_doc tc = text_config(cfg, path, sizeof path);
    TERN_TRY(tern_weights_check(m, ws, cfg));
    return ropes_init(&tc, m, false);
}

void tern_model_core_free(struct tern_model_core *m)
{
    if (m->be) {
        if (m->step) m->be->ops->step_free(m->be, m->step);
        for (int r = 0; r < TERN_MAX_ROPES; r++) tern_dtensor_free(m->be, &m->ropes[r].inv_freq);
        tern_weights_free(m->be, &m->w);
        tern_backend_destroy(m->be);
    } else {
        tern_weights_free(NULL, &m->w); /* a check's: descriptions only */
    }
    tern_free(m->plans);
    tern_free(m->layer_group);
    tern_free(m->family_hp);
    memset(m, 0, sizeof *m);
}
