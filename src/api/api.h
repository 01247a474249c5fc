/*
 * api.h — the structs behind the public handles of include/tern.h.
 */
#ifndef TERN_API_H
#define TERN_API_H

#include "model/model.h"
#include "tern.h"

/* A sentence-transformers embedding model's settings (embed_cfg.c). */
struct tern_embed_cfg {
    bool ok;        /* an embedding model tern runs */
    char *reason;   /* why not, when !ok (NULL: no reason recorded) */
    enum tern_pooling pooling;
    bool normalize, include_prompt;
    int32_t dim;
    int32_t n_prompts;
    char **names, **texts; /* [n_prompts] */
    char *default_prompt;  /* or NULL */
};

/* Reads modules.json and what it names in a snapshot directory. Only out of
 * memory is an error: anything else leaves c->ok false with c->reason. */
enum tern_status tern_embed_cfg_load(const char *dir, int32_t hidden, struct tern_embed_cfg *c);
void tern_embed_cfg_free(struct tern_embed_cfg *c);

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
    struct tern_embed_cfg embed;     /* sentence-transformers pooling, when an embedding model */
};

#endif
