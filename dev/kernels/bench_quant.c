/*
 * bench_quant.c — the MLX-affine CUDA kernels at Llama-3.1-8B shapes, in
 * isolation (kernel lab; not linked into the library):
 *
 *   1. device copy bandwidth (cudaMemcpy D2D), the floor for streaming;
 *   2. the decode GEMV (tk_qgemv, T = 1) per layer shape, 4-bit g32/64/128
 *      and 8-bit g64, 2 and 4 rows per warp, in GB/s of weight bytes read
 *      (packed + scales + biases), against the BF16 GEMV (tk_gemv);
 *   3. the per-token sum over 32 layers + lm_head: the weight-streaming time
 *      of one decode step, and the tok/s it allows;
 *   4. prefill T = 2048 through the backend's matmul op: quantized
 *      (dequantize to BF16 + cuBLASLt) against dense BF16 (cuBLASLt), TFLOP/s;
 *   5. the lab's v2 kernels (quant_v2.cu, not yet in the library): each
 *      output compared with v1's first (max rel err), then timed.
 *
 * Contents are random bytes (timing does not depend on values). Usage:
 * bench_quant [reps]. Prints a "==== summary ====" block last.
 */
#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_quant.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

struct shape {
    const char *name;
    int64_t out, in;
    int per_layer; /* 0: once per token (lm_head) */
};

static const struct shape SHAPES[] = {
    {"q_proj", 4096, 4096, 1},    {"k_proj", 1024, 4096, 1}, {"v_proj", 1024, 4096, 1},
    {"o_proj", 4096, 4096, 1},    {"gate_proj", 14336, 4096, 1}, {"up_proj", 14336, 4096, 1},
    {"down_proj", 4096, 14336, 1}, {"lm_head", 128256, 4096, 0},
};
#define N_SHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])
#define N_LAYERS 32

static int reps = 50;
static cudaEvent_t ev0, ev1;

static void fill(void *p, size_t n)
{
    /* Small random-ish values: bf16 bit patterns 0x3c00..0x3cff (~0.008), words anything. */
    uint16_t *h = malloc(n);
    for (size_t i = 0; i < n / 2; i++) h[i] = (uint16_t)(0x3c00 | (i * 2654435761u >> 24));
    cudaMemcpy(p, h, n, cudaMemcpyHostToDevice);
    free(h);
}

static double copy_bw(void)
{
    size_t n = (size_t)2 << 30;
    void *a, *b;
    if (cudaMalloc(&a, n) || cudaMalloc(&b, n)) return 0;
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(ev0, 0);
    for (int i = 0; i < 10; i++) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(ev1, 0);
    cudaEventSynchronize(ev1);
    float ms;
    cudaEventElapsedTime(&ms, ev0, ev1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)n * 10 / (ms / 1e3) / 1e9; /* read + write */
}

/* Mean ms of one qgemv (rows_per_warp 0 = the BF16 GEMV instead). */
static double time_gemv(const struct shape *s, int bits, int group, int rpw, double *gbs)
{
    size_t qb = (size_t)(s->out * s->in) * (size_t)(bits ? bits : 16) / 8;
    size_t sb = bits ? (size_t)(s->out * (s->in / group)) * 2 : 0;
    void *q, *sc, *bi, *x, *y;
    if (cudaMalloc(&q, qb) || cudaMalloc(&sc, sb + 16) || cudaMalloc(&bi, sb + 16) ||
        cudaMalloc(&x, (size_t)s->in * 2) || cudaMalloc(&y, (size_t)s->out * 4))
        return -1;
    fill(q, qb);
    fill(sc, sb + 16);
    fill(bi, sb + 16);
    fill(x, (size_t)s->in * 2);
    struct tk_qmat m = {q, sc, bi, TK_BF16, bits, group};
    float ms = 0;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? reps : 3;
        cudaEventRecord(ev0, 0);
        for (int r = 0; r < n; r++) {
            if (bits) tk_qgemv(0, &m, x, TK_BF16, s->in, NULL, 0, y, TK_F32, s->out, 1, s->in, s->out, rpw);
            else tk_gemv(0, x, TK_BF16, s->in, q, TK_BF16, NULL, 0, y, TK_F32, s->out, 1, s->in, s->out);
        }
        cudaEventRecord(ev1, 0);
        cudaEventSynchronize(ev1);
        cudaEventElapsedTime(&ms, ev0, ev1);
        ms /= (float)n;
    }
    cudaError_t e = cudaGetLastError();
    if (e) fprintf(stderr, "gemv: %s\n", cudaGetErrorString(e));
    *gbs = (double)(qb + 2 * sb) / (ms / 1e3) / 1e9;
    cudaFree(q);
    cudaFree(sc);
    cudaFree(bi);
    cudaFree(x);
    cudaFree(y);
    return ms;
}

