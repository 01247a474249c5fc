/*
 * loop.c — the step loop thread (see serve.c for the overview).
 *
 * Decode steps on a backend with graph hooks (CUDA): a batch where every
 * sequence has one query token is padded to a bucket of sizes
 * (decode_bucket) with dummy sequences (slot -1: nothing is stored; length
 * 1 over block 0: their attention reads one cached row and their outputs
 * are ignored), so that few launch shapes occur and each is replayed from
 * a captured graph. Greedy rows without logprobs or logit processors take
 * their token from an argmax on the device and only the ids come back (a
 * one-sequence decode step on the backend's step op has it already).
 * Every other row is sampled on the device when the backend has a sample
 * op (CUDA; TERN_GPU_SAMPLE=0 turns it off), with the CPU sampler's
 * processors and draw: penalties and logit_bias go up as per-token edits,
 * and only ids and requested logprobs come back. Rows the device cannot
 * take exactly (a logit_bias naming one token twice), and every row
 * without a sample op, download their logits row for the CPU sampler.
 * One difference remains: a row with no finite logit (a broken model) is an
 * error for the CPU sampler but token 0 on the device.
 */
#include "engine/stream.h"

_Static_assert(TERN_SAMPLE_DEV_MAX_TOP == TERN_SAMPLE_MAX_TOP_LOGPROBS,
               "the device returns as many top logprobs as the CPU sampler");

#include <stdlib.h>
#include <string.h>

/* Ends a stream that never reached the scheduler (cancelled or failed). */
static void finish_unsubmitted(struct tern_engine *e, struct tern_stream *s,
                               enum tern_finish_reason why, enum tern_status st, const char *msg)
{
    for (int i = 0; i < s->sp.n; i++) {
        struct tern_event ev = {0};
        ev.type = TERN_EVENT_DONE;
        ev.index = i;
        ev.finish = why;
        ev.status = st;
        ev.final = i == s->sp.n - 1;
        ev.prompt_tokens = s->n_prompt;
        tern_stream_push(s, &ev, NULL, 0, msg);
    }
    tern_stream_unref(s);
}

/* Moves pending submissions into the scheduler and applies cancellations.
 * Called with e->mu held and step_mu held. */
static void drain(struct tern_engine *e)
{
    struct tern_stream *s = e->pending_head;
    e->pending_head = e->pending_tail = NULL;
    while (s) {
        struct tern_stream *next = s->next;
        s->next = NULL;
        if (atomic_load(&s->cancel_asked)) {
            e->stats.requests_cancelled++;
            finish_unsubmitted(e, s, TERN_FINISH_CANCELLED, TERN_E_CANCELLED, NULL);
        } else {
            struct tern_sched_request rq = {s->prompt,   s->n_prompt,     s->sp.max_tokens,
                                            s->sp.n,     s->stop_ids,     s->sp.n_stop_ids, s,
                                            s->embed && s->pooling != TERN_POOLING_LAST};
            enum tern_status st = tern_sched_submit(e->sched, &rq, &s->req_id);
            if (st != TERN_OK) {
                e->stats.requests_rejected++;
                finish_unsubmitted(e, s, TERN_FINISH_ERROR, st, tern_last_error());
            } else {
                s->submitted = true;
                s->live_prev = NULL;
                s->live_next = e->live;
                if (e->live) e->live->live_prev = s;
                e->live = s;
                e->stats.prompt_tokens += s->n_prompt;
            }
        }
        s = next;
    }
    struct tern_stream *c = e->cancel_head;
    e->cancel_head = NULL;
    while (c) {
        struct tern_stream *next = c->cancel_next;
        if (c->submitted) tern_sched_cancel(e->sched, c->req_id);
        tern_stream_unref(c); /* the cancel list's reference */
        c = next;
    }
}

