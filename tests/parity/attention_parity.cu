/* attention_parity.cu — gpu/attention (both kernel families: the sm_80 mma.sync kernels and the Hopper
 * wgmma/TMA kernels) against ref/attention on random inputs.
 *
 *   bazel test --config=gpu //tests/parity:attention_parity
 *   attention_parity [--seed=N] [--kernel=sm80|sm90|both] [--debug] [--bench | --bench-only]
 *                    [--bench-shape=B,T,H,KVH,D]
 *
 * Order: (1) on a Hopper device, the probes (gpu/attention_internal.h, attn90_probe): each warpgroup
 * GEMM of the Hopper kernels alone on integer-valued tiles, bit for bit, so that a layout error is
 * named by the product it breaks; (2) every shape for each kernel family that takes it (sm80 always,
 * sm90 on a Hopper device for D = 64 and 128): forward, backward, backward determinism; (3) with
 * --bench, each shape of the benchmark for both families in the same run, then a summary table
 * (--bench-only: the benchmark alone, without (1) and (2), to time a build already checked;
 * --bench-shape: one shape instead of the list, e.g. to profile it).
 * REFINE_ATTENTION_KERNEL=sm80 in the environment makes no difference here (the families are named
 * explicitly), and --kernel=sm80 runs the fallback alone.
 *
 * Shapes (B, T, H, KVH, D): T = 1, 17, 63, 64, 65, 100, 257, 1024 (partial tiles, one tile, tile
 * edges of the sm_80 kernels' 64) and 127, 128, 129, 255, 383 (the Hopper kernels' 128-row tiles
 * and 64-row backward blocks), two shapes with more forward tiles and backward CTAs than an H100
 * has SMs, GQA ratios 1, 2, 3, 4, 8, 16 (SmolLM2 9:3, Llama 3 32:8, MQA),
 * D = 64 and 128 (and 16, 32 on the sm_80 kernels). Inputs are bf16-rounded normals from the
 * printed seed; both sides see the same bits. Outputs are poisoned and guarded.
 *
 * Tolerances (STYLE.md, tier (c), flash-attention's own rule): the GPU's error against the fp32
 * oracle (ref naive, ACT_F32, double accumulation) is at most 2× the error of the reference
 * computed with the GPU's bf16 rounding points (ref flash, ACT_BF16, with the kernel's key-block
 * size: 64 for sm80, 128 for sm90), plus an absolute floor of BF16_EPS/2 · rms(oracle) for elements
 * where both errors vanish. The rounding points differ in one place only (P relative to the running
 * max instead of lse; the Hopper forward also visits key blocks in descending order), so the two
 * low-precision results have errors of the same size. The backward's reference does not depend on
 * block sizes (ref/attention.h).
 * lse (fp32): sums of D exact bf16 products in fp32 (relative error ≤ D·u of Σ|q·k|), then
 * exp2/log (≤ 2 ulp each, per exponential of the row) → elementwise, eps = FLT_EPSILON,
 * k = D + 16, floor 1.
 * dq and dk carry one more absolute floor: where the true dS vanishes (T = 1: dS = dP − Δ = 0
 * exactly), both sides are left with the rounding of the fp32 subtraction dP − Δ, each term of
 * magnitude ≈ √D·rms(dout)·rms(v) = √D for unit inputs, so ≤ 2·FLT_EPSILON·√D per dS element,
 * times |k| or |q| (≈ 1) and the softmax scale, over a handful of such terms: 4·FLT_EPSILON·√D·scale.
 * RoPE's backward inside the backward (gpu_attention_rope_backward_strided_bf16): dq, dk, dv bitwise the
 * backward followed by gpu_rope_backward_bf16 (rope_parity proves that pass against ref/rope), at the
 * trainers' side-by-side stride and packed, positions restarting at random rows.
 * Determinism: the backward run twice gives the same bits (sm80: no atomics; sm90: the dQ sum in a
 * fixed order, gpu/attention_sm90_bwd.cu).
 * Diagnosis: a failed comparison (or every comparison with --debug) prints the first and worst
 * element over budget as (b, t, h, d) with expected and actual values, the tile, warpgroup and warp
 * that computed it in the kernel family under test, a 4 × 8 neighbourhood of expected/actual, and
 * the count of elements over budget per tile row block and head. A Hopper kernel that hangs records
 * the wait (HangRecord) and the launch ends; the test prints which wait and fails.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "gpu/attention.h"
#include "gpu/attention_internal.h"
#include "gpu/attention_sm90_layout.h"
#include "gpu/cuda_check.h"
#include "gpu/gemm.h"
#include "gpu/rope.h"
#include "ref/attention.h"
#include "ref/bf16.h"
#include "ref/rope.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

using refine::AttnKernel;

static uint64_t g_seed;
static cudaStream_t g_stream;
static int g_debug;
static refine::HangRecord *g_hang; /* device */

static const char *kernel_name(AttnKernel k) { return k == refine::ATTN_KERNEL_SM90 ? "sm90" : "sm80"; }

static void bf16_fill(std::vector<float> &f, std::vector<uint16_t> &b, struct rng *r, size_t n) {
    f.resize(n);
    b.resize(n);
    rng_fill_normal(r, f.data(), (int64_t)n, 0.0, 1.0);
    for (size_t i = 0; i < n; i++) {
        b[i] = bf16_from_float(f[i]);
        f[i] = bf16_to_float(b[i]);
    }
}

/* ---- hang record ---- */

static void hang_reset() { CUDA_CHECK(cudaMemset(g_hang, 0, sizeof(refine::HangRecord))); }

static const char *hang_name(int code) {
    switch (code) {
    case 1: return "forward Q full (consumer)";
    case 2: return "forward Q empty (producer)";
    case 3: return "forward K full (consumer)";
    case 4: return "forward K empty (producer)";
    case 5: return "forward V full (consumer)";
    case 6: return "forward V empty (producer)";
    case 11: return "backward K/V full (consumer)";
    case 12: return "backward Q/dO full (consumer)";
    case 13: return "backward Q/dO empty (producer)";
    case 14: return "backward dQ full (writer)";
    case 15: return "backward dQ empty (consumer)";
    case 16: return "backward dQ order counter (writer)";
    case 21: return "probe operands";
    default: return "unknown";
    }
}

static int g_sm90_hung; /* after a hang, the remaining sm90 launches are skipped (each would wait seconds) */

/* After a launch of the Hopper kernels: a fault ends the run naming the launch; a recorded hang fails
 * the test with the record. */
