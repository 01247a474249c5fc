/*
 * cluster_lab.cu — kernel lab for issue 7: would thread block clusters make
 * the decode step kernel's all-gathers cheaper? Every block of the step
 * gathers a residual's LL lines (2112 of them) from L2 after each o / down
 * epilogue, and the act and attention lines likewise: 132 blocks reading
 * the same ~33 KB at once take 0.7-1.1 us after the last store (hop_lab),
 * where one line takes 0.29. With clusters of C blocks, each block could
 * gather 1/C of the lines from L2 and hand them to its C - 1 peers through
 * distributed shared memory: C times fewer L2 reads.
 * One 512-thread block per SM (200 KB of dynamic shared memory, as the
 * step's), launched cooperatively with a cluster dimension (cudaLaunchKernelEx:
 * does the persistent step's launch work with clusters at all, and with how
 * many blocks?). Tests, timed by globaltimer stamps as hop_lab's:
 *   every   — ll_gather of all lines by every block (the kernel today);
 *   dsmem   — block k of its cluster ll_gathers lines [k n / C, (k + 1) n / C)
 *             (its share), stores each line's data into every peer's buffer
 *             (st.shared::cluster), then a cluster barrier (arrive.release /
 *             wait.acquire);
 *   async   — the same share, handed on by st.async with complete_tx on
 *             each peer's mbarrier (armed by the peer for all lines' bytes);
 *             no cluster barrier: a block waits on its own mbarrier;
 *   cbar    — a cluster barrier alone (every block arrives at one time).
 * Prints ns after the last producer's store (p10 / p50 / p90 / p99 / mean)
 * to the block having every line in shared memory.
 * Run: ./cluster_lab
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/cluster_lab.cu -o cluster_lab
 */
#include "backend/cuda/cuda_step_ll.cuh"

#include "lab_common.cuh"
#include "lab_timer.cuh"

enum { NT = TK_STEP_NW * 32, ROUNDS = 40, PER = 16, GAP_NS = 20000, SMEM = 200 << 10 };

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ uint32_t cl_rank(void)
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

static __device__ __forceinline__ uint32_t cl_map(uint32_t a, uint32_t rank)
{
    uint32_t d;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(rank));
    return d;
}

static __device__ __forceinline__ void cl_sync(void)
{
    asm volatile(
        "barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::
            : "memory");
}

static __device__ __forceinline__ bool mb_try(uint32_t bar, uint32_t parity)
{
    uint32_t ok;
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], "
        "%2; selp.u32 %0, 1, 0, p; }"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    return ok != 0;
}

