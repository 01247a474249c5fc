/*
 * cuda_step_ll.cuh — the LL lines through which the decode step kernel's
 * phases hand data on (cuda_step.cu): store a line, load one, wait for
 * one, gather a batch of them. CUDA C++ only, included by cuda_step.cu
 * alone. Depends on cuda_step.h (TK_STEP_NW: the block's threads).
 */
#ifndef TERN_CUDA_STEP_LL_CUH
#define TERN_CUDA_STEP_LL_CUH

#include "backend/cuda/cuda_step.h"

#include <stdint.h>

/* A phase hands its output on in 16-byte lines {d0, flag, d1, flag} (the
 * LL protocol of NCCL): one 16-byte store carries the data and its
 * readiness, so a consumer polls the data itself. From the last producer's
 * store to the consumer's use is one L2 round trip, with no fence, counter
 * or grid barrier between (under the rings' load an L2 round trip is ~1 us,
 * and a barrier with the fences it needs was ~3). Every layer has its own
 * lines and the flag changes with every launch, so a line is never read
 * before its producer's store of this step, and never overwritten while a
 * reader may still want it. Stores and polls are relaxed at gpu scope (only
 * this GPU reads the lines; `volatile` is system scope): +0.2%. */
static __device__ __forceinline__ void ll_put(uint4 *p, uint32_t d0, uint32_t d1, uint32_t f)
{
    asm volatile("st.relaxed.gpu.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0), "r"(f),
                 "r"(d1), "r"(f)
                 : "memory");
}

static __device__ __forceinline__ uint4 ll_load(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

/* ns a poller sleeps between polls of a line: none (polling faster
 * measured faster: 0 / 32 / 256 / 1000 ns gave 474.7 / 472.2 / 452.2 /
 * 430.2 tok/s) */
#define ST_SPIN_NS 0

/* v, loaded from p, once its flags are f: the line's two data words. A
 * line that never comes (a bug) traps after ~2^34 cycles instead of
 * hanging the process. */
static __device__ __forceinline__ uint2 ll_ready(const uint4 *p, uint4 v, uint32_t f)
{
    if (v.y != f || v.w != f) {
        long long t0 = clock64();
        do {
            __nanosleep(ST_SPIN_NS);
            v = ll_load(p);
            if (clock64() - t0 > (1ll << 34)) __trap();
        } while (v.y != f || v.w != f);
    }
    return make_uint2(v.x, v.z);
}

#define ST_LLB 4 /* LL loads a thread has in flight before it waits on any */
#define ST_LLM 8 /* the same for the attention merge's partial sums */

/* Lines base + threadIdx.x + j x (block size), j < N, below n, of src
 * into v once each carries flag f. Called by whole warps (the lanes vote).
 * Every line's first load is in flight at once (waiting on them one at a
 * time costs a round trip per line whose first load came too early, up to
 * ST_LLB in a row: 488.2 against 511.9 tok/s in one call). Then, while none
 * of the warp's lines has arrived since the last round, only one line is
 * polled again, by the lowest lane with any pending; once one has, every
 * lane loads all its pending lines again. (Every thread polling every
 * pending line, ~2k lines of 16 bytes per block and round, 132 blocks
 * reading the same ~32 KB, kept L2 busy enough to slow every hop: 584.1 ->
 * 608.3 tok/s. Both in docs/perf/quantized.md.) A line that never comes (a bug)
 * traps after ~2^34 cycles. */
template <int N = ST_LLB>
static __device__ __forceinline__ void ll_gather(const uint4 *src, int base, int n, uint32_t f,
                                                 uint4 *v)
{
    const int nt = TK_STEP_NW * 32;
    unsigned pend = 0;
#pragma unroll
    for (int j = 0; j < N; j++) {
        int i = base + threadIdx.x + j * nt;
        v[j] = make_uint4(0u, 0u, 0u, 0u);
        if (i < n) v[j] = ll_load(src + i), pend |= 1u << j;
    }
    long long t0 = 0;
    for (int round = 0;; round++) {
        const unsigned before = pend;
#pragma unroll
        for (int j = 0; j < N; j++)
            if ((pend >> j & 1) && v[j].y == f && v[j].w == f) pend &= ~(1u << j);
        const unsigned wp = __ballot_sync(0xffffffffu, pend != 0);
        if (!wp) return;
        const bool moved = __any_sync(0xffffffffu, pend != before);
        const bool lead = (threadIdx.x & 31) == __ffs(wp) - 1;
        if (round == 0)
            t0 = clock64();
        else if (clock64() - t0 > (1ll << 34))
            __trap();
        __nanosleep(ST_SPIN_NS);
        if (moved || lead) {
#pragma unroll
            for (int j = 0; j < N; j++)
                if (pend >> j & 1) {
                    v[j] = ll_load(src + base + threadIdx.x + j * nt);
                    if (!moved) break;
                }
        }
    }
}

#endif /* TERN_CUDA_STEP_LL_CUH */
