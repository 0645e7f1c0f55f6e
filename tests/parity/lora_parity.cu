/* lora_parity.cu — gpu/lora (the LoRA adapter's products through gpu/gemm) against ref/lora.h.
 *
 *   bazel test --config=gpu //tests/parity:lora_parity
 *   lora_parity [--seed=N] [--bench]
 *
 * What is covered: forward (u, y += s·u Bᵀ) and backward (dB, dA accumulated onto old values,
 * dx accumulated onto the base layer's dx), with and without a dropout mask, at tile edges
 * (N, C_in, C_out ∈ {1, 7, 8, 33, 65, 127, 129, 255, 257}), at the real shapes of SmolLM2-135M
 * (C 576, F 1536, fused QKV 960) and Llama-3.2-1B (C 2048, KV 512, F 8192), R ∈ {6, 7, 8, 16, 24, 64,
 * 128}, rows mostly a few dozen (the oracle is plain loops; the bench runs N = 8192) and 300 to 2100
 * in a few cases, where dB and dA sum over as many rows as in training. The overwritten output
 * u is poisoned and must be written entirely; every buffer has guard regions; the whole
 * forward + backward is run twice and must give the same bits; an Inf planted in x must make the
 * same positions non-finite as in the reference. The grouped adapters (gpu_lora_group_*: q/k/v and
 * gate/up shapes, odd sizes, LORA_GROUP_MAX members) against the same oracle run member by member,
 * with NULL outputs skipped: see run_group_case. The folded groups (gpu_lora_group_fold_u_bf16,
 * gpu_lora_fold_b_bf16, the members' base products over [x | u] at padded row strides, the backward
 * at those strides, and the folded backward — the base products' dx_f carrying du in its adapter
 * columns, then gpu_lora_group_fold_backward_bf16 — against the unfolded path) on SmolLM2's and
 * Llama-3.2-1B's q/k/v and gate/up shapes and odd ones: see run_fold_case. The down projection's
 * backward joined to SwiGLU's (gpu_lora_backward_swiglu_bf16) bit for bit the two passes it
 * replaces: see run_joined_case.
 *
 * Tolerances (derived; STYLE.md tiers):
 *  (a) exact — inputs are sparse small integers (zero with probability 3/4 — B: 1 − 64/C_out when
 *      larger — else ±1 or ±2; exact in bf16), s ∈ {0.5, 2} and the dropout scale 2 (p = 0.5) are powers of two, old gradients
 *      are integers. Every fp32 sum is then exact in any order (|sums| ≪ 2^24), s multiplies
 *      exactly, and both sides round the same exact values to bf16 at the same points (u, y, dx).
 *      The one extra GPU rounding is du → bf16; the test checks on the reference's own du (its
 *      workspace) that every value is exactly representable in bf16 (sparse inputs keep |du| far
 *      below 256), so u, y, dx, dA, dB must agree bit for bit.
 *  (c) vs naive — normal-valued inputs (bf16-rounded), s = α/√R (rsLoRA: not a power of two),
 *      dropout p = 0.1: the error against ref/lora.h (double sums; ACT_BF16) of each bf16 output
 *      (u, y, dx) is at most 2× that of a naive same-precision implementation of the GPU's algorithm
 *      (sequential fp32 sums, u and du rounded to bf16, s applied to the fp32 sum), plus one
 *      rounding of the result at the rms of the reference (BF16_EPS·rms), since either side may
 *      round a value in the other direction once; u's flips above the rms are set aside where the
 *      exact sum lies within the fp32 sum's error of the boundary (allow_u_flips).
 *  (b) the fp32 gradients dB and dA, sums over N rows: gemm_parity's derived elementwise bound
 *      against a double reference from the GPU's own u and du (check_reduction) — the vs-naive
 *      rule does not bound cuBLASLt's order over long sums.
 *  determinism — bitwise, the same inputs twice (cuBLASLt's plan is fixed per shape).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/gemm.h"
#include "gpu/lora.h"
#include "gpu/swiglu.h"
#include "ref/bf16.h"
#include "ref/lora.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;
static struct gpu_gemm *g_gemm;

enum regime { EXACT = 0, NORMAL = 1 };

/* EXACT: nonzero with probability `density`, then ±1 or ±2. NORMAL: normal(0, std) rounded to bf16. */
static void fill(struct rng *r, std::vector<float> &v, enum regime rg, double std, double density = 0.25) {
    if (rg == EXACT) {
        for (float &x : v) {
            const int k = rng_int(r, 4);
            x = rng_uniform(r) >= density ? 0.0f : (float)(k == 0 ? -1 : k == 1 ? 1 : k == 2 ? -2 : 2);
        }
    } else {
        rng_fill_normal(r, v.data(), (int64_t)v.size(), 0.0, std);
        for (float &x : v) x = bf16_round(x);
    }
}

struct lora_case {
    int N, C_in, C_out, R;
    enum regime rg;
    int dropout;
};

/* The adapter gradients dB += s·dyᵀu and dA += duᵀx_a (NORMAL regime) are fp32 sums over the N
 * rows, cuBLASLt's order: a vs-naive rule against a sequential fp32 sum does not bound them (as
 * gemm_parity found at k = 2048; here cuBLASLt's dB measured 114–159% of that budget at N = 777 and
 * 1000), so they take gemm_parity's derived rule. Each partial sum errs by at most one fp32 ulp
 * per addition, |Δ| ≤ K·FLT_EPSILON·Σ|terms| in any order or split; with S the largest
 * |s|·Σ_n |p·q| over the elements (double) and two more fp32 operations (s times the sum, the add
 * onto the old value), E = (N + 2)·FLT_EPSILON·S; then |got − ref| ≤ E plus one fp32 ulp of |ref|
 * (cmp_elementwise with k = 2, eps = FLT_EPSILON, floor = E/(2·FLT_EPSILON)). The reference is
 * formed in double from the GPU's own bf16 operands (its u for dB, its du for dA), so the check
 * measures this product, not the roundings of u and du before it (each has its own check).
 *   out[m·R + r] = old + s·Σ_n p[n·ldp + m]·q[n·ldq + r]  (dA: p = du, q = x_a; dB: p = dy, q = u) */
static void check_reduction(const struct cmp_case *cc, const std::vector<float> &got, const std::vector<float> &old,
                            const float *p, int ldp, const float *q, int ldq, int N, int M, int R, double s) {
    std::vector<double> sum((size_t)M * R, 0.0), mag((size_t)M * R, 0.0);
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) {
            const double pv = p[(size_t)n * ldp + m];
            if (pv == 0.0) continue;
            for (int r = 0; r < R; r++) {
                const double t = pv * q[(size_t)n * ldq + r];
                sum[(size_t)m * R + r] += t, mag[(size_t)m * R + r] += fabs(t);
            }
        }
    std::vector<float> ref(got.size());
    double S = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        ref[i] = (float)((double)old[i] + s * sum[i]);
        S = fmax(S, fabs(s) * mag[i]);
    }
    const double E = (N + 2.0) * FLT_EPSILON * S;
    cmp_elementwise(cc, got.data(), ref.data(), (int64_t)ref.size(), FLT_EPSILON, 2.0, E / (2.0 * FLT_EPSILON), nullptr);
}

/* u = x_a Aᵀ's bf16 rounding flips (NORMAL regime). The tier's floor is one rounding at the rms,
 * but an element above the rms whose exact sum lies near a rounding boundary may round either way
 * after a correct fp32 sum in another order (the tensor cores accumulate with truncation): with
 * thousands of elements some do. An element of got one bf16 step from ref, with the exact sum
 * (double) within the fp32 sum's error bound of the boundary between them — K·FLT_EPSILON·Σ|terms|,
 * as above — is a correct rounding either way: it takes ref's value before the tier. A wrong
 * rounding mode of the final conversion still fails: its flips fall anywhere between the two
 * neighbours, mostly outside that band. x_a (N, C_in), A (R, C_in); got and ref (N, R). */
static std::vector<float> allow_u_flips(const std::vector<float> &got, const std::vector<float> &ref,
                                        const std::vector<float> &xa, const float *A, int N, int C_in, int R) {
    std::vector<float> adj(got);
    for (int n = 0; n < N; n++)
        for (int r = 0; r < R; r++) {
            const size_t e = (size_t)n * R + r;
            const float g = got[e], f = ref[e];
            if (!isfinite(f) || !isfinite(g) || g == f) continue;
            const uint16_t hg = bf16_from_float(g), hf = bf16_from_float(f);
            if (bf16_to_float(hg) != g || ((hg ^ hf) & 0x8000) || (hg - hf != 1 && hf - hg != 1)) continue;
            double exact = 0, mag = 0;
            for (int k = 0; k < C_in; k++) {
                const double t = (double)xa[(size_t)n * C_in + k] * A[(size_t)r * C_in + k];
                exact += t, mag += fabs(t);
            }
            if (fabs(exact - 0.5 * ((double)g + (double)f)) <= (double)C_in * FLT_EPSILON * mag) adj[e] = f;
        }
    return adj;
}

/* The GPU's du: its first count bf16 values of the backward's workspace (a downloaded image). */
static std::vector<float> workspace_du(const std::vector<unsigned char> &ws, size_t count) {
    std::vector<uint16_t> h(count);
    memcpy(h.data(), ws.data(), count * 2);
    return floats_of(h);
}

/* Compares one output: exact in the EXACT regime, vs-naive in the NORMAL one. */
static void compare(const struct cmp_case *cc, const std::vector<float> &got, const std::vector<float> &naive,
                    const std::vector<float> &ref, enum regime rg, int is_bf16) {
    const int64_t n = (int64_t)ref.size();
    if (rg == EXACT) {
        cmp_exact_f32(cc, got.data(), ref.data(), n);
        return;
    }
    /* floor: one rounding of the result at its typical magnitude (see the file comment) */
    std::vector<float> finite;
    for (float v : ref)
        if (isfinite(v)) finite.push_back(v);
    const double rms = cmp_rms(finite.data(), (int64_t)finite.size());
    cmp_vs_naive(cc, got.data(), naive.data(), ref.data(), n, 2.0, (is_bf16 ? BF16_EPS : FLT_EPSILON) * rms, nullptr);
}

