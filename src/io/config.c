/*
 * config.c — JSON documents (config.json, generation_config.json, index
 * files) loaded with jansson, and typed getters whose errors name the file
 * and the key.
 *
 * Numbers: HF configs are written by Python's json module, so a float field
 * may hold an integer (1e-06 or 1) and an integer field may in rare files be
 * written as 4096.0. tern_cfg_float accepts JSON integers; tern_cfg_int
 * accepts reals only when they are integral and exactly representable.
 * Integers too large for int64 (tokenizer_config.json's model_max_length is
 * often 1000000000000000019884624838656) would make jansson fail; on that
 * error alone the document is parsed again with every number as a real.
 *
 * Depends on base/, jansson, io_internal.h.
 */
#include "io/config.h"
#include "io/io_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum tern_status tern_io_error(enum tern_status status, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return tern_error(status, "%s", buf);
}

const char *tern_json_type_name(const json_t *v)
{
    if (!v) return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real";
    case JSON_TRUE:
        return "true";
    case JSON_FALSE:
        return "false";
    case JSON_NULL:
        return "null";
    }
    return "unknown";
}

/* Describes a found value for "got ...": numbers by value, others by type. */
static const char *describe(const json_t *v, char *buf, size_t cap)
{
    if (json_is_integer(v))
        snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) {
        /* shortest of %.15g / %.17g that reads back exactly: 0.1, not 0.10000000000000001 */
        snprintf(buf, cap, "%.15g", json_real_value(v));
        if (strtod(buf, NULL) != json_real_value(v))
            snprintf(buf, cap, "%.17g", json_real_value(v));
    } else
        snprintf(buf, cap, "%s", tern_json_type_name(v));
    return buf;
}

enum tern_status tern_json_doc_parse(const char *text, size_t len, const char *what,
                                     struct tern_json_doc *out)
{
    memset(out, 0, sizeof *out);
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    if (!root && json_error_code(&err) == json_error_numeric_overflow)
        root = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &err);
    if (!root)
        return tern_io_error(TERN_E_FORMAT, "%s: invalid JSON at line %d column %d: %s", what,
                             err.line, err.column, err.text);
    if (!json_is_object(root)) {
        enum tern_status st =
            tern_io_error(TERN_E_FORMAT, "%s: top level must be a JSON object, got %s", what,
                          tern_json_type_name(root));
        json_decref(root);
        return st;
    }
    out->path = tern_strdup(what);
    if (!out->path) {
        json_decref(root);
        return TERN_E_NO_MEMORY;
    }
    out->root = root;
    return TERN_OK;
}

enum tern_status tern_json_doc_load(const char *path, struct tern_json_doc *out)
{
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    TERN_TRY(tern_file_read(path, &text, &len));
    enum tern_status st = tern_json_doc_parse(text, len, path, out);
    tern_free(text);
    return st;
}

void tern_json_doc_deinit(struct tern_json_doc *d)
{
    if (!d) return;
    json_decref(d->root);
    tern_free(d->path);
    d->root = NULL;
    d->path = NULL;
}

/* ---------------------------------------------------------------- getters */

/* The value of `key` in `obj` (NULL when absent). `full` receives the name
 * used in messages: "key" or "obj_name.key". */
static const json_t *lookup(const json_t *obj, const char *obj_name, const char *key, char *full,
                            size_t cap)
{
    if (obj_name)
        snprintf(full, cap, "%s.%s", obj_name, key);
    else
        snprintf(full, cap, "%s", key);
    return json_object_get(obj, key);
}

static enum tern_status missing(const struct tern_json_doc *d, const char *full)
{
    return tern_io_error(TERN_E_NOT_FOUND, "%s: key '%s' is missing", d->path, full);
}

static enum tern_status mistyped(const struct tern_json_doc *d, const char *full,
                                 const char *expected, const json_t *v)
{
    char buf[64];
    return tern_io_error(TERN_E_FORMAT, "%s: key '%s' must be %s, got %s", d->path, full, expected,
                         describe(v, buf, sizeof buf));
}

static enum tern_status as_int(const struct tern_json_doc *d, const char *full, const json_t *v,
                               int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return TERN_OK;
    }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        /* integral and exactly representable: |x| <= 2^53 */
        if (x == floor(x) && fabs(x) <= 9007199254740992.0) {
            *out = (int64_t)x;
            return TERN_OK;
        }
    }
    return mistyped(d, full, "an integer", v);
}

static enum tern_status as_float(const struct tern_json_doc *d, const char *full, const json_t *v,
                                 double *out)
{
    if (!json_is_number(v)) return mistyped(d, full, "a number", v);
    *out = json_number_value(v);
    return TERN_OK;
}

