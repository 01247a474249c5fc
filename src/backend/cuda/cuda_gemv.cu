/*
 * cuda_gemv.cu — y = x W^T for few rows (decode), streaming the weights once.
 *
 * Fast path (x, W in BF16, in % 8 == 0, 16-byte aligned rows): each warp owns
 * GEMV_R consecutive output rows; lane l reads 16-byte chunks l, l+32, ... of
 * those rows (coalesced 512-byte warp loads, GEMV_U chunks per row in flight,
 * marked no-allocate in L1 since they are used once) and the matching chunks
 * of the NT <= 8 token rows of x (small, L1/L2 resident). Each (row, token)
 * sum is accumulated in float in the same order whatever NT is, then reduced
 * across the warp in a fixed butterfly: a token's result does not depend on
 * how many tokens share the launch. No split-K: every Llama/Qwen-sized layer
 * has >= 1024 output rows, enough warps to fill the chip on its own.
 *
 * Anything else (F32 / F16 operands, odd sizes) takes k_gemv_generic: one
 * warp per (row, token), exact, slow, for tiny test models.
 * Depends on cuda_common.cuh.
 */
#include "backend/cuda/cuda_common.cuh"

#define GEMV_R 2      /* output rows per warp */
#define GEMV_U 4      /* 16-byte chunks per row in flight per lane */
#define GEMV_WARPS 8  /* warps per block */

