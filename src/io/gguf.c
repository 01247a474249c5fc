/*
 * gguf.c — parsing and validating GGUF files (layout in gguf.h), and the
 * lookups over a parsed file.
 *
 * The parser walks the image with a cursor that checks every read against
 * the bytes left. Counts are checked against the smallest size their items
 * can take before anything is allocated (a key/value pair takes at least 13
 * bytes, a tensor info 24, an array element 1, 8 or 12), so a hostile header
 * cannot make the parser allocate much more than the file's size. Arrays nest
 * at most TERN_GGUF_MAX_DEPTH deep.
 *
 * Depends on base/, tensor/ggml_quant.h, io_internal.h (messages, mapping).
 */
#include "io/gguf.h"
#include "io/io_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A name and the index of its key or tensor, for lookups by name. */
struct name_ix {
    const char *name;
    size_t i;
};

struct tern_gguf {
    char *path;
    void *map; /* owned mapping (tern_gguf_open), else NULL */
    size_t map_bytes;
    const uint8_t *img;
    size_t len;
    uint32_t version, alignment;
    uint64_t data_off;
    struct tern_gguf_kv *kv;
    size_t n_kv;
    struct name_ix *kv_by_key; /* sorted by key */
    struct tern_gguf_tensor *t;
    size_t n_t;
    struct name_ix *t_by_name; /* sorted by name */
};

#define DEFAULT_ALIGNMENT 32
#define MAX_NAME_BYTES    65535 /* keys and tensor names (the spec's key limit) */

static const struct {
    const char *name;
    size_t size;
} vtypes[] = {
#define TERN_X_GV(name, id, str, size) {str, size},
    TERN_GGUF_TYPE_LIST(TERN_X_GV)
#undef TERN_X_GV
};

const char *tern_gguf_type_name(enum tern_gguf_type t)
{
    return (unsigned)t < TERN_GGUF_TYPE_COUNT ? vtypes[t].name : "?";
}

/* ---------------------------------------------------------------- cursor */

struct cur {
    const uint8_t *p;
    size_t len, pos;
    const char *what;
};

static size_t left(const struct cur *c)
{
    return c->len - c->pos;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Reads an n-byte little-endian integer; `field` names it when it is cut off. */
static enum tern_status rd(struct cur *c, int n, uint64_t *out, const char *field)
{
    *out = 0;
    if (left(c) < (size_t)n)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: %s at offset %zu runs past the end of the file (%zu bytes)",
                             c->what, field, c->pos, c->len);
    *out = le(c->p + c->pos, n);
    c->pos += (size_t)n;
    return TERN_OK;
}

/* A string: u64 length, then the bytes (at c->p + *at). */
static enum tern_status rd_str(struct cur *c, uint64_t *n, size_t *at, const char *field)
{
    *at = 0;
    TERN_TRY(rd(c, 8, n, field));
    if (*n > left(c))
        return tern_io_error(TERN_E_FORMAT,
                             "%s: %s has length %llu, past the end of the file (%zu bytes left)",
                             c->what, field, (unsigned long long)*n, left(c));
    *at = c->pos;
    c->pos += (size_t)*n;
    return TERN_OK;
}

/* ---------------------------------------------------------------- values */

static void value_deinit(struct tern_gguf_value *v)
{
    if (v->elems)
        for (uint64_t i = 0; i < v->n; i++) value_deinit(&v->elems[i]);
    tern_free(v->elems);
    tern_free(v->str_pos);
    tern_free(v->str);
    memset(v, 0, sizeof *v);
}

static void decode_scalar(enum tern_gguf_type t, const uint8_t *p, struct tern_gguf_value *v)
{
    uint64_t u = le(p, (int)vtypes[t].size);
    switch (t) {
    case TERN_GGUF_INT8:
        v->num.i = (int8_t)u;
        break;
    case TERN_GGUF_INT16:
        v->num.i = (int16_t)u;
        break;
    case TERN_GGUF_INT32:
        v->num.i = (int32_t)u;
        break;
    case TERN_GGUF_INT64:
        v->num.i = (int64_t)u;
        break;
    case TERN_GGUF_FLOAT32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        v->num.f = f;
        break;
    }
    case TERN_GGUF_FLOAT64:
        memcpy(&v->num.f, &u, 8);
        break;
    case TERN_GGUF_BOOL:
        v->num.b = u != 0;
        break;
    default:
        v->num.u = u;
        break;
    }
}

