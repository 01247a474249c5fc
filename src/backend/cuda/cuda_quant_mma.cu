/*
 * cuda_quant_mma.cu — the decode GEMV for MLX-affine 4-bit weights
 * (layout: tensor/quant.h) with the dot products on the tensor cores:
 * y[t, o] = sum_i x[t, i] w[o, i] for up to 8 tokens t, w never leaves
 * registers in any form but its packed one and the bf16 pairs below.
 * cuda_quant.c takes it for every 4-bit weight where tk_qgemv_mma_ok
 * holds, at every T up to 32 (8 per pass); other widths take the register
 * GEMV of cuda_quant.cu. Two variants with their own epilogue:
 * tk_qgemv_mma_glu, the gate/up GEMV with silu_mul (matmul_glu), bitwise
 * this kernel into a BF16 gate_up then tk_silu_mul; tk_qgemv_mma_rope
 * (RP), the fused qkv GEMV with the rotation and the K/V cache stores
 * (matmul_rope_store), bitwise this kernel into qkv then
 * tk_qk_rope_store without head norms. Launched with PDL (tk_launch):
 * each warp's first ring stages (weights and scales) are in flight before
 * tk_pdl_wait, x is read after it.
 *
 * One mma.sync.m16n8k16 (bf16 in, f32 out): A = 16 weight rows x 16 k,
 * B = 16 k x 8 tokens (token n is column n; columns >= T are zeros),
 * D[row][token]. Lane l, g = l / 4, t = l % 4, holds
 *   a0 = A[g][2t, 2t+1]  a1 = A[g+8][2t, 2t+1]  a2 = A[g][2t+8, 2t+9]  a3 = A[g+8][2t+8, 2t+9]
 *   b0 = B[2t, 2t+1][g]  b1 = B[2t+8, 2t+9][g]
 *   d0, d1 = D[g][2t, 2t+1]   d2, d3 = D[g+8][2t, 2t+1]
 * (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type").
 * Which real k sits in which of the 16 slots is free as long as A and B
 * agree, so lane t takes its 4 slots from its own packed word: word w =
 * values v0..v7 (nibble j = v_j). One LOP3 (after a shift)
 *   ((w >> 4j) & 0x000F000F) | 0x43004300 = bf16x2 (128 + v_j, 128 + v_{j+4})
 * (0x4300 is 128.0; q < 16 fits the 7-bit mantissa exactly), and B gets
 * (x_j, x_{j+4}) from one 16-byte load of x and a PRMT. A word feeds two
 * MMAs: pairs j = 0, 1 and j = 2, 3.
 *
 * So an MMA yields sum_k x_k (128 + q_k), which must stay inside one
 * quantization group: the 4 lanes t of a row read ADJACENT pieces of one
 * group (group / 8 bytes each), and per group
 *   acc += s * Cg + (b - 128 s) * Xg,   Xg = sum_k x_k over the group,
 * where Cg starts from zero and Xg comes from the same B through an MMA
 * with A = 1. The packed layout is MLX's, unchanged (the CPU, dequantize
 * and get_rows read it too).
 *
 * Work: a warp owns a 16-row tile and a slice of K in steps of 128 bytes
 * per row (256 k): it streams its steps through its own ring of 3-4
 * shared-memory slots (cp.async, up to 3 steps in flight while it computes
 * one; rows padded so that the lanes of one shared load hit distinct
 * banks). W warps of a block split K of one tile (step i goes to warp i %
 * W) and are summed through shared memory in warp order; W comes from the
 * shape only (enough warps for the device, at least one step each), never
 * from T. The widest weights (>= 1024 tiles: qm_tp) give each warp TP = 2
 * tiles at once, in two ring slots of two tiles: the B registers and x
 * sums (the PRMTs and the A = 1 MMAs) are made once for both, each tile's
 * sums unchanged. Every instruction is the same whatever the token count
 * and the MMA's columns do not mix, so a token's result is bitwise the
 * same alone or inside a batch of 8.
 * Depends on cuda_common.cuh, cuda_qmma.cuh, cuda_quant.h, cuda_rope.cuh.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_qmma.cuh"
#include "backend/cuda/cuda_quant.h"
#include "backend/cuda/cuda_rope.cuh"

#define QM_WARPS 8
/* Warps a launch should have: the K split doubles while tiles x split is
 * below this (H200, 2026-11-29: gate_up 28672 rows is fastest at 4 warps
 * per tile, o / down 4096 rows at 8, lm_head 128256 rows within 3% at 1-4). */
