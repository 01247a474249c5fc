/*
 * load.c — binding a model's tensors to the weights the layer plans need
 * (the experts of MoE layers: load_moe.c, through load.h's helpers).
 *
 * The weights come from a weight source (io/wsource.h): a safetensors
 * snapshot or a GGUF file, both asked by Hugging Face name. The family names
 * each canonical tensor (arch.h); the loader finds the text model's prefix
 * ("model.", or a multimodal wrapper's "model.language_model." /
 * "language_model.model.", or none: a base model saved under its own names,
 * as Qwen3-Embedding is, whose missing head leaves lm_head unbound), then binds exactly the tensors each layer's plan
 * uses, checking presence, dtype and shape against the config before
 * anything runs; the error names the tensor, what the config expects, and
 * what the file holds. Dense weights may be F32/F16/BF16; MLX affine
 * quantized linears (weight U32 + scales + biases) are recognised by their
 * `.scales` tensor and checked against the `quantization` block of
 * config.json and its per-module overrides.
 *
 * A GGUF's linears may hold ggml block types (Q4_0 ... Q6_K, IQ4_*). Where
 * the backend takes the type (tern_backend_ggml_ok: the CPU takes every
 * type tensor/ggml_quant.c dequantizes) the blocks bind as they are (a ggml
 * tern_linear, backend.h); elsewhere they are dequantized to BF16 here, at
 * load, and the memory that costs is logged (TERN_GGML_BF16=1 does that on
 * every backend, which is how the CPU tests that path). q / k of llama
 * GGUFs are in llama.cpp's row order: their rows are copied back into
 * Hugging Face order into a buffer the model owns (a row copy, right for
 * every type since a row holds whole blocks).
 *
 * A snapshot that stores q|k|v or gate|up as one tensor (Phi 3's qkv_proj
 * and gate_up_proj, GLM 4's gate_up_proj: the family names TT_QKV /
 * TT_GATE_UP) binds it as the layer's fused linear, dense or quantized, and
 * its parts as views of its rows; the forward then issues one matmul on
 * every backend. A non-gated MLP (Starcoder 2) binds up and down only.
 *
 * Backend buffers are made per tensor (the CPU backend uses the mmapped
 * bytes in place; CUDA copies them to the device), except:
 *   - on device backends q/k/v and gate/up of a layer are fused when they
 *     agree in format: their pieces are uploaded into row slices of one
 *     buffer per tensor kind (layer.qkv_proj, layer.gate_up_proj), so the
 *     forward issues one matmul for each; q_proj etc. stay valid as views of
 *     the slices. A k_eq_v layer's fused weight is q | k | k (its values are
 *     the raw keys). The CPU keeps separate linears (its results stay bitwise
 *     those of the unfused model, and its buffers are the mapped file).
 *   - norm weights of a family whose norms apply (1 + w) are stored as
 *     float32 1 + w (the float32 sum transformers computes), so every norm
 *     op multiplies by its weight.
 */
#include "io/wsource.h"
#include "model/load.h"
#include "tensor/ggml_quant.h"
#include "tensor/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor's name for a message (the GGUF name too, for a GGUF). */
static const char *lbl(struct loader *L, const char *name)
{
    return tern_wsource_label(L->ws, name, L->label, sizeof L->label);
}

static const char *src_path(const struct loader *L)
{
    return tern_wsource_path(L->ws);
}

static enum tern_status track_buf(struct tern_weights *w, struct tern_buf *b)
{
    void *arr = w->bufs;
    TERN_TRY(tern_grow(&arr, &w->cap_bufs, w->n_bufs + 1, sizeof *w->bufs));
    w->bufs = arr;
    w->bufs[w->n_bufs++] = b;
    return TERN_OK;
}

static void show_progress(struct loader *L)
{
    L->n_done++;
    if (!L->progress) return;
    if (L->n_done == L->n_total || L->n_done % 16 == 0) {
        double secs = (double)(tern_now_ns() - L->t0) / 1e9;
        fprintf(stderr, "\rloading weights: %zu/%zu tensors, %.2f GB, %.1f s", L->n_done,
                L->n_total, (double)L->w->n_bytes / 1e9, secs);
        if (L->n_done == L->n_total) fputc('\n', stderr);
    }
}

/* The full name of canonical tensor `kind` of layer `layer` (-1: model
 * level), with `suffix` appended (".weight", ".scales", "" ...). */
static const char *tensor_name(const struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                               const char *suffix, char *buf, size_t cap)
{
    char base[160];
    const char *tmpl = L->fam->names[kind];
    if (!tmpl) tmpl = "?";
    if (layer >= 0) snprintf(base, sizeof base, tmpl, layer);
    else snprintf(base, sizeof base, "%s", tmpl);
    snprintf(buf, cap, "%s%s%s", kind == TT_LM_HEAD ? L->head_prefix : L->prefix, base, suffix);
    return buf;
}

/* In a dtype mask: ggml block types are welcome too (linear weights). */

/* Fetches `name` and checks its shape; `dtypes` is a mask of allowed dtypes
 * (and GGML_OK). */
