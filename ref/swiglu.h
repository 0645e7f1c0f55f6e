/* swiglu.h — the activation of the Llama MLP: out = silu(gate) ⊙ up, forward and backward.
 *
 * HF LlamaMLP.forward computes down_proj(act_fn(gate_proj(x)) * up_proj(x)) (NUMERICS §7.1);
 * this op is the part between the projections. With
 *   σ(g)    = 1 / (1 + e^(−g)),   silu(g) = g·σ(g)   (torch.nn.functional.silu)
 * Forward:
 *   a[n,f]   = act( silu(gate[n,f]) )                  torch rounds silu's result to the tensor dtype
 *   out[n,f] = act( a[n,f] · up[n,f] )                 then the product, rounded again
 * Backward (autograd of the above; each rounding straight-through, torch's silu_backward):
 *   dup[n,f]   = act( dout[n,f] · a[n,f] )
 *   da[n,f]    = act( dout[n,f] · up[n,f] )
 *   dgate[n,f] = act( da[n,f] · σ(g)·(1 + g·(1 − σ(g))) )
 * dgate and dup OVERWRITE (activation gradients). act() is the identity for ACT_F32 and bf16 RNE
 * for ACT_BF16, at exactly the points where eager torch on bf16 tensors rounds, so the bf16 path
 * reproduces HF bit for bit up to the last-ulp accuracy of exp. Each line above is evaluated in
 * double (σ, silu, silu' and the products) and rounded once to fp32 before act() (torch evaluates
 * x / (1 + exp(−x)) in fp32: within a few fp32 ulps of this).
 *
 * Layout: gate and up are read with a row stride `ld` (elements), so one op serves both forms:
 *   separate arrays  gate (N, F), up (N, F)           ld = F
 *   fused buffer     gu (N, 2F), row n = [gate_n | up_n]  gate = gu, up = gu + F, ld = 2F
 *     (the output of one GEMM with the stacked weight [W_gate; W_up] (2F, C))
 * dgate / dup are written with the same stride ld (a fused buffer receives [dgate_n | dup_n],
 * ready for the one backward GEMM). out and dout are (N, F) contiguous.
 * Preconditions: N ≥ 0, F ≥ 1, ld ≥ F; in the fused form ld ≥ 2F is the caller's business.
 * Aliasing: out must not overlap gate/up. dgate may alias gate and dup may alias up exactly
 * (each element is read before it is written); dout must not overlap dgate/dup.
 */
#ifndef REFINE_REF_SWIGLU_H
#define REFINE_REF_SWIGLU_H

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

void ref_swiglu_forward(float *out, const float *gate, const float *up, int N, int F, int ld, enum act_dtype act);

void ref_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,
                         int F, int ld, enum act_dtype act);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_SWIGLU_H */
