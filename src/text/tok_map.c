/*
 * tok_map.c — the tokenizer's hash maps (token string -> id, merge pair ->
 * rank and merged id) and the UTF-8 / Unicode-property helpers the other
 * tok_*.c files share. Open addressing with linear probing, power-of-two
 * tables kept at most half full. Depends on base/ and utf8proc.
 */
#include "text/tok_internal.h"

#include <string.h>
#include <utf8proc.h>

uint64_t tok_hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

/* ------------------------------------------------------------ vocab */

#define SLOT_ID(x) ((int32_t)(uint32_t)(x) - 1)
#define SLOT_TAG(h) ((h) >> 32 << 32)

/* Finds the slot of string s (hash h): its index, or the empty slot where it
 * would go. The hash tag in each slot spares most string compares. */
static uint32_t vocab_probe(const struct tok_vocab *v, const uint64_t *slots, uint32_t mask,
                            const char *s, size_t len, uint64_t h)
{
    uint64_t tag = SLOT_TAG(h);
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        uint64_t x = slots[i];
        if (!x) return i;
        if (SLOT_TAG(x) != tag) continue;
        int32_t o = SLOT_ID(x);
        if (v->len[o] == len && memcmp(v->strs + v->off[o], s, len) == 0) return i;
    }
}

/* Rebuilds the index over every id in order; the first id of a string wins. */
static enum tern_status vocab_rehash(struct tok_vocab *v, uint32_t n_slots)
{
    uint64_t *slots = tern_calloc(n_slots, sizeof *slots);
    if (!slots) return TERN_E_NO_MEMORY;
    uint32_t mask = n_slots - 1;
    int32_t n_keys = 0;
    for (int32_t id = 0; id < v->n; id++) {
        if (v->off[id] == UINT32_MAX) continue;
        const char *s = v->strs + v->off[id];
        uint64_t h = tok_hash_bytes(s, v->len[id]);
        uint32_t j = vocab_probe(v, slots, mask, s, v->len[id], h);
        if (!slots[j]) {
            slots[j] = SLOT_TAG(h) | (uint32_t)(id + 1);
            n_keys++;
        }
    }
    tern_free(v->slots);
    v->slots = slots;
    v->mask = mask;
    v->n_keys = n_keys;
    return TERN_OK;
}

static enum tern_status vocab_grow_ids(struct tok_vocab *v, int32_t n)
{
    if (n <= v->n) return TERN_OK;
    if (n > v->cap_ids) { /* amortised: ids mostly arrive one at a time */
        int32_t cap = v->cap_ids ? v->cap_ids : 1024;
        while (cap < n) cap = cap > INT32_MAX / 2 ? n : cap * 2;
        uint32_t *off = tern_realloc_array(v->off, (size_t)cap, sizeof *off);
        if (!off) return TERN_E_NO_MEMORY;
        v->off = off;
        uint32_t *len = tern_realloc_array(v->len, (size_t)cap, sizeof *len);
        if (!len) return TERN_E_NO_MEMORY;
        v->len = len;
        v->cap_ids = cap;
    }
    for (int32_t i = v->n; i < n; i++) {
        v->off[i] = UINT32_MAX;
        v->len[i] = 0;
    }
    v->n = n;
    return TERN_OK;
}

enum tern_status tok_vocab_reserve(struct tok_vocab *v, int32_t n_ids, size_t n_bytes)
{
    if (n_bytes > v->strs_cap) {
        char *p = tern_realloc(v->strs, n_bytes);
        if (!p) return TERN_E_NO_MEMORY;
        v->strs = p;
        v->strs_cap = n_bytes;
    }
    if (n_ids > v->cap_ids) {
        int32_t n = v->n;
        TERN_TRY(vocab_grow_ids(v, n_ids));
        v->n = n; /* capacity only */
    }
    uint32_t want = 16;
    while (want < (uint32_t)n_ids + (uint32_t)n_ids / 2u + 2u) want <<= 1;
    if (!v->slots || want > v->mask + 1) TERN_TRY(vocab_rehash(v, want));
    return TERN_OK;
}

int32_t tok_vocab_find(const struct tok_vocab *v, const char *s, size_t len)
{
    if (!v->slots) return -1;
    uint64_t x = v->slots[vocab_probe(v, v->slots, v->mask, s, len, tok_hash_bytes(s, len))];
    return x ? SLOT_ID(x) : -1;
}

enum tern_status tok_vocab_set(struct tok_vocab *v, int32_t id, const char *s, size_t len)
{
    if (id < 0 || id >= TOK_MAX_ID || len > UINT32_MAX / 2)
        return tern_error(TERN_E_FORMAT, "token id %d out of range [0, %d)", id, TOK_MAX_ID);
    TERN_TRY(vocab_grow_ids(v, id + 1));
    if (v->strs_len + len + 1 > v->strs_cap) {
        size_t cap = v->strs_cap ? v->strs_cap : 4096;
        while (cap < v->strs_len + len + 1) cap *= 2;
        if (cap > UINT32_MAX) return tern_error(TERN_E_CAPACITY, "vocabulary strings over 4 GiB");
        char *p = tern_realloc(v->strs, cap);
        if (!p) return TERN_E_NO_MEMORY;
        v->strs = p;
        v->strs_cap = cap;
    }
    if (!v->slots || (uint64_t)(v->n_keys + 1) * 3u > (uint64_t)(v->mask + 1) * 2u)
        TERN_TRY(vocab_rehash(v, v->slots ? (v->mask + 1) * 2 : 1024));
    memcpy(v->strs + v->strs_len, s, len);
    v->strs[v->strs_len + len] = '\0';
    uint32_t off = (uint32_t)v->strs_len;
    v->strs_len += len + 1;
    if (v->off[id] != UINT32_MAX) { /* an id that changes string: re-index all */
        v->off[id] = off;
        v->len[id] = (uint32_t)len;
        return vocab_rehash(v, v->mask + 1);
    }
    v->off[id] = off;
    v->len[id] = (uint32_t)len;
    uint64_t h = tok_hash_bytes(s, len);
    uint32_t i = vocab_probe(v, v->slots, v->mask, s, len, h);
    if (v->slots[i]) return TERN_OK; /* already indexed under an earlier id */
    v->slots[i] = SLOT_TAG(h) | (uint32_t)(id + 1);
    v->n_keys++;
    return TERN_OK;
}

