/*
 * wsource.h — a model's weights by Hugging Face tensor name, from either of
 * the two places tern reads them: a safetensors snapshot (io/safetensors.h)
 * or a GGUF file seen through its Hugging Face names (io/gguf_arch.h). The
 * model loader binds weights through this interface only, so the families
 * and the loader do not care which one it is.
 *
 * What a GGUF tensor brings that a safetensors one does not, and a view
 * says: a ggml block type (Q4_0 ... Q6_K, IQ4_*: the bytes are rows of
 * blocks, tensor/ggml_quant.h), and, for q / k of the llama architecture,
 * rows in llama.cpp's order (rope_head_dim > 0: the loader un-permutes them
 * with tern_gguf_rows_unpermute). Plain GGUF types (F32, F16, BF16, I8,
 * I32, I64) come as the tern dtype.
 *
 * Depends on io/safetensors.h, io/gguf_arch.h.
 */
#ifndef TERN_IO_WSOURCE_H
#define TERN_IO_WSOURCE_H

#include "io/gguf_arch.h"
#include "io/safetensors.h"

/* Exactly one of snap and gguf is set; both are borrowed (they must outlive
 * the source). */
struct tern_wsource {
    struct tern_snapshot *snap;
    struct tern_gguf_model *gguf;
    bool *used; /* GGUF: [gguf->n_weights], fetched with tern_wsource_get (owned) */
};

/* One tensor as the loader sees it. */
struct tern_wview {
    /* name: the Hugging Face name (borrowed); dtype: the tensor's, or U8 for a
     * ggml block type; shape: in values, Hugging Face order, outermost first
     * (a ggml [out, in] tensor has n_bytes = out * its row bytes); data: in
     * the mapping. */
    struct tern_tensor_view v;
    uint32_t ggml_type;    /* a ggml type without a tern dtype (block types), or 0 */
    int64_t rope_head_dim; /* > 0: rows in llama.cpp's q / k order, in heads of this size */
    const char *file_name; /* the name in the file (the GGUF name), borrowed */
};

enum tern_status tern_wsource_init_snapshot(struct tern_wsource *ws, struct tern_snapshot *snap);
enum tern_status tern_wsource_init_gguf(struct tern_wsource *ws, struct tern_gguf_model *gguf);
void tern_wsource_deinit(struct tern_wsource *ws);

/* The snapshot directory or the GGUF file, for messages. */
const char *tern_wsource_path(const struct tern_wsource *ws);
/* Looks a tensor up by Hugging Face name and marks it used. TERN_E_NOT_FOUND
 * when absent; the message names the path and the tensor (for a GGUF both
 * its own name and the Hugging Face one). */
enum tern_status tern_wsource_get(struct tern_wsource *ws, const char *name,
                                  struct tern_wview *out);
/* True when the tensor exists (does not mark it used). */
bool tern_wsource_has(const struct tern_wsource *ws, const char *name);
/* Tensors in the source (for a GGUF including those with no Hugging Face name). */
size_t tern_wsource_n_tensors(const struct tern_wsource *ws);
/* Names (in the file) of the tensors never fetched, NULL-terminated; the
 * caller frees the array with tern_free, not the names. *n_unused gets the
 * count. NULL when out of memory. */
const char **tern_wsource_unused(const struct tern_wsource *ws, size_t *n_unused);
/* A tensor named for a message: "'NAME'", or for a GGUF "'GGUF NAME'
 * (NAME)" when the Hugging Face name has a GGUF counterpart. */
const char *tern_wsource_label(const struct tern_wsource *ws, const char *name, char *buf,
                               size_t cap);

#endif /* TERN_IO_WSOURCE_H */