/* One decode configuration over every shape; returns the per-token ms. */
static double decode_config(int bits, int group, int rpw)
{
    double total = 0;
    for (int i = 0; i < N_SHAPES; i++) {
        double gbs = 0;
        double ms = time_gemv(&SHAPES[i], bits, group, rpw, &gbs);
        printf("  %-10s [%6lld x %5lld]  %s g%-3d R%d  %8.1f us  %7.0f GB/s\n", SHAPES[i].name,
               (long long)SHAPES[i].out, (long long)SHAPES[i].in, bits ? "q" : "bf16", group, rpw,
               ms * 1e3, gbs);
        total += ms * (SHAPES[i].per_layer ? N_LAYERS : 1);
    }
    return total;
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
    uint64_t t0 = 0;
    double secs = 0;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? 10 : 2;
        be->ops->sync(be);
        t0 = tern_now_ns();
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

cudaError_t tk_qgemv_v2(cudaStream_t st, const struct tk_qmat *m, const void *x, int64_t x_stride,
                        void *y, int64_t y_stride, int n_tok, int64_t in, int64_t out, int rows);
cudaError_t tk_qdequant_v2(cudaStream_t st, const struct tk_qmat *m, int64_t rows, int64_t in,
                           void *out);

static double max_rel(const float *a, const float *b, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = a[i] - b[i];
        if (d != d) return 1e30;
        md = d < 0 ? (-d > md ? -d : md) : (d > md ? d : md);
        mr = b[i] < 0 ? (-b[i] > mr ? -b[i] : mr) : (b[i] > mr ? b[i] : mr);
    }
    return md / (mr > 0 ? mr : 1);
}

