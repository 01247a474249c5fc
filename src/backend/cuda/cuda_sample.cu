/*
 * cuda_sample.cu — sampling on the device, one 1,024-thread block per logits
 * row, with the semantics of the CPU sampler (sample/sample.c):
 * x = logits (NaN -> -inf) with the row's edits (repetition, frequency /
 * presence, logit_bias, in that order, into a scratch row), greedy = the
 * first argmax of x; else x /= T, top_k and top_p as shortest prefixes of
 * the kept tokens in (x descending, id ascending) order, min_p against the
 * max, then u = Philox4x32-10(seed; step, stream) and the first kept token,
 * walking ids upward, whose cumulative exp(x - m) exceeds u * z. Logprobs
 * come from the raw row: the token's, and the n_top best (descending, lower
 * id on ties). Top-k / nucleus thresholds come from a radix select over the
 * float bits (4 passes of 256 bins) and an id bisection for ties; no sort.
 * After a top_k of at most 1,024 the kept tokens are compacted (id order)
 * into shared memory and the rest reads only them.
 * Sums are in double like the CPU's, in another order: only draws within
 * rounding of a boundary could differ. ±0 share one key (the CPU compares
 * them equal). Depends on cuda_common.cuh; ts_params / ts_edit mirror
 * struct tern_sample_dev / tern_sample_edit of backend/backend.h.
 */
#include "backend/cuda/cuda_common.cuh"

struct ts_params {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    uint64_t seed;
    uint32_t stream;
    int32_t n_top;
    uint64_t step;
    int32_t edit0, n_edit, logprob, pad;
};
static_assert(sizeof(struct ts_params) == 56, "ts_params mirrors tern_sample_dev");

struct ts_edit {
    int32_t id;
    uint32_t flags; /* 1 repetition, 2 sub, 4 bias */
    float rep, sub, bias;
};
static_assert(sizeof(struct ts_edit) == 20, "ts_edit mirrors tern_sample_edit");

#define TS_MAX_TOP 20
/* histograms per block in the radix select (warp w adds to w % 8): fewer
 * threads contend for one bin's shared-memory atomic */
#define TS_SUBHIST 8
#define TS_THREADS 1024

