/* rmsnorm_parity.cu — gpu/rmsnorm against ref/rmsnorm (ACT_BF16) on random inputs.
 *
 *   bazel test --config=gpu //tests/parity:rmsnorm_parity
 *   rmsnorm_parity [--seed=N] [--bench]
 *
 * Shapes: C ∈ {8, 33, 264, 576, 1000, 1023, 1536, 2048, 3072, 4096, 8192} × N ∈ {1, 7, 33, 8192}
 * (every kernel shape: 16-byte and scalar paths, 32..256 threads per row, 1..4 chunks per thread —
 * 3 at 32, 64 and 128 threads: C 576, 1536, 3072 — the backward's doubled rows at 2048 and 4096,
 * ragged last chunks) — tile edges and the real widths of SmolLM2 (576), Llama-3.2-1B (2048), 3B
 * (3072) and 8B (4096). Inputs are bf16-rounded normals from the printed seed; both
 * sides see the same bits. Outputs are poisoned and guarded.
 *
 * Tolerances (derived; STYLE.md tiers):
 *  - out: the GPU's fp32 row sum differs from the reference's double sum, so rstd differs by a
 *    few fp32 ulps and bf16(x·rstd) can land on the other side of a rounding boundary; at most one
 *    bf16 rounding of n and one of n·w differ → elementwise, k = 2, eps = BF16_EPS, floor 0.
 *  - rstd: sum of C positive terms in any order has relative error ≤ (C−1)·u (u = 2^-24); the
 *    sqrt halves it; /C, +eps, sqrt and 1/x add ≤ 4u; the reference rounds once → elementwise
 *    with eps = FLT_EPSILON (2u) and k = C/4 + 3.
 *  - res_out = bf16(res_in + delta): one fp32 add and one rounding on both sides → exact.
 *  - dx: both sides get the same rstd, so n̂ = x·rstd and dn = dy·w are bitwise equal; only the
 *    fp32 row sum of dn·n̂ (relative error ≤ C·u of Σ|dn·n̂|) differs. That perturbs g by at most
 *    ~C·u·rms(g), which can flip the final bf16 rounding → k = 2, and an absolute floor of
 *    C·u/BF16_EPS·rms(dx) where cancellation makes g small.
 *  - dw (fp32, accumulated onto random values): long reduction over N rows → vs-naive tier: at
 *    most 2× the error of the sequential fp32 sum against the double reference, plus one fp32
 *    rounding of the result.
 *  - dw as a bf16 accumulator (GEMM_OUT_BF16) from bf16(dw0): exact — bf16 of the fp32 form's dw
 *    started from the widened bf16(dw0) (run on the GPU), since the bf16 form is that computation
 *    rounded once; dx of that call bitwise equal to the fp32 call's dx.
 *  - NaN/Inf: a NaN and an Inf planted in x must poison the same rows on both sides.
 *  - the strided forwards (out's rows at ldo > C): exact against the contiguous forwards — out's
 *    first C columns, rstd and res_out bitwise theirs, the padding columns still poisoned — for C
 *    33, 576, 1000 and 2048 at ldo = C + 48 and, up to C 1024, C + 3 (not a multiple of 8).
 *  - the strided backward (dy's rows at ldy > C, a folded group's input gradient): exact against
 *    the contiguous backward on a contiguous copy of dy — dx and fp32 dw bitwise theirs, with and
 *    without dres and dw, and with dx and dres one buffer (the trainer's call) — for C 576 and 2048
 *    at ldy = C + 64 and C 33 (the scalar path) at ldy 40 and 37.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/rmsnorm.h"
#include "ref/bf16.h"
#include "ref/rmsnorm.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

struct host_case {
    int N, C;
    float eps;
    std::vector<float> x, w, res_in, delta, dy, dres, dw0; /* bf16-valued floats (dw0: fp32) */
    std::vector<uint16_t> xb, wb, res_inb, deltab, dyb, dresb;
};

static void to_bf16(std::vector<float> &v, std::vector<uint16_t> &b) {
    b.resize(v.size());
    for (size_t i = 0; i < v.size(); i++) {
        b[i] = bf16_from_float(v[i]);
        v[i] = bf16_to_float(b[i]);
    }
}

