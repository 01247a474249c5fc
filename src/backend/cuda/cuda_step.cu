/*
 * cuda_step.cu — a whole decode step of a llama-family model with 4-bit
 * (MLX affine, group 64) weights as ONE persistent kernel: one block of 16
 * warps per SM, the weights streamed by per-warp rings of cp.async.bulk
 * copies that run ahead across ops and phases (weights never depend on
 * activations), and no grid barrier: each phase hands its output on in LL
 * lines (data and a per-launch flag in one 16-byte store, ll_put) that the
 * consumers poll, so a dependency costs one L2 round trip. Why: launched op
 * by op the step's GEMVs reach only ~55% of the copy rate and every one of
 * its ~230 kernel boundaries costs microseconds (docs/perf/quantized.md has the
 * labs and the measurements). Host side: cuda_step.c.
 *
 * Weights: each linear is repacked at load (cuda_step_repack.cu, which has
 * the nibble map) into records of one (16-row tile, 64-k group) each, in
 * the order the warps read them.
 *
 * A record's arithmetic (st_group1, cuda_step.cuh): the nibbles become f16
 * 1024 + q or 1024 + 16 q by one lop3 each (one shift per word), x is f16
 * (exact for bf16 values up to 65504: a larger one makes the op store x
 * times 2^-e and scale its sums back), 4 f16 MMAs, and per group two sums
 * of x made once per op where x is written. Work per op: a tile belongs to
 * a group of KS warps of one block (KS chosen on the host so the op
 * balances over the grid; round r deals tiles (r x groups + g) x grid + b
 * to group g of block b, so an op with fewer tiles than groups leaves one
 * group of several blocks idle, never a whole block); warp j of the group
 * takes the tile's j-th contiguous slice of groups and keeps its sums in
 * registers; after the op's chunks a block barrier, and the block's warps
 * add each tile's slices in warp order and run the op's epilogue.
 * Deterministic: no atomics in any sum. Phases (per layer): RMSNorm of the
 * residual into every block's shared x (the rows the block's o / down
 * epilogue adds to kept in its stash); qkv GEMV; attention (items (kv head,
 * split) on whole blocks: q roped, the new token's k roped and stored with
 * v at its cache slot by the split that holds it, online softmax in passes
 * of 64 positions with q . k and p . v as bf16 MMAs (p split into bf16 high
 * and low parts), the last split of a head merging the others' partial sums
 * in split order); o GEMV adding into the residual; norm; gate_up GEMV with
 * silu * up; down GEMV adding into the residual; then the final norm and
 * the lm_head GEMV into F32 logits.
 * Depends on cuda_common.cuh, cuda_qmma.cuh, cuda_rope.cuh, cuda_step.cuh,
 * cuda_step_ll.cuh (the LL lines), cuda_step_att.cuh (the attention item,
 * a section of this file), cuda_step.h.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_qmma.cuh"
#include "backend/cuda/cuda_rope.cuh"
#include "backend/cuda/cuda_step.cuh"
#include "backend/cuda/cuda_step.h"
#include "backend/cuda/cuda_step_ll.cuh"

#define ST_NW         TK_STEP_NW
#define ST_S          4                        /* ring stages per warp */
#define ST_C          TK_STEP_CHUNK            /* records per chunk */
#define ST_REC        (TK_STEP_REC_BYTES / 16) /* uint4 per record */
#define ST_LT         TK_STEP_LT
#define ST_SPL        64 /* K/V rows per attention pass */
#define ST_RING_BYTES (ST_NW * ST_S * ST_C * ST_REC * 16)
#define ST_X_BYTES    (TK_STEP_MAX_K * 2)
#define ST_ATT_PER                                                                                 \
    (TK_STEP_MAX_G * TK_STEP_MAX_HD / (ST_NW * 32)) /* (q head, dim) pairs per thread */

enum { ST_QKV, ST_O, ST_GU, ST_DOWN, ST_LM };

/* The attention scratch of a block (aliases the GEMV tile parts). */
struct st_att {
    bf16 q[TK_STEP_MAX_G * TK_STEP_MAX_HD];
    bf16 knew[TK_STEP_MAX_HD], vnew[TK_STEP_MAX_HD]; /* the new token's raw k and v of the head */
    /* q roped (bf16 rows of hd + 8), then the second k-half's q . k sums;
     * the one-split output's [G][hd] sums after the passes */
    float qf[TK_STEP_MAX_G * (TK_STEP_MAX_HD + 8) / 2 + TK_STEP_MAX_G * ST_SPL];
    /* rows of ST_SPL + 8: p . v's loads (a float pair of every head's row
     * per lane group) fall in different banks (with ST_SPL, 4-way conflicts) */
    float s[TK_STEP_MAX_G][ST_SPL + 8];
    float m[TK_STEP_MAX_G], l[TK_STEP_MAX_G], fac[TK_STEP_MAX_G];
    union __align__(16)
    {
        struct {
            bf16 k[ST_SPL][TK_STEP_MAX_HD + 8]; /* + 8: conflict-free ldmatrix rows */
            bf16 v[ST_SPL][TK_STEP_MAX_HD + 8];
        } kv;
        float ws[1]; /* the merge: n_splits x G x (hd + 4) floats */
    }
    u;
};

/* The step's constants, read once per launch into shared memory (a
 * global load after the q arrives would be one more L2 round trip), and
 * the RoPE rotation of its position (the same in every layer). */
