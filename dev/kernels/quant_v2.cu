/*
 * quant_v2.cu — kernel lab: second versions of the MLX-affine decode GEMV
 * and dequantize kernels (library v1: src/backend/cuda/cuda_quant.cu), aimed
 * at the instruction overhead docs/perf/quant.md diagnoses. NOT VALIDATED ON
 * A DEVICE YET: bench_quant.c compares every v2 output with v1 (max rel err)
 * before timing it; promote into the library only after that passes.
 *
 * GEMV v2 (bits 4 / 8, BF16 scales, x BF16):
 *   - GROUP and BITS are template constants, so the group of a chunk is a
 *     shift, and all offsets are 32-bit and relative to row pointers set up
 *     once (v1: a 64-bit division per chunk per row);
 *   - a block of 4 warps owns R rows and splits K across its warps (warp w
 *     takes chunks w*32 + lane, +128, ...), then sums the 4 partials in a
 *     fixed order through shared memory: 4x the warps in flight for
 *     1024-row shapes, and the same float operations for a token whatever
 *     the batch (batch invariance kept);
 *   - values become floats with one PRMT each (byte b of (w & 0x0F0F0F0F)
 *     placed under the exponent 0x4B: 2^23 + q) instead of shift + mask + or.
 * Dequant v2: one thread per 16-byte chunk, 8 or 16 outputs per 16-byte store.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_quant.h"

#define V2_WARPS 4

extern "C" cudaError_t tk_qgemv_v2(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                   int64_t x_stride, void *y, int64_t y_stride, int n_tok,
                                   int64_t in, int64_t out, int rows);
extern "C" cudaError_t tk_qdequant_v2(cudaStream_t st, const struct tk_qmat *m, int64_t rows,
                                      int64_t in, void *out);

static __device__ __forceinline__ uint4 ld_nc(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

static __device__ __forceinline__ float bf(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* 2^23 + byte b of u, as a float. */
static __device__ __forceinline__ float byte_f(uint32_t u, int b)
{
    return __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650u | (uint32_t)b));
}

/* The V values of one 16-byte chunk as exact floats, in order. */
template <int BITS>
static __device__ __forceinline__ void unpack(uint4 c, float *q)
{
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (BITS == 8) {
#pragma unroll
            for (int b = 0; b < 4; b++) q[i * 4 + b] = byte_f(w[i], b) - 8388608.0f;
        } else { /* 4 bits: even values in the low nibbles, odd in the high */
            uint32_t lo = w[i] & 0x0F0F0F0Fu, hi = (w[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                q[i * 8 + 2 * b] = byte_f(lo, b) - 8388608.0f;
                q[i * 8 + 2 * b + 1] = byte_f(hi, b) - 8388608.0f;
            }
        }
    }
}