static void make_case(host_case &h, int N, int C, uint64_t seed, int plant_nonfinite) {
    struct rng r;
    rng_init(&r, seed);
    const size_t n = (size_t)N * C;
    h.N = N;
    h.C = C;
    h.eps = 1e-5f;
    h.x.resize(n), h.w.resize(C), h.res_in.resize(n), h.delta.resize(n), h.dy.resize(n), h.dres.resize(n);
    h.dw0.resize(C);
    rng_fill_normal(&r, h.x.data(), (int64_t)n, 0.0, 1.0);
    rng_fill_normal(&r, h.w.data(), C, 1.0, 0.25);
    rng_fill_normal(&r, h.res_in.data(), (int64_t)n, 0.0, 1.0);
    rng_fill_normal(&r, h.delta.data(), (int64_t)n, 0.0, 0.5);
    rng_fill_normal(&r, h.dy.data(), (int64_t)n, 0.0, 1.0);
    rng_fill_normal(&r, h.dres.data(), (int64_t)n, 0.0, 1.0);
    rng_fill_normal(&r, h.dw0.data(), C, 0.0, 1.0);
    if (plant_nonfinite && N >= 3) {
        h.x[(size_t)1 * C + C / 2] = NAN;
        h.x[(size_t)2 * C] = INFINITY;
        h.delta[(size_t)2 * C + C - 1] = -INFINITY;
    }
    to_bf16(h.x, h.xb), to_bf16(h.w, h.wb), to_bf16(h.res_in, h.res_inb), to_bf16(h.delta, h.deltab);
    to_bf16(h.dy, h.dyb), to_bf16(h.dres, h.dresb);
}

static void from_bf16(const std::vector<uint16_t> &b, std::vector<float> &f) {
    f.resize(b.size());
    for (size_t i = 0; i < b.size(); i++) f[i] = bf16_to_float(b[i]);
}

