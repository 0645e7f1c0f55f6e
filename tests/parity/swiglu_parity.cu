/* swiglu_parity.cu — gpu/swiglu against ref/swiglu (ACT_BF16) on random inputs.
 *
 *   bazel test --config=gpu //tests/parity:swiglu_parity
 *   swiglu_parity [--seed=N] [--bench]
 *
 * Shapes: F ∈ {1, 7, 8, 9, 64, 1000, 1536, 8192, 14336} × N ∈ {1, 7, 33, 300}: the 8-wide and
 * scalar paths, ragged rows, and the real MLP widths (SmolLM2 1536, Llama-3.2-1B/3B 8192,
 * Llama-3.1-8B 14336). Layouts: gate and up as the halves of one fused (N, 2F) buffer (the fused
 * gate/up GEMM output, ld = 2F) and as separate (N, F) buffers; the backward also in place (dg, du
 * over g, u of the fused buffer). Inputs: bf16-rounded normals (gate σ = 3 to reach both tails of
 * silu) from the printed seed. Outputs poisoned and guarded; NaN/Inf planted in gate and up must
 * land at the same positions on both sides.
 *
 * Tolerances (tier b, derived): both sides do the same IEEE fp32 operations except exp (libdevice
 * expf ≤ 2 ulp vs the reference's), so silu(g) and σ(g) differ by a few fp32 ulps (≪ BF16_EPS).
 *  - h = bf16(bf16(silu g)·u): the inner rounding may flip by one bf16 ulp (≤ eps relative) and
 *    the outer one by another half ulp each side → |Δ| ≤ 2·eps·|ref|: k = 2.01.
 *  - du = bf16(dh·bf16(silu g)): same argument, k = 2.01.
 *  - dg = bf16(bf16(dh·u)·silu'(g)): silu'(g) = σ(1 + g(1 − σ)) has a zero near g ≈ −1.28 where
 *    its fp32 relative error is unbounded but its absolute error stays ≤ ~8 ulp(1)·(1 + |g|); so
 *    k = 2.01 with floor = 8·2^-24·(1 + max|g|)·max|dh·u| / (2.01·BF16_EPS).
 *
 * The kernels' σ(g) and silu(g) by the division's fast path without its branch (gpu/swiglu.cuh
 * sigmoid_silu) against sigmoid_dev and silu_dev, bit for bit, for every bf16 g (all 65536 patterns:
 * the kernels read g as bf16): each value alone (the other lanes of its batch the same value) and in
 * a batch with the seven patterns after it (a batch takes the divisions when any of its values is
 * out of the fast path's range), and SwiGLU's backward element from them (dg, du, a) against
 * swiglu_backward_elem's for a u and dh derived from the pattern.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/swiglu.cuh"
#include "gpu/swiglu.h"
#include "ref/bf16.h"
#include "ref/swiglu.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

/* bad[0]: patterns whose σ or silu differ (alone or batched), bad[1]: whose backward element differs;
 * bad[2 + k]: the first such pattern (atomicMin) */
__global__ void sigmoid_silu_all_bf16(unsigned *bad) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= 65536u) return;
    const float g = __uint_as_float(t << 16);
    const float se = refine::sigmoid_dev(g), qe = refine::silu_dev(g);
    float ga[8], sa[8], qa[8], gb[8], sb[8], qb[8];
#pragma unroll
    for (int j = 0; j < 8; j++) ga[j] = g, gb[j] = __uint_as_float(((t + (unsigned)j) & 0xFFFFu) << 16);
    refine::sigmoid_silu<8>(ga, sa, qa);
    refine::sigmoid_silu<8>(gb, sb, qb);
    const bool sig_ok = __float_as_uint(sa[0]) == __float_as_uint(se) && __float_as_uint(qa[0]) == __float_as_uint(qe) &&
                        __float_as_uint(sb[0]) == __float_as_uint(se) && __float_as_uint(qb[0]) == __float_as_uint(qe);
    /* u and dh: bf16 values spread over several binades, from the pattern */
    const float u = __uint_as_float(((((t * 2654435761u) >> 16) & 0x3FFFu) | 0x3C00u) << 16 ^ ((t & 1u) << 31));
    const float dh = __uint_as_float(((((t * 40503u) >> 4) & 0x3FFFu) | 0x3A00u) << 16 ^ ((t & 2u) << 30));
    float dg0, du0, dg1, du1;
    const float a0 = refine::swiglu_backward_elem(g, u, dh, dg0, du0);
    const float a1 = refine::swiglu_backward_sig(g, u, dh, sa[0], qa[0], dg1, du1);
    const bool bwd_ok = __float_as_uint(a0) == __float_as_uint(a1) && __float_as_uint(dg0) == __float_as_uint(dg1) &&
                        __float_as_uint(du0) == __float_as_uint(du1);
    if (!sig_ok) atomicAdd(&bad[0], 1u), atomicMin(&bad[2], t);
    if (!bwd_ok) atomicAdd(&bad[1], 1u), atomicMin(&bad[3], t);
}

