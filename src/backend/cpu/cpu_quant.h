/*
 * cpu_quant.h — quantized weights on the CPU (reference path): MLX affine
 * and ggml's block types.
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
 *
 * A ggml linear (backend.h) is weight [out, row_bytes] U8, each row
 * in / block blocks of its ggml type (tensor/ggml_quant.h).
 */
#ifndef TERN_BACKEND_CPU_QUANT_H
#define TERN_BACKEND_CPU_QUANT_H

#include "backend/backend.h"

/* Dequantizes row `row` of a quantized linear (MLX affine or ggml) into
 * out[in_features]. */
void tern_cpu_dequant_row(const struct tern_linear *w, int64_t row, float *out);

/* The ggml block types the CPU takes: every one tern_ggml_dequant_row
 * dequantizes. */
bool tern_cpu_ggml_type_ok(const struct tern_backend *be, uint32_t ggml_type);
/* TERN_E_INVALID_ARG (naming op) unless w is a ggml linear the CPU takes,
 * with a weight of the layout backend.h gives. */
enum tern_status tern_cpu_check_ggml(const struct tern_linear *w, const char *op);

/* y[t, y_col + o] = x[t] . W[o] for a quantized W (MLX affine or ggml); x: [T, in] f32, y rows of
 * width `y_width`. Fixed reduction order (batch-invariant). */
enum tern_status tern_cpu_matmul_quant(struct tern_backend *be, const float *x, int64_t T,
                                       const struct tern_linear *w, float *y, int64_t y_width,
                                       int64_t y_col);

/* Fixed-lane float32 dot product shared by the CPU ops. */
float tern_cpu_dot_f32(const float *a, const float *b, int64_t n);

#endif
