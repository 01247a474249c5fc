/*
 * safetensors.c — parsing and validating safetensors headers, and opening
 * .safetensors files as read-only memory mappings.
 *
 * File layout:
 *
 *   offset 0        8-byte little-endian u64 N (header length)
 *   offset 8        N bytes of JSON: {"name": {"dtype", "shape", "data_offsets"}, "__metadata__"}
 *   offset 8 + N    data section; data_offsets [begin, end) are relative to it
 *
 * Everything in the header is checked before any tensor is handed out: the
 * dtype is one tern knows, the shape has rank <= 4 and non-negative dims,
 * numel * dtype size equals end - begin (with overflow checks), offsets lie
 * within the data section and no two tensors' bytes overlap. Data pointers
 * are NOT aligned in general (the format does not promise it): readers must
 * memcpy or use unaligned loads.
 *
 * Depends on base/, tensor/, jansson, io_internal.h (the file mapping).
 */
#include "io/safetensors.h"
#include "io/config.h"
#include "io/io_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tern_st_file {
    char *path;
    void *map;
    size_t map_bytes;
    const uint8_t *data; /* data section inside the mapping */
    uint64_t data_len;
    struct tern_st_header header;
};

/* ---------------------------------------------------------------- header */

static enum tern_status parse_dtype(const char *what, const char *name, const json_t *e,
                                    struct tern_st_entry *out, const char **dt_str)
{
    const json_t *v = json_object_get(e, "dtype");
    if (!v) return tern_io_error(TERN_E_FORMAT, "%s: tensor '%s' has no 'dtype'", what, name);
    if (!json_is_string(v))
        return tern_io_error(TERN_E_FORMAT, "%s: tensor '%s': 'dtype' must be a string, got %s",
                             what, name, tern_json_type_name(v));
    *dt_str = json_string_value(v);
    if (!tern_dtype_from_safetensors(*dt_str, &out->dtype))
        return tern_io_error(TERN_E_UNSUPPORTED, "%s: tensor '%s' has unsupported dtype '%s'", what,
                             name, *dt_str);
    return TERN_OK;
}

static enum tern_status parse_shape(const char *what, const char *name, const json_t *e,
                                    struct tern_st_entry *out)
{
    const json_t *v = json_object_get(e, "shape");
    if (!v) return tern_io_error(TERN_E_FORMAT, "%s: tensor '%s' has no 'shape'", what, name);
    if (!json_is_array(v))
        return tern_io_error(TERN_E_FORMAT, "%s: tensor '%s': 'shape' must be an array, got %s",
                             what, name, tern_json_type_name(v));
    size_t rank = json_array_size(v);
    if (rank > TERN_MAX_DIMS)
        return tern_io_error(TERN_E_UNSUPPORTED,
                             "%s: tensor '%s' has rank %zu, at most %d is supported", what, name,
                             rank, TERN_MAX_DIMS);
    out->n_dims = (int)rank;
    for (size_t i = 0; i < rank; i++) {
        const json_t *d = json_array_get(v, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return tern_io_error(
                TERN_E_FORMAT,
                "%s: tensor '%s': shape[%zu] must be a non-negative integer, "
                "got %s",
                what, name, i, json_is_integer(d) ? "a negative integer" : tern_json_type_name(d));
        out->shape[i] = (int64_t)json_integer_value(d);
    }
    return TERN_OK;
}

/* Describes a bad data_offsets value: "[0, real]", "an array of 3", "string". */
static const char *describe_offsets(const json_t *v, char *buf, size_t cap)
{
    if (!json_is_array(v)) return tern_json_type_name(v);
    if (json_array_size(v) != 2) {
        snprintf(buf, cap, "an array of %zu", json_array_size(v));
        return buf;
    }
    char part[2][32];
    for (size_t i = 0; i < 2; i++) {
        const json_t *x = json_array_get(v, i);
        if (json_is_integer(x))
            snprintf(part[i], sizeof part[i], "%lld", (long long)json_integer_value(x));
        else
            snprintf(part[i], sizeof part[i], "%s", tern_json_type_name(x));
    }
    snprintf(buf, cap, "[%s, %s]", part[0], part[1]);
    return buf;
}

static enum tern_status parse_offsets(const char *what, const char *name, const json_t *e,
                                      uint64_t data_len, struct tern_st_entry *out)
{
    const json_t *v = json_object_get(e, "data_offsets");
    if (!v)
        return tern_io_error(TERN_E_FORMAT, "%s: tensor '%s' has no 'data_offsets'", what, name);
    const json_t *b = json_array_get(v, 0), *en = json_array_get(v, 1);
    char buf[96];
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(b) ||
        !json_is_integer(en) || json_integer_value(b) < 0 || json_integer_value(en) < 0)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: tensor '%s': 'data_offsets' must be [begin, end] of two "
                             "non-negative integers, got %s",
                             what, name, describe_offsets(v, buf, sizeof buf));
    out->begin = (uint64_t)json_integer_value(b);
    out->end = (uint64_t)json_integer_value(en);
    if (out->begin > out->end)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: tensor '%s' has data_offsets [%llu, %llu] with begin > end", what,
                             name, (unsigned long long)out->begin, (unsigned long long)out->end);
    if (out->end > data_len)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: tensor '%s' has data_offsets [%llu, %llu] past the end of the "
                             "data section (%llu bytes)",
                             what, name, (unsigned long long)out->begin,
                             (unsigned long long)out->end, (unsigned long long)data_len);
    return TERN_OK;
}

