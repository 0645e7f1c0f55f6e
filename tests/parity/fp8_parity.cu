/* fp8_parity.cu — gpu/fp8 (amax, scaling recipes, cast + transpose, block quantization) against
 * ref/fp8, bit for bit.
 *
 *   bazel test --config=gpu //tests/parity:fp8_parity
 *   fp8_parity [--seed=N] [--bench]
 *
 * What is covered, on inputs from the printed seed (bf16-rounded normals whose magnitude varies
 * by e^±4 from row to row, every 7th column 1000× smaller so subnormal codes occur):
 *  - amax of bf16 and fp32 tensors: n around the vector width and the grid (1, 7, 8, 9, 1000,
 *    4097, 2^20 + 3), 16-byte-aligned and misaligned, planted NaN (ignored), ±Inf (counted and
 *    flagged), −0; accumulation onto a larger and a smaller starting value; flags OR-ed.
 *  - cast (+ transpose) under both recipes: delayed (a stale scale that saturates an outlier; the
 *    amax recorded into a history slot that starts above or below the tensor's) and current (amax
 *    kernel, then the scale computed on the device, with amax_eps and power_2); E4M3 and E5M2;
 *    q only, q_t only, both; shapes across the 16-multiple fast path and the element-wise path
 *    (1×1, 3×5, 17×33, 129×257, 1000×48, …), tile edges (128, 256×384) and real ones (512×2048,
 *    2048×576); the kernel's tile heights 128 / 64 / 32 with partial tiles in both dimensions
 *    (2064×4240, 1040×4112, 16×4096, 4096×16: the heights a 132-SM device picks), one row and one
 *    column (1×4096, 4096×1); misaligned pointers (also on fast-path shapes); planted
 *    NaN/±Inf/saturation.
 *  - block quantization 1×128 and 128×128, both formats, power-of-two scales on and off, with and
 *    without the transposed outputs, the same shapes, planted NaN/Inf and an all-zero block;
 *    the scales in cuBLASLt's layouts, padding slots included.
 *  - the delayed update for several tensors at once: history lengths 1 .. 4096, max and
 *    most_recent, margins 0 and 3, windows of zeros, Inf, NaN; three iterations.
 *  - the delayed recipe end to end on one tensor over four iterations (cast records into the
 *    history, the update rotates it and sets the next scale), against fp8_delayed.
 *  - SwiGLU straight into codes (gpu_fp8_swiglu_forward / _backward) against SwiGLU's bf16 kernels
 *    followed by the cast, bit for bit (run_swiglu's comment): tile edges, gate and up side by side,
 *    planted NaN/Inf, both formats, every output choice; the shapes off the fused path return 0
 *    and write nothing.
 * Codes are compared decoded (exact tier: NaN matches NaN — the device writes 0x7F for every NaN
 * —, −0 must stay −0); scales, amax and counters must be equal. Every code output is written
 * twice over different poison bytes (0x5A, 0xA5) and must match both times (so every element was
 * written); scale outputs are NaN-poisoned; guard regions are checked; each cast runs twice and
 * its counters must agree (determinism).
 *
 * Tolerance: (a) exact everywhere — every result is a chain of IEEE fp32 operations (fmaxf,
 * multiply, division) and one RNE conversion, done in the same order on both sides.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/fp8.h"
#include "gpu/swiglu.h"
#include "ref/bf16.h"
#include "ref/fp8.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;
static const char *fmt_name(enum fp8_format f) { return f == FP8_E4M3 ? "E4M3" : "E5M2"; }

/* Inputs: see the file comment. special 1 plants NaN, +Inf, −Inf, −0 (where the shape allows). */
static std::vector<uint16_t> make_x(int64_t rows, int64_t cols, uint64_t seed, int special) {
    struct rng r;
    rng_init(&r, seed);
    std::vector<uint16_t> x((size_t)(rows * cols));
    for (int64_t i = 0; i < rows; i++) {
        const double mag = exp(rng_range(&r, -4, 4));
        for (int64_t j = 0; j < cols; j++)
            x[(size_t)(i * cols + j)] = bf16_from_float((float)(rng_normal(&r) * mag * (j % 7 == 3 ? 1e-3 : 1.0)));
    }
    if (special && rows * cols >= 4) {
        x[(size_t)((rows / 2) * cols + cols / 3)] = 0x7FC0;           /* NaN */
        x[(size_t)(rows * cols - 1)] = 0x7F80;                        /* +Inf */
        x[(size_t)(cols / 2)] = 0xFF80;                               /* −Inf */
        x[(size_t)((rows - 1) * cols / 2)] = 0x8000;                  /* −0 */
    }
    return x;
}

static std::vector<float> floats(const std::vector<uint16_t> &b) {
    std::vector<float> v(b.size());
    for (size_t i = 0; i < b.size(); i++) v[i] = bf16_to_float(b[i]);
    return v;
}

static void cmp_codes(const char *op, const char *what, const char *shape, enum fp8_format f, uint64_t seed,
                      const uint8_t *got, const uint8_t *want, int64_t n) {
    std::vector<float> g((size_t)n), w((size_t)n);
    for (int64_t i = 0; i < n; i++) g[(size_t)i] = fp8_to_float(got[i], f), w[(size_t)i] = fp8_to_float(want[i], f);
    struct cmp_case c = {op, what, shape, fmt_name(f), seed};
    cmp_exact_f32(&c, g.data(), w.data(), n);
}

/* Device scalars of one quantization: fp32 scale, scale_inv, amax; flags; saturated. */
struct scalars {
    struct dev_buf scale, scale_inv, amax, flags, sat;
    void alloc(float scale0, float amax0) {
        dev_buf_alloc(&scale, "scale", 4, POISON_F32, nullptr);
        dev_buf_alloc(&scale_inv, "scale_inv", 4, POISON_F32, nullptr);
        dev_buf_alloc(&amax, "amax", 4, POISON_NONE, &amax0);
        const unsigned f0 = 0;
        const unsigned long long s0 = 0;
        dev_buf_alloc(&flags, "flags", 4, POISON_NONE, &f0);
        dev_buf_alloc(&sat, "saturated", 8, POISON_NONE, &s0);
        if (!isnan(scale0)) dev_buf_reset(&scale, &scale0);
    }
    void reset(float scale0, float amax0) {
        const unsigned f0 = 0;
        const unsigned long long s0 = 0;
        dev_buf_reset(&amax, &amax0), dev_buf_reset(&flags, &f0), dev_buf_reset(&sat, &s0);
        dev_buf_reset(&scale, isnan(scale0) ? nullptr : &scale0), dev_buf_reset(&scale_inv, nullptr);
    }
    void read(float *sc, float *sci, float *am, unsigned *fl, unsigned long long *st) {
        dev_buf_download(&scale, sc, 0), dev_buf_download(&scale_inv, sci, 0), dev_buf_download(&amax, am, 0);
        dev_buf_download(&flags, fl, 0), dev_buf_download(&sat, st, 0);
    }
    void free_all() {
        for (struct dev_buf *b : {&scale, &scale_inv, &amax, &flags, &sat}) dev_buf_free(b);
    }
};

/* ---- amax ---- */

