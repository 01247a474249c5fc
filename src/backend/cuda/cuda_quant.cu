/*
 * cuda_quant.cu — MLX affine quantized weights on the device (layout:
 * tensor/quant.h): a decode GEMV that streams the packed weights once and
 * dequantizes in registers (the default for widths other than 4 bits,
 * cuda_quant.c), the dequantize-to-BF16 kernels that feed cuBLASLt for
 * prefill and batches, and a row gather for quantized embeddings.
 *
 * Decode (k_qgemv, bits 2/4/8): a warp owns QG_R consecutive output rows;
 * lane l reads 16-byte chunks l, l+32, ... of each row (coalesced 512-byte
 * warp loads, L1 no-allocate), i.e. 32 4-bit or 16 8-bit values per chunk.
 * A chunk is split into segments that never straddle a quantization group
 * (SEG = min(values per chunk, group_size)); per segment and token the lane
 * forms dq = sum x_k q_k and sx = sum x_k, then acc += s * dq + b * sx
 * (= sum x_k (s q_k + b)). The x values of a chunk are loaded once per
 * token and shared by the QG_R rows; q_k becomes a float by the exponent
 * trick (0x4B000000 | q is 2^23 + q). Each (row, token) sum is accumulated in
 * the same order whatever the token count, then reduced by a fixed butterfly:
 * a token's result does not depend on the others in the launch.
 *
 * Other widths (3/5/6), or operands the fast path does not take, use
 * k_qgemv_generic: one warp per (row, token), values extracted from the bit
 * stream one by one.
 *
 * Dequantize (prefill): k_qdequant_fast takes 4- and 8-bit weights with
 * BF16 scales, group 32/64/128 (tk_qdequant_fast_ok): one thread per
 * 16-byte chunk of packed weights, 16 or 32 BF16 values out in 16-byte
 * stores, the values made floats with one PRMT each (byte b of (w &
 * 0x0F0F0F0F) under the exponent byte 0x4B: 2^23 + q). Everything else, and
 * get_rows' gather, takes k_qdequant: one thread per value, extracted from
 * the bit stream.
 * Depends on cuda_common.cuh.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_quant.h"

#define QG_WARPS 4

static __device__ __forceinline__ float ld_s(const void *p, int dt, int64_t i)
{
    return tk_ld(p, dt, i);
}

/* Value k (0 <= k < 32 / BITS) of a word, as an exact float. */
template <int BITS>
static __device__ __forceinline__ float qval(uint32_t w, int k)
{
    uint32_t q = (w >> (k * BITS)) & ((1u << BITS) - 1u);
    return __uint_as_float(0x4B000000u | q) - 8388608.0f;
}

/* Eight bf16 activations (one uint4) as floats. */
static __device__ __forceinline__ void x8(uint4 v, float *f)
{
    f[0] = __uint_as_float(v.x << 16);
    f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16);
    f[3] = __uint_as_float(v.y & 0xffff0000u);
    f[4] = __uint_as_float(v.z << 16);
    f[5] = __uint_as_float(v.z & 0xffff0000u);
    f[6] = __uint_as_float(v.w << 16);
    f[7] = __uint_as_float(v.w & 0xffff0000u);
}

template <int BITS, int R, int NT, int SEG>
static __global__ void __launch_bounds__(QG_WARPS * 32)
    k_qgemv(const uint4 *x, int64_t xs8, const uint4 *q, const void *sc, const void *bi, int sdt,
            int group, const void *bias, int bdt, void *y, int ydt, int64_t ys, int64_t n_chunks,
            int64_t out)
{
    constexpr int V = 128 / BITS;   /* values per 16-byte chunk */
    constexpr int PW = 32 / BITS;   /* values per word */
    constexpr int NSEG = V / SEG;   /* segments per chunk */
    int lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * QG_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= out) return;
    int64_t n_groups = n_chunks * V / group;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    for (int64_t c = lane; c < n_chunks; c += 32) {
        uint4 wv[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int64_t row = row0 + r < out ? row0 + r : out - 1;
            wv[r] = tk_ld_stream(q + row * n_chunks + c);
        }
        float s[R][NSEG], b[R][NSEG];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int64_t row = row0 + r < out ? row0 + r : out - 1;
#pragma unroll
            for (int g = 0; g < NSEG; g++) {
                int64_t gi = row * n_groups + (c * V + g * SEG) / group;
                s[r][g] = ld_s(sc, sdt, gi);
                b[r][g] = ld_s(bi, sdt, gi);
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float xf[V];
#pragma unroll
            for (int j = 0; j < V / 8; j++) x8(__ldg(x + t * xs8 + c * (V / 8) + j), xf + 8 * j);
#pragma unroll
            for (int g = 0; g < NSEG; g++) {
                float sx = 0.0f;
#pragma unroll
                for (int k = 0; k < SEG; k++) sx += xf[g * SEG + k];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t *ww = (const uint32_t *)&wv[r];
                    float dq = 0.0f;
#pragma unroll
                    for (int k = 0; k < SEG; k++) {
                        int e = g * SEG + k;
                        dq = fmaf(xf[e], qval<BITS>(ww[e / PW], e % PW), dq);
                    }
                    acc[r][t] = fmaf(s[r][g], dq, fmaf(b[r][g], sx, acc[r][t]));
                }
            }
        }
    }
    tk_warp_rows_store<R, NT>(acc, lane, row0, out, bias, bdt, y, ydt, ys);
}

