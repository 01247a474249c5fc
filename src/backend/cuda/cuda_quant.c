/*
 * cuda_quant.c — matmul and get_rows for MLX affine quantized weights on the
 * device (kernels: cuda_quant.cu; layout: tensor/quant.h).
 *
 * Decode-sized batches (T <= TERN_CUDA_GEMV_MAX_T, default mode) run the
 * GEMV that streams the packed weights once. Larger batches, and every batch
 * in deterministic mode, dequantize the whole weight into a BF16 scratch and
 * run the dense cuBLASLt path: the scratch comes from the device's default
 * memory pool with cudaMallocAsync / cudaFreeAsync on the op stream
 * (stream-ordered, graph-capturable, reused by the pool without returning to
 * the driver once the release threshold is raised), so no per-layer scratch
 * has to be sized up front. The backend's qgemv_version / qdequant_version
 * (TERN_QUANT_KERNEL; default GEMV v1, dequantize v2) pick v1
 * (cuda_quant.cu), v2 (cuda_quant_v2.cu) or v3 (the tensor-core GEMV of
 * cuda_quant_mma.cu, TERN_QUANT_KERNEL=v3) of the GEMV and v1 or v2 of the
 * dequantize, each where it applies; v1 is the fallback for every operand.
 * Depends on cuda_internal.h, cuda_quant.h.
 */
#include "backend/cuda/cuda_quant.h"

#include <stdint.h>

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

enum tern_status tern_cuda_matmul_quant(struct tern_cuda *c, const struct tern_dtensor *x,
                                        const struct tern_linear *w, void *y, int ydt,
                                        int64_t ys)
{
    TERN_TRY(check_quant(w, "matmul"));
    int64_t T = x->shape[0], in = w->in_features, out = w->out_features;
    const void *bias = w->bias.buf ? tern_cuda_ptr(&w->bias) : NULL;
    int bdt = bias ? (int)w->bias.dtype : 0;
    struct tk_qmat m = qmat_of(w);
    bool lt = x->dtype == TERN_DTYPE_BF16 && in % 8 == 0 &&
              (c->base.deterministic || T > TERN_CUDA_GEMV_MAX_T);
    if (!lt) {
        /* 4 rows per warp share each x load at batch 1-2; more tokens need
         * the registers for their sums (dev/kernels/bench_quant.c measures both). */
        const void *xp = tern_cuda_ptr(x);
        if (c->qgemv_version == 3 && tk_qgemv_mma_ok(&m, xp, (int)x->dtype, in, in, out)) {
            cudaError_t e = tk_qgemv_mma(c->stream, &m, xp, in, bias, bdt, y, ydt, ys, T, in, out);
            if (e != cudaSuccess) return tern_cuda_fail("tk_qgemv_mma", (int)e, __FILE__, __LINE__);
            return TERN_OK;
        }
        if ((c->qgemv_version == 4 || c->qgemv_version == 5) &&
            tk_qgemv4_ok(&m, xp, (int)x->dtype, in, in)) {
            cudaError_t e = tk_qgemv4(c->stream, &m, xp, in, bias, bdt, y, ydt, ys, T, in, out,
                                      c->qgemv_version == 4);
            if (e != cudaSuccess) return tern_cuda_fail("tk_qgemv4", (int)e, __FILE__, __LINE__);
            return TERN_OK;
        }
        if (c->qgemv_version == 2 && tk_qgemv2_ok(&m, xp, (int)x->dtype, in, in, out)) {
            cudaError_t e = tk_qgemv2(c->stream, &m, xp, in, bias, bdt, y, ydt, ys, T, in, out);
            if (e != cudaSuccess) return tern_cuda_fail("tk_qgemv2", (int)e, __FILE__, __LINE__);
            return TERN_OK;
        }
        cudaError_t e = tk_qgemv(c->stream, &m, xp, (int)x->dtype, in, bias, bdt, y, ydt, ys, T,
                                 in, out, T <= 2 ? 4 : 2);
        if (e != cudaSuccess) return tern_cuda_fail("tk_qgemv", (int)e, __FILE__, __LINE__);
        return TERN_OK;
    }
    TERN_TRY(pool_ready(c));
    void *scratch = NULL;
    TERN_CU(cudaMallocAsync(&scratch, (size_t)(out * in) * 2, c->stream));
    cudaError_t e = c->qdequant_version == 2 && tk_qdequant2_ok(&m, in, scratch)
                        ? tk_qdequant2(c->stream, &m, out, in, scratch)
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