static __device__ __forceinline__ uint4 ld_stream(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

static __device__ __forceinline__ float bf_lo(uint32_t u) { return __uint_as_float(u << 16); }
static __device__ __forceinline__ float bf_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

/* acc += dot of 8 bf16 pairs packed in two uint4. */
static __device__ __forceinline__ float dot8(uint4 w, uint4 x, float acc)
{
    acc = fmaf(bf_lo(w.x), bf_lo(x.x), acc);
    acc = fmaf(bf_hi(w.x), bf_hi(x.x), acc);
    acc = fmaf(bf_lo(w.y), bf_lo(x.y), acc);
    acc = fmaf(bf_hi(w.y), bf_hi(x.y), acc);
    acc = fmaf(bf_lo(w.z), bf_lo(x.z), acc);
    acc = fmaf(bf_hi(w.z), bf_hi(x.z), acc);
    acc = fmaf(bf_lo(w.w), bf_lo(x.w), acc);
    acc = fmaf(bf_hi(w.w), bf_hi(x.w), acc);
    return acc;
}

template <int NT>
static __global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_bf16(const uint4 *x, int64_t xs, const uint4 *w, const void *bias, int bdt, void *y,
                int ydt, int64_t ys, int64_t n_chunks, int64_t out)
{
    int lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * GEMV_R;
    if (row0 >= out) return;
    const uint4 *wr[GEMV_R];
#pragma unroll
    for (int r = 0; r < GEMV_R; r++) wr[r] = w + (row0 + r < out ? row0 + r : out - 1) * n_chunks;
    float acc[GEMV_R][NT];
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;

    int64_t c = lane;
    for (; c + 32 * (GEMV_U - 1) < n_chunks; c += 32 * GEMV_U) {
        uint4 wv[GEMV_U][GEMV_R];
#pragma unroll
        for (int u = 0; u < GEMV_U; u++)
#pragma unroll
            for (int r = 0; r < GEMV_R; r++) wv[u][r] = ld_stream(wr[r] + c + 32 * u);
#pragma unroll
        for (int u = 0; u < GEMV_U; u++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                uint4 xv = __ldg(x + t * xs + c + 32 * u);
#pragma unroll
                for (int r = 0; r < GEMV_R; r++) acc[r][t] = dot8(wv[u][r], xv, acc[r][t]);
            }
    }
    for (; c < n_chunks; c += 32) {
        uint4 wv[GEMV_R];
#pragma unroll
        for (int r = 0; r < GEMV_R; r++) wv[r] = ld_stream(wr[r] + c);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            uint4 xv = __ldg(x + t * xs + c);
#pragma unroll
            for (int r = 0; r < GEMV_R; r++) acc[r][t] = dot8(wv[r], xv, acc[r][t]);
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = tk_warp_sum(acc[r][t]);
    /* Lane (r * NT + t) writes (row0 + r, token t). */
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (lane == r * NT + t && row0 + r < out) {
                float v = acc[r][t];
                if (bias) v += tk_ld(bias, bdt, row0 + r);
                tk_st(y, ydt, t * ys + row0 + r, v);
            }
}

static __global__ void k_gemv_generic(const void *x, int xdt, int64_t xs, const void *w, int wdt,
                                      const void *bias, int bdt, void *y, int ydt, int64_t ys,
                                      int64_t n_tok, int64_t in, int64_t out)
{
    int64_t gid = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (gid >= out * n_tok) return;
    int64_t o = gid % out, t = gid / out;
    int lane = threadIdx.x & 31;
    float acc = 0.0f;
    for (int64_t i = lane; i < in; i += 32) acc += tk_ld(w, wdt, o * in + i) * tk_ld(x, xdt, t * xs + i);
    acc = tk_warp_sum(acc);
    if (lane == 0) {
        if (bias) acc += tk_ld(bias, bdt, o);
        tk_st(y, ydt, t * ys + o, acc);
    }
}

extern "C" int tk_gemv_fast(const void *x, int xdt, int64_t x_stride, const void *w, int wdt,
                            int64_t in)
{
    return xdt == TK_BF16 && wdt == TK_BF16 && in % 8 == 0 && x_stride % 8 == 0 &&
           ((uintptr_t)x | (uintptr_t)w) % 16 == 0;
}

template <int NT>
static void gemv_launch(cudaStream_t st, const bf16 *x, int64_t xs, const bf16 *w,
                        const void *bias, int bdt, void *y, int ydt, int64_t ys, int64_t in,
                        int64_t out)
{
    unsigned blocks = (unsigned)tk_cdiv(out, GEMV_R * GEMV_WARPS);
    k_gemv_bf16<NT><<<blocks, GEMV_WARPS * 32, 0, st>>>((const uint4 *)x, xs / 8,
                                                        (const uint4 *)w, bias, bdt, y, ydt, ys,
                                                        in / 8, out);
}

typedef void (*gemv_fn)(cudaStream_t, const bf16 *, int64_t, const bf16 *, const void *, int,
                        void *, int, int64_t, int64_t, int64_t);

extern "C" cudaError_t tk_gemv(cudaStream_t st, const void *x, int xdt, int64_t x_stride,
                               const void *w, int wdt, const void *bias, int bdt, void *y, int ydt,
                               int64_t y_stride, int64_t n_tok, int64_t in, int64_t out)
{
    if (n_tok <= 0 || out <= 0) return cudaSuccess;
    if (!tk_gemv_fast(x, xdt, x_stride, w, wdt, in)) {
        int64_t warps = out * n_tok;
        k_gemv_generic<<<(unsigned)tk_cdiv(warps, 8), 256, 0, st>>>(
            x, xdt, x_stride, w, wdt, bias, bdt, y, ydt, y_stride, n_tok, in, out);
        return cudaPeekAtLastError();
    }
    static const gemv_fn fns[8] = {gemv_launch<1>, gemv_launch<2>, gemv_launch<3>, gemv_launch<4>,
                                   gemv_launch<5>, gemv_launch<6>, gemv_launch<7>, gemv_launch<8>};
    size_t ysz = ydt == TK_F32 ? 4 : 2;
    /* Eight tokens per launch; a token's sums do not depend on its group. */
    for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
        int64_t nt = n_tok - t0 < 8 ? n_tok - t0 : 8;
        fns[nt - 1](st, (const bf16 *)x + t0 * x_stride, x_stride, (const bf16 *)w, bias, bdt,
                    (char *)y + (size_t)(t0 * y_stride) * ysz, ydt, y_stride, in, out);
        cudaError_t e = cudaPeekAtLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
