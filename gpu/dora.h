/* dora.h — the DoRA adapter of a linear layer on the GPU (PEFT lora.Linear with use_dora=True):
 * the factored row norm, the magnitude scaling fused into one elementwise pass, and the backward.
 *
 * Notation as in ref/dora.h and gpu/lora.h: W (C_out, C_in) frozen base weight (bf16), bias b
 * (C_out) bf16 or NULL, A = lora_a (R, C_in) and B = lora_b (C_out, R) the bf16 compute copies of
 * the fp32 masters, s the LoRA scale, m = mag (C_out) fp32 (the magnitude is only ever used
 * elementwise, so it has no bf16 copy), n = wnorm (C_out) fp32, mns = m / n (fp32 division).
 * Matrix products go through gpu/gemm.h (BF16 operands, FP32 accumulate).
 *
 * Row norm (detached, DoRA §4.3), once per step:
 *   gpu_dora_weight_sq_f32      w_sq[o] = Σ_i W[o,i]²   (double sums, rounded once; once per frozen W)
 *   gpu_dora_weight_norm_f32    n[o]² = w_sq[o] + 2s·(W Aᵀ)[o,:]·B[o,:] + s²·B[o,:] (A Aᵀ) B[o,:]ᵀ
 *                               W Aᵀ (C_out, R) and A Aᵀ (R, R) by gemm in fp32 (workspace); the
 *                               combination per row in double in a fixed order; a negative n²
 *                               from cancellation clamps to 0; n = fp32(sqrt(n²)).
 *                               ref_dora_weight_norm_factored's formula (its sums are all double).
 *   Both read W's rows at stride ldw ≥ C_in (a folded group member's padded rows, gpu/lora.h: the
 *   columns past C_in are not read); the same bits as at ldw = C_in.
 * Forward (no dropout; on entry y = x Wᵀ + b, bf16, from the base layer's gemm with the bias):
 *   u    = bf16( x Aᵀ )                               (N, R) OVERWRITTEN, saved
 *   sl   = s·(u Bᵀ)                                    (N, C_out) fp32: for R ≤ 64 formed in registers
 *          inside the pass below — on tensor cores (mma.sync, fp32 accumulation in the hardware's
 *          order) when R is even, C_out % 32 == 0 and the rows are aligned, else by fused
 *          multiply-adds, r in order — then × s; above 64, by gemm (alpha = s) into the workspace
 *   base = y − b[o]            (fp32; y when b = NULL: PEFT's result − bias)
 *   y    = bf16( y + ((mns − 1)·base + mns·sl) )       (N, C_out) UPDATED IN PLACE, one pass
 *   z    = bf16( base + sl )                           (N, C_out) OVERWRITTEN when z ≠ NULL: the
 *          pre-magnitude output x Wᵀ + s·x Aᵀ Bᵀ that dm needs — unless the caller keeps the
 *          output y of a bias-free linear anyway (ref/dora.h's DORA_SAVED_Y: z/n = y/m), and then
 *          passes z = NULL and nothing more is written
 * Backward, for dy (N, C_out) bf16:
 *   dm[o] += ( Σ_n dy[n,o]·z[n,o] ) / n[o]              dmag (C_out) fp32 ACCUMULATES (double sums
 *      or ( Σ_n dy[n,o]·y[n,o] ) / m[o]  (DORA_SAVED_Y)  per 32-row chunk, chunks in a fixed order)
 *   dy_s  = bf16( mns⊙dy )                             (N, C_out) workspace: the rescaled dy of
 *                                                       both paths (n is a constant)
 *   dx    = bf16( dy_s W )                              OVERWRITES dx: the base path, one gemm
 *   then gpu_lora_backward_bf16 with dy_s in place of dy (no mask): dB += s·dy_sᵀ u, du = bf16(s·dy_s B),
 *   dA += duᵀ x, dx = bf16(dx + du A).
 *   Without dropout this is ref_dora_backward composed with the base layer's dx = dy W: both sum
 *   to (mns⊙dy) W + s·(mns⊙dy) B A, dm = Σ dy·(base + s·l)/n. Any of dx, dmag, dlora_a, dlora_b may
 *   be NULL to skip it. gpu_dora_rescale_bf16 is the first step alone (dm and dy_s), for callers
 *   that run the base and LoRA products themselves.
 * Dropout on the DoRA path is not implemented on the GPU (PEFT recomputes the base output on the
 * dropped input, a second full product); the caller must run DoRA with p = 0.
 *
 * Against ref/dora.h (ACT_BF16): the differences are those of gpu/lora.h plus the bf16 roundings
 * of dy_s, of the base dx before the adapter's share is added, and of z. With power-of-two s and
 * mns and integer inputs whose sums stay exactly representable, every output is bit-identical;
 * otherwise tests/parity/dora_parity.cu bounds the error by 2× that of a naive same-precision
 * implementation.
 *
 * Workspaces (bytes, 256-byte aligned, never allocated here):
 *   gpu_dora_weight_norm_workspace_size(C_out, R), gpu_dora_forward_workspace_size(N, C_out, R),
 *   gpu_dora_backward_workspace_size(N, C_in, C_out, R).
 * Shapes: x, dx (N, C_in); y, z, dy (N, C_out); u (N, R); w (C_out, C_in); mag, dmag, wnorm, w_sq
 * (C_out). Aliasing: none. All device memory; nothing synchronized, nothing allocated.
 * Mirrors peft/tuners/lora/dora.py DoraLinearLayer (get_weight_norm, forward) and
 * lora/variants.py DoraLinearVariant.forward (peft 0.21), row norm detached.
 */