static enum tern_status parse_value(struct cur *c, enum tern_gguf_type type, int depth,
                                    const char *key, bool top, struct tern_gguf_value *v);

/* "key 'K': WHAT" for messages about a value's fields. */
static const char *label(char *buf, size_t cap, const char *key, const char *what)
{
    snprintf(buf, cap, "key '%.200s': %s", key, what);
    return buf;
}

static enum tern_status parse_strings(struct cur *c, const char *key, struct tern_gguf_value *v)
{
    v->str_pos = tern_malloc((v->n ? (size_t)v->n : 1) * sizeof *v->str_pos);
    if (!v->str_pos) return TERN_E_NO_MEMORY;
    for (uint64_t i = 0; i < v->n; i++) {
        v->str_pos[i] = (uint64_t)(c->p + c->pos - v->data);
        uint64_t n = left(c) >= 8 ? le(c->p + c->pos, 8) : 0;
        if (left(c) < 8 || n > left(c) - 8)
            return tern_io_error(TERN_E_FORMAT,
                                 "%s: key '%s' element %llu: string of length %llu runs past the "
                                 "end of the file (%zu bytes left)",
                                 c->what, key, (unsigned long long)i, (unsigned long long)n,
                                 left(c));
        c->pos += 8 + (size_t)n;
    }
    return TERN_OK;
}

static enum tern_status parse_array(struct cur *c, int depth, const char *key,
                                    struct tern_gguf_value *v)
{
    uint64_t et, n;
    char lb[256];
    TERN_TRY(rd(c, 4, &et, label(lb, sizeof lb, key, "the array's element type")));
    TERN_TRY(rd(c, 8, &n, label(lb, sizeof lb, key, "the array's length")));
    if (et >= TERN_GGUF_TYPE_COUNT)
        return tern_io_error(TERN_E_FORMAT, "%s: key '%s' is an array of unknown type id %llu",
                             c->what, key, (unsigned long long)et);
    v->elem_type = (enum tern_gguf_type)et;
    v->n = n;
    v->data = c->p + c->pos;
    size_t min = et == TERN_GGUF_STRING ? 8 : et == TERN_GGUF_ARRAY ? 12 : vtypes[et].size;
    if (n > left(c) / min)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: key '%s' is an array of %llu %s, more than the %zu bytes left "
                             "can hold",
                             c->what, key, (unsigned long long)n, vtypes[et].name, left(c));
    if (et == TERN_GGUF_STRING) return parse_strings(c, key, v);
    if (et != TERN_GGUF_ARRAY) {
        c->pos += (size_t)n * min;
        return TERN_OK;
    }
    if (depth + 1 >= TERN_GGUF_MAX_DEPTH)
        return tern_io_error(TERN_E_UNSUPPORTED, "%s: key '%s' nests arrays more than %d deep",
                             c->what, key, TERN_GGUF_MAX_DEPTH);
    v->elems = tern_calloc(n ? (size_t)n : 1, sizeof *v->elems);
    if (!v->elems) return TERN_E_NO_MEMORY;
    for (uint64_t i = 0; i < n; i++)
        TERN_TRY(parse_value(c, TERN_GGUF_ARRAY, depth + 1, key, false, &v->elems[i]));
    return TERN_OK;
}

static enum tern_status parse_value(struct cur *c, enum tern_gguf_type type, int depth,
                                    const char *key, bool top, struct tern_gguf_value *v)
{
    v->type = type;
    if (type == TERN_GGUF_ARRAY) return parse_array(c, depth, key, v);
    if (type == TERN_GGUF_STRING) {
        size_t at;
        char lb[256];
        TERN_TRY(rd_str(c, &v->n, &at, label(lb, sizeof lb, key, "its string value")));
        v->data = c->p + at;
        if (top && !(v->str = tern_strndup((const char *)v->data, (size_t)v->n)))
            return TERN_E_NO_MEMORY;
        return TERN_OK;
    }
    size_t size = vtypes[type].size;
    if (left(c) < size)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: key '%s': its %s value runs past the end of the file", c->what,
                             key, vtypes[type].name);
    decode_scalar(type, c->p + c->pos, v);
    c->pos += size;
    return TERN_OK;
}

