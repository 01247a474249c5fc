/*
 * persist_lab.cu — kernel lab for issue 7: can ONE persistent kernel stream a
 * whole 4-bit decode step's weights through its chain of dependent GEMVs at
 * close to the copy rate?
 *
 * Why: the time line of the real step (docs/perf/quant.md, 2026-11-30) has
 * the GEMVs at ~2.3 TB/s on average and ~130 dependent kernel boundaries
 * costing 3-5 us each; every fusion that removed a boundary paid as much
 * inside a kernel. Here the boundaries become grid barriers inside one
 * kernel, and the weights never wait for them: per block (one per SM), a
 * producer warp streams the block's share of every op's records (the
 * 576-byte records of q8_common.cuh) into an S-stage ring of C records per
 * stage with cp.async.bulk, running ahead across op boundaries (weights do
 * not depend on activations), limited only by free stages; NC consumer
 * warps take the ring's chunks round-robin and fold them (q8_group) with x
 * from shared memory. At an op boundary the consumers meet at a grid
 * barrier (one release-add and an acquire spin per block), reload x from
 * global memory (the previous op's "output": L2), and go on, while the ring
 * is already full of the next op's weights.
 *
 * Ops: the Llama-3.1-8B step at 4-bit g64 (per layer qkv [6144 x 4096], o
 * [4096 x 4096], gate_up [28672 x 4096], down [4096 x 14336]; L layers with
 * their own weights, then lm_head [128256 x 4096]); each op's records are
 * split evenly (contiguous) over the blocks. The arithmetic is the real
 * per-record work; the outputs are reduced into a sink only (this measures
 * streaming, barriers and compute, not the numerics, which q8_lab checks).
 * Attention, norms and the residual are left out (their cost would sit at
 * the barriers, where the ring keeps filling).
 *
 * Printed: for each (S, C, NC), the time of the whole chain as ONE launch
 * and as one launch PER OP (the same kernel, n_ops = 1, back to back: the
 * kernel-boundary baseline), with COMPUTE = 0 (consumers only release the
 * stages: the ring's streaming ceiling) and 1; GB/s and % of the copy rate.
 *
 * Not yet run (written 2026-11-30 after the session's device time was
 * spent). Shared helpers: lab_common.cuh, persist_common.cuh, q8_common.cuh.
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/persist_lab.cu -o persist_lab
 * Run:   ./persist_lab [layers (default 32)] [config index: one launch only, for ncu]
 */
#include "backend/cuda/cuda_qmma.cuh"
#include "lab_common.cuh"
#include "persist_common.cuh"
#include "q8_common.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define MAXK 14336 /* the widest op input (down_proj) */

struct op_desc {
    const uint4 *rec; /* R records, tile-major */
    int64_t R;
    int nG; /* 64-k groups per row = in / 64 */
    int in;
};

static __device__ __forceinline__ void bar_named(int n_threads)
{
    asm volatile("bar.sync 1, %0;" ::"r"(n_threads) : "memory");
}

/* Block b's records of an op: [b R / B, (b + 1) R / B). */
static __device__ __forceinline__ void share_of(int64_t R, int b, int B, int64_t &r0, int &n)
{
    r0 = (int64_t)b * R / B;
    n = (int)((int64_t)(b + 1) * R / B - r0);
}

/* The producer warp's lane 0: every op's share, chunk after chunk, each into
 * the next ring stage once its consumer has released it. */
template <int S, int C>
static __device__ void produce(const op_desc *ops, int n_ops, uint32_t ring0, uint32_t full0,
                               uint32_t empty0)
{
    int64_t c = 0;
    for (int op = 0; op < n_ops; op++) {
        int64_t r0;
        int n;
        share_of(ops[op].R, blockIdx.x, gridDim.x, r0, n);
        for (int k = 0; k * C < n; k++, c++) {
            int st = (int)(c % S);
            int64_t round = c / S;
            if (round > 0) q8_wait(empty0 + 8 * st, (uint32_t)(round - 1) & 1u);
            q8_bulk(ring0 + st * C * REC * 16, ops[op].rec + (size_t)(r0 + (int64_t)k * C) * REC,
                    (uint32_t)min(C, n - k * C) * REC * 16, full0 + 8 * st);
        }
    }
}

