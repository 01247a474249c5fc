/*
 * cuda_step.c — the step_prepare / step_run / step_free ops of the CUDA
 * backend: the decode step of one sequence as one persistent kernel
 * (cuda_step.cu). step_prepare checks that the model fits the kernel,
 * repacks every projection and the head into records (576 bytes per 16-row
 * tile and 64-k group; held beside the MLX layout, which prefill and the
 * batched decode keep reading) and picks each GEMV's warps per tile so the
 * op balances over the grid. step_run points the argument block at the
 * batch, the caches and the scratch, and launches (graph-capturable).
 * TERN_CUDA_STEP=0 turns the op off (cuda.c); TERN_CUDA_STEP_STAMPS=FILE
 * launches the instrumented kernel and writes the last step's per-op
 * timestamps to FILE when the plan is freed (write_stamps, for
 * scripts/step-stamps.py).
 */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_step.h"
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tern_step_plan {
    tk_step_args args; /* the launch's block, batch fields filled per run */
    tk_step_op *ops_dev;
    void **rec; /* the records of each op */
    int n_ops;
    int grid;
    int64_t E, vocab;
    unsigned long long *stamps; /* TERN_CUDA_STEP_STAMPS: written to that file by step_free */
    char *stamps_path;          /* the file, as the variable was at step_prepare */
    void *scratch; /* the epoch counter, the argmax's key and count, then the LL lines */
};

static enum tern_status unsupported(const char *why)
{
    return tern_error(TERN_E_UNSUPPORTED, "decode step kernel: %s", why);
}

/* A 4-bit group-64 linear with BF16 scales and biases, no additive bias,
 * of the given shape. */
static bool q4_fits(const struct tern_linear *w, int64_t out, int64_t in)
{
    return w && w->weight.buf && w->bits == 4 && w->group_size == 64 && !w->bias.buf &&
           w->scales.dtype == TERN_DTYPE_BF16 && w->biases.dtype == TERN_DTYPE_BF16 &&
           w->in_features == in && w->out_features == out && in % 64 == 0;
}

/* A BF16 vector of n, 16-byte aligned (the kernel copies norm weights in
 * 16-byte pieces). */
static bool bf16_vec(const struct tern_dtensor *t, int64_t n)
{
    return t && t->buf && t->dtype == TERN_DTYPE_BF16 && (int64_t)tern_dtensor_numel(t) == n &&
           ((uintptr_t)tern_cuda_ptr(t) & 15) == 0;
}

/* The op's warps per tile (1 << lks): the share that balances its tiles
 * best over the grid's warp groups, with at most TK_STEP_LT tiles per group
 * and max_slots per block; within 2% the fewer warps per tile (longer
 * slices: fewer tile ends). On the 8B (132 SMs): qkv 16; o, gate_up,
 * down and lm_head 8, the best of the lab's sweeps (docs/perf/quantized.md).
 * -1: none fits. */
static int pick_lks(int64_t tiles, int64_t nG, int grid, int64_t max_slots)
{
    int best = -1;
    double best_eff = -1.0;
    for (int lks = 0; lks <= 4; lks++) {
        int64_t ks = 1 << lks;
        if (nG % ks) continue;
        int64_t units = (int64_t)grid * (TK_STEP_NW / ks), lt = (tiles + units - 1) / units;
        if (lt > TK_STEP_LT || lt * (TK_STEP_NW / ks) > max_slots) continue;
        double eff = (double)tiles / (double)(units * lt);
        if (eff > best_eff + 0.02) best_eff = eff, best = lks;
    }
    return best;
}

