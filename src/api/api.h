/*
 * api.h — the structs behind the public handles of include/tern.h.
 */
#ifndef TERN_API_H
#define TERN_API_H

#include "model/model.h"

struct tern_model {
    char *dir;
    struct tern_json_doc cfg;
    struct tern_json_doc gen_cfg;
    bool has_gen_cfg;
    struct tern_snapshot *snap;
    struct tern_model_core core;
    struct tern_tokenizer *tok;      /* NULL when the snapshot has none */
    struct tern_chat_template *tmpl; /* NULL when the snapshot has none */
};

#endif
