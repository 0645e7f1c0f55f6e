/* dropout_parity.cu — gpu/dropout against ref/dropout (ACT_BF16): the same mask, bit for bit.
 *
 *   bazel test --config=gpu //tests/parity:dropout_parity
 *   dropout_parity [--seed=N] [--bench]
 *
 * Sizes n around the 4-element Philox groups and the vector path (1, 3, 4, 5, 7, 8, 1023, 4099)
 * and real activations (SmolLM2 32×512×576, Llama-3.2-1B 8×512×2048); p ∈ {0, 0.05, 0.1, 0.5,
 * 0.9}; seeds and offsets with both 32-bit halves non-zero (the key and the counter's high words);
 * aligned and 2-byte-aligned pointers (scalar path); in place (out = x). Inputs: bf16-rounded
 * normals from the printed seed with a NaN and an Inf planted (kept elements carry them, dropped
 * ones are 0 on both sides). Outputs poisoned and guarded.
 *
 * Tolerance: (a) exact. The keep decisions are integer functions of (seed, offset, e) and both
 * sides compute the same fp32 product x·scale (scale rounded once from double) and one RNE to
 * bf16. p = 0 must be the identity.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/dropout.h"
#include "ref/bf16.h"
#include "ref/dropout.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

static void run_case(int64_t n, float p, int misalign, int in_place, int id) {
    const uint64_t case_seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, case_seed);
    const uint64_t seed = rng_u64(&r) | ((uint64_t)1 << 40) | 1u; /* both halves non-zero */
    const uint64_t offset = rng_u64(&r) | ((uint64_t)1 << 33) | 1u;
    char shape[160];
    snprintf(shape, sizeof shape, "n=%lld p=%g seed=%llu offset=%llu%s%s", (long long)n, (double)p,
             (unsigned long long)seed, (unsigned long long)offset, misalign ? " misaligned" : "",
             in_place ? " in-place" : "");
    std::vector<float> x((size_t)n), dy((size_t)n);
    rng_fill_normal(&r, x.data(), n, 0.0, 1.0);
    rng_fill_normal(&r, dy.data(), n, 0.0, 1.0);
    for (float &v : x) v = bf16_round(v);
    for (float &v : dy) v = bf16_round(v);
    if (n >= 8) x[3] = NAN, x[6] = INFINITY, dy[5] = -INFINITY;
    std::vector<float> out_r((size_t)n), dx_r((size_t)n);
    ref_dropout_forward(out_r.data(), x.data(), n, p, seed, offset, ACT_BF16);
    ref_dropout_backward(dx_r.data(), dy.data(), n, p, seed, offset, ACT_BF16);

    const size_t m = misalign ? 1 : 0;
    std::vector<uint16_t> xb((size_t)n + m, 0), dyb((size_t)n + m, 0);
    for (int64_t i = 0; i < n; i++) xb[i + m] = bf16_from_float(x[i]), dyb[i + m] = bf16_from_float(dy[i]);
    struct dev_buf bx, bdy, bout, bdx;
    dev_buf_alloc(&bx, "x", xb.size() * 2, POISON_NONE, xb.data());
    dev_buf_alloc(&bdy, "dy", dyb.size() * 2, POISON_NONE, dyb.data());
    dev_buf_alloc(&bout, "out", xb.size() * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdx, "dx", dyb.size() * 2, POISON_BF16, nullptr);
    uint16_t *xp = (uint16_t *)bx.data + m, *dyp = (uint16_t *)bdy.data + m;
    uint16_t *outp = in_place ? xp : (uint16_t *)bout.data + m, *dxp = in_place ? dyp : (uint16_t *)bdx.data + m;
    gpu_dropout_forward_bf16(outp, xp, n, p, seed, offset, g_stream);
    gpu_dropout_backward_bf16(dxp, dyp, n, p, seed, offset, g_stream);
    std::vector<uint16_t> ob(xb.size()), db(dyb.size());
    if (in_place) {
        dev_buf_download(&bx, ob.data(), 0);
        dev_buf_download(&bdy, db.data(), 0);
    } else {
        dev_buf_download(&bout, ob.data(), misalign ? 0 : 1);
        dev_buf_download(&bdx, db.data(), misalign ? 0 : 1);
        std::vector<uint16_t> tmp(xb.size());
        dev_buf_download(&bx, tmp.data(), 0);
        EXPECT(memcmp(tmp.data(), xb.data(), xb.size() * 2) == 0, "dropout %s: x was modified", shape);
        if (misalign) EXPECT(ob[0] == POISON_BF16_BITS, "dropout %s: wrote before out", shape);
    }
    std::vector<float> out_g((size_t)n), dx_g((size_t)n);
    for (int64_t i = 0; i < n; i++) out_g[i] = bf16_to_float(ob[i + m]), dx_g[i] = bf16_to_float(db[i + m]);
    struct cmp_case cc = {"dropout_forward", "out", shape, "bf16", case_seed};
    cmp_exact_f32(&cc, out_g.data(), out_r.data(), n);
    cc.op = "dropout_backward";
    cc.what = "dx";
    cmp_exact_f32(&cc, dx_g.data(), dx_r.data(), n);
    if (p == 0.0f) {
        cc.what = "p = 0 is the identity";
        cmp_exact_f32(&cc, out_g.data(), x.data(), n);
    }
    /* the kept fraction, a sanity bound on the mask itself (binomial: 6 standard deviations) */
    if (n >= 4096 && p > 0) {
        std::vector<uint8_t> keep((size_t)n);
        ref_dropout_mask(keep.data(), n, p, seed, offset);
        int64_t kept = 0;
        for (uint8_t k : keep) kept += k;
        const double mean = (1.0 - p) * n, sd = sqrt(p * (1.0 - p) * n);
        EXPECT(fabs(kept - mean) <= 6 * sd, "dropout %s: kept %lld of %lld, expected %.0f ± %.0f", shape,
               (long long)kept, (long long)n, mean, 6 * sd);
    }
    for (struct dev_buf *b : {&bx, &bdy, &bout, &bdx}) dev_buf_free(b);
}

