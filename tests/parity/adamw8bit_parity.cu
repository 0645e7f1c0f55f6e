/* adamw8bit_parity.cu — gpu/adamw8bit against ref/adamw8bit (ADAMW8BIT_BNB_CUDA), bit for bit.
 *
 *   bazel test --config=gpu //tests/parity:adamw8bit_parity
 *   adamw8bit_parity [--seed=N] [--bench]
 *
 * Tensors of 1, 7 and 4095 elements (the 32-bit path below min_8bit_size = 4096) and 4096, 4097
 * (a 1-element last block: the padding lanes enter the maxima), 2560, 100000 and a LoRA factor of
 * Llama-3.2-1B (16 × 2048) on the 8-bit path; four steps each with fresh gradients (normals of
 * scale 1 or 0.01 from the printed seed), weight decay 0.01 and 0, gnorm_scale 1 and 0.5; a NaN
 * and an Inf planted in one step's gradient, −Inf and NaN (the last element's among them) in the next
 * (the 8-bit path zeroes those moments and leaves p). The kernel's scalar-load path (a gradient
 * one element into its buffer: 4097, 5001 = 19·256 + 137, 100000) and its grid stride with the
 * prefetch of the next block (2^21 + 77: more blocks than warps, a 77-element last block).
 * After every step: p, the codes q1 and q2, absmax1 and absmax2 (8-bit) or m and v (32-bit), and
 * the bf16 copy (= bf16(p), poisoned before each step) are compared; guards on every buffer.
 *
 * The step's written-out square root and reciprocal (gpu/adamw8bit.cu sqrt_fast, rcp_fast) against
 * __fsqrt_rn / __frcp_rn on every input of their ranges (gpu_adamw8bit_fast_math_check), on the
 * device at hand: they are sm_90's own sequences, so a new device is checked, not assumed.
 *
 * Split masters (ref/master_pair.h: t.p NULL, the master is join(copy, t.lo)) on both paths and
 * both load paths, non-finite gradients included: the reference's p kept as master_pair_round of
 * itself after every step, the GPU's read back as join(copy, lo), bit for bit.
 *
 * bf16 weights (master_bf16: t.p and t.lo NULL, the copy is the weight) on both paths, both load
 * paths, the grid stride, non-finite gradients (the copy stays), bf16 gradients and the device
 * scalars: the reference's p bf16 values, rounded to bf16 (bf16_from_float) after every step, the
 * GPU's read back as the widened copy, bit for bit; the state as for fp32 masters.
 *
 * bf16-sr weights (master_bf16 = 2: the same, each result rounded stochastically) on both paths,
 * both load paths, short last blocks, the grid stride, non-finite gradients, bf16 gradients and the
 * device scalars: the reference's p rounded after step t by bf16_sr_round_array, keyed (seed
 * 0x1234567890ABCDEF, t, the hash of a name of the case's own), instead of bf16_from_float — bit
 * for bit over four steps, so that the element, the step and the tensor all select the bits.
 *
 * bf16 gradients (grad_bf16): the cases above on bf16-rounded gradients (both paths, both load
 * paths, non-finite gradients, the grid stride, split masters), one device tensor reading the
 * widened fp32 values (against the reference, as above) and a second the bf16 bits: p, the copy
 * (or lo), q1, q2, absmax1, absmax2 or m, v of the second bit for bit the first's after every step.
 *
 * The device scalars (gpu_adamw8bit_args.norm_coef, .guard), on both paths: a step given norm_coef
 * from gpu_adamw_norm_and_coef (a norm-only gpu/adamw context over the same gradient) and a wrong
 * gnorm_scale (123) equals, bit for bit, the step given no norm_coef and gnorm_scale = the
 * coefficient read back, which equals the reference; a finite guard (3.5) changes nothing; a
 * norm_coef whose norm is NaN, a NaN guard and a +Inf guard each leave p, the copy and the state
 * as they were, bit for bit.
 *
 * Tolerance: (a) exact. The kernel performs ref/adamw8bit.c's fp32 operations in its order on the
 * same values, forms the scalars with the same fp32 host expressions (same libm powf/sqrtf), takes
 * the block maxima with fmaxf (order-free) and encodes with the same binary search, so every bit
 * of the state and of p must agree.
 *
 * The encode tables: every case runs twice, its 8-bit tensors first building the tables in each CTA
 * (tables NULL), then reading a copy prebuilt by gpu_adamw8bit_tables_build into a guarded buffer
 * (the trainers' form) — bit for bit the reference both times. bf16 weights with rounding edges
 * (subnormals, −0, NaN, ±3.3e38) on the bf16-weight kernel and the scalar-load one.
 *
 * --bench: n = 16M and 256M, each with a constant gradient (every lane of a warp on the same code)
 * and with normal gradients (codes spread over the maps, as in training); 18 bytes per element;
 * the normal gradients as bf16 (grad_bf16), 16 bytes per element; bf16 weights with bf16 gradients
 * (the bf16 trainers' full fine-tuning), 10 bytes per element, tables built by each CTA and
 * prebuilt; and one Llama-3.2-1B layer's seven tensors in sequence, one launch each.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cuda_bf16.h>

#include "gpu/adamw.h"
#include "gpu/adamw8bit.h"
#include "gpu/cuda_check.h"
#include "ref/adamw8bit.h"
#include "ref/bf16.h"
#include "ref/master_pair.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

/* One tensor on the device: p and the bf16 copy, the state of the path s selects
 * (zero, the maps from s); the gradient buffer is the caller's (shared). */
