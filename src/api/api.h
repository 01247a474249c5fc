/*
 * api.h — the structs behind the public handles of include/tern.h.
 */
#ifndef TERN_API_H
#define TERN_API_H

#include "model/model.h"

struct tern_model {
    char *dir; /* the snapshot directory or the GGUF file */
    struct tern_json_doc cfg; /* config.json, or the one a GGUF's metadata stands for */
    struct tern_json_doc gen_cfg;
    bool has_gen_cfg;
    struct tern_snapshot *snap;   /* a snapshot's weights, or NULL */
    struct tern_gguf_model *gguf; /* a GGUF's, or NULL */
    struct tern_wsource ws;       /* either, as the loader reads them */
    struct tern_model_core core;
    struct tern_tokenizer *tok;      /* NULL when the snapshot has none */
    struct tern_chat_template *tmpl; /* NULL when the snapshot has none */
};

#endif