static enum tern_finish_reason finish_of(enum tern_sched_finish f)
{
    switch (f) {
    case TERN_SCHED_FINISH_STOP: return TERN_FINISH_STOP;
    case TERN_SCHED_FINISH_LENGTH: return TERN_FINISH_LENGTH;
    case TERN_SCHED_FINISH_CANCELLED: return TERN_FINISH_CANCELLED;
    default: return TERN_FINISH_NONE;
    }
}

static void report_finished(struct tern_engine *e, const struct tern_sched_out *out)
{
    for (int32_t i = 0; i < out->n_finished; i++) {
        const struct tern_sched_done *d = &out->finished[i];
        struct tern_stream *s = d->user;
        struct tern_event ev = {0};
        ev.type = TERN_EVENT_DONE;
        ev.index = d->seq_idx;
        ev.finish = finish_of(d->reason);
        ev.status = d->reason == TERN_SCHED_FINISH_CANCELLED ? TERN_E_CANCELLED : TERN_OK;
        ev.prompt_tokens = d->n_prompt;
        ev.cached_tokens = d->n_cached;
        ev.completion_tokens = d->n_tokens - d->n_prompt;
        ev.queue_ns = (int64_t)(s->t_admit ? s->t_admit - s->t_submit : 0);
        ev.ttft_ns = (int64_t)(s->t_first ? s->t_first - s->t_submit : 0);
        ev.final = d->req_done;
        const char *tail = NULL;
        size_t tail_len = 0;
        if (s->detok && d->reason != TERN_SCHED_FINISH_CANCELLED)
            tern_detok_stream_flush(s->detok[d->seq_idx], &tail, &tail_len);
        if (s->embed && d->reason != TERN_SCHED_FINISH_CANCELLED)
            tern_engine_embed_finish(e, s, &ev);
        pthread_mutex_lock(&e->mu);
        if (d->reason == TERN_SCHED_FINISH_CANCELLED) e->stats.requests_cancelled += d->req_done;
        else e->stats.requests_finished += d->req_done;
        e->stats.cached_prompt_tokens += d->seq_idx == 0 ? d->n_cached : 0;
        pthread_mutex_unlock(&e->mu);
        tern_stream_push(s, &ev, tail, tail_len, NULL);
        if (d->req_done) {
            if (s->live_prev) s->live_prev->live_next = s->live_next;
            else e->live = s->live_next;
            if (s->live_next) s->live_next->live_prev = s->live_prev;
            tern_stream_unref(s); /* the engine's reference */
        }
    }
}

/* Copies whole blocks (every layer, K and V) as the scheduler asked. */
static enum tern_status do_copies(struct tern_engine *e, const struct tern_sched_out *out)
{
    struct tern_model_core *m = &e->model->core;
    struct tern_backend *be = m->be;
    for (int32_t i = 0; i < out->n_copies; i++) {
        for (int l = 0; l < m->hp.num_hidden_layers; l++) {
            struct tern_dtensor *ts[2] = {&e->kv.layers[l].k, &e->kv.layers[l].v};
            for (int j = 0; j < 2; j++) {
                struct tern_dtensor src = tern_dtensor_rows(ts[j], out->copies[i].src, 1);
                struct tern_dtensor dst = tern_dtensor_rows(ts[j], out->copies[i].dst, 1);
                TERN_TRY(be->ops->copy(be, &dst, &src, tern_dtensor_bytes(&src)));
            }
        }
    }
    return TERN_OK;
}

/* True when the row's token is the plain argmax of the raw logits. */
static bool argmax_on_device(const struct tern_stream *s)
{
    const struct tern_sample_params *p = &s->sample;
    return p->temperature == 0.0f && !p->logprobs && p->top_logprobs == 0 &&
           p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f &&
           p->frequency_penalty == 0.0f && p->n_bias == 0;
}

/* Rows the device sampler may take: every non-plain-argmax row, once device
 * sampling is on (gsample_row may still hand one back to the CPU). */
