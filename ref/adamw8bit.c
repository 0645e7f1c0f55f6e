/* adamw8bit.c — bitsandbytes AdamW8bit with blockwise 8-bit states (adamw8bit.h). */
#include "ref/adamw8bit.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "ref/quant8.h"

struct adamw8bit_hparams adamw8bit_defaults(void) {
    struct adamw8bit_hparams h = {{1e-3, 0.9, 0.999, 1e-8, 1e-2}, 1.0, ADAMW8BIT_MIN_8BIT_SIZE,
                                  ADAMW8BIT_BNB_CUDA};
    return h;
}

void adamw8bit_init(struct adamw8bit_state *s, int64_t n, int min_8bit_size) {
    CHECK(n >= 0, "adamw8bit_init: n=%lld", (long long)n);
    memset(s, 0, sizeof *s);
    s->n = n;
    s->is_8bit = n >= min_8bit_size;
    size_t nn = (size_t)n + 1;
    if (s->is_8bit) {
        size_t nb = (size_t)adamw8bit_n_blocks(n) + 1;
        s->q1 = calloc(nn, 1);
        s->q2 = calloc(nn, 1);
        s->absmax1 = calloc(nb, sizeof(float));
        s->absmax2 = calloc(nb, sizeof(float));
        CHECK(s->q1 && s->q2 && s->absmax1 && s->absmax2, "out of memory");
    } else {
        s->m = calloc(nn, sizeof(float));
        s->v = calloc(nn, sizeof(float));
        CHECK(s->m && s->v, "out of memory");
    }
    quant8_dynamic_map(s->map1, 1);
    quant8_dynamic_map(s->map2, 0);
}

void adamw8bit_free(struct adamw8bit_state *s) {
    free(s->q1), free(s->q2), free(s->absmax1), free(s->absmax2), free(s->m), free(s->v);
    memset(s, 0, sizeof *s);
}

/* kOptimizer32bit2State<float, ADAM> (no NaN guard there: a NaN gradient propagates). */
static void step32_cuda(struct adamw8bit_state *s, float *p, const float *g, const struct adamw8bit_hparams *h) {
    const float b1 = (float)h->hp.beta1, b2 = (float)h->hp.beta2, lr = (float)h->hp.lr, eps = (float)h->hp.eps;
    const float wd = (float)h->hp.weight_decay, gs = (float)h->gnorm_scale;
    float c1 = 1.0f - powf(b1, (float)s->step);
    float c2 = sqrtf(1.0f - powf(b2, (float)s->step));
    float step_size = -lr * c2 / c1;
    for (int64_t i = 0; i < s->n; i++) {
        float gv = g[i] * gs;
        s->m[i] = s->m[i] * b1 + (1.0f - b1) * gv;
        s->v[i] = s->v[i] * b2 + (1.0f - b2) * (gv * gv);
        p[i] = p[i] + (1.0f * step_size) * (s->m[i] / (sqrtf(s->v[i]) + eps * c2));
        if (wd > 0.0f) p[i] = p[i] * (1.0f - lr * wd);
    }
}

/* The CPU backend's torch ops (bitsandbytes/backends/cpu/ops.py, _optimizer_update_32bit_cpu):
 * m.mul_(β1).add_(g, alpha=1−β1) and v.mul_(β2).addcmul_(g, g, value=1−β2), whose vectorized
 * (AVX2/AVX512) kernels compute fma(1−β1, g, m·β1) and fma((1−β2)·g, g, v·β2) (checked against
 * torch 2.15 on the fixtures),
 * corrections in double, p·(1 − lr·wd) first, then p += (step_size·1)·m/(sqrt(v) + eps·c2). */
