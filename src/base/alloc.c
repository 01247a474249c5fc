/*
 * alloc.c — checked allocation, growable arrays and strings, whole-file reads,
 * the monotonic clock.
 */
#include "base/base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

void *tern_malloc(size_t n_bytes)
{
    void *p = malloc(n_bytes ? n_bytes : 1);
    if (!p) tern_error(TERN_E_NO_MEMORY, "out of memory allocating %zu bytes", n_bytes);
    return p;
}

void *tern_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        tern_error(TERN_E_NO_MEMORY, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) tern_error(TERN_E_NO_MEMORY, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *tern_realloc(void *p, size_t n_bytes)
{
    void *q = realloc(p, n_bytes ? n_bytes : 1);
    if (!q) tern_error(TERN_E_NO_MEMORY, "out of memory reallocating to %zu bytes", n_bytes);
    return q;
}

void *tern_realloc_array(void *p, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        tern_error(TERN_E_NO_MEMORY, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    return tern_realloc(p, n * size);
}

void tern_free(void *p)
{
    free(p);
}

char *tern_strndup(const char *s, size_t n)
{
    char *d = tern_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *tern_strdup(const char *s)
{
    return tern_strndup(s, strlen(s));
}

enum tern_status tern_grow(void **arr, size_t *cap, size_t need, size_t elem_size)
{
    if (need <= *cap) return TERN_OK;
    size_t new_cap = *cap ? *cap : 8;
    while (new_cap < need) {
        if (new_cap > SIZE_MAX / 2) return tern_error(TERN_E_NO_MEMORY, "array too large");
        new_cap *= 2;
    }
    void *p = tern_realloc_array(*arr, new_cap, elem_size);
    if (!p) return TERN_E_NO_MEMORY;
    *arr = p;
    *cap = new_cap;
    return TERN_OK;
}

enum tern_status tern_str_reserve(struct tern_str *s, size_t cap)
{
    if (cap + 1 <= s->cap) return TERN_OK;
    void *p = s->data;
    size_t c = s->cap;
    TERN_TRY(tern_grow(&p, &c, cap + 1, 1));
    s->data = p;
    s->cap = c;
    s->data[s->len] = '\0';
    return TERN_OK;
}

enum tern_status tern_str_append(struct tern_str *s, const char *data, size_t len)
{
    TERN_TRY(tern_str_reserve(s, s->len + len));
    if (len) memcpy(s->data + s->len, data, len);
    s->len += len;
    s->data[s->len] = '\0';
    return TERN_OK;
}

enum tern_status tern_str_appendz(struct tern_str *s, const char *z)
{
    return tern_str_append(s, z, strlen(z));
}

enum tern_status tern_str_appendc(struct tern_str *s, char c)
{
    return tern_str_append(s, &c, 1);
}

enum tern_status tern_str_appendf(struct tern_str *s, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        return tern_error(TERN_E_INTERNAL, "bad format string");
    }
    enum tern_status st = tern_str_reserve(s, s->len + (size_t)n);
    if (st == TERN_OK) {
        vsnprintf(s->data + s->len, (size_t)n + 1, fmt, ap2);
        s->len += (size_t)n;
    }
    va_end(ap2);
    return st;
}

void tern_str_clear(struct tern_str *s)
{
    s->len = 0;
    if (s->data) s->data[0] = '\0';
}

void tern_str_deinit(struct tern_str *s)
{
    tern_free(s->data);
    s->data = NULL;
    s->len = s->cap = 0;
}

char *tern_str_take(struct tern_str *s)
{
    char *d = s->data;
    if (!d) d = tern_strdup("");
    s->data = NULL;
    s->len = s->cap = 0;
    return d;
}

enum tern_status tern_file_read(const char *path, char **out, size_t *out_len)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return tern_error(TERN_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct tern_str s = {0};
    char buf[65536];
    size_t n;
    enum tern_status st = tern_str_reserve(&s, 0);
    while (st == TERN_OK && (n = fread(buf, 1, sizeof buf, f)) > 0) st = tern_str_append(&s, buf, n);
    if (st == TERN_OK && ferror(f)) st = tern_error(TERN_E_IO, "%s: read failed", path);
    fclose(f);
    if (st != TERN_OK) {
        tern_str_deinit(&s);
        return st;
    }
    if (out_len) *out_len = s.len;
    *out = tern_str_take(&s);
    return TERN_OK;
}

bool tern_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *tern_path_join(const char *dir, const char *name)
{
    struct tern_str s = {0};
    size_t dl = strlen(dir);
    if (tern_str_append(&s, dir, dl) != TERN_OK) return NULL;
    if (dl && dir[dl - 1] != '/' && tern_str_appendc(&s, '/') != TERN_OK) goto fail;
    if (tern_str_appendz(&s, name) != TERN_OK) goto fail;
    return tern_str_take(&s);
fail:
    tern_str_deinit(&s);
    return NULL;
}

uint64_t tern_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
