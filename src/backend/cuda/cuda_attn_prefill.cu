/*
 * cuda_attn_prefill.cu — causal attention for sequences with more than one
 * query token, FlashAttention-2 style, over the paged KV cache.
 *
 * One block per (query tile of 64 or 128 rows (64 at head_dim 256), query
 * head, sequence); warp w
 * owns query rows [16w, 16w + 16) of the tile. K/V tiles of 64 keys are gathered
 * through the block table with cp.async (zero-filled past the causal end so
 * unwritten cache memory never reaches the arithmetic) into a double buffer,
 * so the next tile loads while this one is multiplied. S = Q K^T and O += P V
 * run on mma.sync.m16n8k16 (bf16 in, f32 accumulate); P stays in registers
 * (the S accumulator layout is the A-operand layout), V's B operand comes
 * from ldmatrix.trans. Rows are padded by 16 bytes in shared memory so the
 * fragment loads are free of bank conflicts.
 *
 * Masking uses the batch's positions: query row r attends to key j iff
 * j <= pos[r], j < seq_len and (no window or j > pos[r] - window). Blocks
 * whose keys are all masked for a row leave that row untouched (alpha = 1,
 * p = 0), so a row's result does not depend on the tile's other rows.
 *
 * shared memory (D = head dim, P = D + 8):
 *   sQ [BR][P] | sK [2][64][P] | sV [2][64][P]    (bf16)
 * Depends on cuda_common.cuh.
 */
#include "backend/cuda/cuda_common.cuh"

#define PF_BC 64
#define LOG2E 1.4426950408889634f

static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gmem), "r"(n));
}
static __device__ __forceinline__ void cp_commit(void) { asm volatile("cp.async.commit_group;\n"); }
template <int N> static __device__ __forceinline__ void cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

static __device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0,
                                                uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const void *smem)
{
    unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sa));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* Gathers keys [kb * 64, kb * 64 + 64) of kv head g into a tile (zeros past
 * kv_hi): all D dims of K, the DV dims [vc0, vc0 + DV) of V. */
template <int D, int DV, int NTH>
static __device__ __forceinline__ void load_kv_tile(bf16 *sk, bf16 *sv, const struct tk_attn_args &a,
                                                    const int32_t *bt, int g, int kb, int kv_hi,
                                                    int vc0)
{
    constexpr int P = D + 8, PV = DV + 8, CH = D / 8;
    for (int c = threadIdx.x; c < PF_BC * CH; c += NTH) {
        int r = c / CH, col = (c % CH) * 8;
        int j = kb * PF_BC + r;
        bool ok = j < kv_hi;
        int64_t off = 0;
        if (ok) {
            int64_t slot = (int64_t)bt[j / a.block_size] * a.block_size + j % a.block_size;
            off = (slot * a.n_kv_heads + g) * D + col;
        }
        cp_async16(sk + r * P + col, (const bf16 *)a.k_cache + off, ok);
        if (col >= vc0 && col < vc0 + DV)
            cp_async16(sv + r * PV + col - vc0, (const bf16 *)a.v_cache + off, ok);
    }
}

/* Shared memory of a (D, DV, BR) kernel with NB K/V buffers. */
template <int D, int DV, int BR, int NB> struct pf_smem {
    static constexpr size_t bytes =
        ((size_t)BR * (D + 8) + (size_t)NB * PF_BC * (D + 8) + (size_t)NB * PF_BC * (DV + 8)) * 2;
};
/* Two K/V buffers (the next tile loads while this one is multiplied) where
 * they fit the 227 KB of shared memory, else one. */
template <int D, int DV, int BR> struct pf_nb {
    static constexpr int value = pf_smem<D, DV, BR, 2>::bytes <= 227 * 1024 ? 2 : 1;
};

