/* fp8_weights_parity.cu — gpu/fp8_weights against ref/fp8_linear, bit for bit: the transposed
 * codes and block scales of a stored FP8 weight, and its dequantization to bf16.
 *
 *   bazel test --config=gpu //tests/parity:fp8_weights_parity
 *   fp8_weights_parity [--seed=N] [--bench]
 *
 * Inputs from the printed seed: a random weight (normal, an outlier) quantized by
 * ref_fp8_quantize under the frozen weights' rules (per tensor with a power-of-two scale, and
 * 128×128 blocks) and under the per-tensor current rule (a scale that is no power of two), in
 * E4M3 and E5M2; shapes around the 32×32 tile and the 128 block edges (1×1, 31×33, 128×128,
 * 129×127, 257×130) and real ones (SmolLM2's 576×1536, Llama-3.2-1B's 2048×8192).
 * What must hold, tier (a) exact:
 *   - gpu_fp8_transpose_codes of the codes is ref_fp8_quantize's transposed copy q_t;
 *   - gpu_fp8_transpose_block_scales of the scales is its s_inv_t (padding slots 0);
 *   - gpu_fp8_dequantize_bf16 is bf16(ref_fp8_dequantize_operand) (fp32 product, one rounding:
 *     deterministic), for per-tensor, 1×128 and 128×128 operands; under power-of-two scales it is
 *     the fp32 dequantization itself (exact in bf16), checked too.
 * Outputs are poisoned before each run; guards catch writes out of bounds.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/fp8_weights.h"
#include "ref/bf16.h"
#include "ref/fp8.h"
#include "ref/fp8_linear.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

static void run_case(int rows, int cols, enum fp8_format f, enum fp8_rule rule, int id) {
    const uint64_t seed = g_seed * 104729u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const int64_t n = (int64_t)rows * cols;
    std::vector<float> x((size_t)n);
    rng_fill_normal(&r, x.data(), n, 0, f == FP8_E4M3 ? 0.02 : 1e-4);
    x[(size_t)rng_int(&r, (int)n)] *= 30.0f;
    const int64_t ns = fp8_block_scale_count(FP8_BLOCK_1X128, rows, cols) + fp8_block_scale_count(FP8_BLOCK_128X128, rows, cols) + 4,
                  ns_t = fp8_block_scale_count(FP8_BLOCK_1X128, cols, rows) + fp8_block_scale_count(FP8_BLOCK_128X128, cols, rows) + 4;
    std::vector<uint8_t> q((size_t)n), qt((size_t)n);
    std::vector<float> s((size_t)ns, 0.0f), st((size_t)ns_t, 0.0f);
    struct fp8_operand oq = {q.data(), s.data(), FP8_SCALING_TENSOR, f, 0, 0}, ot = {qt.data(), st.data(), FP8_SCALING_TENSOR, f, 0, 0};
    ref_fp8_quantize(&oq, &ot, NULL, NULL, x.data(), rows, cols, f, rule, 1.0f);
    const int64_t nsc = fp8_operand_scale_count(oq.mode, rows, cols), nsc_t = fp8_operand_scale_count(ot.mode, cols, rows);
    char shape[128];
    snprintf(shape, sizeof shape, "%dx%d %s rule %d seed=%llu", rows, cols, f == FP8_E4M3 ? "E4M3" : "E5M2", (int)rule,
             (unsigned long long)seed);

    struct dev_buf bq, bs, bqt, bst, bx;
    dev_buf_alloc(&bq, "q", (size_t)n, POISON_NONE, q.data());
    dev_buf_alloc(&bs, "s", (size_t)nsc * 4, POISON_NONE, s.data());
    /* the transposed codes (per tensor and 128×128: the copy is the transpose) */
    if (rule != FP8_RULE_BLOCK_1X128) {
        std::vector<uint8_t> poison((size_t)n, 0xA5);
        dev_buf_alloc(&bqt, "q_t", (size_t)n, POISON_NONE, poison.data());
        gpu_fp8_transpose_codes((uint8_t *)bqt.data, (const uint8_t *)bq.data, rows, cols, g_stream);
        std::vector<uint8_t> got((size_t)n);
        dev_buf_download(&bqt, got.data(), 0);
        struct cmp_case c = {"fp8_transpose_codes", "q_t", shape, "fp8", seed};
        cmp_exact_bytes(&c, got.data(), qt.data(), (size_t)n);
        dev_buf_free(&bqt);
    }
    if (rule == FP8_RULE_BLOCK_128X128) {
        dev_buf_alloc(&bst, "s_t", (size_t)nsc_t * 4, POISON_F32, nullptr);
        gpu_fp8_transpose_block_scales((float *)bst.data, (const float *)bs.data, rows, cols, g_stream);
        std::vector<float> got((size_t)nsc_t);
        dev_buf_download(&bst, got.data(), 1);
        struct cmp_case c = {"fp8_transpose_block_scales", "s_t", shape, "f32", seed};
        cmp_exact_f32(&c, got.data(), st.data(), nsc_t);
        dev_buf_free(&bst);
    }
    /* dequantization */
    std::vector<float> dq((size_t)n), want((size_t)n);
    ref_fp8_dequantize_operand(dq.data(), &oq);
    for (int64_t i = 0; i < n; i++) want[i] = bf16_round(dq[i]);
    dev_buf_alloc(&bx, "x", (size_t)n * 2, POISON_BF16, nullptr);
    gpu_fp8_dequantize_bf16((uint16_t *)bx.data, (const uint8_t *)bq.data, (const float *)bs.data, oq.mode, rows, cols, f,
                            g_stream);
    std::vector<uint16_t> gb((size_t)n);
    dev_buf_download(&bx, gb.data(), 1);
    std::vector<float> got = floats_of(gb);
    struct cmp_case c = {"fp8_dequantize_bf16", "x", shape, "bf16", seed};
    cmp_exact_f32(&c, got.data(), want.data(), n);
    if (rule == FP8_RULE_CURRENT_POW2 || rule == FP8_RULE_BLOCK_128X128) {
        c.what = "x (power-of-two scales: the fp32 dequantization, exact)";
        cmp_exact_f32(&c, got.data(), dq.data(), n);
    }
    for (struct dev_buf *b : {&bq, &bs, &bx}) dev_buf_free(b);
}

