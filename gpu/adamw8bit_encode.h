/* adamw8bit_encode.h — the 8-bit AdamW kernel's (gpu/adamw8bit.cu) fast encode and division, host
 * and device, so that every formula here is tested on the CPU (tests/parity/adamw8bit_encode_test.cc,
 * in every `bazel test //...`).
 *
 * C++17, header only; no CUDA types.
 *
 * Encode by buckets. The code of x for an ascending map is count(x) = #{c in 0..254 : x ≥ T_c}, T_c =
 * quant8_cuda_threshold (ref/quant8.h; NaN counts none). x is first clamped to [−2, 2] (NaN → −2,
 * whose count is 0 as NaN's; beyond ±2 the count is 0 or 255 as at ±2, the thresholds lying in
 * (−1, 1)). The clamped value's magnitude bits u = bits & 0x7fffffff, raised to kLo (2^−23), pick a
 * bucket k = (max(u, kLo) − kLo) >> S of buckets<S> per sign (S the shift, a template parameter);
 * entry e = k + sign·buckets<S> covers a contiguous range of values (bucket 0 of each sign reaches
 * down to ±0). The table holds c0[e] = count(lowest value of e), and the thresholds t[c] = T_c (t[255]
 * NaN), so
 *   count(x) = c0 + (x ≥ t[c0])
 * whenever at most kMaxPerBucket = 1 threshold lies in an entry's range (the count is monotone, the
 * threshold after c0 is the next one up). The dynamic maps hold at most 1 with kShiftM = 17 for the
 * signed map (m) and kShiftV = 16 for the unsigned one (v: its spacing near 1 is 0.007, a bucket
 * there 2^−8 wide; 2^−7 would hold 2); the kernel checks the bound for the maps it is given and
 * otherwise keeps the tree search.
 *
 * Division by a block's maximum. For w in [2^−70, 2^100] and |a| ≤ w (or a NaN), with y = RN(1/w):
 *   q = RN(a·y), r = RN(a − w·q) (fma), q' = RN(q + r·y) (fma)
 * is RN(a/w) whenever |a/w| ≥ 2^−30 (Markstein: y correctly rounded and normal, q within one ulp;
 * a − w·q is a multiple of 2^(e_w + e_q − 46) ≥ 2^−146 below 2^24 of those, so exact), and otherwise |q'| < 2^−29 like RN(a/w); so the two have the same count whenever no
 * threshold lies in (−2^−29, 2^−29] (the kernel checks this too; the maps' smallest is 1.6·10^−7).
 */
#ifndef REFINE_GPU_ADAMW8BIT_ENCODE_H
#define REFINE_GPU_ADAMW8BIT_ENCODE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define A8E_HD __host__ __device__ __forceinline__
#else
#define A8E_HD inline
#endif

