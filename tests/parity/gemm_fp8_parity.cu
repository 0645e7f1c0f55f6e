/* gemm_fp8_parity.cu — gpu/gemm's FP8 path (cuBLASLt FP8 matmul) against ref/fp8's scaled GEMM;
 * the measurement of how the GPU accumulates FP8 products; FP8 against bf16 rates.
 *
 *   bazel test --config=gpu //tests/parity:gemm_fp8_parity
 *   gemm_fp8_parity [--seed=N] [--probe] [--bench]
 *
 * (a) Exact cases. Integer codes (E4M3 and E5M2 hold every integer up to 16 and 8) with |value| ≤
 *     vmax chosen so that K·vmax² ≤ 2^10: every product and partial sum is an integer below 2^11,
 *     exact in any accumulator that keeps ≥ 10 bits below its leading one (the measurement below
 *     must find at least that, or the run fails), and power-of-two scales keep them exact. So D
 *     must equal ref_fp8_gemm_scaled bit for bit (bf16 D: one rounding of that exact value on
 *     both sides; with a bias or beta = 1 the values are kept ≤ 256, exact in bf16, so where the
 *     epilogue rounds cannot matter). Covered: E4M3×E4M3, E5M2×E4M3, E4M3×E5M2; precise and fast
 *     accumulation; bf16 and fp32 D; per-tensor scales and NULL (= 1); alpha 2; beta = 1; bias;
 *     AMAX_D (where cuBLASLt accepts it with a bf16/fp32 D); the 1×128 / 128×128 block scale modes
 *     in every combination cuBLASLt runs (power-of-two block scales, K a multiple of 128 and not);
 *     the three typed linear products; determinism; and, in child processes, that the
 *     preconditions stop the program with CHECK's status (not TN, a dimension not a multiple of
 *     16, E5M2×E5M2, a misaligned scale pointer, FP8 fields on a bf16 product).
 * (b) The accumulation measurement (run every time, printed in full with --probe). One GEMM per
 *     accumulation mode (precise, fast, block-scaled), 2048×2048×4096, carries one experiment per
 *     diagonal element D[i][i] = Σ_k A[i,k]·B[i,k]:
 *       bits(d): a product 2^16 at k = 0 and one product 2^(16−g) at k = d, g = 1 .. 34; bits(d)
 *         is the largest g for which D = 2^16 + 2^(16−g) exactly (23 = all an fp32 result can
 *         hold). d sweeps 1 .. 4095 across the tensor-core instruction (k = 32), the tile and the
 *         promotion boundaries: the smallest d from which bits(d) = 23 is the promotion interval
 *         I (∞ when never), and p = min bits(d) over d < I the accumulator's fraction bits;
 *       group: +2^16 at k = 0, −2^16 at k = 1, 2^-14 at k = d: the small term survives only when
 *         it is added after the two large ones cancelled, so the smallest such d is the number of
 *         products the hardware aligns together (g);
 *       rounding: 2^16 ± 0.75 of the last kept bit at k = 1: the result says whether the dropped
 *         bits are truncated or rounded.
 *     --probe adds the error growth with K on random signed inputs (max and rms of |D − exact| /
 *     Σ|a·b| on 2048 sampled elements, K = 256 .. 16384) next to the same numbers for the model
 *     below, the block scale modes cuBLASLt runs (every combination, E4M3 and E5M2, with and
 *     without fast accumulation) and, when a block mode runs but disagrees, which scale layout it
 *     reads. cuBLASLt's algorithm (tile, split-K) is printed with each measurement.
 * (c) Random cases, tolerance derived from (b) (STYLE.md tier c): the naive same-precision
 *     implementation is the MODEL of the measured accumulator — products exact; each group of g
 *     consecutive products aligned with the running sum to the largest exponent E among them and
 *     each term truncated to a multiple of 2^(E−p) (pessimistic: truncation, per term; per output
 *     the worse of g = the measured group and g = 32, one instruction's products, since the
 *     measurement bounds the group only from below); the sum
 *     added into an fp32 accumulator (round to nearest) every I products (block scaling: every
 *     128, times the block's scales); the scales and alpha applied in fp32. The GPU's max and rms
 *     error against the exact value (double) must be at most 2× the model's, plus a floor for the
 *     fp32 operations whose order is unknown ((K/128 + 4)·FLT_EPSILON·max Σ|σa·σb·a·b|). A bf16 D
 *     compares with the model's result rounded to bf16. Inputs: normals with a per-row magnitude
 *     (e^±2), quantized by current scaling (per tensor) or block quantization; 2048 sampled
 *     outputs per case.
 * (e) Tuning (gpu_gemm_set_tuning): the FP8 products the trainers run at Llama-3.2-1B's, SmolLM2's
 *     and Llama-3.1-8B's shapes — forward E4M3 × E4M3 with fast accumulation, dx and dW E5M2 × E4M3
 *     precise, fp32 and bf16 dW accumulating, the block-scaled forward and dW — through a tuning
 *     context and one that keeps the heuristic's first algorithm: the same bits (the algorithm each
 *     chose is printed).
 * The operands, the measurement and the model are in gemm_fp8_accum.h (its reading of the
 * experiments is tested on the CPU by gemm_fp8_accum_test).
 * (d) --bench: TFLOP/s of bf16 (the products the bf16 trainer runs) and FP8 (per-tensor precise,
 *     per-tensor with fast forward accumulation — TE's default —, block-scaled) at 8192³ and at
 *     every linear of Llama-3.2-1B and Llama-3.1-8B (N = 8192 rows: forward, dx, dW), with the
 *     summed time of each model's linears in each precision and the FP8/bf16 speed-up.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/gemm.h"
#include "io/check.h"
#include "ref/bf16.h"
#include "ref/fp8.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"
#include "tests/parity/gemm_fp8_accum.h"
#include "tests/parity/parity.h"

static uint64_t g_seed;
static cudaStream_t g_stream;
static struct gpu_gemm *g_gemm;
static int g_probe;

/* ---- (a) exact cases ---- */

struct exact_case {
    int m, n, k;
    gemm_dtype ta, tb;
    gemm_scale ma, mb;
    gemm_accum accum;
    gemm_out out;
    gemm_beta beta;
    int bias, amax, null_scales;
    float alpha;
};

static int g_block_runs = 0, g_block_refused = 0;