static void run_case(int N, int C, int plant) {
    host_case h;
    const uint64_t seed = g_seed ^ ((uint64_t)N << 32) ^ (uint64_t)C ^ ((uint64_t)plant << 60);
    make_case(h, N, C, seed, plant);
    const size_t n = (size_t)N * C;
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C=%d%s", N, C, plant ? " nonfinite" : "");

    /* Reference. */
    std::vector<float> out_r(n), rstd_r(N), res_r(n), out2_r(n), rstd2_r(N), dx_r(n), dx2_r(n), dw_r(h.dw0);
    ref_rmsnorm_forward(out_r.data(), rstd_r.data(), h.x.data(), h.w.data(), N, C, h.eps, ACT_BF16);
    ref_rmsnorm_residual_forward(res_r.data(), out2_r.data(), rstd2_r.data(), h.res_in.data(), h.delta.data(),
                                 h.w.data(), N, C, h.eps, ACT_BF16);
    ref_rmsnorm_backward(dx_r.data(), dw_r.data(), h.dy.data(), h.x.data(), h.w.data(), rstd_r.data(), N, C, ACT_BF16);
    ref_rmsnorm_residual_backward(dx2_r.data(), nullptr, h.dy.data(), h.dres.data(), h.x.data(), h.w.data(),
                                  rstd_r.data(), N, C, ACT_BF16);
    /* Naive same-precision dw: sequential fp32 over rows, the second oracle of the vs-naive tier. */
    std::vector<float> dw_naive(h.dw0);
    for (int c = 0; c < C; c++) {
        float s = 0.0f;
        for (int i = 0; i < N; i++) {
            const size_t j = (size_t)i * C + c;
            s += h.dy[j] * bf16_round(h.x[j] * rstd_r[i]);
        }
        dw_naive[c] = h.dw0[c] + s;
    }

    /* Device. */
    struct dev_buf bx, bw, bout, brstd, bres_in, bdelta, bres, bout2, brstd2, bdy, bdres, bdx, bdx2, bdw, bws, brstd_in;
    dev_buf_alloc(&bx, "x", n * 2, POISON_NONE, h.xb.data());
    dev_buf_alloc(&bw, "w", (size_t)C * 2, POISON_NONE, h.wb.data());
    dev_buf_alloc(&bout, "out", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&brstd, "rstd", (size_t)N * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bres_in, "res_in", n * 2, POISON_NONE, h.res_inb.data());
    dev_buf_alloc(&bdelta, "delta", n * 2, POISON_NONE, h.deltab.data());
    dev_buf_alloc(&bres, "res_out", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bout2, "out(residual)", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&brstd2, "rstd(residual)", (size_t)N * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bdy, "dy", n * 2, POISON_NONE, h.dyb.data());
    dev_buf_alloc(&bdres, "dres", n * 2, POISON_NONE, h.dresb.data());
    dev_buf_alloc(&bdx, "dx", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdx2, "dx(residual)", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdw, "dw", (size_t)C * 4, POISON_NONE, h.dw0.data());
    dev_buf_alloc(&brstd_in, "rstd(ref)", (size_t)N * 4, POISON_NONE, rstd_r.data());
    const size_t ws = gpu_rmsnorm_backward_workspace_size(N, C);
    dev_buf_alloc(&bws, "workspace", ws, POISON_F32, nullptr);

    const uint16_t *dxp = (const uint16_t *)bx.data, *dwp = (const uint16_t *)bw.data;
    gpu_rmsnorm_forward_bf16((uint16_t *)bout.data, (float *)brstd.data, dxp, dwp, N, C, h.eps, g_stream);
    gpu_rmsnorm_residual_forward_bf16((uint16_t *)bres.data, (uint16_t *)bout2.data, (float *)brstd2.data,
                                      (const uint16_t *)bres_in.data, (const uint16_t *)bdelta.data, dwp, N, C, h.eps,
                                      g_stream);
    gpu_rmsnorm_backward_bf16((uint16_t *)bdx.data, bdw.data, GEMM_OUT_F32, (const uint16_t *)bdy.data, nullptr, dxp,
                              dwp, (const float *)brstd_in.data, N, C, bws.data, g_stream);
    gpu_rmsnorm_backward_bf16((uint16_t *)bdx2.data, nullptr, GEMM_OUT_F32, (const uint16_t *)bdy.data,
                              (const uint16_t *)bdres.data, dxp, dwp, (const float *)brstd_in.data, N, C, bws.data,
                              g_stream);
    CUDA_CHECK(cudaStreamSynchronize(g_stream));

    std::vector<uint16_t> outb(n), resb(n), out2b(n), dxb(n), dx2b(n);
    std::vector<float> out_g, res_g, out2_g, dx_g, dx2_g, rstd_g(N), rstd2_g(N), dw_g(C), ws_host(ws / 4);
    dev_buf_download(&bout, outb.data(), 1);
    dev_buf_download(&brstd, rstd_g.data(), 1);
    dev_buf_download(&bres, resb.data(), 1);
    dev_buf_download(&bout2, out2b.data(), 1);
    dev_buf_download(&brstd2, rstd2_g.data(), 1);
    dev_buf_download(&bdx, dxb.data(), 1);
    dev_buf_download(&bdx2, dx2b.data(), 1);
    dev_buf_download(&bdw, dw_g.data(), 0);
    dev_buf_download(&bws, ws_host.data(), 0);
    for (struct dev_buf *b : {&bx, &bw, &bres_in, &bdelta, &bdy, &bdres, &brstd_in}) {
        std::vector<unsigned char> tmp(b->nbytes);
        dev_buf_download(b, tmp.data(), 0); /* inputs: guards intact, contents untouched */
    }
    from_bf16(outb, out_g), from_bf16(resb, res_g), from_bf16(out2b, out2_g), from_bf16(dxb, dx_g);
    from_bf16(dx2b, dx2_g);

    struct cmp_case c = {"rmsnorm_forward", "out", shape, "bf16", seed};
    cmp_elementwise(&c, out_g.data(), out_r.data(), (int64_t)n, BF16_EPS, 2.0, 0.0, nullptr);
    c.what = "rstd";
    c.dtype = "f32";
    cmp_elementwise(&c, rstd_g.data(), rstd_r.data(), N, FLT_EPSILON, C / 4.0 + 3.0, 0.0, nullptr);
    c.op = "rmsnorm_residual_forward";
    c.what = "res_out";
    c.dtype = "bf16";
    cmp_exact_f32(&c, res_g.data(), res_r.data(), (int64_t)n);
    c.what = "out";
    cmp_elementwise(&c, out2_g.data(), out2_r.data(), (int64_t)n, BF16_EPS, 2.0, 0.0, nullptr);
    c.what = "rstd";
    c.dtype = "f32";
    cmp_elementwise(&c, rstd2_g.data(), rstd2_r.data(), N, FLT_EPSILON, C / 4.0 + 3.0, 0.0, nullptr);

    const double sum_floor = (double)C * ldexp(1.0, -24) / BF16_EPS;
    c.op = "rmsnorm_backward";
    c.what = "dx";
    c.dtype = "bf16";
    cmp_elementwise(&c, dx_g.data(), dx_r.data(), (int64_t)n, BF16_EPS, 2.0, sum_floor * cmp_rms(dx_r.data(), (int64_t)n),
                    nullptr);
    c.what = "dw";
    c.dtype = "f32";
    cmp_vs_naive(&c, dw_g.data(), dw_naive.data(), dw_r.data(), C, 2.0, FLT_EPSILON * cmp_rms(dw_r.data(), C), nullptr);
    c.op = "rmsnorm_residual_backward";
    c.what = "dx";
    c.dtype = "bf16";
    cmp_elementwise(&c, dx2_g.data(), dx2_r.data(), (int64_t)n, BF16_EPS, 2.0,
                    sum_floor * cmp_rms(dx2_r.data(), (int64_t)n), nullptr);

    /* Bitwise determinism: the same call twice gives the same dx and dw bits. */
    std::vector<float> dw_again(C);
    dev_buf_reset(&bdw, h.dw0.data());
    dev_buf_reset(&bdx, nullptr);
    gpu_rmsnorm_backward_bf16((uint16_t *)bdx.data, bdw.data, GEMM_OUT_F32, (const uint16_t *)bdy.data, nullptr, dxp,
                              dwp, (const float *)brstd_in.data, N, C, bws.data, g_stream);
    std::vector<uint16_t> dxb_again(n);
    dev_buf_download(&bdx, dxb_again.data(), 1);
    dev_buf_download(&bdw, dw_again.data(), 0);
    c.op = "rmsnorm_backward";
    c.what = "dx determinism";
    cmp_exact_bytes(&c, dxb_again.data(), dxb.data(), n * 2);
    c.what = "dw determinism";
    cmp_exact_bytes(&c, dw_again.data(), dw_g.data(), (size_t)C * 4);

    /* bf16 accumulator: the expectation is the fp32 form from the widened bf16(dw0), rounded. */
    const std::vector<uint16_t> dw0b = bits_of(h.dw0);
    const std::vector<float> dw0w = floats_of(dw0b);
    std::vector<float> dw_widened(C);
    dev_buf_reset(&bdw, dw0w.data());
    dev_buf_reset(&bdx, nullptr);
    gpu_rmsnorm_backward_bf16((uint16_t *)bdx.data, bdw.data, GEMM_OUT_F32, (const uint16_t *)bdy.data, nullptr, dxp,
                              dwp, (const float *)brstd_in.data, N, C, bws.data, g_stream);
    dev_buf_download(&bdw, dw_widened.data(), 0);
    struct dev_buf bdwb; /* accumulates: starts from bf16(dw0), not poison; guarded */
    dev_buf_alloc(&bdwb, "dw(bf16)", (size_t)C * 2, POISON_NONE, dw0b.data());
    dev_buf_reset(&bdx, nullptr);
    gpu_rmsnorm_backward_bf16((uint16_t *)bdx.data, bdwb.data, GEMM_OUT_BF16, (const uint16_t *)bdy.data, nullptr, dxp,
                              dwp, (const float *)brstd_in.data, N, C, bws.data, g_stream);
    std::vector<uint16_t> dwb_g(C), dxb_bf(n);
    dev_buf_download(&bdx, dxb_bf.data(), 1);
    dev_buf_download(&bdwb, dwb_g.data(), 0);
    /* Compared as floats: bitwise, except that any NaN matches any NaN (the planted NaN reaches dw;
     * the device's NaN bits need not be bf16_from_float's). */
    const std::vector<float> dwb_got = floats_of(dwb_g), dwb_want = floats_of(bits_of(dw_widened));
    c.what = "dw (bf16 accumulator)";
    c.dtype = "bf16";
    cmp_exact_f32(&c, dwb_got.data(), dwb_want.data(), C);
    c.what = "dx (bf16 dw call)";
    cmp_exact_bytes(&c, dxb_bf.data(), dxb.data(), n * 2);

    for (struct dev_buf *b : {&bx, &bw, &bout, &brstd, &bres_in, &bdelta, &bres, &bout2, &brstd2, &bdy, &bdres, &bdx,
                              &bdx2, &bdw, &bdwb, &bws, &brstd_in})
        dev_buf_free(b);
}

