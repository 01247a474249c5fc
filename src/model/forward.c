/*
 * forward.c — the llama-family decoder over a ragged batch, written once
 * against the backend op interface.
 *
 *   x = embed(ids)                                   residual = x  (F32)
 *   for each layer:
 *     h    = rmsnorm(residual)           (fused with the residual add after layer 0)
 *     qkv  = h [q_proj | k_proj | v_proj]            one [T, (H + 2 KV) hd] buffer
 *                                                    (one matmul when fused at load)
 *     q, k = q_norm/k_norm (Qwen3), then RoPE at the batch positions
 *     cache[slot_mapping] = k, v                     (one qk_rope_store op where
 *                                                    the backend has it; with the
 *                                                    fused projection one
 *                                                    matmul_rope_store op where it
 *                                                    has that, for archs without
 *                                                    head norms)
 *     attn = attention(q, paged cache)               causal, GQA, sliding window
 *     residual += attn o_proj;  h = rmsnorm(residual)
 *     residual += down(silu(h gate) * (h up))       (one matmul_glu for the fused
 *                                                    gate/up where the backend has it)
 *     h = rmsnorm(residual)                         (the next layer's input norm)
 *   logits = lm_head(rmsnorm(residual[logits_idx]))
 */
#include "model/model.h"

#include <math.h>
#include <string.h>

static int64_t qkv_width(const struct tern_hparams *hp)
{
    return (int64_t)(hp->num_attention_heads + 2 * hp->num_key_value_heads) * hp->head_dim;
}

static enum tern_status alloc2(struct tern_backend *be, enum tern_dtype dt, int64_t rows,
                               int64_t cols, struct tern_dtensor *t)
{
    int64_t shape[2] = {rows, cols};
    return tern_dtensor_alloc(be, dt, 2, shape, t);
}

/* Batch arrays live in one I32 buffer (and its host mirror) at fixed
 * offsets, in this order; block tables last so that one copy of the used
 * prefix uploads them all:
 *   | ids | pos | slots  (max_tokens each) | qstart | seqlen | logits | block tables ... |
 * Block table rows are repacked at the stride the batch's longest sequence
 * needs (tern_fwd_seq_bucket for decode batches), not the caller's. */
enum { META_IDS, META_POS, META_SLOTS, META_QSTART, META_SEQLEN, META_LOGITS, META_BTABLE, META_N };

static void meta_sizes(const struct tern_fwd *f, int64_t *n)
{
    n[META_IDS] = f->max_tokens;
    n[META_POS] = f->max_tokens;
    n[META_SLOTS] = f->max_tokens;
    n[META_QSTART] = f->max_seqs + 1;
    n[META_SEQLEN] = f->max_seqs;
    n[META_LOGITS] = f->max_logits;
    n[META_BTABLE] = (int64_t)f->max_seqs * f->max_blocks_per_seq;
}

static int64_t meta_offset(const struct tern_fwd *f, int which)
{
    int64_t n[META_N], off = 0;
    meta_sizes(f, n);
    for (int i = 0; i < which; i++) off += n[i];
    return off;
}

static struct tern_dtensor meta_view(const struct tern_fwd *f, int which, int64_t len)
{
    struct tern_dtensor v = f->meta;
    v.offset += (size_t)meta_offset(f, which) * 4;
    v.n_dims = 1;
    v.shape[0] = len;
    return v;
}

int32_t tern_fwd_seq_bucket(int32_t max_seq_len, int32_t cap)
{
    int32_t b = 256;
    while (b < max_seq_len && b < cap) b *= 2;
    return b < cap ? b : cap;
}