static void run_amax(int64_t n, int f32, int misalign, int special, float start, int id) {
    const uint64_t seed = g_seed * 7919u + 100u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    std::vector<float> xf((size_t)n);
    rng_fill_normal(&r, xf.data(), n, 0.0, exp(rng_range(&r, -3, 3)));
    if (special && n >= 4) xf[(size_t)(n / 2)] = NAN, xf[(size_t)(n - 1)] = -0.0f;
    if (special == 2 && n >= 4) xf[1] = -INFINITY;
    if (!f32)
        for (float &v : xf) v = bf16_round(v);
    const float want_amax = fmaxf(start, fp8_amax(xf.data(), n));
    unsigned want_flags = 4u; /* a bit set before the call must survive (OR) */
    for (float v : xf) want_flags |= isfinite(v) ? 0u : (unsigned)FP8_FLAG_INPUT_NONFINITE;
    const size_t esz = f32 ? 4 : 2, off = misalign ? 1 : 0;
    std::vector<unsigned char> img((size_t)(n + (int64_t)off) * esz);
    for (int64_t i = 0; i < n; i++) {
        if (f32)
            memcpy(&img[(size_t)(i + (int64_t)off) * 4], &xf[(size_t)i], 4);
        else {
            const uint16_t h = bf16_from_float(xf[(size_t)i]);
            memcpy(&img[(size_t)(i + (int64_t)off) * 2], &h, 2);
        }
    }
    struct dev_buf bx, ba, bf;
    dev_buf_alloc(&bx, "x", img.size(), POISON_NONE, img.data());
    dev_buf_alloc(&ba, "amax", 4, POISON_NONE, &start);
    const unsigned four = 4u;
    dev_buf_alloc(&bf, "flags", 4, POISON_NONE, &four);
    if (f32)
        gpu_fp8_amax_f32((float *)ba.data, (unsigned *)bf.data, (const float *)bx.data + off, n, g_stream);
    else
        gpu_fp8_amax_bf16((float *)ba.data, (unsigned *)bf.data, (const uint16_t *)bx.data + off, n, g_stream);
    float got = 0;
    unsigned gflags = 0;
    dev_buf_download(&ba, &got, 0), dev_buf_download(&bf, &gflags, 0);
    char shape[96];
    snprintf(shape, sizeof shape, "n=%lld %s%s%s start=%g", (long long)n, f32 ? "f32" : "bf16",
             misalign ? " misaligned" : "", special ? " special" : "", (double)start);
    struct cmp_case c = {"fp8_amax", "amax", shape, f32 ? "f32" : "bf16", seed};
    cmp_exact_f32(&c, &got, &want_amax, 1);
    EXPECT(gflags == want_flags, "fp8_amax %s: flags %u, want %u", shape, gflags, want_flags);
    for (struct dev_buf *b : {&bx, &ba, &bf}) dev_buf_free(b);
}

/* ---- cast (+ transpose), both recipes ---- */

enum outputs { OUT_BOTH = 0, OUT_Q = 1, OUT_QT = 2 };

static void run_cast(int64_t rows, int64_t cols, enum fp8_format f, enum gpu_fp8_recipe recipe, enum outputs outs,
                     int misalign, int special, float eps, int p2, int id) {
    const uint64_t seed = g_seed * 7919u + 1000u + (uint64_t)id;
    const int64_t n = rows * cols;
    std::vector<uint16_t> xb = make_x(rows, cols, seed, special);
    std::vector<float> xf = floats(xb);
    const float data_amax = fp8_amax(xf.data(), n);
    /* Delayed: a stale scale, 1.5× what the data would ask for (so its largest values saturate),
     * and a history slot that starts below (even ids) or above (odd ids) the tensor's amax. */
    struct rng r;
    rng_init(&r, seed + 1);
    float scale = 1.0f, amax0 = 0.0f;
    if (recipe == GPU_FP8_DELAYED) {
        scale = isfinite(data_amax) && data_amax > 0 ? 1.5f * fp8_max(f) / data_amax : 3.0f;
        amax0 = (id % 2) ? 2.0f * (isfinite(data_amax) ? data_amax : 1.0f) : 0.25f * data_amax;
        if (!isfinite(amax0)) amax0 = 1.0f;
    }
    /* Reference. */
    struct fp8_stats st = {0, 0, 0};
    float want_scale = scale, want_scale_inv = NAN, want_amax = amax0;
    unsigned want_flags = 0;
    if (recipe == GPU_FP8_CURRENT) {
        want_amax = data_amax;
        want_scale = fp8_current_scale(data_amax, f, eps, p2);
        want_scale_inv = 1.0f / want_scale;
        want_flags |= isfinite(data_amax) ? 0u : (unsigned)FP8_FLAG_AMAX_NONFINITE;
    }
    std::vector<uint8_t> q((size_t)n), qt((size_t)n);
    fp8_cast_transpose(outs == OUT_QT ? nullptr : q.data(), outs == OUT_Q ? nullptr : qt.data(), &st, xf.data(), rows,
                       cols, want_scale, f);
    want_flags |= st.flags;
    if (recipe == GPU_FP8_DELAYED) want_amax = fmaxf(amax0, st.amax);

    char shape[160];
    snprintf(shape, sizeof shape, "%lldx%lld %s %s %s%s%s eps=%g pow2=%d", (long long)rows, (long long)cols,
             fmt_name(f), recipe == GPU_FP8_DELAYED ? "delayed" : "current",
             outs == OUT_BOTH ? "q+q_t" : outs == OUT_Q ? "q" : "q_t", misalign ? " misaligned" : "",
             special ? " special" : "", (double)eps, p2);
    const size_t off = misalign ? 1 : 0;
    std::vector<uint16_t> ximg(xb.size() + off, 0);
    memcpy(ximg.data() + off, xb.data(), xb.size() * 2);
    struct dev_buf bx, bq, bqt;
    dev_buf_alloc(&bx, "x", ximg.size() * 2, POISON_NONE, ximg.data());
    dev_buf_alloc(&bq, "q", (size_t)n + off, POISON_NONE, nullptr);
    dev_buf_alloc(&bqt, "q_t", (size_t)n + off, POISON_NONE, nullptr);
    scalars sc;
    sc.alloc(recipe == GPU_FP8_DELAYED ? scale : NAN, amax0);
    struct gpu_fp8_scaling s = {f, recipe, (float *)sc.scale.data, (float *)sc.scale_inv.data, (float *)sc.amax.data,
                                eps, p2};
    unsigned long long first_sat = 0;
    unsigned first_flags = 0;
    float first_amax = 0;
    for (int pass = 0; pass < 2; pass++) {
        std::vector<unsigned char> poison((size_t)n + off, pass ? 0xA5 : 0x5A);
        dev_buf_reset(&bq, poison.data()), dev_buf_reset(&bqt, poison.data());
        sc.reset(recipe == GPU_FP8_DELAYED ? scale : NAN, amax0);
        if (recipe == GPU_FP8_CURRENT)
            gpu_fp8_amax_bf16((float *)sc.amax.data, (unsigned *)sc.flags.data, (const uint16_t *)bx.data + off, n,
                              g_stream);
        gpu_fp8_cast_bf16(outs == OUT_QT ? nullptr : (uint8_t *)bq.data + off,
                          outs == OUT_Q ? nullptr : (uint8_t *)bqt.data + off, (const uint16_t *)bx.data + off, rows,
                          cols, &s, (unsigned *)sc.flags.data, (unsigned long long *)sc.sat.data, g_stream);
        std::vector<uint8_t> gq((size_t)n + off), gqt((size_t)n + off);
        dev_buf_download(&bq, gq.data(), 0), dev_buf_download(&bqt, gqt.data(), 0);
        float g_scale = 0, g_scale_inv = 0, g_amax = 0;
        unsigned g_flags = 0;
        unsigned long long g_sat = 0;
        sc.read(&g_scale, &g_scale_inv, &g_amax, &g_flags, &g_sat);
        const char *what = pass ? "codes over poison 0xA5" : "codes over poison 0x5A";
        if (outs != OUT_QT) cmp_codes("fp8_cast", what, shape, f, seed, gq.data() + off, q.data(), n);
        if (outs != OUT_Q) cmp_codes("fp8_cast_transpose", what, shape, f, seed, gqt.data() + off, qt.data(), n);
        EXPECT(!misalign || (gq[0] == (pass ? 0xA5 : 0x5A) && gqt[0] == gq[0]), "fp8_cast %s: wrote before q", shape);
        if (outs == OUT_QT) EXPECT(gq[off] == (pass ? 0xA5 : 0x5A), "fp8_cast %s: wrote q though NULL", shape);
        if (outs == OUT_Q) EXPECT(gqt[off] == (pass ? 0xA5 : 0x5A), "fp8_cast %s: wrote q_t though NULL", shape);
        struct cmp_case c = {"fp8_cast", "scale", shape, "f32", seed};
        cmp_exact_f32(&c, &g_scale, &want_scale, 1);
        c.what = "amax (recorded / read)";
        cmp_exact_f32(&c, &g_amax, &want_amax, 1);
        if (recipe == GPU_FP8_CURRENT) {
            c.what = "scale_inv";
            cmp_exact_f32(&c, &g_scale_inv, &want_scale_inv, 1);
        }
        EXPECT(g_sat == (unsigned long long)st.saturated && g_flags == want_flags,
               "fp8_cast %s: saturated %llu (want %lld), flags %u (want %u)", shape, g_sat, (long long)st.saturated,
               g_flags, want_flags);
        if (pass == 0) first_sat = g_sat, first_flags = g_flags, first_amax = g_amax;
        else
            EXPECT(first_sat == g_sat && first_flags == g_flags && memcmp(&first_amax, &g_amax, 4) == 0,
                   "fp8_cast %s: the second run's statistics differ (determinism)", shape);
    }
    for (struct dev_buf *b : {&bx, &bq, &bqt}) dev_buf_free(b);
    sc.free_all();
}