static int hang_check(const char *what, const char *shape) {
    const cudaError_t e = cudaStreamSynchronize(g_stream);
    if (e != cudaSuccess) {
        printf("attention_parity: sm90 %s [%s] faulted: %s (%s); the run ends here\n", what, shape,
               cudaGetErrorName(e), cudaGetErrorString(e));
        fflush(stdout);
        exit(2);
    }
    refine::HangRecord h;
    CUDA_CHECK(cudaMemcpy(&h, g_hang, sizeof h, cudaMemcpyDeviceToHost));
    if (!h.hung) return 0;
    test_fail("attention sm90 %s [%s]: a wait hung: %s (code %d), block %d, thread %d (warpgroup %d, warp %d), "
              "pipeline step %d",
              what, shape, hang_name(h.code), h.code, h.block, h.thread, h.thread / 128, (h.thread % 128) / 32, h.info);
    hang_reset();
    g_sm90_hung = 1;
    return 1;
}

/* ---- (1) probes ---- */

static void run_probe(refine::AttnProbe which, int D) {
    static const char *names[] = {"fwd S=Q·Kᵀ (SS, K-major)", "fwd O=P·V (RS, B MN-major)",
                                  "bwd Sᵀ=K·Qᵀ per 64 keys (SS, K-major)", "bwd dV=Pᵀ·dO (RS, B MN-major)",
                                  "bwd dQ=dS·K (SS from the dSᵀ tile, A and B MN-major; dQ tile order)"};
    const int BM = D == 128 ? 64 : 128;
    int ar = 128, ac = D, br = 128, crows = 128, ccols = 128; /* a (ar × ac), b (br × D), c (crows × ccols) */
    switch (which) {
    case refine::ATTN_PROBE_QK: break;
    case refine::ATTN_PROBE_PV: ac = 128, ccols = D; break;
    case refine::ATTN_PROBE_SDP: br = BM, ccols = BM; break;
    case refine::ATTN_PROBE_DKV: ac = BM, br = BM, ccols = D; break;
    default: ac = BM, crows = BM, ccols = D; break;
    }
    struct rng r;
    rng_init(&r, g_seed ^ (0x9b0be000ull + (uint64_t)which * 131 + (uint64_t)D));
    std::vector<float> a((size_t)ar * ac), b((size_t)br * D);
    /* integers in [-2, 2]: every product and sum below is exact in fp32 */
    for (auto &x : a) x = (float)((int)(rng_u64(&r) % 5) - 2);
    for (auto &x : b) x = (float)((int)(rng_u64(&r) % 5) - 2);
    std::vector<float> want((size_t)crows * ccols, 0.0f);
    for (int i = 0; i < crows; i++)
        for (int j = 0; j < ccols; j++) {
            double s = 0;
            switch (which) {
            case refine::ATTN_PROBE_QK:
            case refine::ATTN_PROBE_SDP:
                for (int k = 0; k < D; k++) s += (double)a[(size_t)i * D + k] * b[(size_t)j * D + k];
                break;
            case refine::ATTN_PROBE_PV:
                for (int k = 0; k < 128; k++) s += (double)a[(size_t)i * 128 + k] * b[(size_t)k * D + j];
                break;
            case refine::ATTN_PROBE_DKV: /* c = a·b, a (128 keys × BM queries), b (BM × D) */
                for (int k = 0; k < BM; k++) s += (double)a[(size_t)i * BM + k] * b[(size_t)k * D + j];
                break;
            default: /* DQ: c = aᵀ·b, a (128 keys × BM queries), b (128 × D) */
                for (int k = 0; k < 128; k++) s += (double)a[(size_t)k * BM + i] * b[(size_t)k * D + j];
                break;
            }
            want[(size_t)i * ccols + j] = (float)s;
        }
    const std::vector<uint16_t> ab = bits_of(a), bb = bits_of(b);
    struct dev_buf da, db, dc;
    dev_buf_alloc(&da, "probe a", ab.size() * 2, POISON_NONE, ab.data());
    dev_buf_alloc(&db, "probe b", bb.size() * 2, POISON_NONE, bb.data());
    dev_buf_alloc(&dc, "probe c", want.size() * 4, POISON_F32, nullptr);
    char shape[64];
    snprintf(shape, sizeof shape, "D=%d probe %d", D, (int)which);
    refine::attn90_probe(which, D, (float *)dc.data, (const uint16_t *)da.data, (const uint16_t *)db.data, g_stream,
                         g_hang);
    const int hung = hang_check(names[which], shape);
    std::vector<float> got(want.size());
    dev_buf_download(&dc, got.data(), 1);
    if (which == refine::ATTN_PROBE_DQ) { /* tile order back to row-major via the layout's own map */
        std::vector<float> rm(got.size());
        for (int e = 0; e < 8192; e++) {
            const refine::attn90::DqCoord xy = refine::attn90::dq_tile_coord(D, e);
            rm[(size_t)xy.row * D + xy.col] = got[e];
        }
        got = rm;
    }
    int64_t nbad = 0, first = -1;
    std::vector<int> bad_rows8(crows / 8, 0), bad_cols8(ccols / 8, 0);
    for (size_t e = 0; e < want.size(); e++)
        if (!(got[e] == want[e])) {
            if (first < 0) first = (int64_t)e;
            nbad++;
            bad_rows8[e / ccols / 8]++;
            bad_cols8[e % ccols / 8]++;
        }
    if (nbad == 0 && !hung) {
        test_pass();
        printf("attention_parity: probe D=%-3d %-55s ok (%zu values exact)\n", D, names[which], want.size());
    } else if (nbad > 0) {
        test_fail("probe D=%d %s: %lld of %zu values wrong; first (row %lld, col %lld) want %g got %g", D,
                  names[which], (long long)nbad, want.size(), (long long)(first / ccols), (long long)(first % ccols),
                  want[first], got[first]);
        printf("  bad values per 8-row group:");
        for (int g : bad_rows8) printf(" %d", g);
        printf("\n  bad values per 8-column group:");
        for (int g : bad_cols8) printf(" %d", g);
        printf("\n  row %lld, columns %lld…: want/got", (long long)(first / ccols), (long long)(first % ccols));
        for (int64_t e = first; e < std::min<int64_t>(first + 8, (int64_t)want.size()); e++)
            printf(" %g/%g", want[e], got[e]);
        printf("\n");
    }
    for (struct dev_buf *x : {&da, &db, &dc}) dev_buf_free(x);
}

/* ---- (2) attention cases ---- */

struct Geometry { /* where an element was computed, for the diagnosis */
    int fwd_rows, bwd_keys, bwd_rows;
};
static Geometry geometry(AttnKernel k, int D) {
    if (k == refine::ATTN_KERNEL_SM90) return Geometry{128, 128, D == 128 ? 64 : 128};
    return Geometry{64, 64, 64};
}

