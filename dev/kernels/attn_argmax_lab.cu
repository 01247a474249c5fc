/*
 * attn_argmax_lab.cu — kernel lab: the batch-1 decode attention at the
 * Llama-3.1-8B shape (32 q heads, 8 kv heads, head_dim 128, bf16 paged KV
 * cache in 16-position blocks scattered over the pool), committed kernel vs
 * working tree, and the cluster argmax (vocab 128256). Never linked into the
 * library.
 *
 * "old" is the decode kernel of the commit attn_argmax_lab.sh names,
 * included from a copy it makes (namespace old, C linkage dropped); "new"
 * is the working tree's cuda_attn_decode.cu. Outputs are compared (max abs
 * difference of the BF16 outputs), then timed: n calls captured into one
 * CUDA graph with PDL, 3 warm-up replays, the median of 7 timed replays
 * (CUDA events), per call. Three settings: hot (one layer's K/V, L2
 * resident), cold (32 layers' own pools cycled) and a mock of the step
 * (each attention followed by its layer's 4-bit o_proj GEMV,
 * cuda_quant_mma.cu, linked beside). `attn_argmax_lab argmax` times the
 * argmax instead (old: one 1024-thread block per row).
 * Depends on the CUDA runtime only.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_rope.cuh"

#include <cooperative_groups.h>
#include <limits.h>

namespace cur { /* apart from namespace old: argument-dependent lookup sees both */
#include "backend/cuda/cuda_attn_decode.cu"
}
#include "backend/cuda/cuda_ops.cu"
#include "backend/cuda/cuda_quant.h"

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

/* us per call of fn(i), i = 0..n-1 (each call may launch several kernels):
 * all n captured into one graph, median of 7 replays. */
template <typename F> static float time_seq(cudaStream_t st, int n, F fn)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; i++) CK(fn(i));
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
        t.push_back(ms * 1000.0f / n);
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return median(t);
}

/* Cold layers: NL layers' own K/V pools (NBL blocks each, for contexts up
 * to 2048) and own 4-bit o_proj weights ([4096, 4096], g64, BF16 scales),
 * so a graph cycling over them finds neither in L2, as in the real step. */
enum { NL = 32, NBL = 2048 / BS + 8, OUT_F = H * D };

struct world {
    bf16 *k, *v, *q, *out, *y;
    bf16 *lk[NL], *lv[NL];
    int32_t *lbt[NL];
    struct tk_qmat wo[NL];
    int32_t *pos, *qs, *lens, *bt;
    float *ws, *ws_old; /* apart: the new kernel's counters live at its start */
    int n_sm;
};