/* 1: the 8-bit tensors read encode tables prebuilt by gpu_adamw8bit_tables_build (the trainers'
 * form); 0: each CTA builds them from the maps. Every case runs in both forms (main). */
static int g_prebuilt;

struct dev_tensor8 {
    struct dev_buf p, copy, lo, q1, q2, a1, a2, map1, map2, m, v, tables;
    struct gpu_adamw8bit_tensor t;
    enum master_storage ms;
};

/* bf16-sr weights: the run's seed (both 32-bit halves non-zero: both key words count), and case
 * id's tensor stream, the hash of a name of its own. */
static const uint64_t kSrSeed = 0x1234567890ABCDEFull;

static uint32_t sr_tensor_of(int id) {
    char name[64];
    snprintf(name, sizeof name, "model.layers.%d.self_attn.o_proj.weight", id);
    return bf16_sr_tensor_hash(name);
}

/* The masters as form ms holds them (ref/master_pair.h master_storage_round_array; bf16-sr keyed
 * (kSrSeed, step, tensor)): at the start (step 0) and after step ≥ 1. */
static void master_round_array(float *x, int64_t n, enum master_storage ms, int64_t step = 0, uint32_t tensor = 0) {
    master_storage_round_array(x, n, ms, kSrSeed, step, tensor);
}

static const char *master_label(enum master_storage ms) {
    static const char *const label[] = {"", " split masters", " bf16 weights", " bf16-sr weights"};
    return label[ms]; /* index = enum value */
}

/* ms = MASTER_SPLIT: the master as the pair (copy, lo) of ref/master_pair.h, no p (p must be
 * pair-exact); MASTER_BF16: the copy alone (master_bf16), no p, no lo (p must be bf16 values);
 * MASTER_BF16_SR: as MASTER_BF16, master_bf16 = 2 with the stream (kSrSeed, sr_tensor). */
static void dev_tensor8_alloc(dev_tensor8 *d, const struct adamw8bit_state *s, const float *p, const float *grad,
                              enum master_storage ms = MASTER_FP32, uint32_t sr_tensor = 0) {
    const int64_t n = s->n, nb = adamw8bit_n_blocks(n);
    const std::vector<unsigned char> zeros((size_t)n * 4, 0);
    memset(&d->t, 0, sizeof d->t);
    d->ms = ms;
    const int in_copy = ms != MASTER_FP32;
    std::vector<uint16_t> hi((size_t)n), lo((size_t)n);
    master_pair_split_array(hi.data(), lo.data(), p, n);
    dev_buf_alloc(&d->p, "p", (size_t)n * 4, POISON_NONE, p);
    dev_buf_alloc(&d->copy, "copy", (size_t)n * 2, in_copy ? POISON_NONE : POISON_BF16, in_copy ? hi.data() : nullptr);
    dev_buf_alloc(&d->lo, "lo", (size_t)n * 2, POISON_NONE, lo.data());
    d->t.p = in_copy ? nullptr : (float *)d->p.data, d->t.copy = (uint16_t *)d->copy.data, d->t.grad = grad;
    d->t.n = n;
    d->t.lo = ms == MASTER_SPLIT ? (uint16_t *)d->lo.data : nullptr;
    d->t.master_bf16 = gpu_adamw_master_bf16(ms);
    d->t.sr_seed = kSrSeed, d->t.sr_tensor = sr_tensor;
    d->t.is_8bit = s->is_8bit;
    if (s->is_8bit) {
        dev_buf_alloc(&d->q1, "q1", (size_t)n, POISON_NONE, zeros.data());
        dev_buf_alloc(&d->q2, "q2", (size_t)n, POISON_NONE, zeros.data());
        dev_buf_alloc(&d->a1, "absmax1", (size_t)nb * 4, POISON_NONE, zeros.data());
        dev_buf_alloc(&d->a2, "absmax2", (size_t)nb * 4, POISON_NONE, zeros.data());
        dev_buf_alloc(&d->map1, "map1", 256 * 4, POISON_NONE, s->map1);
        dev_buf_alloc(&d->map2, "map2", 256 * 4, POISON_NONE, s->map2);
        d->t.q1 = (uint8_t *)d->q1.data, d->t.q2 = (uint8_t *)d->q2.data;
        d->t.absmax1 = (float *)d->a1.data, d->t.absmax2 = (float *)d->a2.data;
        d->t.map1 = (const float *)d->map1.data, d->t.map2 = (const float *)d->map2.data;
        if (g_prebuilt) { /* built into a guarded buffer: a write past the tables fails the guard */
            dev_buf_alloc(&d->tables, "tables", gpu_adamw8bit_tables_bytes(), POISON_NONE, nullptr);
            EXPECT(((uintptr_t)d->tables.data & 15u) == 0, "adamw8bit: tables buffer %p not 16-byte aligned",
                   d->tables.data);
            gpu_adamw8bit_tables_build(d->tables.data, d->t.map1, d->t.map2, g_stream);
            d->t.tables = d->tables.data;
        }
    } else {
        dev_buf_alloc(&d->m, "m", (size_t)n * 4, POISON_NONE, zeros.data());
        dev_buf_alloc(&d->v, "v", (size_t)n * 4, POISON_NONE, zeros.data());
        d->t.m = (float *)d->m.data, d->t.v = (float *)d->v.data;
    }
}

