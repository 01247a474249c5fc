/*
 * persist5_lab.cu — kernel lab for issue 7: a whole 8B 4-bit decode step as
 * ONE persistent kernel, to measure what the plan in docs/perf/quant.md
 * ("Plan: the decode step as one persistent kernel") projects: the GEMV
 * chain of persist_lab.cu's best schedule plus the phases between the
 * GEMVs, with tile sums no warp waits for.
 *
 * Per layer, one block of NW warps per SM, grid barriers (B) between
 * dependent phases:
 *   norm(residual) -> x (every block, shared memory) ; qkv GEMV -> qkv (BF16)
 *   B ; attention (items = (kv head, split of 64 positions) on 4-warp groups,
 *       online softmax, the last split of a head merges in split order) -> attn
 *   B ; x = attn ; o GEMV, residual += its BF16 output
 *   B ; norm(residual) -> x ; gate_up GEMV (GLU tiles: rows 0-7 gate, 8-15 up)
 *       -> act = silu(gate) * up (BF16)
 *   B ; x = act ; down GEMV, residual += its BF16 output
 *   B ; (next layer) ... final norm ; lm_head GEMV -> logits (F32).
 * GEMVs: q8 records (q8_common.cuh) streamed by per-warp cp.async.bulk rings
 * (S stages of C records) that run ahead across ops AND phases (weights do
 * not depend on activations); chunks of C records interleaved over all the
 * grid's warps; each chunk's partial sums go to a workspace and the last
 * chunk of a tile to arrive (a counter per tile, reset by it) adds the
 * tile's parts in chunk order and runs the epilogue: deterministic, and no
 * warp waits for another inside an op.
 * What is left out: rope and the new token's K/V store (the qkv epilogue
 * does them in the library, matmul_rope_store), batch > 1, correctness
 * against a reference (this lab projects time; q8_lab checks the records'
 * arithmetic): the outputs are only checked to be finite.
 *
 * Printed: the step's time as one launch with the phases and with the
 * GEMVs alone (same kernel, phases skipped), per-phase time inside it
 * (block 0's clock), tok/s and % of the copy-rate floor of the records.
 * Written 2026-11-30 after the session's device time was spent: compiled,
 * NOT yet run. Run: ./persist5_lab [layers (32)] [context (550)].
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/persist5_lab.cu -o persist5_lab
 */
#include "backend/cuda/cuda_qmma.cuh"
#include "lab_common.cuh"
#include "persist_common.cuh"
#include "q8_common.cuh"

#include <cuda_bf16.h>

#ifndef NW
#define NW 16        /* warps per block */
#endif
#ifndef S5
#define S5 4         /* ring stages per warp */
#endif
#ifndef C5
#define C5 4         /* records per chunk */
#endif
#define HID 4096     /* hidden size */
#define FF 14336     /* intermediate size */
#define NH 32        /* q heads */
#define NKV 8        /* kv heads */
#define HD 128       /* head dim */
#define SPLIT 64     /* positions per attention item */
#define MAXK FF
#define MAX_SPLITS 64

enum { OP_QKV, OP_O, OP_GU, OP_DOWN, OP_LM };

struct gop { /* one GEMV */
    const uint4 *rec; /* tiles x nG records */
    int kind, in, out, nG, tiles;
};

struct step_args {
    const gop *ops; /* 4 per layer, then lm_head */
    int n_layers, ctx;
    float *res;             /* [HID] F32 residual */
    const bf16 *norm_w;     /* [(2 L + 1) x HID] */
    bf16 *qkv, *attn, *act; /* activations */
    float *logits;
    const bf16 *kc, *vc; /* [L][ctx][NKV][HD] */
    float *part;         /* GEMV chunk parts: tiles x chunks x 16 */
    unsigned *tile_cnt;  /* per tile */
    float *att_ws;       /* attention partials: NKV x MAX_SPLITS x (2 + 4 HD) x 4 heads */
    unsigned *att_cnt;   /* per kv head */
    unsigned *ctr;       /* grid barrier */
    int phases;          /* 0: GEMVs only (x read as is) */
};

/* ---------------------------------------------------------------- the weight stream */

struct cur5 {
    int op;
    int64_t m; /* the warp's m-th chunk of op */
};

