/* gemm_parity.cu — gpu/gemm (the cuBLASLt wrapper) against ref/linear.h's naive triple loop.
 *
 *   bazel test --config=gpu //tests/parity:gemm_parity
 *   gemm_parity [--seed=N] [--bench]
 *
 * What is covered:
 *  - gpu_gemm in every mode: the four transpose pairs, bf16 and fp32 D, bias, accumulate
 *    (beta = 1), alpha ≠ 1, padded leading dimensions (the padding must be left untouched),
 *    strided batches, 2-byte-aligned operands; m, n, k swept around tile edges (1, 7, 8, 63..65,
 *    127..129, 255, 257) so that partial tiles in every dimension are exercised.
 *  - the linear-layer products (gpu_linear_forward_bf16 / backward_dx_bf16 / backward_dw_f32)
 *    against ref_linear_forward_naive / ref_linear_backward_naive (ACT_BF16) at tile edges and at
 *    slices of the real shapes: SmolLM2-135M (C 576, F 1536, fused QKV 960), Llama-3.2-1B (C 2048,
 *    KV 512, fused QKV 3072, F 8192, fused gate/up 16384), Llama-3.1-8B (C 4096, F 14336). Rows are
 *    a few dozen (the oracle is a triple loop); the bench runs the full N = 8192 rows.
 *
 * Reference: any product D = op(A)·op(B) is ref_linear_forward_naive(y, X, W) with X = op(A)
 * (m, k) and W = op(B)ᵀ (n, k) materialized on the host; alpha, the old D and the bias are
 * combined on the host in double and rounded once to D's type, as cuBLASLt's fp32 epilogue does.
 *
 * Tolerances (derived; STYLE.md tiers):
 *  - (a) exact, for every mode and shape: inputs are integers in [−8, 8] (exact in bf16),
 *    products ≤ 64 and sums of k ≤ 16384 terms stay below 2^24, so every partial sum is exact in
 *    fp32 in any order and split; alpha ∈ {1, 2, 0.5} and integer old D and bias keep the epilogue
 *    exact. The only rounding left is D's RNE to bf16 (sums above 256 land between bf16 values and
 *    exercise ties): once for a plain product; for a bf16 D with a bias or beta = 1 the epilogue
 *    may round before its last addition (undocumented; see epilogue_bf16_candidate), so D must
 *    equal one of the exact values of the possible rounding placements.
 *  - Normal-valued inputs: the fp32 sum of k bf16 products (each exact in fp32) in cuBLASLt's
 *    order (tiles, split K, tensor-core accumulation that may truncate instead of rounding) errs by
 *    at most one fp32 ulp of the partial sum per addition: |Δacc| ≤ k·FLT_EPSILON·Σ|a·b|, any
 *    order. With S = max over elements of |alpha|·Σ|a·b| (double) and 2 more fp32 operations in the
 *    epilogue, E = (k + 2)·FLT_EPSILON·S.
 *  - (c) fp32 D, elementwise: |got − ref| ≤ E plus D's own rounding (one fp32 ulp of |ref|):
 *    k = 2, eps = FLT_EPSILON, floor = E/(2·FLT_EPSILON). (A vs-naive rule against a sequential
 *    fp32 sum does not hold: at k = 2048 the H100's max and rms errors were 109% and 234% of
 *    2× the sequential sum's.)
 *  - (b) bf16 D: the oracle rounds once, the GPU once, plus (bias or beta = 1) up to two roundings
 *    inside the epilogue (see above), each of a value alpha·acc (+ C or bias) = true − the rest, so
 *    ≤ u·(|true| + max|C| + max|bias|) with u = BF16_EPS/2; relative parts 4u·|true| at most, within
 *    k·BF16_EPS·|ref| for k = 3 (k = 2 without an epilogue addition); absolute part
 *    E + 2u·(max|C| + max|bias|) [the last term only with an epilogue addition] = floor·k·BF16_EPS.
 *  - determinism: the same product twice gives the same bits (cuBLAS's guarantee for one GPU).
 *  - tuning (gpu_gemm_set_tuning): the trainers' products at Llama-3.2-1B's and SmolLM2's shapes —
 *    forward, dx and dW, bf16 and fp32 D, overwriting and accumulating, with a bias — through a
 *    tuning context and through one that keeps the heuristic's first algorithm: the same bits (the
 *    algorithms each context chose are printed); and products tuned at a first call on small
 *    integers (every order of additions exact) then run on random values: the same bits; and a
 *    context built without REFINE_GEMM_TUNE keeps the heuristic's first algorithm (no tuning).
 *  - NaN/Inf: an Inf planted in A must make exactly the row of D it feeds non-finite.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/gemm.h"
#include "io/check.h"
#include "ref/bf16.h"
#include "ref/linear.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;
static struct gpu_gemm *g_gemm;

enum values { VALUES_INT = 0, VALUES_NORMAL = 1 };

static void fill(struct rng *r, std::vector<float> &v, enum values kind) {
    if (kind == VALUES_INT)
        rng_fill_int(r, v.data(), (int64_t)v.size(), -8, 8);
    else
        rng_fill_normal(r, v.data(), (int64_t)v.size(), 0.0, 1.0);
    for (float &x : v) x = bf16_round(x);
}

/* Elements a stored operand of `rows` rows of `row_len` with leading dimension ld spans. */
static int64_t span(int64_t rows, int64_t row_len, int64_t ld) { return (rows - 1) * ld + row_len; }

/* A bf16 D with a bias or an old D (beta = 1) on integer inputs. cuBLASLt documents the epilogue's
 * math (D = alpha·acc + beta·C + bias) but not where it rounds to D's type, and the H100 run showed
 * a rounding before the last addition (alpha·acc + bias = 902 stored as 900: acc rounded to bf16
 * first, 898 -> 896, then 896 + 4 = 900; a single rounding gives 904). With integer operands every
 * fp32 sum below is exact, so each candidate placement of the roundings is an exact value: the
 * product's bits must equal one of them (exact tier over the set). Returns the candidate got
 * matches, or the single-rounding value when it matches none (what the failure message shows).
 * prod = alpha·acc, c = the old D (0 when overwriting), bias = the bias (0 when none). */
static float epilogue_bf16_candidate(float got, float prod, float c, float bias) {
    const float cands[] = {
        bf16_round(prod + c + bias),                          /* one rounding, the documented math */
        bf16_round(bf16_round(prod) + (c + bias)),            /* alpha·acc rounded first */
        bf16_round(bf16_round(bf16_round(prod) + c) + bias),  /* ... and again after C */
        bf16_round(bf16_round(bf16_round(prod) + bias) + c),  /* ... and again after the bias */
        bf16_round(bf16_round(prod + c) + bias),              /* alpha·acc + C, then the bias */
        bf16_round(bf16_round(prod + bias) + c),              /* alpha·acc + bias, then C */
    };
    for (float x : cands)
        if (memcmp(&x, &got, sizeof x) == 0) return x;
    return cands[0];
}