static void run_exact(const exact_case &c, int id) {
    const uint64_t seed = g_seed * 1000003u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const bool small_out = c.out == GEMM_OUT_BF16 && (c.bias || c.beta == GEMM_ACCUMULATE || c.amax);
    const bool blocks = c.ma != GEMM_SCALE_TENSOR || c.mb != GEMM_SCALE_TENSOR;
    /* K·vmax² ≤ 2^10 (per 128-block under block scaling); values ≤ 256 where a bf16 epilogue adds */
    const int kk = blocks ? std::min(c.k, 128) : c.k;
    int vmax = (int)floor(sqrt(1024.0 / kk));
    vmax = std::max(1, std::min(8, small_out ? 1 : vmax));
    operand A, B;
    make_int_operand(A, c.m, c.k, c.ta, c.ma, vmax, -1, &r);
    make_int_operand(B, c.n, c.k, c.tb, c.mb, vmax, small_out ? 0 : 2, &r);
    A.upload("A"), B.upload("B");
    product pr;
    pr.out = c.out, pr.beta = c.beta, pr.accum = c.accum, pr.alpha = c.alpha, pr.want_amax = c.amax;
    pr.null_scales = c.null_scales;
    if (c.beta == GEMM_ACCUMULATE) {
        pr.c.resize((size_t)c.m * c.n);
        rng_fill_int(&r, pr.c.data(), (int64_t)pr.c.size(), small_out ? -64 : -1000, small_out ? 64 : 1000);
    }
    if (c.bias) {
        pr.bias.resize((size_t)c.n);
        rng_fill_int(&r, pr.bias.data(), c.n, -64, 64);
    }
    char shape[192];
    snprintf(shape, sizeof shape, "m=%d n=%d k=%d A=%s/%s B=%s/%s %s D=%s%s%s%s alpha=%g%s", c.m, c.n, c.k, tname(c.ta),
             sname(c.ma), tname(c.tb), sname(c.mb), c.accum == GEMM_ACCUM_FAST ? "fast" : "precise",
             c.out == GEMM_OUT_F32 ? "f32" : "bf16", c.bias ? " bias" : "", c.beta == GEMM_ACCUMULATE ? " accumulate" : "",
             c.amax ? " amax_d" : "", (double)c.alpha, c.null_scales ? " scales NULL" : "");
    std::vector<float> got;
    const gemm_status st = run_product(g_gemm, g_stream, pr, A, B, got);
    if (blocks || c.amax) {
        if (st != GEMM_OK) {
            printf("  not run by cuBLASLt (%s): %s\n", st == GEMM_NO_ALGORITHM ? "no algorithm" : "refused", shape);
            g_block_refused += blocks;
            A.release(), B.release();
            return;
        }
        g_block_runs += blocks;
    }
    EXPECT(st == GEMM_OK, "gemm FP8 %s: cuBLASLt did not run a per-tensor FP8 product (status %d)", shape, (int)st);
    if (st == GEMM_OK) {
        const std::vector<float> want = exact_product(pr, A, B);
        struct cmp_case cc = {"gemm_fp8", "D (integer inputs, exact)", shape, c.out == GEMM_OUT_F32 ? "f32" : "bf16", seed};
        cmp_exact_f32(&cc, got.data(), want.data(), (int64_t)want.size());
        if (c.amax) { /* max|D| of the fp32 result before D's rounding: exact here */
            std::vector<float> acc = want;
            product pf = pr;
            pf.out = GEMM_OUT_F32;
            acc = exact_product(pf, A, B);
            float am = 0;
            for (float v : acc) am = fmaxf(am, fabsf(v));
            cc.what = "AMAX_D";
            cmp_exact_f32(&cc, &pr.amax, &am, 1);
        }
        if (id % 5 == 0) { /* determinism */
            std::vector<float> again;
            product p2 = pr;
            run_product(g_gemm, g_stream, p2, A, B, again);
            cc.what = "D determinism";
            cmp_exact_bytes(&cc, again.data(), got.data(), got.size() * 4);
        }
    }
    A.release(), B.release();
}

/* The three typed linear products on integer inputs: each against the scaled reference GEMM of its
 * K-major operands (W_t, dy_t, x_t built here by transposition: fp8_parity covers the kernel that
 * writes them). */
static void run_linear_exact(int N, int C_in, int C_out, int id) {
    const uint64_t seed = g_seed * 1000003u + 700000u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C_in=%d C_out=%d", N, C_in, C_out);
    const int kmax = std::max(std::max(C_in, C_out), N);
    const int vmax = std::max(1, std::min(8, (int)floor(sqrt(1024.0 / kmax))));
    operand x, w, dy;
    make_int_operand(x, N, C_in, GEMM_E4M3, GEMM_SCALE_TENSOR, vmax, -1, &r);
    make_int_operand(w, C_out, C_in, GEMM_E4M3, GEMM_SCALE_TENSOR, vmax, 1, &r);
    make_int_operand(dy, N, C_out, GEMM_E5M2, GEMM_SCALE_TENSOR, vmax, -2, &r);
    auto transpose = [](const operand &o) {
        operand t;
        t.rows = o.K, t.K = o.rows, t.type = o.type, t.mode = o.mode, t.scales = o.scales;
        t.codes.resize(o.codes.size());
        for (int i = 0; i < o.rows; i++)
            for (int k = 0; k < o.K; k++) t.codes[(size_t)k * o.rows + i] = o.codes[(size_t)i * o.K + k];
        return t;
    };
    operand w_t = transpose(w), dy_t = transpose(dy), x_t = transpose(x);
    for (operand *o : {&x, &w, &dy, &w_t, &dy_t, &x_t}) o->upload("operand");
    struct dev_buf by, bdx, bdw;
    dev_buf_alloc(&by, "y", (size_t)N * C_out * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdx, "dx", (size_t)N * C_in * 2, POISON_BF16, nullptr);
    std::vector<float> dw0((size_t)C_out * C_in);
    rng_fill_int(&r, dw0.data(), (int64_t)dw0.size(), -1000, 1000);
    dev_buf_alloc(&bdw, "dw", dw0.size() * 4, POISON_NONE, dw0.data());
    const struct gemm_fp8_operand ox = x.dev(), ow = w.dev(), ody = dy.dev(), owt = w_t.dev(), odyt = dy_t.dev(),
                                  oxt = x_t.dev();
    gpu_linear_forward_fp8(g_gemm, by.data, GEMM_OUT_BF16, &ox, &ow, nullptr, N, C_in, C_out, GEMM_ACCUM_FAST, g_stream);
    gpu_linear_backward_dx_fp8(g_gemm, bdx.data, GEMM_OUT_BF16, GEMM_OVERWRITE, &ody, &owt, N, C_in, C_out,
                               GEMM_ACCUM_PRECISE, g_stream);
    gpu_linear_backward_dw_fp8(g_gemm, bdw.data, GEMM_OUT_F32, GEMM_ACCUMULATE, &odyt, &oxt, N, C_in, C_out,
                               GEMM_ACCUM_PRECISE, g_stream);
    std::vector<uint16_t> yb((size_t)N * C_out), dxb((size_t)N * C_in);
    std::vector<float> dwg(dw0.size());
    dev_buf_download(&by, yb.data(), 1), dev_buf_download(&bdx, dxb.data(), 1), dev_buf_download(&bdw, dwg.data(), 0);
    product pr;
    pr.out = GEMM_OUT_BF16;
    std::vector<float> y_w = exact_product(pr, x, w), dx_w = exact_product(pr, dy, w_t);
    pr.out = GEMM_OUT_F32, pr.beta = GEMM_ACCUMULATE, pr.c = dw0;
    std::vector<float> dw_w = exact_product(pr, dy_t, x_t);
    std::vector<float> yg = floats_of(yb), dxg = floats_of(dxb);
    struct cmp_case cc = {"gpu_linear_forward_fp8", "y (E4M3 x E4M3, fast)", shape, "bf16", seed};
    cmp_exact_f32(&cc, yg.data(), y_w.data(), (int64_t)y_w.size());
    cc.op = "gpu_linear_backward_dx_fp8", cc.what = "dx (E5M2 dy x E4M3 W^T)";
    cmp_exact_f32(&cc, dxg.data(), dx_w.data(), (int64_t)dx_w.size());
    cc.op = "gpu_linear_backward_dw_fp8", cc.what = "dW += dy^T x (E5M2 x E4M3, fp32)", cc.dtype = "f32";
    cmp_exact_f32(&cc, dwg.data(), dw_w.data(), (int64_t)dw_w.size());
    for (operand *o : {&x, &w, &dy, &w_t, &dy_t, &x_t}) o->release();
    for (struct dev_buf *b : {&by, &bdx, &bdw}) dev_buf_free(b);
}