static __device__ __forceinline__ int chunk5(const gop &o, int gw, int64_t m, int64_t &r)
{
    int64_t j = gw + m * (int64_t)gridDim.x * NW;
    r = j * C5;
    int64_t R = (int64_t)o.tiles * o.nG;
    return r < R ? (int)min((int64_t)C5, R - r) : 0;
}

/* Lane 0: stream the warp's next chunk (across ops) into stage issued % S5. */
static __device__ __forceinline__ void issue5(cur5 &c, const gop *ops, int n_ops, int gw,
                                              uint32_t ring0, uint32_t bar0, int64_t &issued)
{
    while (c.op < n_ops) {
        int64_t r;
        int n = chunk5(ops[c.op], gw, c.m, r);
        if (n == 0) {
            c.op++, c.m = 0;
            continue;
        }
        int st = (int)(issued % S5);
        q8_bulk(ring0 + st * C5 * REC * 16, ops[c.op].rec + (size_t)r * REC, (uint32_t)n * REC * 16,
                bar0 + 8 * st);
        issued++, c.m++;
        return;
    }
}

/* ---------------------------------------------------------------- phases */

/* x[i] = bf16(res[i] * rsqrt(mean(res^2) + eps) * w[i]) for the block. */
static __device__ void norm_phase(const float *res, const bf16 *w, bf16 *xs, float *red)
{
    float ss = 0.0f;
    for (int i = threadIdx.x; i < HID; i += blockDim.x) {
        float v = __ldcg(res + i); /* written by other SMs: past L1 */
        ss = fmaf(v, v, ss);
    }
    ss = tk_warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int k = 0; k < NW; k++) tot += red[k];
    float inv = rsqrtf(tot / HID + 1e-5f);
    for (int i = threadIdx.x; i < HID; i += blockDim.x)
        xs[i] = __float2bfloat16(__ldcg(res + i) * inv * __bfloat162float(w[i]));
    __syncthreads();
}

static __device__ void load_x(const bf16 *src, int n, bf16 *xs)
{
    for (int i = threadIdx.x; i < n / 8; i += blockDim.x)
        ((uint4 *)xs)[i] = __ldcg((const uint4 *)src + i);
    __syncthreads();
}

/* One attention item (kv head h, split sp) on a 4-warp group (named
 * barrier id): online softmax over the split's positions for the G = 4 q
 * heads of h, partials to the workspace; the last split of h merges. */
static __device__ void att_item(const step_args &a, int layer, int h, int sp, int n_sp, int gwarp,
                                int bar_id, float (*sm)[4][HD + 2])
{
    int lane = threadIdx.x & 31;
    const bf16 *q = a.qkv + h * 4 * HD; /* q heads 4h..4h+3 */
    float qv[4][4];
#pragma unroll
    for (int g = 0; g < 4; g++) {
        uint2 u = __ldcg((const uint2 *)(q + g * HD + lane * 4)); /* written by other SMs */
        const bf16 *e = (const bf16 *)&u;
#pragma unroll
        for (int d = 0; d < 4; d++) qv[g][d] = __bfloat162float(e[d]) * 0.0884f;
    }
    float m[4], l[4], acc[4][4];
#pragma unroll
    for (int g = 0; g < 4; g++) {
        m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
        for (int d = 0; d < 4; d++) acc[g][d] = 0.0f;
    }
    int p0 = sp * SPLIT, p1 = min(a.ctx, p0 + SPLIT);
    size_t lbase = (size_t)layer * a.ctx * NKV * HD;
    for (int p = p0 + gwarp; p < p1; p += 4) {
        const bf16 *kr = a.kc + lbase + ((size_t)p * NKV + h) * HD + lane * 4;
        const bf16 *vr = a.vc + lbase + ((size_t)p * NKV + h) * HD + lane * 4;
        uint2 ku = __ldg((const uint2 *)kr), vu = __ldg((const uint2 *)vr);
        const bf16 *k = (const bf16 *)&ku, *v = (const bf16 *)&vu;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            float s = 0.0f;
#pragma unroll
            for (int d = 0; d < 4; d++) s = fmaf(qv[g][d], __bfloat162float(k[d]), s);
            s = tk_warp_sum(s);
            float mn = fmaxf(m[g], s), f = __expf(m[g] - mn), e = __expf(s - mn);
            l[g] = l[g] * f + e;
#pragma unroll
            for (int d = 0; d < 4; d++) acc[g][d] = acc[g][d] * f + e * __bfloat162float(v[d]);
            m[g] = mn;
        }
    }
    /* the group's 4 warps, merged in warp order */
