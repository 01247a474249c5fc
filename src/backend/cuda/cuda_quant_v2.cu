/*
 * cuda_quant_v2.cu — second versions of the MLX-affine decode GEMV and the
 * dequantize-for-prefill kernel (v1: cuda_quant.cu), first written in the
 * kernel lab (docs/perf/quant.md) and chosen at run time by TERN_QUANT_KERNEL
 * (cuda_quant.c). They take 4- and 8-bit weights with BF16 scales and BF16
 * activations; everything else stays on v1.
 *
 * GEMV v2, against v1's ~10 instructions per weight (docs/perf/quant.md):
 *   - BITS and GROUP are template constants, so a chunk's group is a shift,
 *     and offsets are 32-bit, relative to row pointers set up once;
 *   - a block of 4 warps owns R rows and splits K across its warps (warp w
 *     takes chunks w*32 + lane, +128, ...), then sums the 4 partials in a
 *     fixed order through shared memory: 4x the warps in flight for
 *     1024-row shapes. A (row, token) sum takes the same float operations
 *     whatever the token count and R, so a token's result does not depend
 *     on the others in the launch (batch invariance, as v1);
 *   - values become floats with one PRMT each (byte b of (w & 0x0F0F0F0F)
 *     under the exponent byte 0x4B: 2^23 + q).
 * Dequant v2: one thread per 16-byte chunk of packed weights, 16 or 32 BF16
 * values out in 16-byte stores (v1: a 64-bit division and a bit-stream
 * extraction per value).
 * Depends on cuda_common.cuh, cuda_quant.h.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_quant.h"

#define V2_WARPS 4

static __device__ __forceinline__ float bf(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* 2^23 + byte b of u, as a float. */
static __device__ __forceinline__ float byte_f(uint32_t u, int b)
{
    return __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650u | (uint32_t)b));
}

/* The V values of one 16-byte chunk as exact floats, in order (MLX packs
 * value k of a word at bits k*BITS, so 4-bit even values sit in the low
 * nibbles of the bytes and odd values in the high ones). */
template <int BITS>
static __device__ __forceinline__ void unpack(uint4 c, float *q)
{
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (BITS == 8) {
#pragma unroll
            for (int b = 0; b < 4; b++) q[i * 4 + b] = byte_f(w[i], b) - 8388608.0f;
        } else {
            uint32_t lo = w[i] & 0x0F0F0F0Fu, hi = (w[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                q[i * 8 + 2 * b] = byte_f(lo, b) - 8388608.0f;
                q[i * 8 + 2 * b + 1] = byte_f(hi, b) - 8388608.0f;
            }
        }
    }
}

/* Eight bf16 activations (one uint4) as floats. */
static __device__ __forceinline__ void x8(uint4 v, float *f)
{
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = __uint_as_float(u[k] << 16);
        f[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
    }
}

template <int BITS, int GROUP, int R, int NT>
static __global__ void __launch_bounds__(V2_WARPS * 32)
    k_qgemv2(const uint4 *__restrict__ x, int xs8, const uint4 *__restrict__ q,
             const uint16_t *__restrict__ sc, const uint16_t *__restrict__ bi, const void *bias,
             int bdt, void *y, int ydt, int64_t ys, int n_chunks, int out)
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
        for (int r = 0; r < R; r++) wv[r] = tk_ld_stream(qr[r] + c);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float xf[V];
#pragma unroll
            for (int j = 0; j < V / 8; j++) x8(__ldg(x + t * xs8 + c * (V / 8) + j), xf + 8 * j);
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
        int i = threadIdx.x, r = i / NT, t = i % NT;
        float v = ((red[0][i] + red[1][i]) + red[2][i]) + red[3][i];
        if (row0 + r < out) {
            if (bias) v += tk_ld(bias, bdt, row0 + r);
            tk_st(y, ydt, t * ys + row0 + r, v);
        }
    }
}

typedef void (*qgemv2_fn)(cudaStream_t, const struct tk_qmat *, const void *, int64_t,
                          const void *, int, void *, int, int64_t, int64_t, int64_t);

template <int BITS, int GROUP, int R, int NT>
static void launch2(cudaStream_t st, const struct tk_qmat *m, const void *x, int64_t xs,
                    const void *bias, int bdt, void *y, int ydt, int64_t ys, int64_t in,
                    int64_t out)
{
    unsigned blocks = (unsigned)tk_cdiv(out, R);
    k_qgemv2<BITS, GROUP, R, NT><<<blocks, V2_WARPS * 32, 0, st>>>(
        (const uint4 *)x, (int)(xs / 8), (const uint4 *)m->q, (const uint16_t *)m->scales,
        (const uint16_t *)m->biases, bias, bdt, y, ydt, ys, (int)(in * BITS / 128), (int)out);
}

