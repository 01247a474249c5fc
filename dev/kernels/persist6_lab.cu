/*
 * persist6_lab.cu — kernel lab for issue 7: the whole 8B 4-bit decode step
 * (32 layers + lm_head, 576-byte records) as ONE persistent cooperative
 * kernel, one 16-warp block per SM, the prototype of the library's
 * cuda_step.cu (docs/perf/quant.md, "persist5 / persist6 labs": 5166 us as
 * first written (persist5, removed after 96045da) -> 1764 us, 58.5% of the
 * floor, every phase in). Per layer: RMSNorm of the residual into every
 * block's shared x; qkv GEMV; grid barrier; attention items (kv head, split
 * of 64 positions) on whole blocks; barrier; o GEMV into the residual;
 * norm; gate_up GEMV with silu * up; down GEMV into the residual.
 * GEMVs: per-warp cp.async.bulk rings of S6 chunks of C6 records running
 * ahead across ops; a tile on a group of KS warps of one block (warp j: the
 * j-th contiguous slice of the tile's groups), its slices' sums added in
 * warp order after a block barrier (FIN 3; 0-2: the counted variants).
 * Switches (-D): S6, C6, EF (L2 evict_first on the stream), FIN, XS (x
 * sums once per op instead of an MMA), EI (issue before the arithmetic),
 * PF (K/V into L2 one op ahead), KS_QKV / KS_O / KS_GU / KS_DN / KS_LM,
 * ATT_LSU (attention rows by cp.async, not bulk). Only finite logits are
 * checked (the arithmetic is q8_lab's; the library has test_step_cuda).
 * Prints the step with and without its phases, per-op and per-phase times
 * (block 0's clock) and the attention's stamps.
 * Run: ./persist6_lab [layers (32)] [context (550, <= 1024)]
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/persist6_lab.cu -o persist6_lab
 */
#include "backend/cuda/cuda_qmma.cuh"
#include "lab_common.cuh"
#include "persist_common.cuh"
#include "q8_common.cuh"

#include <cuda_bf16.h>

#define NW 16 /* warps per block */
#ifndef S6
#define S6 4 /* ring stages per warp */
#endif
#ifndef C6
#define C6 4 /* records per chunk */
#endif
#ifndef EF
#define EF 1 /* weight stream with an L2 evict_first policy */
#endif
#ifndef FIN
#define FIN 3 /* tile sums: 0 none (timing only), 1 relaxed shared add + fence.cta, 2 acq_rel shared add,
                 3 none in the loop: after the op's chunks a block barrier, then the block's warps sum its tiles */
#endif
#ifndef XS
#define XS 0 /* the groups' sums of x once per op in shared memory (persist_lab), not an MMA per record */
#endif
#ifndef ATT_LANE
#define ATT_LANE 0 /* the lane that counts an attention split in */
#endif
#ifndef EI
#define EI 0 /* issue the next chunk into the stage once its words are in registers, before the arithmetic */
#endif
#ifndef PF
#define PF 2 /* 2: the layer's K/V prefetched into L2 by every thread one op ahead (0: not) */
#endif
#ifndef ATT_LSU
#define ATT_LSU 1 /* ATT 3: the rows and the merge's partials by 16-byte cp.async, not bulk copies */
#endif
#ifndef KS_QKV
#define KS_QKV 16
#endif
#ifndef KS_O
#define KS_O 16
#endif
#ifndef KS_GU
#define KS_GU 8
#endif
#ifndef KS_DN
#define KS_DN 8
#endif
#ifndef KS_LM
#define KS_LM 8 /* warps per lm_head tile */
#endif
#ifndef LT
#define LT 32 /* local tiles per group, at most */
#endif
#define HID 4096
#define FF 14336
#define NKV 8
#define HD 128
#define MAXK FF
#define MAX_SPLITS 128
#define AST (HD + 4) /* a head's partial: HD sums, m, l, 2 pad (16-byte rows) */

enum { OP_QKV, OP_O, OP_GU, OP_DOWN, OP_LM };

struct gop {
    const uint4 *rec; /* tiles x nG records */
    int kind, in, out, nG, tiles, ks, lks; /* ks = 1 << lks warps per tile */
};

#define MAX_GOPS 260
__constant__ gop c_ops[MAX_GOPS]; /* the step's GEMVs: warp-uniform reads through the constant cache */

