/*
 * wsource.c — the weight source (wsource.h) over a safetensors snapshot or
 * a GGUF model view. The snapshot keeps its own marks of the tensors used;
 * for a GGUF they are kept here, one per Hugging Face name.
 *
 * Depends on io/safetensors.h, io/gguf_arch.h, tensor/ggml_quant.h.
 */
#include "io/wsource.h"
#include "io/io_internal.h"

#include <stdio.h>
#include <string.h>

enum tern_status tern_wsource_init_snapshot(struct tern_wsource *ws, struct tern_snapshot *snap)
{
    memset(ws, 0, sizeof *ws);
    ws->snap = snap;
    return TERN_OK;
}

enum tern_status tern_wsource_init_gguf(struct tern_wsource *ws, struct tern_gguf_model *gguf)
{
    memset(ws, 0, sizeof *ws);
    ws->gguf = gguf;
    ws->used = tern_calloc(gguf->n_weights ? gguf->n_weights : 1, sizeof *ws->used);
    return ws->used ? TERN_OK : TERN_E_NO_MEMORY;
}

void tern_wsource_deinit(struct tern_wsource *ws)
{
    tern_free(ws->used);
    memset(ws, 0, sizeof *ws);
}

const char *tern_wsource_path(const struct tern_wsource *ws)
{
    return ws->snap ? tern_snapshot_dir(ws->snap) : tern_gguf_path(ws->gguf->g);
}

const char *tern_wsource_label(const struct tern_wsource *ws, const char *name, char *buf,
                               size_t cap)
{
    char gname[256];
    if (ws->gguf && tern_gguf_name_from_hf(name, gname, sizeof gname))
        snprintf(buf, cap, "'%s' (%s)", gname, name);
    else
        snprintf(buf, cap, "'%s'", name);
    return buf;
}

/* A GGUF tensor as a view: plain types as their dtype, block types as U8
 * bytes with the ggml type beside them. */
static void gguf_view(const struct tern_gguf_weight *w, struct tern_wview *out)
{
    const struct tern_gguf_tensor *t = w->t;
    memset(out, 0, sizeof *out);
    out->v.name = w->hf_name;
    out->v.n_dims = w->n_dims;
    memcpy(out->v.shape, w->shape, sizeof(int64_t) * (size_t)w->n_dims);
    out->v.data = t->data;
    out->v.n_bytes = (size_t)t->n_bytes;
    if (!tern_ggml_type_dtype(t->type, &out->v.dtype)) {
        out->v.dtype = TERN_DTYPE_U8;
        out->ggml_type = t->type;
    }
    out->rope_head_dim = w->rope_head_dim;
    out->file_name = t->name;
}

enum tern_status tern_wsource_get(struct tern_wsource *ws, const char *name, struct tern_wview *out)
{
    if (ws->snap) {
        memset(out, 0, sizeof *out);
        TERN_TRY(tern_snapshot_get(ws->snap, name, &out->v));
        out->file_name = out->v.name;
        return TERN_OK;
    }
    const struct tern_gguf_weight *w = tern_gguf_model_find(ws->gguf, name);
    if (!w) {
        char label[512];
        memset(out, 0, sizeof *out);
        return tern_io_error(TERN_E_NOT_FOUND, "%s: tensor %s not found", tern_wsource_path(ws),
                             tern_wsource_label(ws, name, label, sizeof label));
    }
    ws->used[w - ws->gguf->weights] = true;
    gguf_view(w, out);
    return TERN_OK;
}

bool tern_wsource_has(const struct tern_wsource *ws, const char *name)
{
    if (ws->snap) return tern_snapshot_has(ws->snap, name);
    return tern_gguf_model_find(ws->gguf, name) != NULL;
}

size_t tern_wsource_n_tensors(const struct tern_wsource *ws)
{
    if (ws->snap) return tern_snapshot_n_tensors(ws->snap);
    return ws->gguf->n_weights + ws->gguf->n_unmapped;
}

const char **tern_wsource_unused(const struct tern_wsource *ws, size_t *n_unused)
{
    if (ws->snap) return tern_snapshot_unused(ws->snap, n_unused);
    const struct tern_gguf_model *g = ws->gguf;
    if (n_unused) *n_unused = 0;
    const char **names = tern_calloc(g->n_weights + g->n_unmapped + 1, sizeof *names);
    if (!names) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < g->n_weights; i++)
        if (!ws->used[i]) names[n++] = g->weights[i].t->name;
    for (size_t i = 0; i < g->n_unmapped; i++) names[n++] = g->unmapped[i]->name;
    if (n_unused) *n_unused = n;
    return names;
}
