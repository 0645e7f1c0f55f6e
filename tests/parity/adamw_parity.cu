/* adamw_parity.cu — gpu/adamw (multi-tensor fused AdamW + global-norm clipping) against ref/adamw.
 *
 *   bazel test --config=gpu //tests/parity:adamw_parity
 *   adamw_parity [--seed=N] [--bench]
 *
 * One optimizer over tensors of sizes around the chunk edges (1, 7, 8191, 8192, 8193, 100000) and
 * of the real LoRA shapes of Llama-3.2-1B (A 16×2048, B 2048×16, B 8192×16), with weight decay on
 * some and not others, bf16 copies on some; three steps with fresh gradients each (bias
 * corrections for t = 1, 2, 3), once without clipping and once with max_norm below the norm.
 * Inputs: normals from the printed seed (gradients of mixed scales). Outputs: master, m, v updated
 * in place and compared after every step; the bf16 copies are poisoned before each step and must
 * be written entirely; guard regions around every buffer.
 *
 * Split masters (ref/master_pair.h: the bf16 copy and a low half, no fp32 array): the same runs
 * with the reference's masters kept as master_pair_round of themselves, the GPU's read back as
 * join(copy, lo) — the same rule and tiers as fp32 masters (bitwise without clipping).
 * bf16 weights (master_bf16: the copy alone, no master, no low half): the same runs with the
 * reference's masters bf16 values (the widened weights) rounded to bf16 (bf16_from_float) after
 * every step, the GPU's read back as the widened copies — m, v bitwise and the weights bitwise
 * without clipping; with clipping m and v as above, the weights in the bf16 copy's tier. The
 * non-finite gradient and guard cases below on bf16 weights too: the copies stay as they were.
 * bf16-sr weights (master_bf16 = 2: the same, each result rounded stochastically): the same runs
 * with the reference's masters rounded by bf16_sr_round_array after step t, keyed (seed
 * 0x1234567890ABCDEF, t, the hash of a distinct name per tensor), instead of bf16_from_float — the
 * same rule and tiers; bf16 gradients bitwise fp32 ones; a non-finite gradient and a non-finite
 * guard leave the copies as they were. Updates far under half a bf16 ulp (weights in [1.25, 1.75],
 * lr = 1e-4): bf16 weights keep every weight, bit for bit; bf16-sr moves some, each by exactly one
 * ulp toward its update, as many as the rounding's probabilities give (within 6σ).
 * gpu_master_pair_split: hi and lo master_pair_split's, and with lo = NULL hi alone, bf16_from_float
 * of each input, bit for bit (random bit patterns, ties, ±0, ±Inf, NaN, the largest finite values).
 *
 * A non-finite gradient (NaN, Inf) makes the norm non-finite and leaves every master, m and v as
 * they were, bitwise (gpu/adamw.h's guard), with and without clipping; a context without state
 * computes the same norm. The guard scalar (gpu_adamw_step's guard): finite (3.5), the steps
 * above compare as with none; NaN or +Inf with finite gradients, every master, m, v and bf16 copy
 * stays as it was, bitwise, and grad_norm is still written when asked for.
 * gpu_adamw_norm_and_coef: the norm is gpu_adamw_step's grad_norm bit for bit (from a context with
 * state and from a norm-only one), the coefficient ref_clip_coef(norm, max_norm) bit for bit for a
 * max_norm that clips and one that does not, exactly 1 for max_norm ≤ 0.
 * The sharded form (ZeRO-1, ref/shard.h): 2, 3 and 5 ranks simulated in one process, the ranks'
 * partial sums summed on the host; the norm, and every rank's masters, moments and bf16 copies of
 * its pieces, are the unsharded form's bit for bit over 3 steps (with and without clipping).
 * bf16 gradients (grad_bf16): the gradients rounded to bf16 on the host and given to one optimizer
 * as fp32 (the widened values) and to another as the bf16 bits: the norm and coefficient, and every
 * master (split: lo), bf16 copy, m and v, bit for bit the same over 3 steps (tensors of odd sizes
 * across the chunk edges and the LoRA shapes; plain, clipped, split masters; bf16 and fp32
 * gradients mixed in one optimizer); and the sharded contexts that read the tensors' own
 * gradients, given them as bf16, bitwise the unsharded one.
 *
 * Tolerances (tier b, derived):
 *  - grad norm: the GPU sums squares in fp32 over ≤ 32 elements per thread then an 8-level tree
 *    (relative error ≤ 40u on Σg², u = 2^-24), in double across chunks; sqrt halves it → ≤ 21u + one
 *    rounding each side: eps = FLT_EPSILON (2u), k = 12.
 *  - no clipping: (a) exact. gpu/adamw.h performs ref_adamw_step's fp32 operations in ref/adamw.h's
 *    order on the same values, with the same double scalars rounded once (same host libm), so
 *    master, m, v agree bit for bit; the bf16 copy is exactly bf16(master).
 *  - clipping: coef inherits the norm's relative error (≤ 12 eps), which scales g, hence m (k = 16,
 *    with the floor (1 − β1)·max|g·coef|: that error enters m as an absolute (1 − β1)·g·coef·δ, which
 *    is not relative to m where β1·m_prev cancels the new term — 1-2% of elements by step 3)
 *    and v (k = 28, squared); master moves by at most ~3.2·lr per step, so its absolute error
 *    ≤ 12·eps·3.2·lr, i.e. floor = 38·lr/k ≈ 10·lr with k = 4. The bf16 copy of a master value
 *    off by that much flips at most one bf16 rounding: k = 2, eps = BF16_EPS, no floor. bf16
 *    weights are that copy (the widened copy is the master): the same k = 2, eps = BF16_EPS.
 *    Stochastically rounded, two such values with the same random bits round at most one bf16 ulp
 *    apart: the same k = 2, eps = BF16_EPS.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "gpu/adamw.h"
#include "gpu/cuda_check.h"
#include "ref/adamw.h"
#include "ref/bf16.h"
#include "ref/master_pair.h"
#include "ref/shard.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;

struct host_tensor {
    int64_t n;
    int decay, has_copy;
    std::vector<float> p, m, v, g;
};

/* The reference: the global norm (ref_grad_total_norm), with clipping ref_clip_grad_norm (which
 * scales the host gradients in place), then one ref_adamw_step per tensor. */
static double oracle_norm_and_clip(std::vector<host_tensor> &ts, double max_norm) {
    std::vector<float *> gs;
    std::vector<int64_t> ns;
    for (auto &t : ts) gs.push_back(t.g.data()), ns.push_back(t.n);
    if (max_norm > 0) return ref_clip_grad_norm(gs.data(), ns.data(), (int)ts.size(), max_norm);
    return ref_grad_total_norm(gs.data(), ns.data(), (int)ts.size());
}

static void oracle_step(host_tensor &t, const struct optim_step &h) {
    const struct adamw_hparams hp = {h.hp.lr, h.hp.beta1, h.hp.beta2, h.hp.eps, t.decay ? h.hp.weight_decay : 0.0};
    ref_adamw_step(t.p.data(), t.m.data(), t.v.data(), t.g.data(), t.n, h.step, &hp);
}

/* bf16-sr weights: the run's seed (both 32-bit halves non-zero: both key words count) and tensor i's
 * stream, the hash of a name of its own. */
static const uint64_t kSrSeed = 0x1234567890ABCDEFull;

static uint32_t sr_tensor_of(int i) {
    char name[64];
    snprintf(name, sizeof name, "model.layers.%d.mlp.down_proj.weight", i);
    return bf16_sr_tensor_hash(name);
}

/* The masters as form ms holds them (ref/master_pair.h master_storage_round_array; bf16-sr keyed
 * (kSrSeed, step, tensor)): at the start (step 0) and after step ≥ 1. */
static void master_round_array(float *x, int64_t n, enum master_storage ms, int64_t step = 0, uint32_t tensor = 0) {
    master_storage_round_array(x, n, ms, kSrSeed, step, tensor);
}

static const char *master_label(enum master_storage ms) {
    static const char *const label[] = {"", ", split masters", ", bf16 weights", ", bf16-sr weights"};
    return label[ms]; /* index = enum value */
}

/* finite_guard: every step is given a guard scalar of 3.5 (finite: no effect on the update).
 * ms = MASTER_SPLIT: split masters (ref/master_pair.h) — every tensor has a copy, no fp32 master on
 * the device; the reference updates master_pair_round of its masters and rounds them so after every
 * step, and the GPU's masters are join(copy, lo). ms = MASTER_BF16: bf16 weights — every tensor has
 * a copy and nothing else (master_bf16); the reference's masters are bf16 values, rounded to bf16
 * after every step, and the GPU's masters are the widened copies. ms = MASTER_BF16_SR: the same,
 * tensor i rounded after step t by bf16_sr_round_array(kSrSeed, t, sr_tensor_of(i)). */
