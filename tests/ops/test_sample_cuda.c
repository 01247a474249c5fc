/*
 * test_sample_cuda.c — the CUDA sample op against the CPU sampler
 * (sample/sample.h), draw for draw: random logits rows (vocab 151936 and
 * sizes that are not multiples of the 1,024-thread block, some rows with
 * many exact ties, some with NaN) under many settings: seeds, streams and
 * steps, temperature (0 = greedy with processors), top_k, top_p, min_p,
 * repetition / presence / frequency penalties over a token history,
 * logit_bias, logprobs and top_logprobs. Every token, logprob and top
 * logprob must equal the CPU's (the device sums in another order, so a draw
 * within rounding of a boundary could in principle differ: none do here).
 * The device edits are built here as the engine builds them (loop.c), from
 * the same history. Skipped without a CUDA device.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "sample/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HIST 48
#define MAX_BIAS 3

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static float frand(void) { return (float)((next() >> 40) & 0xffffff) / (float)(1 << 24); }

struct draw {
    struct tern_sample_params p;
    int32_t bias_ids[MAX_BIAS];
    float bias_values[MAX_BIAS];
    int32_t hist[MAX_HIST];
    int32_t n_hist, n_prompt;
    struct tern_sample_dev d;
};

/* The edit of token t among edits[first, *n), made on first use. */
static struct tern_sample_edit *edit_of(struct tern_sample_edit *ed, int64_t first, int64_t *n,
                                        int32_t t)
{
    for (int64_t i = first; i < *n; i++)
        if (ed[i].id == t) return &ed[i];
    ed[*n] = (struct tern_sample_edit){t, 0, 1.0f, 0.0f, 0.0f};
    return &ed[(*n)++];
}

/* Appends the device edits of one draw (penalties, then bias). */
static void make_edits(const struct draw *w, int32_t V, struct tern_sample_edit *ed, int64_t *n)
{
    int64_t first = *n;
    const struct tern_sample_params *p = &w->p;
    if (p->repetition_penalty != 1.0f)
        for (int i = 0; i < w->n_hist; i++) {
            struct tern_sample_edit *d = edit_of(ed, first, n, w->hist[i]);
            d->flags |= TERN_SAMPLE_EDIT_REP;
            d->rep = p->repetition_penalty;
        }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f)
        for (int i = w->n_prompt; i < w->n_hist; i++) {
            int32_t c = 0;
            for (int j = w->n_prompt; j < w->n_hist; j++) c += w->hist[j] == w->hist[i];
            struct tern_sample_edit *d = edit_of(ed, first, n, w->hist[i]);
            d->flags |= TERN_SAMPLE_EDIT_SUB;
            d->sub = tern_sample_penalty_sub(p, c);
        }
    for (int32_t i = 0; i < p->n_bias; i++) {
        struct tern_sample_edit *d = edit_of(ed, first, n, p->bias_ids[i]);
        d->flags |= TERN_SAMPLE_EDIT_BIAS;
        d->bias = p->bias_values[i];
    }
    (void)V;
}

static void make_draw(struct draw *w, int32_t V, int d)
{
    static const float temps[] = {1.0f, 0.7f, 0.3f, 1.5f, 0.05f, 0.0f};
    static const int32_t ks[] = {0, 1, 5, 50, 1000, 0, 40};
    static const float ps[] = {1.0f, 0.9f, 0.5f, 0.95f, 1.0f, 0.1f};
    static const float mps[] = {0.0f, 0.0f, 0.05f, 0.2f};
    static const float reps[] = {1.0f, 1.0f, 1.3f, 0.8f};
    static const float pres[] = {0.0f, 0.0f, 0.5f, -0.5f};
    static const float freqs[] = {0.0f, 0.0f, 0.3f, 1.1f};
    static const int32_t tops[] = {0, 0, 1, 5, 20};
    struct tern_sample_params p = tern_sample_default_params();
    p.temperature = temps[next() % 6];
    p.top_k = ks[next() % 7];
    p.top_p = ps[next() % 6];
    p.min_p = mps[next() % 4];
    p.repetition_penalty = reps[next() % 4];
    p.presence_penalty = pres[next() % 4];
    p.frequency_penalty = freqs[next() % 4];
    p.seed = next();
    p.logprobs = next() % 4 != 0;
    p.top_logprobs = tops[next() % 5];
    w->n_hist = (int32_t)(next() % MAX_HIST);
    w->n_prompt = w->n_hist / 2;
    int32_t pool = V < 12 ? V : 12; /* repeats, so that counts exceed 1 */
    for (int i = 0; i < w->n_hist; i++)
        w->hist[i] = (int32_t)(next() % 3 ? next() % (uint64_t)pool : next() % (uint64_t)V);
    p.n_bias = next() % 3 ? 0 : 1 + (int32_t)(next() % MAX_BIAS);
    for (int32_t i = 0; i < p.n_bias; i++) { /* distinct ids (the engine's rule) */
        int32_t t;
        bool dup;
        do {
            t = (int32_t)(next() % (uint64_t)V);
            dup = false;
            for (int32_t j = 0; j < i; j++) dup |= w->bias_ids[j] == t;
        } while (dup && (int32_t)i < V);
        if (dup) {
            p.n_bias = i;
            break;
        }
        w->bias_ids[i] = t;
        w->bias_values[i] = next() % 4 == 0 ? -100.0f : (frand() * 2.0f - 1.0f) * 6.0f;
    }
    p.bias_ids = w->bias_ids;
    p.bias_values = w->bias_values;
    w->p = p;
    w->d = (struct tern_sample_dev){p.temperature, p.top_k, p.top_p, p.min_p, p.seed,
                                    (uint32_t)(d % 3), p.top_logprobs, next() % 1000, 0, 0,
                                    p.logprobs || p.top_logprobs > 0, 0};
}

