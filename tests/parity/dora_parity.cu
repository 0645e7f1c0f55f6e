/* dora_parity.cu — gpu/dora (factored row norm, fused magnitude scaling, backward) against ref/dora.h.
 *
 *   bazel test --config=gpu //tests/parity:dora_parity
 *   dora_parity [--seed=N] [--bench]
 *
 * What is covered, per shape (tile edges 1, 7, 8, 33, 65, 127, 129, 255, 257; SmolLM2-135M C 576,
 * F 1536; Llama-3.2-1B C 2048, KV 512, F 8192; R ∈ {4, 6, 7, 8, 16, 24, 32, 40, 64, 128}; rows kept
 * to a few — the reference's dx loop walks W by columns — the bench runs N = 8192):
 *  - w_sq against ref_dora_weight_sq, the GPU row norm against ref_dora_weight_norm_factored; both
 *    again from W's rows at a padded stride with NaN past C_in (a folded group member's weight);
 *  - without bias, the magnitude folded into the padded weight [W | bf16(s·B)]: the scaled rows bit
 *    for bit bf16(w·mns), nothing past K written, and y = [x | u] w_sᵀ against ref_dora_forward
 *    (tiers as the forward's; its naive: the sequential fp32 product of the same bf16 operands);
 *  - the forward chained on the GPU's own outputs as in training: y0 = the base output x Wᵀ + b
 *    (ref_linear_forward_naive, ACT_BF16), then u, y and the saved z against ref_dora_forward;
 *  - the backward from the forward's u and z: dx (the base path dy W plus the adapter's share,
 *    composed in the reference as ref_linear_backward_naive (ACT_F32) then ref_dora_backward),
 *    dmag, dlora_a, dlora_b accumulated onto old values.
 * The overwritten outputs (u, z, dx) are poisoned and must be written entirely, every buffer has
 * guard regions, and the whole sequence is run twice and must give the same bits.
 *
 * Tolerances (derived; STYLE.md tiers):
 *  (a) exact — sparse ±1 inputs (density 1/4, and ≤ 64/C for the factors reduced over C so that
 *      every sum keeps a few dozen terms), s = 1, per-row mns = m/n ∈ {0.5, 1, 2} (m is set to
 *      n·2^k; fp32 division of n·2^k by n is exact). Every fp32 and double sum is then exact in
 *      any order, n² is the same exact double on both sides (one correctly rounded sqrt each), and
 *      the GPU's extra bf16 roundings (z, dy_s, du, the base dx before the adapter's share) fall
 *      on values that are exactly representable — the test checks that precondition on the
 *      reference's own values, and that the base output y0 was not rounded — so
 *      w_sq, n, u, y, z, dx, dm, dA, dB must agree bit for bit.
 *  (b) w_sq on normal inputs: both sides sum exact bf16 squares in double (orders differ by
 *      ≤ C·2⁻⁵³ relative) and round once to fp32: k = 1, eps = FLT_EPSILON.
 *  (c) vs naive — normal inputs, s = α/√R (not a power of two), mns = 1 + 0.1·normal: each output's
 *      error against the double-sum reference is at most 2× that of a naive same-precision
 *      implementation of the GPU's algorithm (sequential fp32 sums, the same bf16 roundings), plus
 *      one rounding of the result at the reference's rms (BF16_EPS or FLT_EPSILON times it).
 *  determinism — bitwise, the same inputs twice.
 * Without bias, the path that keeps no z (DORA_SAVED_Y): the forward with z = NULL gives the same
 * y bits; the rescale from y against ref_dora_rescale on the same y (dy_s exact; dm to one fp32
 * rounding: double sums of exact products in other orders) and against the true gradient
 * (ref_dora_backward's dm, tiers (a) and (c): in the exact tier y = mns·z exactly, so bit for bit).
 * And the MLP's fused SwiGLU backward + gate/up rescale against the two passes it replaces, bit for
 * bit (outputs and accumulated magnitude gradients), from z and from y.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/dora.h"
#include "gpu/gemm.h"
#include "gpu/lora.h"
#include "gpu/swiglu.h"
#include "ref/bf16.h"
#include "ref/dora.h"
#include "ref/linear.h"
#include "ref/lora.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;
static struct gpu_gemm *g_gemm;

enum regime { EXACT = 0, NORMAL = 1 };

/* EXACT: ±1 with probability `density`, else 0. NORMAL: normal(0, std) rounded to bf16. */
static void fill(struct rng *r, std::vector<float> &v, enum regime rg, double density, double std) {
    if (rg == EXACT) {
        for (float &x : v) x = rng_uniform(r) < density ? (rng_int(r, 2) ? 1.0f : -1.0f) : 0.0f;
    } else {
        rng_fill_normal(r, v.data(), (int64_t)v.size(), 0.0, std);
        for (float &x : v) x = bf16_round(x);
    }
}

static std::vector<float> rounded(std::vector<float> v) {
    for (float &x : v) x = bf16_round(x);
    return v;
}

static int64_t count_inexact_bf16(const float *v, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += isfinite(v[i]) && bf16_round(v[i]) != v[i];
    return k;
}

static void compare(const struct cmp_case *cc, const std::vector<float> &got, const std::vector<float> &naive,
                    const std::vector<float> &ref, enum regime rg, int is_bf16) {
    const int64_t n = (int64_t)ref.size();
    if (rg == EXACT) {
        cmp_exact_f32(cc, got.data(), ref.data(), n);
        return;
    }
    std::vector<float> finite;
    for (float v : ref)
        if (isfinite(v)) finite.push_back(v);
    const double rms = cmp_rms(finite.data(), (int64_t)finite.size());
    cmp_vs_naive(cc, got.data(), naive.data(), ref.data(), n, 2.0, (is_bf16 ? BF16_EPS : FLT_EPSILON) * rms, nullptr);
}

struct dora_case {
    int N, C_in, C_out, R;
    enum regime rg;
    int bias;
};

