/* swiglu.cuh — the per-element arithmetic of gpu/swiglu.h's kernels (device code, C++), shared
 * with the kernel that fuses the gate and up linears' DoRA rescale into the SwiGLU backward
 * (gpu/dora.cu), so that both round at the same points.
 *
 * silu_dev(g)              g / (1 + exp(−g)), fp32, correctly rounded steps (expf: libdevice)
 * swiglu_backward_elem     da = bf16(dh·u), a = bf16(silu(g)); du = dh·a and dg = da·silu'(g),
 *                          silu'(g) = σ(g)·(1 + g·(1 − σ(g))) — both returned before their final
 *                          bf16 rounding (the caller stores them rounded); its value is a, from
 *                          which the forward's h = a·u (swiglu_forward_elem) is formed again
 */
#ifndef REFINE_GPU_SWIGLU_CUH
#define REFINE_GPU_SWIGLU_CUH

#include "gpu/vec.cuh"

namespace refine {

__device__ __forceinline__ float sigmoid_dev(float g) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g))); }
__device__ __forceinline__ float silu_dev(float g) { return __fdiv_rn(g, __fadd_rn(1.0f, expf(-g))); }

/* h = a·u with a = bf16(silu(g)), before h's bf16 rounding: the forward's element */
__device__ __forceinline__ float swiglu_forward_elem(float a, float u) { return __fmul_rn(a, u); }

__device__ __forceinline__ float swiglu_backward_elem(float g, float u, float dh, float &dg, float &du) {
    const float s = sigmoid_dev(g);
    const float a = bf16_round_dev(silu_dev(g));
    const float da = bf16_round_dev(__fmul_rn(dh, u));
    du = __fmul_rn(dh, a);
    /* silu'(g) = s·(1 + g·(1 − s)), the order of aten's silu_backward */
    const float dsilu = __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, s))));
    dg = __fmul_rn(da, dsilu);
    return a;
}

}  // namespace refine

#endif /* REFINE_GPU_SWIGLU_CUH */
