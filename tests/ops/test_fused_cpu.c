/*
 * test_fused_cpu.c — the CPU's fused ops (backend.h: qk_rope_store,
 * matmul_glu), which CI runs without a GPU: each must equal, bitwise, the
 * sequence of unfused ops it stands for, and qk_rope_store must also match
 * a plain scalar reference written here (per-head RMSNorm, rotary pairs as
 * rotate-half or interleaved, partial rotary, the KV store with slot -1
 * skipped and slots crossing blocks). Depends on the CPU backend only.
 */
#include "testutil.h"

#include "backend/backend.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define BS 16
#define NB 5
#define T  7

static uint64_t rng = 88172645463325252ull;

static float frand(void) { return tu_frand(&rng); }

static struct tern_backend *cpu;

static struct tern_dtensor mk(int nd, const int64_t *shape, enum tern_dtype dt, const void *v)
{
    struct tern_dtensor t;
    assert_int_equal(tern_dtensor_alloc(cpu, dt, nd, shape, &t), TERN_OK);
    if (v) assert_int_equal(cpu->ops->upload(cpu, &t, v, tern_dtensor_bytes(&t)), TERN_OK);
    return t;
}

struct qcase {
    int H, KVH, hd, rot, inter, norm;
};

/* The scalar reference: norm, rope, store, as backend.h defines the op. */
static void reference(const struct qcase *q, float *x, const float *qn, const float *kn,
                      const float *inv, const int32_t *pos, const int32_t *slots, float *kc,
                      float *vc)
{
    int W = (q->H + 2 * q->KVH) * q->hd, kvd = q->KVH * q->hd, half = q->rot / 2;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < q->H + q->KVH; j++) {
            float *h = x + t * W + j * q->hd;
            if (q->norm) {
                const float *w = j < q->H ? qn : kn;
                float ss = 0;
                for (int i = 0; i < q->hd; i++) ss += h[i] * h[i];
                float r = 1.0f / sqrtf(ss / (float)q->hd + 1e-6f);
                for (int i = 0; i < q->hd; i++) h[i] = h[i] * r * w[i];
            }
            for (int i = 0; i < half; i++) {
                float a = (float)pos[t] * inv[i], c = cosf(a), s = sinf(a);
                int i1 = q->inter ? 2 * i : i, i2 = q->inter ? 2 * i + 1 : i + half;
                float x1 = h[i1], x2 = h[i2];
                h[i1] = x1 * c - x2 * s;
                h[i2] = x2 * c + x1 * s;
            }
        }
    for (int t = 0; t < T; t++) {
        if (slots[t] < 0) continue;
        memcpy(kc + slots[t] * kvd, x + t * W + q->H * q->hd, sizeof(float) * (size_t)kvd);
        memcpy(vc + slots[t] * kvd, x + t * W + (q->H + q->KVH) * q->hd,
               sizeof(float) * (size_t)kvd);
    }
}

static void run_case(const struct qcase *q)
{
    int32_t slots[T] = {15, 16, -1, 31, 32, 79, 3}, pos[T] = {0, 1, 7, 100, 4095, 17, 9000};
    int64_t W = (int64_t)(q->H + 2 * q->KVH) * q->hd, qd = (int64_t)q->H * q->hd;
    int64_t kvd = (int64_t)q->KVH * q->hd, n_cache = (int64_t)NB * BS * kvd;
    float *x = tern_malloc(sizeof(float) * (size_t)(T * W)), qn[256], kn[256], inv[128];
    float *k0 = tern_malloc(sizeof(float) * (size_t)n_cache);
    float *v0 = tern_malloc(sizeof(float) * (size_t)n_cache);
    for (int64_t i = 0; i < T * W; i++) x[i] = 2.0f * frand();
    for (int64_t i = 0; i < n_cache; i++) k0[i] = frand(), v0[i] = frand();
    for (int i = 0; i < q->hd; i++) qn[i] = 1.0f + 0.5f * frand(), kn[i] = 1.0f + 0.5f * frand();
    for (int i = 0; i < q->rot / 2; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / (float)q->rot);
    struct tern_attn_params p = {.n_heads = q->H, .n_kv_heads = q->KVH, .head_dim = q->hd};
    struct tern_batch h = {.n_tokens = T, .n_seqs = 1, .positions = pos, .slot_mapping = slots};
    int64_t xs[2] = {T, W}, cs[4] = {NB, BS, q->KVH, q->hd}, hs[1] = {q->hd}, fs[1] = {q->rot / 2};
    int64_t ts[1] = {T};
    float *res[2][3];
    for (int fused = 0; fused < 2; fused++) {
        struct tern_dtensor xt = mk(2, xs, TERN_DTYPE_F32, x);
        struct tern_kv_layer kv = {.k = mk(4, cs, TERN_DTYPE_F32, k0),
                                   .v = mk(4, cs, TERN_DTYPE_F32, v0)};
        struct tern_dtensor qw = mk(1, hs, TERN_DTYPE_F32, qn), kw = mk(1, hs, TERN_DTYPE_F32, kn);
        struct tern_batch_dev d = {.host = &h,
                                   .block_size = BS,
                                   .max_q_len = T,
                                   .max_seq_len = 9001,
                                   .positions = mk(1, ts, TERN_DTYPE_I32, pos),
                                   .slot_mapping = mk(1, ts, TERN_DTYPE_I32, slots)};
        struct tern_rope r = {.head_dim = q->hd,
                              .rotary_dim = q->rot,
                              .interleaved = q->inter,
                              .mscale = 1.0f,
                              .inv_freq = mk(1, fs, TERN_DTYPE_F32, inv)};
        if (fused) {
            assert_non_null(cpu->ops->qk_rope_store);
            tu_ok(cpu->ops->qk_rope_store(cpu, &xt, q->norm ? &qw : NULL, q->norm ? &kw : NULL, 1e-6f,
                                       &r, &p, &d, &kv));
        } else {
            if (q->norm) {
                tu_ok(cpu->ops->head_rmsnorm(cpu, &xt, 0, q->H, q->hd, &qw, 1e-6f));
                tu_ok(cpu->ops->head_rmsnorm(cpu, &xt, qd, q->KVH, q->hd, &kw, 1e-6f));
            }
            tu_ok(cpu->ops->rope(cpu, &xt, 0, q->H, &d.positions, &r));
            tu_ok(cpu->ops->rope(cpu, &xt, qd, q->KVH, &d.positions, &r));
            tu_ok(cpu->ops->kv_store(cpu, &xt, qd, qd + kvd, &d, &kv));
        }
        struct tern_dtensor *all[3] = {&xt, &kv.k, &kv.v};
        for (int k = 0; k < 3; k++) {
            res[fused][k] = tern_malloc(tern_dtensor_bytes(all[k]));
            tu_ok(cpu->ops->download(cpu, res[fused][k], all[k], tern_dtensor_bytes(all[k])));
        }
        struct tern_dtensor *fr[8] = {&xt, &kv.k,        &kv.v,           &qw,
                                      &kw, &d.positions, &d.slot_mapping, &r.inv_freq};
        for (int k = 0; k < 8; k++) tern_dtensor_free(cpu, fr[k]);
    }
    reference(q, x, qn, kn, inv, pos, slots, k0, v0);
    float *ref[3] = {x, k0, v0};
    size_t n[3] = {(size_t)(T * W), (size_t)n_cache, (size_t)n_cache};
    for (int k = 0; k < 3; k++) {
        if (memcmp(res[0][k], res[1][k], n[k] * sizeof(float)) != 0)
            fail_msg(
                "qk_rope_store H %d KV %d hd %d rot %d: output %d differs from the unfused ops",
                q->H, q->KVH, q->hd, q->rot, k);
        double e = tu_max_rel_err(res[1][k], ref[k], n[k]);
        if (!(e < 1e-5)) fail_msg("qk_rope_store vs the scalar reference: rel err %.3e", e);
        tern_free(res[0][k]);
        tern_free(res[1][k]);
    }
    printf("  qk_rope_store H %d KV %d hd %d rot %d%s%s: bitwise == unfused, == reference\n", q->H,
           q->KVH, q->hd, q->rot, q->inter ? " interleaved" : "", q->norm ? " norm" : "");
    tern_free(x), tern_free(k0), tern_free(v0);
}