enum tern_status tern_fwd_init(struct tern_model_core *m, int32_t max_tokens, int32_t max_seqs,
                               int32_t max_blocks_per_seq, int32_t max_logits, int32_t block_size,
                               struct tern_fwd *f)
{
    memset(f, 0, sizeof *f);
    struct tern_backend *be = m->be;
    const struct tern_hparams *hp = &m->hp;
    enum tern_dtype dt = be->act_dtype;
    f->max_tokens = max_tokens;
    f->max_seqs = max_seqs;
    f->max_blocks_per_seq = max_blocks_per_seq;
    f->max_logits = max_logits;
    f->batch.block_size = block_size;
    int64_t E = hp->hidden_size, F = hp->intermediate_size;
    int64_t n[META_N], total = 0;
    meta_sizes(f, n);
    for (int i = 0; i < META_N; i++) total += n[i];
    enum tern_status st;
    /* The residual stream stays F32 on every backend: summing 2 * n_layers
     * BF16-rounded updates in BF16 was the largest error on CUDA (2.1e-2 of
     * the logits on tiny-llama3-rope, 1.0e-2 with an F32 residual). */
    if ((st = alloc2(be, TERN_DTYPE_F32, max_tokens, E, &f->residual)) ||
        (st = alloc2(be, dt, max_tokens, E, &f->h)) ||
        (st = alloc2(be, dt, max_tokens, qkv_width(hp), &f->qkv)) ||
        (st = alloc2(be, dt, max_tokens, (int64_t)hp->num_attention_heads * hp->head_dim,
                     &f->attn)) ||
        (st = alloc2(be, dt, max_tokens, E, &f->proj)) ||
        (st = alloc2(be, dt, max_tokens, 2 * F, &f->gate_up)) ||
        (st = alloc2(be, dt, max_tokens, F, &f->act)) ||
        (st = alloc2(be, dt, max_logits, E, &f->hl)) ||
        (st = alloc2(be, TERN_DTYPE_F32, max_logits, hp->vocab_size, &f->logits)) ||
        (st = tern_dtensor_alloc(be, TERN_DTYPE_I32, 1, (int64_t[]){max_logits}, &f->ids_out)) ||
        (st = tern_dtensor_alloc(be, TERN_DTYPE_I32, 1,
                                 (int64_t[]){(int64_t)max_blocks_per_seq * block_size + 1},
                                 &f->ids_at)) ||
        (st = tern_dtensor_alloc(be, TERN_DTYPE_I32, 1, &total, &f->meta))) {
        tern_fwd_deinit(m, f);
        return st;
    }
    f->meta_host = tern_calloc((size_t)total, sizeof(int32_t));
    if (!f->meta_host) {
        tern_fwd_deinit(m, f);
        return TERN_E_NO_MEMORY;
    }
    f->use_graphs = be->ops->graph_begin != NULL;
    return TERN_OK;
}

void tern_fwd_deinit(struct tern_model_core *m, struct tern_fwd *f)
{
    struct tern_dtensor *all[] = {&f->residual, &f->h,       &f->qkv,    &f->attn,
                                  &f->proj,     &f->gate_up, &f->act,    &f->hl,
                                  &f->logits,   &f->ids_out, &f->ids_at, &f->meta};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tern_dtensor_free(m->be, all[i]);
    for (int32_t i = 0; i < f->n_graphs; i++) m->be->ops->graph_free(m->be, f->graphs[i].g);
    f->n_graphs = 0;
    tern_free(f->meta_host);
    f->meta_host = NULL;
}

size_t tern_kv_block_bytes(const struct tern_model_core *m, int32_t block_size)
{
    const struct tern_hparams *hp = &m->hp;
    return (size_t)2 * (size_t)hp->num_hidden_layers * (size_t)block_size *
           (size_t)hp->num_key_value_heads * (size_t)hp->head_dim *
           tern_dtype_size(m->be->kv_dtype);
}