template <int D, int DV, int PF_BR>
static __global__ void __launch_bounds__(PF_BR * 2)
    k_attn_prefill(struct tk_attn_args a)
{
    tk_pdl_wait(); /* PDL (cuda_common.cuh): nothing is touched before this */
    tk_pdl_launch();
    constexpr int PF_THREADS = PF_BR * 2; /* one warp per 16 query rows */
    constexpr int P = D + 8, PV = DV + 8, KD = D / 16, ND = DV / 8; /* ND: output 8-columns */
    constexpr int NB = pf_nb<D, DV, PF_BR>::value;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = (bf16 *)smem_raw;
    bf16 *sK = sQ + PF_BR * P;
    bf16 *sV = sK + NB * PF_BC * P;

    /* blockIdx.y: the query head and, where the output is split (DV < D:
     * head_dim 512, whose accumulator would not fit the registers), which
     * DV-wide part of it this block writes */
    int s = blockIdx.z, h = blockIdx.y / (D / DV), vc0 = blockIdx.y % (D / DV) * DV;
    int qt = gridDim.x - 1 - blockIdx.x; /* longest (latest) tiles first */
    int qs = a.query_start[s], ql = a.query_start[s + 1] - qs;
    if (ql <= 1) return; /* one-token sequences go to the decode kernel */
    int q0 = qt * PF_BR;
    if (q0 >= ql) return;
    int nq = min(PF_BR, ql - q0);
    int L = a.seq_lens[s];
    int g = h / (a.n_heads / a.n_kv_heads);
    int pos_first = a.positions[qs + q0], pos_last = a.positions[qs + q0 + nq - 1];
    int kv_hi = min(pos_last + 1, L);
    int kv_lo = a.sliding_window > 0 ? max(0, pos_first - a.sliding_window + 1) : 0;
    int kb_lo = kv_lo / PF_BC, kb_hi = (kv_hi + PF_BC - 1) / PF_BC;
    const int32_t *bt = a.block_tables + (int64_t)s * a.max_blocks_per_seq;

    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int gid = lane >> 2, qd = lane & 3;

    /* Q tile (rows past nq zero-filled). */
    for (int c = tid; c < PF_BR * (D / 8); c += PF_THREADS) {
        int r = c / (D / 8), col = (c % (D / 8)) * 8;
        bool ok = r < nq;
        const bf16 *src = (const bf16 *)a.q +
                          (ok ? (int64_t)(qs + q0 + r) * a.q_stride + (int64_t)h * D + col : 0);
        cp_async16(sQ + r * P + col, src, ok);
    }
    if (kb_lo < kb_hi) load_kv_tile<D, DV, PF_THREADS>(sK, sV, a, bt, g, kb_lo, kv_hi, vc0);
    cp_commit();

    int r0 = warp * 16 + gid, r1 = r0 + 8;
    int pos0 = a.positions[qs + q0 + min(r0, nq - 1)];
    int pos1 = a.positions[qs + q0 + min(r1, nq - 1)];
    int win = a.sliding_window;
    /* This warp's lowest and highest query positions (positions rise along a sequence). */
    int wpos_min = a.positions[qs + q0 + min(warp * 16, nq - 1)];
    int wpos_max = a.positions[qs + q0 + min(warp * 16 + 15, nq - 1)];
    float qscale = a.softcap > 0.0f ? a.scale : a.scale * LOG2E;

    /* Q's fragments live in registers for D <= 128; at D = 256 the O
     * accumulator takes the registers and Q is read from shared memory per
     * k-step instead. */
    constexpr bool QREG = D <= 128;
    uint32_t qf[QREG ? KD : 1][4];
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    for (int kb = kb_lo; kb < kb_hi; kb++) {
        int buf = NB == 2 ? (kb - kb_lo) & 1 : 0;
        if (NB == 1 && kb > kb_lo) { /* one buffer: the tile after the last one's use */
            load_kv_tile<D, DV, PF_THREADS>(sK, sV, a, bt, g, kb, kv_hi, vc0);
            cp_commit();
        }
        if (NB == 2 && kb + 1 < kb_hi) {
            load_kv_tile<D, DV, PF_THREADS>(sK + (buf ^ 1) * PF_BC * P, sV + (buf ^ 1) * PF_BC * PV, a,
                                            bt, g, kb + 1, kv_hi, vc0);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (QREG && kb == kb_lo) {
#pragma unroll
            for (int k = 0; k < (QREG ? KD : 1); k++) {
                qf[k][0] = *(const uint32_t *)(sQ + r0 * P + 16 * k + 2 * qd);
                qf[k][1] = *(const uint32_t *)(sQ + r1 * P + 16 * k + 2 * qd);
                qf[k][2] = *(const uint32_t *)(sQ + r0 * P + 16 * k + 8 + 2 * qd);
                qf[k][3] = *(const uint32_t *)(sQ + r1 * P + 16 * k + 8 + 2 * qd);
            }
        }
        const bf16 *k_t = sK + buf * PF_BC * P, *v_t = sV + buf * PF_BC * PV;

        /* S = Q K^T for this warp's 16 rows and the tile's 64 keys (the same
         * MMAs in the same order either way Q is held). */
        float sc[PF_BC / 8][4];
#pragma unroll
        for (int n = 0; n < PF_BC / 8; n++) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
        for (int k = 0; k < KD; k++) {
            uint32_t qs4[4];
            const uint32_t *qk = qf[QREG ? k : 0];
            if (!QREG) {
                qs4[0] = *(const uint32_t *)(sQ + r0 * P + 16 * k + 2 * qd);
                qs4[1] = *(const uint32_t *)(sQ + r1 * P + 16 * k + 2 * qd);
                qs4[2] = *(const uint32_t *)(sQ + r0 * P + 16 * k + 8 + 2 * qd);
                qs4[3] = *(const uint32_t *)(sQ + r1 * P + 16 * k + 8 + 2 * qd);
                qk = qs4;
            }
#pragma unroll
            for (int n = 0; n < PF_BC / 8; n++) {
                const bf16 *kr = k_t + (8 * n + gid) * P + 2 * qd;
                mma16816(sc[n], qk, *(const uint32_t *)(kr + 16 * k),
                         *(const uint32_t *)(kr + 16 * k + 8));
            }
        }
        /* Scale, softcap, mask (only on tiles that cross a boundary of one of
         * this warp's rows); row maxima. */
        int j_lo = kb * PF_BC, j_hi = j_lo + PF_BC - 1;
        bool mask = j_hi > wpos_min || j_hi >= kv_hi || (win > 0 && j_lo <= wpos_max - win);
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int n = 0; n < PF_BC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int j = j_lo + 8 * n + 2 * qd + (e & 1);
                int p = e < 2 ? pos0 : pos1;
                float v = sc[n][e] * qscale;
                if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap) * LOG2E;
                if (mask) {
                    bool ok = j <= p && j < kv_hi && (win <= 0 || j > p - win);
                    v = ok ? v : -INFINITY;
                }
                sc[n][e] = v;
                if (e < 2) mx0 = fmaxf(mx0, v);
                else mx1 = fmaxf(mx1, v);
            }
#pragma unroll
        for (int off = 1; off <= 2; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        float ms0 = mx0 == -INFINITY ? 0.0f : mx0, ms1 = mx1 == -INFINITY ? 0.0f : mx1;
        float al0 = exp2f(m0 - ms0), al1 = exp2f(m1 - ms1);
        m0 = mx0;
        m1 = mx1;
        l0 *= al0;
        l1 *= al1;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            o[n][0] *= al0;
            o[n][1] *= al0;
            o[n][2] *= al1;
            o[n][3] *= al1;
        }
        uint32_t pa[PF_BC / 16][4];
#pragma unroll
        for (int n = 0; n < PF_BC / 8; n++) {
            float p0 = exp2f(sc[n][0] - ms0), p1 = exp2f(sc[n][1] - ms0);
            float p2 = exp2f(sc[n][2] - ms1), p3 = exp2f(sc[n][3] - ms1);
            l0 += p0 + p1;
            l1 += p2 + p3;
            pa[n / 2][(n & 1) * 2 + 0] = pack_bf16(p0, p1);
            pa[n / 2][(n & 1) * 2 + 1] = pack_bf16(p2, p3);
        }
        /* O += P V. */
        int mi = lane >> 3, mr = lane & 7;
#pragma unroll
        for (int k = 0; k < PF_BC / 16; k++) {
            const bf16 *vrow = v_t + (16 * k + (mi & 1) * 8 + mr) * PV + (mi >> 1) * 8;
#pragma unroll
            for (int dn = 0; dn < DV / 16; dn++) {
                uint32_t b[4];
                ldsm_x4_t(b, vrow + 16 * dn);
                mma16816(o[2 * dn], pa[k], b[0], b[1]);
                mma16816(o[2 * dn + 1], pa[k], b[2], b[3]);
            }
        }
        __syncthreads(); /* this buffer is refilled NB iterations on */
    }
    if (kb_lo >= kb_hi) cp_wait<0>();