static bool sample_on_device(const struct tern_engine *e, const struct tern_stream *s)
{
    return e->gsamp_state > 0 && !argmax_on_device(s);
}

void tern_engine_gsample_deinit(struct tern_engine *e)
{
    struct tern_backend *be = e->model->core.be;
    struct tern_dtensor *ts[5] = {&e->gsamp_params, &e->gsamp_res, &e->gsamp_top, &e->gsamp_edits,
                                  &e->gsamp_scratch};
    for (int i = 0; i < 5; i++)
        if (ts[i]->buf) tern_dtensor_free(be, ts[i]);
    tern_free(e->gsamp_host);
    tern_free(e->gsamp_res_host);
    tern_free(e->gsamp_top_host);
    tern_free(e->gsamp_on);
    tern_free(e->gsamp_edit_host);
    tern_free(e->gsamp_slot);
    tern_free(e->gsamp_count);
    e->gsamp_host = NULL;
    e->gsamp_res_host = e->gsamp_top_host = e->gsamp_slot = e->gsamp_count = NULL;
    e->gsamp_on = NULL;
    e->gsamp_edit_host = NULL;
    e->gsamp_edit_cap = 0;
}

/* Sets up device sampling once (on by default where the backend has a
 * sample op; TERN_GPU_SAMPLE=0 turns it off): buffers for max_logits rows. */
static enum tern_status gsample_init(struct tern_engine *e)
{
    struct tern_backend *be = e->model->core.be;
    const char *env = getenv("TERN_GPU_SAMPLE");
    e->gsamp_state = -1;
    if (!be->ops->sample || (env && strcmp(env, "0") == 0)) return TERN_OK;
    int32_t V = e->model->core.hp.vocab_size;
    int64_t n = e->max_logits, nb = n * (int64_t)sizeof(struct tern_sample_dev);
    int64_t sr[2] = {n, 2}, stp[2] = {n, 2 * TERN_SAMPLE_DEV_MAX_TOP};
    enum tern_status st;
    if ((st = tern_dtensor_alloc(be, TERN_DTYPE_U8, 1, &nb, &e->gsamp_params)) ||
        (st = tern_dtensor_alloc(be, TERN_DTYPE_I32, 2, sr, &e->gsamp_res)) ||
        (st = tern_dtensor_alloc(be, TERN_DTYPE_I32, 2, stp, &e->gsamp_top)))
        goto fail;
    e->gsamp_host = tern_calloc((size_t)n, sizeof *e->gsamp_host);
    e->gsamp_res_host = tern_calloc((size_t)n * 2, 4);
    e->gsamp_top_host = tern_calloc((size_t)n * 2 * TERN_SAMPLE_DEV_MAX_TOP, 4);
    e->gsamp_on = tern_calloc((size_t)n, sizeof *e->gsamp_on);
    e->gsamp_slot = tern_malloc((size_t)V * 4);
    e->gsamp_count = tern_calloc((size_t)V, 4);
    if (!e->gsamp_host || !e->gsamp_res_host || !e->gsamp_top_host || !e->gsamp_on ||
        !e->gsamp_slot || !e->gsamp_count) {
        st = TERN_E_NO_MEMORY;
        goto fail;
    }
    memset(e->gsamp_slot, 0xff, (size_t)V * 4);
    e->gsamp_state = 1;
    return TERN_OK;
fail:
    tern_engine_gsample_deinit(e);
    return st;
}

/* The edit of token t in the row being built (from edit0), made on first use. */
static struct tern_sample_edit *edit_of(struct tern_engine *e, int32_t t, int64_t *n_edit)
{
    if (e->gsamp_slot[t] < 0) {
        e->gsamp_slot[t] = (int32_t)*n_edit;
        e->gsamp_edit_host[(*n_edit)++] = (struct tern_sample_edit){t, 0, 1.0f, 0.0f, 0.0f};
    }
    return &e->gsamp_edit_host[e->gsamp_slot[t]];
}

