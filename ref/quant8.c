/* quant8.c — bitsandbytes dynamic maps and blockwise 8-bit quantization (quant8.h). */
#include "ref/quant8.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"

/* torch's CPU linspace: fp32 step, element = fma(step, j, start) below the halfway point and
 * fma(−step, steps−1−j, end) above it (the vectorized kernel computes each element with one
 * rounding; settled against torch 2.15, see quant8_test.c). */
void quant8_linspace_f32(float *out, float start, float end, int steps) {
    CHECK(steps >= 2, "linspace: steps=%d", steps);
    float step = (end - start) / (float)(steps - 1);
    int half = steps / 2;
    for (int j = 0; j < steps; j++)
        out[j] = j < half ? fmaf(step, (float)j, start) : fmaf(-step, (float)(steps - 1 - j), end);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void quant8_dynamic_map(float map[256], int is_signed) {
    static const double pow10[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    float b[130];
    int k = 0;
    for (int i = 0; i < 7; i++) {
        int n = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        quant8_linspace_f32(b, 0.1f, 1.0f, n);
        float scale = (float)pow10[i];
        for (int j = 0; j + 1 < n; j++) {
            float mean = (b[j] + b[j + 1]) / 2.0f;
            float v = scale * mean;
            map[k++] = v;
            if (is_signed) map[k++] = -v;
        }
    }
    map[k++] = 0.0f;
    map[k++] = 1.0f;
    CHECK(k == 256, "dynamic map has %d entries", k);
    qsort(map, 256, sizeof(float), cmp_float);
}

/* CUDA dQuantize<0>: binary search with pivots 127 ± 64 ± ... ± 1, then the midpoint rule. */
static uint8_t encode_cuda(const float *code, float x) {
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f;
    float val = code[pivot];
    for (int i = 64; i > 0; i >>= 1) {
        if (x > val) {
            lower_pivot = pivot;
            lower = val;
            pivot += i;
        } else {
            upper_pivot = pivot;
            upper = val;
            pivot -= i;
        }
        val = code[pivot];
    }
    if (upper_pivot == 255) upper = code[upper_pivot];
    if (lower_pivot == 0) lower = code[lower_pivot];
    if (x > val) {
        float midpoint = (upper + val) * 0.5f;
        return (uint8_t)(x > midpoint ? upper_pivot : pivot);
    }
    float midpoint = (lower + val) * 0.5f;
    return (uint8_t)(x < midpoint ? lower_pivot : pivot);
}

float quant8_cuda_threshold(const float map[256], int c) {
    CHECK(c >= 0 && c < 255, "quant8_cuda_threshold: c=%d", c);
    float mid = (map[c] + map[c + 1]) * 0.5f;
    if (c & 1) return mid;
    return nextafterf(mid, INFINITY);
}

static float quant8_float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* The magnitude bits of range k's smallest and largest values. */
static uint32_t quant8_range_first(uint32_t k) { return k ? QUANT8_TABLE_LO + (k << QUANT8_TABLE_SHIFT) : 0u; }
static uint32_t quant8_range_last(uint32_t k) {
    uint32_t u = QUANT8_TABLE_LO + ((k + 1u) << QUANT8_TABLE_SHIFT) - 1u;
    return u < QUANT8_TABLE_TOP ? u : QUANT8_TABLE_TOP;
}

void quant8_table_init(struct quant8_table *tab, const float map[256]) {
    for (int c = 0; c < 255; c++) tab->t[c] = quant8_cuda_threshold(map, c);
    tab->t[255] = NAN; /* no value passes it: the count stops at 255 */
    for (int c = 1; c < 255; c++) CHECK(tab->t[c] >= tab->t[c - 1], "quant8_table_init: thresholds not ascending at %d", c);
    CHECK(tab->t[0] > -2.0f && tab->t[254] <= 2.0f, "quant8_table_init: thresholds beyond [-2, 2]");
    /* the count at each range's lowest value, walking the values upwards: the negative ranges from
     * the largest magnitude down, then the positive ones */
    unsigned c = 0;
    for (int k = QUANT8_TABLE_BUCKETS - 1; k >= 0; k--) {
        const float lowest = -quant8_float_of(quant8_range_last((uint32_t)k));
        while (lowest >= tab->t[c]) c++;
        tab->c0[QUANT8_TABLE_BUCKETS + k] = (uint8_t)c;
    }
    for (int k = 0; k < QUANT8_TABLE_BUCKETS; k++) {
        const float lowest = quant8_float_of(quant8_range_first((uint32_t)k));
        while (lowest >= tab->t[c]) c++;
        tab->c0[k] = (uint8_t)c;
    }
}

uint8_t quant8_table_encode(const struct quant8_table *tab, float x) {
    if (isnan(x)) return 0;
    const float xc = x < -2.0f ? -2.0f : x > 2.0f ? 2.0f : x;
    uint32_t b;
    memcpy(&b, &xc, 4);
    const uint32_t u = b & 0x7fffffffu;
    const uint32_t k = ((u > QUANT8_TABLE_LO ? u : QUANT8_TABLE_LO) - QUANT8_TABLE_LO) >> QUANT8_TABLE_SHIFT;
    unsigned c = tab->c0[k + (b >> 31) * QUANT8_TABLE_BUCKETS];
    while (xc >= tab->t[c]) c++;
    return (uint8_t)c;
}

/* torch.bucketize(x, (code[:-1] + code[1:]) / 2, right=False): the number of midpoints < x. */
static uint8_t encode_nearest(const float *code, float x) {
    int lo = 0, hi = 255; /* answer in [0, 255] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        float b = (code[mid] + code[mid + 1]) / 2.0f;
        if (b < x) lo = mid + 1;
        else hi = mid;
    }
    return (uint8_t)lo;
}

uint8_t quant8_encode(const float map[256], float x_norm, enum quant8_round r) {
    return r == QUANT8_CUDA ? encode_cuda(map, x_norm) : encode_nearest(map, x_norm);
}

void quant8_quantize_blockwise(uint8_t *q, float *absmax, const float *x, int64_t n, int blocksize,
                               const float map[256], enum quant8_round r) {
    CHECK(blocksize > 0 && n >= 0, "quant8_quantize_blockwise: n=%lld blocksize=%d", (long long)n, blocksize);
    for (int64_t b0 = 0, blk = 0; b0 < n; b0 += blocksize, blk++) {
        int64_t b1 = b0 + blocksize < n ? b0 + blocksize : n;
        float m = b1 - b0 < blocksize ? 0.0f : -FLT_MAX; /* CUDA: the loader pads a short block with 0.0 */
        for (int64_t i = b0; i < b1; i++) m = fmaxf(m, fabsf(x[i]));
        absmax[blk] = m;
        float rcp = 1.0f / m;
        for (int64_t i = b0; i < b1; i++) q[i] = quant8_encode(map, x[i] * rcp, r);
    }
}

void quant8_dequantize_blockwise(float *out, const uint8_t *q, const float *absmax, int64_t n, int blocksize,
                                 const float map[256]) {
    CHECK(blocksize > 0 && n >= 0, "quant8_dequantize_blockwise: n=%lld blocksize=%d", (long long)n, blocksize);
    for (int64_t i = 0; i < n; i++) out[i] = map[q[i]] * absmax[i / blocksize];
}
