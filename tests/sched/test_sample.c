/*
 * test_sample.c — the CPU sampler against references computed here:
 * Philox known answers, greedy, top-k / top-p / min-p kept sets and their
 * renormalised probabilities, penalties and logit_bias, seeds, empirical
 * frequencies of many counter-based draws, raw logprobs.
 */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "sample/sample.h"

#define V 64

/* Deterministic pseudo-random logits in [-4, 4). */
static void make_logits(float *x, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) / 16777216.0 * 8.0 - 4.0);
    }
}

static void softmax_ref(const double *x, int n, double *p)
{
    double m = -INFINITY, z = 0;
    for (int i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    for (int i = 0; i < n; i++) z += x[i] == -INFINITY ? 0 : exp(x[i] - m);
    for (int i = 0; i < n; i++) p[i] = x[i] == -INFINITY ? 0 : exp(x[i] - m) / z;
}

static void expect_probs(const float *got, const double *want, int n, double tol)
{
    for (int i = 0; i < n; i++) {
        if (want[i] == 0.0) assert_true(got[i] == 0.0f);
        else assert_true(fabs(got[i] - want[i]) <= tol);
    }
}

static void test_philox_known_answers(void **state)
{
    (void)state;
    /* Random123 kat_vectors for philox4x32_10 */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int k = 0; k < 3; k++) {
        uint32_t out[4];
        tern_philox4x32(kat[k], kat[k] + 4, out);
        for (int i = 0; i < 4; i++) assert_int_equal(out[i], kat[k][6 + i]);
    }
    double u = tern_sample_uniform(123, 0, 0);
    assert_true(u >= 0.0 && u < 1.0);
    assert_true(u == tern_sample_uniform(123, 0, 0));
    assert_true(u != tern_sample_uniform(123, 0, 1));
    assert_true(u != tern_sample_uniform(123, 1, 0));
    assert_true(u != tern_sample_uniform(124, 0, 0));
}

static void test_greedy_and_ties(void **state)
{
    (void)state;
    struct tern_sampler *s;
    assert_int_equal(tern_sampler_create(V, &s), TERN_OK);
    float x[V];
    make_logits(x, V, 1);
    x[17] = 9.0f;
    x[40] = 9.0f; /* tie: the lower id wins */
    struct tern_sample_params p = tern_sample_default_params();
    p.temperature = 0.0f;
    struct tern_sample_result r;
    assert_int_equal(tern_sampler_sample(s, x, &p, NULL, &r), TERN_OK);
    assert_int_equal(r.token, 17);
    p.n_bias = 1;
    p.bias_ids = (int32_t[]){3};
    p.bias_values = (float[]){20.0f};
    assert_int_equal(tern_sampler_sample(s, x, &p, NULL, &r), TERN_OK);
    assert_int_equal(r.token, 3);
    tern_sampler_destroy(s);
}

static void test_top_p_nucleus(void **state)
{
    (void)state;
    struct tern_sampler *s;
    assert_int_equal(tern_sampler_create(6, &s), TERN_OK);
    /* probabilities 0.4 0.25 0.15 0.1 0.06 0.04 in shuffled order */
    static const double pr[6] = {0.1, 0.4, 0.04, 0.25, 0.06, 0.15};
    float x[6];
    for (int i = 0; i < 6; i++) x[i] = (float)log(pr[i]);
    struct tern_sample_params p = tern_sample_default_params();
    float got[6];
    /* top_p 0.75: 0.4 + 0.25 = 0.65 < 0.75, + 0.15 = 0.8 >= 0.75: keep ids 1, 3, 5 */
    p.top_p = 0.75f;
    assert_int_equal(tern_sampler_probs(s, x, &p, NULL, got), TERN_OK);
    double want[6] = {0, 0.4 / 0.8, 0, 0.25 / 0.8, 0, 0.15 / 0.8};
    expect_probs(got, want, 6, 1e-6);
    /* tiny top_p keeps exactly the top token */
    p.top_p = 0.01f;
    assert_int_equal(tern_sampler_probs(s, x, &p, NULL, got), TERN_OK);
    double want1[6] = {0, 1, 0, 0, 0, 0};
    expect_probs(got, want1, 6, 1e-6);
    /* top_k 4 then top_p 0.9 of the renormalised (0.4,0.25,0.15,0.1)/0.9:
     * cumulative 0.444, 0.722, 0.889, 1.0 -> all four */
    p.top_k = 4;
    p.top_p = 0.9f;
    assert_int_equal(tern_sampler_probs(s, x, &p, NULL, got), TERN_OK);
    double want2[6] = {0.1 / 0.9, 0.4 / 0.9, 0, 0.25 / 0.9, 0, 0.15 / 0.9};
    expect_probs(got, want2, 6, 1e-6);
    /* top_p 0.85 after top_k 4: 0.889 >= 0.85 -> three */
    p.top_p = 0.85f;
    assert_int_equal(tern_sampler_probs(s, x, &p, NULL, got), TERN_OK);
    expect_probs(got, want, 6, 1e-6);
    tern_sampler_destroy(s);
}

