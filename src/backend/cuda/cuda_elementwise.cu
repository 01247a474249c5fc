/*
 * cuda_elementwise.cu — the elementwise ops the non-llama blocks need
 * (backend.h): act_mul (a gated activation over two column windows: GeGLU,
 * Gemma 4's per-layer input gate; or the activation alone), scale (by a
 * constant and an optional learned scalar; also converts F32 <-> BF16),
 * softcap (logits) and layernorm (Cohere, Starcoder 2).
 * Float32 arithmetic in the order the CPU reference uses, so results differ
 * from the CPU's only by the inputs' rounding (tanhf / expf may differ in an
 * ulp). The glue (operand checks) is cuda_elementwise.c. Depends on
 * cuda_common.cuh.
 */
#include "backend/cuda/cuda_common.cuh"

static __device__ __forceinline__ float act_f(int act, float a)
{
    if (act == TK_GLU_SILU) return a / (1.0f + expf(-a));
    const float k = 0.7978845608028654f; /* sqrt(2 / pi): transformers' gelu_pytorch_tanh */
    return 0.5f * a * (1.0f + tanhf(k * (a + 0.044715f * a * a * a)));
}

/* out[t, i] = act(x[t, xc + i]) * y[t, yc + i]; x, y, out of run-time dtypes. */
static __global__ void k_act_mul(const void *x, int xdt, int64_t xw, int64_t xc, const void *y,
                                 int ydt, int64_t yw, int64_t yc, void *out, int odt,
                                 int64_t n_tok, int64_t n, int act)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_tok * n) return;
    int64_t t = id / n, i = id % n;
    float a = act_f(act, tk_ld(x, xdt, t * xw + xc + i));
    tk_st(out, odt, id, y ? a * tk_ld(y, ydt, t * yw + yc + i) : a);
}

/* out[i] = x[i] * c (* s[0]): the scalar folded as the CPU folds it. */
static __global__ void k_scale(const void *x, int xdt, float c, const void *s, int sdt, void *out,
                               int odt, int64_t n)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n) return;
    float k = c;
    if (s) {
        float sv = tk_ld(s, sdt, 0);
        k = c == 1.0f ? sv : c * sv;
    }
    tk_st(out, odt, id, tk_ld(x, xdt, id) * k);
}

/* One block per row: the mean, then the mean squared deviation (two block
 * sums, each thread's share summed with fma in index order), then
 * (x - mean) * rsqrt(var + eps) * w + b rounded to the output dtype. */
static __global__ void k_layernorm(const void *x, int xdt, void *out, int odt, int64_t dim,
                                   const void *w, int wdt, const void *b, int bdt, float eps)
{
    __shared__ float red[32];
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t row = blockIdx.x, base = row * dim;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += tk_ld(x, xdt, base + i);
    float mean = tk_block_sum(s, red) / (float)dim;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float d = tk_ld(x, xdt, base + i) - mean;
        ss = __fmaf_rn(d, d, ss);
    }
    float inv = rsqrtf(tk_block_sum(ss, red) / (float)dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = (tk_ld(x, xdt, base + i) - mean) * inv;
        if (w) v *= tk_ld(w, wdt, i);
        if (b) v += tk_ld(b, bdt, i);
        tk_st(out, odt, base + i, v);
    }
}

static __global__ void k_softcap(float *x, float cap, int64_t n)
{
    tk_pdl_wait();
    tk_pdl_launch();
    int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id < n) x[id] = tanhf(x[id] / cap) * cap;
}

extern "C" cudaError_t tk_act_mul(cudaStream_t st, const void *x, int xdt, int64_t xw, int64_t xc,
                                  const void *y, int ydt, int64_t yw, int64_t yc, void *out,
                                  int odt, int64_t n_tok, int64_t n, int act)
{
    if (n_tok * n <= 0) return cudaSuccess;
    return tk_launch(k_act_mul, (unsigned)tk_cdiv(n_tok * n, 256), 256, 0, st, x, xdt, xw, xc, y,
                     ydt, yw, yc, out, odt, n_tok, n, act);
}

extern "C" cudaError_t tk_scale(cudaStream_t st, const void *x, int xdt, float c, const void *s,
                                int sdt, void *out, int odt, int64_t n)
{
    if (n <= 0) return cudaSuccess;
    return tk_launch(k_scale, (unsigned)tk_cdiv(n, 256), 256, 0, st, x, xdt, c, s, sdt, out, odt,
                     n);
}

extern "C" cudaError_t tk_layernorm(cudaStream_t st, const void *x, int xdt, void *out, int odt,
                                    int64_t n_rows, int64_t dim, const void *w, int wdt,
                                    const void *b, int bdt, float eps)
{
    if (n_rows <= 0 || dim <= 0) return cudaSuccess;
    return tk_launch(k_layernorm, (unsigned)n_rows, 256, 0, st, x, xdt, out, odt, dim, w, wdt, b,
                     bdt, eps);
}

extern "C" cudaError_t tk_softcap(cudaStream_t st, float *x, float cap, int64_t n)
{
    if (n <= 0) return cudaSuccess;
    return tk_launch(k_softcap, (unsigned)tk_cdiv(n, 256), 256, 0, st, x, cap, n);
}
