/*
 * test_quant_cuda.c — the CUDA quantized ops against the CPU reference on
 * random data, for every bits (2, 3, 4, 5, 6, 8) x group size (32, 64, 128)
 * with BF16 scales (and F16 / F32 scales for 4-bit): matmul at T = 1, 3, 8
 * (the register-dequantizing GEMV; 3/5/6 bits take its exact generic path)
 * and T = 40 (BF16 dequantized weight + cuBLASLt), in default and
 * deterministic mode, with and without an additive bias, plus get_rows on
 * the quantized table. Inputs are BF16-exact on both sides. Skipped without
 * a CUDA device.
 *
 * The GEMV is checked at every T = 1..8 with the kernel the shape takes
 * by default (4 bits with BF16 / F16 scales: the tensor-core GEMV of
 * cuda_quant_mma.cu; other widths and F32 scales: the register GEMV of
 * cuda_quant.cu), with 333 output rows (not a multiple of the tensor-core
 * kernel's 16-row tile) and shapes that give each of its K splits (1, 2, 4,
 * 8 warps per tile) and both its tile counts per warp (the widest weights
 * take two); and for batch invariance: each token of a T = 8 launch
 * bitwise equal to the same token alone (T = 1). Two tiles per warp must
 * give bitwise the rows one tile per warp gives (test_tp: a weight of
 * >= 1024 tiles against its first rows as a weight of its own, with the
 * same K split); matmul_glu through the tensor-core GEMV's GLU variant must
 * equal matmul + silu_mul bitwise (test_glu), and matmul_rope_store through
 * its RP variant matmul + qk_rope_store (test_rope_store).
 *
 * Tolerances (max |diff| / max |ref|): the GEMV accumulates in float32 like
 * the CPU, in another order: 1e-4. The cuBLASLt path multiplies BF16-rounded
 * weights (half an ulp, 2^-9 relative): 1e-2. get_rows: 1e-6.
 */
#include "testutil.h"

#include "backend/backend.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TERN_HAVE_CUDA
#include "backend/cuda/cuda_quant.h" /* tk_qgemv_mma_ok / _split / _tp: which kernel a shape gets */
#endif

static struct tern_backend *cpu, *gpu, *gpu_det;

#define BS_RS 16 /* KV block size of test_rope_store */
static uint64_t rng = 88172645463325252ull;

static float frand(void) { return tu_frand(&rng); }

static struct tern_dtensor up(struct tern_backend *be, enum tern_dtype dt, int nd,
                              const int64_t *shape, const void *data)
{
    struct tern_dtensor t;
    tu_ok(tern_dtensor_alloc(be, dt, nd, shape, &t));
    if (data) tu_ok(be->ops->upload(be, &t, data, tern_dtensor_bytes(&t)));
    return t;
}

static float *down(struct tern_backend *be, const struct tern_dtensor *t)
{
    size_t n = tern_dtensor_numel(t), es = tern_dtype_size(t->dtype);
    void *b = tern_malloc(n * es);
    float *f = tern_malloc(n * sizeof *f);
    tu_ok(be->ops->download(be, b, t, n * es));
    tern_to_f32(t->dtype, b, f, n);
    tern_free(b);
    return f;
}

/* A random quantized linear [out, in] built on the host, the same bytes on both backends. */
struct qhost {
    uint32_t *q;
    void *s, *b;
    uint16_t *bias;
    enum tern_dtype sdt;
};

static struct qhost qhost_make(int64_t out, int64_t in, int bits, int g, enum tern_dtype sdt)
{
    struct qhost h = {.sdt = sdt};
    int64_t ng = in / g, words = in * bits / 32;
    h.q = tern_malloc((size_t)(out * words) * 4);
    h.s = tern_malloc((size_t)(out * ng) * 4);
    h.b = tern_malloc((size_t)(out * ng) * 4);
    h.bias = tern_malloc((size_t)out * 2);
    float *row = tern_malloc((size_t)in * 4), *sc = tern_malloc((size_t)ng * 4);
    float *bi = tern_malloc((size_t)ng * 4);
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++) row[i] = frand() * 0.1f;
        tern_quant_affine_row(row, in, bits, g, h.q + o * words, sc, bi);
        for (int64_t j = 0; j < ng; j++) {
            tern_quant_store_half(sdt, h.s, o * ng + j, sc[j]);
            tern_quant_store_half(sdt, h.b, o * ng + j, bi[j]);
        }
        h.bias[o] = tern_f32_to_bf16(frand());
    }
    tern_free(row);
    tern_free(sc);
    tern_free(bi);
    return h;
}