static __device__ void ts_philox(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

static __device__ double ts_uniform(uint64_t seed, uint32_t stream, uint64_t step)
{
    uint32_t c[4] = {(uint32_t)step, (uint32_t)(step >> 32), stream, 0};
    ts_philox(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    uint64_t bits = ((uint64_t)c[0] << 32 | c[1]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0);
}

/* Block-wide sums and max (every thread gets the result). */
static __device__ double ts_sum(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += sh[i];
        sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

static __device__ float ts_max(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = -INFINITY;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) t = fmaxf(t, sh[i]);
        sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

static __device__ __forceinline__ uint32_t ts_key(float f)
{
    uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f); /* -0 == +0, as on the CPU */
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct ts_row {
    const float *lg;
    int64_t V;
    bool scale;
    uint32_t tkey;  /* kept: key > tkey, or key == tkey and id < tcut */
    int64_t tcut;
    double floor_; /* min_p: kept needs (double)x >= floor_ */
    double m;      /* max of x */
    float temp;
};

static __device__ __forceinline__ float ts_x(const ts_row &r, int64_t i)
{
    float l = r.lg[i];
    if (isnan(l)) return -INFINITY;
    return r.scale ? __fdiv_rn(l, r.temp) : l;
}

static __device__ __forceinline__ bool ts_kept(const ts_row &r, float x, int64_t i)
{
    if (x == -INFINITY) return false;
    uint32_t k = ts_key(x);
    if (!(k > r.tkey || (k == r.tkey && i < r.tcut))) return false;
    return (double)x >= r.floor_;
}

/* Narrows (tkey, tcut) to the shortest prefix of the kept tokens, in (x desc,
 * id asc) order, whose weight (1 or exp(x - m)) reaches target. */
static __device__ void ts_select(ts_row &r, bool mass, double target, double *hist, double *sh)
{
    __shared__ uint32_t prefix_s;
    __shared__ double above_s;
    uint32_t prefix = 0;
    if (threadIdx.x == 0) above_s = 0.0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < TS_SUBHIST * 256; b += blockDim.x) hist[b] = 0.0;
        __syncthreads();
        double *my = hist + 256 * ((threadIdx.x >> 5) % TS_SUBHIST);
        uint32_t hmask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
        for (int64_t i = threadIdx.x; i < r.V; i += blockDim.x) {
            float x = ts_x(r, i);
            if (!ts_kept(r, x, i)) continue;
            uint32_t k = ts_key(x);
            if ((k & hmask) != (prefix & hmask)) continue;
            atomicAdd(&my[(k >> shift) & 255u], mass ? exp((double)x - r.m) : 1.0);
        }
        __syncthreads();
        for (int b = threadIdx.x; b < 256; b += blockDim.x)
            for (int q = 1; q < TS_SUBHIST; q++) hist[b] += hist[256 * q + b];
        __syncthreads();
        if (threadIdx.x == 0) {
            double above = above_s;
            int pick = -1, low = -1;
            for (int b = 255; b >= 0; b--) {
                if (hist[b] == 0.0) continue;
                low = b;
                if (above + hist[b] >= target) {
                    pick = b;
                    break;
                }
                above += hist[b];
            }
            if (pick < 0) { /* never reached (rounding): keep everything */
                pick = low < 0 ? 0 : low;
                above -= low < 0 ? 0.0 : hist[low];
            }
            above_s = above;
            prefix_s = prefix | ((uint32_t)pick << shift);
        }
        __syncthreads();
        prefix = prefix_s;
    }
    /* ties at key == prefix: count and weight, then the id cut */
    double cnt = 0.0;
    float tx = 0.0f;
    for (int64_t i = threadIdx.x; i < r.V; i += blockDim.x) {
        float x = ts_x(r, i);
        if (ts_kept(r, x, i) && ts_key(x) == prefix) cnt += 1.0, tx = x;
    }
    __shared__ float tx_s;
    if (cnt > 0.0) tx_s = tx; /* any writer: all equal */
    cnt = ts_sum(cnt, sh);
    double w = mass ? exp((double)tx_s - r.m) : 1.0;
    double cum = above_s;
    int64_t j = 0; /* the ties kept, lower ids first */
    if (!mass) j = (int64_t)fmin(cnt, fmax(0.0, ceil(target - cum)));
    else
        while (j < (int64_t)cnt && cum < target) cum += w, j++;
    int64_t cut_lo = 0, cut_hi = r.V; /* smallest c with count(id < c) >= j */
    if (j < (int64_t)cnt) {
        while (cut_lo < cut_hi) {
            int64_t mid = (cut_lo + cut_hi) / 2;
            double c = 0.0;
            for (int64_t i = threadIdx.x; i < mid; i += blockDim.x) {
                float x = ts_x(r, i);
                c += ts_kept(r, x, i) && ts_key(x) == prefix;
            }
            if (ts_sum(c, sh) >= (double)j) cut_hi = mid;
            else cut_lo = mid + 1;
        }
    }
    __syncthreads();
    /* every tie kept: at the old key that is the old cut; at a higher key
     * (all its ties were kept) it is the whole row. (Keeping the old cut at
     * a new key was the bug behind the mismatches at vocab 1000 / 1025:
     * top_k cut inside one tie group, top_p then kept a higher one whole.) */
    int64_t cut = j < (int64_t)cnt ? cut_lo : prefix == r.tkey ? r.tcut : r.V;
    if (!(prefix == r.tkey && cut > r.tcut)) {
        r.tkey = prefix;
        r.tcut = cut;
    }
}

/* After a top_k of k <= blockDim.x: the k kept tokens, in id order, as the
 * row itself (cx = their x, cid = their ids); what follows (top_p, min_p,
 * the draw) then reads k values instead of the vocabulary. Index order is
 * id order, so ties and the draw walk as before. */
static __device__ void ts_compact(ts_row &r, float *cx, int32_t *cid)
{
    __shared__ int n_s;
    if (threadIdx.x == 0) n_s = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < r.V; i += blockDim.x) {
        float x = ts_x(r, i);
        if (!ts_kept(r, x, i)) continue;
        int slot = atomicAdd(&n_s, 1);
        if (slot >= (int)blockDim.x) continue; /* never: exactly k are kept */
        cx[slot] = x;
        cid[slot] = (int32_t)i;
    }
    __syncthreads();
    int n = n_s < (int)blockDim.x ? n_s : (int)blockDim.x, rank = 0, t = threadIdx.x;
    float x = 0.0f;
    int32_t id = 0;
    if (t < n) { /* rank by id: ids are distinct */
        x = cx[t];
        id = cid[t];
        for (int j = 0; j < n; j++) rank += cid[j] < id;
    }
    __syncthreads();
    if (t < n) cx[rank] = x, cid[rank] = id;
    __syncthreads();
    r.lg = cx;
    r.V = n;
    r.scale = false; /* cx holds x after temperature */
    r.tkey = 0;
    r.tcut = n;
}

