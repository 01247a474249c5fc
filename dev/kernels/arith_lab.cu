/*
 * arith_lab.cu — kernel lab for issue 7: how fast can the decode step
 * kernel's record arithmetic (cuda_step.cuh st_group1, f16 records) run on
 * one 16-warp block per SM, and what layout of a chunk makes it faster?
 * The step's arithmetic alone runs at ~100% of the weight stream's rate
 * (docs/perf/quant.md, TUNE=136), so a phase's wait is never made up: the
 * rings' banked chunks drain no faster than they fill.
 *
 * Each warp loops over chunks of C records in its ring (S = 16 / C stages,
 * 16 records per warp as in the kernel; 8 with more than 16 warps),
 * optionally refilled by cp.async.bulk from an L2-resident buffer (STREAM: the ring's wait and
 * issue as in the kernel). XR records share one x group: XR = 1 is the
 * kernel's chunk (C consecutive groups of one tile, x loaded per record,
 * one pair of sums); XR = 4 a chunk of 4 tiles' records of the same
 * group(s) (x loaded once per group, a pair of sums per tile).
 * MM: the record's MMAs (4 as the kernel; 2 or 0, their operands folded
 * away; 5: u8 x s8 IMMA on x as two 8-bit digits, timing only). Also the
 * tensor pipe's MMA rates. Prints ns per record per SM and the 8B step's
 * arithmetic time it implies (55.6 k records per SM per token) against its
 * stream floor (~1030 us). docs/perf/quant.md (session 10) has the
 * numbers (from medians of single launches; lab_common's time_us since).
 * Run: ./arith_lab
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/arith_lab.cu -o arith_lab
 */
#include "backend/cuda/cuda_step.cuh"
#include "lab_common.cuh"

#include <cuda_fp16.h>

#define RECB 576
#define RECQ (RECB / 16)
#define NGRP 64 /* groups of x (K = 4096) */

/* st_group1 with MM of its 4 MMAs (0: none, the nibbles xor-folded into the
 * sums instead; 2: the two low-nibble ones; 4: all, as st_group1). */
template <int MM>
static __device__ __forceinline__ void rec_mm(const uint4 w, const uint4 xa, const uint4 xb,
                                              uint2 sbv, float2 XY, uint32_t magic, float *acc)
{
    if (MM == 4) {
        st_group1(w, xa, xb, sbv, XY, magic, acc);
        return;
    }
    if (MM == 5) { /* u8 nibbles x s8 digits of x (16-bit fixed point per group): 4 IMMA */
        int ch[4] = {0, 0, 0, 0}, cl[4] = {0, 0, 0, 0};
        const uint32_t ww[4] = {w.x, w.y, w.z, w.w};
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int j = 0; j < 4; j++) lo[j] = ww[j] & 0x0F0F0F0Fu, hi[j] = (ww[j] >> 4) & 0x0F0F0F0Fu;
#define IMMA(c, a, b0, b1)                                                                         \
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "  \
        "{%0,%1,%2,%3};"                                                                           \
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])                                           \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
        IMMA(ch, lo, xa.x, xa.y);
        IMMA(ch, hi, xa.z, xa.w);
        IMMA(cl, lo, xb.x, xb.y);
        IMMA(cl, hi, xb.z, xb.w);
#undef IMMA
        const float s0 = __uint_as_float(sbv.x << 16), s1 = __uint_as_float(sbv.x & 0xffff0000u);
        const float b0 = __uint_as_float(sbv.y << 16), b1 = __uint_as_float(sbv.y & 0xffff0000u);
        const float d0 = (float)(ch[0] * 256 + cl[0]), d1 = (float)(ch[2] * 256 + cl[2]);
        acc[0] = fmaf(s0 * XY.y, d0, fmaf(b0, XY.x, acc[0]));
        acc[1] = fmaf(s1 * XY.y, d1, fmaf(b1, XY.x, acc[1]));
        return;
    }
    float c0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint32_t ww[4] = {w.x, w.y, w.z, w.w};
    const uint32_t xr[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    uint32_t fold = 0u;
#pragma unroll
    for (int p = 0; p < 2; p++) {
        uint32_t lo[4], hi[4];
        st_unpack_f16(ww[2 * p], ww[2 * p + 1], magic, lo, hi);
        if (MM == 2) {
            tk_mma_f16(c0, lo[0], lo[1], lo[2], lo[3], xr[4 * p], xr[4 * p + 1]);
            fold ^= hi[0] ^ hi[1] ^ hi[2] ^ hi[3] ^ xr[4 * p + 2] ^ xr[4 * p + 3];
        } else {
            fold ^= lo[0] ^ lo[1] ^ lo[2] ^ lo[3] ^ hi[0] ^ hi[1] ^ hi[2] ^ hi[3] ^ xr[4 * p] ^
                    xr[4 * p + 1] ^ xr[4 * p + 2] ^ xr[4 * p + 3];
        }
    }
    c1[0] = __uint_as_float(fold & 0x3fffffffu);
    st_group_sums(c0, c1, sbv, XY, acc);
}