#define QM_TARGET_WARPS 6144

/* Asynchronous global -> shared copy of N bytes (16: L2 only; 4 / 8: .ca). */
template <int N>
static __device__ __forceinline__ void cp_async(void *dst, const void *src)
{
    if (N == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(tk_smem_u32(dst)), "l"(src));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(tk_smem_u32(dst)), "l"(src),
                     "n"(N));
}

static __device__ __forceinline__ void cp_commit(void) { asm volatile("cp.async.commit_group;"); }

template <int N> static __device__ __forceinline__ void cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

/* N consecutive 32-bit words from shared memory (N = 1, 2, 4). */
template <int N>
static __device__ __forceinline__ void lds(const unsigned char *p, uint32_t *v)
{
    if (N == 1) v[0] = *(const uint32_t *)p;
    else if (N == 2) {
        uint2 u = *(const uint2 *)p;
        v[0] = u.x, v[1] = u.y;
    } else {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            uint4 u = *(const uint4 *)(p + 4 * i);
            v[i] = u.x, v[i + 1] = u.y, v[i + 2] = u.z, v[i + 3] = u.w;
        }
    }
}

template <int GROUP> struct qm_cfg {
    static constexpr int SK = 256;                    /* k per step: 128 bytes per row */
    static constexpr int SG = SK / GROUP;             /* groups per step (2..8) */
    static constexpr int PW = GROUP / 32;             /* words per lane per row per group */
    static constexpr int RB = SK / 2;                 /* packed bytes per row per step */
    /* shared row stride: the rows of one shared-load phase (8 / 4 / 2 rows
     * for 4 / 8 / 16-byte loads) fall on distinct banks */
    static constexpr int RS = RB + 16 * PW;
    static constexpr int SB = 2 * SG;                 /* scale bytes per row per step */
    static constexpr int STAGE = 16 * RS + 32 * SB;   /* weights, then scales, then biases */
    static constexpr int NST = STAGE <= 3072 ? 4 : 3; /* ring stages per warp */
    static constexpr int CH = RB / 32;                /* 16-byte chunks per lane per step */
};

/* Enqueues one step of this warp's tile into a ring slot: lane L copies
 * 16-byte chunk L + 32 i of the [16 rows, RB bytes] block, and lane L < 16
 * the scales, L >= 16 the biases of row L % 16. */
template <int GROUP>
static __device__ __forceinline__ void stage_issue(unsigned char *slot, const uint32_t *q,
                                                   const int *qoff, const uint16_t *sb_row,
                                                   int lane, int step)
{
    typedef qm_cfg<GROUP> C;
    constexpr int CPR = C::RB / 16; /* chunks per row */
#pragma unroll
    for (int i = 0; i < C::CH; i++) {
        int c = lane + 32 * i, row = c / CPR, col = c % CPR;
        cp_async<16>(slot + row * C::RS + col * 16, q + qoff[i] + step * (C::RB / 4) + col * 4);
    }
    cp_async<C::SB>(slot + 16 * C::RS + lane * C::SB, sb_row + step * C::SG);
}

/* B registers of word j of this lane's piece: 4 bf16x2 (slot pairs 0..3). */
static __device__ __forceinline__ void bregs(const bf16 *xp, bool has_x, uint32_t *b)
{
    uint4 u = !has_x ? make_uint4(0, 0, 0, 0) : __ldg((const uint4 *)xp);
    b[0] = __byte_perm(u.x, u.z, 0x5410); /* (x0, x4) */
    b[1] = __byte_perm(u.x, u.z, 0x7632); /* (x1, x5) */
    b[2] = __byte_perm(u.y, u.w, 0x5410); /* (x2, x6) */
    b[3] = __byte_perm(u.y, u.w, 0x7632); /* (x3, x7) */
}

/* One step of TP tiles (the slot holds TP stages, one per tile): the
 * activation registers and the sums of x (MMA with A = 1) are made once and
 * serve every tile; each tile's sums see exactly the operations, in the
 * order, they see at TP = 1. */
