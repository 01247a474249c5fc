/*
 * test_moe_cpu.c — the CPU's mixture-of-experts ops (backend.h: moe_route,
 * moe_experts), which CI runs without a GPU.
 *
 * moe_route: hand-worked cases with forced ties (equal logits, so equal
 * probabilities: the lower expert index wins, also across the k boundary,
 * and all-equal rows take experts 0 .. k-1), renormalised or not, times a
 * per-expert scale; random rows against a double reference.
 * moe_experts: dense F32 / BF16 and MLX 4- and 8-bit expert stacks against
 * a scalar double reference over the dequantized weights, SiLU and GeGLU,
 * with and without a (gated) shared expert; every token of a batch is
 * bitwise the same token run alone. Depends on the CPU backend only.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static uint64_t rng = 0x5eed0fe4ull;
static struct tern_backend *cpu;

static float frand(void) { return tu_frand(&rng); }

static struct tern_dtensor mk(int nd, const int64_t *shape, enum tern_dtype dt, const void *v)
{
    struct tern_dtensor t;
    assert_int_equal(tern_dtensor_alloc(cpu, dt, nd, shape, &t), TERN_OK);
    if (v) assert_int_equal(cpu->ops->upload(cpu, &t, v, tern_dtensor_bytes(&t)), TERN_OK);
    return t;
}

/* ---- moe_route ---- */

static void route(const float *logits, int T, int E, int k, bool renorm, const float *scale,
                  int32_t *ids, float *w)
{
    struct tern_dtensor lg = mk(2, (int64_t[]){T, E}, TERN_DTYPE_F32, logits);
    struct tern_dtensor id = mk(2, (int64_t[]){T, k}, TERN_DTYPE_I32, NULL);
    struct tern_dtensor wt = mk(2, (int64_t[]){T, k}, TERN_DTYPE_F32, NULL);
    struct tern_dtensor sc = {0};
    if (scale) sc = mk(1, (int64_t[]){E}, TERN_DTYPE_F32, scale);
    tu_ok(cpu->ops->moe_route(cpu, &lg, k, renorm, scale ? &sc : NULL, &id, &wt));
    tu_ok(cpu->ops->download(cpu, ids, &id, sizeof(int32_t) * (size_t)(T * k)));
    tu_ok(cpu->ops->download(cpu, w, &wt, sizeof(float) * (size_t)(T * k)));
    struct tern_dtensor *all[] = {&lg, &id, &wt, &sc};
    for (int i = 0; i < 4; i++) tern_dtensor_free(cpu, all[i]);
}

static void softmax_d(const float *l, int E, double *p)
{
    double mx = l[0], s = 0;
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) s += p[e] = exp((double)l[e] - mx);
    for (int e = 0; e < E; e++) p[e] /= s;
}

static void test_route_ties(void **state)
{
    (void)state;
    /* experts 1, 2, 4, 5 tie at the top, 6 is next */
    const float l[8] = {1, 3, 3, 0, 3, 3, 2, 1};
    double p[8];
    softmax_d(l, 8, p);
    int32_t ids[8];
    float w[8];
    route(l, 1, 8, 2, true, NULL, ids, w);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_true(fabsf(w[0] - 0.5f) < 1e-7f && fabsf(w[1] - 0.5f) < 1e-7f);
    route(l, 1, 8, 3, true, NULL, ids, w);
    assert_int_equal(ids[2], 4);
    assert_true(fabsf(w[2] - 1.0f / 3) < 1e-7f);
    route(l, 1, 8, 5, false, NULL, ids, w);
    const int32_t want5[5] = {1, 2, 4, 5, 6};
    assert_memory_equal(ids, want5, sizeof want5);
    for (int j = 0; j < 5; j++) assert_true(fabs(w[j] - p[want5[j]]) < 1e-7);
    /* a per-expert scale multiplies the renormalised weights */
    const float sc[8] = {1, 0.5f, 2, 1, 4, 1, 3, 1};
    route(l, 1, 8, 3, true, sc, ids, w);
    assert_true(fabsf(w[0] - 0.5f / 3) < 1e-7f && fabsf(w[1] - 2.0f / 3) < 1e-7f &&
                fabsf(w[2] - 4.0f / 3) < 1e-6f);
    /* an all-equal row takes the first k experts */
    const float flat[6] = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
    route(flat, 1, 6, 4, true, NULL, ids, w);
    for (int j = 0; j < 4; j++) {
        assert_int_equal(ids[j], j);
        assert_true(fabsf(w[j] - 0.25f) < 1e-7f);
    }
}

