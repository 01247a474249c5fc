/*
 * q7_lab.cu — kernel lab for issue 7: a 4-bit (g64, bf16 scales) decode
 * GEMV on weights REPACKED once into the mma.m16n8k16 fragment order, to
 * cut the instructions per weight that limit every GEMV on the MLX layout
 * (docs/perf/quant.md: v3 / v6 run ~0.12 warp instructions per weight and
 * stall on a math pipe; <= ~0.05 is needed to stream 4.2 TB/s).
 *
 * Repacked layout (k_q7_repack, from MLX's [out, in/8] words): 16-row tile
 * tau, group G (64 k), lane L = 4 g + t, word s (the group's k-step s, 16 k):
 *   frag[((tau * nG + G) * 32 + L) * 4 + s], nibbles, with k_i = 64 G + 16 s + 4 t + i,
 *   r0 = 16 tau + g, r1 = r0 + 8:
 *     nib0 = q[r0][k0]  nib4 = q[r0][k1]  nib1 = q[r1][k0]  nib5 = q[r1][k1]
 *     nib2 = q[r0][k2]  nib6 = q[r0][k3]  nib3 = q[r1][k2]  nib7 = q[r1][k3]
 * so ((w >> 4 j) & 0x000F000F) | 0x43004300 is fragment register a_j as
 * bf16 pairs (128 + q) for j = 0..3 (a0 = A[g][2t, 2t+1], a1 = A[g+8][..],
 * a2 = A[g][2t+8, 2t+9], a3 = A[g+8][..]) with MMA k-slots (2t, 2t+1, 2t+8,
 * 2t+9) standing for real k (4t, 4t+1, 4t+2, 4t+3): B is then x[kb + 4t ..
 * + 3] of token g, ONE 8-byte load in natural order (no PRMT), and a warp's
 * 16-byte load per lane is 512 contiguous bytes (one group of a tile).
 *   sb[(tau * nG + G) * 8 + g] = {s[r0] | s[r1] << 16, b[r0] | b[r1] << 16}.
 * Per group: 4 k-steps x (7 unpack ops, 1 x load, MMA for the sums, MMA with
 * A = 1 for sum x), then v3's fold acc += s C + (b - 128 s) X. K is split
 * over W warps of a block (summed in warp order through shared memory), as
 * in v3; U groups in flight per warp.
 *
 * A second variant (v7h, F16 = true) takes F16 fragments: the low nibble of
 * each byte gives rows g as 1024 + q, the high nibble stays in place for
 * rows g + 8 as 1024 + 16 q (scale / 16 in the fold): 4 LOP3 + 1 shift per
 * word instead of 3 shifts + 4 LOP3, with x converted to F16 once per block
 * into shared memory (values past 65504 would overflow: a library version
 * needs a guard).
 *
 * The lab checks v7 against v3 (cuda_quant_mma.cu, included) at T = 1 and 8,
 * v7's batch invariance (each token of T = 8 bitwise the token alone), and
 * times v3 and v7 (U, W sweep) on the Llama-3.1-8B shapes against the copy
 * rate of the same run (medians of 9 x 20 launches cycling through >= 300 MB
 * of weight copies). Written 2026-11-30 without device time: not yet run.
 *
 * Shared helpers: lab_common.cuh.
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/q7_lab.cu -o q7_lab
 * Run:   ./q7_lab     (./q7_lab --host-check: the layout emulated on the CPU, no GPU)
 */
#include "backend/cuda/cuda_quant_mma.cu"
#include "lab_common.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>


/* ---------------------------------------------------------------- repack */

/* Repacks element id = ((tau * nG + G) * 32 + L) of the layout above (the
 * 16 bytes of lane L, and for t == 0 the scale word of row g): host and device. */