enum tern_status tern_cuda_step_prepare(struct tern_backend *be, const struct tern_step_desc *d,
                                        struct tern_step_plan **out)
{
    struct tern_cuda *c = tern_cuda_of(be);
    *out = NULL;
    const struct tern_attn_params *ap = d->attn;
    const struct tern_rope *rp = d->rope;
    int64_t E = d->hidden, F = d->intermediate, V = d->vocab, hd = ap->head_dim;
    int64_t nq = ap->n_heads, nkv = ap->n_kv_heads;
    if (be->deterministic) return unsupported("deterministic mode");
    if (be->act_dtype != TERN_DTYPE_BF16 || be->kv_dtype != TERN_DTYPE_BF16)
        return unsupported("activations or KV cache not BF16");
    if (d->qk_norm || ap->sliding_window || ap->softcap != 0.0f || rp->interleaved)
        return unsupported("head norms, sliding window, softcap or interleaved rope");
    if (d->n_layers < 1 || d->n_layers > TK_STEP_MAX_LAYERS || hd > TK_STEP_MAX_HD || hd % 16 ||
        nkv < 1 || nq % nkv || nq / nkv > TK_STEP_MAX_G || rp->rotary_dim % 2 ||
        rp->rotary_dim > hd)
        return unsupported("layer count or head shape");
    int64_t qkv_w = (nq + 2 * nkv) * hd;
    if (E % 64 || F % 64 || (nq * hd) % 64 || E > TK_STEP_MAX_E || F > TK_STEP_MAX_K ||
        nq * hd > TK_STEP_MAX_K)
        return unsupported("hidden / intermediate / head widths");
    for (int l = 0; l < d->n_layers; l++) {
        const struct tern_step_layer *ly = &d->layers[l];
        if (!q4_fits(ly->qkv, qkv_w, E) || !q4_fits(ly->o, E, nq * hd) ||
            !q4_fits(ly->gate_up, 2 * F, E) || !q4_fits(ly->down, E, F) ||
            !bf16_vec(ly->in_norm, E) || !bf16_vec(ly->post_norm, E))
            return unsupported("a layer is not fused 4-bit group-64 projections with BF16 norms");
    }
    if (!q4_fits(d->lm_head, V, E) || !bf16_vec(d->final_norm, E))
        return unsupported("the head is not 4-bit group 64");
    int per_sm = 0;
    if (tk_step_fits(&per_sm) != cudaSuccess || per_sm < 1) {
        cudaGetLastError();
        return unsupported("the kernel's shared memory does not fit this device");
    }
    int coop = 0;
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, c->device);
    if (!coop) return unsupported("no cooperative launch on this device");
    int grid = c->n_sm;
    int G = (int)(nq / nkv);
    int max_splits = (int)(tk_step_merge_floats() / ((size_t)G * (size_t)(hd + 4)));
    if (max_splits > grid / (int)nkv) max_splits = grid / (int)nkv;
    if (max_splits > 64) max_splits = 64;
    if (max_splits < 1) return unsupported("too many kv heads for the grid");

    struct tern_step_plan *p = tern_calloc(1, sizeof *p);
    if (!p) return TERN_E_NO_MEMORY;
    p->n_ops = 4 * d->n_layers + 1;
    p->grid = grid;
    p->E = E, p->vocab = V;
    tk_step_op *ops = tern_calloc((size_t)p->n_ops, sizeof *ops);
    p->rec = tern_calloc((size_t)p->n_ops, sizeof *p->rec);
    enum tern_status st = TERN_OK;
    size_t rec_bytes = 0;
    if (!ops || !p->rec) {
        st = TERN_E_NO_MEMORY;
        goto fail;
    }
    for (int i = 0; i < p->n_ops; i++) {
        int l = i / 4, kind = i == p->n_ops - 1 ? 4 : i % 4;
        const struct tern_linear *w = NULL;
        const struct tern_dtensor *nw = NULL;
        int64_t glu = 0;
        switch (kind) {
        case 0:
            w = d->layers[l].qkv, nw = d->layers[l].in_norm;
            break;
        case 1:
            w = d->layers[l].o;
            break;
        case 2:
            w = d->layers[l].gate_up, nw = d->layers[l].post_norm, glu = F;
            break;
        case 3:
            w = d->layers[l].down;
            break;
        default:
            w = d->lm_head, nw = d->final_norm;
        }
        int64_t in = w->in_features, rows = w->out_features;
        int64_t tiles = tk_step_tiles(rows, glu), nG = in / 64;
        /* o and down: the residual rows of the block's tiles wait in its stash */
        int lks =
            pick_lks(tiles, nG, grid, kind == 1 || kind == 3 ? TK_STEP_STASH_TILES : INT64_MAX);
        if (lks < 0) {
            st = unsupported("an op has too many tiles for the grid");
            goto fail;
        }
        size_t bytes = (size_t)tk_step_records(tiles, nG, grid, lks) * TK_STEP_REC_BYTES;
        cudaError_t e = cudaMalloc(&p->rec[i], bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            p->rec[i] = NULL;
            st = tern_error(TERN_E_NO_MEMORY, "decode step kernel: %zu bytes of records", bytes);
            goto fail;
        }
        e = tk_step_repack(c->stream, tern_cuda_ptr(&w->weight), tern_cuda_ptr(&w->scales),
                           tern_cuda_ptr(&w->biases), rows, in, glu, grid, lks, p->rec[i]);
        if (e != cudaSuccess) {
            st = tern_cuda_fail("tk_step_repack", (int)e, __FILE__, __LINE__);
            goto fail;
        }
        rec_bytes += bytes;
        ops[i].rec = p->rec[i];
        ops[i].norm_w = nw ? tern_cuda_ptr(nw) : NULL;
        ops[i].kind = kind;
        ops[i].in = (int)in;
        ops[i].out = (int)rows;
        ops[i].nG = (int)nG;
        ops[i].tiles = (int)tiles;
        ops[i].lks = lks;
        p->args.rec[i] = p->rec[i];
        p->args.k_tiles[kind] = (int)tiles, p->args.k_nG[kind] = (int)nG;
        p->args.k_lks[kind] = lks;
    }
    /* LL lines per layer: qkv, attn (BF16, 4 per line), res after o, act
     * (BF16), res after down (F32, 2 per line), the splits' partials */
    int64_t ll_qkv = 0, ll_attn = qkv_w / 4, ll_res_o = ll_attn + nq * hd / 4;
    int64_t ll_act = ll_res_o + E / 2, ll_res_d = ll_act + F / 4, ll_part = ll_res_d + E / 2;
    int64_t ll_layer = ll_part + nkv * max_splits * G * (hd + 2) / 2;
    size_t total = 256 + (size_t)ll_layer * (size_t)d->n_layers * 16;
    if (ll_layer * d->n_layers > INT32_MAX / 2 || cudaMalloc(&p->scratch, total) != cudaSuccess ||
        cudaMalloc((void **)&p->ops_dev, (size_t)p->n_ops * sizeof *ops) != cudaSuccess) {
        cudaGetLastError();
        st = tern_error(TERN_E_NO_MEMORY, "decode step kernel: scratch");
        goto fail;
    }
    char *s = p->scratch;
    tk_step_args *a = &p->args;
    a->ops = p->ops_dev;
    a->n_layers = d->n_layers;
    a->E = (int)E, a->F = (int)F, a->nq = (int)nq, a->nkv = (int)nkv, a->hd = (int)hd;
    a->rot = rp->rotary_dim;
    a->eps = d->eps, a->scale = ap->scale, a->mscale = rp->mscale;
    a->inv_freq = tern_cuda_ptr(&rp->inv_freq);
    a->epoch = (unsigned long long *)s;
    a->am_key = (unsigned long long *)(s + 8);
    a->am_cnt = (unsigned *)(s + 16);
    a->ll = s + 256;
    a->ll_layer = (int)ll_layer, a->ll_qkv = (int)ll_qkv, a->ll_attn = (int)ll_attn;
    a->ll_res_o = (int)ll_res_o, a->ll_act = (int)ll_act, a->ll_res_d = (int)ll_res_d;
    a->ll_part = (int)ll_part;
    a->max_splits = max_splits;
    cudaError_t e = cudaMemcpyAsync(p->ops_dev, ops, (size_t)p->n_ops * sizeof *ops,
                                    cudaMemcpyHostToDevice, c->stream);
    const char *stamps_path = getenv("TERN_CUDA_STEP_STAMPS");
    if (stamps_path && (p->stamps_path = tern_strdup(stamps_path))) {
        /* the stamps, then the latest exit, the launch count and the gaps */
        size_t sb = ((size_t)p->n_ops * (size_t)grid * TK_STEP_STAMPS + 2 + TK_STEP_GAPS) *
                    sizeof *p->stamps;
        if (cudaMalloc((void **)&p->stamps, sb) != cudaSuccess ||
            cudaMemset(p->stamps, 0, sb) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(p->stamps);
            p->stamps = NULL;
        }
        a->stamps = p->stamps;
    }
    /* flags 0: never a launch's (the first launch's flag is 1) */
    if (e == cudaSuccess) e = cudaMemsetAsync(p->scratch, 0, total, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream); /* the copy and the repacks done */
    if (e != cudaSuccess) {
        st = tern_cuda_fail("decode step kernel setup", (int)e, __FILE__, __LINE__);
        goto fail;
    }
    tern_free(ops);
    tern_log(TERN_LOG_INFO,
             "decode step kernel: %d ops on %d SMs, %.2f GB of records, %d attention splits "
             "per kv head at most",
             p->n_ops, grid, (double)rec_bytes / 1e9, max_splits);
    *out = p;
    return TERN_OK;
