/* dropout.h — inverted dropout with a counter-based RNG, so a GPU kernel reproduces the mask bit
 * for bit from (seed, offset, element index) alone, in any thread order.
 *
 * The generator: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as
 * 1, 2, 3", SC11; the Random123 library; the generator behind curand's Philox4_32_10 and torch's
 * CUDA RNG). One call maps a 128-bit counter ctr[0..3] and a 64-bit key key[0..1] to four 32-bit
 * words. Ten rounds; in each, with M0 = 0xD2511F53, M1 = 0xCD9E8D57 and 64-bit products,
 *   (hi0, lo0) = M0·ctr[0],  (hi1, lo1) = M1·ctr[2]
 *   ctr = (hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0)
 * and between rounds the key is bumped: key[0] += 0x9E3779B9, key[1] += 0xBB67AE85 (mod 2^32).
 * Checked against Random123's known-answer vectors (tests/unit/dropout_test.c).
 *
 * Element e (0-based flat index into the tensor, int64) of a dropout call keyed (seed, offset):
 *   key     = ( seed & 0xFFFFFFFF,  seed >> 32 )
 *   block   = e >> 2  (uint64),  lane = e & 3
 *   counter = ( block & 0xFFFFFFFF, block >> 32, offset & 0xFFFFFFFF, offset >> 32 )
 *   x       = philox4x32_10(counter, key)[lane]
 *   u(e)    = (x >> 8) · 2^−24                     an exact fp32 in [0, 1 − 2^−24]
 *   keep(e) = u(e) ≥ p                             (p compared as fp32)
 * So one Philox call serves 4 consecutive elements; a GPU thread handling elements 4j..4j+3 makes
 * exactly one call. The caller gives every dropout site and step its own offset (e.g. offset =
 * step·n_sites + site), never reusing a (seed, offset) pair for different masks; the element space
 * of one call is 2^64 blocks.
 *
 * Forward:   out[e] = keep(e) ? act(x[e]·scale) : 0,   scale = fp32(1 / (1 − p)) (from double)
 * Backward:  dx[e]  = keep(e) ? act(dy[e]·scale) : 0   the same mask (same seed, offset)
 * dx OVERWRITES (an activation gradient). p = 0 is the identity (every u ≥ 0, scale 1), bit for
 * bit, also for ACT_BF16 on bf16-representable x. This is torch.nn.functional.dropout(training=True)
 * with refine's mask: torch's CUDA fused dropout also multiplies by the fp32 scale 1/(1−p) and
 * rounds once (torch's CPU bf16 path multiplies by a bf16-rounded scale instead).
 * Preconditions (CHECK): 0 ≤ p < 1, n ≥ 0. Aliasing: out may alias x and dx may alias dy exactly.
 * The golden tests of LoRA/DoRA with dropout feed the mask produced here to PEFT.
 */
#ifndef REFINE_REF_DROPOUT_H
#define REFINE_REF_DROPOUT_H

#include <stdint.h>

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox4x32-10 block: out[0..3] from ctr[0..3] and key[0..1]. */
void ref_philox4x32_10(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2]);

/* u(e) as above. */
float ref_dropout_uniform(uint64_t seed, uint64_t offset, int64_t e);

/* keep[e] = 1 when element e is kept, 0 when dropped, for e in [0, n). */
void ref_dropout_mask(uint8_t *keep, int64_t n, float p, uint64_t seed, uint64_t offset);

void ref_dropout_forward(float *out, const float *x, int64_t n, float p, uint64_t seed, uint64_t offset,
                         enum act_dtype act);

void ref_dropout_backward(float *dx, const float *dy, int64_t n, float p, uint64_t seed, uint64_t offset,
                          enum act_dtype act);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_DROPOUT_H */