struct st_consts {
    int ctx, pos, spl, n_sp; /* spl positions per attention split, n_sp splits */
    int64_t slot;
    /* the KV cache rows of the first pass of the block's attention item (at
     * most one per block: the host caps the splits at grid / nkv), the same
     * in every layer: looked up once, not a dependent L2 round trip before
     * every layer's K / V copies and prefetches */
    int rows[ST_SPL];
    /* x / d as __umulhi(x, m) for the attention's index arithmetic (x <
     * 2^20: exact), m = st_magic(d) for d = hd, hd / 8, a split partial's
     * floats per q head (hd + 2) and its lines (G (hd + 2) / 2): the
     * divisions were ~20 instructions each */
    uint32_t m_hd, m_hd8, m_pst, m_persp;
    int G, att_h, att_sp; /* q heads per kv head; the block's item (kv head, split) */
    float cos[TK_STEP_MAX_HD / 2], sin[TK_STEP_MAX_HD / 2];
};

#define ST_PARTS_BYTES  (ST_NW * ST_LT * 16 * 4)
#define ST_REGION_BYTES (sizeof(st_att) > ST_PARTS_BYTES ? sizeof(st_att) : ST_PARTS_BYTES)
#define ST_WS_FLOATS    ((sizeof(((st_att *)0)->u)) / 4)
static_assert(ST_REGION_BYTES >= TK_STEP_MAX_E * 4, "the norm stages the residual in the region");

extern "C" size_t tk_step_smem_bytes(void)
{
    return ST_RING_BYTES + ST_X_BYTES + ST_REGION_BYTES + TK_STEP_STASH_TILES * 16 * 4;
}
extern "C" size_t tk_step_merge_floats(void)
{
    return ST_WS_FLOATS;
}

/* ---------------------------------------------------------------- the weight stream */

/* A warp's place in the stream: op, tile, chunk offset c (in groups) in
 * its slice of the tile, the address of its next chunk (the issuer's); the
 * op's per-warp constants cached. */
struct st_cur {
    const char *src;
    int op, tile, c, len, tstride, G0, tiles;
};

/* Bytes between a warp's consecutive chunks (tk_step_records' order). */
static __device__ __forceinline__ size_t st_stride(void)
{
    return (size_t)gridDim.x * ST_NW * ST_C * ST_REC * 16;
}

static __device__ __forceinline__ void st_start(st_cur &k, const void *rec, int tiles, int nG,
                                                int lks, int op, int warp)
{
    int per = ST_NW >> lks;
    k.op = op, k.c = 0, k.tiles = tiles;
    k.src = (const char *)rec + (size_t)(blockIdx.x * ST_NW + warp) * ST_C * ST_REC * 16;
    k.tile = (warp >> lks) * gridDim.x + blockIdx.x;
    k.tstride = gridDim.x * per;
    k.len = nG >> lks;
    k.G0 = (warp & ((1 << lks) - 1)) * k.len;
}

/* The cursor at op `op`'s start, its constants from the kernel's
 * parameters (no global load: cuda_step.h). */
static __device__ __forceinline__ void st_start_op(st_cur &k, const tk_step_args &a, int op,
                                                   int n_ops, int warp)
{
    const int kind = op == n_ops - 1 ? ST_LM : op & 3;
    st_start(k, a.rec[op], a.k_tiles[kind], a.k_nG[kind], a.k_lks[kind], op, warp);
}

/* The chunk at k (n records, first group G), 0 when the warp's share of the
 * op is done; k steps past it. */
static __device__ __forceinline__ int st_next(st_cur &k, int &G)
{
    if (k.tile >= k.tiles) return 0;
    G = k.G0 + k.c;
    int n = min(ST_C, k.len - k.c);
    k.c += ST_C;
    if (k.c >= k.len) k.c = 0, k.tile += k.tstride;
    return n;
}

/* The warp's next chunk across ops (n records at src), 0 after the last
 * op; c steps past it. Every lane runs it (no divergent section in the
 * GEMV loop), after the chunk's arithmetic is issued. */
static __device__ __forceinline__ int st_advance(st_cur &c, const tk_step_args &a, int n_ops,
                                                 int warp, const char *&src)
{
    while (c.op < n_ops) {
        int G;
        int n = st_next(c, G);
        if (n == 0) {
            if (c.op + 1 < n_ops)
                st_start_op(c, a, c.op + 1, n_ops, warp);
            else
                c.op++;
            continue;
        }
        src = c.src;
        c.src += st_stride();
        return n;
    }
    return 0;
}

/* Lane 0: n records at src into stage `issued % ST_S` (the address work
 * was done ahead by st_advance; the plain kernel passes the stage itself). */
static __device__ __forceinline__ void st_issue(const char *src, int n, uint32_t ring0,
                                                uint32_t bar0, uint32_t issued, uint64_t pol)
{
    uint32_t stg = issued % ST_S;
    st_bulk(ring0 + stg * ST_C * ST_REC * 16, src, (uint32_t)n * ST_REC * 16, bar0 + 8 * stg, pol);
}

/* The GEMV loop's refill of the stage just consumed (stg), called by every
 * lane: in the plain kernel an elected lane issues it (st_bulk_elect: no
 * branch around it); in the instrumented one lane 0 issues into `issued %
 * ST_S` (the same stage: the ring is always full) with its cycles added to
 * cyc. */
template <bool INSTR>
static __device__ __forceinline__ void st_refill(const char *src, int n, uint32_t ring0,
                                                 uint32_t bar0, uint32_t stg, uint32_t issued,
                                                 uint64_t pol, int lane, uint32_t &cyc)
{
    if (!INSTR) {
        st_bulk_elect(ring0 + stg * ST_C * ST_REC * 16, src, (uint32_t)n * ST_REC * 16,
                      bar0 + 8 * stg, pol);
    } else if (lane == 0) {
        const uint32_t t0 = (uint32_t)clock();
        st_issue(src, n, ring0, bar0, issued, pol);
        cyc += (uint32_t)clock() - t0;
    }
}

