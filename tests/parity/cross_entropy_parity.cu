/* cross_entropy_parity.cu — gpu/cross_entropy (lm_head + cross-entropy in row chunks) against
 * ref/linear (naive) and ref/cross_entropy.
 *
 *   bazel test --config=gpu //tests/parity:cross_entropy_parity
 *   cross_entropy_parity [--seed=N] [--bench]
 *
 * Shapes (N, C, V): (1, 8, 5), (7, 33, 1000), (33, 64, 4099: scalar path), (24, 576, 49152:
 * SmolLM2's vocabulary), (8, 256, 128256: Llama 3's), with rows_per_chunk 1, 5 and ≥ N on the
 * small ones (one chunk, several, a ragged last one) and 16 / 3 on the real ones. Labels uniform
 * in [0, V) with ~20% ignored (−100); n_valid_total = this call's count (the mean) or larger (other
 * micro-batches of the batch), grad_scale 1 or 0.5; one micro-batch with every label ignored
 * (zero loss, zero gradients) while the batch has valid labels elsewhere (a batch with none at all
 * is outside the contract: the caller skips it, and a draw that ignores every label of such a
 * batch gets its first label made valid).
 *
 * Inputs are chosen so that the logits are exact: h integers in [−4, 4], W integers in [−4, 4]
 * times 2^-6 (exact in bf16); every partial sum of z = h Wᵀ is a multiple of 2^-6 below 2^18, exact
 * in fp32 in any order, so the GPU's bf16 logits equal ref_linear_forward_naive's (ACT_BF16) bit
 * for bit. What is compared, with derived tolerances:
 *  - nll per row and dz (gpu_cross_entropy_rows_bf16_with on those logits, each of the two row
 *    kernels the device runs for V, see gpu/cross_entropy.h) against ref/cross_entropy, with
 *    |Δlse| ≤ e, u = 2^-24, D the kernel's summation depth (gpu_cross_entropy_rows_plan):
 *      STREAM: an fp32 sum of V terms in [0, 1] (≤ V/512 + 9 additions deep: 512 threads, then a
 *        9-level tree) plus expf/logf (≤ 2 ulp each): e = (V/512 + 16)·u·(1 + |max z|).
 *      ONCHIP: each term q = exp2f(fl(fl(z − M)·fl(log2 e))): z − M and the product each round
 *        (≤ u relative, the constant ≤ u more), so q is off by ≤ 3u·|z − M| ≤ 6u·|max z| plus
 *        exp2f's 2 ulp (≤ 4u); S = Σ q (positive terms, depth D) ≤ (D + 4)u + 6u·|max z|
 *        relative; logf(S) ≤ 1 ulp ≤ 2u·ln V; lse = M + log S rounds once (≤ u·(|max z| + ln V)):
 *        e = (D + 4 + 3·ln V + 7·|max z|)·u.
 *    nll = lse − z_y rounds once more (in the k·eps·|nll| part): k = 2, eps = FLT_EPSILON,
 *    floor = e/(2·FLT_EPSILON). dz: a term's relative error is ≪ BF16_EPS, then bf16 rounding on
 *    both sides: k = 2, eps = BF16_EPS, floor = e·mult/(2·BF16_EPS) (the label entry p − 1
 *    cancels; p is off by ≤ p·e). |max z| is over the finite logits (an infinite one gives an
 *    exact 0 or a NaN on both sides). Each kernel also runs a second time in place (dz = z):
 *    nll and dz must be the same bits (deterministic, and the in-place aliasing of the fused call).
 *  - Edge rows on the row kernels alone, V = 5, 1003, 4096, 40001, 65544, 200000 (vector and
 *    scalar paths, 1 to 8 CTAs a row, a slice over 48 KiB): rows all −inf (NaN, as torch), all −inf
 *    and ignored (zeros), a third −inf with the label on one (nll +inf), logits near −10^3 and
 *    a single +512 (shift invariance; p = 1 in fp32), all equal (p = 1/V); and ±3.3·10^38 rows
 *    (the shifts overflow to −inf: only the Inf/NaN pattern is meaningful there).
 *  - loss: the mean of the nll, each off by ≤ e (AUTO's kernel): k = 2, eps = FLT_EPSILON,
 *    floor e/(2·FLT_EPSILON).
 *  - dh and dW from the fused call against ref_linear_backward_naive fed with the GPU's own dz
 *    (the fused call's dz is the same kernel on the same exact logits): dh (bf16) as the GEMM
 *    test's bf16 rule, dW (fp32, accumulated onto random values chunk by chunk) vs a naive fp32
 *    version of the same chunked accumulation (tier c).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cross_entropy.h"
#include "gpu/cuda_check.h"
#include "gpu/gemm.h"
#include "ref/bf16.h"
#include "ref/cross_entropy.h"
#include "ref/linear.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;
static struct gpu_gemm *g_gemm;

/* The reference on fp32 logits (bf16 values): per-row nll (from ref's lse), the loss and dz. */
static float oracle(std::vector<float> &nll, std::vector<float> &dz, const std::vector<float> &z,
                    const std::vector<int32_t> &labels, int N, int V, int64_t n_valid_total, float grad_scale) {
    std::vector<float> lse(N);
    nll.resize(N);
    dz.resize((size_t)N * V);
    double loss = 0.0;
    ref_cross_entropy_forward(&loss, lse.data(), z.data(), labels.data(), N, V, n_valid_total);
    for (int n = 0; n < N; n++)
        nll[n] = labels[n] == REF_IGNORE_INDEX ? 0.0f : (float)((double)lse[n] - z[(size_t)n * V + labels[n]]);
    ref_cross_entropy_backward(dz.data(), z.data(), labels.data(), N, V, n_valid_total, grad_scale, ACT_BF16);
    return (float)loss;
}

