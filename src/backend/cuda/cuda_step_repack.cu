/*
 * cuda_step_repack.cu — the decode step kernel's weights (cuda_step.cu),
 * made at load from an MLX 4-bit group-64 matrix (BF16 scales / biases).
 *
 * Each linear is repacked into 576-byte (TK_STEP_REC_BYTES) records, one per
 * (16-row tile, 64-k group): 512 bytes of mma.m16n8k16 A fragments (lane L
 * = 4 g + t's 16 bytes at 16 L, 4 words; k-step s covers k = 64 G + 16 t +
 * 4 s + i, i < 4; nibble n of word w holds row r0 = 16 tile + g or r1 = r0
 * + 8 as bit 1 of n says, k-step 2 (w >> 1) + (n & 1), i = 2 (w & 1) + (n >>
 * 2): a word pair's low nibbles are k-step 2p, its high ones k-step 2p + 1)
 * then the 8 (scale, bias) pairs of rows (g, g + 8). The gate_up
 * projection's tile j holds gate rows 8j..8j+7 and up rows 8j..8j+7, so
 * silu(gate) * up is the tile's own epilogue. The records lie in the order
 * the warps read them (tk_step_records: a warp's k-th chunk of 4 records at
 * slot k x warps + warp).
 *
 * Depends on cuda_common.cuh, cuda_step.h.
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_step.h"

#define REC_U4 (TK_STEP_REC_BYTES / 16) /* uint4 per record */

/* Thread id of the repack: record (tile, G) = id / 32, lane L = id % 32.
 * glu_f > 0: the gate_up layout (tile rows 0-7 gate rows 8 tile + r, rows
 * 8-15 up rows glu_f + 8 tile + r - 8). */
static __global__ void k_step_repack(const uint32_t *q, const uint16_t *sc, const uint16_t *bi,
                                     int64_t rows, int64_t in, int64_t glu_f, int64_t tiles,
                                     int grid, int lks, uint4 *rec)
{
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t nG = in / 64;
    if (id >= tiles * nG * 32) return;
    int L = (int)(id % 32), g = L >> 2, t = L & 3;
    int64_t tg = id / 32, G = tg % nG, tau = tg / nG;
    int64_t r0, r1;
    bool ok0, ok1;
    if (glu_f > 0) {
        ok0 = ok1 = 8 * tau + g < glu_f;
        r0 = 8 * tau + g, r1 = glu_f + 8 * tau + g;
    } else {
        r0 = 16 * tau + g, r1 = r0 + 8;
        ok0 = r0 < rows, ok1 = r1 < rows;
    }
    int64_t wpr = in / 8, k0 = 64 * G + 16 * t; /* the lane's 16 k: 2 words of each row */
    uint32_t q0[2], q1[2], w4[4];
    for (int h = 0; h < 2; h++) {
        q0[h] = ok0 ? q[r0 * wpr + k0 / 8 + h] : 0u;
        q1[h] = ok1 ? q[r1 * wpr + k0 / 8 + h] : 0u;
    }
    for (int w = 0; w < 4; w++) {
        uint32_t word = 0;
        for (int n = 0; n < 8; n++) {
            int kk = 4 * (2 * (w >> 1) + (n & 1)) + 2 * (w & 1) + (n >> 2); /* 4 s + i */
            const uint32_t *src = (n >> 1) & 1 ? q1 : q0;
            word |= ((src[kk >> 3] >> (4 * (kk & 7))) & 15u) << (4 * n);
        }
        w4[w] = word;
    }
    /* its slot: the warp that takes group G of this tile (tile round l2, block rem % grid,
     * warp group rem / grid: cuda_step.cu), and its step */
    int64_t per = TK_STEP_NW >> lks, units = (int64_t)grid * per, len = nG >> lks;
    int64_t cps = (len + TK_STEP_CHUNK - 1) / TK_STEP_CHUNK, l2 = tau / units, rem = tau % units;
    int64_t j = G / len, o = G % len;
    int64_t w = (rem % grid) * TK_STEP_NW + ((rem / grid) << lks) + j;
    int64_t dst = ((l2 * cps + o / TK_STEP_CHUNK) * grid * TK_STEP_NW + w) * TK_STEP_CHUNK +
                  o % TK_STEP_CHUNK;
    rec[dst * REC_U4 + L] = make_uint4(w4[0], w4[1], w4[2], w4[3]);
    if (t == 0) {
        uint32_t s0 = ok0 ? sc[r0 * nG + G] : 0u, s1 = ok1 ? sc[r1 * nG + G] : 0u;
        uint32_t b0 = ok0 ? bi[r0 * nG + G] : 0u, b1 = ok1 ? bi[r1 * nG + G] : 0u;
        ((uint2 *)(rec + dst * REC_U4 + 32))[g] = make_uint2(s0 | s1 << 16, b0 | b1 << 16);
    }
}

extern "C" cudaError_t tk_step_repack(cudaStream_t st, const void *q, const void *scales,
                                      const void *biases, int64_t rows, int64_t in, int64_t glu_f,
                                      int grid, int lks, void *rec)
{
    int64_t tiles = tk_step_tiles(rows, glu_f);
    int64_t n = tiles * (in / 64) * 32;
    if (n == 0) return cudaSuccess;
    k_step_repack<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(
        (const uint32_t *)q, (const uint16_t *)scales, (const uint16_t *)biases, rows, in, glu_f,
        tiles, grid, lks, (uint4 *)rec);
    return cudaGetLastError();
}
