/* rng.h — the seeded random numbers of the tests (xoshiro256** seeded through splitmix64).
 *
 * Reproducible on every platform: the same seed gives the same stream bit for bit.
 * Inputs in tests are drawn from here, never left at zero (STYLE.md).
 *   rng_init(r, seed)                 a stream from a 64-bit seed
 *   rng_u64(r)                        64 random bits
 *   rng_uniform(r)                    double in [0, 1) with 53 random bits
 *   rng_range(r, lo, hi)              double in [lo, hi)
 *   rng_normal(r)                     standard normal (Box–Muller, in double)
 *   rng_int(r, n)                     int in [0, n), n > 0 (rejection sampling, unbiased)
 *   rng_fill_uniform(r, x, n, lo, hi) float array in [lo, hi)
 *   rng_fill_normal(r, x, n, mean, std)
 *   rng_fill_int(r, x, n, lo, hi)     integer-valued floats in [lo, hi] (exact in any dtype that
 *                                     holds them: the CUTLASS trick for exact GEMM checks)
 */
#ifndef REFINE_TESTS_COMMON_RNG_H
#define REFINE_TESTS_COMMON_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rng {
    uint64_t s[4];
    int has_spare;
    double spare;
};

void rng_init(struct rng *r, uint64_t seed);
uint64_t rng_u64(struct rng *r);
double rng_uniform(struct rng *r);
double rng_range(struct rng *r, double lo, double hi);
double rng_normal(struct rng *r);
int rng_int(struct rng *r, int n);
void rng_fill_uniform(struct rng *r, float *x, int64_t n, double lo, double hi);
void rng_fill_normal(struct rng *r, float *x, int64_t n, double mean, double std);
void rng_fill_int(struct rng *r, float *x, int64_t n, int lo, int hi);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TESTS_COMMON_RNG_H */