static void test_route_random(void **state)
{
    (void)state;
    enum { T = 13, E = 37, K = 6 };
    float l[T * E];
    for (int i = 0; i < T * E; i++) l[i] = 3 * frand();
    int32_t ids[T * K];
    float w[T * K];
    route(l, T, E, K, true, NULL, ids, w);
    for (int t = 0; t < T; t++) {
        double p[E], sum = 0;
        int used[E] = {0};
        softmax_d(l + t * E, E, p);
        for (int j = 0; j < K; j++) { /* the double reference's choice, in order */
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!used[e] && (best < 0 || p[e] > p[best])) best = e;
            used[best] = 1;
            assert_int_equal(ids[t * K + j], best);
            sum += p[best];
        }
        for (int j = 0; j < K; j++)
            assert_true(fabs(w[t * K + j] - p[ids[t * K + j]] / sum) < 1e-6);
    }
}

/* ---- moe_experts ---- */

struct xcase {
    int E, H, I, T, k;
    enum tern_dtype wdt; /* F32 / BF16, or U32: MLX affine of `bits` */
    int bits, group;
    enum tern_glu_act act;
    int shared; /* 0 none, 1 ungated, 2 gated */
};

/* A stacked linear [rows, in] from float rows (w gets the values the stack
 * holds: rounded to BF16, or dequantized). */
static struct tern_linear stack(const struct xcase *c, float *w, int64_t rows, int64_t in)
{
    struct tern_linear lin = {.in_features = in, .out_features = rows};
    if (c->wdt != TERN_DTYPE_U32) {
        uint16_t *h = tern_malloc((size_t)(rows * in) * 2);
        for (int64_t i = 0; i < rows * in; i++) {
            h[i] = tern_f32_to_bf16(w[i]);
            if (c->wdt == TERN_DTYPE_BF16) w[i] = tern_bf16_to_f32(h[i]);
        }
        lin.weight = mk(2, (int64_t[]){rows, in}, c->wdt, c->wdt == TERN_DTYPE_BF16 ? (void *)h
                                                                               : (void *)w);
        tern_free(h);
        return lin;
    }
    int64_t words = in * c->bits / 32, ng = in / c->group;
    uint32_t *q = tern_malloc((size_t)(rows * words) * 4);
    uint16_t *s = tern_malloc((size_t)(rows * ng) * 2), *b = tern_malloc((size_t)(rows * ng) * 2);
    float sf[64], bf[64];
    for (int64_t r = 0; r < rows; r++) {
        tern_quant_affine_row(w + r * in, in, c->bits, c->group, q + r * words, sf, bf);
        for (int64_t g = 0; g < ng; g++) {
            tern_quant_store_half(TERN_DTYPE_BF16, s, r * ng + g, sf[g]);
            tern_quant_store_half(TERN_DTYPE_BF16, b, r * ng + g, bf[g]);
        }
        tern_quant_dequant_row(q + r * words, s + r * ng, b + r * ng, TERN_DTYPE_BF16, in,
                               c->bits, c->group, w + r * in);
    }
    lin.weight = mk(2, (int64_t[]){rows, words}, TERN_DTYPE_U32, q);
    lin.scales = mk(2, (int64_t[]){rows, ng}, TERN_DTYPE_BF16, s);
    lin.biases = mk(2, (int64_t[]){rows, ng}, TERN_DTYPE_BF16, b);
    lin.bits = c->bits;
    lin.group_size = c->group;
    tern_free(q);
    tern_free(s);
    tern_free(b);
    return lin;
}