static void run_case(const dora_case &c, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const int N = c.N, C_in = c.C_in, C_out = c.C_out, R = c.R;
    const bool ex = c.rg == EXACT;
    const float s = ex ? 1.0f : ref_lora_scale(32.0, R, LORA_SCALE_RSLORA);
    char shape[160];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d R=%d s=%g%s %s", N, C_in, C_out, R, (double)s,
             c.bias ? " bias" : "", ex ? "exact" : "normal");

    const double d_in = fmin(0.25, 64.0 / C_in), d_out = fmin(0.25, 64.0 / C_out);
    std::vector<float> x((size_t)N * C_in), W((size_t)C_out * C_in), b(C_out), A((size_t)R * C_in), B((size_t)C_out * R),
        dy((size_t)N * C_out), dA0((size_t)R * C_in), dB0((size_t)C_out * R), dm0(C_out), mag(C_out);
    fill(&r, x, c.rg, 0.25, 1.0);
    fill(&r, W, c.rg, d_in, 0.02);
    for (int o = 0; o < C_out; o++) /* a nonzero entry in every row: n > 0 (ref/dora.h's precondition) */
        if (ex) W[(size_t)o * C_in + o % C_in] = 1.0f;
    fill(&r, b, c.rg, 0.25, 0.5);
    fill(&r, A, c.rg, d_in, 1.0 / sqrt((double)C_in));
    fill(&r, B, c.rg, d_out, 0.01);
    fill(&r, dy, c.rg, 0.25, 1.0);
    if (ex) {
        rng_fill_int(&r, dA0.data(), (int64_t)dA0.size(), -100, 100);
        rng_fill_int(&r, dB0.data(), (int64_t)dB0.size(), -100, 100);
        rng_fill_int(&r, dm0.data(), (int64_t)dm0.size(), -100, 100);
    } else {
        rng_fill_normal(&r, dA0.data(), (int64_t)dA0.size(), 0.0, 1.0);
        rng_fill_normal(&r, dB0.data(), (int64_t)dB0.size(), 0.0, 1.0);
        rng_fill_normal(&r, dm0.data(), (int64_t)dm0.size(), 0.0, 1.0);
    }
    const float *bias = c.bias ? b.data() : nullptr;

    /* Reference: w_sq, the factored norm, m from it, y0 = the base output, the forward. */
    std::vector<float> wsq_ref(C_out), n_ref(C_out);
    std::vector<double> nws(ref_dora_weight_norm_factored_workspace_size(C_out, R));
    ref_dora_weight_sq(wsq_ref.data(), W.data(), C_in, C_out);
    ref_dora_weight_norm_factored(n_ref.data(), wsq_ref.data(), W.data(), A.data(), B.data(), C_in, C_out, R, s,
                                  nws.data());
    for (int o = 0; o < C_out; o++) {
        if (ex) {
            const int k = rng_int(&r, 3); /* mns ∈ {0.5, 1, 2} exactly */
            mag[o] = n_ref[o] * (k == 0 ? 0.5f : k == 1 ? 1.0f : 2.0f);
        } else {
            mag[o] = n_ref[o] * (float)(1.0 + 0.1 * rng_normal(&r));
        }
    }
    std::vector<float> y0((size_t)N * C_out);
    ref_linear_forward_naive(y0.data(), x.data(), W.data(), bias, N, C_in, C_out, ACT_BF16);
    std::vector<float> y_ref(y0), u_ref((size_t)N * R);
    ref_dora_forward(y_ref.data(), u_ref.data(), x.data(), nullptr, W.data(), bias, A.data(), B.data(), mag.data(),
                     n_ref.data(), N, C_in, C_out, R, s, ACT_BF16);
    /* z = bf16((y0 − b) + s·l) with l from the reference's u (double sum). */
    std::vector<float> z_ref((size_t)N * C_out), z_exact((size_t)N * C_out);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C_out; o++) {
            double l = 0;
            for (int q = 0; q < R; q++) l += (double)u_ref[(size_t)n * R + q] * B[(size_t)o * R + q];
            const float base = bias ? y0[(size_t)n * C_out + o] - b[o] : y0[(size_t)n * C_out + o];
            z_exact[(size_t)n * C_out + o] = (float)((double)base + (double)s * l);
            z_ref[(size_t)n * C_out + o] = bf16_round(z_exact[(size_t)n * C_out + o]);
        }
    /* Backward: dx = dy W (base, fp32) then the adapter's share. */
    std::vector<float> dx_ref((size_t)N * C_in), dA_ref(dA0), dB_ref(dB0), dm_ref(dm0);
    std::vector<float> rws(ref_dora_backward_workspace_size(N, C_out, R));
    ref_linear_backward_naive(dx_ref.data(), nullptr, nullptr, dy.data(), x.data(), W.data(), N, C_in, C_out, ACT_F32);
    ref_dora_backward(dx_ref.data(), dm_ref.data(), dA_ref.data(), dB_ref.data(), dy.data(), x.data(), nullptr, nullptr,
                      1.0f, u_ref.data(), W.data(), A.data(), B.data(), mag.data(), n_ref.data(), N, C_in, C_out, R,
                      s, ACT_BF16, rws.data());

    if (ex) {
        /* The exact tier's preconditions (file comment): no rounding changes anything anywhere. */
        std::vector<float> dys((size_t)N * C_out), dxb((size_t)N * C_in);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < C_out; o++) dys[(size_t)n * C_out + o] = (mag[o] / n_ref[o]) * dy[(size_t)n * C_out + o];
        ref_linear_backward_naive(dxb.data(), nullptr, nullptr, dys.data(), x.data(), W.data(), N, C_in, C_out, ACT_F32);
        std::vector<float> y0f((size_t)N * C_out);
        ref_linear_forward_naive(y0f.data(), x.data(), W.data(), bias, N, C_in, C_out, ACT_F32);
        const int64_t bad = count_inexact_bf16(z_exact.data(), z_exact.size()) +
                            count_inexact_bf16(rws.data(), (size_t)N * R) /* du */ +
                            count_inexact_bf16(dxb.data(), dxb.size()) + (y0f != y0);
        EXPECT(bad == 0, "dora %s: %lld values of the exact tier are not exact in bf16 (test data too dense)", shape,
               (long long)bad);
    }

    /* Naive same-precision implementation of the GPU's algorithm (NORMAL only). */
    std::vector<float> n_n, u_n, y_n, z_n, dx_n, dA_n, dB_n, dm_n;
    if (!ex) {
        std::vector<float> wa((size_t)C_out * R), aa((size_t)R * R);
        naive_mm(wa.data(), W.data(), C_in, 1, A.data(), 1, C_in, C_out, R, C_in);
        naive_mm(aa.data(), A.data(), C_in, 1, A.data(), 1, C_in, R, R, C_in);
        n_n.resize(C_out);
        for (int o = 0; o < C_out; o++) {
            double cross = 0, quad = 0;
            for (int q = 0; q < R; q++) {
                cross += (double)wa[(size_t)o * R + q] * B[(size_t)o * R + q];
                double t = 0;
                for (int k = 0; k < R; k++) t += (double)aa[(size_t)q * R + k] * B[(size_t)o * R + k];
                quad += (double)B[(size_t)o * R + q] * t;
            }
            const double n2 = (double)wsq_ref[o] + 2.0 * s * cross + (double)s * s * quad;
            n_n[o] = (float)sqrt(n2 > 0 ? n2 : 0);
        }
        u_n.resize((size_t)N * R);
        naive_mm(u_n.data(), x.data(), C_in, 1, A.data(), 1, C_in, N, R, C_in);
        u_n = rounded(u_n);
        std::vector<float> t((size_t)N * C_out);
        naive_mm(t.data(), u_n.data(), R, 1, B.data(), 1, R, N, C_out, R);
        y_n.resize(t.size()), z_n.resize(t.size());
        std::vector<float> dys(t.size());
        for (int n = 0; n < N; n++)
            for (int o = 0; o < C_out; o++) {
                const size_t e = (size_t)n * C_out + o;
                const float mns = mag[o] / n_ref[o], sl = s * t[e];
                const float base = bias ? y0[e] - b[o] : y0[e];
                y_n[e] = bf16_round(y0[e] + ((mns - 1.0f) * base + mns * sl));
                z_n[e] = bf16_round(base + sl);
                dys[e] = bf16_round(mns * dy[e]);
            }
        dm_n.resize(C_out);
        for (int o = 0; o < C_out; o++) {
            float acc = 0.0f;
            for (int n = 0; n < N; n++) acc += dy[(size_t)n * C_out + o] * z_n[(size_t)n * C_out + o];
            dm_n[o] = (float)((double)dm0[o] + (double)acc / n_ref[o]);
        }
        std::vector<float> dxb((size_t)N * C_in), du((size_t)N * R), dxl((size_t)N * C_in);
        naive_mm(dxb.data(), dys.data(), C_out, 1, W.data(), C_in, 1, N, C_in, C_out);
        dxb = rounded(dxb);
        dB_n.resize(dB0.size());
        naive_mm(dB_n.data(), dys.data(), 1, C_out, u_n.data(), R, 1, C_out, R, N);
        for (size_t i = 0; i < dB_n.size(); i++) dB_n[i] = s * dB_n[i] + dB0[i];
        naive_mm(du.data(), dys.data(), C_out, 1, B.data(), R, 1, N, R, C_out);
        for (float &v : du) v = bf16_round(s * v);
        dA_n.resize(dA0.size());
        naive_mm(dA_n.data(), du.data(), 1, R, x.data(), C_in, 1, R, C_in, N);
        for (size_t i = 0; i < dA_n.size(); i++) dA_n[i] += dA0[i];
        naive_mm(dxl.data(), du.data(), R, 1, A.data(), C_in, 1, N, C_in, R);
        dx_n.resize(dxl.size());
        for (size_t i = 0; i < dxl.size(); i++) dx_n[i] = bf16_round(dxb[i] + dxl[i]);
    }

    /* Device. */
    const std::vector<uint16_t> xb = bits_of(x), Wb = bits_of(W), bb = bits_of(b), Ab = bits_of(A), Bb = bits_of(B),
                                y0b = bits_of(y0), dyb = bits_of(dy);
    const size_t ws_bytes = std::max(std::max(gpu_dora_weight_norm_workspace_size(C_out, R),
                                              gpu_dora_forward_workspace_size(N, C_out, R)),
                                     gpu_dora_backward_workspace_size(N, C_in, C_out, R));
    struct dev_buf bx, bW, bb_, bA, bB, bwsq, bn, bmag, by, bz, bu, bdy, bdx, bdA, bdB, bdm, bws;
    dev_buf_alloc(&bx, "x", xb.size() * 2, POISON_NONE, xb.data());
    dev_buf_alloc(&bW, "w", Wb.size() * 2, POISON_NONE, Wb.data());
    dev_buf_alloc(&bb_, "bias", bb.size() * 2, POISON_NONE, bb.data());
    dev_buf_alloc(&bA, "lora_a", Ab.size() * 2, POISON_NONE, Ab.data());
    dev_buf_alloc(&bB, "lora_b", Bb.size() * 2, POISON_NONE, Bb.data());
    dev_buf_alloc(&bwsq, "w_sq", (size_t)C_out * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bn, "wnorm", (size_t)C_out * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bmag, "mag", (size_t)C_out * 4, POISON_NONE, mag.data());
    dev_buf_alloc(&by, "y", y0b.size() * 2, POISON_NONE, y0b.data());
    dev_buf_alloc(&bz, "z", y0b.size() * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bu, "u", (size_t)N * R * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdy, "dy", dyb.size() * 2, POISON_NONE, dyb.data());
    dev_buf_alloc(&bdx, "dx", (size_t)N * C_in * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdA, "dlora_a", dA0.size() * 4, POISON_NONE, dA0.data());
    dev_buf_alloc(&bdB, "dlora_b", dB0.size() * 4, POISON_NONE, dB0.data());
    dev_buf_alloc(&bdm, "dmag", dm0.size() * 4, POISON_NONE, dm0.data());
    dev_buf_alloc(&bws, "workspace", ws_bytes, POISON_NONE, nullptr);
    /* The forward and backward read the reference's n, so that each stage is checked on its own;
     * the GPU's n is checked against it first. */
    struct dev_buf bnref;
    dev_buf_alloc(&bnref, "wnorm (reference)", (size_t)C_out * 4, POISON_NONE, n_ref.data());

    std::vector<float> wsq_g(C_out), n_g(C_out), dA_g(dA0.size()), dB_g(dB0.size()), dm_g(C_out);
    std::vector<uint16_t> yg(y0b.size()), zg(y0b.size()), ug((size_t)N * R), dxg((size_t)N * C_in);
    std::vector<std::vector<unsigned char>> runs;
    gpu_dora_reserve(g_gemm, N, C_in, C_out, R);
    const int plans = gpu_gemm_plan_count(g_gemm);
    for (int rep = 0; rep < 2; rep++) {
        if (rep) {
            for (struct dev_buf *bf : {&bwsq, &bn, &bz, &bu, &bdx, &bws}) dev_buf_reset(bf, nullptr);
            dev_buf_reset(&by, y0b.data());
            dev_buf_reset(&bdA, dA0.data());
            dev_buf_reset(&bdB, dB0.data());
            dev_buf_reset(&bdm, dm0.data());
        }
        gpu_dora_weight_sq_f32((float *)bwsq.data, (const uint16_t *)bW.data, C_in, C_in, C_out, g_stream);
        /* the norm from the reference's w_sq, so that the two are compared separately */
        struct dev_buf bwsq_ref;
        dev_buf_alloc(&bwsq_ref, "w_sq (reference)", (size_t)C_out * 4, POISON_NONE, wsq_ref.data());
        gpu_dora_weight_norm_f32(g_gemm, (float *)bn.data, (const float *)bwsq_ref.data, (const uint16_t *)bW.data, C_in,
                                 (const uint16_t *)bA.data, (const uint16_t *)bB.data, C_in, C_out, R, s, bws.data,
                                 g_stream);
        gpu_dora_forward_bf16(g_gemm, (uint16_t *)by.data, (uint16_t *)bz.data, (uint16_t *)bu.data,
                              (const uint16_t *)bx.data, c.bias ? (const uint16_t *)bb_.data : nullptr,
                              (const uint16_t *)bA.data, (const uint16_t *)bB.data, (const float *)bmag.data,
                              (const float *)bnref.data, N, C_in, C_out, R, s, bws.data, g_stream);
        gpu_dora_backward_bf16(g_gemm, (uint16_t *)bdx.data, (float *)bdm.data, (float *)bdA.data, (float *)bdB.data,
                               (const uint16_t *)bdy.data, (const uint16_t *)bx.data, (const uint16_t *)bz.data,
                               (const uint16_t *)bu.data, (const uint16_t *)bW.data, (const uint16_t *)bA.data,
                               (const uint16_t *)bB.data, (const float *)bmag.data, (const float *)bnref.data, N, C_in,
                               C_out, R, s, bws.data, g_stream);
        dev_buf_download(&bwsq, wsq_g.data(), 1);
        dev_buf_download(&bn, n_g.data(), 1);
        dev_buf_download(&by, yg.data(), 0);
        dev_buf_download(&bz, zg.data(), 1);
        dev_buf_download(&bu, ug.data(), 1);
        dev_buf_download(&bdx, dxg.data(), 1);
        dev_buf_download(&bdA, dA_g.data(), 0);
        dev_buf_download(&bdB, dB_g.data(), 0);
        dev_buf_download(&bdm, dm_g.data(), 0);
        dev_buf_free(&bwsq_ref);
        std::vector<unsigned char> img;
        for (auto *v : {&wsq_g, &n_g, &dA_g, &dB_g, &dm_g})
            img.insert(img.end(), (unsigned char *)v->data(), (unsigned char *)(v->data() + v->size()));
        for (auto *v : {&yg, &zg, &ug, &dxg})
            img.insert(img.end(), (unsigned char *)v->data(), (unsigned char *)(v->data() + v->size()));
        runs.push_back(img);
    }
    /* gpu_dora_reserve saw every product (all buffers here are 256-byte aligned) */
    EXPECT(gpu_gemm_plan_count(g_gemm) == plans, "dora %s: %d gemm plans created after gpu_dora_reserve", shape,
           gpu_gemm_plan_count(g_gemm) - plans);
    {   /* a group member's forward: its u as columns R .. 2R − 1 of a (N, 3R) group u (gpu_dora_scale_bf16 with
         * ldu = 3R; NaN in the neighbours' columns must not reach it): y and z bit for bit the forward's */
        std::vector<uint16_t> wide((size_t)N * 3 * R, 0x7FC0);
        for (int n = 0; n < N; n++) memcpy(&wide[(size_t)n * 3 * R + R], &ug[(size_t)n * R], (size_t)R * 2);
        struct dev_buf bw, by2, bz2;
        dev_buf_alloc(&bw, "group u", wide.size() * 2, POISON_NONE, wide.data());
        dev_buf_alloc(&by2, "y (member)", y0b.size() * 2, POISON_NONE, y0b.data());
        dev_buf_alloc(&bz2, "z (member)", y0b.size() * 2, POISON_BF16, nullptr);
        dev_buf_reset(&bws, nullptr);
        gpu_dora_scale_bf16(g_gemm, (uint16_t *)by2.data, (uint16_t *)bz2.data, (const uint16_t *)bw.data + R, 3 * R,
                            c.bias ? (const uint16_t *)bb_.data : nullptr, (const uint16_t *)bB.data,
                            (const float *)bmag.data, (const float *)bnref.data, N, C_out, R, s, bws.data, g_stream);
        std::vector<uint16_t> y2(y0b.size()), z2(y0b.size());
        dev_buf_download(&by2, y2.data(), 0);
        dev_buf_download(&bz2, z2.data(), 1);
        EXPECT(memcmp(y2.data(), yg.data(), y2.size() * 2) == 0 && memcmp(z2.data(), zg.data(), z2.size() * 2) == 0,
               "dora %s: the forward from a group's u (ldu = 3R) differs from gpu_dora_forward_bf16's", shape);
        for (struct dev_buf *bf : {&bw, &by2, &bz2}) dev_buf_free(bf);
    }
    { /* W's rows at a padded stride (a folded group member's, gpu/lora.h: C_in + the group's adapter
       * columns, rounded up to 64 elements), NaN past C_in: w_sq bit for bit the contiguous one's, the
       * row norm in its tiers */
        const int64_t ldw = ((int64_t)C_in + 3 * R + 63) / 64 * 64;
        std::vector<uint16_t> wpad((size_t)C_out * ldw, 0x7FC0);
        for (int o = 0; o < C_out; o++) memcpy(&wpad[(size_t)o * ldw], &Wb[(size_t)o * C_in], (size_t)C_in * 2);
        struct dev_buf bwp, bwsq2, bn2, bwsq_r;
        dev_buf_alloc(&bwp, "w (padded rows)", wpad.size() * 2, POISON_NONE, wpad.data());
        dev_buf_alloc(&bwsq2, "w_sq (padded rows)", (size_t)C_out * 4, POISON_F32, nullptr);
        dev_buf_alloc(&bn2, "wnorm (padded rows)", (size_t)C_out * 4, POISON_F32, nullptr);
        dev_buf_alloc(&bwsq_r, "w_sq (reference)", (size_t)C_out * 4, POISON_NONE, wsq_ref.data());
        dev_buf_reset(&bws, nullptr);
        gpu_dora_weight_sq_f32((float *)bwsq2.data, (const uint16_t *)bwp.data, ldw, C_in, C_out, g_stream);
        gpu_dora_weight_norm_f32(g_gemm, (float *)bn2.data, (const float *)bwsq_r.data, (const uint16_t *)bwp.data, ldw,
                                 (const uint16_t *)bA.data, (const uint16_t *)bB.data, C_in, C_out, R, s, bws.data,
                                 g_stream);
        std::vector<float> wsq2(C_out), n2(C_out);
        dev_buf_download(&bwsq2, wsq2.data(), 1);
        dev_buf_download(&bn2, n2.data(), 1);
        EXPECT(memcmp(wsq2.data(), wsq_g.data(), (size_t)C_out * 4) == 0,
               "dora %s: w_sq from W's rows at stride %lld differs from the contiguous W's", shape, (long long)ldw);
        /* W Aᵀ at another lda may take another cuBLASLt kernel (another fp32 order): the norm's own tiers */
        struct cmp_case cp = {"dora_weight_norm", "wnorm (W's rows padded)", shape, "f32", seed};
        compare(&cp, n2, n_n, n_ref, c.rg, 0);
        for (struct dev_buf *bf : {&bwp, &bwsq2, &bn2, &bwsq_r}) dev_buf_free(bf);
    }
    if (!c.bias) { /* the magnitude folded into a folded member's padded row (gpu_dora_scale_weight_bf16):
                    * w_s = bf16(mns·[W | bf16(s·B)]) bit for bit the host's, nothing written past K; then
                    * y = [x | u] w_sᵀ (one product) against the reference forward, in its tiers */
        const int K = C_in + R;
        const int64_t ldw = ((int64_t)K + 63) / 64 * 64;
        std::vector<uint16_t> wf((size_t)C_out * ldw, 0x7FC0), want((size_t)C_out * ldw, 0x7FC0);
        std::vector<float> wsf((size_t)C_out * K); /* w_s's values, for the naive product */
        for (int o = 0; o < C_out; o++) {
            const float mns = mag[o] / n_ref[o];
            for (int k = 0; k < K; k++) {
                const float w = k < C_in ? W[(size_t)o * C_in + k] : bf16_round(s * B[(size_t)o * R + (k - C_in)]);
                wf[(size_t)o * ldw + k] = bits_of(std::vector<float>{w})[0];
                wsf[(size_t)o * K + k] = bf16_round(w * mns);
                want[(size_t)o * ldw + k] = bits_of(std::vector<float>{wsf[(size_t)o * K + k]})[0];
            }
        }
        std::vector<uint16_t> xf((size_t)N * ldw, 0x7FC0);
        std::vector<float> xfn((size_t)N * K); /* [x | u] with the naive u */
        for (int n = 0; n < N; n++) {
            memcpy(&xf[(size_t)n * ldw], &xb[(size_t)n * C_in], (size_t)C_in * 2);
            memcpy(&xf[(size_t)n * ldw + C_in], &ug[(size_t)n * R], (size_t)R * 2);
            for (int k = 0; k < K; k++)
                xfn[(size_t)n * K + k] = k < C_in ? x[(size_t)n * C_in + k]
                                         : u_n.empty() ? 0.0f /* the exact tier has no naive */
                                                       : u_n[(size_t)n * R + (k - C_in)];
        }
        struct dev_buf bwf, bwsc, bxf, bys;
        dev_buf_alloc(&bwf, "w (padded, adapter columns)", wf.size() * 2, POISON_NONE, wf.data());
        std::vector<uint16_t> nan_rows((size_t)C_out * ldw, 0x7FC0);
        dev_buf_alloc(&bwsc, "w_s (scaled)", nan_rows.size() * 2, POISON_NONE, nan_rows.data());
        dev_buf_alloc(&bxf, "[x | u]", xf.size() * 2, POISON_NONE, xf.data());
        dev_buf_alloc(&bys, "y (scaled weight)", (size_t)N * C_out * 2, POISON_BF16, nullptr);
        gpu_dora_scale_weight_bf16((uint16_t *)bwsc.data, (const uint16_t *)bwf.data, ldw, (const float *)bmag.data,
                                   (const float *)bnref.data, C_out, K, g_stream);
        gpu_linear_forward_ld_bf16(g_gemm, (uint16_t *)bys.data, (const uint16_t *)bxf.data, ldw,
                                   (const uint16_t *)bwsc.data, ldw, nullptr, N, K, C_out, g_stream);
        std::vector<uint16_t> got_w(nan_rows.size()), ys((size_t)N * C_out);
        dev_buf_download(&bwsc, got_w.data(), 0);
        dev_buf_download(&bys, ys.data(), 1);
        EXPECT(memcmp(got_w.data(), want.data(), want.size() * 2) == 0,
               "dora %s: gpu_dora_scale_weight_bf16 differs from bf16(w·mns) (or wrote past K = %d)", shape, K);
        std::vector<float> ysn;
        if (!ex) {
            ysn.resize((size_t)N * C_out);
            for (int n = 0; n < N; n++)
                for (int o = 0; o < C_out; o++) {
                    float acc = 0.0f;
                    for (int k = 0; k < K; k++) acc += xfn[(size_t)n * K + k] * wsf[(size_t)o * K + k];
                    ysn[(size_t)n * C_out + o] = bf16_round(acc);
                }
        }
        struct cmp_case cw = {"dora_forward (scaled weight)", "y = [x | u] w_s^T", shape, "bf16", seed};
        compare(&cw, floats_of(ys), ysn, y_ref, c.rg, 1);
        for (struct dev_buf *bf : {&bwf, &bwsc, &bxf, &bys}) dev_buf_free(bf);
    }
    if (!c.bias) { /* DORA_SAVED_Y: no z kept — the forward without z, dm from the output y itself */
        struct dev_buf by3, bu3, bdys, bdm3;
        dev_buf_alloc(&by3, "y (no z)", y0b.size() * 2, POISON_NONE, y0b.data());
        dev_buf_alloc(&bu3, "u (no z)", (size_t)N * R * 2, POISON_BF16, nullptr);
        dev_buf_alloc(&bdys, "dy_s (from y)", dyb.size() * 2, POISON_BF16, nullptr);
        dev_buf_alloc(&bdm3, "dmag (from y)", dm0.size() * 4, POISON_NONE, dm0.data());
        dev_buf_reset(&bws, nullptr);
        gpu_dora_forward_bf16(g_gemm, (uint16_t *)by3.data, nullptr, (uint16_t *)bu3.data, (const uint16_t *)bx.data,
                              nullptr, (const uint16_t *)bA.data, (const uint16_t *)bB.data, (const float *)bmag.data,
                              (const float *)bnref.data, N, C_in, C_out, R, s, bws.data, g_stream);
        gpu_dora_rescale_bf16((uint16_t *)bdys.data, (float *)bdm3.data, (const uint16_t *)bdy.data,
                              (const uint16_t *)by3.data, DORA_SAVED_Y, (const float *)bmag.data,
                              (const float *)bnref.data, N, C_out, bws.data, g_stream);
        std::vector<uint16_t> y3(y0b.size()), dys3(dyb.size());
        std::vector<float> dm3(C_out);
        dev_buf_download(&by3, y3.data(), 0);
        dev_buf_download(&bdys, dys3.data(), 1);
        dev_buf_download(&bdm3, dm3.data(), 0);
        EXPECT(memcmp(y3.data(), yg.data(), y3.size() * 2) == 0,
               "dora %s: the forward without z gives another y than with it", shape);
        /* ref_dora_rescale on the same y: products exact in double on both sides, sums in other orders */
        std::vector<float> dys_r(dy.size()), dm_r(dm0);
        ref_dora_rescale(dys_r.data(), dm_r.data(), dy.data(), floats_of(yg).data(), DORA_SAVED_Y, mag.data(),
                         n_ref.data(), N, C_out, ACT_BF16);
        struct cmp_case cy = {"dora_rescale (from y)", "dy_s", shape, "bf16", seed};
        cmp_exact_f32(&cy, floats_of(dys3).data(), dys_r.data(), (int64_t)dys_r.size());
        cy.what = "dmag vs ref_dora_rescale";
        cy.dtype = "f32";
        cmp_elementwise(&cy, dm3.data(), dm_r.data(), C_out, FLT_EPSILON, 1.0, cmp_rms(dm_r.data(), C_out), nullptr);
        /* and against the true gradient (ref_dora_backward's, from z): the naive implementation sums
         * dy·y in fp32 and divides by m */
        std::vector<float> dm_ny;
        if (!ex) {
            dm_ny.resize(C_out);
            for (int o = 0; o < C_out; o++) {
                float acc = 0.0f;
                for (int n = 0; n < N; n++) acc += dy[(size_t)n * C_out + o] * y_n[(size_t)n * C_out + o];
                dm_ny[o] = (float)((double)dm0[o] + (double)acc / mag[o]);
            }
        }
        cy.what = "dmag (from y) vs the gradient";
        compare(&cy, dm3, dm_ny, dm_ref, c.rg, 0);
        for (struct dev_buf *bf : {&by3, &bu3, &bdys, &bdm3}) dev_buf_free(bf);
    }
    for (struct dev_buf *bf : {&bx, &bW, &bb_, &bA, &bB, &bmag, &bdy, &bws, &bnref}) {
        std::vector<unsigned char> tmp(bf->nbytes);
        dev_buf_download(bf, tmp.data(), 0);
    }

    struct cmp_case cc = {"dora_weight_sq", "w_sq", shape, "f32", seed};
    if (ex) cmp_exact_f32(&cc, wsq_g.data(), wsq_ref.data(), C_out);
    else cmp_elementwise(&cc, wsq_g.data(), wsq_ref.data(), C_out, FLT_EPSILON, 1.0, 0.0, nullptr);
    cc.op = "dora_weight_norm";
    cc.what = "wnorm (factored)";
    compare(&cc, n_g, n_n, n_ref, c.rg, 0);
    cc.op = "dora_forward";
    cc.dtype = "bf16";
    cc.what = "u";
    compare(&cc, floats_of(ug), u_n, u_ref, c.rg, 1);
    cc.what = "y";
    compare(&cc, floats_of(yg), y_n, y_ref, c.rg, 1);
    cc.what = "z (saved pre-magnitude output)";
    compare(&cc, floats_of(zg), z_n, z_ref, c.rg, 1);
    cc.op = "dora_backward";
    cc.what = "dx (base path + adapter)";
    compare(&cc, floats_of(dxg), dx_n, dx_ref, c.rg, 1);
    cc.dtype = "f32";
    cc.what = "dmag (accumulated)";
    compare(&cc, dm_g, dm_n, dm_ref, c.rg, 0);
    cc.what = "dlora_a (accumulated)";
    compare(&cc, dA_g, dA_n, dA_ref, c.rg, 0);
    cc.what = "dlora_b (accumulated)";
    compare(&cc, dB_g, dB_n, dB_ref, c.rg, 0);
    cc.op = "dora";
    cc.what = "determinism (norm, forward, backward twice)";
    cmp_exact_bytes(&cc, runs[1].data(), runs[0].data(), runs[0].size());
    for (struct dev_buf *bf : {&bx, &bW, &bb_, &bA, &bB, &bwsq, &bn, &bmag, &by, &bz, &bu, &bdy, &bdx, &bdA, &bdB,
                               &bdm, &bws, &bnref})
        dev_buf_free(bf);
}