static enum tern_status fetch(struct loader *L, const char *name, int n_dims,
                              const int64_t *shape, unsigned dtypes, struct tern_wview *w)
{
    TERN_TRY(tern_wsource_get(L->ws, name, w));
    const struct tern_tensor_view *v = &w->v;
    char a[96], b[96];
    if (w->ggml_type) {
        const struct tern_ggml_traits *t = tern_ggml_type_traits(w->ggml_type);
        if (!(dtypes & GGML_OK))
            return tern_error(TERN_E_FORMAT,
                              "%s: tensor %s has ggml type %s, which this layer cannot use",
                              src_path(L), lbl(L, name), tern_ggml_type_name(w->ggml_type));
        if (!t || !t->dequant || t->block < 2)
            return tern_error(TERN_E_UNSUPPORTED,
                              "%s: tensor %s has ggml type %s, which tern cannot dequantize",
                              src_path(L), lbl(L, name), tern_ggml_type_name(w->ggml_type));
    } else if (!(dtypes & (1u << v->dtype))) {
        return tern_error(TERN_E_FORMAT, "%s: tensor %s has dtype %s, which this layer cannot use",
                          src_path(L), lbl(L, name), tern_dtype_name(v->dtype));
    }
    bool same = v->n_dims == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = v->shape[i] == shape[i];
    if (!same)
        return tern_error(TERN_E_FORMAT, "%s: tensor %s has shape %s, config expects %s",
                          src_path(L), lbl(L, name), tern_shape_str(v->shape, v->n_dims, a, 96),
                          tern_shape_str(shape, n_dims, b, 96));
    return TERN_OK;
}

/* Whether a ggml block type binds as BF16 (the backend does not take it). */
static bool ggml_to_bf16(const struct loader *L, uint32_t ggml_type)
{
    return ggml_type && (L->ggml_bf16 || !L->be || !tern_backend_ggml_ok(L->be, ggml_type));
}

/* The bytes a fetched view binds as, where they differ from the file's: q /
 * k rows back in Hugging Face order, and a ggml block type the backend does
 * not take dequantized to BF16. w is updated (data, n_bytes, dtype,
 * ggml_type); *tmp holds the new bytes (tern_free) or NULL. */
static enum tern_status prepare(struct loader *L, struct tern_wview *w, void **tmp)
{
    struct tern_tensor_view *v = &w->v;
    int64_t rows = v->n_dims ? v->shape[0] : 1;
    *tmp = NULL;
    if (w->rope_head_dim > 0 && rows > 0) {
        if (!(*tmp = tern_malloc(v->n_bytes))) return TERN_E_NO_MEMORY;
        tern_gguf_rows_unpermute(v->data, *tmp, rows, v->n_bytes / (size_t)rows, w->rope_head_dim);
        v->data = *tmp;
    }
    if (!ggml_to_bf16(L, w->ggml_type) || rows <= 0) return TERN_OK;
    int64_t in = v->shape[v->n_dims - 1];
    size_t row_bytes = v->n_bytes / (size_t)rows, out_bytes = (size_t)(rows * in) * 2;
    uint16_t *bf = tern_malloc(out_bytes);
    float *row = tern_malloc((size_t)in * sizeof *row);
    if (!bf || !row) {
        tern_free(bf);
        tern_free(row);
        return TERN_E_NO_MEMORY;
    }
    for (int64_t r = 0; r < rows; r++) {
        tern_ggml_dequant_row(w->ggml_type, (const char *)v->data + (size_t)r * row_bytes, row, in);
        for (int64_t i = 0; i < in; i++) bf[r * in + i] = tern_f32_to_bf16(row[i]);
    }
    tern_free(row);
    L->n_dequant++;
    L->dequant_from += v->n_bytes;
    L->dequant_to += out_bytes;
    tern_free(*tmp);
    *tmp = bf;
    v->data = bf;
    v->n_bytes = out_bytes;
    v->dtype = TERN_DTYPE_BF16;
    w->ggml_type = 0;
    return TERN_OK;
}

/* Makes out a buffer holding w's bytes (or a slice of the fused group's),
 * after prepare(); a ggml weight binds as [rows, row bytes] U8. */
static enum tern_status bind_view(struct loader *L, struct tern_wview *w, int n_dims,
                                  const int64_t *shape, struct tern_dtensor *out)
{
    void *tmp;
    if (L->dry) { /* checked by fetch(): only the view's description */
        memset(out, 0, sizeof *out);
        out->dtype = w->v.dtype;
        out->n_dims = n_dims;
        memcpy(out->shape, shape, sizeof(int64_t) * (size_t)n_dims);
        L->w->n_bytes += (int64_t)w->v.n_bytes;
        return TERN_OK;
    }
    TERN_TRY(prepare(L, w, &tmp));
    const struct tern_tensor_view *v = &w->v;
    memset(out, 0, sizeof *out);
    out->dtype = v->dtype;
    out->n_dims = n_dims;
    memcpy(out->shape, shape, sizeof(int64_t) * (size_t)n_dims);
    if (w->ggml_type) out->shape[n_dims - 1] = (int64_t)(v->n_bytes / (size_t)shape[0]);
    enum tern_status st = TERN_OK;
    if (L->slot) { /* a piece of a fused linear: rows appended to the group's buffer */
        out->buf = L->slot->buf;
        out->offset = L->slot->off;
        st = L->be->ops->upload(L->be, out, v->data, v->n_bytes);
        L->slot->off += v->n_bytes;
    } else {
        /* In place where the backend can; a copy of bytes made here, or of a
         * misaligned tensor (safetensors does not promise alignment). */
        bool in_place = !tmp && (uintptr_t)v->data % tern_dtype_size(v->dtype) == 0;
        st = in_place ? L->be->ops->buf_from_host(L->be, v->data, v->n_bytes, &out->buf)
                      : L->be->ops->buf_alloc(L->be, v->n_bytes, &out->buf);
        if (st == TERN_OK && (st = track_buf(L->w, out->buf)) != TERN_OK) {
            L->be->ops->buf_free(L->be, out->buf);
            out->buf = NULL;
        }
        if (st == TERN_OK && !in_place) st = L->be->ops->upload(L->be, out, v->data, v->n_bytes);
    }
    tern_free(tmp);
    TERN_TRY(st);
    L->w->n_bytes += (int64_t)v->n_bytes;
    show_progress(L);
    return TERN_OK;
}