template <int S, int C, int NC, bool COMPUTE>
static __global__ void __launch_bounds__((NC + 1) * 32, 1)
    k_persist(const op_desc *ops, int n_ops, const bf16 *xsrc, unsigned *ctr, float *sink,
              uint4 kc)
{
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ __align__(8) uint64_t full[S], empty[S];
    uint4 *ring = (uint4 *)sm;
    bf16 *xs = (bf16 *)(sm + (size_t)S * C * REC * 16);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint32_t full0 = q8_smem(&full[0]), empty0 = q8_smem(&empty[0]), ring0 = q8_smem(ring);
    if (threadIdx.x == 0) {
        for (int i = 0; i < S; i++) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(full0 + 8 * i));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(empty0 + 8 * i));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == NC) { /* the producer */
        if (lane == 0) produce<S, C>(ops, n_ops, ring0, full0, empty0);
        return;
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t c = 0;
    for (int op = 0; op < n_ops; op++) {
        if (op > 0) lab_grid_barrier(ctr, (unsigned)op * gridDim.x, NC * 32);
        int in = ops[op].in, nG = ops[op].nG;
        for (int i = threadIdx.x; i < in / 8; i += NC * 32)
            ((uint4 *)xs)[i] = __ldcg((const uint4 *)xsrc + i);
        bar_named(NC * 32);
        int64_t r0;
        int n;
        share_of(ops[op].R, blockIdx.x, gridDim.x, r0, n);
        int nch = (n + C - 1) / C;
        for (int k = (int)((warp - c % NC + NC) % NC); k < nch; k += NC) {
            int64_t cc = c + k;
            int st = (int)(cc % S), ng = min(C, n - k * C);
            q8_wait(full0 + 8 * st, (uint32_t)(cc / S) & 1u);
            const uint4 *sp = ring + st * C * REC;
            if (COMPUTE) {
#pragma unroll
                for (int j = 0; j < C; j++) {
                    if (j >= ng) break;
                    int G = (int)((r0 + (int64_t)k * C + j) % nG);
                    uint4 w = sp[j * REC + lane];
                    uint2 sb = ((const uint2 *)(sp + j * REC + 32))[g];
                    const uint4 *xp = (const uint4 *)(xs + 64 * G + 16 * t);
                    q8_group(w, xp[0], xp[1], sb, kc, acc);
                }
            } else if (lane == 0) {
                acc[0] += __uint_as_float(sp[lane].x & 0x3F7F3F7Fu); /* touch the stage */
            }
            __syncwarp();
            if (lane == 0) q8_arrive(empty0 + 8 * st);
        }
        c += nch;
        sink[((size_t)op * gridDim.x + blockIdx.x) * NC * 32 + threadIdx.x] =
            acc[0] + acc[1] + acc[2] + acc[3];
    }
}

/* ---------------------------------------------------------------- v2: per-warp rings */


/* Warp w's m-th chunk of an op: IL (interleaved): the op's chunks of C
 * records go round-robin over all B * NW warps of the grid, so the warps
 * sweep the op's bytes together; else the block's contiguous share (as
 * k_persist) split round-robin over its warps. Returns the chunk's first
 * record and its record count (0: no such chunk). */
template <int C, int NW, bool IL>
static __device__ __forceinline__ int chunk_of(const op_desc &o, int w, int64_t m, int64_t &r)
{
    if (IL) {
        int64_t j = (int64_t)blockIdx.x * NW + w + m * (int64_t)gridDim.x * NW;
        r = j * C;
        return r < o.R ? (int)min((int64_t)C, o.R - r) : 0;
    }
    int64_t r0;
    int n;
    share_of(o.R, blockIdx.x, gridDim.x, r0, n);
    int64_t k = w + m * NW;
    r = r0 + k * C;
    return k * C < n ? (int)min((int64_t)C, n - k * C) : 0;
}

/* The next chunk to issue for warp w: (op, m) advanced over ops whose
 * chunks this warp has exhausted. */
struct cursor {
    int op;
    int64_t m;
};