enum tern_status tern_kv_cache_init(struct tern_model_core *m, int32_t n_blocks,
                                    int32_t block_size, struct tern_kv_cache *kv)
{
    memset(kv, 0, sizeof *kv);
    const struct tern_hparams *hp = &m->hp;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->layers = tern_calloc((size_t)hp->num_hidden_layers, sizeof *kv->layers);
    if (!kv->layers) return TERN_E_NO_MEMORY;
    int64_t shape[4] = {n_blocks, block_size, hp->num_key_value_heads, hp->head_dim};
    for (int l = 0; l < hp->num_hidden_layers; l++) {
        enum tern_status st = tern_dtensor_alloc(m->be, m->be->kv_dtype, 4, shape, &kv->layers[l].k);
        if (st == TERN_OK)
            st = tern_dtensor_alloc(m->be, m->be->kv_dtype, 4, shape, &kv->layers[l].v);
        if (st != TERN_OK) {
            tern_kv_cache_deinit(m, kv);
            return tern_error_prefix(st, "KV cache of %d blocks", n_blocks);
        }
    }
    return TERN_OK;
}

void tern_kv_cache_deinit(struct tern_model_core *m, struct tern_kv_cache *kv)
{
    if (!kv->layers) return;
    for (int l = 0; l < m->hp.num_hidden_layers; l++) {
        tern_dtensor_free(m->be, &kv->layers[l].k);
        tern_dtensor_free(m->be, &kv->layers[l].v);
    }
    tern_free(kv->layers);
    kv->layers = NULL;
}

/* Checks the batch against the scratch sizes and fills the launch maxima. */
static enum tern_status check_batch(struct tern_fwd *f, const struct tern_batch *b)
{
    if (b->n_tokens < 1 || b->n_tokens > f->max_tokens || b->n_seqs < 1 ||
        b->n_seqs > f->max_seqs || b->n_logits < 0 || b->n_logits > f->max_logits ||
        b->max_blocks_per_seq > f->max_blocks_per_seq)
        return tern_error(TERN_E_INVALID_ARG,
                          "batch of %d tokens / %d seqs / %d logits exceeds the forward's "
                          "capacity (%d / %d / %d)",
                          b->n_tokens, b->n_seqs, b->n_logits, f->max_tokens, f->max_seqs,
                          f->max_logits);
    if (b->query_start[0] != 0 || b->query_start[b->n_seqs] != b->n_tokens)
        return tern_error(TERN_E_INVALID_ARG, "batch query_start does not cover the tokens");
    struct tern_batch_dev *d = &f->batch;
    d->max_q_len = 0;
    d->max_seq_len = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int32_t q = b->query_start[s + 1] - b->query_start[s];
        if (q < 0 || q > b->seq_lens[s])
            return tern_error(TERN_E_INVALID_ARG, "batch sequence %d has %d queries but length %d",
                              s, q, b->seq_lens[s]);
        if ((b->seq_lens[s] + d->block_size - 1) / d->block_size > b->max_blocks_per_seq)
            return tern_error(TERN_E_INVALID_ARG, "batch sequence %d: block table too short", s);
        if (q > d->max_q_len) d->max_q_len = q;
        if (b->seq_lens[s] > d->max_seq_len) d->max_seq_len = b->seq_lens[s];
    }
    /* Decode launches are sized from a bucket of the longest sequence, so
     * one captured graph serves every step until the context outgrows it. */
    if (d->max_q_len == 1)
        d->max_seq_len = tern_fwd_seq_bucket(d->max_seq_len, f->max_blocks_per_seq * d->block_size);
    return TERN_OK;
}

/* Packs the batch arrays into the host mirror at their fixed offsets
 * (block table rows at the stride max_seq_len needs) and uploads the used
 * prefix in one copy (from the positions on when keep_ids: the token ids
 * are on the device already); ops then see f->host_view through f->batch. */
