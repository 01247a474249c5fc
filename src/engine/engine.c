/*
 * engine.c — the engine handle: KV cache and forward scratch sized at
 * creation, and the blocking single-sequence entry points (greedy generation,
 * all-position logits). The serving loop (scheduler, sampling, streams) builds
 * on the same forward and cache.
 *
 * Decode steps go through tern_model_forward_graph: on a backend with graph
 * hooks (CUDA) each decode shape is captured once and replayed. The
 * environment variable TERN_CUDA_GRAPHS=0 turns replay off (every step then
 * runs op by op, with bitwise the same results) for tests and comparisons.
 */
#include "api/api.h"
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>

/* The blocks one sequence can hold at once in KV group g: its whole
 * context in a full group; its window and the largest chunk in a windowed
 * one. */
static int32_t group_per_seq(const struct tern_engine *e, int32_t g)
{
    int32_t w = e->model->core.kv_group_window[g], bs = e->p.block_size;
    if (!w) return e->max_blocks_per_seq;
    int32_t n = (w + e->p.max_batch_tokens + bs - 1) / bs + 2;
    return n < e->max_blocks_per_seq ? n : e->max_blocks_per_seq;
}

/* Blocks per KV group: every running sequence's worth when the budget (kv_bytes,
 * or kv_fraction of free device memory) holds them, else every group scaled
 * down alike. */
static enum tern_status size_cache(struct tern_engine *e)
{
    struct tern_model_core *m = &e->model->core;
    const struct tern_engine_params *p = &e->p;
    int32_t bs = p->block_size, G = m->n_kv_groups;
    e->max_blocks_per_seq = (e->max_context + bs - 1) / bs;
    double want_bytes = 0;
    size_t bytes[TERN_MAX_KV_GROUPS];
    for (int32_t g = 0; g < G; g++) {
        bytes[g] = tern_kv_block_bytes(m, g, bs);
        want_bytes += (double)group_per_seq(e, g) * p->max_seqs * (double)bytes[g];
    }
    double budget;
    if (p->kv_bytes > 0) {
        budget = (double)p->kv_bytes;
    } else {
        size_t free_b = 0, total_b = 0;
        TERN_TRY(m->be->ops->mem_info(m->be, &free_b, &total_b));
        budget = (double)free_b * p->kv_fraction;
    }
    double scale = budget >= want_bytes ? 1.0 : budget / want_bytes;
    for (int32_t g = 0; g < G; g++) {
        int64_t n = (int64_t)((double)group_per_seq(e, g) * p->max_seqs * scale);
        if (n < 1)
            return tern_error(TERN_E_NO_MEMORY,
                              "KV cache: budget of %.0f bytes holds no %d-token block (%zu bytes "
                              "each over %d KV group(s))", budget, bs, bytes[g], G);
        e->n_blocks[g] = (int32_t)(n < INT32_MAX ? n : INT32_MAX);
    }
    return TERN_OK;
}

enum tern_status tern_engine_create(struct tern_model *model, const struct tern_engine_params *params,
                                    struct tern_engine **out)
{
    *out = NULL;
    if (!model) return tern_error(TERN_E_INVALID_ARG, "engine: model is NULL");
    struct tern_engine_params p = params ? *params : tern_engine_default_params();
    if (p.max_seqs < 1 || p.max_batch_tokens < 1 || p.block_size < 1 || p.block_size > 1024 ||
        p.max_context < 0 || p.kv_bytes < 0 || p.kv_fraction <= 0 || p.kv_fraction > 1)
        return tern_error(TERN_E_INVALID_ARG,
                          "engine params: max_seqs, max_batch_tokens and block_size must be "
                          "positive, kv_fraction in (0, 1]");
    struct tern_engine *e = tern_calloc(1, sizeof *e);
    if (!e) return TERN_E_NO_MEMORY;
    e->model = model;
    e->p = p;
    struct tern_model_core *m = &model->core;
    /* The kernels' mode is the backend's (include/tern.h); the CPU is always deterministic. */
    if (m->be->device != TERN_DEVICE_CPU) m->be->deterministic = p.deterministic;
    e->max_context = p.max_context ? p.max_context : m->hp.max_position_embeddings;
    e->max_logits = p.max_seqs > 64 ? p.max_seqs : 64;
    if (e->max_logits > p.max_batch_tokens) e->max_logits = p.max_batch_tokens;
    if (e->max_logits < p.max_seqs) e->max_logits = p.max_seqs;
    enum tern_status st = size_cache(e);
    if (st == TERN_OK) st = tern_kv_cache_init(m, e->n_blocks, p.block_size, &e->kv);
    if (st == TERN_OK)
        st = tern_fwd_init(m, p.max_batch_tokens, p.max_seqs, e->max_blocks_per_seq,
                           e->max_logits, p.block_size, e->max_context, &e->fwd);
    if (st == TERN_OK) {
        const char *g = getenv("TERN_CUDA_GRAPHS");
        if (g && strcmp(g, "0") == 0) e->fwd.use_graphs = false;
        st = tern_engine_host_batch_init(e);
    }
    if (st == TERN_OK) {
        struct tern_sched_params sp = {.max_seqs = p.max_seqs,
                                       .max_batch_tokens = p.max_batch_tokens,
                                       .max_context = e->max_context,
                                       .n_blocks = e->n_blocks[0],
                                       .block_size = p.block_size,
                                       .enable_prefix_cache = true,
                                       .n_groups = m->n_kv_groups};
        for (int32_t g = 0; g < m->n_kv_groups; g++) {
            sp.group_blocks[g] = e->n_blocks[g];
            sp.group_window[g] = m->kv_group_window[g];
        }
        st = tern_sched_create(&sp, &e->sched);
    }
    if (st == TERN_OK) st = tern_sampler_create(m->hp.vocab_size, &e->sampler);
    if (st == TERN_OK) {
        pthread_mutex_init(&e->mu, NULL);
        pthread_mutex_init(&e->step_mu, NULL);
        pthread_cond_init(&e->cv, NULL);
        e->locks_ready = true;
        e->seed_counter = tern_now_ns();
    }
    if (st != TERN_OK) {
        tern_engine_destroy(e);
        return st;
    }
    *out = e;
    return TERN_OK;
}

