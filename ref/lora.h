/* lora.h — the LoRA adapter of a linear layer (PEFT lora.Linear), forward, backward and init.
 *
 * This header states refine's scale convention once (STYLE.md): the adapter adds
 *     s · dropout(x) Aᵀ Bᵀ,   s = α / R  (LORA_SCALE_STANDARD)  or  α / √R  (LORA_SCALE_RSLORA)
 * to the base layer's output y = x Wᵀ (+ b). A = lora_a (R, C_in), B = lora_b (C_out, R),
 * row-major, PEFT's lora_A.weight and lora_B.weight as stored in adapter_model.safetensors.
 * s is computed in double from the user's α and rounded once to fp32 (PEFT keeps
 * `lora_alpha / r` as a Python float; multiplying an fp32 tensor by it rounds it to fp32).
 *
 * Dropout. The adapter reads x_a = dropout(x). This op does not draw the mask (ref/dropout.h
 * does, with its counter-based RNG): the caller passes the already dropped input x_d (N, C_in),
 * or x_d = NULL when p = 0 (PEFT's nn.Identity), in which case x_a = x. For the backward the
 * caller passes the same mask as `keep` (N, C_in) bytes, 1 = kept, 0 = dropped, and
 * keep_scale = 1.0f / (float)(1 − p) (torch: input · noise with noise = 1/(1−p) in fp32, and
 * grad · noise in backward); keep = NULL when p = 0. x_d must equal x·keep_scale where kept and
 * 0 where dropped: ref_dropout_mask gives `keep` and ref_dropout_forward gives x_d (ref/dropout.h,
 * scale fp32(1/(1−p)) as here).
 *
 * Forward (torch order: lora_B(lora_A(x_a)) * scaling, then result + that):
 *   u[n,r]  = act( Σ_i x_a[n,i]·A[r,i] )                  u (N, R) OVERWRITTEN, saved for backward
 *   l[n,o]  = Σ_r u[n,r]·B[o,r]                            fp32 (double sum, rounded once)
 *   y[n,o]  = act( y[n,o] + l[n,o]·s )                     y (N, C_out) ACCUMULATES: on entry it
 *                                                          holds the base output x Wᵀ (+ b)
 * Backward, for the upstream gradient dy (N, C_out) of y:
 *   g[n,o]   = dy[n,o]·s                                   fp32
 *   dB[o,r] += Σ_n g[n,o]·u[n,r]                           dlora_b (C_out, R) ACCUMULATES
 *   du[n,r]  = Σ_o g[n,o]·B[o,r]                           fp32, in the workspace
 *   dA[r,i] += Σ_n du[n,r]·x_a[n,i]                        dlora_a (R, C_in) ACCUMULATES
 *   dx[n,i]  = act( dx[n,i] + mask( Σ_r du[n,r]·A[r,i] ) ) dx (N, C_in) ACCUMULATES onto the
 *                                                          base layer's input gradient
 *   where mask(t) = t·keep_scale where keep = 1, 0 where keep = 0, t when keep = NULL.
 * Composition in a block: ref_linear_forward(y, ...) then ref_lora_forward(y, ...);
 * ref_linear_backward(dx, NULL, NULL, dy, ...) (OVERWRITES dx = dy W, W frozen) then
 * ref_lora_backward(dx, ...) (adds the adapter's share). The adapter's parameter gradients
 * accumulate like every parameter gradient (micro-batch accumulation is free); dx accumulates
 * here only because it is the second half of one layer's input gradient. Any of dx, dlora_a,
 * dlora_b may be NULL to skip it (a frozen B gets no dB; the first layer needs no dx).
 * All sums are in double in index order (bit-reproducible); act() is the identity for ACT_F32
 * and bf16 rounding of the stored value for ACT_BF16 (u, y, dx; parameter gradients stay fp32).
 *
 * Init (PEFT init_lora_weights=True, reset_lora_parameters): A ~ kaiming_uniform_(a=√5), which
 * is U(−1/√C_in, 1/√C_in) (NUMERICS.md §2.1), B = 0. Our draws come from the caller's uniform
 * generator, not torch's, so the values differ from PEFT's; the distribution is the same:
 *   A[r,i] = (float)((2·uniform01(ctx) − 1)·(1/√C_in)) in double, row-major order; B = 0.
 *
 * Workspace: ref_lora_backward_workspace_size(N, R) floats (du).
 * Shapes: x, x_d (N, C_in); keep (N, C_in) uint8; y, dy (N, C_out); u (N, R); dx (N, C_in).
 * Aliasing: none (y and dx are read-modify-write and must not alias any input).
 * Mirrors peft/tuners/lora/layer.py Linear.forward and the autograd of that expression.
 */
#ifndef REFINE_REF_LORA_H
#define REFINE_REF_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

enum lora_scaling {
    LORA_SCALE_STANDARD = 0, /* s = α / R        (PEFT default) */
    LORA_SCALE_RSLORA = 1,   /* s = α / √R       (use_rslora=True) */
};

/* s as PEFT computes it (double), rounded to fp32. */
float ref_lora_scale(double alpha, int R, enum lora_scaling mode);

/* A uniform in ±1/√C_in from uniform01 (each call returns a double in [0, 1)); B zero. */
void ref_lora_init(float *lora_a, float *lora_b, int C_in, int C_out, int R, double (*uniform01)(void *ctx),
                   void *ctx);

void ref_lora_forward(float *y, float *u, const float *x, const float *x_d, const float *lora_a,
                      const float *lora_b, int N, int C_in, int C_out, int R, float scale, enum act_dtype act);

/* Floats of scratch ref_lora_backward needs. */
size_t ref_lora_backward_workspace_size(int N, int R);

void ref_lora_backward(float *dx, float *dlora_a, float *dlora_b, const float *dy, const float *x,
                       const float *x_d, const uint8_t *keep, float keep_scale, const float *u,
                       const float *lora_a, const float *lora_b, int N, int C_in, int C_out, int R, float scale,
                       enum act_dtype act, float *workspace);

/* dA[r,i] += Σ_n du[n,r]·x_a[n,i] (double sum in n order), dlora_a (R, C_in), du (N, R),
 * x_a (N, C_in): the step LoRA and DoRA share. */
void ref_adapter_grad_a(float *dlora_a, const float *du, const float *xa, int N, int C_in, int R);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_LORA_H */
