/*
 * cuda_quant.c — matmul and get_rows for MLX affine quantized weights on the
 * device (kernels: cuda_quant.cu, cuda_quant_mma.cu; layout: tensor/quant.h).
 *
 * Decode-sized batches (default mode: T <= TERN_CUDA_GEMV_MAX_T, or up to
 * QMMA_MAX_T where the tensor-core GEMV applies) run a GEMV that streams the
 * packed weights once. Larger batches, and every batch in deterministic
 * mode, dequantize the whole weight into a BF16 scratch and run the dense
 * cuBLASLt path: the scratch comes from the device's default memory pool
 * with cudaMallocAsync / cudaFreeAsync on the op stream (stream-ordered,
 * graph-capturable, reused by the pool without returning to the driver once
 * the release threshold is raised), so no per-layer scratch has to be sized
 * up front.
 *
 * Which GEMV (quant_pick): the tensor-core GEMV of cuda_quant_mma.cu for
 * 4-bit weights it takes (tk_qgemv_mma_ok), up to QMMA_MAX_T tokens; the
 * register GEMV of cuda_quant.cu for other widths and operands, up to
 * TERN_CUDA_GEMV_MAX_T. The choice depends on the weight, never on T below
 * those limits, so a token's result does not depend on the token count up
 * to them. Measured on the H200 (docs/perf/quantized.md): at 4 bits the
 * tensor-core GEMV is 3% faster than the register one at T = 1 and 4x at
 * T = 8; at 8 bits and T = 1 the register GEMV streams at 94% of the copy
 * rate. The dequantize before cuBLASLt is tk_qdequant_fast where it applies
 * (4/8 bits, BF16 scales: 2.7x faster prefill), else the general
 * tk_qdequant.
 * matmul_glu of a weight that takes the tensor-core GEMV runs its GLU
 * variant (silu_mul in the epilogue, bitwise the unfused ops), and
 * matmul_rope_store of a fused qkv weight that takes it its RP variant (two
 * tiles per warp holding a head's rotary pairs; the rotation and the k / v
 * cache stores in the epilogue, bitwise matmul then qk_rope_store without
 * head norms).
 * Depends on cuda_internal.h, cuda_quant.h.
 */
#include "backend/cuda/cuda_quant.h"

#include <stdint.h>

/* Tokens up to which the tensor-core GEMV (8 tokens per pass over the
 * weights) beats dequantizing to BF16 + cuBLASLt. H200, 4-bit 8B shape:
 * one pass of the GEMVs takes ~2.7 ms, a decode step at 16 sequences 6.1 ms
 * (two passes), one at 64 (dequantize + GEMM) 17 ms; four passes ~12 ms. */
#define QMMA_MAX_T 32

static struct tk_qmat qmat_of(const struct tern_linear *w)
{
    struct tk_qmat m = {.q = tern_cuda_ptr(&w->weight), .scales = tern_cuda_ptr(&w->scales),
                        .biases = tern_cuda_ptr(&w->biases), .sdt = (int)w->scales.dtype,
                        .bits = w->bits, .group = w->group_size};
    return m;
}

static enum tern_status check_quant(const struct tern_linear *w, const char *op)
{
    int64_t ng = w->group_size ? w->in_features / w->group_size : 0;
    bool ok = w->weight.dtype == TERN_DTYPE_U32 && w->group_size > 0 &&
              w->in_features % w->group_size == 0 && w->scales.dtype == w->biases.dtype &&
              (w->scales.dtype == TERN_DTYPE_BF16 || w->scales.dtype == TERN_DTYPE_F16 ||
               w->scales.dtype == TERN_DTYPE_F32) &&
              tern_dtensor_numel(&w->scales) == (size_t)(w->out_features * ng) &&
              tern_dtensor_numel(&w->biases) == (size_t)(w->out_features * ng);
    if (!ok)
        return tern_error(TERN_E_INVALID_ARG,
                          "cuda %s: quantized weight needs U32 packed rows and [out, in/group] "
                          "F32/F16/BF16 scales and biases of one dtype",
                          op);
    return TERN_OK;
}

