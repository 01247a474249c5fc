/*
 * cpu_quant.c — dequantize-and-dot for quantized weights: MLX affine (see
 * cpu_quant.h and tensor/quant.h for the layout) and ggml's block types
 * (tensor/ggml_quant.h: a row of blocks, dequantized by
 * tern_ggml_dequant_row, bit for bit gguf-py's dequantize).
 *
 * Each thread dequantizes one weight row into float32 (whole words at a time
 * for 2/4/8 bits, a loop the compiler vectorises) and dots it with every
 * token row through tern_cpu_dot_f32's fixed 16 lanes: the same float
 * operations for a token whatever else is in the batch, so CPU batch
 * invariance stays bitwise. A row is dequantized once per call, so prefill
 * amortises it over all tokens.
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_quant.h"
#include "tensor/ggml_quant.h"
#include "tensor/quant.h"

#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

bool tern_cpu_ggml_type_ok(const struct tern_backend *be, uint32_t ggml_type)
{
    (void)be;
    const struct tern_ggml_traits *t = tern_ggml_type_traits(ggml_type);
    return t && t->dequant && t->block > 1;
}

enum tern_status tern_cpu_check_ggml(const struct tern_linear *w, const char *op)
{
    uint64_t rb = 0;
    if (!tern_cpu_ggml_type_ok(NULL, w->ggml_type) || w->weight.dtype != TERN_DTYPE_U8 ||
        w->weight.n_dims != 2 || !tern_ggml_row_bytes(w->ggml_type, w->in_features, &rb) ||
        (uint64_t)w->weight.shape[1] != rb || w->weight.shape[0] < w->out_features)
        return tern_error(TERN_E_INVALID_ARG,
                          "cpu %s: ggml weight of type %s is not [%lld rows, %llu bytes] u8", op,
                          tern_ggml_type_name(w->ggml_type), (long long)w->out_features,
                          (unsigned long long)rb);
    return TERN_OK;
}

void tern_cpu_dequant_row(const struct tern_linear *w, int64_t row, float *out)
{
    if (w->ggml_type) {
        size_t rb = (size_t)w->weight.shape[1];
        const char *p = (const char *)tern_cpu_ptr(&w->weight) + (size_t)row * rb;
        tern_ggml_dequant_row(w->ggml_type, p, out, w->in_features);
        return;
    }
    int64_t in = w->in_features, n_groups = in / w->group_size;
    int64_t words = in * w->bits / 32;
    size_t ssz = tern_dtype_size(w->scales.dtype);
    const uint32_t *q = (const uint32_t *)tern_cpu_ptr(&w->weight) + row * words;
    const char *sc = (const char *)tern_cpu_ptr(&w->scales) + (size_t)(row * n_groups) * ssz;
    const char *bi = (const char *)tern_cpu_ptr(&w->biases) + (size_t)(row * n_groups) * ssz;
    tern_quant_dequant_row(q, sc, bi, w->scales.dtype, in, w->bits, w->group_size, out);
}

enum tern_status tern_cpu_matmul_quant(struct tern_backend *be, const float *x, int64_t T,
                                       const struct tern_linear *w, float *y, int64_t y_width,
                                       int64_t y_col)
{
    int64_t in = w->in_features, out = w->out_features;
    int n_threads = be->n_threads;
    float *rows = malloc((size_t)n_threads * (size_t)in * sizeof(float));
    if (!rows) return tern_error(TERN_E_NO_MEMORY, "cpu quantized matmul: out of memory");
#pragma omp parallel num_threads(n_threads) if ((double)T * (double)in * (double)out > 262144.0)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *wr = rows + (size_t)tid * (size_t)in;
#pragma omp for schedule(static)
        for (int64_t o = 0; o < out; o++) {
            tern_cpu_dequant_row(w, o, wr);
            for (int64_t t = 0; t < T; t++)
                y[t * y_width + y_col + o] = tern_cpu_dot_f32(x + t * in, wr, in);
        }
    }
    free(rows);
    return TERN_OK;
}