/* A key or tensor name: non-empty, at most MAX_NAME_BYTES, no NUL byte. */
static enum tern_status rd_name(struct cur *c, const char *field, uint64_t idx, char **out)
{
    uint64_t n;
    size_t at;
    char label[64];
    snprintf(label, sizeof label, "%s %llu", field, (unsigned long long)idx);
    TERN_TRY(rd_str(c, &n, &at, label));
    if (n == 0 || n > MAX_NAME_BYTES || memchr(c->p + at, 0, (size_t)n))
        return tern_io_error(TERN_E_FORMAT, "%s: %s %s", c->what, label,
                             n == 0               ? "is empty"
                             : n > MAX_NAME_BYTES ? "is longer than 65535 bytes"
                                                  : "holds a NUL byte");
    *out = tern_strndup((const char *)c->p + at, (size_t)n);
    return *out ? TERN_OK : TERN_E_NO_MEMORY;
}

/* ---------------------------------------------------------------- sorting */

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct name_ix *)a)->name, ((const struct name_ix *)b)->name);
}

/* Sorts an index of names, rejecting a name that appears twice. */
static enum tern_status sort_names(const char *what, const char *kind, struct name_ix *ix, size_t n)
{
    qsort(ix, n, sizeof *ix, cmp_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(ix[i - 1].name, ix[i].name))
            return tern_io_error(TERN_E_FORMAT, "%s: %s '%s' appears twice", what, kind,
                                 ix[i].name);
    return TERN_OK;
}

static size_t find_name(const struct name_ix *ix, size_t n, const char *name)
{
    struct name_ix key = {name, 0};
    const struct name_ix *hit = n ? bsearch(&key, ix, n, sizeof key, cmp_name) : NULL;
    return hit ? hit->i : SIZE_MAX;
}

static enum tern_status wrong_type(const struct tern_gguf *g, const char *key,
                                   const struct tern_gguf_value *v, const char *want);

/* ---------------------------------------------------------------- header */

static enum tern_status parse_preamble(struct tern_gguf *g, struct cur *c, uint64_t *n_t,
                                       uint64_t *n_kv)
{
    if (g->len < 4 || memcmp(g->img, "GGUF", 4) != 0)
        return tern_io_error(TERN_E_FORMAT, "%s: not a GGUF file (no 'GGUF' magic at offset 0)",
                             g->path);
    c->pos = 4;
    uint64_t v;
    TERN_TRY(rd(c, 4, &v, "the version"));
    g->version = (uint32_t)v;
    if (v == 1)
        return tern_io_error(TERN_E_UNSUPPORTED,
                             "%s: GGUF version 1 is not supported (only versions 2 and 3; "
                             "convert the model again with a newer llama.cpp)",
                             g->path);
    if ((v & 0xffff) == 0 && (v >> 24) >= 1 && (v >> 24) <= 3)
        return tern_io_error(TERN_E_UNSUPPORTED,
                             "%s: big-endian GGUF files are not supported (version field %#llx)",
                             g->path, (unsigned long long)v);
    if (v != 2 && v != 3)
        return tern_io_error(TERN_E_UNSUPPORTED,
                             "%s: GGUF version %llu is not supported (only versions 2 and 3)",
                             g->path, (unsigned long long)v);
    TERN_TRY(rd(c, 8, n_t, "the tensor count"));
    TERN_TRY(rd(c, 8, n_kv, "the key/value count"));
    /* the smallest pair: 8-byte key length, a 1-byte key, 4-byte type, 1-byte value */
    if (*n_kv > left(c) / 14)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: header claims %llu key/value pairs, more than the %zu bytes "
                             "left can hold",
                             g->path, (unsigned long long)*n_kv, left(c));
    return TERN_OK;
}

