/*
 * cuda_moe.cu — the mixture-of-experts ops on the device (backend.h:
 * moe_route, moe_experts), written to be right before fast.
 *
 * k_moe_route: one block per token. The softmax over the E experts goes
 * through shared memory (E floats); the top k are k block-wide arg-max
 * passes (a larger probability wins, an equal one goes to the lower expert
 * index, as on the CPU); thread 0 renormalises and scales.
 *
 * k_moe_gate_up: one warp per (pair, intermediate row), a pair being token
 * t's j-th expert e: the warp dots x[t] with gate row 2 I e + i and up row
 * 2 I e + I + i (lanes stride the hidden dimension, a fixed butterfly sums
 * them) and writes act(g) * u to act[pair, i].
 * k_moe_down: one warp per (token, hidden row o): the token's experts are
 * visited in increasing expert index (each lane holds one of the k ids and
 * its rank), each contributing weight * (act[pair] . down row H e + o) to a
 * float32 sum that starts at 0, then the gated shared expert is added: the
 * CPU's order of additions. Every (token, row) is one warp's work over
 * that token's data only, so results are batch-invariant and the same run
 * to run.
 *
 * Weights are read row by row (dense F32 / F16 / BF16, or MLX affine with
 * values taken from the bit stream one by one), each expert's rows once
 * per token routed to it: the grouped version (tokens sorted by expert,
 * one tensor-core GEMM per projection over row slices of the stacks, as
 * io->order is shaped for) is what makes prefill fast.
 * Depends on cuda_common.cuh.
 */
#include "backend/cuda/cuda_common.cuh"

#define MOE_WARPS 4

/* Value i of a packed MLX row (bits may straddle words). */
static __device__ __forceinline__ uint32_t moe_qget(const uint32_t *q, int64_t i, int bits)
{
    uint64_t bit = (uint64_t)i * (uint64_t)bits;
    uint64_t word = bit >> 5, shift = bit & 31;
    uint64_t v = q[word] >> shift;
    if (shift + (uint64_t)bits > 32) v |= (uint64_t)q[word + 1] << (32 - shift);
    return (uint32_t)(v & ((1u << bits) - 1u));
}

/* Row `row` of a stack (in wide) dotted with x[x0, x0 + in), summed over the
 * warp: every lane gets the sum. */
static __device__ float moe_dot(const struct tk_moe_w &m, int64_t row, int64_t in, const void *x,
                                int xdt, int64_t x0, int lane)
{
    float acc = 0.0f;
    if (m.bits) {
        const uint32_t *q = (const uint32_t *)m.w + row * (in * m.bits / 32);
        int64_t ng = in / m.group;
        for (int64_t i = lane; i < in; i += 32) {
            int64_t gi = row * ng + i / m.group;
            float w = tk_ld(m.scales, m.sdt, gi) * (float)moe_qget(q, i, m.bits) +
                      tk_ld(m.biases, m.sdt, gi);
            acc = fmaf(w, tk_ld(x, xdt, x0 + i), acc);
        }
    } else {
        for (int64_t i = lane; i < in; i += 32)
            acc = fmaf(tk_ld(m.w, m.wdt, row * in + i), tk_ld(x, xdt, x0 + i), acc);
    }
    return tk_warp_sum(acc);
}

static __device__ __forceinline__ float moe_act(int act, float a)
{
    if (act == TK_GLU_SILU) return a / (1.0f + expf(-a));
    const float k = 0.7978845608028654f;
    return 0.5f * a * (1.0f + tanhf(k * (a + 0.044715f * a * a * a)));
}

/* The block's best (value, index): larger value, then lower index. */
static __device__ void moe_argmax(float *v, int *i, float *rv, int *ri)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, *v, o);
        int oi = __shfl_xor_sync(0xffffffffu, *i, o);
        if (ov > *v || (ov == *v && oi < *i)) *v = ov, *i = oi;
    }
    __syncthreads();
    if (lane == 0) rv[warp] = *v, ri[warp] = *i;
    __syncthreads();
    *v = rv[0];
    *i = ri[0];
    for (int w = 1; w < nw; w++)
        if (rv[w] > *v || (rv[w] == *v && ri[w] < *i)) *v = rv[w], *i = ri[w];
}

static __global__ void k_moe_route(const float *logits, int E, int k, int renorm,
                                   const void *scale, int sdt, int32_t *ids, float *weights)
{
    extern __shared__ float p[];
    __shared__ float red[32], wsel[32];
    __shared__ int redi[32];
    int64_t t = blockIdx.x;
    const float *l = logits + t * E;
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, l[e]);
    int dummy = 0;
    moe_argmax(&mx, &dummy, red, redi);
    float s = 0.0f;
    for (int e = threadIdx.x; e < E; e += blockDim.x) s += p[e] = expf(l[e] - mx);
    s = tk_block_sum(s, red);
    for (int e = threadIdx.x; e < E; e += blockDim.x) p[e] /= s;
    __syncthreads();
    for (int j = 0; j < k; j++) {
        float bv = -2.0f;
        int bi = E;
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (p[e] > bv || (p[e] == bv && e < bi)) bv = p[e], bi = e;
        moe_argmax(&bv, &bi, red, redi);
        if (threadIdx.x == 0) {
            ids[t * k + j] = bi;
            wsel[j] = bv;
            p[bi] = -1.0f; /* taken (probabilities are >= 0) */
        }
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    float ksum = 0.0f;
    for (int j = 0; j < k; j++) ksum += wsel[j];
    for (int j = 0; j < k; j++) {
        float w = renorm ? wsel[j] / ksum : wsel[j];
        if (scale) w *= tk_ld(scale, sdt, ids[t * k + j]);
        weights[t * k + j] = w;
    }
}

