/* gemm_fp8_parity.cu — gpu/gemm's FP8 path (cuBLASLt FP8 matmul) against ref/fp8's scaled GEMM;
 * the measurement of how the GPU accumulates FP8 products; FP8 against bf16 rates.
 *
 *   bazel test --config=gpu //tests/parity:gemm_fp8_parity
 *   gemm_fp8_parity [--seed=N] [--probe] [--bench]
 *
 * (a) Exact cases. Integer codes (E4M3 and E5M2 hold every integer up to 16 and 8) with |value| ≤
 *     vmax chosen so that K·vmax² ≤ 2^10: every product and partial sum is an integer below 2^11,
 *     exact in any accumulator that keeps ≥ 10 bits below its leading one (the measurement below
 *     must find at least that, or the run fails), and power-of-two scales keep them exact. So D
 *     must equal ref_fp8_gemm_scaled bit for bit (bf16 D: one rounding of that exact value on
 *     both sides; with a bias or beta = 1 the values are kept ≤ 256, exact in bf16, so where the
 *     epilogue rounds cannot matter). Covered: E4M3×E4M3, E5M2×E4M3, E4M3×E5M2; precise and fast
 *     accumulation; bf16 and fp32 D; per-tensor scales and NULL (= 1); alpha 2; beta = 1; bias;
 *     AMAX_D (where cuBLASLt accepts it with a bf16/fp32 D); the 1×128 / 128×128 block scale modes
 *     in every combination cuBLASLt runs (power-of-two block scales, K a multiple of 128 and not);
 *     the three typed linear products; determinism; and, in child processes, that the
 *     preconditions stop the program with CHECK's status (not TN, a dimension not a multiple of
 *     16, E5M2×E5M2, a misaligned scale pointer, FP8 fields on a bf16 product).
 * (b) The accumulation measurement (run every time, printed in full with --probe). One GEMM per
 *     accumulation mode (precise, fast, block-scaled), 2048×2048×4096, carries one experiment per
 *     diagonal element D[i][i] = Σ_k A[i,k]·B[i,k]:
 *       bits(d): a product 2^16 at k = 0 and one product 2^(16−g) at k = d, g = 1 .. 34; bits(d)
 *         is the largest g for which D = 2^16 + 2^(16−g) exactly (23 = all an fp32 result can
 *         hold). d sweeps 1 .. 4095 across the tensor-core instruction (k = 32), the tile and the
 *         promotion boundaries: the smallest d from which bits(d) = 23 is the promotion interval
 *         I (∞ when never), and p = min bits(d) over d < I the accumulator's fraction bits;
 *       group: +2^16 at k = 0, −2^16 at k = 1, 2^-14 at k = d: the small term survives only when
 *         it is added after the two large ones cancelled, so the smallest such d is the number of
 *         products the hardware aligns together (g);
 *       rounding: 2^16 ± 0.75 of the last kept bit at k = 1: the result says whether the dropped
 *         bits are truncated or rounded.
 *     --probe adds the error growth with K on random signed inputs (max and rms of |D − exact| /
 *     Σ|a·b| on 2048 sampled elements, K = 256 .. 16384) next to the same numbers for the model
 *     below, the block scale modes cuBLASLt runs (every combination, E4M3 and E5M2, with and
 *     without fast accumulation) and, when a block mode runs but disagrees, which scale layout it
 *     reads. cuBLASLt's algorithm (tile, split-K) is printed with each measurement.
 * (c) Random cases, tolerance derived from (b) (STYLE.md tier c): the naive same-precision
 *     implementation is the MODEL of the measured accumulator — products exact; each group of g
 *     consecutive products aligned with the running sum to the largest exponent E among them and
 *     each term truncated to a multiple of 2^(E−p) (pessimistic: truncation, per term); the sum
 *     added into an fp32 accumulator (round to nearest) every I products (block scaling: every
 *     128, times the block's scales); the scales and alpha applied in fp32. The GPU's max and rms
 *     error against the exact value (double) must be at most 2× the model's, plus a floor for the
 *     fp32 operations whose order is unknown ((K/128 + 4)·FLT_EPSILON·max Σ|σa·σb·a·b|). A bf16 D
 *     compares with the model's result rounded to bf16. Inputs: normals with a per-row magnitude
 *     (e^±2), quantized by current scaling (per tensor) or block quantization; 2048 sampled
 *     outputs per case.
 * (d) --bench: TFLOP/s of bf16 (the products the bf16 trainer runs) and FP8 (per-tensor precise,
 *     per-tensor with fast forward accumulation — TE's default —, block-scaled) at 8192³ and at
 *     every linear of Llama-3.2-1B and Llama-3.1-8B (N = 8192 rows: forward, dx, dW), with the
 *     summed time of each model's linears in each precision and the FP8/bf16 speed-up.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/gemm.h"
#include "io/check.h"
#include "ref/bf16.h"
#include "ref/fp8.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;
static struct gpu_gemm *g_gemm;
static int g_probe;

static enum fp8_format fmt_of(gemm_dtype t) { return t == GEMM_E5M2 ? FP8_E5M2 : FP8_E4M3; }
static enum fp8_scaling scaling_of(gemm_scale s) {
    return s == GEMM_SCALE_TENSOR ? FP8_SCALING_TENSOR : s == GEMM_SCALE_1X128 ? FP8_SCALING_1X128 : FP8_SCALING_128X128;
}
static enum fp8_block block_of(gemm_scale s) { return s == GEMM_SCALE_1X128 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128; }
static const char *tname(gemm_dtype t) { return t == GEMM_E4M3 ? "E4M3" : t == GEMM_E5M2 ? "E5M2" : "bf16"; }
static const char *sname(gemm_scale s) {
    return s == GEMM_SCALE_TENSOR ? "tensor" : s == GEMM_SCALE_1X128 ? "1x128" : "128x128";
}

/* One FP8 operand (rows, K) on the host and on the device. */
struct operand {
    int rows = 0, K = 0;
    gemm_dtype type = GEMM_E4M3;
    gemm_scale mode = GEMM_SCALE_TENSOR;
    std::vector<uint8_t> codes;
    std::vector<float> scales; /* dequantization scales in the mode's layout (tensor: 1) */
    struct dev_buf dcodes, dscales;
    int on_device = 0;
    int64_t scale_count() const { return mode == GEMM_SCALE_TENSOR ? 1 : fp8_block_scale_count(block_of(mode), rows, K); }
    double sigma(int r, int k) const { /* the scale of element (r, k) */
        if (mode == GEMM_SCALE_TENSOR) return scales[0];
        return scales[(size_t)fp8_block_scale_index(block_of(mode), rows, K, r, k)];
    }
    void upload(const char *name) {
        dev_buf_alloc(&dcodes, name, codes.size(), POISON_NONE, codes.data());
        dev_buf_alloc(&dscales, "scales", scales.size() * 4, POISON_NONE, scales.data());
        on_device = 1;
    }
    void release() {
        if (on_device) dev_buf_free(&dcodes), dev_buf_free(&dscales);
        on_device = 0;
    }
    struct gemm_fp8_operand dev(int null_scale = 0) const {
        return {(const uint8_t *)dcodes.data, type, null_scale ? nullptr : (const float *)dscales.data, mode};
    }
};

/* Integer codes in [−vmax, vmax]; power-of-two scales (tensor: 2^e0; blocks: random 2^[−2, 2]). */
static void make_int_operand(operand &o, int rows, int K, gemm_dtype t, gemm_scale m, int vmax, int e0, struct rng *r) {
    o.rows = rows, o.K = K, o.type = t, o.mode = m;
    o.codes.resize((size_t)rows * K);
    for (auto &c : o.codes) c = fp8_from_float((float)(rng_int(r, 2 * vmax + 1) - vmax), fmt_of(t), FP8_SATFINITE);
    o.scales.assign((size_t)o.scale_count(), 0.0f);
    if (m == GEMM_SCALE_TENSOR)
        o.scales[0] = ldexpf(1.0f, e0);
    else
        for (auto &s : o.scales) s = ldexpf(1.0f, rng_int(r, 5) - 2);
    if (m == GEMM_SCALE_128X128) /* padding slots stay 0, as the quantization writes them */
        for (int rb = 0; rb < (rows + 127) / 128; rb++)
            for (int64_t k = (K + 127) / 128; k < fp8_block_scale_ld(FP8_BLOCK_128X128, rows, K); k++)
                o.scales[(size_t)(rb * fp8_block_scale_ld(FP8_BLOCK_128X128, rows, K) + k)] = 0.0f;
}