template <int GROUP, int SDT, int TP>
static __device__ __forceinline__ void stage_compute(const unsigned char *slot, const bf16 *xl,
                                                     bool has_x, int step, int g, int t,
                                                     float (*acc)[4])
{
    typedef qm_cfg<GROUP> C;
    constexpr int XW = 8;         /* x values per packed word */
    constexpr float OFF = 128.0f; /* sum of A over a value's slots at q = 0 */
    const uint32_t one = 0x3F803F80u;
    uint32_t sv[TP][2][(C::SG + 1) / 2], bv[TP][2][(C::SG + 1) / 2];
#pragma unroll
    for (int p = 0; p < TP; p++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            lds<C::SB / 4>(slot + p * C::STAGE + 16 * C::RS + (g + 8 * r) * C::SB, sv[p][r]);
            lds<C::SB / 4>(slot + p * C::STAGE + 16 * C::RS + (16 + g + 8 * r) * C::SB, bv[p][r]);
        }
#pragma unroll
    for (int G = 0; G < C::SG; G++) {
        uint32_t wa[TP][C::PW], wb[TP][C::PW];
#pragma unroll
        for (int p = 0; p < TP; p++) {
            const unsigned char *sp = slot + p * C::STAGE + G * 16 * C::PW + t * 4 * C::PW;
            lds<C::PW>(sp + g * C::RS, wa[p]);
            lds<C::PW>(sp + (g + 8) * C::RS, wb[p]);
        }
        float cg[TP][4], xg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int p = 0; p < TP; p++) cg[p][0] = cg[p][1] = cg[p][2] = cg[p][3] = 0.0f;
        const bf16 *xp = xl + (step * C::SG + G) * GROUP;
#pragma unroll
        for (int j = 0; j < C::PW; j++) {
            uint32_t b[4];
            bregs(xp + j * XW, has_x, b);
#pragma unroll
            for (int m = 0; m < 2; m++) {
#pragma unroll
                for (int p = 0; p < TP; p++)
                    tk_mma_bf16(cg[p], tk_q4_pair(wa[p][j], 2 * m), tk_q4_pair(wb[p][j], 2 * m),
                                tk_q4_pair(wa[p][j], 2 * m + 1), tk_q4_pair(wb[p][j], 2 * m + 1),
                                b[2 * m], b[2 * m + 1]);
                tk_mma_bf16(xg, one, one, one, one, b[2 * m], b[2 * m + 1]);
            }
        }
#pragma unroll
        for (int p = 0; p < TP; p++) {
            float s0 = tk_half_of<SDT>(sv[p][0][G / 2], G & 1);
            float s1 = tk_half_of<SDT>(sv[p][1][G / 2], G & 1);
            float o0 = fmaf(-OFF, s0, tk_half_of<SDT>(bv[p][0][G / 2], G & 1));
            float o1 = fmaf(-OFF, s1, tk_half_of<SDT>(bv[p][1][G / 2], G & 1));
            acc[p][0] = fmaf(o0, xg[0], fmaf(s0, cg[p][0], acc[p][0]));
            acc[p][1] = fmaf(o0, xg[1], fmaf(s0, cg[p][1], acc[p][1]));
            acc[p][2] = fmaf(o1, xg[2], fmaf(s1, cg[p][2], acc[p][2]));
            acc[p][3] = fmaf(o1, xg[3], fmaf(s1, cg[p][3], acc[p][3]));
        }
    }
}

/* The RP epilogue: acc[0] / acc[1] hold rows r and r + hd / 2 (r = row0 +
 * g, + 8) of one head for tokens 2 t, 2 t + 1. Each value is rounded to
 * BF16 as the plain kernel stores it into qkv; a q or k head's pair is then
 * rotated as k_qk_rope_store does without head norms (rope_rot's
 * arithmetic, cuda_rope.cuh), and a k / v head's values also go to the
 * token's cache slot (none when the slot is outside [0, n_slots)). */