static void run_optimizer(const std::vector<int64_t> &sizes, double max_norm, int id, int finite_guard = 0,
                          enum master_storage ms = MASTER_FP32) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[96];
    snprintf(shape, sizeof shape, "%zu tensors, max_norm=%g%s%s", sizes.size(), max_norm,
             finite_guard ? ", guard=3.5" : "", master_label(ms));
    const int split = ms == MASTER_SPLIT, in_copy = ms != MASTER_FP32; /* in_copy: the copy holds the master */
    const int T = (int)sizes.size();
    std::vector<host_tensor> ts(T);
    for (int i = 0; i < T; i++) {
        host_tensor &t = ts[i];
        t.n = sizes[i], t.decay = i % 3 != 1, t.has_copy = in_copy || i % 2 == 0;
        t.p.resize(t.n), t.m.assign(t.n, 0.0f), t.v.assign(t.n, 0.0f), t.g.resize(t.n);
        rng_fill_normal(&r, t.p.data(), t.n, 0.0, 1.0);
        master_round_array(t.p.data(), t.n, ms);
    }
    /* Device state. */
    std::vector<struct dev_buf> bp(T), bm(T), bv(T), bg(T), bc(T), bl(T);
    std::vector<struct gpu_adamw_param> params(T);
    for (int i = 0; i < T; i++) {
        host_tensor &t = ts[i];
        const size_t b4 = (size_t)t.n * 4;
        dev_buf_alloc(&bp[i], "master", b4, POISON_NONE, t.p.data());
        dev_buf_alloc(&bm[i], "m", b4, POISON_NONE, t.m.data());
        dev_buf_alloc(&bv[i], "v", b4, POISON_NONE, t.v.data());
        dev_buf_alloc(&bg[i], "grad", b4, POISON_NONE, nullptr);
        dev_buf_alloc(&bc[i], "copy", (size_t)t.n * 2, POISON_BF16, nullptr);
        std::vector<uint16_t> hi(t.n), lo(t.n);
        master_pair_split_array(hi.data(), lo.data(), t.p.data(), t.n);
        dev_buf_alloc(&bl[i], "lo", (size_t)t.n * 2, POISON_NONE, lo.data());
        if (in_copy) dev_buf_reset(&bc[i], hi.data());
        params[i] = {in_copy ? nullptr : (float *)bp[i].data, t.has_copy ? (uint16_t *)bc[i].data : nullptr,
                     (float *)bm[i].data, (float *)bv[i].data, (const float *)bg[i].data, nullptr, t.n, t.decay,
                     split ? (uint16_t *)bl[i].data : nullptr, gpu_adamw_master_bf16(ms), kSrSeed, sr_tensor_of(i)};
    }
    struct gpu_adamw *opt = build_gpu_adamw(params.data(), T);
    struct dev_buf bnorm, bguard;
    dev_buf_alloc(&bnorm, "grad_norm", 4, POISON_F32, nullptr);
    const double guard_value = 3.5;
    dev_buf_alloc(&bguard, "guard", sizeof(double), POISON_NONE, &guard_value);

    struct optim_step h = {0, {1e-3, 0.9, 0.999, 1e-8, 0.01}, max_norm};
    const double *guard = finite_guard ? (const double *)bguard.data : nullptr;
    const bool clip = max_norm > 0;
    for (int step = 1; step <= 3; step++) {
        h.step = step;
        for (int i = 0; i < T; i++) {
            host_tensor &t = ts[i];
            rng_fill_normal(&r, t.g.data(), t.n, 0.0, i % 2 ? 0.01 : 1.0);
            dev_buf_reset(&bg[i], t.g.data());
            if (!in_copy) dev_buf_reset(&bc[i], nullptr); /* split, bf16 weights: the copy is state */
        }
        dev_buf_reset(&bnorm, nullptr);
        gpu_adamw_step(opt, &h, guard, (float *)bnorm.data, g_stream);
        const double norm_r = oracle_norm_and_clip(ts, max_norm);
        for (int i = 0; i < T; i++) {
            oracle_step(ts[i], h);
            master_round_array(ts[i].p.data(), ts[i].n, ms, step, sr_tensor_of(i));
        }

        float norm_g = 0, norm_rf = (float)norm_r;
        dev_buf_download(&bnorm, &norm_g, 1);
        char what[64];
        snprintf(what, sizeof what, "grad norm (step %d)", step);
        struct cmp_case cc = {"adamw", what, shape, "f32", seed};
        cmp_elementwise(&cc, &norm_g, &norm_rf, 1, FLT_EPSILON, 12.0, 0.0, nullptr);
        for (int i = 0; i < T; i++) {
            host_tensor &t = ts[i];
            std::vector<float> p(t.n), m(t.n), v(t.n), cf(t.n);
            std::vector<uint16_t> c(t.n);
            dev_buf_download(&bm[i], m.data(), 0);
            dev_buf_download(&bv[i], v.data(), 0);
            dev_buf_download(&bc[i], c.data(), t.has_copy && !in_copy);
            if (in_copy) { /* join(copy, lo); bf16 weights: no lo, the widened copy */
                std::vector<uint16_t> lo(split ? t.n : 0);
                if (split) dev_buf_download(&bl[i], lo.data(), 0);
                master_pair_join_array(p.data(), c.data(), split ? lo.data() : nullptr, t.n);
            } else {
                dev_buf_download(&bp[i], p.data(), 0);
            }
            std::vector<float> gtmp(t.n);
            dev_buf_download(&bg[i], gtmp.data(), 0);
            snprintf(what, sizeof what, "tensor %d (n=%lld) step %d master", i, (long long)t.n, step);
            cc.what = what;
            if (!clip) cmp_exact_f32(&cc, p.data(), t.p.data(), t.n);
            else if (ms == MASTER_BF16 || ms == MASTER_BF16_SR) /* the weight is the bf16 copy: its tier */
                cmp_elementwise(&cc, p.data(), t.p.data(), t.n, BF16_EPS, 2.0, 0.0, nullptr);
            else cmp_elementwise(&cc, p.data(), t.p.data(), t.n, FLT_EPSILON, 4.0, 10.0 * h.hp.lr, nullptr);
            snprintf(what, sizeof what, "tensor %d (n=%lld) step %d m", i, (long long)t.n, step);
            /* the coefficient's error enters m as (1 − β1)·g·coef·δ, absolute: where β1·m_prev
             * cancels (1 − β1)·g·coef, m is small and that error is not relative to it */
            double gmax = 0;
            for (int64_t j = 0; j < t.n; j++) gmax = fabs((double)t.g[j]) > gmax ? fabs((double)t.g[j]) : gmax;
            if (!clip) cmp_exact_f32(&cc, m.data(), t.m.data(), t.n);
            else cmp_elementwise(&cc, m.data(), t.m.data(), t.n, FLT_EPSILON, 16.0, (1.0 - h.hp.beta1) * gmax, nullptr);
            snprintf(what, sizeof what, "tensor %d (n=%lld) step %d v", i, (long long)t.n, step);
            if (!clip) cmp_exact_f32(&cc, v.data(), t.v.data(), t.n);
            else cmp_elementwise(&cc, v.data(), t.v.data(), t.n, FLT_EPSILON, 28.0, 0.0, nullptr);
            if (t.has_copy) {
                for (int64_t j = 0; j < t.n; j++) cf[j] = bf16_to_float(c[j]);
                std::vector<float> want(t.n);
                for (int64_t j = 0; j < t.n; j++) want[j] = bf16_round(t.p[j]);
                snprintf(what, sizeof what, "tensor %d (n=%lld) step %d bf16 copy", i, (long long)t.n, step);
                cc.dtype = "bf16";
                /* the copy is bf16(master) of the GPU's own master: exact */
                std::vector<float> own(t.n);
                for (int64_t j = 0; j < t.n; j++) own[j] = bf16_round(p[j]);
                cmp_exact_f32(&cc, cf.data(), own.data(), t.n);
                cmp_elementwise(&cc, cf.data(), want.data(), t.n, BF16_EPS, 2.0, 0.0, nullptr);
                cc.dtype = "f32";
            }
            /* keep the host state equal to the device's so that later steps compare one step */
            t.p = p, t.m = m, t.v = v;
        }
    }
    free_gpu_adamw(opt);
    for (int i = 0; i < T; i++)
        for (struct dev_buf *b : {&bp[i], &bm[i], &bv[i], &bg[i], &bc[i], &bl[i]}) dev_buf_free(b);
    dev_buf_free(&bnorm);
    dev_buf_free(&bguard);
}

static void read_norm_coef(const float *d, float out[2]);

/* The sharded form against the unsharded one, W ranks in one process: each rank's context owns its
 * pieces (ref/shard.h) of the same gradients; the ranks' partial sums are summed on the host (in
 * rank order) and written back into every context, as the job's all-reduce does. After every step:
 * the norm, and every rank's masters, moments and bf16 copies of its pieces, bitwise the unsharded
 * context's; with master = NULL (norm only) gpu_adamw_norm_and_coef bitwise the unsharded one's.
 * Sharded gradients (ZeRO-2): the odd ranks' update contexts and the even ranks' norm-only ones read
 * their pieces' gradients from a flat array (copied from the tensors' gradients each step), the
 * others the tensors' own: both bitwise the unsharded context. bf16: the gradients rounded to bf16,
 * and the contexts that read the tensors' own gradients read them as bf16 (grad_bf16), the others
 * (and the unsharded context) as fp32, the widened values: still bitwise. */