static void run_case(const lora_case &c, int plant_inf, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const int N = c.N, C_in = c.C_in, C_out = c.C_out, R = c.R;
    const bool ex = c.rg == EXACT;
    const float s = ex ? ((id >> 2) % 2 ? 0.5f : 2.0f) : ref_lora_scale(32.0, R, LORA_SCALE_RSLORA);
    const float p = ex ? 0.5f : 0.1f;
    const float keep_scale = 1.0f / (1.0f - p);
    char shape[160];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d R=%d s=%g%s%s %s", N, C_in, C_out, R, (double)s,
             c.dropout ? " dropout" : "", plant_inf ? " inf" : "", ex ? "exact" : "normal");

    std::vector<float> x((size_t)N * C_in), A((size_t)R * C_in), B((size_t)C_out * R), y0((size_t)N * C_out),
        dy((size_t)N * C_out), dx0((size_t)N * C_in), dA0((size_t)R * C_in), dB0((size_t)C_out * R);
    fill(&r, x, c.rg, 1.0);
    fill(&r, A, c.rg, 1.0 / sqrt((double)C_in));
    fill(&r, B, c.rg, 0.02, fmin(0.25, 64.0 / C_out)); /* du sums ~16 nonzero terms */
    fill(&r, y0, c.rg, 1.0);
    fill(&r, dy, c.rg, 1.0);
    fill(&r, dx0, c.rg, 1.0);
    if (ex) {
        rng_fill_int(&r, dA0.data(), (int64_t)dA0.size(), -100, 100);
        rng_fill_int(&r, dB0.data(), (int64_t)dB0.size(), -100, 100);
    } else {
        rng_fill_normal(&r, dA0.data(), (int64_t)dA0.size(), 0.0, 1.0);
        rng_fill_normal(&r, dB0.data(), (int64_t)dB0.size(), 0.0, 1.0);
    }
    std::vector<uint8_t> keep;
    std::vector<float> xd;
    if (c.dropout) {
        keep.resize(x.size());
        xd.resize(x.size());
        for (size_t i = 0; i < x.size(); i++) {
            keep[i] = rng_uniform(&r) >= p;
            xd[i] = keep[i] ? bf16_round(x[i] * keep_scale) : 0.0f; /* the bf16 input the GPU reads */
        }
    }
    if (plant_inf) x[(size_t)(N / 2) * C_in + C_in / 3] = INFINITY;
    const std::vector<float> &xa = c.dropout ? xd : x;

    /* Reference. */
    std::vector<float> u_ref((size_t)N * R), y_ref(y0), dx_ref(dx0), dA_ref(dA0), dB_ref(dB0);
    std::vector<float> ws(ref_lora_backward_workspace_size(N, R));
    ref_lora_forward(y_ref.data(), u_ref.data(), x.data(), c.dropout ? xd.data() : nullptr, A.data(), B.data(), N, C_in,
                     C_out, R, s, ACT_BF16);
    if (!plant_inf)
        ref_lora_backward(dx_ref.data(), dA_ref.data(), dB_ref.data(), dy.data(), x.data(),
                          c.dropout ? xd.data() : nullptr, c.dropout ? keep.data() : nullptr, keep_scale, u_ref.data(),
                          A.data(), B.data(), N, C_in, C_out, R, s, ACT_BF16, ws.data());
    if (ex && !plant_inf) {
        int64_t inexact = 0;
        for (float v : ws) inexact += bf16_round(v) != v;
        EXPECT(inexact == 0, "lora %s: %lld reference du values not exact in bf16: the exact tier's precondition fails",
               shape, (long long)inexact);
    }

    /* Naive same-precision implementation of the GPU's algorithm (NORMAL regime only). */
    std::vector<float> u_n, y_n, dx_n;
    if (!ex) {
        std::vector<float> t((size_t)N * C_out);
        u_n.resize((size_t)N * R);
        naive_mm(u_n.data(), xa.data(), C_in, 1, A.data(), 1, C_in, N, R, C_in);
        for (float &v : u_n) v = bf16_round(v);
        naive_mm(t.data(), u_n.data(), R, 1, B.data(), 1, R, N, C_out, R);
        y_n.resize(t.size());
        /* y += s·(u Bᵀ) is one GEMM with beta = 1 into the bf16 y: cuBLASLt's epilogue rounds the
         * scaled product to bf16 before it adds C (measured on the H100: gemm_parity's epilogue
         * cases), so the same-precision algorithm has two roundings here. */
        for (size_t i = 0; i < t.size(); i++) y_n[i] = bf16_round(bf16_round(s * t[i]) + y0[i]);
        if (!plant_inf) {
            std::vector<float> du((size_t)N * R);
            naive_mm(du.data(), dy.data(), C_out, 1, B.data(), R, 1, N, R, C_out);
            for (float &v : du) v = bf16_round(s * v);
            dx_n.resize(dx0.size());
            naive_mm(dx_n.data(), du.data(), R, 1, A.data(), C_in, 1, N, C_in, R);
            for (size_t i = 0; i < dx_n.size(); i++) {
                float tv = dx_n[i];
                if (c.dropout) tv = keep[i] ? tv * keep_scale : 0.0f;
                dx_n[i] = bf16_round(dx0[i] + tv);
            }
        }
    }

    /* Device. */
    const std::vector<uint16_t> xab = bits_of(xa), Ab = bits_of(A), Bb = bits_of(B), y0b = bits_of(y0),
                                dyb = bits_of(dy), dx0b = bits_of(dx0);
    std::vector<uint16_t> xab_inf = xab;
    if (plant_inf) xab_inf[(size_t)(N / 2) * C_in + C_in / 3] = bf16_from_float(INFINITY);
    const size_t ws_bytes = gpu_lora_backward_workspace_size(N, C_in, R, c.dropout ? LORA_MASKED : LORA_NO_MASK);
    struct dev_buf bx, bA, bB, by, bu, bdy, bdx, bdA, bdB, bkeep, bws;
    dev_buf_alloc(&bx, "x_a", xab.size() * 2, POISON_NONE, plant_inf ? xab_inf.data() : xab.data());
    dev_buf_alloc(&bA, "lora_a", Ab.size() * 2, POISON_NONE, Ab.data());
    dev_buf_alloc(&bB, "lora_b", Bb.size() * 2, POISON_NONE, Bb.data());
    dev_buf_alloc(&by, "y", y0b.size() * 2, POISON_NONE, y0b.data());
    dev_buf_alloc(&bu, "u", (size_t)N * R * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdy, "dy", dyb.size() * 2, POISON_NONE, dyb.data());
    dev_buf_alloc(&bdx, "dx", dx0b.size() * 2, POISON_NONE, dx0b.data());
    dev_buf_alloc(&bdA, "dlora_a", dA0.size() * 4, POISON_NONE, dA0.data());
    dev_buf_alloc(&bdB, "dlora_b", dB0.size() * 4, POISON_NONE, dB0.data());
    dev_buf_alloc(&bkeep, "keep", c.dropout ? keep.size() : 1, POISON_NONE, c.dropout ? keep.data() : nullptr);
    dev_buf_alloc(&bws, "workspace", ws_bytes, POISON_NONE, nullptr);

    std::vector<uint16_t> ub((size_t)N * R), yb(y0b.size()), dxb(dx0b.size());
    std::vector<float> dA_g(dA0.size()), dB_g(dB0.size());
    std::vector<std::vector<unsigned char>> runs;
    gpu_lora_reserve(g_gemm, N, C_in, C_out, R, c.dropout ? LORA_MASKED : LORA_NO_MASK);
    const int plans = gpu_gemm_plan_count(g_gemm);
    for (int rep = 0; rep < 2; rep++) {
        if (rep) {
            dev_buf_reset(&by, y0b.data());
            dev_buf_reset(&bu, nullptr);
            dev_buf_reset(&bdx, dx0b.data());
            dev_buf_reset(&bdA, dA0.data());
            dev_buf_reset(&bdB, dB0.data());
            dev_buf_reset(&bws, nullptr);
        }
        gpu_lora_forward_bf16(g_gemm, (uint16_t *)by.data, (uint16_t *)bu.data, (const uint16_t *)bx.data,
                              (const uint16_t *)bA.data, (const uint16_t *)bB.data, N, C_in, C_out, R, s, g_stream);
        if (!plant_inf)
            gpu_lora_backward_bf16(g_gemm, (uint16_t *)bdx.data, (float *)bdA.data, (float *)bdB.data,
                                   (const uint16_t *)bdy.data, (const uint16_t *)bx.data,
                                   c.dropout ? (const uint8_t *)bkeep.data : nullptr, keep_scale,
                                   (const uint16_t *)bu.data, (const uint16_t *)bA.data, (const uint16_t *)bB.data, N,
                                   C_in, C_out, R, s, bws.data, g_stream);
        dev_buf_download(&bu, ub.data(), 1);
        dev_buf_download(&by, yb.data(), 0);
        dev_buf_download(&bdx, dxb.data(), 0);
        dev_buf_download(&bdA, dA_g.data(), 0);
        dev_buf_download(&bdB, dB_g.data(), 0);
        std::vector<unsigned char> img;
        for (auto *v : {&ub, &yb, &dxb}) img.insert(img.end(), (unsigned char *)v->data(), (unsigned char *)(v->data() + v->size()));
        for (auto *v : {&dA_g, &dB_g}) img.insert(img.end(), (unsigned char *)v->data(), (unsigned char *)(v->data() + v->size()));
        runs.push_back(img);
    }
    {   /* the intermediate alone (a recomputation that stops before y): the forward's u, bit for bit,
         * from the forward's own plan */
        struct dev_buf bu2;
        dev_buf_alloc(&bu2, "u alone", (size_t)N * R * 2, POISON_BF16, nullptr);
        gpu_lora_u_bf16(g_gemm, (uint16_t *)bu2.data, (const uint16_t *)bx.data, (const uint16_t *)bA.data, N, C_in, R,
                        g_stream);
        std::vector<uint16_t> u2((size_t)N * R);
        dev_buf_download(&bu2, u2.data(), 1);
        EXPECT(memcmp(u2.data(), ub.data(), u2.size() * 2) == 0, "lora %s: gpu_lora_u_bf16 differs from the forward's u",
               shape);
        dev_buf_free(&bu2);
    }
    {   /* the forward joined to a residual add (the MLP's down projection, gpu_lora_forward_residual_bf16):
         * out = bf16(res + y) of this forward's own y, bit for bit, every element written; u the
         * forward's; y left as the base product it was; the pass taken exactly where the forward's
         * y pass runs on tensor cores (adapter_mma_fits: R ≤ 64 and even, C_out % 32 == 0 for these
         * aligned buffers), else nothing written and 0 returned; and in place (out = res). */
        std::vector<float> res(y0.size());
        struct rng r2;
        rng_init(&r2, seed ^ 0x9e3779b97f4a7c15ull);
        fill(&r2, res, c.rg, 1.0);
        const std::vector<uint16_t> resb = bits_of(res);
        struct dev_buf bres, bout, by2, bu3;
        dev_buf_alloc(&bres, "res", resb.size() * 2, POISON_NONE, resb.data());
        dev_buf_alloc(&bout, "out", resb.size() * 2, POISON_BF16, nullptr);
        dev_buf_alloc(&by2, "y (base product)", y0b.size() * 2, POISON_NONE, y0b.data());
        dev_buf_alloc(&bu3, "u (residual pass)", (size_t)N * R * 2, POISON_BF16, nullptr);
        const int fits = R <= 64 && R % 2 == 0 && C_out % 32 == 0;
        const int fused = gpu_lora_forward_residual_bf16(
            g_gemm, (uint16_t *)bout.data, (const uint16_t *)bres.data, (const uint16_t *)by2.data, (uint16_t *)bu3.data,
            (const uint16_t *)bx.data, (const uint16_t *)bA.data, (const uint16_t *)bB.data, N, C_in, C_out, R, s,
            g_stream);
        EXPECT(fused == fits, "lora %s: the residual pass %s (expected %s)", shape, fused ? "ran" : "did not run",
               fits ? "to run" : "not to");
        std::vector<uint16_t> outb(resb.size()), y2(y0b.size()), u3((size_t)N * R);
        dev_buf_download(&bout, outb.data(), fused);
        dev_buf_download(&by2, y2.data(), 0);
        dev_buf_download(&bu3, u3.data(), fused);
        EXPECT(memcmp(y2.data(), y0b.data(), y2.size() * 2) == 0, "lora %s: the residual pass changed y", shape);
        if (fused) {
            std::vector<uint16_t> want(resb.size());
            for (size_t i = 0; i < want.size(); i++)
                want[i] = bf16_from_float(bf16_to_float(resb[i]) + bf16_to_float(yb[i]));
            EXPECT(memcmp(u3.data(), ub.data(), u3.size() * 2) == 0,
                   "lora %s: the residual pass's u differs from the forward's", shape);
            EXPECT(memcmp(outb.data(), want.data(), want.size() * 2) == 0,
                   "lora %s: the residual pass's out is not bf16(res + the forward's y)", shape);
            dev_buf_reset(&bu3, nullptr);
            EXPECT(gpu_lora_forward_residual_bf16(g_gemm, (uint16_t *)bres.data, (const uint16_t *)bres.data,
                                                  (const uint16_t *)by2.data, (uint16_t *)bu3.data,
                                                  (const uint16_t *)bx.data, (const uint16_t *)bA.data,
                                                  (const uint16_t *)bB.data, N, C_in, C_out, R, s, g_stream) == 1,
                   "lora %s: the residual pass in place did not run", shape);
            dev_buf_download(&bres, outb.data(), 0);
            EXPECT(memcmp(outb.data(), want.data(), want.size() * 2) == 0,
                   "lora %s: the residual pass in place (out = res) differs", shape);
        }
        for (struct dev_buf *b : {&bres, &bout, &by2, &bu3}) dev_buf_free(b);
    }
    /* gpu_lora_reserve saw every product (all buffers here are 256-byte aligned) */
    EXPECT(gpu_gemm_plan_count(g_gemm) == plans, "lora %s: %d gemm plans created after gpu_lora_reserve", shape,
           gpu_gemm_plan_count(g_gemm) - plans);
    std::vector<float> du_gpu; /* the GPU's du (N, R), the first bytes of its workspace */
    for (struct dev_buf *b : {&bx, &bA, &bB, &bdy, &bkeep, &bws}) {
        std::vector<unsigned char> tmp(b->nbytes);
        dev_buf_download(b, tmp.data(), 0); /* guards of the inputs and the workspace */
        if (b == &bws && !plant_inf) du_gpu = workspace_du(tmp, (size_t)N * R);
    }

    /* EXACT regime, the accumulating GEMMs: cuBLASLt's epilogue rounds α·(the product) to bf16 before
     * it adds β·C (measured on the H100, gemm_parity's epilogue cases), so y = bf16(bf16(s·u Bᵀ) + y0)
     * and, without dropout, dx = bf16(bf16(du A) + dx0); ref/lora.h rounds each sum once. On these
     * integer inputs every product and sum is exact, so the GPU must equal these two-rounding values
     * (or the single-rounding ones, below) bit for bit; they are built from the reference's own u and du (checked exact above). With
     * dropout, dx goes through an fp32 workspace and one masked pass: one rounding, as the reference. */
    std::vector<float> y_cmp(y_ref), dx_cmp(dx_ref);
    if (ex) {
        for (int n = 0; n < N; n++)
            for (int o = 0; o < C_out; o++) {
                double t = 0;
                for (int k = 0; k < R; k++) t += (double)u_ref[(size_t)n * R + k] * B[(size_t)o * R + k];
                const size_t i = (size_t)n * C_out + o;
                y_cmp[i] = bf16_round(bf16_round((float)((double)s * t)) + y0[i]);
            }
        if (!plant_inf && !c.dropout)
            for (int n = 0; n < N; n++)
                for (int i = 0; i < C_in; i++) {
                    double t = 0;
                    for (int k = 0; k < R; k++) t += (double)ws[(size_t)n * R + k] * A[(size_t)k * C_in + i];
                    const size_t j = (size_t)n * C_in + i;
                    dx_cmp[j] = bf16_round(bf16_round((float)t) + dx0[j]);
                }
    }
    /* cuBLASLt does not document the epilogue's rounding placement, and its algorithms may differ
     * (gemm_parity accepts each placement's exact value for the same reason): an element passes
     * when it equals the single-rounding value (the reference's) or the product-first one. */
    const std::vector<float> y_got = floats_of(yb), dx_got = floats_of(dxb);
    if (ex) {
        for (size_t i = 0; i < y_cmp.size(); i++)
            if (y_got[i] == y_ref[i]) y_cmp[i] = y_ref[i];
        for (size_t i = 0; i < dx_cmp.size(); i++)
            if (dx_got[i] == dx_ref[i]) dx_cmp[i] = dx_ref[i];
    }
    const std::vector<float> u_gpu = floats_of(ub);
    struct cmp_case cc = {"lora_forward", "u", shape, "bf16", seed};
    compare(&cc, ex ? u_gpu : allow_u_flips(u_gpu, u_ref, xa, A.data(), N, C_in, R), u_n, u_ref, c.rg, 1);
    cc.what = "y";
    compare(&cc, y_got, y_n, y_cmp, c.rg, 1);
    if (!plant_inf) {
        cc.op = "lora_backward";
        cc.what = "dx (accumulated)";
        compare(&cc, dx_got, dx_n, dx_cmp, c.rg, 1);
        cc.dtype = "f32";
        cc.what = "dlora_a (accumulated)";
        if (ex) cmp_exact_f32(&cc, dA_g.data(), dA_ref.data(), (int64_t)dA_ref.size());
        else check_reduction(&cc, dA_g, dA0, du_gpu.data(), R, xa.data(), C_in, N, R, C_in, 1.0);
        cc.what = "dlora_b (accumulated)";
        if (ex) cmp_exact_f32(&cc, dB_g.data(), dB_ref.data(), (int64_t)dB_ref.size());
        else check_reduction(&cc, dB_g, dB0, dy.data(), C_out, u_gpu.data(), R, N, C_out, R, s);
    }
    cc.op = "lora";
    cc.what = "determinism (forward + backward twice)";
    cmp_exact_bytes(&cc, runs[1].data(), runs[0].data(), runs[0].size());
    for (struct dev_buf *b : {&bx, &bA, &bB, &by, &bu, &bdy, &bdx, &bdA, &bdB, &bkeep, &bws}) dev_buf_free(b);
}

/* ---- groups: gpu_lora_group_* (n adapters on one input x) against ref/lora.h member by member ----
 *
 * Member i of the group is ref_lora_forward / ref_lora_backward with A_i = rows i·R .. of the
 * stacked A, run on the same x; dx is the sum of every member's contribution onto the initial dx.
 *  (a) exact — the inputs of run_case's exact tier. The group rounds dx once where the reference,
 *      run member by member, rounds after each member, and cuBLASLt may round the product before
 *      adding dx (or s·u Bᵀ before adding y): the test checks on the reference's own values that
 *      every value any of these placements rounds is exact in bf16 (s·u_i B_iᵀ, du_i, du A_g and
 *      the partial sums of dx after each member but the last), so u_i, y_i, dB_i, dA_i and dx agree bit
 *      for bit with the reference (dx: accumulated member by member).
 *  (c) vs naive — run_case's tier; dx against dx0 + Σ_i du_i A_i summed in double from the
 *      reference's du_i, rounded once to bf16 (the member-by-member dx rounds n times).
 * Skipping: runs with dx = NULL, dlora_a = NULL, dlora_b = NULL and one member's dlora_b[i] = NULL
 * must leave those outputs as poisoned and give the others the bits of the full run. */

struct group_case {
    int n, N, C_in, R;
    int C_out[LORA_GROUP_MAX];
};

/* "n=… N=… C_in=… C_out=a,b,…" into shape; returns its length (a case label's start). */
static int group_label(char *shape, size_t cap, const group_case &c) {
    int len = snprintf(shape, cap, "n=%d N=%d C_in=%d C_out=", c.n, c.N, c.C_in);
    for (int i = 0; i < c.n; i++) len += snprintf(shape + len, cap - len, "%s%d", i ? "," : "", c.C_out[i]);
    return len;
}

/* The backward outputs one run writes; the others are passed as NULL. */
struct group_run {
    int dx, dA;
    int dB; /* bit i: member i's dlora_b; 0: dlora_b = NULL */
    const char *name;
};

struct group_out {
    std::vector<uint16_t> u, dx;
    std::vector<float> dA, du; /* du: the workspace's, of the full run only */
    std::vector<std::vector<uint16_t>> y;
    std::vector<std::vector<float>> dB;
};

static void fill_grad(struct rng *r, std::vector<float> &v, bool ex) {
    if (ex)
        rng_fill_int(r, v.data(), (int64_t)v.size(), -100, 100);
    else
        rng_fill_normal(r, v.data(), (int64_t)v.size(), 0.0, 1.0);
}

static bool bf16_exact(double v) { return (double)bf16_to_float(bf16_from_double(v)) == v; }

/* Columns off .. off + width − 1 of a (rows, stride) matrix. */
template <class T>
static std::vector<T> columns(const std::vector<T> &m, int rows, int64_t stride, int off, int width) {
    std::vector<T> out((size_t)rows * width);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < width; j++) out[(size_t)i * width + j] = m[(size_t)i * stride + off + j];
    return out;
}

static std::vector<float> rows_of(const std::vector<float> &m, size_t first, size_t count) {
    return std::vector<float>(m.begin() + first, m.begin() + first + count);
}