/* Appends row r's logit edits (penalties over its tokens, logit_bias) at
 * edits[*n_edit...], as sample.c applies them. False when the row must go
 * to the CPU: a logit_bias naming one token twice (the CPU adds both, in
 * order; one edit holds one bias). */
static bool gsample_edits(struct tern_engine *e, const struct tern_sched_sample *sm,
                          const struct tern_sample_params *p, int64_t *n_edit)
{
    int32_t V = e->model->core.hp.vocab_size;
    int64_t first = *n_edit;
    bool ok = true;
    if (p->repetition_penalty != 1.0f)
        for (int32_t i = 0; i < sm->n_tokens; i++) {
            int32_t t = sm->tokens[i];
            if (t < 0 || t >= V) continue;
            struct tern_sample_edit *d = edit_of(e, t, n_edit);
            d->flags |= TERN_SAMPLE_EDIT_REP;
            d->rep = p->repetition_penalty;
        }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        for (int32_t i = sm->n_prompt; i < sm->n_tokens; i++)
            if (sm->tokens[i] >= 0 && sm->tokens[i] < V) e->gsamp_count[sm->tokens[i]]++;
        for (int32_t i = sm->n_prompt; i < sm->n_tokens; i++) {
            int32_t t = sm->tokens[i];
            if (t < 0 || t >= V || e->gsamp_count[t] == 0) continue;
            struct tern_sample_edit *d = edit_of(e, t, n_edit);
            d->flags |= TERN_SAMPLE_EDIT_SUB;
            d->sub = tern_sample_penalty_sub(p, e->gsamp_count[t]);
            e->gsamp_count[t] = 0;
        }
    }
    for (int32_t i = 0; i < p->n_bias; i++) {
        struct tern_sample_edit *d = edit_of(e, p->bias_ids[i], n_edit);
        ok &= !(d->flags & TERN_SAMPLE_EDIT_BIAS);
        d->flags |= TERN_SAMPLE_EDIT_BIAS;
        d->bias = p->bias_values[i];
    }
    for (int64_t i = first; i < *n_edit; i++) e->gsamp_slot[e->gsamp_edit_host[i].id] = -1;
    if (!ok) *n_edit = first;
    return ok;
}

/* Room for n more edits on the host and the device. */
static enum tern_status gsample_reserve(struct tern_engine *e, int64_t n)
{
    if (n <= e->gsamp_edit_cap) return TERN_OK;
    int64_t cap = e->gsamp_edit_cap ? e->gsamp_edit_cap : 4096;
    while (cap < n) cap *= 2;
    void *h = tern_realloc_array(e->gsamp_edit_host, (size_t)cap, sizeof *e->gsamp_edit_host);
    if (!h) return TERN_E_NO_MEMORY;
    e->gsamp_edit_host = h;
    struct tern_backend *be = e->model->core.be;
    if (e->gsamp_edits.buf) tern_dtensor_free(be, &e->gsamp_edits);
    e->gsamp_edit_cap = 0;
    int64_t nb = cap * (int64_t)sizeof(struct tern_sample_edit);
    TERN_TRY(tern_dtensor_alloc(be, TERN_DTYPE_U8, 1, &nb, &e->gsamp_edits));
    e->gsamp_edit_cap = cap;
    return TERN_OK;
}

/* Fills row r's device settings and edits; gsamp_on[r] = false leaves the
 * row to the CPU (it gets a cheap greedy setting and its result is unused). */
