/* rope_parity.cu — gpu/rope (Q and K together, in place) against ref/rope (ACT_BF16); the forward
 * from separate sources (gpu_rope_forward_from_bf16) bit for bit the in-place one, sources unchanged.
 *
 *   bazel test --config=gpu //tests/parity:rope_parity
 *   rope_parity [--seed=N] [--bench]
 *
 * Shapes: (H, KVH, D) of SmolLM2-135M (9, 3, 64), Llama-3.2-1B (32, 8, 64), 3B (24, 8, 128),
 * 8B (32, 8, 128), a scalar-path head dim (D = 6) and a KVH = 0 (Q only) case; N ∈ {1, 7, 33, 300}
 * rows with positions restarting inside the batch (packed sequences) and reaching T_max − 1.
 * Layouts: Q and K as column ranges of the fused QKV output (ld = (H + 2·KVH)·D; the V columns
 * must stay untouched) and as separate contiguous buffers. Tables: ref/rope.h's cos/sin (rounded
 * to bf16 as the reference rounds them before use) with llama3 scaling (theta 5e5, factor 32 and 8, low 1, high 4, original 8192) and without scaling.
 * Inputs: bf16-rounded normals from the printed seed; a NaN planted in q must stay in its pair.
 *
 * Tolerance: (a) exact. Both sides read the same bf16 tables and perform the same IEEE fp32
 * products, differences and bf16 roundings (gpu/rope.h states them), so every bit must agree;
 * the backward likewise (the rotation with −sin).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/rope.h"
#include "ref/bf16.h"
#include "ref/rope.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

struct rope_cfg {
    const char *name;
    int H, KVH, D;
    double theta, factor; /* factor 0: no scaling */
};

/* ref/rope.h's cache: inv_freq and the fp32 cos/sin tables (T_max, D/2), llama3 scaling when
 * factor > 0 (low 1, high 4, original 8192: the Llama 3 configs). */
static void oracle_cache(struct ref_rope_cache *cache, int T_max, const rope_cfg &c) {
    struct rope_scaling sc;
    memset(&sc, 0, sizeof sc);
    sc.kind = c.factor > 0 ? ROPE_SCALING_LLAMA3 : ROPE_SCALING_NONE;
    sc.factor = (float)c.factor, sc.low_freq_factor = 1.0f, sc.high_freq_factor = 4.0f;
    sc.original_max_position_embeddings = 8192;
    ref_rope_cache_build(cache, T_max, c.D, (float)c.theta, &sc);
}