#ifndef REFINE_GPU_DORA_H
#define REFINE_GPU_DORA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gemm.h"
#include "ref/dora.h" /* enum dora_saved */

#ifdef __cplusplus
extern "C" {
#endif

void gpu_dora_weight_sq_f32(float *w_sq, const uint16_t *w, int64_t ldw, int C_in, int C_out, cudaStream_t stream);

size_t gpu_dora_weight_norm_workspace_size(int C_out, int R);
void gpu_dora_weight_norm_f32(struct gpu_gemm *g, float *wnorm, const float *w_sq, const uint16_t *w, int64_t ldw,
                              const uint16_t *lora_a, const uint16_t *lora_b, int C_in, int C_out, int R, float scale,
                              void *workspace, cudaStream_t stream);

/* 0 for R ≤ 64 (s·u Bᵀ never leaves registers), else N·C_out fp32. */
size_t gpu_dora_forward_workspace_size(int N, int C_out, int R);
void gpu_dora_forward_bf16(struct gpu_gemm *g, uint16_t *y, uint16_t *z, uint16_t *u, const uint16_t *x,
                           const uint16_t *bias, const uint16_t *lora_a, const uint16_t *lora_b, const float *mag,
                           const float *wnorm, int N, int C_in, int C_out, int R, float scale, void *workspace,
                           cudaStream_t stream);

/* The forward after u: y and z from the base output y and u (N, R) with row stride ldu ≥ R — the
 * forward's second half, for callers that form u themselves (a group's members each read their
 * columns of the group's u, gpu_lora_group_u_bf16). The same bits as gpu_dora_forward_bf16's for the
 * same u. workspace: gpu_dora_forward_workspace_size(N, C_out, R) bytes. */
void gpu_dora_scale_bf16(struct gpu_gemm *g, uint16_t *y, uint16_t *z, const uint16_t *u, int ldu,
                         const uint16_t *bias, const uint16_t *lora_b, const float *mag, const float *wnorm, int N,
                         int C_out, int R, float scale, void *workspace, cudaStream_t stream);

/* The magnitude folded into the weight (a folded group member without bias whose backward reads
 * its output, DORA_SAVED_Y: gpu/llama.cu): w_s[o, k] = bf16(w[o, k]·mns[o]), mns = m/n (fp32
 * division, as the passes above), for k < K — K = C_in + the group's adapter columns, so the padded
 * row [W | bf16(s·B)] is scaled whole and y = [x | u] w_sᵀ is the member's output in one product:
 *   y = bf16( Σ_i x_i·bf16(mns·W_i) + Σ_r u_r·bf16(mns·bf16(s·B_r)) )
 * against gpu_dora_scale_bf16's bf16(y0 + ((mns − 1)·y0 + mns·sl)) — the same value with other
 * roundings (each weight's instead of the base output's and the pass's; NUMERICS.md §4). It moves
 * C_out·K·4 bytes a step instead of the pass's N·C_out·4 (N = the tokens: 4× fewer at 8192 tokens
 * and C_in 2048). w_s and w at row stride ldw ≥ K; columns K .. ldw − 1 of w_s are not written. */
void gpu_dora_scale_weight_bf16(uint16_t *w_s, const uint16_t *w, int64_t ldw, const float *mag, const float *wnorm,
                                int C_out, int K, cudaStream_t stream);

/* dm += Σ_n dy·z / n (kind DORA_SAVED_Z, saved = z) or Σ_n dy·y / m (DORA_SAVED_Y, saved = the
 * bias-free output y), and dy_s = bf16(mns⊙dy): ref_dora_rescale. workspace:
 * gpu_dora_rescale_workspace_size bytes. */
size_t gpu_dora_rescale_workspace_size(int N, int C_out);
void gpu_dora_rescale_bf16(uint16_t *dy_s, float *dmag, const uint16_t *dy, const uint16_t *saved,
                           enum dora_saved kind, const float *mag, const float *wnorm, int N, int C_out,
                           void *workspace, cudaStream_t stream);

/* The MLP's SwiGLU backward fused with the gate and up linears' rescale. On entry gate and up
 * (N, F) hold the forward's gate and up outputs; dh (N, F) the gradient of the SwiGLU output. On
 * exit gate = bf16(mns_g ⊙ dg) and up = bf16(mns_u ⊙ du), where dg and du are gpu_swiglu_backward_bf16's
 * bf16 outputs, and dmag_g += Σ_n dg·z_g / n_g, dmag_u likewise — bit for bit
 * gpu_swiglu_backward_bf16 (ld_in = ld_out = F) followed by gpu_dora_rescale_bf16 on each side.
 * kind DORA_SAVED_Y (z_g = z_u = NULL): the sums take the gate and up outputs the pass reads anyway,
 * dmag_g += Σ_n dg·gate / m_g — bit for bit the two passes with gpu_dora_rescale_bf16(…, gate,
 * DORA_SAVED_Y, …) — so no z is kept for either (bias-free linears: the MLP's have no bias).
 * A side with mag NULL (not a DoRA target) keeps gpu/swiglu's plain gradient; a dmag may be NULL
 * (no magnitude gradient; z then unused). Workspace: gpu_dora_swiglu_backward_workspace_size. */
size_t gpu_dora_swiglu_backward_workspace_size(int N, int F);
void gpu_dora_swiglu_backward_bf16(uint16_t *gate, uint16_t *up, float *dmag_g, float *dmag_u, const uint16_t *dh,
                                   const uint16_t *z_g, const uint16_t *z_u, enum dora_saved kind,
                                   const float *mag_g, const float *wnorm_g, const float *mag_u,
                                   const float *wnorm_u, int N, int F, void *workspace, cudaStream_t stream);

size_t gpu_dora_backward_workspace_size(int N, int C_in, int C_out, int R);
void gpu_dora_backward_bf16(struct gpu_gemm *g, uint16_t *dx, float *dmag, float *dlora_a, float *dlora_b,
                            const uint16_t *dy, const uint16_t *x, const uint16_t *z, const uint16_t *u,
                            const uint16_t *w, const uint16_t *lora_a, const uint16_t *lora_b, const float *mag,
                            const float *wnorm, int N, int C_in, int C_out, int R, float scale, void *workspace,
                            cudaStream_t stream);

/* Creates the gemm plans of the row norm, forward and backward of this shape (launches nothing),
 * for 256-byte-aligned buffers (cudaMalloc's and the workspaces'). */
void gpu_dora_reserve(struct gpu_gemm *g, int N, int C_in, int C_out, int R);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_DORA_H */