static void step32_cpu(struct adamw8bit_state *s, float *p, const float *g, const struct adamw8bit_hparams *h) {
    double b1 = h->hp.beta1, b2 = h->hp.beta2, lr = h->hp.lr, wd = h->hp.weight_decay;
    double c1 = 1.0 - pow(b1, s->step), c2 = sqrt(1.0 - pow(b2, s->step));
    float step_size = (float)(-lr * c2 / c1);
    float eps_c2 = (float)(h->hp.eps * c2);
    for (int64_t i = 0; i < s->n; i++) {
        float gv = g[i] * (float)h->gnorm_scale;
        s->m[i] = fmaf(gv, (float)(1.0 - b1), s->m[i] * (float)b1);
        s->v[i] = fmaf((float)(1.0 - b2) * gv, gv, s->v[i] * (float)b2);
        if (wd > 0) p[i] = p[i] * (float)(1.0 - lr * wd);
        float upd = s->m[i] / (sqrtf(s->v[i]) + eps_c2);
        p[i] = fmaf(upd, step_size, p[i]);
    }
}

static void step8_cuda(struct adamw8bit_state *s, float *p, const float *g, const struct adamw8bit_hparams *h) {
    const float b1 = (float)h->hp.beta1, b2 = (float)h->hp.beta2, lr = (float)h->hp.lr, eps = (float)h->hp.eps;
    const float wd = (float)h->hp.weight_decay, gs = (float)h->gnorm_scale;
    float c1 = 1.0f - powf(b1, (float)s->step);
    float c2 = sqrtf(1.0f - powf(b2, (float)s->step));
    float step_size = (-lr * c2) / c1;
    float *m = malloc(sizeof(float) * ADAMW8BIT_BLOCKSIZE), *v = malloc(sizeof(float) * ADAMW8BIT_BLOCKSIZE);
    /* the requantization's QUANT8_CUDA codes by table (the same codes as quant8_encode's search) */
    struct quant8_table *tab = malloc(2 * sizeof *tab);
    CHECK(m && v && tab, "out of memory");
    quant8_table_init(&tab[0], s->map1);
    quant8_table_init(&tab[1], s->map2);
    for (int64_t b0 = 0, blk = 0; b0 < s->n; b0 += ADAMW8BIT_BLOCKSIZE, blk++) {
        int64_t len = s->n - b0 < ADAMW8BIT_BLOCKSIZE ? s->n - b0 : ADAMW8BIT_BLOCKSIZE;
        float a1 = s->absmax1[blk], a2 = s->absmax2[blk];
        float max1 = -FLT_MAX, max2 = -FLT_MAX;
        for (int64_t j = 0; j < len; j++) {
            int64_t i = b0 + j;
            float gv = g[i] * gs;
            if (isfinite(g[i])) {
                m[j] = s->map1[s->q1[i]] * a1;
                m[j] = (m[j] * b1) + ((1.0f - b1) * gv);
                v[j] = s->map2[s->q2[i]] * a2;
                v[j] = (v[j] * b2) + (((1.0f - b2) * gv) * gv);
            } else {
                m[j] = 0.0f;
                v[j] = 0.0f;
            }
            max1 = fmaxf(max1, fabsf(m[j]));
            max2 = fmaxf(max2, fabsf(v[j]));
        }
        if (len < ADAMW8BIT_BLOCKSIZE) {
            /* The kernel's loader pads a short block with g = 0, state1 code 128, state2 code 0;
             * those lanes' updated moments enter the block maxima. */
            max1 = fmaxf(max1, fabsf(s->map1[128] * a1 * b1 + (1.0f - b1) * 0.0f));
            max2 = fmaxf(max2, fabsf(s->map2[0] * a2 * b2));
        }
        s->absmax1[blk] = max1;
        s->absmax2[blk] = max2;
        for (int64_t j = 0; j < len; j++) {
            int64_t i = b0 + j;
            if (isfinite(g[i])) {
                p[i] = p[i] + step_size * (m[j] / (sqrtf(v[j]) + c2 * eps));
                if (wd > 0.0f) p[i] = p[i] * (1.0f - lr * wd);
            }
            uint8_t c1q = quant8_table_encode(&tab[0], m[j] / max1);
            if (signbit(s->map1[c1q]) != signbit(m[j])) c1q = (uint8_t)(m[j] > 0.0f ? c1q + 1 : c1q - 1);
            s->q1[i] = c1q;
            s->q2[i] = quant8_table_encode(&tab[1], v[j] / max2);
        }
    }
    free(m), free(v), free(tab);
}