/* e (see the header) for the kernel of plan p; max_z over the finite logits. */
static double lse_bound(const struct gpu_ce_rows_plan &p, int V, double max_z) {
    const double u = ldexp(1.0, -24);
    if (p.kernel == CE_ROWS_STREAM) return ((double)V / 512.0 + 16.0) * u * (1.0 + max_z);
    return ((double)p.sum_depth + 4.0 + 3.0 * log((double)V) + 7.0 * max_z) * u;
}

static double max_abs_finite(const std::vector<float> &z) {
    double m = 0;
    for (float x : z)
        if (isfinite(x)) m = fmax(m, fabs(x));
    return m;
}

/* The row kernels (each one the device has for V) on logits z against the oracle's nll_r, dz_r;
 * then again in place, which must give the same bits. Returns the AUTO kernel's e. */
static double check_rows(const char *shape, uint64_t seed, const std::vector<float> &z,
                         const std::vector<int32_t> &labels, int N, int V, float mult, const std::vector<float> &nll_r,
                         const std::vector<float> &dz_r) {
    const double max_z = max_abs_finite(z);
    std::vector<uint16_t> zb(z.size());
    for (size_t i = 0; i < z.size(); i++) zb[i] = bf16_from_float(z[i]);
    struct dev_buf blab, bz, bnll, bdz, bnll2;
    dev_buf_alloc(&blab, "labels", (size_t)N * 4, POISON_NONE, labels.data());
    dev_buf_alloc(&bz, "z", zb.size() * 2, POISON_NONE, zb.data());
    dev_buf_alloc(&bnll, "nll", (size_t)N * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bdz, "dz", zb.size() * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bnll2, "nll_inplace", (size_t)N * 4, POISON_F32, nullptr);
    double e_auto = 0;
    const struct gpu_ce_rows_plan auto_plan = gpu_cross_entropy_rows_plan(V, CE_ROWS_AUTO);
    for (enum ce_rows_kernel want : {CE_ROWS_ONCHIP, CE_ROWS_STREAM}) {
        const struct gpu_ce_rows_plan p = gpu_cross_entropy_rows_plan(V, want);
        if (p.kernel != want) continue; /* the row does not fit on chip here: AUTO is STREAM */
        const double e = lse_bound(p, V, max_z);
        if (p.kernel == auto_plan.kernel) e_auto = e;
        char what[160];
        snprintf(what, sizeof what, "%s %s ctas=%d slice=%d depth=%d e=%.3g", shape,
                 p.kernel == CE_ROWS_ONCHIP ? "onchip" : "stream", p.ctas_per_row, p.slice, p.sum_depth, e);
        dev_buf_reset(&bnll, nullptr);
        dev_buf_reset(&bdz, nullptr);
        dev_buf_reset(&bnll2, nullptr);
        dev_buf_reset(&bz, zb.data());
        gpu_cross_entropy_rows_bf16_with((float *)bnll.data, (uint16_t *)bdz.data, (const uint16_t *)bz.data,
                                         (const int32_t *)blab.data, N, V, mult, p.kernel, g_stream);
        std::vector<float> nll_g(N), dz_g(z.size()), nll_g2(N);
        std::vector<uint16_t> dzb(z.size()), dzb2(z.size());
        dev_buf_download(&bnll, nll_g.data(), 1);
        dev_buf_download(&bdz, dzb.data(), 1);
        for (size_t i = 0; i < z.size(); i++) dz_g[i] = bf16_to_float(dzb[i]);
        struct cmp_case cc = {"cross_entropy_rows", "nll", what, "f32", seed};
        cmp_elementwise(&cc, nll_g.data(), nll_r.data(), N, FLT_EPSILON, 2.0, e / (2.0 * FLT_EPSILON), nullptr);
        cc.what = "dz";
        cc.dtype = "bf16";
        cmp_elementwise(&cc, dz_g.data(), dz_r.data(), (int64_t)z.size(), BF16_EPS, 2.0,
                        e * fabs(mult) / (2.0 * BF16_EPS), nullptr);
        /* in place, as the fused call runs it: the same bits */
        gpu_cross_entropy_rows_bf16_with((float *)bnll2.data, (uint16_t *)bz.data, (const uint16_t *)bz.data,
                                         (const int32_t *)blab.data, N, V, mult, p.kernel, g_stream);
        dev_buf_download(&bnll2, nll_g2.data(), 1);
        dev_buf_download(&bz, dzb2.data(), 0);
        cc.what = "nll (in place, rerun)";
        cc.dtype = "f32";
        cmp_exact_bytes(&cc, nll_g2.data(), nll_g.data(), (size_t)N * 4);
        cc.what = "dz (in place, rerun)";
        cc.dtype = "bf16";
        cmp_exact_bytes(&cc, dzb2.data(), dzb.data(), dzb.size() * 2);
    }
    for (struct dev_buf *b : {&blab, &bz, &bnll, &bdz, &bnll2}) dev_buf_free(b);
    return e_auto;
}