/* Stamp k of (op, block) when a.stamps is set (TERN_CUDA_STEP_STAMPS): 0-3
 * the op's start, x ready, GEMV done, epilogue done; 4-8 its attention
 * item's q ready, first K / V rows in, passes done, partials in (merger)
 * or out, output out; 9-10 its first pass's q . k and softmax done; op
 * 0's 11 the block's SM (TK_STEP_STAMP_SM), an o op's its item's last
 * pass's K / V rows in (when it had more than one pass). */
template <bool INSTR> /* this block's row of op's stamps */
static __device__ __forceinline__ unsigned long long *st_stamps(const tk_step_args &a, int op)
{
    return a.stamps + ((size_t)op * gridDim.x + blockIdx.x) * TK_STEP_STAMPS;
}

/* After every op's stamps: the latest block end of the launch, the
 * launches counted, their gaps (TK_STEP_GAPS, cuda_step.h). */
static __device__ __forceinline__ unsigned long long *st_launches(const tk_step_args &a)
{
    return a.stamps + (size_t)(4 * a.n_layers + 1) * gridDim.x * TK_STEP_STAMPS;
}

/* Returns the time stamped (thread 0 of an instrumented launch with stamps). */
template <bool INSTR>
static __device__ __forceinline__ unsigned long long st_stamp(const tk_step_args &a, int op, int k)
{
    unsigned long long t = 0;
    if (INSTR && a.stamps && threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        st_stamps<INSTR>(a, op)[k] = t;
    }
    return t;
}

/* GEMV input values a, b (bf16-rounded) times xmul (1, or a power of two
 * below after an overflow) as an f16 pair, the values it holds in back;
 * mx the largest magnitude so far (beyond 65504: not representable). */
static __device__ __forceinline__ uint32_t st_f16x2(float a, float b, float xmul, float &mx,
                                                    float2 &back)
{
    a = __fmul_rn(a, xmul), b = __fmul_rn(b, xmul); /* exact: a power of two */
    mx = fmaxf(mx, fmaxf(fabsf(a), fabsf(b)));
    __half2 h = __floats2half2_rn(a, b);
    back = __half22float2(h);
    return *(const uint32_t *)&h;
}

/* a[0..3] summed over the lanes that differ in bits b0 and b1 (b0 > b1),
 * four sums at once: after it, a lane holds the sum for j = 2 (bit b0) +
 * (bit b1). Three shuffles in two levels, where four trees were eight
 * shuffles in eight levels, one tree after another. */
static __device__ __forceinline__ float st_sum4(const float *a, int lane, int b0, int b1)
{
    const bool u0 = lane >> b0 & 1, u1 = lane >> b1 & 1;
    float k0 = u0 ? a[2] : a[0], k1 = u0 ? a[3] : a[1];
    k0 += __shfl_xor_sync(0xffffffffu, u0 ? a[0] : a[2], 1 << b0);
    k1 += __shfl_xor_sync(0xffffffffu, u0 ? a[1] : a[3], 1 << b0);
    float k = u1 ? k1 : k0;
    k += __shfl_xor_sync(0xffffffffu, u1 ? k0 : k1, 1 << b1);
    return k;
}

/* Lines [0, n) of src as data words into dst (uint2 per line), by the
 * whole block, N lines per thread at a time (ll_gather). xsum (BF16
 * lines of GEMV input, 4 values each, n % 16 == 0): dst gets them as f16
 * (times xmul), xsum each 64-value group's (X, Y) for st_group1 (16 lines,
 * a half-warp); returns the thread's largest magnitude (st_f16x2). NULL:
 * the residual's F32 pairs as they are. */
template <int N = ST_LLB>
static __device__ float ll_copy(const uint4 *src, int n, uint32_t f, uint2 *dst, float2 *xsum,
                                float xmul)
{
    float mx = 0.0f;
    const int nt = ST_NW * 32;
    for (int base = 0; base < n; base += N * nt) { /* block-uniform: the lanes shuffle */
        uint4 v[N];
        ll_gather<N>(src, base, n, f, v);
        if (!xsum) {
#pragma unroll
            for (int j = 0; j < N; j++) {
                int i = base + threadIdx.x + j * nt;
                if (base + j * nt >= n) break;
                if (i < n) dst[i] = make_uint2(v[j].x, v[j].z);
            }
            continue;
        }
        static_assert(N == 4, "the group sums take four lines a thread (st_sum4)");
        float p[N]; /* lines past n: zeros (ll_gather) */
#pragma unroll
        for (int j = 0; j < N; j++) {
            int i = base + threadIdx.x + j * nt;
            uint2 d = make_uint2(v[j].x, v[j].z);
            float2 f0, f1;
            uint2 h = make_uint2(st_f16x2(__uint_as_float(d.x << 16),
                                          __uint_as_float(d.x & 0xffff0000u), xmul, mx, f0),
                                 st_f16x2(__uint_as_float(d.y << 16),
                                          __uint_as_float(d.y & 0xffff0000u), xmul, mx, f1));
            if (i < n) dst[i] = h;
            p[j] = (f0.x + f0.y) + (f1.x + f1.y);
        }
        /* line i holds k-step i % 4 of its lane group (lane bit 0: even or odd)
         * and is in group i / 16: half-warp (lane bit 4) of line group j. Over
         * lane bits 3 and 2 (four sums at once), then 1; X = even + odd, Y =
         * even + odd / 16 */
        const int lane = threadIdx.x & 31;
        float k = st_sum4(p, lane, 3, 2);
        k += __shfl_xor_sync(0xffffffffu, k, 2);
        const float k1 = __shfl_xor_sync(0xffffffffu, k, 1);
        const int g =
            (base + (int)(threadIdx.x & ~31u)) / 16 + (lane >> 4) + nt / 16 * (lane >> 2 & 3);
        if ((lane & 3) == 0 && 16 * g < n) xsum[g] = make_float2(k + k1, fmaf(k1, 0.0625f, k));
    }
    return mx;
}