static struct tern_linear lin_on(struct tern_backend *be, const struct qhost *h, int64_t out,
                                 int64_t in, int bits, int g, bool with_bias)
{
    struct tern_linear l = {.bits = bits, .group_size = g, .in_features = in, .out_features = out};
    int64_t ws[2] = {out, in * bits / 32}, ss[2] = {out, in / g}, bs[1] = {out};
    l.weight = up(be, TERN_DTYPE_U32, 2, ws, h->q);
    l.scales = up(be, h->sdt, 2, ss, h->s);
    l.biases = up(be, h->sdt, 2, ss, h->b);
    if (with_bias) l.bias = up(be, TERN_DTYPE_BF16, 1, bs, h->bias);
    return l;
}

static void lin_free(struct tern_backend *be, struct tern_linear *l)
{
    tern_dtensor_free(be, &l->weight);
    tern_dtensor_free(be, &l->scales);
    tern_dtensor_free(be, &l->biases);
    if (l->bias.buf) tern_dtensor_free(be, &l->bias);
}

/* y = x w^T on the CPU and on g for random BF16 x [T, in]; returns the max
 * rel err. */
static double run_matmul(struct tern_backend *g, struct tern_linear *lg, struct tern_linear *lc,
                         int64_t T, int64_t in, int64_t out)
{
    int64_t xs[2] = {T, in}, ys[2] = {T, out};
    float *xf = tern_malloc((size_t)(T * in) * 4);
    uint16_t *xb = tern_malloc((size_t)(T * in) * 2);
    for (int64_t i = 0; i < T * in; i++) {
        xb[i] = tern_f32_to_bf16(frand());
        xf[i] = tern_bf16_to_f32(xb[i]);
    }
    struct tern_dtensor xc = up(cpu, TERN_DTYPE_F32, 2, xs, xf), yc = up(cpu, TERN_DTYPE_F32, 2, ys, NULL);
    struct tern_dtensor xg = up(g, TERN_DTYPE_BF16, 2, xs, xb), yg = up(g, TERN_DTYPE_F32, 2, ys, NULL);
    tu_ok(cpu->ops->matmul(cpu, &xc, lc, &yc, 0));
    tu_ok(g->ops->matmul(g, &xg, lg, &yg, 0));
    float *rc = down(cpu, &yc), *rg = down(g, &yg);
    double e = tu_max_rel_err(rg, rc, (size_t)(T * out));
    tern_free(rc);
    tern_free(rg);
    tern_dtensor_free(cpu, &xc);
    tern_dtensor_free(cpu, &yc);
    tern_dtensor_free(g, &xg);
    tern_dtensor_free(g, &yg);
    tern_free(xf);
    tern_free(xb);
    return e;
}

static double run_get_rows(struct tern_linear *lg, struct tern_linear *lc, int64_t out, int64_t in)
{
    int32_t ids[5] = {0, (int32_t)out - 1, 7, 7, 3};
    int64_t is[1] = {5}, os[2] = {5, in};
    struct tern_dtensor ic = up(cpu, TERN_DTYPE_I32, 1, is, ids), ig = up(gpu, TERN_DTYPE_I32, 1, is, ids);
    struct tern_dtensor oc = up(cpu, TERN_DTYPE_F32, 2, os, NULL), og = up(gpu, TERN_DTYPE_F32, 2, os, NULL);
    tu_ok(cpu->ops->get_rows(cpu, lc, &ic, &oc));
    tu_ok(gpu->ops->get_rows(gpu, lg, &ig, &og));
    float *rc = down(cpu, &oc), *rg = down(gpu, &og);
    double e = tu_max_rel_err(rg, rc, (size_t)(5 * in));
    tern_free(rc);
    tern_free(rg);
    tern_dtensor_free(cpu, &ic);
    tern_dtensor_free(gpu, &ig);
    tern_dtensor_free(cpu, &oc);
    tern_dtensor_free(gpu, &og);
    return e;
}

/* Downloads y = x w^T from g for BF16 x [T, in] (host bits xb). */
static float *gpu_y(struct tern_backend *g, struct tern_linear *lg, const uint16_t *xb, int64_t T,
                    int64_t in, int64_t out)
{
    int64_t xs[2] = {T, in}, ys[2] = {T, out};
    struct tern_dtensor xg = up(g, TERN_DTYPE_BF16, 2, xs, xb), yg = up(g, TERN_DTYPE_F32, 2, ys, NULL);
    tu_ok(g->ops->matmul(g, &xg, lg, &yg, 0));
    float *r = down(g, &yg);
    tern_dtensor_free(g, &xg);
    tern_dtensor_free(g, &yg);
    return r;
}