/* records per warp's ring: 16 with 16 warps (the kernel's 147 KB), 8 with more */
#define RPW(NW) ((NW) > 16 ? 8 : 16)

template <int NW, int C, int XR, int STREAM, int MM = 4>
static __global__ void __launch_bounds__(NW * 32, 1)
    k_arith(const char *gsrc, int nch, float *out, unsigned long long *cyc)
{
    constexpr int S = RPW(NW) / C;
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t bars[NW][S];
    __shared__ __align__(16) float2 xsum[NGRP];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint4 *ring = (uint4 *)smem + (size_t)warp * S * C * RECQ;
    __half *xs = (__half *)(smem + (size_t)NW * S * C * RECB);
    for (int i = threadIdx.x; i < NGRP * 64; i += NW * 32)
        xs[i] = __float2half(0.001f * (float)((i * 37) % 101 - 50));
    for (int i = threadIdx.x; i < NGRP; i += NW * 32) xsum[i] = make_float2(0.01f * i, 0.02f * i);
    /* records: random nibbles, small scales / biases */
    for (int i = lane; i < S * C * RECQ; i += 32) {
        uint32_t h = (uint32_t)(i + 977 * warp + 131 * blockIdx.x) * 2654435761u;
        h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
        ring[i] = (i % RECQ) < 32
                      ? make_uint4(h, h * 3u, h * 5u, h * 7u)
                      : make_uint4(0x3c003c00u & h, 0x1c001c00u, 0x3c003c00u, 0x1c001c00u);
    }
    const char *src = gsrc + (size_t)(blockIdx.x * NW + warp) * S * C * RECB;
    uint32_t ring0 = tk_smem_u32(ring), bar0 = tk_smem_u32(&bars[warp][0]);
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    if (STREAM && lane == 0) {
        st_ring_init(bar0, S);
        for (int s = 0; s < S; s++)
            st_bulk(ring0 + s * C * RECB, src + s * C * RECB, C * RECB, bar0 + 8 * s, pol);
    }
    __syncthreads();
    const uint32_t magic = 0x64006400u;
    float acc[2 * XR];
#pragma unroll
    for (int i = 0; i < 2 * XR; i++) acc[i] = 0.0f;
    long long c0 = clock64();
    int G = (warp * 7) % NGRP;
    for (int ch = 0; ch < nch; ch++) {
        const int stg = ch % S;
        if (STREAM) st_wait(bar0 + 8 * stg, (ch / S) & 1);
        const uint4 *sp = ring + stg * C * RECQ;
        uint4 w[C];
        uint2 sb[C];
#pragma unroll
        for (int j = 0; j < C; j++) {
            w[j] = sp[j * RECQ + lane];
            sb[j] = ((const uint2 *)(sp + j * RECQ + 32))[g];
        }
        if (STREAM) {
            __syncwarp();
            if (lane == 0)
                st_bulk(ring0 + stg * C * RECB, src + stg * C * RECB, C * RECB, bar0 + 8 * stg,
                        pol);
        }
#pragma unroll
        for (int gg = 0; gg < C / XR; gg++) {
            const int Gi = (G + gg) & (NGRP - 1);
            if (XR == 1) {
                const uint4 *xp = (const uint4 *)(xs + 64 * Gi + 16 * t);
                rec_mm<MM>(w[gg], xp[0], xp[1], sb[gg], xsum[Gi], magic, acc);
            } else {
                const uint4 *xp = (const uint4 *)(xs + 64 * Gi + 16 * t);
                const uint4 xa = xp[0], xb = xp[1];
                const float2 XY = xsum[Gi];
#pragma unroll
                for (int tt = 0; tt < XR; tt++)
                    rec_mm<MM>(w[gg * XR + tt], xa, xb, sb[gg * XR + tt], XY, magic, acc + 2 * tt);
            }
        }
        G = (G + C / XR) & (NGRP - 1);
    }
    long long c1 = clock64();
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 2 * XR; i++) s += acc[i];
    out[blockIdx.x * NW * 32 + threadIdx.x] = s;
    if (threadIdx.x == 0) cyc[blockIdx.x] = (unsigned long long)(c1 - c0);
}