/* Checks numel * dtype size == end - begin without overflowing. */
static enum tern_status check_size(const char *what, const char *name, const char *dt_str,
                                   const struct tern_st_entry *e)
{
    uint64_t bytes = tern_dtype_size(e->dtype);
    bool overflow = false;
    for (int i = 0; i < e->n_dims; i++) {
        uint64_t d = (uint64_t)e->shape[i];
        if (d == 0) {
            bytes = 0;
            overflow = false;
            break;
        }
        if (bytes > UINT64_MAX / d)
            overflow = true; /* keep going: a later 0 dim wins */
        else
            bytes *= d;
    }
    char shape[128];
    tern_shape_str(e->shape, e->n_dims, shape, sizeof shape);
    if (overflow)
        return tern_io_error(TERN_E_FORMAT, "%s: tensor '%s' has shape %s whose size overflows",
                             what, name, shape);
    if (bytes != e->end - e->begin)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: tensor '%s' has dtype %s and shape %s (%llu bytes) but "
                             "data_offsets [%llu, %llu] span %llu bytes",
                             what, name, dt_str, shape, (unsigned long long)bytes,
                             (unsigned long long)e->begin, (unsigned long long)e->end,
                             (unsigned long long)(e->end - e->begin));
    return TERN_OK;
}

static enum tern_status parse_entry(const char *what, const char *name, const json_t *v,
                                    uint64_t data_len, struct tern_st_entry *out)
{
    if (!name[0]) return tern_io_error(TERN_E_FORMAT, "%s: a tensor has an empty name ''", what);
    if (!json_is_object(v))
        return tern_io_error(TERN_E_FORMAT, "%s: tensor '%s' must be an object, got %s", what, name,
                             tern_json_type_name(v));
    const char *dt_str = NULL;
    TERN_TRY(parse_dtype(what, name, v, out, &dt_str));
    TERN_TRY(parse_shape(what, name, v, out));
    TERN_TRY(parse_offsets(what, name, v, data_len, out));
    return check_size(what, name, dt_str, out);
}