/* Each token of a T = 8 launch on g bitwise equal to the same token alone. */
static void check_batch_invariant(struct tern_backend *g, struct tern_linear *lg, int64_t in,
                                  int64_t out, const char *what)
{
    uint16_t *xb = tern_malloc((size_t)(8 * in) * 2);
    for (int64_t i = 0; i < 8 * in; i++) xb[i] = tern_f32_to_bf16(frand());
    float *y8 = gpu_y(g, lg, xb, 8, in, out);
    for (int64_t t = 0; t < 8; t++) {
        float *y1 = gpu_y(g, lg, xb + t * in, 1, in, out);
        if (memcmp(y1, y8 + t * out, (size_t)out * 4) != 0)
            fail_msg("%s: token %d alone differs from the same token in a batch of 8", what, (int)t);
        tern_free(y1);
    }
    tern_free(y8);
    tern_free(xb);
}

/* True where the tensor-core GEMV takes the shape (16-byte aligned operands). */
static bool mma_applies(int bits, int g, enum tern_dtype sdt, int64_t in, int64_t out)
{
#ifdef TERN_HAVE_CUDA
    struct tk_qmat m = {.q = (void *)256, .scales = (void *)256, .biases = (void *)256,
                        .sdt = sdt == TERN_DTYPE_BF16 ? TK_BF16 : sdt == TERN_DTYPE_F16 ? TK_F16 : TK_F32,
                        .bits = bits, .group = g};
    return tk_qgemv_mma_ok(&m, (void *)256, TK_BF16, in, in, out) != 0;
#else
    (void)bits, (void)g, (void)sdt, (void)in, (void)out;
    return false;
#endif
}

/* The GEMV at T = 1..8 against the CPU; its batch invariance. */
static double check_gemv(int bits, int g, enum tern_dtype sdt, int64_t out, int64_t in)
{
    struct qhost h = qhost_make(out, in, bits, g, sdt);
    bool mma = mma_applies(bits, g, sdt, in, out);
    double worst = 0;
    for (int wb = 0; wb < 2; wb++) {
        struct tern_linear lc = lin_on(cpu, &h, out, in, bits, g, wb);
        struct tern_linear lg = lin_on(gpu, &h, out, in, bits, g, wb);
        for (int64_t T = 1; T <= 8; T++) {
            double e = run_matmul(gpu, &lg, &lc, T, in, out);
            if (e > worst) worst = e;
        }
        char what[64];
        snprintf(what, sizeof what, "b%d g%d %s [%d x %d]", bits, g, tern_dtype_name(sdt), (int)out,
                 (int)in);
        check_batch_invariant(gpu, &lg, in, out, what);
        lin_free(cpu, &lc);
        lin_free(gpu, &lg);
    }
    printf("  b%d g%-3d %-4s [%5d x %5d] T=1..8 %s GEMV rel err %.2e (batch-invariant)\n", bits, g,
           tern_dtype_name(sdt), (int)out, (int)in, mma ? "tensor-core" : "register", worst);
    if (!(worst <= 1e-4)) fail_msg("b%d g%d: gemv rel err %.2e", bits, g, worst);
    tern_free(h.q);
    tern_free(h.s);
    tern_free(h.b);
    tern_free(h.bias);
    return worst;
}

static void check_combo(int bits, int g, enum tern_dtype sdt)
{
    const int64_t out = 320, in = 768;
    struct qhost h = qhost_make(out, in, bits, g, sdt);
    double worst_gemv = 0, worst_lt = 0;
    for (int wb = 0; wb < 2; wb++) {
        struct tern_linear lc = lin_on(cpu, &h, out, in, bits, g, wb);
        struct tern_linear lg = lin_on(gpu, &h, out, in, bits, g, wb);
        struct tern_linear ld = lin_on(gpu_det, &h, out, in, bits, g, wb);
        /* T = 20: three 8-token passes of the tensor-core GEMV where it is
         * the default (4 bits, up to 32 tokens), dequantize + cuBLASLt elsewhere. */
        const int64_t Ts[] = {1, 3, 8, 20, 40};
        bool mma = mma_applies(bits, g, sdt, in, out);
        for (int i = 0; i < 5; i++) {
            double e = run_matmul(gpu, &lg, &lc, Ts[i], in, out);
            double *w = Ts[i] > (mma ? 32 : 8) ? &worst_lt : &worst_gemv;
            if (e > *w) *w = e;
            e = run_matmul(gpu_det, &ld, &lc, Ts[i], in, out);
            if (e > worst_lt) worst_lt = e;
        }
        double eg = run_get_rows(&lg, &lc, out, in);
        if (!(eg <= 1e-6)) fail_msg("b%d g%d: get_rows rel err %.2e", bits, g, eg);
        lin_free(cpu, &lc);
        lin_free(gpu, &lg);
        lin_free(gpu_det, &ld);
    }
    printf("  b%d g%-3d %-4s gemv rel err %.2e  dequant+cuBLASLt %.2e\n", bits, g,
           tern_dtype_name(sdt), worst_gemv, worst_lt);
    if (!(worst_gemv <= 1e-4)) fail_msg("b%d g%d: gemv rel err %.2e", bits, g, worst_gemv);
    if (!(worst_lt <= 1e-2)) fail_msg("b%d g%d: cuBLASLt path rel err %.2e", bits, g, worst_lt);
    tern_free(h.q);
    tern_free(h.s);
    tern_free(h.b);
    tern_free(h.bias);
}