static __host__ __device__ void q7_repack_one(const uint32_t *q, const uint16_t *sc,
                                              const uint16_t *bi, int out, int in, int64_t id,
                                              uint4 *frag, uint2 *sb)
{
    int nG = in / 64;
    int L = (int)(id % 32), g = L >> 2, t = L & 3;
    int64_t tg = id / 32;
    int G = (int)(tg % nG), tau = (int)(tg / nG);
    int r0 = 16 * tau + g, r1 = r0 + 8, wpr = in / 8;
    uint32_t w4[4];
    for (int s = 0; s < 4; s++) {
        int k0 = 64 * G + 16 * s + 4 * t, off = k0 % 8;
        uint32_t m0 = r0 < out ? q[(int64_t)r0 * wpr + k0 / 8] >> (4 * off) : 0u;
        uint32_t m1 = r1 < out ? q[(int64_t)r1 * wpr + k0 / 8] >> (4 * off) : 0u;
        uint32_t n0[4], n1[4];
        for (int i = 0; i < 4; i++) n0[i] = (m0 >> (4 * i)) & 15u, n1[i] = (m1 >> (4 * i)) & 15u;
        w4[s] = n0[0] | n1[0] << 4 | n0[2] << 8 | n1[2] << 12 | n0[1] << 16 | n1[1] << 20 |
                n0[3] << 24 | n1[3] << 28;
    }
    frag[id] = make_uint4(w4[0], w4[1], w4[2], w4[3]);
    if (t == 0) {
        uint32_t s0 = r0 < out ? sc[(int64_t)r0 * nG + G] : 0u, s1 = r1 < out ? sc[(int64_t)r1 * nG + G] : 0u;
        uint32_t b0 = r0 < out ? bi[(int64_t)r0 * nG + G] : 0u, b1 = r1 < out ? bi[(int64_t)r1 * nG + G] : 0u;
        sb[tg * 8 + g] = make_uint2(s0 | s1 << 16, b0 | b1 << 16);
    }
}

static __global__ void k_q7_repack(const uint32_t *q, const uint16_t *sc, const uint16_t *bi,
                                   int out, int in, uint4 *frag, uint2 *sb)
{
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id < (int64_t)((out + 15) / 16) * (in / 64) * 32) q7_repack_one(q, sc, bi, out, in, id, frag, sb);
}

/* Host emulation of one launch of k_q7 at T tokens (float arithmetic, MMA
 * semantics from the PTX fragment tables: lane (g, t) holds A[g][2t, 2t+1]
 * in a0, A[g+8][..] in a1, A[g][2t+8, 2t+9] in a2, A[g+8][..] in a3, and B
 * rows 2t, 2t+1 / 2t+8, 2t+9 of column g in b0 / b1), against the plain
 * dequantized product: checks the repack and the fragment mapping without a
 * GPU (./q7_lab --host-check). */
static float bfh(uint32_t h16) { uint32_t u = h16 << 16; float f; memcpy(&f, &u, 4); return f; }

