/* dropout.c — Philox4x32-10 and the inverted dropout built on it (dropout.h). */
#include "ref/dropout.h"

#include "io/check.h"
#include "ref/bf16.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void ref_philox4x32_10(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) { /* the key schedule: a Weyl sequence, bumped between rounds */
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The four uniforms of block b (elements 4b .. 4b+3). */
static void dropout_block(float u[4], uint64_t seed, uint64_t offset, uint64_t b) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)offset, (uint32_t)(offset >> 32)};
    uint32_t x[4];
    ref_philox4x32_10(x, ctr, key);
    for (int l = 0; l < 4; l++) u[l] = (float)(x[l] >> 8) * 0x1p-24f; /* 24 bits: exact in fp32 */
}

float ref_dropout_uniform(uint64_t seed, uint64_t offset, int64_t e) {
    CHECK(e >= 0, "element index %lld", (long long)e);
    float u[4];
    dropout_block(u, seed, offset, (uint64_t)e >> 2);
    return u[e & 3];
}

static void check_p(float p, int64_t n) {
    CHECK(p >= 0.0f && p < 1.0f, "dropout probability %.9g must be in [0, 1)", (double)p);
    CHECK(n >= 0, "n=%lld", (long long)n);
}

void ref_dropout_mask(uint8_t *keep, int64_t n, float p, uint64_t seed, uint64_t offset) {
    check_p(p, n);
    float u[4];
    for (int64_t e = 0; e < n; e++) {
        if ((e & 3) == 0) dropout_block(u, seed, offset, (uint64_t)e >> 2);
        keep[e] = u[e & 3] >= p;
    }
}

/* y[e] = keep(e) ? act(x[e]·scale) : 0, one element at a time (y may alias x exactly). */
static void dropout_apply(float *y, const float *x, int64_t n, float p, uint64_t seed, uint64_t offset,
                          enum act_dtype act) {
    check_p(p, n);
    const float scale = (float)(1.0 / (1.0 - (double)p));
    float u[4];
    for (int64_t e = 0; e < n; e++) {
        if ((e & 3) == 0) dropout_block(u, seed, offset, (uint64_t)e >> 2);
        float v = u[e & 3] >= p ? x[e] * scale : 0.0f;
        y[e] = act_round(v, act);
    }
}

void ref_dropout_forward(float *out, const float *x, int64_t n, float p, uint64_t seed, uint64_t offset,
                         enum act_dtype act) {
    dropout_apply(out, x, n, p, seed, offset, act);
}

void ref_dropout_backward(float *dx, const float *dy, int64_t n, float p, uint64_t seed, uint64_t offset,
                          enum act_dtype act) {
    dropout_apply(dx, dy, n, p, seed, offset, act);
}
