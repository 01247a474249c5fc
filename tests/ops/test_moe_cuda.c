/*
 * test_moe_cuda.c — the CUDA mixture-of-experts ops (backend.h: moe_route,
 * moe_experts) against the CPU reference, beside test_ops_cuda.c's other
 * ops.
 *
 * moe_route: random logits (8 to 160 experts, top 1 to 8, renormalised or
 * not, with a BF16 per-expert scale) and logits drawn from four values (ties
 * everywhere): the same expert ids as the CPU, in the same order, weights
 * within 1e-6. moe_experts: BF16 activations over BF16 and MLX 4- and
 * 8-bit expert stacks, SiLU and GeGLU, with a gated or plain shared
 * expert, against the CPU (F32 over the same values) within BF16
 * tolerance; and each token alone gives bitwise its row of the batch, on
 * the default and the deterministic backend. Skips without a CUDA device.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TOL_BF16 1.5e-2

static struct tern_backend *cpu, *gpu, *gpu_det;
static uint64_t rng;

static float frand(void) { return tu_frand(&rng); }

static float bfr(float f) { return tern_bf16_to_f32(tern_f32_to_bf16(f)); }

/* A tensor on be holding n_bytes of host data (NULL: uninitialised). */
static struct tern_dtensor mk(struct tern_backend *be, enum tern_dtype dt, int nd,
                              const int64_t *shape, const void *data)
{
    struct tern_dtensor t;
    tu_ok(tern_dtensor_alloc(be, dt, nd, shape, &t));
    if (data) tu_ok(be->ops->upload(be, &t, data, tern_dtensor_bytes(&t)));
    return t;
}

/* Floats as a tensor of dtype dt (F32 or BF16) on be. */
static struct tern_dtensor mkf(struct tern_backend *be, enum tern_dtype dt, int nd,
                               const int64_t *shape, const float *v)
{
    size_t n = (size_t)tern_shape_numel(shape, nd);
    if (dt == TERN_DTYPE_F32) return mk(be, dt, nd, shape, v);
    uint16_t *h = tern_malloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = tern_f32_to_bf16(v[i]);
    struct tern_dtensor t = mk(be, dt, nd, shape, h);
    tern_free(h);
    return t;
}

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!gpu) skip();                                                                          \
    } while (0)

/* ---- moe_route ---- */

static void route_on(struct tern_backend *be, const float *l, int T, int E, int k, bool renorm,
                     const float *scale, int32_t *ids, float *w)
{
    struct tern_dtensor tl = mk(be, TERN_DTYPE_F32, 2, (int64_t[]){T, E}, l);
    struct tern_dtensor ti = mk(be, TERN_DTYPE_I32, 2, (int64_t[]){T, k}, NULL);
    struct tern_dtensor tw = mk(be, TERN_DTYPE_F32, 2, (int64_t[]){T, k}, NULL);
    struct tern_dtensor ts = {0};
    if (scale) ts = mkf(be, TERN_DTYPE_BF16, 1, (int64_t[]){E}, scale);
    tu_ok(be->ops->moe_route(be, &tl, k, renorm, scale ? &ts : NULL, &ti, &tw));
    tu_ok(be->ops->download(be, ids, &ti, sizeof(int32_t) * (size_t)(T * k)));
    tu_ok(be->ops->download(be, w, &tw, sizeof(float) * (size_t)(T * k)));
    struct tern_dtensor *all[] = {&tl, &ti, &tw, &ts};
    for (int i = 0; i < 4; i++) tern_dtensor_free(be, all[i]);
}

static void test_route(void **state)
{
    (void)state;
    NEED_GPU();
    const int shapes[][3] = {{8, 2, 1}, {8, 1, 0}, {60, 4, 0}, {128, 8, 1}, {160, 8, 1}};
    for (int ties = 0; ties < 2; ties++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int T = 37, E = shapes[s][0], k = shapes[s][1];
            bool renorm = shapes[s][2];
            float *l = tern_malloc(sizeof(float) * (size_t)(T * E)), sc[160];
            for (int i = 0; i < T * E; i++)
                l[i] = ties ? (float)((int)((frand() + 1) * 2) % 4) : 4 * frand();
            for (int e = 0; e < E; e++) sc[e] = bfr(1 + 0.5f * frand());
            int32_t ic[37 * 8], ig[37 * 8];
            float wc[37 * 8], wg[37 * 8];
            route_on(cpu, l, T, E, k, renorm, s % 2 ? NULL : sc, ic, wc);
            route_on(gpu, l, T, E, k, renorm, s % 2 ? NULL : sc, ig, wg);
            assert_memory_equal(ig, ic, sizeof(int32_t) * (size_t)(T * k));
            double err = 0;
            for (int i = 0; i < T * k; i++) err = fmax(err, fabs(wg[i] - wc[i]) / fabs(wc[i]));
            printf("  route E %3d k %d%s%s: ids equal, weights rel err %.1e\n", E, k,
                   renorm ? " renorm" : "", ties ? " (ties)" : "", err);
            assert_true(err <= 1e-6);
            tern_free(l);
        }
}