static enum tern_status as_string(const struct tern_json_doc *d, const char *full, const json_t *v,
                                  const char **out)
{
    if (!json_is_string(v)) return mistyped(d, full, "a string", v);
    *out = json_string_value(v);
    return TERN_OK;
}

enum tern_status tern_cfg_int(const struct tern_json_doc *d, const char *key, int64_t *out)
{
    char full[256];
    const json_t *v = lookup(d->root, NULL, key, full, sizeof full);
    return v ? as_int(d, full, v, out) : missing(d, full);
}

enum tern_status tern_cfg_float(const struct tern_json_doc *d, const char *key, double *out)
{
    char full[256];
    const json_t *v = lookup(d->root, NULL, key, full, sizeof full);
    return v ? as_float(d, full, v, out) : missing(d, full);
}

enum tern_status tern_cfg_string(const struct tern_json_doc *d, const char *key, const char **out)
{
    char full[256];
    const json_t *v = lookup(d->root, NULL, key, full, sizeof full);
    return v ? as_string(d, full, v, out) : missing(d, full);
}

/* The sub-object for the *_obj_* getters: NULL or JSON null means "absent"
 * (every key takes its default); anything but an object is an error. */
static enum tern_status check_obj(const struct tern_json_doc *d, const json_t *obj,
                                  const char *obj_name, const json_t **use)
{
    *use = NULL;
    if (!obj || json_is_null(obj)) return TERN_OK;
    if (!json_is_object(obj)) {
        char buf[64];
        return tern_io_error(TERN_E_FORMAT, "%s: key '%s' must be an object, got %s", d->path,
                             obj_name, describe(obj, buf, sizeof buf));
    }
    *use = obj;
    return TERN_OK;
}

enum tern_status tern_cfg_obj_int_opt(const struct tern_json_doc *d, const json_t *obj,
                                      const char *obj_name, const char *key, int64_t def,
                                      int64_t *out)
{
    char full[256];
    TERN_TRY(check_obj(d, obj, obj_name, &obj));
    const json_t *v = obj ? lookup(obj, obj_name, key, full, sizeof full) : NULL;
    *out = def;
    return v && !json_is_null(v) ? as_int(d, full, v, out) : TERN_OK;
}

enum tern_status tern_cfg_obj_float_opt(const struct tern_json_doc *d, const json_t *obj,
                                        const char *obj_name, const char *key, double def,
                                        double *out)
{
    char full[256];
    TERN_TRY(check_obj(d, obj, obj_name, &obj));
    const json_t *v = obj ? lookup(obj, obj_name, key, full, sizeof full) : NULL;
    *out = def;
    return v && !json_is_null(v) ? as_float(d, full, v, out) : TERN_OK;
}

enum tern_status tern_cfg_obj_string_opt(const struct tern_json_doc *d, const json_t *obj,
                                         const char *obj_name, const char *key, const char *def,
                                         const char **out)
{
    char full[256];
    TERN_TRY(check_obj(d, obj, obj_name, &obj));
    const json_t *v = obj ? lookup(obj, obj_name, key, full, sizeof full) : NULL;
    *out = def;
    return v && !json_is_null(v) ? as_string(d, full, v, out) : TERN_OK;
}

enum tern_status tern_cfg_int_opt(const struct tern_json_doc *d, const char *key, int64_t def,
                                  int64_t *out)
{
    char full[256];
    const json_t *v = lookup(d->root, NULL, key, full, sizeof full);
    *out = def;
    return v && !json_is_null(v) ? as_int(d, full, v, out) : TERN_OK;
}

enum tern_status tern_cfg_float_opt(const struct tern_json_doc *d, const char *key, double def,
                                    double *out)
{
    char full[256];
    const json_t *v = lookup(d->root, NULL, key, full, sizeof full);
    *out = def;
    return v && !json_is_null(v) ? as_float(d, full, v, out) : TERN_OK;
}

enum tern_status tern_cfg_string_opt(const struct tern_json_doc *d, const char *key,
                                     const char *def, const char **out)
{
    char full[256];
    const json_t *v = lookup(d->root, NULL, key, full, sizeof full);
    *out = def;
    return v && !json_is_null(v) ? as_string(d, full, v, out) : TERN_OK;
}

enum tern_status tern_cfg_bool_opt(const struct tern_json_doc *d, const char *key, bool def,
                                   bool *out)
{
    char full[256];
    const json_t *v = lookup(d->root, NULL, key, full, sizeof full);
    *out = def;
    if (!v || json_is_null(v)) return TERN_OK;
    if (!json_is_boolean(v)) return mistyped(d, full, "a boolean", v);
    *out = json_is_true(v);
    return TERN_OK;
}
