/*
 * blocks.c — the shared blocks every layer plan is run with, and the layer
 * loop, written once against the backend op interface.
 *
 *   x = embed(ids) (* embed_scale)                   residual = x  (F32)
 *   [Gemma 4: per-layer inputs from the ids and x, one [T, P] slice a layer]
 *   h = norm(x, layer 0's attn_norm)               (p.no_input_norms: h = x)
 *   for each layer (plan p):
 *     q|k|v = h [q_proj | k_proj | v_proj]          one [T, QD + 2 KD] buffer (one
 *                                                  matmul when fused in the file or
 *                                                  at load; k_eq_v: v is the raw k;
 *                                                  a layer that shares K/V projects
 *                                                  q only)
 *     v = rmsnorm(v)                               p.v_norm
 *     q, k = rmsnorm over all heads                p.qk_norm_full (OLMo 2)
 *     q, k = q_norm/k_norm, then rope at the batch positions (p.rope; none: NoPE)
 *     cache[slot_mapping] = k, v                   (own K/V only; one qk_rope_store
 *                                                  op where the backend has it, or
 *                                                  with the projection one
 *                                                  matmul_rope_store)
 *     a = o_proj(attention(q, cache of p.kv_source))  causal, GQA, window, softcap
 *     a = norm(a, attn_post_norm)                  p.attn_post_norm
 *     a *= residual_scale                          p.residual_scale
 *     x += a;  h = norm(x, ffn_norm)               one add_rmsnorm (p.parallel: x += a,
 *                                                  h stays the attention's input)
 *     f = down(act(h gate) * (h up))               (SiLU: one matmul_glu where the
 *                                                  backend has it; p.mlp_plain:
 *                                                  down(act(h up)))
 *       or experts: logits = router(h) -> moe_route (top k, weights) ->
 *                   moe_experts(h) (+ the MLP beside them, p.moe says how)
 *     f = norm(f, ffn_post_norm)                   p.ffn_post_norm
 *     f *= residual_scale                          p.residual_scale
 *     x += f                                       (with the next layer's norm: one
 *                                                  add_rmsnorm, unless an extra follows)
 *     x += norm(pli_proj(gelu(x pli_gate) * pli[l]), pli_post_norm)   p.per_layer_input
 *     x *= layer_scalar                            p.layer_scalar
 *   logits = lm_head(norm(x[logits_idx])) (* logit_scale) (softcapped by final_softcap)
 *   x = norm(x) over every row, when f->want_hidden (the final hidden states, in place)
 *
 * "norm" is the model's kind (RMSNorm, or LayerNorm with or without bias:
 * hp.norm) for the input, post and final norms; head norms are RMSNorms.
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

/* The layer's rope as this forward state has it, or NULL (NoPE). */
static const struct tern_rope *rope_of(const struct tern_fwd *f, const struct tern_layer_plan *p)
{
    return p->rope < 0 ? NULL : &f->ropes[p->rope];
}

/* out = norm(x) with the model's norm kind; w NULL: out = x (a copy into
 * out's dtype), for layers without input norms. */
static enum tern_status norm_into(struct tern_model_core *m, const struct tern_dtensor *x,
                                  const struct tern_dtensor *w, const struct tern_dtensor *b,
                                  struct tern_dtensor *out)
{
    const struct tern_backend_ops *ops = m->be->ops;
    if (!w) return ops->scale(m->be, x, 1.0f, NULL, out);
    if (m->hp.norm == TERN_NORM_LAYER)
        return ops->layernorm(m->be, x, w, b && b->buf ? b : NULL, m->hp.rms_norm_eps, out);
    return ops->rmsnorm(m->be, x, w, m->hp.rms_norm_eps, out);
}

/* res += d, then h = norm(res, w, b) (w NULL: h = res): one add_rmsnorm
 * where the norm is an RMSNorm. */
static enum tern_status add_norm(struct tern_model_core *m, struct tern_dtensor *res,
                                 const struct tern_dtensor *d, const struct tern_dtensor *w,
                                 const struct tern_dtensor *b, struct tern_dtensor *h)
{
    const struct tern_backend_ops *ops = m->be->ops;
    if (w && m->hp.norm == TERN_NORM_RMS)
        return ops->add_rmsnorm(m->be, res, d, w, m->hp.rms_norm_eps, h);
    TERN_TRY(ops->add(m->be, res, d, res));
    return norm_into(m, res, w, b, h);
}

/* A block's output as it joins the residual: post-normed and scaled where
 * the plan says so. */