/* The strided forwards (gpu_rmsnorm_*_strided_bf16: out's rows at ldo > C, a normed input that
 * folded LoRA adapters extend with their u, gpu/lora.h): exact against the contiguous forwards run
 * here on the same inputs. out's first C columns, rstd and res_out are their bits; the padding
 * columns, poisoned before the call, keep the poison. */
static void run_strided_case(int N, int C, int64_t ldo) {
    host_case h;
    const uint64_t seed = g_seed ^ ((uint64_t)N << 32) ^ (uint64_t)C ^ ((uint64_t)ldo << 48);
    make_case(h, N, C, seed, 0);
    const size_t n = (size_t)N * C, nl = (size_t)N * ldo;
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C=%d ldo=%lld", N, C, (long long)ldo);

    struct dev_buf bx, bw, bres_in, bdelta, bout, brstd, bres, bout_s, brstd_s, bres_s;
    dev_buf_alloc(&bx, "x", n * 2, POISON_NONE, h.xb.data());
    dev_buf_alloc(&bw, "w", (size_t)C * 2, POISON_NONE, h.wb.data());
    dev_buf_alloc(&bres_in, "res_in", n * 2, POISON_NONE, h.res_inb.data());
    dev_buf_alloc(&bdelta, "delta", n * 2, POISON_NONE, h.deltab.data());
    dev_buf_alloc(&bout, "out", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&brstd, "rstd", (size_t)N * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bres, "res_out", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bout_s, "out(strided)", nl * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&brstd_s, "rstd(strided)", (size_t)N * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bres_s, "res_out(strided)", n * 2, POISON_BF16, nullptr);

    struct cmp_case c = {"rmsnorm_forward_strided", "out", shape, "bf16", seed};
    for (int residual = 0; residual < 2; residual++) {
        if (residual) {
            c.op = "rmsnorm_residual_forward_strided";
            for (struct dev_buf *b : {&bout, &brstd, &bout_s, &brstd_s}) dev_buf_reset(b, nullptr);
            gpu_rmsnorm_residual_forward_bf16((uint16_t *)bres.data, (uint16_t *)bout.data, (float *)brstd.data,
                                              (const uint16_t *)bres_in.data, (const uint16_t *)bdelta.data,
                                              (const uint16_t *)bw.data, N, C, h.eps, g_stream);
            gpu_rmsnorm_residual_forward_strided_bf16((uint16_t *)bres_s.data, (uint16_t *)bout_s.data, ldo,
                                                      (float *)brstd_s.data, (const uint16_t *)bres_in.data,
                                                      (const uint16_t *)bdelta.data, (const uint16_t *)bw.data, N, C,
                                                      h.eps, g_stream);
        } else {
            gpu_rmsnorm_forward_bf16((uint16_t *)bout.data, (float *)brstd.data, (const uint16_t *)bx.data,
                                     (const uint16_t *)bw.data, N, C, h.eps, g_stream);
            gpu_rmsnorm_forward_strided_bf16((uint16_t *)bout_s.data, ldo, (float *)brstd_s.data,
                                             (const uint16_t *)bx.data, (const uint16_t *)bw.data, N, C, h.eps,
                                             g_stream);
        }
        std::vector<uint16_t> out(n), out_s(nl);
        std::vector<float> rstd(N), rstd_s(N);
        dev_buf_download(&bout, out.data(), 1);
        dev_buf_download(&brstd, rstd.data(), 1);
        dev_buf_download(&bout_s, out_s.data(), 0);
        dev_buf_download(&brstd_s, rstd_s.data(), 1);
        /* the expected image: the contiguous rows, then the poison */
        std::vector<uint16_t> want(nl, (uint16_t)POISON_BF16_BITS);
        for (int i = 0; i < N; i++) memcpy(&want[(size_t)i * ldo], &out[(size_t)i * C], (size_t)C * 2);
        c.what = "out (first C columns the contiguous forward's, padding untouched)";
        c.dtype = "bf16";
        cmp_exact_bytes(&c, out_s.data(), want.data(), nl * 2);
        c.what = "rstd";
        c.dtype = "f32";
        cmp_exact_bytes(&c, rstd_s.data(), rstd.data(), (size_t)N * 4);
        if (residual) {
            std::vector<uint16_t> res(n), res_s(n);
            dev_buf_download(&bres, res.data(), 1);
            dev_buf_download(&bres_s, res_s.data(), 1);
            c.what = "res_out";
            c.dtype = "bf16";
            cmp_exact_bytes(&c, res_s.data(), res.data(), n * 2);
        }
    }
    for (struct dev_buf *b : {&bx, &bw, &bres_in, &bdelta, &bout, &brstd, &bres, &bout_s, &brstd_s, &bres_s})
        dev_buf_free(b);
}