static void test_top_k_min_p_temperature(void **state)
{
    (void)state;
    struct tern_sampler *s;
    assert_int_equal(tern_sampler_create(V, &s), TERN_OK);
    float x[V], got[V];
    double ref[V], want[V];
    make_logits(x, V, 7);
    struct tern_sample_params p = tern_sample_default_params();
    /* top_k = 5: the five largest, renormalised, at temperature 0.7 */
    p.top_k = 5;
    p.temperature = 0.7f;
    int kth = 0;
    for (int i = 0; i < V; i++) ref[i] = (double)(x[i] / 0.7f);
    for (int i = 0; i < V; i++) {
        int above = 0;
        for (int j = 0; j < V; j++) above += ref[j] > ref[i] || (ref[j] == ref[i] && j < i);
        if (above >= 5) ref[i] = -INFINITY;
        else kth++;
    }
    assert_int_equal(kth, 5);
    softmax_ref(ref, V, want);
    assert_int_equal(tern_sampler_probs(s, x, &p, NULL, got), TERN_OK);
    expect_probs(got, want, V, 1e-6);
    /* min_p = 0.3 at temperature 1: keep p >= 0.3 * p_max */
    p = tern_sample_default_params();
    p.min_p = 0.3f;
    double m = -INFINITY;
    for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
    int kept = 0;
    for (int i = 0; i < V; i++) {
        ref[i] = exp(x[i] - m) >= 0.3 ? x[i] : -INFINITY;
        kept += ref[i] != -INFINITY;
    }
    assert_true(kept > 1 && kept < V);
    softmax_ref(ref, V, want);
    assert_int_equal(tern_sampler_probs(s, x, &p, NULL, got), TERN_OK);
    expect_probs(got, want, V, 1e-6);
    /* temperature alone */
    p = tern_sample_default_params();
    p.temperature = 2.5f;
    for (int i = 0; i < V; i++) ref[i] = (double)(x[i] / 2.5f);
    softmax_ref(ref, V, want);
    assert_int_equal(tern_sampler_probs(s, x, &p, NULL, got), TERN_OK);
    expect_probs(got, want, V, 1e-6);
    tern_sampler_destroy(s);
}

/* top_k keeps exactly the k first by (logit desc, id asc), over rows full of ties. */
static void test_top_k_ties_brute_force(void **state)
{
    (void)state;
    enum { N = 300 };
    struct tern_sampler *s;
    assert_int_equal(tern_sampler_create(N, &s), TERN_OK);
    float x[N], got[N];
    uint32_t seed = 1;
    for (int it = 0; it < 600; it++) {
        for (int i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            x[i] = (float)((seed >> 16) % 17);
        }
        struct tern_sample_params p = tern_sample_default_params();
        p.top_k = 1 + (it * 7) % N;
        assert_int_equal(tern_sampler_probs(s, x, &p, NULL, got), TERN_OK);
        for (int i = 0; i < N; i++) {
            int above = 0;
            for (int j = 0; j < N; j++) above += x[j] > x[i] || (x[j] == x[i] && j < i);
            assert_int_equal(got[i] > 0.0f, above < p.top_k);
        }
    }
    tern_sampler_destroy(s);
}

