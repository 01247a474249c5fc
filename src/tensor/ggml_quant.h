/*
 * ggml_quant.h — the tensor types of ggml, as GGUF files store them: a trait
 * table (block size, bytes per block, name) for every type id tern knows,
 * reference row dequantization to float32 and reference dot products of a
 * quantized row with a float32 vector. Pure functions on host memory.
 *
 * A row of n values (n a multiple of the block size) is n / block blocks laid
 * end to end; each block holds `block` values in `block_bytes` bytes. Scales
 * are little-endian IEEE half floats (f16) unless noted, read byte by byte:
 * nothing in a row is assumed aligned. Value i of a block is y[i].
 *
 *   type    values bytes  block layout (bytes, in order)           y[i]
 *   Q4_0      32    18    d | qs[16]                               d * (q - 8)
 *   Q4_1      32    20    d | m | qs[16]                           d * q + m
 *   Q5_0      32    22    d | qh[4] | qs[16]                       d * (q - 16)
 *   Q5_1      32    24    d | m | qh[4] | qs[16]                   d * q + m
 *   Q8_0      32    34    d | qs[32] (int8)                        q * d
 *   IQ4_NL    32    18    d | qs[16]                               d * kv[q]
 *     4-bit q: value j < 16 is qs[j] & 15, value j + 16 is qs[j] >> 4; Q5_*
 *     add bit i of the little-endian u32 qh as bit 4 of value i. kv is the
 *     non-linear table {-127, -104, ..., 89, 113}.
 *
 *   Q2_K     256    84    scales[16] | qs[64] | d | dmin
 *     value i = h * 128 + j * 32 + l (h < 2, j < 4, l < 32):
 *     q = (qs[h * 32 + l] >> 2j) & 3, s = scales[i / 16];
 *     y = (d * (s & 15)) * q - dmin * (s >> 4)
 *   Q3_K     256   110    hmask[32] | qs[64] | scales[12] | d
 *     low two bits as Q2_K; bit (i / 32) of hmask[i % 32] clear subtracts 4;
 *     sixteen 6-bit scales: low nibble from scales[s % 8] (>> 4 when s >= 8),
 *     high two bits from scales[8 + s % 4] >> (2 * (s / 4)); y = (d * (sc - 32)) * q
 *   Q4_K     256   144    d | dmin | scales[12] | qs[128]
 *     value i = c * 64 + h * 32 + l: q = (qs[c * 32 + l] >> 4h) & 15, in
 *     sub-block b = i / 32 with 6-bit scale sc[b] and min m[b] packed in 12
 *     bytes (b < 4: scales[b] & 63 and scales[b + 4] & 63; b >= 4: nibbles of
 *     scales[b + 4] with the top two bits of scales[b - 4] / scales[b]);
 *     y = (d * sc) * q - dmin * m
 *   Q5_K     256   176    d | dmin | scales[12] | qh[32] | qs[128]
 *     Q4_K plus bit (i / 32) of qh[i % 32] as bit 4 of q
 *   Q6_K     256   210    ql[128] | qh[64] | scales[16] (int8) | d
 *     value i = h * 128 + r: low nibble (ql[h * 64 + r % 64] >> 4 * (r / 64)),
 *     high two bits (qh[h * 32 + r % 32] >> 2 * (r / 32)); y = (d * scales[i / 16]) * (q - 32)
 *   IQ4_XS   256   136    d | scales_h (u16) | scales_l[4] | qs[128]
 *     sub-block b of 32: 6-bit scale from nibble b of scales_l and bits 2b..2b+1
 *     of scales_h; values as IQ4_NL over qs[b * 16 .. b * 16 + 15];
 *     y = (d * (sc - 32)) * kv[q]
 *
 * These are the definitions of ggml-quants.c's reference dequantizers (and
 * gguf-py's quants.py, which the tests check against bit for bit): each
 * value is the same float32 operations in the same order, so the results are
 * exact, not approximate.
 *
 * F32, F16 and BF16 are block-1 types (plain arrays). Other ids in the table
 * (IQ2_*, IQ3_*, IQ1_*, TQ*, MXFP4, Q8_K, the integer types, F64) carry their
 * sizes, so that a GGUF reader can lay out and check a file holding them, but
 * no dequantizer: `dequant` is false for them.
 *
 * Depends on tensor.h.
 */
#ifndef TERN_TENSOR_GGML_QUANT_H
#define TERN_TENSOR_GGML_QUANT_H

#include "tensor/tensor.h"

