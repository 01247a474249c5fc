/*
 * cuda_gemv.cu — y = x W^T for few rows (decode), streaming the weights once.
 *
 * Fast path (x, W in BF16, in % 8 == 0, 16-byte aligned rows): each warp owns
 * GEMV_R consecutive output rows; lane l reads 16-byte chunks l, l+32, ... of
 * those rows (coalesced 512-byte warp loads, GEMV_U chunks per row in flight,
 * GEMV_U1 at one token, marked no-allocate in L1 since they are used once;
 * the first step's loads are issued before the PDL wait) and the matching chunks
 * of the NT <= 8 token rows of x (small, L1/L2 resident). Each (row, token)
 * sum is accumulated in float in the same order whatever NT is, then reduced
 * across the warp in a fixed butterfly: a token's result does not depend on
 * how many tokens share the launch. No split-K: every Llama/Qwen-sized layer
 * has >= 1024 output rows, enough warps to fill the chip on its own.
 *
 * The GLU variant (tk_gemv_glu) is the gate/up projection with silu_mul in
 * its epilogue: warp i takes gate row i and up row ff + i of the fused
 * [2 ff, in] weight as its two rows, rounds both sums to BF16 as the stored
 * gate_up would be, and writes silu(gate) * up rounded as k_silu_mul does:
 * bitwise the unfused result, one launch and the gate_up round trip fewer.
 * (A first version folded silu_mul into the down projection's prologue
 * instead: every block recomputed all ff products before streaming, which
 * cost more than the launch it saved: 192.6 vs 198.0 tok/s on the 8B.)
 *
 * Anything else (F32 / F16 operands, odd sizes) takes k_gemv_generic: one
 * warp per (row, token), exact, slow, for tiny test models.
 * Depends on cuda_common.cuh.
 */
#include "backend/cuda/cuda_common.cuh"

#define GEMV_R 2      /* output rows per warp */
#define GEMV_U 4      /* 16-byte chunks per row in flight per lane, 2-8 tokens */
#define GEMV_U1 8     /* the same at one token: 206.5 vs 199.6 tok/s on the 8B (H200) */
#define GEMV_WARPS 8  /* warps per block */

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

/* Loads the U x GEMV_R weight chunks of one main-loop step. */
template <int U>
static __device__ __forceinline__ void ld_step(uint4 (&wv)[U][GEMV_R],
                                               const uint4 *const (&wr)[GEMV_R], int64_t c)
{
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int r = 0; r < GEMV_R; r++) wv[u][r] = tk_ld_stream(wr[r] + c + 32 * u);
}

/* x [NT rows of xs chunks], in = n_chunks * 8. GLU = false: rows
 * [0, out) of w, GEMV_R consecutive ones per warp. GLU = true: warp i takes
 * rows i (gate) and out + i (up) of w [2 out, in] and writes
 * silu(gate) * up (BF16) to column i of y; bias, if any, is [2 out].
 * PDL (cuda_common.cuh): the first weight loads are issued before the wait,
 * so weight streaming overlaps the previous kernel's tail. */