/* ---- SwiGLU straight into codes ---- */

/* gpu_fp8_swiglu_forward / _backward against the two passes they replace — gpu_swiglu_forward_bf16 /
 * gpu_swiglu_backward_bf16, then gpu_fp8_cast_bf16 of each bf16 output under the same delayed
 * scaling —, bit for bit: codes, transposed codes, the recorded amax, flags, the saturated count.
 * (Those passes are checked against ref/ by swiglu_parity and the cast cases above.) g and u at row
 * stride ld_in (ld_in = 2F: gate and up side by side, the spare columns NaN so that a read of them
 * would show in the flags); special plants NaN / ±Inf into g (and dh); the stale scale is 1.5× what
 * each output's data asks for, so its largest values saturate. fast 0: a shape or alignment off
 * the fused path, which must return 0 and write nothing. */
static void run_swiglu(int64_t rows, int64_t F, int64_t ld_in, int bwd, enum fp8_format f, enum outputs outs,
                       int special, int misalign, int fast, int with_h, int id) {
    const uint64_t seed = g_seed * 104729u + 5000u + (uint64_t)id;
    const int nout = bwd ? 2 : 1;
    const int64_t n = rows * F;
    std::vector<uint16_t> g = make_x(rows, ld_in, seed, 0), u = make_x(rows, ld_in, seed + 1, 0),
                          dh = make_x(rows, F, seed + 2, special);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = F; c < ld_in; c++) g[(size_t)(r * ld_in + c)] = u[(size_t)(r * ld_in + c)] = 0x7FC0;
    if (special) g[(size_t)((rows / 3) * ld_in + F / 2)] = 0x7F80, g[(size_t)(rows * ld_in - ld_in)] = 0x7FC0;
    char shape[160];
    snprintf(shape, sizeof shape, "%s %lldx%lld ld %lld %s %s%s%s%s", bwd ? "backward" : "forward", (long long)rows,
             (long long)F, (long long)ld_in, fmt_name(f), outs == OUT_BOTH ? "q+q_t" : outs == OUT_Q ? "q" : "q_t",
             with_h ? " +h" : "", special ? " special" : "", misalign ? " misaligned" : "");
    const size_t off = misalign ? 1 : 0;
    struct dev_buf bg, bu, bdh, bv[2], bq[2], bqt[2], bh;
    auto up = [&](struct dev_buf *b, const char *name, const std::vector<uint16_t> &h) {
        std::vector<uint16_t> img(h.size() + off, 0);
        memcpy(img.data() + off, h.data(), h.size() * 2);
        dev_buf_alloc(b, name, img.size() * 2, POISON_NONE, img.data());
    };
    up(&bg, "g", g), up(&bu, "u", u), up(&bdh, "dh", dh);
    const uint16_t *dg_ = (const uint16_t *)bg.data + off, *du_ = (const uint16_t *)bu.data + off,
                   *ddh = (const uint16_t *)bdh.data + off;
    for (int o = 0; o < nout; o++) {
        dev_buf_alloc(&bv[o], "bf16 output", (size_t)n * 2, POISON_BF16, nullptr);
        dev_buf_alloc(&bq[o], "q", (size_t)n + off, POISON_NONE, nullptr);
        dev_buf_alloc(&bqt[o], "q_t", (size_t)n + off, POISON_NONE, nullptr);
    }
    dev_buf_alloc(&bh, "h", (size_t)n * 2, POISON_BF16, nullptr); /* the forward's bf16 values, when asked */
    /* the two passes: the bf16 outputs, their amax (for the stale scale), then the cast */
    if (bwd)
        gpu_swiglu_backward_bf16((uint16_t *)bv[0].data, (uint16_t *)bv[1].data, ddh, dg_, du_, (int)rows, (int)F,
                                 (int)ld_in, (int)F, g_stream);
    else
        gpu_swiglu_forward_bf16((uint16_t *)bv[0].data, dg_, du_, (int)rows, (int)F, (int)ld_in, g_stream);
    float scale[2], amax0[2];
    std::vector<uint8_t> wq[2], wqt[2];
    std::vector<uint16_t> want_h((size_t)n);
    float want_amax[2];
    unsigned want_flags[2];
    unsigned long long want_sat = 0;
    scalars sc[2];
    for (int o = 0; o < nout; o++) {
        std::vector<uint16_t> vb((size_t)n);
        dev_buf_download(&bv[o], vb.data(), 1);
        if (o == 0) want_h = vb;
        std::vector<float> vf = floats(vb);
        const float am = fp8_amax(vf.data(), n);
        scale[o] = isfinite(am) && am > 0 ? 1.5f * fp8_max(f) / am : 3.0f;
        amax0[o] = (id + o) % 2 ? 2.0f * (isfinite(am) ? am : 1.0f) : 0.25f * am;
        if (!isfinite(amax0[o])) amax0[o] = 1.0f;
        sc[o].alloc(scale[o], amax0[o]);
        struct gpu_fp8_scaling s = {f, GPU_FP8_DELAYED, (float *)sc[o].scale.data, (float *)sc[o].scale_inv.data,
                                    (float *)sc[o].amax.data, 0.0f, 0};
        gpu_fp8_cast_bf16((uint8_t *)bq[o].data, (uint8_t *)bqt[o].data, (const uint16_t *)bv[o].data, rows, F, &s,
                          (unsigned *)sc[o].flags.data, (unsigned long long *)sc[o].sat.data, g_stream);
        wq[o].resize((size_t)n), wqt[o].resize((size_t)n);
        dev_buf_download(&bq[o], wq[o].data(), 0), dev_buf_download(&bqt[o], wqt[o].data(), 0);
        float sc_, sci_;
        unsigned long long st_;
        sc[o].read(&sc_, &sci_, &want_amax[o], &want_flags[o], &st_);
        want_sat += st_;
    }
    /* the fused pass, twice over different poison */
    unsigned long long first_sat = 0;
    for (int pass = 0; pass < 2; pass++) {
        std::vector<unsigned char> poison((size_t)n + off, pass ? 0xA5 : 0x5A);
        struct gpu_fp8_scaling s[2];
        struct gpu_fp8_out out[2];
        for (int o = 0; o < nout; o++) {
            dev_buf_reset(&bq[o], poison.data()), dev_buf_reset(&bqt[o], poison.data());
            sc[o].reset(scale[o], amax0[o]);
            s[o] = {f, GPU_FP8_DELAYED, (float *)sc[o].scale.data, (float *)sc[o].scale_inv.data,
                    (float *)sc[o].amax.data, 0.0f, 0};
            out[o] = {outs == OUT_QT ? nullptr : (uint8_t *)bq[o].data + off,
                      outs == OUT_Q ? nullptr : (uint8_t *)bqt[o].data + off, &s[o], (unsigned *)sc[o].flags.data};
        }
        unsigned long long *sat = (unsigned long long *)sc[0].sat.data;
        dev_buf_reset(&bh, nullptr);
        uint16_t *h = with_h ? (uint16_t *)bh.data : nullptr;
        const int ran = bwd ? gpu_fp8_swiglu_backward(&out[0], &out[1], ddh, dg_, du_, rows, F, ld_in, sat, g_stream)
                            : gpu_fp8_swiglu_forward(&out[0], h, dg_, du_, rows, F, ld_in, sat, g_stream);
        CUDA_CHECK(cudaStreamSynchronize(g_stream));
        EXPECT(ran == fast, "fp8_swiglu %s: returned %d, want %d", shape, ran, fast);
        {
            std::vector<uint16_t> got_h((size_t)n);
            if (with_h && fast) { /* every element written, SwiGLU's forward's bits */
                dev_buf_download(&bh, got_h.data(), 1);
                EXPECT(memcmp(got_h.data(), want_h.data(), (size_t)n * 2) == 0, "fp8_swiglu %s: h differs from "
                       "gpu_swiglu_forward_bf16's", shape);
            } else { /* not asked for, or off the path: untouched */
                dev_buf_download(&bh, got_h.data(), 0);
                bool poisoned = true;
                for (uint16_t v : got_h) poisoned &= v == POISON_BF16_BITS;
                EXPECT(poisoned, "fp8_swiglu %s: wrote h though %s", shape, with_h ? "off the fused path" : "NULL");
            }
        }
        unsigned long long total_sat = 0;
        for (int o = 0; o < nout; o++) {
            std::vector<uint8_t> gq((size_t)n + off), gqt((size_t)n + off);
            dev_buf_download(&bq[o], gq.data(), 0), dev_buf_download(&bqt[o], gqt.data(), 0);
            float g_scale, g_scale_inv, g_amax;
            unsigned g_flags;
            unsigned long long g_sat;
            sc[o].read(&g_scale, &g_scale_inv, &g_amax, &g_flags, &g_sat);
            total_sat += g_sat;
            if (!fast) {
                bool untouched = true;
                for (size_t i = 0; i < gq.size(); i++) untouched &= gq[i] == poison[i] && gqt[i] == poison[i];
                EXPECT(untouched && g_flags == 0 && g_sat == 0 && g_amax == amax0[o],
                       "fp8_swiglu %s: off the fused path yet something was written", shape);
                continue;
            }
            const char *what = o == 0 ? (pass ? "codes (h / dg) over poison 0xA5" : "codes (h / dg) over poison 0x5A")
                                      : (pass ? "codes (du) over poison 0xA5" : "codes (du) over poison 0x5A");
            if (outs != OUT_QT) cmp_codes("fp8_swiglu", what, shape, f, seed, gq.data() + off, wq[o].data(), n);
            if (outs != OUT_Q) cmp_codes("fp8_swiglu_transposed", what, shape, f, seed, gqt.data() + off, wqt[o].data(), n);
            if (outs == OUT_QT) EXPECT(gq[off] == poison[0], "fp8_swiglu %s: wrote q though NULL", shape);
            if (outs == OUT_Q) EXPECT(gqt[off] == poison[0], "fp8_swiglu %s: wrote q_t though NULL", shape);
            EXPECT(!misalign || (gq[0] == poison[0] && gqt[0] == poison[0]), "fp8_swiglu %s: wrote before q", shape);
            struct cmp_case c = {"fp8_swiglu", o == 0 ? "amax recorded (h / dg)" : "amax recorded (du)", shape, "f32", seed};
            cmp_exact_f32(&c, &g_amax, &want_amax[o], 1);
            EXPECT(g_flags == want_flags[o], "fp8_swiglu %s: output %d flags %u, want %u", shape, o, g_flags, want_flags[o]);
        }
        if (fast) {
            EXPECT(total_sat == want_sat, "fp8_swiglu %s: saturated %llu, want %llu", shape, total_sat, want_sat);
            if (pass == 0) first_sat = total_sat;
            else EXPECT(first_sat == total_sat, "fp8_swiglu %s: the second run's count differs", shape);
        }
    }
    /* the inputs untouched */
    for (int k = 0; k < 3; k++) {
        const std::vector<uint16_t> &h = k == 0 ? g : k == 1 ? u : dh;
        std::vector<uint16_t> got(h.size() + off);
        dev_buf_download(k == 0 ? &bg : k == 1 ? &bu : &bdh, got.data(), 0);
        EXPECT(memcmp(got.data() + off, h.data(), h.size() * 2) == 0, "fp8_swiglu %s: input %d changed", shape, k);
    }
    for (int o = 0; o < nout; o++) {
        for (struct dev_buf *b : {&bv[o], &bq[o], &bqt[o]}) dev_buf_free(b);
        sc[o].free_all();
    }
    for (struct dev_buf *b : {&bg, &bu, &bdh, &bh}) dev_buf_free(b);
}