static void run_sharded(const std::vector<int64_t> &sizes, double max_norm, int W, int id, int bf16 = 0) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[96];
    snprintf(shape, sizeof shape, "%zu tensors, max_norm=%g, %d ranks%s", sizes.size(), max_norm, W,
             bf16 ? ", bf16 gradients" : "");
    const int T = (int)sizes.size();
    std::vector<host_tensor> ts(T);
    std::vector<struct dev_buf> bp(T), bm(T), bv(T), bg(T), bc(T), bb(T);
    std::vector<struct gpu_adamw_param> params(T);
    for (int i = 0; i < T; i++) {
        host_tensor &t = ts[i];
        t.n = sizes[i], t.decay = i % 3 != 1, t.has_copy = 1;
        t.p.resize(t.n), t.m.assign(t.n, 0.0f), t.v.assign(t.n, 0.0f), t.g.resize(t.n);
        rng_fill_normal(&r, t.p.data(), t.n, 0.0, 1.0);
        const size_t b4 = (size_t)t.n * 4;
        dev_buf_alloc(&bp[i], "master", b4, POISON_NONE, t.p.data());
        dev_buf_alloc(&bm[i], "m", b4, POISON_NONE, t.m.data());
        dev_buf_alloc(&bv[i], "v", b4, POISON_NONE, t.v.data());
        dev_buf_alloc(&bg[i], "grad", b4, POISON_NONE, nullptr);
        dev_buf_alloc(&bb[i], "grad_bf16", (size_t)t.n * 2, POISON_NONE, nullptr);
        dev_buf_alloc(&bc[i], "copy", (size_t)t.n * 2, POISON_BF16, nullptr);
        params[i] = {(float *)bp[i].data, (uint16_t *)bc[i].data, (float *)bm[i].data, (float *)bv[i].data,
                     (const float *)bg[i].data, nullptr, t.n, t.decay};
    }
    struct gpu_adamw *whole = build_gpu_adamw(params.data(), T);
    /* the ranks: their pieces, flat state, their own full-size copies */
    std::vector<std::vector<shard_piece>> pieces(W);
    std::vector<struct dev_buf> fm(W), fmo(W), fv(W), fg(W);
    std::vector<std::vector<struct dev_buf>> rc(W, std::vector<struct dev_buf>(T));
    std::vector<struct gpu_adamw *> ranks(W), norms(W);
    std::vector<int64_t> ns(sizes.begin(), sizes.end());
    for (int k = 0; k < W; k++) {
        int64_t el = 0;
        pieces[k].resize(T);
        pieces[k].resize(shard_pieces(pieces[k].data(), &el, ns.data(), T, W, k));
        std::vector<float> flat(el + 1, 0.0f);
        for (const shard_piece &q : pieces[k])
            memcpy(flat.data() + q.off, ts[q.tensor].p.data() + q.lo, sizeof(float) * (size_t)(q.hi - q.lo));
        const std::vector<float> zero(el + 1, 0.0f);
        dev_buf_alloc(&fm[k], "flat master", (size_t)(el + 1) * 4, POISON_NONE, flat.data());
        dev_buf_alloc(&fmo[k], "flat m", (size_t)(el + 1) * 4, POISON_NONE, zero.data());
        dev_buf_alloc(&fv[k], "flat v", (size_t)(el + 1) * 4, POISON_NONE, zero.data());
        dev_buf_alloc(&fg[k], "flat grad", (size_t)(el + 1) * 4, POISON_F32, nullptr);
        std::vector<struct gpu_adamw_param> mine = params;
        for (int i = 0; i < T; i++) {
            dev_buf_alloc(&rc[k][i], "rank copy", (size_t)ts[i].n * 2, POISON_BF16, nullptr);
            mine[i].copy = (uint16_t *)rc[k][i].data;
        }
        std::vector<struct gpu_adamw_param> own = mine; /* for the contexts without flat gradients */
        for (int i = 0; i < T && bf16; i++) own[i].grad = nullptr, own[i].grad_bf16 = (const uint16_t *)bb[i].data;
        ranks[k] = build_gpu_adamw_sharded(k % 2 ? mine.data() : own.data(), T, pieces[k].data(), (int)pieces[k].size(),
                                           (float *)fm[k].data, (float *)fmo[k].data, (float *)fv[k].data,
                                           k % 2 ? (const float *)fg[k].data : nullptr);
        norms[k] = build_gpu_adamw_sharded(k % 2 ? own.data() : mine.data(), T, pieces[k].data(), (int)pieces[k].size(),
                                           nullptr, nullptr, nullptr, k % 2 ? nullptr : (const float *)fg[k].data);
    }
    struct dev_buf bnorm;
    dev_buf_alloc(&bnorm, "grad_norm", 4, POISON_F32, nullptr);
    struct optim_step h = {0, {1e-3, 0.9, 0.999, 1e-8, 0.01}, max_norm};
    for (int step = 1; step <= 3; step++) {
        h.step = step;
        for (int i = 0; i < T; i++) {
            rng_fill_normal(&r, ts[i].g.data(), ts[i].n, 0.0, i % 2 ? 0.01 : 1.0);
            if (bf16) bf16_round_array(ts[i].g.data(), ts[i].g.data(), ts[i].n);
            dev_buf_reset(&bg[i], ts[i].g.data());
            dev_buf_reset(&bb[i], bits_of(ts[i].g).data());
        }
        for (int k = 0; k < W; k++) /* the flat gradients: each piece at its off */
            for (const shard_piece &q : pieces[k])
                CUDA_CHECK(cudaMemcpy((float *)fg[k].data + q.off, ts[q.tensor].g.data() + q.lo,
                                      sizeof(float) * (size_t)(q.hi - q.lo), cudaMemcpyHostToDevice));
        const float *coef_whole = gpu_adamw_norm_and_coef(whole, max_norm, g_stream);
        float want_nc[2];
        read_norm_coef(coef_whole, want_nc);
        gpu_adamw_step(whole, &h, nullptr, (float *)bnorm.data, g_stream);
        float want_norm = 0;
        dev_buf_download(&bnorm, &want_norm, 1);
        /* the ranks' partial sums, summed in rank order, into every rank's context */
        for (struct gpu_adamw **set : {ranks.data(), norms.data()}) {
            std::vector<float> sum, part;
            std::vector<float *> dev(W);
            int64_t nc = 0;
            for (int k = 0; k < W; k++) {
                dev[k] = gpu_adamw_partials(set[k], &nc, g_stream);
                part.resize(nc);
                CUDA_CHECK(cudaMemcpyAsync(part.data(), dev[k], sizeof(float) * nc, cudaMemcpyDeviceToHost, g_stream));
                CUDA_CHECK(cudaStreamSynchronize(g_stream));
                if (k == 0) sum = part;
                else for (int64_t j = 0; j < nc; j++) sum[j] = sum[j] + part[j];
            }
            for (int k = 0; k < W; k++)
                CUDA_CHECK(cudaMemcpy(dev[k], sum.data(), sizeof(float) * nc, cudaMemcpyHostToDevice));
        }
        for (int k = 0; k < W; k++) {
            float got_nc[2];
            read_norm_coef(gpu_adamw_norm_and_coef(norms[k], max_norm, g_stream), got_nc);
            EXPECT(memcmp(got_nc, want_nc, sizeof got_nc) == 0,
                   "adamw sharded (%s, seed %llu) step %d rank %d: norm-only {%.9g, %.9g}, unsharded {%.9g, %.9g}",
                   shape, (unsigned long long)seed, step, k, got_nc[0], got_nc[1], want_nc[0], want_nc[1]);
            dev_buf_reset(&bnorm, nullptr);
            gpu_adamw_step(ranks[k], &h, nullptr, (float *)bnorm.data, g_stream);
            float got_norm = 0;
            dev_buf_download(&bnorm, &got_norm, 1);
            EXPECT(memcmp(&got_norm, &want_norm, 4) == 0, "adamw sharded (%s) step %d rank %d: norm %.9g, unsharded %.9g",
                   shape, step, k, got_norm, want_norm);
        }
        /* every rank's pieces against the unsharded tensors */
        int64_t bad = 0, first_bad = -1;
        for (int i = 0; i < T; i++) {
            std::vector<float> p(ts[i].n), m(ts[i].n), v(ts[i].n);
            std::vector<uint16_t> c(ts[i].n);
            dev_buf_download(&bp[i], p.data(), 0);
            dev_buf_download(&bm[i], m.data(), 0);
            dev_buf_download(&bv[i], v.data(), 0);
            dev_buf_download(&bc[i], c.data(), 1);
            for (int k = 0; k < W; k++)
                for (const shard_piece &q : pieces[k]) {
                    if (q.tensor != i) continue;
                    const size_t len = (size_t)(q.hi - q.lo), el = (size_t)(pieces[k].back().off + 1 +
                                                                           (pieces[k].back().hi - pieces[k].back().lo));
                    std::vector<float> a(el), b(el), d(el);
                    std::vector<uint16_t> rcopy(ts[i].n);
                    dev_buf_download(&fm[k], a.data(), 0);
                    dev_buf_download(&fmo[k], b.data(), 0);
                    dev_buf_download(&fv[k], d.data(), 0);
                    dev_buf_download(&rc[k][i], rcopy.data(), 0);
                    const int wrong = memcmp(a.data() + q.off, p.data() + q.lo, len * 4) != 0 ||
                                      memcmp(b.data() + q.off, m.data() + q.lo, len * 4) != 0 ||
                                      memcmp(d.data() + q.off, v.data() + q.lo, len * 4) != 0 ||
                                      memcmp(rcopy.data() + q.lo, c.data() + q.lo, len * 2) != 0;
                    if (wrong && first_bad < 0) first_bad = i * 1000 + k;
                    bad += wrong;
                }
        }
        EXPECT(bad == 0, "adamw sharded (%s, seed %llu) step %d: %lld pieces differ from the unsharded update (first: "
                         "tensor %lld, rank %lld)",
               shape, (unsigned long long)seed, step, (long long)bad, (long long)(first_bad / 1000),
               (long long)(first_bad % 1000));
    }
    free_gpu_adamw(whole);
    for (int k = 0; k < W; k++) {
        free_gpu_adamw(ranks[k]);
        free_gpu_adamw(norms[k]);
        dev_buf_free(&fm[k]), dev_buf_free(&fmo[k]), dev_buf_free(&fv[k]), dev_buf_free(&fg[k]);
        for (int i = 0; i < T; i++) dev_buf_free(&rc[k][i]);
    }
    for (int i = 0; i < T; i++)
        for (struct dev_buf *b : {&bp[i], &bm[i], &bv[i], &bg[i], &bc[i], &bb[i]}) dev_buf_free(b);
    dev_buf_free(&bnorm);
}

