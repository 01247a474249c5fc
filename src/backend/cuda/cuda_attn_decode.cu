/*
 * cuda_attn_decode.cu — attention for sequences with one query token
 * (flash-decoding) over the paged KV cache, in one launch.
 *
 * k_attn_decode: one block per (split, kv head, sequence). The block takes
 * the G = n_heads / n_kv_heads query heads that share the kv head (so each
 * K/V row is read once for all of them) and the KV positions
 * [split * len, (split + 1) * len) of its sequence, clipped to the causal
 * range and the sliding window. Its W warps (8 where their states fit in
 * shared memory, G * D <= 1024, else 4: dec_cfg) take U tokens each in turn
 * (the next U rows are loaded while the current ones are computed; the
 * first U are loaded for the query position L - 1 while the position is
 * still on its way, and reloaded in the rare case it is another; the block
 * copies the first DEC_BT block-table entries to shared memory first, so a
 * row's slot there is a shared load); lane l
 * holds dims [l * D/32, (l + 1) * D/32) of q, k, v, so a K or V row is one
 * coalesced warp load. Scores live in log2 units (scale * log2 e folded
 * into q) for exp2f. The warps' online-softmax states are merged in shared
 * memory in warp order.
 *
 * Split length (split_len_of): a sequence of L positions takes
 * n = max(min(n_target, cdiv(L, min_len)), cdiv(L, max_len)) splits of
 * len = cdiv(L, n) positions, computed on the device from the sequence's
 * own length, so a captured graph spreads a growing context over its
 * blocks. The glue picks (min_len, max_len, n_target) and launches at least
 * the n of the longest possible sequence; blocks past a sequence's n exit.
 *
 * A sequence with one split writes its BF16 output row directly. Otherwise,
 * with at most DEC_CLUSTER_MAX blocks per (kv head, sequence) and short
 * splits (decode_launch), those blocks are one thread-block cluster: each
 * keeps its (m, l, unnormalised acc) per head in shared memory, and after a
 * cluster barrier the cluster's threads merge the live splits in
 * split-index order through distributed shared memory (a second barrier
 * keeps the partials alive until read). Otherwise each block writes its
 * partials to the workspace, and the last block of
 * its (kv head, sequence) to finish (an atomic counter; the last block
 * resets it to 0, so the next launch and graph replays start from zero)
 * merges them in split-index order. Both merges run the same arithmetic
 * (merge_splits), so the result depends only on the sequence and its split
 * length: never on the path, the batch, or which block came last.
 *
 * Workspace (tk_attn_decode_ws_bytes): DEC_CNT uint32 counters (zero at the
 * context's creation, [S, n_kv_heads] used), then floats m, l:
 * [S, H, n_splits] and acc: [S, H, n_splits, D] (16-byte aligned).
 * Depends on cuda_common.cuh.
 */
#include "backend/cuda/cuda_common.cuh"

#include <cooperative_groups.h>
#include <limits.h>

namespace cg = cooperative_groups;

#define DEC_CNT 65536 /* counters at the workspace start: n_seqs * n_kv_heads at most */
#define LOG2E 1.4426950408889634f

/* The split rule of one launch (see the header comment). */
struct dec_rule {
    int min_len, max_len, n_target;
};

/* Positions per split of a sequence of L positions, with n_splits blocks
 * launched per sequence (never more splits than that). */
static __device__ __forceinline__ int split_len_of(int L, struct dec_rule r, int n_splits)
{
    int n = min(r.n_target, (int)tk_cdiv(L, r.min_len));
    n = max(n, (int)tk_cdiv(L, r.max_len));
    n = max(1, min(n, n_splits));
    return max(1, (int)tk_cdiv(L, n));
}

/* Workspace views for a launch. */
struct dec_ws {
    unsigned *cnt;
    float *m, *l, *acc;
};

static __host__ __device__ __forceinline__ int64_t dec_acc_off(int64_t shn)
{
    return DEC_CNT + (2 * shn + 3) / 4 * 4;
}

static __device__ __forceinline__ struct dec_ws dec_views(float *ws, int64_t shn)
{
    struct dec_ws w = {(unsigned *)ws, ws + DEC_CNT, ws + DEC_CNT + shn, ws + dec_acc_off(shn)};
    return w;
}

