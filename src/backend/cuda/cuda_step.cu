/*
 * cuda_step.cu — a whole decode step of a llama-family model with 4-bit
 * (MLX affine, group 64) weights as ONE persistent kernel: one block of 16
 * warps per SM, grid barriers between dependent phases, and the weights
 * streamed by per-warp rings of cp.async.bulk copies that run ahead across
 * ops and phases (weights never depend on activations). Why: launched op by
 * op the step's GEMVs reach only ~55% of the copy rate and every one of its
 * ~230 kernel boundaries costs microseconds; the labs (dev/kernels/
 * persist6_lab.cu, docs/perf/quant.md) measured this structure at 58% of
 * the bandwidth floor with every phase in. Host side: cuda_step.c.
 *
 * Weights: each linear is repacked at load into 576-byte records, one per
 * (16-row tile, 64-k group): 512 bytes of mma.m16n8k16 A fragments (lane L
 * = 4 g + t's 16 bytes at 16 L; word s = k-step s covers k_i = 64 G + 16 t
 * + 4 s + i, nibbles (r0 k0, r1 k0, r0 k2, r1 k2, r0 k1, r1 k1, r0 k3, r1 k3)
 * for rows r0 = 16 tile + g, r1 = r0 + 8) then the 8 (scale, bias) pairs of
 * rows (g, g + 8). The gate_up projection's tile j holds gate rows 8j..8j+7
 * and up rows 8j..8j+7, so silu(gate) * up is the tile's own epilogue.
 *
 * A record's arithmetic: a_j = ((w >> 4 j) & 0x000F000F) | 0x43004300 is
 * bf16 (128 + q); one MMA sums x (128 + q) over 16 k, a second with A = 1
 * sums x; per group acc += s C + (b - 128 s) X. Work per op: a tile belongs
 * to a group of KS warps of one block (KS chosen on the host so the op
 * balances over the grid); warp j of the group takes the tile's j-th
 * contiguous slice of groups and keeps its sums in registers; after the
 * op's chunks a block barrier, and the block's warps add each tile's slices
 * in warp order and run the op's epilogue. Deterministic: no atomics in any
 * sum. Phases (per layer): RMSNorm of the F32 residual into every block's
 * shared x; qkv GEMV; attention (items (kv head, split) on whole blocks:
 * q roped, the new token's k roped and stored with v at its cache slot by
 * the split that holds it, online softmax in passes of 64 positions, the
 * last split of a head merging in split order); o GEMV adding into the
 * residual; norm; gate_up GEMV with silu * up; down GEMV adding into the
 * residual; then the final norm and the lm_head GEMV into F32 logits.
 * Depends on cuda_common.cuh, cuda_qmma.cuh, cuda_rope.cuh, cuda_step.cuh,
 * cuda_step.h.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_qmma.cuh"
#include "backend/cuda/cuda_rope.cuh"
#include "backend/cuda/cuda_step.cuh"
#include "backend/cuda/cuda_step.h"

#define ST_NW         TK_STEP_NW
#define ST_S          4  /* ring stages per warp */
#define ST_C          4  /* records per chunk */
#define ST_REC        36 /* uint4 per record */
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
    float qf[TK_STEP_MAX_G * TK_STEP_MAX_HD];
    float s[TK_STEP_MAX_G][ST_SPL];
    float m[TK_STEP_MAX_G], l[TK_STEP_MAX_G], fac[TK_STEP_MAX_G];
    unsigned last;
    union __align__(16)
    {
        struct {
            bf16 k[ST_SPL][TK_STEP_MAX_HD + 8]; /* + 8: conflict-free 16-byte rows */
            bf16 v[ST_SPL][TK_STEP_MAX_HD];
        } kv;
        float ws[1]; /* the merge: n_splits x G x (hd + 4) floats */
    }
    u;
};

#define ST_PARTS_BYTES  (ST_NW * ST_LT * 16 * 4)
#define ST_REGION_BYTES (sizeof(st_att) > ST_PARTS_BYTES ? sizeof(st_att) : ST_PARTS_BYTES)
#define ST_WS_FLOATS    ((sizeof(((st_att *)0)->u)) / 4)

