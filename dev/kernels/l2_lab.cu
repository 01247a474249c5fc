/*
 * l2_lab.cu — kernel lab for issue 7: does a 4-bit decode GEMV (v3,
 * cuda_quant_mma.cu) run faster when its weights were prefetched into L2
 * while the step's small kernels (attention, norms, rope) held the GPU?
 *
 * Why: the real step's time line (docs/perf/quant.md, 2026-11-30) has ~800
 * us per token of small, latency-bound kernels during which DRAM is idle,
 * and the GEMVs at ~2.3 TB/s (56% of the copy rate). If a GEMV whose
 * weights sit in L2 runs much faster than one reading DRAM, the small
 * kernels can prefetch the next GEMV's weights (cp.async.bulk.prefetch.L2)
 * and turn their idle DRAM time into streaming.
 *
 * Per Llama-3.1-8B shape (4-bit g64, T = 1), us per GEMV:
 *   cold  launches cycling through >= 300 MB of weight copies (DRAM);
 *   hot   the same copy every launch (L2-resident where it fits);
 *   pf    each sample (P = 0: no prefetch, the single-launch baseline): a prefetch kernel over the first P bytes of the
 *         copy's packed weights (and all its scales / biases), a spin kernel
 *         of SPIN us (the small kernels' time), then the GEMV alone timed
 *         with events; P = all and P = 16 MB, SPIN = 4 and 12 us.
 *
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/l2_lab.cu -o l2_lab
 */
#include "backend/cuda/cuda_quant_mma.cu"
#include "lab_common.cuh"

static __global__ void k_prefetch(const unsigned char *q, size_t qn, const unsigned char *s,
                                  const unsigned char *b, size_t sn)
{
    /* block i prefetches its contiguous slice of each array, in 64 KB pieces */
    const unsigned char *p[3] = {q, s, b};
    size_t n[3] = {qn, sn, sn};
    for (int a = 0; a < 3; a++) {
        size_t per = (n[a] / gridDim.x + 15) & ~(size_t)15;
        size_t lo = per * blockIdx.x, hi = min(n[a], lo + per);
        for (size_t o = lo + threadIdx.x * 65536; o < hi; o += blockDim.x * 65536ull) {
            uint32_t sz = (uint32_t)min((size_t)65536, hi - o);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p[a] + o), "r"(sz & ~15u)
                         : "memory");
        }
    }
}

static __global__ void k_spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

struct mat {
    tk_qmat m;
    size_t qb, sbb;
};

int main()
{
    double copy = copy_rate();
    int clk_khz = 0;
    CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
    printf("copy (read + write) %.0f GB/s, SM clock %d MHz\n", copy, clk_khz / 1000);
    struct { const char *name; int out, in; } shapes[] = {
        {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096},
        {"down", 4096, 14336}, {"lm_head", 128256, 4096}};
    bf16 *x;
    float *y;
    CK(cudaMalloc(&x, 14336 * 2 * 8));
    CK(cudaMalloc(&y, 128256 * 4 * 8));
    fill(x, 14336 * 2 * 8, 7, 0x807F807Fu, 0x3F003F00u);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("%-8s %8s %8s %8s | %-18s %8s %8s\n", "shape", "MB", "cold", "hot", "pf P / spin", "us",
           "vs cold");
    for (auto &sh : shapes) {
        size_t qb = (size_t)sh.out * sh.in / 2, sbb = (size_t)sh.out * (sh.in / 64) * 2;
        size_t bytes = qb + 2 * sbb;
        int nc = (int)std::max<size_t>(2, (400ull << 20) / bytes + 1);
        std::vector<mat> ms;
        for (int c = 0; c < nc; c++) {
            mat k;
            void *q, *s, *b;
            lab_q4_alloc(sh.out, sh.in, 11 + c, &q, &s, &b);
            k.m = {q, s, b, TK_BF16, 4, 64};
            k.qb = qb, k.sbb = sbb;
            ms.push_back(k);
        }
        CK(cudaDeviceSynchronize());
        auto gemv = [&](int c) {
            CK(tk_qgemv_mma(0, &ms[c].m, x, sh.in, NULL, 0, y, TK_F32, sh.out, 1, sh.in, sh.out));
        };
        double cold = time_us(nc, gemv);
        double hot = time_us(1, gemv);
        printf("%-8s %8.1f %8.2f %8.2f |\n", sh.name, bytes / 1e6, cold, hot);
        size_t Ps[3] = {0, qb, std::min(qb, (size_t)16 << 20)}; /* 0: no prefetch (single-launch baseline) */
        double spins[2] = {4.0, 12.0};
        for (size_t P : Ps)
            for (double sp : spins) {
                std::vector<float> v;
                for (int r = 0; r < 24; r++) {
                    int c = r % nc;
                    if (P) k_prefetch<<<132, 32>>>((const unsigned char *)ms[c].m.q, P,
                                            (const unsigned char *)ms[c].m.scales,
                                            (const unsigned char *)ms[c].m.biases, sbb);
                    k_spin<<<1, 32>>>((long long)(sp * clk_khz / 1000.0));
                    CK(cudaEventRecord(e0));
                    gemv(c);
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    float t;
                    CK(cudaEventElapsedTime(&t, e0, e1));
                    if (r >= 4) v.push_back(t * 1e3f);
                }
                std::sort(v.begin(), v.end());
                char lab[32];
                snprintf(lab, sizeof lab, "%.0f MB / %.0f us", P / 1e6, sp);
                printf("%-8s %8s %8s %8s | %-18s %8.2f %7.0f%%\n", "", "", "", "", lab,
                       v[v.size() / 2], 100.0 * v[v.size() / 2] / cold);
            }
        for (auto &k : ms) {
            CK(cudaFree((void *)k.m.q));
            CK(cudaFree((void *)k.m.scales));
            CK(cudaFree((void *)k.m.biases));
        }
    }
    /* event timing of one launch has a floor of its own: an empty-ish kernel */
    std::vector<float> v;
    for (int r = 0; r < 20; r++) {
        CK(cudaEventRecord(e0));
        k_spin<<<1, 32>>>(0);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        v.push_back(t * 1e3f);
    }
    std::sort(v.begin(), v.end());
    printf("event pair around an empty kernel: %.2f us\n", v[10]);
    return 0;
}