/* ---- moe_experts ---- */

struct xcase {
    int E, H, I, T, k;
    int bits, group; /* 0: BF16 weights */
    enum tern_glu_act act;
    int shared; /* 0 none, 1 plain, 2 gated */
};

/* Host bytes of a stack [rows, in] of the case's format, from floats. */
struct hstack {
    void *w, *s, *b;
    int64_t rows, in;
};

static struct hstack hstack_make(const struct xcase *c, const float *v, int64_t rows, int64_t in)
{
    struct hstack h = {.rows = rows, .in = in};
    if (!c->bits) {
        uint16_t *w = tern_malloc((size_t)(rows * in) * 2);
        for (int64_t i = 0; i < rows * in; i++) w[i] = tern_f32_to_bf16(v[i]);
        h.w = w;
        return h;
    }
    int64_t words = in * c->bits / 32, ng = in / c->group;
    uint32_t *q = tern_malloc((size_t)(rows * words) * 4);
    uint16_t *s = tern_malloc((size_t)(rows * ng) * 2), *b = tern_malloc((size_t)(rows * ng) * 2);
    float sf[64], bf[64];
    for (int64_t r = 0; r < rows; r++) {
        tern_quant_affine_row(v + r * in, in, c->bits, c->group, q + r * words, sf, bf);
        for (int64_t g = 0; g < ng; g++) {
            tern_quant_store_half(TERN_DTYPE_BF16, s, r * ng + g, sf[g]);
            tern_quant_store_half(TERN_DTYPE_BF16, b, r * ng + g, bf[g]);
        }
    }
    h.w = q;
    h.s = s;
    h.b = b;
    return h;
}

static struct tern_linear stack_on(struct tern_backend *be, const struct xcase *c,
                                   const struct hstack *h)
{
    struct tern_linear l = {.in_features = h->in, .out_features = h->rows};
    if (!c->bits) {
        l.weight = mk(be, TERN_DTYPE_BF16, 2, (int64_t[]){h->rows, h->in}, h->w);
        return l;
    }
    l.weight = mk(be, TERN_DTYPE_U32, 2, (int64_t[]){h->rows, h->in * c->bits / 32}, h->w);
    l.scales = mk(be, TERN_DTYPE_BF16, 2, (int64_t[]){h->rows, h->in / c->group}, h->s);
    l.biases = mk(be, TERN_DTYPE_BF16, 2, (int64_t[]){h->rows, h->in / c->group}, h->b);
    l.bits = c->bits;
    l.group_size = c->group;
    return l;
}

struct xin {
    const float *x, *wt, *sh, *sg;
    const int32_t *ids;
};

/* moe_experts on be over tokens [t0, t0 + n); the output as floats. */
static float *run(struct tern_backend *be, const struct xcase *c, const struct tern_experts *xw,
                  const struct xin *in, int t0, int n)
{
    enum tern_dtype dt = be->act_dtype;
    int H = c->H, k = c->k;
    struct tern_dtensor tx = mkf(be, dt, 2, (int64_t[]){n, H}, in->x + t0 * H);
    struct tern_dtensor ti = mk(be, TERN_DTYPE_I32, 2, (int64_t[]){n, k}, in->ids + t0 * k);
    struct tern_dtensor tw = mk(be, TERN_DTYPE_F32, 2, (int64_t[]){n, k}, in->wt + t0 * k);
    struct tern_dtensor ts = {0}, tg = {0};
    if (c->shared) ts = mkf(be, dt, 2, (int64_t[]){n, H}, in->sh + t0 * H);
    if (c->shared == 2) tg = mk(be, TERN_DTYPE_F32, 2, (int64_t[]){n, 1}, in->sg + t0);
    struct tern_dtensor ta = mk(be, dt, 2, (int64_t[]){n * k, c->I}, NULL);
    struct tern_dtensor to = mk(be, TERN_DTYPE_I32, 1, (int64_t[]){n * k + c->E + 1}, NULL);
    struct tern_dtensor tout = mk(be, dt, 2, (int64_t[]){n, H}, NULL);
    struct tern_moe_io io = {.x = &tx, .ids = &ti, .weights = &tw,
                             .shared = c->shared ? &ts : NULL,
                             .shared_gate = c->shared == 2 ? &tg : NULL, .act = &ta,
                             .order = &to, .out = &tout};
    tu_ok(be->ops->moe_experts(be, xw, c->act, &io));
    float *out = tu_download_f32(be, &tout);
    struct tern_dtensor *all[] = {&tx, &ti, &tw, &ts, &tg, &ta, &to, &tout};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tern_dtensor_free(be, all[i]);
    return out;
}