extern "C" size_t tk_step_smem_bytes(void)
{
    return ST_RING_BYTES + ST_X_BYTES + ST_REGION_BYTES;
}
extern "C" size_t tk_step_merge_floats(void)
{
    return ST_WS_FLOATS;
}

/* ---------------------------------------------------------------- repack */

/* Thread id of the repack: record (tile, G) = id / 32, lane L = id % 32.
 * glu_f > 0: the gate_up layout (tile rows 0-7 gate rows 8 tile + r, rows
 * 8-15 up rows glu_f + 8 tile + r - 8). */
static __global__ void k_step_repack(const uint32_t *q, const uint16_t *sc, const uint16_t *bi,
                                     int64_t rows, int64_t in, int64_t glu_f, int64_t tiles,
                                     uint4 *rec)
{
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t nG = in / 64;
    if (id >= tiles * nG * 32) return;
    int L = (int)(id % 32), g = L >> 2, t = L & 3;
    int64_t tg = id / 32, G = tg % nG, tau = tg / nG;
    int64_t r0, r1;
    bool ok0, ok1;
    if (glu_f > 0) {
        ok0 = ok1 = 8 * tau + g < glu_f;
        r0 = 8 * tau + g, r1 = glu_f + 8 * tau + g;
    } else {
        r0 = 16 * tau + g, r1 = r0 + 8;
        ok0 = r0 < rows, ok1 = r1 < rows;
    }
    int64_t wpr = in / 8;
    uint32_t w4[4];
    for (int s = 0; s < 4; s++) {
        int64_t k0 = 64 * G + 16 * t + 4 * s;
        int off = (int)(k0 % 8);
        uint32_t m0 = ok0 ? q[r0 * wpr + k0 / 8] >> (4 * off) : 0u;
        uint32_t m1 = ok1 ? q[r1 * wpr + k0 / 8] >> (4 * off) : 0u;
        uint32_t n0[4], n1[4];
        for (int i = 0; i < 4; i++) n0[i] = (m0 >> (4 * i)) & 15u, n1[i] = (m1 >> (4 * i)) & 15u;
        w4[s] = n0[0] | n1[0] << 4 | n0[2] << 8 | n1[2] << 12 | n0[1] << 16 | n1[1] << 20 |
                n0[3] << 24 | n1[3] << 28;
    }
    rec[tg * ST_REC + L] = make_uint4(w4[0], w4[1], w4[2], w4[3]);
    if (t == 0) {
        uint32_t s0 = ok0 ? sc[r0 * nG + G] : 0u, s1 = ok1 ? sc[r1 * nG + G] : 0u;
        uint32_t b0 = ok0 ? bi[r0 * nG + G] : 0u, b1 = ok1 ? bi[r1 * nG + G] : 0u;
        ((uint2 *)(rec + tg * ST_REC + 32))[g] = make_uint2(s0 | s1 << 16, b0 | b1 << 16);
    }
}

extern "C" cudaError_t tk_step_repack(cudaStream_t st, const void *q, const void *scales,
                                      const void *biases, int64_t rows, int64_t in, int64_t glu_f,
                                      void *rec)
{
    int64_t tiles = tk_step_tiles(rows, glu_f);
    int64_t n = tiles * (in / 64) * 32;
    if (n == 0) return cudaSuccess;
    k_step_repack<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(
        (const uint32_t *)q, (const uint16_t *)scales, (const uint16_t *)biases, rows, in, glu_f,
        tiles, (uint4 *)rec);
    return cudaGetLastError();
}

/* The argument block's BF16 buffers (void * in the C header). */
#define ST_QKV_P(a)  ((bf16 *)(a).qkv)
#define ST_ATTN_P(a) ((bf16 *)(a).attn)
#define ST_ACT_P(a)  ((bf16 *)(a).act)

/* ---------------------------------------------------------------- the weight stream */

/* A warp's place in the stream: op, tile, chunk offset c (in groups) in
 * its slice of the tile; the op's per-warp constants cached. */
struct st_cur {
    const uint4 *rec;
    int op, tile, c, len, tstride, G0, nG, tiles;
};