struct step_args {
    int n_layers, ctx;
    float *res;
    const bf16 *norm_w; /* [(2 L + 1) x HID] */
    bf16 *qkv, *attn, *act;
    float *logits;
    const bf16 *kc, *vc; /* [L][ctx][NKV][HD] */
    float *att_ws;       /* NKV x MAX_SPLITS x 4 x AST */
    unsigned *att_cnt;
    unsigned *ctr;
    int phases;
};

/* ---------------------------------------------------------------- the weight stream */

/* A warp's place in its stream: op, tile, chunk offset c (in groups) in
 * the warp's slice of the tile; the op's per-warp constants cached. */
struct cur6 {
    int op, tile, c, len, tstride, G0;
};

/* Start op `op` for this warp: its first tile, slice length and offset. */
static __device__ __forceinline__ void start6(cur6 &k, int op, int warp)
{
    const gop &o = c_ops[op];
    int per = NW >> o.lks;
    k.op = op, k.c = 0;
    k.tile = blockIdx.x * per + (warp >> o.lks);
    k.tstride = gridDim.x * per;
    k.len = o.nG >> o.lks;
    k.G0 = (warp & (o.ks - 1)) * k.len;
}

/* The chunk at k: records r .. r + n of op k.op, first group G; 0 when the
 * warp's share of the op is done. Then step k past it. */
static __device__ __forceinline__ int next6(cur6 &k, int64_t &r, int &G)
{
    const gop &o = c_ops[k.op];
    if (k.tile >= o.tiles) return 0;
    G = k.G0 + k.c;
    r = (int64_t)k.tile * o.nG + G;
    int n = min(C6, k.len - k.c);
    k.c += C6;
    if (k.c >= k.len) k.c = 0, k.tile += k.tstride;
    return n;
}

static __device__ __forceinline__ void issue6(cur6 &c, int n_ops, int warp, uint32_t ring0,
                                              uint32_t bar0, int64_t &issued, uint64_t pol)
{
    while (c.op < n_ops) {
        int64_t r;
        int G;
        int n = next6(c, r, G);
        if (n == 0) {
            if (c.op + 1 < n_ops) start6(c, c.op + 1, warp);
            else c.op++;
            continue;
        }
        int st = (int)(issued % S6);
        uint32_t dst = ring0 + st * C6 * REC * 16, bar = bar0 + 8 * st, bytes = (uint32_t)n * REC * 16;
        const void *src = c_ops[c.op].rec + (size_t)r * REC;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                     : "memory");
        if (EF)
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
                         "l"(src), "r"(bytes), "r"(bar), "l"(pol)
                         : "memory");
        else
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                         "l"(src), "r"(bytes), "r"(bar)
                         : "memory");
        issued++;
        return;
    }
}

static __device__ __forceinline__ void prefetch_l2(const void *p, uint32_t bytes)
{
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

/* ---------------------------------------------------------------- phases */

static __device__ void norm_phase(const float *res, const bf16 *w, bf16 *xs, float *red)
{
    float v[HID / (NW * 32)], ss = 0.0f;
#pragma unroll
    for (int k = 0; k < HID / (NW * 32); k++) {
        v[k] = __ldcg(res + threadIdx.x + k * NW * 32);
        ss = fmaf(v[k], v[k], ss);
    }
    ss = tk_warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int k = 0; k < NW; k++) tot += red[k];
    float inv = rsqrtf(tot / HID + 1e-5f);
#pragma unroll
    for (int k = 0; k < HID / (NW * 32); k++) {
        int i = threadIdx.x + k * NW * 32;
        xs[i] = __float2bfloat16(v[k] * inv * __bfloat162float(w[i]));
    }
    __syncthreads();
}

static __device__ void load_x(const bf16 *src, int n, bf16 *xs)
{
    for (int i = threadIdx.x; i < n / 8; i += blockDim.x)
        ((uint4 *)xs)[i] = __ldcg((const uint4 *)src + i);
    __syncthreads();
}

static __device__ unsigned long long g_att_ts[16]; /* attention stamps of block 0 / head 0, last layer */

static __device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* The attention: an item is (kv head h, split sp of SPL2 positions) on all
 * NW warps of a block (items round-robin over the blocks): q, K and V rows
 * staged in shared memory (16-byte cp.async; ATT_LSU 0: bulk copies), q.k
 * with a thread per (q head, position), the softmax on 4 warps, p.v and the
 * merge with a thread per (q head, dim); the last split of h (a gpu-scope
 * counter) merges the splits in order. (Warp-per-item variants, 21-50 us
 * per layer, were removed after 96045da.) */
