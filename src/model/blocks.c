/*
 * blocks.c — the shared blocks every layer plan is run with, and the layer
 * loop, written once against the backend op interface.
 *
 *   x = embed(ids) (* embed_scale)                   residual = x  (F32)
 *   [Gemma 4: per-layer inputs from the ids and x, one [T, P] slice a layer]
 *   h = norm(x, layer 0's attn_norm)
 *   for each layer (plan p):
 *     q|k|v = h [q_proj | k_proj | v_proj]          one [T, QD + 2 KD] buffer (one
 *                                                  matmul when fused at load;
 *                                                  k_eq_v: v is the raw k; a layer
 *                                                  that shares K/V projects q only)
 *     v = rmsnorm(v)                               p.v_norm
 *     q, k = q_norm/k_norm, then rope at the batch positions (p.rope)
 *     cache[slot_mapping] = k, v                   (own K/V only; one qk_rope_store
 *                                                  op where the backend has it, or
 *                                                  with the projection one
 *                                                  matmul_rope_store)
 *     a = o_proj(attention(q, cache of p.kv_source))  causal, GQA, window, softcap
 *     a = norm(a, attn_post_norm)                  p.attn_post_norm
 *     x += a;  h = norm(x, ffn_norm)               one add_rmsnorm
 *     f = down(act(h gate) * (h up))               (SiLU: one matmul_glu where the
 *                                                  backend has it)
 *     f = norm(f, ffn_post_norm)                   p.ffn_post_norm
 *     x += f                                       (with the next layer's norm: one
 *                                                  add_rmsnorm, unless an extra follows)
 *     x += norm(pli_proj(gelu(x pli_gate) * pli[l]), pli_post_norm)   p.per_layer_input
 *     x *= layer_scalar                            p.layer_scalar
 *   logits = lm_head(norm(x[logits_idx])) (softcapped by final_softcap)
 *   x = norm(x) over every row, when f->want_hidden (the final hidden states, in place)
 *
 * Depends on model.h and the backend interface.
 */
#include "model/model.h"

#include <math.h>

/* A view of the first `rows` rows of a scratch tensor. */
static struct tern_dtensor rows_of(const struct tern_dtensor *t, int64_t rows)
{
    return tern_dtensor_rows(t, 0, rows);
}

/* Layer l's q|k|v rows [T, QD + 2 KD] and attention output [T, QD]: views
 * of the scratch (as wide as the widest layer) at this layer's widths. */
static void attn_views(const struct tern_layer_plan *p, const struct tern_fwd *f, int64_t T,
                       struct tern_dtensor *qkv, struct tern_dtensor *attn)
{
    int64_t qd = (int64_t)p->attn.n_heads * p->attn.head_dim;
    int64_t kvd = (int64_t)p->attn.n_kv_heads * p->attn.head_dim;
    *qkv = rows_of(&f->qkv, T);
    qkv->shape[1] = qd + 2 * kvd;
    if (attn) {
        *attn = rows_of(&f->attn, T);
        attn->shape[1] = qd;
    }
}

/* The batch as layer l's attention sees it: its KV group's block tables
 * and slots. */
static const struct tern_batch_dev *batch_of(const struct tern_model_core *m,
                                             const struct tern_fwd *f, int32_t l)
{
    int g = m->layer_group[l];
    return g ? &f->group_batch[g] : &f->batch;
}

/* The layer's rope. */
static const struct tern_rope *rope_of(const struct tern_model_core *m,
                                       const struct tern_layer_plan *p)
{
    return &m->ropes[p->rope];
}

