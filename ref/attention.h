/* attention.h — causal grouped-query attention, forward and backward: a naive implementation that
 * materializes the scores, and a flash-style tiled one (online softmax, logsumexp saved). Both are
 * oracles for the GPU kernel (gpu/attention.h); they must agree with each other.
 *
 * Layout (row-major, HF's view before the head transpose; the layout of FlashAttention's API):
 *   q, out, dq, dout   (B, T, H, D)     element (b,t,h,d) at ((b·T + t)·H + h)·D + d
 *   k, v, dk, dv       (B, T, KVH, D)
 *   lse                (B, H, T) fp32   natural-log logsumexp of each query row's scaled scores
 * GQA: query head h reads kv head h / (H/KVH) (transformers' repeat_kv); H % KVH == 0.
 *
 * Forward, for each (b, h) and query i, with j ≤ i (causal, Sq = Sk):
 *   s[i,j] = scale · Σ_d q[i,d]·k[j,d]          (scale = 1/√D in Llama)
 *   lse[i] = log Σ_{j≤i} exp(s[i,j]),   p[i,j] = exp(s[i,j] − lse[i])
 *   out[i] = Σ_j act(p[i,j]) · v[j]              then out = act(out)
 * Backward (FlashAttention-2, NUMERICS.md §8):
 *   Δ[i]    = Σ_d dout[i,d]·out[i,d]             (fp32, from the stored, rounded out)
 *   dv[j]  += Σ_i act(p[i,j]) · dout[i]          (summed over the query heads of the group)
 *   dp[i,j] = Σ_d dout[i,d]·v[j,d]
 *   ds[i,j] = p[i,j]·(dp[i,j] − Δ[i])
 *   dq[i]   = scale · Σ_j act(ds[i,j]) · k[j]
 *   dk[j]  += scale · Σ_i act(ds[i,j]) · q[i]    (summed over the group)
 *   then dq, dk, dv = act(...). dq, dk, dv OVERWRITE (activation gradients).
 * act() is the identity for ACT_F32; for ACT_BF16 it is bf16 rounding at exactly the points the
 * GPU kernel rounds: P and dS become bf16 MMA operands, O/dQ/dK/dV are stored as bf16. Row
 * statistics (max, sum, lse, Δ) and every accumulation are fp32 on the GPU, double here.
 *
 * Naive: workspace holds P (B, H, T, T) fp32 from the forward for the backward (entries j > i
 *   are 0). With ACT_BF16 the forward rounds the normalized p, as transformers' eager attention
 *   casts the fp32 softmax to the query dtype before P·V.
 * Flash: tiles of block_q query rows × block_k key rows, online softmax
 *   m_new = max(m, rowmax(s_blk)); l = exp(m − m_new)·l + Σ exp(s_blk − m_new); acc rescaled,
 *   so no T×T matrix exists; the backward recomputes p = exp(s − lse) tile by tile and its
 *   workspace holds Δ (B, H, T). Any block sizes ≥ 1 give the same result up to rounding; T need
 *   not be a multiple of either.
 *   With ACT_BF16 the forward's P·V operand is, as in FlashAttention-2, the UNnormalized
 *   p̃ = exp(s − m_new) rounded to bf16 (l sums the unrounded p̃), and out = act(acc / l); so the
 *   forward depends on block_k (where the running max moves) and not on block_q. The backward's P
 *   is normalized (from lse) in both implementations, and every output row sums in one fixed
 *   order, so the flash backward's result does not depend on the block sizes.
 * Workspace sizes are in bytes. The reference holds D ≤ 512.
 * A query row with no visible key cannot occur with causal Sq = Sk (every row sees itself).
 *
 * Aliasing: none. Sources: transformers eager_attention_forward + repeat_kv; flash-attention
 * flash_attn_triton.py (forward/backward recurrences); NUMERICS.md §7.2, §8.
 */
#ifndef REFINE_REF_ATTENTION_H
#define REFINE_REF_ATTENTION_H

#include <stddef.h>

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t ref_attention_naive_workspace_size(int B, int T, int H);

void ref_attention_naive_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                                 int H, int KVH, int D, float scale, enum act_dtype act, float *workspace);

void ref_attention_naive_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                  const float *v, const float *out, int B, int T, int H, int KVH, int D, float scale,
                                  enum act_dtype act, const float *workspace);

void ref_attention_flash_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                                 int H, int KVH, int D, float scale, int block_q, int block_k, enum act_dtype act);

size_t ref_attention_flash_backward_workspace_size(int B, int T, int H);

void ref_attention_flash_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                  const float *v, const float *out, const float *lse, int B, int T, int H, int KVH,
                                  int D, float scale, int block_q, int block_k, enum act_dtype act, float *workspace);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_ATTENTION_H */
