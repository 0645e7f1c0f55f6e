/* decode_attention_parity.cu — gpu/decode_attention against ref/decode_attention (ACT_BF16).
 *
 *   bazel test --config=gpu //tests/parity:decode_attention_parity
 *   decode_attention_parity [--seed=N] [--bench]
 *
 * Cases (each: a cache of S sequences × T_max positions filled with bf16 normals, the unused
 * positions too: reading one would show; q read from a fused QKV row, ld = (H + 2·KVH)·D; out
 * poisoned and guarded; the split workspace poisoned with NaN, so a combine that read a split
 * never written would show; a second run must give the same bits):
 *   1. the model shapes (H, KVH, D): the tiny golden models (4, 1, 16) and (6, 2, 16), SmolLM2-135M
 *      (9, 3, 64), Llama-3.2-1B (32, 8, 64), 8B (32, 8, 128), (8, 8, 32) without grouping; S = 3,
 *      T_max = 300 (two splits of GPU_DECODE_ATTENTION_SPLIT = 256, the second partial);
 *      N ∈ {1, 5, 64} rows at random (sequence, position) pairs;
 *   2. the split paths: GQA ratios 1, 2, 4, 8, MQA (32 and 12 heads over one kv head: 4 and 2
 *      tiles of 8 heads, the last one partial) at D 64 and 128 (the generator's head dims);
 *      T_max = 1000 (not a multiple of the split), N ∈ {1, 9};
 *   3. T_max = 1 (one position, no workspace); the decode shape of the benchmark (32 rows, two per
 *      sequence of 16, every row at T_max − 1 = 1023: four full splits).
 * Positions: row 0 at T_max − 1 (B = 1 with a full cache when N = 1), row 1 at 0 (T = 1), then the
 * split edges 255, 256, 511, 512 (below T_max), the rest at random.
 *
 * Tolerance: both sides compute the same unrounded softmax and sums of bf16 inputs, the GPU in
 * fp32 (fused multiply-adds, expf), the oracle in double; the values before the one bf16 rounding
 * differ by a few fp32 ulps, so the stored outputs differ by at most one bf16 rounding: tier (b),
 * k = 1 with eps = BF16_EPS relative to |ref|, plus a floor for the outputs that cancel to near
 * zero (there fp32 ulps of the terms exceed one ulp of the result), derived at the comparison from
 * the magnitude sums and the count of roundings on an output's path. The GPU's
 * order stays inside that model: dots as 8-term fma chains added by a tree over the D/8 lanes
 * (shorter chains than one D-term chain); the exponentials against the split's max instead of the
 * row's, rescaled in the combine by expf(m_s − M) ≤ 1 (one more expf and one more product each:
 * a few ulps, and the same factor scales a split's numerator and its sum, so a relative error of
 * it moves the output by that error times the split's share of the spread, not more); the sums of
 * a split in chains of at most 256/RPS positions, then trees and ≤ ceil(T/256) split terms —
 * each term's rounding bounded as before by a few ulps of the sum of the magnitudes.
 * --bench: the decode shape (one row per sequence, 32 sequences, 1024 cached positions) of
 * Llama-3.2-1B and 8B, and a single sequence of 4096 positions (8 kv heads, D 128: the splits
 * fill the GPU); bytes = the K and V rows that must be read once (B·KVH·T·D·2 bytes each).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/decode_attention.h"
#include "ref/bf16.h"
#include "ref/decode_attention.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

static void run_case(int H, int KVH, int D, int N, int S, int T_max, int all_last, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const int QKVD = (H + 2 * KVH) * D;
    char shape[160];
    snprintf(shape, sizeof shape, "N=%d H=%d KVH=%d D=%d S=%d T_max=%d heads/cta=%d%s", N, H, KVH, D, S, T_max,
             gpu_decode_attention_heads_per_cta(H, KVH), all_last ? " all rows at T_max-1" : "");
    const size_t cn = (size_t)S * T_max * KVH * D;
    std::vector<float> kc(cn), vc(cn), qkv((size_t)N * QKVD), q((size_t)N * H * D), ref((size_t)N * H * D);
    rng_fill_normal(&r, kc.data(), (int64_t)cn, 0, 1);
    rng_fill_normal(&r, vc.data(), (int64_t)cn, 0, 1);
    rng_fill_normal(&r, qkv.data(), (int64_t)qkv.size(), 0, 1);
    for (auto *v : {&kc, &vc, &qkv})
        for (float &x : *v) x = bf16_round(x);
    for (int n = 0; n < N; n++) memcpy(&q[(size_t)n * H * D], &qkv[(size_t)n * QKVD], (size_t)H * D * 4);
    std::vector<int32_t> seq(N), pos(N);
    const int SP = GPU_DECODE_ATTENTION_SPLIT;
    const int forced[] = {T_max - 1, 0, SP - 1, SP, 2 * SP - 1, 2 * SP};
    int nf = 0;
    for (int n = 0; n < N; n++) {
        seq[n] = all_last ? n % S : (int32_t)rng_int(&r, S);
        if (all_last) {
            pos[n] = T_max - 1;
            continue;
        }
        while (nf < 6 && forced[nf] >= T_max) nf++;
        pos[n] = nf < 6 ? forced[nf++] : (int32_t)rng_int(&r, T_max);
    }
    const float scale = (float)(1.0 / sqrt((double)D));
    std::vector<double> ws(T_max);
    ref_decode_attention_forward(ref.data(), q.data(), kc.data(), vc.data(), seq.data(), pos.data(), N, H, KVH, D, S,
                                 T_max, scale, ACT_BF16, ws.data());
    std::vector<uint16_t> kb = bits_of(kc), vb = bits_of(vc), qb = bits_of(qkv), ob((size_t)N * H * D);
    const size_t wsb = gpu_decode_attention_workspace_size(N, H, D, T_max);
    struct dev_buf bk, bv, bq, bs, bp, bo, bw;
    dev_buf_alloc(&bk, "k_cache", kb.size() * 2, POISON_NONE, kb.data());
    dev_buf_alloc(&bv, "v_cache", vb.size() * 2, POISON_NONE, vb.data());
    dev_buf_alloc(&bq, "qkv", qb.size() * 2, POISON_NONE, qb.data());
    dev_buf_alloc(&bs, "seq", (size_t)N * 4, POISON_NONE, seq.data());
    dev_buf_alloc(&bp, "pos", (size_t)N * 4, POISON_NONE, pos.data());
    dev_buf_alloc(&bo, "out", ob.size() * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bw, "workspace", wsb ? wsb : 16, POISON_F32, nullptr);
    void *wsp = wsb ? bw.data : nullptr;
    gpu_decode_attention_bf16((uint16_t *)bo.data, (const uint16_t *)bq.data, QKVD, (const uint16_t *)bk.data,
                              (const uint16_t *)bv.data, (const int32_t *)bs.data, (const int32_t *)bp.data, N, H, KVH,
                              D, S, T_max, scale, wsp, g_stream);
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    dev_buf_download(&bo, ob.data(), 1);
    std::vector<uint8_t> wsh(wsb ? wsb : 16);
    dev_buf_download(&bw, wsh.data(), 0); /* its guards */
    std::vector<float> got = floats_of(ob);
    struct cmp_case cc = {"decode_attention", "out", shape, "bf16", seed};
    /* The floor of the cancelling outputs, derived: every rounding on an output's path (a fused
     * multiply-add of a chain, a tree add, an expf, the rescale and the division) errs by at most
     * one fp32 unit roundoff u of the magnitude sum m = Σ p_j·|v_j| / Σ p_j, the same softmax
     * applied to |v| (computed here by the oracle itself), and the path holds at most
     * gamma = 2·(256 + ceil(T_max/256) + D + 24) of them: a split's chain, the split terms, the
     * score's dot chain (its error moves p_j relatively, so m again scales it) and the fixed steps,
     * twice for the two sides' orders. floor·eps = gamma·u·max m. */
    std::vector<float> vabs(vc), mag(ref.size());
    for (float &x : vabs) x = fabsf(x);
    ref_decode_attention_forward(mag.data(), q.data(), kc.data(), vabs.data(), seq.data(), pos.data(), N, H, KVH, D,
                                 S, T_max, scale, ACT_F32, ws.data());
    double mag_max = 0;
    for (float x : mag) mag_max = x > mag_max ? x : mag_max;
    const double gamma = 2.0 * (256 + (T_max + 255) / 256 + D + 24);
    cmp_elementwise(&cc, got.data(), ref.data(), (int64_t)ref.size(), BF16_EPS, 1.0,
                    gamma * 0x1p-24 * mag_max / BF16_EPS, nullptr);
    /* a second run gives the same bits */
    dev_buf_reset(&bo, nullptr);
    dev_buf_reset(&bw, nullptr);
    gpu_decode_attention_bf16((uint16_t *)bo.data, (const uint16_t *)bq.data, QKVD, (const uint16_t *)bk.data,
                              (const uint16_t *)bv.data, (const int32_t *)bs.data, (const int32_t *)bp.data, N, H, KVH,
                              D, S, T_max, scale, wsp, g_stream);
    std::vector<uint16_t> again(ob.size());
    dev_buf_download(&bo, again.data(), 1);
    EXPECT(memcmp(again.data(), ob.data(), ob.size() * 2) == 0, "decode_attention %s: two runs differ", shape);
    for (struct dev_buf *b : {&bk, &bv, &bq, &bs, &bp, &bo, &bw}) dev_buf_free(b);
}