struct tally {
    int match, total, lp_bad, top_bad;
};

static bool same_f(float a, float b) { return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)); }

/* Checks one draw against the CPU sampler; prints a mismatch. */
static void check_draw(struct tern_sampler *s, const float *row, const struct draw *w,
                       const int32_t *res, const int32_t *top, int32_t V, int d, struct tally *t)
{
    struct tern_sample_ctx ctx = {w->hist, w->n_prompt, w->n_hist, w->d.stream, w->d.step};
    struct tern_sample_result cr;
    assert_int_equal(tern_sampler_sample(s, row, &w->p, &ctx, &cr), TERN_OK);
    t->total++;
    float lp;
    memcpy(&lp, &res[1], 4);
    bool tok_ok = cr.token == res[0];
    bool lp_ok = !(w->p.logprobs || w->p.top_logprobs) || same_f(cr.logprob, lp);
    bool top_ok = true;
    for (int32_t i = 0; i < w->p.top_logprobs; i++) {
        float tl;
        memcpy(&tl, &top[TERN_SAMPLE_DEV_MAX_TOP + i], 4);
        top_ok &= cr.top_ids[i] == top[i] && same_f(cr.top_logprobs[i], tl);
    }
    t->match += tok_ok;
    t->lp_bad += tok_ok && !lp_ok;
    t->top_bad += !top_ok;
    if (!tok_ok || !lp_ok || !top_ok)
        printf("  mismatch V=%d draw %d: cpu %d gpu %d lp %.9g/%.9g top %s (T %g k %d p %g "
               "minp %g rep %g pres %g freq %g bias %d hist %d)\n",
               V, d, cr.token, res[0], (double)cr.logprob, (double)lp, top_ok ? "ok" : "DIFF",
               (double)w->p.temperature, w->p.top_k, (double)w->p.top_p, (double)w->p.min_p,
               (double)w->p.repetition_penalty, (double)w->p.presence_penalty,
               (double)w->p.frequency_penalty, w->p.n_bias, w->n_hist);
}

static void make_rows(float *lg, int32_t V, int n_rows)
{
    for (int r = 0; r < n_rows; r++)
        for (int32_t i = 0; i < V; i++) {
            float v = (frand() * 2.0f - 1.0f) * (r % 2 ? 12.0f : 4.0f);
            if (r % 3 == 2) v = roundf(v * 4.0f) / 4.0f; /* many exact ties */
            if (r % 5 == 4 && i % 97 == 1) v = NAN;      /* never a whole row */
            lg[(size_t)r * V + i] = v;
        }
}