/* bf16 gradients (gpu_adamw_param.grad_bf16): the same tensors, state and gradients (normals rounded
 * to bf16 on the host) given to two optimizers, form 0 reading the widened values as fp32 (grad),
 * form 1 the bf16 bits (grad_bf16; mixed: the even tensors only, the odd ones fp32 as in form 0),
 * each with a norm-only context beside it. After every step the norm and coefficient
 * (gpu_adamw_norm_and_coef of the norm-only contexts), gpu_adamw_step's norm, and every master
 * (split: lo; bf16 weights: none), bf16 copy, m and v of form 1 are form 0's, bit for bit. (Form 0
 * against the reference is run_optimizer's case.) Tensors, copies and masters (ms) as in
 * run_optimizer. */
static void run_bf16_grads(const std::vector<int64_t> &sizes, double max_norm, enum master_storage ms, int id,
                           int mixed = 0) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[96], what[96];
    snprintf(shape, sizeof shape, "%zu tensors, max_norm=%g%s, bf16 gradients%s", sizes.size(), max_norm,
             master_label(ms), mixed ? " (even tensors; odd fp32)" : "");
    const int split = ms == MASTER_SPLIT, in_copy = ms != MASTER_FP32;
    struct cmp_case cc = {"adamw", what, shape, "f32", seed};
    const int T = (int)sizes.size();
    struct form_bufs {
        struct dev_buf p, m, v, c, lo, g;
    };
    std::vector<form_bufs> d(2 * (size_t)T); /* tensor i's form f at [2i + f] */
    std::vector<struct gpu_adamw_param> params[2], norm_only[2];
    for (int i = 0; i < T; i++) {
        const int64_t n = sizes[i];
        std::vector<float> p(n);
        const std::vector<float> zero(n, 0.0f);
        rng_fill_normal(&r, p.data(), n, 0.0, 1.0);
        master_round_array(p.data(), n, ms);
        std::vector<uint16_t> hi(n), lo(n);
        master_pair_split_array(hi.data(), lo.data(), p.data(), n);
        for (int f = 0; f < 2; f++) {
            form_bufs &b = d[2 * i + f];
            const int b16 = f == 1 && (!mixed || i % 2 == 0);
            dev_buf_alloc(&b.p, "master", (size_t)n * 4, POISON_NONE, p.data());
            dev_buf_alloc(&b.m, "m", (size_t)n * 4, POISON_NONE, zero.data());
            dev_buf_alloc(&b.v, "v", (size_t)n * 4, POISON_NONE, zero.data());
            dev_buf_alloc(&b.c, "copy", (size_t)n * 2, in_copy ? POISON_NONE : POISON_BF16,
                          in_copy ? hi.data() : nullptr);
            dev_buf_alloc(&b.lo, "lo", (size_t)n * 2, POISON_NONE, lo.data());
            dev_buf_alloc(&b.g, b16 ? "grad_bf16" : "grad", (size_t)n * (b16 ? 2 : 4), POISON_NONE, nullptr);
            const float *g32 = b16 ? nullptr : (const float *)b.g.data;
            const uint16_t *g16 = b16 ? (const uint16_t *)b.g.data : nullptr;
            params[f].push_back({in_copy ? nullptr : (float *)b.p.data,
                                 in_copy || i % 2 == 0 ? (uint16_t *)b.c.data : nullptr, (float *)b.m.data,
                                 (float *)b.v.data, g32, g16, n, i % 3 != 1, split ? (uint16_t *)b.lo.data : nullptr,
                                 gpu_adamw_master_bf16(ms), kSrSeed, sr_tensor_of(i)});
            norm_only[f].push_back({nullptr, nullptr, nullptr, nullptr, g32, g16, n, 1, nullptr});
        }
    }
    struct gpu_adamw *opt[2], *nrm[2];
    struct dev_buf bnorm[2];
    for (int f = 0; f < 2; f++) {
        opt[f] = build_gpu_adamw(params[f].data(), T);
        nrm[f] = build_gpu_adamw(norm_only[f].data(), T);
        dev_buf_alloc(&bnorm[f], "grad_norm", 4, POISON_F32, nullptr);
    }
    struct optim_step h = {0, {1e-3, 0.9, 0.999, 1e-8, 0.01}, max_norm};
    for (int step = 1; step <= 3; step++) {
        h.step = step;
        for (int i = 0; i < T; i++) {
            std::vector<float> g(sizes[i]);
            rng_fill_normal(&r, g.data(), sizes[i], 0.0, i % 2 ? 0.01 : 1.0);
            const std::vector<uint16_t> bits = bits_of(g);
            const std::vector<float> widened = floats_of(bits);
            dev_buf_reset(&d[2 * i].g, widened.data());
            dev_buf_reset(&d[2 * i + 1].g, !mixed || i % 2 == 0 ? (const void *)bits.data() : widened.data());
            for (int f = 0; f < 2 && !in_copy; f++) dev_buf_reset(&d[2 * i + f].c, nullptr);
        }
        float nc[2][2], norm[2];
        for (int f = 0; f < 2; f++) {
            read_norm_coef(gpu_adamw_norm_and_coef(nrm[f], max_norm, g_stream), nc[f]);
            dev_buf_reset(&bnorm[f], nullptr);
            gpu_adamw_step(opt[f], &h, nullptr, (float *)bnorm[f].data, g_stream);
            dev_buf_download(&bnorm[f], &norm[f], 1);
        }
        snprintf(what, sizeof what, "step %d: norm-only {norm, coef}, bf16 = fp32", step);
        cmp_exact_f32(&cc, nc[1], nc[0], 2);
        snprintf(what, sizeof what, "step %d: grad norm, bf16 = fp32", step);
        cmp_exact_f32(&cc, &norm[1], &norm[0], 1);
        for (int i = 0; i < T; i++) {
            const int64_t n = sizes[i];
            /* form 1's array bitwise form 0's (written: poisoned before the step, must be written) */
            auto same = [&](struct dev_buf &want_b, struct dev_buf &got_b, const char *name, const char *dtype,
                            int written) {
                const size_t bytes = (size_t)n * (strcmp(dtype, "f32") == 0 ? 4 : 2);
                std::vector<unsigned char> got(bytes), want(bytes);
                dev_buf_download(&want_b, want.data(), written);
                dev_buf_download(&got_b, got.data(), written);
                snprintf(what, sizeof what, "tensor %d (n=%lld) step %d %s, bf16 = fp32", i, (long long)n, step, name);
                cc.dtype = dtype;
                cmp_exact_bytes(&cc, got.data(), want.data(), bytes);
            };
            form_bufs &fp = d[2 * i], &bf = d[2 * i + 1];
            if (split) same(fp.lo, bf.lo, "lo", "u16", 0);
            else if (!in_copy) same(fp.p, bf.p, "master", "f32", 0);
            if (in_copy || i % 2 == 0)
                same(fp.c, bf.c, in_copy && !split ? "bf16 weights" : "bf16 copy", "bf16", !in_copy);
            same(fp.m, bf.m, "m", "f32", 0);
            same(fp.v, bf.v, "v", "f32", 0);
            cc.dtype = "f32";
        }
    }
    for (int f = 0; f < 2; f++) {
        free_gpu_adamw(opt[f]);
        free_gpu_adamw(nrm[f]);
        dev_buf_free(&bnorm[f]);
    }
    for (form_bufs &b : d)
        for (struct dev_buf *x : {&b.p, &b.m, &b.v, &b.c, &b.lo, &b.g}) dev_buf_free(x);
}