/* MODE 0: every block gathers every line; 1: dsmem; 2: async; 3: cbar. */
template <int MODE>
static __global__ void k_gather(uint4 *lines, uint64_t *ts, uint64_t *tin, const uint64_t *t0p,
                                int stagger_ns, int C, uint32_t *sinkp)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t bar;
    uint2 *buf = (uint2 *)smem;
    const uint64_t t0 = *(volatile const uint64_t *)t0p;
    const int n = (int)gridDim.x * PER;
    const uint32_t rank = MODE ? cl_rank() : 0u;
    uint32_t acc = 0;
    if (MODE == 2) {
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar)));
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
    }
    if (MODE) cl_sync(); /* every peer's mbarrier is initialised */
    for (int r = 0; r < ROUNDS; r++) {
        uint4 *L = lines + (size_t)r * gridDim.x * PER;
        const uint32_t f = (uint32_t)r + 1u;
        const uint64_t at = t0 + (uint64_t)(r + 1) * GAP_NS +
                            (uint64_t)((blockIdx.x * 37u) % 16u) * (uint64_t)stagger_ns;
        if (MODE == 2 && threadIdx.x == 0) /* this round's bytes: every line's data */
            asm volatile(
                "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(&bar)),
                "r"((uint32_t)n * 8u)
                : "memory");
        if (threadIdx.x < 32) { /* warp 0 stores the block's lines */
            if (threadIdx.x == 0) lab_wait_until(MODE == 3 ? t0 + (uint64_t)(r + 1) * GAP_NS : at);
            __syncwarp();
            uint64_t t = lab_gtime();
            if (MODE != 3)
                for (int i = threadIdx.x; i < PER; i += 32)
                    ll_put(L + blockIdx.x * PER + i, (uint32_t)t, (uint32_t)i, f);
            if (threadIdx.x == 0) ts[(size_t)r * gridDim.x + blockIdx.x] = t;
        }
        if (MODE == 0) {
            for (int base = 0; base < n; base += ST_LLB * NT) {
                uint4 v[ST_LLB];
                ll_gather<ST_LLB>(L, base, n, f, v);
#pragma unroll
                for (int j = 0; j < ST_LLB; j++) {
                    int i = base + threadIdx.x + j * NT;
                    if (i < n) buf[i] = make_uint2(v[j].x, v[j].z);
                }
            }
            __syncthreads();
        } else if (MODE == 3) {
            __syncthreads();
            cl_sync();
        } else {
            /* this block's share: the contiguous lines [rank n / C, (rank + 1) n / C),
             * gathered as the kernel gathers (ll_gather), each line's data then
             * stored into every peer's buffer */
            const int s0 = (int)rank * n / C, ns = ((int)rank + 1) * n / C - s0;
            for (int base = 0; base < ns; base += ST_LLB * NT) {
                uint4 v[ST_LLB];
                ll_gather<ST_LLB>(L + s0, base, ns, f, v);
#pragma unroll
                for (int j = 0; j < ST_LLB; j++) {
                    int s = base + threadIdx.x + j * NT;
                    if (s >= ns) continue;
                    uint32_t a = smem_u32(buf + s0 + s);
                    for (int p = 0; p < C; p++) {
                        uint32_t ra = cl_map(a, (uint32_t)p);
                        if (MODE == 1)
                            asm volatile("st.shared::cluster.v2.u32 [%0], {%1, %2};" ::"r"(ra),
                                         "r"(v[j].x), "r"(v[j].z)
                                         : "memory");
                        else
                            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2."
                                         "u32 [%0], {%1, %2}, [%3];" ::"r"(ra),
                                         "r"(v[j].x), "r"(v[j].z),
                                         "r"(cl_map(smem_u32(&bar), (uint32_t)p))
                                         : "memory");
                    }
                }
            }
            if (MODE == 1) {
                cl_sync();
            } else {
                if (threadIdx.x == 0)
                    while (!mb_try(smem_u32(&bar), (uint32_t)r & 1u)) {
                    }
                __syncthreads();
            }
        }
        if (threadIdx.x == 0) tin[(size_t)r * gridDim.x + blockIdx.x] = lab_gtime();
        if (MODE != 3) /* the lines arrived right: each is (time, index) as stored */
            for (int i = threadIdx.x; i < n; i += NT)
                acc += buf[i].y == (uint32_t)(i % PER) ? 0u : 1u;
    }
    if (MODE) cl_sync(); /* no block leaves while a peer may still store into it */
    if (acc) atomicAdd(sinkp, acc);
}