static enum tern_status bind(struct loader *L, const char *name, int n_dims, const int64_t *shape,
                             unsigned dtypes, struct tern_dtensor *out)
{
    struct tern_wview w;
    TERN_TRY(fetch(L, name, n_dims, shape, dtypes, &w));
    return bind_view(L, &w, n_dims, shape, out);
}


static float to_f32(const void *data, enum tern_dtype dt, size_t i)
{
    if (dt == TERN_DTYPE_F32) return ((const float *)data)[i];
    uint16_t h = ((const uint16_t *)data)[i];
    return dt == TERN_DTYPE_BF16 ? tern_bf16_to_f32(h) : tern_f16_to_f32(h);
}

/* A norm weight [n]: as stored, or as float32 1 + w for (1 + w) families. */
static enum tern_status bind_norm(struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                                  int64_t n, struct tern_dtensor *out)
{
    char name[256];
    tensor_name(L, kind, layer, "", name, sizeof name);
    struct tern_wview wv;
    TERN_TRY(fetch(L, name, 1, &n, FLOATS, &wv));
    const struct tern_tensor_view v = wv.v;
    L->w->n_params += n;
    if (L->norm_dtype < 0) L->norm_dtype = (int)v.dtype;
    if (!L->hp->norm_plus_one || L->dry) return bind_view(L, &wv, 1, &n, out);
    float *f = tern_malloc((size_t)n * sizeof *f);
    if (!f) return TERN_E_NO_MEMORY;
    for (int64_t i = 0; i < n; i++) f[i] = 1.0f + to_f32(v.data, v.dtype, (size_t)i);
    memset(out, 0, sizeof *out);
    out->dtype = TERN_DTYPE_F32;
    out->n_dims = 1;
    out->shape[0] = n;
    enum tern_status st = L->be->ops->buf_alloc(L->be, (size_t)n * sizeof *f, &out->buf);
    if (st == TERN_OK) st = track_buf(L->w, out->buf);
    if (st == TERN_OK) st = L->be->ops->upload(L->be, out, f, (size_t)n * sizeof *f);
    tern_free(f);
    L->w->n_bytes += (int64_t)v.n_bytes;
    show_progress(L);
    return st;
}

/* A plain float vector [n] (biases, scalars): as stored. */
static enum tern_status bind_vec(struct loader *L, const char *name, int64_t n,
                                 struct tern_dtensor *out)
{
    TERN_TRY(bind(L, name, 1, &n, FLOATS, out));
    L->w->n_params += n;
    return TERN_OK;
}

/* The quantization settings for module `module` (e.g. "model.layers.0.mlp.up_proj"). */
static enum tern_status quant_for(struct loader *L, const char *module, struct tern_quant_cfg *q)
{
    q->bits = 0;
    q->group_size = 0;
    if (!L->quant) return TERN_OK;
    const json_t *o = json_object_get(L->quant, module);
    if (json_is_false(o)) return TERN_OK;
    const json_t *src = json_is_object(o) ? o : L->quant;
    const json_t *bits = json_object_get(src, "bits"), *gs = json_object_get(src, "group_size");
    if (!json_is_integer(bits) || !json_is_integer(gs))
        return tern_error(TERN_E_FORMAT, "%s: quantization%s%s needs integer bits and group_size",
                          L->cfg->path, src == L->quant ? "" : ".", src == L->quant ? "" : module);
    q->bits = (int32_t)json_integer_value(bits);
    q->group_size = (int32_t)json_integer_value(gs);
    if (!tern_quant_bits_ok(q->bits))
        return tern_error(TERN_E_UNSUPPORTED, "%s: quantization of '%s': %d bits (2-6, 8 supported)",
                          L->cfg->path, module, q->bits);
    if (!tern_quant_group_ok(q->group_size))
        return tern_error(TERN_E_UNSUPPORTED,
                          "%s: quantization of '%s': group_size %d (32, 64, 128 supported)",
                          L->cfg->path, module, q->group_size);
    return TERN_OK;
}

