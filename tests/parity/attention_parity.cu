/* attention_parity.cu — gpu/attention (flash, mma.sync) against ref/attention on random inputs.
 *
 *   bazel test --config=gpu //tests/parity:attention_parity
 *   attention_parity [--seed=N] [--bench]
 *
 * Shapes (B, T, H, KVH, D): T = 1, 17, 63, 64, 65, 100, 257, 1024 (partial tiles, one tile, tile
 * edges), GQA ratios 1, 3, 4 and 8:1 as in SmolLM2 (9:3 → 3) and Llama 3 (32:8 → 4), D = 64 and 128 (and 16, 32).
 * Inputs are bf16-rounded normals from the printed seed; both sides see the same bits. Outputs are
 * poisoned and guarded.
 *
 * Tolerances (STYLE.md, tier (c), flash-attention's own rule): the GPU's error against the fp32
 * oracle (ref naive, ACT_F32, double accumulation) is at most 2× the error of the reference
 * computed with the GPU's bf16 rounding points (ref flash, ACT_BF16, same block size 64), plus
 * an absolute floor of BF16_EPS/2 · rms(oracle) for elements where both errors vanish. The
 * rounding points differ in one place only (P relative to the running max instead of lse), so
 * the two low-precision results have errors of the same size.
 * lse (fp32): sums of D exact bf16 products in fp32 (relative error ≤ D·u of Σ|q·k|), then
 * __expf/__logf (≤ 2 ulp each, per exponential of the row) → elementwise, eps = FLT_EPSILON,
 * k = D + 16, floor 1.
 * dq and dk carry one more absolute floor: where the true dS vanishes (T = 1: dS = dP − Δ = 0
 * exactly), both sides are left with the rounding of the fp32 subtraction dP − Δ, each term of
 * magnitude ≈ √D·rms(dout)·rms(v) = √D for unit inputs, so ≤ 2·FLT_EPSILON·√D per dS element,
 * times |k| or |q| (≈ 1) and the softmax scale, over a handful of such terms: 4·FLT_EPSILON·√D·scale.
 * Determinism: the backward run twice gives the same bits (no atomics by construction).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "gpu/attention.h"
#include "gpu/cuda_check.h"
#include "ref/attention.h"
#include "ref/bf16.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

static void bf16_fill(std::vector<float> &f, std::vector<uint16_t> &b, struct rng *r, size_t n) {
    f.resize(n);
    b.resize(n);
    rng_fill_normal(r, f.data(), (int64_t)n, 0.0, 1.0);
    for (size_t i = 0; i < n; i++) {
        b[i] = bf16_from_float(f[i]);
        f[i] = bf16_to_float(b[i]);
    }
}

static void run_case(int B, int T, int H, int KVH, int D) {
    const uint64_t seed = g_seed ^ ((uint64_t)T << 40) ^ ((uint64_t)H << 24) ^ ((uint64_t)KVH << 16) ^ (uint64_t)D ^
                          ((uint64_t)B << 56);
    struct rng r;
    rng_init(&r, seed);
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KVH * D, nl = (size_t)B * H * T;
    std::vector<float> q, k, v, dout;
    std::vector<uint16_t> qb, kb, vb, gb;
    bf16_fill(q, qb, &r, nq);
    bf16_fill(k, kb, &r, nk);
    bf16_fill(v, vb, &r, nk);
    bf16_fill(dout, gb, &r, nq);
    const float scale = 1.0f / sqrtf((float)D);
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d KVH=%d D=%d", B, T, H, KVH, D);

    /* Oracle (fp32, naive) and the same-precision reference (flash, ACT_BF16, 64×64 tiles). */
    std::vector<float> o32(nq), l32(nl), dq32(nq), dk32(nk), dv32(nk);
    std::vector<float> ws(ref_attention_naive_workspace_size(B, T, H) / sizeof(float) + 1);
    ref_attention_naive_forward(o32.data(), l32.data(), q.data(), k.data(), v.data(), B, T, H, KVH, D, scale, ACT_F32,
                                ws.data());
    ref_attention_naive_backward(dq32.data(), dk32.data(), dv32.data(), dout.data(), q.data(), k.data(), v.data(),
                                 o32.data(), B, T, H, KVH, D, scale, ACT_F32, ws.data());
    std::vector<float> o16(nq), l16(nl), dq16(nq), dk16(nk), dv16(nk);
    std::vector<float> fws(ref_attention_flash_backward_workspace_size(B, T, H) / sizeof(float) + 1);
    ref_attention_flash_forward(o16.data(), l16.data(), q.data(), k.data(), v.data(), B, T, H, KVH, D, scale, 64, 64,
                                ACT_BF16);
    ref_attention_flash_backward(dq16.data(), dk16.data(), dv16.data(), dout.data(), q.data(), k.data(), v.data(),
                                 o16.data(), l16.data(), B, T, H, KVH, D, scale, 64, 64, ACT_BF16, fws.data());

    struct dev_buf bq, bk, bv, bg, bo, bl, bdq, bdk, bdv, bws;
    dev_buf_alloc(&bq, "q", nq * 2, POISON_NONE, qb.data());
    dev_buf_alloc(&bk, "k", nk * 2, POISON_NONE, kb.data());
    dev_buf_alloc(&bv, "v", nk * 2, POISON_NONE, vb.data());
    dev_buf_alloc(&bg, "dout", nq * 2, POISON_NONE, gb.data());
    dev_buf_alloc(&bo, "out", nq * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bl, "lse", nl * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bdq, "dq", nq * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdk, "dk", nk * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdv, "dv", nk * 2, POISON_BF16, nullptr);
    const size_t wsb = gpu_attention_backward_workspace_size(B, T, H);
    dev_buf_alloc(&bws, "workspace", wsb, POISON_F32, nullptr);

    gpu_attention_forward_bf16((uint16_t *)bo.data, (float *)bl.data, (const uint16_t *)bq.data,
                               (const uint16_t *)bk.data, (const uint16_t *)bv.data, B, T, H, KVH, D, scale, g_stream);
    gpu_attention_backward_bf16((uint16_t *)bdq.data, (uint16_t *)bdk.data, (uint16_t *)bdv.data,
                                (const uint16_t *)bg.data, (const uint16_t *)bq.data, (const uint16_t *)bk.data,
                                (const uint16_t *)bv.data, (const uint16_t *)bo.data, (const float *)bl.data, B, T, H,
                                KVH, D, scale, bws.data, g_stream);
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    std::vector<uint16_t> ob(nq), dqb(nq), dkb(nk), dvb(nk);
    std::vector<float> lg(nl);
    dev_buf_download(&bo, ob.data(), 1);
    dev_buf_download(&bl, lg.data(), 1);
    dev_buf_download(&bdq, dqb.data(), 1);
    dev_buf_download(&bdk, dkb.data(), 1);
    dev_buf_download(&bdv, dvb.data(), 1);
    for (struct dev_buf *b : {&bq, &bk, &bv, &bg}) {
        std::vector<unsigned char> tmp(b->nbytes);
        dev_buf_download(b, tmp.data(), 0);
    }
    const std::vector<float> og = floats_of(ob), dqg = floats_of(dqb), dkg = floats_of(dkb), dvg = floats_of(dvb);

    struct cmp_case c = {"attention_forward", "out", shape, "bf16", seed};
    cmp_vs_naive(&c, og.data(), o16.data(), o32.data(), (int64_t)nq, 2.0,
                 0.5 * BF16_EPS * cmp_rms(o32.data(), (int64_t)nq), nullptr);
    c.what = "lse";
    c.dtype = "f32";
    cmp_elementwise(&c, lg.data(), l32.data(), (int64_t)nl, FLT_EPSILON, D + 16.0, 1.0, nullptr);
    c.op = "attention_backward";
    c.dtype = "bf16";
    const double ds_floor = 4.0 * FLT_EPSILON * sqrt((double)D) * scale;
    c.what = "dq";
    cmp_vs_naive(&c, dqg.data(), dq16.data(), dq32.data(), (int64_t)nq, 2.0,
                 0.5 * BF16_EPS * cmp_rms(dq32.data(), (int64_t)nq) + ds_floor, nullptr);
    c.what = "dk";
    cmp_vs_naive(&c, dkg.data(), dk16.data(), dk32.data(), (int64_t)nk, 2.0,
                 0.5 * BF16_EPS * cmp_rms(dk32.data(), (int64_t)nk) + ds_floor, nullptr);
    c.what = "dv";
    cmp_vs_naive(&c, dvg.data(), dv16.data(), dv32.data(), (int64_t)nk, 2.0,
                 0.5 * BF16_EPS * cmp_rms(dv32.data(), (int64_t)nk), nullptr);

    /* Determinism: the backward again, into poisoned buffers, gives the same bits. */
    dev_buf_reset(&bdq, nullptr);
    dev_buf_reset(&bdk, nullptr);
    dev_buf_reset(&bdv, nullptr);
    gpu_attention_backward_bf16((uint16_t *)bdq.data, (uint16_t *)bdk.data, (uint16_t *)bdv.data,
                                (const uint16_t *)bg.data, (const uint16_t *)bq.data, (const uint16_t *)bk.data,
                                (const uint16_t *)bv.data, (const uint16_t *)bo.data, (const float *)bl.data, B, T, H,
                                KVH, D, scale, bws.data, g_stream);
    std::vector<uint16_t> again(nq), againk(nk), againv(nk);
    dev_buf_download(&bdq, again.data(), 1);
    dev_buf_download(&bdk, againk.data(), 1);
    dev_buf_download(&bdv, againv.data(), 1);
    c.what = "dq/dk/dv determinism";
    cmp_exact_bytes(&c, again.data(), dqb.data(), nq * 2);
    cmp_exact_bytes(&c, againk.data(), dkb.data(), nk * 2);
    cmp_exact_bytes(&c, againv.data(), dvb.data(), nk * 2);
    for (struct dev_buf *b : {&bq, &bk, &bv, &bg, &bo, &bl, &bdq, &bdk, &bdv, &bws}) dev_buf_free(b);
}

