/*
 * cuda_quant_v6.cu — the 4-bit decode GEMV for few tokens on the tensor
 * cores, built for one token (issue 7; TERN_QUANT_KERNEL=v6). Not the
 * default: on the H200 it streams no faster than v3 (docs/perf/quant.md,
 * "v6"), ~2.2 TB/s like every 4-bit GEMV tried.
 *
 * v3 (cuda_quant_mma.cu) puts tokens in the 8 columns of mma.m16n8k16, so
 * at one token 7/8 of every MMA is wasted, needs every MMA's 16 k-slots in
 * one quantization group (short pieces per lane), sums x over each group
 * with a second MMA, and streams through a shared-memory ring that limits
 * it to 2 blocks per SM. Here the columns hold (token, group) pairs:
 *
 *   A window is 64 bytes of a row (128 k, NG = 128 / group groups); lane
 *   (g, t) of the warp loads the 16 bytes t of the window (words 4t..4t+3)
 *   of rows g and g + 8 of its 16-row tile straight into registers, several
 *   windows ahead (no shared memory). A word gives 4 bf16x2 A registers as
 *   in v3: ((w >> 4j) & 0x000F000F) | 0x43004300 = (128 + v_j, 128 + v_j+4).
 *   Lane t's 32 k lie in group h(t) = t * NG / 4 of the window. Column c of
 *   B is token c / NG, group c % NG: lane (g, t) loads its token's x for its
 *   slots only where g % NG == h(t), zeros elsewhere, so column c sums
 *   x (128 + q) over exactly its group: D[row][c] = Cg. 8 / NG tokens per
 *   MMA; more tokens take more MMAs on the same A (passes, NP <= NG).
 *   Per window and column: acc += s Cg + (b - 128 s) Xg, with Xg (the sum
 *   of the token's x over the group) computed once per block into shared
 *   memory, so the MMAs per 16 x 128 weights are 8 at T <= 8 / NG (v3: 16).
 *
 * K may be split over W warps of a block (window i to warp i % W), summed
 * through shared memory in warp order; W depends on the shape only. A
 * column's sum, its fold, and the final order of sums do not depend on the
 * other tokens: a token's result is bitwise the same alone or in a batch.
 * The GLU variant gives each warp gate rows i..i+7 (A rows 0-7) and up rows
 * ff + i.. (A rows 8-15), so one lane holds both sums of an output and
 * writes silu(gate) * up rounded as tk_silu_mul would from a BF16 gate_up.
 * PDL (cuda_common.cuh): the first windows' loads go out before the wait.
 * Depends on cuda_common.cuh, cuda_qmma.cuh, cuda_quant.h.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_qmma.cuh"
#include "backend/cuda/cuda_quant.h"

/* Library configuration: windows in flight per lane, warps per block, and
 * the warps a launch should have (the K split doubles below it). H200 lab
 * (dev/kernels/q6_lab.cu, 2026-11-29): U = 2 beats 4 and 8 on every 8B
 * shape (more resident warps matter more than bytes in flight). */
#define Q6_U 2
#define Q6_WARPS 8
#define Q6_TARGET 4096

/* The scales (or biases) of this lane's two columns for one row: a 32-bit
 * pair of adjacent groups (NG >= 2) or one group twice (NG = 1). */
template <int NG>
static __device__ __forceinline__ uint32_t q6_pair(const uint16_t *p, int64_t i)
{
    if (NG >= 2) return __ldg((const uint32_t *)(p + i));
    uint32_t h = __ldg(p + i);
    return h | (h << 16);
}

struct q6_args {
    const bf16 *x;
    const uint4 *q;
    const uint16_t *sc, *bi;
    const void *bias;
    void *y;
    int64_t ys;
    int xs, n_tok, in, out; /* out: rows of the plain GEMV; GLU: ff */
    int bdt, ydt, wsplit;
};