static void run_vocab(struct tern_backend *gpu, int32_t V, int n_rows, int n_draws, struct tally *t)
{
    struct tern_sampler *s = NULL;
    assert_int_equal(tern_sampler_create(V, &s), TERN_OK);
    float *lg = tern_malloc(sizeof(float) * (size_t)V * n_rows);
    make_rows(lg, V, n_rows);
    float *rows = tern_malloc(sizeof(float) * (size_t)V * n_draws);
    struct draw *w = tern_calloc((size_t)n_draws, sizeof *w);
    struct tern_sample_dev *pd = tern_calloc((size_t)n_draws, sizeof *pd);
    struct tern_sample_edit *ed = tern_calloc((size_t)n_draws * (MAX_HIST + MAX_BIAS), sizeof *ed);
    assert_true(lg && rows && w && pd && ed);
    int64_t n_edit = 0;
    for (int d = 0; d < n_draws; d++) {
        int r = (int)(next() % (uint64_t)n_rows);
        memcpy(rows + (size_t)d * V, lg + (size_t)r * V, sizeof(float) * (size_t)V);
        make_draw(&w[d], V, d);
        w[d].p.bias_ids = w[d].bias_ids; /* the struct moved into the array */
        w[d].p.bias_values = w[d].bias_values;
        int64_t e0 = n_edit;
        make_edits(&w[d], V, ed, &n_edit);
        w[d].d.edit0 = (int32_t)e0;
        w[d].d.n_edit = (int32_t)(n_edit - e0);
        pd[d] = w[d].d;
    }
    struct tern_dtensor dl, dp, de, dsc, dr, dt;
    int64_t sh2[2] = {n_draws, V}, sp = (int64_t)n_draws * (int64_t)sizeof *pd,
            se = (n_edit > 0 ? n_edit : 1) * (int64_t)sizeof *ed, sr[2] = {n_draws, 2},
            st[2] = {n_draws, 2 * TERN_SAMPLE_DEV_MAX_TOP};
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_F32, 2, sh2, &dl), TERN_OK);
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_F32, 2, sh2, &dsc), TERN_OK);
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_U8, 1, &sp, &dp), TERN_OK);
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_U8, 1, &se, &de), TERN_OK);
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_I32, 2, sr, &dr), TERN_OK);
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_I32, 2, st, &dt), TERN_OK);
    assert_int_equal(gpu->ops->upload(gpu, &dl, rows, sizeof(float) * (size_t)V * n_draws), TERN_OK);
    assert_int_equal(gpu->ops->upload(gpu, &dp, pd, (size_t)sp), TERN_OK);
    assert_int_equal(gpu->ops->upload(gpu, &de, ed, (size_t)se), TERN_OK);
    struct tern_sample_io io = {&dp, &de, &dsc, &dr, &dt};
    uint64_t t0 = tern_now_ns();
    assert_int_equal(gpu->ops->sample(gpu, &dl, &io), TERN_OK);
    int32_t *res = tern_malloc(sizeof(int32_t) * 2 * (size_t)n_draws);
    int32_t *top = tern_malloc(sizeof(int32_t) * 2 * TERN_SAMPLE_DEV_MAX_TOP * (size_t)n_draws);
    assert_int_equal(gpu->ops->download(gpu, res, &dr, (size_t)n_draws * 8), TERN_OK);
    double ms = (double)(tern_now_ns() - t0) / 1e6;
    assert_int_equal(gpu->ops->download(gpu, top, &dt, (size_t)n_draws * 8 * TERN_SAMPLE_DEV_MAX_TOP),
                     TERN_OK);
    struct tally before = *t;
    for (int d = 0; d < n_draws; d++)
        check_draw(s, rows + (size_t)d * V, &w[d], res + 2 * d,
                   top + (size_t)d * 2 * TERN_SAMPLE_DEV_MAX_TOP, V, d, t);
    printf("  V=%-6d %4d / %4d draws equal (%d logprob, %d top diffs); device %.2f ms\n", V,
           t->match - before.match, t->total - before.total, t->lp_bad - before.lp_bad,
           t->top_bad - before.top_bad, ms);
    struct tern_dtensor *all[6] = {&dl, &dsc, &dp, &de, &dr, &dt};
    for (int i = 0; i < 6; i++) tern_dtensor_free(gpu, all[i]);
    tern_free(res), tern_free(top), tern_free(pd), tern_free(w), tern_free(ed);
    tern_free(rows), tern_free(lg);
    tern_sampler_destroy(s);
}

static void test_sample(void **state)
{
    (void)state;
    if (!tern_backend_cuda_available()) {
        printf("skipped: no CUDA device\n");
        skip();
    }
    struct tern_backend_params bp = {.device = TERN_DEVICE_CUDA};
    struct tern_backend *gpu = NULL;
    assert_int_equal(tern_backend_create(&bp, &gpu), TERN_OK);
    assert_non_null(gpu->ops->sample);
    struct tally t = {0};
    run_vocab(gpu, 151936, 8, 1000, &t);
    static const int32_t odd[] = {1, 2, 7, 1000, 1023, 1024, 1025, 4097, 32001, 50257};
    for (int i = 0; i < 10; i++) run_vocab(gpu, odd[i], 6, 800, &t);
    printf("  sample: %d / %d draws equal the CPU's; %d logprob and %d top_logprobs diffs\n",
           t.match, t.total, t.lp_bad, t.top_bad);
    tern_backend_destroy(gpu);
    assert_int_equal(t.match, t.total);
    assert_int_equal(t.lp_bad, 0);
    assert_int_equal(t.top_bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_sample)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