static enum tern_status gsample_row(struct tern_engine *e, const struct tern_sched_sample *sm,
                                    int32_t r, int64_t *n_edit)
{
    const struct tern_stream *s = sm->user;
    const struct tern_sample_params *p = &s->sample;
    struct tern_sample_dev d = {0};
    int64_t edit0 = *n_edit;
    e->gsamp_on[r] = sample_on_device(e, s);
    if (e->gsamp_on[r]) {
        TERN_TRY(gsample_reserve(e, *n_edit + sm->n_tokens + p->n_bias));
        e->gsamp_on[r] = gsample_edits(e, sm, p, n_edit);
    }
    if (e->gsamp_on[r])
        d = (struct tern_sample_dev){p->temperature, p->top_k, p->top_p, p->min_p, p->seed,
                                     (uint32_t)sm->seq_idx, p->top_logprobs,
                                     (uint64_t)sm->n_generated, (int32_t)edit0,
                                     (int32_t)(*n_edit - edit0),
                                     p->logprobs || p->top_logprobs > 0, 0};
    e->gsamp_host[r] = d;
    return TERN_OK;
}

/* Draws rows [0, n) on the device (the rows gsample_row takes); only the
 * ids and logprobs come back, the top logprobs when a row asked. */
static enum tern_status gsample_rows(struct tern_engine *e, struct tern_sched_out *out)
{
    struct tern_backend *be = e->model->core.be;
    int32_t n = out->n_samples, V = e->model->core.hp.vocab_size;
    int64_t n_edit = 0;
    bool any_top = false;
    for (int32_t r = 0; r < n; r++) {
        TERN_TRY(gsample_row(e, &out->samples[r], r, &n_edit));
        any_top |= e->gsamp_host[r].n_top > 0;
    }
    if (n_edit > 0 && !e->gsamp_scratch.buf) {
        int64_t sh[2] = {e->max_logits, V};
        TERN_TRY(tern_dtensor_alloc(be, TERN_DTYPE_F32, 2, sh, &e->gsamp_scratch));
    }
    struct tern_dtensor lg = tern_dtensor_rows(&e->fwd.logits, 0, n);
    struct tern_dtensor res = tern_dtensor_rows(&e->gsamp_res, 0, n);
    struct tern_dtensor top = tern_dtensor_rows(&e->gsamp_top, 0, n);
    struct tern_dtensor scr = n_edit > 0 ? tern_dtensor_rows(&e->gsamp_scratch, 0, n)
                                         : (struct tern_dtensor){0};
    struct tern_sample_io io = {&e->gsamp_params, n_edit > 0 ? &e->gsamp_edits : NULL,
                                n_edit > 0 ? &scr : NULL, &res, any_top ? &top : NULL};
    TERN_TRY(be->ops->upload(be, &e->gsamp_params, e->gsamp_host,
                             (size_t)n * sizeof(struct tern_sample_dev)));
    if (n_edit > 0)
        TERN_TRY(be->ops->upload(be, &e->gsamp_edits, e->gsamp_edit_host,
                                 (size_t)n_edit * sizeof(struct tern_sample_edit)));
    TERN_TRY(be->ops->sample(be, &lg, &io));
    TERN_TRY(be->ops->download(be, e->gsamp_res_host, &res, (size_t)n * 8));
    if (any_top)
        TERN_TRY(be->ops->download(be, e->gsamp_top_host, &top,
                                   (size_t)n * 8 * TERN_SAMPLE_DEV_MAX_TOP));
    return TERN_OK;
}

/* Row r's result from the device sampler's outputs. */
static void gsample_result(const struct tern_engine *e, int32_t r,
                           const struct tern_sample_params *p, struct tern_sample_result *res)
{
    memset(res, 0, sizeof *res);
    res->token = e->gsamp_res_host[2 * r];
    if (!p->logprobs && p->top_logprobs == 0) return;
    memcpy(&res->logprob, &e->gsamp_res_host[2 * r + 1], 4);
    res->n_top = p->top_logprobs;
    const int32_t *t = e->gsamp_top_host + (size_t)r * 2 * TERN_SAMPLE_DEV_MAX_TOP;
    for (int32_t i = 0; i < res->n_top; i++) {
        res->top_ids[i] = t[i];
        memcpy(&res->top_logprobs[i], &t[TERN_SAMPLE_DEV_MAX_TOP + i], 4);
    }
}