static __device__ __forceinline__ void qm_rope_store(const tk_rp &rp, const float (*acc)[4],
                                                     int row0, int g, int t, int n_tok,
                                                     const void *bias, int bdt, bf16 *qkv,
                                                     int64_t ys)
{
    int hd = rp.hd, half = hd / 2;
    int64_t kvd = (int64_t)rp.n_kv * hd;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int ra = row0 + g + (i >> 1) * 8, rb = ra + half, tok = 2 * t + (i & 1);
        if (tok >= n_tok) continue;
        float x1 = acc[0][i], x2 = acc[1][i];
        if (bias) x1 += tk_ld(bias, bdt, ra), x2 += tk_ld(bias, bdt, rb);
        x1 = __bfloat162float(__float2bfloat16(x1)); /* as stored in qkv */
        x2 = __bfloat162float(__float2bfloat16(x2));
        int h = ra / hd, d = ra % hd;
        if (h < rp.n_heads + rp.n_kv) {
            float c, s;
            tk_rope_cs((float)rp.pos[tok], rp.inv_freq[d], rp.mscale, c, s);
            tk_rope_pair<bf16>(x1, x2, c, s);
        }
        bf16 *row = qkv + tok * ys;
        row[ra] = __float2bfloat16(x1);
        row[rb] = __float2bfloat16(x2);
        int64_t slot = rp.slots[tok];
        if (h >= rp.n_heads && slot >= 0 && slot < rp.n_slots) {
            bool is_k = h < rp.n_heads + rp.n_kv;
            bf16 *dst = (bf16 *)(is_k ? rp.k_cache : rp.v_cache) + slot * kvd +
                        (int64_t)(h - rp.n_heads - (is_k ? 0 : rp.n_kv)) * hd;
            dst[d] = __float2bfloat16(x1);
            dst[d + half] = __float2bfloat16(x2);
        }
    }
}

/* Ring stages per warp: NST at one tile per warp; two stages of TP tiles
 * each above (the same shared memory as NST = 4 at TP = 2, so two blocks
 * still fit an SM). */
template <int GROUP, int TP> struct qm_ring {
    static constexpr int NS = TP == 1 ? qm_cfg<GROUP>::NST : 2;
    static constexpr int BYTES = QM_WARPS * NS * TP * qm_cfg<GROUP>::STAGE;
};

/* Block: QM_WARPS warps = QM_WARPS / wsplit groups of TP tiles of 16 rows,
 * wsplit warps (consecutive) per group, warp ks of a group taking steps ks,
 * ks + wsplit, ... of each of its TP tiles (TP = 2 for the widest weights:
 * one set of activation registers serves both tiles). Each warp streams its
 * steps through its own ring of NS shared-memory slots (cp.async, NS - 1
 * steps in flight while it computes one). Every tile's sums are the same
 * whatever TP: the choice of TP depends on the shape only.
 * GLU: `out` is ff; tile rows 0-7 are gate rows i0.., rows 8-15 up rows
 * ff + i0.. (i0 = 8 per tile), so lane (g, t) ends with both sums of output
 * i0 + g and writes silu(gate) * up (BF16) rounded as tk_silu_mul would
 * from a BF16 gate_up: bitwise the plain kernel then silu_mul (each row's
 * sums do not depend on its place in the tile). */
