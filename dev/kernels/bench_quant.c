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
 *      (dequantize to BF16 + cuBLASLt) against dense BF16 (cuBLASLt), TFLOP/s.
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
        double gbs;
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
    printf("==== summary ====\n");
    printf("copy bandwidth %.0f GB/s\n", bw);
    for (int i = 0; i < n_cfg; i++)
        printf("decode weights/token %-5s g%-3d R%d: %.3f ms -> %.0f tok/s (GEMV only)\n",
               cfg[i].bits ? (cfg[i].bits == 4 ? "q4" : cfg[i].bits == 8 ? "q8" : "q2") : "bf16",
               cfg[i].group, cfg[i].rpw, tok_ms[i], 1e3 / tok_ms[i]);
    printf("prefill 2048, one layer's matmuls: q4g64 at %.0f%% of the bf16 rate\n",
           100.0 * d_fl / q_fl);
    return 0;
}
