/* adamw.c — torch.optim.AdamW's single-tensor step and clip_grad_norm_ (adamw.h). */
#include "ref/adamw.h"

#include <math.h>
#include <stddef.h>

#include "io/check.h"

const char *const optimizer_names[OPTIMIZER_COUNT + 1] = {"adamw", "adamw8bit", NULL};

void ref_adamw_step(float *param, float *m, float *v, const float *grad, int64_t n, int64_t t,
                    const struct adamw_hparams *hp) {
    CHECK(t >= 1, "AdamW step t=%lld must be >= 1", (long long)t);
    CHECK(n >= 0, "n=%lld", (long long)n);
    /* Scalars as Python floats (double), each rounded to fp32 where it meets a tensor. */
    const double step = (double)t; /* torch: step_t.item() of an fp32 tensor, exact below 2^24 */
    const float decay = (float)(1.0 - hp->lr * hp->weight_decay);
    const float w1 = (float)(1.0 - hp->beta1);
    const float b2 = (float)hp->beta2;
    const float w2 = (float)(1.0 - hp->beta2);
    const double bc1 = 1.0 - pow(hp->beta1, step);
    const double bc2 = 1.0 - pow(hp->beta2, step);
    const float neg_step_size = (float)(-(hp->lr / bc1));
    const float bc2_sqrt = (float)pow(bc2, 0.5);
    const float eps = (float)hp->eps;
    for (int64_t j = 0; j < n; j++) {
        float p = param[j], g = grad[j];
        if (hp->weight_decay != 0.0) p = p * decay;     /* 1. param.mul_(1 - lr*wd) */
        float mj = fmaf(w1, g - m[j], m[j]);             /* 2. exp_avg.lerp_(grad, 1 - beta1) */
        float vj = v[j] * b2;                            /* 3. exp_avg_sq.mul_(beta2) */
        vj = fmaf(w2 * g, g, vj);                        /*    .addcmul_(grad, grad, value=1 - beta2) */
        float denom = sqrtf(vj) / bc2_sqrt + eps;        /* 5. (sqrt(v) / bc2_sqrt).add_(eps) */
        p = p + (neg_step_size * mj) / denom;            /* 6. param.addcdiv_(m, denom, value=-step_size) */
        param[j] = p;
        m[j] = mj;
        v[j] = vj;
    }
}

float ref_grad_total_norm(const float *const *grads, const int64_t *numel, int n_tensors) {
    CHECK(n_tensors >= 0, "n_tensors=%d", n_tensors);
    double total2 = 0.0;
    for (int k = 0; k < n_tensors; k++) {
        if (grads[k] == NULL) continue;
        double s = 0.0;
        for (int64_t j = 0; j < numel[k]; j++) s += (double)grads[k][j] * (double)grads[k][j];
        float norm_k = (float)sqrt(s); /* _foreach_norm returns the grad dtype */
        total2 += (double)norm_k * (double)norm_k;
    }
    return (float)sqrt(total2);
}

float ref_clip_coef(float total_norm, double max_norm) {
    float coef = (float)max_norm / (total_norm + 1e-6f);
    /* clamp(max=1.0): torch's clamp propagates NaN. */
    return coef > 1.0f ? 1.0f : coef;
}

void ref_grad_scale(float *const *grads, const int64_t *numel, int n_tensors, float coef) {
    for (int k = 0; k < n_tensors; k++) {
        if (grads[k] == NULL) continue;
        for (int64_t j = 0; j < numel[k]; j++) grads[k][j] = grads[k][j] * coef;
    }
}

float ref_clip_grad_norm(float *const *grads, const int64_t *numel, int n_tensors, double max_norm) {
    float total = ref_grad_total_norm((const float *const *)grads, numel, n_tensors);
    ref_grad_scale(grads, numel, n_tensors, ref_clip_coef(total, max_norm));
    return total;
}