namespace refine {
namespace adamw8bit_encode {

constexpr int kShiftM = 17, kShiftV = 16; /* the shifts of the signed (m) and the unsigned (v) map */
constexpr uint32_t kLo = 0x34000000u;      /* 2^-23 */
constexpr uint32_t kTop = 0x40000000u;     /* 2.0 */
template <int S>
constexpr int buckets = (int)((kTop - kLo) >> S) + 1; /* per sign: 1537 (S = 17), 3073 (S = 16) */
template <int S>
constexpr int entries = 2 * buckets<S>;
constexpr int kMaxPerBucket = 1;
constexpr float kDivLo = 0x1p-70f, kDivHi = 0x1p100f; /* the maxima the short division takes */
constexpr float kTiny = 0x1p-29f;                     /* no threshold may lie in (−kTiny, kTiny] */

A8E_HD uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
A8E_HD float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* x clamped to [−2, 2], every NaN (quiet or signaling: no fmaxf) to −2. */
A8E_HD float clamp2(float x) {
    const float lo = x >= -2.0f ? x : -2.0f;
    return lo <= 2.0f ? lo : 2.0f;
}

/* The table entry of a clamped x. */
template <int S>
A8E_HD uint32_t entry(float xc) {
    const uint32_t b = bits_of(xc), u = b & 0x7fffffffu;
    return (((u > kLo ? u : kLo) - kLo) >> S) + (b >> 31) * (uint32_t)buckets<S>;
}

/* The smallest and the largest clamped value of entry e (0 ≤ e < entries<S>). */
template <int S>
A8E_HD uint32_t bucket_first_bits(uint32_t k) { return k ? kLo + (k << S) : 0u; }
template <int S>
A8E_HD uint32_t bucket_last_bits(uint32_t k) {
    const uint32_t u = kLo + ((k + 1u) << S) - 1u;
    return u < kTop ? u : kTop;
}
template <int S>
A8E_HD float entry_lowest(uint32_t e) {
    return e < (uint32_t)buckets<S> ? float_of(bucket_first_bits<S>(e)) : -float_of(bucket_last_bits<S>(e - buckets<S>));
}
template <int S>
A8E_HD float entry_highest(uint32_t e) {
    return e < (uint32_t)buckets<S> ? float_of(bucket_last_bits<S>(e)) : -float_of(bucket_first_bits<S>(e - buckets<S>));
}

/* #{c : t[c] ≤ x} over 255 ascending thresholds t[0..254], branch-free (the table's build). */
A8E_HD unsigned count_sorted(const float *t, float x) {
    unsigned lo = 0;
    for (unsigned step = 128; step; step >>= 1) lo += (x >= t[lo + step - 1]) ? step : 0u;
    return lo;
}

/* An upper bound on count(entry_highest(e)) from the table (the value just past the entry is
 * the lowest of its neighbour; the last positive entry is {2}; negative entry 0 ends at −0, whose
 * count is that of +0, the lowest of positive entry 0). */
template <int S>
A8E_HD unsigned count_bound_above(const uint8_t *c0, const float *t, uint32_t e) {
    if (e + 1u < (uint32_t)buckets<S>) return c0[e + 1u];
    if (e + 1u == (uint32_t)buckets<S>) return count_sorted(t, 2.0f);
    if (e == (uint32_t)buckets<S>) return c0[0];
    return c0[e - 1u];
}

/* count(x) by the table (c0 per entry, t the thresholds, t[255] NaN). */
template <int S>
A8E_HD unsigned count_by_table(const uint8_t *c0, const float *t, float x) {
    const float xc = clamp2(x);
    const unsigned c = c0[entry<S>(xc)];
    return c + (xc >= t[c] ? 1u : 0u);
}

/* The entry of x in [−2, 2] or a NaN, = entry(clamp2(x)) there (the kernel's quotients: RN(a/w) with
 * |a| ≤ w, or NaN): NaN → −2 by the lower clamp alone; the magnitude raised to kLo by a float maximum
 * (on |x| the order of the bits, and fmaxf's NaN rule never applies); the bucket (bits >> S) −
 * (kLo >> S) (kLo a multiple of 2^S). */
constexpr float kLoF = 0x1p-23f; /* float_of(kLo) */
template <int S>
A8E_HD uint32_t entry_unit(float x) {
    const float xc = x >= -2.0f ? x : -2.0f;
    const float mag = fmaxf(fabsf(xc), kLoF);
    return (bits_of(mag) >> S) - (kLo >> S) + (bits_of(xc) >> 31) * (uint32_t)buckets<S>;
}

/* ~0u if x ≥ t, else 0 (NaN: 0). */
A8E_HD uint32_t ge_mask(float x, float t) {
#if defined(__CUDA_ARCH__)
    uint32_t r;
    asm("set.ge.u32.f32 %0, %1, %2;" : "=r"(r) : "f"(x), "f"(t));
    return r;
#else
    return x >= t ? ~0u : 0u;
#endif
}

/* count(x) for x in [−2, 2] or a NaN, = count_by_table(c0, t, x) there: the entry by entry_unit,
 * the compare as a mask subtracted (x itself compared: a NaN compares false, as −2 would). */
template <int S>
A8E_HD unsigned count_by_table_unit(const uint8_t *c0, const float *t, float x) {
    const unsigned c = c0[entry_unit<S>(x)];
    return c - ge_mask(x, t[c]);
}

/* RN(a / w) by the reciprocal y = RN(1/w) (header comment for where it holds). */
A8E_HD float div_by_recip(float a, float w, float y) {
#if defined(__CUDA_ARCH__)
    const float q = __fmul_rn(a, y);
    return __fmaf_rn(__fmaf_rn(-w, q, a), y, q);
#else
    const float q = a * y;
    return fmaf(fmaf(-w, q, a), y, q);
#endif
}

}  // namespace adamw8bit_encode
}  // namespace refine

#endif /* REFINE_GPU_ADAMW8BIT_ENCODE_H */