static struct tk_attn_args args(const world &w, int bucket, int layer = -1)
{
    struct tk_attn_args a = {};
    a.q = w.q, a.q_stride = (H + 2 * KVH) * D, a.k_cache = w.k, a.v_cache = w.v, a.out = w.out;
    a.out_stride = H * D, a.positions = w.pos, a.query_start = w.qs, a.seq_lens = w.lens;
    a.block_tables = w.bt, a.n_seqs = 1, a.max_blocks_per_seq = NB, a.block_size = BS;
    a.n_heads = H, a.n_kv_heads = KVH, a.head_dim = D, a.scale = 1.0f / sqrtf((float)D);
    a.max_q_len = 1, a.max_seq_len = bucket;
    if (layer >= 0) {
        a.k_cache = w.lk[layer], a.v_cache = w.lv[layer], a.block_tables = w.lbt[layer];
        a.max_blocks_per_seq = NBL;
    }
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

/* The glue's default-mode blocks per sequence (batch 1), capped at cap. */
static int n_default(const world &w, int bucket, int cap)
{
    int want = (2 * w.n_sm + KVH - 1) / KVH;
    return std::max(1, std::min(std::min(want, (bucket + 63) / 64), cap));
}

static void set_ctx(world &w, int ctx)
{
    int32_t hp[2] = {ctx - 1, ctx};
    CK(cudaMemcpy(w.pos, &hp[0], 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w.lens, &hp[1], 4, cudaMemcpyHostToDevice));
}

static __global__ void k_empty(void) {}

/* The variants timed: the committed kernel (old) and the working tree's
 * (new: its own warps and cluster rule, tk_attn_decode), then the working
 * tree's with W warps per block and clusters up to cl (1: the workspace
 * merge), and "c16": at most 16 blocks per sequence (so a cluster). Default
 * split rule (min 64 positions, n_target = blocks launched). */
struct variant {
    const char *name;
    int kind, w, cl, cap; /* kind 0 old, 1 new, 2 new's templates with w, cl */
};
static const variant VARS[] = {{"old", 0, 0, 0, 1 << 30},  {"new", 1, 0, 0, 1 << 30},
                               {"w8 ws", 2, 8, 1, 1 << 30}, {"w4 cl", 2, 4, 16, 1 << 30},
                               {"w4 ws", 2, 4, 1, 1 << 30}, {"new c16", 1, 0, 0, 16},
                               {"new c8", 1, 0, 0, 8},       {"ws c16", 2, 8, 1, 16}};
enum { NV = sizeof VARS / sizeof VARS[0] };

static cudaError_t run_var(cudaStream_t st, const variant &v, const struct tk_attn_args &a, int n,
                           float *ws, float *ws_old)
{
    struct cur::dec_rule r = {64, INT_MAX, n};
    struct tk_qkr_args none = {};
    if (v.kind == 0) return old::tk_attn_decode(st, &a, NULL, 64, INT_MAX, n, n, ws_old);
    if (v.kind == 1) return tk_attn_decode(st, &a, NULL, 64, INT_MAX, n, n, ws);
    if (v.w == 8) return cur::decode_launch_p<D, 4, 8, false>(st, &a, none, r, n, v.cl, ws);
    return cur::decode_launch_p<D, 4, 4, false>(st, &a, none, r, n, v.cl, ws);
}

/* Hot: one pool, 100 launches of one layer (K/V stay in L2); the outputs
 * of every variant against old's; then the deterministic rule, old and
 * new; CL=WS: the new kernel with n_splits 16 (cluster merge) and 17
 * (workspace merge) for the same per-sequence split, bitwise. */
static void attention_hot(cudaStream_t st, world &w)
{
    int ctxs[] = {64, 256, 600, 1024, 2048, 4096, 8192, 32768};
    printf("hot (L2-resident K/V): us per layer (graph of 100, PDL)\n%6s %3s |", "ctx", "n");
    for (const variant &v : VARS) printf(" %8s", v.name);
    printf(" | %7s %7s | %9s %5s\n", "old det", "new det", "max|diff|", "CL=WS");
    for (int ctx : ctxs) {
        int bucket = 256;
        while (bucket < ctx) bucket *= 2;
        set_ctx(w, ctx);
        struct tk_attn_args a = args(w, bucket);
        int nn = n_default(w, bucket, 1 << 30);
        int ndn = std::max(std::min((bucket + 63) / 64, 16), (bucket + 255) / 256);
        std::vector<uint16_t> ref, r16;
        float md = 0.0f, t[NV];
        for (int i = 0; i < NV; i++) {
            int n = n_default(w, bucket, VARS[i].cap);
            CK(run_var(st, VARS[i], a, n, w.ws, w.ws_old));
            CK(cudaStreamSynchronize(st));
            md = std::max(md, out_diff(w, ref, i == 0));
            t[i] =
                time_seq(st, 100, [&](int) { return run_var(st, VARS[i], a, n, w.ws, w.ws_old); });
        }
        auto f_odet = [&](int) {
            return old::tk_attn_decode(st, &a, NULL, 64, 256, 16, ndn, w.ws_old);
        };
        auto f_ndet = [&](int) { return tk_attn_decode(st, &a, NULL, 64, 256, 16, ndn, w.ws); };
        CK(f_ndet(0));
        CK(cudaStreamSynchronize(st));
        md = std::max(md, out_diff(w, ref, false));
        /* cluster vs workspace merge, same split (det rule: n <= 16 up to 4096) */
        CK(tk_attn_decode(st, &a, NULL, 64, 256, 16, 16, w.ws));
        CK(cudaStreamSynchronize(st));
        out_diff(w, r16, true);
        CK(tk_attn_decode(st, &a, NULL, 64, 256, 16, 17, w.ws));
        CK(cudaStreamSynchronize(st));
        std::vector<uint16_t> o1(H * D);
        CK(cudaMemcpy(o1.data(), w.out, o1.size() * 2, cudaMemcpyDeviceToHost));
        bool same = memcmp(o1.data(), r16.data(), o1.size() * 2) == 0;
        float t2 = time_seq(st, 100, f_odet), t3 = time_seq(st, 100, f_ndet);
        printf("%6d %3d |", ctx, nn);
        for (int i = 0; i < NV; i++) printf(" %8.2f", t[i]);
        printf(" | %7.2f %7.2f | %9.5f %5s\n", t2, t3, md, same ? "yes" : "NO");
    }
}

/* Cold, and inside a mock of the step: 96 calls cycling over the NL layers.
 * "cold": the attention alone; "in step": each attention followed by its
 * layer's 4-bit o_proj GEMV (x = the attention output, launched with PDL:
 * its first weight stages load while the attention runs), minus the GEMVs
 * alone (o); "no overlap": an empty kernel (no PDL) between the two, so the
 * GEMV's early loads overlap the empty kernel instead, minus (empty +
 * GEMV) alone (e+o). */
static void attention_step(cudaStream_t st, world &w)
{
    int ctxs[] = {256, 600, 1024, 2048};
    auto gemv = [&](int l) {
        return tk_qgemv_mma(st, &w.wo[l], w.out, OUT_F, NULL, TK_BF16, w.y, TK_BF16, OUT_F, 1,
                            OUT_F, OUT_F);
    };
    auto empty = [&]() {
        k_empty<<<1, 32, 0, st>>>();
        return cudaGetLastError();
    };
    float to = time_seq(st, 96, [&](int i) { return gemv(i % NL); });
    float teo = time_seq(st, 96, [&](int i) {
        cudaError_t e = empty();
        return e != cudaSuccess ? e : gemv(i % NL);
    });
    printf("cold (%d layers cycled) / in a step mock / no GEMV overlap: us per layer (graph of "
           "96, PDL); o alone %.2f, e+o alone %.2f\n%6s |", NL, to, teo, "ctx");
    for (const variant &v : VARS) printf(" %20s", v.name);
    printf("\n");
    for (int ctx : ctxs) {
        int bucket = 256;
        while (bucket < ctx) bucket *= 2;
        set_ctx(w, ctx);
        printf("%6d |", ctx);
        for (int i = 0; i < NV; i++) {
            int n = n_default(w, bucket, VARS[i].cap);
            auto at = [&](int l) {
                struct tk_attn_args a = args(w, bucket, l);
                return run_var(st, VARS[i], a, n, w.ws, w.ws_old);
            };
            float tc = time_seq(st, 96, [&](int k) { return at(k % NL); });
            float tp = time_seq(st, 96, [&](int k) {
                cudaError_t e = at(k % NL);
                return e != cudaSuccess ? e : gemv(k % NL);
            });
            float tep = time_seq(st, 96, [&](int k) {
                cudaError_t e = at(k % NL);
                if (e == cudaSuccess) e = empty();
                return e != cudaSuccess ? e : gemv(k % NL);
            });
            printf(" %6.2f/%6.2f/%6.2f", tc, tp - to, tep - teo);
        }
        printf("\n");
    }
}

static void world_layers(world &w)
{
    size_t kvn = (size_t)NBL * BS * KVH * D;
    size_t qn = (size_t)OUT_F * OUT_F / 8, sn = (size_t)OUT_F * (OUT_F / 64);
    for (int l = 0; l < NL; l++) {
        CK(cudaMalloc(&w.lk[l], kvn * 2));
        CK(cudaMalloc(&w.lv[l], kvn * 2));
        k_fill<<<256, 256>>>(w.lk[l], (int64_t)kvn, 11 + l);
        k_fill<<<256, 256>>>(w.lv[l], (int64_t)kvn, 71 + l);
        std::vector<int32_t> bt(NBL);
        for (int i = 0; i < NBL; i++) bt[i] = i;
        for (int i = NBL - 1; i > 0; i--) std::swap(bt[i], bt[rnd() % (i + 1)]);
        CK(cudaMalloc(&w.lbt[l], NBL * 4));
        CK(cudaMemcpy(w.lbt[l], bt.data(), NBL * 4, cudaMemcpyHostToDevice));
        void *q, *sc, *bi;
        CK(cudaMalloc(&q, qn * 4));
        CK(cudaMalloc(&sc, sn * 2));
        CK(cudaMalloc(&bi, sn * 2));
        k_fill<<<256, 256>>>((bf16 *)q, (int64_t)qn * 2, 131 + l);
        k_fill<<<64, 256>>>((bf16 *)sc, (int64_t)sn, 191 + l);
        k_fill<<<64, 256>>>((bf16 *)bi, (int64_t)sn, 251 + l);
        w.wo[l] = (struct tk_qmat){q, sc, bi, TK_BF16, 4, 64};
    }
    CK(cudaMalloc(&w.y, OUT_F * 2));
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
    bool am = argc > 1 && strcmp(argv[1], "argmax") == 0;
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
    CK(cudaMemset(w.ws_old, 0, (size_t)128 << 20));
    k_fill<<<1024, 256>>>(w.k, (int64_t)kvn, 1);
    k_fill<<<1024, 256>>>(w.v, (int64_t)kvn, 2);
    k_fill<<<16, 256>>>(w.q, (H + 2 * KVH) * D, 3);
    std::vector<int32_t> bt(NB);
    for (int i = 0; i < NB; i++) bt[i] = i;
    for (int i = NB - 1; i > 0; i--) std::swap(bt[i], bt[rnd() % (i + 1)]);
    int32_t qs[2] = {0, 1};
    CK(cudaMemcpy(w.bt, bt.data(), NB * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w.qs, qs, 8, cudaMemcpyHostToDevice));
    world_layers(w);
    CK(cudaDeviceSynchronize());
    printf("%s, %d SMs\n", prop.name, w.n_sm);
    if (am) {
        argmax(st, false);
    } else {
        attention_hot(st, w);
        attention_step(st, w);
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