static enum tern_status block_out(struct tern_model_core *m, const struct tern_layer_plan *p,
                                  bool post_norm, const struct tern_dtensor *w,
                                  struct tern_dtensor *proj)
{
    if (post_norm) TERN_TRY(norm_into(m, proj, w, NULL, proj));
    if (p->residual_scale != 0.0f && p->residual_scale != 1.0f)
        TERN_TRY(m->be->ops->scale(m->be, proj, p->residual_scale, NULL, proj));
    return TERN_OK;
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
    const struct tern_rope *rope = rope_of(f, p);
    if (fused && ops->matmul_rope_store && ops->qk_rope_store && !p->qk_norm && !p->v_norm &&
        !p->qk_norm_full && rope)
        /* the projection, rope and the cache stores in one op */
        return ops->matmul_rope_store(be, &h, &ly->qkv_proj, &qkv, rope, a, bd, kvl);
    if (fused) {
        TERN_TRY(ops->matmul(be, &h, &ly->qkv_proj, &qkv, 0));
    } else {
        TERN_TRY(ops->matmul(be, &h, &ly->q_proj, &qkv, 0));
        TERN_TRY(ops->matmul(be, &h, &ly->k_proj, &qkv, qd));
        TERN_TRY(ops->matmul(be, &h, &ly->v_proj, &qkv, qd + kvd));
    }
    if (p->v_norm)
        TERN_TRY(ops->head_rmsnorm(be, &qkv, qd + kvd, a->n_kv_heads, a->head_dim, NULL, eps));
    if (p->qk_norm_full) { /* one norm over all of q, one over all of k */
        TERN_TRY(ops->head_rmsnorm(be, &qkv, 0, 1, (int32_t)qd, &ly->q_norm, eps));
        TERN_TRY(ops->head_rmsnorm(be, &qkv, qd, 1, (int32_t)kvd, &ly->k_norm, eps));
    }
    const struct tern_dtensor *qw = p->qk_norm ? &ly->q_norm : NULL;
    const struct tern_dtensor *kw = p->qk_norm ? &ly->k_norm : NULL;
    if (ops->qk_rope_store && rope) /* head norms, rope and the KV store in one op */
        return ops->qk_rope_store(be, &qkv, qw, kw, eps, rope, a, bd, kvl);
    if (p->qk_norm) {
        TERN_TRY(ops->head_rmsnorm(be, &qkv, 0, a->n_heads, a->head_dim, qw, eps));
        TERN_TRY(ops->head_rmsnorm(be, &qkv, qd, a->n_kv_heads, a->head_dim, kw, eps));
    }
    /* the k heads follow the q heads: one rope over both */
    if (rope)
        TERN_TRY(ops->rope(be, &qkv, 0, a->n_heads + a->n_kv_heads, &f->batch.positions, rope));
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
    if (p->qk_norm || p->qk_norm_full)
        TERN_TRY(ops->head_rmsnorm(be, &qkv, 0, p->qk_norm ? a->n_heads : 1,
                                   p->qk_norm ? a->head_dim : a->n_heads * a->head_dim,
                                   &ly->q_norm, m->hp.rms_norm_eps));
    const struct tern_rope *rope = rope_of(f, p);
    return rope ? ops->rope(be, &qkv, 0, a->n_heads, &f->batch.positions, rope) : TERN_OK;
}

/* The attention block: leaves o_proj(attention) in f->proj (post-normed
 * and scaled when the plan says so). */
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
    return block_out(m, p, p->attn_post_norm, &ly->attn_post_norm, &proj);
}

/* The dense MLP on h: out = down(act(gate h) * (up h)) (p.mlp_plain: down(act(up h))). */
static enum tern_status mlp_block(struct tern_model_core *m, struct tern_fwd *f, int32_t l,
                                  int64_t T, struct tern_dtensor *out)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_layer *ly = &m->w.layers[l];
    const struct tern_layer_plan *p = &m->plans[l];
    struct tern_dtensor h = rows_of(&f->h, T), gu = rows_of(&f->gate_up, T);
    struct tern_dtensor act = rows_of(&f->act, T);
    /* gate_up and act are as wide as the widest layer: views of this one's width */
    gu.shape[1] = 2 * p->intermediate;
    act.shape[1] = p->intermediate;
    bool fused = ly->gate_up_proj.weight.buf != NULL;
    enum tern_glu_act ga = p->act == TERN_ACT_SILU ? TERN_GLU_SILU : TERN_GLU_GELU_TANH;
    if (p->mlp_plain) { /* down(act(up h)): the activation alone, in place */
        TERN_TRY(ops->matmul(be, &h, &ly->up_proj, &act, 0));
        TERN_TRY(ops->act_mul(be, &act, 0, NULL, 0, ga, &act));
    } else if (fused && p->act == TERN_ACT_SILU && ops->matmul_glu) { /* SiLU in the GEMV epilogue */
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
    return ops->matmul(be, &act, &ly->down_proj, out, 0);
}

