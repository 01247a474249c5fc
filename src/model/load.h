/*
 * load.h — the model loader's state and the helpers its two files share:
 * load.c binds the model-level tensors and each layer's attention, norms
 * and MLP; load_moe.c binds the experts of mixture-of-experts layers in
 * their three published layouts. Private to src/model. Depends on model.h,
 * arch.h and io/wsource.h.
 */
#ifndef TERN_MODEL_LOAD_H
#define TERN_MODEL_LOAD_H

#include "io/wsource.h"
#include "model/arch.h"

/* Where bind() puts the next tensor when fusing: a buffer and a running
 * offset into it. */
struct slot {
    struct tern_buf *buf;
    size_t off;
};

/* The four tensor kinds of a linear, in the slots of a fused group. */
enum { SLOT_W, SLOT_S, SLOT_B, SLOT_BIAS, SLOT_N };

struct loader {
    struct tern_backend *be;
    struct tern_wsource *ws;
    const struct tern_json_doc *cfg;
    const struct tern_family *fam;
    const struct tern_hparams *hp;
    struct tern_weights *w;
    const json_t *quant; /* config "quantization" object or NULL */
    const char *prefix;  /* the text model's tensor prefix, e.g. "model." */
    const char *head_prefix; /* where lm_head lives: "" or "language_model." */
    bool progress;
    size_t n_done, n_total;
    uint64_t t0;
    bool fuse_ok;      /* device backend: fuse q/k/v and gate/up */
    bool dry;          /* tern_weights_check: tensors found and checked, nothing bound */
    struct slot *fuse; /* non-NULL while binding a fused group (SLOT_N slots) */
    struct slot *slot; /* where bind() uploads the tensor it is binding, or NULL */
    int norm_dtype;    /* the first norm's dtype in the file (the model's dtype), or -1 */
    bool ggml_bf16;    /* dequantize every ggml block type to BF16 (TERN_GGML_BF16) */
    /* ggml tensors dequantized to BF16 at load: count, bytes in the file, bytes bound */
    size_t n_dequant;
    uint64_t dequant_from, dequant_to;
    int64_t ggml_params[64]; /* parameters bound per ggml block type (ids < 64) */
    char label[512];         /* tensor names for messages (tern_wsource_label) */
};

/* In a dtype mask: ggml block types are welcome too (linear weights). */
#define GGML_OK (1u << 31)
#define FLOATS ((1u << TERN_DTYPE_F32) | (1u << TERN_DTYPE_F16) | (1u << TERN_DTYPE_BF16))
/* Scales and biases take the dtype of the weights they came from: mlx-lm keeps
 * a float32 model's in float32. */
#define SCALE_DTYPES FLOATS

/* load.c's helpers, for load_moe.c: a tensor's name for a message, the
 * source's path, a buffer made at load (freed with the weights), one tensor
 * done (progress), a canonical tensor's full name, a tensor fetched and
 * checked against a shape and a dtype mask, a fetched tensor bound as a
 * tensor of the given shape (the same bytes), a norm weight, a float
 * vector, a module's quantization settings, a canonical linear. */
const char *tern_load_label(struct loader *L, const char *name);
const char *tern_load_path(const struct loader *L);
enum tern_status tern_load_track(struct loader *L, struct tern_buf *b);
void tern_load_progress(struct loader *L);
const char *tern_load_name(const struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                           const char *suffix, char *buf, size_t cap);
enum tern_status tern_load_fetch(struct loader *L, const char *name, int n_dims,
                                 const int64_t *shape, unsigned dtypes, struct tern_wview *w);
enum tern_status tern_load_view(struct loader *L, struct tern_wview *w, int n_dims,
                                const int64_t *shape, struct tern_dtensor *out);
enum tern_status tern_load_norm(struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                                int64_t n, struct tern_dtensor *out);
enum tern_status tern_load_vec(struct loader *L, const char *name, int64_t n,
                               struct tern_dtensor *out);
enum tern_status tern_load_quant_for(struct loader *L, const char *module,
                                     struct tern_quant_cfg *q);
enum tern_status tern_load_kind(struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                                int64_t out, int64_t in, bool has_bias, struct tern_linear *lin);

/* load_moe.c: layer i's router, its scales and norms, the shared expert's
 * gate, and the experts (struct tern_experts), from whichever layout the
 * source has. */
enum tern_status tern_load_moe_layer(struct loader *L, int32_t i, const struct tern_layer_plan *p,
                                     struct tern_layer *ly);

#endif /* TERN_MODEL_LOAD_H */