/* A table taller than the grid's 65535 y limit (a vocab-sized head) through
 * the general dequantize kernel (3 bits: tk_qdequant_fast does not take
 * them) at T = 40. */
static void test_tall_dequant(void **state)
{
    (void)state;
    if (!gpu) skip();
    const int64_t out = 65600, in = 128, T = 40;
    struct qhost h = qhost_make(out, in, 3, 64, TERN_DTYPE_BF16);
    struct tern_linear lc = lin_on(cpu, &h, out, in, 3, 64, 0);
    struct tern_linear lg = lin_on(gpu, &h, out, in, 3, 64, 0);
    double e = run_matmul(gpu, &lg, &lc, T, in, out);
    printf("  b3 g64 [%d x %d] T=%d dequant+cuBLASLt rel err %.2e\n", (int)out, (int)in, (int)T, e);
    if (!(e <= 1e-2)) fail_msg("tall dequant rel err %.2e", e);
    lin_free(cpu, &lc);
    lin_free(gpu, &lg);
    tern_free(h.q);
    tern_free(h.s);
    tern_free(h.b);
    tern_free(h.bias);
}

/* Every bits x group (BF16 scales) and 4/8 bits with F16 scales through the
 * GEMV at T = 1..8 with 333 rows (4 bits there: 2 warps per tile); then
 * shapes for the other K splits of the tensor-core kernel
 * (tk_qgemv_mma_split: 8, 4 and 1 warps per tile; the two widest take two
 * tiles per warp, tk_qgemv_mma_tp) and wide 8-bit ones for the register
 * GEMV. */
static void test_gemv_all_t(void **state)
{
    (void)state;
    if (!gpu) skip();
    static const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 3; j++) check_gemv(bits[i], groups[j], TERN_DTYPE_BF16, 333, 768);
    for (int i = 0; i < 3; i++) {
        check_gemv(4, groups[i], TERN_DTYPE_F16, 333, 768);
        check_gemv(8, groups[i], TERN_DTYPE_F16, 333, 768);
    }
    check_gemv(4, 64, TERN_DTYPE_BF16, 40, 4096);    /* 8 warps per tile */
    check_gemv(4, 64, TERN_DTYPE_BF16, 333, 1024);   /* 4 warps per tile */
    check_gemv(4, 32, TERN_DTYPE_F16, 24, 14336);    /* 8 warps per tile, 448 groups */
    check_gemv(4, 32, TERN_DTYPE_BF16, 16392, 512);  /* 2 warps per tile, 2 tiles per warp */
    check_gemv(4, 128, TERN_DTYPE_BF16, 32775, 256); /* 1 warp per tile, 2 tiles per warp */
    check_gemv(4, 64, TERN_DTYPE_BF16, 4100, 128);   /* in 128: the register GEMV's exact path */
    check_gemv(8, 128, TERN_DTYPE_F16, 40, 2048);
    check_gemv(8, 64, TERN_DTYPE_BF16, 32775, 128);
#ifdef TERN_HAVE_CUDA
    if (tk_qgemv_mma_split(4096, 40) != 8 || tk_qgemv_mma_split(1024, 333) != 4 ||
        tk_qgemv_mma_split(14336, 24) != 8 || tk_qgemv_mma_split(512, 16392) != 2 ||
        tk_qgemv_mma_split(768, 333) != 2 || tk_qgemv_mma_split(256, 32775) != 1)
        fail_msg("tk_qgemv_mma_split: the test shapes no longer cover 8, 4, 2 and 1 warps per tile");
    if (tk_qgemv_mma_tp(16392) != 2 || tk_qgemv_mma_tp(32775) != 2 || tk_qgemv_mma_tp(333) != 1 ||
        tk_qgemv_mma_tp(40) != 1)
        fail_msg("tk_qgemv_mma_tp: the test shapes no longer cover one and two tiles per warp");
