/*
 * cpu_fused.c — the CPU's fused ops (backend.h: qk_rope_store, matmul_glu).
 * The CPU gains nothing from fusing, so each is the sequence of the CPU ops
 * it replaces, called in order: results stay bitwise those of the unfused
 * forward, and the CUDA fused kernels have the same reference.
 * Depends on cpu.h.
 */
#include "backend/cpu/cpu.h"

enum tern_status
tern_cpu_qk_rope_store(struct tern_backend *be, struct tern_dtensor *qkv,
                       const struct tern_dtensor *q_norm, const struct tern_dtensor *k_norm,
                       float eps, const struct tern_rope *rope, const struct tern_attn_params *p,
                       const struct tern_batch_dev *batch, struct tern_kv_layer *kv)
{
    int64_t qd = (int64_t)p->n_heads * rope->head_dim;
    int64_t kvd = (int64_t)p->n_kv_heads * rope->head_dim;
    if (q_norm && !k_norm)
        return tern_error(TERN_E_INVALID_ARG, "qk_rope_store: q_norm given without k_norm");
    if (q_norm) {
        TERN_TRY(tern_cpu_head_rmsnorm(be, qkv, 0, p->n_heads, rope->head_dim, q_norm, eps));
        TERN_TRY(tern_cpu_head_rmsnorm(be, qkv, qd, p->n_kv_heads, rope->head_dim, k_norm, eps));
    }
    /* The k heads follow the q heads: one rope over both (each head alone). */
    TERN_TRY(tern_cpu_rope(be, qkv, 0, p->n_heads + p->n_kv_heads, &batch->positions, rope));
    return tern_cpu_kv_store(be, qkv, qd, qd + kvd, batch, kv);
}

enum tern_status tern_cpu_matmul_glu(struct tern_backend *be, const struct tern_dtensor *x,
                                     const struct tern_linear *w, struct tern_dtensor *gate_up,
                                     struct tern_dtensor *act)
{
    TERN_TRY(tern_cpu_matmul(be, x, w, gate_up, 0));
    return tern_cpu_silu_mul(be, gate_up, act);
}
