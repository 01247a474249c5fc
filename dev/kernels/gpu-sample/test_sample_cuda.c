/*
 * test_sample_cuda.c — the CUDA sample op against the CPU sampler
 * (sample/sample.h): random logits rows (vocab 151936 and odd sizes, some
 * rows with ties and NaN) under many (seed, temperature, top_k, top_p,
 * min_p, stream, step) settings; the device token must equal the CPU's in
 * >= 99.9% of draws (float summation order may differ at a boundary) and
 * the raw logprob agree within 1e-5. Skipped without a CUDA device.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "sample/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static float frand(void) { return (float)((next() >> 40) & 0xffffff) / (float)(1 << 24); }

static void run_vocab(struct tern_backend *gpu, int32_t V, int n_rows, int n_draws, int *n_match,
                      int *n_total, double *max_lp_err)
{
    struct tern_sampler *s = NULL;
    assert_int_equal(tern_sampler_create(V, &s), TERN_OK);
    float *lg = tern_malloc(sizeof(float) * (size_t)V * n_rows);
    for (int r = 0; r < n_rows; r++)
        for (int32_t i = 0; i < V; i++) {
            float v = (frand() * 2.0f - 1.0f) * (r % 2 ? 12.0f : 4.0f);
            if (r % 3 == 2) v = roundf(v * 4.0f) / 4.0f; /* many exact ties */
            if (r % 5 == 4 && i % 97 == 1) v = NAN; /* never a whole row */
            lg[(size_t)r * V + i] = v;
        }
    struct tern_dtensor dl, dp, di, dlp;
    int64_t sh2[2] = {n_draws, V}, sp[1] = {(int64_t)n_draws * (int64_t)sizeof(struct tern_sample_dev)}, sn[1] = {n_draws};
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_F32, 2, sh2, &dl), TERN_OK);
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_U8, 1, sp, &dp), TERN_OK);
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_I32, 1, sn, &di), TERN_OK);
    assert_int_equal(tern_dtensor_alloc(gpu, TERN_DTYPE_F32, 1, sn, &dlp), TERN_OK);
    float *rows = tern_malloc(sizeof(float) * (size_t)V * n_draws);
    struct tern_sample_dev *pd = tern_calloc((size_t)n_draws, sizeof *pd);
    struct tern_sample_params *pc = tern_calloc((size_t)n_draws, sizeof *pc);
    static const float temps[] = {1.0f, 0.7f, 0.3f, 1.5f, 0.05f};
    static const int32_t ks[] = {0, 1, 5, 50, 1000, 0, 40};
    static const float ps[] = {1.0f, 0.9f, 0.5f, 0.95f, 1.0f, 0.1f};
    static const float mps[] = {0.0f, 0.0f, 0.05f, 0.2f};
    for (int d = 0; d < n_draws; d++) {
        int r = (int)(next() % (uint64_t)n_rows);
        memcpy(rows + (size_t)d * V, lg + (size_t)r * V, sizeof(float) * (size_t)V);
        struct tern_sample_params p = tern_sample_default_params();
        p.temperature = temps[next() % 5];
        p.top_k = ks[next() % 7];
        p.top_p = ps[next() % 6];
        p.min_p = mps[next() % 4];
        p.seed = next();
        p.logprobs = true;
        pc[d] = p;
        pd[d] = (struct tern_sample_dev){p.temperature, p.top_k, p.top_p, p.min_p, p.seed,
                                         (uint32_t)(d % 3), 0, (uint64_t)(next() % 1000)};
    }
    assert_int_equal(gpu->ops->upload(gpu, &dl, rows, sizeof(float) * (size_t)V * n_draws), TERN_OK);
    assert_int_equal(gpu->ops->upload(gpu, &dp, pd, (size_t)n_draws * sizeof(struct tern_sample_dev)), TERN_OK);
    assert_int_equal(gpu->ops->sample(gpu, &dl, &dp, &di, &dlp), TERN_OK);
    int32_t *ids = tern_malloc(sizeof(int32_t) * (size_t)n_draws);
    float *lps = tern_malloc(sizeof(float) * (size_t)n_draws);
    assert_int_equal(gpu->ops->download(gpu, ids, &di, (size_t)n_draws * 4), TERN_OK);
    assert_int_equal(gpu->ops->download(gpu, lps, &dlp, (size_t)n_draws * 4), TERN_OK);
    for (int d = 0; d < n_draws; d++) {
        struct tern_sample_ctx ctx = {NULL, 0, 0, pd[d].stream, pd[d].step};
        struct tern_sample_result res;
        assert_int_equal(tern_sampler_sample(s, rows + (size_t)d * V, &pc[d], &ctx, &res), TERN_OK);
        (*n_total)++;
        if (res.token == ids[d]) {
            (*n_match)++;
            double e = fabs((double)res.logprob - (double)lps[d]);
            if (e > *max_lp_err) *max_lp_err = e;
        } else {
            printf("  mismatch V=%d draw %d: cpu %d gpu %d (T %g k %d p %g minp %g)\n", V, d,
                   res.token, ids[d], (double)pc[d].temperature, pc[d].top_k,
                   (double)pc[d].top_p, (double)pc[d].min_p);
        }
    }
    gpu->ops->buf_free(gpu, dl.buf), gpu->ops->buf_free(gpu, dp.buf);
    gpu->ops->buf_free(gpu, di.buf), gpu->ops->buf_free(gpu, dlp.buf);
    tern_free(ids), tern_free(lps), tern_free(pd), tern_free(pc), tern_free(rows), tern_free(lg);
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
    int match = 0, total = 0;
    double lp_err = 0.0;
    run_vocab(gpu, 151936, 8, 2000, &match, &total, &lp_err);
    static const int32_t odd[] = {1, 2, 7, 1000, 1025, 32001, 50257};
    for (int i = 0; i < 7; i++) run_vocab(gpu, odd[i], 6, 600, &match, &total, &lp_err);
    double rate = (double)match / total;
    printf("  sample: %d / %d draws equal the CPU's (%.5f), max logprob err %.3g\n", match, total,
           rate, lp_err);
    tern_backend_destroy(gpu);
    assert_true(rate >= 0.999);
    assert_true(lp_err <= 1e-5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_sample)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
