/*
 * tp_lab.cu — kernel lab for issue 7: v3 (k_qgemv_mma, cuda_quant_mma.cu)
 * with TP 16-row tiles per warp sharing one set of activation registers.
 *
 * Why: ncu (docs/perf/quant.md, 2026-11-30) has the 4-bit GEMVs bound by
 * the ALU pipe (LOP3 / SHF / PRMT). Per packed word and lane v3 spends 3
 * SHF + 4 LOP3 on the weights, 4 PRMT on the activations (bregs) and two
 * MMAs summing x over the group (A = 1); the PRMTs and the x-sum MMAs
 * depend only on x, so a warp that takes TP tiles pays them once for all
 * TP: ALU operations per weight 11 -> 9 at TP = 2, MMAs 4 -> 3 per word
 * pair. Each tile's rows see exactly v3's operations in v3's order (same
 * B registers, same x sums, same fold), so the outputs must be BITWISE
 * v3's, and the choice can depend on the weight's shape alone.
 *
 * (Since taken into the library: k_tp uses cuda_quant_mma.cu's
 * stage_compute with TP.) The cost: a ring stage holds TP tiles, so at the same shared memory
 * fewer stages are in flight (NS), and a shape has 1/TP as many warps.
 *
 * Printed per Llama-3.1-8B shape (4-bit g64 bf16 scales, T = 1): us of v3
 * and of each (TP, NS), checked bitwise against v3 at T = 1 and 8.
 * "f16": F16 fragments (1 SHF + 4 LOP3 per packed word instead of 3 + 4,
 * no PRMT: x pre-permuted / pre-scaled in shared memory once per block, the
 * group's x sums too, so no A = 1 MMAs): not v3's bits, checked to 1e-5.
 * Run 2 (H200, 2026-11-30): the F16 kernels' results were WRONG (rel ~40
 * against v3: the fold took the x sums only in lanes g == 0, the B
 * operand's token column, instead of t == 0, the lanes holding token 0's
 * sums; fixed after the run, not re-run) and, per op, no faster than tp2 (gate_up
 * 28.4 vs 29.0 us, qkv 11.1 vs 11.5, o 9.1 vs 8.2, down 19.0 vs 18.6,
 * lm_head 115 vs 100): the per-block x prologue costs what the inner loop
 * saves when launched per op. Kept for the persistent kernel, where x is
 * staged in shared memory once per op anyway.
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/tp_lab.cu -o tp_lab
 */
#include "backend/cuda/cuda_quant_mma.cu"
#include "lab_common.cuh"

typedef qm_cfg<4, 64> TC;

/* v3's plain kernel (4-bit g64, F32 out, no bias) with TP tiles per warp
 * and NS ring stages of TP tiles each. */