static enum tern_status parse_kvs(struct tern_gguf *g, struct cur *c, uint64_t n_kv)
{
    g->kv = tern_calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->kv_by_key = tern_malloc((n_kv ? (size_t)n_kv : 1) * sizeof *g->kv_by_key);
    if (!g->kv || !g->kv_by_key) return TERN_E_NO_MEMORY;
    for (uint64_t i = 0; i < n_kv; i++) {
        struct tern_gguf_kv *kv = &g->kv[g->n_kv];
        TERN_TRY(rd_name(c, "key", i, &kv->key));
        g->kv_by_key[g->n_kv] = (struct name_ix){kv->key, (size_t)g->n_kv};
        g->n_kv++;
        uint64_t type;
        char lb[256];
        TERN_TRY(rd(c, 4, &type, label(lb, sizeof lb, kv->key, "its value type")));
        if (type >= TERN_GGUF_TYPE_COUNT)
            return tern_io_error(TERN_E_FORMAT, "%s: key '%s' has unknown value type id %llu",
                                 g->path, kv->key, (unsigned long long)type);
        TERN_TRY(parse_value(c, (enum tern_gguf_type)type, 0, kv->key, true, &kv->v));
    }
    TERN_TRY(sort_names(g->path, "key", g->kv_by_key, g->n_kv));
    const struct tern_gguf_value *a = tern_gguf_find(g, "general.alignment");
    g->alignment = DEFAULT_ALIGNMENT;
    if (a) {
        if (a->type != TERN_GGUF_UINT32)
            return wrong_type(g, "general.alignment", a, "a u32 power of two");
        if (a->num.u == 0 || (a->num.u & (a->num.u - 1)))
            return tern_io_error(TERN_E_FORMAT,
                                 "%s: key 'general.alignment' must be a u32 power of two, got %llu",
                                 g->path, (unsigned long long)a->num.u);
        g->alignment = (uint32_t)a->num.u;
    }
    return TERN_OK;
}

/* The size of a tensor from its dims and type, overflow-checked. */
static enum tern_status tensor_size(struct tern_gguf *g, struct tern_gguf_tensor *t)
{
    const struct tern_ggml_traits *tr = tern_ggml_type_traits(t->type);
    if (!tr)
        return tern_io_error(TERN_E_UNSUPPORTED, "%s: tensor '%s' has unknown ggml type id %u",
                             g->path, t->name, t->type);
    char shape[128];
    tern_shape_str(t->ne, t->n_dims, shape, sizeof shape);
    if (t->ne[0] % tr->block)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: tensor '%s' has type %s (blocks of %d) but rows of %lld values "
                             "(ne %s)",
                             g->path, t->name, tr->name, tr->block, (long long)t->ne[0], shape);
    uint64_t blocks = (uint64_t)(t->ne[0] / tr->block);
    bool zero = false, over = blocks > UINT64_MAX / (uint64_t)tr->block_bytes;
    uint64_t bytes = over ? 0 : blocks * (uint64_t)tr->block_bytes;
    int64_t numel = t->ne[0];
    for (int d = 0; d < TERN_GGUF_MAX_DIMS; d++) zero = zero || t->ne[d] == 0;
    for (int d = 1; d < TERN_GGUF_MAX_DIMS && !zero; d++) {
        uint64_t n = (uint64_t)t->ne[d];
        if (bytes > UINT64_MAX / n || numel > INT64_MAX / t->ne[d])
            over = true;
        else {
            bytes *= n;
            numel *= t->ne[d];
        }
    }
    if (over)
        return tern_io_error(TERN_E_FORMAT, "%s: tensor '%s' has dims ne %s whose size overflows",
                             g->path, t->name, shape);
    t->n_bytes = zero ? 0 : bytes;
    return TERN_OK;
}