/* Samples every row; forced ids (testing) replace the draw. Rows that are
 * a plain argmax come from the device argmax (ids only); with device
 * sampling on, the others are drawn on the device (ids and requested
 * logprobs come back); what is left downloads its logits row and runs the
 * CPU sampler. */
static enum tern_status sample_rows(struct tern_engine *e, struct tern_sched_out *out,
                                    struct tern_sample_result *res)
{
    struct tern_model_core *m = &e->model->core;
    struct tern_backend *be = m->be;
    int32_t V = m->hp.vocab_size, n = out->n_samples, n_dev = 0, n_gs = 0;
    for (int32_t r = 0; r < n; r++) n_dev += argmax_on_device(out->samples[r].user);
    if (e->gsamp_state == 0) TERN_TRY(gsample_init(e));
    for (int32_t r = 0; r < n; r++) n_gs += sample_on_device(e, out->samples[r].user);
    if (n_gs > 0) TERN_TRY(gsample_rows(e, out));
    if (n_dev > 0 && n == 1 && e->fwd.argmax_fused) {
        /* the step op wrote the argmax at the position the token takes */
        struct tern_dtensor id = tern_dtensor_rows(&e->fwd.ids_at, out->samples[0].n_tokens, 1);
        TERN_TRY(be->ops->download(be, e->hb.out_ids, &id, 4));
    } else if (n_dev > 0) {
        struct tern_dtensor lg = tern_dtensor_rows(&e->fwd.logits, 0, n);
        struct tern_dtensor ids = tern_dtensor_rows(&e->fwd.ids_out, 0, n);
        TERN_TRY(be->ops->argmax(be, &lg, &ids));
        TERN_TRY(be->ops->download(be, e->hb.out_ids, &ids, (size_t)n * 4));
    }
    for (int32_t r = 0; r < n; r++) {
        const struct tern_sched_sample *sm = &out->samples[r];
        struct tern_stream *s = sm->user;
        if (argmax_on_device(s)) {
            memset(&res[r], 0, sizeof res[r]);
            res[r].token = e->hb.out_ids[r];
        } else if (n_gs > 0 && e->gsamp_on[r]) {
            gsample_result(e, r, &s->sample, &res[r]);
        } else {
            float *row = e->hb.logits + (size_t)r * V;
            struct tern_dtensor lr = tern_dtensor_rows(&e->fwd.logits, r, 1);
            TERN_TRY(be->ops->download(be, row, &lr, (size_t)V * 4));
            struct tern_sample_ctx ctx = {sm->tokens, sm->n_prompt, sm->n_tokens,
                                          (uint32_t)sm->seq_idx, (uint64_t)sm->n_generated};
            TERN_TRY(tern_sampler_sample(e->sampler, row, &s->sample, &ctx, &res[r]));
        }
        if (s->n_forced > 0)
            res[r].token = s->forced[sm->n_generated < s->n_forced ? sm->n_generated
                                                                    : s->n_forced - 1];
        e->hb.sampled[r] = res[r].token;
    }
    return TERN_OK;
}

/* The padded size of a decode batch of n sequences: exact up to 8 (the GEMV
 * range), then multiples of 8 up to 64, of 16 up to 128, of 32 beyond. */
static int32_t decode_bucket(int32_t n)
{
    int32_t q = n <= 8 ? 1 : n <= 64 ? 8 : n <= 128 ? 16 : 32;
    return (n + q - 1) / q * q;
}

/* Pads a pure decode batch (every sequence one query token, one logits row
 * each) to its bucket with dummy sequences, on backends that capture
 * graphs. The padding depends only on the batch, never on whether replay is
 * on, so results are the same either way. */