template <int GROUP, int SDT, bool GLU, int TP, bool RP>
static __global__ void __launch_bounds__(QM_WARPS * 32, 2)
    k_qgemv_mma(const bf16 *__restrict__ x, int xs, int n_tok, const uint32_t *__restrict__ q,
                const uint16_t *__restrict__ sc, const uint16_t *__restrict__ bi,
                const void *bias, int bdt, void *y, int ydt, int64_t ys, int in, int out,
                int wsplit, tk_rp rp)
{
    static_assert(!RP || (TP == 2 && !GLU), "RP: plain, TP = 2");
    typedef qm_cfg<GROUP> C;
    constexpr int NS = qm_ring<GROUP, TP>::NS;
    extern __shared__ __align__(16) unsigned char qm_ring_s[];
    __shared__ float red[QM_WARPS][32][4];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int ks = warp % wsplit;
    int grp = blockIdx.x * (QM_WARPS / wsplit) + warp / wsplit;
    int rpt = GLU ? 8 : 16; /* output rows per tile */
    /* tile p of this warp: TP consecutive tiles, or (RP) the two tiles of
     * a head's rotary pairs: pair j of head h takes tiles h hd / 16 + j and
     * that + hd / 32 */
    auto tile_of = [&](int p) {
        if (!RP) return grp * TP + p;
        int hpt = rp.hd / 32, h = grp / hpt, j = grp % hpt;
        return h * 2 * hpt + j + p * hpt;
    };
    /* weight row of row r (0..15) of tile p, clamped into the matrix */
    auto trow = [&](int p, int r) {
        int row0 = tile_of(p) * rpt;
        if (!GLU) return row0 + r < out ? row0 + r : out - 1;
        int i = row0 + (r & 7) < out ? row0 + (r & 7) : out - 1;
        return r < 8 ? i : out + i;
    };
    int words_row = in / 32 * 4, groups_row = in / GROUP, n_steps = in / C::SK;
    int qoff[TP][C::CH];
    const uint16_t *sb_row[TP];
#pragma unroll
    for (int p = 0; p < TP; p++) {
#pragma unroll
        for (int i = 0; i < C::CH; i++) qoff[p][i] = trow(p, (lane + 32 * i) / (C::RB / 16)) * words_row;
        sb_row[p] = (lane < 16 ? sc : bi) + (size_t)trow(p, lane & 15) * groups_row;
    }
    bool has_x = g < n_tok;
    const bf16 *xl = x + (size_t)(has_x ? g : 0) * xs + t * (GROUP / 4);
    float acc[TP][4];
#pragma unroll
    for (int p = 0; p < TP; p++) acc[p][0] = acc[p][1] = acc[p][2] = acc[p][3] = 0.0f;
    int n_mine = tile_of(0) * rpt < out && ks < n_steps ? (n_steps - 1 - ks) / wsplit + 1 : 0;
    unsigned char *ring = qm_ring_s + warp * (NS * TP * C::STAGE);
#pragma unroll
    for (int i = 0; i < NS - 1; i++) { /* weights and scales only: before the PDL wait */
        if (i < n_mine)
#pragma unroll
            for (int p = 0; p < TP; p++)
                stage_issue<GROUP>(ring + (i * TP + p) * C::STAGE, q, qoff[p], sb_row[p], lane,
                                   ks + i * wsplit);
        cp_commit();
    }
    tk_pdl_wait(); /* x comes from an earlier kernel */
    tk_pdl_launch();
    int slot_c = 0, slot_i = NS - 1;
    for (int n = 0; n < n_mine; n++) {
        if (n + NS - 1 < n_mine)
#pragma unroll
            for (int p = 0; p < TP; p++)
                stage_issue<GROUP>(ring + (slot_i * TP + p) * C::STAGE, q, qoff[p], sb_row[p],
                                   lane, ks + (n + NS - 1) * wsplit);
        cp_commit();
        cp_wait<NS - 1>();
        __syncwarp();
        stage_compute<GROUP, SDT, TP>(ring + slot_c * TP * C::STAGE, xl, has_x, ks + n * wsplit, g,
                                      t, acc);
        __syncwarp(); /* the slot is refilled next iteration */
        slot_c = slot_c + 1 == NS ? 0 : slot_c + 1;
        slot_i = slot_i + 1 == NS ? 0 : slot_i + 1;
    }
    cp_wait<0>();
    if (wsplit > 1)
#pragma unroll
        for (int p = 0; p < TP; p++) {
            if (p > 0) __syncthreads(); /* tile p - 1's sums have been read */
#pragma unroll
            for (int i = 0; i < 4; i++) red[warp][lane][i] = acc[p][i];
            __syncthreads();
            if (ks == 0)
                for (int w = 1; w < wsplit; w++)
#pragma unroll
                    for (int i = 0; i < 4; i++) acc[p][i] += red[warp + w][lane][i];
        }
    if (RP) {
        if (ks == 0 && tile_of(0) * rpt < out) qm_rope_store(rp, acc, tile_of(0) * 16, g, t, n_tok,
                                                             bias, bdt, (bf16 *)y, ys);
    } else
#pragma unroll
        for (int p = 0; p < TP; p++) {
            int row0 = tile_of(p) * rpt;
            if (row0 >= out || ks != 0) continue;
            if (GLU) {
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    int i = row0 + g, tok = 2 * t + c;
                    if (i < out && tok < n_tok) {
                        float gv = acc[p][c], uv = acc[p][2 + c];
                        if (bias) gv += tk_ld(bias, bdt, i), uv += tk_ld(bias, bdt, out + i);
                        gv = __bfloat162float(__float2bfloat16(gv)); /* as stored in gate_up */
                        uv = __bfloat162float(__float2bfloat16(uv));
                        ((bf16 *)y)[tok * ys + i] = __float2bfloat16(gv / (1.0f + expf(-gv)) * uv);
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int row = row0 + g + (i >> 1) * 8, tok = 2 * t + (i & 1);
                    if (row < out && tok < n_tok) {
                        float v = acc[p][i];
                        if (bias) v += tk_ld(bias, bdt, row);
                        tk_st(y, ydt, tok * ys + row, v);
                    }
                }
            }
        }
}