template <int NT, bool GLU, int U>
static __global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_bf16(const uint4 *x, int64_t xs, const uint4 *w, const void *bias, int bdt, void *y,
                int ydt, int64_t ys, int64_t n_chunks, int64_t out)
{
    static_assert(!GLU || GEMV_R == 2, "GLU: one gate and one up row per warp");
    int lane = threadIdx.x & 31;
    int64_t warp_id = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    int64_t row0 = GLU ? warp_id : warp_id * GEMV_R;
    if (row0 >= out) return;
    const uint4 *wr[GEMV_R];
#pragma unroll
    for (int r = 0; r < GEMV_R; r++) {
        int64_t row = GLU ? row0 + r * out : (row0 + r < out ? row0 + r : out - 1);
        wr[r] = w + row * n_chunks;
    }
    float acc[GEMV_R][NT];
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;

    int64_t c = lane;
    uint4 wv[U][GEMV_R];
    bool full = c + 32 * (U - 1) < n_chunks;
    if (full) ld_step(wv, wr, c); /* weights only: safe before the wait */
    tk_pdl_wait();
    tk_pdl_launch();
    while (full) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                uint4 xv = __ldg(x + t * xs + c + 32 * u);
#pragma unroll
                for (int r = 0; r < GEMV_R; r++) acc[r][t] = dot8(wv[u][r], xv, acc[r][t]);
            }
        c += 32 * U;
        full = c + 32 * (U - 1) < n_chunks;
        if (full) ld_step(wv, wr, c);
    }
    for (; c < n_chunks; c += 32) {
        uint4 wt[GEMV_R];
#pragma unroll
        for (int r = 0; r < GEMV_R; r++) wt[r] = tk_ld_stream(wr[r] + c);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            uint4 xv = __ldg(x + t * xs + c);
#pragma unroll
            for (int r = 0; r < GEMV_R; r++) acc[r][t] = dot8(wt[r], xv, acc[r][t]);
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = tk_warp_sum(acc[r][t]);
    if (GLU) { /* lane t writes token t's product */
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (lane == t) {
                float g = acc[0][t], u = acc[1][t];
                if (bias) {
                    g += tk_ld(bias, bdt, row0);
                    u += tk_ld(bias, bdt, row0 + out);
                }
                /* As stored into gate_up (BF16), then k_silu_mul's expression. */
                g = __bfloat162float(__float2bfloat16(g));
                u = __bfloat162float(__float2bfloat16(u));
                ((bf16 *)y)[t * ys + row0] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
            }
    } else { /* lane (r * NT + t) writes (row0 + r, token t) */
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
}

static __global__ void k_gemv_generic(const void *x, int xdt, int64_t xs, const void *w, int wdt,
                                      const void *bias, int bdt, void *y, int ydt, int64_t ys,
                                      int64_t n_tok, int64_t in, int64_t out)
{
    tk_pdl_wait();
    tk_pdl_launch();
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

/* Chunks per row in flight: GEMV_U1 at one token, GEMV_U at more. */
template <int NT, bool GLU>
static cudaError_t gemv_launch(cudaStream_t st, const bf16 *x, int64_t xs, const bf16 *w,
                               const void *bias, int bdt, void *y, int ydt, int64_t ys, int64_t in,
                               int64_t out)
{
    unsigned blocks = (unsigned)tk_cdiv(out, (GLU ? 1 : GEMV_R) * GEMV_WARPS);
    return tk_launch(k_gemv_bf16<NT, GLU, NT == 1 ? GEMV_U1 : GEMV_U>, blocks, GEMV_WARPS * 32, 0,
                     st, (const uint4 *)x, xs / 8, (const uint4 *)w, bias, bdt, y, ydt, ys, in / 8,
                     out);
}

typedef cudaError_t (*gemv_fn)(cudaStream_t, const bf16 *, int64_t, const bf16 *, const void *,
                               int, void *, int, int64_t, int64_t, int64_t);
#define GEMV_FNS(GLU)                                                                              \
    {gemv_launch<1, GLU>, gemv_launch<2, GLU>, gemv_launch<3, GLU>, gemv_launch<4, GLU>,           \
     gemv_launch<5, GLU>, gemv_launch<6, GLU>, gemv_launch<7, GLU>, gemv_launch<8, GLU>}

extern "C" cudaError_t tk_gemv(cudaStream_t st, const void *x, int xdt, int64_t x_stride,
                               const void *w, int wdt, const void *bias, int bdt, void *y, int ydt,
                               int64_t y_stride, int64_t n_tok, int64_t in, int64_t out)
{
    if (n_tok <= 0 || out <= 0) return cudaSuccess;
    if (!tk_gemv_fast(x, xdt, x_stride, w, wdt, in)) {
        int64_t warps = out * n_tok;
        return tk_launch(k_gemv_generic, (unsigned)tk_cdiv(warps, 8), 256, 0, st, x, xdt, x_stride,
                         w, wdt, bias, bdt, y, ydt, y_stride, n_tok, in, out);
    }
    static const gemv_fn fns[8] = GEMV_FNS(false);
    size_t ysz = ydt == TK_F32 ? 4 : 2;
    /* Eight tokens per launch; a token's sums do not depend on its group. */
    for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
        int64_t nt = n_tok - t0 < 8 ? n_tok - t0 : 8;
        cudaError_t e = fns[nt - 1](st, (const bf16 *)x + t0 * x_stride, x_stride, (const bf16 *)w,
                                    bias, bdt, (char *)y + (size_t)(t0 * y_stride) * ysz, ydt,
                                    y_stride, in, out);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t tk_gemv_glu(cudaStream_t st, const void *x, int64_t x_stride,
                                   const void *w, const void *bias, int bdt, void *act,
                                   int64_t act_stride, int64_t n_tok, int64_t in, int64_t ff)
{
    static const gemv_fn fns[8] = GEMV_FNS(true);
    if (n_tok <= 0 || ff <= 0) return cudaSuccess;
    if (!tk_gemv_fast(x, TK_BF16, x_stride, w, TK_BF16, in)) return cudaErrorInvalidValue;
    for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
        int64_t nt = n_tok - t0 < 8 ? n_tok - t0 : 8;
        cudaError_t e = fns[nt - 1](st, (const bf16 *)x + t0 * x_stride, x_stride, (const bf16 *)w,
                                    bias, bdt, (bf16 *)act + t0 * act_stride, TK_BF16, act_stride,
                                    in, ff);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