static enum tern_status parse_tensor(struct tern_gguf *g, struct cur *c, uint64_t i,
                                     struct tern_gguf_tensor *t)
{
    TERN_TRY(rd_name(c, "tensor", i, &t->name));
    uint64_t v;
    TERN_TRY(rd(c, 4, &v, "a tensor's dimension count"));
    if (v > TERN_GGUF_MAX_DIMS)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: tensor '%s' has %llu dimensions, at most %d allowed", g->path,
                             t->name, (unsigned long long)v, TERN_GGUF_MAX_DIMS);
    t->n_dims = (int)v;
    for (int d = 0; d < TERN_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        TERN_TRY(rd(c, 8, &v, "a tensor dimension"));
        if (v > (uint64_t)INT64_MAX)
            return tern_io_error(TERN_E_FORMAT,
                                 "%s: tensor '%s' has dimension %d of %llu, over 2^63", g->path,
                                 t->name, d, (unsigned long long)v);
        t->ne[d] = (int64_t)v;
    }
    TERN_TRY(rd(c, 4, &v, "a tensor type"));
    t->type = (uint32_t)v;
    TERN_TRY(rd(c, 8, &t->offset, "a tensor offset"));
    return tensor_size(g, t);
}

static int cmp_offset(const void *a, const void *b)
{
    const struct tern_gguf_tensor *x = *(const struct tern_gguf_tensor *const *)a;
    const struct tern_gguf_tensor *y = *(const struct tern_gguf_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

/* Every tensor aligned, inside the data section, and no two sharing bytes. */
static enum tern_status place_tensors(struct tern_gguf *g)
{
    uint64_t data_len = g->data_off <= g->len ? g->len - g->data_off : 0;
    const struct tern_gguf_tensor **by_off = tern_calloc(g->n_t ? g->n_t : 1, sizeof *by_off);
    if (!by_off) return TERN_E_NO_MEMORY;
    enum tern_status st = TERN_OK;
    size_t n = 0;
    for (size_t i = 0; i < g->n_t && !st; i++) {
        struct tern_gguf_tensor *t = &g->t[i];
        if (t->offset % g->alignment)
            st =
                tern_io_error(TERN_E_FORMAT,
                              "%s: tensor '%s' has offset %llu, not a multiple of the alignment %u",
                              g->path, t->name, (unsigned long long)t->offset, g->alignment);
        else if (t->n_bytes > data_len || t->offset > data_len - t->n_bytes)
            st = tern_io_error(TERN_E_FORMAT,
                               "%s: tensor '%s' (%llu bytes at offset %llu) runs past the end of "
                               "the data section (%llu bytes)",
                               g->path, t->name, (unsigned long long)t->n_bytes,
                               (unsigned long long)t->offset, (unsigned long long)data_len);
        else if (t->n_bytes)
            by_off[n++] = t;
        t->data = st || !t->n_bytes ? NULL : g->img + g->data_off + t->offset;
    }
    if (!st) qsort(by_off, n, sizeof *by_off, cmp_offset);
    for (size_t i = 1; i < n && !st; i++)
        if (by_off[i]->offset < by_off[i - 1]->offset + by_off[i - 1]->n_bytes)
            st = tern_io_error(TERN_E_FORMAT,
                               "%s: tensor '%s' (offset %llu) overlaps tensor '%s' "
                               "(%llu bytes at offset %llu)",
                               g->path, by_off[i]->name, (unsigned long long)by_off[i]->offset,
                               by_off[i - 1]->name, (unsigned long long)by_off[i - 1]->n_bytes,
                               (unsigned long long)by_off[i - 1]->offset);
    tern_free(by_off);
    return st;
}

static enum tern_status parse_tensors(struct tern_gguf *g, struct cur *c, uint64_t n_t)
{
    /* the smallest info: 8-byte name length, 1-byte name, n_dims, type, offset */
    if (n_t > left(c) / 25)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: header claims %llu tensors, more than the %zu bytes left can "
                             "hold",
                             g->path, (unsigned long long)n_t, left(c));
    g->t = tern_calloc(n_t ? (size_t)n_t : 1, sizeof *g->t);
    g->t_by_name = tern_malloc((n_t ? (size_t)n_t : 1) * sizeof *g->t_by_name);
    if (!g->t || !g->t_by_name) return TERN_E_NO_MEMORY;
    for (uint64_t i = 0; i < n_t; i++) {
        struct tern_gguf_tensor *t = &g->t[g->n_t++];
        TERN_TRY(parse_tensor(g, c, i, t));
        g->t_by_name[g->n_t - 1] = (struct name_ix){t->name, (size_t)(g->n_t - 1)};
    }
    TERN_TRY(sort_names(g->path, "tensor", g->t_by_name, g->n_t));
    uint64_t a = g->alignment;
    g->data_off = (uint64_t)c->pos + (a - (uint64_t)c->pos % a) % a;
    return place_tensors(g);
}

static enum tern_status parse_image(struct tern_gguf *g)
{
    struct cur c = {g->img, g->len, 0, g->path};
    uint64_t n_t = 0, n_kv = 0;
    TERN_TRY(parse_preamble(g, &c, &n_t, &n_kv));
    TERN_TRY(parse_kvs(g, &c, n_kv));
    return parse_tensors(g, &c, n_t);
}

/* ---------------------------------------------------------------- open / close */

enum tern_status tern_gguf_parse(const void *image, size_t len, const char *what,
                                 struct tern_gguf **out)
{
    *out = NULL;
    struct tern_gguf *g = tern_calloc(1, sizeof *g);
    if (!g) return TERN_E_NO_MEMORY;
    enum tern_status st = TERN_E_NO_MEMORY;
    if (!(g->path = tern_strdup(what ? what : "gguf"))) goto fail;
    g->img = image;
    g->len = len;
    if ((st = parse_image(g)) != TERN_OK) goto fail;
    *out = g;
    return TERN_OK;
fail:
    tern_gguf_close(g);
    return st;
}

enum tern_status tern_gguf_open(const char *path, struct tern_gguf **out)
{
    *out = NULL;
    void *map;
    size_t bytes;
    TERN_TRY(tern_io_map_file(path, 4, "the 'GGUF' magic", &map, &bytes));
    enum tern_status st = tern_gguf_parse(map, bytes, path, out);
    if (st != TERN_OK) {
        tern_io_unmap_file(map, bytes);
        return st;
    }
    (*out)->map = map;
    (*out)->map_bytes = bytes;
    return TERN_OK;
}

void tern_gguf_close(struct tern_gguf *g)
{
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) {
        tern_free(g->kv[i].key);
        value_deinit(&g->kv[i].v);
    }
    for (size_t i = 0; i < g->n_t; i++) tern_free(g->t[i].name);
    tern_free(g->kv);
    tern_free(g->kv_by_key);
    tern_free(g->t);
    tern_free(g->t_by_name);
    tern_io_unmap_file(g->map, g->map_bytes);
    tern_free(g->path);
    tern_free(g);
}