static void pad_decode(struct tern_engine *e, struct tern_batch *b)
{
    struct tern_backend *be = e->model->core.be;
    int32_t n = b->n_seqs;
    if (!be->ops->graph_begin || b->n_tokens != n || b->n_logits != n) return;
    int32_t cap = e->p.max_seqs < e->p.max_batch_tokens ? e->p.max_seqs : e->p.max_batch_tokens;
    if (cap > e->max_logits) cap = e->max_logits;
    int32_t np = decode_bucket(n);
    if (np > cap) np = cap;
    struct tern_sched_caps caps = tern_sched_get_caps(e->sched);
    size_t tables_n = (size_t)caps.max_seqs * (size_t)caps.max_blocks_per_seq;
    for (int32_t i = n; i < np; i++) {
        e->hb.ids[i] = 0;
        e->hb.pos[i] = 0;
        e->hb.qstart[i + 1] = i + 1;
        e->hb.seqlen[i] = 1;
        e->hb.lidx[i] = i;
        for (int32_t g = 0; g < caps.n_groups; g++) {
            e->hb.slots[(size_t)g * caps.max_tokens + (size_t)i] = -1;
            e->hb.btable[g * tables_n + (size_t)i * b->max_blocks_per_seq] = 0;
        }
    }
    b->n_tokens = b->n_seqs = b->n_logits = np > n ? np : n;
}

static void emit_tokens(struct tern_engine *e, struct tern_sched_out *out,
                        const struct tern_sample_result *res)
{
    uint64_t now = tern_now_ns();
    for (int32_t r = 0; r < out->n_samples; r++) {
        const struct tern_sched_sample *sm = &out->samples[r];
        struct tern_stream *s = sm->user;
        if (sm->finish == TERN_SCHED_FINISH_CANCELLED) continue;
        if (!s->t_first) s->t_first = now;
        struct tern_event ev = {0};
        ev.type = TERN_EVENT_TOKEN;
        ev.index = sm->seq_idx;
        ev.token = sm->token;
        ev.logprob = res[r].logprob;
        ev.n_top = s->sp.logprobs > 0 ? res[r].n_top : 0;
        ev.top_ids = res[r].top_ids;
        ev.top_logprobs = res[r].top_logprobs;
        const char *piece = NULL;
        size_t len = 0;
        if (s->detok) tern_detok_stream_push(s->detok[sm->seq_idx], sm->token, &piece, &len);
        tern_stream_push(s, &ev, piece, len, NULL);
        /* a forced script that ran out ends its sequence */
        if (s->n_forced > 0 && sm->finish == TERN_SCHED_FINISH_NONE &&
            sm->n_generated + 1 >= s->n_forced)
            tern_sched_stop(e->sched, sm->req_id, sm->seq_idx);
    }
    pthread_mutex_lock(&e->mu);
    e->stats.generated_tokens += out->n_samples;
    pthread_mutex_unlock(&e->mu);
}

/* One step. Returns false when there was nothing to do. */
static bool step(struct tern_engine *e, struct tern_sample_result *res)
{
    struct tern_sched_out *out = tern_sched_schedule(e->sched);
    report_finished(e, out);
    if (out->n_entries == 0) return out->n_finished > 0;
    uint64_t now = tern_now_ns();
    for (int32_t i = 0; i < out->n_entries; i++) {
        struct tern_stream *s = out->entries[i].user;
        if (!s->t_admit) s->t_admit = now;
    }
    struct tern_sched_batch_storage st = {e->hb.ids,    e->hb.pos,   e->hb.qstart, e->hb.seqlen,
                                          e->hb.btable, e->hb.slots, e->hb.lidx};
    struct tern_batch batch;
    tern_sched_build_batch(e->sched, &st, &batch);
    pad_decode(e, &batch);
    enum tern_status s = do_copies(e, out);
    e->fwd.want_hidden = tern_engine_embed_any(out); /* embeddings pool the final rows */
    if (s == TERN_OK) s = tern_model_forward_graph(&e->model->core, &e->fwd, &e->kv, &batch, NULL);
    if (s == TERN_OK && out->n_samples) s = sample_rows(e, out, res);
    if (s == TERN_OK && e->fwd.want_hidden) s = tern_engine_embed_pool(e, out);
    e->fwd.want_hidden = false;
    if (s != TERN_OK) {
        /* A device failure mid-step: fail every request in this step. */
        tern_log(TERN_LOG_ERROR, "engine step failed: %s", tern_last_error());
        for (int32_t i = 0; i < out->n_entries; i++)
            tern_sched_cancel(e->sched, out->entries[i].req_id);
        return true;
    }
    tern_sched_commit(e->sched, e->hb.sampled);
    emit_tokens(e, out, res);
    pthread_mutex_lock(&e->mu);
    e->stats.steps++;
    pthread_mutex_unlock(&e->mu);
    return true;
}