static void check_sigmoid_silu() {
    unsigned *d_bad, h_bad[4] = {0, 0, 0xFFFFFFFFu, 0xFFFFFFFFu};
    CUDA_CHECK(cudaMalloc(&d_bad, sizeof h_bad));
    CUDA_CHECK(cudaMemcpy(d_bad, h_bad, sizeof h_bad, cudaMemcpyHostToDevice));
    sigmoid_silu_all_bf16<<<256, 256, 0, g_stream>>>(d_bad);
    KERNEL_CHECK(g_stream);
    CUDA_CHECK(cudaMemcpyAsync(h_bad, d_bad, sizeof h_bad, cudaMemcpyDeviceToHost, g_stream));
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    CUDA_CHECK(cudaFree(d_bad));
    EXPECT(h_bad[0] == 0, "sigmoid_silu: %u of 65536 bf16 g differ from sigmoid_dev/silu_dev (first bits 0x%04x)",
           h_bad[0], h_bad[2]);
    EXPECT(h_bad[1] == 0, "swiglu_backward_sig: %u of 65536 bf16 g differ from swiglu_backward_elem (first 0x%04x)",
           h_bad[1], h_bad[3]);
}

static void oracle_forward(float *h, const float *g, const float *u, int N, int F) {
    ref_swiglu_forward(h, g, u, N, F, F, ACT_BF16);
}

static void oracle_backward(float *dg, float *du, const float *dh, const float *g, const float *u, int N, int F) {
    ref_swiglu_backward(dg, du, dh, g, u, N, F, F, ACT_BF16);
}

static void fill_bf16(struct rng *r, std::vector<float> &v, double sd) {
    rng_fill_normal(r, v.data(), (int64_t)v.size(), 0.0, sd);
    for (float &x : v) x = bf16_round(x);
}

static std::vector<uint16_t> bits(const std::vector<float> &v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); i++) b[i] = bf16_from_float(v[i]);
    return b;
}

static std::vector<float> floats(const std::vector<uint16_t> &b) {
    std::vector<float> f(b.size());
    for (size_t i = 0; i < b.size(); i++) f[i] = bf16_to_float(b[i]);
    return f;
}

