/* mma.cuh — the warp-level tensor-core product the SIMT-tiled kernels of gpu/ share (device code).
 *
 * mma16816(c, a0..a3, b0, b1)  c += A·B, mma.sync.m16n8k16, bf16 inputs, fp32 accumulation; the
 *                              fragment layouts, lane = 4·g + t:
 *   A (16×16, row-major)  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
 *   B (16×8, "col")       b0 (k 2t..2t+1, n g)  b1 (k 2t+8..2t+9, n g)
 *   C (16×8, fp32)        c0,c1 (g, 2t..2t+1)   c2,c3 (g+8, 2t..2t+1)
 *   (each a/b register holds two consecutive bf16, the lower k in the low half).
 */
#ifndef REFINE_GPU_MMA_CUH
#define REFINE_GPU_MMA_CUH

#include <stdint.h>

namespace refine {

__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace refine

#endif /* REFINE_GPU_MMA_CUH */