/* A group case's operands shared by its members, sized and filled in this order: x (N, C_in), the
 * stacked A (n·R, C_in), the old dx and the old dA (run_group_case, run_fold_case). */
static void fill_group_shared(struct rng *r, const group_case &c, enum regime rg, std::vector<float> &x,
                              std::vector<float> &A, std::vector<float> &dx0, std::vector<float> &dA0) {
    const size_t nR = (size_t)c.n * c.R;
    x.resize((size_t)c.N * c.C_in), A.resize(nR * c.C_in), dx0.resize((size_t)c.N * c.C_in), dA0.resize(nR * c.C_in);
    fill(r, x, rg, 1.0);
    fill(r, A, rg, 1.0 / sqrt((double)c.C_in));
    fill(r, dx0, rg, 1.0);
    fill_grad(r, dA0, rg == EXACT);
}

static void run_group_case(const group_case &c, enum regime rg, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const int n = c.n, N = c.N, C_in = c.C_in, R = c.R, nR = c.n * c.R;
    const bool ex = rg == EXACT;
    const float s = ex ? ((id >> 1) % 2 ? 0.5f : 2.0f) : ref_lora_scale(32.0, R, LORA_SCALE_RSLORA);
    char shape[160];
    const int len = group_label(shape, sizeof shape, c);
    snprintf(shape + len, sizeof shape - len, " R=%d s=%g %s", R, (double)s, ex ? "exact" : "normal");

    std::vector<float> x, A, dx0, dA0;
    fill_group_shared(&r, c, rg, x, A, dx0, dA0);
    std::vector<std::vector<float>> B(n), y0(n), dy(n), dB0(n);
    for (int i = 0; i < n; i++) {
        const int Co = c.C_out[i];
        B[i].resize((size_t)Co * R);
        y0[i].resize((size_t)N * Co);
        dy[i].resize((size_t)N * Co);
        dB0[i].resize((size_t)Co * R);
        fill(&r, B[i], rg, 0.02, fmin(0.25, 64.0 / Co));
        fill(&r, y0[i], rg, 1.0);
        fill(&r, dy[i], rg, 1.0);
        fill_grad(&r, dB0[i], ex);
    }

    /* Reference, member by member; prod = Σ_i du_i A_i in double from the reference's du_i. */
    std::vector<std::vector<float>> u_ref(n), y_ref(y0), dB_ref(dB0), du_ref(n);
    std::vector<float> dx_ref(dx0), dA_ref(dA0);
    std::vector<double> prod((size_t)N * C_in, 0.0);
    int64_t inexact_du = 0, inexact_y = 0, inexact_dx = 0;
    for (int i = 0; i < n; i++) {
        const int Co = c.C_out[i];
        const float *A_i = A.data() + (size_t)i * R * C_in;
        u_ref[i].resize((size_t)N * R);
        du_ref[i].resize(ref_lora_backward_workspace_size(N, R));
        ref_lora_forward(y_ref[i].data(), u_ref[i].data(), x.data(), nullptr, A_i, B[i].data(), N, C_in, Co, R, s,
                         ACT_BF16);
        ref_lora_backward(dx_ref.data(), dA_ref.data() + (size_t)i * R * C_in, dB_ref[i].data(), dy[i].data(),
                          x.data(), nullptr, nullptr, 1.0f, u_ref[i].data(), A_i, B[i].data(), N, C_in, Co, R, s,
                          ACT_BF16, du_ref[i].data());
        for (int m = 0; m < N; m++)
            for (int j = 0; j < C_in; j++) {
                double t = 0;
                for (int k = 0; k < R; k++) t += (double)du_ref[i][(size_t)m * R + k] * A_i[(size_t)k * C_in + j];
                const size_t e = (size_t)m * C_in + j;
                prod[e] += t;
                /* the last member's partial sum is rounded once on both sides */
                if (ex && i < n - 1) inexact_dx += !bf16_exact(dx0[e] + prod[e]);
            }
        if (ex) {
            for (float v : du_ref[i]) inexact_du += bf16_round(v) != v;
            for (int m = 0; m < N; m++)
                for (int o = 0; o < Co; o++) {
                    double t = 0;
                    for (int k = 0; k < R; k++) t += (double)u_ref[i][(size_t)m * R + k] * B[i][(size_t)o * R + k];
                    inexact_y += !bf16_exact((double)s * t);
                }
        }
    }
    std::vector<float> dx_dbl((size_t)N * C_in);
    for (size_t e = 0; e < dx_dbl.size(); e++) {
        dx_dbl[e] = bf16_to_float(bf16_from_double(dx0[e] + prod[e]));
        if (ex) inexact_dx += !bf16_exact(prod[e]);
    }
    if (ex)
        EXPECT(inexact_du + inexact_y + inexact_dx == 0,
               "lora group %s: reference values not exact in bf16 (du %lld, s·u Bᵀ %lld, dx %lld): the exact tier's "
               "precondition fails",
               shape, (long long)inexact_du, (long long)inexact_y, (long long)inexact_dx);

    /* Naive same-precision implementation of the group's algorithm (NORMAL regime only). */
    std::vector<float> u_n, du_n, dx_n;
    std::vector<std::vector<float>> y_n(n);
    if (!ex) {
        u_n.resize((size_t)N * nR);
        naive_mm(u_n.data(), x.data(), C_in, 1, A.data(), 1, C_in, N, nR, C_in);
        for (float &v : u_n) v = bf16_round(v);
        du_n.resize((size_t)N * nR);
        for (int i = 0; i < n; i++) {
            const int Co = c.C_out[i];
            std::vector<float> t((size_t)N * Co), d((size_t)N * R);
            naive_mm(t.data(), u_n.data() + (size_t)i * R, nR, 1, B[i].data(), 1, R, N, Co, R);
            y_n[i].resize(t.size());
            /* two roundings: cuBLASLt's epilogue (run_case's y) */
            for (size_t e = 0; e < t.size(); e++) y_n[i][e] = bf16_round(bf16_round(s * t[e]) + y0[i][e]);
            naive_mm(d.data(), dy[i].data(), Co, 1, B[i].data(), R, 1, N, R, Co);
            for (int m = 0; m < N; m++)
                for (int k = 0; k < R; k++)
                    du_n[(size_t)m * nR + (size_t)i * R + k] = bf16_round(s * d[(size_t)m * R + k]);
        }
        dx_n.resize(dx0.size());
        naive_mm(dx_n.data(), du_n.data(), nR, 1, A.data(), C_in, 1, N, C_in, nR);
        for (size_t e = 0; e < dx_n.size(); e++) dx_n[e] = bf16_round(bf16_round(dx_n[e]) + dx0[e]);
    }

    /* Device. */
    static const char *const y_names[] = {"y_0", "y_1", "y_2", "y_3"};
    static const char *const b_names[] = {"lora_b_0", "lora_b_1", "lora_b_2", "lora_b_3"};
    static const char *const dy_names[] = {"dy_0", "dy_1", "dy_2", "dy_3"};
    static const char *const db_names[] = {"dlora_b_0", "dlora_b_1", "dlora_b_2", "dlora_b_3"};
    const std::vector<uint16_t> xb = bits_of(x), Ab = bits_of(A), dx0b = bits_of(dx0);
    std::vector<std::vector<uint16_t>> Bb(n), y0b(n), dyb(n);
    struct dev_buf bx, bA, bu, bdx, bdA, bws, bB[LORA_GROUP_MAX], by[LORA_GROUP_MAX], bdy[LORA_GROUP_MAX],
        bdB[LORA_GROUP_MAX];
    dev_buf_alloc(&bx, "x", xb.size() * 2, POISON_NONE, xb.data());
    dev_buf_alloc(&bA, "lora_a (stacked)", Ab.size() * 2, POISON_NONE, Ab.data());
    dev_buf_alloc(&bu, "u (group)", (size_t)N * nR * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdx, "dx", dx0b.size() * 2, POISON_BF16, dx0b.data());
    dev_buf_alloc(&bdA, "dlora_a (stacked)", dA0.size() * 4, POISON_F32, dA0.data());
    dev_buf_alloc(&bws, "workspace", gpu_lora_group_backward_workspace_size(N, n, R, 0), POISON_NONE, nullptr);
    uint16_t *y_p[LORA_GROUP_MAX];
    const uint16_t *B_p[LORA_GROUP_MAX], *dy_p[LORA_GROUP_MAX];
    for (int i = 0; i < n; i++) {
        Bb[i] = bits_of(B[i]);
        y0b[i] = bits_of(y0[i]);
        dyb[i] = bits_of(dy[i]);
        B_p[i] = (const uint16_t *)dev_buf_alloc(&bB[i], b_names[i], Bb[i].size() * 2, POISON_NONE, Bb[i].data());
        y_p[i] = (uint16_t *)dev_buf_alloc(&by[i], y_names[i], y0b[i].size() * 2, POISON_NONE, y0b[i].data());
        dy_p[i] = (const uint16_t *)dev_buf_alloc(&bdy[i], dy_names[i], dyb[i].size() * 2, POISON_NONE, dyb[i].data());
        dev_buf_alloc(&bdB[i], db_names[i], dB0[i].size() * 4, POISON_F32, dB0[i].data());
    }

    const int all = (1 << n) - 1;
    const group_run runs[] = {{1, 1, all, "full"},
                              {1, 1, all, "full, again"},
                              {0, 1, all, "dx NULL"},
                              {1, 0, 0, "dlora_a NULL, dlora_b NULL"},
                              {0, 0, all & ~2, "dx NULL, dlora_a NULL, dlora_b[1] NULL"}};
    const int n_runs = (int)(sizeof runs / sizeof runs[0]);
    std::vector<group_out> out(n_runs);
    gpu_lora_group_reserve(g_gemm, n, N, C_in, c.C_out, R);
    const int plans = gpu_gemm_plan_count(g_gemm);
    for (int k = 0; k < n_runs; k++) {
        const group_run &gr = runs[k];
        dev_buf_reset(&bu, nullptr);
        dev_buf_reset(&bdx, gr.dx ? dx0b.data() : nullptr);
        dev_buf_reset(&bdA, gr.dA ? dA0.data() : nullptr);
        dev_buf_reset(&bws, nullptr);
        float *dB_p[LORA_GROUP_MAX];
        for (int i = 0; i < n; i++) {
            const bool on = (gr.dB >> i) & 1;
            dev_buf_reset(&by[i], y0b[i].data());
            dev_buf_reset(&bdB[i], on ? dB0[i].data() : nullptr);
            dB_p[i] = on ? (float *)bdB[i].data : nullptr;
        }
        gpu_lora_group_forward_bf16(g_gemm, y_p, (uint16_t *)bu.data, (const uint16_t *)bx.data,
                                    (const uint16_t *)bA.data, B_p, n, N, C_in, c.C_out, R, s, g_stream);
        gpu_lora_group_backward_bf16(g_gemm, gr.dx ? (uint16_t *)bdx.data : nullptr,
                                     gr.dA ? (float *)bdA.data : nullptr, gr.dB ? dB_p : nullptr, dy_p,
                                     (const uint16_t *)bx.data, (const uint16_t *)bu.data, (const uint16_t *)bA.data,
                                     B_p, n, N, C_in, c.C_out, R, s, bws.data, g_stream);
        group_out &o = out[k];
        o.u.resize((size_t)N * nR);
        o.dx.resize(dx0b.size());
        o.dA.resize(dA0.size());
        o.y.resize(n);
        o.dB.resize(n);
        dev_buf_download(&bu, o.u.data(), 1);
        dev_buf_download(&bdx, o.dx.data(), 0);
        dev_buf_download(&bdA, o.dA.data(), 0);
        if (k == 0) { /* the GPU's du (N, n·R) */
            std::vector<unsigned char> w(bws.nbytes);
            dev_buf_download(&bws, w.data(), 0);
            o.du = workspace_du(w, (size_t)N * nR);
        }
        for (int i = 0; i < n; i++) {
            o.y[i].resize(y0b[i].size());
            o.dB[i].resize(dB0[i].size());
            dev_buf_download(&by[i], o.y[i].data(), 0);
            dev_buf_download(&bdB[i], o.dB[i].data(), 0);
        }
    }
    {   /* the group's u alone (DoRA members read their columns of it): the group forward's u, bit for
         * bit, from its own plan */
        struct dev_buf bu2;
        dev_buf_alloc(&bu2, "group u alone", (size_t)N * nR * 2, POISON_BF16, nullptr);
        gpu_lora_group_u_bf16(g_gemm, (uint16_t *)bu2.data, (const uint16_t *)bx.data, (const uint16_t *)bA.data, n, N,
                              C_in, R, g_stream);
        std::vector<uint16_t> u2((size_t)N * nR);
        dev_buf_download(&bu2, u2.data(), 1);
        EXPECT(memcmp(u2.data(), out[0].u.data(), u2.size() * 2) == 0,
               "lora group %s: gpu_lora_group_u_bf16 differs from the group forward's u", shape);
        dev_buf_free(&bu2);
    }
    /* gpu_lora_group_reserve saw every product (all buffers here are 256-byte aligned) */
    EXPECT(gpu_gemm_plan_count(g_gemm) == plans, "lora group %s: %d gemm plans created after gpu_lora_group_reserve",
           shape, gpu_gemm_plan_count(g_gemm) - plans);
    for (struct dev_buf *b : {&bx, &bA, &bws}) {
        std::vector<unsigned char> tmp(b->nbytes);
        dev_buf_download(b, tmp.data(), 0); /* guards of the inputs and the workspace */
    }
    for (int i = 0; i < n; i++)
        for (struct dev_buf *b : {&bB[i], &bdy[i]}) {
            std::vector<unsigned char> tmp(b->nbytes);
            dev_buf_download(b, tmp.data(), 0);
        }

    /* The full run against the reference. dB_i's same-precision model takes the GPU's u_i (see
     * run_case). */
    const group_out &o = out[0];
    const std::vector<float> u_got = floats_of(o.u);
    char what[96];
    struct cmp_case cc = {"lora_group_forward", what, shape, "bf16", seed};
    for (int i = 0; i < n; i++) {
        const int Co = c.C_out[i];
        cc.op = "lora_group_forward";
        cc.dtype = "bf16";
        snprintf(what, sizeof what, "u_%d (columns of u)", i);
        const std::vector<float> u_n_i = ex ? u_n : columns(u_n, N, nR, i * R, R);
        const std::vector<float> u_got_i = columns(u_got, N, nR, i * R, R);
        compare(&cc, ex ? u_got_i : allow_u_flips(u_got_i, u_ref[i], x, A.data() + (size_t)i * R * C_in, N, C_in, R),
                u_n_i, u_ref[i], rg, 1);
        snprintf(what, sizeof what, "y_%d", i);
        compare(&cc, floats_of(o.y[i]), y_n[i], y_ref[i], rg, 1);
        cc.op = "lora_group_backward";
        cc.dtype = "f32";
        snprintf(what, sizeof what, "dlora_b_%d (accumulated)", i);
        if (ex) cmp_exact_f32(&cc, o.dB[i].data(), dB_ref[i].data(), (int64_t)dB_ref[i].size());
        else check_reduction(&cc, o.dB[i], dB0[i], dy[i].data(), Co, u_got.data() + (size_t)i * R, nR, N, Co, R, s);
        const size_t first = (size_t)i * R * C_in, count = (size_t)R * C_in;
        snprintf(what, sizeof what, "dlora_a rows of member %d (accumulated)", i);
        if (ex)
            cmp_exact_f32(&cc, rows_of(o.dA, first, count).data(), rows_of(dA_ref, first, count).data(), (int64_t)count);
        else
            check_reduction(&cc, rows_of(o.dA, first, count), rows_of(dA0, first, count), o.du.data() + (size_t)i * R, nR,
                            x.data(), C_in, N, R, C_in, 1.0);
    }
    cc.dtype = "bf16";
    snprintf(what, sizeof what, "dx (all members, accumulated)");
    compare(&cc, floats_of(o.dx), dx_n, ex ? dx_ref : dx_dbl, rg, 1);

    /* The other runs: the same bits where written, the poison untouched where skipped. */
    cc.op = "lora_group";
    for (int k = 1; k < n_runs; k++) {
        const group_run &gr = runs[k];
        const group_out &q = out[k];
        if (k == 1) {
            snprintf(what, sizeof what, "determinism (u, y: %s)", gr.name);
            cmp_exact_bytes(&cc, q.u.data(), o.u.data(), o.u.size() * 2);
            for (int i = 0; i < n; i++) cmp_exact_bytes(&cc, q.y[i].data(), o.y[i].data(), o.y[i].size() * 2);
        }
        if (gr.dx) {
            snprintf(what, sizeof what, "dx (%s) vs the full run", gr.name);
            cmp_exact_bytes(&cc, q.dx.data(), o.dx.data(), o.dx.size() * 2);
        } else {
            EXPECT(count_poison_bf16(q.dx.data(), (int64_t)q.dx.size()) == (int64_t)q.dx.size(),
                   "lora group %s: %s: dx written", shape, gr.name);
        }
        if (gr.dA) {
            snprintf(what, sizeof what, "dlora_a (%s) vs the full run", gr.name);
            cmp_exact_bytes(&cc, q.dA.data(), o.dA.data(), o.dA.size() * 4);
        } else {
            EXPECT(count_poison_f32(q.dA.data(), (int64_t)q.dA.size()) == (int64_t)q.dA.size(),
                   "lora group %s: %s: dlora_a written", shape, gr.name);
        }
        for (int i = 0; i < n; i++) {
            if ((gr.dB >> i) & 1) {
                snprintf(what, sizeof what, "dlora_b_%d (%s) vs the full run", i, gr.name);
                cmp_exact_bytes(&cc, q.dB[i].data(), o.dB[i].data(), o.dB[i].size() * 4);
            } else {
                EXPECT(count_poison_f32(q.dB[i].data(), (int64_t)q.dB[i].size()) == (int64_t)q.dB[i].size(),
                       "lora group %s: %s: dlora_b_%d written", shape, gr.name, i);
            }
        }
    }
    for (struct dev_buf *b : {&bx, &bA, &bu, &bdx, &bdA, &bws}) dev_buf_free(b);
    for (int i = 0; i < n; i++)
        for (struct dev_buf *b : {&bB[i], &by[i], &bdy[i], &bdB[i]}) dev_buf_free(b);
}