/* Binds a linear `module` of shape [out, in], dense or quantized. */
static enum tern_status bind_linear(struct loader *L, const char *module, int64_t out, int64_t in,
                                    bool has_bias, struct tern_linear *lin)
{
    char name[256];
    memset(lin, 0, sizeof *lin);
    lin->in_features = in;
    lin->out_features = out;
    snprintf(name, sizeof name, "%s.scales", module);
    bool quantized = tern_wsource_has(L->ws, name);
    snprintf(name, sizeof name, "%s.weight", module);
    if (!quantized && L->quant && json_is_object(json_object_get(L->quant, module)))
        return tern_error(TERN_E_FORMAT,
                          "%s: config.json quantizes '%s' (quantization.%s) but the snapshot has "
                          "no '%s.scales'",
                          src_path(L), module, module, module);
    if (!quantized) { /* dense, or a ggml block type */
        int64_t shape[2] = {out, in};
        struct tern_wview wv;
        L->slot = L->fuse ? &L->fuse[SLOT_W] : NULL;
        TERN_TRY(fetch(L, name, 2, shape, FLOATS | GGML_OK, &wv));
        TERN_TRY(bind_view(L, &wv, 2, shape, &lin->weight));
        lin->ggml_type = wv.ggml_type; /* 0 once dequantized to BF16 */
        if (lin->ggml_type < 64) L->ggml_params[lin->ggml_type] += out * in;
        L->w->n_params += out * in;
    } else {
        struct tern_quant_cfg q;
        TERN_TRY(quant_for(L, module, &q));
        if (!q.bits)
            return tern_error(TERN_E_FORMAT,
                              "%s: '%s' is quantized (has .scales) but config.json has no "
                              "quantization for it",
                              src_path(L), module);
        if (in % q.group_size)
            return tern_error(TERN_E_FORMAT,
                              "%s: '%s' input size %lld is not a multiple of its group_size %d",
                              src_path(L), module, (long long)in, q.group_size);
        int64_t wshape[2] = {out, in * q.bits / 32}, sshape[2] = {out, in / q.group_size};
        L->slot = L->fuse ? &L->fuse[SLOT_W] : NULL;
        TERN_TRY(bind(L, name, 2, wshape, 1u << TERN_DTYPE_U32, &lin->weight));
        snprintf(name, sizeof name, "%s.scales", module);
        L->slot = L->fuse ? &L->fuse[SLOT_S] : NULL;
        TERN_TRY(bind(L, name, 2, sshape, SCALE_DTYPES, &lin->scales));
        snprintf(name, sizeof name, "%s.biases", module);
        L->slot = L->fuse ? &L->fuse[SLOT_B] : NULL;
        TERN_TRY(bind(L, name, 2, sshape, SCALE_DTYPES, &lin->biases));
        if (lin->scales.dtype != lin->biases.dtype)
            return tern_error(TERN_E_FORMAT, "%s: '%s.scales' is %s but '%s.biases' is %s",
                              src_path(L), module,
                              tern_dtype_name(lin->scales.dtype), module,
                              tern_dtype_name(lin->biases.dtype));
        lin->bits = q.bits;
        lin->group_size = q.group_size;
        L->w->quant_bits = q.bits;
        L->w->n_params += out * in;
    }
    if (has_bias) {
        snprintf(name, sizeof name, "%s.bias", module);
        L->slot = L->fuse ? &L->fuse[SLOT_BIAS] : NULL;
        TERN_TRY(bind_vec(L, name, out, &lin->bias));
    }
    L->slot = NULL;
    return TERN_OK;
}

/* bind_linear of a canonical tensor. */
static enum tern_status bind_kind(struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                                  int64_t out, int64_t in, bool has_bias, struct tern_linear *lin)
{
    char module[256];
    tensor_name(L, kind, layer, "", module, sizeof module);
    return bind_linear(L, module, out, in, has_bias, lin);
}

/* The byte sizes of the pieces of a fused group per tensor kind, or false
 * when the pieces do not share one format (dense: one dtype; quantized: the
 * same bits, group size and scale dtype; ggml: one block type; biases all of
 * one dtype; sizes as bound, after any dequantization to BF16) or cannot be
 * read: then they are bound one by one, which also reports any error. */
static bool group_sizes(struct loader *L, const char *const *mods, int n, bool has_bias,
                        size_t bytes[SLOT_N])
{
    char name[256];
    struct tern_wview w;
    const struct tern_tensor_view *v = &w.v;
    int key0[6] = {0}; /* quantized, bits, group, weight dtype, scale dtype, ggml type */
    int bias_dt = -1;
    memset(bytes, 0, sizeof(size_t) * SLOT_N);
    for (int i = 0; i < n; i++) {
        struct tern_quant_cfg q = {0, 0};
        int key[6] = {0};
        snprintf(name, sizeof name, "%s.scales", mods[i]);
        key[0] = tern_wsource_has(L->ws, name);
        if (key[0]) {
            if (tern_wsource_get(L->ws, name, &w) != TERN_OK ||
                quant_for(L, mods[i], &q) != TERN_OK || !q.bits)
                return false;
            bytes[SLOT_S] += v->n_bytes;
            key[4] = (int)v->dtype;
            snprintf(name, sizeof name, "%s.biases", mods[i]);
            if (tern_wsource_get(L->ws, name, &w) != TERN_OK || (int)v->dtype != key[4])
                return false;
            bytes[SLOT_B] += v->n_bytes;
        }
        key[1] = q.bits;
        key[2] = q.group_size;
        snprintf(name, sizeof name, "%s.weight", mods[i]);
        if (tern_wsource_get(L->ws, name, &w) != TERN_OK) return false;
        const struct tern_ggml_traits *gt = tern_ggml_type_traits(w.ggml_type);
        if (w.ggml_type && (!gt || !gt->dequant || v->n_dims != 2)) return false;
        if (ggml_to_bf16(L, w.ggml_type)) {
            bytes[SLOT_W] += (size_t)tern_shape_numel(v->shape, v->n_dims) * 2;
            key[3] = TERN_DTYPE_BF16;
        } else {
            bytes[SLOT_W] += v->n_bytes;
            key[3] = (int)v->dtype;
            key[5] = (int)w.ggml_type;
        }
        if (has_bias) {
            snprintf(name, sizeof name, "%s.bias", mods[i]);
            if (tern_wsource_get(L->ws, name, &w) != TERN_OK) return false;
            if (i > 0 && (int)v->dtype != bias_dt) return false;
            bias_dt = (int)v->dtype;
            bytes[SLOT_BIAS] += v->n_bytes;
        }
        if (i == 0) memcpy(key0, key, sizeof key);
        else if (memcmp(key0, key, sizeof key)) return false;
    }
    return true;
}

