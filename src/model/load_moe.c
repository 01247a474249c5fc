/*
 * load_moe.c — binding the experts of a mixture-of-experts layer, from the
 * three layouts snapshots publish them in, to the one form the backends
 * take (struct tern_experts in backend.h: gate_up [N * 2 I, H] with each
 * expert's gate rows then its up rows, down [N * H, I]):
 *
 *   layout                 tensors (N experts)                       bound as
 *   Hugging Face fused     experts.gate_up_proj [N, 2 I, H]           the same bytes (in place
 *   (Gemma 4)              experts.down_proj    [N, H, I]             on the CPU)
 *   MLX stacked            switch_mlp.{gate,up}_proj [N, I, H]        gate_up: each expert's gate
 *   (mlx-lm's sanitize)    switch_mlp.down_proj [N, H, I]             and up rows copied in turn;
 *                          (+ .scales / .biases when quantized)      down: the same bytes
 *   Hugging Face per       experts.{e}.{gate,up}_proj [I, H]          rows copied into one
 *   expert (Qwen, Mixtral) experts.{e}.down_proj [H, I]               buffer per kind
 *
 * A copy is row slices: MLX affine quantization packs each row on its own
 * (weight, scales and biases are all [rows, ...]), so expert e of a
 * quantized stack is its rows, and every expert of a stack must share one
 * format (dtype, or bits, group size and scale dtype), checked here. ggml
 * block types are not taken for experts. Under tern_weights_check (L->dry)
 * every tensor is found and checked and nothing is bound. Depends on load.h.
 */
#include "model/load.h"

#include <stdio.h>
#include <string.h>

/* One linear's tensors as fetched (weight, and scales / biases when
 * quantized), checked against [lead,] rows, in (lead 0: a 2-D linear).
 * The weight is `module` + ".weight", or `module` itself for Hugging Face's
 * fused expert parameters (wsuffix ""). */
struct src {
    struct tern_wview w, s, b;
    struct tern_quant_cfg q;
    int64_t rows; /* rows of the whole tensor (lead * rows) */
};

static enum tern_status fetch_src(struct loader *L, const char *module, const char *wsuffix,
                                  int64_t lead, int64_t rows, int64_t in, struct src *out)
{
    char name[320];
    memset(out, 0, sizeof *out);
    snprintf(name, sizeof name, "%s.scales", module);
    bool quantized = tern_wsource_has(L->ws, name);
    int nd = lead ? 3 : 2;
    int64_t shape[3] = {lead, rows, in}, *sh = lead ? shape : shape + 1;
    out->rows = (lead ? lead : 1) * rows;
    snprintf(name, sizeof name, "%s%s", module, wsuffix);
    if (!quantized) {
        if (L->quant && json_is_object(json_object_get(L->quant, module)))
            return tern_error(TERN_E_FORMAT, "%s: config.json quantizes '%s' but the snapshot has "
                              "no '%s.scales'", tern_load_path(L), module, module);
        return tern_load_fetch(L, name, nd, sh, FLOATS, &out->w);
    }
    TERN_TRY(tern_load_quant_for(L, module, &out->q));
    if (!out->q.bits)
        return tern_error(TERN_E_FORMAT, "%s: '%s' is quantized (has .scales) but config.json has "
                          "no quantization for it", tern_load_path(L), module);
    if (in % out->q.group_size)
        return tern_error(TERN_E_FORMAT, "%s: '%s' input size %lld is not a multiple of its "
                          "group_size %d", tern_load_path(L), module, (long long)in,
                          out->q.group_size);
    shape[2] = in * out->q.bits / 32;
    TERN_TRY(tern_load_fetch(L, name, nd, sh, 1u << TERN_DTYPE_U32, &out->w));
    shape[2] = in / out->q.group_size;
    snprintf(name, sizeof name, "%s.scales", module);
    TERN_TRY(tern_load_fetch(L, name, nd, sh, SCALE_DTYPES, &out->s));
    snprintf(name, sizeof name, "%s.biases", module);
    TERN_TRY(tern_load_fetch(L, name, nd, sh, SCALE_DTYPES, &out->b));
    if (out->s.v.dtype != out->b.v.dtype)
        return tern_error(TERN_E_FORMAT, "%s: '%s.scales' and '%s.biases' differ in dtype",
                          tern_load_path(L), module, module);
    return TERN_OK;
}