#define SPL2 64
#define KST (HD + 8) /* K row stride in shared memory (bf16): conflict-free 16-byte rows */
struct att3_smem {
    bf16 q[4][HD];
    float qf[4][HD];
    float S[4][SPL2];
    float ml[4][2];
    unsigned last;
    union __align__(16) {
        struct {
            bf16 k[SPL2][KST];
            bf16 v[SPL2][HD];
        } kv;
        float ws[16][4][AST];
    } u;
};

static __device__ void att_item3(const step_args &a, int layer, int h, int sp, int n_sp, att3_smem *S,
                                 uint32_t bar, int &uses)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int p0 = sp * SPL2, n = min(SPL2, a.ctx - p0);
    size_t lbase = (size_t)layer * a.ctx * NKV * HD;
    if (ATT_LSU) { /* 16-byte cp.async by every thread (the LSU path: the TMA unit's queue holds the rings' copies) */
        for (int i = threadIdx.x; i < 4 * HD / 8 + 2 * n * (HD / 8); i += NW * 32) {
            const void *src;
            uint32_t dst;
            if (i < 4 * HD / 8) {
                src = a.qkv + h * 4 * HD + 8 * i, dst = q8_smem(&S->q[0][0] + 8 * i);
            } else {
                int r = i - 4 * HD / 8, kv = r / (n * (HD / 8)), p = r / (HD / 8) % n, c = r % (HD / 8);
                size_t off = lbase + ((size_t)(p0 + p) * NKV + h) * HD + 8 * c;
                src = (kv ? a.vc : a.kc) + off;
                dst = q8_smem(kv ? &S->u.kv.v[p][8 * c] : &S->u.kv.k[p][8 * c]);
            }
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
    } else {
        if (warp == 0) {
            asm volatile("fence.proxy.async.global;" ::: "memory"); /* q was written by other SMs */
            if (lane == 0)
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                             "r"((uint32_t)(4 * HD * 2 + n * HD * 2 * 2))
                             : "memory");
            __syncwarp();
            if (lane == 0) bulk_g2s(q8_smem(S->q), a.qkv + h * 4 * HD, 4 * HD * 2, bar);
            for (int p = lane; p < n; p += 32) {
                size_t off = lbase + ((size_t)(p0 + p) * NKV + h) * HD;
                bulk_g2s(q8_smem(S->u.kv.k[p]), a.kc + off, HD * 2, bar);
                bulk_g2s(q8_smem(S->u.kv.v[p]), a.vc + off, HD * 2, bar);
            }
        }
    }
    bool stamp = h == 0 && sp == 0 && threadIdx.x == 0;
    if (stamp) g_att_ts[0] = lab_gtimer();
    if (!ATT_LSU) {
        q8_wait(bar, (uint32_t)(uses & 1));
        uses++;
    }
    if (stamp) g_att_ts[5] = lab_gtimer(); /* the rows are in */
    /* q.k: a thread per (position, q head) on warps 0-7, K rows at a
     * conflict-free stride, q broadcast from shared memory */
    (&S->qf[0][0])[threadIdx.x] = __bfloat162float((&S->q[0][0])[threadIdx.x]) * 0.0884f; /* NW * 32 == 4 * HD */
    __syncthreads();
    if (warp < 8) {
        int p = lane + 32 * (warp & 1), g = warp >> 1;
        if (p < n) {
            const uint4 *kr = (const uint4 *)S->u.kv.k[p];
            const float4 *qr = (const float4 *)S->qf[g];
            float d0 = 0.0f, d1 = 0.0f;
#pragma unroll 4
            for (int j = 0; j < HD / 8; j++) {
                uint4 kv = kr[j];
                float4 qa = qr[2 * j], qb = qr[2 * j + 1];
                const bf16 *k = (const bf16 *)&kv;
                d0 = fmaf(qa.x, __bfloat162float(k[0]), d0), d1 = fmaf(qa.y, __bfloat162float(k[1]), d1);
                d0 = fmaf(qa.z, __bfloat162float(k[2]), d0), d1 = fmaf(qa.w, __bfloat162float(k[3]), d1);
                d0 = fmaf(qb.x, __bfloat162float(k[4]), d0), d1 = fmaf(qb.y, __bfloat162float(k[5]), d1);
                d0 = fmaf(qb.z, __bfloat162float(k[6]), d0), d1 = fmaf(qb.w, __bfloat162float(k[7]), d1);
            }
            S->S[g][p] = d0 + d1;
        }
    }
    __syncthreads();
    if (warp < 4) { /* softmax of q head g = warp over the split */
        int g = warp;
        float v0 = lane < n ? S->S[g][lane] : -INFINITY, v1 = lane + 32 < n ? S->S[g][lane + 32] : -INFINITY;
        float m = fmaxf(v0, v1);
#pragma unroll
        for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float e0 = lane < n ? __expf(v0 - m) : 0.0f, e1 = lane + 32 < n ? __expf(v1 - m) : 0.0f;
        S->S[g][lane] = e0, S->S[g][lane + 32] = e1;
        float l = tk_warp_sum(e0 + e1);
        if (lane == 0) S->ml[g][0] = m, S->ml[g][1] = l;
    }
    __syncthreads();
    /* p.v: thread (g, d) */
    int g = threadIdx.x / HD, d = threadIdx.x % HD; /* NW * 32 == 4 * HD */
    float acc = 0.0f;