/* The strided backward (gpu_rmsnorm_backward_strided_bf16: dy's rows at ldy > C, a folded group's
 * input gradient whose rows carry its du after the C columns, gpu/lora.h): exact against the
 * contiguous backward run here on a contiguous copy of dy. dy's padding columns hold the bf16 poison
 * (a NaN: a kernel that read them would turn dx into NaN). Each of plain / dres × no dw / fp32 dw
 * gives the contiguous call's dx and dw bits; then dx = dres = one buffer holding dres (the trainer's
 * call: dx and dres are its gradient G, dy its strided dn) gives the same bits as the separate
 * buffers. */
static void run_strided_backward_case(int N, int C, int64_t ldy) {
    host_case h;
    const uint64_t seed = g_seed ^ ((uint64_t)N << 32) ^ (uint64_t)C ^ ((uint64_t)ldy << 48) ^ ((uint64_t)1 << 62);
    make_case(h, N, C, seed, 0);
    const size_t n = (size_t)N * C, nl = (size_t)N * ldy;
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C=%d ldy=%lld", N, C, (long long)ldy);

    /* rstd from the reference forward (both calls read the same bits) */
    std::vector<float> out_r(n), rstd_r(N);
    ref_rmsnorm_forward(out_r.data(), rstd_r.data(), h.x.data(), h.w.data(), N, C, h.eps, ACT_BF16);
    std::vector<uint16_t> dy_s(nl, (uint16_t)POISON_BF16_BITS);
    for (int i = 0; i < N; i++) memcpy(&dy_s[(size_t)i * ldy], &h.dyb[(size_t)i * C], (size_t)C * 2);

    struct dev_buf bx, bw, brstd, bdy, bdy_s, bdres, bdx, bdx_s, bg, bdw, bdw_s, bws;
    dev_buf_alloc(&bx, "x", n * 2, POISON_NONE, h.xb.data());
    dev_buf_alloc(&bw, "w", (size_t)C * 2, POISON_NONE, h.wb.data());
    dev_buf_alloc(&brstd, "rstd", (size_t)N * 4, POISON_NONE, rstd_r.data());
    dev_buf_alloc(&bdy, "dy", n * 2, POISON_NONE, h.dyb.data());
    dev_buf_alloc(&bdy_s, "dy(strided)", nl * 2, POISON_NONE, dy_s.data());
    dev_buf_alloc(&bdres, "dres", n * 2, POISON_NONE, h.dresb.data());
    dev_buf_alloc(&bdx, "dx", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdx_s, "dx(strided dy)", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bg, "dx = dres(strided dy)", n * 2, POISON_NONE, h.dresb.data());
    dev_buf_alloc(&bdw, "dw", (size_t)C * 4, POISON_NONE, h.dw0.data());
    dev_buf_alloc(&bdw_s, "dw(strided dy)", (size_t)C * 4, POISON_NONE, h.dw0.data());
    dev_buf_alloc(&bws, "workspace", gpu_rmsnorm_backward_workspace_size(N, C), POISON_F32, nullptr);
    const uint16_t *xp = (const uint16_t *)bx.data, *wp = (const uint16_t *)bw.data;
    const float *rp = (const float *)brstd.data;

    struct cmp_case c = {"rmsnorm_backward_strided", "dx", shape, "bf16", seed};
    char what[96];
    c.what = what;
    std::vector<uint16_t> dx_res[2]; /* the contiguous dres call's dx, without and with dw */
    std::vector<float> dw_res[2];
    for (int with_dres = 0; with_dres < 2; with_dres++)
        for (int with_dw = 0; with_dw < 2; with_dw++) {
            for (struct dev_buf *b : {&bdx, &bdx_s, &bws}) dev_buf_reset(b, nullptr);
            dev_buf_reset(&bdw, h.dw0.data());
            dev_buf_reset(&bdw_s, h.dw0.data());
            const uint16_t *dres = with_dres ? (const uint16_t *)bdres.data : nullptr;
            gpu_rmsnorm_backward_bf16((uint16_t *)bdx.data, with_dw ? bdw.data : nullptr, GEMM_OUT_F32,
                                      (const uint16_t *)bdy.data, dres, xp, wp, rp, N, C, bws.data, g_stream);
            gpu_rmsnorm_backward_strided_bf16((uint16_t *)bdx_s.data, with_dw ? bdw_s.data : nullptr, GEMM_OUT_F32,
                                              (const uint16_t *)bdy_s.data, ldy, dres, xp, wp, rp, N, C, bws.data,
                                              g_stream);
            std::vector<uint16_t> dx(n), dx_s(n);
            std::vector<float> dw(C), dw_s(C);
            dev_buf_download(&bdx, dx.data(), 1);
            dev_buf_download(&bdx_s, dx_s.data(), 1);
            dev_buf_download(&bdw, dw.data(), 0);
            dev_buf_download(&bdw_s, dw_s.data(), 0);
            const char *v = with_dres ? (with_dw ? "dres, dw" : "dres") : (with_dw ? "dw" : "plain");
            snprintf(what, sizeof what, "dx (%s) vs the contiguous backward", v);
            c.dtype = "bf16";
            cmp_exact_bytes(&c, dx_s.data(), dx.data(), n * 2);
            /* without dw both stay dw0 */
            snprintf(what, sizeof what, "dw (%s) vs the contiguous backward", v);
            c.dtype = "f32";
            cmp_exact_bytes(&c, dw_s.data(), dw.data(), (size_t)C * 4);
            if (with_dres) {
                dx_res[with_dw] = dx;
                dw_res[with_dw] = dw;
            }
        }
    for (int with_dw = 0; with_dw < 2; with_dw++) {
        dev_buf_reset(&bg, h.dresb.data());
        dev_buf_reset(&bdw_s, h.dw0.data());
        dev_buf_reset(&bws, nullptr);
        gpu_rmsnorm_backward_strided_bf16((uint16_t *)bg.data, with_dw ? bdw_s.data : nullptr, GEMM_OUT_F32,
                                          (const uint16_t *)bdy_s.data, ldy, (const uint16_t *)bg.data, xp, wp, rp, N,
                                          C, bws.data, g_stream);
        std::vector<uint16_t> g(n);
        std::vector<float> dw_s(C);
        dev_buf_download(&bg, g.data(), 0);
        dev_buf_download(&bdw_s, dw_s.data(), 0);
        snprintf(what, sizeof what, "dx = dres, one buffer (%s) vs the contiguous dres backward",
                 with_dw ? "dw" : "no dw");
        c.dtype = "bf16";
        cmp_exact_bytes(&c, g.data(), dx_res[with_dw].data(), n * 2);
        snprintf(what, sizeof what, "dw (dx = dres, %s) vs the contiguous dres backward", with_dw ? "dw" : "no dw");
        c.dtype = "f32";
        cmp_exact_bytes(&c, dw_s.data(), dw_res[with_dw].data(), (size_t)C * 4);
    }
    std::vector<uint16_t> dy_after(nl);
    dev_buf_download(&bdy_s, dy_after.data(), 0);
    snprintf(what, sizeof what, "dy (strided, padding poisoned) untouched");
    c.dtype = "bf16";
    cmp_exact_bytes(&c, dy_after.data(), dy_s.data(), nl * 2);
    for (struct dev_buf *b : {&bx, &bw, &brstd, &bdres, &bdy}) {
        std::vector<unsigned char> tmp(b->nbytes);
        dev_buf_download(b, tmp.data(), 0); /* inputs: guards intact */
    }
    for (struct dev_buf *b : {&bx, &bw, &brstd, &bdy, &bdy_s, &bdres, &bdx, &bdx_s, &bg, &bdw, &bdw_s, &bws})
        dev_buf_free(b);
}