/* Edge rows (see the header) for one V; `extreme` selects the ±3.3·10^38 rows. */
static void run_edge_case(int V, int extreme, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const float big = ldexpf(1.0f, 127) * 1.9921875f; /* the largest finite bf16, 2^127·(2 − 2^-7) */
    const int N = extreme ? 3 : 8;
    std::vector<float> z((size_t)N * V);
    std::vector<int32_t> labels(N);
    rng_fill_int(&r, z.data(), (int64_t)z.size(), -8, 8);
    for (int n = 0; n < N; n++) labels[n] = rng_int(&r, V);
    auto row = [&](int n) { return z.data() + (size_t)n * V; };
    if (!extreme) {
        for (int v = 0; v < V; v++) row(1)[v] = row(2)[v] = -INFINITY; /* all −inf: NaN; ignored: 0 */
        labels[2] = REF_IGNORE_INDEX;
        for (int v = 0; v < V; v += 3) row(3)[v] = -INFINITY; /* the label on a −inf: nll +inf */
        labels[3] = 0;
        for (int v = 0; v < V; v++) row(4)[v] = -992.0f + 4.0f * row(4)[v]; /* near −10^3, bf16-exact */
        for (int v = 0; v < V; v++) row(5)[v] = 3.0f;                        /* p = 1/V */
        row(6)[V / 2] = 512.0f; /* p = 1 at the label in fp32, exp(−504) or less elsewhere */
        labels[6] = V / 2;
        labels[7] = REF_IGNORE_INDEX; /* an ordinary ignored row */
    } else {
        for (int v = 0; v < V; v++) row(0)[v] = (v & 1) ? big : -big; /* the label on a −big: nll +inf */
        labels[0] = 0;
        for (int v = 0; v < V; v++) row(1)[v] = -big; /* all equal: p = 1/V */
        row(2)[V - 1] = big;
        labels[2] = V - 1;
    }
    const int64_t n_valid = ref_cross_entropy_count_valid(labels.data(), N);
    std::vector<float> nll_r, dz_r;
    oracle(nll_r, dz_r, z, labels, N, V, n_valid, 1.0f);
    char shape[96];
    snprintf(shape, sizeof shape, "edge%s N=%d V=%d", extreme ? " (±3.3e38)" : "", N, V);
    check_rows(shape, seed, z, labels, N, V, (float)(1.0 / (double)n_valid), nll_r, dz_r);
}

