/* master_pair.h — fp32 master weights held as two 16-bit halves: the bf16 compute copy and the
 * master's low 16 bits (--master split, NUMERICS.md §5.5).
 *
 * A trained tensor needs its fp32 master (4 bytes) and the bf16 copy the GEMMs read (2 bytes).
 * The copy is bf16_rne(master), which is the master's upper half or that half plus one (RNE
 * rounds the bit pattern up or down, a carry included), so the master is recovered from the copy
 * and its own lower half: 4 bytes a parameter instead of 6, with the same fp32 values.
 *
 *   split(x) → (hi, lo):  hi = bf16_from_float(x) (the compute copy, bit for bit);
 *                         lo = the low 16 bits of x'
 *   join(hi, lo) → x':    the upper half h = hi − 1 when lo ≥ 0x8000 (the rounding went up), else
 *                         hi; x' = (h << 16) | lo.
 *
 * x' = x for every finite x but one pattern: low half exactly 0x8000 with an even upper half (a
 * tie that RNE rounds down). join cannot tell it from the tie with an odd upper half (rounded up
 * to the same even hi), so split stores lo = 0x7FFF for it: x' is x moved one fp32 ulp toward zero
 * (|x' − x| = 2^-24·|x| at most; 1 in 2^17 of uniformly distributed bit patterns), and hi is still
 * bf16_rne(x) = bf16_rne(x'). master_pair_round(x) = join(split(x)) is that rounding: a trainer
 * with split masters applies it after every update, so the value it keeps is always exactly what
 * the pair holds (the CPU engine does so on its fp32 masters, the GPU stores the pair).
 *
 * NaN: hi = 0x7FC0 and lo = 0 (a NaN master never survives an update: a non-finite step changes
 * nothing). ±Inf: hi = ±Inf, lo = 0, exact. Finite values past the largest bf16 round hi to ±Inf
 * as bf16_from_float does; join still recovers them (h = 0x7F7F or 0xFF7F).
 *
 * The functions are bit operations on uint32/uint16 and compile as host and device code (nvcc
 * defines __CUDACC__), so the GPU optimizer (gpu/adamw.cu, gpu/adamw8bit.cu) uses these same lines.
 * Test: tests/unit/master_pair_test.c.
 */
#ifndef REFINE_REF_MASTER_PAIR_H
#define REFINE_REF_MASTER_PAIR_H

#include <stdint.h>

#include "ref/bf16.h" /* ref_f32_bits, ref_f32_from_bits */

#ifdef __CUDACC__
#define MASTER_PAIR_FN static inline __host__ __device__
#else
#define MASTER_PAIR_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Where a trainer keeps the masters of full fine-tuning: an fp32 array beside the bf16 copy
 * (MASTER_FP32), as the copy and a 16-bit low half (MASTER_SPLIT), or nowhere but the bf16 copy
 * (MASTER_BF16: the peers' pure bf16 weights — each update computed in fp32 on the widened weight
 * and rounded to bf16 by RNE, so an update under half a bf16 ulp is lost; 2 bytes a parameter).
 * MASTER_BF16 is the pair with its low half taken as 0 and dropped: join(hi, 0) widens hi exactly,
 * split(x)'s hi is bf16_rne(x), so the same code paths serve both (lo absent). */
enum master_storage { MASTER_FP32 = 0, MASTER_SPLIT, MASTER_BF16, MASTER_BF16_SR };
/* MASTER_BF16_SR: bf16 weights as MASTER_BF16, each update's result rounded to bf16 stochastically
 * (bf16_sr below: unbiased, so updates under half an ulp survive in expectation) with random bits
 * keyed by (seed, step, tensor, element) — the same on every engine and in any thread order. */
/* "fp32", "split", "bf16", "bf16-sr" (index = enum value), NULL-terminated: --master's names. */
extern const char *const master_storage_names[];
/* Full fine-tuning's accumulated gradients: fp32, or bf16 — each micro-batch's gradient added to the
 * accumulator and the sum rounded to bf16 (NUMERICS.md §5.6: what a bf16 GEMM output accumulating
 * with beta = 1 gives; the peers' bf16 .grad, 2 bytes a parameter instead of 4). */
enum grad_storage { GRAD_FP32 = 0, GRAD_BF16 };

/* x's bit pattern u → the pair (*hi, *lo). */
MASTER_PAIR_FN void master_pair_split_bits(uint32_t u, uint16_t *hi, uint16_t *lo) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) { /* NaN */
        *hi = 0x7FC0;
        *lo = 0;
        return;
    }
    const uint32_t h = u >> 16;
    uint32_t l = u & 0xFFFFu;
    if (l == 0x8000u && (h & 1u) == 0) l = 0x7FFFu; /* the tie RNE rounds down: one ulp toward zero */
    *hi = (uint16_t)(h + (l >= 0x8000u ? 1u : 0u)); /* = bf16 RNE of u */
    *lo = (uint16_t)l;
}