#endif
    if (!mma_applies(4, 64, TERN_DTYPE_BF16, 4096, 4096) ||
        !mma_applies(4, 32, TERN_DTYPE_F16, 256, 8) || mma_applies(8, 32, TERN_DTYPE_F16, 256, 8) ||
        mma_applies(4, 64, TERN_DTYPE_F32, 4096, 4096) ||
        mma_applies(2, 64, TERN_DTYPE_BF16, 4096, 4096) ||
        mma_applies(4, 64, TERN_DTYPE_BF16, 128, 4100))
        fail_msg("tk_qgemv_mma_ok: unexpected coverage");
}

static void test_all_combos(void **state)
{
    (void)state;
    if (!gpu) skip();
    static const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 3; j++) check_combo(bits[i], groups[j], TERN_DTYPE_BF16);
    check_combo(4, 64, TERN_DTYPE_F16);
    check_combo(4, 64, TERN_DTYPE_F32);
    check_combo(8, 128, TERN_DTYPE_F16);
}

/* matmul_glu on a quantized [2 ff, in] gate_up (the tensor-core GEMV's
 * GLU variant) bitwise equal to matmul into a BF16 gate_up then silu_mul,
 * at T = 1..8 and 20, with and without bias. */
static void check_glu(int g, enum tern_dtype sdt, int64_t ff, int64_t in)
{
    struct qhost h = qhost_make(2 * ff, in, 4, g, sdt);
    if (!mma_applies(4, g, sdt, in, 2 * ff))
        fail_msg("glu g%d: the tensor-core GEMV does not apply", g);
    struct tern_backend *be = gpu;
    for (int wb = 0; wb < 2; wb++) {
        struct tern_linear lg = lin_on(be, &h, 2 * ff, in, 4, g, wb);
        const int64_t Ts[] = {1, 2, 3, 4, 5, 8, 20};
        for (int i = 0; i < 7; i++) {
            int64_t T = Ts[i], xs[2] = {T, in}, gs[2] = {T, 2 * ff}, as[2] = {T, ff};
            uint16_t *xb = tern_malloc((size_t)(T * in) * 2);
            for (int64_t k = 0; k < T * in; k++) xb[k] = tern_f32_to_bf16(frand() * 4.0f);
            struct tern_dtensor x = up(be, TERN_DTYPE_BF16, 2, xs, xb);
            struct tern_dtensor gu = up(be, TERN_DTYPE_BF16, 2, gs, NULL);
            struct tern_dtensor a1 = up(be, TERN_DTYPE_BF16, 2, as, NULL);
            struct tern_dtensor a2 = up(be, TERN_DTYPE_BF16, 2, as, NULL);
            tu_ok(be->ops->matmul_glu(be, &x, &lg, &gu, &a1));
            tu_ok(be->ops->matmul(be, &x, &lg, &gu, 0));
            tu_ok(be->ops->silu_mul(be, &gu, &a2));
            uint16_t *h1 = tern_malloc((size_t)(T * ff) * 2), *h2 = tern_malloc((size_t)(T * ff) * 2);
            tu_ok(be->ops->download(be, h1, &a1, (size_t)(T * ff) * 2));
            tu_ok(be->ops->download(be, h2, &a2, (size_t)(T * ff) * 2));
            int64_t nz = 0;
            for (int64_t k = 0; k < T * ff; k++) nz += h2[k] != 0;
            if (memcmp(h1, h2, (size_t)(T * ff) * 2) != 0 || nz < T * ff / 2)
                fail_msg("glu g%d %s T=%d bias %d: fused differs from matmul + silu_mul", g,
                         tern_dtype_name(sdt), (int)T, wb);
            tern_free(h1);
            tern_free(h2);
            tern_free(xb);
            tern_dtensor_free(be, &x);
            tern_dtensor_free(be, &gu);
            tern_dtensor_free(be, &a1);
            tern_dtensor_free(be, &a2);
        }
        lin_free(be, &lg);
    }
    printf("  b4 g%-3d %-4s glu [2 x %d x %d] T=1..20 bitwise matmul + silu_mul\n", g,
           tern_dtype_name(sdt), (int)ff, (int)in);
    tern_free(h.q);
    tern_free(h.s);
    tern_free(h.b);
    tern_free(h.bias);
}

static void test_glu(void **state)
{
    (void)state;
    if (!gpu) skip();
    check_glu(32, TERN_DTYPE_BF16, 200, 768);
    check_glu(64, TERN_DTYPE_BF16, 1028, 512);
    check_glu(128, TERN_DTYPE_F16, 36, 1024);
    check_glu(64, TERN_DTYPE_F16, 12, 4096);
    check_glu(64, TERN_DTYPE_BF16, 14336, 4096); /* the 8B gate_up: two tiles per warp */
}