/* q|k|v of a layer that keeps its own K/V, normed, roped and stored. */
static enum tern_status qkv_own(struct tern_model_core *m, struct tern_fwd *f,
                                const struct tern_layer *ly, const struct tern_layer_plan *p,
                                struct tern_kv_layer *kvl, const struct tern_batch_dev *bd,
                                int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_attn_params *a = &p->attn;
    float eps = m->hp.rms_norm_eps;
    int64_t qd = (int64_t)a->n_heads * a->head_dim, kvd = (int64_t)a->n_kv_heads * a->head_dim;
    struct tern_dtensor h = rows_of(&f->h, T), qkv;
    attn_views(p, f, T, &qkv, NULL);
    bool fused = ly->qkv_proj.weight.buf != NULL;
    if (fused && ops->matmul_rope_store && ops->qk_rope_store && !p->qk_norm && !p->v_norm)
        /* the projection, rope and the cache stores in one op */
        return ops->matmul_rope_store(be, &h, &ly->qkv_proj, &qkv, rope_of(m, p), a, bd, kvl);
    if (fused) {
        TERN_TRY(ops->matmul(be, &h, &ly->qkv_proj, &qkv, 0));
    } else {
        TERN_TRY(ops->matmul(be, &h, &ly->q_proj, &qkv, 0));
        TERN_TRY(ops->matmul(be, &h, &ly->k_proj, &qkv, qd));
        TERN_TRY(ops->matmul(be, &h, &ly->v_proj, &qkv, qd + kvd));
    }
    if (p->v_norm)
        TERN_TRY(ops->head_rmsnorm(be, &qkv, qd + kvd, a->n_kv_heads, a->head_dim, NULL, eps));
    const struct tern_dtensor *qw = p->qk_norm ? &ly->q_norm : NULL;
    const struct tern_dtensor *kw = p->qk_norm ? &ly->k_norm : NULL;
    if (ops->qk_rope_store) /* head norms, rope and the KV store in one op */
        return ops->qk_rope_store(be, &qkv, qw, kw, eps, rope_of(m, p), a, bd, kvl);
    if (p->qk_norm) {
        TERN_TRY(ops->head_rmsnorm(be, &qkv, 0, a->n_heads, a->head_dim, qw, eps));
        TERN_TRY(ops->head_rmsnorm(be, &qkv, qd, a->n_kv_heads, a->head_dim, kw, eps));
    }
    /* the k heads follow the q heads: one rope over both */
    TERN_TRY(ops->rope(be, &qkv, 0, a->n_heads + a->n_kv_heads, &f->batch.positions,
                       rope_of(m, p)));
    return ops->kv_store(be, &qkv, qd, qd + kvd, bd, kvl);
}

/* q of a layer that reads another layer's K/V: projected, normed, roped. */
static enum tern_status q_only(struct tern_model_core *m, struct tern_fwd *f,
                               const struct tern_layer *ly, const struct tern_layer_plan *p,
                               int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_attn_params *a = &p->attn;
    struct tern_dtensor h = rows_of(&f->h, T), qkv;
    attn_views(p, f, T, &qkv, NULL);
    TERN_TRY(ops->matmul(be, &h, &ly->q_proj, &qkv, 0));
    if (p->qk_norm)
        TERN_TRY(ops->head_rmsnorm(be, &qkv, 0, a->n_heads, a->head_dim, &ly->q_norm,
                                   m->hp.rms_norm_eps));
    return ops->rope(be, &qkv, 0, a->n_heads, &f->batch.positions, rope_of(m, p));
}

/* The attention block: leaves o_proj(attention) in f->proj (post-normed
 * when the plan says so). */
static enum tern_status attention_block(struct tern_model_core *m, struct tern_fwd *f,
                                        struct tern_kv_cache *kv, int32_t l, int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_layer *ly = &m->w.layers[l];
    const struct tern_layer_plan *p = &m->plans[l];
    struct tern_kv_layer *kvl = &kv->layers[p->kv_source];
    struct tern_dtensor qkv, attn, proj = rows_of(&f->proj, T);
    attn_views(p, f, T, &qkv, &attn);
    if (p->kv_source == l) TERN_TRY(qkv_own(m, f, ly, p, kvl, batch_of(m, f, l), T));
    else TERN_TRY(q_only(m, f, ly, p, T));
    TERN_TRY(ops->attention(be, &qkv, kvl, batch_of(m, f, l), &p->attn, &attn));
    TERN_TRY(ops->matmul(be, &attn, &ly->o_proj, &proj, 0));
    if (p->attn_post_norm)
        TERN_TRY(ops->rmsnorm(be, &proj, &ly->attn_post_norm, m->hp.rms_norm_eps, &proj));
    return TERN_OK;
}

/* The feed-forward block on h: leaves down(act(gate) * up) in f->proj
 * (post-normed when the plan says so). */
