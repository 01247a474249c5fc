/*
 * cpu_quant.c — dequantize-and-dot for MLX affine weights (see cpu_quant.h).
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_quant.h"

#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static float load_half(enum tern_dtype dt, const uint16_t *p, int64_t i)
{
    return dt == TERN_DTYPE_BF16 ? tern_bf16_to_f32(p[i]) : tern_f16_to_f32(p[i]);
}

void tern_cpu_dequant_row(const struct tern_linear *w, int64_t row, float *out)
{
    int64_t in = w->in_features, g = w->group_size, n_groups = in / g;
    int bits = w->bits;
    int64_t words = in * bits / 32;
    const uint32_t *q = (const uint32_t *)tern_cpu_ptr(&w->weight) + row * words;
    const uint16_t *sc = (const uint16_t *)tern_cpu_ptr(&w->scales) + row * n_groups;
    const uint16_t *bi = (const uint16_t *)tern_cpu_ptr(&w->biases) + row * n_groups;
    uint32_t mask = (1u << bits) - 1u;
    for (int64_t gi = 0; gi < n_groups; gi++) {
        float s = load_half(w->scales.dtype, sc, gi), b = load_half(w->biases.dtype, bi, gi);
        for (int64_t k = 0; k < g; k++) {
            int64_t i = gi * g + k;
            uint64_t bit = (uint64_t)i * (uint64_t)bits;
            uint64_t word = bit >> 5, shift = bit & 31;
            uint64_t v = q[word] >> shift;
            if (shift + (uint64_t)bits > 32) v |= (uint64_t)q[word + 1] << (32 - shift);
            out[i] = s * (float)(v & mask) + b;
        }
    }
}

enum tern_status tern_cpu_matmul_quant(struct tern_backend *be, const float *x, int64_t T,
                                       const struct tern_linear *w, float *y, int64_t y_width,
                                       int64_t y_col)
{
    int64_t in = w->in_features, out = w->out_features;
    int n_threads = be->n_threads;
    float *rows = malloc((size_t)n_threads * (size_t)in * sizeof(float));
    if (!rows) return tern_error(TERN_E_NO_MEMORY, "cpu quantized matmul: out of memory");
#pragma omp parallel num_threads(n_threads)
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
