/*
 * hop_lab.cu — kernel lab for issue 7: what one hop of the decode step
 * kernel costs (a phase's LL lines stored by one block, seen by another),
 * against what the kernel's stamps say a hop takes (~0.9-1.2 us from the
 * last producer's epilogue to the consumer's lines in; docs/perf/quant.md).
 * One 512-thread block per SM, launched cooperatively (all resident), the
 * blocks' clocks the same globaltimer. Three tests, every one timed by
 * globaltimer stamps written beside the data:
 *   oneway  — one block stores one line (round r: block r % grid), every
 *             other block polls it with one thread: store -> seen.
 *   pingpong — block 0 and block k (every k) bounce a line 64 times:
 *             half the round trip, with no clock comparison at all.
 *   gather  — every block stores 16 lines (an epilogue's tiles, at a
 *             staggered time) and gathers all of them (2112 lines, a
 *             residual's worth), as the kernel's x copies do: from the last
 *             store to the block's barrier after its lines are in. Three
 *             ways: ll_gather as the kernel has it (cuda_step_ll.cuh), every
 *             thread re-polling its lines, and a counter (the producers'
 *             release add after their lines, one thread's acquire poll,
 *             then one load of every line).
 * Prints medians and percentiles in ns.
 * Run: ./hop_lab
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/hop_lab.cu -o hop_lab
 */
#include "backend/cuda/cuda_step_ll.cuh"

#include "lab_common.cuh"
#include "lab_timer.cuh"

enum { NT = TK_STEP_NW * 32, ROUNDS = 48, PER = 28, GAP_NS = 20000, PP_N = 64 };

/* the store / load kinds compared in oneway */
template <int S>
static __device__ __forceinline__ void put(uint4 *p, uint32_t a, uint32_t b, uint32_t f)
{
    if (S == 0) ll_put(p, a, b, f);
    if (S == 1)
        asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(f),
                     "r"(b), "r"(f)
                     : "memory");
    if (S == 2)
        asm volatile("st.release.gpu.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a),
                     "r"(f), "r"(b), "r"(f)
                     : "memory");
}

template <int L> static __device__ __forceinline__ uint4 get(const uint4 *p)
{
    uint4 v;
    if (L == 0) v = ll_load(p);
    if (L == 1)
        asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p)
                     : "memory");
    if (L == 2)
        asm volatile("ld.acquire.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p)
                     : "memory");
    return v;
}

/* oneway: lat[r * grid + b] = ns from block r % grid's store to block b's sight */
template <int S, int L>
static __global__ void k_oneway(uint4 *lines, uint64_t *lat, const uint64_t *t0p)
{
    if (threadIdx.x != 0) return;
    const uint64_t t0 = *(volatile const uint64_t *)t0p;
    for (int r = 0; r < ROUNDS; r++) {
        uint4 *p = lines + r;
        const uint32_t f = (uint32_t)r + 1u;
        if (blockIdx.x == r % gridDim.x) {
            lab_wait_until(t0 + (uint64_t)(r + 1) * GAP_NS);
            uint64_t t = lab_gtime();
            put<S>(p, (uint32_t)t, (uint32_t)(t >> 32), f);
            lat[(size_t)r * gridDim.x + blockIdx.x] = 0;
            continue;
        }
        uint4 v;
        do v = get<L>(p);
        while (v.y != f || v.w != f);
        uint64_t t = lab_gtime();
        lat[(size_t)r * gridDim.x + blockIdx.x] = t - ((uint64_t)v.z << 32 | v.x);
    }
}

/* pingpong: block 0 and block k (k = 1 .. grid - 1 in turn) bounce a line
 * PP_N times; rt[k] = ns per round trip */
static __global__ void k_pingpong(uint4 *lines, uint64_t *rt)
{
    if (threadIdx.x != 0) return;
    for (int k = 1; k < (int)gridDim.x; k++) {
        if (blockIdx.x != 0 && (int)blockIdx.x != k) continue;
        uint4 *a = lines + 2 * k, *b = lines + 2 * k + 1; /* 0 -> k, k -> 0 */
        uint64_t t = lab_gtime();
        for (int i = 1; i <= PP_N; i++) {
            if (blockIdx.x == 0) {
                ll_put(a, 0u, 0u, (uint32_t)i);
                uint4 v;
                do v = ll_load(b);
                while (v.y != (uint32_t)i);
            } else {
                uint4 v;
                do v = ll_load(a);
                while (v.y != (uint32_t)i);
                ll_put(b, 0u, 0u, (uint32_t)i);
            }
        }
        if (blockIdx.x == 0) rt[k] = (lab_gtime() - t) / PP_N;
    }
}

/* gather: every block's per lines (per <= PER) at t0 + gap (r + 1) + its
 * stagger, then all lines gathered (mode 0: ll_gather; 1: every thread
 * re-polls; 2: a counter, then the LL lines; 3: a counter, then the data
 * alone: half the bytes; 4: a relaxed counter (no release, no acquire), then
 * the LL lines, each re-polled until its flags are in); ts[r][b] = store time, tin[r][b] = lines-in
 * time, tc[r][b] = counter-seen time (modes 2, 3) */
