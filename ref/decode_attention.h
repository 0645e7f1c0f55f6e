/* decode_attention.h — attention of query rows against a key/value cache: the attention of
 * generation (prefill and decode steps), causal by position, grouped-query.
 *
 * Math (the rows of ref/attention.h's causal attention, computed against a cache instead of the
 * whole sequence): query row n belongs to sequence seq[n] and sits at position pos[n]; it sees the
 * cached keys and values of its sequence at positions 0..pos[n] (the caller has written them,
 * its own included). For each query head h (kv head g = h / (H/KVH), transformers' repeat_kv):
 *   s[j]   = scale · Σ_d q[n,h,d]·k[seq,j,g,d]                  j = 0..pos[n]
 *   p[j]   = exp(s[j] − max_j s) / Σ_j exp(s[j] − max_j s)
 *   out[n,h,d] = act( Σ_j p[j]·v[seq,j,g,d] )
 * act(): identity for ACT_F32, bf16 RNE for ACT_BF16 (the GPU kernel stores bf16 out; its P stays
 * fp32, unlike the training kernel's bf16 MMA operand). Sums in double, in ascending index order.
 * With ACT_F32 the rows equal ref_attention_naive_forward's to fp32 rounding (tests/unit).
 *
 * Layout:
 *   q, out        (N, H, D)                row n at n·H·D
 *   k_cache, v_cache (S, T_max, KVH, D)    one layer's cache of S sequences; position t of
 *                                          sequence s at (s·T_max + t)·KVH·D
 *   seq, pos      (N) int32                0 ≤ seq[n] < S, 0 ≤ pos[n] < T_max (CHECKed)
 *   workspace     T_max doubles (the scores of one row)
 * out OVERWRITES. Aliasing: none. D ≤ 512.
 * Sources: transformers eager_attention_forward with a DynamicCache (the keys of earlier steps
 * concatenated before the current ones); NUMERICS.md §7.2.
 */
#ifndef REFINE_REF_DECODE_ATTENTION_H
#define REFINE_REF_DECODE_ATTENTION_H

#include <stdint.h>

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

void ref_decode_attention_forward(float *out, const float *q, const float *k_cache, const float *v_cache,
                                  const int32_t *seq, const int32_t *pos, int N, int H, int KVH, int D, int S,
                                  int T_max, float scale, enum act_dtype act, double *workspace);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_DECODE_ATTENTION_H */
