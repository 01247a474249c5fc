/*
 * cuda_quant_mma.cu — the decode GEMV for MLX-affine 4- and 8-bit weights
 * (layout: tensor/quant.h) with the dot products on the tensor cores:
 * y[t, o] = sum_i x[t, i] w[o, i] for up to 8 tokens t, w never leaves
 * registers in any form but its packed one and the bf16 pairs below.
 * Chosen by cuda_quant.c for T <= TERN_CUDA_GEMV_MAX_T where
 * tk_qgemv_mma_ok holds; v1 (cuda_quant.cu) is the fallback.
 *
 * One mma.sync.m16n8k16 (bf16 in, f32 out): A = 16 weight rows x 16 k,
 * B = 16 k x 8 tokens (token n is column n; columns >= T are zeros),
 * D[row][token]. Lane l, g = l / 4, t = l % 4, holds
 *   a0 = A[g][2t, 2t+1]  a1 = A[g+8][2t, 2t+1]  a2 = A[g][2t+8, 2t+9]  a3 = A[g+8][2t+8, 2t+9]
 *   b0 = B[2t, 2t+1][g]  b1 = B[2t+8, 2t+9][g]
 *   d0, d1 = D[g][2t, 2t+1]   d2, d3 = D[g+8][2t, 2t+1]
 * (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type").
 * Which real k sits in which of the 16 slots is free as long as A and B
 * agree, so lane t takes its 4 slots from its own packed word:
 *
 *   4 bits: word w = values v0..v7 (nibble j = v_j). One LOP3 (after a shift)
 *     ((w >> 4j) & 0x000F000F) | 0x43004300 = bf16x2 (128 + v_j, 128 + v_{j+4})
 *     (0x4300 is 128.0; q < 16 fits the 7-bit mantissa exactly), and B gets
 *     (x_j, x_{j+4}) from one 16-byte load of x and a PRMT. A word feeds two
 *     MMAs: pairs j = 0, 1 and j = 2, 3.
 *   8 bits: the same nibble pairs of a word of 4 bytes are (lo v0, lo v2),
 *     (hi v0, hi v2), (lo v1, lo v3), (hi v1, hi v3); B gets x for the low
 *     nibbles and 16 x (exact) for the high ones, so each value takes two
 *     slots: sum x (128 + lo) + 16 x (128 + hi) = sum x (2176 + q).
 *
 * So an MMA yields sum_k x_k (OFF + q_k), OFF = 128 or 2176, which must stay
 * inside one quantization group: the 4 lanes t of a row read ADJACENT pieces
 * of one group (group * bits / 32 bytes each), and per group
 *   acc += s * Cg + (b - OFF s) * Xg,   Xg = sum_k x_k over the group,
 * where Cg starts from zero and Xg comes from the same B through an MMA
 * with A = 1 (low-nibble slots only for 8 bits). The packed layout is MLX's,
 * unchanged (the CPU, dequantize and get_rows read it too).
 *
 * Work: a warp owns a 16-row tile and a slice of K in steps of 128 bytes
 * per row (256 k at 4 bits, 128 at 8): it loads step i + W while it
 * computes step i (ld.global.nc.L1::no_allocate). W warps of a block split
 * K of one tile (step i goes to warp i % W) and are summed through shared
 * memory in warp order; W comes from the shape only (enough warps for the
 * device, at least one step each), never from T. Every instruction is the
 * same whatever the token count and the MMA's columns do not mix, so a
 * token's result is bitwise the same alone or inside a batch of 8.
 * Depends on cuda_common.cuh, cuda_quant.h.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_quant.h"

#define QM_WARPS 8
#define QM_TARGET_WARPS 2048 /* warps a launch should have (132 SMs x 16) */

static __device__ __forceinline__ uint32_t ld1(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

static __device__ __forceinline__ void ld2(const uint32_t *p, uint32_t *v)
{
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];"
                 : "=r"(v[0]), "=r"(v[1])
                 : "l"(p));
}

static __device__ __forceinline__ void ld4(const uint32_t *p, uint32_t *v)
{
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "l"(p));
}