static void run_case(int N, int C, int V, int rows_per_chunk, int extra_valid, float grad_scale, int all_ignored, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[128];
    snprintf(shape, sizeof shape, "N=%d C=%d V=%d chunk=%d valid+%d grad_scale=%g%s", N, C, V, rows_per_chunk,
             extra_valid, (double)grad_scale, all_ignored ? " all-ignored" : "");
    std::vector<float> h((size_t)N * C), w((size_t)V * C), dw0((size_t)V * C);
    rng_fill_int(&r, h.data(), (int64_t)h.size(), -4, 4);
    rng_fill_int(&r, w.data(), (int64_t)w.size(), -4, 4);
    for (float &x : w) x = ldexpf(x, -6);
    rng_fill_normal(&r, dw0.data(), (int64_t)dw0.size(), 0.0, 1.0);
    std::vector<int32_t> labels(N);
    for (int n = 0; n < N; n++) labels[n] = (all_ignored || rng_int(&r, 5) == 0) ? REF_IGNORE_INDEX : rng_int(&r, V);
    /* A whole batch without a valid label (n_valid_total = 0) is outside both contracts
     * (gpu/cross_entropy.h and ref/cross_entropy.h CHECK n_valid_total >= 1: the loss would be 0/0,
     * and the caller skips such a batch). The random draw can produce one (N = 1, or every row
     * ignored by chance) when no other micro-batch adds valid labels: make the first label valid. */
    if (extra_valid == 0 && ref_cross_entropy_count_valid(labels.data(), N) == 0) {
        EXPECT(!all_ignored, "an all-ignored micro-batch needs valid labels elsewhere in the batch");
        labels[0] = rng_int(&r, V);
    }

    std::vector<float> z((size_t)N * V), nll_r, dz_r;
    ref_linear_forward_naive(z.data(), h.data(), w.data(), nullptr, N, C, V, ACT_BF16);
    /* n_valid_total: this call's valid labels plus those of other micro-batches of the batch */
    const int64_t n_valid_total = ref_cross_entropy_count_valid(labels.data(), N) + extra_valid;
    const float loss_r = oracle(nll_r, dz_r, z, labels, N, V, n_valid_total, grad_scale);
    const float mult = (float)((double)grad_scale / (double)n_valid_total);

    std::vector<uint16_t> hb(h.size()), wb(w.size()), zb(z.size());
    for (size_t i = 0; i < h.size(); i++) hb[i] = bf16_from_float(h[i]);
    for (size_t i = 0; i < w.size(); i++) wb[i] = bf16_from_float(w[i]);
    for (size_t i = 0; i < z.size(); i++) zb[i] = bf16_from_float(z[i]);
    struct dev_buf bh, bw, blab, bz, bnll, bloss, bdh, bdw, bws;
    dev_buf_alloc(&bh, "h", hb.size() * 2, POISON_NONE, hb.data());
    dev_buf_alloc(&bw, "w", wb.size() * 2, POISON_NONE, wb.data());
    dev_buf_alloc(&blab, "labels", (size_t)N * 4, POISON_NONE, labels.data());
    dev_buf_alloc(&bz, "z", zb.size() * 2, POISON_NONE, zb.data());
    dev_buf_alloc(&bnll, "nll", (size_t)N * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bloss, "loss", 4, POISON_F32, nullptr);
    dev_buf_alloc(&bdh, "dh", hb.size() * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdw, "dw", dw0.size() * 4, POISON_NONE, dw0.data());
    const size_t ws = gpu_lm_head_ce_workspace_size(N, V, rows_per_chunk);
    dev_buf_alloc(&bws, "workspace", ws, POISON_NONE, nullptr);

    /* (1) the softmax/loss rows on the exact logits, each row kernel */
    const double e = check_rows(shape, seed, z, labels, N, V, mult, nll_r, dz_r);
    /* (2) the fused lm_head + loss + backward (the AUTO row kernel) */
    gpu_lm_head_cross_entropy_bf16((float *)bloss.data, (uint16_t *)bdh.data, bdw.data, GEMM_OUT_F32,
                                   (const uint16_t *)bh.data, (const uint16_t *)bw.data, (const int32_t *)blab.data, N,
                                   C, V, n_valid_total, grad_scale, rows_per_chunk, g_gemm, bws.data, g_stream);
    std::vector<float> loss_g(1), dw_g(dw0.size()), dz_g(z.size()), dh_g(h.size());
    std::vector<uint16_t> dzb(z.size()), dhb(h.size());
    /* the GPU's dz of the AUTO kernel, for the dh/dW oracle */
    struct dev_buf bdz;
    dev_buf_alloc(&bdz, "dz", zb.size() * 2, POISON_BF16, nullptr);
    gpu_cross_entropy_rows_bf16((float *)bnll.data, (uint16_t *)bdz.data, (const uint16_t *)bz.data,
                                (const int32_t *)blab.data, N, V, mult, g_stream);
    dev_buf_download(&bdz, dzb.data(), 1);
    dev_buf_download(&bloss, loss_g.data(), 1);
    dev_buf_download(&bdh, dhb.data(), 1);
    dev_buf_download(&bdw, dw_g.data(), 0);
    for (struct dev_buf *b : {&bh, &bw, &blab, &bz}) {
        std::vector<unsigned char> tmp(b->nbytes);
        dev_buf_download(b, tmp.data(), 0);
    }
    for (size_t i = 0; i < z.size(); i++) dz_g[i] = bf16_to_float(dzb[i]);
    for (size_t i = 0; i < h.size(); i++) dh_g[i] = bf16_to_float(dhb[i]);

    struct cmp_case cc = {"lm_head_cross_entropy", "loss", shape, "f32", seed};
    cc.dtype = "f32";
    cmp_elementwise(&cc, loss_g.data(), &loss_r, 1, FLT_EPSILON, 2.0, e / (2.0 * FLT_EPSILON), nullptr);

    /* dh, dW: the oracle's GEMMs on the GPU's dz; the naive fp32 products for the vs-naive rule. */
    std::vector<float> dh_r(h.size()), dw_r(dw0), dh_naive(h.size()), dw_naive(dw0);
    ref_linear_backward_naive(dh_r.data(), dw_r.data(), nullptr, dz_g.data(), h.data(), w.data(), N, C, V, ACT_F32);
    double e_dh = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int v = 0; v < V; v++) s += dz_g[(size_t)n * V + v] * w[(size_t)v * C + c];
            dh_naive[(size_t)n * C + c] = s;
            e_dh = fmax(e_dh, fabs((double)s - dh_r[(size_t)n * C + c]));
        }
    /* dW accumulates chunk by chunk (one fp32 add into dW per chunk of rows_per_chunk rows), so the
     * naive same-precision version does the same: a sequential fp32 sum per chunk, then the add. */
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            float acc = dw0[(size_t)v * C + c];
            for (int r0 = 0; r0 < N; r0 += rows_per_chunk) {
                float s = 0.0f;
                for (int n = r0; n < N && n < r0 + rows_per_chunk; n++) s += dz_g[(size_t)n * V + v] * h[(size_t)n * C + c];
                acc += s;
            }
            dw_naive[(size_t)v * C + c] = acc;
        }
    std::vector<float> dh_rb(h.size());
    for (size_t i = 0; i < h.size(); i++) dh_rb[i] = bf16_round(dh_r[i]);
    cc.what = "dh";
    cc.dtype = "bf16";
    cmp_elementwise(&cc, dh_g.data(), dh_rb.data(), (int64_t)h.size(), BF16_EPS, 2.0, 2.0 * e_dh / (2.0 * BF16_EPS),
                    nullptr);
    cc.what = "dw";
    cc.dtype = "f32";
    cmp_vs_naive(&cc, dw_g.data(), dw_naive.data(), dw_r.data(), (int64_t)dw0.size(), 2.0,
                 FLT_EPSILON * cmp_rms(dw_r.data(), (int64_t)dw0.size()), nullptr);

    /* dW into a bf16 accumulator (NUMERICS.md §5.6): each chunk's product added and rounded once.
     * The same-precision naive version rounds at the same places: acc = bf16(acc + s_chunk). */
    {
        std::vector<uint16_t> dw0b(dw0.size()), dwb(dw0.size());
        std::vector<float> start(dw0.size()), dw16_r(dw0.size()), dw16_naive(dw0.size()), dw16_g(dw0.size());
        for (size_t i = 0; i < dw0.size(); i++) dw0b[i] = bf16_from_float(dw0[i]), start[i] = bf16_to_float(dw0b[i]);
        dw16_r = start;
        ref_linear_backward_naive(nullptr, dw16_r.data(), nullptr, dz_g.data(), h.data(), w.data(), N, C, V, ACT_F32);
        for (int v = 0; v < V; v++)
            for (int c = 0; c < C; c++) {
                float acc = start[(size_t)v * C + c];
                for (int r0 = 0; r0 < N; r0 += rows_per_chunk) {
                    float s = 0.0f;
                    for (int n = r0; n < N && n < r0 + rows_per_chunk; n++)
                        s += dz_g[(size_t)n * V + v] * h[(size_t)n * C + c];
                    acc = bf16_round(acc + s);
                }
                dw16_naive[(size_t)v * C + c] = acc;
            }
        struct dev_buf bdw16;
        dev_buf_alloc(&bdw16, "dw bf16", dw0b.size() * 2, POISON_NONE, dw0b.data());
        gpu_lm_head_cross_entropy_bf16((float *)bloss.data, (uint16_t *)bdh.data, bdw16.data, GEMM_OUT_BF16,
                                       (const uint16_t *)bh.data, (const uint16_t *)bw.data, (const int32_t *)blab.data,
                                       N, C, V, n_valid_total, grad_scale, rows_per_chunk, g_gemm, bws.data, g_stream);
        dev_buf_download(&bdw16, dwb.data(), 0);
        for (size_t i = 0; i < dwb.size(); i++) dw16_g[i] = bf16_to_float(dwb[i]);
        cc.what = "dw (bf16 accumulator)";
        cc.dtype = "bf16";
        cmp_vs_naive(&cc, dw16_g.data(), dw16_naive.data(), dw16_r.data(), (int64_t)dw0.size(), 2.0,
                     BF16_EPS * cmp_rms(dw16_r.data(), (int64_t)dw0.size()), nullptr);
        dev_buf_free(&bdw16);
    }
    for (struct dev_buf *b : {&bh, &bw, &blab, &bz, &bnll, &bdz, &bloss, &bdh, &bdw, &bws}) dev_buf_free(b);
}