/* True when two sources are stored alike (they can share one buffer). */
static bool same_format(const struct src *a, const struct src *b)
{
    return a->q.bits == b->q.bits && a->q.group_size == b->q.group_size &&
           a->w.v.dtype == b->w.v.dtype && (!a->q.bits || a->s.v.dtype == b->s.v.dtype);
}

/* The linear's fields from its first source's format, covering `rows` x
 * `in` (tensors' shapes [rows, row elements], buffers unset). */
static void stack_shape(const struct src *s, int64_t rows, int64_t in, struct tern_linear *lin)
{
    const struct tern_wview *v[3] = {&s->w, &s->s, &s->b};
    struct tern_dtensor *t[3] = {&lin->weight, &lin->scales, &lin->biases};
    memset(lin, 0, sizeof *lin);
    for (int k = 0; k < (s->q.bits ? 3 : 1); k++) {
        t[k]->dtype = v[k]->v.dtype;
        t[k]->n_dims = 2;
        t[k]->shape[0] = rows;
        t[k]->shape[1] = v[k]->v.shape[v[k]->v.n_dims - 1];
    }
    lin->bits = s->q.bits;
    lin->group_size = s->q.group_size;
    lin->in_features = in;
    lin->out_features = rows;
}

/* A whole source as the stacked linear (the same bytes, seen as 2-D). */
static enum tern_status bind_whole(struct loader *L, struct src *s, int64_t in,
                                   struct tern_linear *lin)
{
    stack_shape(s, s->rows, in, lin);
    struct tern_wview *v[3] = {&s->w, &s->s, &s->b};
    struct tern_dtensor *t[3] = {&lin->weight, &lin->scales, &lin->biases};
    for (int k = 0; k < (s->q.bits ? 3 : 1); k++) {
        int64_t shape[2] = {t[k]->shape[0], t[k]->shape[1]};
        TERN_TRY(tern_load_view(L, v[k], 2, shape, t[k]));
    }
    return TERN_OK;
}

/* A stacked linear being filled row slice by row slice. */
struct stack {
    struct tern_linear *lin;
    size_t off[3]; /* next byte of weight, scales, biases */
};

static enum tern_status stack_alloc(struct loader *L, const struct src *first, int64_t rows,
                                    int64_t in, struct stack *st, struct tern_linear *lin)
{
    stack_shape(first, rows, in, lin);
    struct tern_dtensor *t[3] = {&lin->weight, &lin->scales, &lin->biases};
    memset(st, 0, sizeof *st);
    st->lin = lin;
    for (int k = 0; k < (first->q.bits ? 3 : 1); k++) {
        size_t n = tern_dtensor_bytes(t[k]);
        if (L->dry) { /* tern_weights_check: shapes and formats only */
            L->w->n_bytes += (int64_t)n;
            continue;
        }
        TERN_TRY(L->be->ops->buf_alloc(L->be, n, &t[k]->buf));
        enum tern_status e = tern_load_track(L, t[k]->buf);
        if (e != TERN_OK) {
            L->be->ops->buf_free(L->be, t[k]->buf);
            t[k]->buf = NULL;
            return e;
        }
        L->w->n_bytes += (int64_t)n;
    }
    return TERN_OK;
}

/* Appends rows [row0, row0 + n) of a source (module, for messages). */
static enum tern_status stack_put(struct loader *L, struct stack *st, const struct src *s,
                                  const struct src *first, const char *module, int64_t row0,
                                  int64_t n)
{
    if (!same_format(s, first))
        return tern_error(TERN_E_UNSUPPORTED, "%s: '%s' is stored unlike the other experts of its "
                          "layer (dtype, bits or group size): experts share one format",
                          tern_load_path(L), module);
    const struct tern_wview *v[3] = {&s->w, &s->s, &s->b};
    struct tern_dtensor *t[3] = {&st->lin->weight, &st->lin->scales, &st->lin->biases};
    for (int k = 0; k < (s->q.bits ? 3 : 1) && !L->dry; k++) {
        size_t row_bytes = v[k]->v.n_bytes / (size_t)s->rows;
        struct tern_dtensor dst = *t[k];
        dst.offset = st->off[k];
        TERN_TRY(L->be->ops->upload(L->be, &dst, (const char *)v[k]->v.data +
                                    (size_t)row0 * row_bytes, (size_t)n * row_bytes));
        st->off[k] += (size_t)n * row_bytes;
        if (row0 == 0) tern_load_progress(L);
    }
    return TERN_OK;
}

