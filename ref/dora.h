/* dora.h — the DoRA adapter of a linear layer (PEFT lora.Linear with use_dora=True), forward,
 * backward, and the detached row norm in its two forms (NUMERICS.md §2.2).
 *
 * Notation as in ref/lora.h: W (C_out, C_in) frozen base weight, optional bias b (C_out) (frozen),
 * A = lora_a (R, C_in), B = lora_b (C_out, R), scale s (α/R or α/√R, ref_lora_scale), magnitude
 * m = mag (C_out) (PEFT's lora_magnitude_vector.weight), x (N, C_in), x_a the adapter input
 * (x_d = dropout(x) when given, else x; mask conventions exactly as in ref/lora.h).
 *
 * Row norm (detached: a constant for backprop, DoRA paper §4.3):
 *   n[o] = ‖ W[o,:] + s·(B A)[o,:] ‖₂                                      wnorm (C_out), fp32
 *   direct form   ref_dora_weight_norm: forms each row of W' = W + s·BA as PEFT does —
 *                 (BA)[o,i] = Σ_r B[o,r]·A[r,i] (double, rounded to fp32), t = s·(BA) fp32,
 *                 W'[o,i] = W[o,i] + t fp32 — then n = sqrt(Σ_i W'² in double), rounded once.
 *                 PEFT: get_weight_norm(W, lora_B(lora_A(I)).T, scaling) = linalg.norm(dim=1).
 *                 With B = 0 this is ‖W_row‖, PEFT's initial magnitude: use it to init m.
 *   factored form ref_dora_weight_norm_factored: never forms W + sBA; with ‖W_o‖² precomputed once
 *                 (W is frozen) by ref_dora_weight_sq,
 *                 n[o]² = ‖W_o‖² + 2s·(W Aᵀ)[o,:]·B[o,:] + s²·B[o,:] (A Aᵀ) B[o,:]ᵀ
 *                 all in double (A Aᵀ computed once per call into the workspace), negative values
 *                 from cancellation clamped to 0, n = sqrt rounded once to fp32. This is the form
 *                 the GPU uses (DESIGN.md, "Speed"). Accuracy: with the cancellation factor
 *                 κ = ‖ |W_o| + |s(BA)_o| ‖ / ‖W_o + s(BA)_o‖ ≥ 1, the direct n is within ~3κ·u
 *                 (u = 2⁻²⁴) relative of the exact norm, the factored one within ~κ²·u/2 (the fp32
 *                 ‖W_o‖² is rounded once); for κ ≈ 1 (sBA small against W, as in training) both
 *                 agree to a few ulps.
 * The caller computes n once per step (it depends on W, A, B only) and passes it to forward and
 * backward. Precondition: n[o] > 0 (as in PEFT, a zero row gives Inf/NaN).
 *
 * Forward, mns[o] = m[o] / n[o] (fp32), updating y in place like PEFT's
 * `result = result + lora_magnitude_vector(x, ...)` (DoraLinearVariant.forward):
 *   on entry y[n,o] = result = x Wᵀ + b (ref_linear_forward with the bias)   y ACCUMULATES
 *   u[n,r]  = act( Σ_i x_a[n,i]·A[r,i] )                          u (N, R) OVERWRITTEN, saved
 *   l[n,o]  = Σ_r u[n,r]·B[o,r]                                   fp32
 *   base[n,o] = y[n,o] − b[o]  (or y[n,o] when b = NULL)          no dropout: PEFT's result − bias
 *             = Σ_i x_d[n,i]·W[o,i]                               dropout: F.linear(dropout(x), W)
 *   y[n,o]  = act( y[n,o] + ( (mns[o] − 1)·base[n,o] + (mns[o]·l[n,o])·s ) )
 * Without dropout this is b + mns⊙(x Wᵀ + s·x Aᵀ Bᵀ). With dropout the first term of `result`
 * still sees the undropped x, so it is not a clean rescaling (PEFT's semantics, kept as they are).
 *
 * Backward, for dy (N, C_out) (autograd of the forward with n constant):
 *   gl[n,o]   = (dy[n,o]·s)·mns[o]                                 fp32
 *   dB[o,r]  += Σ_n gl[n,o]·u[n,r]                                 dlora_b ACCUMULATES
 *   du[n,r]   = Σ_o gl[n,o]·B[o,r]                                 fp32, workspace
 *   dA[r,i]  += Σ_n du[n,r]·x_a[n,i]                               dlora_a ACCUMULATES
 *   dm[o]    += ( Σ_n [ dy[n,o]·base'[n,o] + (dy[n,o]·s)·l[n,o] ] ) / n[o]   dmag ACCUMULATES
 *               base' = Σ_i x_a[n,i]·W[o,i] recomputed (the forward's base up to the rounding of
 *               result − bias; l recomputed from the saved u)
 *   dx[n,i]   = act( dx[n,i] + mask( Σ_o ((mns[o] − 1)·dy[n,o])·W[o,i] + Σ_r du[n,r]·A[r,i] ) )
 *               dx ACCUMULATES onto the base layer's dx = dy W (ref_linear_backward with the
 *               unscaled dy); without dropout the total is (mns⊙dy) W + s·(mns⊙dy) B A.
 * Composition is the same as LoRA's: base linear first (forward with bias, backward OVERWRITING
 * dx with dy W, no dW/db since W and b are frozen), then this op adds its share. Any of dx, dmag,
 * dlora_a, dlora_b may be NULL to skip it. Sums in double in index order; act() as in lora.h
 * (u, y, dx rounded for ACT_BF16; parameter gradients fp32).
 *
 * Workspace: ref_dora_backward_workspace_size(N, C_out, R) floats (du, mns);
 *            ref_dora_weight_norm_factored_workspace_size(C_out, R) doubles (W Aᵀ and A Aᵀ).
 * Shapes: x, x_d, keep, dx (N, C_in); y, dy (N, C_out); u (N, R); w (C_out, C_in);
 *         bias, mag, dmag, wnorm, w_sq (C_out).
 * Aliasing: none. Mirrors peft/tuners/lora/dora.py DoraLinearLayer.forward / get_weight_norm and
 * lora/variants.py DoraLinearVariant.forward (peft 0.21).
 */