static void test_penalties_and_bias(void **state)
{
    (void)state;
    struct tern_sampler *s;
    assert_int_equal(tern_sampler_create(V, &s), TERN_OK);
    float x[V], got[V];
    double ref[V], want[V];
    make_logits(x, V, 11);
    /* prompt 3 5 5 9; generated 5 7 7 7 12 */
    int32_t toks[] = {3, 5, 5, 9, 5, 7, 7, 7, 12};
    struct tern_sample_ctx c = {toks, 4, 9, 0, 5};
    struct tern_sample_params p = tern_sample_default_params();
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.n_bias = 2;
    p.bias_ids = (int32_t[]){7, 20};
    p.bias_values = (float[]){1.5f, -2.0f};
    float y[V];
    memcpy(y, x, sizeof y);
    int32_t seen[] = {3, 5, 9, 7, 12};
    for (int i = 0; i < 5; i++) {
        int t = seen[i];
        y[t] = y[t] > 0 ? y[t] / 1.3f : y[t] * 1.3f;
    }
    int cnt[V] = {0};
    for (int i = 4; i < 9; i++) cnt[toks[i]]++;
    for (int t = 0; t < V; t++)
        if (cnt[t]) y[t] -= 0.25f * (float)cnt[t] + 0.5f;
    y[7] += 1.5f;
    y[20] -= 2.0f;
    for (int i = 0; i < V; i++) ref[i] = y[i];
    softmax_ref(ref, V, want);
    assert_int_equal(tern_sampler_probs(s, x, &p, &c, got), TERN_OK);
    expect_probs(got, want, V, 1e-6);
    /* greedy sees the same processed logits */
    p.temperature = 0.0f;
    int best = 0;
    for (int i = 1; i < V; i++) best = y[i] > y[best] ? i : best;
    struct tern_sample_result r;
    assert_int_equal(tern_sampler_sample(s, x, &p, &c, &r), TERN_OK);
    assert_int_equal(r.token, best);
    /* the scratch counters were reset: a call without penalties is plain softmax */
    struct tern_sample_params q = tern_sample_default_params();
    for (int i = 0; i < V; i++) ref[i] = x[i];
    softmax_ref(ref, V, want);
    assert_int_equal(tern_sampler_probs(s, x, &q, &c, got), TERN_OK);
    expect_probs(got, want, V, 1e-6);
    tern_sampler_destroy(s);
}

static void test_seeds_and_frequencies(void **state)
{
    (void)state;
    struct tern_sampler *s;
    assert_int_equal(tern_sampler_create(8, &s), TERN_OK);
    float x[8] = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -1.0f, 1.2f, 0.7f};
    double ref[8], want[8];
    for (int i = 0; i < 8; i++) ref[i] = x[i];
    softmax_ref(ref, 8, want);
    struct tern_sample_params p = tern_sample_default_params();
    p.seed = 42;
    int32_t toks[1] = {0};
    const int N = 200000;
    int hist[8] = {0};
    int differ = 0;
    for (int i = 0; i < N; i++) {
        struct tern_sample_ctx c = {toks, 1, 1, 0, (uint64_t)i};
        struct tern_sample_result a, b;
        assert_int_equal(tern_sampler_sample(s, x, &p, &c, &a), TERN_OK);
        hist[a.token]++;
        if (i < 200) {
            assert_int_equal(tern_sampler_sample(s, x, &p, &c, &b), TERN_OK);
            assert_int_equal(a.token, b.token); /* the same seed reproduces */
            struct tern_sample_params p2 = p;
            p2.seed = 43;
            assert_int_equal(tern_sampler_sample(s, x, &p2, &c, &b), TERN_OK);
            differ += a.token != b.token;
        }
    }
    assert_true(differ > 50); /* a different seed gives a different stream */
    for (int i = 0; i < 8; i++) {
        double f = (double)hist[i] / N, sd = sqrt(want[i] * (1 - want[i]) / N);
        assert_true(fabs(f - want[i]) < 5 * sd + 1e-4);
    }
    /* with top_k = 3 only the three largest ever appear, in proportion */
    p.top_k = 3;
    memset(hist, 0, sizeof hist);
    for (int i = 0; i < N; i++) {
        struct tern_sample_ctx c = {toks, 1, 1, 2, (uint64_t)i};
        struct tern_sample_result a;
        assert_int_equal(tern_sampler_sample(s, x, &p, &c, &a), TERN_OK);
        hist[a.token]++;
    }
    double z = want[3] + want[6] + want[0];
    for (int i = 0; i < 8; i++) {
        double w = (i == 3 || i == 6 || i == 0) ? want[i] / z : 0.0;
        double f = (double)hist[i] / N, sd = sqrt(w * (1 - w) / N);
        if (w == 0.0) assert_int_equal(hist[i], 0);
        else assert_true(fabs(f - w) < 5 * sd + 1e-4);
    }
    tern_sampler_destroy(s);
}

