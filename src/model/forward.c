/*
 * forward.c — running the decoder over a ragged batch: the scratch and KV
 * cache it needs (sized by the widest layer), the batch upload, the choice
 * between the backend's whole-step op and the layers (blocks.c), and decode
 * graphs.
 */
#include "model/model.h"

#include <math.h>
#include <string.h>

/* The widest q|k|v, q, and intermediate over the layers. */
static void widths(const struct tern_model_core *m, int64_t *qkv, int64_t *q, int64_t *ff)
{
    *qkv = *q = *ff = 0;
    for (int32_t l = 0; l < m->hp.num_hidden_layers; l++) {
        const struct tern_attn_params *a = &m->plans[l].attn;
        int64_t qd = (int64_t)a->n_heads * a->head_dim, kvd = (int64_t)a->n_kv_heads * a->head_dim;
        if (qd + 2 * kvd > *qkv) *qkv = qd + 2 * kvd;
        if (qd > *q) *q = qd;
        if (m->plans[l].intermediate > *ff) *ff = m->plans[l].intermediate;
    }
}

static enum tern_status alloc2(struct tern_backend *be, enum tern_dtype dt, int64_t rows,
                               int64_t cols, struct tern_dtensor *t)
{
    int64_t shape[2] = {rows, cols};
    return tern_dtensor_alloc(be, dt, 2, shape, t);
}

/* The mixture-of-experts scratch, as wide as the widest MoE layer needs
 * (nothing when no layer has experts). */
static enum tern_status moe_scratch(struct tern_model_core *m, int32_t max_tokens,
                                    struct tern_fwd *f)
{
    int64_t N = 0, K = 0, I = 0, E = m->hp.hidden_size;
    for (int32_t l = 0; l < m->hp.num_hidden_layers; l++) {
        const struct tern_layer_plan *p = &m->plans[l];
        if (p->ffn == TERN_FFN_MLP) continue;
        if (p->moe.n_experts > N) N = p->moe.n_experts;
        if (p->moe.top_k > K) K = p->moe.top_k;
        if (p->moe.intermediate > I) I = p->moe.intermediate;
    }
    if (!N) return TERN_OK;
    struct tern_backend *be = m->be;
    enum tern_dtype dt = be->act_dtype;
    struct tern_fwd_moe *s = &f->moe;
    enum tern_status st;
    int64_t pairs = (int64_t)max_tokens * K, n_order = pairs + N + 1;
    if ((st = alloc2(be, dt, max_tokens, E, &s->in)) ||
        (st = alloc2(be, dt, max_tokens, E, &s->out)) ||
        (st = alloc2(be, TERN_DTYPE_F32, max_tokens, N, &s->logits)) ||
        (st = alloc2(be, TERN_DTYPE_F32, max_tokens, 1, &s->gate)) ||
        (st = alloc2(be, TERN_DTYPE_I32, max_tokens, K, &s->ids)) ||
        (st = alloc2(be, TERN_DTYPE_F32, max_tokens, K, &s->weights)) ||
        (st = alloc2(be, dt, pairs, I, &s->act)) ||
        (st = tern_dtensor_alloc(be, TERN_DTYPE_I32, 1, &n_order, &s->order)))
        return st;
    return TERN_OK;
}

/* Batch arrays live in one I32 buffer (and its host mirror) at fixed
 * offsets, in this order; block tables last so that one copy of the used
 * prefix uploads them all:
 *   | ids | pos | slots (G of them) | qstart | seqlen | logits | block tables (G) ... |
 * (G KV groups; ids, pos and each group's slots max_tokens long). Block
 * table rows are repacked at the stride the batch's longest sequence needs
 * (tern_fwd_seq_bucket for decode batches), not the caller's, each group's
 * table right after the one before. */
enum { META_IDS, META_POS, META_SLOTS, META_QSTART, META_SEQLEN, META_LOGITS, META_BTABLE, META_N };