fail:
    tern_free(ops);
    tern_cuda_step_free(be, p);
    return st;
}

enum tern_status tern_cuda_step_run(struct tern_backend *be, struct tern_step_plan *p,
                                    struct tern_dtensor *residual,
                                    const struct tern_batch_dev *batch, struct tern_kv_layer *kv,
                                    struct tern_dtensor *logits, struct tern_dtensor *ids,
                                    struct tern_dtensor *ids_at)
{
    struct tern_cuda *c = tern_cuda_of(be);
    if (!batch->host || batch->host->n_seqs != 1 || batch->host->n_tokens != 1)
        return tern_error(TERN_E_INVALID_ARG, "decode step kernel: one sequence, one token");
    if (residual->dtype != TERN_DTYPE_F32 || (int64_t)tern_dtensor_numel(residual) != p->E ||
        logits->dtype != TERN_DTYPE_F32 || (int64_t)tern_dtensor_numel(logits) != p->vocab)
        return tern_error(TERN_E_INVALID_ARG,
                          "decode step kernel: residual [1, %lld] and logits "
                          "[1, %lld] F32 expected",
                          (long long)p->E, (long long)p->vocab);
    if ((ids && (ids->dtype != TERN_DTYPE_I32 || tern_dtensor_numel(ids) < 1)) ||
        (ids_at && (!ids || ids_at->dtype != TERN_DTYPE_I32)))
        return tern_error(TERN_E_INVALID_ARG,
                          "decode step kernel: ids I32 [1] expected (and ids_at only with ids)");
    tk_step_args *a = &p->args;
    a->am_ids = ids ? tern_cuda_ptr(ids) : NULL;
    a->am_hist = ids_at ? tern_cuda_ptr(ids_at) : NULL;
    a->n_hist = ids_at ? (int)tern_dtensor_numel(ids_at) : 0;
    a->vocab = (int)p->vocab;
    for (int l = 0; l < a->n_layers; l++) {
        a->kc[l] = tern_cuda_ptr(&kv[l].k);
        a->vc[l] = tern_cuda_ptr(&kv[l].v);
    }
    a->res = tern_cuda_ptr(residual);
    a->logits = tern_cuda_ptr(logits);
    a->pos = tern_cuda_ptr(&batch->positions);
    a->slot = tern_cuda_ptr(&batch->slot_mapping);
    a->seq_len = tern_cuda_ptr(&batch->seq_lens);
    a->btab = tern_cuda_ptr(&batch->block_tables);
    a->bs = batch->block_size;
    TERN_CU(tk_step_launch(c->stream, a, p->grid));
    return TERN_OK;
}

