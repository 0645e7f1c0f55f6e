/* adamw8bit_parity.cu — gpu/adamw8bit (bitsandbytes 8-bit blockwise AdamW) against ref/adamw8bit.
 *
 *   bazel test --config=gpu //tests/parity:adamw8bit_parity
 *   adamw8bit_parity [--seed=N] [--bench]
 *
 * One optimizer over tensors of sizes around the edges that matter: the 8-bit threshold (4095
 * keeps fp32 states, 4096 and up are 8-bit), the 256-block (short last blocks of 1, 7 and 255
 * elements), the 2048-element chunk of the launch, and the LoRA shapes of Llama-3.2-1B (A 16×2048,
 * B 2048×16 and 8192×16); some tensors with bf16 copies, one offset by one element so that its full
 * blocks take the scalar path. Four steps with fresh gradients each (normals of mixed scales, from
 * the printed seed); at step 2 NaN and ±Inf are planted in the gradients (the 8-bit path must zero
 * those elements' moments and leave p; the fp32 path propagates them), and at step 1 one whole
 * 256-block gets zero gradients (its absmax stays 0 and its codes come from 0/0, exercising the
 * encoder's NaN path and the sign nudge's wrap-around). Two hyperparameter sets: bitsandbytes' defaults,
 * and wd = 0 with gnorm_scale = 0.5 and other betas.
 * Outputs: p, the state codes, the block absmax and the fp32 states, updated in place, compared
 * after every step; the bf16 copies are poisoned before each step and must be written entirely;
 * guard regions around every buffer.
 *
 * Tolerance: (a) exact, for everything. gpu/adamw8bit.h performs step8_cuda's / step32_cuda's fp32
 * operations in the reference's order with correctly rounded intrinsics (__fadd_rn, __fmul_rn,
 * __fdiv_rn, __fsqrt_rn: no contraction, no approximate division), the step scalars are computed
 * on the host with the same powf/sqrtf expressions, the block maxima are exact (fmaxf) whatever the
 * order, and the encoder is the reference's search; so p, codes, absmax and states agree bit for
 * bit, and the copy is bf16(p). A second run of the same steps must give the same bytes
 * (determinism).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/adamw8bit.h"
#include "gpu/cuda_check.h"
#include "ref/adamw8bit.h"
#include "ref/bf16.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

struct host_tensor {
    int64_t n;
    int has_copy, misalign;
    std::vector<float> p, g;
    struct adamw8bit_state st;
};

struct dev_tensor {
    struct dev_buf p, g, copy, q1, q2, a1, a2, m, v;
    int off; /* elements (or bytes for codes) the data is offset by */
};