#pragma unroll 8
    for (int p = 0; p < n; p++) acc = fmaf(S->S[g][p], __bfloat162float(S->u.kv.v[p][d]), acc);
    float *ws = a.att_ws + (((size_t)h * MAX_SPLITS + sp) * 4 + g) * AST;
    ws[d] = acc;
    if (d < 2) ws[HD + d] = S->ml[g][d];
    __syncthreads();
    if (stamp) g_att_ts[1] = lab_gtimer();
    if (threadIdx.x == 0) {
        unsigned old;
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(old) : "l"(a.att_cnt + h) : "memory");
        if (stamp) g_att_ts[2] = lab_gtimer();
        S->last = old == (unsigned)(n_sp - 1);
        if (S->last && !ATT_LSU) {
            asm volatile("fence.proxy.async.global;" ::: "memory");
            uint32_t bytes = (uint32_t)n_sp * 4 * AST * 4;
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
            bulk_g2s(q8_smem(S->u.ws), a.att_ws + (size_t)h * MAX_SPLITS * 4 * AST, bytes, bar);
        }
    }
    __syncthreads();
    if (!S->last) return;
    if (h == 0 && threadIdx.x == 0) g_att_ts[3] = lab_gtimer();
    if (ATT_LSU) {
        __threadfence(); /* thread 0's acquire, for the block's loads below */
        const float *w0 = a.att_ws + (size_t)h * MAX_SPLITS * 4 * AST;
        for (int i = threadIdx.x; i < n_sp * 4 * AST / 4; i += NW * 32)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(q8_smem(&S->u.ws[0][0][0] + 4 * i)), "l"(w0 + 4 * i) : "memory");
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
    } else {
        q8_wait(bar, (uint32_t)(uses & 1));
        uses++;
    }
    float M = -INFINITY;
    for (int s2 = 0; s2 < n_sp; s2++) M = fmaxf(M, S->u.ws[s2][g][HD]);
    float L = 0.0f, A = 0.0f;
    for (int s2 = 0; s2 < n_sp; s2++) {
        float f = __expf(S->u.ws[s2][g][HD] - M);
        L = fmaf(S->u.ws[s2][g][HD + 1], f, L);
        A = fmaf(S->u.ws[s2][g][d], f, A);
    }
    a.attn[(h * 4 + g) * HD + d] = __float2bfloat16(A / L);
    if (threadIdx.x == 0) a.att_cnt[h] = 0;
    if (h == 0 && threadIdx.x == 0) g_att_ts[4] = lab_gtimer();
    __syncthreads(); /* the merge's reads before the next item's copies */
}

/* ---------------------------------------------------------------- the tile epilogue */

static __device__ void tile_finish(const step_args &a, const gop &o, int tile, const float *parts,
                                   int lane)
{
    int g = lane >> 2;
    if ((lane & 3) != 0) return;
    float s0 = 0.0f, s1 = 0.0f;
    for (int j = 0; j < o.ks; j++) s0 += parts[j * 16 + g], s1 += parts[j * 16 + 8 + g];
    int r0 = tile * 16 + g;
    switch (o.kind) {
    case OP_QKV: a.qkv[r0] = __float2bfloat16(s0), a.qkv[r0 + 8] = __float2bfloat16(s1); break;
    case OP_GU: {
        float gv = __bfloat162float(__float2bfloat16(s0)), uv = __bfloat162float(__float2bfloat16(s1));
        a.act[tile * 8 + g] = __float2bfloat16(gv / (1.0f + __expf(-gv)) * uv);
        break;
    }
    case OP_LM:
        if (r0 < o.out) a.logits[r0] = s0;
        if (r0 + 8 < o.out) a.logits[r0 + 8] = s1;
        break;
    default:
        a.res[r0] = __ldcg(a.res + r0) + __bfloat162float(__float2bfloat16(s0));
        a.res[r0 + 8] = __ldcg(a.res + r0 + 8) + __bfloat162float(__float2bfloat16(s1));
    }
}