/* Normal values with a per-row magnitude, quantized as the recipes do (current scaling per tensor,
 * or block quantization). */
static void make_random_operand(operand &o, int rows, int K, gemm_dtype t, gemm_scale m, struct rng *r) {
    o.rows = rows, o.K = K, o.type = t, o.mode = m;
    std::vector<float> x((size_t)rows * K);
    for (int i = 0; i < rows; i++) {
        const double mag = exp(rng_range(r, -2, 2));
        for (int k = 0; k < K; k++) x[(size_t)i * K + k] = (float)(rng_normal(r) * mag);
    }
    o.codes.resize(x.size());
    o.scales.assign((size_t)o.scale_count(), 0.0f);
    if (m == GEMM_SCALE_TENSOR) {
        const float scale = fp8_current_scale(fp8_amax(x.data(), (int64_t)x.size()), fmt_of(t), 0.0f, 0);
        fp8_quantize(o.codes.data(), nullptr, x.data(), (int64_t)x.size(), scale, fmt_of(t));
        o.scales[0] = 1.0f / scale;
    } else {
        struct fp8_stats st = {0, 0, 0};
        fp8_block_quantize(o.codes.data(), o.scales.data(), nullptr, nullptr, &st, x.data(), rows, K, block_of(m),
                           fmt_of(t), 0.0f, 1);
    }
}

/* D (m, n) = op(A)·op(B)ᵀ through gpu_gemm_try; returns the status, D in d (as floats). */
struct product {
    gemm_out out = GEMM_OUT_F32;
    gemm_beta beta = GEMM_OVERWRITE;
    gemm_accum accum = GEMM_ACCUM_PRECISE;
    float alpha = 1.0f;
    std::vector<float> c, bias; /* old D (beta = 1), bias (bf16 values) */
    int want_amax = 0, null_scales = 0;
    float amax = NAN;
    char algo[128] = "";
};

static gemm_status run_product(product &pr, const operand &A, const operand &B, std::vector<float> &d) {
    const int m = A.rows, n = B.rows, k = A.K;
    const bool f32 = pr.out == GEMM_OUT_F32;
    const size_t esz = f32 ? 4 : 2;
    std::vector<unsigned char> img((size_t)m * n * esz);
    struct dev_buf bd, bb, ba;
    if (pr.beta == GEMM_ACCUMULATE) {
        for (size_t i = 0; i < (size_t)m * n; i++) {
            if (f32) memcpy(&img[i * 4], &pr.c[i], 4);
            else {
                const uint16_t h = bf16_from_float(pr.c[i]);
                memcpy(&img[i * 2], &h, 2);
            }
        }
        dev_buf_alloc(&bd, "D", img.size(), POISON_NONE, img.data());
    } else { /* poisoned: every element must be written */
        dev_buf_alloc(&bd, "D", img.size(), f32 ? POISON_F32 : POISON_BF16, nullptr);
    }
    std::vector<uint16_t> biasb;
    for (float v : pr.bias) biasb.push_back(bf16_from_float(v));
    dev_buf_alloc(&bb, "bias", biasb.size() * 2 + 16, POISON_NONE, nullptr);
    if (!biasb.empty()) CUDA_CHECK(cudaMemcpy(bb.data, biasb.data(), biasb.size() * 2, cudaMemcpyHostToDevice));
    const float zero = 0.0f;
    dev_buf_alloc(&ba, "amax_d", 16, POISON_NONE, nullptr);
    CUDA_CHECK(cudaMemcpy(ba.data, &zero, 4, cudaMemcpyHostToDevice));
    struct gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = bd.data, p.d_type = pr.out, p.ldd = n;
    p.a = A.dcodes.data, p.op_a = GEMM_NO_TRANS, p.lda = k;
    p.b = B.dcodes.data, p.op_b = GEMM_TRANS, p.ldb = k;
    p.bias = biasb.empty() ? nullptr : (const uint16_t *)bb.data;
    p.m = m, p.n = n, p.k = k, p.batch = 1, p.alpha = pr.alpha, p.beta = pr.beta;
    p.a_type = A.type, p.b_type = B.type, p.a_scale_mode = A.mode, p.b_scale_mode = B.mode, p.accum = pr.accum;
    p.a_scale = pr.null_scales ? nullptr : (const float *)A.dscales.data;
    p.b_scale = pr.null_scales ? nullptr : (const float *)B.dscales.data;
    p.amax_d = pr.want_amax ? (float *)ba.data : nullptr;
    const gemm_status st = gpu_gemm_try(g_gemm, &p, g_stream);
    if (st == GEMM_OK) {
        gpu_gemm_algo_name(g_gemm, &p, pr.algo, sizeof pr.algo);
        dev_buf_download(&bd, img.data(), pr.beta == GEMM_OVERWRITE);
        d.resize((size_t)m * n);
        for (size_t i = 0; i < d.size(); i++) {
            if (f32) memcpy(&d[i], &img[i * 4], 4);
            else {
                uint16_t h;
                memcpy(&h, &img[i * 2], 2);
                d[i] = bf16_to_float(h);
            }
        }
        if (pr.want_amax) CUDA_CHECK(cudaMemcpy(&pr.amax, ba.data, 4, cudaMemcpyDeviceToHost));
    }
    for (struct dev_buf *b : {&bd, &bb, &ba}) dev_buf_free(b);
    return st;
}

/* The exact result (ref_fp8_gemm_scaled, double, one rounding) with alpha, C and the bias. */
static std::vector<float> exact_product(const product &pr, const operand &A, const operand &B) {
    const int m = A.rows, n = B.rows;
    std::vector<float> acc((size_t)m * n), want((size_t)m * n);
    std::vector<float> one(1, 1.0f);
    ref_fp8_gemm_scaled(acc.data(), A.codes.data(), fmt_of(A.type), scaling_of(A.mode), pr.null_scales ? one.data() : A.scales.data(),
                        B.codes.data(), fmt_of(B.type), scaling_of(B.mode), pr.null_scales ? one.data() : B.scales.data(), m, n,
                        A.K, FP8_OUT_F32);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double v = (double)pr.alpha * acc[(size_t)i * n + j];
            if (pr.beta == GEMM_ACCUMULATE) v += pr.c[(size_t)i * n + j];
            if (!pr.bias.empty()) v += pr.bias[(size_t)j];
            want[(size_t)i * n + j] = pr.out == GEMM_OUT_F32 ? (float)v : bf16_round((float)v);
        }
    return want;
}

/* ---- (a) exact cases ---- */

struct exact_case {
    int m, n, k;
    gemm_dtype ta, tb;
    gemm_scale ma, mb;
    gemm_accum accum;
    gemm_out out;
    gemm_beta beta;
    int bias, amax, null_scales;
    float alpha;
};

static int g_block_runs = 0, g_block_refused = 0;