static void dev_tensor8_free(dev_tensor8 *d) {
    for (struct dev_buf *b : {&d->p, &d->copy, &d->lo}) dev_buf_free(b);
    if (d->t.is_8bit)
        for (struct dev_buf *b : {&d->q1, &d->q2, &d->a1, &d->a2, &d->map1, &d->map2}) dev_buf_free(b);
    else
        for (struct dev_buf *b : {&d->m, &d->v}) dev_buf_free(b);
    if (d->t.tables) {
        std::vector<unsigned char> h(d->tables.nbytes);
        dev_buf_download(&d->tables, h.data(), 0); /* the guards */
        dev_buf_free(&d->tables);
    }
}

/* Everything a step writes: p, the bf16 copy, and q1, q2, absmax1, absmax2 (8-bit) or m, v. */
struct snap8 {
    std::vector<float> p, a1, a2, m, v;
    std::vector<uint16_t> copy;
    std::vector<uint8_t> q1, q2;
};

/* After a completed step (the copy then is written entirely). */
static snap8 snapshot(dev_tensor8 *d) {
    const int64_t n = d->t.n, nb = adamw8bit_n_blocks(n);
    snap8 s;
    s.p.resize((size_t)n), s.copy.resize((size_t)n);
    dev_buf_download(&d->copy, s.copy.data(), d->ms == MASTER_FP32);
    if (d->ms == MASTER_SPLIT) { /* the master the pair holds */
        std::vector<uint16_t> lo((size_t)n);
        dev_buf_download(&d->lo, lo.data(), 0);
        master_pair_join_array(s.p.data(), s.copy.data(), lo.data(), n);
    } else if (d->ms == MASTER_BF16 || d->ms == MASTER_BF16_SR) { /* the widened weight */
        master_pair_join_array(s.p.data(), s.copy.data(), nullptr, n);
    } else {
        dev_buf_download(&d->p, s.p.data(), 0);
    }
    if (d->t.is_8bit) {
        s.q1.resize((size_t)n), s.q2.resize((size_t)n), s.a1.resize((size_t)nb), s.a2.resize((size_t)nb);
        dev_buf_download(&d->q1, s.q1.data(), 0);
        dev_buf_download(&d->q2, s.q2.data(), 0);
        dev_buf_download(&d->a1, s.a1.data(), 0);
        dev_buf_download(&d->a2, s.a2.data(), 0);
    } else {
        s.m.resize((size_t)n), s.v.resize((size_t)n);
        dev_buf_download(&d->m, s.m.data(), 0);
        dev_buf_download(&d->v, s.v.data(), 0);
    }
    return s;
}

/* The reference's p and state as a snap8 (copy = bf16(p)). */
static snap8 snapshot_ref(const struct adamw8bit_state *st, const std::vector<float> &p) {
    const int64_t n = st->n, nb = adamw8bit_n_blocks(n);
    snap8 s;
    s.p = p, s.copy = bits_of(p);
    if (st->is_8bit) {
        s.q1.assign(st->q1, st->q1 + n), s.q2.assign(st->q2, st->q2 + n);
        s.a1.assign(st->absmax1, st->absmax1 + nb), s.a2.assign(st->absmax2, st->absmax2 + nb);
    } else {
        s.m.assign(st->m, st->m + n), s.v.assign(st->v, st->v + n);
    }
    return s;
}

/* got against want, bit for bit, each array one check named "<label>: <array>". */
static void cmp_snap(const char *shape, uint64_t seed, const char *label, const snap8 &got, const snap8 &want) {
    char what[160];
    struct cmp_case cc = {"adamw8bit", what, shape, "f32", seed};
    const int64_t n = (int64_t)got.p.size();
    snprintf(what, sizeof what, "%s: p", label);
    cmp_exact_f32(&cc, got.p.data(), want.p.data(), n);
    snprintf(what, sizeof what, "%s: bf16 copy", label);
    cc.dtype = "bf16";
    cmp_exact_bytes(&cc, got.copy.data(), want.copy.data(), (size_t)n * 2);
    cc.dtype = "f32";
    if (!got.q1.empty()) {
        const int64_t nb = (int64_t)got.a1.size();
        snprintf(what, sizeof what, "%s: absmax1", label);
        cmp_exact_f32(&cc, got.a1.data(), want.a1.data(), nb);
        snprintf(what, sizeof what, "%s: absmax2", label);
        cmp_exact_f32(&cc, got.a2.data(), want.a2.data(), nb);
        cc.dtype = "u8";
        snprintf(what, sizeof what, "%s: q1", label);
        cmp_exact_bytes(&cc, got.q1.data(), want.q1.data(), (size_t)n);
        snprintf(what, sizeof what, "%s: q2", label);
        cmp_exact_bytes(&cc, got.q2.data(), want.q2.data(), (size_t)n);
    } else {
        snprintf(what, sizeof what, "%s: m", label);
        cmp_exact_f32(&cc, got.m.data(), want.m.data(), n);
        snprintf(what, sizeof what, "%s: v", label);
        cmp_exact_f32(&cc, got.v.data(), want.v.data(), n);
    }
}

enum grad_align { GRAD_ALIGNED = 0, GRAD_MISALIGNED = 1 };