static int q7_host_check(bool f16)
{
    const int out = 40, in = 256, T = 3, nG = in / 64, tiles = (out + 15) / 16;
    std::vector<uint32_t> q((size_t)out * in / 8);
    std::vector<uint16_t> sc((size_t)out * nG), bi((size_t)out * nG), xb((size_t)T * in);
    uint32_t r = 12345;
    auto rnd = [&]() { r = r * 1664525u + 1013904223u; return r; };
    for (auto &w : q) w = rnd();
    for (auto &v : sc) v = (uint16_t)(0x3C00 | (rnd() >> 25));
    for (auto &v : bi) v = (uint16_t)(0x3D80 | (rnd() >> 25) | (rnd() & 0x8000));
    for (auto &v : xb) v = (uint16_t)(0x3F00 | (rnd() >> 25) | (rnd() & 0x8000));
    std::vector<uint4> frag((size_t)tiles * nG * 32);
    std::vector<uint2> sb((size_t)tiles * nG * 8);
    for (int64_t id = 0; id < (int64_t)frag.size(); id++)
        q7_repack_one(q.data(), sc.data(), bi.data(), out, in, id, frag.data(), sb.data());
    double maxd = 0, maxr = 0;
    for (int tau = 0; tau < tiles; tau++)
        for (int n = 0; n < T; n++) {
            float acc[16] = {0};
            for (int G = 0; G < nG; G++) {
                float C[16] = {0}, X[16] = {0};
                for (int k = 0; k < 4; k++)
                    for (int L = 0; L < 32; L++) { /* lane L's share of the MMA for column n */
                        int g = L >> 2, t = L & 3;
                        const uint32_t *wq = &frag[((size_t)tau * nG + G) * 32 + L].x;
                        uint32_t w = wq[k];
                        auto a = [&](int j, int hi) {
                            float q4 = (float)((w >> (4 * j + 16 * hi)) & 15u);
                            return f16 ? 1024.0f + q4 * (j & 1 ? 16.0f : 1.0f) : 128.0f + q4;
                        };
                        /* B rows 2t, 2t+1, 2t+8, 2t+9 of column n: lane (n, t)'s x[4t .. 4t+3] */
                        int kb = 64 * G + 16 * k + 4 * t;
                        float xv[4];
                        for (int i = 0; i < 4; i++) xv[i] = bfh(xb[(size_t)n * in + kb + i]);
                        /* row g: slots (2t, 2t+1) from a0, (2t+8, 2t+9) from a2; row g+8: a1, a3 */
                        C[g] += a(0, 0) * xv[0] + a(0, 1) * xv[1] + a(2, 0) * xv[2] + a(2, 1) * xv[3];
                        C[g + 8] += a(1, 0) * xv[0] + a(1, 1) * xv[1] + a(3, 0) * xv[2] + a(3, 1) * xv[3];
                        X[g] += xv[0] + xv[1] + xv[2] + xv[3];
                        X[g + 8] += xv[0] + xv[1] + xv[2] + xv[3];
                    }
                for (int row = 0; row < 16; row++) {
                    uint2 s = sb[((size_t)tau * nG + G) * 8 + (row & 7)];
                    float sv = bfh(row < 8 ? s.x & 0xffff : s.x >> 16);
                    float bv = bfh(row < 8 ? s.y & 0xffff : s.y >> 16);
                    if (!f16) acc[row] += sv * C[row] + (bv - 128.0f * sv) * X[row];
                    else if (row < 8) acc[row] += sv * C[row] + (bv - 1024.0f * sv) * X[row];
                    else acc[row] += sv / 16.0f * C[row] + (bv - 64.0f * sv) * X[row];
                }
            }
            for (int row = 0; row < 16 && 16 * tau + row < out; row++) { /* the plain product */
                int o = 16 * tau + row;
                double ref = 0;
                for (int k = 0; k < in; k++) {
                    uint32_t qv = (q[(size_t)o * in / 8 + k / 8] >> (4 * (k % 8))) & 15u;
                    ref += (double)(bfh(sc[(size_t)o * nG + k / 64]) * qv + bfh(bi[(size_t)o * nG + k / 64])) *
                           bfh(xb[(size_t)n * in + k]);
                }
                maxd = std::max(maxd, fabs(acc[row] - ref));
                maxr = std::max(maxr, fabs(ref));
            }
        }
    double e = maxd / maxr;
    printf("host check (repack + %s fragment mapping, %d x %d, T %d): rel err %.2e %s\n",
           f16 ? "f16" : "bf16", out, in, T, e, e < 1e-4 ? "ok" : "FAILED");
    return e < 1e-4 ? 0 : 1;
}

/* ---------------------------------------------------------------- GEMV */

#define Q7_WARPS 8