static void test_logprobs_raw(void **state)
{
    (void)state;
    struct tern_sampler *s;
    assert_int_equal(tern_sampler_create(V, &s), TERN_OK);
    float x[V];
    make_logits(x, V, 3);
    x[10] = x[11] = 5.0f; /* a tie inside the top list: lower id first */
    double m = -INFINITY, z = 0;
    for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < V; i++) z += exp(x[i] - m);
    double lse = m + log(z);
    int32_t toks[] = {10, 11, 4};
    struct tern_sample_ctx c = {toks, 1, 3, 0, 9};
    struct tern_sample_params p = tern_sample_default_params();
    p.temperature = 0.6f;
    p.top_k = 4;
    p.repetition_penalty = 2.0f; /* processing must not change the reported logprobs */
    p.seed = 5;
    p.logprobs = true;
    p.top_logprobs = 20;
    struct tern_sample_result r;
    assert_int_equal(tern_sampler_sample(s, x, &p, &c, &r), TERN_OK);
    assert_true(fabs(r.logprob - (x[r.token] - lse)) < 1e-5);
    assert_int_equal(r.n_top, 20);
    assert_int_equal(r.top_ids[0], 10);
    assert_int_equal(r.top_ids[1], 11);
    for (int i = 0; i < 20; i++) {
        assert_true(fabs(r.top_logprobs[i] - (x[r.top_ids[i]] - lse)) < 1e-5);
        if (i > 0) assert_true(r.top_logprobs[i] <= r.top_logprobs[i - 1]);
        /* nothing outside the list beats its last entry */
    }
    for (int t = 0; t < V; t++) {
        bool in = false;
        for (int i = 0; i < 20; i++) in |= r.top_ids[i] == t;
        if (!in) assert_true(x[t] <= x[r.top_ids[19]]);
    }
    tern_sampler_destroy(s);
}

static void test_params_check(void **state)
{
    (void)state;
    struct tern_sample_params p = tern_sample_default_params();
    assert_int_equal(tern_sample_params_check(&p, V), TERN_OK);
    p.temperature = -1.0f;
    assert_int_equal(tern_sample_params_check(&p, V), TERN_E_INVALID_ARG);
    p = tern_sample_default_params();
    p.top_p = 0.0f;
    assert_int_equal(tern_sample_params_check(&p, V), TERN_E_INVALID_ARG);
    p = tern_sample_default_params();
    p.top_logprobs = 21;
    assert_int_equal(tern_sample_params_check(&p, V), TERN_E_INVALID_ARG);
    p = tern_sample_default_params();
    p.n_bias = 1;
    p.bias_ids = (int32_t[]){V};
    p.bias_values = (float[]){1.0f};
    assert_int_equal(tern_sample_params_check(&p, V), TERN_E_INVALID_ARG);
    assert_non_null(strstr(tern_last_error(), "64"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers), cmocka_unit_test(test_greedy_and_ties),
        cmocka_unit_test(test_top_p_nucleus),        cmocka_unit_test(test_top_k_min_p_temperature),
        cmocka_unit_test(test_penalties_and_bias),   cmocka_unit_test(test_seeds_and_frequencies),
        cmocka_unit_test(test_logprobs_raw),         cmocka_unit_test(test_params_check),
        cmocka_unit_test(test_top_k_ties_brute_force),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