/* x sums per (token, group) into xsum[tok * ngroups + G]: 4 threads per
 * sum, each over group / 4 consecutive values, then a fixed butterfly. */
template <int GROUP>
static __device__ __forceinline__ void q6_xsums(const q6_args &a, float *xsum)
{
    int ngroups = a.in / GROUP, n = a.n_tok * ngroups * 4;
    int n_pad = (n + blockDim.x - 1) / blockDim.x * blockDim.x;
    for (int idx = threadIdx.x; idx < n_pad; idx += blockDim.x) {
        float s = 0.0f;
        int tg = idx >> 2, tok = tg / (ngroups ? ngroups : 1), G = tg - tok * ngroups;
        if (idx < n) {
            const uint4 *p = (const uint4 *)(a.x + (int64_t)tok * a.xs + G * GROUP) +
                             (idx & 3) * (GROUP / 32);
#pragma unroll
            for (int c = 0; c < GROUP / 32; c++) {
                uint4 u = __ldg(p + c);
                const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int k = 0; k < 4; k++)
                    s += __uint_as_float(w[k] << 16) + __uint_as_float(w[k] & 0xffff0000u);
            }
        }
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        if (idx < n && (idx & 3) == 0) xsum[tg] = s;
    }
}

template <int GROUP, int SDT, int NP, int U, int WARPS, bool GLU>
static __global__ void __launch_bounds__(WARPS * 32, (NP == 1 && U <= 4 ? 24 : 16) / WARPS)
    k_qgemv6(q6_args a)
{
    constexpr int NG = 128 / GROUP, TPM = 8 / NG;
    extern __shared__ __align__(16) float q6_smem[];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int ks = warp % a.wsplit, tile = blockIdx.x * (WARPS / a.wsplit) + warp / a.wsplit;
    int ngroups = a.in / GROUP, n_win = a.in / 128;
    /* A rows g and g + 8 of the tile: plain rows tile*16 + g (+8), GLU gate
     * row tile*8 + g and up row ff + tile*8 + g. */
    int64_t r_lo, r_hi;
    bool live_lo, live_hi;
    if (GLU) {
        r_lo = (int64_t)tile * 8 + g;
        live_lo = live_hi = r_lo < a.out;
        if (!live_lo) r_lo = a.out - 1;
        r_hi = r_lo + a.out;
    } else {
        r_lo = (int64_t)tile * 16 + g;
        r_hi = r_lo + 8;
        live_lo = r_lo < a.out, live_hi = r_hi < a.out;
        if (!live_lo) r_lo = a.out - 1;
        if (!live_hi) r_hi = a.out - 1;
    }
    bool tile_live = GLU ? (int64_t)tile * 8 < a.out : (int64_t)tile * 16 < a.out;
    int n_mine = tile_live && ks < n_win ? (n_win - 1 - ks) / a.wsplit + 1 : 0;
    const uint4 *q_lo = a.q + r_lo * (a.in / 32) + t, *q_hi = a.q + r_hi * (a.in / 32) + t;
    uint4 wl[U], wh[U];
#pragma unroll
    for (int u = 0; u < U; u++)
        if (u < n_mine) {
            int wi = ks + u * a.wsplit;
            wl[u] = tk_ld_stream(q_lo + wi * 4);
            wh[u] = tk_ld_stream(q_hi + wi * 4);
        }
    tk_pdl_wait();
    tk_pdl_launch();
    float *xsum = q6_smem;
    q6_xsums<GROUP>(a, xsum);
    __syncthreads();

    /* This lane's B: token p * TPM + g / NG, only where its column's group
     * g % NG is the group of its slots, t * NG / 4. */
    bool bgrp = g % NG == t * NG / 4;
    const bf16 *xb[NP];
    bool bon[NP];
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int tok = p * TPM + g / NG;
        bon[p] = bgrp && tok < a.n_tok;
        xb[p] = a.x + (int64_t)(bon[p] ? tok : 0) * a.xs + 32 * t;
    }
    /* Columns 2t, 2t + 1 of this lane: their token and group in the window. */
    int ctok[NP][2], cgrp[2];
