/*
 * gguf.h — read-only access to GGUF files (llama.cpp / Ollama), versions 2
 * and 3.
 *
 * A GGUF file, all integers little-endian:
 *
 *   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv times:      string key | u32 value type | value
 *   n_tensors times: string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset
 *   padding to general.alignment (default 32) | data section
 *
 *   string = u64 length | bytes (no terminator)
 *   value  = a scalar (u8 i8 u16 i16 u32 i32 f32 bool u64 i64 f64), a string,
 *            or an array: u32 element type | u64 count | elements (arrays may nest)
 *
 * A tensor's ne[] is ggml's order, innermost first: ne[0] is the length of a
 * row, and a row of a quantized type is ne[0] / block whole blocks. Offsets
 * are relative to the data section and multiples of the alignment.
 * Version 1 (32-bit counts and lengths) is refused; version 3 differs from 2
 * only in allowing big-endian files, which are refused too.
 *
 * Everything is checked before a handle is returned: every count, length,
 * type id, dimension and offset against the bytes that remain, with
 * overflow-safe arithmetic; keys and tensor names unique and free of NUL
 * bytes; tensor data inside the data section, aligned, and not overlapping.
 * Errors name the file and the key or tensor. The file is mmapped; strings
 * and tensor data point into the mapping (tensor data is aligned to the
 * file's alignment relative to the mapping, metadata is not aligned at all).
 *
 * Depends on base/, tensor/ (ggml type traits), POSIX mmap.
 */
#ifndef TERN_IO_GGUF_H
#define TERN_IO_GGUF_H

#include "tensor/ggml_quant.h"

/* Value types, with their ids in the file. */
#define TERN_GGUF_TYPE_LIST(X)                                                                     \
    X(UINT8, 0, "u8", 1)                                                                           \
    X(INT8, 1, "i8", 1)                                                                            \
    X(UINT16, 2, "u16", 2)                                                                         \
    X(INT16, 3, "i16", 2)                                                                          \
    X(UINT32, 4, "u32", 4)                                                                         \
    X(INT32, 5, "i32", 4)                                                                          \
    X(FLOAT32, 6, "f32", 4)                                                                        \
    X(BOOL, 7, "bool", 1)                                                                          \
    X(STRING, 8, "string", 0)                                                                      \
    X(ARRAY, 9, "array", 0)                                                                        \
    X(UINT64, 10, "u64", 8)                                                                        \
    X(INT64, 11, "i64", 8)                                                                         \
    X(FLOAT64, 12, "f64", 8)

enum tern_gguf_type {
#define TERN_X_GV(name, id, str, size) TERN_GGUF_##name = id,
    TERN_GGUF_TYPE_LIST(TERN_X_GV)
#undef TERN_X_GV
        TERN_GGUF_TYPE_COUNT
};

/* "u32", "string", ...; "?" for an unknown id. */
const char *tern_gguf_type_name(enum tern_gguf_type t);

/* Arrays nest at most this deep (an array of arrays of ... of scalars). */
#define TERN_GGUF_MAX_DEPTH 8
/* Tensors have at most this many dimensions (ggml's GGML_MAX_DIMS). */
#define TERN_GGUF_MAX_DIMS 4

/* A metadata value. Scalars are decoded into `num`; strings and arrays point
 * into the file. */
struct tern_gguf_value {
    enum tern_gguf_type type;
    enum tern_gguf_type elem_type; /* arrays: the type of every element */
    uint64_t n;                    /* strings: bytes; arrays: elements */
    const uint8_t *data;           /* strings: the bytes; arrays: the first element */
    char *str;                     /* strings outside arrays: a NUL-terminated copy (owned) */
    uint64_t *str_pos; /* arrays of strings: element i's length field at data + str_pos[i] */
    struct tern_gguf_value *elems; /* arrays of arrays: the parsed elements (owned) */
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
    } num; /* scalars: unsigned types in u, signed in i, floats in f, bool in b */
};

struct tern_gguf_kv {
    char *key; /* owned */
    struct tern_gguf_value v;
};

struct tern_gguf_tensor {
    char *name;    /* owned */
    uint32_t type; /* ggml type id (enum tern_ggml_type) */
    int n_dims;
    int64_t ne[TERN_GGUF_MAX_DIMS]; /* ggml order: ne[0] = row length; unused dims are 1 */
    uint64_t offset;                /* in the data section */
    uint64_t n_bytes;
    const void *data; /* in the mapping (NULL when parsed from a header alone) */
};

struct tern_gguf;

