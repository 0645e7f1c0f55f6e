/* formats_golden_test.c — ref/bf16, fp8, quant8, nf4 and adamw8bit against bytes dumped from
 * torch and bitsandbytes (tests/golden/gen/gen_formats.py; fixtures in data/formats/).
 *
 * formats_cpu.safetensors: torch 2.15 (CPU) and bitsandbytes 0.50.2's CPU backend.
 * formats_cuda.safetensors: the same script on an H100 (torch CUDA, bitsandbytes' CUDA kernels),
 *   when present.
 *
 * Demanded exactly (bitwise): torch's bf16 and float8 conversions of a 10,786-value sample
 * (normals at 8 scales, random bit patterns, specials) in FP8_TORCH mode; every fp8 code's
 * float value; both dynamic maps; NF4 codes, packing (odd pad) and first-level absmax; the nested
 * absmax and map; the dequantized weights; the AdamW8bit block absmax after each step and the
 * fp32 moments of the small tensor. The parameters after each step within 4 fp32 roundings
 * (check_p says why), the number of inexact ones printed.
 *
 * Known disagreement with the CPU fixture, explained and bounded here: bitsandbytes' CPU encoder
 * for 8-bit blockwise quantization (csrc/cpu_ops.cpp quantize_block) divides by absmax and
 * searches the map with BinSearch's "Direct2" approximate bin lookup followed by a
 * left/right distance check; where the lookup lands one interval too high, the result is the
 * upper of two neighbours even when the lower is nearer. ref/quant8 returns the true nearest
 * code (QUANT8_NEAREST) or the CUDA binary search (QUANT8_CUDA). On the CPU fixtures every
 * differing code must be an adjacent code, and ref's must be the nearer one: the counts are
 * printed. Seen 2026-11-23: q8 6 of 3,149; the AdamW8bit v codes of the first step 104 of 4,200,
 * some several codes off (values ~1e-6 of the unsigned map's smallest decade, where the lookup
 * grid is coarser than the map: e.g. x_norm 7.9e-7 → library code 7 (1.56e-5), nearest code 2
 * (7.75e-7)); later steps 2..23 per 4,200. The CUDA fixture (bitsandbytes' kernels) is demanded
 * exactly.
 *
 * torch 2.15's CPU bf16 conversion writes NaN as 0xFFFF (its vectorized path), not the 0x7FC0 of
 * c10's scalar round_to_nearest_even: NaN positions are compared, not payloads.
 *
 *   bazel test //tests/golden:formats_golden_test
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/bnb4.h"
#include "ref/adamw8bit.h"
#include "ref/bf16.h"
#include "ref/fp8.h"
#include "ref/nf4.h"
#include "ref/quant8.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/golden/golden.h"

static const struct st_tensor *raw(const struct golden *g, const char *name, enum st_dtype dt) {
    const struct st_tensor *t = safetensors_find(&g->st, name);
    if (t == NULL || t->dtype != dt) {
        test_fail("%s: tensor '%s' missing or of another dtype", g->path, name);
        return NULL;
    }
    return t;
}

/* Codes got vs want from one map. strict (CUDA): a difference is allowed only between adjacent
 * codes at a near-tie (x_norm within a few ulp of their midpoint: the kernels divide with the
 * approximate __fdividef). Otherwise (CPU): got must be at least as near to x_norm as want (the
 * library's CPU encoder can miss by more than one code for tiny values, see above). Returns the
 * number of differences. */