template <int NW, int C, int XR, int STREAM, int MM = 4>
static void run(const char *name, const char *gsrc)
{
    constexpr int S = RPW(NW) / C;
    const int grid = 132, nch = 4096 / C * 4;
    size_t smem = (size_t)NW * S * C * RECB + NGRP * 64 * 2;
    auto k = k_arith<NW, C, XR, STREAM, MM>;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    float *out;
    unsigned long long *cyc;
    CK(cudaMalloc(&out, grid * NW * 32 * 4));
    CK(cudaMalloc(&cyc, grid * 8));
    const double us = time_us(1, [&](int) { k<<<grid, NW * 32, smem>>>(gsrc, nch, out, cyc); });
    std::vector<unsigned long long> c(grid);
    CK(cudaMemcpy(c.data(), cyc, grid * 8, cudaMemcpyDeviceToHost));
    std::sort(c.begin(), c.end());
    double recs = (double)nch * C * NW; /* per SM */
    double ns = us * 1e3 / recs;
    printf("%-26s MMA %d  %3d warps  C %d  XR %d  %s  %6.3f ns/record/SM  %6.1f cycles/record/SP  "
           "step arithmetic %5.0f us (%3.0f%% of the ~1030 us floor)\n",
           name, MM, NW, C, XR, STREAM ? "ring " : "smem ", ns, (double)c[grid / 2] / recs * 4.0,
           ns * 55.6e3 / 1e3, ns * 55.6e3 / 1e3 / 1030.0 * 100.0);
    CK(cudaFree(out));
    CK(cudaFree(cyc));
}

/* The tensor pipe's rate: 8 independent MMA chains per warp, NW warps per
 * SM; KIND 0 mma.sync m16n8k16 f16 -> f32, 1 m16n8k32 u8 x s8, 2 m16n8k64
 * u4 x s4 (s32 sums). */