template <int MODE>
static __global__ void k_gather(uint4 *lines, unsigned *cnt, uint64_t *ts, uint64_t *tin,
                                uint64_t *tc, const uint64_t *t0p, int stagger_ns, int per)
{
    __shared__ uint32_t sink[NT];
    const uint64_t t0 = *(volatile const uint64_t *)t0p;
    const int n = (int)gridDim.x * per;
    uint32_t acc = 0;
    for (int r = 0; r < ROUNDS; r++) {
        uint4 *L = lines + (size_t)r * gridDim.x * PER;
        const uint32_t f = (uint32_t)r + 1u;
        const uint64_t at = t0 + (uint64_t)(r + 1) * GAP_NS +
                            (uint64_t)((blockIdx.x * 37u) % 16u) * (uint64_t)stagger_ns;
        if (threadIdx.x < 32) { /* warp 0 stores the block's lines */
            if (threadIdx.x == 0) lab_wait_until(at);
            __syncwarp();
            uint64_t t = lab_gtime();
            if (MODE == 3) { /* data alone: two lines' data in one 16-byte store */
                uint2 *D = (uint2 *)L;
                for (int i = threadIdx.x; i < per; i += 32)
                    D[blockIdx.x * per + i] = make_uint2((uint32_t)t, (uint32_t)i);
            } else {
                for (int i = threadIdx.x; i < per; i += 32)
                    ll_put(L + blockIdx.x * per + i, (uint32_t)t, (uint32_t)i, f);
            }
            if (MODE >= 2) {
                __syncwarp();
                if (threadIdx.x == 0 && MODE == 4)
                    asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(cnt + r)
                                 : "memory");
                else if (threadIdx.x == 0)
                    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(cnt + r)
                                 : "memory");
            }
            if (threadIdx.x == 0) ts[(size_t)r * gridDim.x + blockIdx.x] = t;
        }
        if (MODE == 0) {
            for (int base = 0; base < n; base += ST_LLB * NT) {
                uint4 v[ST_LLB];
                ll_gather<ST_LLB>(L, base, n, f, v);
#pragma unroll
                for (int j = 0; j < ST_LLB; j++) acc += v[j].x;
            }
        } else if (MODE == 1) {
            for (int i = threadIdx.x; i < n; i += NT) acc += ll_ready(L + i, ll_load(L + i), f).x;
        } else {
            if (threadIdx.x == 0) {
                unsigned c;
                if (MODE == 4) do
                        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                                     : "=r"(c)
                                     : "l"(cnt + r)
                                     : "memory");
                    while (c < gridDim.x);
                else
                    do
                        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                                     : "=r"(c)
                                     : "l"(cnt + r)
                                     : "memory");
                    while (c < gridDim.x);
                tc[(size_t)r * gridDim.x + blockIdx.x] = lab_gtime();
            }
            __syncthreads();
            if (MODE == 4)
                for (int base = 0; base < n; base += ST_LLB * NT) {
                    uint4 v[ST_LLB];
                    ll_gather<ST_LLB>(L, base, n, f, v);
#pragma unroll
                    for (int j = 0; j < ST_LLB; j++) acc += v[j].x;
                }
            else if (MODE == 2)
                for (int i = threadIdx.x; i < n; i += NT) acc += ll_load(L + i).x;
            else
                for (int i = threadIdx.x; i < n / 2; i += NT) acc += ll_load(L + i).x;
        }
        __syncthreads();
        if (threadIdx.x == 0) tin[(size_t)r * gridDim.x + blockIdx.x] = lab_gtime();
    }
    sink[threadIdx.x] = acc;
}

/* 120 KB of (unused) shared memory: one block per SM, as the kernel's */
static void launch(const void *fn, int grid, void **args)
{
    const int smem = 120 << 10;
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaLaunchCooperativeKernel(fn, dim3((unsigned)grid), dim3(NT), args, (size_t)smem, 0));
    CK(cudaDeviceSynchronize());
}

template <int S, int L> static void oneway(const char *name, int grid, uint4 *lines, uint64_t *t0)
{
    uint64_t *lat;
    CK(cudaMalloc(&lat, (size_t)ROUNDS * grid * 8));
    CK(cudaMemset(lines, 0, 1 << 20));
    k_lab_t0<<<1, 1>>>(t0);
    void *args[] = {&lines, &lat, &t0};
    launch((const void *)k_oneway<S, L>, grid, args);
    std::vector<uint64_t> h((size_t)ROUNDS * grid);
    CK(cudaMemcpy(h.data(), lat, h.size() * 8, cudaMemcpyDeviceToHost));
    std::vector<double> v;
    for (int r = 2; r < ROUNDS; r++) /* the first rounds: warm-up */
        for (int b = 0; b < grid; b++)
            if (b != r % grid) v.push_back((double)h[(size_t)r * grid + b]);
    lab_report(name, v, 56);
    CK(cudaFree(lat));
}