/* v2 against v1 on one shape: agreement, then time per call (ms); tok_ms += per-token share. */
static int lab_shape(const struct shape *s, int bits, int group, int rpw, double *tok_ms)
{
    size_t qb = (size_t)(s->out * s->in) * (size_t)bits / 8, sb = (size_t)(s->out * (s->in / group)) * 2;
    void *q, *sc, *bi, *x, *y1, *y2, *d1, *d2;
    size_t db = (size_t)(s->out * s->in) * 2;
    CK(cudaMalloc(&q, qb));
    CK(cudaMalloc(&sc, sb));
    CK(cudaMalloc(&bi, sb));
    CK(cudaMalloc(&x, (size_t)s->in * 16));
    CK(cudaMalloc(&y1, (size_t)s->out * 32));
    CK(cudaMalloc(&y2, (size_t)s->out * 32));
    fill(q, qb);
    fill(sc, sb);
    fill(bi, sb);
    fill(x, (size_t)s->in * 16);
    struct tk_qmat m = {q, sc, bi, TK_BF16, bits, group};
    double err = 0;
    for (int nt = 1; nt <= 8; nt *= 2) {
        CK(tk_qgemv(0, &m, x, TK_BF16, s->in, NULL, 0, y1, TK_F32, s->out, nt, s->in, s->out, 2));
        CK(tk_qgemv_v2(0, &m, x, s->in, y2, s->out, nt, s->in, s->out, rpw));
        size_t n = (size_t)(nt * s->out);
        float *a = malloc(n * 4), *b = malloc(n * 4);
        CK(cudaMemcpy(a, y2, n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b, y1, n * 4, cudaMemcpyDeviceToHost));
        double e = max_rel(a, b, n);
        err = e > err ? e : err;
        free(a);
        free(b);
    }
    float ms = 0;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? reps : 3;
        cudaEventRecord(ev0, 0);
        for (int r = 0; r < n; r++) tk_qgemv_v2(0, &m, x, s->in, y2, s->out, 1, s->in, s->out, rpw);
        cudaEventRecord(ev1, 0);
        cudaEventSynchronize(ev1);
        cudaEventElapsedTime(&ms, ev0, ev1);
        ms /= (float)n;
    }
    *tok_ms += ms * (s->per_layer ? N_LAYERS : 1);
    double derr = -1, dms = 0;
    if (s->per_layer && cudaMalloc(&d1, db) == cudaSuccess && cudaMalloc(&d2, db) == cudaSuccess) {
        CK(tk_qdequant(0, &m, s->out, s->in, NULL, s->out, d1, TK_BF16, s->in));
        CK(tk_qdequant_v2(0, &m, s->out, s->in, d2));
        size_t n = (size_t)(s->out * s->in);
        uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
        float *fa = malloc(n * 4), *fb = malloc(n * 4);
        CK(cudaMemcpy(a, d2, n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b, d1, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) {
            uint32_t ua = (uint32_t)a[i] << 16, ub = (uint32_t)b[i] << 16;
            memcpy(&fa[i], &ua, 4);
            memcpy(&fb[i], &ub, 4);
        }
        derr = max_rel(fa, fb, n);
        free(a), free(b), free(fa), free(fb);
        cudaEventRecord(ev0, 0);
        for (int r = 0; r < 10; r++) tk_qdequant_v2(0, &m, s->out, s->in, d2);
        cudaEventRecord(ev1, 0);
        cudaEventSynchronize(ev1);
        float t2;
        cudaEventElapsedTime(&t2, ev0, ev1);
        cudaEventRecord(ev0, 0);
        for (int r = 0; r < 10; r++) tk_qdequant(0, &m, s->out, s->in, NULL, s->out, d1, TK_BF16, s->in);
        cudaEventRecord(ev1, 0);
        cudaEventSynchronize(ev1);
        float t1;
        cudaEventElapsedTime(&t1, ev0, ev1);
        dms = t2 / 10;
        printf("    dequant v1 %.1f us  v2 %.1f us  (v2 vs v1 rel %.1e)\n", t1 * 100, t2 * 100, derr);
        cudaFree(d1);
        cudaFree(d2);
    }
    (void)dms;
    printf("  v2 %-10s q%d g%-3d R%d  %8.1f us  %7.0f GB/s  v2 vs v1 rel %.1e\n", s->name, bits,
           group, rpw, ms * 1e3, (double)(qb + 2 * sb) / (ms / 1e3) / 1e9, err);
    cudaFree(q), cudaFree(sc), cudaFree(bi), cudaFree(x), cudaFree(y1), cudaFree(y2);
    return err < 1e-4 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 1) reps = atoi(argv[1]);
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    double bw = copy_bw();
    printf("device copy bandwidth: %.0f GB/s (read + write)\n", bw);
    struct { int bits, group, rpw; } cfg[] = {{0, 0, 0}, {4, 64, 2}, {4, 64, 4}, {4, 32, 4},
                                             {4, 128, 4}, {8, 64, 2}, {8, 64, 4}, {2, 64, 4}};
    int n_cfg = (int)(sizeof cfg / sizeof cfg[0]);
    double tok_ms[16];
    for (int i = 0; i < n_cfg; i++) {
        printf("== decode GEMV, %s\n", cfg[i].bits ? "quantized" : "bf16");
        tok_ms[i] = decode_config(cfg[i].bits, cfg[i].group, cfg[i].rpw);
    }
    struct tern_backend_params p = {.device = TERN_DEVICE_CUDA};
    struct tern_backend *be = NULL;
    if (tern_backend_create(&p, &be) != TERN_OK) {
        fprintf(stderr, "backend: %s\n", tern_last_error());
        return 1;
    }
    printf("== prefill T=2048 through the matmul op (TFLOP/s)\n");
    double q_fl = 0, d_fl = 0; /* time-weighted over one layer */
    for (int i = 0; i < N_SHAPES - 1; i++) {
        double tq = prefill_tflops(be, &SHAPES[i], 4, 2048), td = prefill_tflops(be, &SHAPES[i], 0, 2048);
        double flop = 2.0 * 2048 * (double)SHAPES[i].out * (double)SHAPES[i].in;
        q_fl += flop / (tq * 1e12);
        d_fl += flop / (td * 1e12);
        printf("  %-10s q4g64 %6.1f  bf16 %6.1f  (%.0f%%)\n", SHAPES[i].name, tq, td, 100 * tq / td);
    }
    tern_backend_destroy(be);
    printf("== lab v2 kernels (validated against v1 first)\n");
    struct { int bits, group, rpw; } lab[] = {{4, 64, 2}, {4, 64, 4}, {4, 32, 4}, {4, 128, 4}, {8, 64, 2}};
    double lab_ms[8] = {0};
    int lab_bad[8] = {0};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < N_SHAPES; j++)
            lab_bad[i] |= lab_shape(&SHAPES[j], lab[i].bits, lab[i].group, lab[i].rpw, &lab_ms[i]);
    printf("==== summary ====\n");
    for (int i = 0; i < 5; i++)
        printf("lab v2 q%d g%-3d R%d: %.3f ms -> %.0f tok/s (GEMV only)%s\n", lab[i].bits,
               lab[i].group, lab[i].rpw, lab_ms[i], 1e3 / lab_ms[i],
               lab_bad[i] ? "  DISAGREES WITH v1" : "");
    printf("copy bandwidth %.0f GB/s\n", bw);
    for (int i = 0; i < n_cfg; i++)
        printf("decode weights/token %-5s g%-3d R%d: %.3f ms -> %.0f tok/s (GEMV only)\n",
               cfg[i].bits ? (cfg[i].bits == 4 ? "q4" : cfg[i].bits == 8 ? "q8" : "q2") : "bf16",
               cfg[i].group, cfg[i].rpw, tok_ms[i], 1e3 / tok_ms[i]);
    printf("prefill 2048, one layer's matmuls: q4g64 at %.0f%% of the bf16 rate\n",
           100.0 * d_fl / q_fl);
    return 0;
}