static enum tern_status check_metadata(const char *what, const json_t *v)
{
    if (json_is_null(v)) return TERN_OK; /* mx.save_safetensors writes null when given none */
    if (!json_is_object(v))
        return tern_io_error(TERN_E_FORMAT, "%s: '__metadata__' must be an object, got %s", what,
                             tern_json_type_name(v));
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x)
    {
        if (!json_is_string(x))
            return tern_io_error(TERN_E_FORMAT,
                                 "%s: '__metadata__' key '%s' must be a string, got %s", what, k,
                                 tern_json_type_name(x));
    }
    return TERN_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct tern_st_entry *)a)->name, ((const struct tern_st_entry *)b)->name);
}

static int cmp_begin(const void *a, const void *b)
{
    const struct tern_st_entry *x = *(const struct tern_st_entry *const *)a;
    const struct tern_st_entry *y = *(const struct tern_st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Sorts the non-empty byte ranges by begin; each must start at or after the
 * previous one's end (empty tensors occupy no bytes and overlap nothing). */
static enum tern_status check_overlap(const char *what, const struct tern_st_header *h)
{
    const struct tern_st_entry **by_begin =
        tern_calloc(h->n_entries ? h->n_entries : 1, sizeof *by_begin);
    if (!by_begin) return TERN_E_NO_MEMORY;
    size_t n = 0;
    for (size_t i = 0; i < h->n_entries; i++)
        if (h->entries[i].end > h->entries[i].begin) by_begin[n++] = &h->entries[i];
    qsort(by_begin, n, sizeof *by_begin, cmp_begin);
    enum tern_status st = TERN_OK;
    for (size_t i = 1; i < n && st == TERN_OK; i++) {
        const struct tern_st_entry *p = by_begin[i - 1], *c = by_begin[i];
        if (c->begin < p->end)
            st = tern_io_error(TERN_E_FORMAT,
                               "%s: tensor '%s' (data_offsets [%llu, %llu]) overlaps tensor '%s' "
                               "(data_offsets [%llu, %llu])",
                               what, c->name, (unsigned long long)c->begin,
                               (unsigned long long)c->end, p->name, (unsigned long long)p->begin,
                               (unsigned long long)p->end);
    }
    tern_free(by_begin);
    return st;
}

static enum tern_status parse_entries(const char *what, const json_t *root, uint64_t data_len,
                                      struct tern_st_header *out)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            TERN_TRY(check_metadata(what, v));
            continue;
        }
        struct tern_st_entry *e = &out->entries[out->n_entries];
        memset(e, 0, sizeof *e);
        TERN_TRY(parse_entry(what, key, v, data_len, e));
        e->name = tern_strdup(key);
        if (!e->name) return TERN_E_NO_MEMORY;
        out->n_entries++;
    }
    return TERN_OK;
}

enum tern_status tern_st_header_parse(const char *json, size_t json_len, uint64_t data_len,
                                      const char *what, struct tern_st_header *out)
{
    memset(out, 0, sizeof *out);
    json_error_t err;
    json_t *root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        if (json_error_code(&err) == json_error_duplicate_key)
            return tern_io_error(TERN_E_FORMAT, "%s: header names a key twice: %s", what, err.text);
        return tern_io_error(TERN_E_FORMAT, "%s: header is not valid JSON at line %d column %d: %s",
                             what, err.line, err.column, err.text);
    }
    enum tern_status st = TERN_OK;
    if (!json_is_object(root)) {
        st = tern_io_error(TERN_E_FORMAT, "%s: header must be a JSON object, got %s", what,
                           tern_json_type_name(root));
        goto fail;
    }
    size_t n = json_object_size(root);
    out->entries = tern_calloc(n ? n : 1, sizeof *out->entries);
    if (!out->entries) {
        st = TERN_E_NO_MEMORY;
        goto fail;
    }
    if ((st = parse_entries(what, root, data_len, out)) != TERN_OK) goto fail;
    qsort(out->entries, out->n_entries, sizeof *out->entries, cmp_name);
    if ((st = check_overlap(what, out)) != TERN_OK) goto fail;
    json_decref(root);
    return TERN_OK;