/* A fused tensor: the parts' first tensor, covering `rows` rows from offset 0. */
static void fused_tensor(struct tern_dtensor *t, struct tern_buf *buf, int64_t rows)
{
    t->buf = buf;
    t->offset = 0;
    t->shape[0] = rows;
}

/* Binds linears mods[0..n) ([outs[i], in] each). Where the loader fuses and
 * the pieces agree (group_sizes), their tensors go into row slices of one
 * buffer per kind, `fused` describes the whole [sum outs, in] linear and each
 * part stays a view of its slice; otherwise `fused` is left empty
 * (weight.buf == NULL) and the parts are separate. A module may appear twice
 * (k_eq_v: q | k | k); unfused, a repeated module's part is a copy of its
 * first binding. */
static enum tern_status bind_group(struct loader *L, const char *const *mods, const int64_t *outs,
                                   int n, int64_t in, bool has_bias,
                                   struct tern_linear *const *parts, struct tern_linear *fused)
{
    size_t bytes[SLOT_N];
    memset(fused, 0, sizeof *fused);
    if (!L->fuse_ok || !group_sizes(L, mods, n, has_bias, bytes)) {
        for (int i = 0; i < n; i++) {
            int first = i;
            for (int j = 0; j < i; j++)
                if (!strcmp(mods[j], mods[i]) && first == i) first = j;
            if (first < i) *parts[i] = *parts[first];
            else TERN_TRY(bind_linear(L, mods[i], outs[i], in, has_bias, parts[i]));
        }
        return TERN_OK;
    }
    struct slot slots[SLOT_N];
    memset(slots, 0, sizeof slots);
    for (int k = 0; k < SLOT_N; k++) {
        if (!bytes[k]) continue;
        TERN_TRY(L->be->ops->buf_alloc(L->be, bytes[k], &slots[k].buf));
        enum tern_status st = track_buf(L->w, slots[k].buf);
        if (st != TERN_OK) {
            L->be->ops->buf_free(L->be, slots[k].buf);
            return st;
        }
    }
    L->fuse = slots;
    enum tern_status st = TERN_OK;
    int64_t rows = 0;
    for (int i = 0; i < n && st == TERN_OK; i++) {
        st = bind_linear(L, mods[i], outs[i], in, has_bias, parts[i]);
        rows += outs[i];
    }
    L->fuse = NULL;
    L->slot = NULL;
    if (st != TERN_OK) return st;
    *fused = *parts[0];
    fused->out_features = rows;
    fused_tensor(&fused->weight, slots[SLOT_W].buf, rows);
    if (fused->bits) {
        fused_tensor(&fused->scales, slots[SLOT_S].buf, rows);
        fused_tensor(&fused->biases, slots[SLOT_B].buf, rows);
    }
    if (has_bias) fused_tensor(&fused->bias, slots[SLOT_BIAS].buf, rows);
    return TERN_OK;
}

/* Whether the family names canonical linear `kind` and the source holds
 * it (dense, ggml or MLX-quantized: each has a .weight). */
static bool has_linear(struct loader *L, enum tern_tensor_kind kind, int32_t layer)
{
    char name[256];
    if (!L->fam->names[kind]) return false;
    return tern_wsource_has(L->ws, tensor_name(L, kind, layer, ".weight", name, sizeof name));
}

/* Rows [row0, row0 + n) of a linear: a view of its weight (also a ggml
 * one's row bytes), quantization scales and biases, and bias. */
static struct tern_linear linear_rows(const struct tern_linear *w, int64_t row0, int64_t n)
{
    struct tern_linear v = *w;
    v.weight = tern_dtensor_rows(&w->weight, row0, n);
    if (w->bits) {
        v.scales = tern_dtensor_rows(&w->scales, row0, n);
        v.biases = tern_dtensor_rows(&w->biases, row0, n);
    }
    if (w->bias.buf) v.bias = tern_dtensor_rows(&w->bias, row0, n);
    v.out_features = n;
    return v;
}

/* A linear the snapshot stores fused (kind TT_QKV or TT_GATE_UP) of
 * outs[0] + ... rows, bound whole into `fused` with parts[i] views of its
 * rows. */
static enum tern_status bind_stored_fused(struct loader *L, enum tern_tensor_kind kind,
                                          int32_t layer, const int64_t *outs, int n, int64_t in,
                                          bool has_bias, struct tern_linear *const *parts,
                                          struct tern_linear *fused)
{
    int64_t rows = 0;
    for (int k = 0; k < n; k++) rows += outs[k];
    TERN_TRY(bind_kind(L, kind, layer, rows, in, has_bias, fused));
    for (int k = 0, row0 = 0; k < n; row0 += (int)outs[k], k++)
        *parts[k] = linear_rows(fused, row0, outs[k]);
    return TERN_OK;
}