/* N consecutive 32-bit words (N = 1, 2, 4, 8; p aligned to 4N bytes, 16 for 8). */
template <int N>
static __device__ __forceinline__ void ldn(const uint32_t *p, uint32_t *v)
{
    if (N == 1) v[0] = ld1(p);
    else if (N == 2) ld2(p, v);
    else {
#pragma unroll
        for (int i = 0; i < N; i += 4) ld4(p + i, v + i);
    }
}

/* N consecutive 16-bit scales into (N + 1) / 2 words (p aligned to 2N bytes). */
template <int N>
static __device__ __forceinline__ void ldh(const uint16_t *p, uint32_t *v)
{
    if (N == 1) {
        unsigned short h;
        asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(h) : "l"(p));
        v[0] = h;
    } else {
        ldn<N / 2>((const uint32_t *)p, v);
    }
}

/* Half i of packed scales as a float (bf16 or f16). */
template <int SDT>
static __device__ __forceinline__ float hval(const uint32_t *v, int i)
{
    uint32_t w = v[i / 2];
    if (SDT == TK_BF16) return __uint_as_float(i & 1 ? w & 0xffff0000u : w << 16);
    return __half2float(__ushort_as_half((unsigned short)(i & 1 ? w >> 16 : w & 0xffffu)));
}

/* bf16x2 (128 + nibble j, 128 + nibble j + 4) of w. */
static __device__ __forceinline__ uint32_t apair(uint32_t w, int j)
{
    return ((w >> (4 * j)) & 0x000F000Fu) | 0x43004300u;
}

static __device__ __forceinline__ uint32_t times16(uint32_t p)
{
    __nv_bfloat162 h = *(__nv_bfloat162 *)&p;
    h = __hmul2(h, __floats2bfloat162_rn(16.0f, 16.0f));
    return *(uint32_t *)&h;
}

/* d = A B + c for one m16n8k16 (f32 accumulators). */
static __device__ __forceinline__ void mma(float *d, uint32_t a0, uint32_t a1, uint32_t a2,
                                           uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int BITS, int GROUP> struct qm_cfg {
    static constexpr int SK = BITS == 4 ? 256 : 128;  /* k per step: 128 bytes per row */
    static constexpr int SG = SK / GROUP;              /* groups per step (1..8) */
    static constexpr int PW = GROUP * BITS / 128;      /* words per lane per row per group */
    static constexpr int SH = (SG + 1) / 2;            /* words of SG packed scales */
};

/* One step's packed weights (rows g, g + 8: 8 words each) and scales. */
template <int BITS, int GROUP> struct qm_stage {
    uint32_t w[2][8];
    uint32_t s[2][qm_cfg<BITS, GROUP>::SH], b[2][qm_cfg<BITS, GROUP>::SH];
};

template <int BITS, int GROUP>
static __device__ __forceinline__ void stage_load(qm_stage<BITS, GROUP> &st, const uint32_t *const *qr,
                                                  const uint16_t *const *sr,
                                                  const uint16_t *const *br, int step)
{
    typedef qm_cfg<BITS, GROUP> C;
#pragma unroll
    for (int r = 0; r < 2; r++) {
#pragma unroll
        for (int G = 0; G < C::SG; G++)
            ldn<C::PW>(qr[r] + (step * C::SG + G) * (4 * C::PW), st.w[r] + G * C::PW);
        ldh<C::SG>(sr[r] + step * C::SG, st.s[r]);
        ldh<C::SG>(br[r] + step * C::SG, st.b[r]);
    }
}

/* B registers of word j of this lane's piece: 4 bf16x2 (slot pairs 0..3). */
template <int BITS>
static __device__ __forceinline__ void bregs(const bf16 *xp, bool has_x, uint32_t *b)
{
    if (BITS == 4) {
        uint4 u = has_x ? __ldg((const uint4 *)xp) : make_uint4(0, 0, 0, 0);
        b[0] = __byte_perm(u.x, u.z, 0x5410); /* (x0, x4) */
        b[1] = __byte_perm(u.x, u.z, 0x7632); /* (x1, x5) */
        b[2] = __byte_perm(u.y, u.w, 0x5410); /* (x2, x6) */
        b[3] = __byte_perm(u.y, u.w, 0x7632); /* (x3, x7) */
    } else {
        uint2 u = has_x ? __ldg((const uint2 *)xp) : make_uint2(0, 0);
        b[0] = __byte_perm(u.x, u.y, 0x5410); /* (x0, x2): low nibbles of v0, v2 */
        b[1] = times16(b[0]);                 /* high nibbles */
        b[2] = __byte_perm(u.x, u.y, 0x7632); /* (x1, x3) */
        b[3] = times16(b[2]);
    }
}

template <int BITS, int GROUP, int SDT>
static __device__ __forceinline__ void stage_compute(const qm_stage<BITS, GROUP> &st,
                                                     const bf16 *xl, bool has_x, int step,
                                                     float *acc)
{
    typedef qm_cfg<BITS, GROUP> C;
    constexpr int XW = BITS == 4 ? 8 : 4; /* x values per packed word */
    constexpr float OFF = BITS == 4 ? 128.0f : 2176.0f; /* sum of A over a value's slots at q = 0 */
    const uint32_t one = 0x3F803F80u, one_hi = BITS == 4 ? one : 0u;
#pragma unroll
    for (int G = 0; G < C::SG; G++) {
        float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f}, xg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const bf16 *xp = xl + (step * C::SG + G) * GROUP;
#pragma unroll
        for (int j = 0; j < C::PW; j++) {
            uint32_t b[4];
            bregs<BITS>(xp + j * XW, has_x, b);
            uint32_t wa = st.w[0][G * C::PW + j], wb = st.w[1][G * C::PW + j];
#pragma unroll
            for (int m = 0; m < 2; m++) {
                mma(cg, apair(wa, 2 * m), apair(wb, 2 * m), apair(wa, 2 * m + 1),
                    apair(wb, 2 * m + 1), b[2 * m], b[2 * m + 1]);
                mma(xg, one, one, one_hi, one_hi, b[2 * m], b[2 * m + 1]);
            }
        }
        float s0 = hval<SDT>(st.s[0], G), s1 = hval<SDT>(st.s[1], G);
        float o0 = fmaf(-OFF, s0, hval<SDT>(st.b[0], G));
        float o1 = fmaf(-OFF, s1, hval<SDT>(st.b[1], G));
        acc[0] = fmaf(o0, xg[0], fmaf(s0, cg[0], acc[0]));
        acc[1] = fmaf(o0, xg[1], fmaf(s0, cg[1], acc[1]));
        acc[2] = fmaf(o1, xg[2], fmaf(s1, cg[2], acc[2]));
        acc[3] = fmaf(o1, xg[3], fmaf(s1, cg[3], acc[3]));
    }
}

