/*
 * cuda_quant_v4.cu — the 4-bit decode GEMV of cuda_quant.cu (v1) with fewer
 * instructions per weight and more bytes in flight (TERN_QUANT_KERNEL=v4,
 * or v5 for the same kernel with v1's float32 inner product).
 *
 * v1 is issue-bound at 4 bits on the H200 (~3.8 G weights/us at 4 and at 8
 * bits alike, docs/perf/quant.md): per weight it shifts, masks, ORs, FADDs
 * (the 2^23 exponent trick) and FMAs, all in float32. Here one LOP3 turns a
 * nibble pair (q_j, q_j+4) of a packed word into the half2 (1024 + q_j,
 * 1024 + q_j+4) (0x6400 is 1024.0 in f16, q < 16 fits its 10-bit mantissa),
 * one HFMA2 makes that (q/32, q/32) exactly, and one HFMA2 multiplies it by
 * the matching pair of activations: three instructions per two weights
 * instead of eight. The four products of a word and lane are summed in f16
 * (each product and sum rounds to 11 bits: a word's sum is within ~2^-10 of
 * its magnitude), then the word sums go to float32 as in v1: per chunk (32
 * values, inside one quantization group) dq = sum x q, sx = sum x, and
 * acc += 32 s dq + b sx. A chunk whose f16 sum is not finite (activations
 * beyond ~3e4) is recomputed in float32, so large inputs cost time, not
 * accuracy.
 *
 * Both variants load the next chunk of every row before working on the
 * current one (two chunks in flight per row and lane), issue the first
 * loads before the PDL wait (weights are immutable), and keep v1's order of
 * sums: a token's result does not depend on the other tokens of the launch.
 * Depends on cuda_common.cuh, cuda_quant.h.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_quant.h"

#include <cuda_fp16.h>

#define Q4_WARPS 4

static __device__ __forceinline__ __half2 u2h2(uint32_t u)
{
    __half2 h;
    memcpy(&h, &u, 4);
    return h;
}

/* sum_k x_k q_k of one 32-value chunk (words w[0..3]) in float32, v1's way. */
static __device__ __forceinline__ float dot_f32(const uint32_t *w, const float *xf)
{
    float dq = 0.0f;
#pragma unroll
    for (int e = 0; e < 32; e++) {
        uint32_t q = (w[e / 8] >> ((e % 8) * 4)) & 15u;
        dq = fmaf(xf[e], __uint_as_float(0x4B000000u | q) - 8388608.0f, dq);
    }
    return dq;
}

/* The same sum through half2: xh[4 * i + j] holds (x[8i + j], x[8i + j + 4]). */
static __device__ __forceinline__ float dot_h2(const uint32_t *w, const __half2 *xh)
{
    const __half2 sc = __float2half2_rn(1.0f / 32.0f), off = __float2half2_rn(-32.0f);
    float dq = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __half2 acc = __float2half2_rn(0.0f);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __half2 qv = __hfma2(u2h2(((w[i] >> (4 * j)) & 0x000F000Fu) | 0x64006400u), sc, off);
            acc = __hfma2(xh[4 * i + j], qv, acc);
        }
        float2 f = __half22float2(acc);
        dq += f.x + f.y;
    }
    return dq * 32.0f;
}

template <int R, int NT, bool H>
static __global__ void __launch_bounds__(Q4_WARPS * 32)
    k_qgemv4(const uint4 *x, int64_t xs8, const uint4 *q, const void *sc, const void *bi, int sdt,
             int group, const void *bias, int bdt, void *y, int ydt, int64_t ys, int64_t n_chunks,
             int64_t out)
{
    int lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * Q4_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= out) return;
    int64_t n_groups = n_chunks * 32 / group;
    const uint4 *rp[R];
#pragma unroll
    for (int r = 0; r < R; r++) rp[r] = q + (row0 + r < out ? row0 + r : out - 1) * n_chunks;
    uint4 cur[R];