/* ---- folded groups: the adapters inside the base products' K dimension (gpu/lora.h "folded
 * groups"), at the strides gpu/llama.cu gives them ----
 *
 * x_f (N, ldx): x in columns 0 .. C_in − 1, u in the next n·R, then padding up to ldx = C_in + n·R
 * rounded up to 8 elements (the 16-byte rows the contract needs; gpu/llama_layout.cu rounds to 64).
 * W_f,i (C_out_i, ldw): W_i, the n·R adapter columns (member i's S_i = bf16(s·B_i), zeros in the other members'), then padding; ldw is ldx or,
 * where a case says so, wider (the contract lets the strides differ). Padding starts poisoned and
 * must keep its poison; a product that read past K = C_in + n·R would also turn y into NaN.
 *  (a) exact, data movement: fold_u's u is gpu_lora_group_u_bf16's u on a contiguous copy of x (the
 *      header's "the same bits"), and x_f afterwards is its old image with u in the adapter columns.
 *  (b) exact: one fold_b launch over a table of every member's slot turns each W_f,i image into the
 *      old one with bf16(s·B_i) in member i's columns; the other members' columns start poisoned and
 *      must keep it (they are zeroed before the products).
 *  (c) y_i against ref/lora.h (ACT_BF16) on the reference's base output y0_i = bf16(x W_iᵀ)
 *      (ref_linear_forward_naive's double sums), with run_group_case's y tiers:
 *      exact — the exact tier's inputs, W_i as sparse as B (density ≤ 64/C_in) so that every x W_iᵀ
 *      is exact in bf16 (checked): the reference's rounding of the base then loses nothing, and the
 *      folded sum x W_iᵀ + u_i S_iᵀ (S_i = s·B_i exactly) is rounded once to the same bits;
 *      vs naive — the naive same-precision implementation of the folded algorithm: u rounded to bf16
 *      from a sequential fp32 sum, S_i = bf16(s·B_i), one sequential fp32 sum over the K columns of
 *      [x | u] and W_f,i, rounded once; the floor as in compare().
 *  (d) exact: gpu_lora_group_backward_ld_bf16 on x_f at ldx gives the dx, dlora_a and dlora_b bits of
 *      gpu_lora_group_backward_bf16 on the contiguous x; gpu_linear_backward_dx_ld_bf16 on W_f,i at ldw
 *      the dx bits of gpu_linear_backward_dx_bf16 on the contiguous W_i (overwriting for even members,
 *      accumulating onto dx0 for odd ones, as gpu/llama.cu sums the members' base dx).
 *  (e) the folded backward end to end. dx_f (N, ldd), ldd = ldx or, where a case says so, wider,
 *      starts poisoned; the members' base products over W_f,i's K columns (gpu_linear_backward_dx_ld_bf16
 *      with K output columns at ldd; member 0 overwriting, the others accumulating) leave the base dx
 *      in its first C_in columns and du_i = bf16(dy_i S_i) in member i's adapter columns; then
 *      gpu_lora_group_fold_backward_bf16 (x read from x_f at ldx). The unfolded path runs on the same
 *      inputs from the same dA0 and dB0: gpu_linear_backward_dx_bf16 per member on the contiguous W_i
 *      into a contiguous dx, then gpu_lora_group_backward_bf16 on the contiguous x.
 *      dB_i — the same product of the same operands: bitwise the unfolded path's.
 *      du — against Σ_o dy_i·S_i in double (S_i = bf16(s·B_i), the folded algorithm's operand,
 *        checked in (b)): exact (every value checked exact in bf16; S_i = s·B_i exactly, so also
 *        bitwise the unfolded group's du from its workspace), or vs naive (a sequential fp32 sum
 *        rounded to bf16; the floor as in compare()).
 *      dA — run_group_case's tiers: exact against ref_adapter_grad_a on the reference du, and bitwise
 *        the unfolded path's; or check_reduction from the GPU's own du (dx_f's adapter columns).
 *      dx — run_group_case's dx tier with dx0 the GPU's base dx (dx_f's first C_in columns before the
 *        call): against bf16(dx0 + Σ_i du_i A_i) summed in double from the reference du. In the exact
 *        tier t = Σ_i du_i A_i and dx0 + t are exact in fp32 (multiples of 1/2 far below 2^23) but at
 *        these widths not always in bf16, so an element passes, as in run_case, when it equals the
 *        one-rounding value bf16(dx0 + t) (the tensor-core pass's) or gemm's product-first one
 *        bf16(bf16(t) + dx0). It is also bitwise the unfolded path's dx (the two differ only in the
 *        fp32 order of the base product, exact here) where both round in the same place: both take
 *        the tensor-core pass, or every t and dx0 + t is exact in bf16.
 *      base dx — on up to 32 rows spread over N (the oracle's loops cost C_in·ΣC_out a row): against
 *        Σ_i dy_i W_i in double; exact (each member's partial sum checked exact in bf16) or vs naive
 *        (each member's sequential fp32 sum rounded to bf16, then added onto the running bf16 dx and
 *        rounded again: gemm's epilogue, as run_case's y).
 *      dx_f's columns from C_in on are untouched by the call, and its padding past K keeps its poison.
 *      dx += du A_g is the tensor-core pass where n·R ≤ 64 is even, C_in % 32 == 0 and ldd % 8 == 0
 *      (aligned pointers: cudaMalloc's), else gemm with beta = 1; the table holds both kinds, and the
 *      shape string names the one the shape selects. */

struct fold_case {
    group_case g;
    int ldw_extra; /* W_f's row stride beyond x_f's, elements */
    int ldd_extra; /* dx_f's row stride beyond x_f's, elements */
};

/* (e)'s base dx = Σ_i dy_i W_i on rows `rows` of N only: ref, the double sum (index order, member by
 * member) rounded once to float; naive, as the members' products form it (member 0's sequential
 * fp32 sum rounded to bf16; each further member's rounded, added onto the running bf16 dx and
 * rounded again). inexact counts partial sums (after each member) not exact in bf16. dy_i (N,
 * C_out_i), W_i (C_out_i, C_in); ref and naive (rows, C_in). */
static void base_dx_rows(std::vector<float> &ref, std::vector<float> &naive, int64_t &inexact,
                         const std::vector<int> &rows, const std::vector<std::vector<float>> &dy,
                         const std::vector<std::vector<float>> &W, int n, int C_in, const int *C_out) {
    ref.assign(rows.size() * C_in, 0.0f);
    naive.assign(rows.size() * C_in, 0.0f);
    std::vector<double> acc(C_in);
    std::vector<float> t(C_in);
    for (size_t j = 0; j < rows.size(); j++) {
        float *nv = naive.data() + j * C_in;
        for (double &a : acc) a = 0.0;
        for (int i = 0; i < n; i++) {
            const int Co = C_out[i];
            const float *dym = dy[i].data() + (size_t)rows[j] * Co;
            naive_mm(t.data(), dym, Co, 1, W[i].data(), C_in, 1, 1, C_in, Co);
            for (int o = 0; o < Co; o++) {
                const double d = dym[o];
                if (d == 0.0) continue; /* adds nothing to a sum that starts at +0 */
                const float *w = W[i].data() + (size_t)o * C_in;
                for (int k = 0; k < C_in; k++) acc[k] += d * w[k];
            }
            for (int k = 0; k < C_in; k++) {
                nv[k] = i ? bf16_round(bf16_round(t[k]) + nv[k]) : bf16_round(t[k]);
                inexact += !bf16_exact(acc[k]);
            }
        }
        for (int k = 0; k < C_in; k++) ref[j * C_in + k] = (float)acc[k];
    }
}

/* Σ_i x[n,i]·W[o,i] (N, C_out) in double in index order: ref_linear_forward_naive's sums (exact
 * products of floats; x's zeros add nothing to a sum that starts at +0), over Wᵀ so that the inner
 * loop runs along o. */
static std::vector<double> base_sums(const std::vector<float> &x, const std::vector<float> &W, int N, int C_in,
                                     int C_out) {
    std::vector<float> wt((size_t)C_in * C_out);
    for (int o = 0; o < C_out; o++)
        for (int i = 0; i < C_in; i++) wt[(size_t)i * C_out + o] = W[(size_t)o * C_in + i];
    std::vector<double> y((size_t)N * C_out, 0.0);
    for (int m = 0; m < N; m++) {
        double *ym = y.data() + (size_t)m * C_out;
        for (int i = 0; i < C_in; i++) {
            const double xv = x[(size_t)m * C_in + i];
            if (xv == 0.0) continue;
            const float *w = wt.data() + (size_t)i * C_out;
            for (int o = 0; o < C_out; o++) ym[o] += xv * w[o];
        }
    }
    return y;
}