static __device__ __forceinline__ uint32_t qget(const uint32_t *q, int64_t i, int bits)
{
    uint64_t bit = (uint64_t)i * (uint64_t)bits;
    uint64_t word = bit >> 5, shift = bit & 31;
    uint64_t v = q[word] >> shift;
    if (shift + (uint64_t)bits > 32) v |= (uint64_t)q[word + 1] << (32 - shift);
    return (uint32_t)(v & ((1u << bits) - 1u));
}

static __global__ void k_qgemv_generic(const void *x, int xdt, int64_t xs, const uint32_t *q,
                                       const void *sc, const void *bi, int sdt, int bits,
                                       int group, const void *bias, int bdt, void *y, int ydt,
                                       int64_t ys, int64_t n_tok, int64_t in, int64_t out)
{
    int64_t gid = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (gid >= out * n_tok) return;
    int64_t o = gid % out, t = gid / out;
    int lane = threadIdx.x & 31;
    const uint32_t *row = q + o * (in * bits / 32);
    int64_t ng = in / group;
    float acc = 0.0f;
    for (int64_t i = lane; i < in; i += 32) {
        float w = ld_s(sc, sdt, o * ng + i / group) * (float)qget(row, i, bits) +
                  ld_s(bi, sdt, o * ng + i / group);
        acc = fmaf(w, tk_ld(x, xdt, t * xs + i), acc);
    }
    acc = tk_warp_sum(acc);
    if (lane == 0) {
        if (bias) acc += tk_ld(bias, bdt, o);
        tk_st(y, ydt, t * ys + o, acc);
    }
}

/* Dequantizes rows [0, rows) of width `in` into out (dtype odt) with row
 * stride `os`; row r reads packed row idx ? idx[r] : r (out of range: zeros). */
static __global__ void k_qdequant(const uint32_t *q, const void *sc, const void *bi, int sdt,
                                  int bits, int group, int64_t n_table, int64_t in,
                                  const int32_t *idx, int64_t rows, void *out, int odt, int64_t os)
{
    int64_t ng = in / group, words = in * bits / 32;
    /* rows may exceed the grid's 65535 y limit (a vocab-sized table) */
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        int64_t src = idx ? idx[r] : r;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < in;
             i += (int64_t)gridDim.x * blockDim.x) {
            float v = 0.0f;
            if (src >= 0 && src < n_table)
                v = ld_s(sc, sdt, src * ng + i / group) * (float)qget(q + src * words, i, bits) +
                    ld_s(bi, sdt, src * ng + i / group);
            tk_st(out, odt, r * os + i, v);
        }
    }
}

