/*
 * tensor.h — dtypes, their conversions, and non-owning tensor views.
 *
 * A view describes bytes that someone else owns (an mmapped safetensors file,
 * a buffer). Shapes are outermost first, in HF/PyTorch order. Depends on
 * base/ only.
 */
#ifndef TERN_TENSOR_H
#define TERN_TENSOR_H

#include "base/base.h"

#include <string.h>

#define TERN_DTYPE_LIST(X)                                                                         \
    X(TERN_DTYPE_F32, "F32", "f32", 4)                                                             \
    X(TERN_DTYPE_F16, "F16", "f16", 2)                                                             \
    X(TERN_DTYPE_BF16, "BF16", "bf16", 2)                                                          \
    X(TERN_DTYPE_U32, "U32", "u32", 4)                                                             \
    X(TERN_DTYPE_I32, "I32", "i32", 4)                                                             \
    X(TERN_DTYPE_I64, "I64", "i64", 8)                                                             \
    X(TERN_DTYPE_U8, "U8", "u8", 1)                                                                \
    X(TERN_DTYPE_I8, "I8", "i8", 1)

enum tern_dtype {
#define TERN_X_DT(name, st, short, size) name,
    TERN_DTYPE_LIST(TERN_X_DT)
#undef TERN_X_DT
        TERN_DTYPE_COUNT
};

#define TERN_MAX_DIMS 4

/* Size of one element in bytes. */
size_t tern_dtype_size(enum tern_dtype dt);
/* Short lower-case name: "bf16". */
const char *tern_dtype_name(enum tern_dtype dt);
/* Parses a safetensors dtype string ("BF16"); false if unknown. */
bool tern_dtype_from_safetensors(const char *s, enum tern_dtype *out);

/* A non-owning view of a tensor in host memory. */
struct tern_tensor_view {
    const char *name; /* borrowed */
    enum tern_dtype dtype;
    int n_dims;
    int64_t shape[TERN_MAX_DIMS];
    const void *data; /* borrowed; NULL for a view that only describes */
    size_t n_bytes;
};

int64_t tern_shape_numel(const int64_t *shape, int n_dims);
/* Formats a shape as "[a, b, c]" into buf. */
const char *tern_shape_str(const int64_t *shape, int n_dims, char *buf, size_t buf_len);

/* ---- scalar conversions (round-to-nearest-even, as torch does) ---- */

static inline float tern_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t tern_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float tern_f16_to_f32(uint16_t h);
uint16_t tern_f32_to_f16(float f);

/* Converts n elements of a float dtype (F32, F16, BF16) into float32. */
void tern_to_f32(enum tern_dtype dt, const void *src, float *dst, size_t n);

#endif /* TERN_TENSOR_H */