template <int TP, int NS>
static __global__ void __launch_bounds__(QM_WARPS * 32, 2)
    k_tp(const bf16 *__restrict__ x, int xs, int n_tok, const uint32_t *__restrict__ q,
         const uint16_t *__restrict__ sc, const uint16_t *__restrict__ bi, float *y, int ys, int in,
         int out, int wsplit)
{
    extern __shared__ __align__(16) unsigned char tp_ring[];
    __shared__ float red[QM_WARPS][32][4];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int ks = warp % wsplit;
    int tb = (blockIdx.x * (QM_WARPS / wsplit) + warp / wsplit) * TP;
    int words_row = in / 32 * 4, groups_row = in / 64, n_steps = in / TC::SK;
    int qoff[TP][TC::CH];
    const uint16_t *sbr[TP];
#pragma unroll
    for (int p = 0; p < TP; p++) {
        int row0 = (tb + p) * 16;
#pragma unroll
        for (int i = 0; i < TC::CH; i++) {
            int row = row0 + (lane + 32 * i) / (TC::RB / 16);
            qoff[p][i] = (row < out ? row : out - 1) * words_row;
        }
        int srow = min(row0 + (lane & 15), out - 1);
        sbr[p] = (lane < 16 ? sc : bi) + (size_t)srow * groups_row;
    }
    bool has_x = g < n_tok;
    const bf16 *xl = x + (size_t)(has_x ? g : 0) * xs + t * 16;
    float acc[TP][4];
#pragma unroll
    for (int p = 0; p < TP; p++) acc[p][0] = acc[p][1] = acc[p][2] = acc[p][3] = 0.0f;
    int n_mine = tb * 16 < out && ks < n_steps ? (n_steps - 1 - ks) / wsplit + 1 : 0;
    unsigned char *ring = tp_ring + warp * (NS * TP * TC::STAGE);
#pragma unroll
    for (int i = 0; i < NS - 1; i++) {
        if (i < n_mine)
#pragma unroll
            for (int p = 0; p < TP; p++)
                stage_issue<4, 64>(ring + (i * TP + p) * TC::STAGE, q, qoff[p], sbr[p], lane,
                                   ks + i * wsplit);
        cp_commit();
    }
    tk_pdl_wait();
    tk_pdl_launch();
    int slot_c = 0, slot_i = NS - 1;
    for (int n = 0; n < n_mine; n++) {
        if (n + NS - 1 < n_mine)
#pragma unroll
            for (int p = 0; p < TP; p++)
                stage_issue<4, 64>(ring + (slot_i * TP + p) * TC::STAGE, q, qoff[p], sbr[p], lane,
                                   ks + (n + NS - 1) * wsplit);
        cp_commit();
        cp_wait<NS - 1>();
        __syncwarp();
        stage_compute<4, 64, TK_BF16, false, TP>(ring + slot_c * TP * TC::STAGE, xl, has_x,
                                                 ks + n * wsplit, g, t, acc);
        __syncwarp();
        slot_c = slot_c + 1 == NS ? 0 : slot_c + 1;
        slot_i = slot_i + 1 == NS ? 0 : slot_i + 1;
    }
    cp_wait<0>();
#pragma unroll
    for (int p = 0; p < TP; p++) {
        float a[4] = {acc[p][0], acc[p][1], acc[p][2], acc[p][3]};
        if (wsplit > 1) {
            __syncthreads();
#pragma unroll
            for (int i = 0; i < 4; i++) red[warp][lane][i] = a[i];
            __syncthreads();
            if (ks == 0)
                for (int w = 1; w < wsplit; w++)
#pragma unroll
                    for (int i = 0; i < 4; i++) a[i] += red[warp + w][lane][i];
        }
        int row0 = (tb + p) * 16;
        if (ks == 0 && row0 < out)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int row = row0 + g + (i >> 1) * 8, tok = 2 * t + (i & 1);
                if (row < out && tok < n_tok) y[(size_t)tok * ys + row] = a[i];
            }
    }
}

/* ---------------------------------------------------------------- F16 nibbles */

static __device__ __forceinline__ void mma_f16(float *d, uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__constant__ uint32_t f16_magic = 0x64006400u; /* F16 1024 in both halves, opaque to ptxas */

/* (x & m) | 1024 in one LOP3, m = 0x000F000F (q) or 0x00F000F0 (16 q). */
template <uint32_t M> static __device__ __forceinline__ uint32_t f16_pair(uint32_t x)
{
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(x), "n"(M), "r"(f16_magic));
    return d;
}

/* One step of TP tiles with F16 fragments: per packed word 1 SHF + 4 LOP3
 * (pairs (q0, q4), (16 q1, 16 q5), (q2, q6), (16 q3, 16 q7), each + 1024),
 * B from the block's shared x, pre-permuted and pre-scaled (x / 16 in the
 * slots of the 16 q pairs), one uint4 per word; the group's sums
 * P = sum over slots of B and X = sum of x come from shared memory (once
 * per block): sum x q = C - 1024 P. */