/* X(name, ggml type id, values per block, bytes per block, dequantizer) */
#define TERN_GGML_TYPE_LIST(X)                                                                     \
    X(F32, 0, 1, 4, true)                                                                          \
    X(F16, 1, 1, 2, true)                                                                          \
    X(Q4_0, 2, 32, 18, true)                                                                       \
    X(Q4_1, 3, 32, 20, true)                                                                       \
    X(Q5_0, 6, 32, 22, true)                                                                       \
    X(Q5_1, 7, 32, 24, true)                                                                       \
    X(Q8_0, 8, 32, 34, true)                                                                       \
    X(Q2_K, 10, 256, 84, true)                                                                     \
    X(Q3_K, 11, 256, 110, true)                                                                    \
    X(Q4_K, 12, 256, 144, true)                                                                    \
    X(Q5_K, 13, 256, 176, true)                                                                    \
    X(Q6_K, 14, 256, 210, true)                                                                    \
    X(Q8_K, 15, 256, 292, false)                                                                   \
    X(IQ2_XXS, 16, 256, 66, false)                                                                 \
    X(IQ2_XS, 17, 256, 74, false)                                                                  \
    X(IQ3_XXS, 18, 256, 98, false)                                                                 \
    X(IQ1_S, 19, 256, 50, false)                                                                   \
    X(IQ4_NL, 20, 32, 18, true)                                                                    \
    X(IQ3_S, 21, 256, 110, false)                                                                  \
    X(IQ2_S, 22, 256, 82, false)                                                                   \
    X(IQ4_XS, 23, 256, 136, true)                                                                  \
    X(I8, 24, 1, 1, false)                                                                         \
    X(I16, 25, 1, 2, false)                                                                        \
    X(I32, 26, 1, 4, false)                                                                        \
    X(I64, 27, 1, 8, false)                                                                        \
    X(F64, 28, 1, 8, false)                                                                        \
    X(IQ1_M, 29, 256, 56, false)                                                                   \
    X(BF16, 30, 1, 2, true)                                                                        \
    X(TQ1_0, 34, 256, 54, false)                                                                   \
    X(TQ2_0, 35, 256, 66, false)                                                                   \
    X(MXFP4, 39, 32, 17, false)
/* Not listed: Q8_1 (9), an activation format never stored in files (ggml and
 * gguf-py disagree on its size), and the ids ggml has retired (4, 5, 31-33,
 * 36-38). A file naming any of them is rejected as holding an unknown type. */

enum tern_ggml_type {
#define TERN_X_GT(name, id, blk, bytes, dq) TERN_GGML_##name = id,
    TERN_GGML_TYPE_LIST(TERN_X_GT)
#undef TERN_X_GT
};

struct tern_ggml_traits {
    const char *name;    /* "Q4_K" */
    int32_t block;       /* values per block */
    int32_t block_bytes; /* bytes per block */
    bool dequant;        /* tern_ggml_dequant_row / tern_ggml_dot_row handle it */
};

/* The traits of a type id, or NULL for an id not in the table. */
const struct tern_ggml_traits *tern_ggml_type_traits(uint32_t type);
/* The type's name ("Q4_K"), "?" for an unknown id. */
const char *tern_ggml_type_name(uint32_t type);
/* Bytes of a row of n values: false when the type is unknown, n is negative
 * or not a multiple of the block size. */
bool tern_ggml_row_bytes(uint32_t type, int64_t n, uint64_t *bytes);
/* The tern dtype of a plain type (F32, F16, BF16, I8, I32, I64): false for
 * block-quantized types and for types tern has no dtype for. */
bool tern_ggml_type_dtype(uint32_t type, enum tern_dtype *out);

/* Dequantizes a row of n values (n a multiple of the block size) into
 * float32. False, writing nothing, when the type has no dequantizer or n is
 * not a whole number of blocks. */
bool tern_ggml_dequant_row(uint32_t type, const void *row, float *out, int64_t n);

/* The dot product of a row of n values (as tern_ggml_dequant_row) with x[n],
 * into *out, in the CPU backend's fixed order: 16 lanes, lane j summing
 * x[i] * w[i] for i = j mod 16 in increasing i (each a float32 multiply then
 * an add, never fused), the lanes then reduced pairwise (lane j += lane j + 8,
 * then + 4, + 2, + 1). The row is dequantized block by block on the way, so
 * the result is bit for bit the dot of x with the dequantized row in that
 * order. False under the same conditions as tern_ggml_dequant_row. */
bool tern_ggml_dot_row(uint32_t type, const void *row, const float *x, int64_t n, float *out);

#endif /* TERN_TENSOR_GGML_QUANT_H */