/* plant: bit 0 non-finite gradients at steps 2 and 3, bit 1 weights with rounding edges (bf16
 * weights only: subnormals, −0, NaN, ±3.3e38 every 4096 elements).
 * ga = GRAD_MISALIGNED: the gradient starts one element into its buffer (4-byte aligned, not 16),
 * which sends every block of the 8-bit kernel down its scalar-load path.
 * bf16: the gradients rounded to bf16 on the host (the reference and the fp32 tensor d see the
 * widened values), and a second device tensor d16 with the same start reads their bits
 * (grad_bf16, one element in too when misaligned: 2-byte aligned): bitwise d after every step.
 * ms: the masters' form (dev_tensor8_alloc), the reference's p held as that form holds it
 * (master_round_array) from the start and after every step; bf16-sr: d and d16 on the stream
 * sr_tensor_of(id). */
static void run_tensor(int64_t n, double wd, double gnorm_scale, int plant, int id, enum grad_align ga = GRAD_ALIGNED,
                       enum master_storage ms = MASTER_FP32, int bf16 = 0) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[128];
    snprintf(shape, sizeof shape, "n=%lld wd=%g gnorm_scale=%g%s%s%s%s%s%s", (long long)n, wd, gnorm_scale,
             plant & 1 ? " nonfinite grads" : "", plant & 2 ? " special weights" : "",
             ga == GRAD_MISALIGNED ? " grad misaligned" : "",
             master_label(ms), bf16 ? " bf16 grads" : "", g_prebuilt ? " prebuilt tables" : "");
    struct adamw8bit_hparams h = adamw8bit_defaults();
    h.hp.weight_decay = wd, h.gnorm_scale = gnorm_scale, h.variant = ADAMW8BIT_BNB_CUDA;
    struct adamw8bit_state s;
    adamw8bit_init(&s, n, h.min_8bit_size);
    std::vector<float> p((size_t)n), g((size_t)n);
    rng_fill_normal(&r, p.data(), n, 0.0, 1.0);
    if (plant & 2) /* weights whose rounding has edges: subnormal, signed zero, NaN, near the largest */
        for (int64_t b = 0; b + 8 <= n; b += 4096) {
            p[b + 1] = 1e-39f, p[b + 2] = -0.0f, p[b + 3] = NAN, p[b + 4] = 3.3e38f, p[b + 5] = -3.3e38f;
            p[b + 6] = 9.2e-41f, p[b + 7] = -1.5e-39f;
        }
    master_round_array(p.data(), n, ms);

    const int64_t lead = ga == GRAD_MISALIGNED ? 1 : 0;
    std::vector<float> gbuf((size_t)(n + lead), 0.25f);
    struct dev_buf bg, bg16;
    dev_buf_alloc(&bg, "grad", (size_t)(n + lead) * 4, POISON_NONE, nullptr);
    dev_buf_alloc(&bg16, "grad_bf16", (size_t)(n + lead) * 2, POISON_NONE, nullptr);
    dev_tensor8 d, d16;
    dev_tensor8_alloc(&d, &s, p.data(), (const float *)bg.data + lead, ms, sr_tensor_of(id));
    if (bf16) {
        dev_tensor8_alloc(&d16, &s, p.data(), nullptr, ms, sr_tensor_of(id));
        d16.t.grad_bf16 = (const uint16_t *)bg16.data + lead;
    }
    for (int step = 1; step <= 4; step++) {
        rng_fill_normal(&r, g.data(), n, 0.0, id % 2 ? 0.01 : 1.0);
        if ((plant & 1) && step == 2 && n >= 300) g[5] = NAN, g[290] = INFINITY;
        if ((plant & 1) && step == 3 && n >= 300) g[n - 1] = -INFINITY, g[n / 2] = NAN; /* the last (short) block too */
        if (bf16) bf16_round_array(g.data(), g.data(), n);
        std::copy(g.begin(), g.end(), gbuf.begin() + lead);
        dev_buf_reset(&bg, gbuf.data());
        if (ms == MASTER_FP32) dev_buf_reset(&d.copy, nullptr); /* poisoned: every element must be written */
        const struct gpu_adamw8bit_args a = {h.hp, h.gnorm_scale, step};
        gpu_adamw8bit_step(&d.t, &a, g_stream);
        if (bf16) {
            dev_buf_reset(&bg16, bits_of(gbuf).data());
            if (ms == MASTER_FP32) dev_buf_reset(&d16.copy, nullptr);
            gpu_adamw8bit_step(&d16.t, &a, g_stream);
        }
        adamw8bit_step(&s, p.data(), g.data(), &h);
        master_round_array(p.data(), n, ms, step, sr_tensor_of(id));
        std::vector<float> gg((size_t)(n + lead));
        dev_buf_download(&bg, gg.data(), 0); /* the gradient's guard regions */
        char label[48];
        snprintf(label, sizeof label, "step %d", step);
        const snap8 got = snapshot(&d);
        cmp_snap(shape, seed, label, got, snapshot_ref(&s, p));
        if (bf16) {
            snprintf(label, sizeof label, "step %d, grad_bf16 = grad (widened)", step);
            cmp_snap(shape, seed, label, snapshot(&d16), got);
        }
    }
    dev_tensor8_free(&d);
    if (bf16) dev_tensor8_free(&d16);
    dev_buf_free(&bg);
    dev_buf_free(&bg16);
    adamw8bit_free(&s);
}