static __device__ __forceinline__ void st_start(st_cur &k, const tk_step_op *ops, int op, int warp)
{
    const tk_step_op &o = ops[op];
    int per = ST_NW >> o.lks;
    k.op = op, k.c = 0, k.rec = (const uint4 *)o.rec, k.nG = o.nG, k.tiles = o.tiles;
    k.tile = blockIdx.x * per + (warp >> o.lks);
    k.tstride = gridDim.x * per;
    k.len = o.nG >> o.lks;
    k.G0 = (warp & ((1 << o.lks) - 1)) * k.len;
}

/* The chunk at k (records r .. r + n, first group G), 0 when the warp's
 * share of the op is done; k steps past it. */
static __device__ __forceinline__ int st_next(st_cur &k, int64_t &r, int &G)
{
    if (k.tile >= k.tiles) return 0;
    G = k.G0 + k.c;
    r = (int64_t)k.tile * k.nG + G;
    int n = min(ST_C, k.len - k.c);
    k.c += ST_C;
    if (k.c >= k.len) k.c = 0, k.tile += k.tstride;
    return n;
}

/* Lane 0: the warp's next chunk (across ops) into stage issued % ST_S. */
static __device__ __forceinline__ void st_issue(st_cur &c, const tk_step_op *ops, int n_ops,
                                                int warp, uint32_t ring0, uint32_t bar0,
                                                uint32_t &issued, uint64_t pol)
{
    while (c.op < n_ops) {
        int64_t r;
        int G;
        int n = st_next(c, r, G);
        if (n == 0) {
            if (c.op + 1 < n_ops)
                st_start(c, ops, c.op + 1, warp);
            else
                c.op++;
            continue;
        }
        uint32_t stg = issued % ST_S;
        uint32_t dst = ring0 + stg * ST_C * ST_REC * 16, bar = bar0 + 8 * stg;
        uint32_t bytes = (uint32_t)n * ST_REC * 16;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                     : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
            "[%0], [%1], %2, [%3], %4;" ::"r"(dst),
            "l"(c.rec + r * ST_REC), "r"(bytes), "r"(bar), "l"(pol)
            : "memory");
        issued++;
        return;
    }
}

/* ---------------------------------------------------------------- grid barrier */

/* Every block has arrived: the counter (zeroed before the launch) reaches
 * n x gridDim.x. The last thread counts in (lane 0s issue bulk copies). */
static __device__ __forceinline__ void st_grid_sync(unsigned *ctr, unsigned n)
{
    __syncthreads();
    if (threadIdx.x == ST_NW * 32 - 1) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
        unsigned v, target = n * gridDim.x;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
        } while (v < target);
    }
    __syncthreads();
}

/* ---------------------------------------------------------------- phases */

/* xs = bf16(res * rsqrt(mean(res^2) + eps) * w), every block for itself. */
static __device__ void st_norm(const float *res, const bf16 *w, int n, float eps, bf16 *xs,
                               float *red)
{
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += ST_NW * 32) {
        float v = __ldcg(res + i);
        ss = __fmaf_rn(v, v, ss);
    }
    ss = tk_warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int k = 0; k < ST_NW; k++) tot += red[k];
    float inv = rsqrtf(tot / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += ST_NW * 32)
        xs[i] =
            __float2bfloat16(__fmul_rn(__fmul_rn(__ldcg(res + i), inv), __bfloat162float(w[i])));
    __syncthreads();
}

static __device__ void st_load_x(const bf16 *src, int n, bf16 *xs)
{
    for (int i = threadIdx.x; i < n / 8; i += ST_NW * 32)
        ((uint4 *)xs)[i] = __ldcg((const uint4 *)src + i);
    __syncthreads();
}

static __device__ __forceinline__ void st_cp16(void *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(tk_smem_u32(dst)), "l"(src)
                 : "memory");
}

/* Head h's value i (of hd) after RoPE at position pos, from raw bf16 x in
 * shared memory: halves layout (pairs i, i + rot / 2), dims >= rot as they
 * are; rounded to bf16 like the op-by-op path's qk_rope_store. */