const char *tern_gguf_path(const struct tern_gguf *g)
{
    return g->path;
}
uint32_t tern_gguf_version(const struct tern_gguf *g)
{
    return g->version;
}
uint32_t tern_gguf_alignment(const struct tern_gguf *g)
{
    return g->alignment;
}
uint64_t tern_gguf_data_offset(const struct tern_gguf *g)
{
    return g->data_off;
}
size_t tern_gguf_n_kv(const struct tern_gguf *g)
{
    return g->n_kv;
}
size_t tern_gguf_n_tensors(const struct tern_gguf *g)
{
    return g->n_t;
}

const struct tern_gguf_kv *tern_gguf_kv_at(const struct tern_gguf *g, size_t i)
{
    TERN_ASSERT(i < g->n_kv);
    return &g->kv[i];
}

const struct tern_gguf_value *tern_gguf_find(const struct tern_gguf *g, const char *key)
{
    size_t i = find_name(g->kv_by_key, g->n_kv, key);
    return i == SIZE_MAX ? NULL : &g->kv[i].v;
}

const struct tern_gguf_tensor *tern_gguf_tensor_at(const struct tern_gguf *g, size_t i)
{
    TERN_ASSERT(i < g->n_t);
    return &g->t[i];
}

const struct tern_gguf_tensor *tern_gguf_find_tensor(const struct tern_gguf *g, const char *name)
{
    size_t i = find_name(g->t_by_name, g->n_t, name);
    return i == SIZE_MAX ? NULL : &g->t[i];
}

