/*
 * cuda_step.h — the decode step as one persistent kernel (cuda_step.cu):
 * its argument block and C-callable launchers, used by cuda_step.c.
 * Compiles as C and as CUDA C++.
 */
#ifndef TERN_CUDA_STEP_H
#define TERN_CUDA_STEP_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TK_STEP_MAX_LAYERS 128
#define TK_STEP_MAX_K      16384 /* widest GEMV input (the down projection's intermediate size) */
#define TK_STEP_MAX_E      8192  /* hidden size */
#define TK_STEP_MAX_G      8     /* q heads per kv head */
#define TK_STEP_MAX_HD     128
#define TK_STEP_NW         16  /* warps per block, one block per SM */
#define TK_STEP_LT         32  /* tiles a group of warps takes in one op, at most */
#define TK_STEP_STAMPS     16  /* stamps per op and block (TERN_CUDA_STEP_STAMPS) */
#define TK_STEP_STAMP_SM   11  /* op 0's stamp 11: the block's SM id (not a time) */
#define TK_STEP_STAMP_DIAG 12  /* stamps 12-15: the GEMV loop's SM cycles (not times) */
#define TK_STEP_REC_BYTES  576 /* a record: one (16-row tile, 64-k group), cuda_step_repack.cu */
#define TK_STEP_CHUNK      4   /* records a warp's ring copies at a time */

/* Between launches (columns no op 0 / head stamp uses): op 0's stamp 4 is
 * the block's first instruction, its stamp 5 the block's exit in the
 * launch before (the head's stamp 4 then, the block's exit); after the
 * [n_ops][grid][TK_STEP_STAMPS] stamps, the latest exit of any block, the
 * launches counted, and each launch's gap (block 0's first instruction
 * after that latest exit) for the last TK_STEP_GAPS launches. */
#define TK_STEP_STAMP_ENTRY 4
#define TK_STEP_STAMP_PREV  5
#define TK_STEP_STAMP_EXIT  4
#define TK_STEP_GAPS        4096

/* One GEMV of the step: records of (16-row tile, 64-k group),
 * TK_STEP_REC_BYTES each, in the kernel's order (tk_step_records).
 * kind: 0 qkv, 1 o, 2 gate_up, 3 down, 4 lm_head. */
typedef struct tk_step_op {
    const void *rec;
    const void *norm_w; /* BF16 [in]: the RMSNorm before it (qkv, gate_up, lm_head), else NULL */
    int kind, in, out, nG, tiles;
    int lks; /* 1 << lks warps of a block share a tile */
} tk_step_op;

typedef struct tk_step_args {
    const tk_step_op *ops; /* device: 4 per layer, then lm_head */
    int n_layers, E, F, nq, nkv, hd, rot;
    float eps, scale, mscale;
    const float *inv_freq;
    const float *res; /* [E] F32: the token's embedding */
    float *logits;
    const int32_t *pos, *slot, *seq_len, *btab; /* the batch's first (only) sequence */
    int bs;                                     /* KV block size */
    int max_splits;                             /* attention splits per kv head, at most */
    /* The LL lines (16 bytes: two data words, each with the launch's flag)
     * through which the phases hand data on, per layer ll_layer lines:
     * at ll_qkv the qkv projection (BF16, 4 per line), ll_attn the
     * attention output (BF16), ll_res_o / ll_res_d the residual after o /
     * down (F32, 2 per line), ll_act silu(gate) * up (BF16), ll_part the
     * attention splits' partial sums (F32; nkv x max_splits x G x (hd + 2)). */
    void *ll;
    int ll_layer, ll_qkv, ll_attn, ll_res_o, ll_act, ll_res_d, ll_part;
    unsigned long long *epoch; /* blocks launched so far: the flag is epoch / grid + 1 */
    /* NULL, or [n_ops][grid][TK_STEP_STAMPS] globaltimer stamps of each
     * block: the op's start, its x ready, its GEMV done, its epilogue done,
     * then its attention item's steps, op 0's block SM, and the GEMV
     * loop's SM cycles summed over the block's warps: in ring waits, in the
     * loop's first iteration, in lane 0's refill issues, in the loop
     * (TERN_CUDA_STEP_STAMPS; then the instrumented kernel runs) */
    unsigned long long *stamps;
    /* The argmax of the logits (the first index of the maximum, NaN never
     * winning, an all-NaN row giving 0: the argmax op's answer) into
     * am_ids[0] and, when am_hist is set, am_hist[pos + 1] (if below
     * n_hist); am_ids NULL: none. am_key / am_cnt: its reduction over the
     * grid (scratch, zero between launches). */
    int32_t *am_ids, *am_hist;
    int n_hist, vocab;
    unsigned long long *am_key;
    unsigned *am_cnt;
    void *kc[TK_STEP_MAX_LAYERS], *vc[TK_STEP_MAX_LAYERS];
    /* ops[i].rec, and each kind's tiles, nG and lks (the same in every
     * layer), as kernel parameters: the ring's cursor reads them when it
     * crosses into the next op, in the GEMV loop, where a global load of
     * ops[i] cost ~450 cycles of stall (ncu) */
    const void *rec[4 * TK_STEP_MAX_LAYERS + 1];
    int k_tiles[5], k_nG[5], k_lks[5];
} tk_step_args;