static void run_case(const rope_cfg &cfg, int N, int fused, int plant, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const int H = cfg.H, KVH = cfg.KVH, D = cfg.D, T_max = 600;
    char shape[128];
    snprintf(shape, sizeof shape, "%s N=%d H=%d KVH=%d D=%d %s%s", cfg.name, N, H, KVH, D, fused ? "fused" : "separate",
             plant ? " nonfinite" : "");
    struct ref_rope_cache cache;
    oracle_cache(&cache, T_max, cfg);
    const size_t nt = (size_t)T_max * (D / 2);
    std::vector<int32_t> pos(N);
    for (int n = 0, t = 0; n < N; n++, t++) {
        if (rng_int(&r, 16) == 0) t = 0; /* a new packed sequence */
        pos[n] = n == N - 1 ? T_max - 1 : t % T_max;
    }
    const int qw = H * D, kw = KVH * D, width = qw + 2 * kw;
    std::vector<float> q((size_t)N * qw), k((size_t)N * kw), v((size_t)N * kw);
    rng_fill_normal(&r, q.data(), (int64_t)q.size(), 0.0, 1.0);
    rng_fill_normal(&r, k.data(), (int64_t)k.size(), 0.0, 1.0);
    rng_fill_normal(&r, v.data(), (int64_t)v.size(), 0.0, 1.0);
    for (auto *vec : {&q, &k, &v})
        for (float &x : *vec) x = bf16_round(x);
    if (plant) q[1] = NAN;

    for (int dir = 1; dir >= -1; dir -= 2) {
        std::vector<float> q_r(q), k_r(k);
        /* Q only: the reference takes k = NULL (its KVH must still be ≥ 1; it is then unused) */
        float *kr = KVH > 0 ? k_r.data() : nullptr;
        const int kvh_ref = KVH > 0 ? KVH : 1;
        if (dir > 0)
            ref_rope_forward(q_r.data(), kr, pos.data(), &cache, 1, N, H, kvh_ref, D, ACT_BF16);
        else
            ref_rope_backward(q_r.data(), kr, pos.data(), &cache, 1, N, H, kvh_ref, D, ACT_BF16);

        /* the GPU gets the same tables, rounded to bf16 as the reference rounds them (act(cos)) */
        std::vector<uint16_t> cb(nt), sb(nt);
        for (size_t i = 0; i < nt; i++) cb[i] = bf16_from_float(cache.cos[i]), sb[i] = bf16_from_float(cache.sin[i]);
        struct dev_buf bcos, bsin, bpos, bqkv, bq, bk;
        dev_buf_alloc(&bcos, "cos", cb.size() * 2, POISON_NONE, cb.data());
        dev_buf_alloc(&bsin, "sin", sb.size() * 2, POISON_NONE, sb.data());
        dev_buf_alloc(&bpos, "pos", (size_t)N * 4, POISON_NONE, pos.data());
        std::vector<uint16_t> img;
        uint16_t *qp, *kp;
        int ld_q, ld_k;
        if (fused) {
            img.resize((size_t)N * width);
            for (int n = 0; n < N; n++) {
                for (int j = 0; j < qw; j++) img[(size_t)n * width + j] = bf16_from_float(q[(size_t)n * qw + j]);
                for (int j = 0; j < kw; j++) {
                    img[(size_t)n * width + qw + j] = bf16_from_float(k[(size_t)n * kw + j]);
                    img[(size_t)n * width + qw + kw + j] = bf16_from_float(v[(size_t)n * kw + j]);
                }
            }
            dev_buf_alloc(&bqkv, "qkv", img.size() * 2, POISON_NONE, img.data());
            qp = (uint16_t *)bqkv.data, kp = qp + qw, ld_q = ld_k = width;
        } else {
            std::vector<uint16_t> qb(q.size()), kb(k.size() > 0 ? k.size() : 1);
            for (size_t i = 0; i < q.size(); i++) qb[i] = bf16_from_float(q[i]);
            for (size_t i = 0; i < k.size(); i++) kb[i] = bf16_from_float(k[i]);
            dev_buf_alloc(&bq, "q", qb.size() * 2, POISON_NONE, qb.data());
            dev_buf_alloc(&bk, "k", kb.size() * 2, POISON_NONE, kb.data());
            qp = (uint16_t *)bq.data, kp = (uint16_t *)bk.data, ld_q = qw, ld_k = kw > 0 ? kw : 1;
        }
        if (dir > 0)
            gpu_rope_forward_bf16(qp, kp, (const uint16_t *)bcos.data, (const uint16_t *)bsin.data,
                                  (const int32_t *)bpos.data, N, H, KVH, D, ld_q, ld_k, g_stream);
        else
            gpu_rope_backward_bf16(qp, kp, (const uint16_t *)bcos.data, (const uint16_t *)bsin.data,
                                   (const int32_t *)bpos.data, N, H, KVH, D, ld_q, ld_k, g_stream);
        std::vector<float> q_g(q.size()), k_g(k.size());
        if (fused) {
            std::vector<uint16_t> out(img.size());
            dev_buf_download(&bqkv, out.data(), 0);
            int64_t v_changed = 0;
            for (int n = 0; n < N; n++) {
                for (int j = 0; j < qw; j++) q_g[(size_t)n * qw + j] = bf16_to_float(out[(size_t)n * width + j]);
                for (int j = 0; j < kw; j++) {
                    k_g[(size_t)n * kw + j] = bf16_to_float(out[(size_t)n * width + qw + j]);
                    v_changed += out[(size_t)n * width + qw + kw + j] != img[(size_t)n * width + qw + kw + j];
                }
            }
            EXPECT(v_changed == 0, "rope %s: %lld elements of V were written", shape, (long long)v_changed);
            dev_buf_free(&bqkv);
        } else {
            std::vector<uint16_t> qo(q.size()), ko(k.size() > 0 ? k.size() : 1);
            dev_buf_download(&bq, qo.data(), 0);
            dev_buf_download(&bk, ko.data(), 0);
            for (size_t i = 0; i < q.size(); i++) q_g[i] = bf16_to_float(qo[i]);
            for (size_t i = 0; i < k.size(); i++) k_g[i] = bf16_to_float(ko[i]);
            dev_buf_free(&bq);
            dev_buf_free(&bk);
            if (dir > 0) { /* from a source into other buffers: the in-place forward's bits, sources unchanged */
                std::vector<uint16_t> qs(q.size()), ks(k.size() > 0 ? k.size() : 1, 0);
                for (size_t i = 0; i < q.size(); i++) qs[i] = bf16_from_float(q[i]);
                for (size_t i = 0; i < k.size(); i++) ks[i] = bf16_from_float(k[i]);
                struct dev_buf bqs, bks, bqd, bkd;
                dev_buf_alloc(&bqs, "q (source)", qs.size() * 2, POISON_NONE, qs.data());
                dev_buf_alloc(&bks, "k (source)", ks.size() * 2, POISON_NONE, ks.data());
                dev_buf_alloc(&bqd, "q (from source)", qs.size() * 2, POISON_BF16, nullptr);
                dev_buf_alloc(&bkd, "k (from source)", ks.size() * 2, KVH > 0 ? POISON_BF16 : POISON_NONE,
                              KVH > 0 ? nullptr : ks.data());
                gpu_rope_forward_from_bf16((uint16_t *)bqd.data, (uint16_t *)bkd.data, (const uint16_t *)bqs.data,
                                           (const uint16_t *)bks.data, (const uint16_t *)bcos.data,
                                           (const uint16_t *)bsin.data, (const int32_t *)bpos.data, N, H, KVH, D,
                                           ld_q, ld_k, g_stream);
                std::vector<uint16_t> qs2(qs.size()), ks2(ks.size()), qd(qs.size()), kd(ks.size());
                dev_buf_download(&bqs, qs2.data(), 0);
                dev_buf_download(&bks, ks2.data(), 0);
                dev_buf_download(&bqd, qd.data(), 1);
                dev_buf_download(&bkd, kd.data(), KVH > 0);
                EXPECT(memcmp(qs2.data(), qs.data(), qs.size() * 2) == 0 &&
                           memcmp(ks2.data(), ks.data(), ks.size() * 2) == 0,
                       "rope %s: gpu_rope_forward_from_bf16 wrote its sources", shape);
                EXPECT(memcmp(qd.data(), qo.data(), qo.size() * 2) == 0 &&
                           (KVH == 0 || memcmp(kd.data(), ko.data(), ko.size() * 2) == 0),
                       "rope %s: gpu_rope_forward_from_bf16 differs from the in-place forward", shape);
                for (struct dev_buf *b : {&bqs, &bks, &bqd, &bkd}) dev_buf_free(b);
            }
        }
        struct cmp_case cc = {dir > 0 ? "rope_forward" : "rope_backward", "q", shape, "bf16", seed};
        cmp_exact_f32(&cc, q_g.data(), q_r.data(), (int64_t)q.size());
        if (KVH > 0) {
            cc.what = "k";
            cmp_exact_f32(&cc, k_g.data(), k_r.data(), (int64_t)k.size());
        }
        for (struct dev_buf *b : {&bcos, &bsin, &bpos}) dev_buf_free(b);
    }
    ref_rope_cache_free(&cache);
}

