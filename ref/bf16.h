/* bf16.h — bfloat16 ↔ float, round-to-nearest-even, as torch's c10::BFloat16 defines it.
 *
 * bfloat16 is the upper 16 bits of an IEEE-754 binary32: 1 sign, 8 exponent, 7 mantissa bits.
 *   bf16_from_float(x): RNE of x to bf16. Ties go to the even mantissa. Finite values beyond the
 *     largest bf16 (0x7F7F ≈ 3.3895e38) round to ±Inf exactly as IEEE RNE does. ±Inf stays ±Inf.
 *     Every NaN becomes the canonical quiet NaN 0x7FC0 (torch: c10/util/BFloat16.h,
 *     round_to_nearest_even). Payloads differ between libraries: CUDA's __float2bfloat16_rn gives
 *     0x7FFF, and torch 2.15's vectorized CPU conversion (x.to(torch.bfloat16) on a tensor) gives
 *     0xFFFF for every NaN (dumped, tests/golden/formats_golden_test.c); all are NaN, and parity
 *     tests compare NaN positions, not payloads. Every non-NaN result agrees bit for bit with
 *     torch on the golden sample.
 *   bf16_to_float(h): exact (shift into the upper half).
 *   bf16_round(x): bf16_to_float(bf16_from_float(x)), the rounding the GPU path applies when it
 *     stores an fp32 value as bf16.
 *   bf16_from_double(x): RNE of a double straight to bf16, ONE rounding. Not the same as
 *     bf16_from_float((float)x): the double → float → bf16 chain rounds twice and differs where
 *     the first rounding lands exactly on a bf16 midpoint (e.g. x = 1 + 2^-8 + 2^-30 goes to
 *     1 + 2^-8 as a float, a tie, then to 1.0; directly it goes to 1 + 2^-7). Use it where a
 *     reduction is held in double and its bf16 result must be the correctly rounded one.
 *   bf16_is_nan(h): 1 for the NaN patterns (exponent all ones, mantissa non-zero).
 * Subnormals are kept (no flush to zero), as on the CPU and in CUDA's conversion.
 */
#ifndef REFINE_REF_BF16_H
#define REFINE_REF_BF16_H

#include <stdint.h>
#include <string.h>

#include "ref/shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Machine epsilon of bf16: the gap between 1 and the next bf16 value (2^-7). */
#define BF16_EPS 0.0078125

static inline uint32_t ref_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float ref_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline uint16_t bf16_from_float(float x) {
    uint32_t u = ref_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0; /* NaN */
    /* RNE: add 0x7FFF plus the lowest kept bit, then truncate. Carries into the exponent are
     * the correct result (including overflow to Inf). */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7FFFu + lsb;
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t h) { return ref_f32_from_bits((uint32_t)h << 16); }

static inline int bf16_is_nan(uint16_t h) { return (h & 0x7FFF) > 0x7F80; }

uint16_t bf16_from_double(double x);

static inline float bf16_round(float x) { return bf16_to_float(bf16_from_float(x)); }

/* x as an activation of storage type act is stored (ref/shapes.h): bf16_round(x) for ACT_BF16, x
 * for ACT_F32. Every op of ref/ rounds its stored outputs with it. */
static inline float act_round(float x, enum act_dtype act) { return act == ACT_BF16 ? bf16_round(x) : x; }

/* Array forms. out and in may alias only exactly (same pointer). */
void bf16_from_float_array(uint16_t *out, const float *in, int64_t n);
void bf16_to_float_array(float *out, const uint16_t *in, int64_t n);
void bf16_round_array(float *out, const float *in, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_BF16_H */