/* Elements over the max-error budget of a failed (or --debug) comparison, located. x is (B, T, NH, D)
 * for out/dq/dk/dv or (B, NH, T) for lse. */
static void diagnose(AttnKernel kern, const char *what, const float *got, const float *naive, const float *ref,
                     int B, int T, int NH, int D, double factor, double floor_abs) {
    const bool is_lse = strcmp(what, "lse") == 0;
    const int64_t n = is_lse ? (int64_t)B * NH * T : (int64_t)B * T * NH * D;
    double nmax = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(naive[i]) && isfinite(ref[i])) nmax = std::max(nmax, fabs((double)naive[i] - ref[i]));
    const double thr = factor * nmax + floor_abs;
    const Geometry g = geometry(kern, D);
    const bool keys = strcmp(what, "dk") == 0 || strcmp(what, "dv") == 0;
    const bool dqq = strcmp(what, "dq") == 0;
    const int rows_per_tile = keys ? g.bwd_keys : dqq ? g.bwd_rows : g.fwd_rows;
    const int ntiles = (T + rows_per_tile - 1) / rows_per_tile;
    std::vector<int64_t> per_tile(ntiles, 0), per_head(NH, 0);
    int64_t nbad = 0, first = -1, worst = -1;
    double worst_err = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - ref[i]);
        const bool bad = !isfinite(got[i]) || e > thr;
        if (!bad) continue;
        int t, h;
        if (is_lse) t = (int)(i % T), h = (int)((i / T) % NH);
        else t = (int)((i / ((int64_t)NH * D)) % T), h = (int)((i / D) % NH);
        per_tile[t / rows_per_tile]++;
        per_head[h]++;
        if (first < 0) first = i;
        if (!(e <= worst_err)) worst_err = e, worst = i;
        nbad++;
    }
    printf("  diagnosis %s %s: %lld of %lld elements over the max-error budget %.3g (2 × naive max %.3g + floor)\n",
           kernel_name(kern), what, (long long)nbad, (long long)n, thr, nmax);
    if (nbad == 0) return;
    for (int64_t idx : {first, worst}) {
        int b, t, h, d;
        if (is_lse) b = (int)(idx / ((int64_t)NH * T)), h = (int)((idx / T) % NH), t = (int)(idx % T), d = -1;
        else
            b = (int)(idx / ((int64_t)T * NH * D)), t = (int)((idx / ((int64_t)NH * D)) % T), h = (int)((idx / D) % NH),
            d = (int)(idx % D);
        const int tile = t / rows_per_tile, r = t % rows_per_tile;
        printf("  %s (b %d, t %d, h %d, d %d): expected %.6g (naive %.6g) actual %.6g\n", idx == first ? "first" : "worst",
               b, t, h, d, ref[idx], naive[idx], got[idx]);
        if (kern == refine::ATTN_KERNEL_SM90 && !is_lse && (keys || !dqq))
            printf("    %s tile %d (rows %d…%d), row %d: consumer warpgroup %d, warp %d, lane group %d; column %d: "
                   "%d-column block %d\n",
                   keys ? "key" : "query", tile, tile * rows_per_tile, tile * rows_per_tile + rows_per_tile - 1, r, r / 64,
                   (r % 64) / 16, (r % 16) % 8, d, 64, d / 64);
        else if (kern == refine::ATTN_KERNEL_SM90 && dqq)
            printf("    dQ tile %d (query block of %d), row %d, column %d: written by consumer warpgroup %d\n", tile,
                   rows_per_tile, r, d, D == 128 ? d / 64 : r / 64);
        else
            printf("    %s block %d of %d rows, row %d (warp %d)\n", keys ? "key" : "query", tile, rows_per_tile, r, r / 16);
        if (!is_lse) {
            printf("    neighbourhood t %d…%d × d %d…%d, expected/actual:\n", t, std::min(T - 1, t + 3), d & ~7,
                   (d & ~7) + 7);
            for (int tt = t; tt < std::min(T, t + 4); tt++) {
                printf("     ");
                for (int dd = d & ~7; dd < std::min(D, (d & ~7) + 8); dd++) {
                    const int64_t j = (((int64_t)b * T + tt) * NH + h) * D + dd;
                    printf(" %.3g/%.3g", ref[j], got[j]);
                }
                printf("\n");
            }
        }
    }
    printf("  over budget per %d-row block:", rows_per_tile);
    for (int i = 0; i < ntiles && i < 64; i++) printf(" %lld", (long long)per_tile[i]);
    printf("\n  over budget per head:");
    for (int i = 0; i < NH && i < 64; i++) printf(" %lld", (long long)per_head[i]);
    printf("\n");
}

struct Refs {
    std::vector<float> q, k, v, dout, o32, l32, dq32, dk32, dv32, o16_64, o16_128, dq16, dk16, dv16;
    std::vector<uint16_t> qb, kb, vb, gb;
};

/* Finite (cmp_exact_bytes matches any NaN with any NaN): the mark the kernels must leave in the columns
 * of a caller's wider rows that are not theirs. */
static const uint16_t kMark = 0x4321;

/* dq, dk, dv side by side (rows of lg = H·D + 2·KVH·D + spare elements) split into packed dq (rows·HD),
 * dk and dv (rows·KD each); each row's spare columns appended to *spare when given. */
static void split_side_by_side(const std::vector<uint16_t> &all, int64_t rows, int64_t HD, int64_t KD, int64_t lg,
                               std::vector<uint16_t> &dq, std::vector<uint16_t> &dk, std::vector<uint16_t> &dv,
                               std::vector<uint16_t> *spare) {
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *row = &all[(size_t)(r * lg)];
        memcpy(&dq[(size_t)(r * HD)], row, (size_t)HD * 2);
        memcpy(&dk[(size_t)(r * KD)], row + HD, (size_t)KD * 2);
        memcpy(&dv[(size_t)(r * KD)], row + HD + KD, (size_t)KD * 2);
        if (spare) spare->insert(spare->end(), row + HD + 2 * KD, row + lg);
    }
}

/* RoPE's backward inside the attention backward (gpu_attention_rope_backward_strided_bf16, attention_internal.h
 * RopeBwd): dq, dk, dv bitwise the backward followed by gpu_rope_backward_bf16 (rope_parity's pass against
 * ref/rope), for dq, dk, dv side by side at the trainers' stride (spare columns untouched) and packed into
 * poisoned buffers. Positions restart at random rows (packed sequences) and reach the table's last row;
 * the tables are ref/rope's (Llama 3's θ) rounded to bf16, as gpu/llama_layout.cu uploads them. Returns
 * whether a kernel hung. */