/* A per-expert module's name: the family's template with layer and expert. */
static const char *expert_name(const struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                               int32_t e, char *buf, size_t cap)
{
    char base[200];
    snprintf(base, sizeof base, L->fam->names[kind], layer, e);
    snprintf(buf, cap, "%s%s", L->prefix, base);
    return buf;
}

/* Hugging Face per expert: N gate / up / down linears copied in turn. */
static enum tern_status bind_per_expert(struct loader *L, int32_t l, const struct tern_moe_plan *mp,
                                        int64_t H, struct tern_experts *x)
{
    int64_t I = mp->intermediate;
    char name[320];
    struct src s, first = {0};
    struct stack st = {0};
    for (int pass = 0; pass < 2; pass++) { /* gate_up, then down */
        for (int32_t e = 0; e < mp->n_experts; e++) {
            for (int part = 0; part < (pass ? 1 : 2); part++) {
                enum tern_tensor_kind kind = pass ? TT_EXPERT_DOWN : part ? TT_EXPERT_UP
                                                                          : TT_EXPERT_GATE;
                expert_name(L, kind, l, e, name, sizeof name);
                TERN_TRY(fetch_src(L, name, ".weight", 0, pass ? H : I, pass ? I : H, &s));
                if (e == 0 && part == 0) {
                    first = s;
                    TERN_TRY(stack_alloc(L, &s, pass ? mp->n_experts * H : mp->n_experts * 2 * I,
                                         pass ? I : H, &st, pass ? &x->down : &x->gate_up));
                }
                TERN_TRY(stack_put(L, &st, &s, &first, name, 0, s.rows));
            }
        }
    }
    return TERN_OK;
}

/* MLX stacked: gate_up interleaved from the gate and up stacks, down as it is. */
static enum tern_status bind_switch(struct loader *L, int32_t l, const struct tern_moe_plan *mp,
                                    int64_t H, struct tern_experts *x)
{
    int64_t N = mp->n_experts, I = mp->intermediate;
    char ng[320], nu[320], nd[320];
    tern_load_name(L, TT_SWITCH_GATE, l, "", ng, sizeof ng);
    tern_load_name(L, TT_SWITCH_UP, l, "", nu, sizeof nu);
    tern_load_name(L, TT_SWITCH_DOWN, l, "", nd, sizeof nd);
    struct src g, u, d;
    TERN_TRY(fetch_src(L, ng, ".weight", N, I, H, &g));
    TERN_TRY(fetch_src(L, nu, ".weight", N, I, H, &u));
    struct stack st;
    TERN_TRY(stack_alloc(L, &g, N * 2 * I, H, &st, &x->gate_up));
    for (int64_t e = 0; e < N; e++) {
        TERN_TRY(stack_put(L, &st, &g, &g, ng, e * I, I));
        TERN_TRY(stack_put(L, &st, &u, &g, nu, e * I, I));
    }
    TERN_TRY(fetch_src(L, nd, ".weight", N, H, I, &d));
    return bind_whole(L, &d, I, &x->down);
}

/* Hugging Face fused 3-D tensors: both as they are. */
static enum tern_status bind_fused(struct loader *L, int32_t l, const struct tern_moe_plan *mp,
                                   int64_t H, struct tern_experts *x)
{
    int64_t N = mp->n_experts, I = mp->intermediate;
    char name[320];
    struct src s;
    TERN_TRY(fetch_src(L, tern_load_name(L, TT_EXPERTS_GATE_UP, l, "", name, sizeof name), "",
                       N, 2 * I, H, &s));
    TERN_TRY(bind_whole(L, &s, H, &x->gate_up));
    TERN_TRY(fetch_src(L, tern_load_name(L, TT_EXPERTS_DOWN, l, "", name, sizeof name), "", N,
                       H, I, &s));
    return bind_whole(L, &s, I, &x->down);
}