static void test_qk_rope_store(void **state)
{
    (void)state;
    struct qcase cs[] = {{8, 2, 64, 64, 0, 0},
                         {4, 4, 32, 16, 1, 1},
                         {6, 2, 128, 128, 0, 1},
                         {3, 1, 80, 40, 0, 1},
                         {2, 1, 16, 16, 1, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

static void test_matmul_glu(void **state)
{
    (void)state;
    enum { TN = 3, IN = 37, FF = 29 };
    int64_t xs[2] = {TN, IN}, gs[2] = {TN, 2 * FF}, as[2] = {TN, FF}, ws[2] = {2 * FF, IN};
    float x[TN * IN], w[2 * FF * IN], act[2][TN * FF];
    for (int i = 0; i < TN * IN; i++) x[i] = 2.0f * frand();
    for (int i = 0; i < 2 * FF * IN; i++) w[i] = frand();
    for (int fused = 0; fused < 2; fused++) {
        struct tern_dtensor xt = mk(2, xs, TERN_DTYPE_F32, x), g = mk(2, gs, TERN_DTYPE_F32, NULL);
        struct tern_dtensor a = mk(2, as, TERN_DTYPE_F32, NULL);
        struct tern_linear l = {.weight = mk(2, ws, TERN_DTYPE_F32, w), .in_features = IN,
                                .out_features = 2 * FF};
        if (fused) {
            assert_non_null(cpu->ops->matmul_glu);
            tu_ok(cpu->ops->matmul_glu(cpu, &xt, &l, &g, &a));
        } else {
            tu_ok(cpu->ops->matmul(cpu, &xt, &l, &g, 0));
            tu_ok(cpu->ops->silu_mul(cpu, &g, &a));
        }
        tu_ok(cpu->ops->download(cpu, act[fused], &a, sizeof act[fused]));
        struct tern_dtensor *fr[4] = {&xt, &g, &a, &l.weight};
        for (int k = 0; k < 4; k++) tern_dtensor_free(cpu, fr[k]);
    }
    assert_memory_equal(act[0], act[1], sizeof act[0]);
    /* Independent check: silu(x . w_gate[i]) * (x . w_up[i]) for every element. */
    for (int t = 0; t < TN; t++)
        for (int i = 0; i < FF; i++) {
            double gv = 0, uv = 0;
            for (int k = 0; k < IN; k++) {
                gv += (double)x[t * IN + k] * w[i * IN + k];
                uv += (double)x[t * IN + k] * w[(FF + i) * IN + k];
            }
            double ref = gv / (1.0 + exp(-gv)) * uv;
            if (!(fabs(act[1][t * FF + i] - ref) < 1e-4 * (1 + fabs(ref))))
                fail_msg("matmul_glu [%d, %d] = %g, reference %g", t, i, act[1][t * FF + i], ref);
        }
}

static int setup(void **state)
{
    (void)state;
    struct tern_backend_params p = {.device = TERN_DEVICE_CPU, .n_threads = 1};
    return tern_backend_create(&p, &cpu) == TERN_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tern_backend_destroy(cpu);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_qk_rope_store),
                                       cmocka_unit_test(test_matmul_glu)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