static void run_fold_case(const fold_case &f, enum regime rg, int id) {
    const group_case &c = f.g;
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const int n = c.n, N = c.N, C_in = c.C_in, R = c.R, nR = c.n * c.R, K = C_in + nR;
    const int64_t ldx = (K + 7) / 8 * 8, ldw = ldx + f.ldw_extra, ldd = ldx + f.ldd_extra;
    const bool ex = rg == EXACT;
    const float s = ex ? ((id >> 1) % 2 ? 0.5f : 2.0f) : ref_lora_scale(32.0, R, LORA_SCALE_RSLORA);
    /* the backward's dx += du A_g: gpu/lora.cu's rule for the tensor-core pass (every pointer here
     * is 256-byte aligned, du = dx_f + C_in 64-byte aligned when C_in % 32 == 0) */
    const bool dx_pass = nR % 2 == 0 && nR <= 64 && C_in % 32 == 0 && ldd % 8 == 0;
    char shape[224];
    const int len = group_label(shape, sizeof shape, c);
    snprintf(shape + len, sizeof shape - len, " R=%d ldx=%lld ldw=%lld ldd=%lld (dx: %s) s=%g %s", R, (long long)ldx,
             (long long)ldw, (long long)ldd, dx_pass ? "pass" : "gemm", (double)s, ex ? "exact" : "normal");

    std::vector<float> x, A, dx0, dA0;
    fill_group_shared(&r, c, rg, x, A, dx0, dA0);
    std::vector<std::vector<float>> W(n), B(n), dy(n), dB0(n);
    for (int i = 0; i < n; i++) {
        const int Co = c.C_out[i];
        W[i].resize((size_t)Co * C_in);
        B[i].resize((size_t)Co * R);
        dy[i].resize((size_t)N * Co);
        dB0[i].resize((size_t)Co * R);
        fill(&r, W[i], rg, 1.0 / sqrt((double)C_in), fmin(0.25, 64.0 / C_in));
        fill(&r, B[i], rg, 0.02, fmin(0.25, 64.0 / Co));
        fill(&r, dy[i], rg, 1.0);
        fill_grad(&r, dB0[i], ex);
    }

    /* Reference: the base output y0_i, then ref_lora_forward's adapter onto it. */
    std::vector<std::vector<float>> y_ref(n);
    std::vector<float> u_ref((size_t)N * R);
    int64_t inexact_base = 0;
    for (int i = 0; i < n; i++) {
        const int Co = c.C_out[i];
        const std::vector<double> base = base_sums(x, W[i], N, C_in, Co);
        y_ref[i].resize(base.size());
        for (size_t e = 0; e < base.size(); e++) {
            y_ref[i][e] = act_round((float)base[e], ACT_BF16);
            if (ex) inexact_base += !bf16_exact(base[e]);
        }
        ref_lora_forward(y_ref[i].data(), u_ref.data(), x.data(), nullptr, A.data() + (size_t)i * R * C_in,
                         B[i].data(), N, C_in, Co, R, s, ACT_BF16);
    }
    if (ex)
        EXPECT(inexact_base == 0,
               "lora fold %s: %lld base outputs x Wᵀ not exact in bf16: the exact tier's precondition fails", shape,
               (long long)inexact_base);

    /* Naive same-precision implementation of the folded algorithm (NORMAL regime only). */
    std::vector<std::vector<float>> y_n(n);
    if (!ex) {
        std::vector<float> u_n((size_t)N * nR), xf((size_t)N * K);
        naive_mm(u_n.data(), x.data(), C_in, 1, A.data(), 1, C_in, N, nR, C_in);
        for (int m = 0; m < N; m++)
            for (int k = 0; k < K; k++)
                xf[(size_t)m * K + k] = k < C_in ? x[(size_t)m * C_in + k] : bf16_round(u_n[(size_t)m * nR + k - C_in]);
        for (int i = 0; i < n; i++) {
            const int Co = c.C_out[i];
            std::vector<float> wt((size_t)K * Co, 0.0f); /* W_f,iᵀ (K, C_out_i) */
            for (int o = 0; o < Co; o++) {
                for (int k = 0; k < C_in; k++) wt[(size_t)k * Co + o] = W[i][(size_t)o * C_in + k];
                for (int k = 0; k < R; k++)
                    wt[(size_t)(C_in + i * R + k) * Co + o] = bf16_round(s * B[i][(size_t)o * R + k]);
            }
            y_n[i].resize((size_t)N * Co);
            naive_mm(y_n[i].data(), xf.data(), K, 1, wt.data(), Co, 1, N, Co, K);
            for (float &v : y_n[i]) v = bf16_round(v);
        }
    }

    /* Device: x_f and W_f,i as padded images, every column past C_in poisoned. */
    static const char *const b_names[] = {"lora_b_0", "lora_b_1", "lora_b_2", "lora_b_3"};
    static const char *const w_names[] = {"W_0", "W_1", "W_2", "W_3"};
    static const char *const wf_names[] = {"W_f,0", "W_f,1", "W_f,2", "W_f,3"};
    static const char *const y_names[] = {"y_0", "y_1", "y_2", "y_3"};
    static const char *const dy_names[] = {"dy_0", "dy_1", "dy_2", "dy_3"};
    static const char *const db_names[] = {"dlora_b_0", "dlora_b_1", "dlora_b_2", "dlora_b_3"};
    const uint16_t pz = POISON_BF16_BITS;
    const std::vector<uint16_t> xb = bits_of(x), Ab = bits_of(A), dx0b = bits_of(dx0);
    std::vector<uint16_t> xf_img((size_t)N * ldx, pz);
    for (int m = 0; m < N; m++) memcpy(&xf_img[(size_t)m * ldx], &xb[(size_t)m * C_in], (size_t)C_in * 2);
    struct dev_buf bx, bxf, bA, bu, bu2, bdx, bdA, bws, bdxw, bslots, bB[LORA_GROUP_MAX], bW[LORA_GROUP_MAX],
        bWf[LORA_GROUP_MAX], by[LORA_GROUP_MAX], bdy[LORA_GROUP_MAX], bdB[LORA_GROUP_MAX];
    dev_buf_alloc(&bx, "x", xb.size() * 2, POISON_NONE, xb.data());
    dev_buf_alloc(&bxf, "x_f", xf_img.size() * 2, POISON_NONE, xf_img.data());
    dev_buf_alloc(&bA, "lora_a (stacked)", Ab.size() * 2, POISON_NONE, Ab.data());
    dev_buf_alloc(&bu, "u (fold)", (size_t)N * nR * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bu2, "u (group)", (size_t)N * nR * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdx, "dx", dx0b.size() * 2, POISON_BF16, dx0b.data());
    dev_buf_alloc(&bdA, "dlora_a (stacked)", dA0.size() * 4, POISON_F32, dA0.data());
    int64_t c_sum = 0; /* (f)'s dy side by side: the one dB product's rows */
    for (int i = 0; i < n; i++) c_sum += c.C_out[i];
    dev_buf_alloc(&bws, "workspace", gpu_lora_group_backward_workspace_size(N, n, R, c_sum), POISON_NONE, nullptr);
    dev_buf_alloc(&bdxw, "dx (base)", dx0b.size() * 2, POISON_BF16, nullptr);
    std::vector<std::vector<uint16_t>> Wf_img(n), Bb(n), dyb(n);
    uint16_t *y_p[LORA_GROUP_MAX];
    const uint16_t *B_p[LORA_GROUP_MAX], *dy_p[LORA_GROUP_MAX];
    float *dB_p[LORA_GROUP_MAX];
    struct lora_fold_slot slots[LORA_GROUP_MAX];
    int max_c_out = 0;
    for (int i = 0; i < n; i++) {
        const int Co = c.C_out[i];
        const std::vector<uint16_t> Wb = bits_of(W[i]);
        Bb[i] = bits_of(B[i]);
        dyb[i] = bits_of(dy[i]);
        Wf_img[i].assign((size_t)Co * ldw, pz);
        for (int o = 0; o < Co; o++) memcpy(&Wf_img[i][(size_t)o * ldw], &Wb[(size_t)o * C_in], (size_t)C_in * 2);
        B_p[i] = (const uint16_t *)dev_buf_alloc(&bB[i], b_names[i], Bb[i].size() * 2, POISON_NONE, Bb[i].data());
        dev_buf_alloc(&bW[i], w_names[i], Wb.size() * 2, POISON_NONE, Wb.data());
        dev_buf_alloc(&bWf[i], wf_names[i], Wf_img[i].size() * 2, POISON_NONE, Wf_img[i].data());
        y_p[i] = (uint16_t *)dev_buf_alloc(&by[i], y_names[i], (size_t)N * Co * 2, POISON_BF16, nullptr);
        dy_p[i] = (const uint16_t *)dev_buf_alloc(&bdy[i], dy_names[i], dyb[i].size() * 2, POISON_NONE, dyb[i].data());
        dB_p[i] = (float *)dev_buf_alloc(&bdB[i], db_names[i], dB0[i].size() * 4, POISON_F32, dB0[i].data());
        slots[i] = lora_fold_slot{(uint16_t *)bWf[i].data + C_in + (int64_t)i * R, ldw, B_p[i], Co};
        max_c_out = Co > max_c_out ? Co : max_c_out;
    }
    dev_buf_alloc(&bslots, "fold slots", (size_t)n * sizeof(struct lora_fold_slot), POISON_NONE, slots);
    char what[112];
    struct cmp_case cc = {"lora_fold_b", what, shape, "bf16", seed};

    /* (b) S_i into every member's columns, one launch for the table. */
    gpu_lora_fold_b_bf16((const struct lora_fold_slot *)bslots.data, n, max_c_out, R, s, g_stream);
    for (int i = 0; i < n; i++) {
        const int Co = c.C_out[i];
        std::vector<uint16_t> got(Wf_img[i].size());
        dev_buf_download(&bWf[i], got.data(), 0);
        for (int o = 0; o < Co; o++)
            for (int k = 0; k < R; k++)
                Wf_img[i][(size_t)o * ldw + C_in + i * R + k] = bf16_from_float(s * B[i][(size_t)o * R + k]);
        snprintf(what, sizeof what, "W_f,%d: bf16(s·B_%d) in its adapter columns, the rest untouched", i, i);
        cmp_exact_bytes(&cc, got.data(), Wf_img[i].data(), got.size() * 2);
        for (int o = 0; o < Co; o++) /* the products read zeros in the other members' columns */
            for (int j = 0; j < n; j++)
                if (j != i) memset(&Wf_img[i][(size_t)o * ldw + C_in + j * R], 0, (size_t)R * 2);
        dev_buf_reset(&bWf[i], Wf_img[i].data());
    }

    /* (a) u into u and x_f's adapter columns; the unfolded group's u from the contiguous x. */
    gpu_lora_group_fold_u_bf16(g_gemm, (uint16_t *)bu.data, (uint16_t *)bxf.data, ldx, (const uint16_t *)bA.data, n,
                               N, C_in, R, g_stream);
    gpu_lora_group_u_bf16(g_gemm, (uint16_t *)bu2.data, (const uint16_t *)bx.data, (const uint16_t *)bA.data, n, N,
                          C_in, R, g_stream);
    std::vector<uint16_t> u((size_t)N * nR), u2(u.size()), xf_got(xf_img.size());
    dev_buf_download(&bu, u.data(), 1);
    dev_buf_download(&bu2, u2.data(), 1);
    dev_buf_download(&bxf, xf_got.data(), 0);
    cc.op = "lora_fold_u";
    snprintf(what, sizeof what, "u vs gpu_lora_group_u_bf16's");
    cmp_exact_bytes(&cc, u.data(), u2.data(), u.size() * 2);
    for (int m = 0; m < N; m++) memcpy(&xf_img[(size_t)m * ldx + C_in], &u[(size_t)m * nR], (size_t)nR * 2);
    snprintf(what, sizeof what, "x_f: x untouched, u in columns C_in .. C_in + n·R − 1, padding untouched");
    cmp_exact_bytes(&cc, xf_got.data(), xf_img.data(), xf_img.size() * 2);
    dev_buf_reset(&bxf, xf_img.data());

    /* (c) each member's product over [x | u] and W_f,i. */
    cc.op = "lora_fold_forward";
    for (int i = 0; i < n; i++) {
        gpu_linear_forward_ld_bf16(g_gemm, y_p[i], (const uint16_t *)bxf.data, ldx, (const uint16_t *)bWf[i].data, ldw,
                                   nullptr, N, K, c.C_out[i], g_stream);
        std::vector<uint16_t> yb((size_t)N * c.C_out[i]);
        dev_buf_download(&by[i], yb.data(), 1);
        snprintf(what, sizeof what, "y_%d", i);
        compare(&cc, floats_of(yb), y_n[i], y_ref[i], rg, 1);
    }

    /* (d) the backward on the padded tensors against the contiguous calls. */
    std::vector<uint16_t> dx_got[2];
    std::vector<float> dA_got[2], dB_got[2][LORA_GROUP_MAX];
    for (int pass = 0; pass < 2; pass++) {
        dev_buf_reset(&bdx, dx0b.data());
        dev_buf_reset(&bdA, dA0.data());
        dev_buf_reset(&bws, nullptr);
        for (int i = 0; i < n; i++) dev_buf_reset(&bdB[i], dB0[i].data());
        if (pass == 0)
            gpu_lora_group_backward_bf16(g_gemm, (uint16_t *)bdx.data, (float *)bdA.data, dB_p, dy_p,
                                         (const uint16_t *)bx.data, (const uint16_t *)bu.data,
                                         (const uint16_t *)bA.data, B_p, n, N, C_in, c.C_out, R, s, bws.data,
                                         g_stream);
        else
            gpu_lora_group_backward_ld_bf16(g_gemm, (uint16_t *)bdx.data, (float *)bdA.data, dB_p, dy_p,
                                            (const uint16_t *)bxf.data, ldx, (const uint16_t *)bu.data,
                                            (const uint16_t *)bA.data, B_p, n, N, C_in, c.C_out, R, s, bws.data,
                                            g_stream);
        dx_got[pass].resize(dx0b.size());
        dA_got[pass].resize(dA0.size());
        dev_buf_download(&bdx, dx_got[pass].data(), 0);
        dev_buf_download(&bdA, dA_got[pass].data(), 0);
        for (int i = 0; i < n; i++) {
            dB_got[pass][i].resize(dB0[i].size());
            dev_buf_download(&bdB[i], dB_got[pass][i].data(), 0);
        }
    }
    cc.op = "lora_fold_backward";
    snprintf(what, sizeof what, "dx (x at ldx) vs the contiguous group backward");
    cmp_exact_bytes(&cc, dx_got[1].data(), dx_got[0].data(), dx_got[0].size() * 2);
    cc.dtype = "f32";
    snprintf(what, sizeof what, "dlora_a (x at ldx) vs the contiguous group backward");
    cmp_exact_bytes(&cc, dA_got[1].data(), dA_got[0].data(), dA_got[0].size() * 4);
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof what, "dlora_b_%d (x at ldx) vs the contiguous group backward", i);
        cmp_exact_bytes(&cc, dB_got[1][i].data(), dB_got[0][i].data(), dB_got[0][i].size() * 4);
    }
    cc.dtype = "bf16";
    for (int i = 0; i < n; i++) {
        const enum gemm_beta beta = i % 2 ? GEMM_ACCUMULATE : GEMM_OVERWRITE;
        std::vector<uint16_t> got[2];
        for (int pass = 0; pass < 2; pass++) {
            dev_buf_reset(&bdxw, beta == GEMM_ACCUMULATE ? dx0b.data() : nullptr);
            if (pass == 0)
                gpu_linear_backward_dx_bf16(g_gemm, (uint16_t *)bdxw.data, dy_p[i], (const uint16_t *)bW[i].data, N,
                                            C_in, c.C_out[i], beta, g_stream);
            else
                gpu_linear_backward_dx_ld_bf16(g_gemm, (uint16_t *)bdxw.data, C_in, dy_p[i],
                                               (const uint16_t *)bWf[i].data, ldw, N, C_in, c.C_out[i], beta, g_stream);
            got[pass].resize(dx0b.size());
            dev_buf_download(&bdxw, got[pass].data(), 1);
        }
        snprintf(what, sizeof what, "dy_%d W_%d%s (W_f,%d at ldw) vs the contiguous W_%d", i, i,
                 beta == GEMM_ACCUMULATE ? " + dx0" : "", i, i);
        cmp_exact_bytes(&cc, got[1].data(), got[0].data(), got[0].size() * 2);
    }

    /* (e) the folded backward against the unfolded path. The unfolded path first: the members'
     * base dx summed into a contiguous dx, then the group backward; its du from its workspace. */
    std::vector<uint16_t> dx_un(dx0b.size());
    std::vector<float> dA_un(dA0.size()), du_un, dA_f(dA0.size());
    std::vector<std::vector<float>> dB_un(n), dB_f(n);
    dev_buf_reset(&bdxw, nullptr);
    dev_buf_reset(&bdA, dA0.data());
    dev_buf_reset(&bws, nullptr);
    for (int i = 0; i < n; i++) {
        dev_buf_reset(&bdB[i], dB0[i].data());
        gpu_linear_backward_dx_bf16(g_gemm, (uint16_t *)bdxw.data, dy_p[i], (const uint16_t *)bW[i].data, N, C_in,
                                    c.C_out[i], i ? GEMM_ACCUMULATE : GEMM_OVERWRITE, g_stream);
    }
    gpu_lora_group_backward_bf16(g_gemm, (uint16_t *)bdxw.data, (float *)bdA.data, dB_p, dy_p,
                                 (const uint16_t *)bx.data, (const uint16_t *)bu.data, (const uint16_t *)bA.data, B_p,
                                 n, N, C_in, c.C_out, R, s, bws.data, g_stream);
    dev_buf_download(&bdxw, dx_un.data(), 1);
    dev_buf_download(&bdA, dA_un.data(), 0);
    {
        std::vector<unsigned char> w(bws.nbytes);
        dev_buf_download(&bws, w.data(), 0);
        du_un = workspace_du(w, (size_t)N * nR);
    }
    for (int i = 0; i < n; i++) {
        dB_un[i].resize(dB0[i].size());
        dev_buf_download(&bdB[i], dB_un[i].data(), 0);
    }
    /* The folded path: the base products into dx_f (poisoned), then the fold backward. */
    struct dev_buf bdxf;
    dev_buf_alloc(&bdxf, "dx_f", (size_t)N * ldd * 2, POISON_BF16, nullptr);
    dev_buf_reset(&bdA, dA0.data());
    for (int i = 0; i < n; i++) {
        dev_buf_reset(&bdB[i], dB0[i].data());
        gpu_linear_backward_dx_ld_bf16(g_gemm, (uint16_t *)bdxf.data, ldd, dy_p[i], (const uint16_t *)bWf[i].data, ldw,
                                       N, K, c.C_out[i], i ? GEMM_ACCUMULATE : GEMM_OVERWRITE, g_stream);
    }
    std::vector<uint16_t> dxf_base((size_t)N * ldd), dxf((size_t)N * ldd);
    dev_buf_download(&bdxf, dxf_base.data(), 0);
    gpu_lora_group_fold_backward_bf16(g_gemm, (uint16_t *)bdxf.data, ldd, (float *)bdA.data, dB_p, dy_p,
                                      (const uint16_t *)bxf.data, ldx, (const uint16_t *)bu.data,
                                      (const uint16_t *)bA.data, n, N, C_in, c.C_out, R, s, bws.data, g_stream);
    dev_buf_download(&bdxf, dxf.data(), 0);
    dev_buf_download(&bdA, dA_f.data(), 0);
    for (int i = 0; i < n; i++) {
        dB_f[i].resize(dB0[i].size());
        dev_buf_download(&bdB[i], dB_f[i].data(), 0);
    }

    /* References: du = Σ_o dy_i·S_i and prod = Σ_i du_i A_i in double; dA from the reference du. */
    std::vector<float> du_ref((size_t)N * nR), dA_ref(dA0);
    {
        std::vector<double> acc(R);
        for (int i = 0; i < n; i++) {
            const int Co = c.C_out[i];
            std::vector<float> S(B[i].size());
            for (size_t e = 0; e < S.size(); e++) S[e] = bf16_round(s * B[i][e]);
            for (int m = 0; m < N; m++) {
                for (double &a : acc) a = 0.0;
                for (int o = 0; o < Co; o++) {
                    const double d = dy[i][(size_t)m * Co + o];
                    if (d == 0.0) continue;
                    for (int k = 0; k < R; k++) acc[k] += d * S[(size_t)o * R + k];
                }
                for (int k = 0; k < R; k++) du_ref[(size_t)m * nR + i * R + k] = (float)acc[k];
            }
        }
    }
    ref_adapter_grad_a(dA_ref.data(), du_ref.data(), x.data(), N, C_in, nR);
    std::vector<double> prod((size_t)N * C_in, 0.0);
    for (int m = 0; m < N; m++)
        for (int k = 0; k < nR; k++) {
            const double d = du_ref[(size_t)m * nR + k];
            if (d == 0.0) continue;
            for (int j = 0; j < C_in; j++) prod[(size_t)m * C_in + j] += d * A[(size_t)k * C_in + j];
        }
    const std::vector<float> dxf_base_f = floats_of(dxf_base), dxf_f = floats_of(dxf);
    const std::vector<float> dx0_f = columns(dxf_base_f, N, ldd, 0, C_in), dx_fold = columns(dxf_f, N, ldd, 0, C_in);
    const std::vector<float> du_got = columns(dxf_f, N, ldd, C_in, nR);
    std::vector<float> dx_want(dx0_f.size());
    int64_t inexact_dx = 0; /* values a rounding placement sees not exact in bf16 (exact regime) */
    for (size_t e = 0; e < dx_want.size(); e++) {
        dx_want[e] = bf16_to_float(bf16_from_double(dx0_f[e] + prod[e]));
        if (!ex) continue;
        inexact_dx += !bf16_exact(prod[e]) + !bf16_exact(dx0_f[e] + prod[e]);
        const float first = bf16_round(bf16_to_float(bf16_from_double(prod[e])) + dx0_f[e]);
        if (dx_fold[e] != dx_want[e]) dx_want[e] = first;
    }
    std::vector<int> rows; /* the base check's rows: 0 .. N − 1 in up to 32 even steps */
    const int n_rows = N < 32 ? N : 32;
    for (int j = 0; j < n_rows; j++) rows.push_back(n_rows > 1 ? (int)((int64_t)j * (N - 1) / (n_rows - 1)) : 0);
    std::vector<float> base_ref, base_n;
    int64_t inexact_base_dx = 0;
    base_dx_rows(base_ref, base_n, inexact_base_dx, rows, dy, W, n, C_in, c.C_out);
    if (ex) {
        int64_t inexact_du = 0;
        for (float v : du_ref) inexact_du += bf16_round(v) != v;
        EXPECT(inexact_du + inexact_base_dx == 0,
               "lora fold %s: reference values not exact in bf16 (du %lld, base dx %lld): the exact tier's "
               "precondition fails",
               shape, (long long)inexact_du, (long long)inexact_base_dx);
    }

    /* Naive same-precision du and dx (NORMAL regime only). */
    std::vector<float> du_n, dx_n;
    if (!ex) {
        du_n.resize((size_t)N * nR);
        for (int i = 0; i < n; i++) {
            const int Co = c.C_out[i];
            std::vector<float> S(B[i].size()), d((size_t)N * R);
            for (size_t e = 0; e < S.size(); e++) S[e] = bf16_round(s * B[i][e]);
            naive_mm(d.data(), dy[i].data(), Co, 1, S.data(), R, 1, N, R, Co);
            for (int m = 0; m < N; m++)
                for (int k = 0; k < R; k++) du_n[(size_t)m * nR + i * R + k] = bf16_round(d[(size_t)m * R + k]);
        }
        dx_n.resize(dx0_f.size());
        naive_mm(dx_n.data(), du_n.data(), nR, 1, A.data(), C_in, 1, N, C_in, nR);
        for (size_t e = 0; e < dx_n.size(); e++) dx_n[e] = bf16_round(bf16_round(dx_n[e]) + dx0_f[e]);
    }

    cc.op = "lora_fold_backward";
    cc.dtype = "bf16";
    {   /* the base products wrote columns 0 .. K − 1 entirely and nothing past them; the call
         * wrote only the first C_in columns */
        const std::vector<uint16_t> pad = columns(dxf, N, ldd, K, (int)(ldd - K));
        const std::vector<uint16_t> base_k = columns(dxf_base, N, ldd, 0, K);
        EXPECT(count_poison_bf16(base_k.data(), (int64_t)base_k.size()) == 0 &&
                   count_poison_bf16(pad.data(), (int64_t)pad.size()) == (int64_t)pad.size(),
               "lora fold %s: dx_f: %lld of the K columns unwritten by the base products, %lld of %lld padding "
               "elements written",
               shape, (long long)count_poison_bf16(base_k.data(), (int64_t)base_k.size()),
               (long long)((int64_t)pad.size() - count_poison_bf16(pad.data(), (int64_t)pad.size())),
               (long long)pad.size());
        const std::vector<uint16_t> tail_before = columns(dxf_base, N, ldd, C_in, (int)(ldd - C_in));
        const std::vector<uint16_t> tail_after = columns(dxf, N, ldd, C_in, (int)(ldd - C_in));
        snprintf(what, sizeof what, "dx_f's columns from C_in on (du, padding) untouched by the fold backward");
        cmp_exact_bytes(&cc, tail_after.data(), tail_before.data(), tail_before.size() * 2);
    }
    snprintf(what, sizeof what, "base dx (dx_f's first C_in columns, %d rows) vs Σ_i dy_i W_i", n_rows);
    {
        std::vector<float> base_got((size_t)n_rows * C_in);
        for (int j = 0; j < n_rows; j++)
            memcpy(&base_got[(size_t)j * C_in], &dx0_f[(size_t)rows[j] * C_in], (size_t)C_in * 4);
        compare(&cc, base_got, base_n, base_ref, rg, 1);
    }
    snprintf(what, sizeof what, "du (dx_f's adapter columns) vs Σ_o dy_i·S_i");
    compare(&cc, du_got, du_n, du_ref, rg, 1);
    snprintf(what, sizeof what, "dx (dx_f's first C_in columns) vs bf16(base dx + Σ_i du_i A_i)");
    compare(&cc, dx_fold, dx_n, dx_want, rg, 1);
    if (ex) {
        snprintf(what, sizeof what, "du vs the unfolded group's (its workspace)");
        cmp_exact_f32(&cc, du_got.data(), du_un.data(), (int64_t)du_un.size());
        /* the unfolded group's dx += du A_g: the pass by the same rule at its contiguous rows */
        const bool dx_pass_un = nR % 2 == 0 && nR <= 64 && C_in % 32 == 0;
        if ((dx_pass && dx_pass_un) || inexact_dx == 0) {
            const std::vector<uint16_t> dx_bits = columns(dxf, N, ldd, 0, C_in);
            snprintf(what, sizeof what, "dx vs the unfolded path's");
            cmp_exact_bytes(&cc, dx_bits.data(), dx_un.data(), dx_un.size() * 2);
        }
    }
    cc.dtype = "f32";
    snprintf(what, sizeof what, "dlora_a (stacked, accumulated)");
    if (ex) {
        cmp_exact_f32(&cc, dA_f.data(), dA_ref.data(), (int64_t)dA_ref.size());
        snprintf(what, sizeof what, "dlora_a vs the unfolded path's");
        cmp_exact_bytes(&cc, dA_f.data(), dA_un.data(), dA_un.size() * 4);
    } else {
        check_reduction(&cc, dA_f, dA0, du_got.data(), nR, x.data(), C_in, N, nR, C_in, 1.0);
    }
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof what, "dlora_b_%d vs the unfolded path's", i);
        cmp_exact_bytes(&cc, dB_f[i].data(), dB_un[i].data(), dB_un[i].size() * 4);
    }

    /* (f) the members' dy side by side in one buffer (N, Σ C_out) and W_f's rows stacked, as
     * gpu/llama.cu lays out the q/k/v gradient (gl_qkv_grad_fused): the base products as one product
     * (K = Σ C_out: one fp32 sum, rounded once), then the strided fold backward; and the strided
     * dx-less group backward (layer 0's). dA and du bitwise the packed calls' (the same products at
     * another row stride of dy); dB from the one product over the group (its diagonal blocks added)
     * against s·Σ dyᵀu by the reduction tier, bitwise the packed calls' where every value is exact;
     * the one product's base dx against Σ_i dy_i W_i by the same tier as the members' sum, and
     * bitwise it where every value is exact. */
    {
        int64_t c_all = 0, off_c[LORA_GROUP_MAX];
        for (int i = 0; i < n; i++) off_c[i] = c_all, c_all += c.C_out[i];
        struct dev_buf bdys, bws_, bdxs;
        dev_buf_alloc(&bdys, "dy side by side", (size_t)N * c_all * 2, POISON_BF16, nullptr);
        dev_buf_alloc(&bws_, "W_f stacked", (size_t)c_all * ldw * 2, POISON_BF16, nullptr);
        dev_buf_alloc(&bdxs, "dx_f (one product)", (size_t)N * ldd * 2, POISON_BF16, nullptr);
        const uint16_t *dys_p[LORA_GROUP_MAX];
        for (int i = 0; i < n; i++) {
            uint16_t *col = (uint16_t *)bdys.data + off_c[i];
            CUDA_CHECK(cudaMemcpy2D(col, (size_t)c_all * 2, dy_p[i], (size_t)c.C_out[i] * 2, (size_t)c.C_out[i] * 2, N,
                                    cudaMemcpyDeviceToDevice));
            CUDA_CHECK(cudaMemcpy((uint16_t *)bws_.data + off_c[i] * ldw, bWf[i].data, (size_t)c.C_out[i] * ldw * 2,
                                  cudaMemcpyDeviceToDevice));
            dys_p[i] = col;
        }
        dev_buf_reset(&bdA, dA0.data());
        for (int i = 0; i < n; i++) dev_buf_reset(&bdB[i], dB0[i].data());
        gpu_linear_backward_dx_ld_bf16(g_gemm, (uint16_t *)bdxs.data, ldd, (const uint16_t *)bdys.data,
                                       (const uint16_t *)bws_.data, ldw, N, K, (int)c_all, GEMM_OVERWRITE, g_stream);
        std::vector<uint16_t> dxs_base((size_t)N * ldd), dxs((size_t)N * ldd);
        dev_buf_download(&bdxs, dxs_base.data(), 0);
        gpu_lora_group_fold_backward_strided_bf16(g_gemm, (uint16_t *)bdxs.data, ldd, (float *)bdA.data, dB_p, dys_p,
                                                  c_all, (const uint16_t *)bxf.data, ldx, (const uint16_t *)bu.data,
                                                  (const uint16_t *)bA.data, n, N, C_in, c.C_out, R, s, bws.data,
                                                  g_stream);
        dev_buf_download(&bdxs, dxs.data(), 0);
        std::vector<float> dA_s(dA0.size()), dB_s;
        dev_buf_download(&bdA, dA_s.data(), 0);
        cc.op = "lora_fold_backward (dy side by side)";
        cc.dtype = "f32";
        const std::vector<float> uf = floats_of(u);
        std::vector<std::vector<float>> dB_side(n);
        for (int i = 0; i < n; i++) {
            dB_s.assign(dB0[i].size(), 0.0f);
            dev_buf_download(&bdB[i], dB_s.data(), 0);
            dB_side[i] = dB_s;
            if (ex) {
                snprintf(what, sizeof what, "dlora_b_%d vs the packed dy's", i);
                cmp_exact_bytes(&cc, dB_s.data(), dB_f[i].data(), dB_s.size() * 4);
            } else {
                snprintf(what, sizeof what, "dlora_b_%d (one product over the group)", i);
                check_reduction(&cc, dB_s, dB0[i], dy[i].data(), c.C_out[i], uf.data() + (size_t)i * R, nR, N,
                                c.C_out[i], R, s);
            }
        }
        const std::vector<float> dxs_f = floats_of(dxs), dxs_base_f = floats_of(dxs_base);
        const std::vector<float> du_s = columns(dxs_f, N, ldd, C_in, nR);
        cc.dtype = "bf16";
        snprintf(what, sizeof what, "du (one product's adapter columns) vs Σ_o dy_i·S_i");
        compare(&cc, du_s, du_n, du_ref, rg, 1);
        snprintf(what, sizeof what, "base dx of the one product (%d rows) vs Σ_i dy_i W_i", n_rows);
        {
            const std::vector<float> b0 = columns(dxs_base_f, N, ldd, 0, C_in);
            std::vector<float> base_got((size_t)n_rows * C_in);
            for (int j = 0; j < n_rows; j++)
                memcpy(&base_got[(size_t)j * C_in], &b0[(size_t)rows[j] * C_in], (size_t)C_in * 4);
            compare(&cc, base_got, base_n, base_ref, rg, 1);
        }
        if (ex) { /* exact values: any order of the sums, any rounding placement gives the same bits */
            snprintf(what, sizeof what, "dx_f of the one product and the fold backward vs the members' products");
            const std::vector<uint16_t> a = columns(dxs, N, ldd, 0, K), b = columns(dxf, N, ldd, 0, K);
            cmp_exact_bytes(&cc, a.data(), b.data(), a.size() * 2);
            cc.dtype = "f32";
            snprintf(what, sizeof what, "dlora_a vs the packed dy's");
            cmp_exact_bytes(&cc, dA_s.data(), dA_f.data(), dA_s.size() * 4);
        } else {
            cc.dtype = "f32";
            snprintf(what, sizeof what, "dlora_a (dy side by side)");
            check_reduction(&cc, dA_s, dA0, du_s.data(), nR, x.data(), C_in, N, nR, C_in, 1.0);
        }
        /* (g) the split form of the trainer's weight-gradient stream (gpu/llama.cu wg_join): the
         * gradients alone (gpu_lora_group_fold_grads_strided_bf16) on a second stream with a second
         * gemm context and workspace, beside the fold backward without them on this one, from the
         * same base product — dx_f, dA and every dB bitwise the joined call's */
        {
            struct dev_buf bws2;
            dev_buf_alloc(&bws2, "second workspace", bws.nbytes, POISON_BF16, nullptr);
            struct gpu_gemm *g2 = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
            cudaStream_t s2;
            cudaEvent_t fork, done;
            CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
            CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
            dev_buf_reset(&bdA, dA0.data());
            for (int i = 0; i < n; i++) dev_buf_reset(&bdB[i], dB0[i].data());
            CUDA_CHECK(cudaMemcpy(bdxs.data, dxs_base.data(), dxs_base.size() * 2, cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaEventRecord(fork, g_stream));
            CUDA_CHECK(cudaStreamWaitEvent(s2, fork, 0));
            gpu_lora_group_fold_grads_strided_bf16(g2, (const uint16_t *)bdxs.data, ldd, (float *)bdA.data, dB_p, dys_p,
                                                   c_all, (const uint16_t *)bxf.data, ldx, (const uint16_t *)bu.data,
                                                   n, N, C_in, c.C_out, R, s, bws2.data, s2);
            gpu_lora_group_fold_backward_strided_bf16(g_gemm, (uint16_t *)bdxs.data, ldd, nullptr, nullptr, dys_p, c_all,
                                                      (const uint16_t *)bxf.data, ldx, (const uint16_t *)bu.data,
                                                      (const uint16_t *)bA.data, n, N, C_in, c.C_out, R, s, bws.data,
                                                      g_stream);
            CUDA_CHECK(cudaEventRecord(done, s2));
            CUDA_CHECK(cudaStreamWaitEvent(g_stream, done, 0));
            CUDA_CHECK(cudaStreamSynchronize(g_stream));
            std::vector<uint16_t> dx2((size_t)N * ldd);
            std::vector<float> dA2(dA0.size());
            dev_buf_download(&bdxs, dx2.data(), 0);
            dev_buf_download(&bdA, dA2.data(), 0);
            cc.dtype = "bf16";
            snprintf(what, sizeof what, "split on two streams: dx_f vs the joined call's");
            cmp_exact_bytes(&cc, dx2.data(), dxs.data(), dx2.size() * 2);
            cc.dtype = "f32";
            snprintf(what, sizeof what, "split on two streams: dlora_a vs the joined call's");
            cmp_exact_bytes(&cc, dA2.data(), dA_s.data(), dA2.size() * 4);
            for (int i = 0; i < n; i++) {
                std::vector<float> d(dB0[i].size());
                dev_buf_download(&bdB[i], d.data(), 0);
                snprintf(what, sizeof what, "split on two streams: dlora_b_%d vs the joined call's", i);
                cmp_exact_bytes(&cc, d.data(), dB_side[i].data(), d.size() * 4);
            }
            CUDA_CHECK(cudaEventDestroy(fork));
            CUDA_CHECK(cudaEventDestroy(done));
            CUDA_CHECK(cudaStreamDestroy(s2));
            free_gpu_gemm(g2);
            dev_buf_free(&bws2);
        }
        /* the dx-less group backward (layer 0's) with dy side by side: dB bitwise the fold backward's
         * (the same one product), dA bitwise the packed call's */
        std::vector<std::vector<float>> dB_p0(n);
        std::vector<float> dA_p0;
        for (int pass = 0; pass < 2; pass++) {
            dev_buf_reset(&bdA, dA0.data());
            dev_buf_reset(&bws, nullptr);
            for (int i = 0; i < n; i++) dev_buf_reset(&bdB[i], dB0[i].data());
            gpu_lora_group_backward_strided_bf16(g_gemm, nullptr, (float *)bdA.data, dB_p, pass ? dys_p : dy_p,
                                                 pass ? c_all : 0, (const uint16_t *)bxf.data, ldx,
                                                 (const uint16_t *)bu.data, (const uint16_t *)bA.data, B_p, n, N, C_in,
                                                 c.C_out, R, s, bws.data, g_stream);
            std::vector<float> dA_p(dA0.size());
            dev_buf_download(&bdA, dA_p.data(), 0);
            for (int i = 0; i < n; i++) {
                std::vector<float> d(dB0[i].size());
                dev_buf_download(&bdB[i], d.data(), 0);
                if (pass == 0) {
                    dB_p0[i] = d;
                    continue;
                }
                snprintf(what, sizeof what, "dx-less group backward (dy side by side): dlora_b_%d vs the fold's",
                         i);
                cmp_exact_bytes(&cc, d.data(), dB_side[i].data(), d.size() * 4);
                if (ex) {
                    snprintf(what, sizeof what, "dx-less group backward: dlora_b_%d vs the packed dy's", i);
                    cmp_exact_bytes(&cc, d.data(), dB_p0[i].data(), d.size() * 4);
                }
            }
            if (pass == 0) {
                dA_p0 = dA_p;
            } else {
                snprintf(what, sizeof what, "dx-less group backward: dlora_a vs the packed dy's");
                cmp_exact_bytes(&cc, dA_p.data(), dA_p0.data(), dA_p.size() * 4);
            }
        }
        for (struct dev_buf *b : {&bdys, &bws_, &bdxs}) dev_buf_free(b);
    }
    for (struct dev_buf *b : {&bx, &bxf, &bA, &bu}) {
        std::vector<unsigned char> tmp(b->nbytes);
        dev_buf_download(b, tmp.data(), 0); /* guards of the fold backward's inputs */
    }
    dev_buf_free(&bdxf);
    for (struct dev_buf *b : {&bx, &bxf, &bA, &bu, &bu2, &bdx, &bdA, &bws, &bdxw, &bslots}) dev_buf_free(b);
    for (int i = 0; i < n; i++)
        for (struct dev_buf *b : {&bB[i], &bW[i], &bWf[i], &by[i], &bdy[i], &bdB[i]}) dev_buf_free(b);
}