struct bench_ctx {
    uint8_t *q, *qt;
    float *s;
    uint16_t *x;
    int rows, cols, which;
};

static void bench_call(void *p, cudaStream_t st) {
    bench_ctx *b = (bench_ctx *)p;
    if (b->which == 0)
        gpu_fp8_transpose_codes(b->qt, b->q, b->rows, b->cols, st);
    else
        gpu_fp8_dequantize_bf16(b->x, b->q, b->s, FP8_SCALING_TENSOR, b->rows, b->cols, FP8_E4M3, st);
}

static void bench(double ceiling) {
    const int sizes[][2] = {{2048, 8192}, {14336, 4096}, {4096, 4096}};
    for (auto &sz : sizes) {
        bench_ctx b;
        memset(&b, 0, sizeof b);
        b.rows = sz[0], b.cols = sz[1];
        const size_t n = (size_t)sz[0] * sz[1];
        CUDA_CHECK(cudaMalloc(&b.q, n));
        CUDA_CHECK(cudaMalloc(&b.qt, n));
        CUDA_CHECK(cudaMalloc(&b.x, 2 * n));
        CUDA_CHECK(cudaMalloc(&b.s, 16));
        CUDA_CHECK(cudaMemset(b.q, 0x31, n));
        const float one = 1.0f;
        CUDA_CHECK(cudaMemcpy(b.s, &one, 4, cudaMemcpyHostToDevice));
        char shape[64];
        snprintf(shape, sizeof shape, "%dx%d", sz[0], sz[1]);
        b.which = 0;
        bench_json("fp8_transpose_codes", shape, 2.0 * n, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        b.which = 1;
        bench_json("fp8_dequantize_bf16", shape, 3.0 * n, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        for (void *p : {(void *)b.q, (void *)b.qt, (void *)b.x, (void *)b.s}) CUDA_CHECK(cudaFree(p));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261202);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const int shapes[][2] = {{1, 1}, {31, 33}, {32, 32}, {128, 128}, {129, 127}, {257, 130}, {576, 1536}, {2048, 8192}};
    const enum fp8_rule rules[] = {FP8_RULE_CURRENT_POW2, FP8_RULE_CURRENT, FP8_RULE_BLOCK_128X128, FP8_RULE_BLOCK_1X128};
    int id = 0;
    for (auto &sh : shapes)
        for (enum fp8_rule rule : rules)
            for (int f = 0; f < 2; f++) run_case(sh[0], sh[1], (enum fp8_format)f, rule, id++);
    const int rc = test_finish("fp8_weights_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