struct gemm_case {
    int m, n, k, batch;
    enum gemm_op op_a, op_b;
    enum gemm_out d_type;
    enum gemm_beta beta;
    int bias;
    float alpha;
    int pad;        /* extra elements per row in lda, ldb, ldd */
    int misalign;   /* offset every operand by one element (2-byte alignment) */
    enum values values;
};

static void describe(const gemm_case &c, char *s, size_t n) {
    snprintf(s, n, "m=%d n=%d k=%d batch=%d op_a=%c op_b=%c D=%s%s%s alpha=%g pad=%d%s", c.m, c.n, c.k, c.batch,
             c.op_a == GEMM_TRANS ? 'T' : 'N', c.op_b == GEMM_TRANS ? 'T' : 'N', c.d_type == GEMM_OUT_BF16 ? "bf16" : "f32",
             c.bias ? " bias" : "", c.beta == GEMM_ACCUMULATE ? " accumulate" : "", (double)c.alpha, c.pad,
             c.misalign ? " misaligned" : "");
}

/* Runs one generic product on the GPU and checks it against the oracle. */
static void run_gemm_case(const gemm_case &c, int case_id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)case_id;
    struct rng r;
    rng_init(&r, seed);
    char shape[192];
    describe(c, shape, sizeof shape);

    const int64_t a_rows = c.op_a == GEMM_NO_TRANS ? c.m : c.k, a_len = c.op_a == GEMM_NO_TRANS ? c.k : c.m;
    const int64_t b_rows = c.op_b == GEMM_NO_TRANS ? c.k : c.n, b_len = c.op_b == GEMM_NO_TRANS ? c.n : c.k;
    const int64_t lda = a_len + c.pad, ldb = b_len + c.pad, ldd = c.n + c.pad;
    const int64_t a_span = span(a_rows, a_len, lda), b_span = span(b_rows, b_len, ldb), d_span = span(c.m, c.n, ldd);
    /* Batch strides leave a gap of 24 elements between matrices (not a multiple of the span). */
    const int64_t sa = a_span + 24, sb = b_span + 24, sd = d_span + 24;
    const int64_t off = c.misalign ? 1 : 0;
    const int64_t a_total = off + (c.batch - 1) * sa + a_span, b_total = off + (c.batch - 1) * sb + b_span;
    const int64_t d_total = off + (c.batch - 1) * sd + d_span;

    std::vector<float> a(a_total), b(b_total), bias(c.n), d0(d_total);
    fill(&r, a, c.values);
    fill(&r, b, c.values);
    fill(&r, bias, c.values);
    const bool f32 = c.d_type == GEMM_OUT_F32;
    if (c.beta == GEMM_ACCUMULATE) {
        rng_fill_int(&r, d0.data(), d_total, -1000, 1000);
        if (!f32)
            for (float &x : d0) x = bf16_round(x);
    }
    /* D's initial image: the old values where accumulating, poison elsewhere (padding and gaps
     * must keep it, the product's elements must overwrite it). */
    std::vector<unsigned char> d_img(d_total * (f32 ? 4 : 2));
    if (f32) {
        float *p = reinterpret_cast<float *>(d_img.data());
        poison_f32(p, d_total);
        if (c.beta == GEMM_ACCUMULATE) memcpy(p, d0.data(), d_total * 4);
    } else {
        uint16_t *p = reinterpret_cast<uint16_t *>(d_img.data());
        poison_bf16(p, d_total);
        if (c.beta == GEMM_ACCUMULATE)
            for (int64_t i = 0; i < d_total; i++) p[i] = bf16_from_float(d0[i]);
    }

    /* Oracle, batch by batch. */
    std::vector<float> X((size_t)c.m * c.k), W((size_t)c.n * c.k), y((size_t)c.m * c.n);
    std::vector<float> want, got; /* valid elements only, in (batch, row, col) order */
    std::vector<float> prod, cold, bias_e;   /* alpha·acc, old D, bias per element (integer inputs) */
    double s_max = 0, c_max = 0, bias_max = 0; /* max |alpha|·Σ|a·b|, max |old D|, max |bias| */
    for (int bt = 0; bt < c.batch; bt++) {
        const float *A = a.data() + off + bt * sa, *B = b.data() + off + bt * sb;
        for (int i = 0; i < c.m; i++)
            for (int kk = 0; kk < c.k; kk++)
                X[(size_t)i * c.k + kk] = c.op_a == GEMM_NO_TRANS ? A[i * lda + kk] : A[(int64_t)kk * lda + i];
        for (int j = 0; j < c.n; j++)
            for (int kk = 0; kk < c.k; kk++)
                W[(size_t)j * c.k + kk] = c.op_b == GEMM_NO_TRANS ? B[(int64_t)kk * ldb + j] : B[(int64_t)j * ldb + kk];
        ref_linear_forward_naive(y.data(), X.data(), W.data(), nullptr, c.m, c.k, c.n, ACT_F32);
        for (int i = 0; i < c.m; i++)
            for (int j = 0; j < c.n; j++) {
                double v = (double)c.alpha * y[(size_t)i * c.n + j];
                const float cv = c.beta == GEMM_ACCUMULATE ? d0[off + bt * sd + i * ldd + j] : 0.0f;
                const float bv = c.bias ? bias[j] : 0.0f;
                prod.push_back((float)v), cold.push_back(cv), bias_e.push_back(bv);
                c_max = fmax(c_max, fabs(cv)), bias_max = fmax(bias_max, fabs(bv));
                v += cv;
                v += bv;
                want.push_back(f32 ? (float)v : bf16_round((float)v));
            }
        if (c.values == VALUES_NORMAL)
            for (int i = 0; i < c.m; i++)
                for (int j = 0; j < c.n; j++) {
                    double sabs = 0.0; /* Σ|a·b|, the scale of the fp32 sum's error bound */
                    for (int kk = 0; kk < c.k; kk++)
                        sabs += fabs((double)X[(size_t)i * c.k + kk] * W[(size_t)j * c.k + kk]);
                    s_max = fmax(s_max, fabs((double)c.alpha) * sabs);
                }
    }

    /* Device. */
    std::vector<uint16_t> ab = bits_of(a), bb = bits_of(b), biasb = bits_of(bias);
    struct dev_buf da, db, dbias, dd;
    dev_buf_alloc(&da, "A", ab.size() * 2, POISON_NONE, ab.data());
    dev_buf_alloc(&db, "B", bb.size() * 2, POISON_NONE, bb.data());
    dev_buf_alloc(&dbias, "bias", biasb.size() * 2, POISON_NONE, biasb.data());
    dev_buf_alloc(&dd, "D", d_img.size(), POISON_NONE, d_img.data());
    struct gemm_args p;
    memset(&p, 0, sizeof p);
    const size_t esz = f32 ? 4 : 2;
    p.d = (unsigned char *)dd.data + off * esz, p.d_type = c.d_type, p.ldd = ldd, p.stride_d = sd;
    p.a = (const uint16_t *)da.data + off, p.op_a = c.op_a, p.lda = lda, p.stride_a = sa;
    p.b = (const uint16_t *)db.data + off, p.op_b = c.op_b, p.ldb = ldb, p.stride_b = sb;
    p.bias = c.bias ? (const uint16_t *)dbias.data : nullptr;
    p.m = c.m, p.n = c.n, p.k = c.k, p.batch = c.batch, p.alpha = c.alpha, p.beta = c.beta;
    gpu_gemm(g_gemm, &p, g_stream);
    std::vector<unsigned char> out(d_img.size()), out2(d_img.size());
    dev_buf_download(&dd, out.data(), 0);
    for (struct dev_buf *bf : {&da, &db, &dbias}) {
        std::vector<unsigned char> tmp(bf->nbytes);
        dev_buf_download(bf, tmp.data(), 0);
    }

    /* Padding, gaps and the leading offset keep their initial bytes; the valid part is compared. */
    int64_t touched = 0;
    std::vector<char> valid(d_total, 0);
    for (int bt = 0; bt < c.batch; bt++)
        for (int i = 0; i < c.m; i++)
            for (int j = 0; j < c.n; j++) {
                const int64_t e = off + bt * sd + i * ldd + j;
                valid[e] = 1;
                got.push_back(f32 ? reinterpret_cast<const float *>(out.data())[e]
                                  : bf16_to_float(reinterpret_cast<const uint16_t *>(out.data())[e]));
            }
    for (int64_t e = 0; e < d_total; e++)
        if (!valid[e] && memcmp(&out[e * esz], &d_img[e * esz], esz) != 0) touched++;
    EXPECT(touched == 0, "gemm %s: %lld elements outside the matrices were written", shape, (long long)touched);

    struct cmp_case cc = {"gemm", "D", shape, f32 ? "f32" : "bf16", seed};
    const int64_t n = (int64_t)want.size();
    const bool epi_add = !f32 && (c.bias || c.beta == GEMM_ACCUMULATE);
    if (c.values == VALUES_INT) {
        if (epi_add)
            for (int64_t e = 0; e < n; e++) want[e] = epilogue_bf16_candidate(got[e], prod[e], cold[e], bias_e[e]);
        cmp_exact_f32(&cc, got.data(), want.data(), n);
    } else {
        const double E = (double)(c.k + 2) * FLT_EPSILON * s_max; /* fp32 sum, any order (file comment) */
        if (f32) {
            cmp_elementwise(&cc, got.data(), want.data(), n, FLT_EPSILON, 2.0, E / (2.0 * FLT_EPSILON), nullptr);
        } else {
            const double u = BF16_EPS / 2.0, k = epi_add ? 3.0 : 2.0;
            const double abs_err = E + (epi_add ? 2.0 * u * (c_max + bias_max) : 0.0);
            cmp_elementwise(&cc, got.data(), want.data(), n, BF16_EPS, k, abs_err / (k * BF16_EPS), nullptr);
        }
    }

    /* Determinism: the same product again (accumulating cases start from the same old D). */
    dev_buf_reset(&dd, d_img.data());
    gpu_gemm(g_gemm, &p, g_stream);
    dev_buf_download(&dd, out2.data(), 0);
    cc.what = "D determinism";
    cmp_exact_bytes(&cc, out2.data(), out.data(), out.size());

    for (struct dev_buf *bf : {&da, &db, &dbias, &dd}) dev_buf_free(bf);
}