static enum tern_status upload_batch(struct tern_model_core *m, struct tern_fwd *f,
                                     const struct tern_batch *b, bool keep_ids)
{
    TERN_TRY(check_batch(f, b));
    struct tern_batch_dev *d = &f->batch;
    int32_t bs = d->block_size;
    int32_t stride = (d->max_seq_len + bs - 1) / bs;
    int32_t *h = f->meta_host;
    const struct {
        int which;
        const int32_t *src;
        int64_t n;
    } arrays[] = {
        {META_IDS, b->token_ids, b->n_tokens},    {META_POS, b->positions, b->n_tokens},
        {META_SLOTS, b->slot_mapping, b->n_tokens}, {META_QSTART, b->query_start, b->n_seqs + 1},
        {META_SEQLEN, b->seq_lens, b->n_seqs},    {META_LOGITS, b->logits_idx, b->n_logits},
    };
    struct tern_dtensor *views[] = {&d->token_ids,   &d->positions, &d->slot_mapping,
                                    &d->query_start, &d->seq_lens,  &d->logits_idx};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        if (arrays[i].n)
            memcpy(h + meta_offset(f, arrays[i].which), arrays[i].src, (size_t)arrays[i].n * 4);
        *views[i] = meta_view(f, arrays[i].which, arrays[i].n);
    }
    int32_t *bt = h + meta_offset(f, META_BTABLE);
    int32_t keep = stride < b->max_blocks_per_seq ? stride : b->max_blocks_per_seq;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t *row = bt + (size_t)s * stride;
        memcpy(row, b->block_tables + (size_t)s * b->max_blocks_per_seq, (size_t)keep * 4);
        memset(row + keep, 0, (size_t)(stride - keep) * 4);
    }
    int64_t n_bt = (int64_t)b->n_seqs * stride;
    d->block_tables = meta_view(f, META_BTABLE, n_bt);
    f->host_view = *b;
    f->host_view.max_blocks_per_seq = stride;
    f->host_view.block_tables = bt;
    d->host = &f->host_view;
    int64_t from = keep_ids ? meta_offset(f, META_POS) : 0;
    struct tern_dtensor all = meta_view(f, 0, meta_offset(f, META_BTABLE) + n_bt - from);
    all.offset += (size_t)from * 4;
    return m->be->ops->upload(m->be, &all, h + from, tern_dtensor_bytes(&all));
}

/* A view of the first `rows` rows of a scratch tensor. */
static struct tern_dtensor rows_of(const struct tern_dtensor *t, int64_t rows)
{
    return tern_dtensor_rows(t, 0, rows);
}

/* residual += x W^T; h = rmsnorm(residual) * norm_w (norm_w NULL: the add
 * only, after the last layer: the final norm runs over the logits rows). */
static enum tern_status proj_add_norm(struct tern_model_core *m, struct tern_fwd *f,
                                      const struct tern_dtensor *x, const struct tern_linear *w,
                                      const struct tern_dtensor *norm_w, int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    struct tern_dtensor res = rows_of(&f->residual, T), h = rows_of(&f->h, T);
    struct tern_dtensor proj = rows_of(&f->proj, T);
    TERN_TRY(ops->matmul(be, x, w, &proj, 0));
    if (!norm_w) return ops->add(be, &res, &proj, &res);
    return ops->add_rmsnorm(be, &res, &proj, norm_w, m->hp.rms_norm_eps, &h);
}