/* ---- bench: forward and backward at N = 8192 against the base layer's products ---- */

/* gpu_lora_backward_swiglu_bf16 (the down projection's adapter backward joined to SwiGLU's) against
 * gpu_lora_backward_bf16 followed by gpu_swiglu_backward_bf16 on copies of the same buffers: the gate
 * and up gradients and the accumulated dA, dB bit for bit (the joined pass rounds dh + du A as the dx
 * pass stores it and runs SwiGLU's per-element math on it); dh left as the base product where the
 * pass applies (R even, ≤ 64, F % 32 == 0), else the two calls' dh. Twice: with the MLP input given
 * (x, independent values), and formed by the call into a poisoned h_out from gate and up — h_out
 * bitwise gpu_swiglu_forward_bf16(gate, up), every element written, and the gradients bitwise the two
 * calls' on that input. Each joined call also with gate and up side by side in one (N, 2F) buffer
 * (ld_gu = 2F, as the trainer lays them out where gate/up's products are one): the same bits in
 * each half. Normal values. */
enum joined_variant {
    TWO_PASSES,
    JOINED,
    TWO_PASSES_ON_SWIGLU,
    JOINED_FORMING,
    JOINED_SIDE,
    JOINED_FORMING_SIDE,
    JOINED_VARIANTS
};