/* Layer l's lines at offset off (the lm_head reads the last layer's). */
static __device__ __forceinline__ uint4 *st_ll(const tk_step_args &a, int l, int off)
{
    return (uint4 *)a.ll + (size_t)l * a.ll_layer + off;
}

/* ---------------------------------------------------------------- phases */

static __device__ __forceinline__ void st_cp16(void *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(tk_smem_u32(dst)), "l"(src)
                 : "memory");
}

/* The residual rows the block's o / down epilogue adds to (1 << lks warps
 * per tile: the tiles of the finish loop, slot by slot) from the staged
 * residual res (n values) into stash, by the whole block. */
static __device__ __forceinline__ void st_stash(const float *res, int n, int lks, float *stash)
{
    static_assert(ST_NW == 16, "tiles per block and round: 16 >> lks");
    const int lp = 4 - lks, per = 1 << lp, ne = min(ST_LT * per, TK_STEP_STASH_TILES) * 16;
    /* at most two entries a thread, predicated (cold code: no loop) */
    static_assert(TK_STEP_STASH_TILES * 16 <= 2 * ST_NW * 32, "two stash entries a thread");
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int e = threadIdx.x + j * ST_NW * 32;
        int idx = e >> 4, gi = idx & (per - 1), l2 = idx >> lp;
        int r = ((l2 * per + gi) * gridDim.x + blockIdx.x) * 16 + (e & 15);
        if (e < ne && r < n) stash[e] = res[r];
    }
}

/* xs = bf16(res * rsqrt(mean(res^2) + eps) * w) (as f16 times xmul, with
 * xsum's (X, Y) per group, as ll_copy), every block for itself;
 * res from the embedding (plain, written before the launch) or from the
 * previous projection's LL lines, staged as F32 in the block's idle
 * region (the same thread writes and reads its pairs until the block
 * barrier). From the embedding, the rows the first o epilogue adds to
 * (stash_lks >= 0) go to stash; after that each o / down epilogue keeps
 * its rows' new residual there itself (tile t is block t % grid's, slot
 * t / grid, in every op of E rows), so the later norms stash nothing. */
static __device__ float st_norm(const float *plain, const uint4 *ll, uint32_t f, int n,
                                const bf16 *w, float eps, bf16 *xs, float2 *xsum, float *red,
                                float2 *stage, float *stash, int stash_lks, float xmul)
{
    float mx = 0.0f;
    const int nt = ST_NW * 32, nl = n / 2;
    /* the weights into xs meanwhile (a dependent L2 round trip otherwise) */
    for (int i = threadIdx.x; i < n / 8; i += nt) st_cp16(xs + 8 * i, w + 8 * i);
    if (plain)
        for (int i = threadIdx.x; i < nl; i += nt) stage[i] = __ldcg((const float2 *)plain + i);
    else
        ll_copy(ll, nl, f, (uint2 *)stage, NULL, 1.0f);
    float ss = 0.0f;
#pragma unroll /* at most 8 pairs a thread, predicated (cold code: no loop) */
    for (int j = 0; j < TK_STEP_MAX_E / 2 / (ST_NW * 32); j++) {
        const int i = threadIdx.x + j * nt;
        if (i < nl) {
            float2 v = stage[i];
            ss = __fmaf_rn(v.x, v.x, ss);
            ss = __fmaf_rn(v.y, v.y, ss);
        }
    }
    ss = tk_warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    float tot = 0.0f;
    for (int k = 0; k < ST_NW; k++) tot += red[k];
    float inv = rsqrtf(__fdividef(tot, (float)n) + eps);   /* no IEEE division's slow path */
    const __nv_bfloat162 *wp = (const __nv_bfloat162 *)xs; /* w, then x over it */
    const int lane = threadIdx.x & 31;
    /* block-uniform rounds (the lanes shuffle): i0 - threadIdx.x is the
     * round's first pair. Written as a loop over rounds instead, ptxas
     * allocated the kernel otherwise and the step was 1.0% slower */
    for (int i0 = threadIdx.x; i0 - lane - 32 * (int)(threadIdx.x >> 5) < nl; i0 += 4 * nt) {
        float p[4]; /* a warp's 32 pairs: one 64-value group, 4 groups at a time */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            /* pairs past nl: zeros, not stored (predicated, no branch:
             * cold code pays per taken jump) */
            const int i = i0 + k * nt;
            const bool ok = i < nl;
            const float2 v = ok ? stage[i] : make_float2(0.0f, 0.0f);
            const float2 wv = ok ? __bfloat1622float2(wp[i]) : make_float2(0.0f, 0.0f);
            __nv_bfloat162 xb = __floats2bfloat162_rn(__fmul_rn(__fmul_rn(v.x, inv), wv.x),
                                                      __fmul_rn(__fmul_rn(v.y, inv), wv.y));
            float2 xf = __bfloat1622float2(xb), back;
            const uint32_t h = st_f16x2(xf.x, xf.y, xmul, mx, back);
            if (ok) ((uint32_t *)xs)[i] = h;
            p[k] = back.x + back.y;
        }
        /* pair i (i = lane + a multiple of 32) is in k-step (i / 2) % 4 of its
         * lane group (lane bit 1: even or odd) and in group i / 32 (k of the
         * 4). Over lane bits 4 and 3 (four sums at once), then 2 and 0; X =
         * even + odd, Y = even + odd / 16 */
        float s4 = st_sum4(p, lane, 4, 3);
        s4 += __shfl_xor_sync(0xffffffffu, s4, 4), s4 += __shfl_xor_sync(0xffffffffu, s4, 1);
        const float s1 = __shfl_xor_sync(0xffffffffu, s4, 2);
        const int g = (i0 >> 5) + nt / 32 * (lane >> 3);
        if ((lane & 7) == 0 && 32 * g < nl) xsum[g] = make_float2(s4 + s1, fmaf(s1, 0.0625f, s4));
    }
    if (plain && stash_lks >= 0) /* after the barrier */
        st_stash((const float *)stage, n, stash_lks, stash);
    return mx;
}