#pragma unroll
    for (int r = 0; r < R; r++) cur[r] = lane < n_chunks ? tk_ld_stream(rp[r] + lane) : make_uint4(0, 0, 0, 0);
    tk_pdl_wait();
    tk_pdl_launch();
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    for (int64_t c = lane; c < n_chunks; c += 32) {
        uint4 nxt[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            nxt[r] = c + 32 < n_chunks ? tk_ld_stream(rp[r] + c + 32) : make_uint4(0, 0, 0, 0);
        float s[R], b[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int64_t row = row0 + r < out ? row0 + r : out - 1;
            int64_t gi = row * n_groups + c * 32 / group;
            s[r] = tk_ld(sc, sdt, gi);
            b[r] = tk_ld(bi, sdt, gi);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float xf[32];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint4 v = __ldg(x + t * xs8 + c * 4 + j);
                const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    xf[8 * j + 2 * k] = __uint_as_float(u[k] << 16);
                    xf[8 * j + 2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
                }
            }
            float sx = 0.0f;
#pragma unroll
            for (int k = 0; k < 32; k++) sx += xf[k];
            __half2 xh[16];
            if (H) {
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        xh[4 * i + j] = __floats2half2_rn(xf[8 * i + j], xf[8 * i + j + 4]);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint32_t *ww = (const uint32_t *)&cur[r];
                float dq;
                if (H) {
                    dq = dot_h2(ww, xh);
                    if (!isfinite(dq)) dq = dot_f32(ww, xf);
                } else {
                    dq = dot_f32(ww, xf);
                }
                acc[r][t] = fmaf(s[r], dq, fmaf(b[r], sx, acc[r][t]));
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) cur[r] = nxt[r];
    }
    tk_warp_rows_store<R, NT>(acc, lane, row0, out, bias, bdt, y, ydt, ys);
}

typedef cudaError_t (*qgemv4_fn)(cudaStream_t, const struct tk_qmat *, const void *, int64_t,
                                 const void *, int, void *, int, int64_t, int64_t, int64_t);

template <int R, int NT, bool H>
static cudaError_t qgemv4_launch(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                 int64_t xs, const void *bias, int bdt, void *y, int ydt,
                                 int64_t ys, int64_t in, int64_t out)
{
    unsigned blocks = (unsigned)tk_cdiv(out, R * Q4_WARPS);
    return tk_launch(k_qgemv4<R, NT, H>, dim3(blocks), dim3(Q4_WARPS * 32), 0, st,
                     (const uint4 *)x, (int64_t)(xs / 8), (const uint4 *)m->q, m->scales,
                     m->biases, m->sdt, m->group, bias, bdt, y, ydt, ys, (int64_t)(in / 32), out);
}

#define Q4_TABLE(R, H)                                                                             \
    {qgemv4_launch<R, 1, H>, qgemv4_launch<R, 2, H>, qgemv4_launch<R, 3, H>,                      \
     qgemv4_launch<R, 4, H>, qgemv4_launch<R, 5, H>, qgemv4_launch<R, 6, H>,                      \
     qgemv4_launch<R, 7, H>, qgemv4_launch<R, 8, H>}

extern "C" int tk_qgemv4_ok(const struct tk_qmat *m, const void *x, int xdt, int64_t x_stride,
                            int64_t in)
{
    return m->bits == 4 && m->group % 32 == 0 && xdt == TK_BF16 && in % 256 == 0 &&
           x_stride % 8 == 0 && ((uintptr_t)x | (uintptr_t)m->q) % 16 == 0;
}

extern "C" cudaError_t tk_qgemv4(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                 int64_t x_stride, const void *bias, int bdt, void *y, int ydt,
                                 int64_t y_stride, int64_t n_tok, int64_t in, int64_t out, int half)
{
    static const qgemv4_fn h4[8] = Q4_TABLE(4, true), h2[8] = Q4_TABLE(2, true);
    static const qgemv4_fn f4[8] = Q4_TABLE(4, false), f2[8] = Q4_TABLE(2, false);
    size_t ysz = ydt == TK_F32 ? 4 : 2;
    for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
        int nt = (int)(n_tok - t0 < 8 ? n_tok - t0 : 8);
        /* 4 rows per warp share each x load at batch 1-2, as in v1. */
        const qgemv4_fn *tab = half ? (n_tok <= 2 ? h4 : h2) : (n_tok <= 2 ? f4 : f2);
        cudaError_t e = tab[nt - 1](st, m, (const uint16_t *)x + t0 * x_stride, x_stride, bias,
                                    bdt, (char *)y + (size_t)(t0 * y_stride) * ysz, ydt, y_stride,
                                    in, out);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