static double act_d(enum tern_glu_act a, double x)
{
    if (a == TERN_GLU_SILU) return x / (1 + exp(-x));
    return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* out[t] by the definition, in double. */
static void reference(const struct xcase *c, const float *x, const float *gu, const float *dn,
                      const int32_t *ids, const float *wt, const float *sh, const float *sg,
                      double *out)
{
    int H = c->H, I = c->I;
    double *a = tern_malloc(sizeof(double) * (size_t)I);
    for (int t = 0; t < c->T; t++) {
        for (int h = 0; h < H; h++) out[t * H + h] = 0;
        for (int j = 0; j < c->k; j++) {
            int e = ids[t * c->k + j];
            for (int i = 0; i < I; i++) {
                double g = 0, u = 0;
                for (int h = 0; h < H; h++) {
                    g += (double)x[t * H + h] * gu[((int64_t)e * 2 * I + i) * H + h];
                    u += (double)x[t * H + h] * gu[((int64_t)e * 2 * I + I + i) * H + h];
                }
                a[i] = act_d(c->act, g) * u;
            }
            for (int h = 0; h < H; h++) {
                double y = 0;
                for (int i = 0; i < I; i++) y += a[i] * dn[((int64_t)e * H + h) * I + i];
                out[t * H + h] += wt[t * c->k + j] * y;
            }
        }
        if (!sh) continue;
        double s = sg ? 1 / (1 + exp(-(double)sg[t])) : 1;
        for (int h = 0; h < H; h++) out[t * H + h] += s * sh[t * H + h];
    }
    tern_free(a);
}

/* Runs moe_experts over tokens [t0, t0 + n) of the case's inputs. */
static float *run(const struct xcase *c, const struct tern_experts *xw, const float *x,
                  const int32_t *ids, const float *wt, const float *sh, const float *sg, int t0,
                  int n)
{
    int H = c->H, k = c->k;
    struct tern_dtensor tx = mk(2, (int64_t[]){n, H}, TERN_DTYPE_F32, x + t0 * H);
    struct tern_dtensor ti = mk(2, (int64_t[]){n, k}, TERN_DTYPE_I32, ids + t0 * k);
    struct tern_dtensor tw = mk(2, (int64_t[]){n, k}, TERN_DTYPE_F32, wt + t0 * k);
    struct tern_dtensor ts = {0}, tg = {0};
    if (sh) ts = mk(2, (int64_t[]){n, H}, TERN_DTYPE_F32, sh + t0 * H);
    if (sg) tg = mk(2, (int64_t[]){n, 1}, TERN_DTYPE_F32, sg + t0);
    struct tern_dtensor ta = mk(2, (int64_t[]){n * k, c->I}, TERN_DTYPE_F32, NULL);
    struct tern_dtensor to = mk(1, (int64_t[]){n * k + c->E + 1}, TERN_DTYPE_I32, NULL);
    struct tern_dtensor tout = mk(2, (int64_t[]){n, H}, TERN_DTYPE_F32, NULL);
    struct tern_moe_io io = {.x = &tx, .ids = &ti, .weights = &tw, .shared = sh ? &ts : NULL,
                             .shared_gate = sg ? &tg : NULL, .act = &ta, .order = &to,
                             .out = &tout};
    tu_ok(cpu->ops->moe_experts(cpu, xw, c->act, &io));
    float *out = tu_download_f32(cpu, &tout);
    struct tern_dtensor *all[] = {&tx, &ti, &tw, &ts, &tg, &ta, &to, &tout};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tern_dtensor_free(cpu, all[i]);
    return out;
}

static void check_case(const struct xcase *c)
{
    int E = c->E, H = c->H, I = c->I, T = c->T, k = c->k;
    float *gu = tern_malloc(sizeof(float) * (size_t)(E * 2 * I * H));
    float *dn = tern_malloc(sizeof(float) * (size_t)(E * H * I));
    float *x = tern_malloc(sizeof(float) * (size_t)(T * H));
    float *sh = tern_malloc(sizeof(float) * (size_t)(T * H)), sg[64], wt[64 * 4];
    int32_t ids[64 * 4];
    for (int i = 0; i < E * 2 * I * H; i++) gu[i] = frand() / sqrtf((float)H);
    for (int i = 0; i < E * H * I; i++) dn[i] = frand() / sqrtf((float)I);
    for (int i = 0; i < T * H; i++) x[i] = frand(), sh[i] = frand();
    for (int t = 0; t < T; t++) {
        sg[t] = 2 * frand();
        for (int j = 0; j < k; j++) { /* k distinct experts, in any order */
            int e;
            bool dup;
            do {
                e = (int)((frand() + 1) * 0.5f * E) % E;
                dup = false;
                for (int i = 0; i < j; i++) dup |= ids[t * k + i] == e;
            } while (dup);
            ids[t * k + j] = e;
            wt[t * k + j] = 0.2f + 0.5f * (frand() + 1);
        }
    }
    struct tern_experts xw = {.n_experts = E, .hidden = H, .intermediate = I};
    xw.gate_up = stack(c, gu, (int64_t)E * 2 * I, H);
    xw.down = stack(c, dn, (int64_t)E * H, I);
    const float *s = c->shared ? sh : NULL, *g = c->shared == 2 ? sg : NULL;
    float *out = run(c, &xw, x, ids, wt, s, g, 0, T);
    double *ref = tern_malloc(sizeof(double) * (size_t)(T * H)), mx = 0, err = 0;
    reference(c, x, gu, dn, ids, wt, s, g, ref);
    for (int i = 0; i < T * H; i++) {
        mx = fmax(mx, fabs(ref[i]));
        err = fmax(err, fabs(out[i] - ref[i]));
    }
    printf("  E %d H %d I %d T %d k %d %s%s shared %d: max rel err %.2e\n", E, H, I, T, k,
           c->wdt == TERN_DTYPE_U32 ? "q" : tern_dtype_name(c->wdt),
           c->wdt == TERN_DTYPE_U32 ? (c->bits == 4 ? "4" : "8") : "", c->shared, err / mx);
    assert_true(err <= 1e-5 * mx);
    for (int t = 0; t < T; t++) { /* a token alone: bitwise its row of the batch */
        float *one = run(c, &xw, x, ids, wt, s, g, t, 1);
        assert_memory_equal(one, out + t * H, sizeof(float) * (size_t)H);
        tern_free(one);
    }
    struct tern_linear *lins[2] = {&xw.gate_up, &xw.down};
    for (int i = 0; i < 2; i++) {
        tern_dtensor_free(cpu, &lins[i]->weight);
        tern_dtensor_free(cpu, &lins[i]->scales);
        tern_dtensor_free(cpu, &lins[i]->biases);
    }
    tern_free(out);
    tern_free(ref);
    tern_free(gu);
    tern_free(dn);
    tern_free(x);
    tern_free(sh);
}

static void test_experts(void **state)
{
    (void)state;
    const struct xcase cases[] = {
        {5, 24, 12, 9, 2, TERN_DTYPE_F32, 0, 0, TERN_GLU_SILU, 0},
        {6, 40, 20, 11, 3, TERN_DTYPE_BF16, 0, 0, TERN_GLU_GELU_TANH, 1},
        {4, 64, 32, 7, 4, TERN_DTYPE_U32, 4, 32, TERN_GLU_SILU, 2},
        {8, 64, 64, 13, 2, TERN_DTYPE_U32, 8, 64, TERN_GLU_GELU_TANH, 2},
        {3, 16, 8, 1, 3, TERN_DTYPE_F32, 0, 0, TERN_GLU_SILU, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

/* Bad operands are errors, not crashes. */
static void test_experts_errors(void **state)
{
    (void)state;
    struct xcase c = {4, 16, 8, 2, 2, TERN_DTYPE_F32, 0, 0, TERN_GLU_SILU, 0};
    float gu[4 * 16 * 16], dn[4 * 16 * 8], x[2 * 16] = {0}, wt[4] = {1, 1, 1, 1};
    for (size_t i = 0; i < sizeof gu / sizeof gu[0]; i++) gu[i] = frand();
    for (size_t i = 0; i < sizeof dn / sizeof dn[0]; i++) dn[i] = frand();
    struct tern_experts xw = {.n_experts = 4, .hidden = 16, .intermediate = 8};
    xw.gate_up = stack(&c, gu, 4 * 16, 16);
    xw.down = stack(&c, dn, 4 * 16, 8);
    const int32_t bad[4] = {0, 1, 4, 2}; /* expert 4 of 4 */
    struct tern_dtensor tx = mk(2, (int64_t[]){2, 16}, TERN_DTYPE_F32, x);
    struct tern_dtensor ti = mk(2, (int64_t[]){2, 2}, TERN_DTYPE_I32, bad);
    struct tern_dtensor tw = mk(2, (int64_t[]){2, 2}, TERN_DTYPE_F32, wt);
    struct tern_dtensor ta = mk(2, (int64_t[]){4, 8}, TERN_DTYPE_F32, NULL);
    struct tern_dtensor to = mk(1, (int64_t[]){9}, TERN_DTYPE_I32, NULL);
    struct tern_dtensor tout = mk(2, (int64_t[]){2, 16}, TERN_DTYPE_F32, NULL);
    struct tern_moe_io io = {.x = &tx, .ids = &ti, .weights = &tw, .act = &ta, .order = &to,
                             .out = &tout};
    assert_int_equal(cpu->ops->moe_experts(cpu, &xw, TERN_GLU_SILU, &io), TERN_E_INVALID_ARG);
    assert_non_null(strstr(tern_last_error(), "expert id 4"));
    to.shape[0] = 8; /* one short of T k + E + 1 */
    const int32_t good[4] = {0, 1, 3, 2};
    tu_ok(cpu->ops->upload(cpu, &ti, good, sizeof good));
    assert_int_equal(cpu->ops->moe_experts(cpu, &xw, TERN_GLU_SILU, &io), TERN_E_INVALID_ARG);
    struct tern_dtensor *all[] = {&tx, &ti, &tw, &ta, &to, &tout, &xw.gate_up.weight,
                                  &xw.down.weight};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tern_dtensor_free(cpu, all[i]);
}

static int setup(void **state)
{
    (void)state;
    struct tern_backend_params bp = {.device = TERN_DEVICE_CPU, .n_threads = 2};
    return tern_backend_create(&bp, &cpu) == TERN_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tern_backend_destroy(cpu);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_ties),
        cmocka_unit_test(test_route_random),
        cmocka_unit_test(test_experts),
        cmocka_unit_test(test_experts_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
