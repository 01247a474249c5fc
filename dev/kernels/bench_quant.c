/*
 * bench_quant.c — the MLX-affine decode GEMVs at Llama-3.1-8B shapes, in
 * isolation (kernel lab; not linked into the library):
 *
 *   1. device copy bandwidth (cudaMemcpy D2D, read + write), the floor;
 *   2. per shape (q/k/v and gate/up fused, as the model loads them) and
 *      kernel (v1: the register GEMV of cuda_quant.cu; mma: the 4-bit
 *      tensor-core GEMV of cuda_quant_mma.cu): the mma output against v1 at T = 1 and 8
 *      (max rel err) and its batch invariance (each token of T = 8 bitwise
 *      equal to the token alone), then the time of one call: CUDA events
 *      around 20 launches that cycle through enough copies of the weight to
 *      defeat the 50 MB L2, median of 15 such samples after warm-ups; in
 *      GB/s of packed + scales + biases bytes and % of the copy floor;
 *   3. the per-token sum over 32 layers + lm_head: the weight-streaming
 *      time of one decode step per kernel, and the tok/s it allows;
 *   4. with "prefill" as the second argument, prefill T = 2048 through the
 *      backend's matmul op: quantized (dequantize + cuBLASLt) vs BF16.
 *
 * Contents are random (timing does not depend on values). Usage:
 * bench_quant [samples] [prefill]. Prints a "==== summary ====" block last.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_quant.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct shape {
    const char *name;
    int64_t out, in;
    int per_layer; /* 0: once per token (lm_head) */
};

static const struct shape SHAPES[] = {
    {"qkv", 6144, 4096, 1},       {"o", 4096, 4096, 1},          {"gate_up", 28672, 4096, 1},
    {"down", 4096, 14336, 1},     {"lm_head", 128256, 4096, 0},
};
#define N_SHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])
#define N_LAYERS 32
#define BATCH 20

enum { K_V1 = 1, K_MMA = 2 };
struct cfg {
    int bits, group, kernel, n_tok;
};
static const struct cfg CFGS[] = {
    {4, 64, K_V1, 1}, {4, 64, K_MMA, 1}, {4, 64, K_V1, 8}, {4, 64, K_MMA, 8}, {8, 64, K_V1, 1},
};
#define N_CFGS (int)(sizeof CFGS / sizeof CFGS[0])
static const char *KNAME[] = {"", "v1", "mma"};

static int samples = 15;
static double copy_gbs;
static cudaEvent_t ev0, ev1;

static void fill(void *p, size_t n, uint32_t seed)
{
    /* bf16 bit patterns 0x3c00..0x3cff (~0.008) as halves, anything as words. */
    uint16_t *h = malloc(n);
    for (size_t i = 0; i < n / 2; i++)
        h[i] = (uint16_t)(0x3c00 | (((i + seed) * 2654435761u >> 24) & 0xff));
    CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
    free(h);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double copy_bw(void)
{
    size_t n = (size_t)2 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    double v[5];
    for (int s = 0; s < 5; s++) {
        float ms;
        cudaEventRecord(ev0, 0);
        CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
        cudaEventRecord(ev1, 0);
        cudaEventSynchronize(ev1);
        cudaEventElapsedTime(&ms, ev0, ev1);
        v[s] = 2.0 * (double)n / (ms / 1e3) / 1e9;
    }
    qsort(v, 5, sizeof v[0], cmp_d);
    cudaFree(a);
    cudaFree(b);
    return v[2];
}

static cudaError_t gemv(int kernel, const struct tk_qmat *m, const void *x, void *y, int n_tok,
                        int64_t in, int64_t out)
{
    if (kernel == K_MMA) return tk_qgemv_mma(0, m, x, in, NULL, 0, y, TK_F32, out, n_tok, in, out);
    return tk_qgemv(0, m, x, TK_BF16, in, NULL, 0, y, TK_F32, out, n_tok, in, out,
                    n_tok <= 2 ? 4 : 2);
}

static double max_rel(const float *a, const float *b, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d != d) return 1e30;
        md = d > md ? d : md;
        mr = fabs(b[i]) > mr ? fabs(b[i]) : mr;
    }
    return md / (mr > 0 ? mr : 1);
}