/* A tensor formed in row chunks: each chunk's call with `first` its offset gives that slice of the
 * whole call's output and mask, bit for bit (the MLP chunks of gpu/llama.cu). */
static void run_slices(int64_t rows, int64_t cols, int64_t chunk_rows, float p, int id) {
    const uint64_t case_seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, case_seed);
    const uint64_t seed = rng_u64(&r) | 1u, offset = rng_u64(&r) | ((uint64_t)1 << 35);
    const int64_t n = rows * cols;
    char shape[160];
    snprintf(shape, sizeof shape, "%lld x %lld in chunks of %lld rows, p=%g", (long long)rows, (long long)cols,
             (long long)chunk_rows, (double)p);
    std::vector<float> x((size_t)n);
    rng_fill_normal(&r, x.data(), n, 0.0, 1.0);
    std::vector<uint16_t> xb((size_t)n);
    for (int64_t i = 0; i < n; i++) xb[i] = bf16_from_float(bf16_round(x[i]));
    struct dev_buf bx, bw, bc, bkw, bkc;
    dev_buf_alloc(&bx, "x", (size_t)n * 2, POISON_NONE, xb.data());
    dev_buf_alloc(&bw, "whole", (size_t)n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bc, "chunked", (size_t)n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bkw, "mask whole", (size_t)n, POISON_NONE, nullptr);
    dev_buf_alloc(&bkc, "mask chunked", (size_t)n, POISON_NONE, nullptr);
    const uint16_t *xp = (const uint16_t *)bx.data;
    gpu_dropout_forward_bf16((uint16_t *)bw.data, xp, n, p, seed, offset, g_stream);
    gpu_dropout_mask_u8((uint8_t *)bkw.data, n, p, seed, offset, g_stream);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        const int64_t nr = rows - r0 < chunk_rows ? rows - r0 : chunk_rows, e0 = r0 * cols;
        gpu_dropout_forward_at_bf16((uint16_t *)bc.data + e0, xp + e0, nr * cols, p, seed, offset, e0, g_stream);
        gpu_dropout_mask_at_u8((uint8_t *)bkc.data + e0, nr * cols, p, seed, offset, e0, g_stream);
    }
    std::vector<uint16_t> w((size_t)n), c((size_t)n);
    std::vector<uint8_t> kw((size_t)n), kc((size_t)n), kr((size_t)n);
    dev_buf_download(&bw, w.data(), 1);
    dev_buf_download(&bc, c.data(), 1);
    dev_buf_download(&bkw, kw.data(), 0);
    dev_buf_download(&bkc, kc.data(), 0);
    ref_dropout_mask(kr.data(), n, p, seed, offset);
    EXPECT(memcmp(w.data(), c.data(), (size_t)n * 2) == 0, "dropout %s: the chunks differ from the whole call", shape);
    EXPECT(memcmp(kw.data(), kc.data(), (size_t)n) == 0 && memcmp(kw.data(), kr.data(), (size_t)n) == 0,
           "dropout %s: the chunks' masks differ from the whole call's or the reference's", shape);
    for (struct dev_buf *b : {&bx, &bw, &bc, &bkw, &bkc}) dev_buf_free(b);
}

struct bench_ctx {
    int64_t n;
    uint16_t *x, *out;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_dropout_forward_bf16(b->out, b->x, b->n, 0.1f, 1234, 5678, s);
}

static void bench(double ceiling) {
    const int64_t sizes[] = {(int64_t)16384 * 576, (int64_t)8192 * 2048, (int64_t)8192 * 4096};
    for (int64_t n : sizes) {
        bench_ctx b = {n, nullptr, nullptr};
        CUDA_CHECK(cudaMalloc(&b.x, (size_t)n * 2));
        CUDA_CHECK(cudaMalloc(&b.out, (size_t)n * 2));
        CUDA_CHECK(cudaMemset(b.x, 0x3F, (size_t)n * 2));
        char shape[64];
        snprintf(shape, sizeof shape, "n=%lld p=0.1", (long long)n);
        bench_json("dropout_forward", shape, 4.0 * n, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        CUDA_CHECK(cudaFree(b.x));
        CUDA_CHECK(cudaFree(b.out));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261130);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const int64_t ns[] = {1, 3, 4, 5, 7, 8, 1023, 4099};
    const float ps[] = {0.0f, 0.05f, 0.1f, 0.5f, 0.9f};
    int id = 0;
    for (int64_t n : ns)
        for (float p : ps)
            for (int mis = 0; mis < 2; mis++) run_case(n, p, mis, 0, id++);
    run_case(4099, 0.1f, 0, 1, id++);
    run_case((int64_t)32 * 512 * 576, 0.1f, 0, 0, id++);
    run_case((int64_t)8 * 512 * 2048, 0.05f, 0, 0, id++);
    run_case((int64_t)8 * 512 * 2048 + 3, 0.5f, 1, 1, id++);
    run_slices(256, 64, 64, 0.1f, id++);
    run_slices(1000, 2048, 192, 0.05f, id++);
    run_slices(8192, 576, 4096, 0.5f, id++);
    const int rc = test_finish("dropout_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