static enum tern_status bind_attention(struct loader *L, int32_t i, const struct tern_layer_plan *p,
                                       struct tern_layer *ly)
{
    int64_t E = L->hp->hidden_size, hd = p->attn.head_dim;
    int64_t qd = hd * p->attn.n_heads, kvd = hd * p->attn.n_kv_heads;
    char nq[256], nk[256], nv[256];
    tensor_name(L, TT_Q, i, "", nq, sizeof nq);
    tensor_name(L, TT_K, i, "", nk, sizeof nk);
    tensor_name(L, TT_V, i, "", nv, sizeof nv);
    bool qkv_stored = L->fam->names[TT_QKV] && (has_linear(L, TT_QKV, i) || !L->fam->names[TT_Q]);
    if (p->kv_source == i && !p->k_eq_v && qkv_stored) {
        const int64_t outs[3] = {qd, kvd, kvd};
        struct tern_linear *const parts[3] = {&ly->q_proj, &ly->k_proj, &ly->v_proj};
        TERN_TRY(bind_stored_fused(L, TT_QKV, i, outs, 3, E, p->qkv_bias, parts, &ly->qkv_proj));
    } else if (p->kv_source != i) { /* shares another layer's K/V: queries only */
        TERN_TRY(bind_linear(L, nq, qd, E, p->qkv_bias, &ly->q_proj));
    } else {
        const char *mods[3] = {nq, nk, p->k_eq_v ? nk : nv};
        const int64_t outs[3] = {qd, kvd, kvd};
        struct tern_linear *const parts[3] = {&ly->q_proj, &ly->k_proj, &ly->v_proj};
        TERN_TRY(bind_group(L, mods, outs, 3, E, p->qkv_bias, parts, &ly->qkv_proj));
    }
    TERN_TRY(bind_kind(L, TT_O, i, E, qd, p->o_bias, &ly->o_proj));
    if (p->qk_norm || p->qk_norm_full) {
        TERN_TRY(bind_norm(L, TT_Q_NORM, i, p->qk_norm ? hd : qd, &ly->q_norm));
        if (p->kv_source == i)
            TERN_TRY(bind_norm(L, TT_K_NORM, i, p->qk_norm ? hd : kvd, &ly->k_norm));
    }
    return TERN_OK;
}

/* The feed-forward linears: up and down (mlp_plain), or gate | up stored
 * fused, or gate and up (fused at load where the loader fuses). */
static enum tern_status bind_mlp(struct loader *L, int32_t i, const struct tern_layer_plan *p,
                                 struct tern_layer *ly)
{
    int64_t E = L->hp->hidden_size, F = p->intermediate;
    const int64_t gu_out[2] = {F, F};
    struct tern_linear *const gu_parts[2] = {&ly->gate_proj, &ly->up_proj};
    /* Qwen2-MoE's experts layers: the MLP is the shared expert */
    bool sh = p->ffn == TERN_FFN_MLP_MOE && p->moe.shared_expert;
    if (p->mlp_plain) {
        TERN_TRY(bind_kind(L, TT_UP, i, F, E, p->mlp_bias, &ly->up_proj));
    } else if (!sh && L->fam->names[TT_GATE_UP] &&
               (has_linear(L, TT_GATE_UP, i) || !L->fam->names[TT_GATE])) {
        TERN_TRY(bind_stored_fused(L, TT_GATE_UP, i, gu_out, 2, E, p->mlp_bias, gu_parts,
                                   &ly->gate_up_proj));
    } else {
        char ng[256], nu[256];
        tensor_name(L, sh ? TT_SHARED_GATE : TT_GATE, i, "", ng, sizeof ng);
        tensor_name(L, sh ? TT_SHARED_UP : TT_UP, i, "", nu, sizeof nu);
        const char *gu[2] = {ng, nu};
        TERN_TRY(bind_group(L, gu, gu_out, 2, E, p->mlp_bias, gu_parts, &ly->gate_up_proj));
    }
    return bind_kind(L, sh ? TT_SHARED_DOWN : TT_DOWN, i, E, F, p->mlp_bias, &ly->down_proj);
}

/* An input norm and, for LayerNorms with bias, its bias. */
static enum tern_status bind_norm_b(struct loader *L, enum tern_tensor_kind kind,
                                    enum tern_tensor_kind bias_kind, int32_t layer,
                                    struct tern_dtensor *w, struct tern_dtensor *b)
{
    int64_t E = L->hp->hidden_size;
    char name[256];
    TERN_TRY(bind_norm(L, kind, layer, E, w));
    if (!L->hp->norm_bias) return TERN_OK;
    return bind_vec(L, tensor_name(L, bias_kind, layer, "", name, sizeof name), E, b);
}

static enum tern_status bind_layer(struct loader *L, int32_t i, const struct tern_layer_plan *p,
                                   struct tern_layer *ly)
{
    const struct tern_hparams *hp = L->hp;
    int64_t E = hp->hidden_size, P = hp->per_layer_dim;
    if (!p->no_input_norms)
        TERN_TRY(bind_norm_b(L, TT_ATTN_NORM, TT_ATTN_NORM_BIAS, i, &ly->attn_norm,
                             &ly->attn_norm_bias));
    if (p->attn_post_norm) TERN_TRY(bind_norm(L, TT_ATTN_POST_NORM, i, E, &ly->attn_post_norm));
    if (!p->no_input_norms && !p->parallel)
        TERN_TRY(bind_norm_b(L, TT_FFN_NORM, TT_FFN_NORM_BIAS, i, &ly->ffn_norm,
                             &ly->ffn_norm_bias));
    if (p->ffn_post_norm) TERN_TRY(bind_norm(L, TT_FFN_POST_NORM, i, E, &ly->ffn_post_norm));
    TERN_TRY(bind_attention(L, i, p, ly));
    if (p->ffn != TERN_FFN_MOE) TERN_TRY(bind_mlp(L, i, p, ly));
    if (p->ffn != TERN_FFN_MLP) TERN_TRY(tern_load_moe_layer(L, i, p, ly));
    char name[256];
    if (p->layer_scalar)
        TERN_TRY(bind_vec(L, tensor_name(L, TT_LAYER_SCALAR, i, "", name, sizeof name), 1,
                          &ly->layer_scalar));
    if (p->per_layer_input) {
        TERN_TRY(bind_kind(L, TT_PLI_GATE, i, P, E, false, &ly->pli_gate));
        TERN_TRY(bind_kind(L, TT_PLI_PROJ, i, E, P, false, &ly->pli_proj));
        TERN_TRY(bind_norm(L, TT_PLI_POST_NORM, i, E, &ly->pli_post_norm));
    }
    return TERN_OK;
}