/* 16-row tiles of a weight of `rows` rows (glu_f > 0: the gate_up layout,
 * 8 gate and 8 up rows per tile). */
static inline int64_t tk_step_tiles(int64_t rows, int64_t glu_f)
{
    return glu_f > 0 ? (glu_f + 7) / 8 : (rows + 15) / 16;
}

/* The records of a weight in the kernel's order: warp w (block * TK_STEP_NW
 * + warp) reads its k-th chunk (4 records: its slice of a tile, 4 groups at
 * a time) from slot k x warps + w, so that at each step the grid reads one
 * contiguous window (DRAM rows stay open; ~10% of the copy rate in the
 * labs). Slots without a chunk stay unused. Records to allocate: */
static inline int64_t tk_step_records(int64_t tiles, int64_t nG, int grid, int lks)
{
    int64_t per = TK_STEP_NW >> lks, units = (int64_t)grid * per;
    int64_t lt = (tiles + units - 1) / units;
    int64_t cps = ((nG >> lks) + TK_STEP_CHUNK - 1) / TK_STEP_CHUNK;
    return lt * cps * (int64_t)grid * TK_STEP_NW * TK_STEP_CHUNK;
}

/* The residual rows a block keeps between a norm and the o / down
 * projection's epilogue (tiles of 16 rows), at most. */
#define TK_STEP_STASH_TILES 64

/* Dynamic shared memory of the kernel; floats the attention merge can hold
 * (n_splits x G x (hd + 4) must fit). */
size_t tk_step_smem_bytes(void);
size_t tk_step_merge_floats(void);
/* Blocks of the kernel that fit on one SM (0: it cannot run here). */
cudaError_t tk_step_fits(int *blocks_per_sm);
/* Repacks an MLX 4-bit group-64 matrix [rows, in] (BF16 scales / biases)
 * into records in the kernel's order for a grid of `grid` blocks and
 * 1 << lks warps per tile; glu_f > 0: the gate_up layout, rows [0, glu_f)
 * gate and [glu_f, 2 glu_f) up, tile j = gate rows 8j.. and up rows 8j...
 * rec holds tk_step_records(tiles, in / 64, grid, lks) x TK_STEP_REC_BYTES
 * (tiles = tk_step_tiles(rows, glu_f)). cuda_step_repack.cu. */
cudaError_t tk_step_repack(cudaStream_t st, const void *q, const void *scales, const void *biases,
                           int64_t rows, int64_t in, int64_t glu_f, int grid, int lks, void *rec);
/* The step on grid blocks (one per SM), cooperatively. */
cudaError_t tk_step_launch(cudaStream_t st, const tk_step_args *a, int grid);

#ifdef __cplusplus
}
#endif

#endif /* TERN_CUDA_STEP_H */