/* ---- block quantization ---- */

static void run_block(int64_t rows, int64_t cols, enum fp8_block b, enum fp8_format f, int p2, float eps, int transposed,
                      int misalign, int special, int id) {
    const uint64_t seed = g_seed * 7919u + 50000u + (uint64_t)id;
    const int64_t n = rows * cols;
    std::vector<uint16_t> xb = make_x(rows, cols, seed, special);
    if (special && cols > 3) /* an all-zero block (its scale falls back to 1 unless eps > 0) */
        for (int64_t j = 0; j < (cols < 128 ? cols : 128); j++) xb[(size_t)((rows - 1) * cols + j)] = 0;
    std::vector<float> xf = floats(xb);
    const int64_t ns = fp8_block_scale_count(b, rows, cols), nst = fp8_block_scale_count(b, cols, rows);
    std::vector<uint8_t> q((size_t)n), qt((size_t)n);
    std::vector<float> s((size_t)ns), st_((size_t)nst);
    struct fp8_stats st = {0, 0, 0};
    fp8_block_quantize(q.data(), s.data(), transposed ? qt.data() : nullptr, transposed ? st_.data() : nullptr, &st,
                       xf.data(), rows, cols, b, f, eps, p2);
    char shape[160];
    snprintf(shape, sizeof shape, "%lldx%lld %s %s pow2=%d eps=%g%s%s%s", (long long)rows, (long long)cols,
             b == FP8_BLOCK_1X128 ? "1x128" : "128x128", fmt_name(f), p2, (double)eps,
             transposed ? " +transposed" : "", misalign ? " misaligned" : "", special ? " special" : "");
    const size_t off = misalign ? 1 : 0;
    std::vector<uint16_t> ximg(xb.size() + off, 0);
    memcpy(ximg.data() + off, xb.data(), xb.size() * 2);
    struct dev_buf bx, bq, bqt, bs, bst;
    dev_buf_alloc(&bx, "x", ximg.size() * 2, POISON_NONE, ximg.data());
    dev_buf_alloc(&bq, "q", (size_t)n + off, POISON_NONE, nullptr);
    dev_buf_alloc(&bqt, "q_t", (size_t)n + off, POISON_NONE, nullptr);
    dev_buf_alloc(&bs, "s_inv", (size_t)ns * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bst, "s_inv_t", (size_t)nst * 4, POISON_F32, nullptr);
    scalars sc;
    sc.alloc(NAN, 0.0f);
    for (int pass = 0; pass < 2; pass++) {
        std::vector<unsigned char> poison((size_t)n + off, pass ? 0xA5 : 0x5A);
        dev_buf_reset(&bq, poison.data()), dev_buf_reset(&bqt, poison.data());
        dev_buf_reset(&bs, nullptr), dev_buf_reset(&bst, nullptr);
        sc.reset(NAN, 0.0f);
        gpu_fp8_block_quantize_bf16((uint8_t *)bq.data + off, (float *)bs.data,
                                    transposed ? (uint8_t *)bqt.data + off : nullptr,
                                    transposed ? (float *)bst.data : nullptr, (const uint16_t *)bx.data + off, rows, cols,
                                    b, f, eps, p2, (float *)sc.amax.data, (unsigned *)sc.flags.data,
                                    (unsigned long long *)sc.sat.data, g_stream);
        std::vector<uint8_t> gq((size_t)n + off), gqt((size_t)n + off);
        std::vector<float> gs((size_t)ns), gst((size_t)nst);
        dev_buf_download(&bq, gq.data(), 0), dev_buf_download(&bqt, gqt.data(), 0);
        dev_buf_download(&bs, gs.data(), 1);
        if (transposed) dev_buf_download(&bst, gst.data(), 1);
        float g_scale, g_scale_inv, g_amax;
        unsigned g_flags;
        unsigned long long g_sat;
        sc.read(&g_scale, &g_scale_inv, &g_amax, &g_flags, &g_sat);
        cmp_codes("fp8_block_quantize", pass ? "q over poison 0xA5" : "q over poison 0x5A", shape, f, seed,
                  gq.data() + off, q.data(), n);
        struct cmp_case c = {"fp8_block_quantize", "s_inv (with padding slots)", shape, "f32", seed};
        cmp_exact_f32(&c, gs.data(), s.data(), ns);
        if (transposed) {
            cmp_codes("fp8_block_quantize", "q_t", shape, f, seed, gqt.data() + off, qt.data(), n);
            c.what = "s_inv_t";
            cmp_exact_f32(&c, gst.data(), st_.data(), nst);
        } else {
            EXPECT(gqt[off] == (pass ? 0xA5 : 0x5A), "fp8_block_quantize %s: wrote q_t though NULL", shape);
        }
        c.what = "amax (whole tensor)";
        cmp_exact_f32(&c, &g_amax, &st.amax, 1);
        EXPECT(g_sat == (unsigned long long)st.saturated && g_flags == st.flags,
               "fp8_block_quantize %s: saturated %llu (want %lld), flags %u (want %u)", shape, g_sat,
               (long long)st.saturated, g_flags, st.flags);
    }
    for (struct dev_buf *bb : {&bx, &bq, &bqt, &bs, &bst}) dev_buf_free(bb);
    sc.free_all();
}