static void run_exact(const exact_case &c, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const bool small_out = c.out == GEMM_OUT_BF16 && (c.bias || c.beta == GEMM_ACCUMULATE || c.amax);
    const bool blocks = c.ma != GEMM_SCALE_TENSOR || c.mb != GEMM_SCALE_TENSOR;
    /* K·vmax² ≤ 2^10 (per 128-block under block scaling); values ≤ 256 where a bf16 epilogue adds */
    const int kk = blocks ? std::min(c.k, 128) : c.k;
    int vmax = (int)floor(sqrt(1024.0 / kk));
    vmax = std::max(1, std::min(8, small_out ? 1 : vmax));
    operand A, B;
    make_int_operand(A, c.m, c.k, c.ta, c.ma, vmax, -1, &r);
    make_int_operand(B, c.n, c.k, c.tb, c.mb, vmax, small_out ? 0 : 2, &r);
    A.upload("A"), B.upload("B");
    product pr;
    pr.out = c.out, pr.beta = c.beta, pr.accum = c.accum, pr.alpha = c.alpha, pr.want_amax = c.amax;
    pr.null_scales = c.null_scales;
    if (c.beta == GEMM_ACCUMULATE) {
        pr.c.resize((size_t)c.m * c.n);
        rng_fill_int(&r, pr.c.data(), (int64_t)pr.c.size(), small_out ? -64 : -1000, small_out ? 64 : 1000);
    }
    if (c.bias) {
        pr.bias.resize((size_t)c.n);
        rng_fill_int(&r, pr.bias.data(), c.n, -64, 64);
    }
    char shape[192];
    snprintf(shape, sizeof shape, "m=%d n=%d k=%d A=%s/%s B=%s/%s %s D=%s%s%s%s alpha=%g%s", c.m, c.n, c.k, tname(c.ta),
             sname(c.ma), tname(c.tb), sname(c.mb), c.accum == GEMM_ACCUM_FAST ? "fast" : "precise",
             c.out == GEMM_OUT_F32 ? "f32" : "bf16", c.bias ? " bias" : "", c.beta == GEMM_ACCUMULATE ? " accumulate" : "",
             c.amax ? " amax_d" : "", (double)c.alpha, c.null_scales ? " scales NULL" : "");
    std::vector<float> got;
    const gemm_status st = run_product(pr, A, B, got);
    if (blocks || c.amax) {
        if (st != GEMM_OK) {
            printf("  not run by cuBLASLt (%s): %s\n", st == GEMM_NO_ALGORITHM ? "no algorithm" : "refused", shape);
            g_block_refused += blocks;
            A.release(), B.release();
            return;
        }
        g_block_runs += blocks;
    }
    EXPECT(st == GEMM_OK, "gemm FP8 %s: cuBLASLt did not run a per-tensor FP8 product (status %d)", shape, (int)st);
    if (st == GEMM_OK) {
        const std::vector<float> want = exact_product(pr, A, B);
        struct cmp_case cc = {"gemm_fp8", "D (integer inputs, exact)", shape, c.out == GEMM_OUT_F32 ? "f32" : "bf16", seed};
        cmp_exact_f32(&cc, got.data(), want.data(), (int64_t)want.size());
        if (c.amax) { /* max|D| of the fp32 result before D's rounding: exact here */
            std::vector<float> acc = want;
            product pf = pr;
            pf.out = GEMM_OUT_F32;
            acc = exact_product(pf, A, B);
            float am = 0;
            for (float v : acc) am = fmaxf(am, fabsf(v));
            cc.what = "AMAX_D";
            cmp_exact_f32(&cc, &pr.amax, &am, 1);
        }
        if (id % 5 == 0) { /* determinism */
            std::vector<float> again;
            product p2 = pr;
            run_product(p2, A, B, again);
            cc.what = "D determinism";
            cmp_exact_bytes(&cc, again.data(), got.data(), got.size() * 4);
        }
    }
    A.release(), B.release();
}

/* The three typed linear products on integer inputs: each against the scaled reference GEMM of its
 * K-major operands (W_t, dy_t, x_t built here by transposition: fp8_parity covers the kernel that
 * writes them). */
static void run_linear_exact(int N, int C_in, int C_out, int id) {
    const uint64_t seed = g_seed * 1000003u + 700000u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d", N, C_in, C_out);
    const int kmax = std::max(std::max(C_in, C_out), N);
    const int vmax = std::max(1, std::min(8, (int)floor(sqrt(1024.0 / kmax))));
    operand x, w, dy;
    make_int_operand(x, N, C_in, GEMM_E4M3, GEMM_SCALE_TENSOR, vmax, -1, &r);
    make_int_operand(w, C_out, C_in, GEMM_E4M3, GEMM_SCALE_TENSOR, vmax, 1, &r);
    make_int_operand(dy, N, C_out, GEMM_E5M2, GEMM_SCALE_TENSOR, vmax, -2, &r);
    auto transpose = [](const operand &o) {
        operand t;
        t.rows = o.K, t.K = o.rows, t.type = o.type, t.mode = o.mode, t.scales = o.scales;
        t.codes.resize(o.codes.size());
        for (int i = 0; i < o.rows; i++)
            for (int k = 0; k < o.K; k++) t.codes[(size_t)k * o.rows + i] = o.codes[(size_t)i * o.K + k];
        return t;
    };
    operand w_t = transpose(w), dy_t = transpose(dy), x_t = transpose(x);
    for (operand *o : {&x, &w, &dy, &w_t, &dy_t, &x_t}) o->upload("operand");
    struct dev_buf by, bdx, bdw;
    dev_buf_alloc(&by, "y", (size_t)N * C_out * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdx, "dx", (size_t)N * C_in * 2, POISON_BF16, nullptr);
    std::vector<float> dw0((size_t)C_out * C_in);
    rng_fill_int(&r, dw0.data(), (int64_t)dw0.size(), -1000, 1000);
    dev_buf_alloc(&bdw, "dw", dw0.size() * 4, POISON_NONE, dw0.data());
    const struct gemm_fp8_operand ox = x.dev(), ow = w.dev(), ody = dy.dev(), owt = w_t.dev(), odyt = dy_t.dev(),
                                  oxt = x_t.dev();
    gpu_linear_forward_fp8(g_gemm, by.data, GEMM_OUT_BF16, &ox, &ow, nullptr, N, C_in, C_out, GEMM_ACCUM_FAST, g_stream);
    gpu_linear_backward_dx_fp8(g_gemm, bdx.data, GEMM_OUT_BF16, GEMM_OVERWRITE, &ody, &owt, N, C_in, C_out,
                               GEMM_ACCUM_PRECISE, g_stream);
    gpu_linear_backward_dw_fp8(g_gemm, bdw.data, GEMM_OUT_F32, GEMM_ACCUMULATE, &odyt, &oxt, N, C_in, C_out,
                               GEMM_ACCUM_PRECISE, g_stream);
    std::vector<uint16_t> yb((size_t)N * C_out), dxb((size_t)N * C_in);
    std::vector<float> dwg(dw0.size());
    dev_buf_download(&by, yb.data(), 1), dev_buf_download(&bdx, dxb.data(), 1), dev_buf_download(&bdw, dwg.data(), 0);
    product pr;
    pr.out = GEMM_OUT_BF16;
    std::vector<float> y_w = exact_product(pr, x, w), dx_w = exact_product(pr, dy, w_t);
    pr.out = GEMM_OUT_F32, pr.beta = GEMM_ACCUMULATE, pr.c = dw0;
    std::vector<float> dw_w = exact_product(pr, dy_t, x_t);
    std::vector<float> yg = floats_of(yb), dxg = floats_of(dxb);
    struct cmp_case cc = {"gpu_linear_forward_fp8", "y (E4M3 x E4M3, fast)", shape, "bf16", seed};
    cmp_exact_f32(&cc, yg.data(), y_w.data(), (int64_t)y_w.size());
    cc.op = "gpu_linear_backward_dx_fp8", cc.what = "dx (E5M2 dy x E4M3 W^T)";
    cmp_exact_f32(&cc, dxg.data(), dx_w.data(), (int64_t)dx_w.size());
    cc.op = "gpu_linear_backward_dw_fp8", cc.what = "dW += dy^T x (E5M2 x E4M3, fp32)", cc.dtype = "f32";
    cmp_exact_f32(&cc, dwg.data(), dw_w.data(), (int64_t)dw_w.size());
    for (operand *o : {&x, &w, &dy, &w_t, &dy_t, &x_t}) o->release();
    for (struct dev_buf *b : {&by, &bdx, &bdw}) dev_buf_free(b);
}