void tern_engine_destroy(struct tern_engine *e)
{
    if (!e) return;
    struct tern_model_core *m = &e->model->core;
    if (e->locks_ready) {
        tern_engine_stop_loop(e);
        pthread_mutex_destroy(&e->mu);
        pthread_mutex_destroy(&e->step_mu);
        pthread_cond_destroy(&e->cv);
    }
    tern_sampler_destroy(e->sampler);
    tern_engine_gsample_deinit(e);
    tern_engine_embed_deinit(e);
    tern_sched_destroy(e->sched);
    tern_fwd_deinit(m, &e->fwd);
    tern_kv_cache_deinit(m, &e->kv);
    tern_engine_host_batch_deinit(e);
    tern_free(e);
}

enum tern_status tern_engine_host_batch_init(struct tern_engine *e)
{
    int32_t T = e->p.max_batch_tokens, S = e->p.max_seqs, G = e->model->core.n_kv_groups;
    e->hb.ids = tern_calloc((size_t)T, 4);
    e->hb.pos = tern_calloc((size_t)T, 4);
    e->hb.slots = tern_calloc((size_t)G * (size_t)T, 4);
    e->hb.qstart = tern_calloc((size_t)S + 1, 4);
    e->hb.seqlen = tern_calloc((size_t)S, 4);
    e->hb.lidx = tern_calloc((size_t)e->max_logits, 4);
    e->hb.btable = tern_calloc((size_t)G * (size_t)S * (size_t)e->max_blocks_per_seq, 4);
    e->hb.out_ids = tern_calloc((size_t)e->max_logits, 4);
    e->hb.sampled = tern_calloc((size_t)e->max_logits, 4);
    e->hb.logits = tern_calloc((size_t)e->max_logits * (size_t)e->model->core.hp.vocab_size, 4);
    if (!e->hb.sampled || !e->hb.logits) return TERN_E_NO_MEMORY;
    if (!e->hb.ids || !e->hb.pos || !e->hb.slots || !e->hb.qstart || !e->hb.seqlen ||
        !e->hb.lidx || !e->hb.btable || !e->hb.out_ids)
        return TERN_E_NO_MEMORY;
    return TERN_OK;
}

void tern_engine_host_batch_deinit(struct tern_engine *e)
{
    tern_free(e->hb.ids);
    tern_free(e->hb.pos);
    tern_free(e->hb.slots);
    tern_free(e->hb.qstart);
    tern_free(e->hb.seqlen);
    tern_free(e->hb.lidx);
    tern_free(e->hb.btable);
    tern_free(e->hb.out_ids);
    tern_free(e->hb.sampled);
    tern_free(e->hb.logits);
}

/* A solo sequence: a block table in every KV group, over engine-owned
 * storage, its blocks taken from the scheduler's pools. */
struct solo {
    struct tern_kv_seq seq[TERN_MAX_KV_GROUPS];
    int32_t *blocks;
};

/* Runs tokens [start, start + n) of a solo sequence, asking logits for the
 * last `n_logits`. The caller holds step_mu. */