/* EPL / 2 words of EPL consecutive bf16 (EPL = 2, 4, 8), unconverted. */
template <int EPL> static __device__ __forceinline__ void ld_raw(const bf16 *p, uint32_t *w)
{
    if (EPL == 8) {
        uint4 u = *(const uint4 *)p;
        w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    } else if (EPL == 4) {
        uint2 u = *(const uint2 *)p;
        w[0] = u.x, w[1] = u.y;
    } else {
        w[0] = *(const uint32_t *)p;
    }
}

/* Element e of a raw row. */
static __device__ __forceinline__ float raw_f(const uint32_t *w, int e)
{
    return __uint_as_float(e & 1 ? w[e >> 1] & 0xffff0000u : w[e >> 1] << 16);
}

/* ld_raw for K/V rows: through the non-coherent path (the cache is not
 * written while the kernel runs), and volatile, so the loads issued
 * speculatively before the query's position is known stay where they are. */
template <int EPL> static __device__ __forceinline__ void ld_kv_raw(const bf16 *p, uint32_t *w)
{
    if (EPL == 8)
        asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                     : "l"(p));
    else if (EPL == 4)
        asm volatile("ld.global.nc.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    else
        asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
}

/* Block-table entries every block copies to shared memory as it starts: a
 * K/V row in the first DEC_BT * block_size positions then takes its slot
 * from there. (Meant to load beside the sequence's length; as written the
 * copy loop's stores wait for its loads before the length's loads issue, so
 * it saves no round trip yet: load the entry into a register after the
 * length's loads, then store it.) */
#define DEC_BT 256

/* Loads the U K and V rows from position j0 on (clamped to k1 - 1). */
template <int EPL, int U>
static __device__ __forceinline__ void ld_kv(const struct tk_attn_args &a, const int32_t *bt,
                                             const int *sbt, int g, int lane, int j0, int k1,
                                             uint32_t (&kr)[U][EPL / 2], uint32_t (&vr)[U][EPL / 2])
{
    constexpr int D = EPL * 32;
    const bf16 *kc = (const bf16 *)a.k_cache, *vc = (const bf16 *)a.v_cache;
#pragma unroll
    for (int u = 0; u < U; u++) {
        int j = j0 + u < k1 ? j0 + u : k1 - 1; /* the same for the whole warp */
        int jb = j / a.block_size;
        int blk = jb < DEC_BT ? sbt[jb] : bt[jb];
        int64_t slot = (int64_t)blk * a.block_size + j % a.block_size;
        int64_t off = (slot * a.n_kv_heads + g) * D + lane * EPL;
        ld_kv_raw<EPL>(kc + off, kr[u]);
        ld_kv_raw<EPL>(vc + off, vr[u]);
    }
}

/* One warp's online softmax over its tokens of [k0, k1): U rows per step
 * (the first step's already in kr / vr), the next step's rows loaded before
 * the current ones are used. */
template <int D, int GM, int U, int W>
static __device__ __forceinline__ void
warp_attend(const struct tk_attn_args &a, const int32_t *bt, const int *sbt, int g, int lane,
            int warp, int k0, int k1, uint32_t (&kr)[U][D / 64], uint32_t (&vr)[U][D / 64],
            const float (&qf)[GM][D / 32], float (&m)[GM], float (&l)[GM], float (&acc)[GM][D / 32])
{
    constexpr int EPL = D / 32, STEP = W * U;
    for (int j0 = k0 + warp * U; j0 < k1; j0 += STEP) {
        uint32_t kn[U][EPL / 2], vn[U][EPL / 2];
        if (j0 + STEP < k1) ld_kv<EPL, U>(a, bt, sbt, g, lane, j0 + STEP, k1, kn, vn);
#pragma unroll
        for (int h = 0; h < GM; h++) {
            float sc[U];
            float mx = m[h];
#pragma unroll
            for (int u = 0; u < U; u++) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; e++) d = fmaf(qf[h][e], raw_f(kr[u], e), d);
                d = tk_warp_sum(d);
                if (a.softcap > 0.0f) d = a.softcap * tanhf(d / a.softcap) * LOG2E;
                sc[u] = j0 + u < k1 ? d : -INFINITY;
                mx = fmaxf(mx, sc[u]);
            }
            float alpha = exp2f(m[h] - mx); /* m = -inf first: 0 */
            m[h] = mx;
            l[h] *= alpha;
#pragma unroll
            for (int e = 0; e < EPL; e++) acc[h][e] *= alpha;
#pragma unroll
            for (int u = 0; u < U; u++) {
                float p = exp2f(sc[u] - mx);
                l[h] += p;
#pragma unroll
                for (int e = 0; e < EPL; e++) acc[h][e] = fmaf(p, raw_f(vr[u], e), acc[h][e]);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int w = 0; w < EPL / 2; w++) kr[u][w] = kn[u][w], vr[u][w] = vn[u][w];
    }
}