#pragma unroll
    for (int g = 0; g < 4; g++) {
        if (lane == 0) sm[gwarp][g][HD] = m[g], sm[gwarp][g][HD + 1] = l[g];
#pragma unroll
        for (int d = 0; d < 4; d++) sm[gwarp][g][lane * 4 + d] = acc[g][d];
    }
    asm volatile("bar.sync %0, 128;" ::"r"(bar_id) : "memory");
    float *ws = a.att_ws + ((size_t)h * MAX_SPLITS + sp) * 4 * (HD + 2);
    for (int i = gwarp * 32 + lane; i < 4 * HD; i += 128) {
        int g = i / HD, d = i % HD;
        float M = -INFINITY;
        for (int w = 0; w < 4; w++) M = fmaxf(M, sm[w][g][HD]);
        float L = 0.0f, A = 0.0f;
        for (int w = 0; w < 4; w++) {
            float f = sm[w][g][HD] == -INFINITY ? 0.0f : __expf(sm[w][g][HD] - M);
            L += sm[w][g][HD + 1] * f, A += sm[w][g][d] * f;
        }
        ws[g * (HD + 2) + d] = A;
        if (d == 0) ws[g * (HD + 2) + HD] = M, ws[g * (HD + 2) + HD + 1] = L;
    }
    __threadfence();
    asm volatile("bar.sync %0, 128;" ::"r"(bar_id) : "memory");
    __shared__ unsigned last_s[4];
    int grp = (threadIdx.x >> 5) / 4;
    if (gwarp == 0 && lane == 0) last_s[grp] = atomicAdd(a.att_cnt + h, 1u) == (unsigned)(n_sp - 1);
    asm volatile("bar.sync %0, 128;" ::"r"(bar_id) : "memory");
    if (!last_s[grp]) return;
    __threadfence();
    const float *w0 = a.att_ws + (size_t)h * MAX_SPLITS * 4 * (HD + 2);
    for (int i = gwarp * 32 + lane; i < 4 * HD; i += 128) {
        int g = i / HD, d = i % HD;
        float M = -INFINITY;
        for (int s = 0; s < n_sp; s++) M = fmaxf(M, __ldcg(w0 + (s * 4 + g) * (HD + 2) + HD));
        float L = 0.0f, A = 0.0f;
        for (int s = 0; s < n_sp; s++) {
            const float *e = w0 + (s * 4 + g) * (HD + 2);
            float f = __expf(__ldcg(e + HD) - M);
            L += __ldcg(e + HD + 1) * f, A += __ldcg(e + d) * f;
        }
        a.attn[(h * 4 + g) * HD + d] = __float2bfloat16(A / L);
    }
    if (gwarp == 0 && lane == 0) a.att_cnt[h] = 0;
}

/* ---------------------------------------------------------------- GEMV tile epilogue */

/* The last chunk of a tile: parts in chunk order, then the op's epilogue
 * for rows g / g + 8 (lanes t == 0). */
static __device__ void tile_finish(const step_args &a, const gop &o, int tile, int cpt, int lane)
{
    int g = lane >> 2;
    if ((lane & 3) != 0) return;
    float s0 = 0.0f, s1 = 0.0f;
    const float *p = a.part + (size_t)tile * cpt * 16;
    for (int c = 0; c < cpt; c++) s0 += __ldcg(p + c * 16 + g), s1 += __ldcg(p + c * 16 + 8 + g);
    int r0 = tile * 16 + g;
    switch (o.kind) {
    case OP_QKV: a.qkv[r0] = __float2bfloat16(s0), a.qkv[r0 + 8] = __float2bfloat16(s1); break;
    case OP_GU: { /* rows 0-7 gate, 8-15 up of act row tile * 8 + g */
        float gv = __bfloat162float(__float2bfloat16(s0)), uv = __bfloat162float(__float2bfloat16(s1));
        a.act[tile * 8 + g] = __float2bfloat16(gv / (1.0f + __expf(-gv)) * uv);
        break;
    }
    case OP_LM:
        if (r0 < o.out) a.logits[r0] = s0;
        if (r0 + 8 < o.out) a.logits[r0 + 8] = s1;
        break;
    default: /* o, down: into the residual as the BF16 projection */
        a.res[r0] = __ldcg(a.res + r0) + __bfloat162float(__float2bfloat16(s0));
        a.res[r0 + 8] = __ldcg(a.res + r0 + 8) + __bfloat162float(__float2bfloat16(s1));
    }
}

