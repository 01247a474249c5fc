/*
 * config.h — typed, checked reads from a Hugging Face config.json (and
 * generation_config.json) held as a jansson object.
 *
 * Every getter names the file and the key in its error ("config.json: key
 * 'hidden_size' is missing" / "... must be a positive integer, got -3").
 *
 * Depends on base/, jansson.
 */
#ifndef TERN_IO_CONFIG_H
#define TERN_IO_CONFIG_H

#include "base/base.h"

#include <jansson.h>

struct tern_json_doc {
    json_t *root; /* owned */
    char *path;   /* owned, for messages */
};

/* Loads and parses a JSON file whose top level must be an object. Parse
 * errors give the path, line and column ("path: invalid JSON at line L column
 * C: ..."). `what` names the text in messages. A document holding an integer
 * too large for int64 is parsed with every number as a real (jansson's
 * JSON_DECODE_INT_AS_REAL); the getters below read such numbers the same. */
enum tern_status tern_json_doc_load(const char *path, struct tern_json_doc *out);
enum tern_status tern_json_doc_parse(const char *text, size_t len, const char *what,
                                     struct tern_json_doc *out);
void tern_json_doc_deinit(struct tern_json_doc *d);

/* A JSON value's type as a word for messages: "object", "array", "string",
 * "integer", "real", "true", "false", "null" ("nothing" for NULL). */
const char *tern_json_type_name(const json_t *v);

/* Required keys: a missing key is TERN_E_NOT_FOUND, a mistyped one (JSON null
 * included) TERN_E_FORMAT, each with a message naming the file and the key.
 * tern_cfg_float accepts JSON integers; tern_cfg_int accepts a real only when
 * it is integral (4096.0), never 1.5. `*out` is left alone on failure;
 * strings are borrowed from the document. */
enum tern_status tern_cfg_int(const struct tern_json_doc *d, const char *key, int64_t *out);
enum tern_status tern_cfg_float(const struct tern_json_doc *d, const char *key, double *out);
enum tern_status tern_cfg_string(const struct tern_json_doc *d, const char *key, const char **out);

/* Optional keys: absent or JSON null gives the default; a wrong type is still
 * an error. */
enum tern_status tern_cfg_int_opt(const struct tern_json_doc *d, const char *key, int64_t def,
                                  int64_t *out);
enum tern_status tern_cfg_float_opt(const struct tern_json_doc *d, const char *key, double def,
                                    double *out);
enum tern_status tern_cfg_bool_opt(const struct tern_json_doc *d, const char *key, bool def,
                                   bool *out);
enum tern_status tern_cfg_string_opt(const struct tern_json_doc *d, const char *key,
                                     const char *def, const char **out);
/* The same over a sub-object (e.g. rope_scaling), whose name is used in
 * messages as "rope_scaling.factor". `obj` may be NULL or JSON null (then
 * every key takes its default); any other non-object is an error. */
enum tern_status tern_cfg_obj_float_opt(const struct tern_json_doc *d, const json_t *obj,
                                        const char *obj_name, const char *key, double def,
                                        double *out);
enum tern_status tern_cfg_obj_string_opt(const struct tern_json_doc *d, const json_t *obj,
                                         const char *obj_name, const char *key, const char *def,
                                         const char **out);
enum tern_status tern_cfg_obj_int_opt(const struct tern_json_doc *d, const json_t *obj,
                                      const char *obj_name, const char *key, int64_t def,
                                      int64_t *out);

#endif /* TERN_IO_CONFIG_H */