static void run_optimizer(const std::vector<int64_t> &sizes, const struct adamw8bit_hparams &hp, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[128];
    snprintf(shape, sizeof shape, "%zu tensors, lr=%g b1=%g b2=%g wd=%g gnorm_scale=%g", sizes.size(), (double)hp.lr,
             (double)hp.beta1, (double)hp.beta2, (double)hp.weight_decay, (double)hp.gnorm_scale);
    const int T = (int)sizes.size();
    std::vector<host_tensor> ts(T);
    std::vector<dev_tensor> ds(T);
    std::vector<struct gpu_adamw8bit_param> params(T);
    for (int i = 0; i < T; i++) {
        host_tensor &t = ts[i];
        t.n = sizes[i], t.has_copy = i % 2 == 0, t.misalign = i == 10;
        t.p.resize(t.n), t.g.resize(t.n);
        rng_fill_normal(&r, t.p.data(), t.n, 0.0, 1.0);
        adamw8bit_init(&t.st, t.n, hp.min_8bit_size);
        dev_tensor &d = ds[i];
        d.off = t.misalign ? 1 : 0;
        const int64_t nb = adamw8bit_n_blocks(t.n);
        std::vector<float> p_img(t.n + d.off, 0.0f);
        memcpy(p_img.data() + d.off, t.p.data(), t.n * 4);
        std::vector<unsigned char> zeros((size_t)(t.n + d.off) * 4, 0);
        dev_buf_alloc(&d.p, "master", (t.n + d.off) * 4, POISON_NONE, p_img.data());
        dev_buf_alloc(&d.g, "grad", (t.n + d.off) * 4, POISON_NONE, zeros.data());
        dev_buf_alloc(&d.copy, "copy", (t.n + d.off) * 2, POISON_BF16, nullptr);
        const bool is8 = t.st.is_8bit;
        dev_buf_alloc(&d.q1, "state1", is8 ? t.n + d.off : 1, POISON_NONE, zeros.data());
        dev_buf_alloc(&d.q2, "state2", is8 ? t.n + d.off : 1, POISON_NONE, zeros.data());
        dev_buf_alloc(&d.a1, "absmax1", is8 ? nb * 4 : 4, POISON_NONE, zeros.data());
        dev_buf_alloc(&d.a2, "absmax2", is8 ? nb * 4 : 4, POISON_NONE, zeros.data());
        dev_buf_alloc(&d.m, "m", is8 ? 4 : (t.n + d.off) * 4, POISON_NONE, zeros.data());
        dev_buf_alloc(&d.v, "v", is8 ? 4 : (t.n + d.off) * 4, POISON_NONE, zeros.data());
        struct gpu_adamw8bit_param &q = params[i];
        memset(&q, 0, sizeof q);
        q.master = (float *)d.p.data + d.off;
        q.copy = t.has_copy ? (uint16_t *)d.copy.data + d.off : nullptr;
        q.grad = (const float *)d.g.data + d.off;
        q.n = t.n;
        if (is8) {
            q.state1 = (uint8_t *)d.q1.data + d.off, q.state2 = (uint8_t *)d.q2.data + d.off;
            q.absmax1 = (float *)d.a1.data, q.absmax2 = (float *)d.a2.data;
        } else {
            q.m = (float *)d.m.data + d.off, q.v = (float *)d.v.data + d.off;
        }
    }
    struct gpu_adamw8bit *opt = build_gpu_adamw8bit(params.data(), T, hp.min_8bit_size, ts[0].st.map1, ts[0].st.map2);
    struct gpu_adamw8bit_step_args h = {(double)hp.lr, (double)hp.beta1, (double)hp.beta2, (double)hp.eps,
                                        (double)hp.weight_decay, (double)hp.gnorm_scale, 0};
    std::vector<unsigned char> first_run_bytes;
    for (int step = 1; step <= 4; step++) {
        h.step = step;
        for (int i = 0; i < T; i++) {
            host_tensor &t = ts[i];
            rng_fill_normal(&r, t.g.data(), t.n, 0.0, i % 3 == 1 ? 1e-3 : 1.0);
            if (step == 1 && t.n >= 1024) /* one whole 256-block of zero gradients while its absmax is 0 */
                for (int64_t j = 512; j < 768; j++) t.g[j] = 0.0f;
            if (step == 2 && t.n > 3) t.g[t.n / 3] = NAN, t.g[t.n / 2] = INFINITY, t.g[t.n - 1] = -INFINITY;
            std::vector<float> g_img(t.n + ds[i].off, 0.0f);
            memcpy(g_img.data() + ds[i].off, t.g.data(), t.n * 4);
            dev_buf_reset(&ds[i].g, g_img.data());
            dev_buf_reset(&ds[i].copy, nullptr);
        }
        gpu_adamw8bit_step(opt, &h, g_stream);
        for (host_tensor &t : ts) adamw8bit_step(&t.st, t.p.data(), t.g.data(), &hp);

        for (int i = 0; i < T; i++) {
            host_tensor &t = ts[i];
            dev_tensor &d = ds[i];
            const int64_t n = t.n, nb = adamw8bit_n_blocks(n);
            char what[96];
            struct cmp_case cc = {"adamw8bit", what, shape, "f32", seed};
            std::vector<float> p(n + d.off);
            std::vector<uint16_t> c(n + d.off);
            dev_buf_download(&d.p, p.data(), 0);
            /* the offset element before a misaligned tensor is never written: check the rest */
            dev_buf_download(&d.copy, c.data(), t.has_copy && d.off == 0);
            snprintf(what, sizeof what, "tensor %d (n=%lld) step %d master", i, (long long)n, step);
            cmp_exact_f32(&cc, p.data() + d.off, t.p.data(), n);
            if (t.has_copy) {
                const int64_t left = count_poison_bf16(c.data() + d.off, n);
                EXPECT(left == 0, "adamw8bit %s tensor %d step %d: %lld copy elements never written", shape, i, step,
                       (long long)left);
                std::vector<float> cf(n), want(n);
                for (int64_t j = 0; j < n; j++) cf[j] = bf16_to_float(c[d.off + j]), want[j] = bf16_round(t.p[j]);
                snprintf(what, sizeof what, "tensor %d (n=%lld) step %d bf16 copy", i, (long long)n, step);
                cc.dtype = "bf16";
                cmp_exact_f32(&cc, cf.data(), want.data(), n);
                cc.dtype = "f32";
            }
            if (t.st.is_8bit) {
                std::vector<uint8_t> q1(n + d.off), q2(n + d.off);
                std::vector<float> a1(nb), a2(nb);
                dev_buf_download(&d.q1, q1.data(), 0);
                dev_buf_download(&d.q2, q2.data(), 0);
                dev_buf_download(&d.a1, a1.data(), 0);
                dev_buf_download(&d.a2, a2.data(), 0);
                snprintf(what, sizeof what, "tensor %d (n=%lld) step %d state1 (m codes)", i, (long long)n, step);
                cmp_exact_bytes(&cc, q1.data() + d.off, t.st.q1, n);
                snprintf(what, sizeof what, "tensor %d (n=%lld) step %d state2 (v codes)", i, (long long)n, step);
                cmp_exact_bytes(&cc, q2.data() + d.off, t.st.q2, n);
                snprintf(what, sizeof what, "tensor %d (n=%lld) step %d absmax1", i, (long long)n, step);
                cmp_exact_f32(&cc, a1.data(), t.st.absmax1, nb);
                snprintf(what, sizeof what, "tensor %d (n=%lld) step %d absmax2", i, (long long)n, step);
                cmp_exact_f32(&cc, a2.data(), t.st.absmax2, nb);
                /* keep the reference's state equal to the device's, so that each step is compared alone */
                memcpy(t.st.q1, q1.data() + d.off, n), memcpy(t.st.q2, q2.data() + d.off, n);
                memcpy(t.st.absmax1, a1.data(), nb * 4), memcpy(t.st.absmax2, a2.data(), nb * 4);
            } else {
                std::vector<float> m(n + d.off), v(n + d.off);
                dev_buf_download(&d.m, m.data(), 0);
                dev_buf_download(&d.v, v.data(), 0);
                snprintf(what, sizeof what, "tensor %d (n=%lld) step %d m (fp32 state)", i, (long long)n, step);
                cmp_exact_f32(&cc, m.data() + d.off, t.st.m, n);
                snprintf(what, sizeof what, "tensor %d (n=%lld) step %d v (fp32 state)", i, (long long)n, step);
                cmp_exact_f32(&cc, v.data() + d.off, t.st.v, n);
                memcpy(t.st.m, m.data() + d.off, n * 4), memcpy(t.st.v, v.data() + d.off, n * 4);
            }
            memcpy(t.p.data(), p.data() + d.off, n * 4);
            std::vector<float> gtmp(n + d.off);
            dev_buf_download(&d.g, gtmp.data(), 0); /* guards of the gradient */
        }
    }
    free_gpu_adamw8bit(opt);
    for (int i = 0; i < T; i++) {
        adamw8bit_free(&ts[i].st);
        dev_tensor &d = ds[i];
        for (struct dev_buf *b : {&d.p, &d.g, &d.copy, &d.q1, &d.q2, &d.a1, &d.a2, &d.m, &d.v}) dev_buf_free(b);
    }
}

