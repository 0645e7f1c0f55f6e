/* rng.c — xoshiro256** (Blackman & Vigna) seeded by splitmix64; Box–Muller normals. */
#include "tests/common/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void rng_init(struct rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    r->has_spare = 0;
    r->spare = 0.0;
}

uint64_t rng_u64(struct rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(struct rng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

double rng_range(struct rng *r, double lo, double hi) { return lo + (hi - lo) * rng_uniform(r); }

double rng_normal(struct rng *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1;
    do u1 = rng_uniform(r);
    while (u1 <= 0.0);
    double u2 = rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    double ang = 6.283185307179586476925 * u2;
    r->spare = rad * sin(ang);
    r->has_spare = 1;
    return rad * cos(ang);
}

int rng_int(struct rng *r, int n) {
    uint64_t un = (uint64_t)n;
    uint64_t limit = UINT64_MAX - UINT64_MAX % un;
    uint64_t v;
    do v = rng_u64(r);
    while (v >= limit);
    return (int)(v % un);
}

void rng_fill_uniform(struct rng *r, float *x, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)rng_range(r, lo, hi);
}

void rng_fill_normal(struct rng *r, float *x, int64_t n, double mean, double std) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(mean + std * rng_normal(r));
}

void rng_fill_int(struct rng *r, float *x, int64_t n, int lo, int hi) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + rng_int(r, hi - lo + 1));
}