static void meta_sizes(const struct tern_fwd *f, int64_t *n)
{
    n[META_IDS] = f->max_tokens;
    n[META_POS] = f->max_tokens;
    n[META_SLOTS] = (int64_t)f->n_groups * f->max_tokens;
    n[META_QSTART] = f->max_seqs + 1;
    n[META_SEQLEN] = f->max_seqs;
    n[META_LOGITS] = f->max_logits;
    n[META_BTABLE] = (int64_t)f->n_groups * f->max_seqs * f->max_blocks_per_seq;
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
                               int64_t context, struct tern_fwd *f)
{
    memset(f, 0, sizeof *f);
    struct tern_backend *be = m->be;
    const struct tern_hparams *hp = &m->hp;
    enum tern_dtype dt = be->act_dtype;
    f->max_tokens = max_tokens;
    f->max_seqs = max_seqs;
    f->max_blocks_per_seq = max_blocks_per_seq;
    f->max_logits = max_logits;
    f->n_groups = m->n_kv_groups > 0 ? m->n_kv_groups : 1;
    f->batch.block_size = block_size;
    int64_t E = hp->hidden_size, QKV, QD, F;
    int64_t LP = (int64_t)hp->per_layer_dim * hp->num_hidden_layers;
    widths(m, &QKV, &QD, &F);
    int64_t n[META_N], total = 0;
    meta_sizes(f, n);
    for (int i = 0; i < META_N; i++) total += n[i];
    enum tern_status st;
    /* The residual stream stays F32 on every backend: summing 2 * n_layers
     * BF16-rounded updates in BF16 was the largest error on CUDA (2.1e-2 of
     * the logits on tiny-llama3-rope, 1.0e-2 with an F32 residual). */
    if ((st = alloc2(be, TERN_DTYPE_F32, max_tokens, E, &f->residual)) ||
        (st = alloc2(be, dt, max_tokens, E, &f->h)) ||
        (st = alloc2(be, dt, max_tokens, QKV, &f->qkv)) ||
        (st = alloc2(be, dt, max_tokens, QD, &f->attn)) ||
        (st = alloc2(be, dt, max_tokens, E, &f->proj)) ||
        (st = alloc2(be, dt, max_tokens, 2 * F, &f->gate_up)) ||
        (st = alloc2(be, dt, max_tokens, F, &f->act)) ||
        (LP && (st = alloc2(be, TERN_DTYPE_F32, max_tokens, LP, &f->pli))) ||
        (LP && (st = alloc2(be, TERN_DTYPE_F32, max_tokens, LP, &f->pli_tmp))) ||
        (st = alloc2(be, dt, max_logits, E, &f->hl)) ||
        (st = alloc2(be, TERN_DTYPE_F32, max_logits, hp->vocab_size, &f->logits)) ||
        (st = tern_dtensor_alloc(be, TERN_DTYPE_I32, 1, (int64_t[]){max_logits}, &f->ids_out)) ||
        (st = tern_dtensor_alloc(be, TERN_DTYPE_I32, 1,
                                 (int64_t[]){(int64_t)max_blocks_per_seq * block_size + 1},
                                 &f->ids_at)) ||
        (st = tern_dtensor_alloc(be, TERN_DTYPE_I32, 1, &total, &f->meta)) ||
        (st = moe_scratch(m, max_tokens, f))) {
        tern_fwd_deinit(m, f);
        return st;
    }
    f->meta_host = tern_calloc((size_t)total, sizeof(int32_t));
    if (!f->meta_host) {
        tern_fwd_deinit(m, f);
        return TERN_E_NO_MEMORY;
    }
    for (int32_t r = 0; r < TERN_MAX_ROPES; r++) {
        f->ropes[r] = m->ropes[r];
        if (!m->rope_by_context[r]) continue;
        if ((st = tern_model_rope_make(m, r, context, &f->ropes[r])) != TERN_OK) {
            tern_fwd_deinit(m, f);
            return st;
        }
        f->rope_owned[r] = true;
    }
    f->use_graphs = be->ops->graph_begin != NULL;
    return TERN_OK;
}

