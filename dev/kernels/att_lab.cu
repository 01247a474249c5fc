/*
 * att_lab.cu — kernel lab for issue 7: how long do the decode step
 * kernel's attention steps take by themselves? In the step (8B shape, one
 * pass of 64 positions per split) q . k, the softmax and p . v take 0.67,
 * 0.38 and 0.80 us between block barriers (globaltimer stamps), with the
 * weight stream on or off (TERN_CUDA_STEP_TUNE=144) and with their code
 * warm (TUNE=4096): ~1300, ~750 and ~1600 cycles for ~60, ~90 and ~120
 * instructions per warp. Here one 16-warp block per SM runs the same three
 * steps (the code of st_att_item in cuda_step.cu: G = 4 q heads, hd = 128,
 * 64 positions, K / V rows and q in shared memory) five times in a loop
 * that is not unrolled, stamping clock64 and globaltimer after each
 * barrier. Prints, median over the SMs, each step's cycles and ns in each
 * repetition (the first after the launch: its code cold).
 * Run: ./att_lab
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/att_lab.cu -o att_lab
 */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_qmma.cuh"

#include <algorithm>
#include <cstdio>
#include <vector>

enum { NW = 16, G = 4, HD = 128, SPL = 64, REPS = 5, NSTEP = 3 };

struct lab_smem {
    bf16 k[SPL][HD + 8], v[SPL][HD + 8];
    bf16 qb[8 * HD];
    float s[8][SPL];
    float m[8], l[8], fac[8];
};

__global__ void __launch_bounds__(NW * 32, 1) k_att(long long *cyc, long long *ns, float *out,
                                                     float scale)
{
    __shared__ lab_smem S;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
    for (int i = tid; i < SPL * (HD + 8); i += NW * 32) {
        (&S.k[0][0])[i] = __float2bfloat16(0.01f * (i % 97));
        (&S.v[0][0])[i] = __float2bfloat16(0.02f * (i % 89));
    }
    for (int i = tid; i < 8 * HD; i += NW * 32)
        S.qb[i] = __float2bfloat16(i < G * HD ? 0.03f * (i % 31) : 0.0f);
    if (tid < G) S.m[tid] = -INFINITY, S.l[tid] = 0.0f;
    const int n = SPL, n16 = SPL;
    float o2[2] = {0.0f, 0.0f};
    __syncthreads();
#pragma unroll 1
    for (int rep = 0; rep < REPS; rep++) {
        long long c[NSTEP + 1], t[NSTEP + 1];
        __syncthreads();
        c[0] = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t[0]));
        if (warp < n16 / 16) { /* q . k, as st_att_item */
            float c0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const bf16 *krow = &S.k[16 * warp + (lane & 15)][8 * (lane >> 4)];
            const uint32_t *qg = (const uint32_t *)(S.qb + g4 * HD) + t4;
            for (int ks = 0; ks < HD / 16; ks += 2) {
                uint32_t k0, k1, k2, k3;
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(k0), "=r"(k1), "=r"(k2), "=r"(k3)
                             : "r"(tk_smem_u32(krow + 16 * ks)));
                tk_mma_bf16(c0, k0, k1, k2, k3, qg[8 * ks], qg[8 * ks + 4]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(k0), "=r"(k1), "=r"(k2), "=r"(k3)
                             : "r"(tk_smem_u32(krow + 16 * ks + 16)));
                tk_mma_bf16(c1, k0, k1, k2, k3, qg[8 * ks + 8], qg[8 * ks + 12]);
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int head = 2 * t4 + (e & 1), p = 16 * warp + g4 + 8 * (e >> 1);
                if (head < G && p < n) S.s[head][p] = __fmul_rn(c0[e] + c1[e], scale);
            }
        }
        __syncthreads();
        c[1] = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t[1]));
        for (int g = warp; g < G; g += NW) { /* the online softmax */
            float v0 = lane < n ? S.s[g][lane] : -INFINITY;
            float v1 = lane + 32 < n ? S.s[g][lane + 32] : -INFINITY;
            float mp = tk_warp_max(fmaxf(v0, v1)), mo = S.m[g], mn = fmaxf(mo, mp);
            float e0 = lane < n ? __expf(v0 - mn) : 0.0f, e1 = lane + 32 < n ? __expf(v1 - mn) : 0.0f;
            S.s[g][lane] = e0, S.s[g][lane + 32] = e1;
            float sum = tk_warp_sum(e0 + e1);
            if (lane == 0) {
                float fc = mo == -INFINITY ? 0.0f : __expf(mo - mn);
                S.fac[g] = fc, S.l[g] = S.l[g] * fc + sum, S.m[g] = mn;
            }
        }
        __syncthreads();
        c[2] = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t[2]));
        if (warp < HD / 8) { /* p . v */
            float cc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int kk = 0; kk < n16 / 16; kk++) {
                uint32_t v0, v1;
                asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                             : "=r"(v0), "=r"(v1)
                             : "r"(tk_smem_u32(&S.v[16 * kk + (lane & 15)][8 * warp])));
                uint32_t h0 = 0u, l0 = 0u, h2 = 0u, l2 = 0u;
                if (g4 < G) {
                    float2 pa = *(const float2 *)&S.s[g4][16 * kk + 2 * t4];
                    float2 pb = *(const float2 *)&S.s[g4][16 * kk + 2 * t4 + 8];
                    __nv_bfloat162 ha = __floats2bfloat162_rn(pa.x, pa.y);
                    __nv_bfloat162 hb = __floats2bfloat162_rn(pb.x, pb.y);
                    float2 fa = __bfloat1622float2(ha), fb = __bfloat1622float2(hb);
                    __nv_bfloat162 la = __floats2bfloat162_rn(pa.x - fa.x, pa.y - fa.y);
                    __nv_bfloat162 lb = __floats2bfloat162_rn(pb.x - fb.x, pb.y - fb.y);
                    h0 = *(const uint32_t *)&ha, h2 = *(const uint32_t *)&hb;
                    l0 = *(const uint32_t *)&la, l2 = *(const uint32_t *)&lb;
                }
                tk_mma_bf16(cc, h0, 0u, h2, 0u, v0, v1);
                tk_mma_bf16(cc, l0, 0u, l2, 0u, v0, v1);
            }
            if (g4 < G) {
                float fc = S.fac[g4];
                o2[0] = fmaf(o2[0], fc, cc[0]), o2[1] = fmaf(o2[1], fc, cc[1]);
            }
        }
        __syncthreads();
        c[3] = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t[3]));
        if (tid == 0)
            for (int s = 0; s < NSTEP; s++) {
                cyc[(blockIdx.x * REPS + rep) * NSTEP + s] = c[s + 1] - c[s];
                ns[(blockIdx.x * REPS + rep) * NSTEP + s] = t[s + 1] - t[s];
            }
    }
    out[blockIdx.x * NW * 32 + tid] = o2[0] + o2[1]; /* keeps the work */
}