static enum tern_status attention_block(struct tern_model_core *m, struct tern_fwd *f,
                                        const struct tern_layer *ly, struct tern_kv_layer *kvl,
                                        int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_hparams *hp = &m->hp;
    int64_t qd = (int64_t)hp->num_attention_heads * hp->head_dim;
    int64_t kvd = (int64_t)hp->num_key_value_heads * hp->head_dim;
    struct tern_dtensor h = rows_of(&f->h, T), qkv = rows_of(&f->qkv, T);
    struct tern_dtensor attn = rows_of(&f->attn, T);
    const struct tern_dtensor *post = &ly->post_attention_layernorm;
    bool fused = ly->qkv_proj.weight.buf != NULL;
    if (fused && ops->matmul_rope_store && ops->qk_rope_store && !m->arch->qk_norm) {
        /* the projection, rope and the cache stores in one op */
        TERN_TRY(ops->matmul_rope_store(be, &h, &ly->qkv_proj, &qkv, &m->rope, &m->attn,
                                        &f->batch, kvl));
        TERN_TRY(ops->attention(be, &qkv, kvl, &f->batch, &m->attn, &attn));
        return proj_add_norm(m, f, &attn, &ly->o_proj, post, T);
    } else if (fused) {
        TERN_TRY(ops->matmul(be, &h, &ly->qkv_proj, &qkv, 0));
    } else {
        TERN_TRY(ops->matmul(be, &h, &ly->q_proj, &qkv, 0));
        TERN_TRY(ops->matmul(be, &h, &ly->k_proj, &qkv, qd));
        TERN_TRY(ops->matmul(be, &h, &ly->v_proj, &qkv, qd + kvd));
    }
    if (ops->qk_rope_store) { /* head norms, rope and the KV store in one op */
        bool qn = m->arch->qk_norm;
        const struct tern_dtensor *qw = qn ? &ly->q_norm : NULL, *kw = qn ? &ly->k_norm : NULL;
        TERN_TRY(ops->qk_rope_store(be, &qkv, qw, kw, hp->rms_norm_eps, &m->rope, &m->attn,
                                    &f->batch, kvl));
        TERN_TRY(ops->attention(be, &qkv, kvl, &f->batch, &m->attn, &attn));
        return proj_add_norm(m, f, &attn, &ly->o_proj, post, T);
    }
    if (m->arch->qk_norm) {
        TERN_TRY(ops->head_rmsnorm(be, &qkv, 0, hp->num_attention_heads, hp->head_dim, &ly->q_norm,
                                   hp->rms_norm_eps));
        TERN_TRY(ops->head_rmsnorm(be, &qkv, qd, hp->num_key_value_heads, hp->head_dim,
                                   &ly->k_norm, hp->rms_norm_eps));
    }
    if (fused) { /* the k heads follow the q heads: one rope over both */
        TERN_TRY(ops->rope(be, &qkv, 0, hp->num_attention_heads + hp->num_key_value_heads,
                           &f->batch.positions, &m->rope));
    } else {
        TERN_TRY(ops->rope(be, &qkv, 0, hp->num_attention_heads, &f->batch.positions, &m->rope));
        TERN_TRY(ops->rope(be, &qkv, qd, hp->num_key_value_heads, &f->batch.positions, &m->rope));
    }
    TERN_TRY(ops->kv_store(be, &qkv, qd, qd + kvd, &f->batch, kvl));
    TERN_TRY(ops->attention(be, &qkv, kvl, &f->batch, &m->attn, &attn));
    return proj_add_norm(m, f, &attn, &ly->o_proj, post, T);
}

/* The MLP, its down projection added into the residual and normalised with
 * next_norm (the next layer's input norm; NULL after the last layer). */
static enum tern_status mlp_block(struct tern_model_core *m, struct tern_fwd *f,
                                  const struct tern_layer *ly, const struct tern_dtensor *next_norm,
                                  int64_t T)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    struct tern_dtensor h = rows_of(&f->h, T), gu = rows_of(&f->gate_up, T);
    struct tern_dtensor act = rows_of(&f->act, T);
    if (ly->gate_up_proj.weight.buf && ops->matmul_glu) { /* silu_mul in the GEMV epilogue */
        TERN_TRY(ops->matmul_glu(be, &h, &ly->gate_up_proj, &gu, &act));
    } else if (ly->gate_up_proj.weight.buf) {
        TERN_TRY(ops->matmul(be, &h, &ly->gate_up_proj, &gu, 0));
        TERN_TRY(ops->silu_mul(be, &gu, &act));
    } else {
        TERN_TRY(ops->matmul(be, &h, &ly->gate_proj, &gu, 0));
        TERN_TRY(ops->matmul(be, &h, &ly->up_proj, &gu, m->hp.intermediate_size));
        TERN_TRY(ops->silu_mul(be, &gu, &act));
    }
    return proj_add_norm(m, f, &act, &ly->down_proj, next_norm, T);
}

