/*
 * persist4_lab.cu — kernel lab for issue 7: the 8B 4-bit step's GEMV chain
 * in ONE persistent kernel, on "v3 records": v3's own per-lane words made
 * contiguous, so the arithmetic can stay bitwise v3's.
 *
 * Why: persist3_lab.cu ran v3's jobs persistently on the MLX layout (per
 * lane 16-byte cp.async from 16 strided rows): 2104-2276 us for the chain,
 * slower than v3 launched per op (1977); persist_lab.cu's v2 on 576-byte
 * records streamed by per-warp cp.async.bulk rings did it in 1520 us.
 *
 * v3 record (tile tau, 64-k group G), 576 bytes: lane L = 4 g + t holds 16
 * bytes at 16 L = the two packed words v3's lane reads of row 16 tau + g
 * (words 8 G + 2 t, + 1: wa) then the two of row 16 tau + g + 8 (wb); then
 * 8 uint2 at 512 + 8 g: {scale(row g) | scale(row g + 8) << 16, the same
 * for the biases} (rows clamped to out - 1 as v3 clamps them). A v3 step (4
 * groups) is 4 consecutive records: 2304 contiguous bytes. The group fold
 * is v3's (stage_compute), with x read pre-permuted from shared memory
 * (each 8-value chunk stored as bregs' four pairs): same registers, same
 * bits.
 *
 * Schedules (one block of 16 warps per SM, per-warp rings of S stages of
 * one step each, filled by lane 0 with cp.async.bulk across op
 * boundaries, grid barriers between ops):
 *   VB: v3's virtual blocks (8 warps, W k-splits per tile, summed in warp
 *       order) round-robin over the grid's 2 x SMs halves: BITWISE v3;
 *   TB: one tile per block at a time, its 16 warps each taking a
 *       contiguous 1/16 of the tile's records, summed in warp order (not
 *       v3's order; an ops-path GEMV would have to do the same).
 * Printed: the chain's time, per-op time inside it, checks against v3.
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/persist4_lab.cu -o persist4_lab
 */
#include "backend/cuda/cuda_quant_mma.cu"
#include "lab_common.cuh"
#include "persist_common.cuh"
#include "q8_common.cuh"

#define NWP 16
#define MAXK 14336
#define SR 4 /* records per step (v3: 256 k of 4-bit g64) */

struct op4 {
    const uint4 *rec; /* tiles x nG records */
    int in, out, nG, tiles, W, vbs;
    float *y;
};

/* MLX (q, scales, biases) -> v3 records; one thread per (record, lane). */
static __global__ void k_v3rec(const uint32_t *q, const uint16_t *sc, const uint16_t *bi, int out,
                               int in, uint4 *rec)
{
    int nG = in / 64;
    int64_t n = (int64_t)tk_cdiv(out, 16) * nG * 32;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int lane = (int)(i % 32), g = lane >> 2, t = lane & 3;
        int64_t r = i / 32;
        int G = (int)(r % nG), tile = (int)(r / nG);
        int ra = min(tile * 16 + g, out - 1), rb = min(tile * 16 + g + 8, out - 1);
        const uint32_t *pa = q + (size_t)ra * (in / 8) + 8 * G + 2 * t;
        const uint32_t *pb = q + (size_t)rb * (in / 8) + 8 * G + 2 * t;
        rec[r * REC + lane] = make_uint4(pa[0], pa[1], pb[0], pb[1]);
        if (t == 0) {
            uint32_t s = sc[(size_t)ra * nG + G] | (uint32_t)sc[(size_t)rb * nG + G] << 16;
            uint32_t b = bi[(size_t)ra * nG + G] | (uint32_t)bi[(size_t)rb * nG + G] << 16;
            ((uint2 *)(rec + r * REC + 32))[g] = make_uint2(s, b);
        }
    }
}

