/*
 * q6_lab.cu — kernel lab for the 4-bit decode GEMV v6 (issue 7): times the
 * library's v6 (src/backend/cuda/cuda_quant_v6.cu, included here so its
 * templates can be swept: windows in flight U, warps per block, K-split
 * target) against v3 (cuda_quant_mma.cu) and v4/v5 (cuda_quant_v4.cu) on the
 * Llama-3.1-8B shapes at 4-bit g64 (and g32/g128, T = 1, 2, 4, 8 for the
 * library config), against the device copy rate of the same run. Checks
 * v6 against v3 (rel diff), batch invariance (each token of T = 8 bitwise
 * the token alone) and the GLU variant bitwise against plain + silu_mul.
 *
 * Shared helpers: lab_common.cuh.
 * Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src \
 *          dev/kernels/q6_lab.cu -o q6_lab
 * Run:   ./q6_lab            (prints one table; medians of CUDA-event timings,
 *        20 launches per sample cycling through >= 300 MB of weight copies)
 */
#include "backend/cuda/cuda_quant_mma.cu"
#include "backend/cuda/cuda_quant_v4.cu"
#include "backend/cuda/cuda_quant_v6.cu"
#include "lab_common.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
#include <string>
#include <cstring>




static double g_copy;


struct shape {
    const char *name;
    int out, in;
};
static const shape SHAPES[] = {{"qkv", 6144, 4096},      {"o", 4096, 4096},
                               {"gate_up", 28672, 4096}, {"down", 4096, 14336},
                               {"lm_head", 128256, 4096}};

struct wset {
    int out, in, group, nc;
    size_t bytes; /* packed + scales + biases of one copy */
    std::vector<tk_qmat> m;
    bf16 *x;
    float *y;
    bf16 *yb;
};

static wset make(int out, int in, int group, int sdt)
{
    wset w;
    w.out = out, w.in = in, w.group = group;
    size_t qb = (size_t)out * in / 2, sb = (size_t)out * (in / group) * 2;
    w.bytes = qb + 2 * sb;
    w.nc = (int)std::max<size_t>(2, (300ull << 20) / w.bytes + 1);
    for (int c = 0; c < w.nc; c++) {
        void *q, *s, *b;
        CK(cudaMalloc(&q, qb));
        CK(cudaMalloc(&s, sb));
        CK(cudaMalloc(&b, sb));
        fill(q, qb, 11 + c, 0xffffffffu, 0);
        /* scales in [2^-7, 2^-6) (bf16 0x3C00..0x3C7F), biases +-[2^-4, 2^-3) */
        fill(s, sb, 101 + c, sdt == TK_BF16 ? 0x007F007Fu : 0x03FF03FFu,
             sdt == TK_BF16 ? 0x3C003C00u : 0x20002000u);
        fill(b, sb, 201 + c, sdt == TK_BF16 ? 0x807F807Fu : 0x83FF83FFu,
             sdt == TK_BF16 ? 0x3D803D80u : 0x2C002C00u);
        w.m.push_back({q, s, b, sdt, 4, group});
    }
    CK(cudaMalloc(&w.x, (size_t)8 * in * 2));
    fill(w.x, (size_t)8 * in * 2, 7, 0x807F807Fu, 0x3F003F00u); /* +-[0.5, 1) */
    CK(cudaMalloc(&w.y, (size_t)8 * out * 4));
    CK(cudaMalloc(&w.yb, (size_t)8 * out * 2));
    return w;
}

static void drop(wset &w)
{
    for (auto &m : w.m) {
        CK(cudaFree((void *)m.q));
        CK(cudaFree((void *)m.scales));
        CK(cudaFree((void *)m.biases));
    }
    CK(cudaFree(w.x));
    CK(cudaFree(w.y));
    CK(cudaFree(w.yb));
}

static void report(const char *shp, const char *what, int T, const wset &w, double us)
{
    double gbs = w.bytes / (us * 1e-6) / 1e9;
    printf("%-8s %-22s T%d %8.2f us %6.0f GB/s %5.1f%%  (floor %.2f us)\n", shp, what, T, us, gbs,
           100.0 * gbs / g_copy, w.bytes / (g_copy * 1e9) * 1e6);
}



/* v6 with a given U / warps / split target (bf16 scales, one launch of <= 8 tokens). */
template <int U, int W>
static cudaError_t v6_cfg(const tk_qmat &m, wset &w, int T, int target, void *y)
{
    return q6_run<U, W, false>(0, &m, w.x, w.in, NULL, 0, y, TK_F32, w.out, T, w.in, w.out,
                               q6_split_for(w.in, w.out, W, target));
}