/* The text model's prefix: the one under which the embedding exists. */
static enum tern_status find_prefix(struct loader *L)
{
    static const char *const prefixes[][2] = {
        {"model.", ""},                                  /* a text model */
        {"model.language_model.", ""},                   /* transformers 5 multimodal */
        {"language_model.model.", "language_model."},    /* earlier multimodal, MLX */
        {"model.language_model.model.", "model.language_model."},
        {"", ""}, /* a base model's own names (XxxModel): Qwen3-Embedding, sentence-transformers */
    };
    char name[256];
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        L->prefix = prefixes[i][0];
        L->head_prefix = prefixes[i][1];
        tensor_name(L, TT_EMBED, -1, ".weight", name, sizeof name);
        if (tern_wsource_has(L->ws, name)) return TERN_OK;
    }
    L->prefix = "model.";
    L->head_prefix = "";
    tensor_name(L, TT_EMBED, -1, ".weight", name, sizeof name);
    if (L->ws->gguf)
        return tern_error(TERN_E_FORMAT, "%s: no embedding tensor %s", src_path(L),
                          lbl(L, name));
    return tern_error(TERN_E_FORMAT, "%s: no embedding tensor %s (nor under "
                      "'model.language_model.', 'language_model.model.' or no prefix)",
                      src_path(L), lbl(L, name));
}

static void report_unused(struct loader *L)
{
    size_t n = 0;
    const char **names = tern_wsource_unused(L->ws, &n);
    L->w->n_unused = (int32_t)n;
    for (size_t i = 0; i < n && names; i++)
        tern_log(TERN_LOG_INFO, "%s: tensor '%s' is not used by the architecture",
                 src_path(L), names[i]);
    if (n)
        tern_log(TERN_LOG_INFO, "%s: %zu unused tensor(s)", src_path(L), n);
    tern_free(names);
}

/* The quantization block of config.json, or NULL; MLX affine only. */
static enum tern_status find_quant(struct loader *L)
{
    const struct tern_json_doc *cfg = L->cfg;
    L->quant = json_object_get(cfg->root, "quantization");
    if (!json_is_object(L->quant)) L->quant = json_object_get(cfg->root, "quantization_config");
    if (!json_is_object(L->quant)) L->quant = NULL;
    if (L->quant && json_object_get(L->quant, "quant_method")) {
        /* A Hugging Face quantization_config (GPTQ, AWQ, fp8, ...), not MLX's. */
        const json_t *m = json_object_get(L->quant, "quant_method");
        return tern_error(TERN_E_UNSUPPORTED,
                          "%s: quantization_config.quant_method \"%s\" is not supported (tern "
                          "reads MLX affine quantization; see `tern quantize`)",
                          cfg->path, json_is_string(m) ? json_string_value(m) : "?");
    }
    if (L->quant) {
        const json_t *mode = json_object_get(L->quant, "mode");
        if (mode && (!json_is_string(mode) || strcmp(json_string_value(mode), "affine")))
            return tern_error(TERN_E_UNSUPPORTED, "%s: quantization.mode must be \"affine\"",
                              cfg->path);
    }
    return TERN_OK;
}

/* The model-level tensors: embeddings, final norm, head, per-layer inputs. */
static enum tern_status bind_model(struct loader *L)
{
    const struct tern_hparams *hp = L->hp;
    struct tern_weights *w = L->w;
    int64_t V = hp->vocab_size, E = hp->hidden_size;
    int64_t LP = (int64_t)hp->per_layer_dim * hp->num_hidden_layers;
    TERN_TRY(bind_kind(L, TT_EMBED, -1, V, E, false, &w->embed_tokens));
    if (hp->per_layer_dim) {
        TERN_TRY(bind_kind(L, TT_EMBED_PER_LAYER, -1, hp->per_layer_vocab, LP, false,
                           &w->embed_per_layer));
        TERN_TRY(bind_kind(L, TT_PLI_MODEL_PROJ, -1, LP, E, false, &w->pli_model_proj));
        TERN_TRY(bind_norm(L, TT_PLI_PROJ_NORM, -1, hp->per_layer_dim, &w->pli_proj_norm));
    }
    return TERN_OK;
}

static enum tern_status bind_head(struct loader *L)
{
    const struct tern_hparams *hp = L->hp;
    struct tern_weights *w = L->w;
    char name[256];
    TERN_TRY(bind_norm_b(L, TT_NORM, TT_NORM_BIAS, -1, &w->norm, &w->norm_bias));
    tensor_name(L, TT_LM_HEAD, -1, ".weight", name, sizeof name);
    if (hp->tie_word_embeddings && !tern_wsource_has(L->ws, name)) {
        w->lm_head = w->embed_tokens;
        return TERN_OK;
    }
    if (!*L->prefix && !tern_wsource_has(L->ws, name)) {
        /* A base model saved under its own names has no language-model head
         * (Qwen3-Embedding-8B says tie_word_embeddings false and ships
         * none): it computes hidden states (embeddings), never logits. */
        tern_log(TERN_LOG_INFO, "%s: no %s: the model has no language-model head", src_path(L),
                 name);
        return TERN_OK;
    }
    return bind_kind(L, TT_LM_HEAD, -1, hp->vocab_size, hp->hidden_size, false, &w->lm_head);
}

/* After a load: the ggml block type most parameters are bound in, and the
 * memory the BF16 copies of the others cost. */