/* A [rows, cols] view of the start of a scratch tensor (contiguous at this
 * width, whatever width the scratch was made for). */
static struct tern_dtensor view2(const struct tern_dtensor *t, int64_t rows, int64_t cols)
{
    struct tern_dtensor v = rows_of(t, rows);
    v.n_dims = 2;
    v.shape[1] = cols;
    return v;
}

/* The router: the experts and weights of every token, into f->moe.ids /
 * f->moe.weights. It reads h, or (router_norm) rmsnorm(x) * router_scale *
 * hidden^-1/2 of the residual, made in f->moe.in. */
static enum tern_status route(struct tern_model_core *m, struct tern_fwd *f, int32_t l, int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_layer *ly = &m->w.layers[l];
    const struct tern_moe_plan *mp = &m->plans[l].moe;
    struct tern_dtensor h = rows_of(&f->h, T), in = rows_of(&f->moe.in, T);
    struct tern_dtensor logits = view2(&f->moe.logits, T, mp->n_experts);
    struct tern_dtensor ids = view2(&f->moe.ids, T, mp->top_k);
    struct tern_dtensor wts = view2(&f->moe.weights, T, mp->top_k);
    const struct tern_dtensor *r = &h;
    if (mp->router_norm) {
        struct tern_dtensor res = rows_of(&f->residual, T);
        TERN_TRY(ops->rmsnorm(be, &res, &ly->router_scale, m->hp.rms_norm_eps, &in));
        TERN_TRY(ops->scale(be, &in, 1.0f / sqrtf((float)m->hp.hidden_size), NULL, &in));
        r = &in;
    }
    TERN_TRY(ops->matmul(be, r, &ly->router, &logits, 0));
    return ops->moe_route(be, &logits, mp->top_k, mp->norm_topk,
                          mp->expert_scale ? &ly->expert_scale : NULL, &ids, &wts);
}

static enum tern_glu_act glu_of(enum tern_act a)
{
    return a == TERN_ACT_SILU ? TERN_GLU_SILU : TERN_GLU_GELU_TANH;
}

/* The mixture-of-experts feed-forward (tern_moe_plan): leaves f in f->proj. */
static enum tern_status moe_block(struct tern_model_core *m, struct tern_fwd *f, int32_t l,
                                  int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_layer *ly = &m->w.layers[l];
    const struct tern_layer_plan *p = &m->plans[l];
    const struct tern_moe_plan *mp = &p->moe;
    float eps = m->hp.rms_norm_eps;
    bool mlp = p->ffn == TERN_FFN_MLP_MOE;
    struct tern_dtensor h = rows_of(&f->h, T), proj = rows_of(&f->proj, T);
    struct tern_dtensor out = rows_of(&f->moe.out, T), in = rows_of(&f->moe.in, T);
    struct tern_dtensor gate = view2(&f->moe.gate, T, 1);
    struct tern_dtensor ids = view2(&f->moe.ids, T, mp->top_k);
    struct tern_dtensor wts = view2(&f->moe.weights, T, mp->top_k);
    struct tern_dtensor act = view2(&f->moe.act, T * mp->top_k, mp->intermediate);
    struct tern_dtensor order = f->moe.order;
    struct tern_moe_io io = {.x = &h, .ids = &ids, .weights = &wts, .act = &act, .order = &order,
                             .out = &proj};
    if (!ops->moe_route || !ops->moe_experts)
        return tern_error(TERN_E_UNSUPPORTED, "the %s backend has no mixture-of-experts ops",
                          ops->name);
    if (mlp && mp->own_norms) { /* Gemma 4: normed MLP + normed experts of their own input */
        TERN_TRY(mlp_block(m, f, l, T, &proj));
        TERN_TRY(ops->rmsnorm(be, &proj, &ly->mlp_post_norm, eps, &proj));
        TERN_TRY(route(m, f, l, T));
        struct tern_dtensor res = rows_of(&f->residual, T);
        TERN_TRY(ops->rmsnorm(be, &res, &ly->moe_pre_norm, eps, &in));
        io.x = &in;
        io.out = &out;
        TERN_TRY(ops->moe_experts(be, &ly->experts, glu_of(mp->act), &io));
        TERN_TRY(ops->rmsnorm(be, &out, &ly->moe_post_norm, eps, &out));
        return ops->add(be, &proj, &out, &proj);
    }
    if (mlp) { /* the MLP beside the experts, summed by the experts op */
        TERN_TRY(mlp_block(m, f, l, T, &out));
        if (mp->shared_expert) TERN_TRY(ops->matmul(be, &h, &ly->shared_gate, &gate, 0));
        io.shared = &out;
        io.shared_gate = mp->shared_expert ? &gate : NULL;
    }
    TERN_TRY(route(m, f, l, T));
    return ops->moe_experts(be, &ly->experts, glu_of(mp->act), &io);
}