/* Block-wide maximum of a 64-bit key (every thread gets it). */
static __device__ unsigned long long ts_max64(unsigned long long v, unsigned long long *sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long t = __shfl_xor_sync(0xffffffffu, v, o);
        v = t > v ? t : v;
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long t = 0;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) t = sh[i] > t ? sh[i] : t;
        sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

/* The processed row before temperature: raw (NaN -> -inf) with the edits
 * applied, written to xs; the CPU's order per token. */
static __device__ void ts_edit_row(const float *raw, float *xs, int64_t V, const ts_edit *ed,
                                   int n_edit)
{
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
        float l = raw[i];
        xs[i] = isnan(l) ? -INFINITY : l;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n_edit; e += blockDim.x) {
        ts_edit d = ed[e];
        if (d.id < 0 || d.id >= V) continue;
        float x = xs[d.id];
        if (d.flags & 1u) x = x > 0.0f ? __fdiv_rn(x, d.rep) : __fmul_rn(x, d.rep);
        if (d.flags & 2u) x = __fsub_rn(x, d.sub);
        if (d.flags & 4u) x = __fadd_rn(x, d.bias);
        xs[d.id] = x;
    }
    __syncthreads();
}

/* Greedy: the first id holding the maximum m. */
static __device__ int64_t ts_first_max(const ts_row &r, unsigned long long *sh64)
{
    unsigned long long best = 0;
    for (int64_t i = threadIdx.x; i < r.V; i += blockDim.x) {
        float x = ts_x(r, i);
        if ((double)x == r.m) {
            unsigned long long k = ~0ull - (unsigned long long)i;
            best = k > best ? k : best;
            break; /* later ids of this thread are larger */
        }
    }
    return (int64_t)(~0ull - ts_max64(best, sh64));
}

/* The draw: the first kept id (ascending) whose inclusive prefix sum of
 * exp(x - m) exceeds u * z; the last kept one when rounding leaves none. */
static __device__ int64_t ts_draw(const ts_row &r, const ts_params &p, double *sh)
{
    double z = 0.0;
    for (int64_t i = threadIdx.x; i < r.V; i += blockDim.x) {
        float x = ts_x(r, i);
        if (ts_kept(r, x, i)) z += exp((double)x - r.m);
    }
    z = ts_sum(z, sh);
    double target = ts_uniform(p.seed, p.stream, p.step) * z, carry = 0.0;
    __shared__ unsigned long long tok_s, last_s;
    if (threadIdx.x == 0) tok_s = ~0ull, last_s = 0;
    __syncthreads();
    for (int64_t base = 0; base < r.V; base += blockDim.x) {
        int64_t i = base + threadIdx.x;
        double w = 0.0;
        bool k = false;
        if (i < r.V) {
            float x = ts_x(r, i);
            k = ts_kept(r, x, i);
            if (k) w = exp((double)x - r.m);
        }
        /* inclusive scan in id order: warp scan, then warp totals */
        double s = w;
        int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
        for (int o = 1; o < 32; o <<= 1) {
            double t = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += t;
        }
        if (lane == 31) sh[wid] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            double a = 0.0;
            for (int q = 0; q < (int)(blockDim.x >> 5); q++) {
                double t = sh[q];
                sh[q] = a;
                a += t;
            }
            sh[32] = a;
        }
        __syncthreads();
        s += sh[wid] + carry;
        if (k && s > target) atomicMin(&tok_s, (unsigned long long)i);
        if (k) atomicMax(&last_s, (unsigned long long)i);
        carry += sh[32];
        __syncthreads();
        if (tok_s != ~0ull) break;
    }
    return (int64_t)(tok_s != ~0ull ? tok_s : last_s);
}

/* Raw logprobs: res[1] = the token's, top[] = the n_top best (descending
 * NaN-as--inf value, lower id on ties), ids then logprob bits. */