static enum tern_status mlp_block(struct tern_model_core *m, struct tern_fwd *f, int32_t l,
                                  int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_layer *ly = &m->w.layers[l];
    const struct tern_layer_plan *p = &m->plans[l];
    struct tern_dtensor h = rows_of(&f->h, T), gu = rows_of(&f->gate_up, T);
    struct tern_dtensor act = rows_of(&f->act, T), proj = rows_of(&f->proj, T);
    /* gate_up and act are as wide as the widest layer: views of this one's width */
    gu.shape[1] = 2 * p->intermediate;
    act.shape[1] = p->intermediate;
    bool fused = ly->gate_up_proj.weight.buf != NULL;
    if (fused && p->act == TERN_ACT_SILU && ops->matmul_glu) { /* SiLU in the GEMV epilogue */
        TERN_TRY(ops->matmul_glu(be, &h, &ly->gate_up_proj, &gu, &act));
    } else {
        if (fused) {
            TERN_TRY(ops->matmul(be, &h, &ly->gate_up_proj, &gu, 0));
        } else {
            TERN_TRY(ops->matmul(be, &h, &ly->gate_proj, &gu, 0));
            TERN_TRY(ops->matmul(be, &h, &ly->up_proj, &gu, p->intermediate));
        }
        if (p->act == TERN_ACT_SILU) TERN_TRY(ops->silu_mul(be, &gu, &act));
        else TERN_TRY(ops->act_mul(be, &gu, 0, &gu, p->intermediate, TERN_GLU_GELU_TANH, &act));
    }
    TERN_TRY(ops->matmul(be, &act, &ly->down_proj, &proj, 0));
    if (p->ffn_post_norm)
        TERN_TRY(ops->rmsnorm(be, &proj, &ly->ffn_post_norm, m->hp.rms_norm_eps, &proj));
    return TERN_OK;
}

/* Gemma 4's per-layer inputs, before the layers: for every token and layer
 * l, pli[:, l P : (l + 1) P] =
 *   (norm(x W_model_proj^T * hidden^-1/2) + embed_per_layer(id) * sqrt(P)) * 2^-1/2
 * over the (scaled) embedding x in the residual. */
static enum tern_status per_layer_inputs(struct tern_model_core *m, struct tern_fwd *f, int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_hparams *hp = &m->hp;
    struct tern_dtensor res = rows_of(&f->residual, T);
    struct tern_dtensor pli = rows_of(&f->pli, T), tmp = rows_of(&f->pli_tmp, T);
    int32_t P = hp->per_layer_dim, L = hp->num_hidden_layers;
    TERN_TRY(ops->get_rows(be, &m->w.embed_per_layer, &f->batch.token_ids, &pli));
    TERN_TRY(ops->scale(be, &pli, sqrtf((float)P), NULL, &pli));
    TERN_TRY(ops->matmul(be, &res, &m->w.pli_model_proj, &tmp, 0));
    TERN_TRY(ops->scale(be, &tmp, 1.0f / sqrtf((float)hp->hidden_size), NULL, &tmp));
    TERN_TRY(ops->head_rmsnorm(be, &tmp, 0, L, P, &m->w.pli_proj_norm, hp->rms_norm_eps));
    TERN_TRY(ops->add(be, &tmp, &pli, &pli));
    return ops->scale(be, &pli, 1.0f / sqrtf(2.0f), NULL, &pli);
}

/* x += norm(pli_proj(gelu(x pli_gate) * pli[layer l]), pli_post_norm). */
static enum tern_status per_layer_block(struct tern_model_core *m, struct tern_fwd *f, int32_t l,
                                        int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_layer *ly = &m->w.layers[l];
    int64_t P = m->hp.per_layer_dim;
    struct tern_dtensor res = rows_of(&f->residual, T), pli = rows_of(&f->pli, T);
    struct tern_dtensor gate = rows_of(&f->gate_up, T), act = rows_of(&f->act, T);
    struct tern_dtensor proj = rows_of(&f->proj, T), h = rows_of(&f->h, T);
    gate.shape[1] = P;
    act.shape[1] = P;
    /* h = x in the activation dtype: the gate's input */
    TERN_TRY(ops->scale(be, &res, 1.0f, NULL, &h));
    TERN_TRY(ops->matmul(be, &h, &ly->pli_gate, &gate, 0));
    TERN_TRY(ops->act_mul(be, &gate, 0, &pli, (int64_t)l * P, TERN_GLU_GELU_TANH, &act));
    TERN_TRY(ops->matmul(be, &act, &ly->pli_proj, &proj, 0));
    TERN_TRY(ops->rmsnorm(be, &proj, &ly->pli_post_norm, m->hp.rms_norm_eps, &proj));
    return ops->add(be, &res, &proj, &res);
}