/* ---- preconditions: each must stop the program with CHECK's status 2 (in a child process) ---- */

/* Runs before the first CUDA call of the process (a child of a process that initialized CUDA may not
 * exit cleanly); the CHECK comes before the context is used, so none is needed. */
static void precondition(const char *what, void (*mutate)(gemm_args *)) {
    gemm_args p;
    memset(&p, 0, sizeof p);
    static __align__(16) unsigned char fake[1024]; /* never read: the CHECK comes first */
    p.d = fake, p.d_type = GEMM_OUT_BF16, p.ldd = 64;
    p.a = fake, p.op_a = GEMM_NO_TRANS, p.lda = 64;
    p.b = fake, p.op_b = GEMM_TRANS, p.ldb = 64;
    p.m = p.n = p.k = 64, p.batch = 1, p.alpha = 1.0f;
    p.a_type = p.b_type = GEMM_E4M3;
    mutate(&p);
    fflush(stdout), fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        gpu_gemm_try(nullptr, &p, nullptr);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 2,
           "gemm FP8 precondition '%s': expected a CHECK failure (exit status 2), got wait status %d", what, status);
}

static void mut_not_tn(gemm_args *p) { p->op_a = GEMM_TRANS; }
static void mut_dim16(gemm_args *p) { p->m = 24; }
static void mut_e5m2x2(gemm_args *p) { p->a_type = p->b_type = GEMM_E5M2; }
static void mut_scale_align(gemm_args *p) { p->a_scale = (const float *)((uintptr_t)p->a + 4); }
static void mut_bf16_fields(gemm_args *p) { p->a_type = p->b_type = GEMM_BF16, p->accum = GEMM_ACCUM_FAST; }
static void mut_block_null(gemm_args *p) { p->a_scale_mode = GEMM_SCALE_1X128; }

/* ---- (c) random cases ---- */

static acc_params g_acc[3];

static void run_random(int m, int n, int k, gemm_dtype ta, gemm_dtype tb, gemm_scale ma, gemm_scale mb, gemm_accum accum,
                       gemm_out out, int id) {
    const uint64_t seed = g_seed * 1000003u + 900000u + (uint64_t)id;
    struct rng r;
    rng_init(&r, seed);
    const bool blocks = ma != GEMM_SCALE_TENSOR || mb != GEMM_SCALE_TENSOR;
    const acc_params &mp = g_acc[blocks ? ACC_BLOCK : accum == GEMM_ACCUM_FAST ? ACC_FAST : ACC_PRECISE];
    char shape[160];
    snprintf(shape, sizeof shape, "m=%d n=%d k=%d A=%s/%s B=%s/%s %s D=%s", m, n, k, tname(ta), sname(ma), tname(tb),
             sname(mb), accum == GEMM_ACCUM_FAST ? "fast" : "precise", out == GEMM_OUT_F32 ? "f32" : "bf16");
    operand A, B;
    make_random_operand(A, m, k, ta, ma, &r);
    make_random_operand(B, n, k, tb, mb, &r);
    A.upload("A"), B.upload("B");
    product pr;
    pr.out = out, pr.accum = accum;
    std::vector<float> d;
    const gemm_status st = run_product(g_gemm, g_stream, pr, A, B, d);
    if (st != GEMM_OK || !mp.ran) {
        EXPECT(blocks, "gemm FP8 random %s: cuBLASLt did not run a per-tensor product", shape);
        printf("  random %s: %s\n", shape,
               st != GEMM_OK ? "not run by cuBLASLt" : "skipped: the block-scaled accumulation measurement did not run");
        A.release(), B.release();
        return;
    }
    sample_eval ev;
    evaluate_samples(ev, d, A, B, mp, out, 2048, &r);
    const double floor_ = (k / 128.0 + 4.0) * FLT_EPSILON * ev.s_max;
    struct cmp_case cc = {"gemm_fp8", "D (random, vs the measured accumulator model)", shape, out == GEMM_OUT_F32 ? "f32" : "bf16", seed};
    struct cmp_stats stt;
    cmp_vs_naive(&cc, ev.got.data(), ev.model.data(), ev.exact.data(), (int64_t)ev.got.size(), 2.0, floor_, &stt);
    printf("  random %s: max|err| %.3g (%.2e of max S), rms %.3g; model (p=%d, I=%d, g=%d) [%s]\n", shape,
           stt.max_abs_err, stt.max_abs_err / ev.s_max, stt.rms_err, mp.p, mp.interval, mp.group, pr.algo);
    A.release(), B.release();
}