/* v3's group fold on a record (stage_compute's arithmetic, x pre-permuted). */
static __device__ __forceinline__ void rec_fold(const uint4 *rp, const bf16 *xg_base, bool has_x,
                                                int lane, int g, float *acc)
{
    const uint32_t one = 0x3F803F80u;
    uint4 w = rp[lane];
    uint2 sb = ((const uint2 *)(rp + 32))[g];
    uint32_t wa[2] = {w.x, w.y}, wb[2] = {w.z, w.w};
    float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f}, xg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 2; j++) {
        uint4 u = has_x ? *(const uint4 *)(xg_base + j * 8) : make_uint4(0, 0, 0, 0);
        uint32_t b[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int m = 0; m < 2; m++) {
            tk_mma_bf16(cg, tk_q4_pair(wa[j], 2 * m), tk_q4_pair(wb[j], 2 * m),
                        tk_q4_pair(wa[j], 2 * m + 1), tk_q4_pair(wb[j], 2 * m + 1), b[2 * m],
                        b[2 * m + 1]);
            tk_mma_bf16(xg, one, one, one, one, b[2 * m], b[2 * m + 1]);
        }
    }
    float s0 = __uint_as_float(sb.x << 16), s1 = __uint_as_float(sb.x & 0xffff0000u);
    float o0 = fmaf(-128.0f, s0, __uint_as_float(sb.y << 16));
    float o1 = fmaf(-128.0f, s1, __uint_as_float(sb.y & 0xffff0000u));
    acc[0] = fmaf(o0, xg[0], fmaf(s0, cg[0], acc[0]));
    acc[1] = fmaf(o0, xg[1], fmaf(s0, cg[1], acc[1]));
    acc[2] = fmaf(o1, xg[2], fmaf(s1, cg[2], acc[2]));
    acc[3] = fmaf(o1, xg[3], fmaf(s1, cg[3], acc[3]));
}

/* A warp's unit of work inside one op: its tile, and the records it folds
 * as runs of whole steps: first record r0, `n` steps, `stride` records
 * between steps (VB: v3's ks + i W; TB: contiguous). */
struct unit {
    int tile, ks;
    int64_t r0;
    int n, stride, nrec_last; /* records in the last step (TB's 1/16 may end mid-step) */
};

/* VB: i-th virtual block of this half; TB: i-th tile of this block. */
template <bool TB>
static __device__ __forceinline__ bool unit_of(const op4 &o, int i, int warp, unit &u)
{
    if (TB) {
        int tile = blockIdx.x + i * gridDim.x;
        if (tile >= o.tiles) return false;
        int per = (o.nG + NWP - 1) / NWP, g0 = min(o.nG, warp * per), g1 = min(o.nG, g0 + per);
        u.tile = tile, u.ks = warp;
        u.r0 = (int64_t)tile * o.nG + g0;
        u.n = (g1 - g0 + SR - 1) / SR, u.stride = SR;
        u.nrec_last = g1 - g0 - (u.n - 1) * SR;
        return true;
    }
    int half = warp / QM_WARPS, hw = warp % QM_WARPS;
    int vb = blockIdx.x * 2 + half + i * gridDim.x * 2;
    if (vb >= o.vbs) return false;
    int n_steps = o.nG / SR;
    u.ks = hw % o.W;
    u.tile = vb * (QM_WARPS / o.W) + hw / o.W;
    bool live = u.tile < o.tiles && u.ks < n_steps;
    u.n = live ? (n_steps - 1 - u.ks) / o.W + 1 : 0;
    u.r0 = (int64_t)u.tile * o.nG + (int64_t)u.ks * SR;
    u.stride = o.W * SR, u.nrec_last = SR;
    return true;
}

/* The issue cursor: (op, unit i, step n) of the next step to stream. */
struct icur4 {
    int op, i, n;
    unit u;
};

template <bool TB>
static __device__ void icur_settle(icur4 &c, const op4 *ops, int n_ops, int warp)
{
    while (c.op < n_ops) {
        if (!unit_of<TB>(ops[c.op], c.i, warp, c.u)) {
            c.op++, c.i = 0;
            continue;
        }
        if (c.u.n == 0) {
            c.i++;
            continue;
        }
        c.n = 0;
        return;
    }
}

template <bool TB, int S>
static __device__ __forceinline__ void icur_issue(icur4 &c, const op4 *ops, int n_ops, int warp,
                                                  uint32_t ring0, uint32_t bar0, int64_t &issued)
{
    if (c.op >= n_ops) return;
    int st = (int)(issued % S);
    int nrec = c.n == c.u.n - 1 ? c.u.nrec_last : SR;
    q8_bulk(ring0 + st * SR * REC * 16, ops[c.op].rec + (size_t)(c.u.r0 + (int64_t)c.n * c.u.stride) * REC,
            (uint32_t)nrec * REC * 16, bar0 + 8 * st);
    issued++;
    if (++c.n == c.u.n) {
        c.i++;
        icur_settle<TB>(c, ops, n_ops, warp);
    }
}