/* Block: QM_WARPS warps = QM_WARPS / wsplit tiles of 16 rows, wsplit warps
 * (consecutive) per tile, warp ks of a tile taking steps ks, ks + wsplit, ... */
template <int BITS, int GROUP, int SDT>
static __global__ void __launch_bounds__(QM_WARPS * 32, 2)
    k_qgemv_mma(const bf16 *__restrict__ x, int xs, int n_tok, const uint32_t *__restrict__ q,
                const uint16_t *__restrict__ sc, const uint16_t *__restrict__ bi,
                const void *bias, int bdt, void *y, int ydt, int64_t ys, int in, int out,
                int wsplit)
{
    typedef qm_cfg<BITS, GROUP> C;
    __shared__ float red[QM_WARPS][32][4];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int ks = warp % wsplit;
    int row0 = (blockIdx.x * (QM_WARPS / wsplit) + warp / wsplit) * 16;
    bool live = row0 < out;
    int words_row = in / 32 * BITS, groups_row = in / GROUP, n_steps = in / C::SK;
    const uint32_t *qr[2];
    const uint16_t *sr[2], *br[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + g + 8 * r < out ? row0 + g + 8 * r : out - 1;
        qr[r] = q + (size_t)row * words_row + t * C::PW;
        sr[r] = sc + (size_t)row * groups_row;
        br[r] = bi + (size_t)row * groups_row;
    }
    bool has_x = g < n_tok;
    const bf16 *xl = x + (size_t)(has_x ? g : 0) * xs + t * (GROUP / 4);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live && ks < n_steps) {
        qm_stage<BITS, GROUP> cur, nxt;
        stage_load(cur, qr, sr, br, ks);
        for (int s = ks; s < n_steps; s += wsplit) {
            if (s + wsplit < n_steps) stage_load(nxt, qr, sr, br, s + wsplit);
            stage_compute<BITS, GROUP, SDT>(cur, xl, has_x, s, acc);
            cur = nxt;
        }
    }
    if (wsplit > 1) {
#pragma unroll
        for (int i = 0; i < 4; i++) red[warp][lane][i] = acc[i];
        __syncthreads();
        if (ks != 0) return;
        for (int w = 1; w < wsplit; w++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[i] += red[warp + w][lane][i];
    }
    if (!live) return;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = row0 + g + (i >> 1) * 8, tok = 2 * t + (i & 1);
        if (row < out && tok < n_tok) {
            float v = acc[i];
            if (bias) v += tk_ld(bias, bdt, row);
            tk_st(y, ydt, tok * ys + row, v);
        }
    }
}