static int g_bad;

/* k_silu_mul of cuda_ops.cu (bf16): out[t, i] = silu(gu[t, i]) * gu[t, ff + i]. */
static __global__ void k_silu_lab(const bf16 *gu, bf16 *out, int64_t n_tok, int64_t ff)
{
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_tok * ff) return;
    int64_t t = id / ff, i = id % ff;
    float g = __bfloat162float(gu[t * 2 * ff + i]), u = __bfloat162float(gu[t * 2 * ff + ff + i]);
    out[id] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
}

static cudaError_t tk_silu_mul_lab(bf16 *out, const bf16 *gu, int64_t T, int64_t ff)
{
    k_silu_lab<<<(unsigned)tk_cdiv(T * ff, 256), 256>>>(gu, out, T, ff);
    return cudaGetLastError();
}

/* Correctness of the library config on w: vs v3, batch invariance, GLU. */
static void check(wset &w, const char *shp)
{
    const tk_qmat &m = w.m[0];
    float *y3;
    CK(cudaMalloc(&y3, (size_t)8 * w.out * 4));
    double worst = 0;
    for (int T : {1, 2, 3, 4, 8}) {
        CK(tk_qgemv_mma(0, &m, w.x, w.in, NULL, 0, y3, TK_F32, w.out, T, w.in, w.out));
        CK(tk_qgemv6(0, &m, w.x, w.in, NULL, 0, w.y, TK_F32, w.out, T, w.in, w.out));
        CK(cudaDeviceSynchronize());
        worst = std::max(worst, rel(get(w.y, (size_t)T * w.out), get(y3, (size_t)T * w.out)));
    }
    std::vector<float> y8 = get(w.y, (size_t)8 * w.out);
    bool inv = true;
    for (int t = 0; t < 8; t++) {
        CK(tk_qgemv6(0, &m, w.x + (size_t)t * w.in, w.in, NULL, 0, w.y, TK_F32, w.out, 1, w.in, w.out));
        std::vector<float> y1 = get(w.y, w.out);
        if (memcmp(y1.data(), y8.data() + (size_t)t * w.out, (size_t)w.out * 4)) inv = false;
    }
    bool glu_ok = true;
    if (w.out % 2 == 0) {
        int ff = w.out / 2;
        for (int T : {1, 3, 8}) {
            CK(tk_qgemv6(0, &m, w.x, w.in, NULL, 0, w.yb, TK_BF16, w.out, T, w.in, w.out));
            bf16 *act;
            CK(cudaMalloc(&act, (size_t)T * ff * 2 * 2));
            CK(tk_silu_mul_lab(act, w.yb, T, ff));
            CK(tk_qgemv6_glu(0, &m, w.x, w.in, NULL, 0, act + (size_t)T * ff, ff, T, w.in, ff));
            std::vector<uint16_t> h((size_t)2 * T * ff);
            CK(cudaMemcpy(h.data(), act, h.size() * 2, cudaMemcpyDeviceToHost));
            if (memcmp(h.data(), h.data() + (size_t)T * ff, (size_t)T * ff * 2)) glu_ok = false;
            CK(cudaFree(act));
        }
    }
    printf("check %-8s g%-3d s%d: v6 vs v3 rel %.2e, batch-invariant %s, GLU bitwise %s\n", shp,
           w.group, m.sdt, worst, inv ? "yes" : "NO", glu_ok ? "yes" : "NO");
    if (worst > 1e-4 || !inv || !glu_ok) g_bad++;
    CK(cudaFree(y3));
}

