/*
 * quant.c — MLX affine quantization on the host (see quant.h).
 *
 * The quantizer follows MLX's CPU kernel (mlx/backend/cpu/quantized.cpp,
 * `quantize`) operation for operation in float32, with rintf (round half to
 * even, the default rounding mode) for std::rint, so `tern quantize` writes
 * the same bytes as mlx-lm's converter. tests/unit/test_quant.c checks that
 * against tensors MLX wrote.
 */
#include "tensor/quant.h"

#include <math.h>

bool tern_quant_bits_ok(int bits)
{
    return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}

bool tern_quant_group_ok(int group_size)
{
    return group_size == 32 || group_size == 64 || group_size == 128;
}

static float load_s(enum tern_dtype dt, const void *p, int64_t i)
{
    if (dt == TERN_DTYPE_BF16) return tern_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == TERN_DTYPE_F16) return tern_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

void tern_quant_store_half(enum tern_dtype dt, void *dst, int64_t i, float v)
{
    if (dt == TERN_DTYPE_BF16) ((uint16_t *)dst)[i] = tern_f32_to_bf16(v);
    else if (dt == TERN_DTYPE_F16) ((uint16_t *)dst)[i] = tern_f32_to_f16(v);
    else ((float *)dst)[i] = v;
}

static void put_bits(uint32_t *q, int64_t i, int bits, uint32_t v)
{
    uint64_t bit = (uint64_t)i * (uint64_t)bits;
    uint64_t word = bit >> 5, shift = bit & 31;
    q[word] |= v << shift;
    if (shift + (uint64_t)bits > 32) q[word + 1] |= v >> (32 - shift);
}

void tern_quant_affine_row(const float *w, int64_t n, int bits, int group_size, uint32_t *q,
                           float *scales, float *biases)
{
    const float n_bins = (float)((1 << bits) - 1), eps = 1e-7f;
    memset(q, 0, (size_t)(n * bits / 32) * sizeof *q);
    for (int64_t g = 0; g < n / group_size; g++) {
        const float *x = w + g * group_size;
        float w_min = INFINITY, w_max = -INFINITY;
        for (int j = 0; j < group_size; j++) {
            w_max = fmaxf(w_max, x[j]);
            w_min = fminf(w_min, x[j]);
        }
        bool mask = fabsf(w_min) > fabsf(w_max);
        float scale = fmaxf((w_max - w_min) / n_bins, eps);
        scale = mask ? scale : -scale;
        float edge = mask ? w_min : w_max;
        float q0 = rintf(edge / scale);
        float bias = 0.0f;
        if (q0 != 0.0f) {
            scale = edge / q0;
            bias = edge;
        }
        for (int j = 0; j < group_size; j++) {
            float v = rintf((x[j] - bias) / scale);
            v = fminf(fmaxf(v, 0.0f), n_bins);
            put_bits(q, g * group_size + j, bits, (uint32_t)v);
        }
        scales[g] = scale;
        biases[g] = bias;
    }
}

/* Power-of-two widths: whole words, values never straddle. */
static void dequant_pow2(const uint32_t *q, float s, float b, int bits, int group_size,
                         float *out)
{
    int per = 32 / bits;
    uint32_t mask = (1u << bits) - 1u;
    for (int wi = 0; wi < group_size / per; wi++) {
        uint32_t word = q[wi];
        for (int k = 0; k < per; k++) out[wi * per + k] = s * (float)((word >> (k * bits)) & mask) + b;
    }
}

TERN_SIMD_CLONES void tern_quant_dequant_row(const uint32_t *q, const void *scales,
                                             const void *biases, enum tern_dtype sdt, int64_t n,
                                             int bits, int group_size, float *out)
{
    int64_t words_per_group = group_size * bits / 32;
    for (int64_t g = 0; g < n / group_size; g++) {
        float s = load_s(sdt, scales, g), b = load_s(sdt, biases, g);
        float *o = out + g * group_size;
        if (bits == 2 || bits == 4 || bits == 8) {
            dequant_pow2(q + g * words_per_group, s, b, bits, group_size, o);
            continue;
        }
        for (int j = 0; j < group_size; j++)
            o[j] = s * (float)tern_quant_get(q, g * group_size + j, bits) + b;
    }
}