static __global__ void __launch_bounds__(NW * 32, 1) k_step(step_args a, uint4 kc)
{
    extern __shared__ __align__(128) unsigned char sm5[];
    __shared__ __align__(8) uint64_t bars[NW][S5];
    __shared__ float red[NW];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int gw = blockIdx.x * NW + warp;
    uint4 *ring = (uint4 *)sm5 + (size_t)warp * S5 * C5 * REC;
    bf16 *xs = (bf16 *)(sm5 + (size_t)NW * S5 * C5 * REC * 16);
    float(*att_sm)[4][4][HD + 2] = (float(*)[4][4][HD + 2])(xs + MAXK);
    uint32_t ring0 = q8_smem(ring), bar0 = q8_smem(&bars[warp][0]);
    if (lane == 0) {
        for (int i = 0; i < S5; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * i));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    int n_ops = 4 * a.n_layers + 1;
    cur5 c = {0, 0};
    int64_t issued = 0, used = 0;
    if (lane == 0)
        for (int i = 0; i < S5; i++) issue5(c, a.ops, n_ops, gw, ring0, bar0, issued);
    int n_sp = (a.ctx + SPLIT - 1) / SPLIT, stamp = 0;
    for (int op = 0; op < n_ops; op++) {
        const gop &o = a.ops[op];
        int layer = op / 4;
        /* the phase before this GEMV and its input x */
        if (op > 0) lab_grid_barrier(a.ctr, (unsigned)(++stamp) * gridDim.x, NW * 32);
        bool clk = blockIdx.x == 0 && threadIdx.x == 0 && 2 * op + 2 <= LAB_MAX_OPS;
        if (clk) g_lab_ts[2 * op] = lab_gtimer();
        if (a.phases) {
            if (o.kind == OP_O) { /* attention, a barrier, then its output */
                int grp = warp / 4;
                for (int it = blockIdx.x * 4 + grp; it < NKV * n_sp; it += gridDim.x * 4)
                    att_item(a, layer, it / n_sp, it % n_sp, n_sp, warp % 4, 4 + grp, att_sm[grp]);
                lab_grid_barrier(a.ctr, (unsigned)(++stamp) * gridDim.x, NW * 32);
                load_x(a.attn, HID, xs);
            } else if (o.kind == OP_DOWN) {
                load_x(a.act, FF, xs);
            } else { /* qkv, gate_up, lm_head: the norm of the residual */
                int wi = o.kind == OP_QKV ? 2 * layer : o.kind == OP_GU ? 2 * layer + 1 : 2 * a.n_layers;
                norm_phase(a.res, a.norm_w + (size_t)wi * HID, xs, red);
            }
        } else {
            load_x(o.kind == OP_DOWN ? a.act : a.attn, o.in, xs);
        }
        if (clk) g_lab_ts[2 * op + 1] = lab_gtimer();
        int cpt = o.nG / C5; /* chunks per tile (nG % C5 == 0 for these shapes) */
        for (int64_t m = 0;; m++) {
            int64_t r;
            int ng = chunk5(o, gw, m, r);
            if (ng == 0) break;
            int st = (int)(used % S5);
            q8_wait(bar0 + 8 * st, (uint32_t)(used / S5) & 1u);
            const uint4 *sp = ring + st * C5 * REC;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            int G = (int)((uint32_t)r % (uint32_t)o.nG);
#pragma unroll
            for (int j = 0; j < C5; j++) {
                uint4 w = sp[j * REC + lane];
                uint2 sb = ((const uint2 *)(sp + j * REC + 32))[g];
                const uint4 *xp = (const uint4 *)(xs + 64 * (G + j) + 16 * t);
                q8_group<false>(w, xp[0], xp[1], sb, kc, acc);
            }
            used++;
            __syncwarp();
            if (lane == 0) issue5(c, a.ops, n_ops, gw, ring0, bar0, issued);
            int tile = (int)(r / o.nG), ch = G / C5;
            if (t == 0) {
                float *p = a.part + ((size_t)tile * cpt + ch) * 16;
                p[g] = acc[0], p[8 + g] = acc[2];
            }
            /* count the part in: lane 0's acq_rel add releases the lanes'
             * part stores (ordered before it by the warp barrier) and, for
             * the last part, acquires the others' before the sums are read */
            __syncwarp();
            unsigned old = 0;
            if (lane == 0)
                asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;"
                             : "=r"(old)
                             : "l"(a.tile_cnt + tile)
                             : "memory");
            old = __shfl_sync(0xffffffffu, old, 0);
            __syncwarp(); /* the lanes' part loads after lane 0's acquire */
            if ((int)old == cpt - 1) {
                tile_finish(a, o, tile, cpt, lane);
                if (lane == 0) a.tile_cnt[tile] = 0;
            }
        }
    }
    lab_grid_barrier(a.ctr, (unsigned)(++stamp) * gridDim.x, NW * 32);
    if (blockIdx.x == 0 && threadIdx.x == 0 && 2 * n_ops <= LAB_MAX_OPS) g_lab_ts[2 * n_ops] = lab_gtimer();
}