#pragma unroll
    for (int c = 0; c < 2; c++) {
        cgrp[c] = (2 * t + c) % NG;
#pragma unroll
        for (int p = 0; p < NP; p++) ctok[p][c] = p * TPM + (2 * t + c) / NG;
    }
    const uint16_t *s_lo = a.sc + r_lo * ngroups + cgrp[0], *s_hi = a.sc + r_hi * ngroups + cgrp[0];
    const uint16_t *b_lo = a.bi + r_lo * ngroups + cgrp[0], *b_hi = a.bi + r_hi * ngroups + cgrp[0];
    float acc[NP][2][2];
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int r = 0; r < 2; r++) acc[p][r][0] = acc[p][r][1] = 0.0f;

    for (int n = 0; n < n_mine; n += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (n + u < n_mine) {
            int wi = ks + (n + u) * a.wsplit;
            int64_t gi = (int64_t)wi * NG;
            uint32_t sl = q6_pair<NG>(s_lo, gi), sh = q6_pair<NG>(s_hi, gi);
            uint32_t bl = q6_pair<NG>(b_lo, gi), bh = q6_pair<NG>(b_hi, gi);
            const uint32_t al[4] = {wl[u].x, wl[u].y, wl[u].z, wl[u].w};
            const uint32_t ah[4] = {wh[u].x, wh[u].y, wh[u].z, wh[u].w};
            if (n + u + U < n_mine) { /* refill the slot U windows ahead */
                int wn = wi + U * a.wsplit;
                wl[u] = tk_ld_stream(q_lo + wn * 4);
                wh[u] = tk_ld_stream(q_hi + wn * 4);
            }
            float d[NP][4];
#pragma unroll
            for (int p = 0; p < NP; p++) d[p][0] = d[p][1] = d[p][2] = d[p][3] = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t A[8];
#pragma unroll
                for (int i = 0; i < 4; i++) A[2 * i] = tk_q4_pair(al[j], i), A[2 * i + 1] = tk_q4_pair(ah[j], i);
#pragma unroll
                for (int p = 0; p < NP; p++) {
                    uint4 xv = bon[p] ? __ldg((const uint4 *)(xb[p] + wi * 128 + 8 * j))
                                      : make_uint4(0, 0, 0, 0);
                    uint32_t b0 = __byte_perm(xv.x, xv.z, 0x5410), b1 = __byte_perm(xv.x, xv.z, 0x7632);
                    uint32_t b2 = __byte_perm(xv.y, xv.w, 0x5410), b3 = __byte_perm(xv.y, xv.w, 0x7632);
                    tk_mma_bf16(d[p], A[0], A[1], A[2], A[3], b0, b1);
                    tk_mma_bf16(d[p], A[4], A[5], A[6], A[7], b2, b3);
                }
            }
#pragma unroll
            for (int c = 0; c < 2; c++) {
                float s0 = tk_half_of<SDT>(sl, c), s1 = tk_half_of<SDT>(sh, c);
                float o0 = fmaf(-128.0f, s0, tk_half_of<SDT>(bl, c));
                float o1 = fmaf(-128.0f, s1, tk_half_of<SDT>(bh, c));
                int G = wi * NG + cgrp[c];
#pragma unroll
                for (int p = 0; p < NP; p++) {
                    float X = ctok[p][c] < a.n_tok ? xsum[ctok[p][c] * ngroups + G] : 0.0f;
                    acc[p][0][c] = fmaf(o0, X, fmaf(s0, d[p][c], acc[p][0][c]));
                    acc[p][1][c] = fmaf(o1, X, fmaf(s1, d[p][2 + c], acc[p][1][c]));
                }
            }
            }
        }
    }
    if (a.wsplit > 1) { /* sum the K split in warp order */
        float *red = q6_smem + a.n_tok * ngroups;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < NP * 4; i++) red[(warp * 32 + lane) * NP * 4 + i] = (&acc[0][0][0])[i];
        __syncthreads();
        if (ks != 0) return;
        for (int w = 1; w < a.wsplit; w++)