/* d = A B + c for one m16n8k16 with F16 operands (f32 accumulators). */
static __device__ __forceinline__ void mma_f16(float *d, uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* F16 = false: bf16 fragments, 128 + q (a shift and a LOP3 per pair but
 * the first). F16 = true: F16 fragments, rows g from the low nibble of each
 * byte (1024 + q) and rows g + 8 from the high one left in place (1024 +
 * 16 q, its scale divided by 16): 4 LOP3 and one shift per word; x converted
 * once per block into shared memory as F16 (rows padded by 8 halves). */
template <int U, int W, bool F16>
static __global__ void __launch_bounds__(Q7_WARPS * 32)
    k_q7(const uint4 *__restrict__ frag, const uint2 *__restrict__ sb, const bf16 *__restrict__ x,
         int xs, int n_tok, float *y, int ys, int out, int nG)
{
    __shared__ float red[Q7_WARPS][32][4];
    extern __shared__ __align__(16) __half q7_xh[];
    int in = 64 * nG, xh_s = in + 8;
    if (F16) {
        for (int i = threadIdx.x; i < n_tok * in; i += blockDim.x)
            q7_xh[(i / in) * xh_s + i % in] = __float2half_rn(__bfloat162float(x[(size_t)(i / in) * xs + i % in]));
        __syncthreads();
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int ks = warp % W, tile = blockIdx.x * (Q7_WARPS / W) + warp / W;
    bool live = tile * 16 < out;
    const uint4 *fp = frag + (size_t)tile * nG * 32 + lane;
    const uint2 *sp = sb + (size_t)tile * nG * 8 + g;
    bool has_x = g < n_tok;
    const bf16 *xl = x + (size_t)(has_x ? g : 0) * xs + 4 * t;
    const __half *xhl = q7_xh + (has_x ? g : 0) * xh_s + 4 * t;
    int n_mine = live && ks < nG ? (nG - 1 - ks) / W + 1 : 0;
    const uint32_t one = F16 ? 0x3C003C00u : 0x3F803F80u;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint4 wv[U];
    uint2 sv[U];
    /* running pointers: the next group to load, the x of the group in use */
    const uint4 *fn = fp + (size_t)ks * 32;
    const uint2 *sn = sp + (size_t)ks * 8;
    const bf16 *xc = xl + 64 * ks;
    const __half *xhc = xhl + 64 * ks;
#pragma unroll
    for (int u = 0; u < U; u++)
        if (u < n_mine) wv[u] = tk_ld_stream(fn), sv[u] = __ldg(sn), fn += 32 * W, sn += 8 * W;
    for (int n = 0; n < n_mine; n += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (n + u >= n_mine) break;
            uint32_t ww[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
            uint2 s = sv[u];
            if (n + u + U < n_mine)
                wv[u] = tk_ld_stream(fn), sv[u] = __ldg(sn), fn += 32 * W, sn += 8 * W;
            float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f}, xg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (F16) {
                    uint2 xv = has_x ? *(const uint2 *)(xhc + 16 * k) : make_uint2(0, 0);
                    const uint32_t lo = 0x000F000Fu, hi = 0x00F000F0u, m = 0x64006400u;
                    uint32_t w8 = ww[k] >> 8;
                    mma_f16(cg, (ww[k] & lo) | m, (ww[k] & hi) | m, (w8 & lo) | m, (w8 & hi) | m,
                            xv.x, xv.y);
                    mma_f16(xg, one, one, one, one, xv.x, xv.y);
                } else {
                    uint2 xv = has_x ? __ldg((const uint2 *)(xc + 16 * k)) : make_uint2(0, 0);
                    tk_mma_bf16(cg, tk_q4_pair(ww[k], 0), tk_q4_pair(ww[k], 1), tk_q4_pair(ww[k], 2), tk_q4_pair(ww[k], 3),
                        xv.x, xv.y);
                    tk_mma_bf16(xg, one, one, one, one, xv.x, xv.y);
                }
            }
            xc += 64 * W;
            xhc += 64 * W;
            float s0 = __uint_as_float(s.x << 16), s1 = __uint_as_float(s.x & 0xffff0000u);
            /* the sums are of (OFF + q) x, rows g + 8 of F16 of (1024 + 16 q) x */
            float o0 = fmaf(F16 ? -1024.0f : -128.0f, s0, __uint_as_float(s.y << 16));
            float o1 = fmaf(F16 ? -64.0f : -128.0f, s1, __uint_as_float(s.y & 0xffff0000u));
            if (F16) s1 *= 0.0625f;
            acc[0] = fmaf(o0, xg[0], fmaf(s0, cg[0], acc[0]));
            acc[1] = fmaf(o0, xg[1], fmaf(s0, cg[1], acc[1]));
            acc[2] = fmaf(o1, xg[2], fmaf(s1, cg[2], acc[2]));
            acc[3] = fmaf(o1, xg[3], fmaf(s1, cg[3], acc[3]));
        }
    }
    if (W > 1) {
#pragma unroll
        for (int i = 0; i < 4; i++) red[warp][lane][i] = acc[i];
        __syncthreads();
        if (ks != 0) return;
        for (int w = 1; w < W; w++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[i] += red[warp + w][lane][i];
    }
    if (!live) return;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = tile * 16 + g + (i >> 1) * 8, tok = 2 * t + (i & 1);
        if (row < out && tok < n_tok) y[(size_t)tok * ys + row] = acc[i];
    }
}