template <int S, int C, int NW, bool COMPUTE, bool IL, bool XS, bool ILP>
static __global__ void __launch_bounds__(NW * 32, 1)
    k_persist2(const op_desc *ops, int n_ops, const bf16 *xsrc, unsigned *ctr, float *sink,
               uint4 kc)
{
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ __align__(8) uint64_t full[NW][S];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint4 *ring = (uint4 *)sm + (size_t)warp * S * C * REC;
    bf16 *xs = (bf16 *)(sm + (size_t)NW * S * C * REC * 16);
    __shared__ float xsum[MAXK / 64];
    uint32_t full0 = q8_smem(&full[warp][0]), ring0 = q8_smem(ring);
    if (lane == 0) {
        for (int i = 0; i < S; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(full0 + 8 * i));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    cursor ic = {0, 0};
    int64_t issued = 0, used = 0;
    /* issue the next chunk into stage issued % S, if any is left */
    auto issue = [&]() {
        while (ic.op < n_ops) {
            int64_t r;
            int n = chunk_of<C, NW, IL>(ops[ic.op], warp, ic.m, r);
            if (n == 0) {
                ic.op++, ic.m = 0;
                continue;
            }
            int st = (int)(issued % S);
            q8_bulk(ring0 + st * C * REC * 16, ops[ic.op].rec + (size_t)r * REC,
                    (uint32_t)n * REC * 16, full0 + 8 * st);
            issued++, ic.m++;
            return;
        }
    };
    if (lane == 0)
        for (int i = 0; i < S; i++) issue();
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int op = 0; op < n_ops; op++) {
        lab_op_start(ctr, op, NW * 32);
        int in = ops[op].in, nG = ops[op].nG;
        for (int i = threadIdx.x; i < in / 8; i += NW * 32)
            ((uint4 *)xs)[i] = __ldcg((const uint4 *)xsrc + i);
        bar_named(NW * 32);
        if (XS) { /* each group's sum of x, once per op */
            for (int G = warp; G < nG; G += NW) {
                float v = __bfloat162float(xs[64 * G + lane]) + __bfloat162float(xs[64 * G + 32 + lane]);
                for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
                if (lane == 0) xsum[G] = v;
            }
            bar_named(NW * 32);
        }
        for (int64_t m = 0;; m++) {
            int64_t r;
            int ng = chunk_of<C, NW, IL>(ops[op], warp, m, r);
            if (ng == 0) break;
            int st = (int)(used % S);
            q8_wait(full0 + 8 * st, (uint32_t)(used / S) & 1u);
            const uint4 *sp = ring + st * C * REC;
            if (COMPUTE && ILP && ng == C) { /* a full chunk: loads first, 4 records at a time */
                int G = (int)((uint32_t)r % (uint32_t)nG);
#pragma unroll
                for (int j0 = 0; j0 < C; j0 += 4) {
                    uint4 w[4], xa[4], xb[4];
                    uint2 sb[4];
                    float xsg[4];
#pragma unroll
                    for (int j = 0; j < 4; j++, G = G + 1 == nG ? 0 : G + 1) {
                        w[j] = sp[(j0 + j) * REC + lane];
                        sb[j] = ((const uint2 *)(sp + (j0 + j) * REC + 32))[g];
                        const uint4 *xp = (const uint4 *)(xs + 64 * G + 16 * t);
                        xa[j] = xp[0], xb[j] = xp[1];
                        xsg[j] = XS ? xsum[G] : 0.0f;
                    }
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        if (XS) q8_group_xs(w[j], xa[j], xb[j], sb[j], xsg[j], kc, acc);
                        else q8_group(w[j], xa[j], xb[j], sb[j], kc, acc);
                    }
                }
            } else if (COMPUTE) {
                int G = (int)((uint32_t)r % (uint32_t)nG); /* one 32-bit division per chunk */
#pragma unroll
                for (int j = 0; j < C; j++, G = G + 1 == nG ? 0 : G + 1) {
                    if (j >= ng) break;
                    uint4 w = sp[j * REC + lane];
                    uint2 sb = ((const uint2 *)(sp + j * REC + 32))[g];
                    const uint4 *xp = (const uint4 *)(xs + 64 * G + 16 * t);
                    if (XS) q8_group_xs(w, xp[0], xp[1], sb, xsum[G], kc, acc);
                    else q8_group(w, xp[0], xp[1], sb, kc, acc);
                }
            } else if (lane == 0) {
                acc[0] += __uint_as_float(sp[lane].x & 0x3F7F3F7Fu);
            }
            used++;
            __syncwarp();
            if (lane == 0) issue();
        }
        sink[((size_t)op * gridDim.x + blockIdx.x) * NW * 32 + threadIdx.x] =
            acc[0] + acc[1] + acc[2] + acc[3];
    }
    lab_ops_end(ctr, n_ops, NW * 32);
}