#define QM_STEP_K 256 /* k per ring step (qm_cfg::SK) */

extern "C" int tk_qgemv_mma_split(int64_t in, int64_t out)
{
    int64_t tiles = tk_cdiv(out, 16), n_steps = in / QM_STEP_K;
    int w = 1;
    while (w < QM_WARPS && tiles * w < QM_TARGET_WARPS && 2 * w <= n_steps) w *= 2;
    return w;
}

extern "C" int tk_qgemv_mma_ok(const struct tk_qmat *m, const void *x, int xdt, int64_t x_stride,
                               int64_t in, int64_t out)
{
    if (m->bits != 4 || !(m->sdt == TK_BF16 || m->sdt == TK_F16) ||
        !(m->group == 32 || m->group == 64 || m->group == 128) || xdt != TK_BF16)
        return 0;
    int salign = 2 * (QM_STEP_K / m->group);
    return in > 0 && in % QM_STEP_K == 0 && out > 0 && in < (1 << 30) && out < (1 << 30) &&
           x_stride % 8 == 0 && x_stride < (1 << 30) &&
           ((uintptr_t)x | (uintptr_t)m->q) % 16 == 0 &&
           ((uintptr_t)m->scales | (uintptr_t)m->biases) % (uintptr_t)salign == 0;
}

typedef cudaError_t (*qm_fn)(cudaStream_t, const struct tk_qmat *, const void *, int, int,
                             const void *, int, void *, int, int64_t, int, int, int,
                             const struct tk_rp *);

/* out: rows (GLU: ff, the kernel covering 2 ff rows in 16-row tiles). */
template <int GROUP, int SDT, bool GLU, int TP, bool RP = false>
static cudaError_t qm_launch(cudaStream_t st, const struct tk_qmat *m, const void *x, int xs,
                             int n_tok, const void *bias, int bdt, void *y, int ydt, int64_t ys,
                             int in, int out, int wsplit, const struct tk_rp *rp)
{
    int ring = qm_ring<GROUP, TP>::BYTES, dev = 0;
    /* Above 48 KB of shared memory, once per device (racing threads set the
     * same value; not a stream operation, so legal while capturing a graph). */
    static unsigned attr_set;
    if (cudaGetDevice(&dev) == cudaSuccess && dev < 32 && !((attr_set >> dev) & 1u)) {
        cudaFuncSetAttribute(k_qgemv_mma<GROUP, SDT, GLU, TP, RP>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, ring);
        attr_set |= 1u << dev;
    }
    int64_t tiles = tk_cdiv(GLU ? 2 * (int64_t)out : out, 16);
    unsigned blocks = (unsigned)tk_cdiv(tk_cdiv(tiles, TP), QM_WARPS / wsplit);
    struct tk_rp no_rp = {};
    return tk_launch(k_qgemv_mma<GROUP, SDT, GLU, TP, RP>, dim3(blocks), dim3(QM_WARPS * 32),
                     (size_t)ring, st, (const bf16 *)x, xs, n_tok, (const uint32_t *)m->q,
                     (const uint16_t *)m->scales, (const uint16_t *)m->biases, bias, bdt, y, ydt,
                     ys, in, out, wsplit, RP ? *rp : no_rp);
}

/* One kernel variant per (scale dtype, group). */
#define QM_ROW(L, TP, RP)                                                                          \
    {{qm_launch<32, TK_BF16, L, TP, RP>, qm_launch<64, TK_BF16, L, TP, RP>,                        \
      qm_launch<128, TK_BF16, L, TP, RP>},                                                         \
     {qm_launch<32, TK_F16, L, TP, RP>, qm_launch<64, TK_F16, L, TP, RP>,                          \
      qm_launch<128, TK_F16, L, TP, RP>}}

/* Tiles per warp for a weight of `rows` rows (a GLU weight's 2 ff): 2 for
 * the widest ones (>= 1024 tiles: the 8B shape's gate_up and lm_head;
 * H200, dev/kernels/tp_lab.cu, 2026-11-30: 8.6% and 12% faster there, no
 * gain on 4096 / 6144 rows), else 1. A weight's choice never depends on the
 * token count. */