static int rope_case(AttnKernel kern, int B, int T, int H, int KVH, int D, float scale, const char *shape,
                     uint64_t seed, const uint16_t *dout, const uint16_t *out, int64_t ld_o, dev_buf &bq, dev_buf &bk,
                     dev_buf &bv, dev_buf &bl, dev_buf &bws) {
    const int T_max = T + 40, half = D / 2;
    const int64_t rows = (int64_t)B * T, HD = (int64_t)H * D, KD = (int64_t)KVH * D, lg = HD + 2 * KD + 8;
    struct ref_rope_cache cache;
    ref_rope_cache_build(&cache, T_max, D, 500000.0f, nullptr);
    std::vector<uint16_t> cs((size_t)T_max * half), sn((size_t)T_max * half);
    bf16_from_float_array(cs.data(), cache.cos, (int64_t)cs.size());
    bf16_from_float_array(sn.data(), cache.sin, (int64_t)sn.size());
    ref_rope_cache_free(&cache);
    struct rng r;
    rng_init(&r, seed ^ 0x524f5045ull);
    std::vector<int32_t> pos((size_t)rows);
    for (int64_t n = 0, t = 0; n < rows; n++, t++) {
        if (rng_int(&r, 16) == 0) t = 0; /* a new packed sequence */
        pos[(size_t)n] = n == rows - 1 ? T_max - 1 : (int32_t)(t % T_max);
    }
    struct dev_buf bcos, bsin, bpos, bsep, bfus, pdq, pdk, pdv;
    dev_buf_alloc(&bcos, "rope cos", cs.size() * 2, POISON_NONE, cs.data());
    dev_buf_alloc(&bsin, "rope sin", sn.size() * 2, POISON_NONE, sn.data());
    dev_buf_alloc(&bpos, "positions", pos.size() * 4, POISON_NONE, pos.data());
    const std::vector<uint16_t> marks((size_t)(rows * lg), kMark);
    dev_buf_alloc(&bsep, "dq|dk|dv, then RoPE's pass", (size_t)(rows * lg) * 2, POISON_NONE, marks.data());
    dev_buf_alloc(&bfus, "dq|dk|dv with RoPE inside", (size_t)(rows * lg) * 2, POISON_NONE, marks.data());
    const size_t nq = (size_t)(rows * HD), nk = (size_t)(rows * KD);
    dev_buf_alloc(&pdq, "dq (packed, RoPE inside)", nq * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&pdk, "dk (packed, RoPE inside)", nk * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&pdv, "dv (packed, RoPE inside)", nk * 2, POISON_BF16, nullptr);
    const refine::RopeBwd rope{(const uint16_t *)bcos.data, (const uint16_t *)bsin.data, (const int32_t *)bpos.data};
    const uint16_t *q = (const uint16_t *)bq.data, *k = (const uint16_t *)bk.data, *v = (const uint16_t *)bv.data;
    const float *lse = (const float *)bl.data;
    auto run = [&](uint16_t *dq, uint16_t *dk, uint16_t *dv, int64_t ldg, const refine::RopeBwd *rp, const char *what) {
        refine::attention_backward(kern, dq, dk, dv, dout, q, k, v, out, lse, B, T, H, KVH, D, scale, bws.data,
                                   g_stream, g_hang, ld_o, ldg, rp);
        return kern == refine::ATTN_KERNEL_SM90 && hang_check(what, shape);
    };
    uint16_t *s0 = (uint16_t *)bsep.data, *f0 = (uint16_t *)bfus.data;
    int hung = run(s0, s0 + HD, s0 + HD + KD, lg, nullptr, "backward (before RoPE's pass)");
    if (!hung) {
        gpu_rope_backward_bf16(s0, s0 + HD, (const uint16_t *)bcos.data, (const uint16_t *)bsin.data,
                               (const int32_t *)bpos.data, (int)rows, H, KVH, D, (int)lg, (int)lg, g_stream);
        hung = run(f0, f0 + HD, f0 + HD + KD, lg, &rope, "backward (RoPE inside, side by side)");
    }
    if (!hung) hung = run((uint16_t *)pdq.data, (uint16_t *)pdk.data, (uint16_t *)pdv.data, 0, &rope,
                          "backward (RoPE inside, packed)");
    if (!hung) {
        CUDA_CHECK(cudaStreamSynchronize(g_stream));
        std::vector<uint16_t> sep((size_t)(rows * lg)), fus((size_t)(rows * lg)), gq(nq), gk(nk), gv(nk);
        dev_buf_download(&bsep, sep.data(), 0);
        dev_buf_download(&bfus, fus.data(), 0);
        dev_buf_download(&pdq, gq.data(), 1);
        dev_buf_download(&pdk, gk.data(), 1);
        dev_buf_download(&pdv, gv.data(), 1);
        std::vector<uint16_t> wq(nq), wk(nk), wv(nk);
        split_side_by_side(sep, rows, HD, KD, lg, wq, wk, wv, nullptr);
        struct cmp_case c = {"attention_backward", "", shape, "bf16", seed};
        c.what = "RoPE inside, dq|dk|dv side by side: bitwise the backward then RoPE's pass (spare columns too)";
        cmp_exact_bytes(&c, fus.data(), sep.data(), fus.size() * 2);
        c.what = "RoPE inside, packed dq: bitwise the backward then RoPE's pass";
        cmp_exact_bytes(&c, gq.data(), wq.data(), nq * 2);
        c.what = "RoPE inside, packed dk: bitwise the backward then RoPE's pass";
        cmp_exact_bytes(&c, gk.data(), wk.data(), nk * 2);
        c.what = "RoPE inside, packed dv: bitwise the backward";
        cmp_exact_bytes(&c, gv.data(), wv.data(), nk * 2);
    }
    for (struct dev_buf *b : {&bcos, &bsin, &bpos, &bsep, &bfus, &pdq, &pdk, &pdv}) dev_buf_free(b);
    return hung;
}