/* ---- preconditions: each must stop the program with CHECK's status 2 (in a child process) ---- */

/* Runs before the first CUDA call of the process (a child of a process that initialized CUDA may not
 * exit cleanly); the CHECK comes before the context is used, so none is needed. */
static void precondition(const char *what, void (*mutate)(gemm_args *)) {
    gemm_args p;
    memset(&p, 0, sizeof p);
    static __align__(16) unsigned char fake[1024]; /* never read: the CHECK comes first */
    p.d = fake, p.d_type = GEMM_OUT_BF16, p.ldd = 64;
    p.a = fake, p.op_a = GEMM_NO_TRANS, p.lda = 64;
    p.b = fake, p.op_b = GEMM_TRANS, p.ldb = 64;
    p.m = p.n = p.k = 64, p.batch = 1, p.alpha = 1.0f;
    p.a_type = p.b_type = GEMM_E4M3;
    mutate(&p);
    fflush(stdout), fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        gpu_gemm_try(nullptr, &p, nullptr);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 2,
           "gemm FP8 precondition '%s': expected a CHECK failure (exit status 2), got wait status %d", what, status);
}

static void mut_not_tn(gemm_args *p) { p->op_a = GEMM_TRANS; }
static void mut_dim16(gemm_args *p) { p->m = 24; }
static void mut_e5m2x2(gemm_args *p) { p->a_type = p->b_type = GEMM_E5M2; }
static void mut_scale_align(gemm_args *p) { p->a_scale = (const float *)((uintptr_t)p->a + 4); }
static void mut_bf16_fields(gemm_args *p) { p->a_type = p->b_type = GEMM_BF16, p->accum = GEMM_ACCUM_FAST; }
static void mut_block_null(gemm_args *p) { p->a_scale_mode = GEMM_SCALE_1X128; }

/* ---- (b) the accumulation measurement ---- */

struct acc_params {
    int p = 0;        /* fraction bits kept below the leading one before promotion */
    int interval = 0; /* products between promotions into fp32; 0 = never seen */
    int group = 0;    /* products aligned together; 0 = more than 128 */
    int bits[32];     /* bits(d) per distance */
    char rounding[96] = "";
    char algo[128] = "";
    int ran = 0;
};

static const int kDist[] = {1, 15, 16, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 1023, 1024, 2047, 2048, 4095};
static const int kNDist = (int)(sizeof kDist / sizeof kDist[0]);
static const int kGroupDist[] = {2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65, 128};
static const int kNGroup = (int)(sizeof kGroupDist / sizeof kGroupDist[0]);

/* a·b = 2^e (or 3·2^e) as two E4M3 codes; returns the pair. */
static void pow2_pair(int e, int three, uint8_t *a, uint8_t *b) {
    const int ea = (e >= 0) ? (e + 1) / 2 : e / 2, eb = e - ea;
    *a = fp8_from_float((three ? 3.0f : 1.0f) * ldexpf(1.0f, ea), FP8_E4M3, FP8_SATFINITE);
    *b = fp8_from_float(ldexpf(1.0f, eb), FP8_E4M3, FP8_SATFINITE);
}

enum acc_kind { ACC_PRECISE = 0, ACC_FAST = 1, ACC_BLOCK = 2 };
static const char *acc_name(acc_kind k) { return k == ACC_PRECISE ? "precise" : k == ACC_FAST ? "fast" : "block 1x128 x 128x128"; }

/* The probe's operands: one experiment per row pair (file comment, (b)); unit scales. */
static const int kProbeM = 2048, kProbeK = 4096;
static int g_probe_group_row, g_probe_round_row; /* first rows of the group and rounding experiments */

static void build_probe(operand &A, operand &B, acc_kind kind) {
    const int M = kProbeM, K = kProbeK;
    A.rows = B.rows = M, A.K = B.K = K, A.type = B.type = GEMM_E4M3;
    A.mode = kind == ACC_BLOCK ? GEMM_SCALE_1X128 : GEMM_SCALE_TENSOR;
    B.mode = kind == ACC_BLOCK ? GEMM_SCALE_128X128 : GEMM_SCALE_TENSOR;
    A.codes.assign((size_t)M * K, 0), B.codes.assign((size_t)M * K, 0);
    A.scales.assign((size_t)A.scale_count(), 1.0f), B.scales.assign((size_t)B.scale_count(), 1.0f);
    const uint8_t c256 = fp8_from_float(256.0f, FP8_E4M3, FP8_SATFINITE), cm256 = fp8_from_float(-256.0f, FP8_E4M3, FP8_SATFINITE);
    int e = 0;
    auto put = [&](int row, int k, uint8_t a, uint8_t b) { A.codes[(size_t)row * K + k] = a, B.codes[(size_t)row * K + k] = b; };
    for (int di = 0; di < kNDist; di++) /* bits(d): 2^16 at 0, 2^(16−g) at d */
        for (int g = 1; g <= 34; g++, e++) {
            uint8_t a, b;
            pow2_pair(16 - g, 0, &a, &b);
            put(e, 0, c256, c256), put(e, kDist[di], a, b);
        }
    g_probe_group_row = e;
    for (int gi = 0; gi < kNGroup; gi++, e++) { /* +2^16, −2^16, then 2^-14 at d */
        uint8_t a, b;
        pow2_pair(-14, 0, &a, &b);
        put(e, 0, c256, c256), put(e, 1, cm256, c256), put(e, kGroupDist[gi], a, b);
    }
    g_probe_round_row = e;
    for (int pp = 8; pp <= 23; pp++)
        for (int sg = 0; sg < 2; sg++, e++) { /* ±2^16, then 0.75·2^(16−p) */
            uint8_t a, b;
            pow2_pair(16 - pp - 2, 1, &a, &b);
            put(e, 0, sg ? cm256 : c256, c256), put(e, 1, a, b);
        }
    CHECK(e <= M, "probe: %d experiments", e);
}

/* Reads the measured parameters off the experiments' results diag[i] = D[i][i]. */
static acc_params interpret_probe(const std::vector<float> &diag) {
    acc_params ap;
    ap.ran = 1;
    int e = 0;
    for (int di = 0; di < kNDist; di++) {
        int b = 0;
        for (int g = 1; g <= 34; g++, e++) {
            const double exact = 65536.0 + ldexp(1.0, 16 - g);
            if (b == g - 1 && g <= 23 && (double)diag[(size_t)e] == exact) b = g;
        }
        ap.bits[di] = b;
    }
    for (int di = 0; di < kNDist && !ap.interval; di++)
        if (ap.bits[di] >= 23) ap.interval = kDist[di];
    ap.p = 23;
    for (int di = 0; di < kNDist; di++)
        if (!ap.interval || kDist[di] < ap.interval) ap.p = std::min(ap.p, ap.bits[di]);
    for (int gi = 0; gi < kNGroup && !ap.group; gi++)
        if (diag[(size_t)(g_probe_group_row + gi)] == ldexpf(1.0f, -14)) ap.group = kGroupDist[gi];
    if (ap.p >= 8 && ap.p <= 23) {
        const size_t i = (size_t)(g_probe_round_row + 2 * (ap.p - 8));
        const double u = ldexp(1.0, 16 - ap.p);
        snprintf(ap.rounding, sizeof ap.rounding, "2^16 + 0.75 ulp -> %+g ulp, -2^16 + 0.75 ulp -> %+g ulp",
                 (diag[i] - 65536.0) / u, (diag[i + 1] + 65536.0) / u);
    }
    return ap;
}

static acc_params measure_accumulation(acc_kind kind) {
    operand A, B;
    build_probe(A, B, kind);
    A.upload("probe A"), B.upload("probe B");
    product pr;
    pr.accum = kind == ACC_FAST ? GEMM_ACCUM_FAST : GEMM_ACCUM_PRECISE;
    std::vector<float> d;
    acc_params ap;
    if (run_product(pr, A, B, d) == GEMM_OK) {
        std::vector<float> diag((size_t)kProbeM);
        for (int i = 0; i < kProbeM; i++) diag[(size_t)i] = d[(size_t)i * kProbeM + i];
        ap = interpret_probe(diag);
        snprintf(ap.algo, sizeof ap.algo, "%s", pr.algo);
    }
    A.release(), B.release();
    return ap;
}