void tern_fwd_deinit(struct tern_model_core *m, struct tern_fwd *f)
{
    struct tern_dtensor *all[] = {&f->residual, &f->h,      &f->qkv,    &f->attn,    &f->proj,
                                  &f->gate_up,  &f->act,    &f->pli,    &f->pli_tmp, &f->hl,
                                  &f->logits,   &f->ids_out, &f->ids_at, &f->meta};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tern_dtensor_free(m->be, all[i]);
    struct tern_dtensor *moe[] = {&f->moe.in,  &f->moe.out,     &f->moe.logits, &f->moe.gate,
                                  &f->moe.ids, &f->moe.weights, &f->moe.act,    &f->moe.order};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) tern_dtensor_free(m->be, moe[i]);
    for (int32_t i = 0; i < f->n_graphs; i++) m->be->ops->graph_free(m->be, f->graphs[i].g);
    f->n_graphs = 0;
    tern_free(f->meta_host);
    f->meta_host = NULL;
    for (int32_t r = 0; r < TERN_MAX_ROPES; r++)
        if (f->rope_owned[r]) tern_dtensor_free(m->be, &f->ropes[r].inv_freq);
    memset(f->rope_owned, 0, sizeof f->rope_owned);
}

size_t tern_kv_block_bytes(const struct tern_model_core *m, int32_t group, int32_t block_size)
{
    size_t n = 0;
    for (int32_t l = 0; l < m->hp.num_hidden_layers; l++) {
        const struct tern_layer_plan *p = &m->plans[l];
        if (p->kv_source == l && m->layer_group[l] == group)
            n += (size_t)2 * (size_t)block_size * (size_t)p->attn.n_kv_heads *
                 (size_t)p->attn.head_dim * tern_dtype_size(m->be->kv_dtype);
    }
    return n;
}