/* Kernel k against v1 (T = 1, 8) and T = 1 vs T = 8 bitwise. */
static void validate(int k, const struct tk_qmat *m, const void *x, const struct shape *s,
                     double *err, int *invariant)
{
    size_t n = (size_t)(8 * s->out);
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc((size_t)s->out * 4);
    void *y1, *y2;
    CK(cudaMalloc(&y1, n * 4));
    CK(cudaMalloc(&y2, n * 4));
    *err = 0;
    *invariant = 1;
    for (int nt = 1; nt <= 8; nt += 7) {
        CK(gemv(K_V1, m, x, y1, nt, s->in, s->out));
        CK(gemv(k, m, x, y2, nt, s->in, s->out));
        CK(cudaMemcpy(a, y2, (size_t)(nt * s->out) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b, y1, (size_t)(nt * s->out) * 4, cudaMemcpyDeviceToHost));
        double e = max_rel(a, b, (size_t)(nt * s->out));
        *err = e > *err ? e : *err;
    }
    for (int t = 0; t < 8; t += 3) { /* a = the T = 8 output */
        CK(gemv(k, m, (const uint16_t *)x + t * s->in, y1, 1, s->in, s->out));
        CK(cudaMemcpy(c, y1, (size_t)s->out * 4, cudaMemcpyDeviceToHost));
        if (memcmp(c, a + t * s->out, (size_t)s->out * 4) != 0) *invariant = 0;
    }
    cudaFree(y1);
    cudaFree(y2);
    free(a), free(b), free(c);
}

/* Median ms of one call of cfg on shape s; *gbs its weight-byte rate. */
static double time_cfg(const struct cfg *c, const struct shape *s, double *gbs, double *err,
                       int *inv)
{
    size_t qb = (size_t)(s->out * s->in) * (size_t)c->bits / 8;
    size_t sb = (size_t)(s->out * (s->in / c->group)) * 2, bytes = qb + 2 * sb;
    int copies = (int)((((size_t)256 << 20) + bytes - 1) / bytes);
    if (copies > 16) copies = 16;
    void *q[16], *sc[16], *bi[16], *x, *y;
    for (int i = 0; i < copies; i++) {
        CK(cudaMalloc(&q[i], qb));
        CK(cudaMalloc(&sc[i], sb));
        CK(cudaMalloc(&bi[i], sb));
        if (i == 0) {
            fill(q[0], qb, 1);
            fill(sc[0], sb, 7);
            fill(bi[0], sb, 13);
        } else { /* the same contents: time does not depend on them */
            CK(cudaMemcpy(q[i], q[0], qb, cudaMemcpyDeviceToDevice));
            CK(cudaMemcpy(sc[i], sc[0], sb, cudaMemcpyDeviceToDevice));
            CK(cudaMemcpy(bi[i], bi[0], sb, cudaMemcpyDeviceToDevice));
        }
    }
    CK(cudaMalloc(&x, (size_t)(8 * s->in) * 2));
    CK(cudaMalloc(&y, (size_t)(8 * s->out) * 4));
    fill(x, (size_t)(8 * s->in) * 2, 99);
    struct tk_qmat m[16];
    for (int i = 0; i < copies; i++) m[i] = (struct tk_qmat){q[i], sc[i], bi[i], TK_BF16, c->bits, c->group};
    *err = -1;
    *inv = -1;
    if (c->kernel != K_V1 && c->n_tok == 1) validate(c->kernel, &m[0], x, s, err, inv);
    double v[64];
    int ns = samples < 64 ? samples : 64;
    for (int w = 0; w < 3; w++) CK(gemv(c->kernel, &m[w % copies], x, y, c->n_tok, s->in, s->out));
    for (int k = 0; k < ns; k++) {
        float ms;
        cudaEventRecord(ev0, 0);
        for (int r = 0; r < BATCH; r++)
            gemv(c->kernel, &m[(k * BATCH + r) % copies], x, y, c->n_tok, s->in, s->out);
        cudaEventRecord(ev1, 0);
        cudaEventSynchronize(ev1);
        cudaEventElapsedTime(&ms, ev0, ev1);
        v[k] = ms / BATCH;
    }
    CK(cudaGetLastError());
    qsort(v, (size_t)ns, sizeof v[0], cmp_d);
    double ms = v[ns / 2];
    *gbs = (double)bytes / (ms / 1e3) / 1e9;
    for (int i = 0; i < copies; i++) cudaFree(q[i]), cudaFree(sc[i]), cudaFree(bi[i]);
    cudaFree(x);
    cudaFree(y);
    return ms;
}

