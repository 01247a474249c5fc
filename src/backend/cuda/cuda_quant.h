/*
 * cuda_quant.h — C-callable launchers of the MLX-affine kernels
 * (cuda_quant.cu: the register GEMV and the dequantize; cuda_quant_mma.cu:
 * the 4-bit tensor-core GEMV) and the glue that uses them (cuda_quant.c).
 * Layout of a quantized weight: tensor/quant.h. Launchers only enqueue work
 * on the given stream (graph-capturable) and return the launch's
 * cudaError_t.
 *
 * Compiles as C and as CUDA C++.
 */
#ifndef TERN_CUDA_QUANT_H
#define TERN_CUDA_QUANT_H

#include "backend/cuda/cuda_kernels.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One quantized matrix [rows, in] on the device. */
struct tk_qmat {
    const void *q;       /* [rows, in * bits / 32] U32 */
    const void *scales;  /* [rows, in / group] */
    const void *biases;  /* [rows, in / group] */
    int sdt;             /* TK_F32 / TK_F16 / TK_BF16 */
    int bits, group;
};

/* y[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]) with w dequantized in
 * registers. Fast path (tk_qgemv_fast): bits 2/4/8, x BF16, in % 256 == 0,
 * 16-byte aligned; rows_per_warp 2 or 4. Otherwise an exact slow path. */
cudaError_t tk_qgemv(cudaStream_t st, const struct tk_qmat *m, const void *x, int xdt,
                     int64_t x_stride, const void *bias, int bdt, void *y, int ydt,
                     int64_t y_stride, int64_t n_tok, int64_t in, int64_t out, int rows_per_warp);
int tk_qgemv_fast(const struct tk_qmat *m, const void *x, int xdt, int64_t x_stride, int64_t in);

/* Tensor-core GEMV (cuda_quant_mma.cu), the same product for 4 bits,
 * BF16 or F16 scales, group 32/64/128, BF16 x, in % 256 == 0, 16-byte
 * aligned x and q (tk_qgemv_mma_ok). A token's result does not depend on
 * the others in the launch. tk_qgemv_mma_split: the warps that share one
 * 16-row tile's K (a function of the shape only). */
int tk_qgemv_mma_ok(const struct tk_qmat *m, const void *x, int xdt, int64_t x_stride, int64_t in,
                    int64_t out);
int tk_qgemv_mma_split(int64_t in, int64_t out);
/* Tiles per warp the tensor-core GEMV gives a weight of `rows` rows (a GLU
 * weight's 2 ff): 2 for the widest ones (>= 1024 tiles), else 1. */
int tk_qgemv_mma_tp(int64_t rows);
cudaError_t tk_qgemv_mma(cudaStream_t st, const struct tk_qmat *m, const void *x, int64_t x_stride,
                         const void *bias, int bdt, void *y, int ydt, int64_t y_stride,
                         int64_t n_tok, int64_t in, int64_t out);
/* The same as tk_qgemv_mma for a gate_up m [2 ff, in] with silu_mul in the
 * epilogue: act[t, i] = silu(g) * u (BF16, row stride act_stride), g and u
 * rows i and ff + i rounded to BF16 first: bitwise tk_qgemv_mma into a BF16
 * gate_up followed by tk_silu_mul. */
cudaError_t tk_qgemv_mma_glu(cudaStream_t st, const struct tk_qmat *m, const void *x,
                             int64_t x_stride, const void *bias, int bdt, void *act,
                             int64_t act_stride, int64_t n_tok, int64_t in, int64_t ff);
/* The rotary / KV-cache epilogue of the 4-bit tensor-core GEMV on a fused
 * [q | k | v] weight (backend.h's matmul_rope_store): each warp takes the
 * two 16-row tiles holding a head's rotary pairs (rows d and d + hd / 2) and
 * writes qkv as qk_rope_store leaves it without head norms (the BF16 row,
 * then k_rope's rotation of the q and k heads, rounded to BF16) and the k /
 * v heads to the token's cache slot: bitwise tk_qgemv_mma into qkv then
 * tk_qk_rope_store. Token t's position and slot are pos[t] / slots[t]. */
struct tk_rp {
    const float *inv_freq; /* [hd / 2] */
    float mscale;
    const int32_t *pos, *slots;
    void *k_cache, *v_cache; /* BF16 [n_slots, n_kv, hd] */
    int64_t n_slots;
    int n_heads, n_kv, hd;
};
/* Whether tk_qgemv_mma_rope takes it (beside tk_qgemv_mma_ok): 4 bits, hd
 * % 32 == 0 and <= 256, out == (n_heads + 2 n_kv) hd. */