template <int TP>
static __device__ __forceinline__ void f16_compute(const unsigned char *slot, const uint4 *xs4,
                                                   const float2 *px, bool has_x, int step, int g,
                                                   int t, float (*acc)[4])
{
    uint32_t sv[TP][2][2], bv[TP][2][2];
#pragma unroll
    for (int p = 0; p < TP; p++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            lds<2>(slot + p * TC::STAGE + 16 * TC::RS + (g + 8 * r) * TC::SB, sv[p][r]);
            lds<2>(slot + p * TC::STAGE + 16 * TC::RS + (16 + g + 8 * r) * TC::SB, bv[p][r]);
        }
#pragma unroll
    for (int G = 0; G < TC::SG; G++) {
        uint32_t wa[TP][TC::PW], wb[TP][TC::PW];
#pragma unroll
        for (int p = 0; p < TP; p++) {
            lds<TC::PW>(slot + p * TC::STAGE + g * TC::RS + G * 16 * TC::PW + t * 4 * TC::PW, wa[p]);
            lds<TC::PW>(slot + p * TC::STAGE + (g + 8) * TC::RS + G * 16 * TC::PW + t * 4 * TC::PW,
                        wb[p]);
        }
        float cg[TP][4];
#pragma unroll
        for (int p = 0; p < TP; p++) cg[p][0] = cg[p][1] = cg[p][2] = cg[p][3] = 0.0f;
        int gi = step * TC::SG + G; /* the group's index in the row */
#pragma unroll
        for (int j = 0; j < TC::PW; j++) {
            uint4 u = has_x ? xs4[gi * 8 + t * 2 + j] : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int p = 0; p < TP; p++) {
                uint32_t a8 = wa[p][j] >> 8, b8 = wb[p][j] >> 8;
                mma_f16(cg[p], f16_pair<0x000F000Fu>(wa[p][j]), f16_pair<0x000F000Fu>(wb[p][j]),
                        f16_pair<0x00F000F0u>(wa[p][j]), f16_pair<0x00F000F0u>(wb[p][j]), u.x, u.y);
                mma_f16(cg[p], f16_pair<0x000F000Fu>(a8), f16_pair<0x000F000Fu>(b8),
                        f16_pair<0x00F000F0u>(a8), f16_pair<0x00F000F0u>(b8), u.z, u.w);
            }
        }
        /* (P, X) of token 0 for the sums of token 2 t (acc[p][0] / [2]): the
         * lanes t == 0 of every row g, not the B operand's column g == 0 */
        float2 v = t == 0 ? px[gi] : make_float2(0.0f, 0.0f);
#pragma unroll
        for (int p = 0; p < TP; p++) {
            float s0 = tk_half_of<TK_BF16>(sv[p][0][G / 2], G & 1);
            float s1 = tk_half_of<TK_BF16>(sv[p][1][G / 2], G & 1);
            float b0 = tk_half_of<TK_BF16>(bv[p][0][G / 2], G & 1);
            float b1 = tk_half_of<TK_BF16>(bv[p][1][G / 2], G & 1);
            acc[p][0] = fmaf(s0, fmaf(-1024.0f, v.x, cg[p][0]), fmaf(b0, v.y, acc[p][0]));
            acc[p][2] = fmaf(s1, fmaf(-1024.0f, v.x, cg[p][2]), fmaf(b1, v.y, acc[p][2]));
        }
    }
}