static __global__ void k_moe_gate_up(const void *x, int xdt, const int32_t *ids, int64_t n_pairs,
                                     int k, struct tk_moe_w gu, int E, int64_t H, int64_t I,
                                     int act, void *out, int odt)
{
    int lane = threadIdx.x & 31;
    int64_t i = (int64_t)blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (i >= I) return;
    for (int64_t p = blockIdx.y; p < n_pairs; p += gridDim.y) {
        int e = ids[p];
        float v = 0.0f;
        if (e >= 0 && e < E) { /* an id out of range gives zeros */
            int64_t x0 = (p / k) * H;
            float g = moe_dot(gu, 2 * I * e + i, H, x, xdt, x0, lane);
            float u = moe_dot(gu, 2 * I * e + I + i, H, x, xdt, x0, lane);
            v = moe_act(act, g) * u;
        }
        if (lane == 0) tk_st(out, odt, p * I + i, v);
    }
}

static __global__ void k_moe_down(const void *act, int adt, const int32_t *ids,
                                  const float *weights, int64_t T, int k, struct tk_moe_w dn,
                                  int E, int64_t H, int64_t I, const void *shared, int shdt,
                                  const float *shared_gate, void *out, int odt)
{
    int lane = threadIdx.x & 31;
    int64_t o = (int64_t)blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (o >= H) return;
    for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
        int e = lane < k ? ids[t * k + lane] : 0x7fffffff;
        float w = lane < k ? weights[t * k + lane] : 0.0f;
        int rank = 0; /* how many of the token's ids are smaller (they are distinct) */
        for (int j = 0; j < k; j++) rank += __shfl_sync(0xffffffffu, e, j) < e;
        float acc = 0.0f;
        for (int r = 0; r < k; r++) {
            unsigned who = __ballot_sync(0xffffffffu, lane < k && rank == r);
            if (!who) continue; /* repeated ids (moe_route never gives them) */
            int src = __ffs(who) - 1;
            int ej = __shfl_sync(0xffffffffu, e, src);
            float wj = __shfl_sync(0xffffffffu, w, src);
            if (ej < 0 || ej >= E) continue;
            float y = moe_dot(dn, (int64_t)H * ej + o, I, act, adt, (t * k + src) * I, lane);
            acc += wj * y;
        }
        if (shared) {
            float s = shared_gate ? 1.0f / (1.0f + expf(-shared_gate[t])) : 1.0f;
            acc += s * tk_ld(shared, shdt, t * H + o);
        }
        if (lane == 0) tk_st(out, odt, t * H + o, acc);
    }
}

extern "C" cudaError_t tk_moe_route(cudaStream_t st, const float *logits, int64_t T, int E, int k,
                                    int renorm, const void *scale, int sdt, int32_t *ids,
                                    float *weights)
{
    if (T <= 0) return cudaSuccess;
    k_moe_route<<<(unsigned)T, 128, (size_t)E * sizeof(float), st>>>(logits, E, k, renorm, scale,
                                                                      sdt, ids, weights);
    return cudaPeekAtLastError();
}

extern "C" cudaError_t tk_moe_experts(cudaStream_t st, const struct tk_moe_args *a)
{
    if (a->T <= 0) return cudaSuccess;
    int64_t pairs = a->T * a->k;
    unsigned gy = (unsigned)(pairs < 65535 ? pairs : 65535);
    dim3 g1((unsigned)tk_cdiv(a->I, MOE_WARPS), gy);
    k_moe_gate_up<<<g1, MOE_WARPS * 32, 0, st>>>(a->x, a->xdt, a->ids, pairs, a->k, a->gate_up,
                                                 a->E, a->H, a->I, a->act, a->act_buf, a->adt);
    cudaError_t e = cudaPeekAtLastError();
    if (e != cudaSuccess) return e;
    dim3 g2((unsigned)tk_cdiv(a->H, MOE_WARPS), (unsigned)(a->T < 65535 ? a->T : 65535));
    k_moe_down<<<g2, MOE_WARPS * 32, 0, st>>>(a->act_buf, a->adt, a->ids, a->weights, a->T, a->k,
                                              a->down, a->E, a->H, a->I, a->shared, a->shdt,
                                              a->shared_gate, a->out, a->odt);
    return cudaPeekAtLastError();
}
