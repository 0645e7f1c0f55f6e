/* cross_entropy.h — the causal-LM loss: cross-entropy with ignore_index −100, averaged over the
 * valid tokens of the whole batch; a plain form on given logits and a fused lm_head + loss form
 * that never materializes the (N, V) logits.
 *
 * Mirrors transformers ForCausalLMLoss (loss/loss_utils.py; NUMERICS §7.4): logits upcast to
 * fp32, F.cross_entropy(ignore_index=−100, reduction="sum") / num_items_in_batch, i.e. the mean
 * over the non-ignored targets of the whole batch (reduction="mean" when one micro-batch is the
 * batch). The label SHIFT is the caller's: labels[n] is the target predicted at row n (the model
 * passes labels[b, t+1] for row (b, t) and −100 for the last position of each sequence).
 *
 * For each row n with labels[n] = y ≠ −100 (a "valid" row):
 *   lse[n]  = log Σ_v exp(z[n,v])                           in double (max-shifted)
 *   nll[n]  = lse[n] − z[n,y]
 *   loss    = Σ_valid nll[n] / n_valid_total                 double, OVERWRITTEN
 *   dz[n,v] = act( grad_scale / n_valid_total · (exp(z[n,v] − lse[n]) − [v = y]) )
 * and dz[n,:] = 0 for ignored rows (their nll contributes nothing). n_valid_total is the number of
 * valid labels in the whole optimizer batch (HF's num_items_in_batch), passed by the caller, so
 * that summing `loss` and the gradients over micro-batches gives the batch mean exactly as HF
 * does under gradient accumulation. grad_scale is the upstream gradient of the loss (1 normally).
 * Preconditions (CHECK): n_valid_total ≥ 1 (HF returns NaN when every label is ignored: the
 * caller skips such a batch), each label in [0, V) or −100.
 *
 * Plain form (the oracle; logits given):
 *   ref_cross_entropy_forward:  loss, and lse (N) when non-NULL (ignored rows get lse too).
 *   ref_cross_entropy_backward: dlogits (N, V) OVERWRITTEN (dlogits may alias logits exactly).
 *
 * Fused form (lm_head GEMM + loss + both gradients, DESIGN "cross_entropy ... chunked"):
 *   z[n,v]  = act( Σ_c hidden[n,c]·W[v,c] )        logits of W (V, C) = lm_head.weight
 *                                                   (tied: embed_tokens.weight), no bias
 *   dhidden[n,c] = act( Σ_v dz[n,v]·W[v,c] )       (N, C) OVERWRITTEN (activation gradient)
 *   dW[v,c]     += Σ_n dz[n,v]·hidden[n,c]         (V, C) ACCUMULATES (parameter gradient)
 * Tokens are processed n_chunk rows at a time and the vocabulary v_chunk rows of W at a time:
 *   pass 1 computes each (n_chunk × v_chunk) logits tile and folds it into a running
 *     (max m, sum s) per row, in double: m' = max(m, max z), s = s·e^(m−m') + Σ e^(z−m');
 *     lse = m + log s once all V columns are seen; z[n,y] is picked up from its tile;
 *   pass 2 (only when dhidden or dW is wanted) recomputes each tile, forms dz and accumulates
 *     dhidden (double, over v in increasing order) and dW.
 * Only one logits tile exists at a time. Any n_chunk, v_chunk ≥ 1 give the same loss up to
 * double rounding and the same gradients up to fp32 rounding of the GEMM sums (the unchunked plain
 * form is the oracle for every chunking: chunk sizes need not divide N or V).
 * Rounding points for ACT_BF16 (what the GPU does and what HF computes in a bf16 model):
 *   z is rounded to bf16 (HF: the bf16 lm_head output, upcast to fp32 by the loss; the GPU runs a
 *   bf16 GEMM with fp32 accumulation and keeps the tile in bf16); the softmax statistics stay fp32
 *   on the GPU (double here); dz is rounded to bf16 (the grad of .float() casts back to bf16, and
 *   it is the bf16 operand of both backward GEMMs); dhidden is rounded to bf16 once; dW stays fp32.
 * The GEMM sums are in double in index order (c for z, v for dhidden, n for dW): bit-reproducible.
 * hidden, W are expected bf16-representable for ACT_BF16 (the model stores them so).
 * dhidden and dW may each be NULL (evaluation, or a frozen head under LoRA). loss may be NULL.
 * Workspace: ref_cross_entropy_fused_workspace_size(n_chunk, v_chunk, C) BYTES, 8-byte aligned
 * (a logits tile, per-row statistics and an (n_chunk, C) dhidden accumulator, all double).
 * Aliasing: none among the arrays (dW may not alias W, dhidden may not alias hidden).
 */
#ifndef REFINE_REF_CROSS_ENTROPY_H
#define REFINE_REF_CROSS_ENTROPY_H

#include <stddef.h>
#include <stdint.h>

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REF_IGNORE_INDEX (-100)

/* Number of labels that are not REF_IGNORE_INDEX (the n_valid_total of one micro-batch). */
int64_t ref_cross_entropy_count_valid(const int32_t *labels, int N);

void ref_cross_entropy_forward(double *loss, float *lse, const float *logits, const int32_t *labels, int N, int V,
                               int64_t n_valid_total);

void ref_cross_entropy_backward(float *dlogits, const float *logits, const int32_t *labels, int N, int V,
                                int64_t n_valid_total, float grad_scale, enum act_dtype act);

size_t ref_cross_entropy_fused_workspace_size(int n_chunk, int v_chunk, int C);

void ref_cross_entropy_fused(double *loss, float *dhidden, float *dw, const float *hidden, const float *w,
                             const int32_t *labels, int N, int C, int V, int64_t n_valid_total, float grad_scale,
                             int n_chunk, int v_chunk, enum act_dtype act, void *workspace);

/* The same with the three GEMMs (logits tile, dhidden, dW) through OpenBLAS cblas_sgemm: fp32
 * accumulation in BLAS's order (reproducible on one machine, not bit-identical to the double
 * form), softmax statistics still in double. The trainer's fast path (ref/llama options.linear = LINEAR_BLAS).
 * Workspace: ref_cross_entropy_fused_blas_workspace_size BYTES (the double form's plus an fp32
 * tile and an (n_chunk, C) fp32 product). */
size_t ref_cross_entropy_fused_blas_workspace_size(int n_chunk, int v_chunk, int C);
void ref_cross_entropy_fused_blas(double *loss, float *dhidden, float *dw, const float *hidden, const float *w,
                                  const int32_t *labels, int N, int C, int V, int64_t n_valid_total,
                                  float grad_scale, int n_chunk, int v_chunk, enum act_dtype act, void *workspace);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_CROSS_ENTROPY_H */
