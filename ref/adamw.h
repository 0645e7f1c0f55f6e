/* adamw.h — torch.optim.AdamW (single-tensor path) and torch.nn.utils.clip_grad_norm_
 * (NUMERICS.md §5.1, §5.3).
 *
 * AdamW, one step t (t = 1 on the first step; torch increments `step` before using it) on one
 * tensor of n elements, every elementwise op in fp32 in exactly this order, each scalar computed
 * in double (torch computes them as Python floats) and rounded once to fp32 where it meets a
 * tensor (torch: _single_tensor_adam with decoupled_weight_decay=True, amsgrad=False,
 * maximize=False, torch/optim/adam.py, torch 2.x):
 *   1. p  = p · f32(1 − lr·wd)                               param.mul_(1 - lr*weight_decay)
 *   2. m  = fma(f32(1 − β1), g − m, m)                       exp_avg.lerp_(grad, 1 - beta1)
 *                                                            (ATen lerp, weight < 0.5 branch)
 *   3. v  = v · f32(β2);  v = fma(f32(1 − β2)·g, g, v)       exp_avg_sq.mul_(beta2)
 *                                                              .addcmul_(grad, grad, value=1 - beta2)
 *   4. bc1 = 1 − β1^t, bc2 = 1 − β2^t, step_size = lr / bc1, bc2_sqrt = bc2^0.5   (double)
 *   5. denom = sqrt(v) / f32(bc2_sqrt) + f32(eps)            (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
 *   6. p  = p + (f32(−step_size)·m) / denom                  param.addcdiv_(exp_avg, denom,
 *                                                                           value=-step_size)
 *      (ATen's addcdiv evaluates self + value·t1 / t2 left to right.)
 * The two fma() are explicit fmaf calls (correctly rounded, so still bit-reproducible under
 * -ffp-contract=off; nothing else is fused): torch's CPU kernels compute lerp and addcmul with a
 * vector fmadd (m + w·(g − m) and v + (value·g)·g, one rounding each), and CUDA contracts the same
 * expressions; a dump of torch 2.15 on 4096 elements matched the fused forms on every element and
 * the unfused ones on only 88% (lerp) and 95% (addcmul). The remaining differences from torch's CPU
 * step come from its vectorized sqrt, which is not correctly rounded (0.6% of elements differ by
 * an ulp from sqrtf): the golden test (tests/golden/adamw_golden_test.c) bounds the drift.
 * Step 1 is skipped when wd = 0 (torch skips the multiply too). m and v start at zero.
 * param, m, v (n) are updated in place (they are the state, not gradients); grad (n) is read.
 * Aliasing: none of the four arrays may alias.
 *
 * clip_grad_norm_ over a list of tensors (norm_type 2, error_if_nonfinite=False, foreach):
 *   norm_k  = f32( sqrt(Σ_j g_k[j]²) )           per tensor (double sum), returned in fp32 as
 *                                                 torch's _foreach_norm returns the grad dtype
 *   total   = f32( sqrt(Σ_k norm_k²) )           vector_norm of the stacked per-tensor norms
 *   coef    = min( f32(max_norm) / (total + f32(1e-6)), 1 )   fp32, clamp(max=1.0)
 *   g_k    *= coef for every tensor, unconditionally (a multiply by 1 when nothing is clipped)
 * Returns total (the norm before clipping). NaN/Inf propagate into coef and the gradients as in
 * torch. A NULL entry in grads is a parameter without a gradient and is skipped.
 * The data-parallel trainer computes the norm of the all-reduced gradients, so the three pieces
 * are exposed separately as well.
 */
#ifndef REFINE_REF_ADAMW_H
#define REFINE_REF_ADAMW_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The AdamW hyper-parameters, as the user gives them (Python floats in torch): double. The one
 * definition every optimizer of refine takes (this file, ref/adamw8bit.h, gpu/adamw.h,
 * gpu/adamw8bit.h) and every engine receives (struct optim_step below). */
struct adamw_hparams {
    double lr;
    double beta1;
    double beta2;
    double eps;
    double weight_decay;
};

/* The trainers' --optimizer: torch's AdamW with fp32 moments, or bitsandbytes' 8-bit blockwise
 * AdamW (ref/adamw8bit.h). */
enum optimizer_kind { OPTIMIZER_ADAMW = 0, OPTIMIZER_ADAMW8BIT, OPTIMIZER_COUNT };
extern const char *const optimizer_names[OPTIMIZER_COUNT + 1]; /* "adamw", "adamw8bit", NULL */

/* One optimizer step as the training loop hands it to an engine (train/engine.h) and the GPU
 * model to its optimizers: t, the hyper-parameters of this step (lr from the schedule), and the
 * global-norm clipping threshold (≤ 0: no clipping). */
struct optim_step {
    int64_t step; /* t ≥ 1 */
    struct adamw_hparams hp;
    double clip;
};

/* One AdamW step t ≥ 1 on one tensor. */
void ref_adamw_step(float *param, float *m, float *v, const float *grad, int64_t n, int64_t t,
                    const struct adamw_hparams *hp);

/* total = ‖(‖g_0‖, ‖g_1‖, ...)‖₂ over n_tensors tensors (grads[k] NULL: skipped). */
float ref_grad_total_norm(const float *const *grads, const int64_t *numel, int n_tensors);

/* min(f32(max_norm) / (total + 1e-6f), 1) in fp32. */
float ref_clip_coef(float total_norm, double max_norm);

/* g_k *= coef for every tensor. */
void ref_grad_scale(float *const *grads, const int64_t *numel, int n_tensors, float coef);

/* torch.nn.utils.clip_grad_norm_(params, max_norm): the three above in turn; returns total. */
float ref_clip_grad_norm(float *const *grads, const int64_t *numel, int n_tensors, double max_norm);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_ADAMW_H */
