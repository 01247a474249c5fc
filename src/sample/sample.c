/*
 * sample.c — the CPU sampler of sample.h: processors in the documented
 * order over a scratch copy of the row, a Philox4x32-10 counter-based RNG,
 * raw logprobs. Scratch (vocab-sized) is allocated once at creation.
 * Depends on base/ and libm.
 */
#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tern_sampler {
    int32_t vocab;
    float *x;          /* [vocab] processed logits */
    int32_t *count;    /* [vocab] zero between calls */
    uint8_t *seen;     /* [vocab] zero between calls */
    struct cand {
        float v;
        int32_t id;
    } *cand;           /* [vocab] sort buffer */
};

/* ------------------------------------------------------------ RNG */

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void tern_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(0xD2511F53u, c0, &hi0, &lo0);
        mulhilo(0xCD9E8D57u, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

double tern_sample_uniform(uint64_t seed, uint32_t stream, uint64_t step)
{
    uint32_t ctr[4] = {(uint32_t)step, (uint32_t)(step >> 32), stream, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t r[4];
    tern_philox4x32(ctr, key, r);
    uint64_t bits = ((uint64_t)r[0] << 32 | r[1]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0); /* 2^-53 */
}

/* ------------------------------------------------------------ params */

struct tern_sample_params tern_sample_default_params(void)
{
    struct tern_sample_params p = {0};
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    p.repetition_penalty = 1.0f;
    return p;
}

enum tern_status tern_sample_params_check(const struct tern_sample_params *p, int32_t vocab)
{
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return tern_error(TERN_E_INVALID_ARG, "sample: temperature %g must be >= 0",
                          (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return tern_error(TERN_E_INVALID_ARG, "sample: top_p %g must be in (0, 1]",
                          (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return tern_error(TERN_E_INVALID_ARG, "sample: min_p %g must be in [0, 1]",
                          (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return tern_error(TERN_E_INVALID_ARG, "sample: repetition_penalty %g must be > 0",
                          (double)p->repetition_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return tern_error(TERN_E_INVALID_ARG, "sample: presence/frequency penalties must be finite");
    if (p->top_logprobs < 0 || p->top_logprobs > TERN_SAMPLE_MAX_TOP_LOGPROBS)
        return tern_error(TERN_E_INVALID_ARG, "sample: top_logprobs %d must be in [0, %d]",
                          p->top_logprobs, TERN_SAMPLE_MAX_TOP_LOGPROBS);
    if (p->n_bias < 0 || (p->n_bias > 0 && (!p->bias_ids || !p->bias_values)))
        return tern_error(TERN_E_INVALID_ARG, "sample: logit_bias has %d entries but no arrays",
                          p->n_bias);
    for (int32_t i = 0; i < p->n_bias; i++) {
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= vocab)
            return tern_error(TERN_E_INVALID_ARG,
                              "sample: logit_bias token id %d is outside the vocabulary [0, %d)",
                              p->bias_ids[i], vocab);
        if (!isfinite(p->bias_values[i]))
            return tern_error(TERN_E_INVALID_ARG, "sample: logit_bias for token %d is not finite",
                              p->bias_ids[i]);
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ lifecycle */

enum tern_status tern_sampler_create(int32_t vocab, struct tern_sampler **out)
{
    *out = NULL;
    if (vocab <= 0) return tern_error(TERN_E_INVALID_ARG, "sample: vocab %d must be > 0", vocab);
    struct tern_sampler *s = tern_calloc(1, sizeof *s);
    if (!s) return TERN_E_NO_MEMORY;
    s->vocab = vocab;
    s->x = tern_calloc(vocab, sizeof *s->x);
    s->count = tern_calloc(vocab, sizeof *s->count);
    s->seen = tern_calloc(vocab, 1);
    s->cand = tern_calloc(vocab, sizeof *s->cand);
    if (!s->x || !s->count || !s->seen || !s->cand) {
        tern_sampler_destroy(s);
        return TERN_E_NO_MEMORY;
    }
    *out = s;
    return TERN_OK;
}

void tern_sampler_destroy(struct tern_sampler *s)
{
    if (!s) return;
    tern_free(s->x);
    tern_free(s->count);
    tern_free(s->seen);
    tern_free(s->cand);
    tern_free(s);
}

/* ------------------------------------------------------------ processors */

static void apply_penalties(struct tern_sampler *s, const struct tern_sample_params *p,
                            const struct tern_sample_ctx *c)
{
    float *x = s->x;
    int32_t V = s->vocab;
    if (p->repetition_penalty != 1.0f && c) {
        float rp = p->repetition_penalty;
        for (int32_t i = 0; i < c->n_tokens; i++) {
            int32_t t = c->tokens[i];
            if (t < 0 || t >= V || s->seen[t]) continue;
            s->seen[t] = 1;
            x[t] = x[t] > 0.0f ? x[t] / rp : x[t] * rp;
        }
        for (int32_t i = 0; i < c->n_tokens; i++)
            if (c->tokens[i] >= 0 && c->tokens[i] < V) s->seen[c->tokens[i]] = 0;
    }
    if ((p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) && c) {
        for (int32_t i = c->n_prompt; i < c->n_tokens; i++)
            if (c->tokens[i] >= 0 && c->tokens[i] < V) s->count[c->tokens[i]]++;
        for (int32_t i = c->n_prompt; i < c->n_tokens; i++) {
            int32_t t = c->tokens[i];
            if (t < 0 || t >= V || s->count[t] == 0) continue;
            x[t] -= tern_sample_penalty_sub(p, s->count[t]);
            s->count[t] = 0;
        }
    }
}

float tern_sample_penalty_sub(const struct tern_sample_params *p, int32_t count)
{
    return p->frequency_penalty * (float)count + p->presence_penalty;
}

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void cand_swap(struct cand *a, struct cand *b)
{
    struct cand t = *a;
    *a = *b;
    *b = t;
}

/* Partitions c[0, n) so that c[0, k) are the k first in cand_cmp order
 * (unsorted): quickselect with a median-of-three pivot, O(n) on average. */
static void cand_select(struct cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (hi > lo) {
        int32_t mid = lo + (hi - lo) / 2;
        if (cand_cmp(&c[mid], &c[lo]) < 0) cand_swap(&c[mid], &c[lo]);
        if (cand_cmp(&c[hi], &c[lo]) < 0) cand_swap(&c[hi], &c[lo]);
        if (cand_cmp(&c[hi], &c[mid]) < 0) cand_swap(&c[hi], &c[mid]);
        struct cand pivot = c[mid];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (cand_cmp(&c[i], &pivot) < 0) i++;
            while (cand_cmp(&c[j], &pivot) > 0) j--;
            if (i <= j) cand_swap(&c[i++], &c[j--]);
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else return;
    }
}

/* top_k then top_p over the sorted candidates; removed tokens get -inf. */
static void apply_top_k_top_p(struct tern_sampler *s, const struct tern_sample_params *p)
{
    float *x = s->x;
    int32_t n = 0;
    for (int32_t i = 0; i < s->vocab; i++)
        if (x[i] != -INFINITY) s->cand[n++] = (struct cand){x[i], i};
    int32_t keep = n;
    if (p->top_k > 0 && p->top_k < keep) {
        keep = p->top_k;
        cand_select(s->cand, n, keep); /* only the kept ones need sorting */
    }
    qsort(s->cand, (size_t)keep, sizeof *s->cand, cand_cmp);
    if (p->top_p < 1.0f && keep > 0) {
        double m = s->cand[0].v, z = 0.0, cum = 0.0;
        for (int32_t i = 0; i < keep; i++) z += exp((double)s->cand[i].v - m);
        int32_t k = 0;
        while (k < keep) {
            cum += exp((double)s->cand[k].v - m) / z;
            k++;
            if (cum >= (double)p->top_p) break;
        }
        keep = k;
    }
    for (int32_t i = keep; i < n; i++) x[s->cand[i].id] = -INFINITY;
}

/* Runs steps 1-6 into s->x. Returns the greedy token, or -1 when sampling. */
static enum tern_status process(struct tern_sampler *s, const float *logits,
                                const struct tern_sample_params *p,
                                const struct tern_sample_ctx *c, int32_t *greedy)
{
    TERN_TRY(tern_sample_params_check(p, s->vocab));
    float *x = s->x;
    int32_t V = s->vocab, n_finite = 0;
    for (int32_t i = 0; i < V; i++) {
        x[i] = isnan(logits[i]) ? -INFINITY : logits[i];
        n_finite += x[i] != -INFINITY;
    }
    if (n_finite == 0) return tern_error(TERN_E_INVALID_ARG, "sample: no finite logit in the row");
    apply_penalties(s, p, c);
    for (int32_t i = 0; i < p->n_bias; i++) x[p->bias_ids[i]] += p->bias_values[i];
    *greedy = -1;
    if (p->temperature == 0.0f) {
        *greedy = argmax(x, V);
        return TERN_OK;
    }
    if (p->temperature != 1.0f)
        for (int32_t i = 0; i < V; i++) x[i] /= p->temperature;
    if (p->top_k > 0 || p->top_p < 1.0f) apply_top_k_top_p(s, p);
    if (p->min_p > 0.0f) {
        float m = x[argmax(x, V)];
        double floor_ = (double)m + log((double)p->min_p);
        for (int32_t i = 0; i < V; i++)
            if ((double)x[i] < floor_) x[i] = -INFINITY;
    }
    return TERN_OK;
}

static inline float no_nan(float v) { return isnan(v) ? -INFINITY : v; }

/* Fills top[] with the n best raw logits (descending, NaN as -inf, lower id
 * on ties). */
static void raw_top(const float *logits, int32_t V, int32_t n, int32_t *ids)
{
    int32_t k = 0;
    for (int32_t i = 0; i < V; i++) {
        float v = no_nan(logits[i]);
        if (k == n && !(v > no_nan(logits[ids[n - 1]]))) continue;
        int32_t j = k < n ? k++ : n - 1;
        while (j > 0 && v > no_nan(logits[ids[j - 1]])) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
}

static double raw_lse(const float *logits, int32_t V)
{
    float m = -INFINITY;
    for (int32_t i = 0; i < V; i++)
        if (logits[i] > m) m = logits[i];
    double z = 0.0;
    for (int32_t i = 0; i < V; i++)
        if (!isnan(logits[i])) z += exp((double)logits[i] - m);
    return (double)m + log(z);
}

enum tern_status tern_sampler_sample(struct tern_sampler *s, const float *logits,
                                     const struct tern_sample_params *p,
                                     const struct tern_sample_ctx *c,
                                     struct tern_sample_result *out)
{
    int32_t tok;
    memset(out, 0, sizeof *out);
    TERN_TRY(process(s, logits, p, c, &tok));
    const float *x = s->x;
    int32_t V = s->vocab;
    if (tok < 0) {
        float m = x[argmax(x, V)];
        double z = 0.0;
        for (int32_t i = 0; i < V; i++)
            if (x[i] != -INFINITY) z += exp((double)x[i] - m);
        double u = tern_sample_uniform(p->seed, c ? c->stream : 0, c ? c->step : 0);
        double target = u * z, cum = 0.0;
        for (int32_t i = 0; i < V; i++) {
            if (x[i] == -INFINITY) continue;
            tok = i; /* the last kept token catches rounding at the top end */
            cum += exp((double)x[i] - m);
            if (cum > target) break;
        }
    }
    out->token = tok;
    if (p->logprobs || p->top_logprobs > 0) {
        double lse = raw_lse(logits, V);
        out->logprob = (float)((double)logits[tok] - lse);
        out->n_top = p->top_logprobs;
        if (out->n_top > 0) raw_top(logits, V, out->n_top, out->top_ids);
        for (int32_t i = 0; i < out->n_top; i++)
            out->top_logprobs[i] = (float)((double)logits[out->top_ids[i]] - lse);
    }
    return TERN_OK;
}

enum tern_status tern_sampler_probs(struct tern_sampler *s, const float *logits,
                                    const struct tern_sample_params *p,
                                    const struct tern_sample_ctx *c, float *probs)
{
    int32_t tok;
    TERN_TRY(process(s, logits, p, c, &tok));
    int32_t V = s->vocab;
    if (tok >= 0) {
        memset(probs, 0, sizeof(float) * V);
        probs[tok] = 1.0f;
        return TERN_OK;
    }
    const float *x = s->x;
    float m = x[argmax(x, V)];
    double z = 0.0;
    for (int32_t i = 0; i < V; i++)
        if (x[i] != -INFINITY) z += exp((double)x[i] - m);
    for (int32_t i = 0; i < V; i++)
        probs[i] = x[i] == -INFINITY ? 0.0f : (float)(exp((double)x[i] - m) / z);
    return TERN_OK;
}