/* Merges a (kv head, sequence)'s n_live split partials in index order into
 * the BF16 output, four dims per thread (items i0, i0 + istride, ... of
 * G * D / 4), MERGE_CHUNK splits' partials loaded at a time (online: the
 * running max moves once per chunk). ld(h, k, d, m, l, acc4) loads split
 * k's partial of head h (dims d..d+3): from the workspace (the last block to
 * finish) or from the cluster's shared memory; the arithmetic is the same,
 * so both give the same bits. */
#define MERGE_CHUNK 8
template <int D, typename LD>
static __device__ __forceinline__ void merge_splits(const struct tk_attn_args &a, LD ld, int n_live,
                                                    int64_t orow, int G, int i0, int istride)
{
    for (int i = i0 * 4; i < G * D; i += istride * 4) {
        int h = i / D, d = i % D;
        float M = -INFINITY, sl = 0.0f, sa[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int k0 = 0; k0 < n_live; k0 += MERGE_CHUNK) {
            float mk[MERGE_CHUNK], lk[MERGE_CHUNK];
            float4 ak[MERGE_CHUNK];
#pragma unroll
            for (int u = 0; u < MERGE_CHUNK; u++) {
                mk[u] = -INFINITY, lk[u] = 0.0f, ak[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (k0 + u < n_live) ld(h, k0 + u, d, mk[u], lk[u], ak[u]);
            }
            float Mc = M;
#pragma unroll
            for (int u = 0; u < MERGE_CHUNK; u++) Mc = fmaxf(Mc, mk[u]);
            if (Mc == -INFINITY) continue;
            float c = exp2f(M - Mc); /* M = -inf first: 0 */
            sl *= c;
#pragma unroll
            for (int e = 0; e < 4; e++) sa[e] *= c;
#pragma unroll
            for (int u = 0; u < MERGE_CHUNK; u++) {
                float f = exp2f(mk[u] - Mc);
                sl += lk[u] * f;
                sa[0] += ak[u].x * f, sa[1] += ak[u].y * f, sa[2] += ak[u].z * f;
                sa[3] += ak[u].w * f;
            }
            M = Mc;
        }
        float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (M != -INFINITY)
#pragma unroll
            for (int e = 0; e < 4; e++) o[e] = sa[e] / sl;
        __nv_bfloat162 lo = __floats2bfloat162_rn(o[0], o[1]),
                       hi = __floats2bfloat162_rn(o[2], o[3]);
        uint2 u = {*(uint32_t *)&lo, *(uint32_t *)&hi};
        *(uint2 *)((bf16 *)a.out + orow + (int64_t)h * D + d) = u;
    }
}

/* A block's query heads (qf, times qscale) and its warp's first K/V rows
 * (kr, vr), loaded for the usual query position L - 1 while the position
 * itself loads; any other position reloads them. [k0, k1): the block's
 * positions for the query. */
template <int D, int GM, int U>
static __device__ __forceinline__ void
dec_start(const struct tk_attn_args &a, const int32_t *bt, int g, int sp, int len, int qs, int L,
          int &k0, int &k1, float (&qf)[GM][D / 32], uint32_t (&kr)[U][D / 64],
          uint32_t (&vr)[U][D / 64], const int *sbt)
{
    constexpr int EPL = D / 32;
    int G = a.n_heads / a.n_kv_heads;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, win = a.sliding_window;
    k0 = max(win > 0 ? max(0, L - win) : 0, sp * len), k1 = min(L, (sp + 1) * len);
    if (k0 + warp * U < k1) ld_kv<EPL, U>(a, bt, sbt, g, lane, k0 + warp * U, k1, kr, vr);
    int pos = a.positions[qs];
    float qscale = a.softcap > 0.0f ? a.scale : a.scale * LOG2E;
    if (pos != L - 1) {
        int lo = win > 0 ? max(0, pos - win + 1) : 0;
        k0 = max(lo, sp * len), k1 = min(min(pos + 1, L), (sp + 1) * len);
        if (k0 + warp * U < k1) ld_kv<EPL, U>(a, bt, sbt, g, lane, k0 + warp * U, k1, kr, vr);
    }
#pragma unroll
    for (int h = 0; h < GM; h++) {
        int hh = h < G ? h : 0;
        const bf16 *qp = (const bf16 *)a.q + (int64_t)qs * a.q_stride + (int64_t)(g * G + hh) * D +
                         lane * EPL;
        uint32_t w[EPL / 2];
        ld_raw<EPL>(qp, w);
#pragma unroll
        for (int e = 0; e < EPL; e++) qf[h][e] = raw_f(w, e) * qscale;
    }
}

/* Warps per block: 8 where their states fit the 48 KB of static shared
 * memory (G * D <= 1024: the 8B shape's 4 x 128), else 4; U rows per warp
 * step. */
template <int D, int GM> struct dec_cfg {
    static constexpr int W = GM * D <= 1024 ? 8 : 4;
    static constexpr int U = D / 32 * GM <= 32 ? 8 : 4;
};

/* One block's split: the online softmax of its W warps over [k0, k1),
 * merged in warp order. One split (n_live == 1): the output row itself.
 * Otherwise the partial (m, l, unnormalised acc) per head goes to this
 * block's shared memory (CL: s_acc[0], s_pm, s_pl, read by the cluster) or
 * to the workspace. */
template <int D, int GM, int W, bool CL>
static __device__ __forceinline__ void
dec_split(const struct tk_attn_args &a, int n_splits, float *ws, const int32_t *bt, int s, int g,
          int sp, int qs, int L, int len, int n_live, const int *sbt, float (*s_acc)[GM][D],
          float *s_pm, float *s_pl)
{
    constexpr int EPL = D / 32, U = dec_cfg<D, GM>::U;
    __shared__ float s_m[W][GM], s_l[W][GM];
    int G = a.n_heads / a.n_kv_heads;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int k0, k1;
    float qf[GM][EPL];
    uint32_t kr[U][EPL / 2], vr[U][EPL / 2];
    __syncthreads(); /* sbt is written */
    dec_start<D, GM, U>(a, bt, g, sp, len, qs, L, k0, k1, qf, kr, vr, sbt);
    float m[GM], l[GM], acc[GM][EPL];
#pragma unroll
    for (int h = 0; h < GM; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[h][e] = 0.0f;
    }
    warp_attend<D, GM, U, W>(a, bt, sbt, g, lane, warp, k0, k1, kr, vr, qf, m, l, acc);
    /* Merge the warps' states in warp order. */
#pragma unroll
    for (int h = 0; h < GM; h++) {
#pragma unroll
        for (int e = 0; e < EPL; e++) s_acc[warp][h][lane * EPL + e] = acc[h][e];
        if (lane == 0) {
            s_m[warp][h] = m[h];
            s_l[warp][h] = l[h];
        }
    }
    __syncthreads();
    int H = a.n_heads;
    struct dec_ws w = dec_views(ws, (int64_t)a.n_seqs * H * n_splits);
    int64_t base = ((int64_t)s * H + g * G) * n_splits; /* + h * n_splits + split */
    int64_t orow = (int64_t)qs * a.out_stride + (int64_t)g * G * D;
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        int h = i / D, d = i % D;
        float M = -INFINITY;
        for (int v = 0; v < W; v++) M = fmaxf(M, s_m[v][h]);
        float Ms = M == -INFINITY ? 0.0f : M;
        float sl = 0.0f, sa = 0.0f;
        for (int v = 0; v < W; v++) {
            float f = exp2f(s_m[v][h] - Ms);
            sl += s_l[v][h] * f;
            sa += s_acc[v][h][d] * f;
        }
        if (n_live == 1) { /* the whole sequence: the output row itself */
            ((bf16 *)a.out)[orow + i] = __float2bfloat16(M == -INFINITY ? 0.0f : sa / sl);
            continue;
        }
        if (CL) { /* only this thread touches element (h, d) of s_acc */
            s_acc[0][h][d] = sa;
            if (d == 0) s_pm[h] = M, s_pl[h] = sl;
            continue;
        }
        int64_t idx = base + (int64_t)h * n_splits + sp;
        w.acc[idx * D + d] = sa;
        if (d == 0) {
            w.m[idx] = M;
            w.l[idx] = sl;
        }
    }
}