/* ---- delayed update of several tensors ---- */

static void run_delayed_update(int n, int len, enum fp8_amax_algo algo, int margin, enum fp8_format f, int id) {
    const uint64_t seed = g_seed * 7919u + 90000u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    std::vector<float> hist((size_t)n * len), scale((size_t)n), scale_inv((size_t)n);
    rng_fill_uniform(&r, hist.data(), (int64_t)hist.size(), 0.0, 100.0);
    for (int t = 0; t < n; t++) scale[(size_t)t] = (float)rng_range(&r, 0.5, 50), scale_inv[(size_t)t] = 1.0f / scale[(size_t)t];
    /* tensor 1: an all-zero window (scale kept); 2: an Inf in the window; 3: a NaN; 4: all NaN */
    if (n > 1) for (int i = 0; i < len; i++) hist[(size_t)len + i] = 0.0f;
    if (n > 2) hist[(size_t)2 * len + len / 2] = INFINITY;
    if (n > 3) hist[(size_t)3 * len + (len - 1)] = NAN;
    if (n > 4) for (int i = 0; i < len; i++) hist[(size_t)4 * len + i] = NAN;
    char shape[96];
    snprintf(shape, sizeof shape, "n=%d len=%d %s margin=%d %s", n, len, algo == FP8_AMAX_MAX ? "max" : "most_recent",
             margin, fmt_name(f));
    struct dev_buf bh, bs, bsi, bf;
    dev_buf_alloc(&bh, "history", hist.size() * 4, POISON_NONE, hist.data());
    dev_buf_alloc(&bs, "scale", (size_t)n * 4, POISON_NONE, scale.data());
    dev_buf_alloc(&bsi, "scale_inv", (size_t)n * 4, POISON_NONE, scale_inv.data());
    const unsigned f0 = 0;
    dev_buf_alloc(&bf, "flags", 4, POISON_NONE, &f0);
    for (int it = 0; it < 3; it++) {
        unsigned want_flags = 0;
        for (int t = 0; t < n; t++) {
            struct fp8_delayed d = {len, algo, margin, f, hist.data() + (size_t)t * len, scale[(size_t)t],
                                    scale_inv[(size_t)t]};
            want_flags |= fp8_delayed_update(&d);
            scale[(size_t)t] = d.scale, scale_inv[(size_t)t] = d.scale_inv;
        }
        dev_buf_reset(&bf, &f0);
        gpu_fp8_delayed_update((float *)bh.data, (float *)bs.data, (float *)bsi.data, n, len, algo, margin, f,
                               (unsigned *)bf.data, g_stream);
        std::vector<float> gh(hist.size()), gs((size_t)n), gsi((size_t)n);
        unsigned gf = 0;
        dev_buf_download(&bh, gh.data(), 0), dev_buf_download(&bs, gs.data(), 0), dev_buf_download(&bsi, gsi.data(), 0);
        dev_buf_download(&bf, &gf, 0);
        struct cmp_case c = {"fp8_delayed_update", "history", shape, "f32", seed};
        cmp_exact_f32(&c, gh.data(), hist.data(), (int64_t)hist.size());
        c.what = "scale";
        cmp_exact_f32(&c, gs.data(), scale.data(), n);
        c.what = "scale_inv";
        cmp_exact_f32(&c, gsi.data(), scale_inv.data(), n);
        EXPECT(gf == want_flags, "fp8_delayed_update %s iteration %d: flags %u, want %u", shape, it, gf, want_flags);
        /* the next iteration's recordings into slot 0 */
        for (int t = 0; t < n; t++) hist[(size_t)t * len] = (float)rng_range(&r, 0.0, 200.0);
        if (n > 1) hist[(size_t)len] = 0.0f;
        dev_buf_reset(&bh, hist.data());
    }
    for (struct dev_buf *b : {&bh, &bs, &bsi, &bf}) dev_buf_free(b);
}

/* The delayed recipe on one tensor: cast (records amax into history slot 0, quantizes with the
 * scale of the last update) then update, four iterations, against fp8_delayed. */
