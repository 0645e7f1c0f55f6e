/* fp8_linear.h — the linear layer as refine trains it under --precision fp8: its three products on
 * FP8 operands, and the quantization rules of the recipes (--fp8-recipe). NUMERICS.md §6.6 states
 * the choices and why; ref/fp8.h the formats, the scale rules and the block layouts they build on.
 *
 * Roles and formats: a linear y = x Wᵀ (+ b) has three FP8 tensors, x (its input, E4M3), W (its
 * weight, E4M3) and dy (the gradient of its output): E5M2 under the per-tensor recipes
 * (Transformer Engine's HYBRID format), E4M3 under block scaling (DeepSeek-V3's choice: with a
 * scale per 128 elements, E4M3's precision is kept and E5M2's range is not needed;
 * fp8_role_format).
 *
 * Quantization rules (enum fp8_rule), what ref_fp8_quantize does to x (rows, cols), quantized along
 * cols (the product's reduction dimension K):
 *   FP8_RULE_GIVEN         per tensor with the caller's scale (delayed scaling: the scale the last
 *                          fp8_delayed_update computed; the caller records the returned amax);
 *   FP8_RULE_CURRENT       per tensor, scale = fp8_current_scale(amax(x), f, 0, 0) (TE's
 *                          Float8CurrentScaling defaults: no epsilon, no power-of-two rounding);
 *   FP8_RULE_CURRENT_POW2  per tensor, scale = fp8_current_scale(amax(x), f, 0, 1): the current
 *                          scale rounded down to a power of two (frozen weights, below);
 *   FP8_RULE_BLOCK_1X128   1×128 blocks (activations and gradients), power-of-two block scales;
 *   FP8_RULE_BLOCK_128X128 128×128 blocks (weights), power-of-two block scales (TE's
 *                          Float8BlockScaling defaults; ref/fp8.h's fp8_block_quantize).
 * fp8_rule_for gives the rule of a (recipe, role, weight kind):
 *                     x, dy               trained W            frozen W
 *   delayed           GIVEN               GIVEN                CURRENT_POW2
 *   current           CURRENT             CURRENT              CURRENT_POW2
 *   block             BLOCK_1X128         BLOCK_128X128        BLOCK_128X128
 * A frozen weight's amax never changes, so it is quantized once with its exact scale whatever the
 * recipe, and with power-of-two scales: then dequant(quant(W)) = code·2^k is exactly a bf16 (and
 * an fp32) value, and the one frozen weight W_eff = dequant(quant(W)) serves the FP8 products, the
 * bf16 products that read W (DoRA's row norm, an FP8-stored base under --precision bf16) and the
 * merged export with the same numbers.
 *
 * The transposed copy (q_t, NULL to skip), what the product along the other dimension reads (the
 * K-major operand Hopper's FP8 GEMMs need): per tensor, the same codes transposed (q_t = qᵀ, same
 * scale, counted once); 1×128, a second quantization of xᵀ from x (blocks of 128 rows of x);
 * 128×128, qᵀ with the same block scales. q may be NULL for the per-tensor rules (the transposed
 * copy alone), never for the block rules (ref/fp8.h's fp8_block_quantize writes both).
 *
 * An operand (struct fp8_operand): codes (rows, cols) row-major of one format and its
 * DEQUANTIZATION scales s_inv (ref/fp8.h's layouts): FP8_SCALING_TENSOR s_inv[0] = 1/scale, the
 * block modes one per block. Its value: dq[r,c] = dec(q[r,c])·σ(r,c). The caller owns q
 * (rows·cols bytes) and s_inv (fp8_operand_scale_count floats).
 *
 * The products, A (M, K) and B (P, K) operands quantized along K:
 *   acc[m,p] = Σ_kb σa(m,kb)·σb(p,kb)·Σ_{k in block kb} dec(A[m,k])·dec(B[p,k])   (per tensor: one
 *              block, acc = Σ_k dec·dec times σa·σb)
 *   FP8_PRODUCT_EXACT  ref/fp8.h's ref_fp8_gemm_scaled: every product and every block's sum exact
 *                      in double, the scaled sum rounded once to fp32 (bit-reproducible anywhere);
 *   FP8_PRODUCT_BLAS   the decoded codes (exact fp32 values) through cblas_sgemm one K block at a
 *                      time (the whole K for per-tensor operands), each block's fp32 sum times
 *                      (σa·σb) (fp32) added in fp32 in block order, as the GPU promotes a block's
 *                      partial sum: faster, reproducible on one machine.
 * The linear (x (N, C_in), W (C_out, C_in), dy (N, C_out)):
 *   forward   y[n,o]   = act( acc(x̂, Ŵ)[n,o] + b[o] )        x̂ along C_in, Ŵ (C_out, C_in)       OVERWRITES y
 *   dx        dx[n,i]  = act( acc(dŷ, Ŵᵀ)[n,i] )             dŷ along C_out, Ŵᵀ (C_in, C_out)    OVERWRITES dx
 *   dW        dW[o,i] += acc(dŷᵀ, x̂ᵀ)[o,i]                   dŷᵀ (C_out, N), x̂ᵀ (C_in, N), along N  ACCUMULATES (fp32)
 * bf16 outputs with fp32 accumulation on the GPU: act() rounds y and dx for ACT_BF16; dW stays
 * fp32. The bias gradient is not an FP8 product (ref/linear.h's, on the bf16 dy).
 *
 * Workspace (floats): ref_fp8_product_workspace_size(M, P, K) for a product (FP8_PRODUCT_BLAS: the
 * decoded operands and one block's partial product; the exact path reads none);
 * ref_fp8_linear_workspace_size(N, C_in, C_out) for any of the linear's three (dW adds its
 * product's (C_out, C_in) before accumulating it).
 * Shapes as above; codes and scales of an operand must match its rows/cols and mode (CHECKed).
 * Aliasing: none. Nothing allocates. Mirrors TE's Linear (fp8 autocast, HYBRID) and DeepSeek-V3
 * §3.3's fine-grained quantization.
 */