/* --probe: error growth with K on random inputs, GPU against the model. */
static void probe_k_sweep(void) {
    printf("\nerror growth with K (random signed inputs, per-tensor E4M3 x E4M3, 1024x1024xK, 2048 samples;\n"
           "err normalized by S = sum |a b| of the element):\n");
    printf("  %-8s %-8s %-12s %-12s %-12s %-12s %s\n", "K", "accum", "gpu max", "gpu rms", "model max", "model rms", "algo");
    const int Ks[] = {256, 1024, 4096, 16384};
    for (int K : Ks) {
        struct rng r;
        rng_init(&r, g_seed + (uint64_t)K);
        operand A, B;
        make_random_operand(A, 1024, K, GEMM_E4M3, GEMM_SCALE_TENSOR, &r);
        make_random_operand(B, 1024, K, GEMM_E4M3, GEMM_SCALE_TENSOR, &r);
        A.upload("A"), B.upload("B");
        for (int f = 0; f < 2; f++) {
            product pr;
            pr.accum = f ? GEMM_ACCUM_FAST : GEMM_ACCUM_PRECISE;
            std::vector<float> d;
            if (run_product(g_gemm, g_stream, pr, A, B, d) != GEMM_OK) continue;
            sample_eval ev;
            evaluate_samples(ev, d, A, B, g_acc[f ? ACC_FAST : ACC_PRECISE], GEMM_OUT_F32, 2048, &r);
            double gm = 0, gr = 0, mm = 0, mr = 0;
            for (size_t i = 0; i < ev.got.size(); i++) {
                const double eg = fabs((double)ev.got[i] - ev.exact[i]), em = fabs((double)ev.model[i] - ev.exact[i]);
                gm = fmax(gm, eg), mm = fmax(mm, em), gr += eg * eg, mr += em * em;
            }
            const double nrm = ev.s_max > 0 ? ev.s_max : 1;
            printf("  %-8d %-8s %-12.3e %-12.3e %-12.3e %-12.3e %s\n", K, f ? "fast" : "precise", gm / nrm,
                   sqrt(gr / ev.got.size()) / nrm, mm / nrm, sqrt(mr / ev.got.size()) / nrm, pr.algo);
        }
        A.release(), B.release();
    }
}

/* Scale layouts a block mode might read instead of the documented one (h = 0): 1×128 h = 1:
 * row-major (rows, K/128); 128×128 h = 1: block-column-major without padding, h = 2: row-major
 * without padding. Returns o's scales rewritten in layout h. */
static const char *layout_name(gemm_scale m, int h) {
    if (h == 0) return "documented";
    return m == GEMM_SCALE_1X128 ? "row-major (rows, K/128)" : h == 1 ? "column-major, unpadded" : "row-major, unpadded";
}

static std::vector<float> relayout(const operand &o, int h) {
    if (h == 0 || o.mode == GEMM_SCALE_TENSOR) return o.scales;
    const int nkb = (o.K + 127) / 128, nrb = (o.rows + 127) / 128;
    std::vector<float> out(o.scales.size(), 0.0f);
    if (o.mode == GEMM_SCALE_1X128) {
        for (int r = 0; r < o.rows; r++)
            for (int kb = 0; kb < nkb; kb++) out[(size_t)r * nkb + kb] = (float)o.sigma(r, kb * 128);
    } else {
        for (int rb = 0; rb < nrb; rb++)
            for (int kb = 0; kb < nkb; kb++)
                out[h == 1 ? (size_t)kb * nrb + rb : (size_t)rb * nkb + kb] = (float)o.sigma(rb * 128, kb * 128);
    }
    return out;
}

/* --probe: which block scale combinations run, and which scale layout a running one reads. */
static void probe_block_modes(void) {
    printf("\nblock scale modes (m=128 n=256 k=512, integer inputs, power-of-two block scales):\n");
    const gemm_scale modes[3] = {GEMM_SCALE_TENSOR, GEMM_SCALE_1X128, GEMM_SCALE_128X128};
    for (int ta = 0; ta < 2; ta++)
        for (int ma = 0; ma < 3; ma++)
            for (int mb = 0; mb < 3; mb++)
                for (int f = 0; f < 2; f++) {
                    if (ma == 0 && mb == 0) continue;
                    struct rng r;
                    rng_init(&r, g_seed + 77);
                    operand A, B;
                    const gemm_dtype at = ta ? GEMM_E5M2 : GEMM_E4M3;
                    make_int_operand(A, 128, 512, at, modes[ma], 2, -1, &r);
                    make_int_operand(B, 256, 512, GEMM_E4M3, modes[mb], 2, 1, &r);
                    A.upload("A"), B.upload("B");
                    product pr;
                    pr.accum = f ? GEMM_ACCUM_FAST : GEMM_ACCUM_PRECISE;
                    std::vector<float> d;
                    const gemm_status st = run_product(g_gemm, g_stream, pr, A, B, d);
                    const char *verdict = st == GEMM_NO_ALGORITHM ? "no algorithm" : st == GEMM_REFUSED ? "refused" : "runs";
                    char detail[160] = "";
                    if (st == GEMM_OK) {
                        const std::vector<float> want = exact_product(pr, A, B);
                        int64_t bad = 0;
                        for (size_t i = 0; i < want.size(); i++) bad += memcmp(&want[i], &d[i], 4) != 0;
                        snprintf(detail, sizeof detail, "%s with the documented layouts (%lld of %zu differ) [%s]",
                                 bad ? "WRONG" : "exact", (long long)bad, want.size(), pr.algo);
                        const int nha = modes[ma] == GEMM_SCALE_TENSOR ? 1 : modes[ma] == GEMM_SCALE_1X128 ? 2 : 3;
                        const int nhb = modes[mb] == GEMM_SCALE_TENSOR ? 1 : modes[mb] == GEMM_SCALE_1X128 ? 2 : 3;
                        for (int ha = 0; bad && ha < nha; ha++)
                            for (int hb = 0; bad && hb < nhb; hb++) {
                                if (ha == 0 && hb == 0) continue;
                                const std::vector<float> sa = relayout(A, ha), sb = relayout(B, hb);
                                CUDA_CHECK(cudaMemcpy(A.dscales.data, sa.data(), sa.size() * 4, cudaMemcpyHostToDevice));
                                CUDA_CHECK(cudaMemcpy(B.dscales.data, sb.data(), sb.size() * 4, cudaMemcpyHostToDevice));
                                std::vector<float> d2;
                                if (run_product(g_gemm, g_stream, pr, A, B, d2) != GEMM_OK) continue;
                                int64_t bad2 = 0;
                                for (size_t i = 0; i < want.size(); i++) bad2 += memcmp(&want[i], &d2[i], 4) != 0;
                                if (bad2 == 0) {
                                    printf("    it reads A's scales %s and B's %s\n", layout_name(modes[ma], ha),
                                           layout_name(modes[mb], hb));
                                    bad = 0;
                                }
                            }
                    }
                    printf("  A %s %-7s x B E4M3 %-7s %-7s: %s %s\n", tname(at), sname(modes[ma]), sname(modes[mb]),
                           f ? "fast" : "precise", verdict, detail);
                    A.release(), B.release();
                }
}