static int64_t check_codes(const char *what, const uint8_t *got, const uint8_t *want, const float *xnorm,
                           const float *map, int64_t n, int strict) {
    int64_t diff = 0, bad = 0, nonadj = 0;
    for (int64_t i = 0; i < n; i++) {
        if (got[i] == want[i]) continue;
        diff++;
        int adj = abs((int)got[i] - (int)want[i]) == 1;
        int nearer = xnorm == NULL ||
                     fabs((double)xnorm[i] - map[got[i]]) <= fabs((double)xnorm[i] - map[want[i]]);
        double dg = fabs((double)xnorm[i] - map[got[i]]), dw = fabs((double)xnorm[i] - map[want[i]]);
        int near_tie = fabs(dg - dw) <= 8 * FLT_EPSILON * fabs((double)xnorm[i]);
        nonadj += !adj;
        if (strict ? !(adj && near_tie) : !nearer) {
            if (bad < 5)
                printf("  %s[%lld]: ref code %d (%.9g), library %d (%.9g), x_norm %.9g\n", what, (long long)i, got[i],
                       (double)map[got[i]], want[i], (double)map[want[i]], xnorm ? (double)xnorm[i] : 0.0);
            bad++;
        }
    }
    printf("  %s: %lld of %lld codes differ from the library, %lld of them not adjacent (%s)\n", what,
           (long long)diff, (long long)n, (long long)nonadj, strict ? "must be 0" : "ref's code is the nearer");
    EXPECT(bad == 0, "%s: %lld codes differ beyond the explained rounding", what, (long long)bad);
    return diff;
}

static void test_conversions(struct golden *g, uint64_t seed) {
    const struct st_tensor *tx = raw(g, "x", ST_F32), *tb = raw(g, "bf16.y", ST_BF16);
    const struct st_tensor *t4 = raw(g, "fp8.e4m3", ST_U8), *t5 = raw(g, "fp8.e5m2", ST_U8);
    if (!tx || !tb || !t4 || !t5) return;
    int64_t n = tx->numel;
    const float *x = (const float *)tx->data;
    const uint16_t *yb = (const uint16_t *)tb->data;
    int64_t bbad = 0, b4 = 0, b5 = 0, sat_differ = 0;
    for (int64_t i = 0; i < n; i++) {
        int both_nan = isnan(x[i]) && (yb[i] & 0x7FFF) > 0x7F80; /* payloads differ, see bf16.h */
        if (bf16_from_float(x[i]) != yb[i] && !both_nan) {
            if (bbad < 5) printf("  bf16: x=%a ref 0x%04X torch 0x%04X\n", (double)x[i], bf16_from_float(x[i]), yb[i]);
            bbad++;
        }
        uint8_t q4 = fp8_from_float(x[i], FP8_E4M3, FP8_TORCH), q5 = fp8_from_float(x[i], FP8_E5M2, FP8_TORCH);
        if (q4 != t4->data[i]) {
            if (b4 < 5) printf("  e4m3: x=%a ref 0x%02X torch 0x%02X\n", (double)x[i], q4, t4->data[i]);
            b4++;
        }
        if (q5 != t5->data[i]) {
            if (b5 < 5) printf("  e5m2: x=%a ref 0x%02X torch 0x%02X\n", (double)x[i], q5, t5->data[i]);
            b5++;
        }
        sat_differ += fp8_from_float(x[i], FP8_E5M2, FP8_SATFINITE) != t5->data[i];
    }
    EXPECT(bbad == 0, "bf16: %lld of %lld conversions differ from torch", (long long)bbad, (long long)n);
    EXPECT(b4 == 0, "e4m3fn: %lld of %lld conversions differ from torch", (long long)b4, (long long)n);
    EXPECT(b5 == 0, "e5m2: %lld of %lld conversions differ from torch", (long long)b5, (long long)n);
    printf("  fp8: %lld samples; torch's E5M2 differs from SATFINITE on %lld (its overflows to Inf)\n", (long long)n,
           (long long)sat_differ);
    for (int f = 0; f < 2; f++) {
        float *dec = golden_f32(g, f ? "fp8.decode_e5m2" : "fp8.decode_e4m3", 1, (int64_t[]){256});
        float mine[256];
        for (int c = 0; c < 256; c++) mine[c] = fp8_to_float((uint8_t)c, (enum fp8_format)f);
        struct cmp_case cc = {"fp8_to_float", "every code vs torch", "256", f ? "e5m2" : "e4m3", seed};
        cmp_exact_f32(&cc, mine, dec, 256);
        free(dec);
    }
}

