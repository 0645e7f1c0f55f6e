/* qlora.h — QLoRA and QDoRA linear layers: an NF4 base weight, dequantized to the compute dtype,
 * under the LoRA (ref/lora.h) or DoRA (ref/dora.h) adapter math.
 *
 * Base weight (bitsandbytes Linear4bit, NUMERICS.md §1.7): W (C_out, C_in) stored as NF4 codes
 * `packed` ((C_out·C_in + 1)/2 bytes, high nibble first) with fp32 block absmax (already rebuilt
 * from the double-quantized state by nf4_double_dequantize when nested) and `blocksize`.
 *   ref_qlora_dequant_weight:  w[o,i] = cast( nf4_table[code]·absmax[k / blocksize] ),  k = o·C_in + i
 *   where cast is the rounding to the dtype the dequantized weight is used in: bitsandbytes
 *   dequantizes to quant_state.dtype (the weight's original dtype, usually bf16) and Linear4bit /
 *   PEFT cast that to the input's dtype (`F.linear(x, dequant(W).to(x.dtype), bias)`;
 *   DoRA: `dequantize_module_weight(base_layer).to(x.dtype)`). Both roundings are RNE, and an
 *   fp32 → bf16 → fp32 chain equals one bf16 rounding, so w_dtype = ACT_BF16 when either dtype is
 *   bf16, ACT_F32 when both are fp32. W is frozen: dequantize once, reuse for forward and backward.
 *
 * QLoRA (PEFT lora.Linear over bnb Linear4bit):
 *   forward   y = act( x wᵀ + b )  (ref_linear_forward_naive, OVERWRITES y)
 *             then ref_lora_forward(y, u, ...)  (ACCUMULATES the adapter's s·x_a Aᵀ Bᵀ)
 *   backward  dx = act( dy w )     (OVERWRITES dx; no dW: the base is frozen)
 *             then ref_lora_backward (ACCUMULATES dx, dA, dB)
 * QDoRA (use_dora=True over Linear4bit):
 *   wnorm     ref_dora_weight_norm over the dequantized w (direct form; detached)
 *   forward   y = act( x wᵀ + b ) then ref_dora_forward(y, u, ..., w, b, ..., mag, wnorm)
 *   backward  dx = act( dy w ) then ref_dora_backward (ACCUMULATES dx, dmag, dA, dB)
 * Everything else (scale s, dropout mask, act(), NULL outputs, accumulate/overwrite) is as
 * lora.h / dora.h say. Workspaces: ref_lora_backward_workspace_size(N, R) floats for QLoRA,
 * ref_dora_backward_workspace_size(N, C_out, R) for QDoRA.
 * Shapes: x, x_d, keep, dx (N, C_in); y, dy (N, C_out); u (N, R); w (C_out, C_in);
 *         bias, mag, dmag, wnorm (C_out); A (R, C_in); B (C_out, R).
 * Aliasing: none. Mirrors peft/tuners/lora/bnb.py Linear4bit (LoRA and DoRA variants) over
 * bitsandbytes 0.50 Linear4bit (nf4).
 */
#ifndef REFINE_REF_QLORA_H
#define REFINE_REF_QLORA_H

#include <stddef.h>
#include <stdint.h>

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* w (C_out, C_in) from the NF4 codes and fp32 absmax, rounded to w_dtype. */
void ref_qlora_dequant_weight(float *w, const uint8_t *packed, const float *absmax, int blocksize, int C_in,
                              int C_out, enum act_dtype w_dtype);

void ref_qlora_forward(float *y, float *u, const float *x, const float *x_d, const float *w, const float *bias,
                       const float *lora_a, const float *lora_b, int N, int C_in, int C_out, int R, float scale,
                       enum act_dtype act);

void ref_qlora_backward(float *dx, float *dlora_a, float *dlora_b, const float *dy, const float *x, const float *x_d,
                        const uint8_t *keep, float keep_scale, const float *u, const float *w, const float *lora_a,
                        const float *lora_b, int N, int C_in, int C_out, int R, float scale, enum act_dtype act,
                        float *workspace);

void ref_qdora_forward(float *y, float *u, const float *x, const float *x_d, const float *w, const float *bias,
                       const float *lora_a, const float *lora_b, const float *mag, const float *wnorm, int N,
                       int C_in, int C_out, int R, float scale, enum act_dtype act);

void ref_qdora_backward(float *dx, float *dmag, float *dlora_a, float *dlora_b, const float *dy, const float *x,
                        const float *x_d, const uint8_t *keep, float keep_scale, const float *u, const float *w,
                        const float *lora_a, const float *lora_b, const float *mag, const float *wnorm, int N,
                        int C_in, int C_out, int R, float scale, enum act_dtype act, float *workspace);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_QLORA_H */