/* x += f->proj, then the layer's extras, then h = norm(x, next_norm)
 * (next_norm NULL after the last layer: the final norm runs over the logits
 * rows). With no extras the add and the norm are one add_rmsnorm. */
static enum tern_status layer_end(struct tern_model_core *m, struct tern_fwd *f, int32_t l,
                                  const struct tern_dtensor *next_norm, int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_layer_plan *p = &m->plans[l];
    float eps = m->hp.rms_norm_eps;
    struct tern_dtensor res = rows_of(&f->residual, T), proj = rows_of(&f->proj, T);
    struct tern_dtensor h = rows_of(&f->h, T);
    bool extras = p->per_layer_input || p->layer_scalar;
    if (!extras && next_norm) return ops->add_rmsnorm(be, &res, &proj, next_norm, eps, &h);
    TERN_TRY(ops->add(be, &res, &proj, &res));
    if (p->per_layer_input) TERN_TRY(per_layer_block(m, f, l, T));
    if (p->layer_scalar)
        TERN_TRY(ops->scale(be, &res, 1.0f, &m->w.layers[l].layer_scalar, &res));
    return next_norm ? ops->rmsnorm(be, &res, next_norm, eps, &h) : TERN_OK;
}

/* logits = lm_head(norm(x[logits_idx])), softcapped where the model says. */
static enum tern_status logits_block(struct tern_model_core *m, struct tern_fwd *f, int64_t T,
                                     int32_t n_logits)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_hparams *hp = &m->hp;
    if (!m->w.lm_head.weight.buf)
        return tern_error(TERN_E_UNSUPPORTED, "the model has no language-model head (lm_head): "
                          "it computes embeddings, not logits");
    struct tern_linear hidden = {0};
    hidden.weight = rows_of(&f->residual, T);
    hidden.in_features = hp->hidden_size;
    hidden.out_features = T;
    struct tern_dtensor hl = rows_of(&f->hl, n_logits), logits = rows_of(&f->logits, n_logits);
    TERN_TRY(ops->get_rows(be, &hidden, &f->batch.logits_idx, &hl));
    TERN_TRY(ops->rmsnorm(be, &hl, &m->w.norm, hp->rms_norm_eps, &hl));
    TERN_TRY(ops->matmul(be, &hl, &m->w.lm_head, &logits, 0));
    return hp->final_softcap > 0 ? ops->softcap(be, &logits, hp->final_softcap) : TERN_OK;
}

enum tern_status tern_model_compute(struct tern_model_core *m, struct tern_fwd *f,
                                    struct tern_kv_cache *kv, int64_t T, int32_t n_logits)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_hparams *hp = &m->hp;
    struct tern_dtensor res = rows_of(&f->residual, T), h = rows_of(&f->h, T);
    int32_t n_layers = hp->num_hidden_layers;
    TERN_TRY(ops->get_rows(be, &m->w.embed_tokens, &f->batch.token_ids, &res));
    if (hp->embed_scale > 0) TERN_TRY(ops->scale(be, &res, hp->embed_scale, NULL, &res));
    if (hp->per_layer_dim) TERN_TRY(per_layer_inputs(m, f, T));
    /* Each layer leaves the next one's normalised input in h. */
    if (n_layers > 0)
        TERN_TRY(ops->rmsnorm(be, &res, &m->w.layers[0].attn_norm, hp->rms_norm_eps, &h));
    for (int32_t l = 0; l < n_layers; l++) {
        TERN_TRY(attention_block(m, f, kv, l, T));
        struct tern_dtensor proj = rows_of(&f->proj, T);
        TERN_TRY(ops->add_rmsnorm(be, &res, &proj, &m->w.layers[l].ffn_norm, hp->rms_norm_eps,
                                  &h));
        TERN_TRY(mlp_block(m, f, l, T));
        TERN_TRY(layer_end(m, f, l, l + 1 < n_layers ? &m->w.layers[l + 1].attn_norm : NULL, T));
    }
    if (n_logits) TERN_TRY(logits_block(m, f, T, n_logits));
    /* after the logits rows were read from it: the final hidden states, F32, in place */
    return f->want_hidden ? ops->rmsnorm(be, &res, &m->w.norm, hp->rms_norm_eps, &res) : TERN_OK;
}
