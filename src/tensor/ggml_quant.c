/*
 * ggml_quant.c — ggml type traits, reference row dequantizers and dot
 * products (the layouts are drawn in ggml_quant.h).
 *
 * Each dequantizer turns one block into float32 values, written straight from
 * the format's definition: one function per type, byte reads only (no
 * alignment or host byte order assumed), the same float32 operations in the
 * same order as ggml's reference code, so the output is exact. The dot
 * products dequantize block by block into a small buffer and accumulate in
 * the CPU backend's 16-lane order (see tern_ggml_dot_row).
 *
 * Depends on tensor.h.
 */
#include "tensor/ggml_quant.h"

#include <string.h>

/* ---------------------------------------------------------------- traits */

struct type_row {
    uint32_t id;
    struct tern_ggml_traits t;
};

static const struct type_row types[] = {
#define TERN_X_GT(name, id, blk, bytes, dq) {id, {#name, blk, bytes, dq}},
    TERN_GGML_TYPE_LIST(TERN_X_GT)
#undef TERN_X_GT
};

const struct tern_ggml_traits *tern_ggml_type_traits(uint32_t type)
{
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].id == type) return &types[i].t;
    return NULL;
}

const char *tern_ggml_type_name(uint32_t type)
{
    const struct tern_ggml_traits *t = tern_ggml_type_traits(type);
    return t ? t->name : "?";
}

bool tern_ggml_row_bytes(uint32_t type, int64_t n, uint64_t *bytes)
{
    const struct tern_ggml_traits *t = tern_ggml_type_traits(type);
    if (!t || n < 0 || n % t->block) return false;
    *bytes = (uint64_t)(n / t->block) * (uint64_t)t->block_bytes;
    return true;
}

bool tern_ggml_type_dtype(uint32_t type, enum tern_dtype *out)
{
    switch (type) {
    case TERN_GGML_F32:
        *out = TERN_DTYPE_F32;
        return true;
    case TERN_GGML_F16:
        *out = TERN_DTYPE_F16;
        return true;
    case TERN_GGML_BF16:
        *out = TERN_DTYPE_BF16;
        return true;
    case TERN_GGML_I8:
        *out = TERN_DTYPE_I8;
        return true;
    case TERN_GGML_I32:
        *out = TERN_DTYPE_I32;
        return true;
    case TERN_GGML_I64:
        *out = TERN_DTYPE_I64;
        return true;
    default:
        return false;
    }
}

/* ---------------------------------------------------------------- fields */