static __global__ void __launch_bounds__(NW * 32, 1) k_step(step_args a, uint4 kc)
{
    extern __shared__ __align__(128) unsigned char sm6[];
    __shared__ __align__(8) uint64_t bars[NW][S6];
    __shared__ float red[NW];
    __shared__ unsigned cnt[NW][LT];
    __shared__ float xsum[MAXK / 64];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint4 *ring = (uint4 *)sm6 + (size_t)warp * S6 * C6 * REC;
    bf16 *xs = (bf16 *)(sm6 + (size_t)NW * S6 * C6 * REC * 16);
    float *parts = (float *)(xs + MAXK); /* [NW groups max][LT][ks][16]: NW x LT x 16 floats */
    __shared__ __align__(8) uint64_t att_bar;
    int att_uses = 0;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(q8_smem(&att_bar)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    uint32_t ring0 = q8_smem(ring), bar0 = q8_smem(&bars[warp][0]);
    uint64_t pol = 0;
    if (EF) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    for (int i = threadIdx.x; i < NW * LT; i += blockDim.x) (&cnt[0][0])[i] = 0;
    if (lane == 0) {
        for (int i = 0; i < S6; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * i));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    int n_ops = 4 * a.n_layers + 1;
    cur6 c;
    start6(c, 0, warp);
    int64_t issued = 0, used = 0;
    if (lane == 0)
        for (int i = 0; i < S6; i++) issue6(c, n_ops, warp, ring0, bar0, issued, pol);
    int stamp = 0;
    for (int op = 0; op < n_ops; op++) {
        const gop &o = c_ops[op];
        int layer = op / 4;
        if (op > 0) lab_grid_barrier(a.ctr, (unsigned)(++stamp) * gridDim.x, NW * 32);
        bool clk = blockIdx.x == 0 && threadIdx.x == 0 && 2 * op + 2 <= LAB_MAX_OPS;
        if (clk) g_lab_ts[2 * op] = lab_gtimer();
        if (a.phases) {
            /* one op ahead: the next norm's weights, and (before qkv) this layer's K/V */
            if (blockIdx.x == 0 && warp == 0 && lane == 0 && o.kind != OP_LM) {
                int wi = o.kind == OP_QKV || o.kind == OP_O ? 2 * layer + 1 : 2 * layer + 2;
                prefetch_l2(a.norm_w + (size_t)wi * HID, HID * 2);
            }
            if (o.kind == OP_QKV && PF == 2) { /* the layer's K and V (contiguous) into L2, a line per thread */
                size_t bytes = (size_t)a.ctx * NKV * HD * 2, lines = (bytes + 127) / 128;
                size_t tid = (size_t)blockIdx.x * NW * 32 + threadIdx.x;
                const char *kb = (const char *)(a.kc + (size_t)layer * a.ctx * NKV * HD);
                const char *vb = (const char *)(a.vc + (size_t)layer * a.ctx * NKV * HD);
                for (size_t i = tid; i < 2 * lines; i += (size_t)gridDim.x * NW * 32)
                    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"((i < lines ? kb : vb) + (i % lines) * 128));
            }
            if (o.kind == OP_O) {
                int n2 = (a.ctx + SPL2 - 1) / SPL2;
                if (blockIdx.x == 0 && threadIdx.x == 0) g_att_ts[8] = lab_gtimer();
                for (int it = blockIdx.x; it < NKV * n2; it += gridDim.x)
                    att_item3(a, layer, it / n2, it % n2, n2, (att3_smem *)parts, q8_smem(&att_bar), att_uses);
                if (blockIdx.x == 0 && threadIdx.x == 0) g_att_ts[9] = lab_gtimer();
                lab_grid_barrier(a.ctr, (unsigned)(++stamp) * gridDim.x, NW * 32);
                if (blockIdx.x == 0 && threadIdx.x == 0) g_att_ts[10] = lab_gtimer();
                load_x(a.attn, HID, xs);
                if (blockIdx.x == 0 && threadIdx.x == 0) g_att_ts[11] = lab_gtimer();
            } else if (o.kind == OP_DOWN) {
                load_x(a.act, FF, xs);
            } else {
                int wi = o.kind == OP_QKV ? 2 * layer : o.kind == OP_GU ? 2 * layer + 1 : 2 * a.n_layers;
                norm_phase(a.res, a.norm_w + (size_t)wi * HID, xs, red);
            }
        } else {
            load_x(o.kind == OP_DOWN ? a.act : a.attn, o.in, xs);
        }
        if (clk) g_lab_ts[2 * op + 1] = lab_gtimer();
        int grp = warp >> o.lks, j = warp & (o.ks - 1);
        cur6 k;
        start6(k, op, warp);
        int li = 0;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (XS) { /* each group's sum of x, once per op */
            for (int G = warp; G < o.nG; G += NW) {
                float v = __bfloat162float(xs[64 * G + lane]) + __bfloat162float(xs[64 * G + 32 + lane]);
                v = tk_warp_sum(v);
                if (lane == 0) xsum[G] = v;
            }
            __syncthreads();
        }
        for (;;) {
            int64_t r;
            int G;
            int tile = k.tile;
            int ng = next6(k, r, G);
            if (ng == 0) break;
            int st = (int)(used % S6);
            q8_wait(bar0 + 8 * st, (uint32_t)(used / S6) & 1u);
            const uint4 *sp = ring + st * C6 * REC;
            if (ng == C6) { /* a full chunk (every chunk of the 8B shapes): no guards, the records' chains interleave */
                uint4 w[C6], xa[C6], xb[C6];
                uint2 sb[C6];
                float xg[C6];
#pragma unroll
                for (int jj = 0; jj < C6; jj++) { /* loads first */
                    w[jj] = sp[jj * REC + lane];
                    sb[jj] = ((const uint2 *)(sp + jj * REC + 32))[g];
                    const uint4 *xp = (const uint4 *)(xs + 64 * (G + jj) + 16 * t);
                    xa[jj] = xp[0], xb[jj] = xp[1];
                    xg[jj] = XS ? xsum[G + jj] : 0.0f;
                }
                if (EI) {
                    used++;
                    __syncwarp();
                    if (lane == 0) issue6(c, n_ops, warp, ring0, bar0, issued, pol);
                }
#pragma unroll
                for (int jj = 0; jj < C6; jj++) {
                    if (XS) q8_group_xs(w[jj], xa[jj], xb[jj], sb[jj], xg[jj], kc, acc);
                    else q8_group(w[jj], xa[jj], xb[jj], sb[jj], kc, acc);
                }
            } else { /* a short last chunk of a slice: the stage is read in the loop, then released */
                for (int jj = 0; jj < ng; jj++) {
                    uint4 w = sp[jj * REC + lane];
                    uint2 sb = ((const uint2 *)(sp + jj * REC + 32))[g];
                    const uint4 *xp = (const uint4 *)(xs + 64 * (G + jj) + 16 * t);
                    if (XS) q8_group_xs(w, xp[0], xp[1], sb, xsum[G + jj], kc, acc);
                    else q8_group(w, xp[0], xp[1], sb, kc, acc);
                }
                if (EI) {
                    used++;
                    __syncwarp();
                    if (lane == 0) issue6(c, n_ops, warp, ring0, bar0, issued, pol);
                }
            }
            if (!EI) {
                used++;
                __syncwarp();
                if (lane == 0) issue6(c, n_ops, warp, ring0, bar0, issued, pol);
            }
            if (k.tile != tile) { /* the warp's slice of this tile is done: local tile li */
                int i = li++;
                float *pt = parts + ((grp * LT + i % LT) * o.ks) * 16;
                if (t == 0) pt[j * 16 + g] = acc[0], pt[j * 16 + 8 + g] = acc[2];
                acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
                if (FIN == 3) continue;
                __syncwarp();
                unsigned old = 0;
                if (FIN == 0) {
                    old = o.ks - 1; /* timing only: every slice "finishes" its tile from its own part */
                } else if (FIN == 1) {
                    if (lane == 0) {
                        __threadfence_block();
                        old = atomicAdd(&cnt[grp][i % LT], 1u);
                        __threadfence_block();
                    }
                } else if (lane == 0) {
                    asm volatile("atom.add.acq_rel.cta.shared.u32 %0, [%1], 1;"
                                 : "=r"(old)
                                 : "r"(q8_smem(&cnt[grp][i % LT]))
                                 : "memory");
                }
                old = __shfl_sync(0xffffffffu, old, 0);
                __syncwarp();
                if ((int)old == o.ks - 1) {
                    tile_finish(a, o, tile, pt, lane);
                    if (lane == 0) cnt[grp][i % LT] = 0;
                }
            }
        }
        if (FIN == 3) { /* the block's tiles, one warp each, parts in warp order */
            __syncthreads();
            int per = NW >> o.lks;
            for (int idx = warp;; idx += NW) {
                int gi = idx % per, li2 = idx / per;
                int tile = blockIdx.x * per + gi + li2 * gridDim.x * per;
                if (li2 >= LT || tile >= o.tiles) break;
                tile_finish(a, o, tile, parts + ((gi * LT + li2) * o.ks) * 16, lane);
            }
        }
    }
    lab_grid_barrier(a.ctr, (unsigned)(++stamp) * gridDim.x, NW * 32);
    if (blockIdx.x == 0 && threadIdx.x == 0 && 2 * n_ops <= LAB_MAX_OPS) g_lab_ts[2 * n_ops] = lab_gtimer();
}

/* ---------------------------------------------------------------- host */

int main(int argc, char **argv)
{
    int layers = argc > 1 ? atoi(argv[1]) : 32, ctx = argc > 2 ? atoi(argv[2]) : 550;
    if (layers < 1 || layers > 64 || ctx < 1 || ctx > SPL2 * 16) {
        printf("layers 1..64, context 1..%d\n", SPL2 * 16);
        return 1;
    }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    double copy = copy_rate();
    struct { int kind, out, in, ks; } per_layer[] = {
        {OP_QKV, 6144, HID, KS_QKV}, {OP_O, HID, HID, KS_O}, {OP_GU, 2 * FF, HID, KS_GU}, {OP_DOWN, HID, FF, KS_DN}};
    std::vector<gop> host;
    size_t bytes = 0;
    auto add = [&](int kind, int out, int in, int ks, uint32_t seed) {
        gop o;
        o.kind = kind, o.in = in, o.out = out, o.nG = in / 64, o.tiles = (out + 15) / 16, o.ks = ks;
        o.lks = __builtin_ctz(ks);
        int units = sms * (NW / ks), lt = (o.tiles + units - 1) / units;
        if (lt > LT || o.nG % ks) {
            printf("op %d: %d local tiles > %d or nG %% ks\n", kind, lt, LT);
            exit(1);
        }
        size_t b = (size_t)o.tiles * o.nG * REC * 16;
        void *p;
        CK(cudaMalloc(&p, b));
        fill(p, b, seed, 0x3F7F3F7Fu, 0);
        o.rec = (const uint4 *)p;
        host.push_back(o);
        bytes += b;
    };
    for (int l = 0; l < layers; l++)
        for (auto &s : per_layer) add(s.kind, s.out, s.in, s.ks, 1000u * l + s.kind);
    add(OP_LM, 128256, HID, KS_LM, 99999u);
    step_args a = {};
    CK(cudaMemcpyToSymbol(c_ops, host.data(), host.size() * sizeof(gop)));
    a.n_layers = layers, a.ctx = ctx;
    size_t kvn = (size_t)layers * ctx * NKV * HD;
    CK(cudaMalloc(&a.res, HID * 4));
    CK(cudaMalloc((void **)&a.norm_w, (size_t)(2 * layers + 1) * HID * 2));
    CK(cudaMalloc(&a.qkv, 6144 * 2));
    CK(cudaMalloc(&a.attn, HID * 2));
    CK(cudaMalloc(&a.act, FF * 2));
    CK(cudaMalloc(&a.logits, 128256 * 4));
    CK(cudaMalloc((void **)&a.kc, kvn * 2));
    CK(cudaMalloc((void **)&a.vc, kvn * 2));
    CK(cudaMalloc(&a.att_ws, (size_t)NKV * MAX_SPLITS * 4 * AST * 4));
    CK(cudaMalloc(&a.att_cnt, NKV * 4));
    CK(cudaMalloc(&a.ctr, 4));
    fill((void *)a.norm_w, (size_t)(2 * layers + 1) * HID * 2, 5, 0x007F007Fu, 0x3F803F80u);
    fill((void *)a.kc, kvn * 2, 6, 0x807F807Fu, 0x3E003E00u);
    fill((void *)a.vc, kvn * 2, 8, 0x807F807Fu, 0x3E003E00u);
    fill(a.qkv, 6144 * 2, 9, 0x807F807Fu, 0x3F003F00u);
    fill(a.attn, HID * 2, 10, 0x807F807Fu, 0x3F003F00u);
    fill(a.act, FF * 2, 11, 0x807F807Fu, 0x3F003F00u);
    CK(cudaMemset(a.att_cnt, 0, NKV * 4));
    size_t parts_b = std::max(std::max((size_t)NW * LT * 16 * 4, (size_t)NW * 4 * HD * 4), sizeof(att3_smem));
    size_t smem = (size_t)NW * S6 * C6 * REC * 16 + MAXK * 2 + parts_b;
    CK(cudaFuncSetAttribute(k_step, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    std::vector<float> res0(HID);
    for (int i = 0; i < HID; i++) res0[i] = (float)((i * 7919) % 200 - 100) / 100.0f;
    printf("copy %.0f GB/s; %d layers, context %d, S%d C%d EF%d KS %d %d %d %d %d FIN%d XS%d EI%d PF%d, %.3f GB of records (floor %.1f us = "
           "%.0f tok/s), %d SMs, %zu B shared\n",
           copy, layers, ctx, S6, C6, EF, KS_QKV, KS_O, KS_GU, KS_DN, KS_LM, FIN, XS, EI, PF, bytes / 1e9, bytes / copy / 1e3, copy * 1e9 / bytes, sms,
           smem);
    int n_ops = (int)host.size();
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int phases = 1; phases >= 0; phases--) {
        a.phases = phases;
        std::vector<float> v;
        for (int rep = 0; rep < 6; rep++) {
            CK(cudaMemcpy(a.res, res0.data(), HID * 4, cudaMemcpyHostToDevice));
            CK(cudaMemset(a.ctr, 0, 4));
            void *args[] = {(void *)&a, (void *)&KC};
            CK(cudaEventRecord(e0));
            CK(cudaLaunchCooperativeKernel((const void *)k_step, dim3(sms), dim3(NW * 32), args, smem, 0));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep) v.push_back(ms);
        }
        std::sort(v.begin(), v.end());
        double us = v[v.size() / 2] * 1e3;
        std::vector<float> lg = get(a.logits, 128256);
        int bad = 0;
        for (float x : lg) bad += !std::isfinite(x);
        printf("%-28s %9.1f us = %6.1f tok/s = %5.1f%% of the floor%s\n",
               phases ? "step (GEMVs + phases)" : "GEMVs only (phases skipped)", us, 1e6 / us,
               100.0 * bytes / copy / 1e3 / us, bad ? "  (NON-FINITE LOGITS)" : "");
        unsigned long long ts[LAB_MAX_OPS + 1];
        CK(cudaMemcpyFromSymbol(ts, g_lab_ts, sizeof ts));
        if (phases) {
            unsigned long long at[16];
            CK(cudaMemcpyFromSymbol(at, g_att_ts, sizeof at));
            printf("  attention item (0, 0), from its start: rows in %.2f us\n", (at[5] - at[0]) / 1e3);
            printf("  attention phase, block 0: items done %.2f us, barrier passed %.2f, x loaded %.2f (item start at %.2f)\n",
                   (at[9] - at[8]) / 1e3, (at[10] - at[8]) / 1e3, (at[11] - at[8]) / 1e3, ((long long)at[0] - (long long)at[8]) / 1e3);
            printf("  attention (head 0, last layer): partial %.2f us, counted in +%.2f, merge starts at %.2f, ends at %.2f\n",
                   (at[1] - at[0]) / 1e3, (at[2] - at[1]) / 1e3, ((long long)at[3] - (long long)at[0]) / 1e3,
                   ((long long)at[4] - (long long)at[0]) / 1e3);
        }
        if (2 * n_ops > LAB_MAX_OPS) continue;
        double ph[5] = {0}, gm[5] = {0};
        int cnt[5] = {0};
        for (int o = 0; o < n_ops; o++) {
            int k = host[o].kind;
            ph[k] += (ts[2 * o + 1] - ts[2 * o]) / 1e3, gm[k] += (ts[2 * o + 2] - ts[2 * o + 1]) / 1e3;
            cnt[k]++;
        }
        const char *kind[5] = {"qkv", "o", "gate_up", "down", "lm_head"};
        for (int k = 0; k < 5; k++)
            printf("  %-8s phase before %6.2f us, GEMV %7.2f us (copy %.2f)\n", kind[k], ph[k] / cnt[k],
                   gm[k] / cnt[k],
                   (double)host[k == 4 ? n_ops - 1 : k].tiles * host[k == 4 ? n_ops - 1 : k].nG * REC * 16 /
                       copy / 1e3);
    }
    printf("==== summary ==== see the lines above (the 70%% target: >= 70%% of the floor)\n");
    return 0;
}