#pragma unroll
            for (int i = 0; i < NP * 4; i++) (&acc[0][0][0])[i] += red[((warp + w) * 32 + lane) * NP * 4 + i];
    }
    /* The columns of one token, in group order: NG = 1: one column; 2: this
     * lane's pair; 4: this lane's pair, then lane t ^ 1's (t even first). */
    float v[NP][2][2];
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (NG == 1) {
                v[p][r][0] = acc[p][r][0], v[p][r][1] = acc[p][r][1];
            } else {
                float m = acc[p][r][0] + acc[p][r][1];
                if (NG == 4) {
                    float o = __shfl_xor_sync(0xffffffffu, m, 1);
                    m = t & 1 ? o + m : m + o;
                }
                v[p][r][0] = m;
            }
        }
    if (!tile_live) return;
    /* Which tokens this lane writes: NG = 1 both columns' (2t, 2t + 1 of each
     * pass), NG = 2 token t, NG = 4 token t / 2 from the even lane. */
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int c = 0; c < (NG == 1 ? 2 : 1); c++) {
            int tok = ctok[p][c];
            if (tok >= a.n_tok || (NG == 4 && (t & 1))) continue;
            float lo = v[p][0][c], hi = v[p][1][c];
            if (GLU) {
                if (!live_lo) continue;
                if (a.bias) lo += tk_ld(a.bias, a.bdt, r_lo), hi += tk_ld(a.bias, a.bdt, r_hi);
                float gt = __bfloat162float(__float2bfloat16(lo));
                float up = __bfloat162float(__float2bfloat16(hi));
                ((bf16 *)a.y)[tok * a.ys + r_lo] = __float2bfloat16(gt / (1.0f + expf(-gt)) * up);
            } else {
                if (live_lo) {
                    if (a.bias) lo += tk_ld(a.bias, a.bdt, r_lo);
                    tk_st(a.y, a.ydt, tok * a.ys + r_lo, lo);
                }
                if (live_hi) {
                    if (a.bias) hi += tk_ld(a.bias, a.bdt, r_hi);
                    tk_st(a.y, a.ydt, tok * a.ys + r_hi, hi);
                }
            }
        }
}

/* Warps per tile for a [out, in] weight (the plain shape; GLU: 2 ff rows). */
static int q6_split_for(int64_t in, int64_t out, int warps, int target)
{
    int64_t tiles = tk_cdiv(out, 16), n_win = in / 128;
    int w = 1;
    while (w < warps && tiles * w < target && 2 * w <= n_win) w *= 2;
    return w;
}

extern "C" int tk_qgemv6_split(int64_t in, int64_t out)
{
    return q6_split_for(in, out, Q6_WARPS, Q6_TARGET);
}

extern "C" int tk_qgemv6_ok(const struct tk_qmat *m, const void *x, int xdt, int64_t x_stride,
                            int64_t in, int64_t out)
{
    if (m->bits != 4 || !(m->sdt == TK_BF16 || m->sdt == TK_F16) ||
        !(m->group == 32 || m->group == 64 || m->group == 128) || xdt != TK_BF16)
        return 0;
    /* x sums of 8 tokens in 32 KB of shared memory: in / group <= 1024 */
    return in > 0 && in % 128 == 0 && in / m->group <= 1024 && out > 0 && out < (1 << 30) &&
           x_stride % 8 == 0 && x_stride < (1 << 30) &&
           ((uintptr_t)x | (uintptr_t)m->q) % 16 == 0 &&
           ((uintptr_t)m->scales | (uintptr_t)m->biases) % 4 == 0;
}