static __device__ __forceinline__ float bf(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

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

/* One thread per 16-byte chunk of packed weights: V BF16 values out. */
template <int BITS>
static __global__ void k_qdequant_fast(const uint4 *__restrict__ q,
                                       const uint16_t *__restrict__ sc,
                                       const uint16_t *__restrict__ bi, int gshift,
                                       int n_chunks_row, int64_t n_chunks, uint4 *__restrict__ out)
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

typedef void (*qgemv_fn)(cudaStream_t, const struct tk_qmat *, const void *, int64_t, const void *,
                         int, void *, int, int64_t, int64_t, int64_t);

template <int BITS, int R, int NT, int SEG>
static void qgemv_launch(cudaStream_t st, const struct tk_qmat *m, const void *x, int64_t xs,
                         const void *bias, int bdt, void *y, int ydt, int64_t ys, int64_t in,
                         int64_t out)
{
    unsigned blocks = (unsigned)tk_cdiv(out, R * QG_WARPS);
    k_qgemv<BITS, R, NT, SEG><<<blocks, QG_WARPS * 32, 0, st>>>(
        (const uint4 *)x, xs / 8, (const uint4 *)m->q, m->scales, m->biases, m->sdt, m->group,
        bias, bdt, y, ydt, ys, in * BITS / 128, out);
}

/* The fast kernels for one (bits, segment) pair, indexed by token count - 1. */
#define QG_TABLE(B, R, S)                                                                          \
    {qgemv_launch<B, R, 1, S>, qgemv_launch<B, R, 2, S>, qgemv_launch<B, R, 3, S>,                \
     qgemv_launch<B, R, 4, S>, qgemv_launch<B, R, 5, S>, qgemv_launch<B, R, 6, S>,                \
     qgemv_launch<B, R, 7, S>, qgemv_launch<B, R, 8, S>}

static qgemv_fn pick(int bits, int group, int rows, int nt)
{
    static const qgemv_fn b4r2[8] = QG_TABLE(4, 2, 32), b4r4[8] = QG_TABLE(4, 4, 32);
    static const qgemv_fn b8r2[8] = QG_TABLE(8, 2, 16), b8r4[8] = QG_TABLE(8, 4, 16);
    static const qgemv_fn b2r2[8] = QG_TABLE(2, 2, 32), b2r4[8] = QG_TABLE(2, 4, 32);
    (void)group; /* every group size is a multiple of the segment: 32 values for 2/4 bits, 16 for 8 */
    if (bits == 4) return (rows == 4 ? b4r4 : b4r2)[nt - 1];
    if (bits == 8) return (rows == 4 ? b8r4 : b8r2)[nt - 1];
    return (rows == 4 ? b2r4 : b2r2)[nt - 1];
}

extern "C" int tk_qgemv_fast(const struct tk_qmat *m, const void *x, int xdt, int64_t x_stride,
                             int64_t in)
{
    return (m->bits == 2 || m->bits == 4 || m->bits == 8) && xdt == TK_BF16 && in % 256 == 0 &&
           x_stride % 8 == 0 && ((uintptr_t)x | (uintptr_t)m->q) % 16 == 0;
}

extern "C" cudaError_t tk_qgemv(cudaStream_t st, const struct tk_qmat *m, const void *x, int xdt,
                                int64_t x_stride, const void *bias, int bdt, void *y, int ydt,
                                int64_t y_stride, int64_t n_tok, int64_t in, int64_t out,
                                int rows_per_warp)
{
    if (n_tok <= 0 || out <= 0) return cudaSuccess;
    if (!tk_qgemv_fast(m, x, xdt, x_stride, in)) {
        int64_t warps = out * n_tok;
        k_qgemv_generic<<<(unsigned)tk_cdiv(warps, 8), 256, 0, st>>>(
            x, xdt, x_stride, (const uint32_t *)m->q, m->scales, m->biases, m->sdt, m->bits,
            m->group, bias, bdt, y, ydt, y_stride, n_tok, in, out);
        return cudaPeekAtLastError();
    }
    size_t ysz = ydt == TK_F32 ? 4 : 2;
    for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
        int nt = (int)(n_tok - t0 < 8 ? n_tok - t0 : 8);
        pick(m->bits, m->group, rows_per_warp, nt)(
            st, m, (const bf16 *)x + t0 * x_stride, x_stride, bias, bdt,
            (char *)y + (size_t)(t0 * y_stride) * ysz, ydt, y_stride, in, out);
        cudaError_t e = cudaPeekAtLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t tk_qdequant(cudaStream_t st, const struct tk_qmat *m, int64_t rows,
                                   int64_t in, const int32_t *idx, int64_t n_out, void *out,
                                   int odt, int64_t out_stride)
{
    if (n_out <= 0) return cudaSuccess;
    unsigned bx = (unsigned)tk_cdiv(in, 256);
    if (bx > 64) bx = 64;
    dim3 grid(bx, (unsigned)(n_out < 65535 ? n_out : 65535));
    k_qdequant<<<grid, 256, 0, st>>>((const uint32_t *)m->q, m->scales, m->biases, m->sdt,
                                     m->bits, m->group, rows, in, idx, n_out, out, odt,
                                     out_stride);
    return cudaPeekAtLastError();
}

extern "C" int tk_qdequant_fast_ok(const struct tk_qmat *m, int64_t in, const void *out)
{
    return (m->bits == 4 || m->bits == 8) && m->sdt == TK_BF16 &&
           (m->group == 32 || m->group == 64 || m->group == 128) && in % 128 == 0 &&
           in < (1 << 30) && ((uintptr_t)m->q | (uintptr_t)out) % 16 == 0;
}

extern "C" cudaError_t tk_qdequant_fast(cudaStream_t st, const struct tk_qmat *m, int64_t rows,
                                        int64_t in, void *out)
{
    int gshift = m->group == 32 ? 5 : m->group == 64 ? 6 : 7;
    int ncr = (int)(in * m->bits / 128);
    int64_t n = rows * ncr;
    if (n <= 0) return cudaSuccess;
    unsigned blocks = (unsigned)tk_cdiv(n, 256);
    if (m->bits == 4)
        k_qdequant_fast<4><<<blocks, 256, 0, st>>>((const uint4 *)m->q,
                                                   (const uint16_t *)m->scales,
                                                   (const uint16_t *)m->biases, gshift, ncr, n,
                                                   (uint4 *)out);
    else
        k_qdequant_fast<8><<<blocks, 256, 0, st>>>((const uint4 *)m->q,
                                                   (const uint16_t *)m->scales,
                                                   (const uint16_t *)m->biases, gshift, ncr, n,
                                                   (uint4 *)out);
    return cudaPeekAtLastError();
}
