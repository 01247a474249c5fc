/*
 * quantize_plan.c — which tensors `tern quantize` writes, decided as
 * mlx-lm's converter decides (mlx_lm/convert.py, utils.quantize_model):
 *
 *   - every floating tensor is cast to config.json's dtype (torch_dtype, or
 *     transformers 5's dtype) when that is float16 / bfloat16 / float32;
 *   - a module is quantized when it has a 2-D `<m>.weight` (in llama-family
 *     models these are exactly the nn.Linear and nn.Embedding layers, the
 *     modules with `to_quantized`) whose input size is a multiple of the
 *     default group_size; an override then keeps it dense (bits 0) or sets
 *     its own bits and group_size;
 *   - rotary `inv_freq` buffers are dropped, and so is `lm_head.weight` of a
 *     model with tied embeddings (mlx-lm's sanitize does both);
 *   - outputs go into shards of at most 5 GiB (MAX_FILE_SIZE_GB), a larger
 *     tensor alone in its shard.
 */
#include "api/quantize_plan.h"

#include <stdio.h>
#include <string.h>

#define SHARD_MAX_BYTES (5ull << 30)

static bool is_float(enum tern_dtype dt)
{
    return dt == TERN_DTYPE_F32 || dt == TERN_DTYPE_F16 || dt == TERN_DTYPE_BF16;
}

static enum tern_dtype config_dtype(const struct tern_json_doc *cfg)
{
    const json_t *d = json_object_get(cfg->root, "torch_dtype");
    if (!json_is_string(d)) d = json_object_get(cfg->root, "dtype");
    if (!json_is_string(d)) {
        const json_t *tc = json_object_get(cfg->root, "text_config");
        d = json_is_object(tc) ? json_object_get(tc, "dtype") : NULL;
    }
    const char *s = json_is_string(d) ? json_string_value(d) : "";
    if (!strcmp(s, "bfloat16")) return TERN_DTYPE_BF16;
    if (!strcmp(s, "float16")) return TERN_DTYPE_F16;
    if (!strcmp(s, "float32")) return TERN_DTYPE_F32;
    return TERN_DTYPE_COUNT;
}

static enum tern_status add_out(struct qt_plan *plan, const char *module, const char *suffix,
                                struct qt_out o)
{
    void *arr = plan->outs;
    TERN_TRY(tern_grow(&arr, &plan->cap_outs, plan->n_outs + 1, sizeof *plan->outs));
    plan->outs = arr;
    struct tern_str s = {0};
    TERN_TRY(tern_str_appendf(&s, "%s%s", module, suffix));
    o.name = tern_str_take(&s);
    o.n_bytes = (size_t)tern_shape_numel(o.shape, o.n_dims) * tern_dtype_size(o.dtype);
    plan->outs[plan->n_outs++] = o;
    plan->total_bytes += o.n_bytes;
    return TERN_OK;
}

/* The bits / group_size for module `m` with input size `in`; bits 0 = dense. */
static enum tern_status choose(const struct tern_quantize_params *p, const char *m, int64_t in,
                               int32_t *bits, int32_t *group)
{
    *bits = 0;
    *group = 0;
    if (in % p->group_size) return TERN_OK; /* mlx-lm's predicate skips it */
    *bits = p->bits;
    *group = p->group_size;
    for (int32_t i = 0; i < p->n_overrides; i++) {
        const struct tern_quantize_override *o = &p->overrides[i];
        if (strcmp(o->module, m)) continue;
        *bits = o->bits;
        *group = o->group_size;
        if (o->bits && in % o->group_size)
            return tern_error(TERN_E_INVALID_ARG,
                              "quantize: override for '%s': input size %lld is not a multiple of "
                              "group_size %d",
                              m, (long long)in, o->group_size);
    }
    return TERN_OK;
}

static bool dropped(const char *name, bool tied)
{
    size_t n = strlen(name);
    const char *inv = "rotary_emb.inv_freq";
    if (n >= strlen(inv) && !strcmp(name + n - strlen(inv), inv)) return true;
    return tied && !strcmp(name, "lm_head.weight");
}