/* Blocks per (kv head, sequence) up to which they may form one thread-block
 * cluster and merge through distributed shared memory (no workspace, no
 * counter); more splits take the workspace and the last block. Clusters
 * only where a split of the launch's longest sequence (max_seq_len) is at
 * most one step of its block (W * U rows: 64 at the 8B shape): with longer
 * splits, the H200 ran a 16-block cluster (placed within one GPC) slower
 * than the same split merged through the workspace (docs/perf/decode.md,
 * 2026-11-30). */
#define DEC_CLUSTER_MAX 16

template <int D, int GM, int W, bool CL>
static __global__ void __launch_bounds__(W * 32, W == 8 ? 2 : 1)
    k_attn_decode(struct tk_attn_args a, struct dec_rule rule, int n_splits, float *ws)
{
    __shared__ __align__(16) float s_acc[W][GM][D];
    __shared__ float s_pm[GM], s_pl[GM];
    __shared__ int s_bt[DEC_BT];
    __shared__ int s_last;
    tk_pdl_wait(); /* PDL (cuda_common.cuh): nothing is touched before this */
    tk_pdl_launch();
    int s = blockIdx.z, g = blockIdx.y, sp = blockIdx.x;
    const int32_t *bt = a.block_tables + (int64_t)s * a.max_blocks_per_seq;
    for (int i = threadIdx.x; i < DEC_BT && i < a.max_blocks_per_seq; i += blockDim.x)
        s_bt[i] = bt[i]; /* read after dec_split's barrier */
    int qs = a.query_start[s], qe = a.query_start[s + 1], L = a.seq_lens[s];
    if (qe - qs != 1) return; /* the same for the whole cluster */
    int len = split_len_of(L, rule, n_splits);
    int n_live = (int)tk_cdiv(L, len);
    if (sp < n_live) /* the merge reads only live splits */
        dec_split<D, GM, W, CL>(a, n_splits, ws, bt, s, g, sp, qs, L, len, n_live, s_bt, s_acc,
                                s_pm, s_pl);
    if (n_live <= 1) return; /* the same for the whole cluster */
    int G = a.n_heads / a.n_kv_heads;
    int64_t orow = (int64_t)qs * a.out_stride + (int64_t)g * G * D;
    if (CL) { /* every block of the cluster reaches both barriers */
        cg::cluster_group cl = cg::this_cluster();
        cl.sync(); /* every live block's partial is in its shared memory */
        auto ld = [&](int h, int k, int d, float &m, float &l, float4 &acc) {
            m = *cl.map_shared_rank(&s_pm[h], k);
            l = *cl.map_shared_rank(&s_pl[h], k);
            acc = *(const float4 *)cl.map_shared_rank(&s_acc[0][h][d], k);
        };
        merge_splits<D>(a, ld, n_live, orow, G, sp * blockDim.x + threadIdx.x,
                        n_splits * blockDim.x);
        cl.sync(); /* the partials live until every block has read them */
        return;
    }
    if (sp >= n_live) return;
    /* Publish the partials, then count this split in (threadFenceReduction). */
    __threadfence();
    __syncthreads();
    struct dec_ws w = dec_views(ws, (int64_t)a.n_seqs * a.n_heads * n_splits);
    unsigned *cnt = w.cnt + (int64_t)s * a.n_kv_heads + g;
    if (threadIdx.x == 0) s_last = atomicAdd(cnt, 1u) == (unsigned)(n_live - 1);
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (threadIdx.x == 0) *cnt = 0; /* every split has counted in: ready for the next launch */
    int64_t base = ((int64_t)s * a.n_heads + g * G) * n_splits;
    auto ld = [&](int h, int k, int d, float &m, float &l, float4 &acc) {
        int64_t b = base + (int64_t)h * n_splits + k;
        m = __ldcg(w.m + b);
        l = __ldcg(w.l + b);
        acc = __ldcg((const float4 *)(w.acc + b * D + d));
    };
    merge_splits<D>(a, ld, n_live, orow, G, threadIdx.x, blockDim.x);
}