/* ---- the MLP's SwiGLU backward with the gate/up rescale fused: bit for bit the two passes ----
 * gpu_dora_swiglu_backward_bf16 against gpu_swiglu_backward_bf16 then gpu_dora_rescale_bf16 per side
 * (into separate buffers), normal inputs, magnitude gradients accumulated onto nonzero values;
 * sides: both DoRA, gate only, up only (the other plain), and no magnitude gradient on one side. */
static void swiglu_fused_case(int N, int F, int gate_dora, int up_dora, int up_dmag, int from_y, int id) {
    struct rng r;
    rng_init(&r, g_seed + 7919u * (uint64_t)id);
    const size_t nf = (size_t)N * F;
    std::vector<float> g(nf), u(nf), dh(nf), zg(nf), zu(nf), mg(F), ng(F), mu(F), nu(F), dmg0(F), dmu0(F);
    rng_fill_normal(&r, g.data(), (int64_t)nf, 0.0, 2.0);
    rng_fill_normal(&r, u.data(), (int64_t)nf, 0.0, 1.0);
    rng_fill_normal(&r, dh.data(), (int64_t)nf, 0.0, 0.01);
    rng_fill_normal(&r, zg.data(), (int64_t)nf, 0.0, 1.0);
    rng_fill_normal(&r, zu.data(), (int64_t)nf, 0.0, 1.0);
    rng_fill_uniform(&r, mg.data(), F, 0.5, 2.0);
    rng_fill_uniform(&r, ng.data(), F, 0.5, 2.0);
    rng_fill_uniform(&r, mu.data(), F, 0.5, 2.0);
    rng_fill_uniform(&r, nu.data(), F, 0.5, 2.0);
    rng_fill_normal(&r, dmg0.data(), F, 0.0, 1.0);
    rng_fill_normal(&r, dmu0.data(), F, 0.0, 1.0);
    const std::vector<uint16_t> gb = bits_of(g), ub = bits_of(u), dhb = bits_of(dh), zgb = bits_of(zg), zub = bits_of(zu);
    auto up16 = [](const std::vector<uint16_t> &h) {
        void *p;
        CUDA_CHECK(cudaMalloc(&p, h.size() * 2 + 16));
        CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
        return (uint16_t *)p;
    };
    auto up32 = [](const std::vector<float> &h) {
        void *p;
        CUDA_CHECK(cudaMalloc(&p, h.size() * 4));
        CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        return (float *)p;
    };
    /* the two passes: swiglu into dg/du, then each DoRA side's rescale into its own dy_s */
    uint16_t *g1 = up16(gb), *u1 = up16(ub), *dh1 = up16(dhb), *zg1 = up16(zgb), *zu1 = up16(zub);
    uint16_t *g2 = up16(gb), *u2 = up16(ub), *sg = up16(gb), *su = up16(ub), *g0 = up16(gb), *u0 = up16(ub);
    const enum dora_saved kind = from_y ? DORA_SAVED_Y : DORA_SAVED_Z;
    float *mgd = up32(mg), *ngd = up32(ng), *mud = up32(mu), *nud = up32(nu);
    float *dmg1 = up32(dmg0), *dmu1 = up32(dmu0), *dmg2 = up32(dmg0), *dmu2 = up32(dmu0);
    void *ws;
    const size_t wsb = std::max(gpu_dora_swiglu_backward_workspace_size(N, F), gpu_dora_rescale_workspace_size(N, F));
    CUDA_CHECK(cudaMalloc(&ws, wsb));
    gpu_swiglu_backward_bf16(g1, u1, dh1, g1, u1, N, F, F, F, g_stream);
    /* from y: the rescale reads the forward's gate and up (g0, u0: the swiglu pass overwrote g1, u1) */
    if (gate_dora) gpu_dora_rescale_bf16(sg, dmg1, g1, from_y ? g0 : zg1, kind, mgd, ngd, N, F, ws, g_stream);
    if (up_dora)
        gpu_dora_rescale_bf16(su, up_dmag ? dmu1 : nullptr, u1, from_y ? u0 : zu1, kind, mud, nud, N, F, ws, g_stream);
    gpu_dora_swiglu_backward_bf16(g2, u2, gate_dora ? dmg2 : nullptr, up_dora && up_dmag ? dmu2 : nullptr, dh1,
                                  from_y ? nullptr : zg1, from_y ? nullptr : zu1, kind, gate_dora ? mgd : nullptr, ngd,
                                  up_dora ? mud : nullptr, nud, N, F, ws, g_stream);
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    auto down16 = [](const uint16_t *d, size_t n) {
        std::vector<uint16_t> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
        return h;
    };
    auto down32 = [](const float *d, size_t n) {
        std::vector<float> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
        return h;
    };
    const std::vector<uint16_t> want_g = down16(gate_dora ? sg : g1, nf), want_u = down16(up_dora ? su : u1, nf);
    const std::vector<uint16_t> got_g = down16(g2, nf), got_u = down16(u2, nf);
    const std::vector<float> wdg = down32(dmg1, F), wdu = down32(dmu1, F), gdg = down32(dmg2, F), gdu = down32(dmu2, F);
    int64_t bad = 0, changed = 0;
    for (size_t i = 0; i < nf; i++) bad += (want_g[i] != got_g[i]) + (want_u[i] != got_u[i]);
    for (int o = 0; o < F; o++) {
        bad += memcmp(&wdg[o], &gdg[o], 4) != 0, bad += memcmp(&wdu[o], &gdu[o], 4) != 0;
        changed += (gate_dora && gdg[o] != dmg0[o]) + (up_dora && up_dmag && gdu[o] != dmu0[o]);
    }
    EXPECT(bad == 0,
           "dora swiglu fused N=%d F=%d gate %d up %d (dmag %d, from %s): %lld values differ from the two passes", N,
           F, gate_dora, up_dora, up_dmag, from_y ? "y" : "z", (long long)bad);
    EXPECT(changed > 0 || (!gate_dora && !(up_dora && up_dmag)),
           "dora swiglu fused N=%d F=%d: no magnitude gradient moved (the case tests nothing)", N, F);
    for (void *p : {(void *)g1, (void *)u1, (void *)dh1, (void *)zg1, (void *)zu1, (void *)g2, (void *)u2, (void *)sg,
                    (void *)su, (void *)g0, (void *)u0, (void *)mgd, (void *)ngd, (void *)mud, (void *)nud,
                    (void *)dmg1, (void *)dmu1, (void *)dmg2, (void *)dmu2, ws})
        CUDA_CHECK(cudaFree(p));
}

