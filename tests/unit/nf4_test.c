/* nf4_test.c — ref/nf4 against its definition: table and thresholds, the rounding rule at every
 * threshold, packing, every blocksize, ragged and odd lengths, NaN/zero blocks, double
 * quantization error bounds, and the dequantization of a checkpoint's parts (bound by io/bnb4,
 * whose checks are tests/unit/bnb4_test.c).
 *
 * Independent computations: the nearest table value by a brute-force search in double (ties to
 * the lower code), and bounds derived from the table's gaps. Byte-exact agreement with
 * bitsandbytes itself is tests/golden/formats_golden_test.c.
 *
 *   bazel test //tests/unit:nf4_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/bnb4.h"
#include "ref/bf16.h"
#include "ref/nf4.h"
#include "ref/quant8.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

static int nearest_code(double x) { /* ties to the lower code */
    int best = 0;
    for (int c = 1; c < 16; c++)
        if (fabs(nf4_table[c] - x) < fabs(nf4_table[best] - x)) best = c;
    return best;
}

static void test_table(void) {
    EXPECT(nf4_table[7] == 0.0f && nf4_table[0] == -1.0f && nf4_table[15] == 1.0f, "table ends and zero");
    for (int c = 0; c < 15; c++) {
        EXPECT(nf4_table[c] < nf4_table[c + 1], "table ascending at %d", c);
        double mid = ((double)nf4_table[c] + nf4_table[c + 1]) / 2;
        float t = nf4_thresholds[c];
        EXPECT(fabs(t - mid) <= 0.5 * (nextafterf(fabsf(t), INFINITY) - fabsf(t)) + 1e-12,
               "threshold %d = %.9g is not the midpoint %.9g within half an ulp", c, (double)t, mid);
        /* The rule: ON a threshold → the lower code, one ulp above → the upper one. */
        EXPECT(nf4_encode(t, NF4_CUDA) == c, "encode(t%d) = %d, expected %d", c, nf4_encode(t, NF4_CUDA), c);
        EXPECT(nf4_encode(nextafterf(t, INFINITY), NF4_CUDA) == c + 1, "encode(t%d + ulp) expected %d", c, c + 1);
        EXPECT(nf4_encode(nextafterf(t, -INFINITY), NF4_CUDA) == c, "encode(t%d − ulp) expected %d", c, c);
        float tt = (nf4_table[c] + nf4_table[c + 1]) / 2.0f;
        EXPECT(nf4_encode(tt, NF4_TORCH) == c && nf4_encode(nextafterf(tt, INFINITY), NF4_TORCH) == c + 1,
               "torch midpoint %d", c);
        if (tt != t) printf("  note: threshold %d: CUDA literal %a, fp32 midpoint %a\n", c, (double)t, (double)tt);
    }
    EXPECT(nf4_encode(NAN, NF4_CUDA) == 0, "NaN → code 0");
    EXPECT(nf4_encode(-2.0f, NF4_CUDA) == 0 && nf4_encode(2.0f, NF4_CUDA) == 15, "out of [-1, 1] clamps");
    /* Random normalized values away from the thresholds: the nearest code. */
    struct rng r;
    rng_init(&r, g_seed);
    int64_t bad = 0;
    for (int i = 0; i < 100000; i++) {
        float x = (float)rng_range(&r, -1.0, 1.0);
        int near_t = 0;
        for (int c = 0; c < 15; c++) near_t |= fabsf(x - nf4_thresholds[c]) <= 4 * FLT_EPSILON;
        if (near_t) continue;
        bad += nf4_encode(x, NF4_CUDA) != nearest_code(x) || nf4_encode(x, NF4_TORCH) != nearest_code(x);
    }
    EXPECT(bad == 0, "%lld random normalized values did not get the nearest code", (long long)bad);
}

