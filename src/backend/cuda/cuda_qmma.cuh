/*
 * cuda_qmma.cuh — device helpers of the tensor-core GEMVs for MLX-affine
 * 4-bit weights (cuda_quant_mma.cu; the decode step's, cuda_step.cuh, uses
 * the MMAs): the bf16 pair a packed 4-bit word gives one MMA fragment
 * register, the m16n8k16 MMA itself, and a bf16 / f16 scale or bias out of
 * a 32-bit pair.
 * CUDA C++ only. Depends on cuda_common.cuh.
 */
#ifndef TERN_CUDA_QMMA_CUH
#define TERN_CUDA_QMMA_CUH

#include "backend/cuda/cuda_common.cuh"

/* 0x43004300 (bf16x2 128.0) where ptxas cannot see it: with both constants
 * immediate, (x & m) | c costs two LOP3s (one immediate per LOP3); with c
 * in a register it is one (q8_lab, 2026-11-30). */
static __constant__ uint32_t tk_q4_magic = 0x43004300u;

/* bf16x2 (128 + nibble j, 128 + nibble j + 4) of a packed 4-bit word: one
 * LOP3 after a shift (0x4300 is 128.0; q < 16 fits the 7-bit mantissa). */
static __device__ __forceinline__ uint32_t tk_q4_pair(uint32_t w, int j)
{
    uint32_t d, s = j ? w >> (4 * j) : w;
    asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(d) : "r"(s), "r"(tk_q4_magic));
    return d;
}

/* d = A B + d for one mma.sync m16n8k16, T (bf16 / f16) operands, f32
 * accumulators: tk_mma_bf16, tk_mma_f16. */
#define TK_MMA_16816(name, T)                                                                      \
    static __device__ __forceinline__ void name(float *d, uint32_t a0, uint32_t a1, uint32_t a2,   \
                                                uint32_t a3, uint32_t b0, uint32_t b1)             \
    {                                                                                              \
        asm("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0,%1,%2,%3}, "                \
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                               \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                       \
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                               \
    }
TK_MMA_16816(tk_mma_bf16, "bf16")
TK_MMA_16816(tk_mma_f16, "f16")
#undef TK_MMA_16816

/* The high (hi != 0) or low half of w, a pair of SDT (bf16 / f16) values, as a float. */
template <int SDT> static __device__ __forceinline__ float tk_half_of(uint32_t w, int hi)
{
    if (SDT == TK_BF16) return __uint_as_float(hi ? w & 0xffff0000u : w << 16);
    return __half2float(__ushort_as_half((unsigned short)(hi ? w >> 16 : w & 0xffffu)));
}

#endif /* TERN_CUDA_QMMA_CUH */