/* ---- bench: N = 8192, DoRA against LoRA on the same shape, the elementwise passes against the copy rate ---- */

struct bench_ctx {
    uint16_t *x, *w, *A, *B, *y, *z, *u, *dy, *dx, *dys;
    float *dA, *dB, *mag, *n, *wsq, *dm;
    void *ws;
    int N, C_in, C_out, R;
};

static void b_norm(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_dora_weight_norm_f32(g_gemm, b->n, b->wsq, b->w, b->C_in, b->A, b->B, b->C_in, b->C_out, b->R, 2.0f, b->ws, s);
}
static void b_dora_fwd(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_dora_forward_bf16(g_gemm, b->y, b->z, b->u, b->x, nullptr, b->A, b->B, b->mag, b->n, b->N, b->C_in, b->C_out,
                          b->R, 2.0f, b->ws, s);
}
static void b_lora_fwd(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_lora_forward_bf16(g_gemm, b->y, b->u, b->x, b->A, b->B, b->N, b->C_in, b->C_out, b->R, 2.0f, s);
}
struct swiglu_bench {
    uint16_t *gate, *up, *dh;
    float *mag, *n, *dm;
    void *ws;
    int N, F;
};
static void b_dora_swiglu(void *p, cudaStream_t s) {
    swiglu_bench *b = (swiglu_bench *)p;
    gpu_dora_swiglu_backward_bf16(b->gate, b->up, b->dm, b->dm, b->dh, nullptr, nullptr, DORA_SAVED_Y, b->mag, b->n,
                                  b->mag, b->n, b->N, b->F, b->ws, s);
}
static void b_plain_swiglu(void *p, cudaStream_t s) {
    swiglu_bench *b = (swiglu_bench *)p;
    gpu_swiglu_backward_bf16(b->gate, b->up, b->dh, b->gate, b->up, b->N, b->F, b->F, b->F, s);
}
static void b_rescale(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_dora_rescale_bf16(b->dys, b->dm, b->dy, b->z, DORA_SAVED_Z, b->mag, b->n, b->N, b->C_out, b->ws, s);
}
static void b_dora_bwd(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_dora_backward_bf16(g_gemm, b->dx, b->dm, b->dA, b->dB, b->dy, b->x, b->z, b->u, b->w, b->A, b->B, b->mag, b->n,
                           b->N, b->C_in, b->C_out, b->R, 2.0f, b->ws, s);
}
static void b_lora_bwd(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_linear_backward_dx_bf16(g_gemm, b->dx, b->dy, b->w, b->N, b->C_in, b->C_out, GEMM_OVERWRITE, s);
    gpu_lora_backward_bf16(g_gemm, b->dx, b->dA, b->dB, b->dy, b->x, nullptr, 1.0f, b->u, b->A, b->B, b->N, b->C_in,
                           b->C_out, b->R, 2.0f, b->ws, s);
}