struct bench_ctx {
    int N, C, which;
    uint16_t *x, *w, *out, *res_in, *res_out, *dy, *dres, *dx;
    float *rstd, *dw;
    uint16_t *dwb; /* the bf16 accumulator */
    void *ws;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    switch (b->which) {
        case 0: gpu_rmsnorm_forward_bf16(b->out, b->rstd, b->x, b->w, b->N, b->C, 1e-5f, s); break;
        case 1:
            gpu_rmsnorm_residual_forward_bf16(b->res_out, b->out, b->rstd, b->res_in, b->x, b->w, b->N, b->C, 1e-5f, s);
            break;
        case 2:
            gpu_rmsnorm_backward_bf16(b->dx, nullptr, GEMM_OUT_F32, b->dy, b->dres, b->x, b->w, b->rstd, b->N, b->C,
                                      b->ws, s);
            break;
        case 3:
            gpu_rmsnorm_backward_bf16(b->dx, b->dw, GEMM_OUT_F32, b->dy, nullptr, b->x, b->w, b->rstd, b->N, b->C,
                                      b->ws, s);
            break;
        default:
            gpu_rmsnorm_backward_bf16(b->dx, b->dwb, GEMM_OUT_BF16, b->dy, nullptr, b->x, b->w, b->rstd, b->N, b->C,
                                      b->ws, s);
            break;
    }
}