/* k_tp with F16 fragments (one token: the lab's question is the speed). */
template <int TP, int NS>
static __global__ void __launch_bounds__(QM_WARPS * 32, 2)
    k_f16(const bf16 *__restrict__ x, const uint32_t *__restrict__ q, const uint16_t *__restrict__ sc,
          const uint16_t *__restrict__ bi, float *y, int in, int out, int wsplit)
{
    extern __shared__ __align__(16) unsigned char f16_ring[];
    __shared__ float red[QM_WARPS][32][4];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int ks = warp % wsplit;
    int tb = (blockIdx.x * (QM_WARPS / wsplit) + warp / wsplit) * TP;
    int words_row = in / 32 * 4, groups_row = in / 64, n_steps = in / TC::SK;
    int qoff[TP][TC::CH];
    const uint16_t *sbr[TP];
#pragma unroll
    for (int p = 0; p < TP; p++) {
        int row0 = (tb + p) * 16;
#pragma unroll
        for (int i = 0; i < TC::CH; i++) {
            int row = row0 + (lane + 32 * i) / (TC::RB / 16);
            qoff[p][i] = (row < out ? row : out - 1) * words_row;
        }
        int srow = min(row0 + (lane & 15), out - 1);
        sbr[p] = (lane < 16 ? sc : bi) + (size_t)srow * groups_row;
    }
    int n_mine = tb * 16 < out && ks < n_steps ? (n_steps - 1 - ks) / wsplit + 1 : 0;
    unsigned char *ring = f16_ring + warp * (NS * TP * TC::STAGE);
    uint4 *xs4 = (uint4 *)(f16_ring + QM_WARPS * NS * TP * TC::STAGE);
    float2 *px = (float2 *)(xs4 + in / 8);
#pragma unroll
    for (int i = 0; i < NS - 1; i++) {
        if (i < n_mine)
#pragma unroll
            for (int p = 0; p < TP; p++)
                stage_issue<4, 64>(ring + (i * TP + p) * TC::STAGE, q, qoff[p], sbr[p], lane,
                                   ks + i * wsplit);
        cp_commit();
    }
    /* x into shared memory: per 8 values (x0..x7) the F16 pairs (x0, x4),
     * (x1 / 16, x5 / 16), (x2, x6), (x3 / 16, x7 / 16); per 64-k group its
     * P = sum of those halves and X = sum of x (a warp per group) */
    for (int i = threadIdx.x; i < in / 8; i += blockDim.x) {
        uint4 v = __ldg((const uint4 *)x + i);
        const bf16 *e = (const bf16 *)&v;
        float f[8];
        for (int k = 0; k < 8; k++) f[k] = __bfloat162float(e[k]);
        __half2 h0 = __floats2half2_rn(f[0], f[4]), h1 = __floats2half2_rn(f[1] * 0.0625f, f[5] * 0.0625f);
        __half2 h2 = __floats2half2_rn(f[2], f[6]), h3 = __floats2half2_rn(f[3] * 0.0625f, f[7] * 0.0625f);
        xs4[i] = make_uint4(*(uint32_t *)&h0, *(uint32_t *)&h1, *(uint32_t *)&h2, *(uint32_t *)&h3);
    }
    __syncthreads();
    for (int G = warp; G < in / 64; G += QM_WARPS) {
        const __half *hx = (const __half *)(xs4 + G * 8);
        float a = __half2float(hx[lane]) + __half2float(hx[lane + 32]);
        float xv = __bfloat162float(x[G * 64 + lane]) + __bfloat162float(x[G * 64 + 32 + lane]);
        for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o), xv += __shfl_xor_sync(0xffffffffu, xv, o);
        if (lane == 0) px[G] = make_float2(a, xv);
    }
    __syncthreads();
    float acc[TP][4];
#pragma unroll
    for (int p = 0; p < TP; p++) acc[p][0] = acc[p][1] = acc[p][2] = acc[p][3] = 0.0f;
    int slot_c = 0, slot_i = NS - 1;
    for (int n = 0; n < n_mine; n++) {
        if (n + NS - 1 < n_mine)
#pragma unroll
            for (int p = 0; p < TP; p++)
                stage_issue<4, 64>(ring + (slot_i * TP + p) * TC::STAGE, q, qoff[p], sbr[p], lane,
                                   ks + (n + NS - 1) * wsplit);
        cp_commit();
        cp_wait<NS - 1>();
        __syncwarp();
        f16_compute<TP>(ring + slot_c * TP * TC::STAGE, xs4, px, g == 0, ks + n * wsplit, g, t, acc);
        __syncwarp();
        slot_c = slot_c + 1 == NS ? 0 : slot_c + 1;
        slot_i = slot_i + 1 == NS ? 0 : slot_i + 1;
    }
    cp_wait<0>();