__global__ static void fill_normalish(uint16_t *p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
        p[i] = __bfloat16_as_ushort(__float2bfloat16(((int)(x & 0xffff) - 32768) * (1.0f / 32768.0f)));
    }
}

static struct gpu_gemm *g_default_ctx; /* built with REFINE_GEMM_TUNE unset (run_tuning_cases) */

/* Small integers (−2 .. 2) in bf16: every sum of their products is exact, in any order. */
__global__ static void fill_small_ints(uint16_t *p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
        p[i] = __bfloat16_as_ushort(__float2bfloat16((float)((int)(x % 5u) - 2)));
    }
}

/* One product (c: batch 1, no padding, alpha 1) through a tuning context and through an untuned one
 * (the latter's D from the same old values when accumulating): bitwise equal. With exact_first the
 * first call — the one that tunes — sees small integers, on which every order of additions gives
 * the same bits, and the comparison is of a second call on random values: tuning must not take an
 * algorithm that agrees only on its first operands (regression: the trainers' runs differed from
 * process to process when it timed candidates on those). */
static void run_tuning_case(struct gpu_gemm *tuned, struct gpu_gemm *plain, const char *name, const gemm_case &c,
                            int exact_first) {
    const int64_t a_n = (int64_t)c.m * c.k, b_n = (int64_t)c.k * c.n, d_n = (int64_t)c.m * c.n;
    const size_t es = c.d_type == GEMM_OUT_BF16 ? 2 : 4;
    uint16_t *a, *b, *bs;
    unsigned char *d1, *d2;
    CUDA_CHECK(cudaMalloc(&a, (size_t)a_n * 2));
    CUDA_CHECK(cudaMalloc(&b, (size_t)b_n * 2));
    CUDA_CHECK(cudaMalloc(&bs, (size_t)c.n * 2));
    CUDA_CHECK(cudaMalloc(&d1, (size_t)d_n * es));
    CUDA_CHECK(cudaMalloc(&d2, (size_t)d_n * es));
    if (exact_first) {
        fill_small_ints<<<1024, 256, 0, g_stream>>>(a, a_n, 5u + (uint32_t)c.m);
        fill_small_ints<<<1024, 256, 0, g_stream>>>(b, b_n, 6u + (uint32_t)c.k);
    } else {
        fill_normalish<<<1024, 256, 0, g_stream>>>(a, a_n, 1u + (uint32_t)c.m);
        fill_normalish<<<1024, 256, 0, g_stream>>>(b, b_n, 2u + (uint32_t)c.k);
    }
    fill_normalish<<<64, 256, 0, g_stream>>>(bs, c.n, 3u);
    /* the old D (accumulating): bf16 or fp32 values, the same in both */
    fill_normalish<<<1024, 256, 0, g_stream>>>(reinterpret_cast<uint16_t *>(d1), d_n * (int64_t)es / 2, 4u);
    CUDA_CHECK(cudaMemcpyAsync(d2, d1, (size_t)d_n * es, cudaMemcpyDeviceToDevice, g_stream));
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.m = c.m, p.n = c.n, p.k = c.k, p.batch = 1, p.alpha = 1.0f, p.beta = c.beta, p.d_type = c.d_type;
    p.a = a, p.op_a = c.op_a, p.lda = c.op_a == GEMM_NO_TRANS ? c.k : c.m;
    p.b = b, p.op_b = c.op_b, p.ldb = c.op_b == GEMM_NO_TRANS ? c.n : c.k;
    p.ldd = c.n, p.bias = c.bias ? bs : nullptr;
    p.d = d1;
    gpu_gemm(tuned, &p, g_stream);
    p.d = d2;
    gpu_gemm(plain, &p, g_stream);
    if (exact_first) { /* the tuned plans now fixed: random values, the same old D in both */
        fill_normalish<<<1024, 256, 0, g_stream>>>(a, a_n, 1u + (uint32_t)c.m);
        fill_normalish<<<1024, 256, 0, g_stream>>>(b, b_n, 2u + (uint32_t)c.k);
        fill_normalish<<<1024, 256, 0, g_stream>>>(reinterpret_cast<uint16_t *>(d1), d_n * (int64_t)es / 2, 7u);
        CUDA_CHECK(cudaMemcpyAsync(d2, d1, (size_t)d_n * es, cudaMemcpyDeviceToDevice, g_stream));
        p.d = d1;
        gpu_gemm(tuned, &p, g_stream);
        p.d = d2;
        gpu_gemm(plain, &p, g_stream);
    }
    std::vector<unsigned char> h1((size_t)d_n * es), h2((size_t)d_n * es);
    CUDA_CHECK(cudaMemcpyAsync(h1.data(), d1, h1.size(), cudaMemcpyDeviceToHost, g_stream));
    CUDA_CHECK(cudaMemcpyAsync(h2.data(), d2, h2.size(), cudaMemcpyDeviceToHost, g_stream));
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    char shape[256], desc[192], alg1[160], alg2[160];
    describe(c, desc, sizeof desc);
    snprintf(shape, sizeof shape, "%s: %s", name, desc);
    struct cmp_case cc = {"gemm", exact_first ? "tuned D = untuned D (tuned on exact values)" : "tuned D = untuned D",
                          shape, c.d_type == GEMM_OUT_BF16 ? "bf16" : "f32", g_seed};
    cmp_exact_bytes(&cc, h1.data(), h2.data(), h1.size());
    p.d = d1;
    gpu_gemm_algo_name(tuned, &p, alg1, sizeof alg1);
    p.d = d2;
    gpu_gemm_algo_name(plain, &p, alg2, sizeof alg2);
    printf("tuning %s%s: %s%s\n", shape, exact_first ? " (tuned on exact values)" : "",
           strcmp(alg1, alg2) ? "chose " : "kept ", alg1);
    /* a context built without REFINE_GEMM_TUNE does not tune (tuned runs are not reproducible run
     * to run: gpu/gemm.h): after a call it holds the heuristic's first algorithm, as plain does */
    char alg3[160];
    p.d = d2;
    gpu_gemm(g_default_ctx, &p, g_stream);
    gpu_gemm_algo_name(g_default_ctx, &p, alg3, sizeof alg3);
    EXPECT(strcmp(alg3, alg2) == 0, "gemm %s: a default context chose %s, not the heuristic's first (%s): it tuned",
           shape, alg3, alg2);
    for (void *q : {(void *)a, (void *)b, (void *)bs, (void *)d1, (void *)d2}) CUDA_CHECK(cudaFree(q));
}