static void run_delayed_recipe(int64_t rows, int64_t cols, enum fp8_format f, int len, int id) {
    const uint64_t seed = g_seed * 7919u + 95000u + (uint64_t)id;
    std::vector<float> hist((size_t)len, 0.0f);
    struct fp8_delayed d = {len, FP8_AMAX_MAX, 0, f, hist.data(), 1.0f, 1.0f};
    struct dev_buf bh, bs, bsi, bx, bq, bqt;
    dev_buf_alloc(&bh, "history", (size_t)len * 4, POISON_NONE, hist.data());
    const float one = 1.0f;
    dev_buf_alloc(&bs, "scale", 4, POISON_NONE, &one);
    dev_buf_alloc(&bsi, "scale_inv", 4, POISON_NONE, &one);
    dev_buf_alloc(&bx, "x", (size_t)(rows * cols) * 2, POISON_NONE, nullptr);
    dev_buf_alloc(&bq, "q", (size_t)(rows * cols), POISON_NONE, nullptr);
    dev_buf_alloc(&bqt, "q_t", (size_t)(rows * cols), POISON_NONE, nullptr);
    char shape[96];
    snprintf(shape, sizeof shape, "%lldx%lld %s history %d", (long long)rows, (long long)cols, fmt_name(f), len);
    for (int it = 0; it < 4; it++) {
        std::vector<uint16_t> xb = make_x(rows, cols, seed + (uint64_t)it, 0);
        for (uint16_t &h : xb) h = bf16_from_float(bf16_to_float(h) * (float)(it + 1) * 3.0f); /* growing amax */
        std::vector<float> xf = floats(xb);
        std::vector<uint8_t> q((size_t)(rows * cols)), qt((size_t)(rows * cols));
        struct fp8_stats st = {0, 0, 0};
        fp8_cast_transpose(q.data(), qt.data(), &st, xf.data(), rows, cols, d.scale, f);
        fp8_delayed_record(&d, st.amax);
        fp8_delayed_update(&d);
        dev_buf_reset(&bx, xb.data());
        struct gpu_fp8_scaling s = {f, GPU_FP8_DELAYED, (float *)bs.data, (float *)bsi.data, (float *)bh.data, 0, 0};
        gpu_fp8_cast_bf16((uint8_t *)bq.data, (uint8_t *)bqt.data, (const uint16_t *)bx.data, rows, cols, &s, nullptr,
                          nullptr, g_stream);
        gpu_fp8_delayed_update((float *)bh.data, (float *)bs.data, (float *)bsi.data, 1, len, FP8_AMAX_MAX, 0, f,
                               nullptr, g_stream);
        std::vector<uint8_t> gq((size_t)(rows * cols)), gqt((size_t)(rows * cols));
        std::vector<float> gh((size_t)len);
        float gsc = 0, gsci = 0;
        dev_buf_download(&bq, gq.data(), 0), dev_buf_download(&bqt, gqt.data(), 0), dev_buf_download(&bh, gh.data(), 0);
        dev_buf_download(&bs, &gsc, 0), dev_buf_download(&bsi, &gsci, 0);
        char what[64];
        snprintf(what, sizeof what, "iteration %d codes", it);
        cmp_codes("fp8_delayed_recipe", what, shape, f, seed, gq.data(), q.data(), rows * cols);
        cmp_codes("fp8_delayed_recipe", what, shape, f, seed, gqt.data(), qt.data(), rows * cols);
        struct cmp_case c = {"fp8_delayed_recipe", "history", shape, "f32", seed};
        cmp_exact_f32(&c, gh.data(), hist.data(), len);
        c.what = "scale, scale_inv";
        const float want[2] = {d.scale, d.scale_inv}, got[2] = {gsc, gsci};
        cmp_exact_f32(&c, got, want, 2);
    }
    for (struct dev_buf *b : {&bh, &bs, &bsi, &bx, &bq, &bqt}) dev_buf_free(b);
}

/* ---- bench ---- */

struct bench_ctx {
    uint8_t *q, *q_t;
    float *s, *s_t, *amax, *hist, *scale, *scale_inv;
    const uint16_t *x;
    int64_t rows, cols;
    int kind; /* 0 amax, 1 delayed cast q, 2 delayed cast q+q_t, 3 current (amax + cast q+q_t), 4 1x128, 5 1x128+t,
                 6 128x128+t, 7 delayed update */
    int n_tensors, len;
};

static void bench_call(void *vp, cudaStream_t st) {
    bench_ctx *b = (bench_ctx *)vp;
    struct gpu_fp8_scaling s = {FP8_E4M3, GPU_FP8_DELAYED, b->scale, b->scale_inv, b->amax, 0, 0};
    switch (b->kind) {
    case 0: gpu_fp8_amax_bf16(b->amax, nullptr, b->x, b->rows * b->cols, st); break;
    case 1: gpu_fp8_cast_bf16(b->q, nullptr, b->x, b->rows, b->cols, &s, nullptr, nullptr, st); break;
    case 2: gpu_fp8_cast_bf16(b->q, b->q_t, b->x, b->rows, b->cols, &s, nullptr, nullptr, st); break;
    case 3:
        s.recipe = GPU_FP8_CURRENT;
        CUDA_CHECK(cudaMemsetAsync(b->amax, 0, 4, st));
        gpu_fp8_amax_bf16(b->amax, nullptr, b->x, b->rows * b->cols, st);
        gpu_fp8_cast_bf16(b->q, b->q_t, b->x, b->rows, b->cols, &s, nullptr, nullptr, st);
        break;
    case 4:
    case 5:
        gpu_fp8_block_quantize_bf16(b->q, b->s, b->kind == 5 ? b->q_t : nullptr, b->kind == 5 ? b->s_t : nullptr, b->x,
                                    b->rows, b->cols, FP8_BLOCK_1X128, FP8_E4M3, 0, 1, nullptr, nullptr, nullptr, st);
        break;
    case 6:
        gpu_fp8_block_quantize_bf16(b->q, b->s, b->q_t, b->s_t, b->x, b->rows, b->cols, FP8_BLOCK_128X128, FP8_E4M3, 0,
                                    1, nullptr, nullptr, nullptr, st);
        break;
    default:
        gpu_fp8_delayed_update(b->hist, b->scale, b->scale_inv, b->n_tensors, b->len, FP8_AMAX_MAX, 0, FP8_E4M3,
                               nullptr, st);
    }
}

struct swiglu_bench_ctx {
    const uint16_t *g, *u, *dh;
    uint16_t *bf; /* the two passes' bf16 outputs (2 × R × F) */
    uint8_t *codes; /* q, q_t of each output */
    float *scale, *scale_inv, *amax;
    int64_t R, F;
    int bwd, fused;
};

static void swiglu_bench_call(void *vp, cudaStream_t st) {
    swiglu_bench_ctx *b = (swiglu_bench_ctx *)vp;
    const int64_t n = b->R * b->F;
    struct gpu_fp8_scaling s = {FP8_E4M3, GPU_FP8_DELAYED, b->scale, b->scale_inv, b->amax, 0, 0};
    struct gpu_fp8_out o0 = {b->codes, b->codes + n, &s, nullptr}, o1 = {b->codes + 2 * n, b->codes + 3 * n, &s, nullptr};
    if (b->fused) {
        const int ran = b->bwd ? gpu_fp8_swiglu_backward(&o0, &o1, b->dh, b->g, b->u, b->R, b->F, b->F, nullptr, st)
                               : gpu_fp8_swiglu_forward(&o0, nullptr, b->g, b->u, b->R, b->F, b->F, nullptr, st);
        if (!ran) {
            fprintf(stderr, "fp8_parity bench: the fused SwiGLU did not run\n");
            exit(1);
        }
    } else if (b->bwd) {
        gpu_swiglu_backward_bf16(b->bf, b->bf + n, b->dh, b->g, b->u, (int)b->R, (int)b->F, (int)b->F, (int)b->F, st);
        gpu_fp8_cast_bf16(o0.q, o0.q_t, b->bf, b->R, b->F, &s, nullptr, nullptr, st);
        gpu_fp8_cast_bf16(o1.q, o1.q_t, b->bf + n, b->R, b->F, &s, nullptr, nullptr, st);
    } else {
        gpu_swiglu_forward_bf16(b->bf, b->g, b->u, (int)b->R, (int)b->F, (int)b->F, st);
        gpu_fp8_cast_bf16(o0.q, o0.q_t, b->bf, b->R, b->F, &s, nullptr, nullptr, st);
    }
}