static enum tern_status pool_ready(struct tern_cuda *c)
{
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    TERN_CU(cudaDeviceGetDefaultMemPool(&pool, c->device));
    TERN_CU(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    return TERN_OK;
}

/* The kernels a quantized matmul can take. */
enum quant_path {
    QP_LT,  /* dequantize to BF16, then cuBLASLt */
    QP_MMA, /* the tensor-core GEMV (cuda_quant_mma.cu) */
    QP_REG, /* the register GEMV (cuda_quant.cu) */
};

/* The path a quantized matmul takes: a function of the weight's shape and
 * format, the mode and T only. */
static enum quant_path quant_pick(const struct tern_cuda *c, const struct tern_dtensor *x,
                                  const struct tk_qmat *m, int64_t in, int64_t out)
{
    int64_t T = x->shape[0];
    bool mma = tk_qgemv_mma_ok(m, tern_cuda_ptr(x), (int)x->dtype, in, in, out) != 0;
    int64_t max_t = mma ? QMMA_MAX_T : TERN_CUDA_GEMV_MAX_T;
    bool lt = x->dtype == TERN_DTYPE_BF16 && in % 8 == 0 && (c->base.deterministic || T > max_t);
    return lt ? QP_LT : mma ? QP_MMA : QP_REG;
}

enum tern_status tern_cuda_matmul_quant(struct tern_cuda *c, const struct tern_dtensor *x,
                                        const struct tern_linear *w, void *y, int ydt,
                                        int64_t ys)
{
    TERN_TRY(check_quant(w, "matmul"));
    int64_t T = x->shape[0], in = w->in_features, out = w->out_features;
    const void *bias = w->bias.buf ? tern_cuda_ptr(&w->bias) : NULL;
    int bdt = bias ? (int)w->bias.dtype : 0;
    struct tk_qmat m = qmat_of(w);
    const void *xp = tern_cuda_ptr(x);
    enum quant_path path = quant_pick(c, x, &m, in, out);
    if (path == QP_MMA) {
        cudaError_t e = tk_qgemv_mma(c->stream, &m, xp, in, bias, bdt, y, ydt, ys, T, in, out);
        if (e != cudaSuccess) return tern_cuda_fail("tk_qgemv_mma", (int)e, __FILE__, __LINE__);
        return TERN_OK;
    }
    if (path == QP_REG) {
        /* 4 rows per warp share each x load at batch 1-2; more tokens need
         * the registers for their sums (dev/kernels/bench_quant.c measures both). */
        cudaError_t e = tk_qgemv(c->stream, &m, xp, (int)x->dtype, in, bias, bdt, y, ydt, ys, T,
                                 in, out, T <= 2 ? 4 : 2);
        if (e != cudaSuccess) return tern_cuda_fail("tk_qgemv", (int)e, __FILE__, __LINE__);
        return TERN_OK;
    }
    TERN_TRY(pool_ready(c));
    void *scratch = NULL;
    TERN_CU(cudaMallocAsync(&scratch, (size_t)(out * in) * 2, c->stream));
    cudaError_t e = tk_qdequant_fast_ok(&m, in, scratch)
                        ? tk_qdequant_fast(c->stream, &m, out, in, scratch)
                        : tk_qdequant(c->stream, &m, out, in, NULL, out, scratch, TK_BF16, in);
    enum tern_status st = e == cudaSuccess
                              ? tern_cuda_lt_bf16(c, tern_cuda_ptr(x), in, scratch, bias, bdt, y,
                                                  ydt, ys, T, in, out)
                              : tern_cuda_fail("tk_qdequant", (int)e, __FILE__, __LINE__);
    cudaError_t ef = cudaFreeAsync(scratch, c->stream);
    if (st == TERN_OK && ef != cudaSuccess)
        st = tern_cuda_fail("cudaFreeAsync", (int)ef, __FILE__, __LINE__);
    return st;
}

enum tern_status tern_cuda_matmul_glu_quant(struct tern_cuda *c, const struct tern_dtensor *x,
                                            const struct tern_linear *w, void *act,
                                            int64_t act_stride, bool *done)
{
    *done = false;
    TERN_TRY(check_quant(w, "matmul_glu"));
    int64_t T = x->shape[0], in = w->in_features, out = w->out_features;
    struct tk_qmat m = qmat_of(w);
    const void *xp = tern_cuda_ptr(x);
    if (out % 2 != 0 || quant_pick(c, x, &m, in, out) != QP_MMA) return TERN_OK;
    const void *bias = w->bias.buf ? tern_cuda_ptr(&w->bias) : NULL;
    int bdt = bias ? (int)w->bias.dtype : 0;
    cudaError_t e =
        tk_qgemv_mma_glu(c->stream, &m, xp, in, bias, bdt, act, act_stride, T, in, out / 2);
    if (e != cudaSuccess) return tern_cuda_fail("tk_qgemv_mma_glu", (int)e, __FILE__, __LINE__);
    *done = true;
    return TERN_OK;
}

enum tern_status tern_cuda_matmul_rope_quant(struct tern_cuda *c, const struct tern_dtensor *x,
                                             const struct tern_linear *w,
                                             struct tern_dtensor *qkv,
                                             const struct tern_rope *rope,
                                             const struct tern_attn_params *p,
                                             const struct tern_batch_dev *batch,
                                             struct tern_kv_layer *kv, bool *done)
{
    *done = false;
    TERN_TRY(check_quant(w, "matmul_rope_store"));
    int64_t T = x->shape[0], in = w->in_features, out = w->out_features;
    struct tk_qmat m = qmat_of(w);
    const struct tern_dtensor *K = &kv->k;
    /* qk_rope_store's operands without head norms, full non-interleaved
     * rotary, a BF16 qkv [T, out] */
    bool shapes = tern_cuda_qkr_fits(qkv, NULL, NULL, rope, p, batch, kv) &&
                  rope->rotary_dim == rope->head_dim && !rope->interleaved &&
                  qkv->dtype == TERN_DTYPE_BF16 && qkv->shape[0] == T &&
                  (int64_t)tern_dtensor_numel(qkv) == T * out;
    struct tk_rp rp = {0};
    if (shapes) {
        rp.inv_freq = tern_cuda_ptr(&rope->inv_freq);
        rp.mscale = rope->mscale;
        rp.pos = tern_cuda_ptr(&batch->positions);
        rp.slots = tern_cuda_ptr(&batch->slot_mapping);
        rp.k_cache = tern_cuda_ptr(K);
        rp.v_cache = tern_cuda_ptr(&kv->v);
        rp.n_slots = K->shape[0] * K->shape[1];
        rp.n_heads = p->n_heads, rp.n_kv = p->n_kv_heads, rp.hd = p->head_dim;
    }
    if (!shapes || quant_pick(c, x, &m, in, out) != QP_MMA || !tk_qgemv_mma_rope_ok(&m, &rp, out))
        return TERN_OK;
    const void *bias = w->bias.buf ? tern_cuda_ptr(&w->bias) : NULL;
    cudaError_t e = tk_qgemv_mma_rope(c->stream, &m, tern_cuda_ptr(x), in, bias,
                                      bias ? (int)w->bias.dtype : 0, tern_cuda_ptr(qkv), out, &rp,
                                      T, in, out);
    if (e != cudaSuccess) return tern_cuda_fail("tk_qgemv_mma_rope", (int)e, __FILE__, __LINE__);
    *done = true;
    return TERN_OK;
}

enum tern_status tern_cuda_get_rows_quant(struct tern_backend *be, const struct tern_linear *table,
                                          const struct tern_dtensor *idx, struct tern_dtensor *out)
{
    TERN_TRY(check_quant(table, "get_rows"));
    int64_t n = (int64_t)tern_dtensor_numel(idx), width = table->in_features;
    bool ok = idx->dtype == TERN_DTYPE_I32 &&
              (out->dtype == TERN_DTYPE_F32 || out->dtype == TERN_DTYPE_BF16 ||
               out->dtype == TERN_DTYPE_F16) &&
              (int64_t)tern_dtensor_numel(out) == n * width;
    if (!ok)
        return tern_error(TERN_E_INVALID_ARG,
                          "cuda get_rows: idx must be I32 and out a float [n_idx, width] tensor");
    struct tern_cuda *c = tern_cuda_of(be);
    struct tk_qmat m = qmat_of(table);
    cudaError_t e = tk_qdequant(c->stream, &m, table->out_features, width, tern_cuda_ptr(idx), n,
                                tern_cuda_ptr(out), (int)out->dtype, width);
    if (e != cudaSuccess) return tern_cuda_fail("tk_qdequant", (int)e, __FILE__, __LINE__);
    return TERN_OK;
}