struct tuning_case {
    const char *name;
    gemm_case c; /* m, n, k, batch, op_a, op_b, D, beta, bias, alpha, pad, misalign, values */
};

/* Each case through a fresh tuning context and a fresh untuned one (every plan new to both). */
static void run_tuning_table(const tuning_case *cases, size_t n, int exact_first) {
    struct gpu_gemm *tuned = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE), *plain = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    gpu_gemm_set_tuning(tuned, 1);
    gpu_gemm_set_tuning(plain, 0);
    for (size_t i = 0; i < n; i++) run_tuning_case(tuned, plain, cases[i].name, cases[i].c, exact_first);
    free_gpu_gemm(tuned);
    free_gpu_gemm(plain);
}

static void run_tuning_cases(void) {
    unsetenv("REFINE_GEMM_TUNE");
    g_default_ctx = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    const gemm_op N_ = GEMM_NO_TRANS, T_ = GEMM_TRANS;
    const gemm_out B16 = GEMM_OUT_BF16, F32 = GEMM_OUT_F32;
    const gemm_beta OW = GEMM_OVERWRITE, AC = GEMM_ACCUMULATE;
    const tuning_case cases[] = {
        /* Llama-3.2-1B 16×512: y = x Wᵀ, dx = dy W, dW = dyᵀ x (the folded q/k/v and gate/up widths) */
        {"1B q/k/v forward", {8192, 3072, 2112, 1, N_, T_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B gate/up forward", {8192, 16384, 2112, 1, N_, T_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B down forward", {8192, 2048, 8192, 1, N_, T_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B down dx", {8192, 8192, 2048, 1, N_, N_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B gate/up dx", {8192, 2112, 16384, 1, N_, N_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B lm_head chunk", {2048, 128256, 2048, 1, N_, T_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B down dW fp32", {2048, 8192, 8192, 1, T_, N_, F32, AC, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B gate/up dW bf16", {16384, 2048, 8192, 1, T_, N_, B16, AC, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B o dx accumulate", {8192, 2048, 2048, 1, N_, N_, B16, AC, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        /* SmolLM2 32×512 and a biased (Qwen2-style) q/k/v */
        {"SmolLM2 gate/up forward", {16384, 3072, 576, 1, N_, T_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"SmolLM2 down dx", {16384, 1536, 576, 1, N_, N_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"biased q/k/v forward", {4096, 1152, 896, 1, N_, T_, B16, OW, 1, 1.0f, 0, 0, VALUES_NORMAL}},
    };
    run_tuning_table(cases, sizeof cases / sizeof cases[0], 0);
    /* tuned at a first call on exact values (fresh contexts: every plan new), then random values:
     * the tiny Qwen2 of train_parity (N 128, C 96, F 224: the forward, dx and dW of its MLP and a
     * biased q/k/v) and two of Llama-3.2-1B's */
    const tuning_case exact_cases[] = {
        {"tiny gate/up forward", {128, 448, 96, 1, N_, T_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"tiny down dx", {128, 224, 96, 1, N_, N_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"tiny down dW fp32", {96, 224, 128, 1, T_, N_, F32, AC, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"tiny biased q/k/v forward", {128, 160, 96, 1, N_, T_, B16, OW, 1, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B gate/up forward", {8192, 16384, 2112, 1, N_, T_, B16, OW, 0, 1.0f, 0, 0, VALUES_NORMAL}},
        {"1B down dW fp32", {2048, 8192, 8192, 1, T_, N_, F32, AC, 0, 1.0f, 0, 0, VALUES_NORMAL}},
    };
    run_tuning_table(exact_cases, sizeof exact_cases / sizeof exact_cases[0], 1);
    free_gpu_gemm(g_default_ctx);
}

/* The three products of a linear layer against ref_linear_*_naive (ACT_BF16), integer inputs. */
static void run_linear_case(int N, int C_in, int C_out, int with_bias, int plant_inf, int case_id) {
    const uint64_t seed = g_seed * 1000003u + 500000u + (uint64_t)case_id;
    struct rng r;
    rng_init(&r, seed);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d%s%s", N, C_in, C_out, with_bias ? " bias" : "",
             plant_inf ? " inf" : "");
    std::vector<float> x((size_t)N * C_in), w((size_t)C_out * C_in), b(C_out), dy((size_t)N * C_out), dw0((size_t)C_out * C_in);
    fill(&r, x, VALUES_INT);
    fill(&r, w, VALUES_INT);
    fill(&r, b, VALUES_INT);
    fill(&r, dy, VALUES_INT);
    rng_fill_int(&r, dw0.data(), (int64_t)dw0.size(), -1000, 1000);
    if (plant_inf && N >= 3) x[(size_t)1 * C_in + C_in / 2] = INFINITY;

    std::vector<float> y_r((size_t)N * C_out), dx_r((size_t)N * C_in), dw_r(dw0);
    ref_linear_forward_naive(y_r.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C_in, C_out, ACT_BF16);
    ref_linear_backward_naive(dx_r.data(), plant_inf ? nullptr : dw_r.data(), nullptr, dy.data(), x.data(), w.data(), N,
                              C_in, C_out, ACT_BF16);

    std::vector<uint16_t> xb = bits_of(x), wb = bits_of(w), bb = bits_of(b), dyb = bits_of(dy);
    struct dev_buf bx, bw, bbias, bdy, by, bdx, bdw;
    dev_buf_alloc(&bx, "x", xb.size() * 2, POISON_NONE, xb.data());
    dev_buf_alloc(&bw, "w", wb.size() * 2, POISON_NONE, wb.data());
    dev_buf_alloc(&bbias, "b", bb.size() * 2, POISON_NONE, bb.data());
    dev_buf_alloc(&bdy, "dy", dyb.size() * 2, POISON_NONE, dyb.data());
    dev_buf_alloc(&by, "y", y_r.size() * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdx, "dx", dx_r.size() * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdw, "dw", dw0.size() * 4, POISON_NONE, dw0.data());
    gpu_linear_forward_bf16(g_gemm, (uint16_t *)by.data, (const uint16_t *)bx.data, (const uint16_t *)bw.data,
                            with_bias ? (const uint16_t *)bbias.data : nullptr, N, C_in, C_out, g_stream);
    gpu_linear_backward_dx_bf16(g_gemm, (uint16_t *)bdx.data, (const uint16_t *)bdy.data, (const uint16_t *)bw.data, N,
                                C_in, C_out, GEMM_OVERWRITE, g_stream);
    if (!plant_inf)
        gpu_linear_backward_dw(g_gemm, bdw.data, GEMM_OUT_F32, (const uint16_t *)bdy.data, (const uint16_t *)bx.data, N,
                               C_in, C_out, g_stream);
    std::vector<uint16_t> yb(y_r.size()), dxb(dx_r.size());
    std::vector<float> y_g, dx_g, dw_g(dw0.size());
    dev_buf_download(&by, yb.data(), 1);
    dev_buf_download(&bdx, dxb.data(), 1);
    dev_buf_download(&bdw, dw_g.data(), 0);
    for (uint16_t h : yb) y_g.push_back(bf16_to_float(h));
    for (uint16_t h : dxb) dx_g.push_back(bf16_to_float(h));

    struct cmp_case cc = {"linear_forward", "y", shape, "bf16", seed};
    if (with_bias) {
        /* the bias epilogue may round x Wᵀ to bf16 before adding the bias (epilogue_bf16_candidate) */
        std::vector<float> xw((size_t)N * C_out);
        ref_linear_forward_naive(xw.data(), x.data(), w.data(), nullptr, N, C_in, C_out, ACT_F32);
        for (int i = 0; i < N; i++)
            for (int o = 0; o < C_out; o++) {
                const size_t e = (size_t)i * C_out + o;
                y_r[e] = epilogue_bf16_candidate(y_g[e], xw[e], 0.0f, b[o]);
            }
    }
    cmp_exact_f32(&cc, y_g.data(), y_r.data(), (int64_t)y_r.size());
    cc.op = "linear_backward";
    cc.what = "dx";
    cmp_exact_f32(&cc, dx_g.data(), dx_r.data(), (int64_t)dx_r.size());
    if (!plant_inf) {
        cc.what = "dw (accumulated)";
        cc.dtype = "f32";
        cmp_exact_f32(&cc, dw_g.data(), dw_r.data(), (int64_t)dw_r.size());
    }

    /* dW with dy and x in wider rows (gpu_linear_backward_dw_ld: a member of products side by side):
     * the spare columns hold large values that must not reach dW; exact on integer values */
    if (!plant_inf) {
        const int64_t lddy = C_out + 24, ldx = C_in + 8;
        std::vector<uint16_t> dyw((size_t)N * lddy, bf16_from_float(4096.0f)),
            xw((size_t)N * ldx, bf16_from_float(-512.0f));
        for (int i = 0; i < N; i++) {
            memcpy(&dyw[(size_t)i * lddy], &dyb[(size_t)i * C_out], (size_t)C_out * 2);
            memcpy(&xw[(size_t)i * ldx], &xb[(size_t)i * C_in], (size_t)C_in * 2);
        }
        struct dev_buf bdyw, bxw, bdww;
        dev_buf_alloc(&bdyw, "dy (wide rows)", dyw.size() * 2, POISON_NONE, dyw.data());
        dev_buf_alloc(&bxw, "x (wide rows)", xw.size() * 2, POISON_NONE, xw.data());
        dev_buf_alloc(&bdww, "dw (strided operands)", dw0.size() * 4, POISON_NONE, dw0.data());
        gpu_linear_backward_dw_ld(g_gemm, bdww.data, GEMM_OUT_F32, (const uint16_t *)bdyw.data, lddy,
                                  (const uint16_t *)bxw.data, ldx, N, C_in, C_out, g_stream);
        std::vector<float> dww(dw0.size());
        dev_buf_download(&bdww, dww.data(), 0);
        cc.what = "dw (strided dy and x, accumulated)";
        cc.dtype = "f32";
        cmp_exact_f32(&cc, dww.data(), dw_r.data(), (int64_t)dw_r.size());
        for (struct dev_buf *bf : {&bdyw, &bxw, &bdww}) dev_buf_free(bf);
    }

    /* dx accumulate mode: dx_old + dy W, rounded once or with dy W rounded to bf16 first
     * (epilogue_bf16_candidate). */
    if (!plant_inf) {
        std::vector<float> dx_old((size_t)N * C_in);
        rng_fill_int(&r, dx_old.data(), (int64_t)dx_old.size(), -100, 100);
        std::vector<uint16_t> dx_oldb = bits_of(dx_old);
        std::vector<float> dx_f32((size_t)N * C_in), want(dx_old.size());
        ref_linear_backward_naive(dx_f32.data(), nullptr, nullptr, dy.data(), x.data(), w.data(), N, C_in, C_out, ACT_F32);
        dev_buf_reset(&bdx, dx_oldb.data());
        gpu_linear_backward_dx_bf16(g_gemm, (uint16_t *)bdx.data, (const uint16_t *)bdy.data, (const uint16_t *)bw.data,
                                    N, C_in, C_out, GEMM_ACCUMULATE, g_stream);
        dev_buf_download(&bdx, dxb.data(), 0);
        for (size_t i = 0; i < dxb.size(); i++) dx_g[i] = bf16_to_float(dxb[i]);
        for (size_t i = 0; i < want.size(); i++) want[i] = epilogue_bf16_candidate(dx_g[i], dx_f32[i], dx_old[i], 0.0f);
        cc.what = "dx (accumulate)";
        cc.dtype = "bf16";
        cmp_exact_f32(&cc, dx_g.data(), want.data(), (int64_t)want.size());
    }

    /* dW into a bf16 accumulator (NUMERICS.md §5.6): bf16(dw_old + dyᵀx), rounded once or with dyᵀx
     * rounded to bf16 first (epilogue_bf16_candidate), as the dx accumulate mode above. */
    if (!plant_inf) {
        std::vector<float> dw_old((size_t)C_out * C_in), dw_f32(dw_old.size(), 0.0f), dw_got(dw_old.size()),
            want(dw_old.size());
        rng_fill_int(&r, dw_old.data(), (int64_t)dw_old.size(), -100, 100);
        std::vector<uint16_t> dw_oldb = bits_of(dw_old), dwb(dw_old.size());
        ref_linear_backward_naive(nullptr, dw_f32.data(), nullptr, dy.data(), x.data(), w.data(), N, C_in, C_out,
                                  ACT_F32);
        struct dev_buf bdw16;
        dev_buf_alloc(&bdw16, "dw bf16", dw_oldb.size() * 2, POISON_NONE, dw_oldb.data());
        gpu_linear_backward_dw(g_gemm, bdw16.data, GEMM_OUT_BF16, (const uint16_t *)bdy.data, (const uint16_t *)bx.data,
                               N, C_in, C_out, g_stream);
        dev_buf_download(&bdw16, dwb.data(), 0);
        for (size_t i = 0; i < dwb.size(); i++) dw_got[i] = bf16_to_float(dwb[i]);
        for (size_t i = 0; i < want.size(); i++) want[i] = epilogue_bf16_candidate(dw_got[i], dw_f32[i], dw_old[i], 0.0f);
        cc.what = "dw (bf16 accumulator)";
        cc.dtype = "bf16";
        cmp_exact_f32(&cc, dw_got.data(), want.data(), (int64_t)want.size());
        dev_buf_free(&bdw16);
    }
    for (struct dev_buf *bf : {&bx, &bw, &bbias, &bdy, &by, &bdx, &bdw}) dev_buf_free(bf);
}

/* ---- bench: the wrapper against a direct cuBLASLt call with the same algorithm choice ---- */

struct direct_gemm {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    void *ws;
    size_t ws_bytes;
    const void *a, *b;
    void *d;
    float beta;
};

/* A direct cuBLASLt product for the row-major D (m, n) = op(A)·op(B) (same mapping as gpu/gemm.cu:
 * its "A" is our B). No plan cache, no checks beyond the status: the raw rate. */
static void direct_setup(direct_gemm *g, const gemm_args *p, void *ws, size_t ws_bytes) {
    CUDA_CHECK(cublasLtCreate(&g->h));
    CUDA_CHECK(cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = p->op_b == GEMM_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = p->op_a == GEMM_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUDA_CHECK(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUDA_CHECK(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CUDA_CHECK(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_16BF, ta == CUBLAS_OP_N ? p->n : p->k,
                                          ta == CUBLAS_OP_N ? p->k : p->n, p->ldb));
    CUDA_CHECK(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_16BF, tb == CUBLAS_OP_N ? p->k : p->m,
                                          tb == CUBLAS_OP_N ? p->m : p->k, p->lda));
    CUDA_CHECK(cublasLtMatrixLayoutCreate(&g->ld, p->d_type == GEMM_OUT_BF16 ? CUDA_R_16BF : CUDA_R_32F, p->n, p->m,
                                          p->ldd));
    cublasLtMatmulPreference_t pref;
    CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t wsb = ws_bytes;
    CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(g->h, g->desc, g->la, g->lb, g->ld, g->ld, pref, 1, &res, &found));
    CHECK(found == 1, "direct cuBLASLt: no algorithm");
    CUDA_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    g->algo = res.algo;
    g->ws = ws, g->ws_bytes = ws_bytes;
    g->a = p->b, g->b = p->a, g->d = p->d;
    g->beta = p->beta == GEMM_ACCUMULATE ? 1.0f : 0.0f;
}

static void direct_free(direct_gemm *g) {
    CUDA_CHECK(cublasLtMatrixLayoutDestroy(g->la));
    CUDA_CHECK(cublasLtMatrixLayoutDestroy(g->lb));
    CUDA_CHECK(cublasLtMatrixLayoutDestroy(g->ld));
    CUDA_CHECK(cublasLtMatmulDescDestroy(g->desc));
    CUDA_CHECK(cublasLtDestroy(g->h));
}

static void direct_call(void *ctx, cudaStream_t s) {
    direct_gemm *g = static_cast<direct_gemm *>(ctx);
    const float alpha = 1.0f;
    CUDA_CHECK(cublasLtMatmul(g->h, g->desc, &alpha, g->a, g->la, g->b, g->lb, &g->beta, g->d, g->ld, g->d, g->ld,
                              &g->algo, g->ws, g->ws_bytes, s));
}

struct wrapper_ctx {
    gemm_args p;
};

static void wrapper_call(void *ctx, cudaStream_t s) { gpu_gemm(g_gemm, &static_cast<wrapper_ctx *>(ctx)->p, s); }

/* Times the wrapper and the direct call on one product; prints both JSON lines and the ratio. */
static double bench_product(const char *op, const char *shape, gemm_args p, void *ws, size_t ws_bytes, double ceiling_tf) {
    const double flops = 2.0 * p.m * (double)p.n * p.k * p.batch;
    direct_gemm dg;
    direct_setup(&dg, &p, ws, ws_bytes);
    wrapper_ctx wc = {p};
    const int inner = flops > 1e12 ? 3 : 10;
    struct bench_result rd = bench_time(direct_call, &dg, g_stream, 5, 21, inner);
    struct bench_result rw = bench_time(wrapper_call, &wc, g_stream, 5, 21, inner);
    char name[96];
    snprintf(name, sizeof name, "%s_direct_cublaslt", op);
    bench_json(name, shape, 0, flops, rd, ceiling_tf);
    bench_json(op, shape, 0, flops, rw, ceiling_tf);
    const double pct = 100.0 * rd.median_ms / rw.median_ms;
    printf("{\"op\":\"%s\",\"shape\":\"%s\",\"wrapper_pct_of_direct\":%.1f}\n", op, shape, pct);
    direct_free(&dg);
    return pct;
}

static void bench(void) {
    const size_t ws_bytes = GEMM_DEFAULT_WORKSPACE;
    void *ws;
    CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    /* The ceiling: a direct bf16 GEMM 8192³ on this GPU (PERFORMANCE.md's measurement). */
    const int S = 8192;
    uint16_t *a, *b, *d;
    const size_t big = (size_t)8192 * 128256; /* the largest bf16 operand below: dy of the 1B lm_head */
    CUDA_CHECK(cudaMalloc(&a, big * 2));
    CUDA_CHECK(cudaMalloc(&b, big * 2));
    CUDA_CHECK(cudaMalloc(&d, big * 4));
    CUDA_CHECK(cudaMemset(a, 0x3C, big * 2)); /* bf16 0x3C3C ≈ 0.0115: finite, no denormals */
    CUDA_CHECK(cudaMemset(b, 0x3C, big * 2));
    double ceiling;
    {
        gemm_args p;
        memset(&p, 0, sizeof p);
        p.d = d, p.d_type = GEMM_OUT_BF16, p.ldd = S;
        p.a = a, p.op_a = GEMM_NO_TRANS, p.lda = S;
        p.b = b, p.op_b = GEMM_TRANS, p.ldb = S;
        p.m = p.n = p.k = S, p.batch = 1, p.alpha = 1.0f;
        direct_gemm dg;
        direct_setup(&dg, &p, ws, ws_bytes);
        struct bench_result r = bench_time(direct_call, &dg, g_stream, 5, 21, 3);
        ceiling = 2.0 * S * (double)S * S / (r.median_ms * 1e-3) / 1e12;
        printf("{\"op\":\"gemm_ceiling_bf16_8192cubed\",\"device\":\"%s\",\"TFLOPs\":%.1f,\"median_ms\":%.4f}\n",
               parity_device_name(), ceiling, r.median_ms);
        direct_free(&dg);
    }
    struct model {
        const char *name;
        int N, C, qkv, F, V;
    } models[] = {{"smollm2-135m", 16384, 576, 960, 1536, 49152},
                  {"llama-3.2-1b", 8192, 2048, 3072, 8192, 128256},
                  {"llama-3.1-8b", 8192, 4096, 6144, 14336, 128256}};
    double worst = 1e9;
    for (const model &md : models) {
        struct lin {
            const char *name;
            int C_in, C_out;
        } lins[] = {{"qkv", md.C, md.qkv}, {"o", md.C, md.C}, {"gate_up", md.C, 2 * md.F}, {"down", md.F, md.C},
                    {"lm_head", md.C, md.V}};
        for (const lin &l : lins) {
            if (strcmp(l.name, "lm_head") == 0 && md.C == 4096) continue; /* same V as 1B; keeps the bench short */
            char shape[128];
            snprintf(shape, sizeof shape, "%s %s N=%d C_in=%d C_out=%d", md.name, l.name, md.N, l.C_in, l.C_out);
            gemm_args p;
            memset(&p, 0, sizeof p);
            p.alpha = 1.0f, p.batch = 1;
            /* forward y = x Wᵀ */
            p.d = d, p.d_type = GEMM_OUT_BF16, p.ldd = l.C_out;
            p.a = a, p.op_a = GEMM_NO_TRANS, p.lda = l.C_in;
            p.b = b, p.op_b = GEMM_TRANS, p.ldb = l.C_in;
            p.m = md.N, p.n = l.C_out, p.k = l.C_in, p.beta = GEMM_OVERWRITE;
            worst = fmin(worst, bench_product("linear_forward", shape, p, ws, ws_bytes, ceiling));
            /* dx = dy W */
            p.ldd = l.C_in, p.lda = l.C_out, p.op_b = GEMM_NO_TRANS, p.ldb = l.C_in;
            p.n = l.C_in, p.k = l.C_out;
            worst = fmin(worst, bench_product("linear_backward_dx", shape, p, ws, ws_bytes, ceiling));
            /* dW += dyᵀ x (fp32) */
            p.d_type = GEMM_OUT_F32, p.ldd = l.C_in;
            p.op_a = GEMM_TRANS, p.lda = l.C_out, p.op_b = GEMM_NO_TRANS, p.ldb = l.C_in;
            p.m = l.C_out, p.n = l.C_in, p.k = md.N, p.beta = GEMM_ACCUMULATE;
            worst = fmin(worst, bench_product("linear_backward_dw", shape, p, ws, ws_bytes, ceiling));
        }
    }
    printf("{\"op\":\"gemm_summary\",\"device\":\"%s\",\"ceiling_TFLOPs\":%.1f,\"worst_wrapper_pct_of_direct\":%.1f}\n",
           parity_device_name(), ceiling, worst);
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaFree(ws));
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    g_gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);

    /* Generic products: every transpose pair and output type over tile-edge triples. */
    const int tri[][3] = {{1, 1, 1},     {7, 8, 63},     {8, 7, 64},     {63, 65, 129},   {64, 128, 8},
                          {65, 129, 127}, {127, 63, 257}, {129, 255, 128}, {257, 64, 1000}, {33, 576, 2048}};
    int id = 0;
    for (const auto &t : tri)
        for (int oa = 0; oa < 2; oa++)
            for (int ob = 0; ob < 2; ob++)
                for (int dt = 0; dt < 2; dt++) {
                    gemm_case c = {t[0], t[1], t[2], 1, (gemm_op)oa, (gemm_op)ob, (gemm_out)dt, GEMM_OVERWRITE, 0,
                                   1.0f, 0, 0, VALUES_INT};
                    run_gemm_case(c, id++);
                }
    /* Epilogues, alpha, padding, batches, alignment (integer inputs: exact). */
    const gemm_case special[] = {
        {65, 129, 127, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_BF16, GEMM_OVERWRITE, 1, 1.0f, 0, 0, VALUES_INT},
        {128, 264, 576, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_BF16, GEMM_OVERWRITE, 1, 1.0f, 0, 0, VALUES_INT},
        {65, 129, 127, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_BF16, GEMM_ACCUMULATE, 0, 1.0f, 0, 0, VALUES_INT},
        {65, 129, 127, 1, GEMM_TRANS, GEMM_NO_TRANS, GEMM_OUT_F32, GEMM_ACCUMULATE, 0, 1.0f, 0, 0, VALUES_INT},
        {63, 64, 65, 1, GEMM_NO_TRANS, GEMM_NO_TRANS, GEMM_OUT_BF16, GEMM_ACCUMULATE, 1, 2.0f, 0, 0, VALUES_INT},
        {63, 64, 65, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_F32, GEMM_OVERWRITE, 0, 0.5f, 0, 0, VALUES_INT},
        {65, 129, 127, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_BF16, GEMM_OVERWRITE, 0, 1.0f, 8, 0, VALUES_INT},
        {65, 129, 127, 1, GEMM_TRANS, GEMM_NO_TRANS, GEMM_OUT_F32, GEMM_ACCUMULATE, 0, 1.0f, 3, 0, VALUES_INT},
        {65, 129, 127, 3, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_BF16, GEMM_OVERWRITE, 0, 1.0f, 0, 0, VALUES_INT},
        {64, 64, 128, 4, GEMM_NO_TRANS, GEMM_NO_TRANS, GEMM_OUT_F32, GEMM_ACCUMULATE, 0, 1.0f, 8, 0, VALUES_INT},
        {33, 16, 129, 5, GEMM_TRANS, GEMM_TRANS, GEMM_OUT_BF16, GEMM_OVERWRITE, 1, 1.0f, 1, 0, VALUES_INT},
        {7, 16384, 33, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_BF16, GEMM_OVERWRITE, 0, 1.0f, 0, 0, VALUES_INT},
        {16, 64, 16384, 1, GEMM_TRANS, GEMM_NO_TRANS, GEMM_OUT_F32, GEMM_ACCUMULATE, 0, 1.0f, 0, 0, VALUES_INT},
        /* normal-valued: tiers (c) and (b) */
        {65, 129, 127, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_F32, GEMM_OVERWRITE, 0, 1.0f, 0, 0, VALUES_NORMAL},
        {64, 256, 2048, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_F32, GEMM_OVERWRITE, 0, 1.0f, 0, 0, VALUES_NORMAL},
        {128, 64, 4096, 1, GEMM_TRANS, GEMM_NO_TRANS, GEMM_OUT_F32, GEMM_ACCUMULATE, 0, 1.0f, 0, 0, VALUES_NORMAL},
        {33, 512, 2048, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_BF16, GEMM_OVERWRITE, 0, 1.0f, 0, 0, VALUES_NORMAL},
        {63, 257, 1536, 1, GEMM_NO_TRANS, GEMM_NO_TRANS, GEMM_OUT_BF16, GEMM_OVERWRITE, 1, 1.0f, 0, 0, VALUES_NORMAL},
    };
    for (const gemm_case &c : special) run_gemm_case(c, id++);

    /* Linear layers: tile edges, then slices of the real shapes (rows kept small: the oracle's dx
     * loop walks W by columns, ~17 s on one slow core at 16 rows of the 1B gate/up). */
    const int lin[][3] = {{1, 8, 8},        {7, 33, 65},      {65, 129, 127},   {3, 576, 960},   {64, 576, 576},
                          {32, 576, 3072},  {32, 1536, 576},  {8, 2048, 3072},  {16, 2048, 512}, {4, 2048, 16384},
                          {4, 8192, 2048},  {2, 4096, 14336}, {2, 14336, 4096}};
    id = 0;
    for (const auto &l : lin) run_linear_case(l[0], l[1], l[2], 0, 0, id++);
    run_linear_case(65, 129, 127, 1, 0, id++);
    run_linear_case(32, 576, 960, 1, 0, id++);
    run_linear_case(7, 64, 33, 0, 1, id++);
    /* 2-byte-aligned operands last: should cuBLASLt offer no kernel for them, its CHECK names the
     * case after every other result is in. */
    const gemm_case misaligned[] = {
        {64, 128, 256, 1, GEMM_NO_TRANS, GEMM_TRANS, GEMM_OUT_BF16, GEMM_OVERWRITE, 0, 1.0f, 0, 1, VALUES_INT},
        {64, 128, 256, 2, GEMM_TRANS, GEMM_NO_TRANS, GEMM_OUT_F32, GEMM_ACCUMULATE, 0, 1.0f, 0, 1, VALUES_INT},
    };
    id = 1000;
    for (const gemm_case &c : misaligned) run_gemm_case(c, id++);
    EXPECT(gpu_gemm_plan_count(g_gemm) > 0 && gpu_gemm_plan_count(g_gemm) <= GEMM_MAX_PLANS, "plan count %d",
           gpu_gemm_plan_count(g_gemm));
    run_tuning_cases();

    const int rc = test_finish("gemm_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench();
    free_gpu_gemm(g_gemm);
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
