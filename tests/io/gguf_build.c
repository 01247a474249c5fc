/*
 * gguf_build.c — the tests' GGUF image writer (gguf_build.h).
 */
#include "gguf_build.h"

#include <string.h>

void gb_raw(struct gb *b, const void *p, size_t n)
{
    if (tern_str_append(&b->s, p, n) != TERN_OK) fail_msg("gguf_build: out of memory");
}

static void put_le(struct gb *b, uint64_t v, int n)
{
    uint8_t x[8];
    for (int i = 0; i < n; i++) x[i] = (uint8_t)(v >> (8 * i));
    gb_raw(b, x, (size_t)n);
}

void gb_begin(struct gb *b, uint32_t version)
{
    memset(b, 0, sizeof *b);
    gb_raw(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, 0);
    gb_u64(b, 0);
}

void gb_counts(struct gb *b, uint64_t n_tensors, uint64_t n_kv)
{
    b->fixed_counts = true;
    b->set_n_t = n_tensors;
    b->set_n_kv = n_kv;
}

void gb_u8(struct gb *b, uint8_t v)
{
    put_le(b, v, 1);
}
void gb_u16(struct gb *b, uint16_t v)
{
    put_le(b, v, 2);
}
void gb_u32(struct gb *b, uint32_t v)
{
    put_le(b, v, 4);
}
void gb_u64(struct gb *b, uint64_t v)
{
    put_le(b, v, 8);
}

void gb_f32(struct gb *b, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    gb_u32(b, u);
}

void gb_strn(struct gb *b, const char *s, size_t n)
{
    gb_u64(b, n);
    gb_raw(b, s, n);
}

void gb_str(struct gb *b, const char *s)
{
    gb_strn(b, s, strlen(s));
}

void gb_key(struct gb *b, const char *key, uint32_t type)
{
    gb_str(b, key);
    gb_u32(b, type);
    b->n_kv++;
}

void gb_kv_u32(struct gb *b, const char *key, uint32_t v)
{
    gb_key(b, key, 4);
    gb_u32(b, v);
}

void gb_kv_i32(struct gb *b, const char *key, int32_t v)
{
    gb_key(b, key, 5);
    gb_u32(b, (uint32_t)v);
}

void gb_kv_f32(struct gb *b, const char *key, float v)
{
    gb_key(b, key, 6);
    gb_f32(b, v);
}

void gb_kv_bool(struct gb *b, const char *key, bool v)
{
    gb_key(b, key, 7);
    gb_u8(b, v);
}

void gb_kv_str(struct gb *b, const char *key, const char *v)
{
    gb_key(b, key, 8);
    gb_str(b, v);
}

void gb_kv_arr(struct gb *b, const char *key, uint32_t elem_type, uint64_t n)
{
    gb_key(b, key, 9);
    gb_u32(b, elem_type);
    gb_u64(b, n);
}

void gb_tensor(struct gb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
               uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, (uint64_t)ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
    b->n_t++;
}

void gb_align(struct gb *b, uint32_t align)
{
    while (b->s.len % align) gb_u8(b, 0);
}

size_t gb_len(const struct gb *b)
{
    return b->s.len;
}

uint8_t *gb_end(struct gb *b, size_t *len)
{
    uint64_t nt = b->fixed_counts ? b->set_n_t : b->n_t;
    uint64_t nkv = b->fixed_counts ? b->set_n_kv : b->n_kv;
    for (int i = 0; i < 8; i++) {
        b->s.data[8 + i] = (char)(uint8_t)(nt >> (8 * i));
        b->s.data[16 + i] = (char)(uint8_t)(nkv >> (8 * i));
    }
    *len = b->s.len;
    return (uint8_t *)tern_str_take(&b->s);
}