static void run_kernel(AttnKernel kern, const Refs &R, int B, int T, int H, int KVH, int D, uint64_t seed) {
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KVH * D, nl = (size_t)B * H * T;
    const float scale = 1.0f / sqrtf((float)D);
    char shape[112];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d KVH=%d D=%d kernel=%s", B, T, H, KVH, D, kernel_name(kern));
    struct dev_buf bq, bk, bv, bg, bo, bl, bdq, bdk, bdv, bws;
    dev_buf_alloc(&bq, "q", nq * 2, POISON_NONE, R.qb.data());
    dev_buf_alloc(&bk, "k", nk * 2, POISON_NONE, R.kb.data());
    dev_buf_alloc(&bv, "v", nk * 2, POISON_NONE, R.vb.data());
    dev_buf_alloc(&bg, "dout", nq * 2, POISON_NONE, R.gb.data());
    dev_buf_alloc(&bo, "out", nq * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bl, "lse", nl * 4, POISON_F32, nullptr);
    dev_buf_alloc(&bdq, "dq", nq * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdk, "dk", nk * 2, POISON_BF16, nullptr);
    dev_buf_alloc(&bdv, "dv", nk * 2, POISON_BF16, nullptr);
    const size_t wsb = gpu_attention_backward_workspace_size(B, T, H);
    dev_buf_alloc(&bws, "workspace", wsb, POISON_F32, nullptr);

    refine::attention_forward(kern, (uint16_t *)bo.data, (float *)bl.data, (const uint16_t *)bq.data,
                              (const uint16_t *)bk.data, (const uint16_t *)bv.data, B, T, H, KVH, D, scale, g_stream,
                              g_hang);
    int hung = kern == refine::ATTN_KERNEL_SM90 && hang_check("forward", shape);
    auto release = [&]() {
        for (struct dev_buf *b : {&bq, &bk, &bv, &bg, &bo, &bl, &bdq, &bdk, &bdv, &bws}) dev_buf_free(b);
    };
    if (hung) { /* the outputs are garbage: the record above is the result */
        release();
        return;
    }
    auto backward = [&]() {
        refine::attention_backward(kern, (uint16_t *)bdq.data, (uint16_t *)bdk.data, (uint16_t *)bdv.data,
                                   (const uint16_t *)bg.data, (const uint16_t *)bq.data, (const uint16_t *)bk.data,
                                   (const uint16_t *)bv.data, (const uint16_t *)bo.data, (const float *)bl.data, B, T,
                                   H, KVH, D, scale, bws.data, g_stream, g_hang);
        return kern == refine::ATTN_KERNEL_SM90 && hang_check("backward", shape);
    };
    if (backward()) {
        release();
        return;
    }
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    std::vector<uint16_t> ob(nq), dqb(nq), dkb(nk), dvb(nk);
    std::vector<float> lg(nl);
    dev_buf_download(&bo, ob.data(), 1);
    dev_buf_download(&bl, lg.data(), 1);
    dev_buf_download(&bdq, dqb.data(), 1);
    dev_buf_download(&bdk, dkb.data(), 1);
    dev_buf_download(&bdv, dvb.data(), 1);
    for (struct dev_buf *b : {&bq, &bk, &bv, &bg, &bws}) { /* guards: nothing written out of bounds */
        std::vector<unsigned char> tmp(b->nbytes);
        dev_buf_download(b, tmp.data(), 0);
    }
    const std::vector<float> og = floats_of(ob), dqg = floats_of(dqb), dkg = floats_of(dkb), dvg = floats_of(dvb);
    const std::vector<float> &o16 = kern == refine::ATTN_KERNEL_SM90 ? R.o16_128 : R.o16_64;

    struct cmp_case c = {"attention_forward", "out", shape, "bf16", seed};
    const double of = 0.5 * BF16_EPS * cmp_rms(R.o32.data(), (int64_t)nq);
    if (cmp_vs_naive(&c, og.data(), o16.data(), R.o32.data(), (int64_t)nq, 2.0, of, nullptr) || g_debug)
        diagnose(kern, "out", og.data(), o16.data(), R.o32.data(), B, T, H, D, 2.0, of);
    c.what = "lse";
    c.dtype = "f32";
    if (cmp_elementwise(&c, lg.data(), R.l32.data(), (int64_t)nl, FLT_EPSILON, D + 16.0, 1.0, nullptr) || g_debug)
        diagnose(kern, "lse", lg.data(), R.l32.data(), R.l32.data(), B, T, H, D, 0.0, FLT_EPSILON * (D + 16.0) * 4);
    c.op = "attention_backward";
    c.dtype = "bf16";
    const double ds_floor = 4.0 * FLT_EPSILON * sqrt((double)D) * scale;
    struct {
        const char *what;
        const std::vector<float> &got, &naive, &ref;
        int NH;
        size_t n;
        double floor;
    } outs[] = {
        {"dq", dqg, R.dq16, R.dq32, H, nq, 0.5 * BF16_EPS * cmp_rms(R.dq32.data(), (int64_t)nq) + ds_floor},
        {"dk", dkg, R.dk16, R.dk32, KVH, nk, 0.5 * BF16_EPS * cmp_rms(R.dk32.data(), (int64_t)nk) + ds_floor},
        {"dv", dvg, R.dv16, R.dv32, KVH, nk, 0.5 * BF16_EPS * cmp_rms(R.dv32.data(), (int64_t)nk)},
    };
    for (auto &x : outs) {
        c.what = x.what;
        if (cmp_vs_naive(&c, x.got.data(), x.naive.data(), x.ref.data(), (int64_t)x.n, 2.0, x.floor, nullptr) ||
            g_debug)
            diagnose(kern, x.what, x.got.data(), x.naive.data(), x.ref.data(), B, T, x.NH, D, 2.0, x.floor);
    }

    /* Determinism: the backward again, into poisoned buffers (and a poisoned workspace), gives the
     * same bits. */
    dev_buf_reset(&bdq, nullptr);
    dev_buf_reset(&bdk, nullptr);
    dev_buf_reset(&bdv, nullptr);
    dev_buf_reset(&bws, nullptr);
    if (backward()) {
        release();
        return;
    }
    std::vector<uint16_t> again(nq), againk(nk), againv(nk);
    dev_buf_download(&bdq, again.data(), 1);
    dev_buf_download(&bdk, againk.data(), 1);
    dev_buf_download(&bdv, againv.data(), 1);
    c.what = "dq/dk/dv determinism";
    cmp_exact_bytes(&c, again.data(), dqb.data(), nq * 2);
    cmp_exact_bytes(&c, againk.data(), dkb.data(), nk * 2);
    cmp_exact_bytes(&c, againv.data(), dvb.data(), nk * 2);

    /* The Hopper forward's two kernels where both apply (D = 64, T ≤ 512: the whole-head kernel and the
     * tile kernel, REFINE_ATTENTION_FWD): each into poisoned buffers, out and lse bitwise the other's —
     * the same arithmetic in the same order — so whichever the shape picks is checked above. */
    if (kern == refine::ATTN_KERNEL_SM90 && D == 64 && T <= 512) {
        std::vector<uint16_t> fo[2];
        std::vector<float> fl[2];
        const char *choice[2] = {"heads", "tiles"};
        for (int i = 0; i < 2 && !hung; i++) {
            setenv("REFINE_ATTENTION_FWD", choice[i], 1);
            dev_buf_reset(&bo, nullptr);
            dev_buf_reset(&bl, nullptr);
            refine::attention_forward(kern, (uint16_t *)bo.data, (float *)bl.data, (const uint16_t *)bq.data,
                                      (const uint16_t *)bk.data, (const uint16_t *)bv.data, B, T, H, KVH, D, scale,
                                      g_stream, g_hang);
            unsetenv("REFINE_ATTENTION_FWD");
            hung = hang_check(i == 0 ? "forward (whole heads)" : "forward (tiles)", shape);
            fo[i].resize(nq), fl[i].resize(nl);
            if (!hung) {
                CUDA_CHECK(cudaStreamSynchronize(g_stream));
                dev_buf_download(&bo, fo[i].data(), 1);
                dev_buf_download(&bl, fl[i].data(), 1);
            }
        }
        if (hung) {
            release();
            return;
        }
        c.op = "attention_forward";
        c.what = "out, whole heads vs tiles";
        cmp_exact_bytes(&c, fo[0].data(), fo[1].data(), nq * 2);
        c.what = "lse, whole heads vs tiles";
        cmp_exact_bytes(&c, fl[0].data(), fl[1].data(), nl * 4);
        c.what = "out, the shape's own choice vs tiles";
        cmp_exact_bytes(&c, ob.data(), fo[1].data(), nq * 2);
        c.op = "attention_backward";
    }

    /* Rows at a wider stride (gpu_attention_*_ld_bf16; ld = H·D + 64, as a caller's adapter columns
     * after each row): the forward's out bitwise the packed out, the columns past H·D untouched; the
     * backward from dout and out at that stride bitwise the packed backward's dq, dk, dv. */
    const int64_t HD = (int64_t)H * D, ld = HD + 64, rows = (int64_t)B * T;
    std::vector<uint16_t> gw((size_t)(rows * ld), kMark), ow((size_t)(rows * ld));
    for (int64_t r = 0; r < rows; r++) memcpy(&gw[(size_t)(r * ld)], &R.gb[(size_t)(r * HD)], (size_t)HD * 2);
    const std::vector<uint16_t> marks((size_t)(rows * ld), kMark);
    struct dev_buf bow, bgw;
    dev_buf_alloc(&bow, "out (row stride H*D + 64)", (size_t)(rows * ld) * 2, POISON_NONE, marks.data());
    dev_buf_alloc(&bgw, "dout (row stride H*D + 64)", (size_t)(rows * ld) * 2, POISON_NONE, gw.data());
    refine::attention_forward(kern, (uint16_t *)bow.data, (float *)bl.data, (const uint16_t *)bq.data,
                              (const uint16_t *)bk.data, (const uint16_t *)bv.data, B, T, H, KVH, D, scale, g_stream,
                              g_hang, ld);
    hung = kern == refine::ATTN_KERNEL_SM90 && hang_check("forward (strided)", shape);
    if (!hung) {
        dev_buf_reset(&bdq, nullptr);
        dev_buf_reset(&bdk, nullptr);
        dev_buf_reset(&bdv, nullptr);
        refine::attention_backward(kern, (uint16_t *)bdq.data, (uint16_t *)bdk.data, (uint16_t *)bdv.data,
                                   (const uint16_t *)bgw.data, (const uint16_t *)bq.data, (const uint16_t *)bk.data,
                                   (const uint16_t *)bv.data, (const uint16_t *)bow.data, (const float *)bl.data, B, T,
                                   H, KVH, D, scale, bws.data, g_stream, g_hang, ld);
        hung = kern == refine::ATTN_KERNEL_SM90 && hang_check("backward (strided)", shape);
    }
    if (!hung) {
        CUDA_CHECK(cudaStreamSynchronize(g_stream));
        dev_buf_download(&bow, ow.data(), 1);
        std::vector<uint16_t> packed(nq), extra;
        extra.reserve((size_t)(rows * 64));
        for (int64_t r = 0; r < rows; r++) {
            memcpy(&packed[(size_t)(r * HD)], &ow[(size_t)(r * ld)], (size_t)HD * 2);
            extra.insert(extra.end(), ow.begin() + r * ld + HD, ow.begin() + (r + 1) * ld);
        }
        c.op = "attention_forward";
        c.what = "out at row stride H*D + 64: bitwise the packed out";
        cmp_exact_bytes(&c, packed.data(), ob.data(), nq * 2);
        c.what = "out at row stride H*D + 64: the columns past H*D untouched";
        const std::vector<uint16_t> want((size_t)(rows * 64), kMark);
        cmp_exact_bytes(&c, extra.data(), want.data(), extra.size() * 2);
        dev_buf_download(&bdq, again.data(), 1);
        dev_buf_download(&bdk, againk.data(), 1);
        dev_buf_download(&bdv, againv.data(), 1);
        c.op = "attention_backward";
        c.what = "dq/dk/dv from dout and out at row stride H*D + 64: bitwise the packed backward";
        cmp_exact_bytes(&c, again.data(), dqb.data(), nq * 2);
        cmp_exact_bytes(&c, againk.data(), dkb.data(), nk * 2);
        cmp_exact_bytes(&c, againv.data(), dvb.data(), nk * 2);
    }
    if (!hung) {
        /* dq, dk, dv side by side in one buffer (gpu_attention_backward_strided_bf16's ld_g = H·D + 2·KVH·D
         * + 8, the layout gpu/llama.cu's fused q/k/v gradient uses, with 8 spare columns): each bitwise the
         * packed one, the spare columns untouched */
        const int64_t KD = (int64_t)KVH * D, lg = HD + 2 * KD + 8;
        const std::vector<uint16_t> gmarks((size_t)(rows * lg), kMark);
        struct dev_buf bg;
        dev_buf_alloc(&bg, "dq|dk|dv (one buffer)", (size_t)(rows * lg) * 2, POISON_NONE, gmarks.data());
        uint16_t *g0 = (uint16_t *)bg.data;
        refine::attention_backward(kern, g0, g0 + HD, g0 + HD + KD, (const uint16_t *)bgw.data,
                                   (const uint16_t *)bq.data, (const uint16_t *)bk.data, (const uint16_t *)bv.data,
                                   (const uint16_t *)bow.data, (const float *)bl.data, B, T, H, KVH, D, scale, bws.data,
                                   g_stream, g_hang, ld, lg);
        hung = kern == refine::ATTN_KERNEL_SM90 && hang_check("backward (dq|dk|dv in one buffer)", shape);
        if (!hung) {
            std::vector<uint16_t> gall((size_t)(rows * lg));
            dev_buf_download(&bg, gall.data(), 0);
            std::vector<uint16_t> pq(nq), pk(nk), pv(nk), spare;
            split_side_by_side(gall, rows, HD, KD, lg, pq, pk, pv, &spare);
            c.op = "attention_backward";
            c.what = "dq, dk, dv side by side at row stride H*D + 2*KVH*D + 8: bitwise the packed backward";
            cmp_exact_bytes(&c, pq.data(), dqb.data(), nq * 2);
            cmp_exact_bytes(&c, pk.data(), dkb.data(), nk * 2);
            cmp_exact_bytes(&c, pv.data(), dvb.data(), nk * 2);
            c.what = "dq, dk, dv side by side: the spare columns untouched";
            const std::vector<uint16_t> want((size_t)(rows * 8), kMark);
            cmp_exact_bytes(&c, spare.data(), want.data(), spare.size() * 2);
        }
        dev_buf_free(&bg);
    }
    if (!hung) hung = rope_case(kern, B, T, H, KVH, D, scale, shape, seed, (const uint16_t *)bgw.data,
                                (const uint16_t *)bow.data, ld, bq, bk, bv, bl, bws);
    dev_buf_free(&bow);
    dev_buf_free(&bgw);
    release();
}