/* Every launch's gap (ns from the latest block exit of the launch before
 * to block 0's first instruction; the last TK_STEP_GAPS launches, oldest
 * first, one a line) into path + ".gaps". */
static void write_gaps(struct tern_step_plan *p, size_t n, const char *path)
{
    unsigned long long *x = tern_malloc((2 + TK_STEP_GAPS) * sizeof *x);
    char *name = tern_malloc(strlen(path) + 8);
    FILE *fp = NULL;
    if (x && name &&
        cudaMemcpy(x, p->stamps + n, (2 + TK_STEP_GAPS) * sizeof *x, cudaMemcpyDeviceToHost) ==
            cudaSuccess) {
        snprintf(name, strlen(path) + 8, "%s.gaps", path);
        fp = fopen(name, "w");
    }
    if (fp) {
        unsigned long long k = x[1], m = k < TK_STEP_GAPS ? k : TK_STEP_GAPS;
        for (unsigned long long i = k - m; i < k; i++)
            if (x[2 + i % TK_STEP_GAPS]) fprintf(fp, "%llu\n", x[2 + i % TK_STEP_GAPS]);
        fclose(fp);
    } else {
        cudaGetLastError();
        tern_log(TERN_LOG_WARN, "decode step kernel: launch gaps not written next to %s", path);
    }
    tern_free(name);
    tern_free(x);
}