static void report_ggml(struct loader *L)
{
    int64_t best = 0;
    for (uint32_t t = 0; t < 64; t++)
        if (L->ggml_params[t] > best) {
            best = L->ggml_params[t];
            L->w->ggml_type = t;
        }
    if (!L->n_dequant) return;
    char why[96];
    if (L->ggml_bf16) snprintf(why, sizeof why, "as TERN_GGML_BF16 asks");
    else snprintf(why, sizeof why, "as the %s backend has no kernels for them", L->be->ops->name);
    tern_log(TERN_LOG_WARN,
             "%s: %zu tensors of ggml block types (%.1f MB in the file) dequantized to BF16 at "
             "load, %s: %.1f MB of weights instead (%.1fx)",
             src_path(L), L->n_dequant, (double)L->dequant_from / 1e6, why,
             (double)L->dequant_to / 1e6,
             L->dequant_from ? (double)L->dequant_to / (double)L->dequant_from : 0.0);
}

static bool env_on(const char *name)
{
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

/* Binds (or with L->dry checks) every tensor the plans need. */
static enum tern_status load(struct tern_model_core *m, struct loader *Lp, bool progress)
{
    struct loader L = *Lp;
    struct tern_weights *w = &m->w;
    TERN_TRY(find_quant(&L));
    TERN_TRY(find_prefix(&L));
    w->layers = tern_calloc((size_t)m->hp.num_hidden_layers, sizeof *w->layers);
    if (!w->layers) return TERN_E_NO_MEMORY;
    enum tern_status st = bind_model(&L);
    for (int32_t i = 0; st == TERN_OK && i < m->hp.num_hidden_layers; i++)
        st = bind_layer(&L, i, &m->plans[i], &w->layers[i]);
    if (st == TERN_OK) st = bind_head(&L);
    if (st != TERN_OK) {
        if (progress) fputc('\n', stderr);
        return st;
    }
    if (!L.dry) report_ggml(&L);
    bool packed = w->quant_bits || w->embed_tokens.ggml_type;
    w->dtype = packed && L.norm_dtype >= 0 ? (enum tern_dtype)L.norm_dtype
                                           : w->embed_tokens.weight.dtype;
    report_unused(&L);
    return TERN_OK;
}

/* ---- the helpers load_moe.c binds the experts with (load.h) ---- */

const char *tern_load_label(struct loader *L, const char *name)
{
    return lbl(L, name);
}

const char *tern_load_path(const struct loader *L)
{
    return src_path(L);
}

enum tern_status tern_load_track(struct loader *L, struct tern_buf *b)
{
    return track_buf(L->w, b);
}

void tern_load_progress(struct loader *L)
{
    show_progress(L);
}

const char *tern_load_name(const struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                           const char *suffix, char *buf, size_t cap)
{
    return tensor_name(L, kind, layer, suffix, buf, cap);
}

enum tern_status tern_load_fetch(struct loader *L, const char *name, int n_dims,
                                 const int64_t *shape, unsigned dtypes, struct tern_wview *w)
{
    return fetch(L, name, n_dims, shape, dtypes, w);
}

enum tern_status tern_load_view(struct loader *L, struct tern_wview *w, int n_dims,
                                const int64_t *shape, struct tern_dtensor *out)
{
    return bind_view(L, w, n_dims, shape, out);
}

enum tern_status tern_load_norm(struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                                int64_t n, struct tern_dtensor *out)
{
    return bind_norm(L, kind, layer, n, out);
}

enum tern_status tern_load_vec(struct loader *L, const char *name, int64_t n,
                               struct tern_dtensor *out)
{
    return bind_vec(L, name, n, out);
}

enum tern_status tern_load_quant_for(struct loader *L, const char *module,
                                     struct tern_quant_cfg *q)
{
    return quant_for(L, module, q);
}

enum tern_status tern_load_kind(struct loader *L, enum tern_tensor_kind kind, int32_t layer,
                                int64_t out, int64_t in, bool has_bias, struct tern_linear *lin)
{
    return bind_kind(L, kind, layer, out, in, has_bias, lin);
}

enum tern_status tern_weights_load(struct tern_model_core *m, struct tern_wsource *ws,
                                   const struct tern_json_doc *cfg, bool progress)
{
    memset(&m->w, 0, sizeof m->w);
    struct loader L = {
        .be = m->be, .ws = ws, .cfg = cfg, .fam = m->arch->family, .hp = &m->hp, .w = &m->w,
        .progress = progress, .n_total = tern_wsource_n_tensors(ws), .t0 = tern_now_ns(),
        .fuse_ok = m->be->device != TERN_DEVICE_CPU, .norm_dtype = -1,
        .ggml_bf16 = env_on("TERN_GGML_BF16"),
    };
    return load(m, &L, progress);
}

enum tern_status tern_weights_check(struct tern_model_core *m, struct tern_wsource *ws,
                                    const struct tern_json_doc *cfg)
{
    memset(&m->w, 0, sizeof m->w);
    struct loader L = {
        .ws = ws, .cfg = cfg, .fam = m->arch->family, .hp = &m->hp, .w = &m->w,
        .n_total = tern_wsource_n_tensors(ws), .t0 = tern_now_ns(), .dry = true,
        .norm_dtype = -1,
    };
    return load(m, &L, false);
}

void tern_weights_free(struct tern_backend *be, struct tern_weights *w)
{
    for (size_t i = 0; i < w->n_bufs && be; i++) be->ops->buf_free(be, w->bufs[i]);
    tern_free(w->bufs);
    tern_free(w->layers);
    memset(w, 0, sizeof *w);
}