static void run_case(int B, int T, int H, int KVH, int D, int want_sm80, int want_sm90) {
    const bool sm90 = want_sm90 && refine::attn90_available(D) && !g_sm90_hung;
    if (!want_sm80 && !sm90) return;
    const uint64_t seed = g_seed ^ ((uint64_t)T << 40) ^ ((uint64_t)H << 24) ^ ((uint64_t)KVH << 16) ^ (uint64_t)D ^
                          ((uint64_t)B << 56);
    struct rng r;
    rng_init(&r, seed);
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KVH * D, nl = (size_t)B * H * T;
    Refs R;
    bf16_fill(R.q, R.qb, &r, nq);
    bf16_fill(R.k, R.kb, &r, nk);
    bf16_fill(R.v, R.vb, &r, nk);
    bf16_fill(R.dout, R.gb, &r, nq);
    const float scale = 1.0f / sqrtf((float)D);

    /* Oracle (fp32, naive) and the same-precision references (flash, ACT_BF16). */
    R.o32.resize(nq), R.l32.resize(nl), R.dq32.resize(nq), R.dk32.resize(nk), R.dv32.resize(nk);
    std::vector<float> ws(ref_attention_naive_workspace_size(B, T, H) / sizeof(float) + 1);
    ref_attention_naive_forward(R.o32.data(), R.l32.data(), R.q.data(), R.k.data(), R.v.data(), B, T, H, KVH, D, scale,
                                ACT_F32, ws.data());
    ref_attention_naive_backward(R.dq32.data(), R.dk32.data(), R.dv32.data(), R.dout.data(), R.q.data(), R.k.data(),
                                 R.v.data(), R.o32.data(), B, T, H, KVH, D, scale, ACT_F32, ws.data());
    std::vector<float> l16(nl);
    R.o16_64.resize(nq), R.dq16.resize(nq), R.dk16.resize(nk), R.dv16.resize(nk);
    std::vector<float> fws(ref_attention_flash_backward_workspace_size(B, T, H) / sizeof(float) + 1);
    ref_attention_flash_forward(R.o16_64.data(), l16.data(), R.q.data(), R.k.data(), R.v.data(), B, T, H, KVH, D, scale,
                                64, 64, ACT_BF16);
    ref_attention_flash_backward(R.dq16.data(), R.dk16.data(), R.dv16.data(), R.dout.data(), R.q.data(), R.k.data(),
                                 R.v.data(), R.o16_64.data(), l16.data(), B, T, H, KVH, D, scale, 64, 64, ACT_BF16,
                                 fws.data());
    if (sm90) {
        R.o16_128.resize(nq);
        ref_attention_flash_forward(R.o16_128.data(), l16.data(), R.q.data(), R.k.data(), R.v.data(), B, T, H, KVH, D,
                                    scale, 128, 128, ACT_BF16);
    }
    if (want_sm80) run_kernel(refine::ATTN_KERNEL_SM80, R, B, T, H, KVH, D, seed);
    if (sm90) {
        printf("attention_parity: sm90 B=%d T=%d H=%d KVH=%d D=%d (seed %llu)\n", B, T, H, KVH, D,
               (unsigned long long)seed);
        fflush(stdout);
        run_kernel(refine::ATTN_KERNEL_SM90, R, B, T, H, KVH, D, seed);
    }
}