/* Rows src[0..n) of h (a weight of `in` columns) as a weight of their own. */
static struct qhost qhost_rows(const struct qhost *h, const int64_t *src, int64_t n, int64_t in,
                               int bits, int g)
{
    struct qhost r = {.sdt = h->sdt};
    size_t words = (size_t)(in * bits / 32), ng = (size_t)(in / g), es = tern_dtype_size(h->sdt);
    r.q = tern_malloc((size_t)n * words * 4);
    r.s = tern_malloc((size_t)n * ng * es);
    r.b = tern_malloc((size_t)n * ng * es);
    r.bias = tern_malloc((size_t)n * 2);
    for (int64_t k = 0; k < n; k++) {
        size_t o = (size_t)src[k];
        memcpy(r.q + (size_t)k * words, h->q + o * words, words * 4);
        memcpy((char *)r.s + (size_t)k * ng * es, (const char *)h->s + o * ng * es, ng * es);
        memcpy((char *)r.b + (size_t)k * ng * es, (const char *)h->b + o * ng * es, ng * es);
        r.bias[k] = h->bias[o];
    }
    return r;
}

/* The widest 4-bit weights take two tiles per warp (tk_qgemv_mma_tp): their
 * outputs from `start` on must be bitwise those of the same rows as a
 * narrower weight of its own, which takes one tile per warp with the same K
 * split (GLU: gate rows [start, ff) and up rows [ff + start, 2 ff)), for
 * matmul and matmul_glu, at T = 1..8 and 13 (two passes), the full
 * weight's partial last tiles included. */
static void check_tp(int g, enum tern_dtype sdt, int64_t rows, int64_t in, bool glu, int64_t start)
{
    int64_t out = glu ? rows / 2 : rows, sub = out - start, srows = glu ? 2 * sub : sub;
    struct qhost h = qhost_make(rows, in, 4, g, sdt);
    int64_t *src = tern_malloc((size_t)srows * sizeof *src);
    for (int64_t k = 0; k < srows; k++) src[k] = start + k + (glu && k >= sub ? out - sub : 0);
    struct qhost hs = qhost_rows(&h, src, srows, in, 4, g);
    if (!mma_applies(4, g, sdt, in, rows))
        fail_msg("tp g%d: the tensor-core GEMV does not apply", g);
#ifdef TERN_HAVE_CUDA
    if (tk_qgemv_mma_tp(rows) != 2 || tk_qgemv_mma_tp(srows) != 1 ||
        tk_qgemv_mma_split(in, rows) != tk_qgemv_mma_split(in, srows))
        fail_msg("tp: [%d x %d] and its last %d rows no longer take 2 and 1 tiles per warp with "
                 "one K split",
                 (int)rows, (int)in, (int)srows);
#endif
    struct tern_linear lw = lin_on(gpu, &h, rows, in, 4, g, true);
    struct tern_linear ls = lin_on(gpu, &hs, srows, in, 4, g, true);
    const int64_t Ts[] = {1, 2, 5, 8, 13};
    size_t es = glu ? 2 : 4;
    for (int i = 0; i < 5; i++) {
        int64_t T = Ts[i], xs[2] = {T, in};
        int64_t ys[2][2] = {{T, out}, {T, sub}}, gs[2][2] = {{T, rows}, {T, srows}};
        uint16_t *xb = tern_malloc((size_t)(T * in) * 2);
        for (int64_t k = 0; k < T * in; k++) xb[k] = tern_f32_to_bf16(frand() * 4.0f);
        struct tern_dtensor x = up(gpu, TERN_DTYPE_BF16, 2, xs, xb);
        unsigned char *got[2];
        for (int v = 0; v < 2; v++) { /* the wide weight, then its rows alone */
            struct tern_linear *l = v ? &ls : &lw;
            struct tern_dtensor y = up(gpu, glu ? TERN_DTYPE_BF16 : TERN_DTYPE_F32, 2, ys[v], NULL);
            struct tern_dtensor gu = up(gpu, TERN_DTYPE_BF16, 2, gs[v], NULL);
            if (glu)
                tu_ok(gpu->ops->matmul_glu(gpu, &x, l, &gu, &y));
            else
                tu_ok(gpu->ops->matmul(gpu, &x, l, &y, 0));
            size_t n = tern_dtensor_bytes(&y);
            got[v] = tern_malloc(n);
            tu_ok(gpu->ops->download(gpu, got[v], &y, n));
            tern_dtensor_free(gpu, &y), tern_dtensor_free(gpu, &gu);
        }
        int64_t nz = 0;
        for (size_t k = 0; k < (size_t)(T * sub) * es; k++) nz += got[1][k] != 0;
        if (nz < T * sub * (int64_t)es / 2) fail_msg("tp g%d T=%d: outputs mostly zero", g, (int)T);
        for (int64_t t = 0; t < T; t++)
            if (memcmp(got[0] + (size_t)(t * out + start) * es, got[1] + (size_t)(t * sub) * es,
                       (size_t)sub * es) != 0)
                fail_msg("tp g%d %s [%d x %d] %s T=%d token %d: two tiles per warp differ from one",
                         g, tern_dtype_name(sdt), (int)rows, (int)in, glu ? "glu" : "matmul",
                         (int)T, (int)t);
        tern_free(got[0]), tern_free(got[1]), tern_free(xb);
        tern_dtensor_free(gpu, &x);
    }
    printf("  b4 g%-3d %-4s %s [%d x %d] T=1..13 two tiles per warp bitwise one\n", g,
           tern_dtype_name(sdt), glu ? "glu" : "matmul", (int)rows, (int)in);
    lin_free(gpu, &lw), lin_free(gpu, &ls);
    tern_free(h.q), tern_free(h.s), tern_free(h.b), tern_free(h.bias);
    tern_free(hs.q), tern_free(hs.s), tern_free(hs.b), tern_free(hs.bias), tern_free(src);
}