struct bench_ctx {
    struct gpu_adamw *opt;
    struct optim_step h;
    float *norm;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    gpu_adamw_step(b->opt, &b->h, nullptr, b->norm, s);
}

static void bench(double ceiling) {
    /* Full fine-tuning of a 1B-sized parameter set (1.24e9 in 16 + 1 tensors would need 37 GB of
     * state; 0.25e9 elements keep the bench quick) and the LoRA set of Llama-3.2-1B r = 16. */
    struct set {
        const char *name;
        int count;
        int64_t n;
    } sets[] = {{"full-ft 64 x 4M", 64, (int64_t)4 << 20}, {"lora r16 1B: 112 x 16x2048..8192", 112, 16 * 4096}};
    for (int g16 = 0; g16 < 2; g16++)
    for (int split = 0; split < 2; split++)
    for (const set &st : sets) {
        if ((split || g16) && st.count != 64) continue; /* split masters, bf16 gradients: full fine-tuning */
        std::vector<struct gpu_adamw_param> ps(st.count);
        std::vector<void *> allocs;
        for (int i = 0; i < st.count; i++) {
            float *buf;
            uint16_t *copy;
            CUDA_CHECK(cudaMalloc(&buf, (size_t)st.n * 16));
            CUDA_CHECK(cudaMalloc(&copy, (size_t)st.n * 4));
            CUDA_CHECK(cudaMemset(buf, 0, (size_t)st.n * 16));
            CUDA_CHECK(cudaMemset(copy, 0, (size_t)st.n * 4));
            allocs.push_back(buf), allocs.push_back(copy);
            ps[i] = {split ? nullptr : buf, copy, buf + st.n, buf + 2 * st.n, g16 ? nullptr : buf + 3 * st.n,
                     g16 ? (const uint16_t *)(buf + 3 * st.n) : nullptr, st.n, 1, split ? copy + st.n : nullptr};
        }
        bench_ctx b;
        b.opt = build_gpu_adamw(ps.data(), st.count);
        b.h = {1, {1e-4, 0.9, 0.999, 1e-8, 0.01}, 1.0};
        CUDA_CHECK(cudaMalloc(&b.norm, 4));
        /* bytes: read p, m, v, g (16) + write p, m, v (12) + bf16 copy (2); the norm pass reads g
         * again; split masters read and write copy + lo (4 + 4) instead of p and the copy (4 + 6);
         * bf16 gradients read 2 bytes instead of 4, in both passes */
        const double total = (double)st.count * st.n, gb = g16 ? 2.0 : 4.0, per = (split ? 24.0 : 26.0) + gb;
        char op[48];
        snprintf(op, sizeof op, "adamw_step_clip%s%s", split ? "_split" : "", g16 ? "_bf16grad" : "");
        bench_json(op, st.name, (per + gb) * total, 0, bench_time(bench_call, &b, g_stream, 3, 15, 3), ceiling);
        b.h.clip = 0;
        CUDA_CHECK(cudaFree(b.norm));
        b.norm = nullptr;
        snprintf(op, sizeof op, "adamw_step_noclip%s%s", split ? "_split" : "", g16 ? "_bf16grad" : "");
        bench_json(op, st.name, per * total, 0, bench_time(bench_call, &b, g_stream, 3, 15, 3), ceiling);
        free_gpu_adamw(b.opt);
        for (void *p : allocs) CUDA_CHECK(cudaFree(p));
    }
}

/* The three tensors of the guard cases: host state (master N(0, 1), m N(0, 0.1), v 0.01·(j % 7 + 1),
 * gradient N(0, 1), value bad planted in the middle of tensor 1's gradient when bad_at_1) and its
 * device copies; the bf16 copies hold bf16(master) when copy_master, else poison. bf16_weights: the
 * masters rounded to bf16 and the optimizer given the copies alone (master_bf16 = bf16_weights: 1
 * bf16 weights, 2 bf16-sr weights, tensor i's stream (kSrSeed, sr_tensor_of(i)); copy_master
 * implied). params is the optimizer's view, norm_only a view with the gradients alone. */
struct guard_set {
    std::vector<host_tensor> ts;
    std::vector<std::vector<uint16_t>> copies;
    std::vector<struct dev_buf> bp, bm, bv, bg, bc;
    std::vector<struct gpu_adamw_param> params, norm_only;
    int bf16_weights;
};

static void guard_set_build(guard_set &gs, uint64_t seed, int bad_at_1, float bad, int copy_master,
                            int bf16_weights = 0) {
    const std::vector<int64_t> sizes = {8193, 100, 3};
    const int T = (int)sizes.size();
    struct rng r;
    rng_init(&r, seed);
    copy_master = copy_master || bf16_weights;
    gs.bf16_weights = bf16_weights;
    gs.ts.resize(T), gs.copies.resize(T), gs.params.resize(T), gs.norm_only.resize(T);
    gs.bp.resize(T), gs.bm.resize(T), gs.bv.resize(T), gs.bg.resize(T), gs.bc.resize(T);
    for (int i = 0; i < T; i++) {
        host_tensor &t = gs.ts[i];
        t.n = sizes[i];
        t.p.resize(t.n), t.m.resize(t.n), t.v.resize(t.n), t.g.resize(t.n);
        rng_fill_normal(&r, t.p.data(), t.n, 0.0, 1.0);
        if (bf16_weights) bf16_round_array(t.p.data(), t.p.data(), t.n);
        rng_fill_normal(&r, t.m.data(), t.n, 0.0, 0.1);
        for (int64_t j = 0; j < t.n; j++) t.v[j] = 0.01f * (float)(j % 7 + 1);
        rng_fill_normal(&r, t.g.data(), t.n, 0.0, 1.0);
        if (bad_at_1 && i == 1) t.g[t.n / 2] = bad;
        if (copy_master) gs.copies[i] = bits_of(t.p);
        const size_t b4 = (size_t)t.n * 4;
        dev_buf_alloc(&gs.bp[i], "master", b4, POISON_NONE, t.p.data());
        dev_buf_alloc(&gs.bm[i], "m", b4, POISON_NONE, t.m.data());
        dev_buf_alloc(&gs.bv[i], "v", b4, POISON_NONE, t.v.data());
        dev_buf_alloc(&gs.bg[i], "grad", b4, POISON_NONE, t.g.data());
        dev_buf_alloc(&gs.bc[i], "copy", (size_t)t.n * 2, copy_master ? POISON_NONE : POISON_BF16,
                      copy_master ? gs.copies[i].data() : nullptr);
        gs.params[i] = {bf16_weights ? nullptr : (float *)gs.bp[i].data, (uint16_t *)gs.bc[i].data,
                        (float *)gs.bm[i].data, (float *)gs.bv[i].data, (const float *)gs.bg[i].data, nullptr, t.n, 1,
                        nullptr, bf16_weights, kSrSeed, sr_tensor_of(i)};
        gs.norm_only[i] = {nullptr, nullptr, nullptr, nullptr, (const float *)gs.bg[i].data, nullptr, t.n, 1};
    }
}

/* Every master, m and v (and, with check_copy or bf16 weights, bf16 copy) still as built, bit for bit. */
static void guard_set_expect_unchanged(guard_set &gs, struct cmp_case &cc, int check_copy) {
    check_copy = check_copy || gs.bf16_weights;
    char what[96];
    cc.what = what;
    for (size_t i = 0; i < gs.ts.size(); i++) {
        host_tensor &t = gs.ts[i];
        std::vector<float> p(t.n), m(t.n), v(t.n);
        dev_buf_download(&gs.bp[i], p.data(), 0);
        dev_buf_download(&gs.bm[i], m.data(), 0);
        dev_buf_download(&gs.bv[i], v.data(), 0);
        snprintf(what, sizeof what, "tensor %d unchanged: master, m, v", (int)i);
        cmp_exact_f32(&cc, p.data(), t.p.data(), t.n);
        cmp_exact_f32(&cc, m.data(), t.m.data(), t.n);
        cmp_exact_f32(&cc, v.data(), t.v.data(), t.n);
        if (!check_copy) continue;
        std::vector<uint16_t> c(t.n);
        dev_buf_download(&gs.bc[i], c.data(), 0);
        snprintf(what, sizeof what, "tensor %d unchanged: bf16 copy", (int)i);
        cc.dtype = "bf16";
        cmp_exact_bytes(&cc, c.data(), gs.copies[i].data(), (size_t)t.n * 2);
        cc.dtype = "f32";
    }
}