/* Whether a forward of T tokens and n_logits rows over the uploaded batch
 * runs as the backend's decode step op. */
static bool step_fits(const struct tern_model_core *m, const struct tern_fwd *f, int64_t T,
                      int32_t n_logits)
{
    return m->step && T == 1 && n_logits == 1 && f->batch.host->n_seqs == 1;
}

/* The layers and the logits over the uploaded batch (f->batch): only ops,
 * so it can be captured. */
static enum tern_status compute(struct tern_model_core *m, struct tern_fwd *f,
                                struct tern_kv_cache *kv, int64_t T, int32_t n_logits)
{
    const struct tern_backend_ops *ops = m->be->ops;
    struct tern_backend *be = m->be;
    const struct tern_hparams *hp = &m->hp;
    float eps = hp->rms_norm_eps;
    struct tern_dtensor res = rows_of(&f->residual, T), h = rows_of(&f->h, T);
    int n_layers = hp->num_hidden_layers;
    TERN_TRY(ops->get_rows(be, &m->w.embed_tokens, &f->batch.token_ids, &res));
    if (step_fits(m, f, T, n_logits)) {
        /* one sequence's decode step as one op (tern_model_core_load), its
         * argmax into the token ids (the next step's input) and ids_at */
        struct tern_dtensor logits = rows_of(&f->logits, 1);
        return ops->step_run(be, m->step, &res, &f->batch, kv->layers, &logits, &f->batch.token_ids,
                             &f->ids_at);
    }
    /* Each layer leaves the next one's normalised input in h (and the last
     * layer only its residual add: the final norm is over the logits rows). */
    if (n_layers > 0) TERN_TRY(ops->rmsnorm(be, &res, &m->w.layers[0].input_layernorm, eps, &h));
    for (int l = 0; l < n_layers; l++) {
        const struct tern_layer *ly = &m->w.layers[l];
        TERN_TRY(attention_block(m, f, ly, &kv->layers[l], T));
        TERN_TRY(mlp_block(m, f, ly, l + 1 < n_layers ? &m->w.layers[l + 1].input_layernorm : NULL,
                           T));
    }
    if (n_logits == 0) return TERN_OK;
    struct tern_linear hidden = {0};
    hidden.weight = res;
    hidden.in_features = hp->hidden_size;
    hidden.out_features = T;
    struct tern_dtensor hl = rows_of(&f->hl, n_logits);
    struct tern_dtensor logits = rows_of(&f->logits, n_logits);
    TERN_TRY(ops->get_rows(be, &hidden, &f->batch.logits_idx, &hl));
    TERN_TRY(ops->rmsnorm(be, &hl, &m->w.norm, eps, &hl));
    return ops->matmul(be, &hl, &m->w.lm_head, &logits, 0);
}

/* Uploads the batch, then puts the device token ids in place if given
 * (ids_dev == &f->batch.token_ids: they are there already, the previous
 * decode step's argmax, and the upload leaves them); notes whether this
 * forward is the step op with its argmax. */
static enum tern_status prepare(struct tern_model_core *m, struct tern_fwd *f,
                                const struct tern_batch *batch, const struct tern_dtensor *ids_dev)
{
    bool in_place = ids_dev == &f->batch.token_ids;
    f->argmax_fused = false;
    TERN_TRY(upload_batch(m, f, batch, in_place));
    if (ids_dev && !in_place) /* the previous step's argmax, elsewhere on the device */
        TERN_TRY(m->be->ops->copy(m->be, &f->batch.token_ids, ids_dev,
                                  (size_t)batch->n_tokens * sizeof(int32_t)));
    f->argmax_fused = step_fits(m, f, batch->n_tokens, batch->n_logits);
    return TERN_OK;
}

enum tern_status tern_model_forward(struct tern_model_core *m, struct tern_fwd *f,
                                    struct tern_kv_cache *kv, const struct tern_batch *batch)
{
    return tern_model_forward_ids(m, f, kv, batch, NULL);
}