/* Indexed by token count - 1: 4 rows per block at 1-2 tokens (they share
 * each x load), 2 at 3-8 (the registers go to the sums). */
#define Q2_TABLE(B, G)                                                                             \
    {launch2<B, G, 4, 1>, launch2<B, G, 4, 2>, launch2<B, G, 2, 3>, launch2<B, G, 2, 4>,          \
     launch2<B, G, 2, 5>, launch2<B, G, 2, 6>, launch2<B, G, 2, 7>, launch2<B, G, 2, 8>}

static qgemv2_fn pick2(int bits, int group, int nt)
{
    static const qgemv2_fn t4[3][8] = {Q2_TABLE(4, 32), Q2_TABLE(4, 64), Q2_TABLE(4, 128)};
    static const qgemv2_fn t8[3][8] = {Q2_TABLE(8, 32), Q2_TABLE(8, 64), Q2_TABLE(8, 128)};
    int gi = group == 32 ? 0 : group == 64 ? 1 : 2;
    return (bits == 4 ? t4 : t8)[gi][nt - 1];
}

extern "C" int tk_qgemv2_ok(const struct tk_qmat *m, const void *x, int xdt, int64_t x_stride,
                            int64_t in, int64_t out)
{
    return (m->bits == 4 || m->bits == 8) && m->sdt == TK_BF16 &&
           (m->group == 32 || m->group == 64 || m->group == 128) && xdt == TK_BF16 &&
           in % 256 == 0 && x_stride % 8 == 0 && in < (1 << 30) && out < (1 << 30) &&
           ((uintptr_t)x | (uintptr_t)m->q) % 16 == 0;
}

extern "C" cudaError_t tk_qgemv2(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                 int64_t x_stride, const void *bias, int bdt, void *y, int ydt,
                                 int64_t y_stride, int64_t n_tok, int64_t in, int64_t out)
{
    if (n_tok <= 0 || out <= 0) return cudaSuccess;
    size_t ysz = ydt == TK_F32 ? 4 : 2;
    for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
        int nt = (int)(n_tok - t0 < 8 ? n_tok - t0 : 8);
        pick2(m->bits, m->group, nt)(st, m, (const bf16 *)x + t0 * x_stride, x_stride, bias, bdt,
                                     (char *)y + (size_t)(t0 * y_stride) * ysz, ydt, y_stride, in,
                                     out);
        cudaError_t e = cudaPeekAtLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* One thread per 16-byte chunk of packed weights: V BF16 values out. */
template <int BITS>
static __global__ void k_qdequant2(const uint4 *__restrict__ q, const uint16_t *__restrict__ sc,
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
    unpack<BITS>(tk_ld_stream(q + i), qf);
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

extern "C" int tk_qdequant2_ok(const struct tk_qmat *m, int64_t in, const void *out)
{
    return (m->bits == 4 || m->bits == 8) && m->sdt == TK_BF16 &&
           (m->group == 32 || m->group == 64 || m->group == 128) && in % 128 == 0 &&
           in < (1 << 30) && ((uintptr_t)m->q | (uintptr_t)out) % 16 == 0;
}

extern "C" cudaError_t tk_qdequant2(cudaStream_t st, const struct tk_qmat *m, int64_t rows,
                                    int64_t in, void *out)
{
    int gshift = m->group == 32 ? 5 : m->group == 64 ? 6 : 7;
    int ncr = (int)(in * m->bits / 128);
    int64_t n = rows * ncr;
    if (n <= 0) return cudaSuccess;
    unsigned blocks = (unsigned)tk_cdiv(n, 256);
    if (m->bits == 4)
        k_qdequant2<4><<<blocks, 256, 0, st>>>((const uint4 *)m->q, (const uint16_t *)m->scales,
                                               (const uint16_t *)m->biases, gshift, ncr, n,
                                               (uint4 *)out);
    else
        k_qdequant2<8><<<blocks, 256, 0, st>>>((const uint4 *)m->q, (const uint16_t *)m->scales,
                                               (const uint16_t *)m->biases, gshift, ncr, n,
                                               (uint4 *)out);
    return cudaPeekAtLastError();
}