int main()
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    long long *cyc, *ns;
    float *out;
    size_t n = (size_t)sms * REPS * NSTEP;
    cudaMalloc(&cyc, n * 8), cudaMalloc(&ns, n * 8), cudaMalloc(&out, (size_t)sms * NW * 32 * 4);
    for (int launch = 0; launch < 3; launch++) k_att<<<sms, NW * 32>>>(cyc, ns, out, 0.088f);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "att_lab: %s\n", cudaGetErrorString(e));
        return 1;
    }
    std::vector<long long> hc(n), hn(n);
    cudaMemcpy(hc.data(), cyc, n * 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(hn.data(), ns, n * 8, cudaMemcpyDeviceToHost);
    const char *names[NSTEP] = {"q . k", "softmax", "p . v"};
    printf("att_lab: %d SMs, one 16-warp block each; median over SMs, cycles / ns per rep\n", sms);
    for (int s = 0; s < NSTEP; s++) {
        printf("%-8s", names[s]);
        for (int r = 0; r < REPS; r++) {
            std::vector<long long> a, b;
            for (int bk = 0; bk < sms; bk++)
                a.push_back(hc[(bk * REPS + r) * NSTEP + s]), b.push_back(hn[(bk * REPS + r) * NSTEP + s]);
            std::sort(a.begin(), a.end()), std::sort(b.begin(), b.end());
            printf("  %5lld cyc %5lld ns", a[sms / 2], b[sms / 2]);
        }
        printf("\n");
    }
    return 0;
}