extern "C" int tk_qgemv_mma_tp(int64_t rows) { return tk_cdiv(rows, 16) >= 1024 ? 2 : 1; }

/* The launches of 8 tokens each of one kernel variant: token t0's x row,
 * y row t0 (y_stride elements of ydt apart) and, for RP, positions and
 * slots from t0. */
static cudaError_t qm_passes(const qm_fn (&table)[2][3], cudaStream_t st, const struct tk_qmat *m,
                             const void *x, int64_t x_stride, const void *bias, int bdt, void *y,
                             int ydt, int64_t y_stride, int64_t n_tok, int64_t in, int64_t out,
                             int wsplit, const struct tk_rp *rp = NULL)
{
    if (n_tok <= 0 || out <= 0) return cudaSuccess;
    if (!(wsplit == 1 || wsplit == 2 || wsplit == 4 || wsplit == 8)) return cudaErrorInvalidValue;
    qm_fn f = table[m->sdt == TK_F16][m->group == 32 ? 0 : m->group == 64 ? 1 : 2];
    size_t ysz = ydt == TK_F32 ? 4 : 2;
    for (int64_t t0 = 0; t0 < n_tok; t0 += 8) {
        int nt = (int)(n_tok - t0 < 8 ? n_tok - t0 : 8);
        struct tk_rp r = {};
        if (rp) {
            r = *rp;
            r.pos += t0, r.slots += t0;
        }
        cudaError_t err = f(st, m, (const bf16 *)x + t0 * x_stride, (int)x_stride, nt, bias, bdt,
                            (char *)y + (size_t)(t0 * y_stride) * ysz, ydt, y_stride, (int)in,
                            (int)out, wsplit, rp ? &r : NULL);
        if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
}

extern "C" cudaError_t tk_qgemv_mma(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                    int64_t x_stride, const void *bias, int bdt, void *y, int ydt,
                                    int64_t y_stride, int64_t n_tok, int64_t in, int64_t out)
{
    static const qm_fn table[2][3] = QM_ROW(false, 1, false);
    static const qm_fn table2[2][3] = QM_ROW(false, 2, false);
    return qm_passes(tk_qgemv_mma_tp(out) == 2 ? table2 : table, st, m, x, x_stride, bias, bdt, y,
                     ydt, y_stride, n_tok, in, out, tk_qgemv_mma_split(in, out));
}

extern "C" cudaError_t tk_qgemv_mma_glu(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                        int64_t x_stride, const void *bias, int bdt, void *act,
                                        int64_t act_stride, int64_t n_tok, int64_t in, int64_t ff)
{
    static const qm_fn table[2][3] = QM_ROW(true, 1, false);
    static const qm_fn table2[2][3] = QM_ROW(true, 2, false);
    /* the plain kernel's split for the [2 ff, in] weight: same windows per warp */
    return qm_passes(tk_qgemv_mma_tp(2 * ff) == 2 ? table2 : table, st, m, x, x_stride, bias, bdt,
                     act, TK_BF16, act_stride, n_tok, in, ff, tk_qgemv_mma_split(in, 2 * ff));
}

extern "C" int tk_qgemv_mma_rope_ok(const struct tk_qmat *m, const struct tk_rp *rp, int64_t out)
{
    return m->bits == 4 && rp->hd > 0 && rp->hd % 32 == 0 && rp->hd <= 256 && rp->n_heads > 0 &&
           rp->n_kv > 0 && out == (int64_t)(rp->n_heads + 2 * rp->n_kv) * rp->hd;
}

extern "C" cudaError_t tk_qgemv_mma_rope(cudaStream_t st, const struct tk_qmat *m, const void *x,
                                         int64_t x_stride, const void *bias, int bdt, void *qkv,
                                         int64_t qkv_stride, const struct tk_rp *rp,
                                         int64_t n_tok, int64_t in, int64_t out)
{
    static const qm_fn table[2][3] = QM_ROW(false, 2, true);
    if (!tk_qgemv_mma_rope_ok(m, rp, out)) return cudaErrorInvalidValue;
    return qm_passes(table, st, m, x, x_stride, bias, bdt, qkv, TK_BF16, qkv_stride, n_tok, in, out,
                     tk_qgemv_mma_split(in, out), rp);
}