int tk_qgemv_mma_rope_ok(const struct tk_qmat *m, const struct tk_rp *rp, int64_t out);
cudaError_t tk_qgemv_mma_rope(cudaStream_t st, const struct tk_qmat *m, const void *x,
                              int64_t x_stride, const void *bias, int bdt, void *qkv,
                              int64_t qkv_stride, const struct tk_rp *rp, int64_t n_tok,
                              int64_t in, int64_t out);
/* The whole of m ([rows, in]) dequantized to contiguous BF16 out, one
 * thread per 16-byte chunk: 4/8 bits, BF16 scales, group 32/64/128, in %
 * 128 == 0, 16-byte aligned q and out (tk_qdequant_fast_ok). The prefill
 * path's dequantize where it applies. */
int tk_qdequant_fast_ok(const struct tk_qmat *m, int64_t in, const void *out);
cudaError_t tk_qdequant_fast(cudaStream_t st, const struct tk_qmat *m, int64_t rows, int64_t in,
                             void *out);

/* out[r, :] = dequantized row (idx ? idx[r] : r) of m (rows of it exist;
 * out-of-range indices give zeros), r < n_out, in dtype odt, row stride
 * out_stride elements. The prefill path dequantizes a whole weight to BF16
 * with it where tk_qdequant_fast does not apply; get_rows gathers embedding
 * rows. */
cudaError_t tk_qdequant(cudaStream_t st, const struct tk_qmat *m, int64_t rows, int64_t in,
                        const int32_t *idx, int64_t n_out, void *out, int odt, int64_t out_stride);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
/* ---- C glue (cuda_quant.c), over the backend's types ---- */
#include "backend/cuda/cuda_internal.h"

/* matmul for a quantized w (called by tern_cuda_matmul after its operand
 * checks): in default mode the 4-bit tensor-core GEMV for T <= 32 where it
 * applies, else the register-dequantizing GEMV for T <= TERN_CUDA_GEMV_MAX_T;
 * otherwise w is dequantized to a BF16 scratch (stream-ordered allocation
 * from the device's memory pool) that feeds cuBLASLt. */
enum tern_status tern_cuda_matmul_quant(struct tern_cuda *c, const struct tern_dtensor *x,
                                        const struct tern_linear *w, void *y, int ydt,
                                        int64_t y_stride);
/* matmul_glu for a quantized gate_up w [2 ff, in] where matmul would take
 * the tensor-core GEMV (its GLU variant, bitwise matmul + silu_mul): *done
 * tells whether it ran; if not, the caller runs matmul, then silu_mul. act
 * is BF16 [T, ff] with row stride act_stride. */
enum tern_status tern_cuda_matmul_glu_quant(struct tern_cuda *c, const struct tern_dtensor *x,
                                            const struct tern_linear *w, void *act,
                                            int64_t act_stride, bool *done);
/* matmul_rope_store for a quantized fused qkv w where matmul would take
 * the tensor-core GEMV and tk_qgemv_mma_rope applies (full, non-interleaved
 * rotary; BF16 qkv and caches): *done tells whether it ran; if not, the
 * caller runs matmul then qk_rope_store. */
enum tern_status tern_cuda_matmul_rope_quant(struct tern_cuda *c, const struct tern_dtensor *x,
                                             const struct tern_linear *w,
                                             struct tern_dtensor *qkv,
                                             const struct tern_rope *rope,
                                             const struct tern_attn_params *p,
                                             const struct tern_batch_dev *batch,
                                             struct tern_kv_layer *kv, bool *done);
/* get_rows on a quantized table: rows gathered and dequantized. */
enum tern_status tern_cuda_get_rows_quant(struct tern_backend *be, const struct tern_linear *table,
                                          const struct tern_dtensor *idx,
                                          struct tern_dtensor *out);
/* cuBLASLt y = x w^T for BF16 x [T, in] (row stride xs) and w [out, in]
 * (cuda_matmul.c); bias (dtype bdt, or NULL) added. */
enum tern_status tern_cuda_lt_bf16(struct tern_cuda *c, const void *x, int64_t xs, const void *w,
                                   const void *bias, int bdt, void *y, int ydt, int64_t ys,
                                   int64_t T, int64_t in, int64_t out);
#endif

#endif /* TERN_CUDA_QUANT_H */
