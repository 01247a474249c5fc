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
#define TK_STEP_MAX_G      8     /* q heads per kv head */
#define TK_STEP_MAX_HD     128
#define TK_STEP_NW         16 /* warps per block, one block per SM */
#define TK_STEP_LT         32 /* tiles a group of warps takes in one op, at most */

/* One GEMV of the step: records of (16-row tile, 64-k group), 576 bytes
 * each, tile-major. kind: 0 qkv, 1 o, 2 gate_up, 3 down, 4 lm_head. */
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
    float *res; /* [E] F32, in: the token's embedding */
    void *qkv;  /* BF16 [(nq + 2 nkv) hd] */
    void *attn; /* BF16 [nq hd] */
    void *act;  /* BF16 [F] */
    float *logits;
    const int32_t *pos, *slot, *seq_len, *btab; /* the batch's first (only) sequence */
    int bs;                                     /* KV block size */
    int max_splits;                             /* attention splits per kv head, at most */
    float *att_ws;
    unsigned *att_cnt; /* [nkv], kept at 0 between launches */
    unsigned *ctr;     /* grid barrier, zeroed by tk_step_launch */
    void *kc[TK_STEP_MAX_LAYERS], *vc[TK_STEP_MAX_LAYERS];
} tk_step_args;

/* 16-row tiles of a weight of `rows` rows (glu_f > 0: the gate_up layout,
 * 8 gate and 8 up rows per tile). */
static inline int64_t tk_step_tiles(int64_t rows, int64_t glu_f)
{
    return glu_f > 0 ? (glu_f + 7) / 8 : (rows + 15) / 16;
}

/* Dynamic shared memory of the kernel; floats the attention merge can hold
 * (n_splits x G x (hd + 4) must fit). */
size_t tk_step_smem_bytes(void);
size_t tk_step_merge_floats(void);
/* Blocks of the kernel that fit on one SM (0: it cannot run here). */
cudaError_t tk_step_fits(int *blocks_per_sm);
/* Repacks an MLX 4-bit group-64 matrix [rows, in] (BF16 scales / biases)
 * into records; glu_f > 0: the gate_up layout, rows [0, glu_f) gate and
 * [glu_f, 2 glu_f) up, tile j = gate rows 8j.. and up rows 8j... rec holds
 * tiles x in / 64 x 576 bytes (tiles = ceil(rows / 16), or ceil(glu_f / 8)). */
cudaError_t tk_step_repack(cudaStream_t st, const void *q, const void *scales, const void *biases,
                           int64_t rows, int64_t in, int64_t glu_f, void *rec);
/* The step on grid blocks (one per SM), cooperatively. */
cudaError_t tk_step_launch(cudaStream_t st, const tk_step_args *a, int grid);

#ifdef __cplusplus
}
#endif

#endif /* TERN_CUDA_STEP_H */