static __device__ __forceinline__ float st_rope(const bf16 *x, int i, int rot, float pos,
                                                const float *inv_freq, float mscale)
{
    int half = rot / 2;
    if (i >= rot) return __bfloat162float(x[i]);
    int j = i < half ? i : i - half;
    float c, s;
    tk_rope_cs(pos, inv_freq[j], mscale, c, s);
    float x1 = __bfloat162float(x[j]), x2 = __bfloat162float(x[j + half]);
    tk_rope_pair<bf16>(x1, x2, c, s);
    return i < half ? x1 : x2;
}

/* The KV cache row of position p: block table entry, then the row in it. */
static __device__ __forceinline__ int64_t st_row(const tk_step_args &a, int p)
{
    return (int64_t)a.btab[p / a.bs] * a.bs + p % a.bs;
}

/* One attention item (kv head h, split sp of n_sp) on the whole block. */
static __device__ void st_att_item(const tk_step_args &a, int layer, int h, int sp, int n_sp,
                                   int spl, st_att *S)
{
    const int G = a.nq / a.nkv, hd = a.hd, tid = threadIdx.x, nt = ST_NW * 32;
    const int ctx = __ldg(a.seq_len), pos = __ldg(a.pos);
    const int p0 = sp * spl, p1 = min(ctx, p0 + spl);
    bf16 *kc = (bf16 *)a.kc[layer], *vc = (bf16 *)a.vc[layer];
    /* through L2 (written by other SMs in this launch): q heads h G ..
     * h G + G - 1, and the head's new k and v, raw */
    const bf16 *qsrc = ST_QKV_P(a) + (size_t)h * G * hd;
    const bf16 *ksrc = ST_QKV_P(a) + (size_t)a.nq * hd + (size_t)h * hd;
    const bf16 *vsrc = ST_QKV_P(a) + (size_t)(a.nq + a.nkv) * hd + (size_t)h * hd;
    for (int i = tid; i < G * hd / 8; i += nt) st_cp16(S->q + 8 * i, qsrc + 8 * i);
    for (int i = tid; i < hd / 8; i += nt) st_cp16(S->knew + 8 * i, ksrc + 8 * i);
    for (int i = tid; i < hd / 8; i += nt) st_cp16(S->vnew + 8 * i, vsrc + 8 * i);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    for (int i = tid; i < G * hd; i += nt) {
        int g = i / hd, d = i % hd;
        S->qf[i] =
            __fmul_rn(st_rope(S->q + g * hd, d, a.rot, (float)pos, a.inv_freq, a.mscale), a.scale);
    }
    if (tid < G) S->m[tid] = -INFINITY, S->l[tid] = 0.0f;
    float acc[ST_ATT_PER];
#pragma unroll
    for (int j = 0; j < ST_ATT_PER; j++) acc[j] = 0.0f;
    for (int q0 = p0; q0 < p1; q0 += ST_SPL) {
        int n = min(ST_SPL, p1 - q0);
        __syncthreads(); /* the previous pass's reads of k / v / s */
        for (int i = tid; i < 2 * n * (hd / 8); i += nt) {
            int kv = i / (n * (hd / 8)), r = i % (n * (hd / 8)), p = r / (hd / 8), c = r % (hd / 8);
            if (q0 + p == pos) continue; /* the new token: below */
            const bf16 *src = (kv ? vc : kc) + (st_row(a, q0 + p) * a.nkv + h) * hd + 8 * c;
            st_cp16(kv ? &S->u.kv.v[p][8 * c] : &S->u.kv.k[p][8 * c], src);
        }
        if (pos >= q0 && pos < q0 + n) { /* rope its k, store k and v at its slot */
            int p = pos - q0;
            int64_t slot = __ldg(a.slot);
            for (int d = tid; d < hd; d += nt) {
                bf16 kv =
                    __float2bfloat16(st_rope(S->knew, d, a.rot, (float)pos, a.inv_freq, a.mscale));
                bf16 vv = S->vnew[d];
                S->u.kv.k[p][d] = kv, S->u.kv.v[p][d] = vv;
                if (slot >= 0)
                    kc[(slot * a.nkv + h) * hd + d] = kv, vc[(slot * a.nkv + h) * hd + d] = vv;
            }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        for (int i = tid; i < G * ST_SPL; i += nt) { /* q . k: a thread per (q head, position) */
            int g = i / ST_SPL, p = i % ST_SPL;
            if (p >= n) continue;
            const uint4 *kr = (const uint4 *)S->u.kv.k[p];
            const float4 *qr = (const float4 *)(S->qf + g * hd);
            float d0 = 0.0f, d1 = 0.0f;
            for (int j = 0; j < hd / 8; j++) {
                uint4 kw = kr[j];
                float4 qa = qr[2 * j], qb = qr[2 * j + 1];
                const bf16 *k = (const bf16 *)&kw;
                d0 = fmaf(qa.x, __bfloat162float(k[0]), d0),
                d1 = fmaf(qa.y, __bfloat162float(k[1]), d1);
                d0 = fmaf(qa.z, __bfloat162float(k[2]), d0),
                d1 = fmaf(qa.w, __bfloat162float(k[3]), d1);
                d0 = fmaf(qb.x, __bfloat162float(k[4]), d0),
                d1 = fmaf(qb.y, __bfloat162float(k[5]), d1);
                d0 = fmaf(qb.z, __bfloat162float(k[6]), d0),
                d1 = fmaf(qb.w, __bfloat162float(k[7]), d1);
            }
            S->s[g][p] = d0 + d1;
        }
        __syncthreads();
        int warp = tid >> 5, lane = tid & 31;
        for (int g = warp; g < G; g += ST_NW) { /* the online softmax of q head g */
            float v0 = lane < n ? S->s[g][lane] : -INFINITY;
            float v1 = lane + 32 < n ? S->s[g][lane + 32] : -INFINITY;
            float mp = tk_warp_max(fmaxf(v0, v1)), mo = S->m[g], mn = fmaxf(mo, mp);
            float e0 = lane < n ? __expf(v0 - mn) : 0.0f,
                  e1 = lane + 32 < n ? __expf(v1 - mn) : 0.0f;
            S->s[g][lane] = e0, S->s[g][lane + 32] = e1;
            float sum = tk_warp_sum(e0 + e1);
            if (lane == 0) {
                float f = mo == -INFINITY ? 0.0f : __expf(mo - mn);
                S->fac[g] = f, S->l[g] = S->l[g] * f + sum, S->m[g] = mn;
            }
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < ST_ATT_PER; j++) { /* p . v */
            int i = tid + j * nt;
            if (i >= G * hd) break;
            int g = i / hd, d = i % hd;
            float sacc = 0.0f;
            for (int p = 0; p < n; p++)
                sacc = fmaf(S->s[g][p], __bfloat162float(S->u.kv.v[p][d]), sacc);
            acc[j] = fmaf(acc[j], S->fac[g], sacc);
        }
    }
    __syncthreads();
    if (n_sp == 1) { /* one split: the output directly */
#pragma unroll
        for (int j = 0; j < ST_ATT_PER; j++) {
            int i = tid + j * nt;
            if (i >= G * hd) break;
            int g = i / hd;
            ST_ATTN_P(a)[(size_t)h * G * hd + i] = __float2bfloat16(acc[j] / S->l[g]);
        }
        return;
    }
    const int ast = hd + 4;
    float *ws = a.att_ws + (size_t)(h * a.max_splits + sp) * G * ast;
#pragma unroll
    for (int j = 0; j < ST_ATT_PER; j++) {
        int i = tid + j * nt;
        if (i >= G * hd) break;
        ws[(i / hd) * ast + i % hd] = acc[j];
    }
    if (tid < G) ws[tid * ast + hd] = S->m[tid], ws[tid * ast + hd + 1] = S->l[tid];
    __syncthreads();
    if (tid == 0) {
        unsigned old;
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;"
                     : "=r"(old)
                     : "l"(a.att_cnt + h)
                     : "memory");
        S->last = old == (unsigned)(n_sp - 1);
        if (S->last) a.att_cnt[h] = 0;
    }
    __syncthreads();
    if (!S->last) return;
    __threadfence(); /* thread 0's acquire, for the block's reads of the other splits */
    const float *w0 = a.att_ws + (size_t)h * a.max_splits * G * ast;
    for (int i = tid; i < n_sp * G * ast / 4; i += nt) st_cp16(S->u.ws + 4 * i, w0 + 4 * i);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    for (int i = tid; i < G * hd; i += nt) { /* the splits in order */
        int g = i / hd, d = i % hd;
        float M = -INFINITY;
        for (int s2 = 0; s2 < n_sp; s2++) M = fmaxf(M, S->u.ws[(s2 * G + g) * ast + hd]);
        float L = 0.0f, A = 0.0f;
        for (int s2 = 0; s2 < n_sp; s2++) {
            const float *e = S->u.ws + (s2 * G + g) * ast;
            float f = e[hd] == -INFINITY ? 0.0f : __expf(e[hd] - M);
            L = fmaf(e[hd + 1], f, L);
            A = fmaf(e[d], f, A);
        }
        ST_ATTN_P(a)[(size_t)h * G * hd + i] = __float2bfloat16(A / L);
    }
    __syncthreads(); /* the merge's reads before a next item's copies */
}