template <int U, int W, bool F16>
static void q7_run(const uint4 *frag, const uint2 *sb, const bf16 *x, int in, int n_tok, float *y,
                   int out)
{
    static bool attr;
    if (F16 && !attr) {
        CK(cudaFuncSetAttribute(k_q7<U, W, F16>, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 << 10));
        attr = true;
    }
    unsigned blocks = (unsigned)(((out + 15) / 16 + Q7_WARPS / W - 1) / (Q7_WARPS / W));
    size_t smem = F16 ? (size_t)n_tok * (in + 8) * 2 : 0;
    k_q7<U, W, F16><<<blocks, Q7_WARPS * 32, smem>>>(frag, sb, x, in, n_tok, y, out, out, in / 64);
}

/* ---------------------------------------------------------------- lab */



struct copy1 {
    tk_qmat m;
    uint4 *frag;
    uint2 *sb;
};

struct wset {
    int out, in, nc;
    size_t bytes;
    std::vector<copy1> c;
    bf16 *x;
    float *y;
};

static wset make(int out, int in)
{
    wset w;
    w.out = out, w.in = in;
    size_t qb = (size_t)out * in / 2, sbb = (size_t)out * (in / 64) * 2;
    size_t tiles = (out + 15) / 16, nG = in / 64;
    w.bytes = qb + 2 * sbb;
    w.nc = (int)std::max<size_t>(2, (300ull << 20) / w.bytes + 1);
    for (int c = 0; c < w.nc; c++) {
        void *q, *s, *b;
        copy1 k;
        CK(cudaMalloc(&q, qb));
        CK(cudaMalloc(&s, sbb));
        CK(cudaMalloc(&b, sbb));
        fill(q, qb, 11 + c, 0xffffffffu, 0);
        fill(s, sbb, 101 + c, 0x007F007Fu, 0x3C003C00u); /* scales in [2^-7, 2^-6) */
        fill(b, sbb, 201 + c, 0x807F807Fu, 0x3D803D80u); /* biases +-[2^-4, 2^-3) */
        k.m = {q, s, b, TK_BF16, 4, 64};
        CK(cudaMalloc(&k.frag, tiles * nG * 32 * 16));
        CK(cudaMalloc(&k.sb, tiles * nG * 8 * 8));
        int64_t n = (int64_t)tiles * nG * 32;
        k_q7_repack<<<(unsigned)((n + 255) / 256), 256>>>((const uint32_t *)q, (const uint16_t *)s,
                                                          (const uint16_t *)b, out, in, k.frag, k.sb);
        CK(cudaGetLastError());
        w.c.push_back(k);
    }
    CK(cudaMalloc(&w.x, (size_t)8 * in * 2));
    fill(w.x, (size_t)8 * in * 2, 7, 0x807F807Fu, 0x3F003F00u); /* +-[0.5, 1) */
    CK(cudaMalloc(&w.y, (size_t)8 * out * 4));
    CK(cudaDeviceSynchronize());
    return w;
}

static void drop(wset &w)
{
    for (auto &k : w.c) {
        CK(cudaFree((void *)k.m.q));
        CK(cudaFree((void *)k.m.scales));
        CK(cudaFree((void *)k.m.biases));
        CK(cudaFree(k.frag));
        CK(cudaFree(k.sb));
    }
    CK(cudaFree(w.x));
    CK(cudaFree(w.y));
}

static double g_copy;





typedef void (*q7_fn)(const uint4 *, const uint2 *, const bf16 *, int, int, float *, int);
struct cfg {
    int u, w, f16;
    q7_fn f;
};
#define C7(U, W, H) {U, W, H, q7_run<U, W, H>}
static const cfg CFGS[] = {C7(2, 1, 0), C7(4, 1, 0), C7(8, 1, 0), C7(2, 2, 0), C7(4, 2, 0),
                           C7(8, 2, 0), C7(2, 4, 0), C7(4, 4, 0), C7(2, 8, 0), C7(4, 8, 0),
                           C7(2, 1, 1), C7(4, 1, 1), C7(8, 1, 1), C7(2, 2, 1), C7(4, 2, 1),
                           C7(2, 4, 1), C7(4, 4, 1), C7(2, 8, 1), C7(4, 8, 1)};

static int g_bad;