static void bench(double ceiling) {
    const int shapes[][2] = {{16384, 576}, {8192, 2048}, {8192, 3072}, {8192, 4096}};
    for (auto &sh : shapes) {
        const int N = sh[0], C = sh[1];
        const size_t n = (size_t)N * C;
        host_case h;
        make_case(h, N, C, g_seed, 0);
        bench_ctx b = {N, C, 0};
        uint16_t **bufs[] = {&b.x, &b.out, &b.res_in, &b.res_out, &b.dy, &b.dres, &b.dx};
        for (uint16_t **p : bufs) CUDA_CHECK(cudaMalloc(p, n * 2));
        CUDA_CHECK(cudaMalloc(&b.w, (size_t)C * 2));
        CUDA_CHECK(cudaMalloc(&b.rstd, (size_t)N * 4));
        CUDA_CHECK(cudaMalloc(&b.dw, (size_t)C * 4));
        CUDA_CHECK(cudaMalloc(&b.dwb, (size_t)C * 2));
        CUDA_CHECK(cudaMalloc(&b.ws, gpu_rmsnorm_backward_workspace_size(N, C)));
        CUDA_CHECK(cudaMemcpy(b.x, h.xb.data(), n * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(b.res_in, h.res_inb.data(), n * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(b.dy, h.dyb.data(), n * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(b.dres, h.dresb.data(), n * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(b.w, h.wb.data(), (size_t)C * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(b.dw, 0, (size_t)C * 4));
        CUDA_CHECK(cudaMemset(b.dwb, 0, (size_t)C * 2));
        gpu_rmsnorm_forward_bf16(b.out, b.rstd, b.x, b.w, N, C, 1e-5f, g_stream);
        char shape[64];
        snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
        /* Fewest bytes each pass must move: inputs read once, outputs written once. */
        const double fwd = 2.0 * n * 2 + 2.0 * C + 4.0 * N;
        const double res = 4.0 * n * 2 + 2.0 * C + 4.0 * N;
        const double bwd_dres = 4.0 * n * 2 + 2.0 * C + 4.0 * N;
        const double bwd_dw = 3.0 * n * 2 + 2.0 * C + 4.0 * N + 8.0 * C;
        const double bwd_dw_bf16 = 3.0 * n * 2 + 2.0 * C + 4.0 * N + 4.0 * C;
        const char *names[] = {"rmsnorm_forward", "rmsnorm_residual_forward", "rmsnorm_residual_backward",
                               "rmsnorm_backward_dw", "rmsnorm_backward_dw_bf16"};
        const double bytes[] = {fwd, res, bwd_dres, bwd_dw, bwd_dw_bf16};
        for (int which = 0; which < 5; which++) {
            b.which = which;
            struct bench_result r = bench_time(bench_call, &b, g_stream, 5, 25, 10);
            bench_json(names[which], shape, bytes[which], 0, r, ceiling);
        }
        for (uint16_t **p : bufs) CUDA_CHECK(cudaFree(*p));
        CUDA_CHECK(cudaFree(b.w));
        CUDA_CHECK(cudaFree(b.rstd));
        CUDA_CHECK(cudaFree(b.dw));
        CUDA_CHECK(cudaFree(b.dwb));
        CUDA_CHECK(cudaFree(b.ws));
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261122);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const int Cs[] = {8, 33, 264, 576, 1000, 1023, 1536, 2048, 3072, 4096, 8192};
    const int Ns[] = {1, 7, 33, 8192};
    for (int C : Cs)
        for (int N : Ns) run_case(N, C, 0);
    run_case(7, 576, 1);
    run_case(33, 33, 1);
    /* strided out: a stride of a multiple of 8 (the 16-byte path where C allows it) and, where C is
     * not a multiple of 8 (the scalar path either way), an odd one */
    const int strided[][2] = {{7, 576}, {300, 576}, {33, 2048}, {300, 2048}, {33, 33}, {64, 1000}};
    for (const auto &sc : strided) {
        run_strided_case(sc[0], sc[1], sc[1] + 48);
        if (sc[1] % 8 != 0) run_strided_case(sc[0], sc[1], sc[1] + 3); /* odd strides: C % 8 != 0 only */
    }
    /* strided dy: C + 64 (gpu/llama.cu rounds a folded group's rows to 64 elements) where C is a
     * multiple of 8; for C 33 (the scalar path) a multiple of 8 and an odd stride */
    const int strided_dy[][3] = {{7, 576, 640}, {300, 576, 640}, {33, 2048, 2112}, {300, 2048, 2112},
                                 {33, 33, 40},  {33, 33, 37}};
    for (const auto &sc : strided_dy) run_strided_backward_case(sc[0], sc[1], sc[2]);
    const int rc = test_finish("rmsnorm_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