/* The last step's stamps as CSV (op, kind, block, then the stamps in ns
 * from the step's first; op 0's last column the block's SM id, an o op's
 * its attention item's last pass's K / V rows in (if it had more than
 * one); op 0's att_q / att_kv its entry and the block's exit in the launch
 * before, the head's att_q the block's exit), for scripts/step-stamps.py;
 * the launch gaps beside it (write_gaps). */
static void write_stamps(struct tern_cuda *c, struct tern_step_plan *p, const char *path)
{
    size_t n = (size_t)p->n_ops * (size_t)p->grid * TK_STEP_STAMPS;
    unsigned long long *h = tern_malloc(n * sizeof *h);
    FILE *fp = h ? fopen(path, "w") : NULL;
    if (!fp || cudaStreamSynchronize(c->stream) != cudaSuccess ||
        cudaMemcpy(h, p->stamps, n * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        cudaGetLastError();
        tern_log(TERN_LOG_WARN, "decode step kernel: stamps not written to %s", path);
    } else {
        unsigned long long t0 = ~0ull;
        for (size_t i = 0; i < n; i += TK_STEP_STAMPS)
            if (h[i] && h[i] < t0) t0 = h[i];
        fprintf(fp, "op,kind,block,start,x_ready,gemv_done,epilogue_done,att_q,att_kv,"
                    "att_passes,att_parts,att_out,att_qk,att_softmax,sm,"
                    "cyc_wait,cyc_iter1,cyc_issue,cyc_loop\n");
        for (int op = 0; op < p->n_ops; op++)
            for (int b = 0; b < p->grid; b++) {
                const unsigned long long *e =
                    h + ((size_t)op * (size_t)p->grid + (size_t)b) * TK_STEP_STAMPS;
                fprintf(fp, "%d,%d,%d", op, op == p->n_ops - 1 ? 4 : op % 4, b);
                for (int k = 0; k < TK_STEP_STAMP_SM; k++) /* 0: not stamped (no item) */
                    fprintf(fp, ",%lld", e[k] ? (long long)(e[k] - t0) : -1ll);
                unsigned long long e11 = e[TK_STEP_STAMP_SM]; /* op 0: the SM; o ops: a time */
                fprintf(fp, ",%lld", op == 0 ? (long long)e11 : e11 ? (long long)(e11 - t0) : -1ll);
                for (int k = TK_STEP_STAMP_DIAG; k < TK_STEP_STAMPS; k++) /* SM cycles, summed */
                    fprintf(fp, ",%llu", e[k]);
                fprintf(fp, "\n");
            }
        write_gaps(p, n, path);
    }
    if (fp) fclose(fp);
    tern_free(h);
}

void tern_cuda_step_free(struct tern_backend *be, struct tern_step_plan *p)
{
    if (!p) return;
    struct tern_cuda *c = tern_cuda_of(be);
    if (p->stamps) {
        write_stamps(c, p, p->stamps_path);
        cudaFree(p->stamps);
    }
    tern_free(p->stamps_path);
    if (p->rec)
        for (int i = 0; i < p->n_ops; i++) cudaFree(p->rec[i]);
    cudaFree(p->ops_dev);
    cudaFree(p->scratch);
    tern_free(p->rec);
    tern_free(p);
}