static inline float f16at(const uint8_t *p)
{
    return tern_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

static inline uint32_t u32at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The non-linear 4-bit table of IQ4_NL and IQ4_XS. */
static const int8_t iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

/* ---------------------------------------------------------------- 32-value blocks */

static void dq_q4_0(const uint8_t *b, float *y)
{
    float d = f16at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 15) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

static void dq_q4_1(const uint8_t *b, float *y)
{
    float d = f16at(b), m = f16at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 15) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

static void dq_q5_0(const uint8_t *b, float *y)
{
    float d = f16at(b);
    uint32_t qh = u32at(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

static void dq_q5_1(const uint8_t *b, float *y)
{
    float d = f16at(b), m = f16at(b + 2);
    uint32_t qh = u32at(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

static void dq_q8_0(const uint8_t *b, float *y)
{
    float d = f16at(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

static void dq_iq4_nl(const uint8_t *b, float *y)
{
    float d = f16at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)iq4_values[qs[j] & 15];
        y[j + 16] = d * (float)iq4_values[qs[j] >> 4];
    }
}

/* ---------------------------------------------------------------- 256-value super-blocks */

static void dq_q2_k(const uint8_t *b, float *y)
{
    const uint8_t *scales = b, *qs = b + 16;
    float d = f16at(b + 80), dmin = f16at(b + 82);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, j = (i % 128) / 32, l = i % 32;
        int q = (qs[h * 32 + l] >> (2 * j)) & 3;
        uint8_t s = scales[i / 16];
        float dl = d * (float)(s & 15), ml = dmin * (float)(s >> 4);
        y[i] = dl * (float)q - ml;
    }
}

static void dq_q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    float d = f16at(b + 108);
    float dl[16];
    for (int s = 0; s < 16; s++) {
        int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
        int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        dl[s] = d * (float)((lo | hi << 4) - 32);
    }
    for (int i = 0; i < 256; i++) {
        int h = i / 128, j = (i % 128) / 32, l = i % 32;
        int q = (qs[h * 32 + l] >> (2 * j)) & 3;
        if (!((hmask[i % 32] >> (i / 32)) & 1)) q -= 4;
        y[i] = dl[i / 16] * (float)q;
    }
}

/* The eight 6-bit scales and mins of Q4_K / Q5_K, packed in 12 bytes. */
static void k_scale_min(const uint8_t *s, int b, int *sc, int *m)
{
    if (b < 4) {
        *sc = s[b] & 63;
        *m = s[b + 4] & 63;
    } else {
        *sc = (s[b + 4] & 15) | (s[b - 4] >> 6) << 4;
        *m = (s[b + 4] >> 4) | (s[b] >> 6) << 4;
    }
}

static void dq_q4_k(const uint8_t *b, float *y)
{
    float d = f16at(b), dmin = f16at(b + 2);
    const uint8_t *scales = b + 4, *qs = b + 16;
    for (int sb = 0; sb < 8; sb++) {
        int sc, m;
        k_scale_min(scales, sb, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        int c = sb / 2, shift = 4 * (sb % 2);
        for (int l = 0; l < 32; l++)
            y[sb * 32 + l] = dl * (float)((qs[c * 32 + l] >> shift) & 15) - ml;
    }
}

static void dq_q5_k(const uint8_t *b, float *y)
{
    float d = f16at(b), dmin = f16at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
    for (int sb = 0; sb < 8; sb++) {
        int sc, m;
        k_scale_min(scales, sb, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        int c = sb / 2, shift = 4 * (sb % 2);
        for (int l = 0; l < 32; l++) {
            int q = ((qs[c * 32 + l] >> shift) & 15) | ((qh[l] >> sb) & 1) << 4;
            y[sb * 32 + l] = dl * (float)q - ml;
        }
    }
}

static void dq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128, *sc = b + 192;
    float d = f16at(b + 208);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, r = i % 128;
        int lo = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 15;
        int hi = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
        float dl = d * (float)(int8_t)sc[i / 16];
        y[i] = dl * (float)((lo | hi << 4) - 32);
    }
}

static void dq_iq4_xs(const uint8_t *b, float *y)
{
    float d = f16at(b);
    unsigned scales_h = (unsigned)b[2] | (unsigned)b[3] << 8;
    const uint8_t *scales_l = b + 4, *qs = b + 8;
    for (int sb = 0; sb < 8; sb++) {
        int lo = (scales_l[sb / 2] >> (4 * (sb % 2))) & 15;
        int hi = (int)(scales_h >> (2 * sb)) & 3;
        float dl = d * (float)((lo | hi << 4) - 32);
        for (int l = 0; l < 16; l++) {
            y[sb * 32 + l] = dl * (float)iq4_values[qs[sb * 16 + l] & 15];
            y[sb * 32 + l + 16] = dl * (float)iq4_values[qs[sb * 16 + l] >> 4];
        }
    }
}

/* ---------------------------------------------------------------- rows */

typedef void (*dq_block_fn)(const uint8_t *b, float *y);

static dq_block_fn block_fn(uint32_t type)
{
    switch (type) {
    case TERN_GGML_Q4_0:
        return dq_q4_0;
    case TERN_GGML_Q4_1:
        return dq_q4_1;
    case TERN_GGML_Q5_0:
        return dq_q5_0;
    case TERN_GGML_Q5_1:
        return dq_q5_1;
    case TERN_GGML_Q8_0:
        return dq_q8_0;
    case TERN_GGML_Q2_K:
        return dq_q2_k;
    case TERN_GGML_Q3_K:
        return dq_q3_k;
    case TERN_GGML_Q4_K:
        return dq_q4_k;
    case TERN_GGML_Q5_K:
        return dq_q5_k;
    case TERN_GGML_Q6_K:
        return dq_q6_k;
    case TERN_GGML_IQ4_NL:
        return dq_iq4_nl;
    case TERN_GGML_IQ4_XS:
        return dq_iq4_xs;
    default:
        return NULL;
    }
}

/* Plain types: n values from bytes (memcpy-free reads, any alignment). */
static void dq_plain(uint32_t type, const uint8_t *p, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (type == TERN_GGML_F32) {
            uint32_t u = u32at(p + 4 * i);
            memcpy(&y[i], &u, 4);
        } else if (type == TERN_GGML_F16) {
            y[i] = f16at(p + 2 * i);
        } else {
            y[i] = tern_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        }
    }
}

static bool supported(uint32_t type, int64_t n, const struct tern_ggml_traits **t)
{
    *t = tern_ggml_type_traits(type);
    return *t && (*t)->dequant && n >= 0 && n % (*t)->block == 0;
}

bool tern_ggml_dequant_row(uint32_t type, const void *row, float *out, int64_t n)
{
    const struct tern_ggml_traits *t;
    if (!supported(type, n, &t)) return false;
    const uint8_t *p = row;
    dq_block_fn fn = block_fn(type);
    if (!fn) {
        dq_plain(type, p, out, n);
        return true;
    }
    for (int64_t i = 0; i < n / t->block; i++) fn(p + i * t->block_bytes, out + i * t->block);
    return true;
}

#define DOT_LANES 16
#define DOT_CHUNK 256 /* values dequantized at a time: one super-block */

bool tern_ggml_dot_row(uint32_t type, const void *row, const float *x, int64_t n, float *out)
{
    const struct tern_ggml_traits *t;
    if (!supported(type, n, &t)) return false;
    const uint8_t *p = row;
    dq_block_fn fn = block_fn(type);
    float acc[DOT_LANES] = {0}, w[DOT_CHUNK];
    /* every block size divides DOT_CHUNK, and DOT_LANES divides every
     * quantized block, so value i always lands in lane i % DOT_LANES */
    for (int64_t base = 0; base < n; base += DOT_CHUNK) {
        int64_t m = n - base < DOT_CHUNK ? n - base : DOT_CHUNK;
        if (fn) {
            for (int64_t k = 0; k < m / t->block; k++)
                fn(p + (base / t->block + k) * t->block_bytes, w + k * t->block);
        } else {
            dq_plain(type, p + base * t->block_bytes, w, m);
        }
        for (int64_t i = 0; i < m; i++) acc[(base + i) % DOT_LANES] += x[base + i] * w[i];
    }
    for (int s = DOT_LANES / 2; s > 0; s /= 2)
        for (int j = 0; j < s; j++) acc[j] += acc[j + s];
    *out = acc[0];
    return true;
}