/* Opens and maps a file and checks all of it. TERN_E_NOT_FOUND when it does
 * not exist, TERN_E_FORMAT for a malformed file, TERN_E_UNSUPPORTED for
 * version 1, big-endian files and unknown tensor types. */
enum tern_status tern_gguf_open(const char *path, struct tern_gguf **out);
/* The same checks over a file image in memory (borrowed: it must outlive the
 * handle). `what` names it in messages. */
enum tern_status tern_gguf_parse(const void *image, size_t len, const char *what,
                                 struct tern_gguf **out);
void tern_gguf_close(struct tern_gguf *g);

const char *tern_gguf_path(const struct tern_gguf *g);
uint32_t tern_gguf_version(const struct tern_gguf *g);
uint32_t tern_gguf_alignment(const struct tern_gguf *g);
/* Where the data section starts, from the start of the file. */
uint64_t tern_gguf_data_offset(const struct tern_gguf *g);

/* ---- metadata ---- */

size_t tern_gguf_n_kv(const struct tern_gguf *g);
/* The i-th pair in file order. */
const struct tern_gguf_kv *tern_gguf_kv_at(const struct tern_gguf *g, size_t i);
/* The value of a key, or NULL when absent. */
const struct tern_gguf_value *tern_gguf_find(const struct tern_gguf *g, const char *key);

/* Typed getters. A missing key is TERN_E_NOT_FOUND, a value of the wrong type
 * or range TERN_E_FORMAT, each with a message naming the file and the key;
 * `*out` is left alone on failure. Integers accept every integer type whose
 * value fits int64; floats accept f32, f64 and integers; strings are
 * NUL-terminated copies owned by the handle (*len, when not NULL, is the byte
 * length, which an embedded NUL would make longer than strlen). */
enum tern_status tern_gguf_get_int(const struct tern_gguf *g, const char *key, int64_t *out);
enum tern_status tern_gguf_get_float(const struct tern_gguf *g, const char *key, double *out);
enum tern_status tern_gguf_get_bool(const struct tern_gguf *g, const char *key, bool *out);
enum tern_status tern_gguf_get_str(const struct tern_gguf *g, const char *key, const char **out,
                                   size_t *len);
/* Optional keys: absent gives the default; a wrong type is still an error. */
enum tern_status tern_gguf_get_int_opt(const struct tern_gguf *g, const char *key, int64_t def,
                                       int64_t *out);
enum tern_status tern_gguf_get_float_opt(const struct tern_gguf *g, const char *key, double def,
                                         double *out);
enum tern_status tern_gguf_get_bool_opt(const struct tern_gguf *g, const char *key, bool def,
                                        bool *out);
enum tern_status tern_gguf_get_str_opt(const struct tern_gguf *g, const char *key, const char *def,
                                       const char **out);
/* An array whose elements have type `elem` (TERN_GGUF_TYPE_COUNT: any type). */
enum tern_status tern_gguf_get_arr(const struct tern_gguf *g, const char *key,
                                   enum tern_gguf_type elem, const struct tern_gguf_value **out);

/* Elements of an array value (i < a->n; the element type must match: these
 * are for arrays already checked with tern_gguf_get_arr). */
/* String i: its bytes (not NUL-terminated) and length. */
const char *tern_gguf_arr_str(const struct tern_gguf_value *a, uint64_t i, size_t *len);
/* Integer element i of an integer array (u64 above INT64_MAX wraps). */
int64_t tern_gguf_arr_int(const struct tern_gguf_value *a, uint64_t i);
/* Element i of an f32 / f64 array. */
double tern_gguf_arr_float(const struct tern_gguf_value *a, uint64_t i);
bool tern_gguf_arr_bool(const struct tern_gguf_value *a, uint64_t i);
/* Array element i of an array of arrays. */
const struct tern_gguf_value *tern_gguf_arr_arr(const struct tern_gguf_value *a, uint64_t i);

/* ---- tensors ---- */

size_t tern_gguf_n_tensors(const struct tern_gguf *g);
/* The i-th tensor in file order. */
const struct tern_gguf_tensor *tern_gguf_tensor_at(const struct tern_gguf *g, size_t i);
/* By name; NULL when absent. */
const struct tern_gguf_tensor *tern_gguf_find_tensor(const struct tern_gguf *g, const char *name);
/* Values in the tensor (the product of ne). */
int64_t tern_gguf_tensor_numel(const struct tern_gguf_tensor *t);

#endif /* TERN_IO_GGUF_H */
