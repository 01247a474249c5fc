/*
 * tensor.c — dtype tables and conversions.
 */
#include "tensor/tensor.h"

#include <stdio.h>

static const struct {
    const char *st_name;
    const char *name;
    size_t size;
} dtype_info[] = {
#define TERN_X_DT(name, st, short, size) {st, short, size},
    TERN_DTYPE_LIST(TERN_X_DT)
#undef TERN_X_DT
};

size_t tern_dtype_size(enum tern_dtype dt)
{
    return (unsigned)dt < TERN_DTYPE_COUNT ? dtype_info[dt].size : 0;
}

const char *tern_dtype_name(enum tern_dtype dt)
{
    return (unsigned)dt < TERN_DTYPE_COUNT ? dtype_info[dt].name : "?";
}

bool tern_dtype_from_safetensors(const char *s, enum tern_dtype *out)
{
    for (int i = 0; i < TERN_DTYPE_COUNT; i++) {
        if (strcmp(s, dtype_info[i].st_name) == 0) {
            *out = (enum tern_dtype)i;
            return true;
        }
    }
    return false;
}

int64_t tern_shape_numel(const int64_t *shape, int n_dims)
{
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) n *= shape[i];
    return n;
}

const char *tern_shape_str(const int64_t *shape, int n_dims, char *buf, size_t buf_len)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, buf_len - off, "[");
    for (int i = 0; i < n_dims && off < buf_len; i++)
        off += (size_t)snprintf(buf + off, buf_len - off, "%s%lld", i ? ", " : "",
                                (long long)shape[i]);
    if (off < buf_len) snprintf(buf + off, buf_len - off, "]");
    return buf;
}

float tern_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400u)) {
                mant <<= 1;
                exp--;
            }
            mant &= 0x3ffu;
            u = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t tern_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x47800000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
    if (absu < 0x38800000u) {                                   /* subnormal or zero */
        if (absu < 0x33000000u) return (uint16_t)sign;
        uint32_t e = absu >> 23;
        uint32_t m = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14 + (113 - e) */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = absu - 0x38000000u; /* rebias 127 -> 15 */
    uint32_t half = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
    return (uint16_t)(sign | half);
}

void tern_to_f32(enum tern_dtype dt, const void *src, float *dst, size_t n)
{
    switch (dt) {
    case TERN_DTYPE_F32:
        memcpy(dst, src, n * 4);
        break;
    case TERN_DTYPE_BF16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = tern_bf16_to_f32(s[i]);
        break;
    }
    case TERN_DTYPE_F16: {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = tern_f16_to_f32(s[i]);
        break;
    }
    default:
        TERN_ASSERT(!"tern_to_f32: not a float dtype");
    }
}