/* Tensor 0's master (bf16 weights: its copy) moved: a step that should go through did. */
static int guard_set_master0_changed(guard_set &gs) {
    if (gs.bf16_weights) {
        std::vector<uint16_t> c(gs.ts[0].n);
        dev_buf_download(&gs.bc[0], c.data(), 0);
        return memcmp(c.data(), gs.copies[0].data(), (size_t)gs.ts[0].n * 2) != 0;
    }
    std::vector<float> p(gs.ts[0].n);
    dev_buf_download(&gs.bp[0], p.data(), 0);
    return memcmp(p.data(), gs.ts[0].p.data(), (size_t)gs.ts[0].n * 4) != 0;
}

static void guard_set_free(guard_set &gs) {
    for (size_t i = 0; i < gs.ts.size(); i++)
        for (struct dev_buf *b : {&gs.bp[i], &gs.bm[i], &gs.bv[i], &gs.bg[i], &gs.bc[i]}) dev_buf_free(b);
}

/* A non-finite gradient anywhere: the norm comes out non-finite and no tensor changes (with and
 * without clipping: the guard is the norm, computed whenever it is asked for). And a context built
 * without optimizer state computes the same norm (gpu_adamw_grad_norm only). bf16_weights: the
 * tensors as bf16 weights (guard_set; 2: bf16-sr weights), whose copies stay as they were. */
static void run_nonfinite(double max_norm, float bad, int bf16_weights = 0) {
    char shape[96];
    snprintf(shape, sizeof shape, "3 tensors, gradient %g in tensor 1, max_norm=%g%s", (double)bad, max_norm,
             bf16_weights == 2 ? ", bf16-sr weights" : bf16_weights ? ", bf16 weights" : "");
    guard_set gs;
    guard_set_build(gs, g_seed * 7u + 11u, 1, bad, 0, bf16_weights);
    const int T = (int)gs.ts.size();
    struct gpu_adamw *opt = build_gpu_adamw(gs.params.data(), T), *nrm = build_gpu_adamw(gs.norm_only.data(), T);
    struct dev_buf bnorm, bnorm2;
    dev_buf_alloc(&bnorm, "grad_norm", 4, POISON_F32, nullptr);
    dev_buf_alloc(&bnorm2, "grad_norm (norm only)", 4, POISON_F32, nullptr);
    const struct optim_step h = {1, {1e-3, 0.9, 0.999, 1e-8, 0.01}, max_norm};
    gpu_adamw_step(opt, &h, nullptr, (float *)bnorm.data, g_stream);
    gpu_adamw_grad_norm(nrm, (float *)bnorm2.data, g_stream);
    float norm = 0, norm2 = 0;
    dev_buf_download(&bnorm, &norm, 1);
    dev_buf_download(&bnorm2, &norm2, 1);
    EXPECT(!isfinite(norm), "adamw %s: the norm is %g, not non-finite", shape, (double)norm);
    EXPECT(memcmp(&norm, &norm2, 4) == 0 || (isnan(norm) && isnan(norm2)),
           "adamw %s: the norm-only context gives %g, the optimizer %g", shape, (double)norm2, (double)norm);
    struct cmp_case cc = {"adamw", "", shape, "f32", g_seed};
    guard_set_expect_unchanged(gs, cc, 0);
    /* the same context on finite gradients still updates (the guard lets finite steps through) */
    gs.ts[1].g[gs.ts[1].n / 2] = 0.5f;
    dev_buf_reset(&gs.bg[1], gs.ts[1].g.data());
    gpu_adamw_step(opt, &h, nullptr, (float *)bnorm.data, g_stream);
    EXPECT(guard_set_master0_changed(gs), "adamw %s: a finite step after the refused one changed nothing", shape);
    free_gpu_adamw(opt);
    free_gpu_adamw(nrm);
    guard_set_free(gs);
    dev_buf_free(&bnorm);
    dev_buf_free(&bnorm2);
}

/* The guard scalar non-finite (bad: NaN or +Inf), the gradients finite: no master, m, v or bf16 copy
 * changes, bit for bit (the copies are set to bf16(master) beforehand, so that a write would show),
 * with clipping and grad_norm asked for or neither; the grad_norm asked for is still written, the
 * norm of the gradients. Then the same step with a finite guard goes through. bf16_weights: the
 * tensors as bf16 weights (guard_set; 2: bf16-sr weights). */
static void run_guard(double bad, double max_norm, int want_norm, int bf16_weights = 0) {
    char shape[128];
    snprintf(shape, sizeof shape, "3 tensors, guard %g, max_norm=%g, grad_norm %s%s", bad, max_norm,
             want_norm ? "asked" : "not asked",
             bf16_weights == 2 ? ", bf16-sr weights" : bf16_weights ? ", bf16 weights" : "");
    guard_set gs;
    guard_set_build(gs, g_seed * 7u + 13u, 0, 0.0f, 1, bf16_weights);
    const int T = (int)gs.ts.size();
    struct gpu_adamw *opt = build_gpu_adamw(gs.params.data(), T);
    struct dev_buf bnorm, bguard;
    dev_buf_alloc(&bnorm, "grad_norm", 4, POISON_F32, nullptr);
    dev_buf_alloc(&bguard, "guard", sizeof(double), POISON_NONE, &bad);
    const struct optim_step h = {1, {1e-3, 0.9, 0.999, 1e-8, 0.01}, max_norm};
    const double *guard = (const double *)bguard.data;
    gpu_adamw_step(opt, &h, guard, want_norm ? (float *)bnorm.data : nullptr, g_stream);
    struct cmp_case cc = {"adamw", "", shape, "f32", g_seed};
    if (want_norm) {
        std::vector<const float *> gv;
        std::vector<int64_t> ns;
        for (host_tensor &t : gs.ts) gv.push_back(t.g.data()), ns.push_back(t.n);
        const float norm_r = ref_grad_total_norm(gv.data(), ns.data(), T);
        float norm = 0;
        dev_buf_download(&bnorm, &norm, 1); /* a norm left unwritten is reported here */
        cc.what = "grad norm, written although the guard refused the step";
        cmp_elementwise(&cc, &norm, &norm_r, 1, FLT_EPSILON, 12.0, 0.0, nullptr);
    }
    guard_set_expect_unchanged(gs, cc, 1);
    /* the same step with a finite guard goes through */
    const double fine = 3.5;
    dev_buf_reset(&bguard, &fine);
    gpu_adamw_step(opt, &h, guard, want_norm ? (float *)bnorm.data : nullptr, g_stream);
    EXPECT(guard_set_master0_changed(gs),
           "adamw %s: the step with a finite guard after the refused one changed nothing", shape);
    free_gpu_adamw(opt);
    guard_set_free(gs);
    dev_buf_free(&bnorm);
    dev_buf_free(&bguard);
}

/* {norm, coef} at the device pointer gpu_adamw_norm_and_coef returns, read on the host. */
static void read_norm_coef(const float *d, float out[2]) {
    CUDA_CHECK(cudaMemcpyAsync(out, d, 2 * sizeof(float), cudaMemcpyDeviceToHost, g_stream));
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
}

/* gpu_adamw_norm_and_coef against gpu_adamw_step's grad_norm and ref_clip_coef, for max_norm 0 and
 * −1 (coefficient exactly 1), half the norm (clips) and twice the norm (does not), from the
 * optimizer's context and from a norm-only one over the same gradients. The steps in between change
 * the state, not the gradients: the norm stays the same. */