static void bench(double ceiling) {
    /* (rows, cols): activations N = 8192 rows × C (1B 2048, 8B 4096), × F (1B 8192, 8B 14336); the 8B
     * down_proj weight (4096 × 14336); Llama-3.2-1B's weights (q/o 2048², k/v 512 × 2048, the MLP's
     * 2048 × 8192), cast every step in full fine-tuning. worst_cast_pct_of_copy: the casts of at
     * least 8192 × 4096 elements; worst_small_pct_of_copy: the smaller ones (launch-bound below ~1M). */
    const int64_t shapes[][2] = {{8192, 2048}, {8192, 4096}, {8192, 8192}, {8192, 14336}, {4096, 14336},
                                 {2048, 2048}, {512, 2048},  {2048, 8192}};
    const size_t max_n = (size_t)8192 * 14336;
    uint16_t *x;
    uint8_t *q, *qt;
    float *s, *st, *scal;
    CUDA_CHECK(cudaMalloc(&x, max_n * 2));
    CUDA_CHECK(cudaMalloc(&q, max_n));
    CUDA_CHECK(cudaMalloc(&qt, max_n));
    CUDA_CHECK(cudaMalloc(&s, max_n / 128 * 4 + 4096));
    CUDA_CHECK(cudaMalloc(&st, max_n / 128 * 4 + 4096));
    CUDA_CHECK(cudaMalloc(&scal, 64));
    {
        std::vector<uint16_t> h = make_x(1, 1 << 20, g_seed, 0); /* never time on zeros: tile a random MiB */
        for (size_t o = 0; o < max_n; o += h.size())
            CUDA_CHECK(cudaMemcpy(x + o, h.data(), 2 * (max_n - o < h.size() ? max_n - o : h.size()),
                                  cudaMemcpyHostToDevice));
        const float init[4] = {1.0f, 1.0f, 0.0f, 0.0f};
        CUDA_CHECK(cudaMemcpy(scal, init, 16, cudaMemcpyHostToDevice));
    }
    const char *names[] = {"fp8_amax_bf16", "fp8_cast_delayed_q", "fp8_cast_delayed_q_qt", "fp8_current_amax_cast_q_qt",
                           "fp8_block_1x128_q", "fp8_block_1x128_q_qt", "fp8_block_128x128_q_qt"};
    double worst = 1e9, worst_small = 1e9;
    for (const auto &sh : shapes)
        for (int kind = 0; kind < 7; kind++) {
            const double n = (double)sh[0] * sh[1];
            /* bytes that must move: read x (2n; the current recipe reads it twice), write the codes
             * (n per copy) and the block scales (4 bytes per 128 elements and copy) */
            const double copies = (kind == 2 || kind == 3 || kind == 5 || kind == 6) ? 2 : (kind == 0 ? 0 : 1);
            double bytes = 2 * n * (kind == 3 ? 2 : 1) + n * copies;
            if (kind == 4 || kind == 5) bytes += 4 * n / 128 * copies;
            bench_ctx b = {q, qt, s, st, scal + 2, nullptr, scal, scal + 1, x, sh[0], sh[1], kind, 0, 0};
            char shape[64];
            snprintf(shape, sizeof shape, "%lldx%lld E4M3", (long long)sh[0], (long long)sh[1]);
            struct bench_result r = bench_time(bench_call, &b, g_stream, 3, 15, 5);
            bench_json(names[kind], shape, bytes, 0, r, ceiling);
            const double pct = 100.0 * bytes / (r.median_ms * 1e-3) / 1e9 / ceiling;
            if (kind != 0 && n >= 8192.0 * 4096) worst = fmin(worst, pct);
            if (kind != 0 && n < 8192.0 * 4096) worst_small = fmin(worst_small, pct);
        }
    /* SwiGLU into codes at Llama-3.2-1B's MLP (8192 × 8192), against SwiGLU's bf16 pass and the cast(s)
     * behind it: bytes that must move — forward g, u read, q and q_t written (6 an element); backward
     * g, u, dh read, two outputs' q and q_t (10) */
    {
        const int64_t R = 8192, F = 8192;
        uint16_t *gu, *bfo;
        uint8_t *codes;
        CUDA_CHECK(cudaMalloc(&gu, (size_t)R * 2 * F * 2));
        CUDA_CHECK(cudaMalloc(&bfo, (size_t)R * 2 * F * 2));
        CUDA_CHECK(cudaMalloc(&codes, (size_t)R * F * 4));
        CUDA_CHECK(cudaMemcpy(gu, x, (size_t)R * F * 2, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(gu + (size_t)R * F, x + 1, (size_t)R * F * 2, cudaMemcpyDeviceToDevice));
        for (int bwd = 0; bwd < 2; bwd++)
            for (int fused = 0; fused < 2; fused++) {
                swiglu_bench_ctx c = {gu, gu + (size_t)R * F, x + 64, bfo, codes, scal, scal + 1, scal + 2, R, F, bwd, fused};
                char shape[64];
                snprintf(shape, sizeof shape, "%lldx%lld E4M3 q+q_t", (long long)R, (long long)F);
                bench_json(bwd ? (fused ? "fp8_swiglu_backward_fused" : "swiglu_backward_then_casts")
                               : (fused ? "fp8_swiglu_forward_fused" : "swiglu_forward_then_cast"),
                           shape, (double)R * F * (bwd ? 10 : 6), 0, bench_time(swiglu_bench_call, &c, g_stream, 3, 15, 5),
                           ceiling);
            }
        for (void *p : {(void *)gu, (void *)bfo, (void *)codes}) CUDA_CHECK(cudaFree(p));
    }
    /* the delayed update of every per-tensor scale of Llama-3.2-1B: 16 layers × 7 linears × 3 tensors */
    const int nt = 16 * 7 * 3, len = 1024;
    float *hist, *sc2;
    CUDA_CHECK(cudaMalloc(&hist, (size_t)nt * len * 4));
    CUDA_CHECK(cudaMalloc(&sc2, (size_t)nt * 8));
    CUDA_CHECK(cudaMemset(hist, 0x3C, (size_t)nt * len * 4)); /* 0.0115: finite, positive */
    CUDA_CHECK(cudaMemset(sc2, 0x3C, (size_t)nt * 8));
    bench_ctx b = {q, qt, s, st, scal + 2, hist, sc2, sc2 + nt, x, 0, 0, 7, nt, len};
    char shape[64];
    snprintf(shape, sizeof shape, "%d tensors x history %d", nt, len);
    bench_json("fp8_delayed_update", shape, 2.0 * nt * len * 4, 0, bench_time(bench_call, &b, g_stream, 3, 15, 5),
               ceiling);
    printf("{\"op\":\"fp8_summary\",\"device\":\"%s\",\"copy_GBps\":%.1f,\"worst_cast_pct_of_copy\":%.1f,"
           "\"worst_small_pct_of_copy\":%.1f}\n",
           parity_device_name(), ceiling, worst, worst_small);
    for (void *p : {(void *)x, (void *)q, (void *)qt, (void *)s, (void *)st, (void *)scal, (void *)hist, (void *)sc2})
        CUDA_CHECK(cudaFree(p));
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261201);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    int id = 0;

    const int64_t ns[] = {1, 7, 8, 9, 1000, 4097, (1 << 20) + 3};
    for (int64_t n : ns)
        for (int f32 = 0; f32 < 2; f32++)
            for (int mis = 0; mis < 2; mis++) run_amax(n, f32, mis, (int)(n % 3), 0.0f, id++);
    run_amax(4097, 0, 0, 0, 1e30f, id++);  /* the starting value wins */
    run_amax(4097, 1, 0, 0, 1e-3f, id++);  /* the tensor wins */

    const int64_t shapes[][2] = {{1, 1},     {3, 5},     {16, 16},   {17, 33},   {128, 128},
                                 {129, 257}, {256, 384}, {1000, 48}, {48, 1000}, {512, 2048}, {2048, 576}};
    id = 0;
    for (const auto &sh : shapes)
        for (int f = 0; f < 2; f++)
            for (int rec = 0; rec < 2; rec++)
                for (int o = 0; o < 3; o++) {
                    if (sh[0] * sh[1] > 200000 && o != OUT_BOTH) continue; /* the large ones once */
                    run_cast(sh[0], sh[1], (enum fp8_format)f, (enum gpu_fp8_recipe)rec, (enum outputs)o, 0,
                             (int)((id / 3) % 2), 0.0f, 0, id);
                    id++;
                }
    run_cast(129, 257, FP8_E4M3, GPU_FP8_DELAYED, OUT_BOTH, 1, 1, 0.0f, 0, id++);
    run_cast(256, 384, FP8_E5M2, GPU_FP8_CURRENT, OUT_BOTH, 1, 0, 0.0f, 0, id++);
    run_cast(256, 384, FP8_E4M3, GPU_FP8_CURRENT, OUT_BOTH, 0, 0, 0.0f, 1, id++);
    run_cast(256, 384, FP8_E4M3, GPU_FP8_CURRENT, OUT_Q, 0, 0, 1e6f, 0, id++); /* eps above the amax */
    run_cast(129, 257, FP8_E5M2, GPU_FP8_CURRENT, OUT_QT, 0, 1, 0.0f, 1, id++);
    /* The tile heights (gpu/fp8.cu: 128 rows, halved to 64 or 32 while a 132-SM device would get
     * fewer than 4 tiles per SM): 2064x4240 takes 128 (578 tiles), 1040x4112 64 (561), 16x4096 and
     * 4096x16 32; each with partial tiles in both dimensions, both recipes, every output choice,
     * planted NaN/Inf; one row, one column (element-wise); misaligned pointers on a fast-path shape. */
    const int64_t tiles[][2] = {{2064, 4240}, {1040, 4112}, {16, 4096}, {4096, 16}, {1, 4096}, {4096, 1}};
    for (const auto &sh : tiles)
        for (int o = 0; o < 3; o++) {
            run_cast(sh[0], sh[1], FP8_E4M3, GPU_FP8_DELAYED, (enum outputs)o, 0, 1, 0.0f, 0, id++);
            run_cast(sh[0], sh[1], FP8_E5M2, GPU_FP8_CURRENT, (enum outputs)o, 0, o != 1, 0.0f, o == 2, id++);
        }
    run_cast(2064, 4240, FP8_E4M3, GPU_FP8_DELAYED, OUT_BOTH, 1, 1, 0.0f, 0, id++);
    run_cast(1040, 4112, FP8_E5M2, GPU_FP8_CURRENT, OUT_QT, 1, 0, 0.0f, 1, id++);

    id = 0;
    for (const auto &sh : shapes)
        for (int b = 0; b < 2; b++)
            for (int f = 0; f < 2; f++)
                for (int p2 = 0; p2 < 2; p2++) {
                    const bool big = sh[0] * sh[1] > 200000;
                    if (big && p2 != f) continue; /* the large ones twice per block kind */
                    run_block(sh[0], sh[1], (enum fp8_block)b, (enum fp8_format)f, p2, 0.0f, (id % 3) != 2, 0,
                              (int)(id % 2), id);
                    id++;
                }
    run_block(129, 257, FP8_BLOCK_1X128, FP8_E4M3, 1, 0.0f, 1, 1, 1, id++);
    run_block(256, 384, FP8_BLOCK_128X128, FP8_E5M2, 0, 0.0f, 1, 1, 0, id++);
    run_block(256, 384, FP8_BLOCK_1X128, FP8_E4M3, 0, 1e-2f, 1, 0, 1, id++);
    run_block(384, 256, FP8_BLOCK_128X128, FP8_E4M3, 1, 0.5f, 1, 0, 1, id++);
    /* the tile heights of 1x128 without q_t (128, 64, 32 as above), partial tiles, one row / column,
     * misaligned pointers on a fast-path shape */
    for (const auto &sh : tiles)
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < 2; t++)
                run_block(sh[0], sh[1], (enum fp8_block)b, (enum fp8_format)((b + t) % 2), 1 - t, 0.0f, t, 0, 1, id++);
    run_block(2064, 4240, FP8_BLOCK_1X128, FP8_E4M3, 1, 0.0f, 1, 1, 1, id++);
    run_block(2064, 4240, FP8_BLOCK_128X128, FP8_E5M2, 0, 0.0f, 1, 1, 0, id++);

    /* SwiGLU into codes: tile edges and partial tiles in both dimensions (64-row backward and 128-row
     * forward tiles), gate and up side by side (ld 2F), the trainers' shapes (SmolLM2's F 1536, a
     * 1B-wide F 8192 on fewer rows), both formats, every output choice, planted NaN/Inf; then the
     * shapes and alignments off the fused path (rows or F not multiples of 16, a misaligned input). */
    id = 0;
    const int64_t sw[][3] = {{16, 128, 128},   {64, 256, 512},     {272, 1024, 2048}, {1040, 4112, 4112},
                             {2064, 576, 576}, {512, 1536, 3072}, {256, 8192, 8192}};
    for (const auto &sh : sw)
        for (int bwd = 0; bwd < 2; bwd++)
            for (int o = 0; o < 3; o++) {
                if (sh[0] * sh[1] > 1000000 && o != OUT_BOTH) continue;
                /* the forward with its bf16 values too (h) where only q is asked, as the adapter methods run it */
                run_swiglu(sh[0], sh[1], sh[2], bwd, (enum fp8_format)((id + bwd) % 2), (enum outputs)o, (id % 3) == 1,
                           0, 1, !bwd && o == OUT_Q, id);
                id++;
            }
    run_swiglu(512, 1536, 3072, 0, FP8_E4M3, OUT_BOTH, 1, 0, 1, 1, id++); /* h with both code copies */
    run_swiglu(17, 128, 128, 1, FP8_E5M2, OUT_BOTH, 0, 0, 0, 0, id++);  /* rows off 16 */
    run_swiglu(32, 120, 120, 0, FP8_E4M3, OUT_BOTH, 0, 0, 0, 1, id++);  /* F off 16 */
    run_swiglu(64, 256, 256, 1, FP8_E4M3, OUT_Q, 1, 1, 0, 0, id++);     /* misaligned */
    run_swiglu(64, 256, 256, 0, FP8_E4M3, OUT_Q, 0, 1, 0, 1, id++);     /* misaligned, h asked */

    id = 0;
    const int lens[] = {1, 3, 16, 1000, 1024, 4096};
    for (int len : lens)
        for (int algo = 0; algo < 2; algo++) {
            run_delayed_update(5, len, (enum fp8_amax_algo)algo, 0, FP8_E4M3, id++);
            run_delayed_update(6, len, (enum fp8_amax_algo)algo, 3, FP8_E5M2, id++);
        }
    run_delayed_recipe(256, 384, FP8_E4M3, 16, 0);
    run_delayed_recipe(129, 100, FP8_E5M2, 3, 1);

    const int rc = test_finish("fp8_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