static void test_tp(void **state)
{
    (void)state;
    if (!gpu) skip();
    check_tp(64, TERN_DTYPE_BF16, 16400, 512, false, 8192); /* partial last pair of tiles */
    check_tp(128, TERN_DTYPE_F16, 16392, 256, false, 8192); /* a partial tile */
    check_tp(32, TERN_DTYPE_BF16, 16400, 512, true, 4096);  /* GLU: ff 8200 */
}

/* matmul_rope_store of a quantized fused [q | k | v] weight (the
 * tensor-core GEMV's RP variant: the rotation and the k / v cache stores in the GEMV epilogue)
 * bitwise equal to matmul into qkv then qk_rope_store without head norms:
 * qkv and both caches, at T = 1, 3, 8 and 11 (two passes), slots scattered
 * over 4 blocks of 16 with one -1 (stores nothing), with and without bias,
 * head_dim 128 and 64, mscale 1 and 1.25. */
static void check_rope_store(int hd, int nh, int nkv, int64_t in, int g, bool with_bias,
                             float mscale)
{
    int64_t out = (int64_t)(nh + 2 * nkv) * hd, n_blocks = 4, n_slots = n_blocks * BS_RS;
    struct qhost h = qhost_make(out, in, 4, g, TERN_DTYPE_BF16);
    struct tern_linear lg = lin_on(gpu, &h, out, in, 4, g, with_bias);
    int64_t fs[1] = {hd / 2}, cs[4] = {n_blocks, BS_RS, nkv, hd};
    float *inv = tern_malloc((size_t)hd / 2 * 4);
    for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / (float)hd);
    struct tern_rope rope = {.head_dim = hd, .rotary_dim = hd, .interleaved = false,
                             .mscale = mscale, .inv_freq = up(gpu, TERN_DTYPE_F32, 1, fs, inv)};
    struct tern_attn_params ap = {.n_heads = nh, .n_kv_heads = nkv, .head_dim = hd,
                                  .scale = 1.0f / sqrtf((float)hd)};
    size_t cn = (size_t)(n_slots * nkv * hd);
    uint16_t *c0 = tern_malloc(cn * 2);
    for (size_t k = 0; k < cn; k++) c0[k] = tern_f32_to_bf16(frand());
    const int64_t Ts[] = {1, 3, 8, 11};
    for (int i = 0; i < 4; i++) {
        int64_t T = Ts[i], xs[2] = {T, in}, qs[2] = {T, out}, ts[1] = {T};
        int32_t pos[11], slots[11];
        for (int k = 0; k < T; k++) pos[k] = 5 + 37 * k, slots[k] = (int32_t)((7 + 13 * k) % n_slots);
        if (T > 2) slots[1] = -1;
        uint16_t *xb = tern_malloc((size_t)(T * in) * 2);
        for (int64_t k = 0; k < T * in; k++) xb[k] = tern_f32_to_bf16(frand() * 4.0f);
        struct tern_dtensor x = up(gpu, TERN_DTYPE_BF16, 2, xs, xb);
        struct tern_batch_dev b = {.block_size = BS_RS, .max_q_len = 1};
        b.positions = up(gpu, TERN_DTYPE_I32, 1, ts, pos);
        b.slot_mapping = up(gpu, TERN_DTYPE_I32, 1, ts, slots);
        unsigned char *got[2][3];
        for (int v = 0; v < 2; v++) {
            struct tern_dtensor qkv = up(gpu, TERN_DTYPE_BF16, 2, qs, NULL);
            struct tern_kv_layer kv = {.k = up(gpu, TERN_DTYPE_BF16, 4, cs, c0),
                                       .v = up(gpu, TERN_DTYPE_BF16, 4, cs, c0)};
            if (v == 0) {
                tu_ok(gpu->ops->matmul_rope_store(gpu, &x, &lg, &qkv, &rope, &ap, &b, &kv));
            } else {
                tu_ok(gpu->ops->matmul(gpu, &x, &lg, &qkv, 0));
                tu_ok(gpu->ops->qk_rope_store(gpu, &qkv, NULL, NULL, 0.0f, &rope, &ap, &b, &kv));
            }
            struct tern_dtensor *all[3] = {&qkv, &kv.k, &kv.v};
            for (int k = 0; k < 3; k++) {
                size_t n = tern_dtensor_bytes(all[k]);
                got[v][k] = tern_malloc(n);
                tu_ok(gpu->ops->download(gpu, got[v][k], all[k], n));
                tern_dtensor_free(gpu, all[k]);
            }
        }
        size_t nb[3] = {(size_t)(T * out) * 2, cn * 2, cn * 2};
        const char *what[3] = {"qkv", "k cache", "v cache"};
        for (int k = 0; k < 3; k++) {
            if (memcmp(got[0][k], got[1][k], nb[k]) != 0)
                fail_msg("rope_store hd %d g%d bias %d mscale %g T=%d: %s differs from matmul + "
                         "qk_rope_store", hd, g, with_bias, mscale, (int)T, what[k]);
            if (k > 0 && memcmp(got[1][k], c0, nb[k]) == 0)
                fail_msg("rope_store T=%d: the %s was not written", (int)T, what[k]);
            tern_free(got[0][k]), tern_free(got[1][k]);
        }
        tern_free(xb);
        tern_dtensor_free(gpu, &x), tern_dtensor_free(gpu, &b.positions);
        tern_dtensor_free(gpu, &b.slot_mapping);
    }
    printf("  b4 g%-3d rope_store hd %d (%d q / %d kv heads) bias %d mscale %g T=1..11 bitwise "
           "matmul + qk_rope_store\n", g, hd, nh, nkv, with_bias, mscale);
    tern_dtensor_free(gpu, &rope.inv_freq);
    lin_free(gpu, &lg);
    tern_free(inv), tern_free(c0);
    tern_free(h.q), tern_free(h.s), tern_free(h.b), tern_free(h.bias);
}