/* The CPU backend (_optimizer_update_8bit_blockwise_cpu): dequantize, torch-op update with the
 * decay first, requantize with quantize_blockwise (no sign nudge). Its C++ encoder searches with
 * an approximate bin search; here the exact nearest code (ties to the lower) stands in for it. */
static void step8_cpu(struct adamw8bit_state *s, float *p, const float *g, const struct adamw8bit_hparams *h) {
    int64_t n = s->n;
    float *m = malloc(sizeof(float) * (size_t)n + 4), *v = malloc(sizeof(float) * (size_t)n + 4);
    CHECK(m && v, "out of memory");
    quant8_dequantize_blockwise(m, s->q1, s->absmax1, n, ADAMW8BIT_BLOCKSIZE, s->map1);
    quant8_dequantize_blockwise(v, s->q2, s->absmax2, n, ADAMW8BIT_BLOCKSIZE, s->map2);
    double b1 = h->hp.beta1, b2 = h->hp.beta2, lr = h->hp.lr, wd = h->hp.weight_decay;
    double c1 = 1.0 - pow(b1, s->step), c2 = sqrt(1.0 - pow(b2, s->step));
    float fc2 = (float)c2, alpha = (float)(-lr / c1);
    for (int64_t i = 0; i < n; i++) {
        float gv = g[i] * (float)h->gnorm_scale;
        m[i] = fmaf(gv, (float)(1.0 - b1), m[i] * (float)b1);
        v[i] = fmaf((float)(1.0 - b2) * gv, gv, v[i] * (float)b2);
        float denom = sqrtf(v[i]) / fc2 + (float)h->hp.eps;
        if (wd > 0) p[i] = p[i] * (float)(1.0 - lr * wd);
        p[i] = p[i] + (alpha * m[i]) / denom; /* addcdiv: self + value·t1/t2, left to right */
    }
    for (int64_t b0 = 0, blk = 0; b0 < n; b0 += ADAMW8BIT_BLOCKSIZE, blk++) {
        int64_t b1i = b0 + ADAMW8BIT_BLOCKSIZE < n ? b0 + ADAMW8BIT_BLOCKSIZE : n;
        float a1 = -FLT_MAX, a2 = -FLT_MAX;
        for (int64_t i = b0; i < b1i; i++) a1 = fmaxf(a1, fabsf(m[i])), a2 = fmaxf(a2, fabsf(v[i]));
        s->absmax1[blk] = a1;
        s->absmax2[blk] = a2;
        for (int64_t i = b0; i < b1i; i++) {
            s->q1[i] = quant8_encode(s->map1, m[i] / a1, QUANT8_NEAREST);
            s->q2[i] = quant8_encode(s->map2, v[i] / a2, QUANT8_NEAREST);
        }
    }
    free(m), free(v);
}

void adamw8bit_step(struct adamw8bit_state *s, float *p, const float *g, const struct adamw8bit_hparams *h) {
    s->step += 1;
    int cpu = h->variant == ADAMW8BIT_BNB_CPU;
    if (s->is_8bit) (cpu ? step8_cpu : step8_cuda)(s, p, g, h);
    else (cpu ? step32_cpu : step32_cuda)(s, p, g, h);
}

void adamw8bit_moments(const struct adamw8bit_state *s, float *m, float *v) {
    if (s->is_8bit) {
        quant8_dequantize_blockwise(m, s->q1, s->absmax1, s->n, ADAMW8BIT_BLOCKSIZE, s->map1);
        quant8_dequantize_blockwise(v, s->q2, s->absmax2, s->n, ADAMW8BIT_BLOCKSIZE, s->map2);
    } else {
        memcpy(m, s->m, sizeof(float) * (size_t)s->n);
        memcpy(v, s->v, sizeof(float) * (size_t)s->n);
    }
}