/* v7 (config c) against v3 at T = 1 and 8, and each token of T = 8 against the token alone. */
static void check(wset &w, const cfg &c, const char *name)
{
    size_t n = (size_t)w.out;
    std::vector<float> ref1, ref8, got1, got8;
    CK(tk_qgemv_mma(0, &w.c[0].m, w.x, w.in, NULL, 0, w.y, TK_F32, w.out, 8, w.in, w.out));
    ref8 = get(w.y, 8 * n);
    c.f(w.c[0].frag, w.c[0].sb, w.x, w.in, 8, w.y, w.out);
    CK(cudaDeviceSynchronize());
    got8 = get(w.y, 8 * n);
    double e8 = rel(got8, ref8), e1 = 0;
    bool inv = true;
    for (int tok = 0; tok < 8; tok++) {
        c.f(w.c[0].frag, w.c[0].sb, w.x + (size_t)tok * w.in, w.in, 1, w.y, w.out);
        CK(cudaDeviceSynchronize());
        got1 = get(w.y, n);
        std::vector<float> r(ref8.begin() + tok * n, ref8.begin() + (tok + 1) * n);
        e1 = std::max(e1, rel(got1, r));
        inv = inv && memcmp(got1.data(), got8.data() + tok * n, n * 4) == 0;
    }
    bool ok = e8 < 1e-4 && e1 < 1e-4 && inv;
    g_bad += !ok;
    printf("check %-8s %s U%d W%d: rel vs v3 T=8 %.2e, T=1 %.2e, batch-invariant %s %s\n", name,
           c.f16 ? "f16" : "bf16", c.u, c.w, e8, e1, inv ? "yes" : "NO", ok ? "ok" : "FAILED");
}

int main(int argc, char **argv)
{
    int host_bad = q7_host_check(false) + q7_host_check(true);
    if (host_bad || (argc > 1 && strcmp(argv[1], "--host-check") == 0)) return host_bad;
    g_copy = copy_rate();
    printf("copy (read + write) %.0f GB/s\n", g_copy);
    struct { const char *name; int out, in, mult; } shapes[] = {
        {"qkv", 6144, 4096, 32}, {"o", 4096, 4096, 32}, {"gate_up", 28672, 4096, 32},
        {"down", 4096, 14336, 32}, {"lm_head", 128256, 4096, 1}};
    {
        wset w = make(1000, 1536); /* a partial tile, 24 groups */
        for (const cfg &c : CFGS) check(w, c, "1000x1536");
        drop(w);
    }
    double sum3 = 0, sum7 = 0;
    printf("%-8s %-10s %9s %7s %6s\n", "shape", "kernel", "us", "GB/s", "%copy");
    for (auto &s : shapes) {
        wset w = make(s.out, s.in);
        check(w, CFGS[1], s.name);
        if (s.in <= 4096) check(w, CFGS[11], s.name); /* F16 at T = 8 needs 8 (in + 8) halves */
        double t3 = time_us(w.nc, [&](int c) {
            CK(tk_qgemv_mma(0, &w.c[c].m, w.x, w.in, NULL, 0, w.y, TK_F32, w.out, 1, w.in, w.out));
        });
        printf("%-8s %-10s %9.2f %7.0f %5.1f%%\n", s.name, "v3", t3, w.bytes / t3 / 1e3,
               100.0 * w.bytes / t3 / 1e3 / g_copy);
        double best = 1e30;
        for (const cfg &c : CFGS) {
            double us = time_us(w.nc, [&](int k) {
                c.f(w.c[k].frag, w.c[k].sb, w.x, w.in, 1, w.y, w.out);
            });
            char nm[24];
            snprintf(nm, sizeof nm, "v7%s U%dW%d", c.f16 ? "h" : "", c.u, c.w);
            printf("%-8s %-10s %9.2f %7.0f %5.1f%%\n", s.name, nm, us, w.bytes / us / 1e3,
                   100.0 * w.bytes / us / 1e3 / g_copy);
            best = std::min(best, us);
        }
        sum3 += s.mult * t3, sum7 += s.mult * best;
        drop(w);
    }
    printf("==== summary ====\none token's GEMVs: v3 %.3f ms, v7 (best config per shape) %.3f ms%s\n",
           sum3 / 1e3, sum7 / 1e3, g_bad ? "  (CHECKS FAILED)" : "");
    return g_bad != 0;
}