#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    bf16 *out = (bf16 *)a.out;
#pragma unroll
    for (int n = 0; n < ND; n++) {
        int col = h * D + vc0 + 8 * n + 2 * qd;
        if (r0 < nq)
            *(__nv_bfloat162 *)(out + (int64_t)(qs + q0 + r0) * a.out_stride + col) =
                __floats2bfloat162_rn(o[n][0] * inv0, o[n][1] * inv0);
        if (r1 < nq)
            *(__nv_bfloat162 *)(out + (int64_t)(qs + q0 + r1) * a.out_stride + col) =
                __floats2bfloat162_rn(o[n][2] * inv1, o[n][3] * inv1);
    }
}

template <int D, int DV, int BR>
static cudaError_t prefill_launch(cudaStream_t st, const struct tk_attn_args *a)
{
    size_t smem = pf_smem<D, DV, BR, pf_nb<D, DV, BR>::value>::bytes;
    cudaError_t e = cudaFuncSetAttribute(k_attn_prefill<D, DV, BR>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)tk_cdiv(a->max_q_len, BR), (unsigned)(a->n_heads * (D / DV)),
              (unsigned)a->n_seqs);
    return tk_launch(k_attn_prefill<D, DV, BR>, grid, BR * 2, smem, st, *a);
}

