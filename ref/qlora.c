/* qlora.c — QLoRA / QDoRA linear layers over an NF4 base weight (qlora.h). */
#include "ref/qlora.h"

#include "io/check.h"
#include "ref/dora.h"
#include "ref/linear.h"
#include "ref/lora.h"
#include "ref/nf4.h"

void ref_qlora_dequant_weight(float *w, const uint8_t *packed, const float *absmax, int blocksize, int C_in,
                              int C_out, enum act_dtype w_dtype) {
    CHECK(C_in > 0 && C_out > 0 && blocksize > 0, "qlora dequant: C_in=%d C_out=%d blocksize=%d", C_in, C_out,
          blocksize);
    nf4_dequantize(w, packed, absmax, (int64_t)C_out * C_in, blocksize, w_dtype);
}

void ref_qlora_forward(float *y, float *u, const float *x, const float *x_d, const float *w, const float *bias,
                       const float *lora_a, const float *lora_b, int N, int C_in, int C_out, int R, float scale,
                       enum act_dtype act) {
    ref_linear_forward_naive(y, x, w, bias, N, C_in, C_out, act);
    ref_lora_forward(y, u, x, x_d, lora_a, lora_b, N, C_in, C_out, R, scale, act);
}

void ref_qlora_backward(float *dx, float *dlora_a, float *dlora_b, const float *dy, const float *x, const float *x_d,
                        const uint8_t *keep, float keep_scale, const float *u, const float *w, const float *lora_a,
                        const float *lora_b, int N, int C_in, int C_out, int R, float scale, enum act_dtype act,
                        float *workspace) {
    if (dx) ref_linear_backward_naive(dx, NULL, NULL, dy, x, w, N, C_in, C_out, act);
    ref_lora_backward(dx, dlora_a, dlora_b, dy, x, x_d, keep, keep_scale, u, lora_a, lora_b, N, C_in, C_out, R, scale,
                      act, workspace);
}

void ref_qdora_forward(float *y, float *u, const float *x, const float *x_d, const float *w, const float *bias,
                       const float *lora_a, const float *lora_b, const float *mag, const float *wnorm, int N,
                       int C_in, int C_out, int R, float scale, enum act_dtype act) {
    ref_linear_forward_naive(y, x, w, bias, N, C_in, C_out, act);
    ref_dora_forward(y, u, x, x_d, w, bias, lora_a, lora_b, mag, wnorm, N, C_in, C_out, R, scale, act);
}

void ref_qdora_backward(float *dx, float *dmag, float *dlora_a, float *dlora_b, const float *dy, const float *x,
                        const float *x_d, const uint8_t *keep, float keep_scale, const float *u, const float *w,
                        const float *lora_a, const float *lora_b, const float *mag, const float *wnorm, int N,
                        int C_in, int C_out, int R, float scale, enum act_dtype act, float *workspace) {
    if (dx) ref_linear_backward_naive(dx, NULL, NULL, dy, x, w, N, C_in, C_out, act);
    ref_dora_backward(dx, dmag, dlora_a, dlora_b, dy, x, x_d, keep, keep_scale, u, w, lora_a, lora_b, mag, wnorm, N,
                      C_in, C_out, R, scale, act, workspace);
}