static void update_gauges(struct tern_engine *e)
{
    int64_t total = 0, free_b = 0;
    for (int32_t g = 0; g < e->model->core.n_kv_groups; g++) { /* every KV group's pool */
        struct tern_kv *kv = tern_sched_kv_group(e->sched, g);
        total += tern_kv_n_blocks(kv);
        free_b += tern_kv_n_free(kv);
    }
    pthread_mutex_lock(&e->mu);
    e->stats.running = tern_sched_n_running(e->sched);
    e->stats.waiting = tern_sched_n_waiting(e->sched);
    e->stats.kv_blocks_total = total;
    e->stats.kv_blocks_free = free_b;
    e->stats.kv_blocks_used = e->stats.kv_blocks_total - e->stats.kv_blocks_free;
    pthread_mutex_unlock(&e->mu);
}

static void *loop_main(void *arg)
{
    struct tern_engine *e = arg;
    struct tern_sample_result *res = tern_calloc((size_t)e->max_logits, sizeof *res);
    bool busy = false;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !busy && !e->pending_head && !e->cancel_head)
            pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        pthread_mutex_lock(&e->step_mu);
        pthread_mutex_lock(&e->mu);
        drain(e);
        pthread_mutex_unlock(&e->mu);
        busy = res ? step(e, res) : false;
        if (!res) tern_log(TERN_LOG_ERROR, "engine: out of memory for sampling results");
        update_gauges(e);
        pthread_mutex_unlock(&e->step_mu);
        if (!busy && tern_sched_n_requests(e->sched) > 0) busy = true;
    }
    tern_free(res);
    return NULL;
}

enum tern_status tern_engine_start(struct tern_engine *e)
{
    if (!e) return tern_error(TERN_E_INVALID_ARG, "engine is NULL");
    pthread_mutex_lock(&e->mu);
    enum tern_status st = TERN_OK;
    if (!e->started) {
        if (pthread_create(&e->thread, NULL, loop_main, e) != 0)
            st = tern_error(TERN_E_INTERNAL, "engine: cannot start the step thread");
        else e->started = true;
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

void tern_engine_stop_loop(struct tern_engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool started = e->started;
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (started) pthread_join(e->thread, NULL);
    e->started = false;
    /* End whatever is left: pending ones directly, scheduled ones by cancel. */
    pthread_mutex_lock(&e->mu);
    struct tern_stream *s = e->pending_head;
    for (; s; s = s->next) atomic_store(&s->cancel_asked, true);
    drain(e);
    pthread_mutex_unlock(&e->mu);
    if (!e->sched) return;
    /* Every request still in the scheduler (queued or running) is cancelled,
     * then reported until none is left. */
    for (struct tern_stream *l = e->live; l; l = l->live_next) tern_sched_cancel(e->sched, l->req_id);
    for (int guard = 0; guard < 100000 && e->live; guard++) {
        struct tern_sched_out *out = tern_sched_schedule(e->sched);
        for (int32_t i = 0; i < out->n_entries; i++)
            tern_sched_cancel(e->sched, out->entries[i].req_id);
        report_finished(e, out);
        if (out->n_entries == 0 && out->n_finished == 0) break;
    }
}