extern "C" int tk_qgemv_mma_split(int bits, int64_t in, int64_t out)
{
    int64_t tiles = tk_cdiv(out, 16), n_steps = in / (bits == 4 ? 256 : 128);
    int w = 1;
    while (w < QM_WARPS && tiles * w < QM_TARGET_WARPS && 2 * w <= n_steps) w *= 2;
    return w;
}

extern "C" int tk_qgemv_mma_ok(const struct tk_qmat *m, const void *x, int xdt, int64_t x_stride,
                               int64_t in, int64_t out)
{
    if (!(m->bits == 4 || m->bits == 8) || !(m->sdt == TK_BF16 || m->sdt == TK_F16) ||
        !(m->group == 32 || m->group == 64 || m->group == 128) || xdt != TK_BF16)
        return 0;
    int sk = m->bits == 4 ? 256 : 128, salign = 2 * (sk / m->group);
    return in > 0 && in % sk == 0 && out > 0 && in < (1 << 30) && out < (1 << 30) &&
           x_stride % 8 == 0 && x_stride < (1 << 30) &&
           ((uintptr_t)x | (uintptr_t)m->q) % 16 == 0 &&
           ((uintptr_t)m->scales | (uintptr_t)m->biases) % (uintptr_t)salign == 0;
}

typedef void (*qm_fn)(cudaStream_t, const struct tk_qmat *, const void *, int, int, const void *,
                      int, void *, int, int64_t, int, int, int);

template <int BITS, int GROUP, int SDT>
static void qm_launch(cudaStream_t st, const struct tk_qmat *m, const void *x, int xs, int n_tok,
                      const void *bias, int bdt, void *y, int ydt, int64_t ys, int in, int out,
                      int wsplit)
{
    unsigned blocks = (unsigned)tk_cdiv(tk_cdiv(out, 16), QM_WARPS / wsplit);
    k_qgemv_mma<BITS, GROUP, SDT><<<blocks, QM_WARPS * 32, 0, st>>>(
        (const bf16 *)x, xs, n_tok, (const uint32_t *)m->q, (const uint16_t *)m->scales,
        (const uint16_t *)m->biases, bias, bdt, y, ydt, ys, in, out, wsplit);
}

#define QM_ROW(B)                                                                                  \
    {qm_launch<B, 32, TK_BF16>, qm_launch<B, 64, TK_BF16>, qm_launch<B, 128, TK_BF16>},           \
        {qm_launch<B, 32, TK_F16>, qm_launch<B, 64, TK_F16>, qm_launch<B, 128, TK_F16>}

extern "C" cudaError_t tk_qgemv_mma(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                    int64_t x_stride, const void *bias, int bdt, void *y, int ydt,
                                    int64_t y_stride, int64_t n_tok, int64_t in, int64_t out)
{
    static const qm_fn table[2][2][3] = {{QM_ROW(4)}, {QM_ROW(8)}};
    if (n_tok <= 0 || out <= 0) return cudaSuccess;
    qm_fn f = table[m->bits == 8][m->sdt == TK_F16][m->group == 32 ? 0 : m->group == 64 ? 1 : 2];
    int wsplit = tk_qgemv_mma_split(m->bits, in, out);
    size_t ysz = ydt == TK_F32 ? 4 : 2;
    for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
        int nt = (int)(n_tok - t0 < 8 ? n_tok - t0 : 8);
        f(st, m, (const bf16 *)x + t0 * x_stride, (int)x_stride, nt, bias, bdt,
          (char *)y + (size_t)(t0 * y_stride) * ysz, ydt, y_stride, (int)in, (int)out, wsplit);
        cudaError_t e = cudaPeekAtLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