#pragma unroll
    for (int p = 0; p < TP; p++) {
        float a[4] = {acc[p][0], acc[p][1], acc[p][2], acc[p][3]};
        if (wsplit > 1) {
            __syncthreads();
#pragma unroll
            for (int i = 0; i < 4; i++) red[warp][lane][i] = a[i];
            __syncthreads();
            if (ks == 0)
                for (int w = 1; w < wsplit; w++)
#pragma unroll
                    for (int i = 0; i < 4; i++) a[i] += red[warp + w][lane][i];
        }
        int row0 = (tb + p) * 16;
        if (ks == 0 && t == 0 && row0 < out) {
            if (row0 + g < out) y[row0 + g] = a[0];
            if (row0 + g + 8 < out) y[row0 + g + 8] = a[2];
        }
    }
}

template <int TP, int NS>
static void f16_launch(const tk_qmat &m, const bf16 *x, int n_tok, float *y, int in, int out,
                       int wsplit)
{
    (void)n_tok; /* one token */
    size_t smem = (size_t)QM_WARPS * NS * TP * TC::STAGE + (size_t)in * 2 + (size_t)in / 64 * 8;
    static bool attr;
    if (!attr) {
        CK(cudaFuncSetAttribute(k_f16<TP, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                QM_WARPS * NS * TP * TC::STAGE + 14336 * 2 + 14336 / 64 * 8));
        attr = true;
    }
    unsigned blocks = (unsigned)tk_cdiv(tk_cdiv(tk_cdiv(out, 16), TP), QM_WARPS / wsplit);
    k_f16<TP, NS><<<blocks, QM_WARPS * 32, smem>>>(x, (const uint32_t *)m.q, (const uint16_t *)m.scales,
                                                   (const uint16_t *)m.biases, y, in, out, wsplit);
}

struct tcfg {
    const char *name;
    int tp, ns;
    void (*launch)(const tk_qmat &, const bf16 *, int, float *, int, int, int);
};