static void run_case(int N, int F, int fused, int plant, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d F=%d %s%s", N, F, fused ? "fused(ld=2F)" : "separate", plant ? " nonfinite" : "");
    const size_t n = (size_t)N * F;
    std::vector<float> g(n), u(n), dh(n);
    fill_bf16(&r, g, 3.0);
    fill_bf16(&r, u, 1.0);
    fill_bf16(&r, dh, 1.0);
    if (plant && n >= 3) {
        g[0] = NAN;
        g[1] = INFINITY;
        u[2] = -INFINITY;
        if (n > 3) g[3] = -INFINITY;
    }
    std::vector<float> h_r(n), dg_r(n), du_r(n);
    oracle_forward(h_r.data(), g.data(), u.data(), N, F);
    oracle_backward(dg_r.data(), du_r.data(), dh.data(), g.data(), u.data(), N, F);

    /* Device images: fused = one (N, 2F) buffer [g | u] per row; separate = two (N, F) buffers. */
    const int ld = fused ? 2 * F : F;
    std::vector<uint16_t> gu_img, g_img = bits(g), u_img = bits(u);
    if (fused) {
        gu_img.resize(2 * n);
        for (int i = 0; i < N; i++) {
            memcpy(&gu_img[(size_t)i * 2 * F], &g_img[(size_t)i * F], (size_t)F * 2);
            memcpy(&gu_img[(size_t)i * 2 * F + F], &u_img[(size_t)i * F], (size_t)F * 2);
        }
    }
    std::vector<uint16_t> dh_img = bits(dh);
    struct dev_buf bgu, bg, bu, bdh, bh, bdg, bdu;
    const uint16_t *gp, *up;
    if (fused) {
        dev_buf_alloc(&bgu, "gate_up", gu_img.size() * 2, POISON_NONE, gu_img.data());
        gp = (const uint16_t *)bgu.data, up = gp + F;
    } else {
        dev_buf_alloc(&bg, "gate", n * 2, POISON_NONE, g_img.data());
        dev_buf_alloc(&bu, "up", n * 2, POISON_NONE, u_img.data());
        gp = (const uint16_t *)bg.data, up = (const uint16_t *)bu.data;
    }
    dev_buf_alloc(&bdh, "dh", n * 2, POISON_NONE, dh_img.data());
    dev_buf_alloc(&bh, "h", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdg, "dg", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdu, "du", n * 2, POISON_BF16, nullptr);
    gpu_swiglu_forward_bf16((uint16_t *)bh.data, gp, up, N, F, ld, g_stream);
    gpu_swiglu_backward_bf16((uint16_t *)bdg.data, (uint16_t *)bdu.data, (const uint16_t *)bdh.data, gp, up, N, F, ld, F,
                             g_stream);
    std::vector<uint16_t> hb(n), dgb(n), dub(n);
    dev_buf_download(&bh, hb.data(), 1);
    dev_buf_download(&bdg, dgb.data(), 1);
    dev_buf_download(&bdu, dub.data(), 1);
    std::vector<float> h_g = floats(hb), dg_g = floats(dgb), du_g = floats(dub);
    {
        /* the backward forming h too: h bitwise the forward's, dg and du the backward's, all written */
        dev_buf_reset(&bh, nullptr);
        dev_buf_reset(&bdg, nullptr);
        dev_buf_reset(&bdu, nullptr);
        gpu_swiglu_backward_forming_bf16((uint16_t *)bdg.data, (uint16_t *)bdu.data, (uint16_t *)bh.data,
                                         (const uint16_t *)bdh.data, gp, up, N, F, ld, F, g_stream);
        std::vector<uint16_t> h2(n), dg2(n), du2(n);
        dev_buf_download(&bh, h2.data(), 1);
        dev_buf_download(&bdg, dg2.data(), 1);
        dev_buf_download(&bdu, du2.data(), 1);
        struct cmp_case fc = {"swiglu_backward_forming", "h (the forward's)", shape, "bf16", seed};
        cmp_exact_bytes(&fc, h2.data(), hb.data(), n * 2);
        fc.what = "dg (the backward's)";
        cmp_exact_bytes(&fc, dg2.data(), dgb.data(), n * 2);
        fc.what = "du (the backward's)";
        cmp_exact_bytes(&fc, du2.data(), dub.data(), n * 2);
    }

    const double k = 2.01;
    double max_g = 0, max_dhu = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(g[i])) max_g = fmax(max_g, fabs(g[i]));
        const double p = (double)dh[i] * u[i];
        if (isfinite(p)) max_dhu = fmax(max_dhu, fabs(p));
    }
    const double dg_floor = 8.0 * ldexp(1.0, -24) * (1.0 + max_g) * max_dhu / (k * BF16_EPS);
    struct cmp_case cc = {"swiglu_forward", "h", shape, "bf16", seed};
    cmp_elementwise(&cc, h_g.data(), h_r.data(), (int64_t)n, BF16_EPS, k, 0.0, nullptr);
    cc.op = "swiglu_backward";
    cc.what = "du";
    cmp_elementwise(&cc, du_g.data(), du_r.data(), (int64_t)n, BF16_EPS, k, 0.0, nullptr);
    cc.what = "dg";
    cmp_elementwise(&cc, dg_g.data(), dg_r.data(), (int64_t)n, BF16_EPS, k, dg_floor, nullptr);

    if (fused) {
        /* In place: dg over g and du over u inside the fused buffer; must equal the out-of-place run. */
        gpu_swiglu_backward_bf16((uint16_t *)bgu.data, (uint16_t *)bgu.data + F, (const uint16_t *)bdh.data, gp, up, N,
                                 F, ld, ld, g_stream);
        std::vector<uint16_t> after(gu_img.size());
        dev_buf_download(&bgu, after.data(), 0);
        std::vector<uint16_t> dg2(n), du2(n);
        for (int i = 0; i < N; i++) {
            memcpy(&dg2[(size_t)i * F], &after[(size_t)i * 2 * F], (size_t)F * 2);
            memcpy(&du2[(size_t)i * F], &after[(size_t)i * 2 * F + F], (size_t)F * 2);
        }
        cc.what = "dg in place";
        cmp_exact_bytes(&cc, dg2.data(), dgb.data(), n * 2);
        cc.what = "du in place";
        cmp_exact_bytes(&cc, du2.data(), dub.data(), n * 2);
        /* in place forming h (the trainers' use): h from the values before they are overwritten */
        dev_buf_reset(&bgu, gu_img.data());
        dev_buf_reset(&bh, nullptr);
        gpu_swiglu_backward_forming_bf16((uint16_t *)bgu.data, (uint16_t *)bgu.data + F, (uint16_t *)bh.data,
                                         (const uint16_t *)bdh.data, gp, up, N, F, ld, ld, g_stream);
        std::vector<uint16_t> h3(n);
        dev_buf_download(&bgu, after.data(), 0);
        dev_buf_download(&bh, h3.data(), 1);
        for (int i = 0; i < N; i++) {
            memcpy(&dg2[(size_t)i * F], &after[(size_t)i * 2 * F], (size_t)F * 2);
            memcpy(&du2[(size_t)i * F], &after[(size_t)i * 2 * F + F], (size_t)F * 2);
        }
        cc.op = "swiglu_backward_forming";
        cc.what = "h in place";
        cmp_exact_bytes(&cc, h3.data(), hb.data(), n * 2);
        cc.what = "dg in place";
        cmp_exact_bytes(&cc, dg2.data(), dgb.data(), n * 2);
        cc.what = "du in place";
        cmp_exact_bytes(&cc, du2.data(), dub.data(), n * 2);
        dev_buf_free(&bgu);
    } else {
        std::vector<uint16_t> tmp(n);
        dev_buf_download(&bg, tmp.data(), 0);
        dev_buf_download(&bu, tmp.data(), 0);
        dev_buf_free(&bg);
        dev_buf_free(&bu);
    }
    for (struct dev_buf *b : {&bdh, &bh, &bdg, &bdu}) dev_buf_free(b);
}