template <int NW, int KIND>
static __global__ void __launch_bounds__(NW * 32, 1) k_mma_peak(int n, float *out)
{
    float c[8][4] = {};
    int ci[8][4] = {};
    uint32_t a = 0x3c003c00u + threadIdx.x, b = 0x3c003c00u ^ threadIdx.x;
    for (int i = 0; i < n; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (KIND == 0)
                tk_mma_f16(c[j], a, a + j, a, a, b, b + j);
            else if (KIND == 1)
                asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, "
                             "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+r"(ci[j][0]), "+r"(ci[j][1]), "+r"(ci[j][2]), "+r"(ci[j][3])
                             : "r"(a), "r"(a + j), "r"(a), "r"(a), "r"(b), "r"(b + j));
            else
                asm volatile("mma.sync.aligned.m16n8k64.row.col.s32.u4.s4.s32 {%0,%1,%2,%3}, "
                             "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+r"(ci[j][0]), "+r"(ci[j][1]), "+r"(ci[j][2]), "+r"(ci[j][3])
                             : "r"(a), "r"(a + j), "r"(a), "r"(a), "r"(b), "r"(b + j));
        }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++)
        s += c[j][0] + c[j][1] + c[j][2] + c[j][3] +
             (float)(ci[j][0] + ci[j][1] + ci[j][2] + ci[j][3]);
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

template <int NW, int KIND> static void mma_peak(void)
{
    static const char *names[] = {"m16n8k16 f16 -> f32", "m16n8k32 u8 x s8", "m16n8k64 u4 x s4"};
    float *out;
    CK(cudaMalloc(&out, 132 * NW * 32 * 4));
    const int n = 20000;
    const double us = time_us(1, [&](int) { k_mma_peak<NW, KIND><<<132, NW * 32>>>(n, out); });
    const double per_sp = (double)n * 8 * NW / 4; /* MMAs per SM sub-partition */
    printf("mma.sync %s, %2d warps/SM: %.2f cycles per MMA per SP (1.98 GHz)\n", names[KIND], NW,
           us * 1e-6 * 1.98e9 / per_sp);
    CK(cudaFree(out));
}

int main()
{
    mma_peak<4, 0>();
    mma_peak<8, 0>();
    mma_peak<16, 0>();
    mma_peak<8, 1>();
    mma_peak<16, 1>();
    mma_peak<8, 2>();
    mma_peak<16, 2>();
    char *gsrc;
    size_t bytes = (size_t)132 * 32 * 16 * RECB;
    CK(cudaMalloc(&gsrc, bytes));
    fill(gsrc, bytes, 7u, 0xffffffffu, 0u);
    CK(cudaDeviceSynchronize());
    run<16, 4, 1, 0>("kernel's chunk", gsrc);
    run<16, 4, 1, 0, 2>("kernel's chunk", gsrc);
    run<16, 4, 1, 0, 0>("kernel's chunk", gsrc);
    run<16, 4, 4, 0, 2>("4 tiles x 1 group", gsrc);
    run<16, 4, 4, 0, 0>("4 tiles x 1 group", gsrc);
    run<16, 4, 1, 0, 5>("kernel's chunk, IMMA u8", gsrc);
    run<16, 4, 4, 0, 5>("4 tiles x 1 group, IMMA u8", gsrc);
    run<16, 4, 1, 1>("kernel's chunk", gsrc);
    run<16, 4, 1, 1, 5>("kernel's chunk, IMMA u8", gsrc);
    run<16, 8, 1, 1, 5>("8 groups of a tile, IMMA u8", gsrc);
    run<16, 8, 4, 1, 5>("4 tiles x 2 groups, IMMA u8", gsrc);
    run<16, 4, 1, 1, 0>("kernel's chunk", gsrc);
    run<16, 8, 1, 1>("8 groups of a tile", gsrc);
    run<16, 4, 4, 0>("4 tiles x 1 group", gsrc);
    run<16, 4, 4, 1>("4 tiles x 1 group", gsrc);
    run<16, 8, 4, 1>("4 tiles x 2 groups", gsrc);
    run<16, 4, 2, 1>("2 tiles x 2 groups", gsrc);
    run<16, 8, 2, 1>("2 tiles x 4 groups", gsrc);
    run<24, 4, 1, 1>("kernel's chunk", gsrc);
    run<24, 4, 4, 1>("4 tiles x 1 group", gsrc);
    run<32, 4, 1, 1>("kernel's chunk", gsrc);
    run<32, 4, 4, 1>("4 tiles x 1 group", gsrc);
    return 0;
}
