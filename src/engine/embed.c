/*
 * embed.c — embedding requests in the step loop.
 *
 * An embedding request is a prefill-only sequence for the scheduler
 * (sched.h: max_tokens 0, no sample row; no prefix-cache hits unless it
 * pools the last token). In a step that holds one, the forward also leaves
 * every token's final hidden state (after the final norm, F32) in
 * f->residual (f->want_hidden), and after the forward each embedding entry takes from
 * its chunk's rows what its pooling needs:
 *
 *   LAST  the row of the prompt's last token (in the chunk that ends it)
 *   CLS   the row at position pool_skip (the first token pooled)
 *   MEAN  every row at a position >= pool_skip, summed in double in
 *         position order, whatever the chunks (so the sum does not depend
 *         on the chunk size or on the batch)
 *
 * A chunk at position 0 starts the pooling afresh (a preempted sequence
 * recomputes from its start). When the scheduler ends the sequence the
 * vector is made: the pooled row (the mean divided by its count), its first
 * `dims` values, L2-normalised (in double, over those values) when asked.
 * The final DONE event points at it.
 */
#include "engine/stream.h"

#include <math.h>
#include <string.h>

#define EMB_ROWS 64 /* rows downloaded at once */

enum tern_status tern_engine_embed_check(struct tern_engine *e, const struct tern_request *r)
{
    const struct tern_model *m = e->model;
    TERN_TRY(tern_engine_check_ids(e, r->ids, r->n_ids));
    TERN_TRY(tern_sched_check_fits(e->sched, r->n_ids, 0, 1));
    if (r->pooling == TERN_POOLING_NONE && !m->embed.ok)
        return tern_error(TERN_E_UNSUPPORTED, "not an embedding model: %s",
                          m->embed.reason ? m->embed.reason : "no pooling config");
    if (r->pooling < TERN_POOLING_NONE || r->pooling > TERN_POOLING_CLS)
        return tern_error(TERN_E_INVALID_ARG, "pooling %d is not a tern_pooling", (int)r->pooling);
    int32_t E = m->core.hp.hidden_size;
    if (r->dimensions < 0 || r->dimensions > E)
        return tern_error(TERN_E_INVALID_ARG, "dimensions must be in [1, %d], got %d", E,
                          r->dimensions);
    if (r->pool_skip < 0)
        return tern_error(TERN_E_INVALID_ARG, "pool_skip must be >= 0, got %d", r->pool_skip);
    return TERN_OK;
}

enum tern_status tern_engine_embed_init(struct tern_engine *e, struct tern_stream *s,
                                        const struct tern_request *r)
{
    const struct tern_model *m = e->model;
    int32_t E = m->core.hp.hidden_size;
    s->embed = true;
    s->pooling = r->pooling != TERN_POOLING_NONE ? r->pooling : m->embed.pooling;
    s->normalize = r->pooling != TERN_POOLING_NONE ? r->normalize : m->embed.normalize;
    s->dims = r->dimensions > 0 ? r->dimensions : E;
    s->pool_skip = r->pool_skip;
    s->acc = tern_calloc((size_t)E, sizeof *s->acc);
    s->vec = tern_calloc((size_t)s->dims, sizeof *s->vec);
    return s->acc && s->vec ? TERN_OK : TERN_E_NO_MEMORY;
}

bool tern_engine_embed_any(const struct tern_sched_out *out)
{
    for (int32_t i = 0; i < out->n_entries; i++)
        if (((const struct tern_stream *)out->entries[i].user)->embed) return true;
    return false;
}

/* Downloads n <= EMB_ROWS rows of the final hidden states (f->residual, F32)
 * from batch row `row` into e->emb_rows. */
static enum tern_status get_rows(struct tern_engine *e, int32_t row, int32_t n)
{
    struct tern_backend *be = e->model->core.be;
    int32_t E = e->model->core.hp.hidden_size;
    if (!e->emb_rows) {
        e->emb_rows = tern_malloc((size_t)EMB_ROWS * (size_t)E * sizeof(float));
        if (!e->emb_rows) return TERN_E_NO_MEMORY;
    }
    struct tern_dtensor h = tern_dtensor_rows(&e->fwd.residual, row, n);
    if (h.dtype != TERN_DTYPE_F32)
        return tern_error(TERN_E_INTERNAL, "embeddings: the residual is not F32");
    return be->ops->download(be, e->emb_rows, &h, (size_t)n * (size_t)E * sizeof(float));
}

/* Pools positions [start, start + n) of stream s, at batch rows from row0. */
static enum tern_status pool_entry(struct tern_engine *e, struct tern_stream *s, int32_t row0,
                                   int32_t start, int32_t n)
{
    int32_t E = e->model->core.hp.hidden_size;
    if (start == 0) {
        memset(s->acc, 0, (size_t)E * sizeof *s->acc);
        s->n_acc = 0;
    }
    int32_t from = start, to = start + n; /* the positions this entry pools */
    if (s->pooling == TERN_POOLING_LAST) {
        if (to != s->n_prompt) return TERN_OK;
        from = to - 1;
        s->n_acc = 0;
    } else if (s->pooling == TERN_POOLING_CLS) {
        int32_t at = s->pool_skip < s->n_prompt ? s->pool_skip : s->n_prompt - 1;
        if (at < from || at >= to) return TERN_OK;
        from = at;
        to = at + 1;
    } else if (from < s->pool_skip) {
        from = s->pool_skip < to ? s->pool_skip : to;
    }
    for (int32_t p = from; p < to; p += EMB_ROWS) {
        int32_t k = to - p < EMB_ROWS ? to - p : EMB_ROWS;
        TERN_TRY(get_rows(e, row0 + (p - start), k));
        for (int32_t r = 0; r < k; r++) {
            const float *x = e->emb_rows + (size_t)r * (size_t)E;
            if (s->pooling == TERN_POOLING_MEAN)
                for (int32_t i = 0; i < E; i++) s->acc[i] += x[i];
            else
                for (int32_t i = 0; i < E; i++) s->acc[i] = x[i];
            s->n_acc++;
        }
    }
    return TERN_OK;
}

enum tern_status tern_engine_embed_pool(struct tern_engine *e, const struct tern_sched_out *out)
{
    for (int32_t i = 0; i < out->n_entries; i++) {
        const struct tern_sched_entry *en = &out->entries[i];
        struct tern_stream *s = en->user;
        if (!s->embed) continue;
        TERN_TRY(pool_entry(e, s, e->hb.qstart[i], en->start, en->n_new));
    }
    return TERN_OK;
}

void tern_engine_embed_finish(struct tern_engine *e, struct tern_stream *s, struct tern_event *ev)
{
    (void)e;
    double div = s->pooling == TERN_POOLING_MEAN && s->n_acc > 0 ? (double)s->n_acc : 1.0;
    double ss = 0;
    for (int32_t i = 0; i < s->dims; i++) {
        double v = s->acc[i] / div;
        ss += v * v;
    }
    /* as torch's F.normalize: divided by max(norm, 1e-12) */
    double scale = s->normalize ? 1.0 / fmax(sqrt(ss), 1e-12) : 1.0;
    for (int32_t i = 0; i < s->dims; i++) s->vec[i] = (float)(s->acc[i] / div * scale);
    ev->embedding = s->vec;
    ev->n_embedding = s->dims;
    ev->finish = TERN_FINISH_STOP;
}

void tern_engine_embed_deinit(struct tern_engine *e)
{
    tern_free(e->emb_rows);
    e->emb_rows = NULL;
}