/* ---- (d) bench ---- */

__global__ void fill_codes(uint8_t *p, int64_t n, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 2654435761u ^ seed;
        z ^= z >> 15, z *= 0x2C1B3C6Du, z ^= z >> 12;
        p[i] = (uint8_t)(0x20 + (z >> 8) % 0x30) | (uint8_t)((z >> 4) & 0x80); /* finite, moderate, either sign */
    }
}

__global__ void fill_bf16(uint16_t *p, int64_t n, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 2654435761u ^ seed;
        z ^= z >> 15, z *= 0x2C1B3C6Du, z ^= z >> 12;
        p[i] = (uint16_t)(0x3C00u + (z >> 8) % 0x200u) | (uint16_t)((z >> 4) & 0x8000u); /* ±[0.0078, 0.03) */
    }
}

__global__ void fill_f32(float *p, int64_t n, float v) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}

static void time_call(void *ctx, cudaStream_t s) { gpu_gemm(g_gemm, (const gemm_args *)ctx, s); }

static double time_product(const char *op, const char *shape, const gemm_args &p, double ceiling) {
    const double flops = 2.0 * p.m * (double)p.n * p.k;
    struct bench_result r = bench_time(time_call, (void *)&p, g_stream, 3, 11, flops > 2e11 ? 2 : 5);
    bench_json(op, shape, 0, flops, r, ceiling);
    return r.median_ms;
}