static void run_norm_and_coef(void) {
    const std::vector<int64_t> sizes = {8193, 100000, 7};
    const int T = (int)sizes.size();
    struct rng r;
    rng_init(&r, g_seed * 7u + 17u);
    std::vector<host_tensor> ts(T);
    std::vector<struct dev_buf> bp(T), bm(T), bv(T), bg(T);
    std::vector<struct gpu_adamw_param> params(T), norm_only(T);
    for (int i = 0; i < T; i++) {
        host_tensor &t = ts[i];
        t.n = sizes[i];
        t.p.resize(t.n), t.m.assign(t.n, 0.0f), t.v.assign(t.n, 0.0f), t.g.resize(t.n);
        rng_fill_normal(&r, t.p.data(), t.n, 0.0, 1.0);
        rng_fill_normal(&r, t.g.data(), t.n, 0.0, i % 2 ? 0.01 : 1.0);
        const size_t b4 = (size_t)t.n * 4;
        dev_buf_alloc(&bp[i], "master", b4, POISON_NONE, t.p.data());
        dev_buf_alloc(&bm[i], "m", b4, POISON_NONE, t.m.data());
        dev_buf_alloc(&bv[i], "v", b4, POISON_NONE, t.v.data());
        dev_buf_alloc(&bg[i], "grad", b4, POISON_NONE, t.g.data());
        params[i] = {(float *)bp[i].data, nullptr, (float *)bm[i].data, (float *)bv[i].data, (const float *)bg[i].data,
                     nullptr, t.n, 1};
        norm_only[i] = {nullptr, nullptr, nullptr, nullptr, (const float *)bg[i].data, nullptr, t.n, 1};
    }
    struct gpu_adamw *opt = build_gpu_adamw(params.data(), T), *nrm = build_gpu_adamw(norm_only.data(), T);
    struct dev_buf bnorm;
    dev_buf_alloc(&bnorm, "grad_norm", 4, POISON_F32, nullptr);
    float nc0[2];
    read_norm_coef(gpu_adamw_norm_and_coef(nrm, 0.0, g_stream), nc0);
    const double max_norms[] = {0.0, -1.0, 0.5 * (double)nc0[0], 2.0 * (double)nc0[0]};
    int step = 0;
    for (double max_norm : max_norms) {
        char shape[96], what[96];
        snprintf(shape, sizeof shape, "3 tensors, max_norm=%g", max_norm);
        struct cmp_case cc = {"adamw_norm_and_coef", what, shape, "f32", g_seed};
        float nc[2], nc_only[2], norm_step = 0;
        read_norm_coef(gpu_adamw_norm_and_coef(opt, max_norm, g_stream), nc);
        read_norm_coef(gpu_adamw_norm_and_coef(nrm, max_norm, g_stream), nc_only);
        dev_buf_reset(&bnorm, nullptr);
        const struct optim_step h = {++step, {1e-3, 0.9, 0.999, 1e-8, 0.01}, max_norm};
        gpu_adamw_step(opt, &h, nullptr, (float *)bnorm.data, g_stream);
        dev_buf_download(&bnorm, &norm_step, 1);
        EXPECT(isfinite(nc[0]) && nc[0] > 0, "adamw_norm_and_coef %s: norm %g", shape, (double)nc[0]);
        snprintf(what, sizeof what, "norm = gpu_adamw_step's grad_norm (step %d)", step);
        cmp_exact_f32(&cc, &nc[0], &norm_step, 1);
        snprintf(what, sizeof what, "norm-only context: norm, coef");
        cmp_exact_f32(&cc, nc_only, nc, 2);
        const float coef_r = max_norm > 0 ? ref_clip_coef(nc[0], max_norm) : 1.0f;
        snprintf(what, sizeof what, "coef = %s", max_norm > 0 ? "ref_clip_coef(norm, max_norm)" : "1");
        cmp_exact_f32(&cc, &nc[1], &coef_r, 1);
        if (max_norm > 0)
            EXPECT((max_norm < nc[0]) == (nc[1] < 1.0f), "adamw_norm_and_coef %s: coef %.9g for norm %.9g", shape,
                   (double)nc[1], (double)nc[0]);
    }
    free_gpu_adamw(opt);
    free_gpu_adamw(nrm);
    for (int i = 0; i < T; i++)
        for (struct dev_buf *b : {&bp[i], &bm[i], &bv[i], &bg[i]}) dev_buf_free(b);
    dev_buf_free(&bnorm);
}

/* gpu_master_pair_split against ref/master_pair.h over n inputs (past 4096·256: the kernel's grid
 * stride): hi and lo master_pair_split_array's, bit for bit; with lo = NULL (bf16 weights) hi alone,
 * bf16_from_float of every input, bit for bit. Inputs in turn: random bit patterns (every exponent:
 * zeros, subnormals, NaNs, ±Inf, values past the largest bf16), ties (low half 0x8000, upper half
 * random: even and odd), normals, and a cycle of edge patterns (±0, ±Inf, NaNs, the largest finite
 * values and the ties next to them, ties at 1 and −1, subnormal ties). hi is poisoned and must be
 * written entirely (the poison 0x7FE5 is no bf16_from_float result); lo, whose values include the
 * poison pattern, is compared only. */
static void run_pair_split(int64_t n, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[64], what[96];
    snprintf(shape, sizeof shape, "n=%lld", (long long)n);
    struct cmp_case cc = {"master_pair_split", what, shape, "bf16", seed};
    static const uint32_t edge[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
                                    0x7F800001u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F7F8000u, 0x7F7E8000u, 0x7F7F7FFFu,
                                    0x3F808000u, 0x3F818000u, 0xBF808000u, 0xBF818000u, 0x00008000u, 0x00018000u,
                                    0x807F8000u, 0x00000001u};
    const int n_edge = (int)(sizeof edge / sizeof edge[0]);
    std::vector<uint32_t> u((size_t)n);
    for (int64_t j = 0; j < n; j++) {
        if (j % 4 == 0) u[j] = (uint32_t)rng_u64(&r);
        else if (j % 4 == 1) u[j] = ((uint32_t)rng_u64(&r) & 0xFFFF0000u) | 0x8000u;
        else if (j % 4 == 2) u[j] = ref_f32_bits((float)rng_normal(&r));
        else u[j] = edge[(j / 4) % n_edge];
    }
    std::vector<uint16_t> hi_r((size_t)n), lo_r((size_t)n), bf_r((size_t)n), hi((size_t)n), lo((size_t)n),
        hi1((size_t)n);
    for (int64_t j = 0; j < n; j++) {
        master_pair_split_bits(u[j], &hi_r[j], &lo_r[j]);
        bf_r[j] = bf16_from_float(ref_f32_from_bits(u[j]));
    }
    struct dev_buf bx, bhi, blo, bhi1;
    dev_buf_alloc(&bx, "x", (size_t)n * 4, POISON_NONE, u.data());
    dev_buf_alloc(&bhi, "hi", (size_t)n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&blo, "lo", (size_t)n * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bhi1, "hi (lo NULL)", (size_t)n * 2, POISON_BF16, nullptr);
    gpu_master_pair_split((uint16_t *)bhi.data, (uint16_t *)blo.data, (const float *)bx.data, n, g_stream);
    gpu_master_pair_split((uint16_t *)bhi1.data, nullptr, (const float *)bx.data, n, g_stream);
    dev_buf_download(&bhi, hi.data(), 1);
    dev_buf_download(&blo, lo.data(), 0);
    dev_buf_download(&bhi1, hi1.data(), 1);
    std::vector<uint32_t> x_after((size_t)n);
    dev_buf_download(&bx, x_after.data(), 0);
    snprintf(what, sizeof what, "hi = master_pair_split's");
    cmp_exact_bytes(&cc, hi.data(), hi_r.data(), (size_t)n * 2);
    snprintf(what, sizeof what, "lo = master_pair_split's");
    cc.dtype = "u16";
    cmp_exact_bytes(&cc, lo.data(), lo_r.data(), (size_t)n * 2);
    cc.dtype = "bf16";
    snprintf(what, sizeof what, "lo = NULL: hi = bf16_from_float(x)");
    cmp_exact_bytes(&cc, hi1.data(), bf_r.data(), (size_t)n * 2);
    snprintf(what, sizeof what, "lo = NULL: hi = the hi of the pair");
    cmp_exact_bytes(&cc, hi1.data(), hi.data(), (size_t)n * 2);
    snprintf(what, sizeof what, "x unchanged");
    cc.dtype = "f32";
    cmp_exact_bytes(&cc, x_after.data(), u.data(), (size_t)n * 4);
    for (struct dev_buf *b : {&bx, &bhi, &blo, &bhi1}) dev_buf_free(b);
}

/* Stochastic rounding keeps what rounding to nearest loses: bf16 weights in [1.25, 1.75] (one
 * binade: the bf16 neighbours of every weight are 2^-7 away), gradients N(0, 1), one step at
 * lr = 1e-4 without decay, so that every update Δ (|Δ| ≈ lr at t = 1) is under a quarter ulp (the
 * premise, checked on the reference). Two tensors in one optimizer: 65536 elements (vector path)
 * and 30001 (scalar path). bf16 weights: every weight as it was, bit for bit. bf16-sr weights: the
 * reference's fp32 results rounded by bf16_sr_round_array (kSrSeed, step 1, sr_tensor_of(i)), bit
 * for bit; some weights moved, each by exactly one ulp in the direction of its Δ; and the number
 * moved within 6σ + 1 of its expectation Σ|Δ|/ulp (each moves with probability |Δ|/ulp, Δ the
 * fp32 result minus the weight). */
