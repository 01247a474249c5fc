/*
 * gguf_build.h — a GGUF image writer for the tests: well-formed files to
 * read back and malformed ones to reject. Writes exactly what it is told,
 * little-endian, into a growing buffer; the tensor and key/value counts are
 * patched in at the end unless set by hand.
 */
#ifndef TERN_TEST_GGUF_BUILD_H
#define TERN_TEST_GGUF_BUILD_H

#include "testutil.h"

struct gb {
    struct tern_str s;
    uint64_t n_kv, n_t;
    bool fixed_counts; /* gb_counts was called: keep those */
    uint64_t set_n_t, set_n_kv;
};

/* "GGUF", the version, room for the counts. */
void gb_begin(struct gb *b, uint32_t version);
/* Forces the counts written at offset 8 and 16. */
void gb_counts(struct gb *b, uint64_t n_tensors, uint64_t n_kv);
void gb_raw(struct gb *b, const void *p, size_t n);
void gb_u8(struct gb *b, uint8_t v);
void gb_u16(struct gb *b, uint16_t v);
void gb_u32(struct gb *b, uint32_t v);
void gb_u64(struct gb *b, uint64_t v);
void gb_f32(struct gb *b, float v);
/* A string: u64 length, bytes. */
void gb_str(struct gb *b, const char *s);
void gb_strn(struct gb *b, const char *s, size_t n);
/* A key and its value type (counts one pair); the value follows. */
void gb_key(struct gb *b, const char *key, uint32_t type);
void gb_kv_u32(struct gb *b, const char *key, uint32_t v);
void gb_kv_i32(struct gb *b, const char *key, int32_t v);
void gb_kv_f32(struct gb *b, const char *key, float v);
void gb_kv_bool(struct gb *b, const char *key, bool v);
void gb_kv_str(struct gb *b, const char *key, const char *v);
/* An array header (key, type 9, element type, count); the elements follow. */
void gb_kv_arr(struct gb *b, const char *key, uint32_t elem_type, uint64_t n);
/* A tensor info (counts one tensor); ne in ggml order. */
void gb_tensor(struct gb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
               uint64_t offset);
/* Zero bytes up to a multiple of `align` from the start. */
void gb_align(struct gb *b, uint32_t align);
size_t gb_len(const struct gb *b);
/* Patches the counts and hands over the image (tern_free). */
uint8_t *gb_end(struct gb *b, size_t *len);

#endif