static void bench(void) {
    const int64_t big = (int64_t)8192 * 28672; /* the 8B gate_up dy: the largest operand */
    uint16_t *a16, *b16;
    uint8_t *a8, *b8;
    float *d, *sa, *sb;
    CUDA_CHECK(cudaMalloc(&a16, big * 2));
    CUDA_CHECK(cudaMalloc(&b16, big * 2));
    CUDA_CHECK(cudaMalloc(&a8, big));
    CUDA_CHECK(cudaMalloc(&b8, big));
    CUDA_CHECK(cudaMalloc(&d, big * 4));
    CUDA_CHECK(cudaMalloc(&sa, big / 128 * 4 + 4096));
    CUDA_CHECK(cudaMalloc(&sb, big / 128 * 4 + 4096));
    fill_bf16<<<1024, 256, 0, g_stream>>>(a16, big, 1u);
    fill_bf16<<<1024, 256, 0, g_stream>>>(b16, big, 2u);
    fill_codes<<<1024, 256, 0, g_stream>>>(a8, big, 3u);
    fill_codes<<<1024, 256, 0, g_stream>>>(b8, big, 4u);
    fill_f32<<<1024, 256, 0, g_stream>>>(sa, big / 128 + 1024, 1.0f / 64);
    fill_f32<<<1024, 256, 0, g_stream>>>(sb, big / 128 + 1024, 1.0f / 64);
    KERNEL_CHECK(g_stream);
    CUDA_CHECK(cudaStreamSynchronize(g_stream));

    /* ceilings: 8192³ bf16 (TN) and FP8 per-tensor fast */
    const int S = 8192;
    auto fp8_args = [&](int m, int n, int k, gemm_dtype ta, gemm_dtype tb, gemm_scale ma, gemm_scale mb, gemm_accum acc,
                        gemm_out out) {
        gemm_args p;
        memset(&p, 0, sizeof p);
        p.d = d, p.d_type = out, p.ldd = n, p.a = a8, p.op_a = GEMM_NO_TRANS, p.lda = k, p.b = b8, p.op_b = GEMM_TRANS;
        p.ldb = k, p.m = m, p.n = n, p.k = k, p.batch = 1, p.alpha = 1.0f;
        p.a_type = ta, p.b_type = tb, p.a_scale = sa, p.b_scale = sb, p.a_scale_mode = ma, p.b_scale_mode = mb, p.accum = acc;
        return p;
    };
    gemm_args p16;
    memset(&p16, 0, sizeof p16);
    p16.d = d, p16.d_type = GEMM_OUT_BF16, p16.ldd = S, p16.a = a16, p16.op_a = GEMM_NO_TRANS, p16.lda = S;
    p16.b = b16, p16.op_b = GEMM_TRANS, p16.ldb = S, p16.m = p16.n = p16.k = S, p16.batch = 1, p16.alpha = 1.0f;
    const double bf16_tf = 2.0 * S * (double)S * S / (time_product("gemm_bf16", "8192^3 TN", p16, 0) * 1e-3) / 1e12;
    gemm_args pf = fp8_args(S, S, S, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_TENSOR, GEMM_SCALE_TENSOR, GEMM_ACCUM_FAST, GEMM_OUT_BF16);
    const double fp8_tf = 2.0 * S * (double)S * S / (time_product("gemm_fp8_fast", "8192^3 E4M3", pf, 0) * 1e-3) / 1e12;
    pf.accum = GEMM_ACCUM_PRECISE;
    time_product("gemm_fp8_precise", "8192^3 E4M3", pf, fp8_tf);
    pf.a_scale_mode = GEMM_SCALE_1X128, pf.b_scale_mode = GEMM_SCALE_128X128;
    char an[128];
    gpu_gemm_algo_name(g_gemm, &pf, an, sizeof an);
    const bool block_ok = strcmp(an, "none") != 0 && gpu_gemm_try(g_gemm, &pf, g_stream) == GEMM_OK;
    if (block_ok) time_product("gemm_fp8_block", "8192^3 E4M3 1x128 x 128x128", pf, fp8_tf);
    else printf("{\"op\":\"gemm_fp8_block\",\"shape\":\"8192^3\",\"status\":\"not run by cuBLASLt\"}\n");

    struct model {
        const char *name;
        int C, qkv, F;
    } models[] = {{"llama-3.2-1b", 2048, 3072, 8192}, {"llama-3.1-8b", 4096, 6144, 14336}};
    const int N = 8192;
    for (const model &md : models) {
        struct lin {
            const char *name;
            int C_in, C_out;
        } lins[] = {{"qkv", md.C, md.qkv}, {"o", md.C, md.C}, {"gate_up", md.C, 2 * md.F}, {"down", md.F, md.C}};
        double t16 = 0, t_prec = 0, t_te = 0, t_blk = 0;
        bool blk_all = block_ok;
        for (const lin &l : lins) {
            char shape[128];
            snprintf(shape, sizeof shape, "%s %s N=%d C_in=%d C_out=%d", md.name, l.name, N, l.C_in, l.C_out);
            /* the bf16 trainer's products (gpu/gemm.h): forward TN, dx NN, dW TN into fp32 (accumulate) */
            gemm_args b = p16;
            b.d_type = GEMM_OUT_BF16, b.ldd = l.C_out, b.op_a = GEMM_NO_TRANS, b.lda = l.C_in, b.op_b = GEMM_TRANS;
            b.ldb = l.C_in, b.m = N, b.n = l.C_out, b.k = l.C_in, b.beta = GEMM_OVERWRITE;
            t16 += time_product("linear_forward_bf16", shape, b, bf16_tf);
            b.ldd = l.C_in, b.lda = l.C_out, b.op_b = GEMM_NO_TRANS, b.ldb = l.C_in, b.n = l.C_in, b.k = l.C_out;
            t16 += time_product("linear_backward_dx_bf16", shape, b, bf16_tf);
            b.d_type = GEMM_OUT_F32, b.ldd = l.C_in, b.op_a = GEMM_TRANS, b.lda = l.C_out, b.op_b = GEMM_NO_TRANS;
            b.ldb = l.C_in, b.m = l.C_out, b.n = l.C_in, b.k = N, b.beta = GEMM_ACCUMULATE;
            t16 += time_product("linear_backward_dw_bf16", shape, b, bf16_tf);
            /* FP8, HYBRID formats, per-tensor: precise everywhere, and TE's default (fast forward) */
            gemm_args f = fp8_args(N, l.C_out, l.C_in, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_TENSOR, GEMM_SCALE_TENSOR,
                                   GEMM_ACCUM_PRECISE, GEMM_OUT_BF16);
            const double fwd_p = time_product("linear_forward_fp8_precise", shape, f, fp8_tf);
            f.accum = GEMM_ACCUM_FAST;
            const double fwd_f = time_product("linear_forward_fp8_fast", shape, f, fp8_tf);
            gemm_args dx = fp8_args(N, l.C_in, l.C_out, GEMM_E5M2, GEMM_E4M3, GEMM_SCALE_TENSOR, GEMM_SCALE_TENSOR,
                                    GEMM_ACCUM_PRECISE, GEMM_OUT_BF16);
            const double dx_p = time_product("linear_backward_dx_fp8_precise", shape, dx, fp8_tf);
            gemm_args dw = fp8_args(l.C_out, l.C_in, N, GEMM_E5M2, GEMM_E4M3, GEMM_SCALE_TENSOR, GEMM_SCALE_TENSOR,
                                    GEMM_ACCUM_PRECISE, GEMM_OUT_F32);
            dw.beta = GEMM_ACCUMULATE;
            const double dw_p = time_product("linear_backward_dw_fp8_precise", shape, dw, fp8_tf);
            t_prec += fwd_p + dx_p + dw_p, t_te += fwd_f + dx_p + dw_p;
            /* block scaling (E4M3 everywhere, as TE's Float8BlockScaling and DeepSeek-V3) */
            if (blk_all) {
                gemm_args bf = fp8_args(N, l.C_out, l.C_in, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_1X128, GEMM_SCALE_128X128,
                                        GEMM_ACCUM_PRECISE, GEMM_OUT_BF16);
                gemm_args bdx = fp8_args(N, l.C_in, l.C_out, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_1X128, GEMM_SCALE_128X128,
                                         GEMM_ACCUM_PRECISE, GEMM_OUT_BF16);
                gemm_args bdw = fp8_args(l.C_out, l.C_in, N, GEMM_E4M3, GEMM_E4M3, GEMM_SCALE_1X128, GEMM_SCALE_1X128,
                                         GEMM_ACCUM_PRECISE, GEMM_OUT_F32);
                bdw.beta = GEMM_ACCUMULATE;
                for (gemm_args *q : {&bf, &bdx, &bdw})
                    if (gpu_gemm_try(g_gemm, q, g_stream) != GEMM_OK) blk_all = false;
                if (blk_all) {
                    t_blk += time_product("linear_forward_fp8_block", shape, bf, fp8_tf);
                    t_blk += time_product("linear_backward_dx_fp8_block", shape, bdx, fp8_tf);
                    t_blk += time_product("linear_backward_dw_fp8_block", shape, bdw, fp8_tf);
                }
            }
        }
        printf("{\"op\":\"gemm_fp8_summary\",\"model\":\"%s\",\"device\":\"%s\",\"linears_ms_bf16\":%.3f,"
               "\"linears_ms_fp8_precise\":%.3f,\"linears_ms_fp8_te_default\":%.3f,\"linears_ms_fp8_block\":%s,"
               "\"speedup_precise\":%.3f,\"speedup_te_default\":%.3f}\n",
               md.name, parity_device_name(), t16, t_prec, t_te, blk_all ? std::to_string(t_blk).c_str() : "null",
               t16 / t_prec, t16 / t_te);
    }
    printf("{\"op\":\"gemm_fp8_ceilings\",\"device\":\"%s\",\"bf16_8192_TFLOPs\":%.1f,\"fp8_fast_8192_TFLOPs\":%.1f}\n",
           parity_device_name(), bf16_tf, fp8_tf);
    for (void *p : {(void *)a16, (void *)b16, (void *)a8, (void *)b8, (void *)d, (void *)sa, (void *)sb}) CUDA_CHECK(cudaFree(p));
}

/* ---- (e) tuning ---- */

struct fp8_tuning_case {
    const char *name;
    int m, n, k;
    gemm_dtype ta;
    gemm_scale ma, mb;
    gemm_accum accum;
    gemm_out out;
    gemm_beta beta;
};

/* One product through a tuning context and through an untuned one (the same old D when
 * accumulating): bitwise equal, or not run by cuBLASLt in either (block modes it may refuse). */
