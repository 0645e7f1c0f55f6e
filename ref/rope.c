/* rope.c — the reference rotary embedding (rope.h): transformers' fp32 frequency arithmetic step
 * by step, tables of cos/sin, and the rotate_half rotation in place. */
#include "ref/rope.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/check.h"
#include "ref/bf16.h"


/* torch's `scalar / t` is reciprocal(t)·scalar in t's dtype (torch/_tensor.py __rdiv__). */
static inline float rdiv_f32(float scalar, float t) {
    float rec = 1.0f / t;
    return rec * scalar;
}

void ref_rope_inv_freq(float *inv_freq, int D, float theta, const struct rope_scaling *scaling) {
    CHECK(D >= 2 && D % 2 == 0, "head dim D=%d must be even", D);
    CHECK(theta > 1.0f, "rope_theta %.9g", (double)theta);
    const int half = D / 2;
    for (int i = 0; i < half; i++) {
        /* arange(0, D, 2, int64).float() / D, in fp32 */
        float e = (float)(2 * i) / (float)D;
        /* base ** e: torch's fp32 pow; evaluated in double and rounded once */
        float p = (float)pow((double)theta, (double)e);
        inv_freq[i] = rdiv_f32(1.0f, p);
    }
    if (scaling == NULL || scaling->kind == ROPE_SCALING_NONE) return;
    CHECK(scaling->kind == ROPE_SCALING_LLAMA3, "unknown rope scaling kind %d", (int)scaling->kind);
    const float factor = scaling->factor, low = scaling->low_freq_factor, high = scaling->high_freq_factor;
    const int orig = scaling->original_max_position_embeddings;
    CHECK(factor > 0.0f && low > 0.0f && high > low && orig > 0,
          "llama3 rope scaling factor=%.9g low=%.9g high=%.9g orig=%d", (double)factor, (double)low, (double)high,
          orig);
    /* Python computes these thresholds in double; comparing with the fp32 tensor casts them to fp32. */
    const float low_wavelen = (float)((double)orig / (double)low);
    const float high_wavelen = (float)((double)orig / (double)high);
    const float two_pi = (float)(2.0 * M_PI);
    const float denom = (float)((double)high - (double)low);
    for (int i = 0; i < half; i++) {
        float f = inv_freq[i];
        float wavelen = rdiv_f32(two_pi, f);
        /* inv_freq_llama = where(wavelen > low_wavelen, inv_freq / factor, inv_freq) */
        float fl = wavelen > low_wavelen ? f / factor : f;
        if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
            float s = (rdiv_f32((float)orig, wavelen) - low) / denom;
            float one_minus_s = 1.0f - s;
            float a = one_minus_s * fl / factor; /* ((1 − s)·inv) / factor, left to right */
            float b = s * fl;
            fl = a + b;
        }
        inv_freq[i] = fl;
    }
}

void ref_rope_cos_sin(float *cos_tab, float *sin_tab, const float *inv_freq, int max_pos, int D) {
    CHECK(D >= 2 && D % 2 == 0 && max_pos >= 1, "D=%d max_pos=%d", D, max_pos);
    const int half = D / 2;
    for (int p = 0; p < max_pos; p++) {
        for (int i = 0; i < half; i++) {
            float ang = (float)p * inv_freq[i]; /* one fp32 product, as torch */
            cos_tab[(int64_t)p * half + i] = (float)cos((double)ang);
            sin_tab[(int64_t)p * half + i] = (float)sin((double)ang);
        }
    }
}

void ref_rope_cache_build(struct ref_rope_cache *c, int max_pos, int D, float theta,
                          const struct rope_scaling *scaling) {
    CHECK(D >= 2 && D % 2 == 0 && max_pos >= 1, "D=%d max_pos=%d", D, max_pos);
    size_t half = (size_t)D / 2;
    c->max_pos = max_pos;
    c->D = D;
    c->inv_freq = malloc(sizeof(float) * half);
    c->cos = malloc(sizeof(float) * half * (size_t)max_pos);
    c->sin = malloc(sizeof(float) * half * (size_t)max_pos);
    if (c->inv_freq == NULL || c->cos == NULL || c->sin == NULL) {
        fprintf(stderr, "error: out of memory for the RoPE tables (%d positions x %d)\n", max_pos, D / 2);
        exit(1);
    }
    ref_rope_inv_freq(c->inv_freq, D, theta, scaling);
    ref_rope_cos_sin(c->cos, c->sin, c->inv_freq, max_pos, D);
}

void ref_rope_cache_free(struct ref_rope_cache *c) {
    free(c->inv_freq);
    free(c->cos);
    free(c->sin);
    c->inv_freq = c->cos = c->sin = NULL;
}

/* Rotates `heads` vectors of D at x (one token) by the angles of row `pos`; sign = +1 forward
 * (x' = x·c + rotate_half(x)·s), −1 backward (the transpose). */
static void rotate_token(float *x, int heads, int D, const float *cos_row, const float *sin_row, float sign,
                         enum act_dtype act) {
    const int h = D / 2;
    for (int hd = 0; hd < heads; hd++) {
        float *v = x + (int64_t)hd * D;
        for (int i = 0; i < h; i++) {
            float c = act_round(cos_row[i], act), s = act_round(sin_row[i], act);
            float x1 = v[i], x2 = v[i + h];
            float x1c = act_round(x1 * c, act), x2c = act_round(x2 * c, act);
            float x1s = act_round(x1 * s, act), x2s = act_round(x2 * s, act);
            /* forward: [x1c − x2s, x2c + x1s]; backward: [x1c + x2s, x2c − x1s] */
            v[i] = act_round(sign > 0 ? x1c - x2s : x1c + x2s, act);
            v[i + h] = act_round(sign > 0 ? x2c + x1s : x2c - x1s, act);
        }
    }
}

static void rope_apply(float *q, float *k, const int32_t *positions, const struct ref_rope_cache *c, int B, int T,
                       int H, int KVH, int D, float sign, enum act_dtype act) {
    CHECK(B >= 0 && T >= 0 && H >= 1 && KVH >= 1 && D >= 2 && D % 2 == 0, "B=%d T=%d H=%d KVH=%d D=%d", B, T, H,
          KVH, D);
    CHECK(c != NULL && c->D == D, "the RoPE cache has D=%d, the op D=%d", c ? c->D : -1, D);
    const int half = D / 2;
    const int64_t N = (int64_t)B * T;
    for (int64_t n = 0; n < N; n++) {
        int p = positions[n];
        CHECK(p >= 0 && p < c->max_pos, "token %lld has position %d outside the RoPE table [0, %d)", (long long)n, p,
              c->max_pos);
        const float *cr = c->cos + (int64_t)p * half, *sr = c->sin + (int64_t)p * half;
        if (q != NULL) rotate_token(q + n * H * D, H, D, cr, sr, sign, act);
        if (k != NULL) rotate_token(k + n * KVH * D, KVH, D, cr, sr, sign, act);
    }
}

void ref_rope_forward(float *q, float *k, const int32_t *positions, const struct ref_rope_cache *c, int B, int T,
                      int H, int KVH, int D, enum act_dtype act) {
    rope_apply(q, k, positions, c, B, T, H, KVH, D, +1.0f, act);
}

void ref_rope_backward(float *dq, float *dk, const int32_t *positions, const struct ref_rope_cache *c, int B, int T,
                       int H, int KVH, int D, enum act_dtype act) {
    rope_apply(dq, dk, positions, c, B, T, H, KVH, D, -1.0f, act);
}