static void run_sr_small_updates(int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const std::vector<int64_t> sizes = {65536, 30001};
    const int T = (int)sizes.size();
    const double ulp = 0x1p-7;
    const struct optim_step h = {1, {1e-4, 0.9, 0.999, 1e-8, 0.0}, 0.0};
    std::vector<host_tensor> ts(T);
    std::vector<std::vector<float>> x(T); /* the reference's fp32 results, unrounded */
    for (int i = 0; i < T; i++) {
        host_tensor &t = ts[i];
        t.n = sizes[i], t.decay = 0, t.has_copy = 1;
        t.p.resize(t.n), t.m.assign(t.n, 0.0f), t.v.assign(t.n, 0.0f), t.g.resize(t.n);
        rng_fill_uniform(&r, t.p.data(), t.n, 1.25, 1.75);
        bf16_round_array(t.p.data(), t.p.data(), t.n);
        rng_fill_normal(&r, t.g.data(), t.n, 0.0, 1.0);
        host_tensor u = t;
        oracle_step(u, h);
        x[i] = u.p;
        double dmax = 0;
        for (int64_t j = 0; j < t.n; j++) dmax = fmax(dmax, fabs((double)x[i][j] - (double)t.p[j]));
        EXPECT(dmax > 0 && dmax < ulp / 4, "adamw bf16-sr small updates: tensor %d's largest update %g, not in (0, %g)",
               i, dmax, ulp / 4);
    }
    for (enum master_storage ms : {MASTER_BF16, MASTER_BF16_SR}) {
        char shape[128], what[128];
        snprintf(shape, sizeof shape, "2 tensors (n=65536, 30001), weights in [1.25, 1.75], lr=1e-4, step 1%s",
                 master_label(ms));
        struct cmp_case cc = {"adamw", what, shape, "bf16", seed};
        std::vector<struct dev_buf> bm(T), bv(T), bg(T), bc(T);
        std::vector<struct gpu_adamw_param> params(T);
        for (int i = 0; i < T; i++) {
            host_tensor &t = ts[i];
            const size_t b4 = (size_t)t.n * 4;
            dev_buf_alloc(&bm[i], "m", b4, POISON_NONE, t.m.data());
            dev_buf_alloc(&bv[i], "v", b4, POISON_NONE, t.v.data());
            dev_buf_alloc(&bg[i], "grad", b4, POISON_NONE, t.g.data());
            dev_buf_alloc(&bc[i], "copy", (size_t)t.n * 2, POISON_NONE, bits_of(t.p).data());
            params[i] = {nullptr, (uint16_t *)bc[i].data, (float *)bm[i].data, (float *)bv[i].data,
                         (const float *)bg[i].data, nullptr, t.n, 0, nullptr, gpu_adamw_master_bf16(ms), kSrSeed,
                         sr_tensor_of(i)};
        }
        struct gpu_adamw *opt = build_gpu_adamw(params.data(), T);
        gpu_adamw_step(opt, &h, nullptr, nullptr, g_stream);
        for (int i = 0; i < T; i++) {
            const host_tensor &t = ts[i];
            std::vector<uint16_t> c(t.n);
            dev_buf_download(&bc[i], c.data(), 0);
            const std::vector<float> got = floats_of(c);
            std::vector<float> want = x[i];
            master_round_array(want.data(), t.n, ms, h.step, sr_tensor_of(i));
            snprintf(what, sizeof what, "tensor %d (n=%lld): the weights = the reference's, rounded", i,
                     (long long)t.n);
            cmp_exact_f32(&cc, got.data(), want.data(), t.n);
            if (ms == MASTER_BF16) {
                snprintf(what, sizeof what, "tensor %d (n=%lld): every weight as it was", i, (long long)t.n);
                cmp_exact_bytes(&cc, c.data(), bits_of(t.p).data(), (size_t)t.n * 2);
                continue;
            }
            int64_t moved = 0, wrong = 0, first_wrong = -1;
            double expect = 0;
            for (int64_t j = 0; j < t.n; j++) {
                const double d = (double)x[i][j] - (double)t.p[j];
                expect += fabs(d) / ulp;
                if (got[j] == t.p[j]) continue;
                moved++;
                if ((double)got[j] - (double)t.p[j] != (d > 0 ? ulp : -ulp)) {
                    if (first_wrong < 0) first_wrong = j;
                    wrong++;
                }
            }
            EXPECT(wrong == 0,
                   "adamw %s: tensor %d: %lld weights moved other than one ulp toward their update (first at %lld)",
                   shape, i, (long long)wrong, (long long)first_wrong);
            EXPECT(moved > 0 && fabs((double)moved - expect) <= 6.0 * sqrt(expect) + 1.0,
                   "adamw %s: tensor %d: %lld weights moved, %.1f expected (6 sigma: %.1f)", shape, i,
                   (long long)moved, expect, 6.0 * sqrt(expect));
        }
        free_gpu_adamw(opt);
        for (int i = 0; i < T; i++)
            for (struct dev_buf *b : {&bm[i], &bv[i], &bg[i], &bc[i]}) dev_buf_free(b);
    }
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261128);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    const std::vector<int64_t> edges = {1, 7, 8191, 8192, 8193, 100000};
    const std::vector<int64_t> lora = {16 * 2048, 2048 * 16, 16 * 2048, 512 * 16, 16 * 8192, 8192 * 16};
    run_optimizer(edges, 0.0, 0);
    run_optimizer(edges, 1.0, 1);
    run_optimizer(lora, 0.0, 2);
    run_optimizer(lora, 0.5, 3);
    run_optimizer(edges, 0.0, 4, 1);
    run_optimizer(lora, 0.5, 5, 1);
    run_optimizer(edges, 0.0, 6, 0, MASTER_SPLIT);
    run_optimizer(lora, 0.5, 7, 0, MASTER_SPLIT);
    run_nonfinite(0.0, NAN);
    run_nonfinite(1.0, INFINITY);
    run_guard(NAN, 1.0, 1);
    run_guard(INFINITY, 0.0, 1);
    run_guard(NAN, 0.0, 0);
    run_guard(INFINITY, 1.0, 0);
    run_norm_and_coef();
    const std::vector<int64_t> pieces = {1, 7, 8191, 8192, 8193, 3 * 8192 + 5, 100000, 640};
    run_sharded(pieces, 0.0, 2, 6);
    run_sharded(pieces, 1.0, 3, 7);
    run_sharded(lora, 0.5, 5, 8);
    /* bf16 gradients: bitwise the fp32 form on the widened values (plain, clipped, split masters) */
    run_bf16_grads(pieces, 0.0, MASTER_FP32, 9);
    run_bf16_grads(pieces, 1.0, MASTER_FP32, 10);
    run_bf16_grads(lora, 0.5, MASTER_FP32, 11);
    run_bf16_grads(pieces, 0.0, MASTER_SPLIT, 12);
    run_bf16_grads(pieces, 1.0, MASTER_SPLIT, 13);
    run_sharded(pieces, 1.0, 3, 14, 1);
    run_sharded(lora, 0.0, 2, 15, 1);
    run_bf16_grads(pieces, 1.0, MASTER_FP32, 16, 1); /* bf16 and fp32 gradients in one optimizer */
    run_bf16_grads(pieces, 0.0, MASTER_SPLIT, 17, 1);
    /* bf16 weights (no master: the copy is the weight): against the reference rounded to bf16
     * (unclipped bitwise; clipped, with the finite guard), bf16 gradients bitwise fp32 ones, the
     * non-finite gradient and guard cases */
    run_optimizer(edges, 0.0, 18, 0, MASTER_BF16);
    run_optimizer(edges, 1.0, 19, 1, MASTER_BF16);
    run_optimizer(lora, 0.0, 20, 0, MASTER_BF16);
    run_optimizer(lora, 0.5, 21, 0, MASTER_BF16);
    run_bf16_grads(pieces, 0.0, MASTER_BF16, 22);
    run_bf16_grads(pieces, 1.0, MASTER_BF16, 23);
    run_bf16_grads(pieces, 0.0, MASTER_BF16, 24, 1);
    run_nonfinite(0.0, NAN, 1);
    run_nonfinite(1.0, INFINITY, 1);
    run_guard(NAN, 1.0, 1, 1);
    run_guard(INFINITY, 0.0, 0, 1);
    run_pair_split(5003, 25);
    run_pair_split((int64_t)4096 * 256 + 4099, 26);
    /* bf16-sr weights (the copy is the weight, rounded stochastically): against the reference
     * rounded by bf16_sr_round_array, a stream per tensor (unclipped bitwise on the vector and
     * scalar paths; clipped, with the finite guard), bf16 gradients bitwise fp32 ones, the
     * non-finite gradient and guard cases; and updates under half an ulp: lost to RNE, kept by SR */
    run_optimizer(edges, 0.0, 27, 0, MASTER_BF16_SR);
    run_optimizer(edges, 1.0, 28, 1, MASTER_BF16_SR);
    run_optimizer(lora, 0.0, 29, 0, MASTER_BF16_SR);
    run_optimizer(lora, 0.5, 30, 0, MASTER_BF16_SR);
    run_bf16_grads(pieces, 0.0, MASTER_BF16_SR, 31);
    run_bf16_grads(pieces, 1.0, MASTER_BF16_SR, 32, 1);
    run_nonfinite(1.0, NAN, 2);
    run_guard(INFINITY, 1.0, 1, 2);
    run_sr_small_updates(33);
    const int rc = test_finish("adamw_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench(bench_copy_ceiling(g_stream));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