static void run_fp8_tuning_case(struct gpu_gemm *tuned, struct gpu_gemm *plain, const fp8_tuning_case &c) {
    const int64_t a_n = (int64_t)c.m * c.k, b_n = (int64_t)c.n * c.k, d_n = (int64_t)c.m * c.n;
    const int64_t s_n = ((int64_t)c.m + c.n + 256) * (c.k / 128 + 2); /* any block-scale layout */
    const size_t es = c.out == GEMM_OUT_BF16 ? 2 : 4;
    uint8_t *a, *b;
    float *sa, *sb;
    unsigned char *d1, *d2;
    CUDA_CHECK(cudaMalloc(&a, (size_t)a_n));
    CUDA_CHECK(cudaMalloc(&b, (size_t)b_n));
    CUDA_CHECK(cudaMalloc(&sa, (size_t)s_n * 4));
    CUDA_CHECK(cudaMalloc(&sb, (size_t)s_n * 4));
    CUDA_CHECK(cudaMalloc(&d1, (size_t)d_n * es));
    CUDA_CHECK(cudaMalloc(&d2, (size_t)d_n * es));
    fill_codes<<<1024, 256, 0, g_stream>>>(a, a_n, 11u + (uint32_t)c.m);
    fill_codes<<<1024, 256, 0, g_stream>>>(b, b_n, 12u + (uint32_t)c.k);
    fill_f32<<<256, 256, 0, g_stream>>>(sa, s_n, 1.0f / 64);
    fill_f32<<<256, 256, 0, g_stream>>>(sb, s_n, 1.0f / 32);
    /* the old D: small bf16 values (as bf16, or as the fp32 words' bits: finite either way) */
    fill_bf16<<<1024, 256, 0, g_stream>>>(reinterpret_cast<uint16_t *>(d1), d_n * (int64_t)es / 2, 13u);
    KERNEL_CHECK(g_stream);
    CUDA_CHECK(cudaMemcpyAsync(d2, d1, (size_t)d_n * es, cudaMemcpyDeviceToDevice, g_stream));
    gemm_args p;
    memset(&p, 0, sizeof p);
    p.d_type = c.out, p.ldd = c.n, p.a = a, p.op_a = GEMM_NO_TRANS, p.lda = c.k, p.b = b, p.op_b = GEMM_TRANS;
    p.ldb = c.k, p.m = c.m, p.n = c.n, p.k = c.k, p.batch = 1, p.alpha = 1.0f, p.beta = c.beta;
    p.a_type = c.ta, p.b_type = GEMM_E4M3, p.a_scale = sa, p.b_scale = sb, p.a_scale_mode = c.ma, p.b_scale_mode = c.mb;
    p.accum = c.accum;
    p.d = d1;
    const gemm_status s1 = gpu_gemm_try(tuned, &p, g_stream);
    p.d = d2;
    const gemm_status s2 = gpu_gemm_try(plain, &p, g_stream);
    char shape[256];
    snprintf(shape, sizeof shape, "%s: m=%d n=%d k=%d A=%s/%s B=E4M3/%s %s D=%s%s", c.name, c.m, c.n, c.k, tname(c.ta),
             sname(c.ma), sname(c.mb), c.accum == GEMM_ACCUM_FAST ? "fast" : "precise",
             c.out == GEMM_OUT_F32 ? "f32" : "bf16", c.beta == GEMM_ACCUMULATE ? " accumulate" : "");
    EXPECT(s1 == s2, "gemm FP8 tuning %s: the tuning context's status %d, the untuned one's %d", shape, (int)s1, (int)s2);
    const bool blocks = c.ma != GEMM_SCALE_TENSOR || c.mb != GEMM_SCALE_TENSOR;
    EXPECT(s1 == GEMM_OK || blocks, "gemm FP8 tuning %s: a per-tensor product not run (status %d)", shape, (int)s1);
    if (s1 == GEMM_OK && s2 == GEMM_OK) {
        std::vector<unsigned char> h1((size_t)d_n * es), h2((size_t)d_n * es);
        CUDA_CHECK(cudaMemcpyAsync(h1.data(), d1, h1.size(), cudaMemcpyDeviceToHost, g_stream));
        CUDA_CHECK(cudaMemcpyAsync(h2.data(), d2, h2.size(), cudaMemcpyDeviceToHost, g_stream));
        CUDA_CHECK(cudaStreamSynchronize(g_stream));
        struct cmp_case cc = {"gemm_fp8", "tuned D = untuned D", shape, c.out == GEMM_OUT_BF16 ? "bf16" : "f32", g_seed};
        cmp_exact_bytes(&cc, h1.data(), h2.data(), h1.size());
        char alg1[160], alg2[160];
        p.d = d1;
        gpu_gemm_algo_name(tuned, &p, alg1, sizeof alg1);
        p.d = d2;
        gpu_gemm_algo_name(plain, &p, alg2, sizeof alg2);
        printf("tuning %s: %s%s\n", shape, strcmp(alg1, alg2) ? "chose " : "kept ", alg1);
    } else {
        printf("tuning %s: not run by cuBLASLt\n", shape);
    }
    for (void *q : {(void *)a, (void *)b, (void *)sa, (void *)sb, (void *)d1, (void *)d2}) CUDA_CHECK(cudaFree(q));
}

