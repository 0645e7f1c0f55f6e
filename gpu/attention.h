/* attention.h — causal grouped-query flash attention on the GPU, forward and backward, BF16
 * operands on tensor cores, fp32 statistics.
 *
 * The math and the layout of ref/attention.h (that file is the oracle with act = ACT_BF16;
 * tests/parity/attention_parity.cu holds the proof):
 *   q, out, dq, dout (B, T, H, D) bf16;  k, v, dk, dv (B, T, KVH, D) bf16;  lse (B, H, T) fp32
 *   query head h reads kv head h / (H / KVH).
 * Two kernel families behind the same entry points (gpu/attention_internal.h chooses per call):
 *   Hopper (attention_sm90_{fwd,bwd}.cu; wgmma, TMA, warp-specialized, after FlashAttention-3) on a
 *     compute capability 9.x device when the binary holds sm_90a code and D ∈ {64, 128};
 *   sm_80 (attention.cu; mma.sync m16n8k16) everywhere else, and always when the environment has
 *     REFINE_ATTENTION_KERNEL=sm80 (a switch for before/after measurements).
 * Forward (FlashAttention-2/3): query tiles, key tiles up to the diagonal; S = Q·Kᵀ in fp32, online
 *   softmax in fp32 (running max m, sum l of the unrounded exp), P = exp(scale·S − m) rounded to
 *   bf16 as the operand of P·V; out = bf16(O / l), lse = m + log(l).
 * Backward, deterministic (the result bits depend on the shape and the device model only): Δ =
 *   rowsum(dout ∘ out) (fp32) in a first pass; P = exp(scale·S − lse) recomputed, dS = P ∘ (dP − Δ)
 *   rounded to bf16 for the MMAs; dK and dV summed over the group's query heads inside one CTA in a
 *   fixed order; dQ summed over key blocks in a fixed order (sm_80: one CTA per query tile; Hopper:
 *   fp32 tiles added in the order of the key blocks, n_max … 0, one counter per tile, then
 *   converted). dq, dk, dv OVERWRITE.
 * Rounding points (where the GPU differs from ref/ in rounding, not in math): P in the forward is
 *   relative to the running max, not to lse; accumulations are fp32 in MMA order; the exponentials
 *   are ex2.approx.
 *
 * Preconditions: D ∈ {16, 32, 64, 128} (the sm_80 tiles are generic in D, a multiple of 16: one
 *   instantiation each; 16 and 32 serve small models such as the test models); H % KVH == 0; T ≥ 1
 *   (any T: partial tiles are masked); all pointers 16-byte aligned (the Hopper kernels read through
 *   tensor maps, whose rows must be 16-byte aligned: D·2 bytes is). Bad shapes fail a CHECK. Workspace
 *   of the backward: gpu_attention_backward_workspace_size bytes (both families: Δ, lse·log2 e, the
 *   dQ order counters and the fp32 dQ tiles, B·H·ceil(T/128)·128·(128 + 2)·4 bytes and a little);
 *   its contents need not be initialized. Aliasing: none.
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

/* The same with out's rows (b, t) at ld_o elements (≥ H·D, a multiple of 8): a caller's wider buffer
 * whose further columns the kernels leave untouched (gpu/llama.cu's folded o projection keeps its
 * adapter columns there). */
void gpu_attention_forward_ld_bf16(uint16_t *out, int64_t ld_o, float *lse, const uint16_t *q, const uint16_t *k,
                                   const uint16_t *v, int B, int T, int H, int KVH, int D, float scale,
                                   cudaStream_t stream);

size_t gpu_attention_backward_workspace_size(int B, int T, int H);

void gpu_attention_backward_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                                 const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse, int B,
                                 int T, int H, int KVH, int D, float scale, void *workspace, cudaStream_t stream);
/* The same with dout's and out's rows at ld_o elements (as the forward's). */
void gpu_attention_backward_ld_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                                    const uint16_t *k, const uint16_t *v, const uint16_t *out, int64_t ld_o,
                                    const float *lse, int B, int T, int H, int KVH, int D, float scale,
                                    void *workspace, cudaStream_t stream);
/* The same with dq's, dk's and dv's rows (b, t) at ld_g elements, one stride for the three (≥ H·D, a
 * multiple of 8; 0: packed): a caller's buffer holding them side by side, [dq │ dk │ dv] a row
 * (gpu/llama.cu: q/k/v's input gradient as one product over the three). Columns beyond each one's
 * heads are left untouched. */
void gpu_attention_backward_strided_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, int64_t ld_g, const uint16_t *dout,
                                         const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *out,
                                         int64_t ld_o, const float *lse, int B, int T, int H, int KVH, int D,
                                         float scale, void *workspace, cudaStream_t stream);
/* The same with RoPE's backward applied to dq and dk (gpu/rope.h: rope_cos, rope_sin (max_pos, D/2)
 * bf16, pos (B·T) int32 in [0, max_pos)): dq and dk are the gradients of the pre-RoPE q and k, bitwise
 * gpu_attention_backward_strided_bf16 followed by gpu_rope_backward_bf16 over dq and dk at their
 * strides. The Hopper kernels rotate dq in their dQ conversion and dk as they store it, so that the
 * gradients are not read and written once more (gpu/attention_sm90_bwd.cu); the sm_80 kernels are
 * followed by the RoPE pass. */
void gpu_attention_rope_backward_strided_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, int64_t ld_g,
                                              const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                                              const uint16_t *v, const uint16_t *out, int64_t ld_o, const float *lse,
                                              const uint16_t *rope_cos, const uint16_t *rope_sin, const int32_t *pos,
                                              int B, int T, int H, int KVH, int D, float scale, void *workspace,
                                              cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_GPU_ATTENTION_H */