/* 128-query tiles (8 warps) once some sequence has more than 64 queries: K/V
 * tiles are then shared by twice the rows. A row's result does not depend on
 * the tile size (fully masked key tiles are exact no-ops, key tiles are
 * visited in the same absolute order), so this choice keeps batch invariance.
 * Head_dim 256 takes 64-row tiles only (Q read from shared memory: the
 * accumulator takes the registers); 512 also splits its output in two
 * 256-wide halves, one block each (the scores computed by both), with one
 * K/V buffer. */
template <int D> static cudaError_t prefill_d(cudaStream_t st, const struct tk_attn_args *a)
{
    if constexpr (D > 256) return prefill_launch<D, 256, 64>(st, a);
    else if constexpr (D > 128) return prefill_launch<D, D, 64>(st, a);
    else return a->max_q_len > 64 ? prefill_launch<D, D, 128>(st, a) : prefill_launch<D, D, 64>(st, a);
}

extern "C" cudaError_t tk_attn_prefill(cudaStream_t st, const struct tk_attn_args *a)
{
    if (a->n_seqs <= 0 || a->max_q_len <= 1) return cudaSuccess;
    switch (a->head_dim) {
    case 64: return prefill_d<64>(st, a);
    case 128: return prefill_d<128>(st, a);
    case 256: return prefill_d<256>(st, a);
    case 512: return prefill_d<512>(st, a);
    default: return cudaErrorInvalidValue;
    }
}
