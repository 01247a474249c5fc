/*
 * quantize_plan.h — the private pieces of `tern_quantize` (include/tern.h):
 * which output tensors a snapshot becomes (quantize_plan.c) and how they are
 * computed and written as safetensors (quantize.c).
 *
 * One source tensor gives one output tensor (copied, cast to the config's
 * dtype when it differs) or three (a quantized `<m>.weight` U32 +
 * `<m>.scales` + `<m>.biases`). Outputs are written in plan order (source
 * name order, weight/scales/biases together); the safetensors header lists
 * them sorted by name, as MLX's writer does.
 *
 * Depends on io/ (snapshot, config) and tensor/quant.h.
 */
#ifndef TERN_API_QUANTIZE_PLAN_H
#define TERN_API_QUANTIZE_PLAN_H

#include "io/config.h"
#include "io/safetensors.h"
#include "tensor/quant.h"

#include "tern.h"

enum qt_kind { QT_COPY, QT_WEIGHT, QT_SCALES, QT_BIASES };

struct qt_out {
    char *name; /* owned */
    enum qt_kind kind;
    enum tern_dtype dtype;
    int n_dims;
    int64_t shape[TERN_MAX_DIMS];
    size_t n_bytes;
    size_t src; /* index into the snapshot (tern_snapshot_tensor_at) */
    int32_t bits, group_size;
    int shard;       /* 0-based shard index */
    uint64_t offset; /* data offset within its shard */
};

struct qt_plan {
    struct qt_out *outs;
    size_t n_outs, cap_outs;
    int n_shards;
    int64_t n_params;       /* as mlx-lm counts: quantized weights by their unpacked size */
    uint64_t total_bytes;   /* all outputs */
    uint64_t src_bytes;     /* source bytes read */
    enum tern_dtype target; /* config dtype, or TERN_DTYPE_COUNT to keep each tensor's */
};

/* Builds the plan for a snapshot; errors name the module or parameter. */
enum tern_status tern_qt_plan_build(struct tern_snapshot *snap, const struct tern_json_doc *cfg,
                                    const struct tern_quantize_params *p, struct qt_plan *plan);
void tern_qt_plan_deinit(struct qt_plan *plan);

/* The shard file name of shard i ("model.safetensors" when there is one). */
void tern_qt_shard_name(const struct qt_plan *plan, int i, char *buf, size_t len);

#endif /* TERN_API_QUANTIZE_PLAN_H */