template <bool TB, int S>
static __global__ void __launch_bounds__(NWP * 32, 1)
    k_persist4(const op4 *ops, int n_ops, const bf16 *xsrc, unsigned *ctr)
{
    extern __shared__ __align__(128) unsigned char p4_smem[];
    __shared__ float red[NWP][32][4];
    __shared__ __align__(8) uint64_t bars[NWP][S];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    uint4 *ring = (uint4 *)p4_smem + (size_t)warp * S * SR * REC;
    bf16 *xh = (bf16 *)(p4_smem + (size_t)NWP * S * SR * REC * 16);
    uint32_t ring0 = q8_smem(ring), bar0 = q8_smem(&bars[warp][0]);
    if (lane == 0) {
        for (int i = 0; i < S; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0 + 8 * i));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    icur4 c = {};
    int64_t issued = 0, used = 0;
    icur_settle<TB>(c, ops, n_ops, warp);
    if (lane == 0)
        for (int i = 0; i < S; i++) icur_issue<TB, S>(c, ops, n_ops, warp, ring0, bar0, issued);
    bool has_x = g == 0;
    for (int op = 0; op < n_ops; op++) {
        const op4 &o = ops[op];
        lab_op_start(ctr, op, NWP * 32);
        for (int i = threadIdx.x; i < o.in / 8; i += NWP * 32) {
            uint4 v = __ldcg((const uint4 *)xsrc + i);
            ((uint4 *)xh)[i] = make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632),
                                          __byte_perm(v.y, v.w, 0x5410), __byte_perm(v.y, v.w, 0x7632));
        }
        __syncthreads();
        int W = TB ? NWP : o.W;
        for (int i = 0;; i++) {
            unit u;
            if (!unit_of<TB>(o, i, warp, u)) break;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int n = 0; n < u.n; n++) {
                int st = (int)(used % S);
                q8_wait(bar0 + 8 * st, (uint32_t)(used / S) & 1u);
                const uint4 *sp = ring + st * SR * REC;
                int nrec = n == u.n - 1 ? u.nrec_last : SR;
                int G0 = (int)((u.r0 + (int64_t)n * u.stride) % o.nG);
                if (nrec == SR) {
#pragma unroll
                    for (int k = 0; k < SR; k++)
                        rec_fold(sp + k * REC, xh + (G0 + k) * 64 + t * 16, has_x, lane, g, acc);
                } else {
                    for (int k = 0; k < nrec; k++)
                        rec_fold(sp + k * REC, xh + (G0 + k) * 64 + t * 16, has_x, lane, g, acc);
                }
                used++;
                __syncwarp();
                if (lane == 0) icur_issue<TB, S>(c, ops, n_ops, warp, ring0, bar0, issued);
            }
            /* the W warps of a tile, summed in warp order */
            int base = TB ? 0 : warp - u.ks;
            if (W > 1) {
#pragma unroll
                for (int k = 0; k < 4; k++) red[warp][lane][k] = acc[k];
                if (TB) __syncthreads();
                else asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / QM_WARPS), "r"(QM_WARPS * 32) : "memory");
                if (u.ks == 0)
                    for (int w = 1; w < W; w++)
#pragma unroll
                        for (int k = 0; k < 4; k++) acc[k] += red[base + w][lane][k];
            }
            if (u.ks == 0 && t == 0 && u.tile < o.tiles) {
                int row0 = u.tile * 16;
                if (row0 + g < o.out) o.y[row0 + g] = acc[0];
                if (row0 + g + 8 < o.out) o.y[row0 + g + 8] = acc[2];
            }
            if (W > 1) {
                if (TB) __syncthreads();
                else asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / QM_WARPS), "r"(QM_WARPS * 32) : "memory");
            }
        }
    }
    lab_ops_end(ctr, n_ops, NWP * 32);
}

struct cfg4 {
    const char *name;
    const void *fn;
    int S;
};

static size_t smem_of(int S) { return (size_t)NWP * S * SR * REC * 16 + MAXK * 2; }