int64_t tern_gguf_tensor_numel(const struct tern_gguf_tensor *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

/* ---------------------------------------------------------------- getters */

static bool is_int(enum tern_gguf_type t)
{
    return t <= TERN_GGUF_INT32 || t == TERN_GGUF_UINT64 || t == TERN_GGUF_INT64;
}

static bool is_signed(enum tern_gguf_type t)
{
    return t == TERN_GGUF_INT8 || t == TERN_GGUF_INT16 || t == TERN_GGUF_INT32 ||
           t == TERN_GGUF_INT64;
}

/* The value of `key`: NULL with TERN_E_NOT_FOUND (and a message) when absent
 * and required; NULL with TERN_OK when absent and optional. */
static const struct tern_gguf_value *lookup(const struct tern_gguf *g, const char *key,
                                            bool required, enum tern_status *st)
{
    const struct tern_gguf_value *v = tern_gguf_find(g, key);
    *st = TERN_OK;
    if (!v && required)
        *st = tern_io_error(TERN_E_NOT_FOUND, "%s: key '%s' is missing", g->path, key);
    return v;
}

static enum tern_status wrong_type(const struct tern_gguf *g, const char *key,
                                   const struct tern_gguf_value *v, const char *want)
{
    if (v->type == TERN_GGUF_ARRAY)
        return tern_io_error(TERN_E_FORMAT, "%s: key '%s' must be %s, got an array of %s", g->path,
                             key, want, tern_gguf_type_name(v->elem_type));
    return tern_io_error(TERN_E_FORMAT, "%s: key '%s' must be %s, got %s", g->path, key, want,
                         tern_gguf_type_name(v->type));
}

static enum tern_status get_int(const struct tern_gguf *g, const char *key, bool required,
                                int64_t def, int64_t *out)
{
    enum tern_status st;
    const struct tern_gguf_value *v = lookup(g, key, required, &st);
    if (!v) {
        if (!st) *out = def;
        return st;
    }
    if (!is_int(v->type)) return wrong_type(g, key, v, "an integer");
    if (!is_signed(v->type) && v->num.u > (uint64_t)INT64_MAX)
        return tern_io_error(TERN_E_FORMAT, "%s: key '%s' is %llu, over 2^63", g->path, key,
                             (unsigned long long)v->num.u);
    *out = is_signed(v->type) ? v->num.i : (int64_t)v->num.u;
    return TERN_OK;
}

static enum tern_status get_float(const struct tern_gguf *g, const char *key, bool required,
                                  double def, double *out)
{
    enum tern_status st;
    const struct tern_gguf_value *v = lookup(g, key, required, &st);
    if (!v) {
        if (!st) *out = def;
        return st;
    }
    if (v->type == TERN_GGUF_FLOAT32 || v->type == TERN_GGUF_FLOAT64)
        *out = v->num.f;
    else if (is_int(v->type))
        *out = is_signed(v->type) ? (double)v->num.i : (double)v->num.u;
    else
        return wrong_type(g, key, v, "a number");
    return TERN_OK;
}

static enum tern_status get_bool(const struct tern_gguf *g, const char *key, bool required,
                                 bool def, bool *out)
{
    enum tern_status st;
    const struct tern_gguf_value *v = lookup(g, key, required, &st);
    if (!v) {
        if (!st) *out = def;
        return st;
    }
    if (v->type != TERN_GGUF_BOOL) return wrong_type(g, key, v, "a bool");
    *out = v->num.b;
    return TERN_OK;
}

enum tern_status tern_gguf_get_int(const struct tern_gguf *g, const char *key, int64_t *out)
{
    return get_int(g, key, true, 0, out);
}

enum tern_status tern_gguf_get_int_opt(const struct tern_gguf *g, const char *key, int64_t def,
                                       int64_t *out)
{
    return get_int(g, key, false, def, out);
}

enum tern_status tern_gguf_get_float(const struct tern_gguf *g, const char *key, double *out)
{
    return get_float(g, key, true, 0, out);
}

enum tern_status tern_gguf_get_float_opt(const struct tern_gguf *g, const char *key, double def,
                                         double *out)
{
    return get_float(g, key, false, def, out);
}

enum tern_status tern_gguf_get_bool(const struct tern_gguf *g, const char *key, bool *out)
{
    return get_bool(g, key, true, false, out);
}

enum tern_status tern_gguf_get_bool_opt(const struct tern_gguf *g, const char *key, bool def,
                                        bool *out)
{
    return get_bool(g, key, false, def, out);
}

enum tern_status tern_gguf_get_str(const struct tern_gguf *g, const char *key, const char **out,
                                   size_t *len)
{
    enum tern_status st;
    const struct tern_gguf_value *v = lookup(g, key, true, &st);
    if (!v) return st;
    if (v->type != TERN_GGUF_STRING) return wrong_type(g, key, v, "a string");
    *out = v->str;
    if (len) *len = (size_t)v->n;
    return TERN_OK;
}

enum tern_status tern_gguf_get_str_opt(const struct tern_gguf *g, const char *key, const char *def,
                                       const char **out)
{
    if (!tern_gguf_find(g, key)) {
        *out = def;
        return TERN_OK;
    }
    return tern_gguf_get_str(g, key, out, NULL);
}

enum tern_status tern_gguf_get_arr(const struct tern_gguf *g, const char *key,
                                   enum tern_gguf_type elem, const struct tern_gguf_value **out)
{
    enum tern_status st;
    const struct tern_gguf_value *v = lookup(g, key, true, &st);
    if (!v) return st;
    char want[48];
    snprintf(want, sizeof want, "an array of %s", tern_gguf_type_name(elem));
    if (v->type != TERN_GGUF_ARRAY)
        return wrong_type(g, key, v, elem < TERN_GGUF_TYPE_COUNT ? want : "an array");
    if (elem < TERN_GGUF_TYPE_COUNT && v->elem_type != elem) return wrong_type(g, key, v, want);
    *out = v;
    return TERN_OK;
}

/* ---------------------------------------------------------------- array elements */

const char *tern_gguf_arr_str(const struct tern_gguf_value *a, uint64_t i, size_t *len)
{
    TERN_ASSERT(a->type == TERN_GGUF_ARRAY && a->elem_type == TERN_GGUF_STRING && i < a->n);
    const uint8_t *p = a->data + a->str_pos[i];
    *len = (size_t)le(p, 8);
    return (const char *)p + 8;
}

int64_t tern_gguf_arr_int(const struct tern_gguf_value *a, uint64_t i)
{
    TERN_ASSERT(a->type == TERN_GGUF_ARRAY && is_int(a->elem_type) && i < a->n);
    struct tern_gguf_value v;
    decode_scalar(a->elem_type, a->data + i * vtypes[a->elem_type].size, &v);
    return is_signed(a->elem_type) ? v.num.i : (int64_t)v.num.u;
}

double tern_gguf_arr_float(const struct tern_gguf_value *a, uint64_t i)
{
    TERN_ASSERT(a->type == TERN_GGUF_ARRAY && i < a->n &&
                (a->elem_type == TERN_GGUF_FLOAT32 || a->elem_type == TERN_GGUF_FLOAT64));
    struct tern_gguf_value v;
    decode_scalar(a->elem_type, a->data + i * vtypes[a->elem_type].size, &v);
    return v.num.f;
}

bool tern_gguf_arr_bool(const struct tern_gguf_value *a, uint64_t i)
{
    TERN_ASSERT(a->type == TERN_GGUF_ARRAY && a->elem_type == TERN_GGUF_BOOL && i < a->n);
    return a->data[i] != 0;
}

const struct tern_gguf_value *tern_gguf_arr_arr(const struct tern_gguf_value *a, uint64_t i)
{
    TERN_ASSERT(a->type == TERN_GGUF_ARRAY && a->elem_type == TERN_GGUF_ARRAY && i < a->n);
    return &a->elems[i];
}
