/*
 * serve.c — the engine's step loop on its own thread:
 *
 *   drain submissions and cancellations -> schedule -> block copies ->
 *   build batch -> forward -> download logits rows -> sample -> commit ->
 *   stream TOKEN events (detokenized) and DONE events (usage, finish reason)
 *
 * Submission validates everything that can make a request impossible
 * (ids, sampling fields, prompt + max_tokens against the context and the
 * whole KV pool; an embedding request's pooling, embed.c) and answers at
 * once; the loop then owns the request.
 */
#include "engine/stream.h"

#include <math.h>
#include <string.h>

struct tern_sampling_params tern_sampling_default_params(void)
{
    struct tern_sampling_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    p.max_tokens = 16;
    p.logprobs = -1;
    p.n = 1;
    return p;
}

static double gen_num(const json_t *o, const char *key, double def)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

struct tern_sampling_params tern_model_sampling_defaults(const struct tern_model *m)
{
    struct tern_sampling_params p = tern_sampling_default_params();
    if (!m || !m->has_gen_cfg) return p;
    const json_t *g = m->gen_cfg.root;
    /* As transformers: sampling settings apply only when do_sample is true. */
    if (json_is_true(json_object_get(g, "do_sample"))) {
        p.temperature = (float)gen_num(g, "temperature", 1.0);
        p.top_k = (int32_t)gen_num(g, "top_k", 50);
        p.top_p = (float)gen_num(g, "top_p", 1.0);
        p.min_p = (float)gen_num(g, "min_p", 0.0);
    }
    p.repetition_penalty = (float)gen_num(g, "repetition_penalty", 1.0);
    return p;
}

/* ---------------------------------------------------------------- submit */

static enum tern_status copy_ids(const int32_t *src, int32_t n, int32_t **dst)
{
    *dst = NULL;
    if (n <= 0) return TERN_OK;
    *dst = tern_malloc((size_t)n * sizeof(int32_t));
    if (!*dst) return TERN_E_NO_MEMORY;
    memcpy(*dst, src, (size_t)n * sizeof(int32_t));
    return TERN_OK;
}

static enum tern_status check_request(struct tern_engine *e, const struct tern_request *r)
{
    const struct tern_sampling_params *sp = &r->sampling;
    if (r->embed) return tern_engine_embed_check(e, r);
    if (!e->model->core.w.lm_head.weight.buf)
        return tern_error(TERN_E_UNSUPPORTED, "%s: the model has no language-model head "
                          "(lm_head): it computes embeddings only", e->model->dir);
    TERN_TRY(tern_engine_check_ids(e, r->ids, r->n_ids));
    if (sp->max_tokens < 1)
        return tern_error(TERN_E_INVALID_ARG, "max_tokens must be >= 1, got %d", sp->max_tokens);
    if (sp->n < 1 || sp->n > e->p.max_seqs)
        return tern_error(TERN_E_INVALID_ARG, "n must be in [1, %d], got %d", e->p.max_seqs,
                          sp->n);
    if (sp->logprobs < -1 || sp->logprobs > TERN_SAMPLE_MAX_TOP_LOGPROBS)
        return tern_error(TERN_E_INVALID_ARG, "top_logprobs must be in [0, 20], got %d",
                          sp->logprobs);
    if ((int64_t)r->n_ids + sp->max_tokens > e->max_context)
        return tern_error(TERN_E_CAPACITY,
                          "prompt (%d tokens) + max_tokens (%d) exceeds the context length %d",
                          r->n_ids, sp->max_tokens, e->max_context);
    TERN_TRY(tern_sched_check_fits(e->sched, r->n_ids, sp->max_tokens, 1));
    int32_t V = e->model->core.hp.vocab_size;
    for (int32_t i = 0; i < sp->n_stop_ids; i++)
        if (sp->stop_ids[i] < 0 || sp->stop_ids[i] >= V)
            return tern_error(TERN_E_INVALID_ARG, "stop token id %d is outside the vocabulary",
                              sp->stop_ids[i]);
    if (r->detokenize && !e->model->tok)
        return tern_error(TERN_E_INVALID_ARG, "detokenize: the model has no tokenizer");
    return TERN_OK;
}

static void to_sample_params(struct tern_engine *e, struct tern_stream *s)
{
    const struct tern_sampling_params *sp = &s->sp;
    struct tern_sample_params *o = &s->sample;
    *o = tern_sample_default_params();
    o->temperature = sp->temperature;
    o->top_k = sp->top_k;
    o->top_p = sp->top_p;
    o->min_p = sp->min_p;
    o->repetition_penalty = sp->repetition_penalty;
    o->presence_penalty = sp->presence_penalty;
    o->frequency_penalty = sp->frequency_penalty;
    o->bias_ids = s->bias_ids;
    o->bias_values = s->bias_values;
    o->n_bias = sp->n_bias;
    o->seed = sp->has_seed ? sp->seed : e->seed_counter++ * 0x9E3779B97F4A7C15ull;
    o->logprobs = sp->logprobs >= 0;
    o->top_logprobs = sp->logprobs > 0 ? sp->logprobs : 0;
}

