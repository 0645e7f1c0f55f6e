/* attention.h — causal grouped-query flash attention on the GPU, forward and backward, BF16
 * operands on tensor cores (mma.sync m16n8k16, sm_80 and sm_90), fp32 statistics.
 *
 * The math and the layout of ref/attention.h (that file is the oracle with act = ACT_BF16;
 * tests/parity/attention_parity.cu holds the proof):
 *   q, out, dq, dout (B, T, H, D) bf16;  k, v, dk, dv (B, T, KVH, D) bf16;  lse (B, H, T) fp32
 *   query head h reads kv head h / (H / KVH).
 * Forward (FlashAttention-2): a CTA owns 64 query rows of one (b, h), four warps of 16 rows; key
 *   tiles of 64 up to the diagonal; S = Q·Kᵀ in fp32, online softmax in fp32 (running max m, sum
 *   l of the unrounded exp), P = exp(scale·S − m) rounded to bf16 as the MMA operand of P·V;
 *   out = bf16(O / l), lse = m + log(l).
 * Backward, deterministic (no atomics): Δ = rowsum(dout ∘ out) (fp32) in a first pass; then one
 *   kernel per 64-key tile of (b, kv head) walks the query tiles of every query head of its group
 *   (dK and dV summed over the group inside the CTA, in a fixed order), and one kernel per
 *   64-query tile walks the key tiles for dQ. Both recompute P = exp(scale·S − lse);
 *   dS = P ∘ (dP − Δ) rounded to bf16 for the MMAs; dq, dk, dv OVERWRITE.
 * Rounding points (where the GPU differs from ref/ in rounding, not in math): P in the forward is
 *   relative to the running max, not to lse; accumulations are fp32 in MMA order.
 *
 * Preconditions: D ∈ {16, 32, 64, 128} (the tiles are generic in D, a multiple of 16: one
 *   instantiation each; 16 and 32 serve small models such as the test models); H % KVH == 0; T ≥ 1 (any T: partial tiles are masked); all
 *   pointers 16-byte aligned. Workspace of the backward: gpu_attention_backward_workspace_size
 *   bytes (Δ, fp32 (B, H, T)). Aliasing: none.
 * The Hopper (wgmma/TMA) kernels will sit beside these behind the same two entry points.
 */
#ifndef REFINE_GPU_ATTENTION_H
#define REFINE_GPU_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void gpu_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                int B, int T, int H, int KVH, int D, float scale, cudaStream_t stream);

size_t gpu_attention_backward_workspace_size(int B, int T, int H);

void gpu_attention_backward_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                                 const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse, int B,
                                 int T, int H, int KVH, int D, float scale, void *workspace, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_ATTENTION_H */