static void test_roundtrip(int64_t n, int blocksize) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)n * 7 + (uint64_t)blocksize);
    int64_t nb = nf4_n_blocks(n, blocksize);
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *absmax = malloc(sizeof(float) * nb);
    float *absmax2 = malloc(sizeof(float) * nb);
    uint8_t *p = malloc((size_t)nf4_packed_bytes(n)), *p2 = malloc((size_t)nf4_packed_bytes(n));
    /* Weights exactly representable: code·scale per block, with one ±1 code per block so the
     * block's absmax is its scale. Quantizing them must give back the codes. */
    uint8_t *codes = malloc((size_t)n);
    for (int64_t b = 0; b < nb; b++) {
        float scale = (float)exp(rng_range(&r, -8, 3));
        int64_t b0 = b * blocksize, b1 = b0 + blocksize < n ? b0 + blocksize : n;
        for (int64_t i = b0; i < b1; i++) {
            codes[i] = (uint8_t)rng_int(&r, 16);
            if (i == b0 + (b1 - b0) / 2) codes[i] = rng_int(&r, 2) ? 15 : 0;
            x[i] = nf4_table[codes[i]] * scale;
        }
    }
    nf4_quantize(p, absmax, x, n, blocksize, NF4_CUDA);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += nf4_code_at(p, i) != codes[i];
    /* High nibble first, the odd pad nibble is code 7. */
    for (int64_t i = 0; i + 1 < n; i += 2) bad += p[i / 2] != (uint8_t)((codes[i] << 4) | codes[i + 1]);
    if (n & 1) bad += p[n / 2] != (uint8_t)((codes[n - 1] << 4) | 7);
    EXPECT(bad == 0, "n=%lld bs=%d: %lld representable weights lost their code or packing", (long long)n, blocksize,
           (long long)bad);
    nf4_dequantize(y, p, absmax, n, blocksize, ACT_F32);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld blocksize=%d", (long long)n, blocksize);
    struct cmp_case c = {"nf4_dequantize", "representable weights", shape, "nf4", g_seed};
    cmp_exact_f32(&c, y, x, n);

    /* Random normal weights: |w − dq(w)| ≤ half the largest table gap · absmax, and the torch
     * variant agrees except where a value sits on a threshold. */
    rng_fill_normal(&r, x, n, 0.0, 0.02);
    nf4_quantize(p, absmax, x, n, blocksize, NF4_CUDA);
    nf4_quantize(p2, absmax2, x, n, blocksize, NF4_TORCH);
    nf4_dequantize(y, p, absmax, n, blocksize, ACT_F32);
    double maxgap = 0;
    for (int k = 0; k < 15; k++) maxgap = fmax(maxgap, (double)nf4_table[k + 1] - nf4_table[k]);
    int64_t over = 0, differ = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = absmax[i / blocksize];
        over += fabs((double)y[i] - x[i]) > (maxgap / 2) * a * (1 + 1e-6);
        over += nearest_code((double)x[i] / a) != nf4_code_at(p, i) &&
                fabs(fabs((double)x[i] / a - nf4_table[nearest_code((double)x[i] / a)]) -
                     fabs((double)x[i] / a - nf4_table[nf4_code_at(p, i)])) > 1e-6;
        differ += nf4_code_at(p, i) != nf4_code_at(p2, i);
    }
    EXPECT(over == 0, "%s: %lld weights beyond the half-gap bound or not nearest", shape, (long long)over);
    EXPECT(differ <= n / 10000 + 1, "%s: torch and CUDA variants differ on %lld weights", shape, (long long)differ);
    EXPECT(memcmp(absmax, absmax2, sizeof(float) * nb) == 0, "%s: absmax differs between variants", shape);
    /* ACT_BF16 rounds the fp32 product. */
    float *yb = malloc(sizeof(float) * n);
    nf4_dequantize(yb, p, absmax, n, blocksize, ACT_BF16);
    int64_t nb16 = 0;
    for (int64_t i = 0; i < n; i++) nb16 += yb[i] != bf16_round(y[i]);
    EXPECT(nb16 == 0, "%s: bf16 dequant is not the rounding of the fp32 one (%lld)", shape, (long long)nb16);
    free(yb);
    free(x), free(y), free(absmax), free(absmax2), free(p), free(p2), free(codes);
}