/* ---------------------------------------------------------------- host */

int main(int argc, char **argv)
{
    int layers = argc > 1 ? atoi(argv[1]) : 32, ctx = argc > 2 ? atoi(argv[2]) : 550;
    if (layers < 1 || layers > 64 || ctx < 1 || ctx > SPLIT * MAX_SPLITS) {
        printf("layers 1..64, context 1..%d\n", SPLIT * MAX_SPLITS);
        return 1;
    }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    double copy = copy_rate();
    struct { int kind, out, in; } per_layer[] = {
        {OP_QKV, 6144, HID}, {OP_O, HID, HID}, {OP_GU, 2 * FF, HID}, {OP_DOWN, HID, FF}};
    std::vector<gop> host;
    size_t bytes = 0, max_tiles = 0;
    auto add = [&](int kind, int out, int in, uint32_t seed) {
        gop o;
        o.kind = kind, o.in = in, o.out = out, o.nG = in / 64, o.tiles = (out + 15) / 16;
        size_t b = (size_t)o.tiles * o.nG * REC * 16;
        void *p;
        CK(cudaMalloc(&p, b));
        fill(p, b, seed, 0x3F7F3F7Fu, 0); /* small finite weights, scales, biases */
        o.rec = (const uint4 *)p;
        host.push_back(o);
        bytes += b, max_tiles = std::max(max_tiles, (size_t)o.tiles);
    };
    for (int l = 0; l < layers; l++)
        for (auto &s : per_layer) add(s.kind, s.out, s.in, 1000u * l + s.kind);
    add(OP_LM, 128256, HID, 99999u);
    step_args a = {};
    gop *ops;
    CK(cudaMalloc(&ops, host.size() * sizeof(gop)));
    CK(cudaMemcpy(ops, host.data(), host.size() * sizeof(gop), cudaMemcpyHostToDevice));
    a.ops = ops, a.n_layers = layers, a.ctx = ctx;
    size_t kvn = (size_t)layers * ctx * NKV * HD;
    CK(cudaMalloc(&a.res, HID * 4));
    CK(cudaMalloc((void **)&a.norm_w, (size_t)(2 * layers + 1) * HID * 2));
    CK(cudaMalloc(&a.qkv, 6144 * 2));
    CK(cudaMalloc(&a.attn, HID * 2));
    CK(cudaMalloc(&a.act, FF * 2));
    CK(cudaMalloc(&a.logits, 128256 * 4));
    CK(cudaMalloc((void **)&a.kc, kvn * 2));
    CK(cudaMalloc((void **)&a.vc, kvn * 2));
    CK(cudaMalloc(&a.part, max_tiles * (FF / 64 / C5) * 16 * 4));
    CK(cudaMalloc(&a.tile_cnt, max_tiles * 4));
    CK(cudaMalloc(&a.att_ws, (size_t)NKV * MAX_SPLITS * 4 * (HD + 2) * 4));
    CK(cudaMalloc(&a.att_cnt, NKV * 4));
    CK(cudaMalloc(&a.ctr, 4));
    fill((void *)a.norm_w, (size_t)(2 * layers + 1) * HID * 2, 5, 0x007F007Fu, 0x3F803F80u);
    fill((void *)a.kc, kvn * 2, 6, 0x807F807Fu, 0x3E003E00u);
    fill((void *)a.vc, kvn * 2, 8, 0x807F807Fu, 0x3E003E00u);
    fill(a.qkv, 6144 * 2, 9, 0x807F807Fu, 0x3F003F00u);
    fill(a.attn, HID * 2, 10, 0x807F807Fu, 0x3F003F00u);
    fill(a.act, FF * 2, 11, 0x807F807Fu, 0x3F003F00u);
    CK(cudaMemset(a.tile_cnt, 0, max_tiles * 4));
    CK(cudaMemset(a.att_cnt, 0, NKV * 4));
    size_t smem = (size_t)NW * S5 * C5 * REC * 16 + MAXK * 2 + 4 * sizeof(float[4][4][HD + 2]);
    CK(cudaFuncSetAttribute(k_step, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    std::vector<float> res0(HID);
    for (int i = 0; i < HID; i++) res0[i] = (float)((i * 7919) % 200 - 100) / 100.0f;
    printf("copy %.0f GB/s; %d layers, context %d, %.3f GB of records (floor %.1f us = %.0f tok/s), "
           "%d SMs, %zu B shared\n",
           copy, layers, ctx, bytes / 1e9, bytes / copy / 1e3, copy * 1e9 / bytes, sms, smem);
    int n_ops = (int)host.size();
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int phases = 1; phases >= 0; phases--) {
        a.phases = phases;
        std::vector<float> v;
        for (int rep = 0; rep < 6; rep++) {
            CK(cudaMemcpy(a.res, res0.data(), HID * 4, cudaMemcpyHostToDevice));
            CK(cudaMemset(a.ctr, 0, 4));
            void *args[] = {(void *)&a, (void *)&KC};
            CK(cudaEventRecord(e0));
            CK(cudaLaunchCooperativeKernel((const void *)k_step, dim3(sms), dim3(NW * 32), args, smem, 0));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep) v.push_back(ms);
        }
        std::sort(v.begin(), v.end());
        double us = v[v.size() / 2] * 1e3;
        std::vector<float> lg = get(a.logits, 128256);
        int bad = 0;
        for (float x : lg) bad += !std::isfinite(x);
        printf("%-28s %9.1f us = %6.1f tok/s = %5.1f%% of the floor%s\n",
               phases ? "step (GEMVs + phases)" : "GEMVs only (phases skipped)", us, 1e6 / us,
               100.0 * bytes / copy / 1e3 / us, bad ? "  (NON-FINITE LOGITS)" : "");
        unsigned long long ts[LAB_MAX_OPS + 1];
        CK(cudaMemcpyFromSymbol(ts, g_lab_ts, sizeof ts));
        if (2 * n_ops > LAB_MAX_OPS) continue; /* the clocks cover 32 layers + lm_head */
        double ph[5] = {0}, gm[5] = {0};
        int cnt[5] = {0};
        for (int o = 0; o < n_ops; o++) {
            int k = host[o].kind;
            ph[k] += (ts[2 * o + 1] - ts[2 * o]) / 1e3, gm[k] += (ts[2 * o + 2] - ts[2 * o + 1]) / 1e3;
            cnt[k]++;
        }
        const char *kind[5] = {"qkv", "o", "gate_up", "down", "lm_head"};
        for (int k = 0; k < 5; k++)
            printf("  %-8s phase before %6.2f us, GEMV %7.2f us (copy %.2f)\n", kind[k], ph[k] / cnt[k],
                   gm[k] / cnt[k],
                   (double)host[k == 4 ? n_ops - 1 : k].tiles * host[k == 4 ? n_ops - 1 : k].nG *
                       REC * 16 / copy / 1e3);
    }
    printf("==== summary ==== see the lines above (the 70%% target: >= 70%% of the floor)\n");
    return 0;
}