/* ---------------------------------------------------------------- the tile epilogue */

static __device__ void st_finish(const tk_step_args &a, const tk_step_op &o, int tile,
                                 const float *parts, int lane)
{
    int g = lane >> 2;
    if ((lane & 3) != 0) return;
    float s0 = 0.0f, s1 = 0.0f;
    for (int j = 0; j < (1 << o.lks); j++) s0 += parts[j * 16 + g], s1 += parts[j * 16 + 8 + g];
    int r0 = tile * 16 + g;
    switch (o.kind) {
    case ST_QKV:
        if (r0 < o.out) ST_QKV_P(a)[r0] = __float2bfloat16(s0);
        if (r0 + 8 < o.out) ST_QKV_P(a)[r0 + 8] = __float2bfloat16(s1);
        break;
    case ST_GU: { /* rows 0-7 gate, 8-15 up of act row 8 tile + g */
        int r = tile * 8 + g;
        if (r < a.F) {
            float gv = __bfloat162float(__float2bfloat16(s0)),
                  uv = __bfloat162float(__float2bfloat16(s1));
            ST_ACT_P(a)[r] = __float2bfloat16(gv / (1.0f + __expf(-gv)) * uv);
        }
        break;
    }
    case ST_LM:
        if (r0 < o.out) a.logits[r0] = s0;
        if (r0 + 8 < o.out) a.logits[r0 + 8] = s1;
        break;
    default: /* o, down: the BF16 projection into the residual */
        if (r0 < o.out) a.res[r0] = __ldcg(a.res + r0) + __bfloat162float(__float2bfloat16(s0));
        if (r0 + 8 < o.out)
            a.res[r0 + 8] = __ldcg(a.res + r0 + 8) + __bfloat162float(__float2bfloat16(s1));
    }
}