#ifndef REFINE_REF_DORA_H
#define REFINE_REF_DORA_H

#include <stddef.h>
#include <stdint.h>

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Direct form: wnorm[o] = ‖W[o,:] + s·(BA)[o,:]‖₂ (C_out), forming each row of W + sBA. */
void ref_dora_weight_norm(float *wnorm, const float *w, const float *lora_a, const float *lora_b, int C_in,
                          int C_out, int R, float scale);

/* w_sq[o] = Σ_i W[o,i]² (double sum, rounded to fp32), computed once for a frozen W. */
void ref_dora_weight_sq(float *w_sq, const float *w, int C_in, int C_out);

/* Doubles of scratch ref_dora_weight_norm_factored needs. */
size_t ref_dora_weight_norm_factored_workspace_size(int C_out, int R);

/* Factored form of ref_dora_weight_norm from w_sq, W Aᵀ and A Aᵀ (never forms W + sBA). */
void ref_dora_weight_norm_factored(float *wnorm, const float *w_sq, const float *w, const float *lora_a,
                                   const float *lora_b, int C_in, int C_out, int R, float scale,
                                   double *workspace);

void ref_dora_forward(float *y, float *u, const float *x, const float *x_d, const float *w, const float *bias,
                      const float *lora_a, const float *lora_b, const float *mag, const float *wnorm, int N,
                      int C_in, int C_out, int R, float scale, enum act_dtype act);

/* Floats of scratch ref_dora_backward needs. */
size_t ref_dora_backward_workspace_size(int N, int C_out, int R);

void ref_dora_backward(float *dx, float *dmag, float *dlora_a, float *dlora_b, const float *dy, const float *x,
                       const float *x_d, const uint8_t *keep, float keep_scale, const float *u, const float *w,
                       const float *lora_a, const float *lora_b, const float *mag, const float *wnorm, int N,
                       int C_in, int C_out, int R, float scale, enum act_dtype act, float *workspace);

/* What the backward's first step reads for the magnitude gradient: the pre-magnitude output z, or
 * the output y itself where y = mns⊙z exactly in real arithmetic (a linear without bias, no dropout)
 * and the layer keeps y anyway (ref/llama.h, llama_dora_saved). Then z/n = y/m, so dm needs no
 * saved z; the two differ by the rounding of the tensor saved (NUMERICS.md §2.2). */
enum dora_saved { DORA_SAVED_Z = 0, DORA_SAVED_Y = 1 };

/* The backward's first step alone, as gpu_dora_rescale_bf16 does it, for callers that run the base
 * and LoRA products themselves (the FP8 linears: ref/llama.h): with saved (N, C_out) of kind
 *   DORA_SAVED_Z  z, the pre-magnitude output the forward formed (x Wᵀ + s·x Aᵀ Bᵀ, base − bias):
 *                 dm[o] += (Σ_n dy[n,o]·z[n,o]) / n[o]
 *   DORA_SAVED_Y  y = mns⊙z, the output (bias-free):  dm[o] += (Σ_n dy[n,o]·y[n,o]) / m[o]
 *                 (precondition m[o] ≠ 0: a zero magnitude gives a non-finite dm)
 * each a double sum in n order, divided in double, added to the fp32 dmag once   dmag ACCUMULATES
 *   dy_s[n,o] = act(mns[o]·dy[n,o]),  mns = m/n   (fp32)                       dy_s OVERWRITTEN
 * after which dx = dy_s W (the base path) and ref_lora_backward with dy_s for dy give the rest
 * (without dropout, the same as ref_dora_backward up to rounding). dmag may be NULL. */
void ref_dora_rescale(float *dy_s, float *dmag, const float *dy, const float *saved, enum dora_saved kind,
                      const float *mag, const float *wnorm, int N, int C_out, enum act_dtype act);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_DORA_H */