/* ---------------------------------------------------------------- host */

struct config {
    const char *name;
    void (*attr)(size_t);
    cudaError_t (*launch)(const op_desc *, int, const bf16 *, unsigned *, float *, int, size_t);
    size_t smem;
};

template <int S, int C, int NW, bool COMPUTE, bool IL, bool XS, bool ILP>
static void attr2_of(size_t smem)
{
    CK(cudaFuncSetAttribute(k_persist2<S, C, NW, COMPUTE, IL, XS, ILP>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

template <int S, int C, int NW, bool COMPUTE, bool IL, bool XS, bool ILP>
static cudaError_t launch2_of(const op_desc *ops, int n_ops, const bf16 *x, unsigned *ctr,
                              float *sink, int blocks, size_t smem)
{
    uint4 kc = KC;
    void *args[] = {(void *)&ops, (void *)&n_ops, (void *)&x, (void *)&ctr, (void *)&sink,
                    (void *)&kc};
    return cudaLaunchCooperativeKernel((const void *)k_persist2<S, C, NW, COMPUTE, IL, XS, ILP>,
                                       dim3(blocks), dim3(NW * 32), args, smem, 0);
}

template <int S, int C, int NC, bool COMPUTE>
static void attr_of(size_t smem)
{
    CK(cudaFuncSetAttribute(k_persist<S, C, NC, COMPUTE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smem));
}

template <int S, int C, int NC, bool COMPUTE>
static cudaError_t launch_of(const op_desc *ops, int n_ops, const bf16 *x, unsigned *ctr,
                             float *sink, int blocks, size_t smem)
{
    uint4 kc = KC;
    void *args[] = {(void *)&ops, (void *)&n_ops, (void *)&x, (void *)&ctr, (void *)&sink,
                    (void *)&kc};
    return cudaLaunchCooperativeKernel((const void *)k_persist<S, C, NC, COMPUTE>, dim3(blocks),
                                       dim3((NC + 1) * 32), args, smem, 0);
}

#define CFG(S, C, NC, CO)                                                                          \
    {"S" #S " C" #C " NC" #NC " compute " #CO, attr_of<S, C, NC, CO>, launch_of<S, C, NC, CO>,      \
     (size_t)S * C * REC * 16 + MAXK * 2}
#define CFG3(S, C, NW, CO, IL, XS, ILP)                                                            \
    {"v2 S" #S " C" #C " NW" #NW " co" #CO " il" #IL " xs" #XS " ilp" #ILP,                        \
     attr2_of<S, C, NW, CO, IL, XS, ILP>, launch2_of<S, C, NW, CO, IL, XS, ILP>,                   \
     (size_t)NW * S * C * REC * 16 + MAXK * 2}
#define CFG2(S, C, NW, CO, IL, XS) CFG3(S, C, NW, CO, IL, XS, false)
static const config CFGS[] = {
    /* runs 1-3 (2026-11-30, docs/perf/quant.md): the producer-warp ring
     * (CFG) streams at <= 49% of the copy rate even without arithmetic;
     * per-warp rings with interleaved chunks 82% without, 63-65% with it */
    CFG2(4, 4, 16, false, true, false), CFG2(2, 8, 16, true, true, false),
    CFG3(2, 8, 16, true, true, false, true), CFG3(4, 4, 16, true, true, false, true),
    CFG3(2, 8, 16, true, true, true, true),  CFG3(4, 4, 16, true, true, true, true),
    CFG3(2, 4, 32, true, true, true, true),  CFG3(3, 4, 24, true, true, true, true),
    CFG3(2, 8, 12, true, true, true, true),  CFG3(4, 8, 8, true, true, true, true),
};

int main(int argc, char **argv)
{
    int layers = argc > 1 ? atoi(argv[1]) : 32;
    if (layers < 1 || layers > 64) {
        printf("layers: 1..64\n");
        return 1;
    }
    int dev = 0, sms = 0, coop = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop) {
        printf("no cooperative launch on this device\n");
        return 1;
    }
    double copy = copy_rate();
    struct shape { int out, in; } per_layer[] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
    std::vector<op_desc> host;
    std::vector<void *> bufs;
    size_t bytes = 0;
    auto add_op = [&](int out, int in, uint32_t seed) {
        op_desc o;
        o.nG = in / 64, o.in = in, o.R = (int64_t)((out + 15) / 16) * o.nG;
        size_t b = (size_t)o.R * REC * 16;
        void *p;
        CK(cudaMalloc(&p, b));
        fill(p, b, seed, 0x3F7F3F7Fu, 0); /* finite bf16 scales and biases in every word */
        o.rec = (const uint4 *)p;
        bufs.push_back(p);
        host.push_back(o);
        bytes += b;
    };
    for (int l = 0; l < layers; l++)
        for (int i = 0; i < 4; i++) add_op(per_layer[i].out, per_layer[i].in, 1000u * l + i);
    add_op(128256, 4096, 99999u);
    int n_ops = (int)host.size();
    op_desc *ops;
    bf16 *x;
    unsigned *ctr;
    float *sink;
    CK(cudaMalloc(&ops, n_ops * sizeof(op_desc)));
    CK(cudaMemcpy(ops, host.data(), n_ops * sizeof(op_desc), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&x, MAXK * 2));
    fill(x, MAXK * 2, 7, 0x807F807Fu, 0x3F003F00u); /* +-[0.5, 1) */
    CK(cudaMalloc(&ctr, 4));
    CK(cudaMalloc(&sink, (size_t)n_ops * sms * 32 * 32 * 4));
    CK(cudaDeviceSynchronize());
    printf("copy (read + write) %.0f GB/s; %d ops (%d layers + lm_head), %.3f GB of records, %d SMs\n",
           copy, n_ops, layers, bytes / 1e9, sms);
    printf("%-26s %12s %9s %7s %12s %9s %7s\n", "config", "one launch", "GB/s", "%copy",
           "per-op", "GB/s", "%copy");
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    if (argc > 2) { /* --ncu: one launch of config argv[2], for the profiler */
        const config &cf = CFGS[atoi(argv[2])];
        cf.attr(cf.smem);
        CK(cudaMemset(ctr, 0, 4));
        CK(cf.launch(ops, n_ops, x, ctr, sink, sms, cf.smem));
        CK(cudaDeviceSynchronize());
        printf("one launch of %s\n", cf.name);
        std::vector<double> ob;
        for (const op_desc &o : host) ob.push_back(o.R * REC * 16.0);
        lab_print_op_times(n_ops, ob, copy);
        return 0;
    }
    for (const config &cf : CFGS) {
        cf.attr(cf.smem);
        double us[2];
        for (int mode = 0; mode < 2; mode++) { /* 0: the chain in one launch; 1: one launch per op */
            std::vector<float> v;
            for (int rep = 0; rep < 4; rep++) {
                CK(cudaMemset(ctr, 0, 4));
                CK(cudaEventRecord(e0));
                if (mode == 0) {
                    CK(cf.launch(ops, n_ops, x, ctr, sink, sms, cf.smem));
                } else {
                    for (int o = 0; o < n_ops; o++) CK(cf.launch(ops + o, 1, x, ctr, sink, sms, cf.smem));
                }
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (rep > 0) v.push_back(ms); /* the first is a warm-up */
            }
            std::sort(v.begin(), v.end());
            us[mode] = v[v.size() / 2] * 1e3;
        }
        printf("%-26s %10.1f us %9.0f %6.1f%% %10.1f us %9.0f %6.1f%%\n", cf.name, us[0],
               bytes / us[0] / 1e3, 100.0 * bytes / us[0] / 1e3 / copy, us[1], bytes / us[1] / 1e3,
               100.0 * bytes / us[1] / 1e3 / copy);
    }
    printf("==== summary ====\n(one launch = the chain behind grid barriers; per-op = kernel boundaries;"
           " the 4-bit step's floor is the records' bytes at the copy rate: %.1f us)\n",
           bytes / copy / 1e3);
    for (void *p : bufs) CK(cudaFree(p));
    CK(cudaFree(ops));
    CK(cudaFree(x));
    CK(cudaFree(ctr));
    CK(cudaFree(sink));
    return 0;
}