/* One launch of at most 8 tokens (NP passes of 8 / NG tokens). */
template <int GROUP, int SDT, int NP, int U, int WARPS, bool GLU>
static cudaError_t q6_launch(cudaStream_t st, q6_args a, int64_t rows)
{
    int tiles = (int)tk_cdiv(rows, 16);
    unsigned blocks = (unsigned)tk_cdiv(tiles, WARPS / a.wsplit);
    size_t smem = (size_t)a.n_tok * (a.in / GROUP) * 4 +
                  (a.wsplit > 1 ? (size_t)WARPS * 32 * NP * 4 * 4 : 0);
    return tk_launch(k_qgemv6<GROUP, SDT, NP, U, WARPS, GLU>, dim3(blocks), dim3(WARPS * 32),
                     smem, st, a);
}

typedef cudaError_t (*q6_fn)(cudaStream_t, q6_args, int64_t);

/* f[group 32/64/128][pass count - 1] for one scale dtype. */
#define Q6_G(G, S, U, W, GLU)                                                                      \
    {q6_launch<G, S, 1, U, W, GLU>, q6_launch<G, S, (128 / G >= 2 ? 2 : 1), U, W, GLU>,         \
     q6_launch<G, S, (128 / G >= 4 ? 3 : 1), U, W, GLU>,                                          \
     q6_launch<G, S, (128 / G >= 4 ? 4 : 1), U, W, GLU>}
#define Q6_TAB(S, U, W, GLU) {Q6_G(32, S, U, W, GLU), Q6_G(64, S, U, W, GLU), Q6_G(128, S, U, W, GLU)}

template <int U, int WARPS, bool GLU>
static cudaError_t q6_run(cudaStream_t st, const struct tk_qmat *m, const void *x, int64_t xs,
                          const void *bias, int bdt, void *y, int ydt, int64_t ys, int64_t n_tok,
                          int64_t in, int64_t out, int wsplit)
{
    static const q6_fn tab[2][3][4] = {Q6_TAB(TK_BF16, U, WARPS, GLU), Q6_TAB(TK_F16, U, WARPS, GLU)};
    int gi = m->group == 32 ? 0 : m->group == 64 ? 1 : 2, ng = 128 / m->group;
    size_t ysz = GLU ? 2 : ydt == TK_F32 ? 4 : 2;
    for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
        int nt = (int)(n_tok - t0 < 8 ? n_tok - t0 : 8), tpm = 8 / ng;
        int np = (nt + tpm - 1) / tpm;
        q6_args a = {(const bf16 *)x + t0 * xs, (const uint4 *)m->q, (const uint16_t *)m->scales,
                     (const uint16_t *)m->biases, bias, (char *)y + (size_t)(t0 * ys) * ysz, ys,
                     (int)xs, nt, (int)in, (int)out, bdt, ydt, wsplit};
        cudaError_t e = tab[m->sdt == TK_F16][gi][np - 1](st, a, GLU ? 2 * out : out);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t tk_qgemv6(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                 int64_t x_stride, const void *bias, int bdt, void *y, int ydt,
                                 int64_t y_stride, int64_t n_tok, int64_t in, int64_t out)
{
    if (n_tok <= 0 || out <= 0) return cudaSuccess;
    return q6_run<Q6_U, Q6_WARPS, false>(st, m, x, x_stride, bias, bdt, y, ydt, y_stride, n_tok,
                                         in, out, tk_qgemv6_split(in, out));
}

extern "C" cudaError_t tk_qgemv6_glu(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                     int64_t x_stride, const void *bias, int bdt, void *act,
                                     int64_t act_stride, int64_t n_tok, int64_t in, int64_t ff)
{
    if (n_tok <= 0 || ff <= 0) return cudaSuccess;
    return q6_run<Q6_U, Q6_WARPS, true>(st, m, x, x_stride, bias, bdt, act, TK_BF16, act_stride,
                                        n_tok, in, ff, tk_qgemv6_split(in, 2 * ff));
}