struct bench_ctx {
    int N, F, which;
    uint16_t *gu, *h, *dh, *dgu;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    if (b->which == 0)
        gpu_swiglu_forward_bf16(b->h, b->gu, b->gu + b->F, b->N, b->F, 2 * b->F, s);
    else
        gpu_swiglu_backward_bf16(b->dgu, b->dgu + b->F, b->dh, b->gu, b->gu + b->F, b->N, b->F, 2 * b->F, 2 * b->F, s);
}

static void bench(double ceiling) {
    const int shapes[][2] = {{16384, 1536}, {8192, 8192}, {8192, 14336}};
    for (auto &sh : shapes) {
        bench_ctx b = {sh[0], sh[1], 0, nullptr, nullptr, nullptr, nullptr};
        const size_t n = (size_t)b.N * b.F;
        CUDA_CHECK(cudaMalloc(&b.gu, 4 * n));
        CUDA_CHECK(cudaMalloc(&b.dgu, 4 * n));
        CUDA_CHECK(cudaMalloc(&b.h, 2 * n));
        CUDA_CHECK(cudaMalloc(&b.dh, 2 * n));
        CUDA_CHECK(cudaMemset(b.gu, 0x3F, 4 * n)); /* bf16 0x3F3F ≈ 0.75: finite */
        CUDA_CHECK(cudaMemset(b.dh, 0x3F, 2 * n));
        char shape[64];
        snprintf(shape, sizeof shape, "N=%d F=%d fused", b.N, b.F);
        b.which = 0;
        bench_json("swiglu_forward", shape, 6.0 * n, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        b.which = 1;
        bench_json("swiglu_backward", shape, 10.0 * n, 0, bench_time(bench_call, &b, g_stream, 5, 25, 10), ceiling);
        for (void *p : {(void *)b.gu, (void *)b.dgu, (void *)b.h, (void *)b.dh}) CUDA_CHECK(cudaFree(p));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261125);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    check_sigmoid_silu();
    const int Fs[] = {1, 7, 8, 9, 64, 1000, 1536, 8192, 14336};
    const int Ns[] = {1, 7, 33, 300};
    int id = 0;
    for (int F : Fs)
        for (int N : Ns)
            for (int fused = 0; fused < 2; fused++) run_case(N, F, fused, 0, id++);
    run_case(7, 64, 1, 1, id++);
    run_case(3, 9, 0, 1, id++);
    const int rc = test_finish("swiglu_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