static void print_acc(acc_kind kind, const acc_params &ap) {
    if (!ap.ran) {
        printf("accumulation %-22s: not run by cuBLASLt\n", acc_name(kind));
        return;
    }
    printf("accumulation %-22s: p = %d bits, promotion every %s products, aligned group %s; %s [%s]\n", acc_name(kind),
           ap.p, ap.interval ? std::to_string(ap.interval).c_str() : "never (<= 4095)",
           ap.group ? std::to_string(ap.group).c_str() : "> 128", ap.rounding, ap.algo);
    if (g_probe) {
        printf("  bits(d) (small term at distance d from a 2^16 term; 23 = fp32):\n   ");
        for (int di = 0; di < kNDist; di++) printf(" d=%d:%d", kDist[di], ap.bits[di]);
        printf("\n");
    }
}

/* The model accumulator (file comment, (c)): Σ a_k·b_k with per-block scales sblk (nullptr: none). */
static double model_dot(const float *a, const float *b, int K, const acc_params &m, const double *sblk) {
    const int I = sblk ? 128 : (m.interval ? m.interval : 1 << 30), g = std::min(m.group ? m.group : 128, I);
    float facc = 0.0f;
    double acc = 0.0;
    for (int k0 = 0; k0 < K; k0 += g) {
        const int k1 = std::min(K, k0 + g);
        double big = fabs(acc);
        for (int k = k0; k < k1; k++) big = fmax(big, fabs((double)a[k] * b[k]));
        if (big > 0) {
            int ex;
            frexp(big, &ex); /* big = f·2^ex, f in [0.5, 1): leading exponent ex − 1 */
            const double q = ldexp(1.0, ex - 1 - m.p);
            double s = trunc(acc / q) * q;
            for (int k = k0; k < k1; k++) s += trunc((double)a[k] * b[k] / q) * q;
            acc = s;
        }
        if (k1 % I == 0 || k1 == K) {
            const double scaled = sblk ? (double)(float)(acc * sblk[(k1 - 1) / 128]) : acc;
            facc = (float)((double)facc + scaled);
            acc = 0.0;
        }
    }
    return facc;
}

/* Error of sampled outputs: exact (double), model, GPU. */
struct sample_eval {
    std::vector<float> got, model, exact;
    double s_max = 0; /* max Σ|σa·σb·a·b| */
};

static void evaluate_samples(sample_eval &ev, const std::vector<float> &d, const operand &A, const operand &B,
                             const acc_params &mp, gemm_out out, int n_samples, struct rng *r) {
    const int K = A.K, N = B.rows;
    std::vector<float> a((size_t)K), b((size_t)K);
    const bool blocks = A.mode != GEMM_SCALE_TENSOR || B.mode != GEMM_SCALE_TENSOR;
    std::vector<double> sblk((size_t)(K + 127) / 128);
    for (int s = 0; s < n_samples; s++) {
        const int i = rng_int(r, A.rows), j = rng_int(r, N);
        double exact = 0, sabs = 0;
        for (int k = 0; k < K; k++) {
            a[(size_t)k] = fp8_to_float(A.codes[(size_t)i * K + k], fmt_of(A.type));
            b[(size_t)k] = fp8_to_float(B.codes[(size_t)j * K + k], fmt_of(B.type));
            const double sc = A.sigma(i, k) * B.sigma(j, k);
            exact += (double)a[(size_t)k] * b[(size_t)k] * sc;
            sabs += fabs((double)a[(size_t)k] * b[(size_t)k] * sc);
        }
        for (size_t kb = 0; kb < sblk.size(); kb++) sblk[kb] = (float)(A.sigma(i, (int)kb * 128) * B.sigma(j, (int)kb * 128));
        double model = model_dot(a.data(), b.data(), K, mp, blocks ? sblk.data() : nullptr);
        if (!blocks) model = (double)((float)model * (float)(A.sigma(i, 0) * B.sigma(j, 0)));
        ev.exact.push_back((float)exact);
        ev.model.push_back(out == GEMM_OUT_BF16 ? bf16_round((float)model) : (float)model);
        ev.got.push_back(d[(size_t)i * N + j]);
        ev.s_max = fmax(ev.s_max, sabs);
    }
}

/* ---- (c) random cases ---- */

static acc_params g_acc[3];

static void run_random(int m, int n, int k, gemm_dtype ta, gemm_dtype tb, gemm_scale ma, gemm_scale mb, gemm_accum accum,
                       gemm_out out, int id) {
    const uint64_t seed = g_seed * 1000003u + 900000u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const bool blocks = ma != GEMM_SCALE_TENSOR || mb != GEMM_SCALE_TENSOR;
    const acc_params &mp = g_acc[blocks ? ACC_BLOCK : accum == GEMM_ACCUM_FAST ? ACC_FAST : ACC_PRECISE];
    char shape[160];
    snprintf(shape, sizeof shape, "m=%d n=%d k=%d A=%s/%s B=%s/%s %s D=%s", m, n, k, tname(ta), sname(ma), tname(tb),
             sname(mb), accum == GEMM_ACCUM_FAST ? "fast" : "precise", out == GEMM_OUT_F32 ? "f32" : "bf16");
    operand A, B;
    make_random_operand(A, m, k, ta, ma, &r);
    make_random_operand(B, n, k, tb, mb, &r);
    A.upload("A"), B.upload("B");
    product pr;
    pr.out = out, pr.accum = accum;
    std::vector<float> d;
    const gemm_status st = run_product(pr, A, B, d);
    if (st != GEMM_OK || !mp.ran) {
        EXPECT(blocks, "gemm FP8 random %s: cuBLASLt did not run a per-tensor product", shape);
        printf("  random %s: not run by cuBLASLt\n", shape);
        A.release(), B.release();
        return;
    }
    sample_eval ev;
    evaluate_samples(ev, d, A, B, mp, out, 2048, &r);
    const double floor_ = (k / 128.0 + 4.0) * FLT_EPSILON * ev.s_max;
    struct cmp_case cc = {"gemm_fp8", "D (random, vs the measured accumulator model)", shape, out == GEMM_OUT_F32 ? "f32" : "bf16", seed};
    struct cmp_stats stt;
    cmp_vs_naive(&cc, ev.got.data(), ev.model.data(), ev.exact.data(), (int64_t)ev.got.size(), 2.0, floor_, &stt);
    printf("  random %s: max|err| %.3g (%.2e of max S), rms %.3g; model (p=%d, I=%d, g=%d) [%s]\n", shape,
           stt.max_abs_err, stt.max_abs_err / ev.s_max, stt.rms_err, mp.p, mp.interval, mp.group, pr.algo);
    A.release(), B.release();
}

