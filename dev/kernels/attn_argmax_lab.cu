/*
 * attn_argmax_lab.cu — kernel lab: the decode attention and the argmax,
 * before and after the one-launch decode / cluster argmax rewrite, at the
 * Llama-3.1-8B shape (32 q heads, 8 kv heads, head_dim 128, bf16 paged KV
 * cache in 16-position blocks scattered over the pool, vocab 128256).
 * Never linked into the library.
 *
 * "before" is the code of commit b7b61da, included from a copy that
 * dev/kernels/attn_argmax_lab.sh makes (namespace old, C linkage dropped);
 * "after" is the working tree's cuda_attn_decode.cu and cuda_ops.cu. Each
 * variant is checked against the other (max abs difference of the BF16
 * outputs; argmax indices equal), then timed: 100 launches captured into a
 * CUDA graph with PDL (as the decode step runs them), 3 warm-up replays,
 * the median of 7 timed replays (CUDA events), printed per launch.
 * `attn_argmax_lab once` launches each variant once (for ncu durations).
 * Depends on the CUDA runtime only.
 */
#include "backend/cuda/cuda_attn_decode.cu"
#include "backend/cuda/cuda_ops.cu"

#include <algorithm>
#include <stdio.h>
#include <vector>

namespace old {
#include "old_attn_decode.cu"

/* k_argmax as it was: one 1024-thread block per row. */
static __global__ void k_argmax_old(const float *logits, int64_t vocab, int32_t *out)
{
    tk_pdl_wait();
    tk_pdl_launch();
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const float *row = logits + (int64_t)blockIdx.x * vocab;
    float bv = -INFINITY;
    int64_t bi = vocab;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) better(bv, bi, row[i], i);
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int64_t j = __shfl_xor_sync(0xffffffffu, bi, o);
        better(bv, bi, v, j);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) better(bv, bi, sv[w], si[w]);
        out[blockIdx.x] = (int32_t)(bi < vocab ? bi : 0);
    }
}
} // namespace old

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { H = 32, KVH = 8, D = 128, BS = 16, MAXCTX = 32768, NB = MAXCTX / BS + 8, V = 128256 };

static __global__ void k_fill(bf16 *p, int64_t n, uint32_t seed)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = __float2bfloat16((float)(h & 0xffff) / 32768.0f - 1.0f);
    }
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* us per launch of fn: 100 launches in one graph, median of 7 replays. */
template <typename F> static float time_us(cudaStream_t st, F fn)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 100; i++) CK(fn());
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(ge, st));
    std::vector<float> t;
    for (int i = 0; i < 7; i++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1000.0f / 100.0f);
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return median(t);
}

struct world {
    bf16 *k, *v, *q, *out;
    int32_t *pos, *qs, *lens, *bt;
    float *ws, *ws_old; /* apart: the new kernel's counters live at its start */
    int n_sm;
};

static struct tk_attn_args args(const world &w, int bucket)
{
    struct tk_attn_args a = {};
    a.q = w.q, a.q_stride = (H + 2 * KVH) * D, a.k_cache = w.k, a.v_cache = w.v, a.out = w.out;
    a.out_stride = H * D, a.positions = w.pos, a.query_start = w.qs, a.seq_lens = w.lens;
    a.block_tables = w.bt, a.n_seqs = 1, a.max_blocks_per_seq = NB, a.block_size = BS;
    a.n_heads = H, a.n_kv_heads = KVH, a.head_dim = D, a.scale = 1.0f / sqrtf((float)D);
    a.max_q_len = 1, a.max_seq_len = bucket;
    return a;
}

static float out_diff(const world &w, std::vector<uint16_t> &ref, bool keep)
{
    std::vector<uint16_t> o(H * D);
    CK(cudaMemcpy(o.data(), w.out, o.size() * 2, cudaMemcpyDeviceToHost));
    float md = 0.0f;
    if (keep) ref = o;
    else
        for (size_t i = 0; i < o.size(); i++) {
            uint32_t a = (uint32_t)o[i] << 16, b = (uint32_t)ref[i] << 16;
            float fa, fb;
            memcpy(&fa, &a, 4), memcpy(&fb, &b, 4);
            md = std::max(md, fabsf(fa - fb));
        }
    return md;
}