static void free_stack(struct tern_backend *be, struct tern_linear *l)
{
    tern_dtensor_free(be, &l->weight);
    tern_dtensor_free(be, &l->scales);
    tern_dtensor_free(be, &l->biases);
}

static void check_case(const struct xcase *c)
{
    int E = c->E, H = c->H, I = c->I, T = c->T, k = c->k;
    float *gu = tern_malloc(sizeof(float) * (size_t)(E * 2 * I * H));
    float *dn = tern_malloc(sizeof(float) * (size_t)(E * H * I));
    float *x = tern_malloc(sizeof(float) * (size_t)(T * H));
    float *sh = tern_malloc(sizeof(float) * (size_t)(T * H));
    float *sg = tern_malloc(sizeof(float) * (size_t)T);
    float *wt = tern_malloc(sizeof(float) * (size_t)(T * k));
    int32_t *ids = tern_malloc(sizeof(int32_t) * (size_t)(T * k));
    for (int i = 0; i < E * 2 * I * H; i++) gu[i] = frand() / sqrtf((float)H);
    for (int i = 0; i < E * H * I; i++) dn[i] = frand() / sqrtf((float)I);
    for (int i = 0; i < T * H; i++) x[i] = bfr(frand()), sh[i] = bfr(frand());
    for (int t = 0; t < T; t++) {
        sg[t] = 2 * frand();
        for (int j = 0; j < k; j++) {
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
    struct hstack hg = hstack_make(c, gu, (int64_t)E * 2 * I, H);
    struct hstack hd = hstack_make(c, dn, (int64_t)E * H, I);
    struct xin in = {x, wt, sh, sg, ids};
    struct tern_backend *bes[3] = {cpu, gpu, gpu_det};
    struct tern_experts xw[3];
    float *out[3];
    for (int b = 0; b < 3; b++) {
        xw[b] = (struct tern_experts){.n_experts = E, .hidden = H, .intermediate = I};
        xw[b].gate_up = stack_on(bes[b], c, &hg);
        xw[b].down = stack_on(bes[b], c, &hd);
        out[b] = run(bes[b], c, &xw[b], &in, 0, T);
    }
    char what[96];
    snprintf(what, sizeof what, "experts E %d H %d I %d T %d k %d %s%s shared %d", E, H, I, T, k,
             c->bits ? "q" : "bf16", c->bits == 4 ? "4" : c->bits == 8 ? "8" : "", c->shared);
    for (int b = 1; b < 3; b++) {
        double e = tu_max_rel_err(out[b], out[0], (size_t)(T * H));
        printf("  %-52s %s rel err %.2e\n", what, b == 1 ? "default" : "det    ", e);
        assert_true(e <= TOL_BF16);
        for (int t = 0; t < T; t += 3) { /* a token alone: bitwise its row of the batch */
            float *one = run(bes[b], c, &xw[b], &in, t, 1);
            assert_memory_equal(one, out[b] + t * H, sizeof(float) * (size_t)H);
            tern_free(one);
        }
    }
    for (int b = 0; b < 3; b++) {
        free_stack(bes[b], &xw[b].gate_up);
        free_stack(bes[b], &xw[b].down);
        tern_free(out[b]);
    }
    void *hf[] = {hg.w, hg.s, hg.b, hd.w, hd.s, hd.b, gu, dn, x, sh, sg, wt, ids};
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) tern_free(hf[i]);
}

static void test_experts(void **state)
{
    (void)state;
    NEED_GPU();
    const struct xcase cases[] = {
        {8, 64, 32, 19, 2, 0, 0, TERN_GLU_SILU, 0},
        {16, 128, 96, 33, 4, 0, 0, TERN_GLU_GELU_TANH, 1},
        {8, 256, 64, 9, 8, 4, 32, TERN_GLU_SILU, 2},
        {32, 128, 128, 40, 4, 8, 64, TERN_GLU_GELU_TANH, 2},
        {4, 64, 64, 1, 3, 4, 64, TERN_GLU_SILU, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

static int group_setup(void **state)
{
    (void)state;
    rng = tu_seed();
    tu_backends_create(&cpu, &gpu, &gpu_det);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    tu_backends_destroy(cpu, gpu, gpu_det);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route),
        cmocka_unit_test(test_experts),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