/* --probe: error growth with K on random inputs, GPU against the model. */
static void probe_k_sweep(void) {
    printf("\nerror growth with K (random signed inputs, per-tensor E4M3 x E4M3, 1024x1024xK, 2048 samples;\n"
           "err normalized by S = sum |a b| of the element):\n");
    printf("  %-8s %-8s %-12s %-12s %-12s %-12s %s\n", "K", "accum", "gpu max", "gpu rms", "model max", "model rms", "algo");
    const int Ks[] = {256, 1024, 4096, 16384};
    for (int K : Ks) {
        struct rng r;
        rng_init(&r, g_seed + (uint64_t)K);
        operand A, B;
        make_random_operand(A, 1024, K, GEMM_E4M3, GEMM_SCALE_TENSOR, &r);
        make_random_operand(B, 1024, K, GEMM_E4M3, GEMM_SCALE_TENSOR, &r);
        A.upload("A"), B.upload("B");
        for (int f = 0; f < 2; f++) {
            product pr;
            pr.accum = f ? GEMM_ACCUM_FAST : GEMM_ACCUM_PRECISE;
            std::vector<float> d;
            if (run_product(pr, A, B, d) != GEMM_OK) continue;
            sample_eval ev;
            evaluate_samples(ev, d, A, B, g_acc[f ? ACC_FAST : ACC_PRECISE], GEMM_OUT_F32, 2048, &r);
            double gm = 0, gr = 0, mm = 0, mr = 0;
            for (size_t i = 0; i < ev.got.size(); i++) {
                const double eg = fabs((double)ev.got[i] - ev.exact[i]), em = fabs((double)ev.model[i] - ev.exact[i]);
                gm = fmax(gm, eg), mm = fmax(mm, em), gr += eg * eg, mr += em * em;
            }
            const double nrm = ev.s_max > 0 ? ev.s_max : 1;
            printf("  %-8d %-8s %-12.3e %-12.3e %-12.3e %-12.3e %s\n", K, f ? "fast" : "precise", gm / nrm,
                   sqrt(gr / ev.got.size()) / nrm, mm / nrm, sqrt(mr / ev.got.size()) / nrm, pr.algo);
        }
        A.release(), B.release();
    }
}

/* Scale layouts a block mode might read instead of the documented one (h = 0): 1×128 h = 1:
 * row-major (rows, K/128); 128×128 h = 1: block-column-major without padding, h = 2: row-major
 * without padding. Returns o's scales rewritten in layout h. */
static const char *layout_name(gemm_scale m, int h) {
    if (h == 0) return "documented";
    return m == GEMM_SCALE_1X128 ? "row-major (rows, K/128)" : h == 1 ? "column-major, unpadded" : "row-major, unpadded";
}

static std::vector<float> relayout(const operand &o, int h) {
    if (h == 0 || o.mode == GEMM_SCALE_TENSOR) return o.scales;
    const int nkb = (o.K + 127) / 128, nrb = (o.rows + 127) / 128;
    std::vector<float> out(o.scales.size(), 0.0f);
    if (o.mode == GEMM_SCALE_1X128) {
        for (int r = 0; r < o.rows; r++)
            for (int kb = 0; kb < nkb; kb++) out[(size_t)r * nkb + kb] = (float)o.sigma(r, kb * 128);
    } else {
        for (int rb = 0; rb < nrb; rb++)
            for (int kb = 0; kb < nkb; kb++)
                out[h == 1 ? (size_t)kb * nrb + rb : (size_t)rb * nkb + kb] = (float)o.sigma(rb * 128, kb * 128);
    }
    return out;
}

/* --probe: which block scale combinations run, and which scale layout a running one reads. */
static void probe_block_modes(void) {
    printf("\nblock scale modes (m=128 n=256 k=512, integer inputs, power-of-two block scales):\n");
    const gemm_scale modes[3] = {GEMM_SCALE_TENSOR, GEMM_SCALE_1X128, GEMM_SCALE_128X128};
    for (int ta = 0; ta < 2; ta++)
        for (int ma = 0; ma < 3; ma++)
            for (int mb = 0; mb < 3; mb++)
                for (int f = 0; f < 2; f++) {
                    if (ma == 0 && mb == 0) continue;
                    struct rng r;
                    rng_init(&r, g_seed + 77);
                    operand A, B;
                    const gemm_dtype at = ta ? GEMM_E5M2 : GEMM_E4M3;
                    make_int_operand(A, 128, 512, at, modes[ma], 2, -1, &r);
                    make_int_operand(B, 256, 512, GEMM_E4M3, modes[mb], 2, 1, &r);
                    A.upload("A"), B.upload("B");
                    product pr;
                    pr.accum = f ? GEMM_ACCUM_FAST : GEMM_ACCUM_PRECISE;
                    std::vector<float> d;
                    const gemm_status st = run_product(pr, A, B, d);
                    const char *verdict = st == GEMM_NO_ALGORITHM ? "no algorithm" : st == GEMM_REFUSED ? "refused" : "runs";
                    char detail[160] = "";
                    if (st == GEMM_OK) {
                        const std::vector<float> want = exact_product(pr, A, B);
                        int64_t bad = 0;
                        for (size_t i = 0; i < want.size(); i++) bad += memcmp(&want[i], &d[i], 4) != 0;
                        snprintf(detail, sizeof detail, "%s with the documented layouts (%lld of %zu differ) [%s]",
                                 bad ? "WRONG" : "exact", (long long)bad, want.size(), pr.algo);
                        const int nha = modes[ma] == GEMM_SCALE_TENSOR ? 1 : modes[ma] == GEMM_SCALE_1X128 ? 2 : 3;
                        const int nhb = modes[mb] == GEMM_SCALE_TENSOR ? 1 : modes[mb] == GEMM_SCALE_1X128 ? 2 : 3;
                        for (int ha = 0; bad && ha < nha; ha++)
                            for (int hb = 0; bad && hb < nhb; hb++) {
                                if (ha == 0 && hb == 0) continue;
                                const std::vector<float> sa = relayout(A, ha), sb = relayout(B, hb);
                                CUDA_CHECK(cudaMemcpy(A.dscales.data, sa.data(), sa.size() * 4, cudaMemcpyHostToDevice));
                                CUDA_CHECK(cudaMemcpy(B.dscales.data, sb.data(), sb.size() * 4, cudaMemcpyHostToDevice));
                                std::vector<float> d2;
                                if (run_product(pr, A, B, d2) != GEMM_OK) continue;
                                int64_t bad2 = 0;
                                for (size_t i = 0; i < want.size(); i++) bad2 += memcmp(&want[i], &d2[i], 4) != 0;
                                if (bad2 == 0) {
                                    printf("    it reads A's scales %s and B's %s\n", layout_name(modes[ma], ha),
                                           layout_name(modes[mb], hb));
                                    bad = 0;
                                }
                            }
                    }
                    printf("  A %s %-7s x B E4M3 %-7s %-7s: %s %s\n", tname(at), sname(modes[ma]), sname(modes[mb]),
                           f ? "fast" : "precise", verdict, detail);
                    A.release(), B.release();
                }
}

/* ---- (d) bench ---- */

__global__ void fill_codes(uint8_t *p, int64_t n, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 2654435761u ^ seed;
        z ^= z >> 15, z *= 0x2C1B3C6Du, z ^= z >> 12;
        p[i] = (uint8_t)(0x20 + (z >> 8) % 0x30) | (uint8_t)((z >> 4) & 0x80); /* finite, moderate, either sign */
    }
}

__global__ void fill_bf16(uint16_t *p, int64_t n, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 2654435761u ^ seed;
        z ^= z >> 15, z *= 0x2C1B3C6Du, z ^= z >> 12;
        p[i] = (uint16_t)(0x3C00u + (z >> 8) % 0x200u) | (uint16_t)((z >> 4) & 0x8000u); /* ±[0.0078, 0.03) */
    }
}

__global__ void fill_f32(float *p, int64_t n, float v) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}

static void time_call(void *ctx, cudaStream_t s) { gpu_gemm(g_gemm, (const gemm_args *)ctx, s); }

static double time_product(const char *op, const char *shape, const gemm_args &p, double ceiling) {
    const double flops = 2.0 * p.m * (double)p.n * p.k;
    struct bench_result r = bench_time(time_call, (void *)&p, g_stream, 3, 11, flops > 2e11 ? 2 : 5);
    bench_json(op, shape, 0, flops, r, ceiling);
    return r.median_ms;
}

