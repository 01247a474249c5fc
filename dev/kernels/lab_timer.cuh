/*
 * lab_timer.cuh — globaltimer helpers the cross-SM labs share (hop_lab.cu,
 * cluster_lab.cu): the GPU's ns clock, a spin until a time, a start time
 * 50 us ahead (every resident block is polling by then), and percentiles
 * of the measured ns printed as one row. Kernel lab code, not part of the
 * library; include after lab_common.cuh.
 */
#ifndef TERN_DEV_LAB_TIMER_CUH
#define TERN_DEV_LAB_TIMER_CUH

static __device__ __forceinline__ uint64_t lab_gtime(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ void lab_wait_until(uint64_t t)
{
    while (lab_gtime() < t) {
    }
}

static __global__ void k_lab_t0(uint64_t *t0)
{
    *t0 = lab_gtime() + 50000; /* 50 us from now: every block is polling by then */
}

static double lab_pct(std::vector<double> v, double q)
{
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[(size_t)(q * (double)(v.size() - 1))];
}

/* One row: name (in w columns), p10 / p50 / p90 / p99 / mean, count. */
static void lab_report(const char *name, const std::vector<double> &v, int w)
{
    double m = 0.0;
    for (double x : v) m += x / (double)v.size();
    printf("%-*s %8.0f %8.0f %8.0f %8.0f %8.0f  (%zu)\n", w, name, lab_pct(v, 0.1), lab_pct(v, 0.5),
           lab_pct(v, 0.9), lab_pct(v, 0.99), m, v.size());
}

#endif /* TERN_DEV_LAB_TIMER_CUH */