#define CFG(U, W) {#U "/" #W, v6_cfg<U, W>}
typedef cudaError_t (*cfg_fn)(const tk_qmat &, wset &, int, int, void *);
struct cfg {
    const char *name;
    cfg_fn f;
};
static const cfg CFGS[] = {CFG(2, 4), CFG(4, 4), CFG(8, 4), CFG(2, 8), CFG(4, 8), CFG(8, 8)};

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    g_copy = copy_rate();
    printf("copy (read + write) %.0f GB/s\n", g_copy);
    /* correctness first: every group x scale dtype on two shapes */
    for (int sdt : {TK_BF16, TK_F16})
        for (int group : {32, 64, 128}) {
            wset w = make(1000, 1536, group, sdt);
            check(w, "1000x1536");
            drop(w);
        }
    {
        wset w = make(4096, 14336, 32, TK_BF16);
        check(w, "down");
        drop(w);
    }
    double sum_best[2] = {0, 0}, sum_v3 = 0, sum_lib = 0, sum_v3_8 = 0, sum_lib_8 = 0, sum_v4 = 0;
    for (const shape &s : SHAPES) {
        wset w = make(s.out, s.in, 64, TK_BF16);
        int tiles16 = (s.out + 15) / 16;
        (void)tiles16;
        double t3 = time_us(w.nc, [&](int c) {
            CK(tk_qgemv_mma(0, &w.m[c], w.x, w.in, NULL, 0, w.y, TK_F32, w.out, 1, w.in, w.out));
        });
        report(s.name, "v3 (default)", 1, w, t3);
        double t38 = time_us(w.nc, [&](int c) {
            CK(tk_qgemv_mma(0, &w.m[c], w.x, w.in, NULL, 0, w.y, TK_F32, w.out, 8, w.in, w.out));
        });
        report(s.name, "v3", 8, w, t38);
        double t4 = time_us(w.nc, [&](int c) {
            CK(tk_qgemv4(0, &w.m[c], w.x, w.in, NULL, 0, w.y, TK_F32, w.out, 1, w.in, w.out, 1));
        });
        report(s.name, "v4 half2", 1, w, t4);
        double best = 1e30;
        const char *bn = "";
        int bt = 0;
        for (const cfg &c : CFGS)
            for (int target : {1024, 2048, 4096, 8192}) {
                double us = time_us(w.nc, [&](int k) { CK(c.f(w.m[k], w, 1, target, w.y)); });
                char nm[64];
                snprintf(nm, sizeof nm, "v6 U/W %s t%d", c.name, target);
                report(s.name, nm, 1, w, us);
                if (us < best) best = us, bn = c.name, bt = target;
            }
        printf("%-8s best v6 %s t%d %.2f us\n", s.name, bn, bt, best);
        double tl[4];
        int Ts[4] = {1, 2, 4, 8};
        for (int i = 0; i < 4; i++) {
            tl[i] = time_us(w.nc, [&](int c) {
                CK(tk_qgemv6(0, &w.m[c], w.x, w.in, NULL, 0, w.y, TK_F32, w.out, Ts[i], w.in, w.out));
            });
            report(s.name, "v6 library", Ts[i], w, tl[i]);
        }
        if (s.out % 2 == 0) {
            double tg = time_us(w.nc, [&](int c) {
                CK(tk_qgemv6_glu(0, &w.m[c], w.x, w.in, NULL, 0, w.yb, w.out / 2, 1, w.in, w.out / 2));
            });
            report(s.name, "v6 GLU", 1, w, tg);
        }
        int mult = strcmp(s.name, "lm_head") == 0 ? 1 : strcmp(s.name, "down") == 0 ? 32 : 32;
        if (strcmp(s.name, "o") == 0) mult = 32;
        sum_v3 += mult * t3, sum_lib += mult * tl[0], sum_best[0] += mult * best;
        sum_v3_8 += mult * t38, sum_lib_8 += mult * tl[3], sum_v4 += mult * t4;
        drop(w);
    }
    for (int group : {32, 128}) {
        wset w = make(28672, 4096, group, TK_BF16);
        char nm[32];
        snprintf(nm, sizeof nm, "g%d", group);
        double t3 = time_us(w.nc, [&](int c) {
            CK(tk_qgemv_mma(0, &w.m[c], w.x, w.in, NULL, 0, w.y, TK_F32, w.out, 1, w.in, w.out));
        });
        report("gate_up", (std::string("v3 ") + nm).c_str(), 1, w, t3);
        for (int T : {1, 8}) {
            double us = time_us(w.nc, [&](int c) {
                CK(tk_qgemv6(0, &w.m[c], w.x, w.in, NULL, 0, w.y, TK_F32, w.out, T, w.in, w.out));
            });
            report("gate_up", (std::string("v6 ") + nm).c_str(), T, w, us);
        }
        drop(w);
    }
    printf("==== summary (one token's GEMVs: 32 x (qkv + o + gate_up + down) + lm_head, g64) ====\n");
    printf("copy %.0f GB/s; v3 T1 %.3f ms, v4 T1 %.3f ms, v6 library T1 %.3f ms, v6 best-per-shape %.3f ms; "
           "T8 pass: v3 %.3f ms, v6 %.3f ms; correctness failures: %d\n",
           g_copy, sum_v3 / 1e3, sum_v4 / 1e3, sum_lib / 1e3, sum_best[0] / 1e3, sum_v3_8 / 1e3,
           sum_lib_8 / 1e3, g_bad);
    return g_bad != 0;
}
