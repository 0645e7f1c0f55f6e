/* rmsnorm.h — RMSNorm forward and backward, HF LlamaRMSNorm order (NUMERICS.md §7.1).
 *
 * Forward, for each row i of x (N, C):
 *   rstd[i]  = 1 / sqrt( (1/C)·Σ_c x[i,c]² + eps )     sum in double, rstd stored as fp32
 *   n[i,c]   = act( x[i,c] · rstd[i] )                 fp32 product, then rounded to the
 *                                                       activation dtype (HF: .to(input_dtype))
 *   out[i,c] = act( n[i,c] · w[c] )                    HF multiplies in the input dtype
 * where act() is the identity for ACT_F32 and bf16_round for ACT_BF16. Mirrors
 * transformers LlamaRMSNorm.forward and Meta's `_norm(x.float()).type_as(x) * weight`.
 *
 * Residual form (the GPU fuses the residual add into the norm):
 *   res_out[i,c] = act( res_in[i,c] + delta[i,c] ), then out/rstd = forward(res_out).
 *
 * Backward (autograd of the forward, each rounding straight-through):
 *   n̂      = x·rstd (unrounded)             dn = dy ⊙ w   (fp32)
 *   dw[c] += Σ_i dy[i,c] · act(n̂[i,c])      ACCUMULATES (parameter gradient), sum in double
 *   dx     = act( rstd · (dn − n̂ · (1/C)Σ_c dn·n̂) )   OVERWRITES (activation gradient),
 *                                                       row sum in double
 * dw may be NULL when the norm weight is frozen (LoRA): then only dx is computed.
 *
 * Residual backward (the GPU fuses the residual-stream gradient into the norm's backward):
 *   dx = act( dres + rstd · (dn − n̂ · (1/C)Σ_c dn·n̂) ), the sum taken in fp32 before the one
 *   rounding; dres is the gradient arriving along the residual stream.
 *
 * Shapes: x, out, dy, dx, res_in, delta, res_out (N, C); w, dw (C); rstd (N), fp32.
 * Aliasing: none of the arrays may alias, except dx == dy and dx == dres (each row of dy and dres
 * is fully read before its row of dx is written).
 */
#ifndef REFINE_REF_RMSNORM_H
#define REFINE_REF_RMSNORM_H

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

void ref_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps,
                         enum act_dtype act);

void ref_rmsnorm_residual_forward(float *res_out, float *out, float *rstd, const float *res_in,
                                  const float *delta, const float *w, int N, int C, float eps,
                                  enum act_dtype act);

void ref_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                          const float *rstd, int N, int C, enum act_dtype act);

void ref_rmsnorm_residual_backward(float *dx, float *dw, const float *dy, const float *dres, const float *x,
                                   const float *w, const float *rstd, int N, int C, enum act_dtype act);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_RMSNORM_H */