/* Whether the source has tensor `suffix` of canonical kind `kind` of layer
 * l (per-expert kinds: of expert 0); false when the family has no name. */
static bool has_kind(const struct loader *L, enum tern_tensor_kind kind, int32_t l,
                     const char *suffix, char *name, size_t cap)
{
    if (!L->fam->names[kind]) return false;
    char base[300];
    if (kind == TT_EXPERT_GATE) expert_name(L, kind, l, 0, base, sizeof base);
    else tern_load_name(L, kind, l, "", base, sizeof base);
    snprintf(name, cap, "%s%s", base, suffix);
    return tern_wsource_has(L->ws, name);
}

static enum tern_status bind_experts(struct loader *L, int32_t l, const struct tern_moe_plan *mp,
                                     struct tern_experts *x)
{
    int64_t H = L->hp->hidden_size;
    memset(x, 0, sizeof *x);
    x->n_experts = mp->n_experts;
    x->hidden = H;
    x->intermediate = mp->intermediate;
    char a[320] = "", b[320] = "", c[320] = "";
    if (has_kind(L, TT_EXPERTS_GATE_UP, l, "", a, sizeof a)) return bind_fused(L, l, mp, H, x);
    if (has_kind(L, TT_SWITCH_GATE, l, ".weight", b, sizeof b))
        return bind_switch(L, l, mp, H, x);
    if (has_kind(L, TT_EXPERT_GATE, l, ".weight", c, sizeof c))
        return bind_per_expert(L, l, mp, H, x);
    return tern_error(TERN_E_FORMAT, "%s: layer %d has experts but none of its expert tensors: "
                      "'%s', '%s' or '%s'", tern_load_path(L), l, a[0] ? a : "-", b[0] ? b : "-",
                      c[0] ? c : "-");
}

static int64_t linear_bytes(const struct tern_linear *lin)
{
    int64_t n = (int64_t)tern_dtensor_bytes(&lin->weight);
    if (lin->bits)
        n += (int64_t)(tern_dtensor_bytes(&lin->scales) + tern_dtensor_bytes(&lin->biases));
    return n;
}

enum tern_status tern_load_moe_layer(struct loader *L, int32_t i, const struct tern_layer_plan *p,
                                     struct tern_layer *ly)
{
    const struct tern_moe_plan *mp = &p->moe;
    int64_t H = L->hp->hidden_size, N = mp->n_experts, I = mp->intermediate;
    char name[320];
    TERN_TRY(tern_load_kind(L, TT_ROUTER, i, N, H, false, &ly->router));
    if (mp->router_norm)
        TERN_TRY(tern_load_vec(L, tern_load_name(L, TT_ROUTER_SCALE, i, "", name, sizeof name), H,
                               &ly->router_scale));
    if (mp->expert_scale)
        TERN_TRY(tern_load_vec(L, tern_load_name(L, TT_EXPERT_SCALE, i, "", name, sizeof name), N,
                               &ly->expert_scale));
    if (p->ffn == TERN_FFN_MLP_MOE && mp->own_norms) {
        TERN_TRY(tern_load_norm(L, TT_MLP_POST_NORM, i, H, &ly->mlp_post_norm));
        TERN_TRY(tern_load_norm(L, TT_MOE_PRE_NORM, i, H, &ly->moe_pre_norm));
        TERN_TRY(tern_load_norm(L, TT_MOE_POST_NORM, i, H, &ly->moe_post_norm));
    }
    if (p->ffn == TERN_FFN_MLP_MOE && mp->shared_expert)
        TERN_TRY(tern_load_kind(L, TT_SHARED_EXPERT_GATE, i, 1, H, false, &ly->shared_gate));
    TERN_TRY(bind_experts(L, i, mp, &ly->experts));
    struct tern_experts *x = &ly->experts;
    if (x->gate_up.bits) L->w->quant_bits = x->gate_up.bits;
    L->w->n_params += N * 3 * I * H;
    /* a one-token step reads top_k of the N experts */
    L->w->expert_bytes_idle +=
        (linear_bytes(&x->gate_up) + linear_bytes(&x->down)) / N * (N - mp->top_k);
    return TERN_OK;
}