enum tern_status tok_vocab_grow(struct tok_vocab *v, int32_t n_ids)
{
    return vocab_grow_ids(v, n_ids);
}

void tok_vocab_deinit(struct tok_vocab *v)
{
    tern_free(v->off);
    tern_free(v->len);
    tern_free(v->strs);
    tern_free(v->slots);
    memset(v, 0, sizeof *v);
}

/* ------------------------------------------------------------ merges */

enum tern_status tok_merges_reserve(struct tok_merges *m, size_t n)
{
    uint32_t want = 16;
    while (want < n + n / 2 + 2) want <<= 1;
    if (m->slots && want <= m->mask + 1) return TERN_OK;
    struct tok_merge_slot *slots = tern_malloc((size_t)want * sizeof *slots);
    if (!slots) return TERN_E_NO_MEMORY;
    for (uint32_t i = 0; i < want; i++) slots[i].key = UINT64_MAX;
    uint32_t mask = want - 1;
    for (uint32_t i = 0; m->slots && i <= m->mask; i++) {
        uint64_t k = m->slots[i].key;
        if (k == UINT64_MAX) continue;
        uint32_t j = (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & mask;
        while (slots[j].key != UINT64_MAX) j = (j + 1) & mask;
        slots[j] = m->slots[i];
    }
    tern_free(m->slots);
    m->slots = slots;
    m->mask = mask;
    return TERN_OK;
}

enum tern_status tok_merges_add(struct tok_merges *m, int32_t a, int32_t b, int32_t rank,
                                int32_t new_id)
{
    if (!m->slots || (uint64_t)(m->n + 1) * 3 > (uint64_t)(m->mask + 1) * 2)
        TERN_TRY(tok_merges_reserve(m, (size_t)(m->n + 1) * 2));
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
    for (; m->slots[i].key != UINT64_MAX; i = (i + 1) & m->mask)
        if (m->slots[i].key == k) return TERN_OK; /* first (lowest rank) wins, as in HF */
    m->slots[i] = (struct tok_merge_slot){k, rank, new_id};
    m->n++;
    return TERN_OK;
}

void tok_merges_deinit(struct tok_merges *m)
{
    tern_free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ UTF-8 */

int tok_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2 || c > 0xF4) return 0;
    if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3 || (s[2] & 0xC0) != 0x80) return 0;
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return (s[1] >= lo && s[1] <= hi) ? 3 : 0;
    }
    if (n < 4 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return (s[1] >= lo && s[1] <= hi) ? 4 : 0;
}

/* How many bytes from s form a valid prefix of some character (the maximal
 * subpart used to group invalid bytes into one U+FFFD). */
static size_t utf8_valid_prefix(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0xC2 || c > 0xF4) return 1;
    size_t need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    unsigned lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    size_t i = 1;
    if (i < n && i < need && s[i] >= lo && s[i] <= hi) {
        i++;
        while (i < n && i < need && (s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

int32_t tok_utf8_decode(const unsigned char *s, int len)
{
    switch (len) {
    case 1: return s[0];
    case 2: return ((s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((s[0] & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((s[0] & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

int tok_utf8_encode(int32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

enum tern_status tok_utf8_sanitize(const char *s, size_t len, struct tern_str *out)
{
    const unsigned char *u = (const unsigned char *)s;
    TERN_TRY(tern_str_reserve(out, out->len + len + 16));
    size_t i = 0, run = 0;
    while (i < len) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int l = tok_utf8_len(u + i, len - i);
        if (l > 0) {
            i += (size_t)l;
            continue;
        }
        TERN_TRY(tern_str_append(out, s + run, i - run));
        TERN_TRY(tern_str_append(out, "\xEF\xBF\xBD", 3));
        i += utf8_valid_prefix(u + i, len - i);
        run = i;
    }
    return tern_str_append(out, s + run, len - run);
}

size_t tok_utf8_incomplete_tail(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned c = u[len - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation: look further back */
        if (c < 0xC2 || c > 0xF4) return 0;
        size_t need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (back >= need) return 0;
        return utf8_valid_prefix(u + len - back, back) == back ? back : 0;
    }
    return 0;
}

bool tok_cp_is_whitespace(int32_t cp)
{
    /* Unicode White_Space, as Rust's char::is_whitespace */
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return false;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool tok_cp_is_numeric(int32_t cp)
{
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool tok_cp_is_alnum(int32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    utf8proc_category_t c = utf8proc_category(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || tok_cp_is_numeric(cp);
}