static __device__ void ts_logprobs(const float *raw, int64_t V, int64_t tok, const ts_params &p,
                                   int32_t *res, int32_t *top, double *sh, float *shf,
                                   unsigned long long *sh64)
{
    float lm = -INFINITY;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) lm = fmaxf(lm, raw[i]);
    lm = ts_max(lm, shf);
    double lz = 0.0;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
        if (!isnan(raw[i])) lz += exp((double)raw[i] - lm);
    lz = ts_sum(lz, sh);
    double lse = (double)lm + log(lz);
    if (threadIdx.x == 0) res[1] = __float_as_int((float)((double)raw[tok] - lse));
    unsigned long long prev = ~0ull;
    for (int t = 0; top && t < p.n_top && t < TS_MAX_TOP; t++) {
        unsigned long long best = 0;
        for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
            float l = raw[i];
            unsigned long long k = (unsigned long long)ts_key(isnan(l) ? -INFINITY : l) << 32 |
                                   (0xffffffffull - (unsigned long long)i);
            if (k < prev && k > best) best = k;
        }
        prev = ts_max64(best, sh64);
        if (threadIdx.x == 0) { /* none left (vocab < n_top): id 0, as the CPU */
            int64_t id = prev ? (int64_t)(0xffffffffull - (prev & 0xffffffffull)) : 0;
            top[t] = (int32_t)id;
            top[TS_MAX_TOP + t] = __float_as_int((float)((double)raw[id] - lse));
        }
    }
}

static __global__ void __launch_bounds__(1024) k_sample(const float *logits, int64_t V,
                                                         const struct ts_params *P,
                                                         const struct ts_edit *edits,
                                                         float *scratch, int32_t *res,
                                                         int32_t *top)
{
    __shared__ double sh[33];
    __shared__ float shf[33];
    __shared__ double hist[TS_SUBHIST * 256];
    __shared__ unsigned long long sh64[33];
    const struct ts_params p = P[blockIdx.x];
    const float *raw = logits + (int64_t)blockIdx.x * V;
    ts_row r;
    r.lg = raw;
    if (p.n_edit > 0) {
        float *xs = scratch + (int64_t)blockIdx.x * V;
        ts_edit_row(raw, xs, V, edits + p.edit0, p.n_edit);
        r.lg = xs;
    }
    r.V = V;
    r.temp = p.temperature;
    r.scale = p.temperature != 1.0f && p.temperature > 0.0f;
    r.tkey = 0;
    r.tcut = V; /* keep every finite x */
    r.floor_ = -INFINITY;
    float mx = -INFINITY;
    double nf = 0.0;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
        float x = ts_x(r, i);
        mx = fmaxf(mx, x);
        nf += x != -INFINITY;
    }
    r.m = ts_max(mx, shf);
    nf = ts_sum(nf, sh);
    int64_t tok;
    if (p.temperature == 0.0f) {
        tok = ts_first_max(r, sh64);
    } else {
        __shared__ float cx[TS_THREADS];
        __shared__ int32_t cid[TS_THREADS];
        bool compact = false;
        if (p.top_k > 0 && (double)p.top_k < nf) {
            ts_select(r, false, (double)p.top_k, hist, sh);
            compact = p.top_k <= TS_THREADS;
            if (compact) ts_compact(r, cx, cid);
        }
        if (p.top_p < 1.0f) {
            double z = 0.0;
            for (int64_t i = threadIdx.x; i < r.V; i += blockDim.x) {
                float x = ts_x(r, i);
                if (ts_kept(r, x, i)) z += exp((double)x - r.m);
            }
            z = ts_sum(z, sh);
            ts_select(r, true, (double)p.top_p * z, hist, sh);
        }
        if (p.min_p > 0.0f) r.floor_ = r.m + log((double)p.min_p);
        tok = ts_draw(r, p, sh);
        if (compact) tok = cid[tok];
    }
    int32_t *rr = res + 2 * (int64_t)blockIdx.x;
    if (threadIdx.x == 0) rr[0] = (int32_t)tok, rr[1] = 0;
    if (p.logprob || p.n_top > 0)
        ts_logprobs(raw, V, tok, p, rr, top ? top + 2 * TS_MAX_TOP * (int64_t)blockIdx.x : NULL,
                    sh, shf, sh64);
}

extern "C" cudaError_t tk_sample(cudaStream_t st, const float *logits, int64_t n_rows,
                                 int64_t vocab, const void *params, const void *edits,
                                 float *scratch, int32_t *res, int32_t *top)
{
    if (n_rows <= 0) return cudaSuccess;
    k_sample<<<(unsigned)n_rows, TS_THREADS, 0, st>>>(logits, vocab,
                                                      (const struct ts_params *)params,
                                                      (const struct ts_edit *)edits, scratch,
                                                      res, top);
    return cudaPeekAtLastError();
}