template <int BITS, int GROUP, int R, int NT>
static __global__ void __launch_bounds__(V2_WARPS * 32)
    k_qgemv_v2(const uint4 *__restrict__ x, int xs8, const uint4 *__restrict__ q,
               const uint16_t *__restrict__ sc, const uint16_t *__restrict__ bi,
               float *__restrict__ y, int ys, int n_chunks, int out)
{
    constexpr int V = 128 / BITS;              /* values per chunk */
    constexpr int SEG = V < GROUP ? V : GROUP; /* never straddles a group */
    constexpr int NSEG = V / SEG;
    __shared__ float red[V2_WARPS][R * NT];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int row0 = blockIdx.x * R;
    int n_groups = n_chunks * V / GROUP;
    const uint4 *qr[R];
    const uint16_t *sr[R], *br[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int row = row0 + r < out ? row0 + r : out - 1;
        qr[r] = q + (size_t)row * n_chunks;
        sr[r] = sc + (size_t)row * n_groups;
        br[r] = bi + (size_t)row * n_groups;
    }
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    for (int c = warp * 32 + lane; c < n_chunks; c += V2_WARPS * 32) {
        uint4 wv[R];
#pragma unroll
        for (int r = 0; r < R; r++) wv[r] = ld_nc(qr[r] + c);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float xf[V];
#pragma unroll
            for (int j = 0; j < V / 8; j++) {
                uint4 v = __ldg(x + t * xs8 + c * (V / 8) + j);
                const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    xf[8 * j + 2 * k] = __uint_as_float(u[k] << 16);
                    xf[8 * j + 2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
                }
            }
            float sx[NSEG];
#pragma unroll
            for (int g = 0; g < NSEG; g++) {
                sx[g] = 0.0f;
#pragma unroll
                for (int k = 0; k < SEG; k++) sx[g] += xf[g * SEG + k];
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float qf[V];
                unpack<BITS>(wv[r], qf);
#pragma unroll
                for (int g = 0; g < NSEG; g++) {
                    int gi = (c * V + g * SEG) / GROUP; /* a shift: GROUP is a power of two */
                    float dq = 0.0f;
#pragma unroll
                    for (int k = 0; k < SEG; k++) dq = fmaf(xf[g * SEG + k], qf[g * SEG + k], dq);
                    acc[r][t] = fmaf(bf(sr[r][gi]), dq, fmaf(bf(br[r][gi]), sx[g], acc[r][t]));
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float v = tk_warp_sum(acc[r][t]);
            if (lane == 0) red[warp][r * NT + t] = v;
        }
    __syncthreads();
    if (threadIdx.x < R * NT) {
        int r = threadIdx.x / NT, t = threadIdx.x % NT;
        float v = ((red[0][threadIdx.x] + red[1][threadIdx.x]) + red[2][threadIdx.x]) +
                  red[3][threadIdx.x];
        if (row0 + r < out) y[(size_t)t * ys + row0 + r] = v;
    }
}

template <int BITS, int GROUP, int R>
static void launch_v2(cudaStream_t st, const struct tk_qmat *m, const void *x, int64_t xs, void *y,
                      int64_t ys, int n_tok, int64_t in, int64_t out)
{
    unsigned blocks = (unsigned)tk_cdiv(out, R);
    const uint4 *xp = (const uint4 *)x;
    const uint4 *qp = (const uint4 *)m->q;
    const uint16_t *sp = (const uint16_t *)m->scales, *bp = (const uint16_t *)m->biases;
    int nc = (int)(in * BITS / 128);
#define L(NT)                                                                                      \
    k_qgemv_v2<BITS, GROUP, R, NT><<<blocks, V2_WARPS * 32, 0, st>>>(xp, (int)(xs / 8), qp, sp, bp, \
                                                                     (float *)y, (int)ys, nc,      \
                                                                     (int)out)
    switch (n_tok) {
    case 1: L(1); break;
    case 2: L(2); break;
    case 4: L(4); break;
    default: L(8); break;
    }
#undef L
}

extern "C" cudaError_t tk_qgemv_v2(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                   int64_t x_stride, void *y, int64_t y_stride, int n_tok,
                                   int64_t in, int64_t out, int rows)
{
    if (m->sdt != TK_BF16 || (m->bits != 4 && m->bits != 8) || in % 512 ||
        (n_tok != 1 && n_tok != 2 && n_tok != 4 && n_tok != 8))
        return cudaErrorInvalidValue;
    typedef void (*fn)(cudaStream_t, const struct tk_qmat *, const void *, int64_t, void *, int64_t,
                       int, int64_t, int64_t);
    static const fn f4[3][2] = {{launch_v2<4, 32, 2>, launch_v2<4, 32, 4>},
                                {launch_v2<4, 64, 2>, launch_v2<4, 64, 4>},
                                {launch_v2<4, 128, 2>, launch_v2<4, 128, 4>}};
    static const fn f8[3][2] = {{launch_v2<8, 32, 2>, launch_v2<8, 32, 4>},
                                {launch_v2<8, 64, 2>, launch_v2<8, 64, 4>},
                                {launch_v2<8, 128, 2>, launch_v2<8, 128, 4>}};
    int gi = m->group == 32 ? 0 : m->group == 64 ? 1 : 2, ri = rows == 4 ? 1 : 0;
    (m->bits == 4 ? f4 : f8)[gi][ri](st, m, x, x_stride, y, y_stride, n_tok, in, out);
    return cudaPeekAtLastError();
}

/* One thread per 16-byte chunk of packed weights: V values out. */
template <int BITS>
static __global__ void k_qdequant_v2(const uint4 *__restrict__ q, const uint16_t *__restrict__ sc,
                                     const uint16_t *__restrict__ bi, int gshift, int n_chunks_row,
                                     int64_t n_chunks, uint4 *__restrict__ out)
{
    constexpr int V = 128 / BITS;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_chunks) return;
    int64_t row = i / n_chunks_row;
    int c = (int)(i - row * n_chunks_row);
    int64_t gi = row * ((int64_t)n_chunks_row * V >> gshift) + ((c * V) >> gshift);
    float s = bf(sc[gi]), b = bf(bi[gi]);
    float qf[V];
    unpack<BITS>(ld_nc(q + i), qf);
#pragma unroll
    for (int j = 0; j < V / 8; j++) {
        uint32_t o[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            __nv_bfloat162 h = __floats2bfloat162_rn(fmaf(s, qf[8 * j + 2 * k], b),
                                                     fmaf(s, qf[8 * j + 2 * k + 1], b));
            o[k] = *(uint32_t *)&h;
        }
        out[i * (V / 8) + j] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

extern "C" cudaError_t tk_qdequant_v2(cudaStream_t st, const struct tk_qmat *m, int64_t rows,
                                      int64_t in, void *out)
{
    if (m->sdt != TK_BF16 || (m->bits != 4 && m->bits != 8) || in % 128) return cudaErrorInvalidValue;
    int gshift = m->group == 32 ? 5 : m->group == 64 ? 6 : 7;
    int ncr = (int)(in * m->bits / 128);
    int64_t n = rows * ncr;
    unsigned blocks = (unsigned)tk_cdiv(n, 256);
    if (m->bits == 4)
        k_qdequant_v2<4><<<blocks, 256, 0, st>>>((const uint4 *)m->q, (const uint16_t *)m->scales,
                                                 (const uint16_t *)m->biases, gshift, ncr, n,
                                                 (uint4 *)out);
    else
        k_qdequant_v2<8><<<blocks, 256, 0, st>>>((const uint4 *)m->q, (const uint16_t *)m->scales,
                                                 (const uint16_t *)m->biases, gshift, ncr, n,
                                                 (uint4 *)out);
    return cudaPeekAtLastError();
}