/* ---- (3) benchmark ---- */

struct bench_ctx {
    int B, T, H, KVH, D, which;
    AttnKernel kern;
    uint16_t *q, *k, *v, *o, *g, *dq, *dk, *dv;
    float *lse;
    void *ws;
};

static void bench_call(void *p, cudaStream_t s) {
    bench_ctx *b = (bench_ctx *)p;
    const float scale = 1.0f / sqrtf((float)b->D);
    if (b->which == 0)
        refine::attention_forward(b->kern, b->o, b->lse, b->q, b->k, b->v, b->B, b->T, b->H, b->KVH, b->D, scale, s,
                                  nullptr);
    else
        refine::attention_backward(b->kern, b->dq, b->dk, b->dv, b->g, b->q, b->k, b->v, b->o, b->lse, b->B, b->T,
                                   b->H, b->KVH, b->D, scale, b->ws, s, nullptr);
}

/* FLOPs (flash-attention's convention): forward 4·B·H·T²·D / 2 (causal), backward 2.5× forward. */
static void bench(int want_sm80, int want_sm90, const int *only) {
    const double ceiling = gpu_gemm_measure_bf16_rate(8192) / 1e12;
    printf("attention_parity: measured bf16 GEMM ceiling (8192³, cuBLASLt) %.1f TFLOP/s\n", ceiling);
    std::vector<std::vector<int>> shapes = {{4, 4096, 16, 16, 128}, {16, 512, 32, 8, 64}, {4, 4096, 32, 32, 64},
                                            {8, 2048, 16, 16, 128}, {16, 512, 9, 3, 64}};
    if (only) shapes = {std::vector<int>(only, only + 5)};
    struct Row {
        char shape[64];
        double tf[2][2]; /* [sm80, sm90][forward, backward], 0 when not run */
    };
    std::vector<Row> rows;
    for (auto &sh : shapes) {
        Row row = {};
        snprintf(row.shape, sizeof row.shape, "B=%d T=%d H=%d KVH=%d D=%d", sh[0], sh[1], sh[2], sh[3], sh[4]);
        for (int fam = 0; fam < 2; fam++) {
            const AttnKernel kern = fam ? refine::ATTN_KERNEL_SM90 : refine::ATTN_KERNEL_SM80;
            if (fam == 0 && !want_sm80) continue;
            if (fam == 1 && !(want_sm90 && refine::attn90_available(sh[4]))) continue;
            bench_ctx b = {sh[0], sh[1], sh[2], sh[3], sh[4], 0, kern};
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
            snprintf(shape, sizeof shape, "%s causal kernel=%s", row.shape, kernel_name(kern));
            const double fwd = 4.0 * b.B * b.H * (double)b.T * b.T * b.D / 2.0;
            for (int pass = 0; pass < 2; pass++) {
                b.which = pass;
                const double flops = pass ? 2.5 * fwd : fwd;
                const struct bench_result t = bench_time(bench_call, &b, g_stream, 3, 15, 3);
                bench_json(pass ? "attention_backward" : "attention_forward", shape, 0, flops, t, ceiling);
                row.tf[fam][pass] = flops / (t.median_ms * 1e-3) / 1e12;
            }
            for (uint16_t **p : qs) CUDA_CHECK(cudaFree(*p));
            for (uint16_t **p : ks) CUDA_CHECK(cudaFree(*p));
            CUDA_CHECK(cudaFree(b.lse));
            CUDA_CHECK(cudaFree(b.ws));
        }
        rows.push_back(row);
    }
    printf("\nattention_parity: summary (TFLOP/s, %% of the %.0f TFLOP/s GEMM ceiling; causal)\n", ceiling);
    printf("%-34s %22s %22s %22s %22s\n", "shape", "forward sm80", "forward sm90", "backward sm80", "backward sm90");
    for (const Row &row : rows) {
        printf("%-34s", row.shape);
        for (int pass = 0; pass < 2; pass++)
            for (int fam = 0; fam < 2; fam++) {
                if (row.tf[fam][pass] > 0) printf(" %12.1f (%5.1f%%)", row.tf[fam][pass], 100.0 * row.tf[fam][pass] / ceiling);
                else printf(" %22s", "—");
            }
        printf("\n");
    }
    printf("targets: D=128 T=4096 forward >= 450, backward >= 350; 1B shape (B=16 T=512 H=32 KVH=8 D=64) >= 3x the "
           "sm80 kernel\n");
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    parity_init();
    CUDA_CHECK(cudaStreamCreate(&g_stream));
    CUDA_CHECK(cudaMalloc(&g_hang, sizeof(refine::HangRecord)));
    hang_reset();
    g_debug = test_has_flag(argc, argv, "--debug");
    int want_sm80 = 1, want_sm90 = 1;
    if (test_has_flag(argc, argv, "--kernel=sm80")) want_sm90 = 0;
    if (test_has_flag(argc, argv, "--kernel=sm90")) want_sm80 = 0;
    const bool hopper = refine::attn90_available(64);
    printf("attention_parity: Hopper kernels %s on this device; families tested:%s%s\n",
           hopper ? "available" : "not available", want_sm80 ? " sm80" : "", want_sm90 && hopper ? " sm90" : "");
    if (want_sm90 && hopper && !test_has_flag(argc, argv, "--bench-only"))
        for (int D : {64, 128})
            for (int w = 0; w < refine::ATTN_PROBE_COUNT && !g_sm90_hung; w++) run_probe((refine::AttnProbe)w, D);
    if (g_sm90_hung) printf("attention_parity: a probe hung; the sm90 attention cases are skipped\n");

    const int cases[][5] = {{1, 1, 4, 4, 64},     {2, 17, 6, 2, 64},    {1, 63, 9, 3, 64},   {1, 64, 8, 2, 128},
                            {2, 65, 4, 1, 128},   {1, 100, 6, 2, 128},  {1, 257, 12, 4, 64}, {1, 257, 8, 8, 128},
                            {1, 1024, 8, 2, 128}, {2, 1024, 16, 4, 64},
                            /* the Hopper kernels' tile edges (128-row tiles, 64-row backward blocks), GQA 2:1 and 16:1 */
                            {1, 127, 4, 2, 128},  {2, 128, 4, 4, 64},   {1, 129, 4, 1, 128}, {1, 255, 2, 2, 64},
                            {1, 383, 16, 1, 128}, {3, 200, 16, 1, 64},
                            /* more tiles and backward CTAs than an H100 has SMs (persistent forward, the dQ order
                             * across waves) */
                            {8, 512, 8, 8, 64},   {8, 256, 16, 16, 128},
                            /* several tiles a CTA (the forward's step from one tile to the next, its Q stages
                             * reused, single-block tiles among them), at the 1B model's head counts */
                            {6, 512, 32, 8, 64},  {4, 300, 24, 8, 128},
                            /* enough (b, kv head) pairs for the whole-head forward (gpu/attention_sm90_fwd.cu) to be
                             * the shape's own choice on an H100 or H200; T 100 a partial key block, T 448 three
                             * and a half */
                            {40, 100, 6, 3, 64},  {12, 448, 20, 10, 64},
                            /* head dims of small models (the test models have D = 16): sm80 only */
                            {2, 33, 4, 1, 16},    {1, 130, 6, 2, 16},   {2, 65, 4, 2, 32}};
    const bool bench_only = test_has_flag(argc, argv, "--bench-only");
    if (!bench_only)
        for (auto &cs : cases) run_case(cs[0], cs[1], cs[2], cs[3], cs[4], want_sm80, want_sm90);
    const int rc = test_finish("attention_parity");
    /* --bench-shape=B,T,H,KVH,D: that shape alone (e.g. under a profiler) */
    int only[5], *shape = nullptr;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--bench-shape=", 14) == 0) {
            if (sscanf(argv[i] + 14, "%d,%d,%d,%d,%d", &only[0], &only[1], &only[2], &only[3], &only[4]) != 5 ||
                only[0] < 1 || only[1] < 1 || only[2] < 1 || only[3] < 1 || only[2] % only[3] != 0 || only[4] < 1) {
                fprintf(stderr, "attention_parity: --bench-shape wants B,T,H,KVH,D (H a multiple of KVH), got %s\n",
                        argv[i] + 14);
                return 1;
            }
            shape = only;
        }
    if (rc == 0 && (bench_only || shape || test_has_flag(argc, argv, "--bench"))) bench(want_sm80, want_sm90, shape);
    CUDA_CHECK(cudaFree(g_hang));
    CUDA_CHECK(cudaStreamDestroy(g_stream));
    return rc;
}
