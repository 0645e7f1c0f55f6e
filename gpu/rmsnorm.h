/* rmsnorm.h — RMSNorm forward/backward on the GPU: bf16 activations, fp32 statistics.
 *
 * The same math as ref/rmsnorm.h with act = ACT_BF16 (that file is the oracle; tests/parity/
 * rmsnorm_parity.cu holds the proof):
 *   forward   rstd[i] = 1/sqrt(mean_c x² + eps) (fp32)   out = bf16(bf16(x·rstd)·w)
 *   residual  res_out = bf16(res_in + delta), then forward(res_out)
 *   backward  n̂ = x·rstd, dn = dy·w,  dx = bf16([dres +] rstd·(dn − n̂·mean_c(dn·n̂)))
 *             s[c] = Σ_i dy[i,c]·bf16(n̂[i,c])      (fp32 sum in a fixed order, below)
 *             dw[c] = dw[c] + s[c]                  (dw_type GEMM_OUT_F32: fp32, ACCUMULATES)
 *             dw[c] = bf16(f32(dw[c]) + s[c])       (GEMM_OUT_BF16: a bf16 gradient accumulator,
 *                                                    the fp32 form's add on the widened old value,
 *                                                    rounded once, RNE — NUMERICS.md §5.6)
 *             dw is NULL when w is frozen (dw_type is then ignored).
 * dx OVERWRITES. dw's sum over rows is deterministic: fixed per-block partial sums in
 * `workspace`, then one ordered pass over the blocks — the same bits on every run for the same
 * N and C, and the same s[c] for either dw_type (the bf16 form's result is bf16_from_float of
 * the fp32 form's result started from the widened old dw).
 *
 * Shapes: x, out, res_in, delta, res_out, dy, dres, dx (N, C) bf16; w (C) bf16; rstd (N) fp32;
 * dw (C) fp32 or bf16 per dw_type; workspace gpu_rmsnorm_backward_workspace_size(N, C) bytes
 * (256-byte aligned).
 * Preconditions: N ≥ 1; C ≥ 1; C ≤ 8192 when C % 8 == 0 (16-byte vectors, pointers 16-byte
 * aligned), else C ≤ 1024. Aliasing: dx may equal dy or dres; nothing else aliases.
 * Bf16 tensors are passed as their bit patterns (uint16_t), the layout of ref/bf16.h.
 */
#ifndef REFINE_GPU_RMSNORM_H
#define REFINE_GPU_RMSNORM_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gemm.h" /* enum gemm_out: dw's dtype */

#ifdef __cplusplus
extern "C" {
#endif

void gpu_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const uint16_t *x, const uint16_t *w, int N, int C,
                              float eps, cudaStream_t stream);

void gpu_rmsnorm_residual_forward_bf16(uint16_t *res_out, uint16_t *out, float *rstd, const uint16_t *res_in,
                                       const uint16_t *delta, const uint16_t *w, int N, int C, float eps,
                                       cudaStream_t stream);

/* The forwards with out's rows at stride ldo ≥ C (elements; a multiple of 8 when C is, so that the
 * same kernel runs: CHECKed): the same bits in out's first C columns, the rest of each row untouched
 * — a normed input that folded LoRA adapters extend with their u (gpu/lora.h, "folded groups"). */
void gpu_rmsnorm_forward_strided_bf16(uint16_t *out, int64_t ldo, float *rstd, const uint16_t *x, const uint16_t *w,
                                      int N, int C, float eps, cudaStream_t stream);
void gpu_rmsnorm_residual_forward_strided_bf16(uint16_t *res_out, uint16_t *out, int64_t ldo, float *rstd,
                                               const uint16_t *res_in, const uint16_t *delta, const uint16_t *w,
                                               int N, int C, float eps, cudaStream_t stream);

size_t gpu_rmsnorm_backward_workspace_size(int N, int C);

/* dres may be NULL (plain backward). */
void gpu_rmsnorm_backward_bf16(uint16_t *dx, void *dw, enum gemm_out dw_type, const uint16_t *dy,
                               const uint16_t *dres, const uint16_t *x, const uint16_t *w, const float *rstd, int N,
                               int C, void *workspace, cudaStream_t stream);
/* The backward with dy's rows at stride ldy ≥ C (a multiple of 8 when C is; dx must not be dy unless
 * ldy = C: CHECKed): the same bits — a folded group's input gradient, whose rows carry its du after
 * the C columns (gpu/lora.h). */
void gpu_rmsnorm_backward_strided_bf16(uint16_t *dx, void *dw, enum gemm_out dw_type, const uint16_t *dy,
                                       int64_t ldy, const uint16_t *dres, const uint16_t *x, const uint16_t *w,
                                       const float *rstd, int N, int C, void *workspace, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_RMSNORM_H */
