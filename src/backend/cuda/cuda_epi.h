/*
 * cuda_epi.h — struct tk_epi, the residual add + RMSNorm epilogue that a
 * decode GEMV can run instead of writing its output (backend.h's
 * matmul_add_rmsnorm), and the launchers that take it. The device helpers,
 * and how a kernel adopts them, are in cuda_common.cuh ("tk_epi").
 * Plain C types only: compiles as C (the glue) and CUDA C++ (the kernels).
 * Depends on cuda_kernels.h.
 */
#ifndef TERN_CUDA_EPI_H
#define TERN_CUDA_EPI_H

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a GEMV with this epilogue does instead of writing y (backend.h's
 * matmul_add_rmsnorm; the device side, and how a kernel adopts it, is in
 * cuda_common.cuh):
 *   res[t, o] += bf16(y[t, o])                  every output o it computes
 *   h[t, :] = rmsnorm(res[t, :]) * norm_w       by the grid's last block
 * bitwise the unfused tk_gemv into a BF16 proj, then tk_add_rmsnorm (or
 * tk_add when norm_w is NULL). The pointers are at the launch's first token. */
struct tk_epi {
    float *res;             /* [n_tok, res_stride] F32 residual stream */
    int64_t res_stride;
    const void *norm_w;     /* [dim] of dtype wdt; NULL = the add only (h untouched) */
    int wdt;
    float eps;
    void *h;                /* [n_tok, h_stride] BF16 */
    int64_t h_stride;
    int64_t dim;            /* row length = the GEMV's out */
    unsigned int *count;    /* a device counter that is 0 between launches (backend
                             * context: tern_cuda.epi_count); the last block resets it */
};

/* ---- launchers ---- */

/* tk_gemv's fast path (cuda_gemv.cu) with the tk_epi epilogue instead of a
 * y: x and W BF16 with tk_gemv_fast's alignment (else
 * cudaErrorInvalidValue), e->dim == out. Launches of 8 tokens each, like
 * tk_gemv (each its own last-block norm over its rows). */
cudaError_t tk_gemv_epi(cudaStream_t st, const void *x, int64_t x_stride, const void *w,
                        const void *bias, int bdt, const struct tk_epi *e, int64_t n_tok,
                        int64_t in, int64_t out);

#ifdef __cplusplus
}
#endif

#endif /* TERN_CUDA_EPI_H */
