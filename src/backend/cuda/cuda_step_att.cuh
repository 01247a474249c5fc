/*
 * cuda_step_att.cuh — the attention item of the decode step kernel
 * (cuda_step.cu): one (kv head, split) on a whole block, RoPE of q and the
 * new k, the new K / V rows stored at their cache slot, passes of ST_SPL
 * positions (q . k and p . v as bf16 MMAs, the online softmax between),
 * the splits' partial sums out as LL lines and merged by the last split;
 * and the cached rows' L2 prefetch at the qkv op. CUDA C++ only, included
 * by cuda_step.cu alone, where its shared state (st_att, st_consts), the
 * LL lines (st_ll, st_put4), stamps and index helpers (st_div) are
 * defined; a section of that file, split out for its length.
 */
#ifndef TERN_CUDA_STEP_ATT_CUH
#define TERN_CUDA_STEP_ATT_CUH

/* Head h's value i (of hd) after RoPE (P's rotation), from raw bf16 x in
 * shared memory: halves layout (pairs i, i + rot / 2), dims >= rot as they
 * are; rounded to bf16 like the op-by-op path's qk_rope_store. */
static __device__ __forceinline__ float st_rope(const bf16 *x, int i, int rot, const st_consts *P)
{
    int half = rot / 2;
    if (i >= rot) return __bfloat162float(x[i]);
    int j = i < half ? i : i - half;
    float c = P->cos[j], s = P->sin[j];
    float x1 = __bfloat162float(x[j]), x2 = __bfloat162float(x[j + half]);
    tk_rope_pair<bf16>(x1, x2, c, s);
    return i < half ? x1 : x2;
}

/* The KV cache row of position p: block table entry, then the row in it. */
static __device__ __forceinline__ int64_t st_row(const tk_step_args &a, int p)
{
    return (int64_t)a.btab[p / a.bs] * a.bs + p % a.bs;
}

/* The cached K / V rows of positions [q0, q0 + n) of kv head h into the
 * block's shared rows (16-byte cp.async; the new token's row is skipped:
 * it comes from this step's projection); rows: their cache rows (the first
 * pass's, P->rows), or NULL: looked up. */
static __device__ void st_kv_issue(const tk_step_args &a, const st_consts *P, const bf16 *kc,
                                   const bf16 *vc, int h, int q0, int n, int pos, st_att *S,
                                   const int *rows)
{
    const int hd = a.hd, nt = ST_NW * 32, nh = n * (hd / 8);
    /* at most four copies a thread: unrolled, no loop (cold code) */
    static_assert(2 * ST_SPL * (TK_STEP_MAX_HD / 8) <= 4 * ST_NW * 32, "four copies a thread");
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int i = threadIdx.x + j * nt;
        int kv = i >= nh, r = i - kv * nh, p = st_div(r, P->m_hd8), c = r - p * (hd / 8);
        if (i >= 2 * nh || q0 + p == pos) continue;
        int64_t row = rows ? rows[p] : st_row(a, q0 + p);
        const bf16 *src = (kv ? vc : kc) + (row * a.nkv + h) * hd + 8 * c;
        st_cp16(kv ? &S->u.kv.v[p][8 * c] : &S->u.kv.k[p][8 * c], src);
    }
}

/* The cached K / V rows of the block's attention items into L2, issued
 * at the qkv op's start: they come from DRAM behind the rings' copies
 * (~5 us of queue under the weight stream), and the attention waits on
 * them otherwise. */
static __device__ void st_kv_prefetch(const tk_step_args &a, const st_consts *P, int layer)
{
    const int n_sp = P->n_sp, spl = P->spl, ctx = P->ctx;
    const int *rows = P->rows;
    const int hd = a.hd, nt = ST_NW * 32;
    const int nl = (hd * 2 + 127) / 128; /* 128-byte lines per row: 1 or 2 (hd <= 128) */
    const char *kc = (const char *)a.kc[layer], *vc = (const char *)a.vc[layer];
    for (int it = blockIdx.x; it < a.nkv * n_sp; it += gridDim.x) {
        int h = it == blockIdx.x ? P->att_h : it / n_sp;
        int p0 = (it == blockIdx.x ? P->att_sp : it % n_sp) * spl, n = min(ctx, p0 + spl) - p0;
        for (int i = threadIdx.x; i < 2 * n * nl; i += nt) {
            int kv = i >= n * nl, r = i - kv * n * nl, p = r >> (nl - 1), l = r & (nl - 1);
            int64_t row = it == blockIdx.x && p < ST_SPL ? rows[p] : st_row(a, p0 + p);
            const char *src = (kv ? vc : kc) + ((row * a.nkv + h) * hd) * 2 + 128 * l;
            asm volatile("prefetch.global.L2 [%0];" ::"l"(src));
        }
    }
}