struct bench_ctx {
    int N, H, KVH, D, T;
    uint16_t *q, *kc, *vc, *out;
    void *ws;
    int32_t *seq, *pos;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_decode_attention_bf16(b->out, b->q, b->H * b->D, b->kc, b->vc, b->seq, b->pos, b->N, b->H, b->KVH, b->D, b->N,
                              b->T, (float)(1.0 / sqrt((double)b->D)), b->ws, s);
}

static void bench(double ceiling) {
    const int shapes[][5] = {{32, 32, 8, 64, 1024}, {32, 32, 8, 128, 1024}, {1, 32, 8, 128, 4096}}; /* B H KVH D T */
    for (auto &sh : shapes) {
        bench_ctx b;
        b.N = sh[0], b.H = sh[1], b.KVH = sh[2], b.D = sh[3], b.T = sh[4];
        const size_t cache = (size_t)b.N * b.T * b.KVH * b.D;
        CUDA_CHECK(cudaMalloc(&b.q, (size_t)b.N * b.H * b.D * 2));
        CUDA_CHECK(cudaMalloc(&b.out, (size_t)b.N * b.H * b.D * 2));
        CUDA_CHECK(cudaMalloc(&b.kc, cache * 2));
        CUDA_CHECK(cudaMalloc(&b.vc, cache * 2));
        CUDA_CHECK(cudaMalloc(&b.seq, (size_t)b.N * 4));
        CUDA_CHECK(cudaMalloc(&b.pos, (size_t)b.N * 4));
        CUDA_CHECK(cudaMalloc(&b.ws, gpu_decode_attention_workspace_size(b.N, b.H, b.D, b.T) + 16));
        std::vector<int32_t> seq(b.N), pos(b.N, b.T - 1);
        for (int i = 0; i < b.N; i++) seq[i] = i;
        CUDA_CHECK(cudaMemcpy(b.seq, seq.data(), (size_t)b.N * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(b.pos, pos.data(), (size_t)b.N * 4, cudaMemcpyHostToDevice));
        for (uint16_t *p : {b.q, b.kc, b.vc}) CUDA_CHECK(cudaMemset(p, 0x3C, p == b.q ? (size_t)b.N * b.H * b.D * 2 : cache * 2));
        char shape[96];
        snprintf(shape, sizeof shape, "B=%d T=%d H=%d KVH=%d D=%d", b.N, b.T, b.H, b.KVH, b.D);
        /* the K and V rows, each read once (B·KVH·T·D·2 bytes each); the split partials not counted */
        const double bytes = 2.0 * 2.0 * (double)cache;
        bench_json("decode_attention", shape, bytes, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        for (void *p : {(void *)b.q, (void *)b.out, (void *)b.kc, (void *)b.vc, (void *)b.seq, (void *)b.pos, b.ws})
            CUDA_CHECK(cudaFree(p));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261201);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const int shapes[][3] = {{4, 1, 16}, {6, 2, 16}, {9, 3, 64}, {32, 8, 64}, {32, 8, 128}, {8, 8, 32}};
    const int Ns[] = {1, 5, 64};
    int id = 0;
    for (auto &sh : shapes)
        for (int N : Ns) run_case(sh[0], sh[1], sh[2], N, 3, 300, 0, id++);
    /* the split paths: GQA 1, 2, 4, 8, MQA (4 tiles; 2 tiles, the last partial) × D 64, 128 */
    const int groups[][2] = {{8, 8}, {16, 8}, {32, 8}, {32, 4}, {32, 1}, {12, 1}};
    for (auto &hk : groups)
        for (int D : {64, 128})
            for (int N : {1, 9}) run_case(hk[0], hk[1], D, N, 2, 1000, 0, id++);
    run_case(32, 8, 64, 3, 2, 1, 0, id++); /* T = 1 everywhere: no split, no workspace */
    for (int D : {64, 128}) run_case(32, 8, D, 32, 16, 1024, 1, id++); /* the benchmark's decode shape */
    const int rc = test_finish("decode_attention_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