/* Determinism: the same state and gradients stepped twice from the same start give the same bytes. */
static void run_determinism(int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const int64_t n = 3 * 2048 + 77;
    std::vector<float> p0(n), g(n);
    rng_fill_normal(&r, p0.data(), n, 0.0, 1.0);
    rng_fill_normal(&r, g.data(), n, 0.0, 1.0);
    struct adamw8bit_state st;
    adamw8bit_init(&st, n, ADAMW8BIT_MIN_8BIT_SIZE);
    const int64_t nb = adamw8bit_n_blocks(n);
    std::vector<unsigned char> zeros(n * 4, 0);
    struct dev_buf bp, bg, bc, q1, q2, a1, a2;
    dev_buf_alloc(&bp, "master", n * 4, POISON_NONE, p0.data());
    dev_buf_alloc(&bg, "grad", n * 4, POISON_NONE, g.data());
    dev_buf_alloc(&bc, "copy", n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&q1, "state1", n, POISON_NONE, zeros.data());
    dev_buf_alloc(&q2, "state2", n, POISON_NONE, zeros.data());
    dev_buf_alloc(&a1, "absmax1", nb * 4, POISON_NONE, zeros.data());
    dev_buf_alloc(&a2, "absmax2", nb * 4, POISON_NONE, zeros.data());
    struct gpu_adamw8bit_param q;
    memset(&q, 0, sizeof q);
    q.master = (float *)bp.data, q.copy = (uint16_t *)bc.data, q.grad = (const float *)bg.data, q.n = n;
    q.state1 = (uint8_t *)q1.data, q.state2 = (uint8_t *)q2.data, q.absmax1 = (float *)a1.data, q.absmax2 = (float *)a2.data;
    struct gpu_adamw8bit *opt = build_gpu_adamw8bit(&q, 1, ADAMW8BIT_MIN_8BIT_SIZE, st.map1, st.map2);
    struct gpu_adamw8bit_step_args h = {1e-3, 0.9, 0.999, 1e-8, 1e-2, 1.0, 0};
    std::vector<std::vector<unsigned char>> runs;
    for (int rep = 0; rep < 2; rep++) {
        dev_buf_reset(&bp, p0.data());
        for (struct dev_buf *b : {&q1, &q2, &a1, &a2}) dev_buf_reset(b, zeros.data());
        for (int step = 1; step <= 3; step++) {
            h.step = step;
            gpu_adamw8bit_step(opt, &h, g_stream);
        }
        std::vector<unsigned char> img;
        for (struct dev_buf *b : {&bp, &bc, &q1, &q2, &a1, &a2}) {
            std::vector<unsigned char> tmp(b->nbytes);
            dev_buf_download(b, tmp.data(), b == &bc);
            img.insert(img.end(), tmp.begin(), tmp.end());
        }
        runs.push_back(img);
    }
    struct cmp_case cc = {"adamw8bit", "determinism (3 steps twice)", "n=6221", "bytes", seed};
    cmp_exact_bytes(&cc, runs[1].data(), runs[0].data(), runs[0].size());
    free_gpu_adamw8bit(opt);
    adamw8bit_free(&st);
    for (struct dev_buf *b : {&bp, &bg, &bc, &q1, &q2, &a1, &a2}) dev_buf_free(b);
}

