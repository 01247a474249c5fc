/*
 * cpu_quant.h — MLX affine quantized weights on the CPU (reference path).
 *
 * Layout of one quantized linear [out, in] with `bits` and `group_size`:
 *   weight  [out, in * bits / 32] U32  row-wise little-endian bit stream:
 *                                      value i of a row occupies bits
 *                                      [i*bits, (i+1)*bits) (LSB first), so
 *                                      for bits 2/4/8 value i is in word
 *                                      i / (32/bits) at shift (i % (32/bits))*bits;
 *                                      3/5/6-bit values straddle words (checked
 *                                      against MLX's packing: tensor/quant.h)
 *   scales  [out, in / group_size]      F16, BF16 or F32
 *   biases  [out, in / group_size]      same dtype as scales
 *   w[o, i] = scales[o, i / g] * q[o, i] + biases[o, i / g]
 */
#ifndef TERN_BACKEND_CPU_QUANT_H
#define TERN_BACKEND_CPU_QUANT_H

#include "backend/backend.h"

/* Dequantizes row `row` of a quantized linear into out[in_features]. */
void tern_cpu_dequant_row(const struct tern_linear *w, int64_t row, float *out);

/* y[t, y_col + o] = x[t] . W[o] for a quantized W; x: [T, in] f32, y rows of
 * width `y_width`. Fixed reduction order (batch-invariant). */
enum tern_status tern_cpu_matmul_quant(struct tern_backend *be, const float *x, int64_t T,
                                       const struct tern_linear *w, float *y, int64_t y_width,
                                       int64_t y_col);

/* Fixed-lane float32 dot product shared by the CPU ops. */
float tern_cpu_dot_f32(const float *a, const float *b, int64_t n);

#endif