static void run_joined_case(int N, int F, int C, int R, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d F=%d C=%d R=%d", N, F, C, R);
    std::vector<float> gate((size_t)N * F), up((size_t)N * F), dh((size_t)N * F), dy((size_t)N * C), x((size_t)N * F),
        u((size_t)N * R), A((size_t)R * F), B((size_t)C * R), dA0((size_t)R * F), dB0((size_t)C * R);
    fill(&r, gate, NORMAL, 2.0);
    fill(&r, up, NORMAL, 1.0);
    fill(&r, dh, NORMAL, 0.01);
    fill(&r, dy, NORMAL, 1.0);
    fill(&r, x, NORMAL, 0.1);
    fill(&r, u, NORMAL, 0.5);
    fill(&r, A, NORMAL, 1.0 / sqrt((double)F));
    fill(&r, B, NORMAL, 0.02);
    rng_fill_normal(&r, dA0.data(), (int64_t)dA0.size(), 0.0, 1.0);
    rng_fill_normal(&r, dB0.data(), (int64_t)dB0.size(), 0.0, 1.0);
    const float s = 2.0f;
    const std::vector<uint16_t> gb = bits_of(gate), ub = bits_of(up), dhb = bits_of(dh), dyb = bits_of(dy),
                                xb = bits_of(x), u16 = bits_of(u), Ab = bits_of(A), Bb = bits_of(B);
    const size_t ws_bytes = gpu_lora_backward_workspace_size(N, F, R, LORA_NO_MASK);
    struct dev_buf by, bx, bu, bA, bB, bws;
    dev_buf_alloc(&by, "dy", dyb.size() * 2, POISON_NONE, dyb.data());
    dev_buf_alloc(&bx, "x (the MLP input)", xb.size() * 2, POISON_NONE, xb.data());
    dev_buf_alloc(&bu, "u", u16.size() * 2, POISON_NONE, u16.data());
    dev_buf_alloc(&bA, "lora_a", Ab.size() * 2, POISON_NONE, Ab.data());
    dev_buf_alloc(&bB, "lora_b", Bb.size() * 2, POISON_NONE, Bb.data());
    dev_buf_alloc(&bws, "workspace", ws_bytes, POISON_NONE, nullptr);
    std::vector<uint16_t> out_g[JOINED_VARIANTS], out_u[JOINED_VARIANTS], out_dh[JOINED_VARIANTS],
        out_h[JOINED_VARIANTS];
    std::vector<float> out_dA[JOINED_VARIANTS], out_dB[JOINED_VARIANTS];
    std::vector<uint16_t> gub((size_t)N * 2 * F); /* [gate │ up] rows */
    for (int i = 0; i < N; i++) {
        memcpy(&gub[(size_t)i * 2 * F], &gb[(size_t)i * F], (size_t)F * 2);
        memcpy(&gub[(size_t)i * 2 * F + F], &ub[(size_t)i * F], (size_t)F * 2);
    }
    for (int v = 0; v < JOINED_VARIANTS; v++) {
        const bool side = v == JOINED_SIDE || v == JOINED_FORMING_SIDE;
        struct dev_buf bg, bup, bdh, bdA, bdB, bh;
        if (side) {
            dev_buf_alloc(&bg, "gate │ up", gub.size() * 2, POISON_NONE, gub.data());
            dev_buf_alloc(&bup, "up (unused)", 2, POISON_NONE, nullptr);
        } else {
            dev_buf_alloc(&bg, "gate", gb.size() * 2, POISON_NONE, gb.data());
            dev_buf_alloc(&bup, "up", ub.size() * 2, POISON_NONE, ub.data());
        }
        dev_buf_alloc(&bdh, "dh (base product)", dhb.size() * 2, POISON_NONE, dhb.data());
        dev_buf_alloc(&bdA, "dlora_a", dA0.size() * 4, POISON_NONE, dA0.data());
        dev_buf_alloc(&bdB, "dlora_b", dB0.size() * 4, POISON_NONE, dB0.data());
        dev_buf_alloc(&bh, "h (the MLP input formed from gate and up)", xb.size() * 2, POISON_BF16, nullptr);
        dev_buf_reset(&bws, nullptr);
        uint16_t *g16 = (uint16_t *)bg.data, *up16 = side ? g16 + F : (uint16_t *)bup.data,
                 *dh16 = (uint16_t *)bdh.data, *h16 = (uint16_t *)bh.data;
        float *dA = (float *)bdA.data, *dB = (float *)bdB.data;
        const uint16_t *dy16 = (const uint16_t *)by.data, *x16 = (const uint16_t *)bx.data,
                       *uu = (const uint16_t *)bu.data, *A16 = (const uint16_t *)bA.data,
                       *B16 = (const uint16_t *)bB.data;
        if (v == JOINED || v == JOINED_FORMING || side) {
            const bool given = v == JOINED || v == JOINED_SIDE;
            gpu_lora_backward_swiglu_bf16(g_gemm, g16, up16, dh16, dA, dB, dy16, given ? x16 : nullptr,
                                          given ? nullptr : h16, uu, A16, B16, N, F, C, R, s, side ? 2 * F : F,
                                          bws.data, g_stream);
        } else {
            if (v == TWO_PASSES_ON_SWIGLU) gpu_swiglu_forward_bf16(h16, g16, up16, N, F, F, g_stream);
            gpu_lora_backward_bf16(g_gemm, dh16, dA, dB, dy16, v == TWO_PASSES ? x16 : h16, nullptr, 1.0f, uu, A16,
                                   B16, N, F, C, R, s, bws.data, g_stream);
            gpu_swiglu_backward_bf16(g16, up16, dh16, g16, up16, N, F, F, F, g_stream);
        }
        out_g[v].resize(gb.size()), out_u[v].resize(ub.size()), out_dh[v].resize(dhb.size());
        out_dA[v].resize(dA0.size()), out_dB[v].resize(dB0.size()), out_h[v].resize(xb.size());
        if (side) {
            std::vector<uint16_t> both(gub.size());
            dev_buf_download(&bg, both.data(), 0);
            for (int i = 0; i < N; i++) {
                memcpy(&out_g[v][(size_t)i * F], &both[(size_t)i * 2 * F], (size_t)F * 2);
                memcpy(&out_u[v][(size_t)i * F], &both[(size_t)i * 2 * F + F], (size_t)F * 2);
            }
        } else {
            dev_buf_download(&bg, out_g[v].data(), 0);
            dev_buf_download(&bup, out_u[v].data(), 0);
        }
        dev_buf_download(&bdh, out_dh[v].data(), 0);
        dev_buf_download(&bdA, out_dA[v].data(), 0);
        dev_buf_download(&bdB, out_dB[v].data(), 0);
        /* h written everywhere where it is formed; in the other variants it must stay untouched */
        dev_buf_download(&bh, out_h[v].data(), v == TWO_PASSES_ON_SWIGLU || v == JOINED_FORMING ||
                                                   v == JOINED_FORMING_SIDE);
        for (struct dev_buf *b : {&bg, &bup, &bdh, &bdA, &bdB, &bh}) dev_buf_free(b);
    }
    for (struct dev_buf *b : {&by, &bx, &bu, &bA, &bB, &bws}) dev_buf_free(b);
    const bool pass_applies = R <= 64 && R % 2 == 0 && F % 32 == 0;
    for (int k = 0; k < 4; k++) {
        const int ref = k % 2 ? TWO_PASSES_ON_SWIGLU : TWO_PASSES;
        const int cand = k == 0 ? JOINED : k == 1 ? JOINED_FORMING : k == 2 ? JOINED_SIDE : JOINED_FORMING_SIDE;
        const char *how = k == 0 ? "" : k == 1 ? " (input formed)" : k == 2 ? " (side by side)"
                                                                            : " (input formed, side by side)";
        EXPECT(out_g[cand] == out_g[ref], "lora joined %s%s: the gate gradient differs from the two passes'", shape,
               how);
        EXPECT(out_u[cand] == out_u[ref], "lora joined %s%s: the up gradient differs from the two passes'", shape, how);
        EXPECT(out_dA[cand] == out_dA[ref] && out_dB[cand] == out_dB[ref],
               "lora joined %s%s: dA or dB differs from gpu_lora_backward_bf16's", shape, how);
        EXPECT(out_dh[cand] == (pass_applies ? dhb : out_dh[ref]), "lora joined %s%s: dh is not %s", shape, how,
               pass_applies ? "the base product (the joined pass writes no dh)" : "the two passes' dh");
        EXPECT(out_g[cand] != gb, "lora joined %s%s: the gate buffer was not written", shape, how);
    }
    EXPECT(out_h[JOINED_FORMING] == out_h[TWO_PASSES_ON_SWIGLU] &&
               out_h[JOINED_FORMING_SIDE] == out_h[TWO_PASSES_ON_SWIGLU],
           "lora joined %s: the MLP input formed by the call differs from gpu_swiglu_forward_bf16's", shape);
    EXPECT(out_h[JOINED] == out_h[TWO_PASSES] && out_h[JOINED_SIDE] == out_h[TWO_PASSES],
           "lora joined %s: h_out was written though the input was given", shape);
    EXPECT(out_dA[JOINED_FORMING] != out_dA[JOINED],
           "lora joined %s: dA does not depend on which MLP input it was given", shape);
}

struct bench_ctx {
    uint16_t *x, *w, *A, *B, *y, *u, *dy, *dx, *gate, *up; /* gate, up: the down shapes' joined bench */
    const uint16_t *gate0, *up0; /* their values, copied in before each call (the calls overwrite them) */
    float *dA, *dB;
    void *ws;
    int N, C_in, C_out, R;
};

static void base_fwd(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_linear_forward_bf16(g_gemm, b->y, b->x, b->w, nullptr, b->N, b->C_in, b->C_out, s);
}
static void base_bwd(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_linear_backward_dx_bf16(g_gemm, b->dx, b->dy, b->w, b->N, b->C_in, b->C_out, GEMM_OVERWRITE, s);
}
static void lora_fwd(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_lora_forward_bf16(g_gemm, b->y, b->u, b->x, b->A, b->B, b->N, b->C_in, b->C_out, b->R, 2.0f, s);
}
static void lora_bwd(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_lora_backward_bf16(g_gemm, b->dx, b->dA, b->dB, b->dy, b->x, nullptr, 1.0f, b->u, b->A, b->B, b->N, b->C_in,
                           b->C_out, b->R, 2.0f, b->ws, s);
}

/* The backward's products alone, by leaving outputs out (gpu/lora.h: a NULL output skips its
 * products): dB alone; du then dA; du then dx. */
static void lora_bwd_db(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_lora_backward_bf16(g_gemm, nullptr, nullptr, b->dB, b->dy, b->x, nullptr, 1.0f, b->u, b->A, b->B, b->N,
                           b->C_in, b->C_out, b->R, 2.0f, b->ws, s);
}
static void lora_bwd_du_da(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_lora_backward_bf16(g_gemm, nullptr, b->dA, nullptr, b->dy, b->x, nullptr, 1.0f, b->u, b->A, b->B, b->N,
                           b->C_in, b->C_out, b->R, 2.0f, b->ws, s);
}
static void lora_bwd_du_dx(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_lora_backward_bf16(g_gemm, b->dx, nullptr, nullptr, b->dy, b->x, nullptr, 1.0f, b->u, b->A, b->B, b->N,
                           b->C_in, b->C_out, b->R, 2.0f, b->ws, s);
}