enum tern_status tern_model_forward_ids(struct tern_model_core *m, struct tern_fwd *f,
                                        struct tern_kv_cache *kv, const struct tern_batch *batch,
                                        const struct tern_dtensor *ids_dev)
{
    TERN_TRY(prepare(m, f, batch, ids_dev));
    return compute(m, f, kv, batch->n_tokens, batch->n_logits);
}

/* The cache entry of this launch shape, or NULL when it is new. */
static struct tern_fwd_graph *graph_find(struct tern_fwd *f, const struct tern_fwd_graph *key)
{
    for (int32_t i = 0; i < f->n_graphs; i++) {
        struct tern_fwd_graph *g = &f->graphs[i];
        if (g->n_tokens == key->n_tokens && g->n_seqs == key->n_seqs &&
            g->n_logits == key->n_logits && g->stride == key->stride &&
            g->max_seq_len == key->max_seq_len)
            return g;
    }
    return NULL;
}

/* Records compute() for this shape into a new cache entry (g == NULL when
 * the capture failed: that shape then keeps running op by op). */
static enum tern_status graph_capture(struct tern_model_core *m, struct tern_fwd *f,
                                      struct tern_kv_cache *kv, const struct tern_fwd_graph *key)
{
    struct tern_backend *be = m->be;
    if (f->n_graphs == TERN_FWD_MAX_GRAPHS) { /* full: start over */
        for (int32_t i = 0; i < f->n_graphs; i++) be->ops->graph_free(be, f->graphs[i].g);
        f->n_graphs = 0;
    }
    struct tern_fwd_graph *g = &f->graphs[f->n_graphs++];
    *g = *key;
    g->g = NULL;
    TERN_TRY(be->ops->graph_begin(be));
    enum tern_status st = compute(m, f, kv, key->n_tokens, key->n_logits);
    enum tern_status st_end = be->ops->graph_end(be, &g->g);
    if (st != TERN_OK || st_end != TERN_OK) {
        tern_log(TERN_LOG_WARN, "forward: no graph for %d decode tokens (%s); running op by op",
                 key->n_tokens, tern_last_error());
        be->ops->graph_free(be, g->g);
        g->g = NULL;
    }
    return TERN_OK;
}

enum tern_status tern_model_forward_graph(struct tern_model_core *m, struct tern_fwd *f,
                                          struct tern_kv_cache *kv,
                                          const struct tern_batch *batch,
                                          const struct tern_dtensor *ids_dev)
{
    struct tern_backend *be = m->be;
    TERN_TRY(prepare(m, f, batch, ids_dev));
    if (!f->use_graphs || !be->ops->graph_begin || f->batch.max_q_len != 1)
        return compute(m, f, kv, batch->n_tokens, batch->n_logits);
    struct tern_fwd_graph key = {batch->n_tokens, batch->n_seqs, batch->n_logits,
                                 f->host_view.max_blocks_per_seq, f->batch.max_seq_len, NULL};
    struct tern_fwd_graph *g = graph_find(f, &key);
    if (g && g->g) return be->ops->graph_launch(be, g->g);
    TERN_TRY(compute(m, f, kv, batch->n_tokens, batch->n_logits));
    return g ? TERN_OK : graph_capture(m, f, kv, &key);
}

/* The backend's one-op decode step, where it has one and the model fits
 * it (and not in deterministic mode: its sums run in another order than
 * the op-by-op path's). A model that does not fit runs op by op; the
 * reason goes to the info log. */