/* The multiplier m with x / d == __umulhi(x, m) for x < 2^32 / d, d >= 2
 * (the error of ceil(2^32 / d) stays below one step). */
static __device__ __forceinline__ uint32_t st_magic(uint32_t d)
{
    return 0xffffffffu / d + 1u;
}

static __device__ __forceinline__ int st_div(int x, uint32_t m)
{
    return (int)__umulhi((uint32_t)x, m);
}

/* Values i .. i + 3 (thread i's and its 3 next lanes') as bf16 into LL
 * line i / 4 of dst: called by every lane, stored by lanes with i % 4 == 0. */
static __device__ __forceinline__ void st_put4(uint4 *dst, int i, float x, bool ok, uint32_t f)
{
    uint32_t b = (uint32_t)__bfloat16_as_ushort(__float2bfloat16(x));
    uint32_t w0 = b | __shfl_down_sync(0xffffffffu, b, 1) << 16;
    uint32_t w1 = __shfl_down_sync(0xffffffffu, w0, 2);
    if (ok && (i & 3) == 0) ll_put(dst + i / 4, w0, w1, f);
}

#include "backend/cuda/cuda_step_att.cuh"

/* ---------------------------------------------------------------- the tile epilogue */

/* Tile `tile` (the block's slot-th of the op) from its slices' parts, in
 * warp order; lane r < 16 holds row r. Every lane calls it (shuffles). */
static __device__ void st_finish(const tk_step_args &a, const tk_step_op &o, int layer, int tile,
                                 int slot, const float *parts, float *stash, uint32_t f, int lane,
                                 float xscale)
{
    /* row lane & 15: lanes < 16 sum the first half of the slices, the
     * others the second (in order), then the halves; at most 8 slices a
     * half, predicated: the epilogue runs cold once per op, and each taken
     * jump of cold code costs a fetch (docs/perf/decode.md) */
    const int ks = 1 << o.lks, half = ks >> 1;
    const int cnt = ks == 1 ? (lane < 16) : half; /* ks 1: lanes < 16 take slice 0 */
    const float *pp = parts + (lane < 16 ? 0 : half) * 16 + (lane & 15);
    float v = 0.0f;
#pragma unroll
    for (int j = 0; j < ST_NW / 2; j++)
        if (j < cnt) v += pp[j * 16];
    v += __shfl_down_sync(0xffffffffu, v, 16);
    v *= xscale; /* 1, or 2^e when x went in as x times 2^-e */
    int r = tile * 16 + lane;
    switch (o.kind) {
    case ST_QKV:
        st_put4(st_ll(a, layer, a.ll_qkv), r, v, lane < 16 && r < o.out, f);
        break;
    case ST_GU: { /* rows 0-7 gate, 8-15 up of act row 8 tile + lane */
        float u = __bfloat162float(__float2bfloat16(__shfl_down_sync(0xffffffffu, v, 8)));
        float gv = __bfloat162float(__float2bfloat16(v));
        int ra = tile * 8 + lane;
        st_put4(st_ll(a, layer, a.ll_act), ra, __fdividef(gv, 1.0f + __expf(-gv)) * u,
                lane < 8 && ra < a.F, f);
        break;
    }
    case ST_LM:
        if (lane < 16 && r < o.out) a.logits[r] = v;
        break;
    default: { /* o, down: the BF16 projection added to the block's residual rows
                * (stash), which keep the sum for the next o / down */
        float nv =
            lane < 16 ? stash[slot * 16 + lane] + __bfloat162float(__float2bfloat16(v)) : 0.0f;
        if (lane < 16) stash[slot * 16 + lane] = nv;
        float nv1 = __shfl_down_sync(0xffffffffu, nv, 1);
        uint4 *dst = st_ll(a, layer, o.kind == ST_O ? a.ll_res_o : a.ll_res_d);
        if (lane < 16 && (lane & 1) == 0 && r < o.out)
            ll_put(dst + r / 2, __float_as_uint(nv), __float_as_uint(nv1), f);
    }
    }
}

/* ---------------------------------------------------------------- the argmax */

/* (value, index) as one key whose unsigned order is the argmax op's: the
 * larger value, then the smaller index; -0 as +0; NaN below everything */
static __device__ __forceinline__ unsigned long long st_am_key(float v, int r)
{
    const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    const uint32_t o = u & 0x80000000u ? ~u : u | 0x80000000u;
    return (unsigned long long)(v == v ? o : 0u) << 32 | (0xffffffffu - (uint32_t)r);
}