static enum tern_status plan_tensor(struct qt_plan *plan, const struct tern_tensor_view *v,
                                    size_t idx, const struct tern_quantize_params *p)
{
    struct qt_out o = {.kind = QT_COPY, .dtype = v->dtype, .n_dims = v->n_dims, .src = idx};
    memcpy(o.shape, v->shape, sizeof o.shape);
    if (is_float(v->dtype) && plan->target != TERN_DTYPE_COUNT) o.dtype = plan->target;
    size_t n = strlen(v->name);
    bool w2d = is_float(v->dtype) && v->n_dims == 2 && n > 7 && !strcmp(v->name + n - 7, ".weight");
    if (!w2d) {
        plan->n_params += tern_shape_numel(v->shape, v->n_dims);
        return add_out(plan, v->name, "", o);
    }
    char module[256];
    if (n - 7 >= sizeof module)
        return tern_error(TERN_E_FORMAT, "quantize: tensor name '%s' is too long", v->name);
    memcpy(module, v->name, n - 7);
    module[n - 7] = '\0';
    int64_t rows = v->shape[0], in = v->shape[1];
    TERN_TRY(choose(p, module, in, &o.bits, &o.group_size));
    plan->n_params += rows * in;
    if (!o.bits) return add_out(plan, v->name, "", o);
    struct qt_out w = o, s = o;
    w.kind = QT_WEIGHT;
    w.dtype = TERN_DTYPE_U32;
    w.shape[1] = in * o.bits / 32;
    s.kind = QT_SCALES;
    s.shape[1] = in / o.group_size;
    TERN_TRY(add_out(plan, module, ".weight", w));
    TERN_TRY(add_out(plan, module, ".scales", s));
    s.kind = QT_BIASES;
    return add_out(plan, module, ".biases", s);
}

static void assign_shards(struct qt_plan *plan)
{
    uint64_t size = 0;
    int shard = -1;
    for (size_t i = 0; i < plan->n_outs; i++) {
        struct qt_out *o = &plan->outs[i];
        if (shard < 0 || size + o->n_bytes > SHARD_MAX_BYTES) {
            shard++;
            size = 0;
        }
        o->shard = shard;
        o->offset = size;
        size += o->n_bytes;
    }
    plan->n_shards = shard + 1;
}

enum tern_status tern_qt_plan_build(struct tern_snapshot *snap, const struct tern_json_doc *cfg,
                                    const struct tern_quantize_params *p, struct qt_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    plan->target = config_dtype(cfg);
    bool tied = json_is_true(json_object_get(cfg->root, "tie_word_embeddings"));
    enum tern_status st = TERN_OK;
    for (size_t i = 0; st == TERN_OK && i < tern_snapshot_n_tensors(snap); i++) {
        struct tern_tensor_view v;
        tern_snapshot_tensor_at(snap, i, &v);
        if (dropped(v.name, tied)) continue;
        plan->src_bytes += v.n_bytes;
        st = plan_tensor(plan, &v, i, p);
    }
    if (st == TERN_OK && plan->n_outs == 0)
        st = tern_error(TERN_E_FORMAT, "%s: no tensors to write", tern_snapshot_dir(snap));
    if (st != TERN_OK) {
        tern_qt_plan_deinit(plan);
        return st;
    }
    assign_shards(plan);
    return TERN_OK;
}

void tern_qt_plan_deinit(struct qt_plan *plan)
{
    for (size_t i = 0; i < plan->n_outs; i++) tern_free(plan->outs[i].name);
    tern_free(plan->outs);
    memset(plan, 0, sizeof *plan);
}

void tern_qt_shard_name(const struct qt_plan *plan, int i, char *buf, size_t len)
{
    if (plan->n_shards == 1) snprintf(buf, len, "model.safetensors");
    else snprintf(buf, len, "model-%05d-of-%05d.safetensors", i + 1, plan->n_shards);
}