enum tern_status tern_kv_cache_init(struct tern_model_core *m, const int32_t *n_blocks,
                                    int32_t block_size, struct tern_kv_cache *kv)
{
    memset(kv, 0, sizeof *kv);
    const struct tern_hparams *hp = &m->hp;
    memcpy(kv->n_blocks, n_blocks, sizeof(int32_t) * (size_t)m->n_kv_groups);
    kv->block_size = block_size;
    kv->layers = tern_calloc((size_t)hp->num_hidden_layers, sizeof *kv->layers);
    if (!kv->layers) return TERN_E_NO_MEMORY;
    for (int32_t l = 0; l < hp->num_hidden_layers; l++) {
        const struct tern_layer_plan *p = &m->plans[l];
        if (p->kv_source != l) continue; /* reads its source layer's */
        int32_t nb = n_blocks[m->layer_group[l]];
        int64_t shape[4] = {nb, block_size, p->attn.n_kv_heads, p->attn.head_dim};
        enum tern_status st = tern_dtensor_alloc(m->be, m->be->kv_dtype, 4, shape, &kv->layers[l].k);
        if (st == TERN_OK)
            st = tern_dtensor_alloc(m->be, m->be->kv_dtype, 4, shape, &kv->layers[l].v);
        if (st != TERN_OK) {
            tern_kv_cache_deinit(m, kv);
            return tern_error_prefix(st, "KV cache of %d blocks", nb);
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
    int32_t bg = b->n_kv_groups > 1 ? b->n_kv_groups : 1;
    if (bg != f->n_groups)
        return tern_error(TERN_E_INVALID_ARG, "batch has block tables for %d KV group(s), the "
                          "model keeps %d", bg, f->n_groups);
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
    int64_t n_bt = (int64_t)b->n_seqs * stride;
    for (int32_t g = 0; g < f->n_groups; g++) {
        const int32_t *src_bt = g ? b->group_block_tables[g] : b->block_tables;
        const int32_t *src_sl = g ? b->group_slot_mapping[g] : b->slot_mapping;
        int32_t *sl = h + meta_offset(f, META_SLOTS) + (size_t)g * f->max_tokens;
        int32_t *bt = h + meta_offset(f, META_BTABLE) + (size_t)g * n_bt;
        if (g) memcpy(sl, src_sl, (size_t)b->n_tokens * 4);
        int32_t keep = stride < b->max_blocks_per_seq ? stride : b->max_blocks_per_seq;
        for (int32_t s = 0; s < b->n_seqs; s++) {
            int32_t *row = bt + (size_t)s * stride;
            memcpy(row, src_bt + (size_t)s * b->max_blocks_per_seq, (size_t)keep * 4);
            memset(row + keep, 0, (size_t)(stride - keep) * 4);
        }
        struct tern_batch *hv = g ? &f->group_host[g] : &f->host_view;
        struct tern_batch_dev *gd = g ? &f->group_batch[g] : d;
        *hv = *b;
        hv->max_blocks_per_seq = stride;
        hv->block_tables = bt;
        hv->slot_mapping = sl;
        if (g) {
            *gd = *d;
            gd->slot_mapping = meta_view(f, META_SLOTS, b->n_tokens);
            gd->slot_mapping.offset += (size_t)g * f->max_tokens * 4;
        }
        gd->block_tables = meta_view(f, META_BTABLE, n_bt);
        gd->block_tables.offset += (size_t)g * n_bt * 4;
        gd->host = hv;
    }
    int64_t from = keep_ids ? meta_offset(f, META_POS) : 0;
    struct tern_dtensor all =
        meta_view(f, 0, meta_offset(f, META_BTABLE) + f->n_groups * n_bt - from);
    all.offset += (size_t)from * 4;
    return m->be->ops->upload(m->be, &all, h + from, tern_dtensor_bytes(&all));
}

/* Whether a forward of T tokens and n_logits rows over the uploaded batch
 * runs as the backend's decode step op. */
static bool step_fits(const struct tern_model_core *m, const struct tern_fwd *f, int64_t T,
                      int32_t n_logits)
{
    return m->step && T == 1 && n_logits == 1 && f->batch.host->n_seqs == 1 && !f->want_hidden;
}

/* The forward over the uploaded batch (f->batch): the backend's step op for
 * one sequence's decode step where it has one, else the layers. Only ops,
 * so it can be captured. */
static enum tern_status compute(struct tern_model_core *m, struct tern_fwd *f,
                                struct tern_kv_cache *kv, int64_t T, int32_t n_logits)
{
    if (!step_fits(m, f, T, n_logits)) return tern_model_compute(m, f, kv, T, n_logits);
    /* one sequence's decode step as one op (model.c), its argmax into the
     * token ids (the next step's input) and ids_at */
    struct tern_backend *be = m->be;
    struct tern_dtensor res = tern_dtensor_rows(&f->residual, 0, 1);
    struct tern_dtensor logits = tern_dtensor_rows(&f->logits, 0, 1);
    TERN_TRY(be->ops->get_rows(be, &m->w.embed_tokens, &f->batch.token_ids, &res));
    return be->ops->step_run(be, m->step, &res, &f->batch, kv->layers, &logits,
                             &f->batch.token_ids, &f->ids_at);
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
    if (!f->use_graphs || !be->ops->graph_begin || f->batch.max_q_len != 1 || f->want_hidden)
        return compute(m, f, kv, batch->n_tokens, batch->n_logits);
    struct tern_fwd_graph key = {batch->n_tokens, batch->n_seqs, batch->n_logits,
                                 f->host_view.max_blocks_per_seq, f->batch.max_seq_len, NULL};
    struct tern_fwd_graph *g = graph_find(f, &key);
    if (g && g->g) return be->ops->graph_launch(be, g->g);
    TERN_TRY(compute(m, f, kv, batch->n_tokens, batch->n_logits));
    return g ? TERN_OK : graph_capture(m, f, kv, &key);
}