/* The pair → the master's bit pattern. */
MASTER_PAIR_FN uint32_t master_pair_join_bits(uint16_t hi, uint16_t lo) {
    const uint32_t h = (uint32_t)hi - (lo >= 0x8000u ? 1u : 0u);
    return ((h & 0xFFFFu) << 16) | (uint32_t)lo;
}

/* Stochastic rounding to bf16 of x's bit pattern u with 16 random bits r (uniform in [0, 2^16)):
 * (u + r) >> 16 — the magnitude rounded up with probability (its low half)/2^16, down otherwise,
 * so E[result] = x for every finite x (the sign bit is untouched: |u| + r < 2^31). A value that is
 * already bf16 (low half 0) is kept whatever r is; a finite x within 2^-8 relative of the largest
 * bf16 may round to ±Inf; ±Inf is kept; NaN gives 0x7FC0 (as split). */
MASTER_PAIR_FN uint16_t bf16_sr_bits(uint32_t u, uint32_t r) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0; /* NaN */
    if ((u & 0x7FFFFFFFu) == 0x7F800000u) return (uint16_t)(u >> 16); /* ±Inf */
    return (uint16_t)((u + (r & 0xFFFFu)) >> 16);
}

/* The random bits of stochastic rounding: element e of the tensor whose name hashes to `tensor`
 * (bf16_sr_tensor_hash), at optimizer step `step`, in a run seeded `seed`, is rounded with the top
 * 16 bits of Philox4x32-10 (ref/dropout.h) word e & 3 of
 *   counter = (block & 0xFFFFFFFF, block >> 32, step & 0xFFFFFFFF, tensor),  block = e >> 2
 *   key     = (seed & 0xFFFFFFFF ^ BF16_SR_KEY0, seed >> 32 ^ BF16_SR_KEY1)
 * The key differs from dropout's (seed itself), so the two streams are unrelated. */
#define BF16_SR_KEY0 0x7F4A7C15u
#define BF16_SR_KEY1 0x9E3779B9u
/* FNV-1a (32 bits) of a tensor's name: its stochastic-rounding stream, the same on every engine
 * (the names are the checkpoints'). */
MASTER_PAIR_FN uint32_t bf16_sr_tensor_hash(const char *name) {
    uint32_t h = 0x811C9DC5u;
    for (; *name; name++) h = (h ^ (uint8_t)*name) * 0x01000193u;
    return h;
}

/* Float forms (host code: the device kernels use __float_as_uint / __uint_as_float). */
static inline void master_pair_split(float x, uint16_t *hi, uint16_t *lo) {
    master_pair_split_bits(ref_f32_bits(x), hi, lo);
}

static inline float master_pair_join(uint16_t hi, uint16_t lo) {
    return ref_f32_from_bits(master_pair_join_bits(hi, lo));
}

/* join(split(x)): the value a split master holds for x. */
static inline float master_pair_round(float x) {
    uint16_t hi, lo;
    master_pair_split(x, &hi, &lo);
    return master_pair_join(hi, lo);
}

/* x[e] ← bf16_sr(x[e]) for e in [0, n), keyed as above (host; the CPU trainer's --master bf16-sr). */
void bf16_sr_round_array(float *x, int64_t n, uint64_t seed, int64_t step, uint32_t tensor);

/* x ← the values masters of storage ms hold: after optimizer step `step` ≥ 1, or at load and resume
 * (step 0). fp32: unchanged; split: master_pair_round; bf16: bf16_round; bf16-sr: bf16_round at
 * step 0, else bf16_sr_round_array keyed (seed, step, tensor). The CPU trainer's rule for its fp32
 * masters, and the parity tests' oracle of the GPU optimizers. */
void master_storage_round_array(float *x, int64_t n, enum master_storage ms, uint64_t seed, int64_t step,
                                uint32_t tensor);

/* Array forms: x[i] ← master_pair_round(x[i]); split n masters into hi, lo; join them into x. lo
 * NULL (MASTER_BF16): split writes hi alone (bf16_rne), join widens hi. */
void master_pair_round_array(float *x, int64_t n);
void master_pair_split_array(uint16_t *hi, uint16_t *lo, const float *x, int64_t n);
void master_pair_join_array(float *x, const uint16_t *hi, const uint16_t *lo, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_REF_MASTER_PAIR_H */