template <int TP, int NS>
static void tp_launch(const tk_qmat &m, const bf16 *x, int n_tok, float *y, int in, int out,
                      int wsplit)
{
    size_t smem = (size_t)QM_WARPS * NS * TP * TC::STAGE;
    static bool attr;
    if (!attr) {
        CK(cudaFuncSetAttribute(k_tp<TP, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr = true;
    }
    unsigned blocks = (unsigned)tk_cdiv(tk_cdiv(tk_cdiv(out, 16), TP), QM_WARPS / wsplit);
    k_tp<TP, NS><<<blocks, QM_WARPS * 32, smem>>>(x, in, n_tok, (const uint32_t *)m.q,
                                                  (const uint16_t *)m.scales,
                                                  (const uint16_t *)m.biases, y, out, in, out,
                                                  wsplit);
}

/* run 1 (2026-11-30): tp2 ns2 best (gate_up -8.6%, lm_head -12%), taken
 * into the library; tp2 ns3 / ns4 and tp4 slower. Run 2: F16 fragments. */
static const tcfg CFGS[] = {
    {"tp1 ns4 (v3)", 1, 4, tp_launch<1, 4>}, {"tp2 ns2", 2, 2, tp_launch<2, 2>},
    {"f16 tp1 ns4", 1, 4, f16_launch<1, 4>}, {"f16 tp2 ns2", 2, 2, f16_launch<2, 2>},
};

int main()
{
    double copy = copy_rate();
    printf("copy (read + write) %.0f GB/s\n", copy);
    struct { const char *name; int out, in, mult; } shapes[] = {
        {"qkv", 6144, 4096, 32}, {"o", 4096, 4096, 32}, {"gate_up", 28672, 4096, 32},
        {"down", 4096, 14336, 32}, {"lm_head", 128256, 4096, 1}};
    const int NCF = (int)(sizeof CFGS / sizeof CFGS[0]);
    bf16 *x;
    float *y, *yr;
    CK(cudaMalloc(&x, (size_t)8 * 14336 * 2));
    CK(cudaMalloc(&y, (size_t)8 * 128256 * 4));
    CK(cudaMalloc(&yr, (size_t)8 * 128256 * 4));
    fill(x, (size_t)8 * 14336 * 2, 7, 0x807F807Fu, 0x3F003F00u);
    int bad = 0;
    double sum_v3 = 0, sum_best = 0;
    std::vector<double> tot(NCF, 0);
    printf("%-8s %-14s %9s %7s %6s %5s\n", "shape", "kernel", "us", "GB/s", "%copy", "W");
    for (auto &sh : shapes) {
        size_t qb = (size_t)sh.out * sh.in / 2, sbb = (size_t)sh.out * (sh.in / 64) * 2;
        size_t bytes = qb + 2 * sbb;
        int nc = (int)std::max<size_t>(2, (400ull << 20) / bytes + 1);
        std::vector<tk_qmat> ms;
        for (int c = 0; c < nc; c++) {
            void *q, *s, *b;
            lab_q4_alloc(sh.out, sh.in, 11 + c, &q, &s, &b);
            ms.push_back({q, s, b, TK_BF16, 4, 64});
        }
        int W = tk_qgemv_mma_split(4, 64, sh.in, sh.out);
        for (int nt : {1, 8}) { /* bitwise against v3 (F16: T = 1, within 1e-5) */
            CK(tk_qgemv_mma(0, &ms[0], x, sh.in, NULL, 0, yr, TK_F32, sh.out, nt, sh.in, sh.out));
            std::vector<float> ref = get(yr, (size_t)nt * sh.out);
            for (const tcfg &c : CFGS) {
                bool f16 = strncmp(c.name, "f16", 3) == 0;
                if (f16 && nt > 1) continue;
                if (f16) {
                    CK(cudaMemset(y, 0xff, (size_t)sh.out * 4));
                    c.launch(ms[0], x, 1, y, sh.in, sh.out, W);
                    CK(cudaDeviceSynchronize());
                    std::vector<float> a = get(y, (size_t)sh.out);
                    double e = rel(a, ref);
                    printf("%s %s T=1: rel %.2e vs v3\n", sh.name, c.name, e);
                    if (!(e < 1e-5)) bad++;
                    continue;
                }
                CK(cudaMemset(y, 0xff, (size_t)nt * sh.out * 4));
                c.launch(ms[0], x, nt, y, sh.in, sh.out, W);
                CK(cudaDeviceSynchronize());
                std::vector<float> a = get(y, (size_t)nt * sh.out);
                if (memcmp(a.data(), ref.data(), a.size() * 4)) {
                    printf("%s %s T=%d: NOT bitwise v3 (rel %.2e)\n", sh.name, c.name, nt, rel(a, ref));
                    bad++;
                }
            }
        }
        double t3 = time_us(nc, [&](int c) {
            CK(tk_qgemv_mma(0, &ms[c], x, sh.in, NULL, 0, y, TK_F32, sh.out, 1, sh.in, sh.out));
        });
        printf("%-8s %-14s %9.2f %7.0f %5.1f%% %5d\n", sh.name, "v3 (library)", t3, bytes / t3 / 1e3,
               100.0 * bytes / t3 / 1e3 / copy, W);
        double best = t3;
        for (int i = 0; i < NCF; i++) {
            const tcfg &c = CFGS[i];
            double us = time_us(nc, [&](int k) { c.launch(ms[k], x, 1, y, sh.in, sh.out, W); });
            printf("%-8s %-14s %9.2f %7.0f %5.1f%%\n", sh.name, c.name, us, bytes / us / 1e3,
                   100.0 * bytes / us / 1e3 / copy);
            tot[i] += sh.mult * us;
            best = std::min(best, us);
        }
        sum_v3 += sh.mult * t3, sum_best += sh.mult * best;
        for (auto &m : ms) {
            CK(cudaFree((void *)m.q));
            CK(cudaFree((void *)m.scales));
            CK(cudaFree((void *)m.biases));
        }
    }
    printf("==== summary ====\n");
    for (int i = 0; i < NCF; i++) printf("token total %-14s %.3f ms\n", CFGS[i].name, tot[i] / 1e3);
    printf("one token's GEMVs: v3 %.3f ms, best per shape %.3f ms; bitwise: %s\n", sum_v3 / 1e3,
           sum_best / 1e3, bad ? "NO" : "yes");
    return bad != 0;
}