#ifndef REFINE_REF_FP8_LINEAR_H
#define REFINE_REF_FP8_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "ref/fp8.h"
#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The trainers' --fp8-recipe (index = enum value; NULL-terminated names). */
enum fp8_recipe { FP8_RECIPE_DELAYED = 0, FP8_RECIPE_CURRENT, FP8_RECIPE_BLOCK, FP8_RECIPE_COUNT };
extern const char *const fp8_recipe_names[FP8_RECIPE_COUNT + 1]; /* "delayed", "current", "block" */

/* The three FP8 tensors of a linear and their format: HYBRID (E4M3 forward, E5M2 gradients) for the
 * per-tensor recipes; E4M3 for every tensor under block scaling (DeepSeek-V3 §3.3.2, TE's
 * Float8BlockScaling default: the fine-grained scales give the range E5M2's exponent gave). */
enum fp8_role { FP8_ROLE_X = 0, FP8_ROLE_W = 1, FP8_ROLE_DY = 2, FP8_N_ROLES };

/* Whether a weight trains (full fine-tuning) or is frozen (the adapter methods' base). */
enum fp8_weight_kind { FP8_WEIGHT_TRAINED = 0, FP8_WEIGHT_FROZEN = 1 };

enum fp8_rule {
    FP8_RULE_GIVEN = 0,
    FP8_RULE_CURRENT,
    FP8_RULE_CURRENT_POW2,
    FP8_RULE_BLOCK_1X128,
    FP8_RULE_BLOCK_128X128,
};

enum fp8_rule fp8_rule_for(enum fp8_recipe recipe, enum fp8_role role, enum fp8_weight_kind kind);
static inline enum fp8_format fp8_role_format(enum fp8_recipe recipe, enum fp8_role role) {
    return role == FP8_ROLE_DY && recipe != FP8_RECIPE_BLOCK ? FP8_E5M2 : FP8_E4M3;
}
/* The operand's scale mode under a rule. */
enum fp8_scaling fp8_rule_scaling(enum fp8_rule rule);

struct fp8_operand {
    uint8_t *q;            /* (rows, cols) codes */
    float *s_inv;          /* dequantization scales, fp8_operand_scale_count(mode, rows, cols) */
    enum fp8_scaling mode;
    enum fp8_format format;
    int64_t rows, cols;
};

/* Floats of s_inv for an operand (rows, cols) of this mode (1 per tensor). */
int64_t fp8_operand_scale_count(enum fp8_scaling mode, int64_t rows, int64_t cols);

/* Quantizes x (rows, cols) under rule into q (may be NULL for the per-tensor rules) and its
 * transposed copy q_t (NULL to skip), filling their codes, scales, mode, format and shape. scale
 * is used by FP8_RULE_GIVEN only. st ACCUMULATES (ref/fp8.h: amax, saturated, flags; NULL to
 * discard); a per-tensor rule whose amax is not finite also sets FP8_FLAG_AMAX_NONFINITE (its
 * scale falls back to 1, TE's rule). *amax (NULL to skip) receives this tensor's amax. Returns the
 * tensor's scale: the scale used (per tensor), or for the block rules the scale of the tensor's
 * amax, fp8_current_scale(amax, f, 0, 1) — the smallest of its block scales (for the metrics). */
float ref_fp8_quantize(struct fp8_operand *q, struct fp8_operand *q_t, struct fp8_stats *st, float *amax,
                       const float *x, int64_t rows, int64_t cols, enum fp8_format f, enum fp8_rule rule,
                       float scale);

/* dq = the operand's values (rows, cols) as fp32, dec(q)·σ rounded once to fp32 (exact for
 * power-of-two scales). */
void ref_fp8_dequantize_operand(float *dq, const struct fp8_operand *a);

enum fp8_product { FP8_PRODUCT_EXACT = 0, FP8_PRODUCT_BLAS = 1 };

size_t ref_fp8_product_workspace_size(int M, int P, int K);

/* out (M, P) = acc(a, b) as fp32, OVERWRITTEN; a (M, K), b (P, K). */
void ref_fp8_product(float *out, const struct fp8_operand *a, const struct fp8_operand *b, int M, int P, int K,
                     enum fp8_product how, float *workspace);

size_t ref_fp8_linear_workspace_size(int N, int C_in, int C_out);

void ref_fp8_linear_forward(float *y, const struct fp8_operand *x, const struct fp8_operand *w, const float *b, int N,
                            int C_in, int C_out, enum fp8_product how, enum act_dtype act, float *workspace);
void ref_fp8_linear_backward_dx(float *dx, const struct fp8_operand *dy, const struct fp8_operand *w_t, int N,
                                int C_in, int C_out, enum fp8_product how, enum act_dtype act, float *workspace);
void ref_fp8_linear_backward_dw(float *dw, const struct fp8_operand *dy_t, const struct fp8_operand *x_t, int N,
                                int C_in, int C_out, enum fp8_product how, float *workspace);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_FP8_LINEAR_H */