/* The device scalars. Two device copies A and B of one tensor start equal and read one gradient
 * buffer; a norm-only gpu/adamw context over that buffer gives {norm, coef} for max_norm
 * (gpu_adamw_norm_and_coef). Steps 1-3: A takes the step with norm_coef and gnorm_scale 123 (wrong
 * on purpose: the coefficient must replace it), at step 2 with a finite guard (3.5) as well, at
 * step 3 with the guard only and gnorm_scale = the coefficient read back; B with neither scalar and
 * gnorm_scale = that coefficient. A = B and B = the reference, bit for bit. Step 4: A is refused
 * the step by norm_coef {NaN, 1}, by a NaN guard and by a +Inf guard (each with the other scalar
 * valid or absent): p, the copy and the state stay bit for bit; then A and B take step 4 as step 2.
 * ms: A's and B's masters' form, the reference's p held as that form holds it (run_tensor; bf16-sr:
 * both on the stream sr_tensor_of(id)). */
static void run_scalars(int64_t n, double max_norm, int id, enum master_storage ms = MASTER_FP32) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[128];
    snprintf(shape, sizeof shape, "n=%lld wd=0.01 device norm_coef (max_norm=%g) and guard%s%s", (long long)n,
             max_norm, master_label(ms), g_prebuilt ? " prebuilt tables" : "");
    struct adamw8bit_hparams h = adamw8bit_defaults();
    h.hp.weight_decay = 0.01, h.variant = ADAMW8BIT_BNB_CUDA;
    struct adamw8bit_state s;
    adamw8bit_init(&s, n, h.min_8bit_size);
    std::vector<float> p((size_t)n), g((size_t)n);
    rng_fill_normal(&r, p.data(), n, 0.0, 1.0);
    master_round_array(p.data(), n, ms);

    struct dev_buf bg, bbad, bfin, bnan, binf;
    dev_buf_alloc(&bg, "grad", (size_t)n * 4, POISON_NONE, nullptr);
    const float bad_nc[2] = {NAN, 1.0f};
    const double fin = 3.5, nan_v = NAN, inf_v = INFINITY;
    dev_buf_alloc(&bbad, "norm_coef {NaN, 1}", sizeof bad_nc, POISON_NONE, bad_nc);
    dev_buf_alloc(&bfin, "guard 3.5", sizeof(double), POISON_NONE, &fin);
    dev_buf_alloc(&bnan, "guard NaN", sizeof(double), POISON_NONE, &nan_v);
    dev_buf_alloc(&binf, "guard +Inf", sizeof(double), POISON_NONE, &inf_v);
    dev_tensor8 A, B;
    dev_tensor8_alloc(&A, &s, p.data(), (const float *)bg.data, ms, sr_tensor_of(id));
    dev_tensor8_alloc(&B, &s, p.data(), (const float *)bg.data, ms, sr_tensor_of(id));
    const struct gpu_adamw_param np = {nullptr, nullptr, nullptr, nullptr, (const float *)bg.data, nullptr, n, 0};
    struct gpu_adamw *nrm = build_gpu_adamw(&np, 1);

    for (int step = 1; step <= 4; step++) {
        rng_fill_normal(&r, g.data(), n, 0.0, 1.0);
        dev_buf_reset(&bg, g.data());
        const float *nc = gpu_adamw_norm_and_coef(nrm, max_norm, g_stream);
        float hnc[2];
        CUDA_CHECK(cudaMemcpyAsync(hnc, nc, sizeof hnc, cudaMemcpyDeviceToHost, g_stream));
        CUDA_CHECK(cudaStreamSynchronize(g_stream));
        EXPECT(isfinite(hnc[0]) && hnc[1] > 0.0f && hnc[1] <= 1.0f, "adamw8bit %s: step %d norm %g coef %g", shape,
               step, (double)hnc[0], (double)hnc[1]);
        struct gpu_adamw8bit_args a = {h.hp, 123.0, step};
        struct gpu_adamw8bit_args b = {h.hp, (double)hnc[1], step};
        char label[96];
        if (step == 4) {
            const snap8 before = snapshot(&A);
            struct refused {
                const char *name;
                const float *norm_coef;
                const double *guard;
            } refusals[] = {{"norm_coef {NaN, 1}", (const float *)bbad.data, nullptr},
                            {"norm_coef {NaN, 1}, guard 3.5", (const float *)bbad.data, (const double *)bfin.data},
                            {"guard NaN", nullptr, (const double *)bnan.data},
                            {"guard NaN, norm_coef valid", nc, (const double *)bnan.data},
                            {"guard +Inf", nullptr, (const double *)binf.data}};
            for (const refused &x : refusals) {
                struct gpu_adamw8bit_args ra = {h.hp, 1.0, step};
                ra.norm_coef = x.norm_coef, ra.guard = x.guard;
                gpu_adamw8bit_step(&A.t, &ra, g_stream);
                snprintf(label, sizeof label, "unchanged after a step refused by %s", x.name);
                cmp_snap(shape, seed, label, snapshot(&A), before);
            }
        }
        a.norm_coef = step == 3 ? nullptr : nc;
        if (step == 3) a.gnorm_scale = (double)hnc[1];
        a.guard = step >= 2 ? (const double *)bfin.data : nullptr;
        gpu_adamw8bit_step(&A.t, &a, g_stream);
        gpu_adamw8bit_step(&B.t, &b, g_stream);
        h.gnorm_scale = (double)hnc[1];
        adamw8bit_step(&s, p.data(), g.data(), &h);
        master_round_array(p.data(), n, ms, step, sr_tensor_of(id));
        const snap8 sa = snapshot(&A), sb = snapshot(&B);
        snprintf(label, sizeof label, "step %d, %s%s = gnorm_scale %.9g", step,
                 step == 3 ? "gnorm_scale" : "norm_coef, gnorm_scale 123", step >= 2 ? ", guard 3.5" : "",
                 (double)hnc[1]);
        cmp_snap(shape, seed, label, sa, sb);
        snprintf(label, sizeof label, "step %d, gnorm_scale %.9g = reference", step, (double)hnc[1]);
        cmp_snap(shape, seed, label, sb, snapshot_ref(&s, p));
    }
    free_gpu_adamw(nrm);
    dev_tensor8_free(&A);
    dev_tensor8_free(&B);
    for (struct dev_buf *b : {&bg, &bbad, &bfin, &bnan, &binf}) dev_buf_free(b);
    adamw8bit_free(&s);
}

