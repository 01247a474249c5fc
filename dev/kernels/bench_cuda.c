/*
 * bench_cuda.c — kernel lab: the CUDA backend's ops at Llama-3.1-8B shapes,
 * against the two floors measured in the same run (device-to-device copy
 * bandwidth, bytes read + written; bf16 GEMM rate of cuBLASLt at 8192^3).
 * Never linked into the library. Built by scripts/gpu-prebuild.sh against
 * libtern.a; run by scripts/gpu.sh on the GPU machine. Prints one table.
 *
 * Timing: each measured op is captured 40 times into a CUDA graph (through
 * the backend's own graph hooks, so this also checks capturability),
 * replayed after a warm-up, and timed with a host clock around a sync.
 * Weights rotate over enough copies to exceed the 60 MB L2.
 */
#include "backend/backend.h"
#include "backend/cuda/cuda.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != TERN_OK) {                                                                      \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, tern_last_error());                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static struct tern_backend *be;
static uint64_t rng = 88172645463325252ull;
static char table[8192];
static size_t table_len;

#include <stdarg.h>

static void row(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void row(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("%s", line);
    table_len += (size_t)snprintf(table + table_len, sizeof table - table_len, "%s", line);
}

/* A fresh bf16 tensor of random values in [-1, 1), uploaded via buf_from_host. */
static struct tern_dtensor rand_bf16(int nd, const int64_t *shape, double *upload_gbs)
{
    struct tern_dtensor t = {.dtype = TERN_DTYPE_BF16, .n_dims = nd};
    for (int i = 0; i < nd; i++) t.shape[i] = shape[i];
    size_t n = tern_dtensor_numel(&t);
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        float f = (float)((rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
        h[i] = tern_f32_to_bf16(f);
    }
    uint64_t t0 = tern_now_ns();
    CHECK(be->ops->buf_from_host(be, h, n * 2, &t.buf));
    if (upload_gbs) *upload_gbs = (double)n * 2 / (double)(tern_now_ns() - t0);
    free(h);
    return t;
}

static struct tern_dtensor dev_out(enum tern_dtype dt, int64_t r, int64_t c)
{
    int64_t s[2] = {r, c};
    struct tern_dtensor t;
    CHECK(tern_dtensor_alloc(be, dt, 2, s, &t));
    return t;
}

typedef void (*op_fn)(void *ctx, int i);

/* Seconds per call of fn (graph of 40 calls, 5 replays after 1 warm-up). */
static double time_graph(op_fn fn, void *ctx)
{
    fn(ctx, 0); /* first call outside capture: algorithm tuning */
    CHECK(be->ops->sync(be));
    struct tern_graph *g;
    CHECK(tern_cuda_graph_begin(be));
    for (int i = 0; i < 40; i++) fn(ctx, i);
    CHECK(tern_cuda_graph_end(be, &g));
    CHECK(tern_cuda_graph_launch(be, g));
    CHECK(be->ops->sync(be));
    uint64_t t0 = tern_now_ns();
    for (int r = 0; r < 5; r++) CHECK(tern_cuda_graph_launch(be, g));
    CHECK(be->ops->sync(be));
    double s = (double)(tern_now_ns() - t0) / 1e9 / 200.0;
    tern_cuda_graph_free(g);
    return s;
}

struct mm_ctx {
    struct tern_linear w[16];
    int n_w;
    struct tern_dtensor x, y;
};

static void mm_op(void *p, int i)
{
    struct mm_ctx *c = p;
    CHECK(be->ops->matmul(be, &c->x, &c->w[i % c->n_w], &c->y, 0));
}

static double bench_matmul(int64_t T, int64_t in, int64_t out, enum tern_dtype ydt)
{
    struct mm_ctx c = {0};
    size_t bytes = (size_t)in * (size_t)out * 2;
    c.n_w = (int)((512u << 20) / bytes) + 1;
    if (c.n_w > 16) c.n_w = 16;
    if (T > 64) c.n_w = 1; /* compute-bound: no need to defeat L2 */
    int64_t ws[2] = {out, in}, xs[2] = {T, in};
    for (int i = 0; i < c.n_w; i++) {
        c.w[i] = (struct tern_linear){.weight = rand_bf16(2, ws, NULL), .in_features = in,
                                      .out_features = out};
    }
    c.x = rand_bf16(2, xs, NULL);
    c.y = dev_out(ydt, T, out);
    double s = time_graph(mm_op, &c);
    for (int i = 0; i < c.n_w; i++) tern_dtensor_free(be, &c.w[i].weight);
    tern_dtensor_free(be, &c.x);
    tern_dtensor_free(be, &c.y);
    return s;
}

static double copy_bandwidth(void)
{
    size_t n = (size_t)2 << 30;
    void *a, *b;
    if (cudaMalloc(&a, n) || cudaMalloc(&b, n)) exit(1);
    cudaMemset(a, 1, n);
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    uint64_t t0 = tern_now_ns();
    for (int i = 0; i < 10; i++) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    double s = (double)(tern_now_ns() - t0) / 1e9;
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)n * 10 / s / 1e9;
}

struct attn_ctx {
    struct tern_dtensor qkv, out;
    struct tern_kv_layer kv;
    struct tern_batch h;
    struct tern_batch_dev d;
    struct tern_attn_params p;
};

static void attn_op(void *p, int i)
{
    struct attn_ctx *c = p;
    CHECK(be->ops->attention(be, &c->qkv, &c->kv, &c->d, &c->p, &c->out));
}

static struct tern_dtensor up_i32(const int32_t *v, int64_t n)
{
    int64_t s[1] = {n};
    struct tern_dtensor t;
    CHECK(tern_dtensor_alloc(be, TERN_DTYPE_I32, 1, s, &t));
    CHECK(be->ops->upload(be, &t, v, (size_t)n * 4));
    return t;
}

/* S sequences of ctx cached tokens and q new ones each; returns seconds per call. */
static double bench_attention(int S, int ctx, int q)
{
    const int H = 32, KVH = 8, D = 128, BSZ = 16;
    int L = ctx + q, mb = (L + BSZ - 1) / BSZ, T = S * q;
    struct attn_ctx c = {0};
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T), *qs = malloc(sizeof(int32_t) * (size_t)(S + 1));
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)S), *bt = malloc(sizeof(int32_t) * (size_t)(S * mb));
    for (int s = 0; s < S; s++) {
        qs[s] = s * q;
        lens[s] = L;
        for (int i = 0; i < q; i++) pos[s * q + i] = ctx + i;
        for (int j = 0; j < mb; j++) bt[s * mb + j] = s * mb + j;
    }
    qs[S] = T;
    int64_t qkv_s[2] = {T, (int64_t)(H + 2 * KVH) * D}, kv_s[4] = {(int64_t)S * mb, BSZ, KVH, D};
    c.qkv = rand_bf16(2, qkv_s, NULL);
    c.kv.k = rand_bf16(4, kv_s, NULL);
    c.kv.v = rand_bf16(4, kv_s, NULL);
    c.out = dev_out(TERN_DTYPE_BF16, T, (int64_t)H * D);
    c.h = (struct tern_batch){.n_tokens = T, .n_seqs = S, .max_blocks_per_seq = mb,
                              .positions = pos, .query_start = qs, .seq_lens = lens,
                              .block_tables = bt};
    c.d = (struct tern_batch_dev){.host = &c.h, .block_size = BSZ, .max_q_len = q, .max_seq_len = L};
    c.d.positions = up_i32(pos, T);
    c.d.query_start = up_i32(qs, S + 1);
    c.d.seq_lens = up_i32(lens, S);
    c.d.block_tables = up_i32(bt, (int64_t)S * mb);
    c.p = (struct tern_attn_params){.n_heads = H, .n_kv_heads = KVH, .head_dim = D,
                                    .scale = 1.0f / sqrtf((float)D)};
    double s = time_graph(attn_op, &c);
    struct tern_dtensor *all[8] = {&c.qkv, &c.kv.k, &c.kv.v, &c.out, &c.d.positions,
                                   &c.d.query_start, &c.d.seq_lens, &c.d.block_tables};
    for (int i = 0; i < 8; i++) tern_dtensor_free(be, all[i]);
    free(pos), free(qs), free(lens), free(bt);
    return s;
}