static void run_fp8_tuning_cases(void) {
    struct gpu_gemm *tuned = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE), *plain = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);
    gpu_gemm_set_tuning(tuned, 1);
    gpu_gemm_set_tuning(plain, 0);
    const gemm_dtype E4 = GEMM_E4M3, E5 = GEMM_E5M2;
    const gemm_scale T = GEMM_SCALE_TENSOR, V = GEMM_SCALE_1X128, B = GEMM_SCALE_128X128;
    const gemm_accum P = GEMM_ACCUM_PRECISE, F = GEMM_ACCUM_FAST;
    const gemm_out O16 = GEMM_OUT_BF16, O32 = GEMM_OUT_F32;
    const gemm_beta OW = GEMM_OVERWRITE, AC = GEMM_ACCUMULATE;
    /* the trainers' products (gpu/llama_fp8.cu gl_fp8_operands): forward (N, C_out, C_in), dx
     * (N, C_in, C_out), dW (C_out, C_in, N); N = 8192 rows (SmolLM2: 16384) */
    const fp8_tuning_case cases[] = {
        {"1B q/k/v forward", 8192, 3072, 2048, E4, T, T, F, O16, OW},
        {"1B gate/up forward", 8192, 16384, 2048, E4, T, T, F, O16, OW},
        {"1B down forward", 8192, 2048, 8192, E4, T, T, F, O16, OW},
        {"1B down dx", 8192, 8192, 2048, E5, T, T, P, O16, OW},
        {"1B gate/up dx", 8192, 2048, 16384, E5, T, T, P, O16, OW},
        {"1B o dx accumulate", 8192, 2048, 2048, E5, T, T, P, O16, AC},
        {"1B down dW fp32", 2048, 8192, 8192, E5, T, T, P, O32, AC},
        {"1B gate/up dW bf16", 16384, 2048, 8192, E5, T, T, P, O16, AC},
        {"1B gate/up forward, blocks", 8192, 16384, 2048, E4, V, B, P, O16, OW},
        {"1B down dx, blocks", 8192, 8192, 2048, E4, V, B, P, O16, OW},
        {"1B down dW fp32, blocks", 2048, 8192, 8192, E4, V, V, P, O32, AC},
        {"SmolLM2 gate/up forward", 16384, 3072, 576, E4, T, T, F, O16, OW},
        {"SmolLM2 down dx", 16384, 1536, 576, E5, T, T, P, O16, OW},
        {"8B down dx", 8192, 14336, 4096, E5, T, T, P, O16, OW},
    };
    for (const auto &c : cases) run_fp8_tuning_case(tuned, plain, c);
    free_gpu_gemm(tuned);
    free_gpu_gemm(plain);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261202);
    g_probe = test_has_flag(argc, argv, "--probe");
    /* preconditions: each must stop the program (CHECK) before any CUDA call */
    precondition("A transposed (not TN)", mut_not_tn);
    precondition("m not a multiple of 16", mut_dim16);
    precondition("E5M2 x E5M2", mut_e5m2x2);
    precondition("scale pointer 4-byte aligned", mut_scale_align);
    precondition("fast accumulation on a bf16 product", mut_bf16_fields);
    precondition("block scale mode without its scales", mut_block_null);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    g_gemm = build_gpu_gemm(GEMM_DEFAULT_WORKSPACE);

    /* (b) first: the exact cases rely on p ≥ 10, the random ones on the whole measurement. */
    for (int k = 0; k < 3; k++) {
        g_acc[k] = measure_accumulation(g_gemm, g_stream, (acc_kind)k);
        print_acc((acc_kind)k, g_acc[k], g_probe);
    }
    EXPECT(g_acc[ACC_PRECISE].ran && g_acc[ACC_FAST].ran, "per-tensor FP8 GEMMs must run on this GPU");
    for (int k = 0; k < 3; k++)
        EXPECT(!g_acc[k].ran || g_acc[k].p >= 10,
               "accumulation %s keeps %d bits: fewer than the 10 the exact cases (and any FP8 training) assume",
               acc_name((acc_kind)k), g_acc[k].p);

    /* (a) exact cases */
    const gemm_dtype E4 = GEMM_E4M3, E5 = GEMM_E5M2;
    const gemm_scale T = GEMM_SCALE_TENSOR, V = GEMM_SCALE_1X128, B = GEMM_SCALE_128X128;
    const gemm_accum P = GEMM_ACCUM_PRECISE, F = GEMM_ACCUM_FAST;
    const gemm_out O16 = GEMM_OUT_BF16, O32 = GEMM_OUT_F32;
    const gemm_beta OW = GEMM_OVERWRITE, AC = GEMM_ACCUMULATE;
    const int shapes[][3] = {{16, 16, 16}, {32, 48, 64}, {144, 272, 400}, {256, 128, 1024}, {64, 2048, 512}, {272, 96, 16}};
    const gemm_dtype types[][2] = {{E4, E4}, {E5, E4}, {E4, E5}};
    int id = 0;
    for (const auto &s : shapes)
        for (const auto &t : types)
            for (int acc = 0; acc < 2; acc++)
                for (int o = 0; o < 2; o++) {
                    const exact_case c = {s[0], s[1], s[2], t[0], t[1], T, T, acc ? F : P, o ? O32 : O16, OW, 0, 0, 0, 1.0f};
                    run_exact(c, id++);
                }
    const exact_case special[] = {
        {144, 272, 400, E4, E4, T, T, P, O32, OW, 0, 0, 1, 1.0f},  /* scales NULL */
        {144, 272, 400, E5, E4, T, T, F, O32, OW, 0, 0, 0, 2.0f},  /* alpha */
        {144, 272, 64, E4, E4, T, T, P, O32, AC, 0, 0, 0, 1.0f},   /* beta = 1, fp32 */
        {144, 272, 64, E5, E4, T, T, P, O16, AC, 0, 0, 0, 1.0f},   /* beta = 1, bf16 */
        {144, 272, 64, E4, E4, T, T, F, O16, OW, 1, 0, 0, 1.0f},   /* bias */
        {128, 256, 256, E4, E4, T, T, P, O32, OW, 0, 1, 0, 1.0f},  /* AMAX_D, fp32 D */
        {128, 256, 256, E4, E4, T, T, F, O16, OW, 0, 1, 0, 1.0f},  /* AMAX_D, bf16 D */
    };
    for (const exact_case &c : special) run_exact(c, id++);
    /* block scale modes: every combination, K a multiple of 128 and not (SmolLM2's 576) */
    const gemm_scale modes[3] = {T, V, B};
    for (int ma = 0; ma < 3; ma++)
        for (int mb = 0; mb < 3; mb++) {
            if (ma == 0 && mb == 0) continue;
            run_exact({256, 384, 512, E4, E4, modes[ma], modes[mb], P, O32, OW, 0, 0, 0, 1.0f}, id++);
            run_exact({128, 256, 576, E4, E4, modes[ma], modes[mb], P, O16, OW, 0, 0, 0, 1.0f}, id++);
        }
    run_exact({256, 384, 512, E5, E4, V, B, P, O16, OW, 0, 0, 0, 1.0f}, id++); /* dgrad-style E5M2 */
    run_exact({256, 384, 512, E4, E4, V, B, F, O32, OW, 0, 0, 0, 1.0f}, id++); /* fast accumulation */
    /* the typed linear products */
    const int lin[][3] = {{64, 256, 384}, {32, 1024, 512}, {128, 576, 960}, {16, 512, 1024}}; /* K ≤ 1024 */
    id = 0;
    for (const auto &l : lin) run_linear_exact(l[0], l[1], l[2], id++);

    /* (c) random cases, tolerance from the measurement */
    id = 0;
    run_random(1024, 1024, 1024, E4, E4, T, T, P, O32, id++);
    run_random(1024, 1024, 1024, E4, E4, T, T, F, O32, id++);
    run_random(1024, 1024, 4096, E4, E4, T, T, F, O32, id++);
    run_random(1024, 1024, 4096, E5, E4, T, T, P, O32, id++);
    run_random(1024, 1024, 4096, E4, E5, T, T, P, O16, id++);
    run_random(1024, 2048, 8192, E5, E4, T, T, P, O32, id++); /* a dW-like long K */
    run_random(1024, 1024, 4096, E4, E4, V, B, P, O32, id++);
    run_random(1024, 1024, 4096, E4, E4, B, V, P, O16, id++);
    run_random(1024, 1024, 4096, E4, E4, V, V, P, O32, id++);
    run_random(1024, 1024, 4096, E5, E4, V, B, P, O32, id++);

    run_fp8_tuning_cases();

    if (g_probe) {
        probe_k_sweep();
        probe_block_modes();
    }
    printf("block-scaled exact cases: %d ran, %d not run by cuBLASLt on this GPU/library\n", g_block_runs, g_block_refused);
    const int rc = test_finish("gemm_fp8_parity");
    if (rc == 0 && test_has_flag(argc, argv, "--bench")) bench();
    free_gpu_gemm(g_gemm);
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
