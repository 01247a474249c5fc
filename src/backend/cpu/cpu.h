/*
 * cpu.h — the CPU backend's ops (the numerical reference) and its pointer
 * access. Activations and KV are float32; weights may be F32/F16/BF16, MLX-affine
 * quantized or of a ggml block type. OpenMP across cores.
 */
#ifndef TERN_BACKEND_CPU_H
#define TERN_BACKEND_CPU_H

#include "backend/backend.h"

/* Host address of a view's first element. */
void *tern_cpu_ptr(const struct tern_dtensor *t);

enum tern_status tern_cpu_get_rows(struct tern_backend *be, const struct tern_linear *table,
                                   const struct tern_dtensor *idx, struct tern_dtensor *out);
enum tern_status tern_cpu_rmsnorm(struct tern_backend *be, const struct tern_dtensor *x,
                                  const struct tern_dtensor *w, float eps, struct tern_dtensor *out);
enum tern_status tern_cpu_add_rmsnorm(struct tern_backend *be, struct tern_dtensor *residual,
                                      const struct tern_dtensor *x, const struct tern_dtensor *w,
                                      float eps, struct tern_dtensor *out);
enum tern_status tern_cpu_layernorm(struct tern_backend *be, const struct tern_dtensor *x,
                                    const struct tern_dtensor *w, const struct tern_dtensor *b,
                                    float eps, struct tern_dtensor *out);
enum tern_status tern_cpu_matmul(struct tern_backend *be, const struct tern_dtensor *x,
                                 const struct tern_linear *w, struct tern_dtensor *y, int64_t y_col);
enum tern_status tern_cpu_rope(struct tern_backend *be, struct tern_dtensor *x, int64_t x_col,
                               int32_t n_heads, const struct tern_dtensor *positions,
                               const struct tern_rope *rope);
enum tern_status tern_cpu_head_rmsnorm(struct tern_backend *be, struct tern_dtensor *x,
                                       int64_t x_col, int32_t n_heads, int32_t head_dim,
                                       const struct tern_dtensor *w, float eps);
enum tern_status tern_cpu_kv_store(struct tern_backend *be, const struct tern_dtensor *qkv,
                                   int64_t k_col, int64_t v_col,
                                   const struct tern_batch_dev *batch, struct tern_kv_layer *kv);
enum tern_status tern_cpu_attention(struct tern_backend *be, const struct tern_dtensor *qkv,
                                    const struct tern_kv_layer *kv,
                                    const struct tern_batch_dev *batch,
                                    const struct tern_attn_params *p, struct tern_dtensor *out);
enum tern_status tern_cpu_silu_mul(struct tern_backend *be, const struct tern_dtensor *gate_up,
                                   struct tern_dtensor *out);
enum tern_status tern_cpu_add(struct tern_backend *be, const struct tern_dtensor *a,
                              const struct tern_dtensor *b, struct tern_dtensor *out);
enum tern_status tern_cpu_act_mul(struct tern_backend *be, const struct tern_dtensor *x,
                                  int64_t x_col, const struct tern_dtensor *y, int64_t y_col,
                                  enum tern_glu_act act, struct tern_dtensor *out);
enum tern_status tern_cpu_scale(struct tern_backend *be, const struct tern_dtensor *x, float c,
                                const struct tern_dtensor *s, struct tern_dtensor *out);
enum tern_status tern_cpu_softcap(struct tern_backend *be, struct tern_dtensor *x, float cap);
enum tern_status tern_cpu_argmax(struct tern_backend *be, const struct tern_dtensor *logits,
                                 struct tern_dtensor *out);
/* The gate activation act_mul applies (float32). */
float tern_cpu_glu_act(enum tern_glu_act act, float a);
/* cpu_moe.c: the mixture-of-experts ops. */
enum tern_status tern_cpu_moe_route(struct tern_backend *be, const struct tern_dtensor *logits,
                                    int32_t top_k, bool renorm,
                                    const struct tern_dtensor *expert_scale,
                                    struct tern_dtensor *ids, struct tern_dtensor *weights);
enum tern_status tern_cpu_moe_experts(struct tern_backend *be, const struct tern_experts *w,
                                      enum tern_glu_act act, const struct tern_moe_io *io);
/* cpu_fused.c: the fused ops as the sequence of the ops above. */
enum tern_status tern_cpu_qk_rope_store(struct tern_backend *be, struct tern_dtensor *qkv,
                                        const struct tern_dtensor *q_norm,
                                        const struct tern_dtensor *k_norm, float eps,
                                        const struct tern_rope *rope,
                                        const struct tern_attn_params *p,
                                        const struct tern_batch_dev *batch,
                                        struct tern_kv_layer *kv);
enum tern_status tern_cpu_matmul_glu(struct tern_backend *be, const struct tern_dtensor *x,
                                     const struct tern_linear *w, struct tern_dtensor *gate_up,
                                     struct tern_dtensor *act);

#endif