int main(void)
{
    struct tern_backend_params p = {.device = TERN_DEVICE_CUDA};
    CHECK(tern_backend_create(&p, &be));
    double copy = copy_bandwidth();
    double up_gbs = 0;
    int64_t big[1] = {(int64_t)1 << 29}; /* 1 GiB of bf16 */
    struct tern_dtensor u = rand_bf16(1, big, &up_gbs);
    tern_dtensor_free(be, &u);
    double g = bench_matmul(8192, 8192, 8192, TERN_DTYPE_BF16);
    double gemm = 2.0 * 8192.0 * 8192.0 * 8192.0 / g / 1e12;
    row("floor  d2d copy (read+write)              %10.0f GB/s\n", copy);
    row("floor  cuBLASLt bf16 GEMM 8192^3          %10.1f TFLOP/s\n", gemm);
    row("upload buf_from_host (pinned, staged)     %10.1f GB/s\n", up_gbs);

    struct { int64_t in, out; const char *name; enum tern_dtype ydt; } gv[4] = {
        {4096, 4096, "o_proj 4096->4096", TERN_DTYPE_BF16},
        {4096, 28672, "gate_up 4096->28672", TERN_DTYPE_BF16},
        {14336, 4096, "down 14336->4096", TERN_DTYPE_BF16},
        {4096, 128256, "logits 4096->128256", TERN_DTYPE_F32}};
    int Ts[3] = {1, 4, 8};
    for (int k = 0; k < 4; k++)
        for (int ti = 0; ti < 3; ti++) {
            double s = bench_matmul(Ts[ti], gv[k].in, gv[k].out, gv[k].ydt);
            double gbs = (double)gv[k].in * (double)gv[k].out * 2 / s / 1e9;
            char fmt[160];
            snprintf(fmt, sizeof fmt, "gemv   T=%d %-22s %%7.1f us %%7.0f GB/s %%5.1f%%%% of copy\n",
                     Ts[ti], gv[k].name);
            row(fmt, s * 1e6, gbs, 100.0 * gbs / copy);
        }
    struct { int64_t in, out; const char *name; } pf[4] = {
        {4096, 6144, "qkv 4096->6144"}, {4096, 4096, "o 4096->4096"},
        {4096, 28672, "gate_up 4096->28672"}, {14336, 4096, "down 14336->4096"}};
    for (int k = 0; k < 4; k++) {
        double s = bench_matmul(2048, pf[k].in, pf[k].out, TERN_DTYPE_BF16);
        double tf = 2.0 * 2048 * (double)pf[k].in * (double)pf[k].out / s / 1e12;
        char fmt[160];
        snprintf(fmt, sizeof fmt, "gemm   T=2048 %-20s %%7.1f us %%7.1f TFLOP/s %%5.1f%%%% of floor\n",
                 pf[k].name);
        row(fmt, s * 1e6, tf, 100.0 * tf / gemm);
    }
    double sa = bench_attention(1, 0, 2048);
    double fl = 4.0 * 32 * 128 * 2048.0 * 2049.0 / 2.0;
    row("attn   prefill 1x2048 H32/KV8/D128 causal %7.1f us %7.1f TFLOP/s %5.1f%% of floor\n",
        sa * 1e6, fl / sa / 1e12, 100.0 * fl / sa / 1e12 / gemm);
    double sd = bench_attention(64, 4095, 1);
    double kvb = 64.0 * 4096 * 8 * 128 * 2 * 2;
    row("attn   decode 64 seqs x 4096 ctx          %7.1f us %7.0f GB/s %5.1f%% of copy\n",
        sd * 1e6, kvb / sd / 1e9, 100.0 * kvb / sd / 1e9 / copy);
    double s1 = bench_attention(1, 8191, 1);
    double kv1 = 8192.0 * 8 * 128 * 2 * 2;
    row("attn   decode 1 seq x 8192 ctx            %7.1f us %7.0f GB/s %5.1f%% of copy\n",
        s1 * 1e6, kv1 / s1 / 1e9, 100.0 * kv1 / s1 / 1e9 / copy);
    printf("\n==== summary ====\n%s", table);
    tern_backend_destroy(be);
    return 0;
}