extern "C" size_t tk_attn_decode_ws_bytes(const struct tk_attn_args *a, int n_splits)
{
    int64_t shn = (int64_t)a->n_seqs * a->n_heads * n_splits;
    return (size_t)(dec_acc_off(shn) + shn * a->head_dim) * sizeof(float);
}

/* kernel<<<grid, block, 0, st>>>(args...) as tk_launch does it (PDL), in
 * clusters of cl blocks along x when cl > 1. */
template <typename... KArgs, typename... Args>
static cudaError_t dec_launch_ex(void (*kernel)(KArgs...), dim3 grid, int threads, int cl,
                                 cudaStream_t st, Args &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3((unsigned)threads);
    cfg.stream = st;
    cudaLaunchAttribute attr[2];
    int n = 0;
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
    if (cl > 1) {
        if (cl > 8) { /* non-portable cluster sizes must be allowed per kernel */
            cudaError_t e =
                cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
            if (e != cudaSuccess) return e;
        }
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = (unsigned)cl;
        attr[n].val.clusterDim.y = 1;
        attr[n++].val.clusterDim.z = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = (unsigned)n;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

/* One cluster per (kv head, sequence) where 1 < n_splits <= its size
 * limit (DEC_CLUSTER_MAX, and 1 where a split is longer than one step of
 * the block). */
template <int D, int GM>
static cudaError_t decode_launch(cudaStream_t st, const struct tk_attn_args *a,
                                 struct dec_rule rule, int n_splits, float *ws)
{
    constexpr int W = dec_cfg<D, GM>::W, STEP = W * dec_cfg<D, GM>::U;
    int64_t L = a->max_seq_len > 0 ? a->max_seq_len : 1;
    int cl_max = tk_cdiv(L, n_splits) <= STEP ? DEC_CLUSTER_MAX : 1;
    dim3 grid((unsigned)n_splits, (unsigned)a->n_kv_heads, (unsigned)a->n_seqs);
    if (n_splits > 1 && n_splits <= cl_max && n_splits <= DEC_CLUSTER_MAX)
        return dec_launch_ex(k_attn_decode<D, GM, W, true>, grid, W * 32, n_splits, st, *a, rule,
                             n_splits, ws);
    return dec_launch_ex(k_attn_decode<D, GM, W, false>, grid, W * 32, 1, st, *a, rule, n_splits,
                         ws);
}

template <int D>
static cudaError_t decode_d(cudaStream_t st, const struct tk_attn_args *a, struct dec_rule rule,
                            int n_splits, float *ws)
{
    int G = a->n_heads / a->n_kv_heads;
    if (G <= 1) return decode_launch<D, 1>(st, a, rule, n_splits, ws);
    if (G <= 2) return decode_launch<D, 2>(st, a, rule, n_splits, ws);
    if (G <= 4) return decode_launch<D, 4>(st, a, rule, n_splits, ws);
    if (G <= 8) return decode_launch<D, 8>(st, a, rule, n_splits, ws);
    if (D <= 128 && G <= 16) return decode_launch<D, D <= 128 ? 16 : 8>(st, a, rule, n_splits, ws);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t tk_attn_decode(cudaStream_t st, const struct tk_attn_args *a, int min_len,
                                      int max_len, int n_target, int n_splits, float *ws)
{
    if (a->n_seqs <= 0 || n_splits <= 0) return cudaSuccess;
    if (min_len < 1 || max_len < 1 || n_target < 1 ||
        (int64_t)a->n_seqs * a->n_kv_heads > DEC_CNT)
        return cudaErrorInvalidValue;
    struct dec_rule rule = {min_len, max_len, n_target};
    switch (a->head_dim) {
    case 64: return decode_d<64>(st, a, rule, n_splits, ws);
    case 128: return decode_d<128>(st, a, rule, n_splits, ws);
    case 256: return decode_d<256>(st, a, rule, n_splits, ws);
    default: return cudaErrorInvalidValue;
    }
}