static void test_rope_store(void **state)
{
    (void)state;
    if (!gpu || !gpu->ops->matmul_rope_store) skip();
#ifdef TERN_HAVE_CUDA
    struct tk_qmat m = {(void *)256, (void *)256, (void *)256, TK_BF16, 4, 64};
    struct tk_rp rp = {.n_heads = 4, .n_kv = 2, .hd = 128};
    if (!tk_qgemv_mma_rope_ok(&m, &rp, 8 * 128)) fail_msg("tk_qgemv_mma_rope_ok: 4 / 2 heads of 128 not taken");
#endif
    check_rope_store(128, 4, 2, 512, 64, false, 1.0f);
    check_rope_store(128, 4, 2, 512, 64, true, 1.25f);
    check_rope_store(64, 8, 2, 768, 32, true, 1.0f);
    check_rope_store(128, 32, 8, 4096, 64, false, 1.0f); /* the 8B shape */
}

static int setup(void **state)
{
    (void)state;
    struct tern_backend_params p = {.device = TERN_DEVICE_CPU};
    tu_ok(tern_backend_create(&p, &cpu));
    if (!tern_backend_cuda_available()) {
        printf("skipped: no CUDA device\n");
        return 0;
    }
    p.device = TERN_DEVICE_CUDA;
    tu_ok(tern_backend_create(&p, &gpu));
    p.deterministic = true;
    tu_ok(tern_backend_create(&p, &gpu_det));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tern_backend_destroy(gpu_det);
    tern_backend_destroy(gpu);
    tern_backend_destroy(cpu);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gemv_all_t),
                                       cmocka_unit_test(test_all_combos),
                                       cmocka_unit_test(test_tall_dequant),
                                       cmocka_unit_test(test_glu),
                                       cmocka_unit_test(test_tp),
                                       cmocka_unit_test(test_rope_store)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