/* Stop ids: the request's plus the model's end-of-sequence ids. */
static enum tern_status build_stops(struct tern_engine *e, struct tern_stream *s)
{
    const struct tern_hparams *hp = &e->model->core.hp;
    int32_t n_eos = s->sp.ignore_eos ? 0 : hp->n_eos;
    int32_t n = s->sp.n_stop_ids + n_eos;
    s->sp.n_stop_ids = n;
    if (!n) return TERN_OK;
    int32_t *ids = tern_malloc((size_t)n * sizeof(int32_t));
    if (!ids) return TERN_E_NO_MEMORY;
    for (int32_t i = 0; i < n - n_eos; i++) ids[i] = s->stop_ids[i];
    for (int32_t i = 0; i < n_eos; i++) ids[n - n_eos + i] = hp->eos_token_ids[i];
    tern_free(s->stop_ids);
    s->stop_ids = ids;
    return TERN_OK;
}

static enum tern_status stream_make(struct tern_engine *e, const struct tern_request *r,
                                    struct tern_stream **out)
{
    struct tern_stream *s = tern_calloc(1, sizeof *s);
    if (!s) return TERN_E_NO_MEMORY;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->engine = e;
    s->refs = 2;
    s->sp = r->sampling;
    s->n_prompt = r->n_ids;
    s->detokenize = r->detokenize && !r->embed;
    s->n_forced = r->forced_ids && !r->embed ? r->n_forced : 0;
    s->t_submit = tern_now_ns();
    enum tern_status st = TERN_OK;
    if (r->embed) { /* one prefilled sequence, nothing sampled */
        s->sp = tern_sampling_default_params();
        s->sp.max_tokens = 0;
        s->sp.ignore_eos = true;
        st = tern_engine_embed_init(e, s, r);
    }
    s->n_live = s->sp.n;
    if (st || (st = copy_ids(r->ids, r->n_ids, &s->prompt)) ||
        (st = copy_ids(r->sampling.stop_ids, r->sampling.n_stop_ids, &s->stop_ids)) ||
        (st = copy_ids(r->sampling.bias_ids, r->sampling.n_bias, &s->bias_ids)) ||
        (st = copy_ids(r->forced_ids, s->n_forced, &s->forced)) || (st = build_stops(e, s)))
        goto fail;
    if (r->sampling.n_bias > 0) {
        s->bias_values = tern_malloc((size_t)r->sampling.n_bias * sizeof(float));
        if (!s->bias_values) {
            st = TERN_E_NO_MEMORY;
            goto fail;
        }
        memcpy(s->bias_values, r->sampling.bias_values, (size_t)r->sampling.n_bias * sizeof(float));
    }
    to_sample_params(e, s);
    if (!s->embed &&
        (st = tern_sample_params_check(&s->sample, e->model->core.hp.vocab_size)) != TERN_OK)
        goto fail;
    if (s->detokenize) {
        s->detok = tern_calloc((size_t)s->sp.n, sizeof *s->detok);
        if (!s->detok) {
            st = TERN_E_NO_MEMORY;
            goto fail;
        }
        for (int i = 0; i < s->sp.n; i++)
            if ((st = tern_detok_stream_create(e->model->tok, true, &s->detok[i])) != TERN_OK)
                goto fail;
    }
    *out = s;
    return TERN_OK;
fail:
    s->refs = 1;
    tern_stream_unref(s);
    return st;
}

enum tern_status tern_engine_submit(struct tern_engine *e, const struct tern_request *r,
                                    struct tern_stream **out)
{
    if (out) *out = NULL;
    if (!e || !r || !out) return tern_error(TERN_E_INVALID_ARG, "submit: NULL argument");
    enum tern_status st = check_request(e, r);
    struct tern_stream *s = NULL;
    if (st == TERN_OK) st = stream_make(e, r, &s);
    if (st == TERN_OK) st = tern_engine_start(e);
    pthread_mutex_lock(&e->mu);
    if (st != TERN_OK) {
        e->stats.requests_rejected++;
        pthread_mutex_unlock(&e->mu);
        if (s) {
            s->refs = 1;
            tern_stream_unref(s);
        }
        return st;
    }
    if (e->pending_tail) e->pending_tail->next = s;
    else e->pending_head = s;
    e->pending_tail = s;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *out = s;
    return TERN_OK;
}

enum tern_status tern_engine_get_stats(struct tern_engine *e, struct tern_engine_stats *out)
{
    if (!e || !out) return tern_error(TERN_E_INVALID_ARG, "stats: NULL argument");
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->mu);
    return TERN_OK;
}