struct bench_ctx {
    int B, T, H, KVH, D, which;
    uint16_t *q, *k, *v, *o, *g, *dq, *dk, *dv;
    float *lse;
    void *ws;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    const float scale = 1.0f / sqrtf((float)b->D);
    if (b->which == 0)
        gpu_attention_forward_bf16(b->o, b->lse, b->q, b->k, b->v, b->B, b->T, b->H, b->KVH, b->D, scale, s);
    else
        gpu_attention_backward_bf16(b->dq, b->dk, b->dv, b->g, b->q, b->k, b->v, b->o, b->lse, b->B, b->T, b->H, b->KVH,
                                    b->D, scale, b->ws, s);
}

/* FLOPs (flash-attention's convention): forward 4·B·H·T²·D / 2 (causal), backward 2.5× forward. */
static void bench(double peak_tflops) {
    const int shapes[][5] = {{4, 4096, 16, 16, 128}, {8, 2048, 16, 16, 128}, {4, 4096, 32, 32, 64},
                             {16, 512, 32, 8, 64}, {16, 512, 9, 3, 64}};
    for (auto &sh : shapes) {
        bench_ctx b = {sh[0], sh[1], sh[2], sh[3], sh[4], 0};
        const size_t nq = (size_t)b.B * b.T * b.H * b.D, nk = (size_t)b.B * b.T * b.KVH * b.D;
        struct rng r;
        rng_init(&r, g_seed);
        std::vector<float> f;
        std::vector<uint16_t> hb;
        uint16_t **qs[] = {&b.q, &b.o, &b.g, &b.dq};
        for (uint16_t **p : qs) {
            CUDA_CHECK(cudaMalloc(p, nq * 2));
            bf16_fill(f, hb, &r, nq);
            CUDA_CHECK(cudaMemcpy(*p, hb.data(), nq * 2, cudaMemcpyHostToDevice));
        }
        uint16_t **ks[] = {&b.k, &b.v, &b.dk, &b.dv};
        for (uint16_t **p : ks) {
            CUDA_CHECK(cudaMalloc(p, nk * 2));
            bf16_fill(f, hb, &r, nk);
            CUDA_CHECK(cudaMemcpy(*p, hb.data(), nk * 2, cudaMemcpyHostToDevice));
        }
        CUDA_CHECK(cudaMalloc(&b.lse, (size_t)b.B * b.H * b.T * 4));
        CUDA_CHECK(cudaMalloc(&b.ws, gpu_attention_backward_workspace_size(b.B, b.T, b.H)));
        bench_call(&b, g_stream); /* forward: o and lse for the backward */
        char shape[96];
        snprintf(shape, sizeof shape, "B=%d T=%d H=%d KVH=%d D=%d causal", b.B, b.T, b.H, b.KVH, b.D);
        const double fwd = 4.0 * b.B * b.H * (double)b.T * b.T * b.D / 2.0;
        b.which = 0;
        bench_json("attention_forward", shape, 0, fwd, bench_time(bench_call, &b, g_stream, 3, 15, 3), peak_tflops);
        b.which = 1;
        bench_json("attention_backward", shape, 0, 2.5 * fwd, bench_time(bench_call, &b, g_stream, 3, 15, 3),
                   peak_tflops);
        for (uint16_t **p : qs) CUDA_CHECK(cudaFree(*p));
        for (uint16_t **p : ks) CUDA_CHECK(cudaFree(*p));
        CUDA_CHECK(cudaFree(b.lse));
        CUDA_CHECK(cudaFree(b.ws));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const int cases[][5] = {{1, 1, 4, 4, 64},   {2, 17, 6, 2, 64},   {1, 63, 9, 3, 64},    {1, 64, 8, 2, 128},
                            {2, 65, 4, 1, 128}, {1, 100, 6, 2, 128}, {1, 257, 12, 4, 64},  {1, 257, 8, 8, 128},
                            {1, 1024, 8, 2, 128}, {1, 1024, 16, 4, 64},
                            /* head dims of small models (the test models have D = 16) */
                            {2, 33, 4, 1, 16},  {1, 130, 6, 2, 16}, {2, 65, 4, 2, 32}};
    for (auto &cs : cases) run_case(cs[0], cs[1], cs[2], cs[3], cs[4]);
    const int rc = test_finish("attention_parity");
    /* % of the measured dense bf16 GEMM rate on an H100 (PERFORMANCE.md: 784–800 TFLOP/s). */
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(790.0);
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