fail:
    json_decref(root);
    tern_st_header_deinit(out);
    return st;
}

void tern_st_header_deinit(struct tern_st_header *h)
{
    if (!h) return;
    for (size_t i = 0; i < h->n_entries; i++) tern_free(h->entries[i].name);
    tern_free(h->entries);
    h->entries = NULL;
    h->n_entries = 0;
}

const struct tern_st_entry *tern_st_header_find(const struct tern_st_header *h, const char *name)
{
    struct tern_st_entry key = {.name = (char *)name};
    return h->n_entries ? bsearch(&key, h->entries, h->n_entries, sizeof key, cmp_name) : NULL;
}

/* ---------------------------------------------------------------- image */

#define ST_MAX_HEADER_BYTES 100000000ull /* as the reference implementation */

enum tern_status tern_st_image_parse(const void *image, size_t len, const char *what,
                                     struct tern_st_header *out, size_t *data_start)
{
    memset(out, 0, sizeof *out);
    *data_start = 0;
    const uint8_t *p = image;
    if (len < 8)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: file is %zu bytes, too short for the 8-byte header length", what,
                             len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | p[i];
    if (n > ST_MAX_HEADER_BYTES)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: header length %llu exceeds the limit of %llu bytes", what,
                             (unsigned long long)n, ST_MAX_HEADER_BYTES);
    if (n > len - 8)
        return tern_io_error(TERN_E_FORMAT,
                             "%s: header length %llu runs past the end of the file (%zu bytes)",
                             what, (unsigned long long)n, len);
    TERN_TRY(tern_st_header_parse((const char *)p + 8, (size_t)n, len - 8 - n, what, out));
    *data_start = 8 + (size_t)n;
    return TERN_OK;
}

/* ---------------------------------------------------------------- file */

enum tern_status tern_st_file_open(const char *path, struct tern_st_file **out)
{
    *out = NULL;
    struct tern_st_file *f = tern_calloc(1, sizeof *f);
    if (!f) return TERN_E_NO_MEMORY;
    enum tern_status st = TERN_E_NO_MEMORY;
    if (!(f->path = tern_strdup(path))) goto fail;
    st = tern_io_map_file(path, 8, "the 8-byte header length", &f->map, &f->map_bytes);
    if (st != TERN_OK) goto fail;
    size_t start = 0;
    st = tern_st_image_parse(f->map, f->map_bytes, path, &f->header, &start);
    if (st != TERN_OK) goto fail;
    f->data = (const uint8_t *)f->map + start;
    f->data_len = f->map_bytes - start;
    *out = f;
    return TERN_OK;
fail:
    tern_st_file_close(f);
    return st;
}

void tern_st_file_close(struct tern_st_file *f)
{
    if (!f) return;
    tern_io_unmap_file(f->map, f->map_bytes);
    tern_st_header_deinit(&f->header);
    tern_free(f->path);
    tern_free(f);
}

const struct tern_st_header *tern_st_file_header(const struct tern_st_file *f)
{
    return &f->header;
}

const char *tern_st_file_path(const struct tern_st_file *f)
{
    return f->path;
}

void tern_st_entry_view(const struct tern_st_entry *e, const void *data_section,
                        struct tern_tensor_view *out)
{
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype = e->dtype;
    out->n_dims = e->n_dims;
    for (int i = 0; i < e->n_dims; i++) out->shape[i] = e->shape[i];
    out->data = data_section ? (const uint8_t *)data_section + e->begin : NULL;
    out->n_bytes = (size_t)(e->end - e->begin);
}

void tern_st_file_view(const struct tern_st_file *f, size_t i, struct tern_tensor_view *out)
{
    TERN_ASSERT(i < f->header.n_entries);
    tern_st_entry_view(&f->header.entries[i], f->data, out);
}