struct bench_ctx {
    int N, C, V, R, which;
    uint16_t *h, *w, *dh, *z;
    float *dw, *loss, *nll;
    int32_t *labels;
    void *ws;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    if (b->which == 0)
        gpu_cross_entropy_rows_bf16(b->nll, b->z, b->z, b->labels, b->R, b->V, 1.0f / b->N, s);
    else if (b->which == 3)
        gpu_cross_entropy_rows_bf16_with(b->nll, b->z, b->z, b->labels, b->R, b->V, 1.0f / b->N, CE_ROWS_STREAM, s);
    else
        gpu_lm_head_cross_entropy_bf16(b->loss, b->dh, b->which == 2 ? b->dw : nullptr, GEMM_OUT_F32, b->h, b->w, b->labels, b->N,
                                       b->C, b->V, b->N, 1.0f, b->R, g_gemm, b->ws, s);
}

static void bench(double ceiling) {
    const int shapes[][4] = {{16384, 576, 49152, 4096}, {8192, 2048, 128256, 2048}, {8192, 4096, 128256, 2048}};
    for (auto &sh : shapes) {
        bench_ctx b;
        memset(&b, 0, sizeof b);
        b.N = sh[0], b.C = sh[1], b.V = sh[2], b.R = sh[3];
        std::vector<int32_t> labels(b.N);
        struct rng r;
        rng_init(&r, g_seed);
        for (int32_t &x : labels) x = rng_int(&r, b.V);
        CUDA_CHECK(cudaMalloc(&b.h, (size_t)b.N * b.C * 2));
        CUDA_CHECK(cudaMalloc(&b.dh, (size_t)b.N * b.C * 2));
        CUDA_CHECK(cudaMalloc(&b.w, (size_t)b.V * b.C * 2));
        CUDA_CHECK(cudaMalloc(&b.dw, (size_t)b.V * b.C * 4));
        CUDA_CHECK(cudaMalloc(&b.z, (size_t)b.R * b.V * 2));
        CUDA_CHECK(cudaMalloc(&b.loss, 4));
        CUDA_CHECK(cudaMalloc(&b.nll, (size_t)b.N * 4));
        CUDA_CHECK(cudaMalloc(&b.labels, (size_t)b.N * 4));
        CUDA_CHECK(cudaMalloc(&b.ws, gpu_lm_head_ce_workspace_size(b.N, b.V, b.R)));
        CUDA_CHECK(cudaMemset(b.h, 0x3C, (size_t)b.N * b.C * 2));
        CUDA_CHECK(cudaMemset(b.w, 0x3C, (size_t)b.V * b.C * 2));
        CUDA_CHECK(cudaMemset(b.z, 0x3F, (size_t)b.R * b.V * 2));
        CUDA_CHECK(cudaMemset(b.dw, 0, (size_t)b.V * b.C * 4));
        CUDA_CHECK(cudaMemcpy(b.labels, labels.data(), (size_t)b.N * 4, cudaMemcpyHostToDevice));
        char shape[160];
        const struct gpu_ce_rows_plan p = gpu_cross_entropy_rows_plan(b.V, CE_ROWS_AUTO);
        snprintf(shape, sizeof shape, "N=%d C=%d V=%d chunk=%d kernel=%s ctas=%d slice=%d", b.N, b.C, b.V, b.R,
                 p.kernel == CE_ROWS_ONCHIP ? "onchip" : "stream", p.ctas_per_row, p.slice);
        b.which = 0;
        /* the softmax pass alone over one chunk: read z twice is not required, once is: 2 + 2 bytes */
        bench_json("cross_entropy_rows", shape, 4.0 * b.R * b.V, 0, bench_time(bench_call, &b, g_stream, 3, 15, 3),
                   ceiling);
        /* the streaming kernel on the same rows, same byte count (it moves 6 when the row leaves L2) */
        b.which = 3;
        bench_json("cross_entropy_rows_stream", shape, 4.0 * b.R * b.V, 0,
                   bench_time(bench_call, &b, g_stream, 3, 15, 3), ceiling);
        snprintf(shape, sizeof shape, "N=%d C=%d V=%d chunk=%d", b.N, b.C, b.V, b.R);
        /* fused: 2 GEMMs (forward, dh) or 3 (with dW), each 2·N·C·V FLOPs; % of the 800 TF ceiling */
        const double f = 2.0 * b.N * (double)b.C * b.V;
        b.which = 1;
        bench_json("lm_head_ce_fwd_dh", shape, 0, 2 * f, bench_time(bench_call, &b, g_stream, 2, 7, 1), 800.0);
        b.which = 2;
        bench_json("lm_head_ce_fwd_dh_dw", shape, 0, 3 * f, bench_time(bench_call, &b, g_stream, 2, 7, 1), 800.0);
        for (void *p : {(void *)b.h, (void *)b.dh, (void *)b.w, (void *)b.dw, (void *)b.z, (void *)b.loss, (void *)b.nll,
                        (void *)b.labels, b.ws})
            CUDA_CHECK(cudaFree(p));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261129);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    g_gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    int id = 0;
    const int cases[][3] = {{1, 8, 5}, {7, 33, 1000}, {33, 64, 4099}};
    for (auto &c : cases)
        for (int R : {1, 5, 1 << 20}) run_case(c[0], c[1], c[2], R, 0, 1.0f, 0, id++);
    /* the real vocabularies, once each (the naive oracle costs N·C·V per product) */
    run_case(24, 576, 49152, 16, 0, 1.0f, 0, id++);
    run_case(8, 256, 128256, 3, 0, 1.0f, 0, id++);
    /* gradient accumulation: the batch has valid labels beyond this call's; an upstream scale */
    run_case(7, 33, 1000, 3, 17, 0.5f, 0, id++);
    run_case(24, 576, 49152, 16, 100, 1.0f, 0, id++);
    /* every label of this micro-batch ignored (others of the batch are not): zero loss and grads */
    run_case(5, 16, 100, 2, 9, 1.0f, 1, id++);
    /* edge rows on the row kernels: vector and scalar paths, 1 to 8 CTAs a row, a slice > 48 KiB */
    for (int V : {5, 1003, 4096, 40001, 65544, 200000}) run_edge_case(V, 0, id++);
    for (int V : {1003, 65544}) run_edge_case(V, 1, id++);
    const int rc = test_finish("cross_entropy_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    free_gpu_gemm(g_gemm);
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