static void bench(void) {
    const int64_t big = (int64_t)8192 * 28672; /* the 8B gate_up dy: the largest operand */
    uint16_t *a16, *b16;
    uint8_t *a8, *b8;
    float *d, *sa, *sb;
    CUDA_CHECK(cudaMalloc(&a16, big * 2));
    CUDA_CHECK(cudaMalloc(&b16, big * 2));
    CUDA_CHECK(cudaMalloc(&a8, big));
    CUDA_CHECK(cudaMalloc(&b8, big));
    CUDA_CHECK(cudaMalloc(&d, big * 4));
    CUDA_CHECK(cudaMalloc(&sa, big / 128 * 4 + 4096));
    CUDA_CHECK(cudaMalloc(&sb, big / 128 * 4 + 4096));
    fill_bf16<<<1024, 256, 0, g_stream>>>(a16, big, 1u);
    fill_bf16<<<1024, 256, 0, g_stream>>>(b16, big, 2u);
    fill_codes<<<1024, 256, 0, g_stream>>>(a8, big, 3u);
    fill_codes<<<1024, 256, 0, g_stream>>>(b8, big, 4u);
    fill_f32<<<1024, 256, 0, g_stream>>>(sa, big / 128 + 1024, 1.0f / 64);
    fill_f32<<<1024, 256, 0, g_stream>>>(sb, big / 128 + 1024, 1.0f / 64);
    KERNEL_CHECK(g_stream);
    CUDA_CHECK(cudaStreamSynchronize(g_stream));

    /* ceilings: 8192³ bf16 (TN) and FP8 per-tensor fast */
    const int S = 8192;
    auto fp8_args = [&](int m, int n, int k, gemm_dtype ta, gemm_dtype tb, gemm_scale ma, gemm_scale mb, gemm_accum acc,
                        gemm_out out) {
        gemm_args p;
        memset(&p, 0, sizeof p);
        p.d = d, p.d_type = out, p.ldd = n, p.a = a8, p.op_a = GEMM_NO_TRANS, p.lda = k, p.b = b8, p.op_b = GEMM_TRANS;
        p.ldb = k, p.m = m, p.n = n, p.k = k, p.batch = 1, p.alpha = 1.0f;
        p.a_type = ta, p.b_type = tb, p.a_scale = sa, p.b_scale = sb, p.a_scale_mode = ma, p.b_scale_mode = mb, p.accum = acc;
        return p;
    };
    gemm_args p16;
    memset(&p16, 0, sizeof p16);
    p16.d = d, p16.d_type = GEMM_OUT_BF16, p16.ldd = S, p16.a = a16, p16.op_a = GEMM_NO_TRANS, p16.lda = S;
    p16.b = b16, p16.op_b = GEMM_TRANS, p16.ldb = S, p16.m = p16.n = p16.k = S, p16.batch = 1, p16.alpha = 1.0f;
    const double bf16_tf = 2.0 * S * (double)S * S / (time_product("gemm_bf16", "8192^3 TN", p16, 0) * 1e-3) / 1e12;
    gemm_args pf = fp8_args(S, S, S, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_TENSOR, GEMM_SCALE_TENSOR, GEMM_ACCUM_FAST, GEMM_OUT_BF16);
    const double fp8_tf = 2.0 * S * (double)S * S / (time_product("gemm_fp8_fast", "8192^3 E4M3", pf, 0) * 1e-3) / 1e12;
    pf.accum = GEMM_ACCUM_PRECISE;
    time_product("gemm_fp8_precise", "8192^3 E4M3", pf, fp8_tf);
    pf.a_scale_mode = GEMM_SCALE_1X128, pf.b_scale_mode = GEMM_SCALE_128X128;
    char an[128];
    gpu_gemm_algo_name(g_gemm, &pf, an, sizeof an);
    const bool block_ok = strcmp(an, "none") != 0 && gpu_gemm_try(g_gemm, &pf, g_stream) == GEMM_OK;
    if (block_ok) time_product("gemm_fp8_block", "8192^3 E4M3 1x128 x 128x128", pf, fp8_tf);
    else printf("{\"op\":\"gemm_fp8_block\",\"shape\":\"8192^3\",\"status\":\"not run by cuBLASLt\"}\n");

    struct model {
        const char *name;
        int C, qkv, F;
    } models[] = {{"llama-3.2-1b", 2048, 3072, 8192}, {"llama-3.1-8b", 4096, 6144, 14336}};
    const int N = 8192;
    for (const model &md : models) {
        struct lin {
            const char *name;
            int C_in, C_out;
        } lins[] = {{"qkv", md.C, md.qkv}, {"o", md.C, md.C}, {"gate_up", md.C, 2 * md.F}, {"down", md.F, md.C}};
        double t16 = 0, t_prec = 0, t_te = 0, t_blk = 0;
        bool blk_all = block_ok;
        for (const lin &l : lins) {
            char shape[128];
            snprintf(shape, sizeof shape, "%s %s N=%d C_in=%d C_out=%d", md.name, l.name, N, l.C_in, l.C_out);
            /* the bf16 trainer's products (gpu/gemm.h): forward TN, dx NN, dW TN into fp32 (accumulate) */
            gemm_args b = p16;
            b.d_type = GEMM_OUT_BF16, b.ldd = l.C_out, b.op_a = GEMM_NO_TRANS, b.lda = l.C_in, b.op_b = GEMM_TRANS;
            b.ldb = l.C_in, b.m = N, b.n = l.C_out, b.k = l.C_in, b.beta = GEMM_OVERWRITE;
            t16 += time_product("linear_forward_bf16", shape, b, bf16_tf);
            b.ldd = l.C_in, b.lda = l.C_out, b.op_b = GEMM_NO_TRANS, b.ldb = l.C_in, b.n = l.C_in, b.k = l.C_out;
            t16 += time_product("linear_backward_dx_bf16", shape, b, bf16_tf);
            b.d_type = GEMM_OUT_F32, b.ldd = l.C_in, b.op_a = GEMM_TRANS, b.lda = l.C_out, b.op_b = GEMM_NO_TRANS;
            b.ldb = l.C_in, b.m = l.C_out, b.n = l.C_in, b.k = N, b.beta = GEMM_ACCUMULATE;
            t16 += time_product("linear_backward_dw_bf16", shape, b, bf16_tf);
            /* FP8, HYBRID formats, per-tensor: precise everywhere, and TE's default (fast forward) */
            gemm_args f = fp8_args(N, l.C_out, l.C_in, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_TENSOR, GEMM_SCALE_TENSOR,
                                   GEMM_ACCUM_PRECISE, GEMM_OUT_BF16);
            const double fwd_p = time_product("linear_forward_fp8_precise", shape, f, fp8_tf);
            f.accum = GEMM_ACCUM_FAST;
            const double fwd_f = time_product("linear_forward_fp8_fast", shape, f, fp8_tf);
            gemm_args dx = fp8_args(N, l.C_in, l.C_out, GEMM_E5M2, GEMM_E4M3, GEMM_SCALE_TENSOR, GEMM_SCALE_TENSOR,
                                    GEMM_ACCUM_PRECISE, GEMM_OUT_BF16);
            const double dx_p = time_product("linear_backward_dx_fp8_precise", shape, dx, fp8_tf);
            gemm_args dw = fp8_args(l.C_out, l.C_in, N, GEMM_E5M2, GEMM_E4M3, GEMM_SCALE_TENSOR, GEMM_SCALE_TENSOR,
                                    GEMM_ACCUM_PRECISE, GEMM_OUT_F32);
            dw.beta = GEMM_ACCUMULATE;
            const double dw_p = time_product("linear_backward_dw_fp8_precise", shape, dw, fp8_tf);
            t_prec += fwd_p + dx_p + dw_p, t_te += fwd_f + dx_p + dw_p;
            /* block scaling (E4M3 everywhere, as TE's Float8BlockScaling and DeepSeek-V3) */
            if (blk_all) {
                gemm_args bf = fp8_args(N, l.C_out, l.C_in, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_1X128, GEMM_SCALE_128X128,
                                        GEMM_ACCUM_PRECISE, GEMM_OUT_BF16);
                gemm_args bdx = fp8_args(N, l.C_in, l.C_out, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_1X128, GEMM_SCALE_128X128,
                                         GEMM_ACCUM_PRECISE, GEMM_OUT_BF16);
                gemm_args bdw = fp8_args(l.C_out, l.C_in, N, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_1X128, GEMM_SCALE_1X128,
                                         GEMM_ACCUM_PRECISE, GEMM_OUT_F32);
                bdw.beta = GEMM_ACCUMULATE;
                for (gemm_args *q : {&bf, &bdx, &bdw})
                    if (gpu_gemm_try(g_gemm, q, g_stream) != GEMM_OK) blk_all = false;
                if (blk_all) {
                    t_blk += time_product("linear_forward_fp8_block", shape, bf, fp8_tf);
                    t_blk += time_product("linear_backward_dx_fp8_block", shape, bdx, fp8_tf);
                    t_blk += time_product("linear_backward_dw_fp8_block", shape, bdw, fp8_tf);
                }
            }
        }
        printf("{\"op\":\"gemm_fp8_summary\",\"model\":\"%s\",\"device\":\"%s\",\"linears_ms_bf16\":%.3f,"
               "\"linears_ms_fp8_precise\":%.3f,\"linears_ms_fp8_te_default\":%.3f,\"linears_ms_fp8_block\":%s,"
               "\"speedup_precise\":%.3f,\"speedup_te_default\":%.3f}\n",
               md.name, parity_device_name(), t16, t_prec, t_te, blk_all ? std::to_string(t_blk).c_str() : "null",
               t16 / t_prec, t16 / t_te);
    }
    printf("{\"op\":\"gemm_fp8_ceilings\",\"device\":\"%s\",\"bf16_8192_TFLOPs\":%.1f,\"fp8_fast_8192_TFLOPs\":%.1f}\n",
           parity_device_name(), bf16_tf, fp8_tf);
    for (void *p : {(void *)a16, (void *)b16, (void *)a8, (void *)b8, (void *)d, (void *)sa, (void *)sb}) CUDA_CHECK(cudaFree(p));
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261202);
    g_probe = test_has_flag(argc, argv, "--probe");
    /* preconditions: each must stop the program (CHECK) before any CUDA call */
    precondition("A transposed (not TN)", mut_not_tn);
    precondition("m not a multiple of 16", mut_dim16);
    precondition("E5M2 x E5M2", mut_e5m2x2);
    precondition("scale pointer 4-byte aligned", mut_scale_align);
    precondition("fast accumulation on a bf16 product", mut_bf16_fields);
    precondition("block scale mode without its scales", mut_block_null);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    g_gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);

    /* (b) first: the exact cases rely on p ≥ 10, the random ones on the whole measurement. */
    for (int k = 0; k < 3; k++) {
        g_acc[k] = measure_accumulation((acc_kind)k);
        print_acc((acc_kind)k, g_acc[k]);
    }
    EXPECT(g_acc[ACC_PRECISE].ran && g_acc[ACC_FAST].ran, "per-tensor FP8 GEMMs must run on this GPU");
    for (int k = 0; k < 3; k++)
        EXPECT(!g_acc[k].ran || g_acc[k].p >= 10,
               "accumulation %s keeps %d bits: fewer than the 10 the exact cases (and any FP8 training) assume",
               acc_name((acc_kind)k), g_acc[k].p);

    /* (a) exact cases */
    const gemm_dtype E4 = GEMM_E4M3, E5 = GEMM_E5M2;
    const gemm_scale T = GEMM_SCALE_TENSOR, V = GEMM_SCALE_1X128, B = GEMM_SCALE_128X128;
    const gemm_accum P = GEMM_ACCUM_PRECISE, F = GEMM_ACCUM_FAST;
    const gemm_out O16 = GEMM_OUT_BF16, O32 = GEMM_OUT_F32;
    const gemm_beta OW = GEMM_OVERWRITE, AC = GEMM_ACCUMULATE;
    const int shapes[][3] = {{16, 16, 16}, {32, 48, 64}, {144, 272, 400}, {256, 128, 1024}, {64, 2048, 512}, {272, 96, 16}};
    const gemm_dtype types[][2] = {{E4, E4}, {E5, E4}, {E4, E5}};
    int id = 0;
    for (const auto &s : shapes)
        for (const auto &t : types)
            for (int acc = 0; acc < 2; acc++)
                for (int o = 0; o < 2; o++) {
                    const exact_case c = {s[0], s[1], s[2], t[0], t[1], T, T, acc ? F : P, o ? O32 : O16, OW, 0, 0, 0, 1.0f};
                    run_exact(c, id++);
                }
    const exact_case special[] = {
        {144, 272, 400, E4, E4, T, T, P, O32, OW, 0, 0, 1, 1.0f},  /* scales NULL */
        {144, 272, 400, E5, E4, T, T, F, O32, OW, 0, 0, 0, 2.0f},  /* alpha */
        {144, 272, 64, E4, E4, T, T, P, O32, AC, 0, 0, 0, 1.0f},   /* beta = 1, fp32 */
        {144, 272, 64, E5, E4, T, T, P, O16, AC, 0, 0, 0, 1.0f},   /* beta = 1, bf16 */
        {144, 272, 64, E4, E4, T, T, F, O16, OW, 1, 0, 0, 1.0f},   /* bias */
        {128, 256, 256, E4, E4, T, T, P, O32, OW, 0, 1, 0, 1.0f},  /* AMAX_D, fp32 D */
        {128, 256, 256, E4, E4, T, T, F, O16, OW, 0, 1, 0, 1.0f},  /* AMAX_D, bf16 D */
    };
    for (const exact_case &c : special) run_exact(c, id++);
    /* block scale modes: every combination, K a multiple of 128 and not (SmolLM2's 576) */
    const gemm_scale modes[3] = {T, V, B};
    for (int ma = 0; ma < 3; ma++)
        for (int mb = 0; mb < 3; mb++) {
            if (ma == 0 && mb == 0) continue;
            run_exact({256, 384, 512, E4, E4, modes[ma], modes[mb], P, O32, OW, 0, 0, 0, 1.0f}, id++);
            run_exact({128, 256, 576, E4, E4, modes[ma], modes[mb], P, O16, OW, 0, 0, 0, 1.0f}, id++);
        }
    run_exact({256, 384, 512, E5, E4, V, B, P, O16, OW, 0, 0, 0, 1.0f}, id++); /* dgrad-style E5M2 */
    run_exact({256, 384, 512, E4, E4, V, B, F, O32, OW, 0, 0, 0, 1.0f}, id++); /* fast accumulation */
    /* the typed linear products */
    const int lin[][3] = {{64, 256, 384}, {32, 1024, 512}, {128, 576, 960}, {16, 512, 1024}}; /* K ≤ 1024 */
    id = 0;
    for (const auto &l : lin) run_linear_exact(l[0], l[1], l[2], id++);

    /* (c) random cases, tolerance from the measurement */
    id = 0;
    run_random(1024, 1024, 1024, E4, E4, T, T, P, O32, id++);
    run_random(1024, 1024, 1024, E4, E4, T, T, F, O32, id++);
    run_random(1024, 1024, 4096, E4, E4, T, T, F, O32, id++);
    run_random(1024, 1024, 4096, E5, E4, T, T, P, O32, id++);
    run_random(1024, 1024, 4096, E4, E5, T, T, P, O16, id++);
    run_random(1024, 2048, 8192, E5, E4, T, T, P, O32, id++); /* a dW-like long K */
    run_random(1024, 1024, 4096, E4, E4, V, B, P, O32, id++);
    run_random(1024, 1024, 4096, E4, E4, B, V, P, O16, id++);
    run_random(1024, 1024, 4096, E4, E4, V, V, P, O32, id++);
    run_random(1024, 1024, 4096, E5, E4, V, B, P, O32, id++);

    if (g_probe) {
        probe_k_sweep();
        probe_block_modes();
    }
    printf("block-scaled exact cases: %d ran, %d not run by cuBLASLt on this GPU/library\n", g_block_runs, g_block_refused);
    const int rc = test_finish("gemm_fp8_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench();
    free_gpu_gemm(g_gemm);
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