struct bench_ctx {
    struct gpu_adamw8bit *opt;
    struct gpu_adamw8bit_step_args h;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_adamw8bit_step(b->opt, &b->h, s);
}

static void bench(double ceiling) {
    struct set {
        const char *name;
        int count;
        int64_t n;
    } sets[] = {{"full-ft 64 x 4M", 64, (int64_t)4 << 20}, {"lora r16 1B: 112 x 16x4096", 112, 16 * 4096}};
    struct adamw8bit_state st; /* for the maps */
    adamw8bit_init(&st, 1, ADAMW8BIT_MIN_8BIT_SIZE);
    for (const set &sv : sets) {
        std::vector<struct gpu_adamw8bit_param> ps(sv.count);
        std::vector<void *> allocs;
        const int64_t nb = (sv.n + 255) / 256;
        for (int i = 0; i < sv.count; i++) {
            unsigned char *buf;
            const size_t bytes = (size_t)sv.n * (4 + 4 + 2 + 1 + 1) + (size_t)nb * 8 + 256;
            CUDA_CHECK(cudaMalloc(&buf, bytes));
            CUDA_CHECK(cudaMemset(buf, 0, bytes));
            allocs.push_back(buf);
            struct gpu_adamw8bit_param &q = ps[i];
            memset(&q, 0, sizeof q);
            q.master = (float *)buf, q.grad = (const float *)(buf + sv.n * 4), q.copy = (uint16_t *)(buf + sv.n * 8);
            q.state1 = buf + sv.n * 10, q.state2 = buf + sv.n * 11;
            q.absmax1 = (float *)(buf + sv.n * 12), q.absmax2 = (float *)(buf + sv.n * 12 + nb * 4);
            q.n = sv.n;
        }
        bench_ctx b;
        b.opt = build_gpu_adamw8bit(ps.data(), sv.count, ADAMW8BIT_MIN_8BIT_SIZE, st.map1, st.map2);
        b.h = {1e-4, 0.9, 0.999, 1e-8, 0.01, 1.0, 1};
        /* bytes: p read + write (8), g (4), two codes read + write (4), bf16 copy (2) */
        const double total = (double)sv.count * sv.n;
        bench_json("adamw8bit_step", sv.name, 18.0 * total, 0, bench_time(bench_call, &b, g_stream, 3, 15, 3), ceiling);
        free_gpu_adamw8bit(b.opt);
        for (void *p : allocs) CUDA_CHECK(cudaFree(p));
    }
    adamw8bit_free(&st);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261142);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const std::vector<int64_t> sizes = {1,    7,    255,  4095, 4096,     4097,      4351,     8191,
                                        8192, 2049, 65539, 16 * 2048, 2048 * 16, 8192 * 16};
    struct adamw8bit_hparams d = adamw8bit_defaults();
    d.variant = ADAMW8BIT_BNB_CUDA;
    run_optimizer(sizes, d, 0);
    struct adamw8bit_hparams o = d;
    o.lr = 3e-4, o.beta1 = 0.8, o.beta2 = 0.95, o.eps = 1e-6, o.weight_decay = 0.0, o.gnorm_scale = 0.5;
    run_optimizer(sizes, o, 1);
    run_determinism(2);
    const int rc = test_finish("adamw8bit_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