template <int MODE>
static void gather(const char *name, int grid, uint4 *lines, uint64_t *t0, int stagger, int per)
{
    uint64_t *ts, *tin, *tc;
    unsigned *cnt;
    const size_t nr = (size_t)ROUNDS * grid;
    CK(cudaMalloc(&ts, nr * 8));
    CK(cudaMalloc(&tin, nr * 8));
    CK(cudaMalloc(&tc, nr * 8));
    CK(cudaMalloc(&cnt, ROUNDS * 4));
    CK(cudaMemset(cnt, 0, ROUNDS * 4));
    CK(cudaMemset(tc, 0, nr * 8));
    CK(cudaMemset(lines, 0, nr * PER * 16));
    k_lab_t0<<<1, 1>>>(t0);
    void *args[] = {&lines, &cnt, &ts, &tin, &tc, &t0, &stagger, &per};
    launch((const void *)k_gather<MODE>, grid, args);
    std::vector<uint64_t> hs(nr), hi(nr), hc(nr);
    CK(cudaMemcpy(hs.data(), ts, nr * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hi.data(), tin, nr * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hc.data(), tc, nr * 8, cudaMemcpyDeviceToHost));
    std::vector<double> all, last, cseen;
    for (int r = 2; r < ROUNDS; r++) {
        uint64_t ls = 0, li = 0;
        for (int b = 0; b < grid; b++) ls = std::max(ls, hs[(size_t)r * grid + b]);
        for (int b = 0; b < grid; b++) {
            uint64_t t = hi[(size_t)r * grid + b], c = hc[(size_t)r * grid + b];
            all.push_back((double)t - (double)ls);
            if (c) cseen.push_back((double)c - (double)ls);
            li = std::max(li, t);
        }
        last.push_back((double)li - (double)ls);
    }
    char s[128];
    snprintf(s, sizeof s, "%s, %d lines, stagger %d: every block", name, grid * per, stagger);
    lab_report(s, all, 56);
    snprintf(s, sizeof s, "%s, %d lines, stagger %d: last block", name, grid * per, stagger);
    lab_report(s, last, 56);
    if (!cseen.empty()) {
        snprintf(s, sizeof s, "%s, %d lines, stagger %d: counter seen", name, grid * per, stagger);
        lab_report(s, cseen, 56);
    }
    CK(cudaFree(ts));
    CK(cudaFree(tin));
    CK(cudaFree(tc));
    CK(cudaFree(cnt));
}

int main(void)
{
    int dev = 0, grid = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&grid, cudaDevAttrMultiProcessorCount, dev));
    uint4 *lines;
    uint64_t *t0, *rt;
    size_t lbytes = (size_t)ROUNDS * grid * PER * 16;
    CK(cudaMalloc(&lines, std::max(lbytes, (size_t)1 << 20)));
    CK(cudaMalloc(&t0, 8));
    CK(cudaMalloc(&rt, (size_t)grid * 8));
    printf("hop_lab: %d SMs, %d threads a block, ns (p10 / p50 / p90 / p99 / mean, count; the "
           "timer ticks 32 or 256 ns)\n",
           grid, NT);
    printf("%-56s %8s %8s %8s %8s %8s\n", "test", "p10", "p50", "p90", "p99", "mean");
    oneway<0, 0>("oneway st.relaxed.gpu / ld.relaxed.gpu", grid, lines, t0);
    oneway<1, 1>("oneway st.volatile / ld.volatile", grid, lines, t0);
    oneway<2, 2>("oneway st.release.gpu / ld.acquire.gpu", grid, lines, t0);
    {
        CK(cudaMemset(lines, 0, 1 << 20));
        CK(cudaMemset(rt, 0, (size_t)grid * 8));
        void *args[] = {&lines, &rt};
        launch((const void *)k_pingpong, grid, args);
        std::vector<uint64_t> h(grid);
        CK(cudaMemcpy(h.data(), rt, (size_t)grid * 8, cudaMemcpyDeviceToHost));
        std::vector<double> v;
        for (int k = 1; k < grid; k++) v.push_back((double)h[k] / 2.0);
        lab_report("pingpong block 0 <-> k, half a round trip", v, 56);
    }
    for (int per : {16, 28, 8})
        for (int stagger : {0, 50, 100}) {
            gather<0>("ll_gather", grid, lines, t0, stagger, per);
            if (per == 16 && stagger == 50) gather<1>("re-poll", grid, lines, t0, stagger, per);
            gather<2>("counter+LL", grid, lines, t0, stagger, per);
            gather<3>("counter+data", grid, lines, t0, stagger, per);
            gather<4>("relaxed counter+LL", grid, lines, t0, stagger, per);
        }
    return 0;
}
