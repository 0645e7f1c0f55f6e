/* rope.h — rotary position embedding, HF "rotate_half" layout, with the llama3 frequency scaling.
 *
 * Frequencies (transformers modeling_rope_utils._compute_default_rope_parameters and
 * _compute_llama3_parameters; NUMERICS §7.2), every step in fp32 as torch computes it on the CPU
 * (`scalar / tensor` is torch's reciprocal(tensor)·scalar; scalars are cast to fp32):
 *   e[i]       = fp32( float(2i) / float(D) )                       i in [0, D/2)
 *   inv_freq[i] = fp32( 1 / fp32( theta^e[i] ) )                    pow in double, rounded once
 * llama3 scaling (kind ROPE_SCALING_LLAMA3; factor, low, high, orig = the config values):
 *   wavelen   = fp32( fp32(1/inv_freq) · fp32(2π) )
 *   lowλ      = fp32(orig / low),  highλ = fp32(orig / high)
 *   wavelen > lowλ             : inv = fp32(inv_freq / factor)
 *   wavelen < highλ            : inv = inv_freq
 *   otherwise (medium band)    : s   = fp32( fp32( fp32(1/wavelen)·orig − low ) / fp32(high − low) )
 *                                inv = fp32( fp32( fp32((1 − s)·inv_freq) / factor ) + fp32(s·inv_freq) )
 * Angles and tables (LlamaRotaryEmbedding.forward, autocast off):
 *   θ[p, i]   = fp32( float(p) · inv[i] )            one fp32 product (exact p for p < 2^24)
 *   cos[p, i] = fp32(cos θ), sin[p, i] = fp32(sin θ)  evaluated in double, rounded once
 *             (torch's fp32 CPU cos/sin are within 1 ulp of these: for D = 64, llama3 32×,
 *             positions 0..8191, 5.8% of the cos and 2.8% of the sin entries differ by 1 ulp;
 *             inv_freq is bit-identical to transformers 5.23 for D = 64, 128 and both llama3
 *             factors. attention_scaling is 1 for the default and llama3 types: omitted)
 * HF's emb = cat(freqs, freqs) repeats the table for dims i and i + D/2; the tables here store the
 * D/2 distinct columns once: cos, sin (T_max, D/2) fp32, row p = position p.
 *
 * Rotation (apply_rotary_pos_emb with rotate_half(x) = cat(−x[D/2:], x[:D/2])), for each token n
 * with position p = positions[n], each head, and i in [0, D/2), h = D/2:
 *   c = act(cos[p,i]), s = act(sin[p,i])                HF casts cos/sin to the activation dtype
 *   x'[i]     = act( act(x[i]·c)     − act(x[i+h]·s) )  q·cos + rotate_half(q)·sin, each torch op
 *   x'[i+h]   = act( act(x[i+h]·c)   + act(x[i]·s)   )  rounding to the tensor dtype
 * Backward (the transposed rotation, i.e. by −θ; autograd of the same ops):
 *   dx[i]     = act( act(g[i]·c)     + act(g[i+h]·s) )
 *   dx[i+h]   = act( act(g[i+h]·c)   − act(g[i]·s)   )
 * act() is the identity for ACT_F32 (then x' is the exact-rotation up to fp32 rounding) and bf16
 * RNE for ACT_BF16. Both passes work IN PLACE (q/k become q'/k', dq/dk become the input
 * gradients): they are activation gradients, so they OVERWRITE.
 *
 * Layout (HF's view before the head transpose; the layout attention.h takes):
 *   q, dq  (B, T, H, D)     element (b,t,h,d) at ((b·T + t)·H + h)·D + d
 *   k, dk  (B, T, KVH, D)   k / dk may be NULL to rotate q only (and vice versa)
 *   positions  int32 (B·T), token n = b·T + t; any values in [0, max_pos) — packed sequences
 *              restart at 0, HF's position_ids. CHECKed.
 * Preconditions (CHECK): D even, D == c->D. Aliasing: q and k must not overlap.
 *
 * The cache: ref_rope_cache_build allocates and fills inv_freq (D/2), cos and sin (max_pos, D/2)
 * from theta and the optional scaling (NULL or kind ROPE_SCALING_NONE: the default rope);
 * ref_rope_cache_free releases them. The fill functions are exposed so that the GPU path can
 * upload the very same tables.
 */
#ifndef REFINE_REF_ROPE_H
#define REFINE_REF_ROPE_H

#include <stdint.h>

#include "io/config.h"
#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ref_rope_cache {
    int max_pos;    /* rows of cos/sin: positions 0 .. max_pos−1 */
    int D;          /* head dim; D/2 columns */
    float *inv_freq; /* (D/2) */
    float *cos;     /* (max_pos, D/2) fp32, unrounded */
    float *sin;     /* (max_pos, D/2) fp32, unrounded */
};

/* inv_freq (D/2) from theta and scaling (may be NULL), as above. */
void ref_rope_inv_freq(float *inv_freq, int D, float theta, const struct rope_scaling *scaling);

/* cos, sin (max_pos, D/2) from inv_freq (D/2). */
void ref_rope_cos_sin(float *cos_tab, float *sin_tab, const float *inv_freq, int max_pos, int D);

/* Allocates and fills c (exits with a message if memory runs out). */
void ref_rope_cache_build(struct ref_rope_cache *c, int max_pos, int D, float theta,
                          const struct rope_scaling *scaling);
void ref_rope_cache_free(struct ref_rope_cache *c);

void ref_rope_forward(float *q, float *k, const int32_t *positions, const struct ref_rope_cache *c, int B, int T,
                      int H, int KVH, int D, enum act_dtype act);

void ref_rope_backward(float *dq, float *dk, const int32_t *positions, const struct ref_rope_cache *c, int B, int T,
                       int H, int KVH, int D, enum act_dtype act);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_ROPE_H */