/* After the head: each block's best over the logits rows it wrote (tiles
 * blockIdx.x + k x grid), one atomicMax per block, and the last block to
 * arrive writes the id (and resets the two words for the next launch, which
 * starts after this one ends). Its own function: the tail's code kept out
 * of the allocation of the layers' (every change there moves the step). */
static __device__ __noinline__ void st_argmax(const float *logits, int vocab, int tiles,
                                              int32_t *ids, int32_t *hist, int n_hist,
                                              const int32_t *pos, unsigned long long *key,
                                              unsigned *cnt)
{
    __shared__ unsigned long long red[ST_NW];
    __syncthreads(); /* the block's logits are written */
    unsigned long long best = 0ull;
    for (int e = threadIdx.x;; e += ST_NW * 32) {
        const int tile = blockIdx.x + (e >> 4) * gridDim.x, r = tile * 16 + (e & 15);
        if (tile >= tiles) break;
        if (r < vocab) best = max(best, st_am_key(logits[r], r));
    }
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < ST_NW; w++) best = max(best, red[w]);
    atomicMax(key, best);
    __threadfence();
    if (atomicAdd(cnt, 1u) != gridDim.x - 1) return;
    __threadfence(); /* every block's atomicMax is in */
    const unsigned long long k = atomicExch(key, 0ull);
    atomicExch(cnt, 0u);
    const int id = k >> 32 ? (int)(0xffffffffu - (uint32_t)k) : 0; /* all NaN: 0 */
    ids[0] = id;
    const int p = __ldg(pos) + 1;
    if (hist && p >= 0 && p < n_hist) hist[p] = id;
}

/* ---------------------------------------------------------------- the step */

/* INSTR: the instrumented kernel, launched when stamps are asked for
 * (TERN_CUDA_STEP_STAMPS); the plain one has none of their code (their
 * branches, in cold code and in the GEMV loop, cost it ~1%) */