/* One attention item (kv head h, split sp of n_sp) on the whole block. The
 * splits' partial sums go out as LL lines; the last split of the head
 * (the item a block reaches last, so no block waits on an item behind it)
 * merges them in split order into the head's output lines. */
template <bool INSTR>
static __device__ void st_att_item(const tk_step_args &a, const st_consts *P, int op, int layer,
                                   int h, int sp, int n_sp, int spl, st_att *S, uint32_t f)
{
    const int G = P->G, hd = a.hd, tid = threadIdx.x, nt = ST_NW * 32;
    const int ctx = P->ctx, pos = P->pos;
    const int p0 = sp * spl, p1 = min(ctx, p0 + spl);
    bf16 *kc = (bf16 *)a.kc[layer], *vc = (bf16 *)a.vc[layer];
    /* the first pass's cached rows do not depend on this step: in flight
     * while the projection is awaited */
    st_kv_issue(a, P, kc, vc, h, p0, min(ST_SPL, p1 - p0), pos, S, P->rows);
    /* q heads h G .. h G + G - 1 and the head's new k and v, raw */
    const uint4 *qkv = st_ll(a, layer, a.ll_qkv);
    const int nq4 = G * hd / 4, n4 = hd / 4;
    for (int i = tid; i < nq4 + 2 * n4; i += nt) {
        const uint4 *src = i < nq4 ? qkv + h * nq4 + i
                           : i < nq4 + n4
                               ? qkv + (a.nq * hd + h * hd) / 4 + (i - nq4)
                               : qkv + ((a.nq + a.nkv) * hd + h * hd) / 4 + (i - nq4 - n4);
        uint2 d = ll_ready(src, ll_load(src), f);
        uint2 *dst = i < nq4 ? (uint2 *)S->q + i
                             : (i < nq4 + n4 ? (uint2 *)S->knew + (i - nq4)
                                             : (uint2 *)S->vnew + (i - nq4 - n4));
        *dst = d;
    }
    __syncthreads();
    st_stamp<INSTR>(a, op, 4);
    /* q roped (bf16, as the op-by-op path rounds it), rows G .. 7 zero: the
     * q . k MMA's B operand, in rows of hd + 8 so that the lanes' loads of 8
     * heads' rows fall in different banks (rows of hd: 8-way conflicts) */
    bf16 *qb = (bf16 *)S->qf;
    const int qrow = hd + 8;
    /* the second k-half's q . k sums: qf past qb */
    float(*sx)[ST_SPL] = (float(*)[ST_SPL])(S->qf + TK_STEP_MAX_G * (TK_STEP_MAX_HD + 8) / 2);
    static_assert(TK_STEP_MAX_G * TK_STEP_MAX_HD <= 2 * ST_NW * 32, "two q values a thread");
#pragma unroll
    for (int j = 0; j < 2; j++) { /* unrolled, no loop (cold code) */
        const int i = tid + j * nt;
        int g = st_div(i, P->m_hd), d = i - g * hd;
        if (i < TK_STEP_MAX_G * hd)
            qb[g * qrow + d] = g < G ? __float2bfloat16(st_rope(S->q + g * hd, d, a.rot, P))
                                     : __float2bfloat16(0.0f);
    }
    if (tid < G) S->m[tid] = -INFINITY, S->l[tid] = 0.0f;
    /* p . v: warp w < hd / 8 holds dims 8 w .. 8 w + 7 of q head g (lanes g < G)
     * in the MMA's accumulator layout (dims 8 w + 2 t, + 1) */
    const int warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
    float o2[2] = {0.0f, 0.0f};
    for (int q0 = p0; q0 < p1; q0 += ST_SPL) {
        int n = min(ST_SPL, p1 - q0);
        if (q0 != p0) {
            __syncthreads(); /* the previous pass's reads of k / v / s */
            st_kv_issue(a, P, kc, vc, h, q0, n, pos, S, NULL);
        }
        if (pos >= q0 && pos < q0 + n) { /* rope its k, store k and v at its slot */
            int p = pos - q0;
            int64_t slot = P->slot;
            static_assert(TK_STEP_MAX_HD <= ST_NW * 32, "one dimension a thread");
            if (tid < hd) {
                const int d = tid;
                bf16 kv = __float2bfloat16(st_rope(S->knew, d, a.rot, P));
                bf16 vv = S->vnew[d];
                S->u.kv.k[p][d] = kv, S->u.kv.v[p][d] = vv;
                if (slot >= 0)
                    kc[(slot * a.nkv + h) * hd + d] = kv, vc[(slot * a.nkv + h) * hd + d] = vv;
            }
        }
        const int n16 = (n + 15) & ~15;
        for (int i = n * hd + tid; i < n16 * hd; i += nt) /* rows past n: zero, not stale (p . v) */
        {
            int r = st_div(i, P->m_hd);
            S->u.kv.v[r][i - r * hd] = __float2bfloat16(0.0f);
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        if (q0 == p0) st_stamp<INSTR>(a, op, 5);
        else st_stamp<INSTR>(a, op, TK_STEP_STAMP_SM); /* a later pass's rows in (o ops: slot free) */
        if (warp < 8 && (warp & 3) < n16 / 16) {
            /* q . k: warp w, positions 16 (w % 4) .. + 15 against the G heads,
             * half w / 4 of the k-steps (two chains); each half's sums to its
             * own scores (the softmax adds them) */
            const int pb = warp & 3, kh = warp >> 2, nks = hd / 16, hk = (nks + 1) / 2;
            const int k0s = kh * hk, k1s = min(nks, k0s + hk);
            const bf16 *krow = &S->u.kv.k[16 * pb + (lane & 15)][8 * (lane >> 4)];
            const uint32_t *qg = (const uint32_t *)(qb + g4 * qrow) + t4;
            /* the half's k-steps (at most 4) loaded first, then two MMA
             * chains; k-steps past the half multiply zeros */
            constexpr int KH = (TK_STEP_MAX_HD / 16 + 1) / 2;
            uint32_t kf[KH][4], qf2[KH][2];
#pragma unroll
            for (int kk = 0; kk < KH; kk++) {
                const int ks = k0s + kk;
                kf[kk][0] = kf[kk][1] = kf[kk][2] = kf[kk][3] = 0u, qf2[kk][0] = qf2[kk][1] = 0u;
                if (ks < k1s) {
                    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                                 : "=r"(kf[kk][0]), "=r"(kf[kk][1]), "=r"(kf[kk][2]),
                                   "=r"(kf[kk][3])
                                 : "r"(tk_smem_u32(krow + 16 * ks)));
                    qf2[kk][0] = qg[8 * ks], qf2[kk][1] = qg[8 * ks + 4];
                }
            }
            float c0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kk = 0; kk < KH; kk++)
                tk_mma_bf16(kk & 1 ? c1 : c0, kf[kk][0], kf[kk][1], kf[kk][2], kf[kk][3],
                            qf2[kk][0], qf2[kk][1]);
            /* rows: positions 16 pb + g4 (c[0 .. 1]) and + 8 (c[2 .. 3]);
             * columns: heads 2 t4, + 1 */
            float *dst = kh ? sx[0] : S->s[0];
            const int drow = kh ? ST_SPL : ST_SPL + 8;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int head = 2 * t4 + (e & 1), p = 16 * pb + g4 + 8 * (e >> 1);
                if (head < G && p < n) dst[head * drow + p] = c0[e] + c1[e];
            }
        }
        __syncthreads();
        if (q0 == p0) st_stamp<INSTR>(a, op, 9);
        static_assert(TK_STEP_MAX_G <= ST_NW, "a warp per q head");
        if (warp < G) { /* the online softmax of q head g */
            const int g = warp;
            float v0 = lane < n ? __fmul_rn(S->s[g][lane] + sx[g][lane], a.scale) : -INFINITY;
            float v1 = lane + 32 < n ? __fmul_rn(S->s[g][lane + 32] + sx[g][lane + 32], a.scale)
                                     : -INFINITY;
            float mp = tk_warp_max(fmaxf(v0, v1)), mo = S->m[g], mn = fmaxf(mo, mp);
            float e0 = lane < n ? __expf(v0 - mn) : 0.0f,
                  e1 = lane + 32 < n ? __expf(v1 - mn) : 0.0f;
            S->s[g][lane] = e0, S->s[g][lane + 32] = e1;
            float sum = tk_warp_sum(e0 + e1);
            if (lane == 0) {
                float fc = mo == -INFINITY ? 0.0f : __expf(mo - mn);
                S->fac[g] = fc, S->l[g] = S->l[g] * fc + sum, S->m[g] = mn;
            }
        }
        __syncthreads();
        if (q0 == p0) st_stamp<INSTR>(a, op, 10);
        if (warp < hd / 8) { /* p . v: p split into bf16 hi + lo (16 bits of it), v as it is */
            /* every load first (p of every k-step, v of the pass's), then the
             * high and the low parts in two MMA chains: no branch between */
            const int nk = n16 / 16, gr = g4 < G ? g4 : 0;
            uint32_t ph[ST_SPL / 8], pl[ST_SPL / 8], vv[ST_SPL / 8];
#pragma unroll
            for (int kk = 0; kk < ST_SPL / 16; kk++) {
                float2 pa = *(const float2 *)&S->s[gr][16 * kk + 2 * t4];
                float2 pb = *(const float2 *)&S->s[gr][16 * kk + 2 * t4 + 8];
                if (g4 >= G) pa = pb = make_float2(0.0f, 0.0f); /* rows past G: zero */
                __nv_bfloat162 ha = __floats2bfloat162_rn(pa.x, pa.y);
                __nv_bfloat162 hb = __floats2bfloat162_rn(pb.x, pb.y);
                float2 fa = __bfloat1622float2(ha), fb = __bfloat1622float2(hb);
                __nv_bfloat162 la = __floats2bfloat162_rn(pa.x - fa.x, pa.y - fa.y);
                __nv_bfloat162 lb = __floats2bfloat162_rn(pb.x - fb.x, pb.y - fb.y);
                ph[2 * kk] = *(const uint32_t *)&ha, ph[2 * kk + 1] = *(const uint32_t *)&hb;
                pl[2 * kk] = *(const uint32_t *)&la, pl[2 * kk + 1] = *(const uint32_t *)&lb;
                vv[2 * kk] = vv[2 * kk + 1] = 0u; /* k-steps past the pass's rows: zero */
                if (kk < nk)
                    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                                 : "=r"(vv[2 * kk]), "=r"(vv[2 * kk + 1])
                                 : "r"(tk_smem_u32(&S->u.kv.v[16 * kk + (lane & 15)][8 * warp])));
            }
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kk = 0; kk < ST_SPL / 16; kk++) {
                tk_mma_bf16(c, ph[2 * kk], 0u, ph[2 * kk + 1], 0u, vv[2 * kk], vv[2 * kk + 1]);
                tk_mma_bf16(cl, pl[2 * kk], 0u, pl[2 * kk + 1], 0u, vv[2 * kk], vv[2 * kk + 1]);
            }
            c[0] += cl[0], c[1] += cl[1];
            if (g4 < G) {
                float fc = S->fac[g4];
                o2[0] = fmaf(o2[0], fc, c[0]), o2[1] = fmaf(o2[1], fc, c[1]);
            }
        }
    }
    const int pst = hd + 2;          /* a split's partial: per q head hd sums, then m and l */
    if (n_sp > 1 && sp < n_sp - 1) { /* straight from the p . v accumulators: no barrier */
        uint4 *pl = st_ll(a, layer, a.ll_part) + (size_t)(h * a.max_splits + sp) * G * pst / 2;
        st_stamp<INSTR>(a, op, 6);
        if (warp < hd / 8 && g4 < G)
            ll_put(pl + (g4 * pst + 8 * warp + 2 * t4) / 2, __float_as_uint(o2[0]),
                   __float_as_uint(o2[1]), f);
        if (tid < G) /* m and l: final since the last pass's softmax barrier */
            ll_put(pl + (tid * pst + hd) / 2, __float_as_uint(S->m[tid]),
                   __float_as_uint(S->l[tid]), f);
        st_stamp<INSTR>(a, op, 7);
        return;
    }
    uint4 *out = st_ll(a, layer, a.ll_attn) + h * G * hd / 4;
    if (n_sp == 1) {       /* one split: the output directly */
        __syncthreads();   /* every pass's reads of qb */
        float *of = S->qf; /* the output sums as [G][hd], for the thread-per-value code below */
        if (warp < hd / 8 && g4 < G)
            *(float2 *)&of[g4 * hd + 8 * warp + 2 * t4] = make_float2(o2[0], o2[1]);
        __syncthreads();
        st_stamp<INSTR>(a, op, 6);
#pragma unroll
        for (int j = 0; j < ST_ATT_PER; j++) {
            int i = tid + j * nt;
            if (j * nt >= G * hd) break; /* warp-uniform: the lanes shuffle */
            float o = i < G * hd ? __fdividef(of[i], S->l[st_div(i, P->m_hd)]) : 0.0f; /* l >= 1 */
            st_put4(out, i, o, i < G * hd, f);
        }
        st_stamp<INSTR>(a, op, 8);
        return;
    }
    /* the merge: this split's sums from registers, the others' from their
     * lines, then the splits in order */
    const int ast = hd + 4;
    float *ws = S->u.ws;
    __syncthreads(); /* every pass's reads of k / v (ws is over them) */
    st_stamp<INSTR>(a, op, 6);
    if (warp < hd / 8 && g4 < G)
        *(float2 *)&ws[(sp * G + g4) * ast + 8 * warp + 2 * t4] = make_float2(o2[0], o2[1]);
    if (tid < G)
        ws[(sp * G + tid) * ast + hd] = S->m[tid], ws[(sp * G + tid) * ast + hd + 1] = S->l[tid];
    const uint4 *pl0 = st_ll(a, layer, a.ll_part) + (size_t)h * a.max_splits * G * pst / 2;
    const int per_sp = G * pst / 2;
    for (int base = 0; base < sp * per_sp; base += ST_LLM * nt) { /* one round for 9 splits */
        uint4 v[ST_LLM];
        ll_gather<ST_LLM>(pl0, base, sp * per_sp, f, v);
#pragma unroll
        for (int j = 0; j < ST_LLM; j++) {
            int i = base + tid + j * nt;
            if (i >= sp * per_sp) break;
            int s2 = st_div(i, P->m_persp), e = 2 * (i - s2 * per_sp), g = st_div(e, P->m_pst),
                d = e - g * pst;
            float *dst = ws + (s2 * G + g) * ast + d;
            dst[0] = __uint_as_float(v[j].x), dst[1] = __uint_as_float(v[j].z);
        }
    }
    __syncthreads();
    st_stamp<INSTR>(a, op, 7);
    /* the splits in order, every thread its own (head, dim) with its head's
     * factors and total computed again: independent loads and one FMA chain,
     * no warp trees and no barrier between (a chain's latency is what this
     * step costs: dev/kernels/att_lab.cu). The loops stay rolled: unrolled,
     * with the loads of 8 splits issued together, the merge took 1.28-1.47
     * us instead of 1.06 (docs/perf/quantized.md, "What a hop costs") */
#pragma unroll
    for (int j = 0; j < ST_ATT_PER; j++) {
        int i = tid + j * nt;
        if (j * nt >= G * hd) break; /* warp-uniform: the lanes shuffle */
        float o = 0.0f;
        if (i < G * hd) {
            int g = st_div(i, P->m_hd), d = i - g * hd;
            const float *e0 = ws + g * ast, *ed = e0 + d;
            float M = -INFINITY, A = 0.0f, L = 0.0f;
            for (int s2 = 0; s2 < n_sp; s2++) M = fmaxf(M, e0[s2 * G * ast + hd]);
            for (int s2 = 0; s2 < n_sp; s2++) {
                const float m = e0[s2 * G * ast + hd];
                const float fc = m == -INFINITY ? 0.0f : __expf(m - M);
                A = fmaf(ed[s2 * G * ast], fc, A), L = fmaf(e0[s2 * G * ast + hd + 1], fc, L);
            }
            o = __fdividef(A, L); /* L >= 1 */
        }
        st_put4(out, i, o, i < G * hd, f);
    }
    st_stamp<INSTR>(a, op, 8);
}

#endif /* TERN_CUDA_STEP_ATT_CUH */