/* The SwiGLU benches run in place over gate and up: each call starts from their values (a copy,
 * timed alone by gate_up_restore and subtracted), so that every call sees the same inputs. */
static void gate_up_restore(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    const size_t n = (size_t)b->N * b->C_in * 2;
    CUDA_CHECK(cudaMemcpyAsync(b->gate, b->gate0, n, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(b->up, b->up0, n, cudaMemcpyDeviceToDevice, s));
}
static void lora_bwd_then_swiglu(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gate_up_restore(p, s);
    gpu_lora_backward_bf16(g_gemm, b->dx, b->dA, b->dB, b->dy, b->x, nullptr, 1.0f, b->u, b->A, b->B, b->N, b->C_in,
                           b->C_out, b->R, 2.0f, b->ws, s);
    gpu_swiglu_backward_bf16(b->gate, b->up, b->dx, b->gate, b->up, b->N, b->C_in, b->C_in, b->C_in, s);
}
static void lora_bwd_joined(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gate_up_restore(p, s);
    gpu_lora_backward_swiglu_bf16(g_gemm, b->gate, b->up, b->dx, b->dA, b->dB, b->dy, b->x, nullptr, b->u, b->A, b->B,
                                  b->N, b->C_in, b->C_out, b->R, 2.0f, b->C_in, b->ws, s);
}
/* --recompute-mlp's MLP input: SwiGLU's forward into x, then the joined call; or formed by the call */
static void swiglu_fwd_then_joined(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gate_up_restore(p, s);
    gpu_swiglu_forward_bf16(b->x, b->gate, b->up, b->N, b->C_in, b->C_in, s);
    gpu_lora_backward_swiglu_bf16(g_gemm, b->gate, b->up, b->dx, b->dA, b->dB, b->dy, b->x, nullptr, b->u, b->A, b->B,
                                  b->N, b->C_in, b->C_out, b->R, 2.0f, b->C_in, b->ws, s);
}
static void lora_bwd_joined_forming(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gate_up_restore(p, s);
    gpu_lora_backward_swiglu_bf16(g_gemm, b->gate, b->up, b->dx, b->dA, b->dB, b->dy, nullptr, b->x, b->u, b->A, b->B,
                                  b->N, b->C_in, b->C_out, b->R, 2.0f, b->C_in, b->ws, s);
}

static void bench(double copy_gbps) {
    struct shp {
        const char *name;
        int N, C_in, C_out;
    } shapes[] = {{"smollm2-135m q", 16384, 576, 576},     {"smollm2-135m gate_up", 16384, 576, 3072},
                  {"smollm2-135m down", 16384, 1536, 576}, {"llama-3.2-1b q", 8192, 2048, 2048},
                  {"llama-3.2-1b k", 8192, 2048, 512},     {"llama-3.2-1b gate_up", 8192, 2048, 16384},
                  {"llama-3.2-1b down", 8192, 8192, 2048}};
    const int ranks[] = {8, 16, 64};
    for (const shp &sh : shapes)
        for (int R : ranks) {
            bench_ctx b;
            b.N = sh.N, b.C_in = sh.C_in, b.C_out = sh.C_out, b.R = R;
            const size_t nx = (size_t)sh.N * sh.C_in, ny = (size_t)sh.N * sh.C_out;
            CUDA_CHECK(cudaMalloc(&b.x, nx * 2));
            CUDA_CHECK(cudaMalloc(&b.dx, nx * 2));
            CUDA_CHECK(cudaMalloc(&b.y, ny * 2));
            CUDA_CHECK(cudaMalloc(&b.dy, ny * 2));
            CUDA_CHECK(cudaMalloc(&b.w, (size_t)sh.C_out * sh.C_in * 2));
            CUDA_CHECK(cudaMalloc(&b.A, (size_t)R * sh.C_in * 2));
            CUDA_CHECK(cudaMalloc(&b.B, (size_t)sh.C_out * R * 2));
            CUDA_CHECK(cudaMalloc(&b.u, (size_t)sh.N * R * 2));
            CUDA_CHECK(cudaMalloc(&b.dA, (size_t)R * sh.C_in * 4));
            CUDA_CHECK(cudaMalloc(&b.dB, (size_t)sh.C_out * R * 4));
            CUDA_CHECK(cudaMalloc(&b.ws, gpu_lora_backward_workspace_size(sh.N, sh.C_in, R, LORA_NO_MASK)));
            CUDA_CHECK(cudaMemset(b.x, 0x3C, nx * 2));
            CUDA_CHECK(cudaMemset(b.dx, 0, nx * 2));
            CUDA_CHECK(cudaMemset(b.y, 0, ny * 2));
            CUDA_CHECK(cudaMemset(b.dy, 0x3C, ny * 2));
            CUDA_CHECK(cudaMemset(b.w, 0x3C, (size_t)sh.C_out * sh.C_in * 2));
            CUDA_CHECK(cudaMemset(b.A, 0x3C, (size_t)R * sh.C_in * 2));
            CUDA_CHECK(cudaMemset(b.B, 0x3C, (size_t)sh.C_out * R * 2));
            CUDA_CHECK(cudaMemset(b.dA, 0, (size_t)R * sh.C_in * 4));
            CUDA_CHECK(cudaMemset(b.dB, 0, (size_t)sh.C_out * R * 4));
            gpu_lora_reserve(g_gemm, sh.N, sh.C_in, sh.C_out, R, LORA_NO_MASK);
            char shape[128];
            snprintf(shape, sizeof shape, "%s N=%d C_in=%d C_out=%d R=%d", sh.name, sh.N, sh.C_in, sh.C_out, R);
            /* Bytes the unfused products must move: forward reads x, writes and reads u, reads and
             * writes y; backward reads dy twice (dB, du), x once (dA), reads and writes dx. */
            const double bf = 2.0 * nx + 4.0 * sh.N * R + 4.0 * ny;
            const double bb = 4.0 * ny + 2.0 * nx + 4.0 * nx + 6.0 * sh.N * R;
            struct bench_result rbf = bench_time(base_fwd, &b, g_stream, 3, 15, 3);
            struct bench_result rbb = bench_time(base_bwd, &b, g_stream, 3, 15, 3);
            struct bench_result rf = bench_time(lora_fwd, &b, g_stream, 3, 15, 3);
            struct bench_result rb = bench_time(lora_bwd, &b, g_stream, 3, 15, 3);
            bench_json("lora_forward", shape, bf, 0, rf, copy_gbps);
            bench_json("lora_backward", shape, bb, 0, rb, copy_gbps);
            printf("{\"op\":\"lora_overhead\",\"shape\":\"%s\",\"base_fwd_ms\":%.4f,\"base_bwd_dx_ms\":%.4f,"
                   "\"lora_fwd_pct_of_base\":%.1f,\"lora_bwd_pct_of_base\":%.1f}\n",
                   shape, rbf.median_ms, rbb.median_ms, 100.0 * rf.median_ms / rbf.median_ms,
                   100.0 * rb.median_ms / rbb.median_ms);
            /* the parts: du = (du+dA) + (du+dx) + dB − whole */
            const struct bench_result r1 = bench_time(lora_bwd_db, &b, g_stream, 3, 15, 3);
            const struct bench_result r2 = bench_time(lora_bwd_du_da, &b, g_stream, 3, 15, 3);
            const struct bench_result r3 = bench_time(lora_bwd_du_dx, &b, g_stream, 3, 15, 3);
            const double du = r2.median_ms + r3.median_ms + r1.median_ms - rb.median_ms;
            const double gbs = 1e-6 / copy_gbps; /* ms per byte at the copy ceiling */
            printf("{\"op\":\"lora_backward_parts\",\"shape\":\"%s\",\"db_ms\":%.4f,\"du_ms\":%.4f,\"da_ms\":%.4f,"
                   "\"dx_ms\":%.4f,\"db_pct_of_copy\":%.1f,\"du_pct_of_copy\":%.1f,\"da_pct_of_copy\":%.1f,"
                   "\"dx_pct_of_copy\":%.1f}\n",
                   shape, r1.median_ms, du, r2.median_ms - du, r3.median_ms - du,
                   100.0 * 2.0 * ny * gbs / r1.median_ms, 100.0 * 2.0 * ny * gbs / du,
                   100.0 * 2.0 * nx * gbs / (r2.median_ms - du), 100.0 * 4.0 * nx * gbs / (r3.median_ms - du));
            if (strstr(sh.name, "down")) { /* down's backward joined to SwiGLU's, against the two passes */
                /* gate and up as a trained model's: normal values (gate of scale 2, up 1) */
                struct rng r;
                rng_init(&r, 20261128u);
                std::vector<float> v(nx);
                uint16_t *vals[2];
                for (int k = 0; k < 2; k++) {
                    rng_fill_normal(&r, v.data(), (int64_t)nx, 0.0, k ? 1.0 : 2.0);
                    const std::vector<uint16_t> bits = bits_of(v);
                    CUDA_CHECK(cudaMalloc(&vals[k], nx * 2));
                    CUDA_CHECK(cudaMemcpy(vals[k], bits.data(), nx * 2, cudaMemcpyHostToDevice));
                }
                b.gate0 = vals[0], b.up0 = vals[1];
                CUDA_CHECK(cudaMalloc(&b.gate, nx * 2));
                CUDA_CHECK(cudaMalloc(&b.up, nx * 2));
                const double restore = bench_time(gate_up_restore, &b, g_stream, 3, 15, 3).median_ms;
                const double rt = bench_time(lora_bwd_then_swiglu, &b, g_stream, 3, 15, 3).median_ms - restore;
                const double rj = bench_time(lora_bwd_joined, &b, g_stream, 3, 15, 3).median_ms - restore;
                const double rs = bench_time(swiglu_fwd_then_joined, &b, g_stream, 3, 15, 3).median_ms - restore;
                const double rfm = bench_time(lora_bwd_joined_forming, &b, g_stream, 3, 15, 3).median_ms - restore;
                /* the joined pass alone reads dh, gate and up and writes gate and up (10 bytes an element
                 * of dh; 12 when it also writes the MLP input); the products before it (dB, du, dA) as
                 * lora_backward_parts times them */
                const double pass_ms = rj - (r2.median_ms + r1.median_ms - du);
                const double forming_pass_ms = rfm - (r2.median_ms + r1.median_ms - du);
                printf("{\"op\":\"lora_backward_swiglu\",\"shape\":\"%s\",\"two_passes_ms\":%.4f,\"joined_ms\":%.4f,"
                       "\"joined_pass_ms\":%.4f,\"joined_pass_pct_of_copy\":%.1f,\"swiglu_fwd_then_joined_ms\":%.4f,"
                       "\"joined_forming_input_ms\":%.4f,\"forming_pass_pct_of_copy\":%.1f}\n",
                       shape, rt, rj, pass_ms, 100.0 * 10.0 * nx * gbs / pass_ms, rs, rfm,
                       100.0 * 12.0 * nx * gbs / forming_pass_ms);
                for (void *q : {(void *)b.gate, (void *)b.up, (void *)vals[0], (void *)vals[1]}) CUDA_CHECK(cudaFree(q));
            }
            for (void *q : {(void *)b.x, (void *)b.dx, (void *)b.y, (void *)b.dy, (void *)b.w, (void *)b.A, (void *)b.B,
                            (void *)b.u, (void *)b.dA, (void *)b.dB, b.ws})
                CUDA_CHECK(cudaFree(q));
        }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261140);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    g_gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    const int shapes[][4] = {
        {1, 8, 8, 8},        {7, 33, 65, 8},       {65, 129, 127, 16},   {33, 255, 257, 64},  {8, 257, 7, 16},
        {64, 576, 576, 8},   {64, 576, 960, 16},   {48, 576, 1536, 64},  {48, 1536, 576, 16}, {32, 2048, 2048, 16},
        {32, 2048, 512, 64}, {16, 2048, 8192, 8},  {16, 8192, 2048, 64}, {8, 2048, 16384, 16},
        /* y += s·u Bᵀ: the tensor-core pass over several row steps with R not a multiple of 16; the
         * gemm path for an odd R and for R > 64 at a width the pass would take */
        {100, 64, 96, 6},    {20, 64, 64, 7},      {12, 40, 64, 128},
        /* rows as the trainers run them (thousands): dB and dA are sums over N */
        {2048, 576, 192, 16}, {1000, 64, 520, 8},  {777, 96, 64, 64},    {300, 40, 24, 24}};
    int id = 0;
    for (const auto &s : shapes)
        for (int rg = 0; rg < 2; rg++)
            for (int dr = 0; dr < 2; dr++) {
                lora_case c = {s[0], s[1], s[2], s[3], (regime)rg, dr};
                run_case(c, 0, id++);
            }
    lora_case inf_case = {9, 64, 40, 8, NORMAL, 0};
    run_case(inf_case, 1, id++);
    const group_case groups[] = {
        {3, 48, 64, 8, {64, 16, 16}},    /* q, k, v of a GQA attention: C_out C, C/4, C/4 */
        {2, 40, 64, 4, {160, 160}},      /* gate, up */
        {3, 37, 61, 5, {61, 15, 9}},     /* odd sizes: u_i at odd column offsets, rows not 16-byte multiples */
        {4, 24, 40, 16, {40, 8, 8, 96}}, /* LORA_GROUP_MAX members */
        /* SmolLM2's q/k/v over many rows; normal values only (over this many rows the exact tier's
         * small integers are no longer exact in bf16: its precondition fails) */
        {3, 2100, 576, 16, {576, 192, 192}},
    };
    for (const group_case &g : groups)
        for (int rg = 0; rg < 2; rg++)
            if (g.N < 1000 || rg == NORMAL) run_group_case(g, (regime)rg, id++);
    /* the backward's dx += du A_g: the tensor-core pass at the models' shapes (at ldd = ldx and 64
     * wider); gemm where C_in % 32 != 0 (an odd ldd) and where ldd % 8 != 0 */
    const fold_case folds[] = {
        {{3, 256, 576, 16, {576, 192, 192}}, 0, 0},   /* SmolLM2's q/k/v: x_f 624 wide, no padding */
        {{2, 256, 576, 16, {1536, 1536}}, 0, 64},     /* SmolLM2's gate/up; dx_f 64 wider */
        {{3, 512, 2048, 16, {2048, 512, 512}}, 0, 0}, /* Llama-3.2-1B's q/k/v */
        {{1, 256, 576, 16, {576}}, 0, 0},              /* SmolLM2's o, a group of one */
        {{1, 512, 2048, 16, {2048}}, 0, 0},            /* Llama-3.2-1B's o */
        {{3, 33, 37, 8, {37, 9, 9}}, 8, 3},           /* u at odd columns, 3 padding columns; W_f wider than x_f */
        {{2, 40, 64, 6, {96, 80}}, 0, 4},             /* n·R = 12: 4 padding columns, u copied element by element */
    };
    for (const fold_case &f : folds)
        for (int rg = 0; rg < 2; rg++) run_fold_case(f, (regime)rg, id++);
    /* the down projection's backward joined to SwiGLU's: SmolLM2's and Llama-3.2-1B's MLP widths, R 64,
     * a width of one column group; the two-pass fallback for F % 32 != 0 and an odd R */
    const int joins[][4] = {{256, 1536, 576, 16}, {128, 8192, 2048, 16}, {70, 8192, 2048, 64},
                            {33, 96, 40, 6},      {20, 100, 24, 8},      {16, 64, 32, 7}};
    for (const auto &j : joins) run_joined_case(j[0], j[1], j[2], j[3], id++);
    const int rc = test_finish("lora_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    free_gpu_gemm(g_gemm);
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