template <bool INSTR>
static __global__ void __launch_bounds__(ST_NW * 32, 1) k_step(const tk_step_args a)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t bars[ST_NW][ST_S];
    __shared__ float red[ST_NW];
    __shared__ uint32_t flag_s;
    __shared__ st_consts P;
    __shared__ __align__(16) float2 xsum[TK_STEP_MAX_K / 64]; /* x's group sums (st_group1) */
    __shared__ float xscale;      /* the op's x went in as x / xscale (1 unless beyond f16) */
    __shared__ unsigned xmax;     /* the op's largest |x| (as bits) when one is beyond f16 */
    __shared__ unsigned gdiag[4]; /* INSTR: the GEMV loop's cycles, summed over the warps */
    /* the launch's start, the block's end in the launch before, the gap */
    if (INSTR && a.stamps && threadIdx.x == 0)
        st_stamps<INSTR>(a, 0)[TK_STEP_STAMP_PREV] =
            st_stamps<INSTR>(a, 4 * a.n_layers)[TK_STEP_STAMP_EXIT];
    const unsigned long long t_in = st_stamp<INSTR>(a, 0, TK_STEP_STAMP_ENTRY);
    if (INSTR && a.stamps && threadIdx.x == 0 && blockIdx.x == 0) {
        unsigned long long *x = st_launches(a);
        const unsigned long long k = x[1]++;
        x[2 + k % TK_STEP_GAPS] = x[0] ? t_in - x[0] : 0ull;
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint4 *ring = (uint4 *)smem + (size_t)warp * ST_S * ST_C * ST_REC;
    bf16 *xs = (bf16 *)(smem + ST_RING_BYTES);
    float *parts = (float *)(smem + ST_RING_BYTES + ST_X_BYTES);
    st_att *att = (st_att *)parts;
    float *stash = (float *)(smem + ST_RING_BYTES + ST_X_BYTES + ST_REGION_BYTES);
    uint32_t ring0 = tk_smem_u32(ring), bar0 = tk_smem_u32(&bars[warp][0]);
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    if (lane == 0) st_ring_init(bar0, ST_S);
    __syncwarp();
    const int n_ops = 4 * a.n_layers + 1;
    st_cur c;
    st_start_op(c, a, 0, n_ops, warp);
    uint32_t issued = 0, used = 0;
    const char *nsrc = NULL; /* the next chunk to issue: nn records at nsrc */
    int nn = st_advance(c, a, n_ops, warp, nsrc);
    /* the ring is always full (depth ST_S): a refill goes to the stage just
     * consumed, whose addresses the loop has at hand */
    for (int i = 0; i < ST_S && nn; i++) {
        if (lane == 0) st_issue(nsrc, nn, ring0, bar0, issued, pol);
        issued++;
        nn = st_advance(c, a, n_ops, warp, nsrc);
    }
    if (threadIdx.x < a.rot / 2)
        tk_rope_cs((float)__ldg(a.pos), a.inv_freq[threadIdx.x], a.mscale, P.cos[threadIdx.x],
                   P.sin[threadIdx.x]);
    if (threadIdx.x == 0) xmax = 0u;
    if (INSTR && a.stamps && threadIdx.x == 0) { /* the block's SM, for the per-block view */
        unsigned sm;
        asm("mov.u32 %0, %%smid;" : "=r"(sm));
        a.stamps[(size_t)blockIdx.x * TK_STEP_STAMPS + TK_STEP_STAMP_SM] = sm;
    }
    if (threadIdx.x == 0) P.ctx = __ldg(a.seq_len), P.pos = __ldg(a.pos), P.slot = __ldg(a.slot);
    if (threadIdx.x == 0) /* launches run in stream order, each adds gridDim.x */
        flag_s = (uint32_t)(atomicAdd(a.epoch, 1ull) / gridDim.x) + 1u;
    if (threadIdx.x < ST_SPL) { /* spl, n_sp; the first pass's cache rows of the block's item */
        int ctx = __ldg(a.seq_len);
        int spl = ST_SPL * ((ctx + ST_SPL * a.max_splits - 1) / (ST_SPL * a.max_splits));
        int n_sp = (ctx + spl - 1) / spl, p = (int)(blockIdx.x % n_sp) * spl + threadIdx.x;
        if (threadIdx.x == 0) {
            const uint32_t G = (uint32_t)(a.nq / a.nkv), pst = (uint32_t)a.hd + 2u;
            P.spl = spl, P.n_sp = n_sp, P.G = (int)G;
            P.att_h = (int)blockIdx.x / n_sp, P.att_sp = (int)blockIdx.x % n_sp;
            P.m_hd = st_magic((uint32_t)a.hd), P.m_hd8 = st_magic((uint32_t)a.hd / 8u);
            P.m_pst = st_magic(pst), P.m_persp = st_magic(G * pst / 2u);
        }
        P.rows[threadIdx.x] = blockIdx.x < a.nkv * n_sp && p < ctx ? (int)st_row(a, p) : 0;
    }
    const uint32_t magic = 0x64006400u; /* f16 1024 in each half */
    __syncthreads();
    for (int op = 0; op < n_ops; op++) {
        const tk_step_op o = a.ops[op];
        /* read per op, not held in a register through the GEMV loop */
        const uint32_t f = *(volatile uint32_t *)&flag_s;
        int layer = op / 4, prev = layer - (o.kind == ST_QKV || o.kind == ST_LM);
        __syncthreads(); /* the last op's epilogue is done with parts and stash */
        st_stamp<INSTR>(a, op, 0);
        if (o.kind == ST_QKV) st_kv_prefetch(a, &P, layer);
        if (threadIdx.x == 0) xscale = 1.0f; /* ordered before st_finish by the barriers below */
        if (INSTR && threadIdx.x < 4) gdiag[threadIdx.x] = 0u;
        /* x as f16 (times xmul), into xs and xsum; the largest magnitude */
        auto write_x = [&](float xmul) -> float {
            if (o.kind == ST_O)
                return ll_copy(st_ll(a, layer, a.ll_attn), o.in / 4, f, (uint2 *)xs, xsum, xmul);
            if (o.kind == ST_DOWN)
                return ll_copy(st_ll(a, layer, a.ll_act), o.in / 4, f, (uint2 *)xs, xsum, xmul);
            const uint4 *src =
                prev < 0 ? NULL : st_ll(a, prev, o.kind == ST_GU ? a.ll_res_o : a.ll_res_d);
            return st_norm(prev < 0 ? a.res : NULL, src, f, o.in, (const bf16 *)o.norm_w, a.eps, xs,
                           xsum, red, (float2 *)parts, stash,
                           o.kind == ST_LM ? -1 : a.ops[op + 1].lks, xmul);
        };
        if (o.kind == ST_O) { /* the attention, then its output as x */
            for (int v = 0;; v++) {
                int it = blockIdx.x + v * gridDim.x;
                if (it >= a.nkv * P.n_sp) break;
                st_att_item<INSTR>(a, &P, op, layer, it == blockIdx.x ? P.att_h : it / P.n_sp,
                                   it == blockIdx.x ? P.att_sp : it % P.n_sp, P.n_sp, P.spl, att,
                                   f);
                __syncthreads(); /* the item's shared memory before the next */
            }
        }
        float mx = write_x(1.0f);
        /* the barrier after x also says whether a value was beyond f16 (rare:
         * x again times 2^-e, the op's sums scaled back in st_finish) */
        if (__syncthreads_or(mx > 65504.0f)) {
            atomicMax(&xmax, __float_as_uint(mx)); /* magnitudes order as their bits */
            __syncthreads();
            float m = __uint_as_float(xmax);
            float xmul =
                isfinite(m) ? ldexpf(1.0f, -max(1, (int)ceilf(log2f(m / 32768.0f)))) : 1.0f;
            __syncthreads(); /* every thread has read xmax */
            if (threadIdx.x == 0) xmax = 0u, xscale = 1.0f / xmul;
            write_x(xmul);
            __syncthreads();
        }
        st_stamp<INSTR>(a, op, 1);
        int grp = warp >> o.lks, j = warp & ((1 << o.lks) - 1);
        st_cur k;
        st_start(k, o.rec, o.tiles, o.nG, o.lks, op, warp); /* o: no reload at x ready */
        int li = 0;
        float acc[2] = {0.0f, 0.0f};
        bool ready = false; /* the next chunk's stage known to be full */
        /* INSTR: cycles in ring waits, the first iteration, refill issues, the loop */
        uint32_t dg_w = 0, dg_w1 = 0, dg_i = 0, dg_l = INSTR ? (uint32_t)clock() : 0u;
        for (;;) {
            int G;
            int tile = k.tile;
            int ng = st_next(k, G);
            if (ng == 0) break;
            /* the chunk's x, addressed before its records are read (the
             * records' address register is not reused right after them) */
            const uint4 *xg = (const uint4 *)(xs + 64 * G + 16 * t);
            uint32_t stg = used % ST_S;
            const uint32_t tw = INSTR ? (uint32_t)clock() : 0u;
            if (!ready) st_wait(bar0 + 8 * stg, (used / ST_S) & 1u);
            ready = false;
            if (INSTR) dg_w += (uint32_t)clock() - tw;
            const uint4 *sp = ring + stg * ST_C * ST_REC;
            const bool refill = nn != 0;
            if (ng == ST_C) {
                /* a full chunk: its records into registers, the stage refilled at
                 * once, then the records' chains interleave */
                uint4 w[ST_C];
                uint2 sb[ST_C];
#pragma unroll
                for (int jj = 0; jj < ST_C; jj++) {
                    w[jj] = sp[jj * ST_REC + lane];
                    sb[jj] = ((const uint2 *)(sp + jj * ST_REC + 32))[g];
                }
                used++;
                /* the next chunk's stage tested now, its answer used after
                 * this chunk's arithmetic (the wait's latency hidden) */
                ready = st_test(bar0 + 8 * (used % ST_S), (used / ST_S) & 1u);
                __syncwarp();
                if (refill) st_refill<INSTR>(nsrc, nn, ring0, bar0, stg, issued, pol, lane, dg_i);
#pragma unroll
                for (int jj = 0; jj < ST_C; jj++)
                    st_group1(w[jj], xg[8 * jj], xg[8 * jj + 1], sb[jj], xsum[G + jj], magic, acc);
            } else {
                for (int jj = 0; jj < ng; jj++) {
                    const uint4 *xp = (const uint4 *)(xs + 64 * (G + jj) + 16 * t);
                    st_group1(sp[jj * ST_REC + lane], xp[0], xp[1],
                              ((const uint2 *)(sp + jj * ST_REC + 32))[g], xsum[G + jj], magic,
                              acc);
                }
                used++;
                __syncwarp();
                if (refill) st_refill<INSTR>(nsrc, nn, ring0, bar0, stg, issued, pol, lane, dg_i);
            }
            if (refill) /* the chunk after: its address work behind the arithmetic */
                issued++, nn = st_advance(c, a, n_ops, warp, nsrc);
            if (k.tile != tile) { /* the warp's slice of this tile is done */
                float *pt = parts + ((grp * ST_LT + li) << o.lks) * 16;
                if (t == 0) pt[j * 16 + g] = acc[0], pt[j * 16 + 8 + g] = acc[1];
                acc[0] = acc[1] = 0.0f;
                li++;
            }
            if (INSTR && dg_w1 == 0u) dg_w1 = (uint32_t)clock() - dg_l + 1u;
        }
        if (INSTR && a.stamps && lane == 0) {
            atomicAdd(&gdiag[0], dg_w), atomicAdd(&gdiag[1], dg_w1 ? dg_w1 - 1u : 0u);
            atomicAdd(&gdiag[2], dg_i), atomicAdd(&gdiag[3], (uint32_t)clock() - dg_l);
        }
        __syncthreads(); /* every slice's part is in */
        st_stamp<INSTR>(a, op, 2);
        if (INSTR && a.stamps && threadIdx.x < 4)
            a.stamps[((size_t)op * gridDim.x + blockIdx.x) * TK_STEP_STAMPS + TK_STEP_STAMP_DIAG +
                     threadIdx.x] = gdiag[threadIdx.x];
        int per = ST_NW >> o.lks;
        for (int idx = warp;; idx += ST_NW) {                  /* the block's tiles, a warp each */
            int gi = idx & (per - 1), l2 = idx >> (4 - o.lks); /* per = 16 >> lks */
            int tile = (l2 * per + gi) * gridDim.x + blockIdx.x;
            if (l2 >= ST_LT || tile >= o.tiles) break;
            st_finish(a, o, layer, tile, idx, parts + ((gi * ST_LT + l2) << o.lks) * 16, stash, f,
                      lane, xscale);
        }
        st_stamp<INSTR>(a, op, 3);
    }
    if (a.am_ids)
        st_argmax(a.logits, a.vocab, a.k_tiles[ST_LM], a.am_ids, a.am_hist, a.n_hist, a.pos,
                  a.am_key, a.am_cnt);
    if (INSTR && a.stamps) { /* the block's end (the next launch's gap runs from the latest) */
        __syncthreads();
        const unsigned long long t_out = st_stamp<INSTR>(a, 4 * a.n_layers, TK_STEP_STAMP_EXIT);
        if (threadIdx.x == 0) atomicMax(st_launches(a), t_out);
    }
}

/* Both instantiations' shared memory limit (the same size). */
static cudaError_t st_set_smem(void)
{
    cudaError_t e = cudaFuncSetAttribute(k_step<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)tk_step_smem_bytes());
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(k_step<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)tk_step_smem_bytes());
}

extern "C" cudaError_t tk_step_launch(cudaStream_t st, const tk_step_args *a, int grid)
{
    static int attr_done = -1;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (attr_done != dev) {
        if ((e = st_set_smem()) != cudaSuccess) return e;
        attr_done = dev;
    }
    void *args[] = {(void *)a};
    const bool instr = a->stamps != NULL;
    const void *fn = instr ? (const void *)k_step<true> : (const void *)k_step<false>;
    return cudaLaunchCooperativeKernel(fn, dim3((unsigned)grid), dim3(ST_NW * 32), args,
                                       tk_step_smem_bytes(), st);
}

extern "C" cudaError_t tk_step_fits(int *blocks_per_sm)
{
    cudaError_t e = st_set_smem();
    if (e != cudaSuccess) return e;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, k_step<false>, ST_NW * 32,
                                                         tk_step_smem_bytes());
}
