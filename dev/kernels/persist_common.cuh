/*
 * persist_common.cuh — the pieces the persistent-chain labs share
 * (persist_lab.cu, persist3_lab.cu, persist4_lab.cu): the grid barrier
 * between ops (one release-add and an acquire spin per block on a counter
 * the host zeroes before the launch), block 0's clock at each barrier, and
 * the per-op time table printed from those clocks. Kernel lab code, not
 * part of the library. Include after lab_common.cuh.
 */
#ifndef TERN_DEV_PERSIST_COMMON_CUH
#define TERN_DEV_PERSIST_COMMON_CUH

#define LAB_MAX_OPS 259 /* 64 layers x 4 + lm_head, + 1 end stamp below 260 */

/* Block 0's clock when each op starts (after its barrier), and at the end. */
static __device__ unsigned long long g_lab_ts[LAB_MAX_OPS + 1];

static __device__ __forceinline__ unsigned long long lab_gtimer(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

/* The thread that counts its block in and spins: 0 unless a lab moves it
 * (a lane that issues bulk copies may wait for them at the release). */
#ifndef LAB_GB_THREAD
#define LAB_GB_THREAD 0
#endif

/* Every block's n_threads participating threads have finished the ops
 * before: the counter reaches target (op index x blocks). Named barrier 3
 * (the labs use 0-2 for their own). */
static __device__ __forceinline__ void lab_grid_barrier(unsigned *ctr, unsigned target,
                                                        int n_threads)
{
    asm volatile("bar.sync 3, %0;" ::"r"(n_threads) : "memory");
    if (threadIdx.x == LAB_GB_THREAD) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
        } while (v < target);
    }
    asm volatile("bar.sync 3, %0;" ::"r"(n_threads) : "memory");
}

/* The barrier before op `op` (none before the first) and block 0's stamp. */
static __device__ __forceinline__ void lab_op_start(unsigned *ctr, int op, int n_threads)
{
    if (op > 0) lab_grid_barrier(ctr, (unsigned)op * gridDim.x, n_threads);
    if (blockIdx.x == 0 && threadIdx.x == 0) g_lab_ts[op] = lab_gtimer();
}

/* After the last op: every block done, the end stamp. */
static __device__ __forceinline__ void lab_ops_end(unsigned *ctr, int n_ops, int n_threads)
{
    if (n_ops > 1) lab_grid_barrier(ctr, (unsigned)n_ops * gridDim.x, n_threads);
    if (blockIdx.x == 0 && threadIdx.x == 0) g_lab_ts[n_ops] = lab_gtimer();
}

/* Per op kind of the 8B chain (qkv, o, gate_up, down per layer, then
 * lm_head): us each inside the last launch, against the op's bytes at the
 * copy rate (GB/s). */
static void lab_print_op_times(int n_ops, const std::vector<double> &op_bytes, double copy)
{
    unsigned long long ts[LAB_MAX_OPS + 1];
    CK(cudaMemcpyFromSymbol(ts, g_lab_ts, sizeof ts));
    const char *kind[5] = {"qkv", "o", "gate_up", "down", "lm_head"};
    double sum[5] = {0}, ideal[5] = {0};
    int cnt[5] = {0};
    for (int o = 0; o < n_ops; o++) {
        int k = o == n_ops - 1 ? 4 : o % 4;
        sum[k] += (ts[o + 1] - ts[o]) / 1e3, cnt[k]++;
        ideal[k] = op_bytes[o] / copy / 1e3;
    }
    for (int k = 0; k < 5; k++)
        if (cnt[k])
            printf("  %-8s %8.2f us each (copy %.2f: %.1f%%)\n", kind[k], sum[k] / cnt[k], ideal[k],
                   100.0 * ideal[k] / (sum[k] / cnt[k]));
    printf("  total %.1f us\n", (ts[n_ops] - ts[0]) / 1e3);
}

#endif /* TERN_DEV_PERSIST_COMMON_CUH */