int main(int argc, char **argv)
{
    int layers = argc > 1 ? atoi(argv[1]) : 32;
    if (layers < 1 || layers > 63) {
        printf("layers: 1..63\n");
        return 1;
    }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    double copy = copy_rate();
    struct { int out, in; } per_layer[] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
    std::vector<op4> host;
    std::vector<tk_qmat> mats;
    size_t bytes = 0;
    auto add_op = [&](int out, int in, uint32_t seed) {
        size_t qb = (size_t)out * in / 2, sbb = (size_t)out * (in / 64) * 2;
        void *q, *s, *b;
        float *y;
        uint4 *rec;
        op4 o;
        o.in = in, o.out = out, o.nG = in / 64, o.tiles = (int)tk_cdiv(out, 16);
        o.W = tk_qgemv_mma_split(4, 64, in, out);
        o.vbs = (int)tk_cdiv(o.tiles, QM_WARPS / o.W);
        lab_q4_alloc(out, in, seed, &q, &s, &b);
        CK(cudaMalloc(&y, (size_t)out * 4));
        CK(cudaMalloc(&rec, (size_t)o.tiles * o.nG * REC * 16));
        k_v3rec<<<1024, 256>>>((const uint32_t *)q, (const uint16_t *)s, (const uint16_t *)b, out, in,
                               rec);
        CK(cudaGetLastError());
        o.rec = rec, o.y = y;
        host.push_back(o);
        mats.push_back({q, s, b, TK_BF16, 4, 64});
        bytes += (size_t)o.tiles * o.nG * REC * 16;
    };
    for (int l = 0; l < layers; l++)
        for (int i = 0; i < 4; i++) add_op(per_layer[i].out, per_layer[i].in, 1000u * l + 10 * i);
    add_op(128256, 4096, 99999u);
    int n_ops = (int)host.size();
    op4 *ops;
    bf16 *x;
    unsigned *ctr;
    float *yref;
    CK(cudaMalloc(&ops, n_ops * sizeof(op4)));
    CK(cudaMemcpy(ops, host.data(), n_ops * sizeof(op4), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&x, MAXK * 2));
    fill(x, MAXK * 2, 7, 0x807F807Fu, 0x3F003F00u);
    CK(cudaMalloc(&ctr, 4));
    CK(cudaMalloc(&yref, 128256 * 4));
    cfg4 cfgs[] = {{"VB S4 (bitwise v3)", (const void *)k_persist4<false, 4>, 4},
                   {"VB S2", (const void *)k_persist4<false, 2>, 2},
                   {"TB S4", (const void *)k_persist4<true, 4>, 4},
                   {"TB S2", (const void *)k_persist4<true, 2>, 2}};
    printf("copy (read + write) %.0f GB/s; %d ops, %.3f GB of records, %d SMs\n", copy, n_ops,
           bytes / 1e9, sms);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int bad = 0;
    for (const cfg4 &cf : cfgs) {
        size_t smem = smem_of(cf.S);
        CK(cudaFuncSetAttribute(cf.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        auto launch = [&]() {
            void *args[] = {(void *)&ops, (void *)&n_ops, (void *)&x, (void *)&ctr};
            CK(cudaMemsetAsync(ctr, 0, 4));
            CK(cudaLaunchCooperativeKernel(cf.fn, dim3(sms), dim3(NWP * 32), args, smem, 0));
        };
        launch();
        CK(cudaDeviceSynchronize());
        printf("---- %s\n", cf.name);
        for (int k : {0, 1, 2, 3, n_ops - 1}) {
            const op4 &o = host[k];
            CK(tk_qgemv_mma(0, &mats[k], x, o.in, NULL, 0, yref, TK_F32, o.out, 1, o.in, o.out));
            CK(cudaDeviceSynchronize());
            std::vector<float> a = get(o.y, o.out), b = get(yref, o.out);
            int diff = 0;
            for (int r = 0; r < o.out; r++) diff += memcmp(&a[r], &b[r], 4) != 0;
            printf("  op %d [%d x %d]: %d of %d outputs differ from v3 (rel %.2e)\n", k, o.out, o.in,
                   diff, o.out, rel(a, b));
            if (cf.fn == cfgs[0].fn) bad += diff;
            else if (rel(a, b) > 1e-5) bad++;
        }
        std::vector<float> v;
        for (int rep = 0; rep < 6; rep++) {
            CK(cudaEventRecord(e0));
            launch();
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep) v.push_back(ms);
        }
        std::sort(v.begin(), v.end());
        double us = v[v.size() / 2] * 1e3;
        printf("  one launch %.1f us = %.1f%% of the copy rate\n", us, 100.0 * bytes / us / 1e3 / copy);
        std::vector<double> ob;
        for (const op4 &o : host) ob.push_back((double)o.tiles * o.nG * REC * 16);
        lab_print_op_times(n_ops, ob, copy);
    }
    printf("==== summary ==== checks: %s\n", bad ? "FAILED" : "ok (VB bitwise v3)");
    return bad != 0;
}