static enum tern_status solo_step_dev(struct tern_engine *e, struct solo *so, const int32_t *ids,
                                      const struct tern_dtensor *ids_dev, int32_t start, int32_t n,
                                      int32_t n_logits)
{
    int32_t bs = e->p.block_size, len = start + n, G = e->model->core.n_kv_groups;
    int32_t mb = e->max_blocks_per_seq, T = e->p.max_batch_tokens;
    struct tern_kv_copy copies[4];
    int32_t n_copies = 0;
    bool fits = len <= e->max_context;
    for (int32_t g = 0; g < G && fits; g++) {
        struct tern_kv *pool = tern_sched_kv_group(e->sched, g);
        fits = tern_kv_seq_blocks_needed(pool, &so->seq[g], n) <= tern_kv_n_free(pool);
    }
    if (!fits)
        return tern_error(TERN_E_CAPACITY, "sequence of %d tokens does not fit the KV cache "
                          "(%d free blocks of %d tokens, context %d)", len,
                          tern_kv_n_free(tern_sched_kv(e->sched)), bs, e->max_context);
    struct tern_batch b = {n, 1, mb, n_logits, e->hb.ids, e->hb.pos, e->hb.qstart, e->hb.seqlen,
                           e->hb.btable, e->hb.slots, e->hb.lidx, .n_kv_groups = G};
    for (int32_t g = 0; g < G; g++) {
        struct tern_kv_seq *seq = &so->seq[g];
        /* a fresh table shares nothing: no copies */
        tern_kv_seq_reserve(tern_sched_kv_group(e->sched, g), seq, n, copies, &n_copies);
        int32_t *slots = e->hb.slots + (size_t)g * T, *bt = e->hb.btable + (size_t)g * mb;
        for (int32_t i = 0; i < n; i++) slots[i] = tern_kv_seq_slot(seq, bs, start + i);
        for (int32_t j = 0; j < seq->n_blocks; j++) bt[j] = seq->blocks[j] < 0 ? 0 : seq->blocks[j];
        b.group_block_tables[g] = bt;
        b.group_slot_mapping[g] = slots;
    }
    for (int32_t i = 0; i < n; i++) {
        e->hb.ids[i] = ids ? ids[i] : 0;
        e->hb.pos[i] = start + i;
    }
    e->hb.qstart[0] = 0;
    e->hb.qstart[1] = n;
    e->hb.seqlen[0] = len;
    for (int32_t i = 0; i < n_logits; i++) e->hb.lidx[i] = n - n_logits + i;
    b.max_blocks_per_seq = so->seq[0].n_blocks;
    /* a decode step (n == 1) replays a graph where it can; prefill runs op by op */
    TERN_TRY(tern_model_forward_graph(&e->model->core, &e->fwd, &e->kv, &b, ids_dev));
    /* no prefix keys: the blocks go back as plain free blocks */
    for (int32_t g = 0; g < G; g++) {
        so->seq[g].n_computed += n;
        tern_kv_seq_trim(tern_sched_kv_group(e->sched, g), &so->seq[g]);
    }
    return TERN_OK;
}

static enum tern_status solo_step(struct tern_engine *e, struct solo *so, const int32_t *ids,
                                  int32_t start, int32_t n, int32_t n_logits)
{
    return solo_step_dev(e, so, ids, NULL, start, n, n_logits);
}

static enum tern_status solo_begin(struct tern_engine *e, struct solo *so)
{
    int32_t G = e->model->core.n_kv_groups, mb = e->max_blocks_per_seq;
    so->blocks = tern_calloc((size_t)G * (size_t)mb, sizeof(int32_t));
    if (!so->blocks) return TERN_E_NO_MEMORY;
    for (int32_t g = 0; g < G; g++) tern_kv_seq_init(&so->seq[g], so->blocks + (size_t)g * mb, mb);
    pthread_mutex_lock(&e->step_mu);
    return TERN_OK;
}

static void solo_end(struct tern_engine *e, struct solo *so)
{
    for (int32_t g = 0; g < e->model->core.n_kv_groups; g++)
        tern_kv_seq_free(tern_sched_kv_group(e->sched, g), &so->seq[g]);
    pthread_mutex_unlock(&e->step_mu);
    tern_free(so->blocks);
}

enum tern_status tern_engine_check_ids(struct tern_engine *e, const int32_t *ids, int32_t n)
{
    if (!ids || n < 1) return tern_error(TERN_E_INVALID_ARG, "token ids: empty sequence");
    int32_t V = e->model->core.hp.vocab_size;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return tern_error(TERN_E_INVALID_ARG, "token ids: id %d at index %d is outside the "
                              "vocabulary [0, %d)", ids[i], i, V);
    if (n > e->max_context)
        return tern_error(TERN_E_CAPACITY, "token ids: %d tokens exceed the context length %d", n,
                          e->max_context);
    return TERN_OK;
}