static void attention(cudaStream_t st, world &w, bool once)
{
    int ctxs[] = {64, 128, 256, 600, 1024, 2048, 4096, 8192, 16384, 32768};
    printf("decode attention, batch 1, Llama-3.1-8B shape: us per layer (graph of 100, PDL)\n");
    printf("%6s %6s | %8s %8s %6s | %8s %8s %6s | %9s\n", "ctx", "bucket", "old", "new", "x",
           "old det", "new det", "x", "max|diff|");
    for (int ctx : ctxs) {
        int bucket = 256;
        while (bucket < ctx) bucket *= 2;
        int32_t hp[3] = {ctx - 1, ctx, 0};
        CK(cudaMemcpy(w.pos, &hp[0], 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(w.lens, &hp[1], 4, cudaMemcpyHostToDevice));
        struct tk_attn_args a = args(w, bucket);
        int per = KVH, want = (2 * w.n_sm + per - 1) / per;
        int olen = std::max(64, ((bucket + want - 1) / want + 63) / 64 * 64);
        int on = (bucket + olen - 1) / olen;
        int nn = std::max(1, std::min(want, (bucket + 63) / 64));
        int odn = (bucket + 255) / 256;
        int ndn = std::max(std::min((bucket + 63) / 64, 16), (bucket + 255) / 256);
        auto f_old = [&] { return old::tk_attn_decode(st, &a, olen, on, w.ws_old); };
        auto f_new = [&] { return tk_attn_decode(st, &a, 64, INT_MAX, nn, nn, w.ws); };
        auto f_odet = [&] { return old::tk_attn_decode(st, &a, 256, odn, w.ws_old); };
        auto f_ndet = [&] { return tk_attn_decode(st, &a, 64, 256, 16, ndn, w.ws); };
        if (once) {
            if (ctx == 64 || ctx == 600 || ctx == 1024 || ctx == 8192 || ctx == 32768) {
                CK(f_old());
                CK(f_new());
            }
            continue;
        }
        std::vector<uint16_t> ref;
        CK(f_old());
        CK(cudaStreamSynchronize(st));
        out_diff(w, ref, true);
        float md = 0.0f;
        CK(f_new());
        CK(cudaStreamSynchronize(st));
        md = std::max(md, out_diff(w, ref, false));
        CK(f_ndet());
        CK(cudaStreamSynchronize(st));
        md = std::max(md, out_diff(w, ref, false));
        CK(f_odet());
        CK(cudaStreamSynchronize(st));
        md = std::max(md, out_diff(w, ref, false));
        float t0 = time_us(st, f_old), t1 = time_us(st, f_new);
        float t2 = time_us(st, f_odet), t3 = time_us(st, f_ndet);
        printf("%6d %6d | %8.2f %8.2f %6.2f | %8.2f %8.2f %6.2f | %9.5f\n", ctx, bucket, t0, t1,
               t0 / t1, t2, t3, t2 / t3, md);
    }
}

static void argmax(cudaStream_t st, bool once)
{
    int rows = 8;
    std::vector<float> h((size_t)rows * V);
    for (auto &x : h) x = (float)(rnd() % 100000) / 1000.0f;
    h[1 * (size_t)V + 4 * (2 * 8192 + 100)] = 200.0f; /* ties across blocks */
    h[1 * (size_t)V + 4 * (3 * 1024 + 7) + 1] = 200.0f;
    h[2 * (size_t)V + 77] = NAN;
    for (int i = 0; i < V; i++) h[3 * (size_t)V + i] = NAN;
    float *d;
    int32_t *o1, *o2;
    CK(cudaMalloc(&d, h.size() * 4));
    CK(cudaMalloc(&o1, rows * 4));
    CK(cudaMalloc(&o2, rows * 4));
    CK(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    for (int n : {1, 8}) {
        auto f_old = [&] {
            return tk_launch(old::k_argmax_old, (unsigned)n, 1024, 0, st, (const float *)d,
                             (int64_t)V, o1);
        };
        auto f_new = [&] { return tk_argmax(st, d, n, V, o2); };
        if (once) {
            CK(f_old());
            CK(f_new());
            continue;
        }
        CK(f_old());
        CK(f_new());
        int32_t a[8], b[8];
        CK(cudaMemcpy(a, o1, n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b, o2, n * 4, cudaMemcpyDeviceToHost));
        int same = memcmp(a, b, (size_t)n * 4) == 0;
        float t0 = time_us(st, f_old), t1 = time_us(st, f_new);
        printf("argmax %d x %d: old %.2f us, new %.2f us (x%.1f), indices %s (row 1: %d)\n", n, V,
               t0, t1, t0 / t1, same ? "equal" : "DIFFER", b[n > 1 ? 1 : 0]);
    }
    cudaFree(d), cudaFree(o1), cudaFree(o2);
}

int main(int argc, char **argv)
{
    bool once = argc > 1 && strcmp(argv[1], "once") == 0;
    world w;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    w.n_sm = prop.multiProcessorCount;
    size_t kvn = (size_t)NB * BS * KVH * D;
    CK(cudaMalloc(&w.k, kvn * 2));
    CK(cudaMalloc(&w.v, kvn * 2));
    CK(cudaMalloc(&w.q, (size_t)(H + 2 * KVH) * D * 2));
    CK(cudaMalloc(&w.out, (size_t)H * D * 2));
    CK(cudaMalloc(&w.pos, 4));
    CK(cudaMalloc(&w.qs, 8));
    CK(cudaMalloc(&w.lens, 4));
    CK(cudaMalloc(&w.bt, NB * 4));
    CK(cudaMalloc(&w.ws, (size_t)128 << 20));
    CK(cudaMemset(w.ws, 0, (size_t)128 << 20));
    CK(cudaMalloc(&w.ws_old, (size_t)128 << 20));
    k_fill<<<1024, 256>>>(w.k, (int64_t)kvn, 1);
    k_fill<<<1024, 256>>>(w.v, (int64_t)kvn, 2);
    k_fill<<<16, 256>>>(w.q, (H + 2 * KVH) * D, 3);
    std::vector<int32_t> bt(NB);
    for (int i = 0; i < NB; i++) bt[i] = i;
    for (int i = NB - 1; i > 0; i--) std::swap(bt[i], bt[rnd() % (i + 1)]);
    int32_t qs[2] = {0, 1};
    CK(cudaMemcpy(w.bt, bt.data(), NB * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w.qs, qs, 8, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    printf("%s, %d SMs\n", prop.name, w.n_sm);
    attention(st, w, once);
    argmax(st, once);
    CK(cudaDeviceSynchronize());
    return 0;
}