static void *dev_fill(size_t bytes, int byte) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    CUDA_CHECK(cudaMemset(p, byte, bytes));
    return p;
}

static void bench(double copy_gbps) {
    struct shp {
        const char *name;
        int N, C_in, C_out;
    } shapes[] = {{"smollm2-135m q", 16384, 576, 576},
                  {"smollm2-135m gate_up", 16384, 576, 3072},
                  {"llama-3.2-1b q", 8192, 2048, 2048},
                  {"llama-3.2-1b gate_up", 8192, 2048, 16384},
                  {"llama-3.2-1b down", 8192, 8192, 2048}};
    for (const shp &sh : shapes) {
        const int R = 16;
        bench_ctx b;
        b.N = sh.N, b.C_in = sh.C_in, b.C_out = sh.C_out, b.R = R;
        const size_t nx = (size_t)sh.N * sh.C_in, ny = (size_t)sh.N * sh.C_out;
        b.x = (uint16_t *)dev_fill(nx * 2, 0x3C), b.dx = (uint16_t *)dev_fill(nx * 2, 0);
        b.y = (uint16_t *)dev_fill(ny * 2, 0x3C), b.z = (uint16_t *)dev_fill(ny * 2, 0x3C);
        b.dy = (uint16_t *)dev_fill(ny * 2, 0x3C), b.dys = (uint16_t *)dev_fill(ny * 2, 0);
        b.w = (uint16_t *)dev_fill((size_t)sh.C_out * sh.C_in * 2, 0x3C);
        b.A = (uint16_t *)dev_fill((size_t)R * sh.C_in * 2, 0x3C), b.B = (uint16_t *)dev_fill((size_t)sh.C_out * R * 2, 0x3C);
        b.u = (uint16_t *)dev_fill((size_t)sh.N * R * 2, 0);
        b.dA = (float *)dev_fill((size_t)R * sh.C_in * 4, 0), b.dB = (float *)dev_fill((size_t)sh.C_out * R * 4, 0);
        b.mag = (float *)dev_fill((size_t)sh.C_out * 4, 0x3F), b.n = (float *)dev_fill((size_t)sh.C_out * 4, 0x3F);
        b.wsq = (float *)dev_fill((size_t)sh.C_out * 4, 0x3F), b.dm = (float *)dev_fill((size_t)sh.C_out * 4, 0);
        const size_t wsb = std::max(std::max(gpu_dora_weight_norm_workspace_size(sh.C_out, R),
                                             gpu_dora_forward_workspace_size(sh.N, sh.C_out, R)),
                                    gpu_dora_backward_workspace_size(sh.N, sh.C_in, sh.C_out, R));
        b.ws = dev_fill(wsb, 0);
        gpu_dora_reserve(g_gemm, sh.N, sh.C_in, sh.C_out, R);
        const int plans = gpu_gemm_plan_count(g_gemm);
        char shape[128];
        snprintf(shape, sizeof shape, "%s N=%d C_in=%d C_out=%d R=%d", sh.name, sh.N, sh.C_in, sh.C_out, R);
        struct bench_result rn = bench_time(b_norm, &b, g_stream, 3, 15, 3);
        struct bench_result rdf = bench_time(b_dora_fwd, &b, g_stream, 3, 15, 3);
        struct bench_result rlf = bench_time(b_lora_fwd, &b, g_stream, 3, 15, 3);
        struct bench_result rr = bench_time(b_rescale, &b, g_stream, 3, 15, 3);
        struct bench_result rdb = bench_time(b_dora_bwd, &b, g_stream, 3, 15, 3);
        struct bench_result rlb = bench_time(b_lora_bwd, &b, g_stream, 3, 15, 3);
        /* gpu_dora_reserve saw every product of the DoRA calls: timing them created no plan */
        const int dora_plans = gpu_gemm_plan_count(g_gemm);
        printf("{\"op\":\"dora_reserve\",\"shape\":\"%s\",\"plans_created_while_timing\":%d}\n", shape,
               dora_plans - plans);
        /* row norm: reads W once (the W Aᵀ product dominates) */
        bench_json("dora_weight_norm", shape, 2.0 * sh.C_out * sh.C_in, 0, rn, copy_gbps);
        /* forward: u = x Aᵀ reads x (2 bytes an element of x), then the fused pass reads y and writes y and z
         * (6 bytes an element of y; s·u Bᵀ stays in registers at R ≤ 64) */
        bench_json("dora_forward", shape, 2.0 * nx + 6.0 * ny, 0, rdf, copy_gbps);
        /* rescale: reads dy and z, writes dy_s (6 bytes an element) */
        bench_json("dora_rescale", shape, 6.0 * ny, 0, rr, copy_gbps);
        bench_json("dora_backward_with_base_dx", shape, 0, 0, rdb, 0);
        if (strstr(sh.name, "gate_up")) { /* the MLP's SwiGLU backward with the gate/up rescale against the plain one */
            swiglu_bench sb = {b.y, b.y + (size_t)sh.N * (sh.C_out / 2), b.dy, b.mag, b.n, b.dm, nullptr, sh.N,
                               sh.C_out / 2};
            sb.ws = dev_fill(gpu_dora_swiglu_backward_workspace_size(sh.N, sb.F), 0);
            struct bench_result rs = bench_time(b_dora_swiglu, &sb, g_stream, 3, 15, 3);
            struct bench_result rp = bench_time(b_plain_swiglu, &sb, g_stream, 3, 15, 3);
            /* both read gate, up and dh and write gate and up: 10 bytes an element of (N, F) */
            char sw[160];
            snprintf(sw, sizeof sw, "%s N=%d F=%d", sh.name, sh.N, sb.F);
            bench_json("dora_swiglu_backward", sw, 10.0 * sh.N * sb.F, 0, rs, copy_gbps);
            bench_json("swiglu_backward", sw, 10.0 * sh.N * sb.F, 0, rp, copy_gbps);
            CUDA_CHECK(cudaFree(sb.ws));
        }
        printf("{\"op\":\"dora_vs_lora\",\"shape\":\"%s\",\"dora_fwd_ms\":%.4f,\"lora_fwd_ms\":%.4f,"
               "\"dora_bwd_ms\":%.4f,\"lora_bwd_with_base_dx_ms\":%.4f,\"row_norm_ms\":%.4f}\n",
               shape, rdf.median_ms, rlf.median_ms, rdb.median_ms, rlb.median_ms, rn.median_ms);
        for (void *q : {(void *)b.x, (void *)b.dx, (void *)b.y, (void *)b.z, (void *)b.dy, (void *)b.dys, (void *)b.w,
                        (void *)b.A, (void *)b.B, (void *)b.u, (void *)b.dA, (void *)b.dB, (void *)b.mag, (void *)b.n,
                        (void *)b.wsq, (void *)b.dm, b.ws})
            CUDA_CHECK(cudaFree(q));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261141);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    g_gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    const int shapes[][4] = {{1, 8, 8, 8},        {7, 33, 65, 8},     {65, 129, 127, 16}, {33, 255, 257, 64},
                             {9, 257, 7, 16},     {32, 576, 576, 8},  {32, 576, 1536, 16}, {16, 1536, 576, 64},
                             {8, 2048, 2048, 16}, {8, 2048, 512, 64}, {4, 2048, 8192, 16}, {4, 8192, 2048, 8},
                             /* the register-tile forward's edges: R not a multiple of 8 (element reads of
                              * u), R between the register widths, an odd C_out, an odd R; R > 64 takes the
                              * gemm path */
                             {70, 65, 66, 4},     {9, 129, 131, 24},  {40, 64, 64, 7},    {3, 65, 130, 128},
                             /* the tensor-core forward's: R not a multiple of 16 (zero k), several row
                              * steps with a partial last one, blocks with idle warps (C_out 96, 160) */
                             {5, 33, 64, 40},     {100, 64, 96, 6},   {33, 48, 160, 32}};
    int id = 0;
    for (const auto &s : shapes)
        for (int rg = 0; rg < 2; rg++) {
            dora_case c = {s[0], s[1], s[2], s[3], (regime)rg, id % 3 != 2};
            run_case(c, id++);
        }
    /* F % 8 with aligned buffers (8-wide) and not (element path); N past one and several 32-row chunks */
    const int sw[][5] = {{1, 8, 1, 1, 1},   {33, 24, 1, 1, 1},  {100, 1000, 1, 1, 1}, {70, 1001, 1, 1, 1},
                         {65, 256, 1, 0, 1}, {65, 256, 0, 1, 1}, {64, 512, 1, 1, 0},   {300, 8192, 1, 1, 1}};
    for (const auto &c : sw)
        for (int from_y = 0; from_y < 2; from_y++) swiglu_fused_case(c[0], c[1], c[2], c[3], c[4], from_y, id++);
    const int rc = test_finish("dora_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    free_gpu_gemm(g_gemm);
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