static void test_edges(void) {
    float x[70];
    uint8_t p[35];
    float absmax[2], y[70];
    for (int i = 0; i < 70; i++) x[i] = 0.0f;
    x[64] = 3.0f;
    x[65] = NAN;
    nf4_quantize(p, absmax, x, 69, 64, NF4_CUDA);
    EXPECT(absmax[0] == 0.0f && absmax[1] == 3.0f, "absmax of a zero block 0, NaN ignored: %g %g", (double)absmax[0],
           (double)absmax[1]);
    EXPECT(nf4_code_at(p, 0) == 0, "a zero block (0·Inf = NaN) gets code 0 on CUDA");
    EXPECT(nf4_code_at(p, 65) == 0 && nf4_code_at(p, 64) == 15 && nf4_code_at(p, 66) == 7, "NaN → 0, max → 15, 0 → 7");
    EXPECT(p[34] == (uint8_t)((7 << 4) | 7), "odd pad nibble 7, got 0x%02X", p[34]);
    nf4_dequantize(y, p, absmax, 69, 64, ACT_F32);
    EXPECT(y[0] == 0.0f && signbit(y[0]), "zero block dequantizes to −0");
    nf4_quantize(p, absmax, x, 69, 64, NF4_TORCH);
    EXPECT(nf4_code_at(p, 0) == 7, "torch path: a zero block gets code 7");
    EXPECT(nf4_blocksize_ok(64) && nf4_blocksize_ok(4096) && nf4_blocksize_ok(32) && !nf4_blocksize_ok(16) &&
               !nf4_blocksize_ok(96),
           "allowed blocksizes");
}

static void test_double_quant(int64_t n_blocks) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)n_blocks);
    float *absmax = malloc(sizeof(float) * n_blocks), *back = malloc(sizeof(float) * n_blocks);
    int64_t nb2 = nf4_n_blocks(n_blocks, 256);
    float *a2 = malloc(sizeof(float) * nb2), code2[256], off;
    uint8_t *aq = malloc((size_t)n_blocks);
    for (int64_t i = 0; i < n_blocks; i++) absmax[i] = (float)fabs(rng_normal(&r) * 0.05) + 0.01f;
    quant8_dynamic_map(code2, 1);
    nf4_double_quantize(aq, a2, &off, absmax, n_blocks, code2);
    double mean = 0;
    for (int64_t i = 0; i < n_blocks; i++) mean += absmax[i];
    mean /= n_blocks;
    EXPECT(fabs(off - mean) <= FLT_EPSILON * mean, "offset %.9g vs mean %.9g", (double)off, mean);
    nf4_double_dequantize(back, aq, a2, off, code2, n_blocks, 256);
    /* The largest gap of the signed map is between its two top entries (~0.014) and around 0 the
     * gaps are tiny: the error is ≤ half the largest gap · absmax2 + fp32 rounding. */
    double gap = 0;
    for (int k = 0; k < 255; k++) gap = fmax(gap, (double)code2[k + 1] - code2[k]);
    int64_t over = 0;
    for (int64_t i = 0; i < n_blocks; i++) {
        double am2 = a2[i / 256];
        double centered_max = 0;
        for (int64_t j = (i / 256) * 256; j < n_blocks && j < (i / 256 + 1) * 256; j++)
            centered_max = fmax(centered_max, fabs((double)absmax[j] - off));
        over += fabs(am2 - centered_max) > FLT_EPSILON * centered_max;
        over += fabs((double)back[i] - absmax[i]) > gap / 2 * am2 + 4 * FLT_EPSILON * absmax[i];
    }
    EXPECT(over == 0, "double quant n_blocks=%lld: %lld beyond the bound", (long long)n_blocks, (long long)over);
    free(absmax), free(back), free(a2), free(aq);
}

/* nf4_dequantize_bnb on a hand-made file bound by io/bnb4: the parts' values, then its own checks
 * (the NF4 table, the weight count). The binder's checks are tests/unit/bnb4_test.c. */
