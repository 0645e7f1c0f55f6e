/* rope.cuh — RoPE's per-pair arithmetic (device code, C++), shared by gpu/rope.cu's kernels and the
 * kernels that apply RoPE's backward to the gradients they store (the Hopper attention backward's dQ
 * conversion and dK store, gpu/attention_sm90_bwd.cu), so that every path rounds at the same points:
 *
 * rope_rotate_pair(x1, x2, c, s, y1, y2)   y1 = bf16(x1·c) − bf16(x2·s), y2 = bf16(x2·c) + bf16(x1·s),
 *                                          each before its final bf16 rounding (the caller's store);
 *                                          the forward passes s = sin, the backward s = −sin
 *                                          (gpu/rope.h's formulas: the negation is exact).
 */
#ifndef REFINE_GPU_ROPE_CUH
#define REFINE_GPU_ROPE_CUH

#include "gpu/vec.cuh"

namespace refine {

__device__ __forceinline__ void rope_rotate_pair(float x1, float x2, float c, float s, float &y1, float &y2) {
    y1 = __fsub_rn(bf16_round_dev(__fmul_rn(x1, c)), bf16_round_dev(__fmul_rn(x2, s)));
    y2 = __fadd_rn(bf16_round_dev(__fmul_rn(x2, c)), bf16_round_dev(__fmul_rn(x1, s)));
}

}  // namespace refine

#endif /* REFINE_GPU_ROPE_CUH */