struct bench_ctx {
    struct gpu_adamw8bit_tensor t[7];
    int n_t;
    struct gpu_adamw8bit_args a;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    for (int i = 0; i < b->n_t; i++) gpu_adamw8bit_step(&b->t[i], &b->a, s);
}

/* Bench gradients: ~N(0, 0.01²) by Box-Muller from a hash of (seed, i), so that the codes of a
 * warp spread over the maps as in training (a constant gradient gives every lane the same code). */
__device__ static uint32_t bench_hash(uint64_t x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
    return (uint32_t)x;
}

__global__ static void bench_fill_normal(float *g, int64_t n, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float u1 = ((float)(bench_hash(seed ^ (2 * (uint64_t)i)) >> 8) + 0.5f) * (1.0f / 16777216.0f);
        const float u2 = (float)(bench_hash(seed ^ (2 * (uint64_t)i + 1)) >> 8) * (1.0f / 16777216.0f);
        g[i] = 0.01f * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    }
}

/* out = the bf16 bits of g (RNE), the bench's bf16 gradients. */
__global__ static void bench_round_bf16(uint16_t *out, const float *g, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(g[i]));
}

static void bench(double ceiling) {
    const int64_t sizes[] = {(int64_t)16 << 20, (int64_t)256 << 20};
    for (int64_t n : sizes) {
        struct adamw8bit_state s;
        adamw8bit_init(&s, 256, 1); /* only for the maps */
        bench_ctx b;
        memset(&b, 0, sizeof b);
        b.n_t = 1;
        const int64_t nb = adamw8bit_n_blocks(n);
        float *p, *g, *a1, *a2, *m1, *m2;
        uint8_t *q1, *q2;
        uint16_t *copy, *g16;
        CUDA_CHECK(cudaMalloc(&p, (size_t)n * 4));
        CUDA_CHECK(cudaMalloc(&g16, (size_t)n * 2));
        CUDA_CHECK(cudaMalloc(&g, (size_t)n * 4));
        CUDA_CHECK(cudaMalloc(&copy, (size_t)n * 2));
        CUDA_CHECK(cudaMalloc(&q1, (size_t)n));
        CUDA_CHECK(cudaMalloc(&q2, (size_t)n));
        CUDA_CHECK(cudaMalloc(&a1, (size_t)nb * 4));
        CUDA_CHECK(cudaMalloc(&a2, (size_t)nb * 4));
        CUDA_CHECK(cudaMalloc(&m1, 1024));
        CUDA_CHECK(cudaMalloc(&m2, 1024));
        CUDA_CHECK(cudaMemcpy(m1, s.map1, 1024, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(m2, s.map2, 1024, cudaMemcpyHostToDevice));
        void *tab;
        CUDA_CHECK(cudaMalloc(&tab, gpu_adamw8bit_tables_bytes()));
        gpu_adamw8bit_tables_build(tab, m1, m2, g_stream);
        b.t[0] = {p, copy, g, nullptr, n, 1, q1, q2, a1, a2, m1, m2, nullptr, nullptr};
        const struct gpu_adamw8bit_tensor whole = b.t[0]; /* each round starts from it */
        b.a = {1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0, 1};
        for (int data = 0; data < 2; data++) {
            CUDA_CHECK(cudaMemset(p, 0, (size_t)n * 4));
            CUDA_CHECK(cudaMemset(q1, 0, (size_t)n));
            CUDA_CHECK(cudaMemset(q2, 0, (size_t)n));
            CUDA_CHECK(cudaMemset(a1, 0, (size_t)nb * 4));
            CUDA_CHECK(cudaMemset(a2, 0, (size_t)nb * 4));
            if (data == 0) CUDA_CHECK(cudaMemset(g, 0x3C, (size_t)n * 4)); /* fp32 0x3C3C3C3C ≈ 0.0115 */
            else bench_fill_normal<<<1024, 256, 0, g_stream>>>(g, n, g_seed);
            CUDA_CHECK(cudaStreamSynchronize(g_stream));
            char shape[160];
            snprintf(shape, sizeof shape, "n=%lld 8-bit, %s", (long long)n,
                     data == 0 ? "constant grad" : "normal grads (codes spread)");
            /* p read+write 8, g 4, q1 and q2 read+write 4, bf16 copy 2 (absmax negligible) */
            bench_json("adamw8bit_step", shape, 18.0 * n, 0, bench_time(bench_call, &b, g_stream, 3, 15, 3), ceiling);
            if (data == 0) continue;
            /* the same gradients as bf16 (grad_bf16): 16 bytes per element */
            bench_round_bf16<<<1024, 256, 0, g_stream>>>(g16, g, n);
            CUDA_CHECK(cudaStreamSynchronize(g_stream));
            b.t[0].grad = nullptr, b.t[0].grad_bf16 = g16;
            snprintf(shape, sizeof shape, "n=%lld 8-bit, normal grads (codes spread), bf16 grads", (long long)n);
            bench_json("adamw8bit_step", shape, 16.0 * n, 0, bench_time(bench_call, &b, g_stream, 3, 15, 3), ceiling);
            /* bf16 weights (--master bf16: no p, the copy is the weight, normal values) with bf16
             * gradients, the bf16 trainers' full fine-tuning: copy read + write 4, gradient 2, q1 and
             * q2 read + write 4 = 10 bytes per element; the tables built by each CTA, then prebuilt */
            bench_round_bf16<<<1024, 256, 0, g_stream>>>(copy, g, n);
            b.t[0].p = nullptr, b.t[0].master_bf16 = 1;
            for (int pre = 0; pre < 2; pre++) {
                b.t[0].tables = pre ? tab : nullptr;
                snprintf(shape, sizeof shape, "n=%lld 8-bit, bf16 weights, bf16 grads, tables %s", (long long)n,
                         pre ? "prebuilt" : "built by each CTA");
                bench_json("adamw8bit_step", shape, 10.0 * n, 0, bench_time(bench_call, &b, g_stream, 3, 15, 3),
                           ceiling);
            }
            if (n == ((int64_t)256 << 20)) {
                /* one Llama-3.2-1B layer's seven tensors in sequence (q, k, v, o, gate, up, down), each
                 * its own launch as in the trainer, at the offsets of consecutive tensors */
                const int64_t sizes[7] = {2048 * 2048, 512 * 2048, 512 * 2048, 2048 * 2048,
                                          8192 * 2048, 8192 * 2048, 8192 * 2048};
                int64_t off = 0, total = 0;
                for (int k = 0; k < 7; k++) {
                    b.t[k] = b.t[0];
                    b.t[k].copy = copy + off, b.t[k].grad_bf16 = g16 + off, b.t[k].q1 = q1 + off, b.t[k].q2 = q2 + off;
                    b.t[k].absmax1 = a1 + off / 256, b.t[k].absmax2 = a2 + off / 256, b.t[k].n = sizes[k];
                    off += sizes[k], total += sizes[k];
                }
                for (int pre = 0; pre < 2; pre++) {
                    for (int k = 0; k < 7; k++) b.t[k].tables = pre ? tab : nullptr;
                    b.n_t = 7;
                    snprintf(shape, sizeof shape, "Llama-3.2-1B layer (7 tensors, %lld elements), bf16 weights and "
                             "grads, tables %s", (long long)total, pre ? "prebuilt" : "built by each CTA");
                    bench_json("adamw8bit_step", shape, 10.0 * total, 0,
                               bench_time(bench_call, &b, g_stream, 3, 15, 3), ceiling);
                }
            }
            b.t[0] = whole, b.n_t = 1;
        }
        for (void *q : {(void *)p, (void *)g, (void *)g16, (void *)copy, (void *)q1, (void *)q2, (void *)a1, (void *)a2,
                        (void *)m1, (void *)m2, tab})
            CUDA_CHECK(cudaFree(q));
        adamw8bit_free(&s);
    }
}

/* Every case, with the tables in the form g_prebuilt says (the ids, hence the data, as in the other). */
static void run_cases(void) {
    const int64_t ns[] = {1, 7, 4095, 4096, 4097, 2560, 100000, 16 * 2048};
    int id = 0;
    for (int64_t n : ns) {
        run_tensor(n, 0.01, 1.0, 0, id++);
        run_tensor(n, 0.0, 0.5, 0, id++);
    }
    run_tensor(4097, 0.01, 1.0, 1, id++);
    run_tensor(100000, 0.01, 1.0, 1, id++);
    /* the 8-bit kernel's scalar-load path on every block (a misaligned gradient), with short last
     * blocks whose length is not a multiple of 4 (5001 = 19·256 + 137) */
    run_tensor(4097, 0.01, 1.0, 1, id++, GRAD_MISALIGNED);
    run_tensor(5001, 0.0, 0.5, 1, id++, GRAD_MISALIGNED);
    run_tensor(100000, 0.01, 1.0, 0, id++, GRAD_MISALIGNED);
    /* more blocks than the grid has warps (each warp strides over several blocks, prefetching
     * the next), and a 77-element last block on the vector path */
    run_tensor(((int64_t)1 << 21) + 77, 0.01, 1.0, 1, id++);
    run_tensor(5001, 0.01, 1.0, 1, id++);
    /* split masters: the 32-bit path, the 8-bit vector and scalar-load paths, a short last block */
    run_tensor(4095, 0.01, 1.0, 0, id++, GRAD_ALIGNED, MASTER_SPLIT);
    run_tensor(100000, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_SPLIT);
    run_tensor(5001, 0.0, 0.5, 1, id++, GRAD_MISALIGNED, MASTER_SPLIT);
    run_tensor(((int64_t)1 << 21) + 77, 0.01, 1.0, 0, id++, GRAD_ALIGNED, MASTER_SPLIT);
    run_scalars(4097, 1.0, id++);      /* 8-bit, clipped */
    run_scalars(4095, 1.0, id++);      /* 32-bit, clipped */
    run_scalars(16 * 2048, 0.0, id++); /* 8-bit, coefficient 1 */
    run_scalars(7, 0.0, id++);         /* 32-bit, coefficient 1 */
    /* bf16 gradients (grad_bf16), bitwise the fp32 gradient of the widened values: the 32-bit path,
     * the 8-bit vector and scalar-load paths, non-finite gradients, short last blocks, the grid
     * stride, split masters */
    run_tensor(7, 0.0, 0.5, 0, id++, GRAD_ALIGNED, MASTER_FP32, 1);
    run_tensor(4095, 0.01, 1.0, 0, id++, GRAD_ALIGNED, MASTER_FP32, 1);
    run_tensor(4097, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_FP32, 1);
    run_tensor(100000, 0.0, 0.5, 1, id++, GRAD_ALIGNED, MASTER_FP32, 1);
    run_tensor(5001, 0.01, 1.0, 1, id++, GRAD_MISALIGNED, MASTER_FP32, 1);
    run_tensor(((int64_t)1 << 21) + 77, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_FP32, 1);
    run_tensor(4095, 0.01, 1.0, 0, id++, GRAD_MISALIGNED, MASTER_SPLIT, 1);
    run_tensor(100000, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_SPLIT, 1);
    run_tensor(5001, 0.0, 0.5, 1, id++, GRAD_MISALIGNED, MASTER_SPLIT, 1);
    /* bf16 weights (no master: the copy is the weight): the 32-bit path (weight decay on and off),
     * the 8-bit vector and scalar-load paths with non-finite gradients, a 1-element last block and
     * a short one, the grid stride, bf16 gradients, the device scalars on both paths */
    run_tensor(7, 0.0, 0.5, 0, id++, GRAD_ALIGNED, MASTER_BF16);
    run_tensor(4095, 0.01, 1.0, 0, id++, GRAD_ALIGNED, MASTER_BF16);
    run_tensor(4097, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_BF16);
    run_tensor(100000, 0.0, 0.5, 1, id++, GRAD_ALIGNED, MASTER_BF16);
    run_tensor(100000, 0.01, 1.0, 1, id++, GRAD_MISALIGNED, MASTER_BF16);
    run_tensor(5001, 0.0, 0.5, 1, id++, GRAD_MISALIGNED, MASTER_BF16);
    run_tensor(((int64_t)1 << 21) + 77, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_BF16);
    run_tensor(16 * 2048, 0.01, 1.0, 0, id++, GRAD_ALIGNED, MASTER_BF16);
    run_tensor(4095, 0.01, 1.0, 0, id++, GRAD_MISALIGNED, MASTER_BF16, 1);
    run_tensor(100000, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_BF16, 1);
    run_tensor(5001, 0.0, 0.5, 1, id++, GRAD_MISALIGNED, MASTER_BF16, 1);
    /* the bf16 weights' rounding at its edges (subnormal, −0, NaN, near the largest), on the vector
     * kernel of that form and the scalar-load one */
    run_tensor(100000, 0.01, 1.0, 3, id++, GRAD_ALIGNED, MASTER_BF16, 1);
    run_tensor(((int64_t)1 << 21) + 77, 0.0, 0.5, 2, id++, GRAD_ALIGNED, MASTER_BF16);
    run_tensor(9000, 0.01, 1.0, 2, id++, GRAD_MISALIGNED, MASTER_BF16, 1);
    run_scalars(4097, 1.0, id++, MASTER_BF16);
    run_scalars(4095, 1.0, id++, MASTER_BF16);
    /* bf16-sr weights (the copy is the weight, rounded stochastically; a stream per case): the
     * 32-bit path, the 8-bit vector path with non-finite gradients, a 1-element and a 137-element
     * last block, the scalar-load path, the grid stride, bf16 gradients, the device scalars */
    run_tensor(7, 0.0, 0.5, 0, id++, GRAD_ALIGNED, MASTER_BF16_SR);
    run_tensor(4095, 0.01, 1.0, 0, id++, GRAD_ALIGNED, MASTER_BF16_SR);
    run_tensor(100000, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_BF16_SR);
    run_tensor(4097, 0.0, 0.5, 1, id++, GRAD_ALIGNED, MASTER_BF16_SR);
    run_tensor(5001, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_BF16_SR);
    run_tensor(100000, 0.0, 0.5, 1, id++, GRAD_MISALIGNED, MASTER_BF16_SR);
    run_tensor(((int64_t)1 << 21) + 77, 0.01, 1.0, 0, id++, GRAD_ALIGNED, MASTER_BF16_SR);
    run_tensor(4095, 0.01, 1.0, 0, id++, GRAD_MISALIGNED, MASTER_BF16_SR, 1);
    run_tensor(100000, 0.01, 1.0, 1, id++, GRAD_ALIGNED, MASTER_BF16_SR, 1);
    run_tensor(5001, 0.0, 0.5, 1, id++, GRAD_MISALIGNED, MASTER_BF16_SR, 1);
    run_scalars(4097, 1.0, id++, MASTER_BF16_SR);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261131);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    for (g_prebuilt = 0; g_prebuilt < 2; g_prebuilt++) run_cases();
    { /* the step's written-out square root and reciprocal, every input of their ranges */
        const unsigned long long bad = gpu_adamw8bit_fast_math_check();
        EXPECT(bad == 0, "adamw8bit: the fast square root / reciprocal differ from __fsqrt_rn / __frcp_rn on %llu "
               "inputs of their ranges", bad);
    }
    const int rc = test_finish("adamw8bit_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