/* ---------------------------------------------------------------- the step */

static __global__ void __launch_bounds__(ST_NW * 32, 1) k_step(const tk_step_args a)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t bars[ST_NW][ST_S];
    __shared__ float red[ST_NW];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint4 *ring = (uint4 *)smem + (size_t)warp * ST_S * ST_C * ST_REC;
    bf16 *xs = (bf16 *)(smem + ST_RING_BYTES);
    float *parts = (float *)(smem + ST_RING_BYTES + ST_X_BYTES);
    st_att *att = (st_att *)parts;
    uint32_t ring0 = tk_smem_u32(ring), bar0 = tk_smem_u32(&bars[warp][0]);
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    if (lane == 0) {
        for (int i = 0; i < ST_S; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * i));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    const int n_ops = 4 * a.n_layers + 1;
    st_cur c;
    st_start(c, a.ops, 0, warp);
    uint32_t issued = 0, used = 0;
    if (lane == 0)
        for (int i = 0; i < ST_S; i++) st_issue(c, a.ops, n_ops, warp, ring0, bar0, issued, pol);
    const int ctx = __ldg(a.seq_len);
    int spl = ST_SPL * ((ctx + ST_SPL * a.max_splits - 1) / (ST_SPL * a.max_splits));
    int n_sp = (ctx + spl - 1) / spl, bar_n = 0;
    const uint32_t magic = 0x43004300u;
    for (int op = 0; op < n_ops; op++) {
        const tk_step_op o = a.ops[op];
        int layer = op / 4;
        if (op > 0) st_grid_sync(a.ctr, ++bar_n);
        if (o.kind == ST_O) { /* the attention, a barrier, then its output as x */
            for (int it = blockIdx.x; it < a.nkv * n_sp; it += gridDim.x)
                st_att_item(a, layer, it / n_sp, it % n_sp, n_sp, spl, att);
            st_grid_sync(a.ctr, ++bar_n);
            st_load_x(ST_ATTN_P(a), o.in, xs);
        } else if (o.kind == ST_DOWN) {
            st_load_x(ST_ACT_P(a), o.in, xs);
        } else {
            st_norm(a.res, (const bf16 *)o.norm_w, o.in, a.eps, xs, red);
        }
        int grp = warp >> o.lks, j = warp & ((1 << o.lks) - 1);
        st_cur k;
        st_start(k, a.ops, op, warp);
        int li = 0;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (;;) {
            int64_t r;
            int G;
            int tile = k.tile;
            int ng = st_next(k, r, G);
            if (ng == 0) break;
            uint32_t stg = used % ST_S;
            st_wait(bar0 + 8 * stg, (used / ST_S) & 1u);
            const uint4 *sp = ring + stg * ST_C * ST_REC;
            if (ng == ST_C) { /* a full chunk: the records' chains interleave */
                uint4 w[ST_C], xa[ST_C], xb[ST_C];
                uint2 sb[ST_C];
#pragma unroll
                for (int jj = 0; jj < ST_C; jj++) {
                    w[jj] = sp[jj * ST_REC + lane];
                    sb[jj] = ((const uint2 *)(sp + jj * ST_REC + 32))[g];
                    const uint4 *xp = (const uint4 *)(xs + 64 * (G + jj) + 16 * t);
                    xa[jj] = xp[0], xb[jj] = xp[1];
                }
#pragma unroll
                for (int jj = 0; jj < ST_C; jj++)
                    st_group(w[jj], xa[jj], xb[jj], sb[jj], magic, acc);
            } else {
                for (int jj = 0; jj < ng; jj++) {
                    const uint4 *xp = (const uint4 *)(xs + 64 * (G + jj) + 16 * t);
                    st_group(sp[jj * ST_REC + lane], xp[0], xp[1],
                             ((const uint2 *)(sp + jj * ST_REC + 32))[g], magic, acc);
                }
            }
            used++;
            __syncwarp();
            if (lane == 0) st_issue(c, a.ops, n_ops, warp, ring0, bar0, issued, pol);
            if (k.tile != tile) { /* the warp's slice of this tile is done */
                float *pt = parts + ((grp * ST_LT + li) << o.lks) * 16;
                if (t == 0) pt[j * 16 + g] = acc[0], pt[j * 16 + 8 + g] = acc[2];
                acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
                li++;
            }
        }
        __syncthreads(); /* every slice's part is in */
        int per = ST_NW >> o.lks;
        for (int idx = warp;; idx += ST_NW) { /* the block's tiles, a warp each */
            int gi = idx % per, l2 = idx / per;
            int tile = blockIdx.x * per + gi + l2 * gridDim.x * per;
            if (l2 >= ST_LT || tile >= o.tiles) break;
            st_finish(a, o, tile, parts + ((gi * ST_LT + l2) << o.lks) * 16, lane);
        }
    }
}

extern "C" cudaError_t tk_step_launch(cudaStream_t st, const tk_step_args *a, int grid)
{
    static int attr_done = -1;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (attr_done != dev) {
        e = cudaFuncSetAttribute(k_step, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)tk_step_smem_bytes());
        if (e != cudaSuccess) return e;
        attr_done = dev;
    }
    e = cudaMemsetAsync(a->ctr, 0, sizeof(unsigned), st);
    if (e != cudaSuccess) return e;
    void *args[] = {(void *)a};
    return cudaLaunchCooperativeKernel((const void *)k_step, dim3((unsigned)grid), dim3(ST_NW * 32),
                                       args, tk_step_smem_bytes(), st);
}

extern "C" cudaError_t tk_step_fits(int *blocks_per_sm)
{
    cudaError_t e = cudaFuncSetAttribute(k_step, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)tk_step_smem_bytes());
    if (e != cudaSuccess) return e;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, k_step, ST_NW * 32,
                                                         tk_step_smem_bytes());
}