struct bench_ctx {
    int N, H, KVH, D, which;
    uint16_t *qkv, *cos_t, *sin_t;
    int32_t *pos;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    const int ld = (b->H + 2 * b->KVH) * b->D;
    uint16_t *q = b->qkv, *k = b->qkv + b->H * b->D;
    if (b->which == 0)
        gpu_rope_forward_bf16(q, k, b->cos_t, b->sin_t, b->pos, b->N, b->H, b->KVH, b->D, ld, ld, s);
    else
        gpu_rope_backward_bf16(q, k, b->cos_t, b->sin_t, b->pos, b->N, b->H, b->KVH, b->D, ld, ld, s);
}

static void bench(double ceiling) {
    const int shapes[][4] = {{16384, 9, 3, 64}, {8192, 32, 8, 64}, {8192, 24, 8, 128}, {8192, 32, 8, 128}};
    const int T = 512;
    for (auto &sh : shapes) {
        bench_ctx b;
        memset(&b, 0, sizeof b);
        b.N = sh[0], b.H = sh[1], b.KVH = sh[2], b.D = sh[3];
        const size_t n = (size_t)b.N * (b.H + 2 * b.KVH) * b.D, nt = (size_t)T * b.D / 2;
        std::vector<int32_t> pos(b.N);
        for (int i = 0; i < b.N; i++) pos[i] = i % T;
        CUDA_CHECK(cudaMalloc(&b.qkv, n * 2));
        CUDA_CHECK(cudaMalloc(&b.cos_t, nt * 2));
        CUDA_CHECK(cudaMalloc(&b.sin_t, nt * 2));
        CUDA_CHECK(cudaMalloc(&b.pos, (size_t)b.N * 4));
        CUDA_CHECK(cudaMemset(b.qkv, 0x3F, n * 2));
        CUDA_CHECK(cudaMemset(b.cos_t, 0x3F, nt * 2));
        CUDA_CHECK(cudaMemset(b.sin_t, 0x3E, nt * 2));
        CUDA_CHECK(cudaMemcpy(b.pos, pos.data(), (size_t)b.N * 4, cudaMemcpyHostToDevice));
        char shape[64];
        snprintf(shape, sizeof shape, "N=%d H=%d KVH=%d D=%d", b.N, b.H, b.KVH, b.D);
        /* Q and K read and written once (the tables are T·D/2 and stay in cache) */
        const double bytes = 4.0 * b.N * (b.H + b.KVH) * b.D;
        b.which = 0;
        bench_json("rope_forward", shape, bytes, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        b.which = 1;
        bench_json("rope_backward", shape, bytes, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        for (void *p : {(void *)b.qkv, (void *)b.cos_t, (void *)b.sin_t, (void *)b.pos}) CUDA_CHECK(cudaFree(p));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261127);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const rope_cfg cfgs[] = {{"smollm2", 9, 3, 64, 10000.0, 0.0},     {"llama-3.2-1b", 32, 8, 64, 500000.0, 32.0},
                             {"llama-3.2-3b", 24, 8, 128, 500000.0, 32.0}, {"llama-3.1-8b", 32, 8, 128, 500000.0, 8.0},
                             {"scalar-d6", 3, 1, 6, 10000.0, 0.0},      {"q-only", 4, 0, 64, 500000.0, 8.0}};
    const int Ns[] = {1, 7, 33, 300};
    int id = 0;
    for (const rope_cfg &c : cfgs)
        for (int N : Ns)
            for (int fused = 0; fused < 2; fused++) run_case(c, N, fused, 0, id++);
    run_case(cfgs[1], 7, 1, 1, id++);
    const int rc = test_finish("rope_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