static void test_maps_q8(struct golden *g, uint64_t seed, int strict) {
    float ms[256], mu[256];
    quant8_dynamic_map(ms, 1);
    quant8_dynamic_map(mu, 0);
    float *ws = golden_f32(g, "map.signed", 1, (int64_t[]){256}), *wu = golden_f32(g, "map.unsigned", 1, (int64_t[]){256});
    struct cmp_case c1 = {"quant8_dynamic_map", "signed", "256", "f32", seed};
    struct cmp_case c2 = {"quant8_dynamic_map", "unsigned", "256", "f32", seed};
    cmp_exact_f32(&c1, ms, ws, 256);
    cmp_exact_f32(&c2, mu, wu, 256);
    free(ws), free(wu);

    int64_t n = golden_numel(g, "q8.x");
    float *x = golden_f32(g, "q8.x", 1, (int64_t[]){n});
    const struct st_tensor *tq = raw(g, "q8.q", ST_U8);
    int64_t nb = (n + 255) / 256;
    float *am = golden_f32(g, "q8.absmax", 1, (int64_t[]){nb});
    uint8_t *q = malloc((size_t)n);
    float *myam = malloc(sizeof(float) * nb), *xn = malloc(sizeof(float) * n);
    quant8_quantize_blockwise(q, myam, x, n, 256, ms, strict ? QUANT8_CUDA : QUANT8_NEAREST);
    struct cmp_case c3 = {"quant8_quantize_blockwise", "absmax", "n", "f32", seed};
    cmp_exact_f32(&c3, myam, am, nb);
    for (int64_t i = 0; i < n; i++) xn[i] = x[i] / am[i / 256];
    if (tq) check_codes("q8 codes", q, tq->data, xn, ms, n, strict);
    free(x), free(am), free(q), free(myam), free(xn);
}