enum tern_status tern_logits(struct tern_engine *e, const int32_t *ids, int32_t n, float *out)
{
    if (!e || !out) return tern_error(TERN_E_INVALID_ARG, "tern_logits: NULL argument");
    TERN_TRY(tern_engine_check_ids(e, ids, n));
    struct tern_model_core *m = &e->model->core;
    int32_t V = m->hp.vocab_size;
    int32_t chunk = e->max_logits < e->p.max_batch_tokens ? e->max_logits : e->p.max_batch_tokens;
    struct solo so;
    TERN_TRY(solo_begin(e, &so));
    enum tern_status st = TERN_OK;
    for (int32_t s = 0; st == TERN_OK && s < n; s += chunk) {
        int32_t c = n - s < chunk ? n - s : chunk;
        st = solo_step(e, &so, ids + s, s, c, c);
        struct tern_dtensor rows = tern_dtensor_rows(&e->fwd.logits, 0, c);
        if (st == TERN_OK)
            st = m->be->ops->download(m->be, out + (size_t)s * V, &rows,
                                      (size_t)c * (size_t)V * sizeof(float));
    }
    solo_end(e, &so);
    return st;
}

static bool is_eos(const struct tern_hparams *hp, int32_t id)
{
    for (int i = 0; i < hp->n_eos; i++)
        if (hp->eos_token_ids[i] == id) return true;
    return false;
}

enum tern_status tern_generate_greedy(struct tern_engine *e, const int32_t *ids, int32_t n_ids,
                                      int32_t max_tokens, bool stop_at_eos, int32_t *out_ids,
                                      int32_t *n_out)
{
    if (!e || !out_ids || !n_out) return tern_error(TERN_E_INVALID_ARG, "generate: NULL argument");
    *n_out = 0;
    TERN_TRY(tern_engine_check_ids(e, ids, n_ids));
    if (max_tokens < 0) return tern_error(TERN_E_INVALID_ARG, "max_tokens must be >= 0");
    if ((int64_t)n_ids + max_tokens > e->max_context)
        return tern_error(TERN_E_CAPACITY, "prompt (%d tokens) + max_tokens (%d) exceeds the "
                          "context length %d", n_ids, max_tokens, e->max_context);
    struct tern_model_core *m = &e->model->core;
    const struct tern_backend_ops *ops = m->be->ops;
    int32_t chunk = e->p.max_batch_tokens;
    int32_t next = -1;
    struct solo so;
    TERN_TRY(solo_begin(e, &so));
    enum tern_status st = TERN_OK;
    for (int32_t s = 0; st == TERN_OK && s < n_ids && max_tokens > 0; s += chunk) {
        int32_t c = n_ids - s < chunk ? n_ids - s : chunk;
        bool last = s + c == n_ids;
        st = solo_step(e, &so, ids + s, s, c, last ? 1 : 0);
    }
    /* Decode keeps the ids on the device: step i's token, the argmax of its
     * logits, lands in ids_at at the position it takes, and is the next
     * step's input. The backend's step op (f->argmax_fused) writes both
     * itself, the input straight into the batch's token ids; otherwise the
     * argmax op writes ids_at and the next step copies it in. The host reads
     * the new tokens back every `ring` steps (or at the end) to look for
     * EOS, so no step waits for the host. Tokens past an EOS are discarded. */
    struct tern_fwd *f = &e->fwd;
    int32_t ring = e->max_logits < 16 ? e->max_logits : 16;
    int32_t len = n_ids, done = 0;
    bool stopped = false;
    for (int32_t i = 0; st == TERN_OK && i < max_tokens && !stopped; i++) {
        if (i > 0) {
            struct tern_dtensor prev = tern_dtensor_rows(&f->ids_at, len - 1, 1);
            const struct tern_dtensor *in = f->argmax_fused ? &f->batch.token_ids : &prev;
            if ((st = solo_step_dev(e, &so, NULL, in, len - 1, 1, 1)) != TERN_OK) break;
        }
        if (!f->argmax_fused) {
            struct tern_dtensor lg = tern_dtensor_rows(&f->logits, 0, 1);
            struct tern_dtensor oid = tern_dtensor_rows(&f->ids_at, len, 1);
            if ((st = ops->argmax(m->be, &lg, &oid)) != TERN_OK) break;
        }
        len++;
        if (i % ring == ring - 1 || i == max_tokens - 1) {
            int32_t k = i - done + 1;
            struct tern_dtensor got = tern_dtensor_rows(&f->ids_at, n_ids + done, k);
            if ((st = ops->download(m->be, e->hb.out_ids, &got, (size_t)k * 4)) != TERN_OK) break;
            for (int32_t j = 0; j < k && !stopped; j++) {
                next = e->hb.out_ids[j];
                out_ids[(*n_out)++] = next;
                if (stop_at_eos && is_eos(&m->hp, next)) stopped = true;
            }
            done = i + 1;
        }
    }
    solo_end(e, &so);
    return st;
}