static void step_prepare(struct tern_model_core *m)
{
    const struct tern_backend_ops *ops = m->be->ops;
    const struct tern_hparams *hp = &m->hp;
    if (!ops->step_prepare || !ops->step_run || m->be->deterministic) return;
    struct tern_step_layer *ly = tern_calloc((size_t)hp->num_hidden_layers, sizeof *ly);
    if (!ly) return;
    for (int l = 0; l < hp->num_hidden_layers; l++) {
        const struct tern_layer *w = &m->w.layers[l];
        ly[l].qkv = &w->qkv_proj;
        ly[l].o = &w->o_proj;
        ly[l].gate_up = &w->gate_up_proj;
        ly[l].down = &w->down_proj;
        ly[l].in_norm = &w->input_layernorm;
        ly[l].post_norm = &w->post_attention_layernorm;
    }
    struct tern_step_desc d = {
        .n_layers = hp->num_hidden_layers,
        .layers = ly,
        .final_norm = &m->w.norm,
        .lm_head = &m->w.lm_head,
        .hidden = hp->hidden_size,
        .intermediate = hp->intermediate_size,
        .vocab = hp->vocab_size,
        .eps = hp->rms_norm_eps,
        .qk_norm = m->arch->qk_norm,
        .rope = &m->rope,
        .attn = &m->attn,
    };
    enum tern_status st = ops->step_prepare(m->be, &d, &m->step);
    if (st != TERN_OK) {
        m->step = NULL;
        tern_log(TERN_LOG_INFO, "forward: decode runs op by op (%s)", tern_last_error());
    }
    tern_free(ly);
}

enum tern_status tern_model_core_load(struct tern_snapshot *snap, const struct tern_json_doc *cfg,
                                      const struct tern_backend_params *bp, bool progress,
                                      struct tern_model_core *m)
{
    memset(m, 0, sizeof *m);
    const json_t *archs = json_object_get(cfg->root, "architectures");
    const json_t *a0 = json_is_array(archs) ? json_array_get(archs, 0) : NULL;
    if (!json_is_string(a0))
        return tern_error(TERN_E_FORMAT, "%s: key 'architectures' must be a non-empty list of "
                          "strings", cfg->path);
    const char *name = json_string_value(a0);
    m->arch = tern_arch_find(name);
    if (!m->arch)
        return tern_error(TERN_E_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)",
                          cfg->path, name, tern_arch_supported());
    TERN_TRY(tern_hparams_read(cfg, m->arch, &m->hp));
    const struct tern_hparams *hp = &m->hp;
    enum tern_status st = tern_backend_create(bp, &m->be);
    if (st != TERN_OK) return st;
    st = tern_weights_load(m->be, snap, cfg, m->arch, hp, progress, &m->w);
    if (st != TERN_OK) goto fail;
    int32_t rot = (int32_t)(hp->head_dim * hp->partial_rotary_factor);
    float inv[2048];
    if (rot / 2 > 2048) {
        st = tern_error(TERN_E_UNSUPPORTED, "head_dim %d too large", hp->head_dim);
        goto fail;
    }
    m->rope.head_dim = hp->head_dim;
    m->rope.rotary_dim = rot;
    m->rope.interleaved = false;
    tern_rope_inv_freq(hp, rot, inv, &m->rope.mscale);
    st = tern_dtensor_alloc(m->be, TERN_DTYPE_F32, 1, (int64_t[]){rot / 2}, &m->rope.inv_freq);
    if (st == TERN_OK)
        st = m->be->ops->upload(m->be, &m->rope.inv_freq, inv, (size_t)(rot / 2) * sizeof(float));
    if (st != TERN_OK) goto fail;
    m->attn.n_heads = hp->num_attention_heads;
    m->attn.n_kv_heads = hp->num_key_value_heads;
    m->attn.head_dim = hp->head_dim;
    m->attn.scale = 1.0f / sqrtf((float)hp->head_dim);
    m->attn.sliding_window = hp->sliding_window;
    m->attn.softcap = 0;
    step_prepare(m);
    return TERN_OK;
fail:
    tern_model_core_free(m);
    return st;
}

void tern_model_core_free(struct tern_model_core *m)
{
    if (!m->be) return;
    if (m->step) m->be->ops->step_free(m->be, m->step);
    m->step = NULL;
    tern_dtensor_free(m->be, &m->rope.inv_freq);
    tern_weights_free(m->be, &m->w);
    tern_backend_destroy(m->be);
    m->be = NULL;
}