/* The largest grid of C-block clusters that can be resident, one block per SM. */
static int cluster_grid(const void *fn, int C, int sms)
{
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    if (C > 8) CK(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    cfg.gridDim = dim3((unsigned)(sms / C * C));
    cfg.blockDim = dim3(NT);
    cfg.dynamicSmemBytes = SMEM;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)C, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    int n = 0;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, fn, &cfg);
    if (e != cudaSuccess) {
        printf("cluster %d: occupancy query failed: %s\n", C, cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    return n * C;
}

template <int MODE>
static void gather(const char *name, int grid, int C, uint4 *lines, uint64_t *t0, int stagger,
                   uint32_t *sink)
{
    const void *fn = (const void *)k_gather<MODE>;
    uint64_t *ts, *tin;
    const size_t nr = (size_t)ROUNDS * grid;
    CK(cudaMalloc(&ts, nr * 8));
    CK(cudaMalloc(&tin, nr * 8));
    CK(cudaMemset(lines, 0, nr * PER * 16));
    CK(cudaMemset(sink, 0, 4));
    k_lab_t0<<<1, 1>>>(t0);
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    if (C > 8) CK(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3(NT);
    cfg.dynamicSmemBytes = SMEM;
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    at[1].id = cudaLaunchAttributeClusterDimension;
    at[1].val.clusterDim.x = (unsigned)(MODE ? C : 1), at[1].val.clusterDim.y = 1;
    at[1].val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 2;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k_gather<MODE>, lines, ts, tin, (const uint64_t *)t0,
                                       stagger, C, sink);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("%s, cluster %d, grid %d: launch failed: %s\n", name, C, grid,
               cudaGetErrorString(e));
        exit(1);
    }
    uint32_t bad = 0;
    CK(cudaMemcpy(&bad, sink, 4, cudaMemcpyDeviceToHost));
    std::vector<uint64_t> hs(nr), hi(nr);
    CK(cudaMemcpy(hs.data(), ts, nr * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hi.data(), tin, nr * 8, cudaMemcpyDeviceToHost));
    std::vector<double> all, last;
    for (int r = 2; r < ROUNDS; r++) {
        uint64_t ls = 0, li = 0;
        for (int b = 0; b < grid; b++) ls = std::max(ls, hs[(size_t)r * grid + b]);
        for (int b = 0; b < grid; b++) {
            uint64_t t = hi[(size_t)r * grid + b];
            all.push_back((double)t - (double)ls);
            li = std::max(li, t);
        }
        last.push_back((double)li - (double)ls);
    }
    char s[128];
    snprintf(s, sizeof s, "%s C=%d grid %d stagger %d: every block%s", name, C, grid, stagger,
             bad ? " (WRONG DATA)" : "");
    lab_report(s, all, 52);
    snprintf(s, sizeof s, "%s C=%d grid %d stagger %d: last block", name, C, grid, stagger);
    lab_report(s, last, 52);
    CK(cudaFree(ts));
    CK(cudaFree(tin));
}

int main(void)
{
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    uint4 *lines;
    uint64_t *t0;
    uint32_t *sink;
    CK(cudaMalloc(&lines, (size_t)ROUNDS * sms * PER * 16));
    CK(cudaMalloc(&t0, 8));
    CK(cudaMalloc(&sink, 4));
    printf("cluster_lab: %d SMs, %d threads a block, %d KB shared; ns after the last store\n", sms,
           NT, SMEM >> 10);
    int grids[17] = {0};
    for (int C : {2, 4, 8, 16}) {
        grids[C] = cluster_grid((const void *)k_gather<1>, C, sms);
        printf("cluster %2d: %d blocks resident (%d clusters)\n", C, grids[C], grids[C] / C);
    }
    printf("%-52s %7s %7s %7s %7s %7s\n", "test", "p10", "p50", "p90", "p99", "mean");
    for (int stagger : {0, 50}) {
        gather<0>("every", sms, 1, lines, t0, stagger, sink);
        gather<0>("every", 128, 1, lines, t0, stagger, sink); /* 2048 lines: one round */
        for (int C : {2, 4, 8, 16}) {
            if (grids[C] < C) continue;
            if (stagger == 0) gather<0>("every", grids[C], 1, lines, t0, stagger, sink);
            gather<1>("dsmem", grids[C], C, lines, t0, stagger, sink);
            gather<2>("async", grids[C], C, lines, t0, stagger, sink);
            if (stagger == 0) gather<3>("cbar", grids[C], C, lines, t0, stagger, sink);
        }
    }
    return 0;
}