/* Prefill T x [out, in] through the backend op, quantized 4/64 or dense BF16. */
static double prefill_tflops(struct tern_backend *be, const struct shape *s, int bits, int T)
{
    struct tern_linear w = {.bits = bits, .group_size = 64, .in_features = s->in,
                            .out_features = s->out};
    int64_t ws[2] = {s->out, bits ? s->in * bits / 32 : s->in}, ss[2] = {s->out, s->in / 64};
    int64_t xs[2] = {T, s->in}, ys[2] = {T, s->out};
    struct tern_dtensor x, y;
    if (tern_dtensor_alloc(be, bits ? TERN_DTYPE_U32 : TERN_DTYPE_BF16, 2, ws, &w.weight) ||
        tern_dtensor_alloc(be, TERN_DTYPE_BF16, 2, xs, &x) ||
        tern_dtensor_alloc(be, TERN_DTYPE_BF16, 2, ys, &y))
        return -1;
    if (bits && (tern_dtensor_alloc(be, TERN_DTYPE_BF16, 2, ss, &w.scales) ||
                 tern_dtensor_alloc(be, TERN_DTYPE_BF16, 2, ss, &w.biases)))
        return -1;
    double secs = 0;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? 10 : 2;
        be->ops->sync(be);
        uint64_t t0 = tern_now_ns();
        for (int r = 0; r < n; r++)
            if (be->ops->matmul(be, &x, &w, &y, 0) != TERN_OK) {
                fprintf(stderr, "matmul: %s\n", tern_last_error());
                return -1;
            }
        be->ops->sync(be);
        secs = (double)(tern_now_ns() - t0) / 1e9 / n;
    }
    tern_dtensor_free(be, &w.weight);
    if (bits) {
        tern_dtensor_free(be, &w.scales);
        tern_dtensor_free(be, &w.biases);
    }
    tern_dtensor_free(be, &x);
    tern_dtensor_free(be, &y);
    return 2.0 * T * (double)s->out * (double)s->in / secs / 1e12;
}

static void prefill(void)
{
    struct tern_backend_params p = {.device = TERN_DEVICE_CUDA};
    struct tern_backend *be = NULL;
    if (tern_backend_create(&p, &be) != TERN_OK) {
        fprintf(stderr, "backend: %s\n", tern_last_error());
        return;
    }
    printf("== prefill T=2048 through the matmul op (TFLOP/s)\n");
    for (int i = 0; i < N_SHAPES - 1; i++) {
        double tq = prefill_tflops(be, &SHAPES[i], 4, 2048), td = prefill_tflops(be, &SHAPES[i], 0, 2048);
        printf("  %-8s q4g64 %6.1f  bf16 %6.1f  (%.0f%%)\n", SHAPES[i].name, tq, td, 100 * tq / td);
    }
    tern_backend_destroy(be);
}

int main(int argc, char **argv)
{
    if (argc > 1) samples = atoi(argv[1]);
    if (samples < 1) samples = 1;
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    copy_gbs = copy_bw();
    printf("device copy bandwidth: %.0f GB/s (read + write, median of 5)\n", copy_gbs);
    double tok_ms[N_CFGS] = {0};
    int bad = 0;
    printf("%-8s %-16s %-9s %9s %9s %8s %7s %9s %s\n", "shape", "[out x in]", "kernel", "us",
           "floor us", "GB/s", "%floor", "vs v1", "T=1 vs T=8");
    for (int j = 0; j < N_SHAPES; j++) {
        const struct shape *s = &SHAPES[j];
        for (int i = 0; i < N_CFGS; i++) {
            const struct cfg *c = &CFGS[i];
            double gbs, err;
            int inv;
            double ms = time_cfg(c, s, &gbs, &err, &inv);
            double bytes = gbs * 1e9 * (ms / 1e3);
            char kn[32];
            snprintf(kn, sizeof kn, "q%d g%d %s T%d", c->bits, c->group, KNAME[c->kernel], c->n_tok);
            printf("%-8s [%6lld x %5lld] %-18s %7.1f %9.1f %8.0f %6.1f%%", s->name,
                   (long long)s->out, (long long)s->in, kn, ms * 1e3,
                   bytes / copy_gbs / 1e3, gbs, 100.0 * gbs / copy_gbs);
            if (err >= 0) printf(" %9.1e %s", err, inv ? "bitwise equal" : "DIFFERS");
            printf("\n");
            if (err >= 0 && (err > 1e-4 || !inv)) bad = 1;
            tok_ms[i] += ms * (s->per_layer ? N_LAYERS : 1);
        }
    }
    if (argc > 2 && strcmp(argv[2], "prefill") == 0) prefill();
    printf("==== summary ====\n");
    printf("copy bandwidth %.0f GB/s\n", copy_gbs);
    for (int i = 0; i < N_CFGS; i++)
        printf("decode weights/token q%d g%-3d %-3s T=%d: %.3f ms -> %.0f tok/s (GEMV only)\n",
               CFGS[i].bits, CFGS[i].group, KNAME[CFGS[i].kernel], CFGS[i].n_tok, tok_ms[i],
               1e3 / tok_ms[i]);
    printf("other kernels vs v1 and batch invariance: %s\n", bad ? "FAILED" : "ok");
    return bad;
}
