/*
 * quant.h — the MLX affine quantization format: packing, quantizing (bit for
 * bit as MLX does) and dequantizing rows. Pure functions on host memory, used
 * by the CPU backend, the CUDA tests and `tern quantize`.
 *
 * One quantized linear [out, in] with `bits` b and `group_size` g:
 *
 *   weight  [out, in * b / 32] U32   each row is a little-endian bit stream:
 *                                    value i occupies bits [i*b, (i+1)*b)
 *                                    (least-significant first), so for
 *                                    b = 2/4/8 value i is in word i / (32/b)
 *                                    at shift (i % (32/b)) * b; for b = 3/5/6
 *                                    values straddle words (MLX writes them
 *                                    as 8/8/4 values per 3/5/3 bytes, which
 *                                    is the same stream)
 *   scales  [out, in / g]  F16/BF16/F32   (the dtype of the source weights)
 *   biases  [out, in / g]  same dtype
 *
 *   w[o, i] = scales[o, i / g] * q[o, i] + biases[o, i / g]
 *
 *   row o:  | word 0 | word 1 | ... |      in * b / 32 words
 *            q0 q1 .. q7 | q8 ..            (b = 4: 8 values per word, q0 in bits 0-3)
 *
 * Depends on tensor.h.
 */
#ifndef TERN_TENSOR_QUANT_H
#define TERN_TENSOR_QUANT_H

#include "tensor/tensor.h"

/* True for the bit widths MLX's affine mode supports: 2, 3, 4, 5, 6, 8. */
bool tern_quant_bits_ok(int bits);
/* True for group sizes 32, 64, 128. */
bool tern_quant_group_ok(int group_size);

/* Value i of a packed row. */
static inline uint32_t tern_quant_get(const uint32_t *q, int64_t i, int bits)
{
    uint64_t bit = (uint64_t)i * (uint64_t)bits;
    uint64_t word = bit >> 5, shift = bit & 31;
    uint64_t v = q[word] >> shift;
    if (shift + (uint64_t)bits > 32) v |= (uint64_t)q[word + 1] << (32 - shift);
    return (uint32_t)(v & ((1u << bits) - 1u));
}

/* Quantizes one row of n values (n % group_size == 0) exactly as MLX's CPU
 * `mx.quantize` does: per group, w_min/w_max in float; scale = max((max -
 * min) / (2^b - 1), 1e-7), signed so that the edge of larger magnitude maps
 * to an integer q0 = rint(edge / scale); if q0 != 0 the scale becomes
 * edge / q0 and the bias the edge, else the bias is 0; q = clamp(rint((w -
 * bias) / scale), 0, 2^b - 1). q gets n * bits / 32 words; scales and biases
 * get the float values that the caller rounds to the stored dtype. */
void tern_quant_affine_row(const float *w, int64_t n, int bits, int group_size, uint32_t *q,
                           float *scales, float *biases);

/* Dequantizes n values of a packed row; scales / biases (dtype sdt: F16,
 * BF16 or F32) are that row's groups. */
void tern_quant_dequant_row(const uint32_t *q, const void *scales, const void *biases,
                            enum tern_dtype sdt, int64_t n, int bits, int group_size, float *out);

/* Rounds a float to a scale/bias dtype (F16 / BF16 / F32), stored at dst[i]. */
void tern_quant_store_half(enum tern_dtype dt, void *dst, int64_t i, float v);

#endif /* TERN_TENSOR_QUANT_H */