/* nf4a: bf16 W, blocksize 64, double quant; nf4b: fp32 W, odd n, blocksize 128, no nesting. */
static void test_nf4(struct golden *g, uint64_t seed, int strict) {
    enum nf4_variant var = strict ? NF4_CUDA : NF4_TORCH;
    const char *pre[2] = {"nf4a", "nf4b"};
    for (int k = 0; k < 2; k++) {
        char name[64], wname[64], dname[64];
        snprintf(name, sizeof name, "%s.weight", pre[k]);
        snprintf(wname, sizeof wname, "%s.W", pre[k]);
        snprintf(dname, sizeof dname, "%s.deq", pre[k]);
        struct bnb4_weight b;
        int64_t shape[2];
        struct io_err e = {{0}};
        if (bnb4_bind(&b, shape, bnb4_lookup_file(&g->st), g->path, name, NULL, &e) != BNB4_BOUND) {
            test_fail("%s", e.msg);
            continue;
        }
        int64_t n = shape[0] * shape[1];
        EXPECT(b.nested == (k == 0) && b.blocksize == (k == 0 ? 64 : 128), "%s: quant_state nested %d blocksize %d",
               name, b.nested, b.blocksize);
        EXPECT(strcmp(b.dtype, k == 0 ? "bfloat16" : "float32") == 0, "%s: dtype %s", name, b.dtype);
        float *W = golden_f32(g, wname, 2, shape);
        uint8_t *packed = malloc((size_t)nf4_packed_bytes(n));
        float *absmax = malloc(sizeof(float) * b.n_blocks);
        nf4_quantize(packed, absmax, W, n, b.blocksize, var);
        /* The packed codes, byte for byte (odd n: the pad nibble too). */
        int64_t diff = 0;
        for (int64_t i = 0; i < nf4_packed_bytes(n); i++) diff += packed[i] != b.packed->data[i];
        EXPECT(diff == 0, "%s: %lld of %lld packed bytes differ from bitsandbytes", name, (long long)diff,
               (long long)nf4_packed_bytes(n));
        char cs[32];
        snprintf(cs, sizeof cs, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
        if (k == 0) {
            float *am1 = golden_f32(g, "nf4c.absmax", 1, (int64_t[]){b.n_blocks});
            struct cmp_case c = {"nf4_quantize", "first-level absmax", cs, "bf16", seed};
            cmp_exact_f32(&c, absmax, am1, b.n_blocks);
            /* Double quantization: offset, then the 8-bit codes of absmax − offset. */
            float off_lib = (float)golden_scalar(g, "nf4c.offset");
            uint8_t *aq = malloc((size_t)b.n_blocks);
            float code2[256], off, *a2 = malloc(sizeof(float) * (b.n_blocks / 256 + 1));
            quant8_dynamic_map(code2, 1);
            nf4_double_quantize(aq, a2, &off, am1, b.n_blocks, code2);
            printf("  nf4 offset: ref (double mean) %a, torch fp32 mean %a, quant_state %a\n", (double)off,
                   (double)off_lib, (double)b.nested_offset);
            EXPECT(fabsf(off - off_lib) <= 2e-7f * off_lib, "nf4 offset %.9g vs torch %.9g", (double)off, (double)off_lib);
            EXPECT(b.nested_offset == off_lib, "quant_state nested_offset %.9g != mean %.9g", (double)b.nested_offset,
                   (double)off_lib);
            float *centered = malloc(sizeof(float) * b.n_blocks), *xn = malloc(sizeof(float) * b.n_blocks);
            for (int64_t i = 0; i < b.n_blocks; i++) centered[i] = am1[i] - off_lib;
            quant8_quantize_blockwise(aq, a2, centered, b.n_blocks, 256, code2, strict ? QUANT8_CUDA : QUANT8_NEAREST);
            int64_t nb2 = b.nested_absmax->numel;
            struct cmp_case c2 = {"nf4_double_quantize", "nested_absmax", cs, "f32", seed};
            cmp_exact_f32(&c2, a2, (const float *)b.nested_absmax->data, nb2);
            struct cmp_case c3 = {"nf4_double_quantize", "nested_quant_map", "256", "f32", seed};
            cmp_exact_f32(&c3, code2, (const float *)b.nested_quant_map->data, 256);
            for (int64_t i = 0; i < b.n_blocks; i++) xn[i] = centered[i] / a2[i / 256];
            check_codes("nf4 absmax codes", aq, b.absmax->data, xn, code2, b.n_blocks, strict);
            free(am1), free(aq), free(a2), free(centered), free(xn);
        } else {
            struct cmp_case c = {"nf4_quantize", "absmax", cs, "f32", seed};
            cmp_exact_f32(&c, absmax, (const float *)b.absmax->data, b.n_blocks);
        }
        /* End-to-end dequantization from the stored parts. */
        float *deq = golden_f32(g, dname, 2, shape), *mine = malloc(sizeof(float) * n);
        if (nf4_dequantize_bnb(mine, &b, n, k == 0 ? ACT_BF16 : ACT_F32, &e) != 0) test_fail("%s: %s", name, e.msg);
        struct cmp_case cd = {"nf4_dequantize_bnb", "vs dequantize_4bit", cs, k == 0 ? "bf16" : "f32", seed};
        cmp_exact_f32(&cd, mine, deq, n);
        free(W), free(packed), free(absmax), free(deq), free(mine);
    }
}

/* The parameters: within 4 roundings of fp32 (k = 4, tier b), and the number of inexact ones is
 * printed. Neither library's update is correctly rounded: torch 2.15's CPU sqrt (MKL) differs
 * from IEEE sqrtf on 674 of 100,000 random inputs (dumped), and the CUDA kernel uses __powf and
 * __fdividef. The moments and block absmax, which do not go through them, are exact. */
static void check_p(const struct cmp_case *c, const float *got, const float *want, int64_t n) {
    int64_t inexact = 0;
    for (int64_t i = 0; i < n; i++) inexact += got[i] != want[i];
    printf("  %s %s %s: %lld of %lld parameters not bit-identical\n", c->op, c->what, c->shape, (long long)inexact,
           (long long)n);
    cmp_elementwise(c, got, want, n, FLT_EPSILON, 4.0, 0.0, NULL);
}

static float *getf(struct golden *g, const char *fmt, int step, int64_t n) {
    char name[64];
    snprintf(name, sizeof name, fmt, step);
    return golden_f32(g, name, 1, (int64_t[]){n});
}

static const uint8_t *getu8(struct golden *g, const char *fmt, int step) {
    char name[64];
    snprintf(name, sizeof name, fmt, step);
    const struct st_tensor *t = raw(g, name, ST_U8);
    return t ? t->data : NULL;
}

/* Each step from the library's own previous state, so that differences do not compound. */
static void test_adam(struct golden *g, uint64_t seed, int strict) {
    struct adamw8bit_hparams h = adamw8bit_defaults();
    h.variant = strict ? ADAMW8BIT_BNB_CUDA : ADAMW8BIT_BNB_CPU;
    const int64_t n8 = golden_numel(g, "adam.p0"), n32 = golden_numel(g, "adam.sp0");
    int64_t nb = adamw8bit_n_blocks(n8);
    struct adamw8bit_state s8, s32;
    adamw8bit_init(&s8, n8, h.min_8bit_size);
    adamw8bit_init(&s32, n32, h.min_8bit_size);
    EXPECT(s8.is_8bit && !s32.is_8bit, "8-bit for %lld elements, 32-bit for %lld", (long long)n8, (long long)n32);
    for (int t = 1; t <= 3; t++) {
        float *p = getf(g, "adam.p%d", t - 1, n8), *gr = getf(g, "adam.g%d", t, n8), *pw = getf(g, "adam.p%d", t, n8);
        if (t > 1) {
            memcpy(s8.q1, getu8(g, "adam.q1_%d", t - 1), (size_t)n8);
            memcpy(s8.q2, getu8(g, "adam.q2_%d", t - 1), (size_t)n8);
            float *a1 = getf(g, "adam.absmax1_%d", t - 1, nb), *a2 = getf(g, "adam.absmax2_%d", t - 1, nb);
            memcpy(s8.absmax1, a1, sizeof(float) * nb);
            memcpy(s8.absmax2, a2, sizeof(float) * nb);
            free(a1), free(a2);
        }
        s8.step = t - 1;
        adamw8bit_step(&s8, p, gr, &h);
        char what[32];
        snprintf(what, sizeof what, "step %d", t);
        struct cmp_case cp = {"adamw8bit_step", "p", what, "f32", seed};
        check_p(&cp, p, pw, n8);
        float *a1 = getf(g, "adam.absmax1_%d", t, nb), *a2 = getf(g, "adam.absmax2_%d", t, nb);
        struct cmp_case c1 = {"adamw8bit_step", "absmax1", what, "f32", seed};
        struct cmp_case c2 = {"adamw8bit_step", "absmax2", what, "f32", seed};
        cmp_exact_f32(&c1, s8.absmax1, a1, nb);
        cmp_exact_f32(&c2, s8.absmax2, a2, nb);
        /* The normalized moments, for the nearness check of differing codes. */
        float *m = malloc(sizeof(float) * n8), *v = malloc(sizeof(float) * n8);
        float *xm = malloc(sizeof(float) * n8), *xv = malloc(sizeof(float) * n8);
        {
            /* Recompute the moments of this step in fp32 from the library's previous state. */
            struct adamw8bit_state tmp;
            adamw8bit_init(&tmp, n8, h.min_8bit_size);
            if (t > 1) {
                memcpy(tmp.q1, getu8(g, "adam.q1_%d", t - 1), (size_t)n8);
                memcpy(tmp.q2, getu8(g, "adam.q2_%d", t - 1), (size_t)n8);
                float *b1 = getf(g, "adam.absmax1_%d", t - 1, nb), *b2 = getf(g, "adam.absmax2_%d", t - 1, nb);
                memcpy(tmp.absmax1, b1, sizeof(float) * nb);
                memcpy(tmp.absmax2, b2, sizeof(float) * nb);
                free(b1), free(b2);
            }
            adamw8bit_moments(&tmp, m, v);
            for (int64_t i = 0; i < n8; i++) {
                float gv = gr[i];
                float mm = fmaf(gv, (float)(1.0 - h.hp.beta1), m[i] * (float)h.hp.beta1);
                float vv = fmaf((float)(1.0 - h.hp.beta2) * gv, gv, v[i] * (float)h.hp.beta2);
                if (strict) {
                    mm = m[i] * (float)h.hp.beta1 + (1.0f - (float)h.hp.beta1) * gv;
                    vv = v[i] * (float)h.hp.beta2 + ((1.0f - (float)h.hp.beta2) * gv) * gv;
                }
                xm[i] = mm / a1[i / 256];
                xv[i] = vv / a2[i / 256];
            }
            adamw8bit_free(&tmp);
        }
        snprintf(what, sizeof what, "adam m codes step %d", t);
        check_codes(what, s8.q1, getu8(g, "adam.q1_%d", t), xm, s8.map1, n8, strict);
        snprintf(what, sizeof what, "adam v codes step %d", t);
        check_codes(what, s8.q2, getu8(g, "adam.q2_%d", t), xv, s8.map2, n8, strict);
        free(p), free(gr), free(pw), free(a1), free(a2), free(m), free(v), free(xm), free(xv);

        /* The 32-bit path. */
        float *sp = getf(g, "adam.sp%d", t - 1, n32), *sg = getf(g, "adam.sg%d", t, n32);
        float *spw = getf(g, "adam.sp%d", t, n32), *smw = getf(g, "adam.sm%d", t, n32), *svw = getf(g, "adam.sv%d", t, n32);
        if (t > 1) {
            float *sm = getf(g, "adam.sm%d", t - 1, n32), *sv = getf(g, "adam.sv%d", t - 1, n32);
            memcpy(s32.m, sm, sizeof(float) * n32);
            memcpy(s32.v, sv, sizeof(float) * n32);
            free(sm), free(sv);
        }
        s32.step = t - 1;
        adamw8bit_step(&s32, sp, sg, &h);
        snprintf(what, sizeof what, "step %d", t);
        struct cmp_case d1 = {"adamw8bit_step 32-bit", "p", what, "f32", seed};
        struct cmp_case d2 = {"adamw8bit_step 32-bit", "m", what, "f32", seed};
        struct cmp_case d3 = {"adamw8bit_step 32-bit", "v", what, "f32", seed};
        check_p(&d1, sp, spw, n32);
        cmp_exact_f32(&d2, s32.m, smw, n32);
        cmp_exact_f32(&d3, s32.v, svw, n32);
        free(sp), free(sg), free(spw), free(smw), free(svw);
    }
    adamw8bit_free(&s8);
    adamw8bit_free(&s32);
}

static void run_fixture(const char *path, int strict, uint64_t seed) {
    struct golden g;
    golden_open(&g, path);
    printf("%s: torch %s, bitsandbytes %s, %s\n", path, golden_meta(&g, "torch"), golden_meta(&g, "bitsandbytes"),
           golden_meta(&g, "device_name"));
    test_conversions(&g, seed);
    test_maps_q8(&g, seed, strict);
    test_nf4(&g, seed, strict);
    test_adam(&g, seed, strict);
    golden_close(&g);
}

int main(int argc, char **argv) {
    uint64_t seed = test_seed(argc, argv, 20261123);
    run_fixture("tests/golden/data/formats/formats_cpu.safetensors", 0, seed);
    const char *cuda = "tests/golden/data/formats/formats_cuda.safetensors";
    if (access(cuda, R_OK) == 0) run_fixture(cuda, 1, seed);
    else printf("note: %s absent: the CUDA fixture is not checked\n", cuda);
    return test_finish("formats_golden_test");
}