static void test_dequantize_bnb(void) {
    const int64_t out = 4, in = 33, n = out * in; /* 132 weights: 3 blocks of 64 (the last short) */
    struct rng r;
    rng_init(&r, g_seed + 99);
    float w[132], absmax[3], code2[256], a2[1], off, y[132], y2[132];
    uint8_t packed[66], aq[3];
    rng_fill_normal(&r, w, n, 0, 1);
    nf4_quantize(packed, absmax, w, n, 64, NF4_CUDA);
    quant8_dynamic_map(code2, 1);
    nf4_double_quantize(aq, a2, &off, absmax, 3, code2);
    char json[256];
    snprintf(json, sizeof json,
             "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [4, 33], "
             "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": %.9g}",
             (double)off);
    float qmap[16];
    memcpy(qmap, nf4_table, sizeof qmap);
    struct st_tensor t[6] = {
        {"w", ST_U8, 2, {66, 1}, 66, packed, 66},
        {"w.absmax", ST_U8, 1, {3}, 3, aq, 3},
        {"w.quant_map", ST_F32, 1, {16}, 16, (const uint8_t *)qmap, 64},
        {"w.nested_absmax", ST_F32, 1, {1}, 1, (const uint8_t *)a2, 4},
        {"w.nested_quant_map", ST_F32, 1, {256}, 256, (const uint8_t *)code2, 1024},
        {"w.quant_state.bitsandbytes__nf4", ST_U8, 1, {(int64_t)strlen(json)}, (int64_t)strlen(json),
         (const uint8_t *)json, strlen(json)},
    };
    struct safetensors st;
    memset(&st, 0, sizeof st);
    st.n_tensors = 6;
    st.tensors = t;
    struct bnb4_weight b;
    int64_t shape[2];
    struct io_err e = {{0}};
    int rc = bnb4_bind(&b, shape, bnb4_lookup_file(&st), "nf4_test", "w", NULL, &e);
    EXPECT(rc == BNB4_BOUND, "bind: %s", e.msg);
    if (rc != BNB4_BOUND) return;
    EXPECT(shape[0] == out && shape[1] == in && b.nested && b.blocksize == 64 && b.nested_blocksize == 256 &&
               b.n_blocks == 3 && strcmp(b.dtype, "bfloat16") == 0,
           "bind parsed the quant_state");
    rc = nf4_dequantize_bnb(y, &b, n, ACT_F32, &e);
    EXPECT(rc == 0, "dequantize_bnb: %s", e.msg);
    float back[3];
    nf4_double_dequantize(back, aq, a2, (float)strtod(strstr(json, "offset\": ") + 9, NULL), code2, 3, 256);
    nf4_dequantize(y2, packed, back, n, 64, ACT_F32);
    struct cmp_case c = {"nf4_dequantize_bnb", "vs the parts", "4x33", "nf4", g_seed};
    cmp_exact_f32(&c, y, y2, n);

    /* A quant_map that is not the NF4 table. */
    float badmap[16];
    memcpy(badmap, nf4_table, sizeof badmap);
    badmap[3] = 0.5f;
    t[2].data = (const uint8_t *)badmap;
    e.msg[0] = 0;
    EXPECT(nf4_dequantize_bnb(y, &b, n, ACT_F32, &e) == -1 && strstr(e.msg, "not the NF4 table") != NULL,
           "broken quant_map values were accepted: %s", e.msg);
    t[2].data = (const uint8_t *)qmap;
    /* Another weight count than the parts hold. */
    e.msg[0] = 0;
    EXPECT(nf4_dequantize_bnb(y, &b, n - 2, ACT_F32, &e) == -1 && strstr(e.msg, "does not hold 130") != NULL,
           "a wrong weight count was accepted: %s", e.msg);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    test_table();
    const int bs[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        test_roundtrip(4 * (int64_t)bs[i], bs[i]);
        test_roundtrip(3 * (int64_t)bs[i] + 17, bs[i]); /* ragged tail, odd n */
    }
    test_roundtrip(1, 64);
    test_roundtrip(65, 64);
    test_edges();
    test_double_quant(1);
    test_double_quant(300);
    test_double_quant(4097);
    test_dequantize_bnb();
    return test_finish("nf4_test");
}
