/* swiglu.cuh — the per-element arithmetic of gpu/swiglu.h's kernels (device code, C++), shared
 * with the kernel that fuses the gate and up linears' DoRA rescale into the SwiGLU backward
 * (gpu/dora.cu), so that both round at the same points.
 *
 * silu_dev(g)              g / (1 + exp(−g)), fp32, correctly rounded steps (expf: libdevice)
 * sigmoid_silu<N>(g, s, si) σ and silu of N values at once, the bits of sigmoid_dev and silu_dev
 *                          (below: the division's fast path without its branch)
 * swiglu_backward_elem     da = bf16(dh·u), a = bf16(silu(g)); du = dh·a and dg = da·silu'(g),
 *                          silu'(g) = σ(g)·(1 + g·(1 − σ(g))) — both returned before their final
 *                          bf16 rounding (the caller stores them rounded); its value is a, from
 *                          which the forward's h = a·u (swiglu_forward_elem) is formed again;
 *                          swiglu_backward_sig takes σ(g) and silu(g) from sigmoid_silu
 */
#ifndef REFINE_GPU_SWIGLU_CUH
#define REFINE_GPU_SWIGLU_CUH

#include "gpu/vec.cuh"

namespace refine {

__device__ __forceinline__ float sigmoid_dev(float g) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g))); }
__device__ __forceinline__ float silu_dev(float g) { return __fdiv_rn(g, __fadd_rn(1.0f, expf(-g))); }

/* σ(g) and silu(g) of N values (N ≥ 1), the bits of sigmoid_dev and silu_dev for every g. Each
 * __fdiv_rn is the division's own fast path (the instructions nvcc emits for it: MUFU's reciprocal r0
 * of d = 1 + exp(−g), r = r0 + r0·(1 − d·r0), q0 = a·r, q = q0 + r·(a − d·q0), each step an fma)
 * with its range check (FCHK) and the branch to the slow path left out: per value, that branch and
 * its reconvergence kept the compiler from interleaving the values' dependent chains, and SwiGLU's
 * backward ran issue- and latency-bound. Where the fast path could differ from the division — d not
 * below 2^126 (the reciprocal subnormal; g ≤ −87.5 as bf16, −∞, NaN), |g| not below 2^100 (+∞) or
 * below 2^−100 (zeros: the fma's sign of zero, subnormals) — all N values take sigmoid_dev and
 * silu_dev instead. tests/parity/swiglu_parity checks the bits for every bf16 g, alone and in
 * batches. */
__device__ __forceinline__ float rcp_approx_ftz(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
template <int N>
__device__ __forceinline__ void sigmoid_silu(const float (&g)[N], float (&s)[N], float (&si)[N]) {
    bool exact = false;
#pragma unroll
    for (int j = 0; j < N; j++) {
        const float d = __fadd_rn(1.0f, expf(-g[j]));
        const float r0 = rcp_approx_ftz(d);
        const float r = __fmaf_rn(r0, __fmaf_rn(-d, r0, 1.0f), r0);
        s[j] = __fmaf_rn(r, __fmaf_rn(-d, r, 1.0f), r);
        const float q0 = __fmul_rn(g[j], r);
        si[j] = __fmaf_rn(r, __fmaf_rn(-d, q0, g[j]), q0);
        const float ag = fabsf(g[j]);
        exact |= !(d < 0x1p126f) || !(ag < 0x1p100f) || ag < 0x1p-100f;
    }
    if (exact) {
#pragma unroll
        for (int j = 0; j < N; j++) s[j] = sigmoid_dev(g[j]), si[j] = silu_dev(g[j]);
    }
}

/* h = a·u with a = bf16(silu(g)), before h's bf16 rounding: the forward's element */
__device__ __forceinline__ float swiglu_forward_elem(float a, float u) { return __fmul_rn(a, u); }

__device__ __forceinline__ float swiglu_backward_sig(float g, float u, float dh, float s, float silu, float &dg,
                                                     float &du) {
    const float a = bf16_round_dev(silu);
    const float da = bf16_round_dev(__fmul_rn(dh, u));
    du = __fmul_rn(dh, a);
    /* silu'(g) = s·(1 + g·(1 − s)), the order of aten's silu_backward */
    const float dsilu = __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, s))));
    dg = __fmul_rn(da, dsilu);
    return a;
}
__device__ __forceinline__ float swiglu_backward_elem(float g, float u, float dh, float &dg, float &du) {
    return swiglu_backward_sig(g, u, dh, sigmoid_dev(g), silu_dev(g), dg, du);
}

}  // namespace refine

#endif /* REFINE_GPU_SWIGLU_CUH */