/* The feed-forward block on h: leaves f in f->proj (post-normed and scaled
 * when the plan says so). */
static enum tern_status ffn_block(struct tern_model_core *m, struct tern_fwd *f, int32_t l,
                                  int64_t T)
{
    const struct tern_layer_plan *p = &m->plans[l];
    struct tern_dtensor proj = rows_of(&f->proj, T);
    if (p->ffn == TERN_FFN_MLP) TERN_TRY(mlp_block(m, f, l, T, &proj));
    else TERN_TRY(moe_block(m, f, l, T));
    return block_out(m, p, p->ffn_post_norm, &m->w.layers[l].ffn_post_norm, &proj);
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

/* Layer l's input norm (NULL: the layer has none, its blocks read x). */
static const struct tern_dtensor *input_norm(const struct tern_model_core *m, int32_t l,
                                             const struct tern_dtensor **bias)
{
    *bias = &m->w.layers[l].attn_norm_bias;
    return m->plans[l].no_input_norms ? NULL : &m->w.layers[l].attn_norm;
}

/* x += f->proj, then the layer's extras, then h = the next layer's input
 * norm of x (after the last layer nothing: the final norm runs over the
 * logits rows). With no extras the add and an RMSNorm are one add_rmsnorm. */
static enum tern_status layer_end(struct tern_model_core *m, struct tern_fwd *f, int32_t l,
                                  int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_layer_plan *p = &m->plans[l];
    struct tern_dtensor res = rows_of(&f->residual, T), proj = rows_of(&f->proj, T);
    struct tern_dtensor h = rows_of(&f->h, T);
    bool extras = p->per_layer_input || p->layer_scalar, last = l + 1 == m->hp.num_hidden_layers;
    const struct tern_dtensor *nb = NULL, *next = last ? NULL : input_norm(m, l + 1, &nb);
    if (!extras && !last) return add_norm(m, &res, &proj, next, nb, &h);
    TERN_TRY(ops->add(be, &res, &proj, &res));
    if (p->per_layer_input) TERN_TRY(per_layer_block(m, f, l, T));
    if (p->layer_scalar)
        TERN_TRY(ops->scale(be, &res, 1.0f, &m->w.layers[l].layer_scalar, &res));
    return last ? TERN_OK : norm_into(m, &res, next, nb, &h);
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
    TERN_TRY(norm_into(m, &hl, &m->w.norm, &m->w.norm_bias, &hl));
    TERN_TRY(ops->matmul(be, &hl, &m->w.lm_head, &logits, 0));
    if (hp->logit_scale > 0) TERN_TRY(ops->scale(be, &logits, hp->logit_scale, NULL, &logits));
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
    const struct tern_dtensor *nb = NULL, *n0 = n_layers > 0 ? input_norm(m, 0, &nb) : NULL;
    if (n_layers > 0) TERN_TRY(norm_into(m, &res, n0, nb, &h));
    for (int32_t l = 0; l < n_layers; l++) {
        const struct tern_layer_plan *p = &m->plans[l];
        const struct tern_layer *ly = &m->w.layers[l];
        TERN_TRY(attention_block(m, f, kv, l, T));
        struct tern_dtensor proj = rows_of(&f->proj, T);
        if (p->parallel) /* the MLP reads the same h: x += a, then x += f */
            TERN_TRY(ops->add(be, &res, &proj, &res));
        else
            TERN_TRY(add_norm(m, &res, &proj, p->no_input_norms ? NULL : &ly->ffn_norm,
                              &ly->ffn_norm_bias, &h));
        TERN_TRY(ffn_block(m, f, l, T));
        TERN_TRY(layer_end(m, f, l, T));
    }
    if (n_logits) TERN_TRY(logits_block(m, f, T, n_logits));
    /* after the logits rows were read from it: the final hidden states, F32, in place */
    return f->want_hidden ? norm_into(m, &res, &m->w.norm, &m->w.norm_bias, &res) : TERN_OK;
}
