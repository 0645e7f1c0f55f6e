/* gemm_fp8_accum.cu — FP8 GEMM test operands, the accumulation measurement and its model
 * (gemm_fp8_accum.h). */
#include "tests/parity/gemm_fp8_accum.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <string>

#include "gpu/cuda_check.h"
#include "io/check.h"
#include "ref/bf16.h"
#include "tests/common/poison.h"

/* Integer codes in [−vmax, vmax]; power-of-two scales (tensor: 2^e0; blocks: random 2^[−2, 2]). */
void make_int_operand(operand &o, int rows, int K, gemm_dtype t, gemm_scale m, int vmax, int e0, struct rng *r) {
    o.rows = rows, o.K = K, o.type = t, o.mode = m;
    o.codes.resize((size_t)rows * K);
    for (auto &c : o.codes) c = fp8_from_float((float)(rng_int(r, 2 * vmax + 1) - vmax), fmt_of(t), FP8_SATFINITE);
    o.scales.assign((size_t)o.scale_count(), 0.0f);
    if (m == GEMM_SCALE_TENSOR)
        o.scales[0] = ldexpf(1.0f, e0);
    else
        for (auto &s : o.scales) s = ldexpf(1.0f, rng_int(r, 5) - 2);
    if (m == GEMM_SCALE_128X128) /* padding slots stay 0, as the quantization writes them */
        for (int rb = 0; rb < (rows + 127) / 128; rb++)
            for (int64_t k = (K + 127) / 128; k < fp8_block_scale_ld(FP8_BLOCK_128X128, rows, K); k++)
                o.scales[(size_t)(rb * fp8_block_scale_ld(FP8_BLOCK_128X128, rows, K) + k)] = 0.0f;
}

/* Normal values with a per-row magnitude, quantized as the recipes do (current scaling per tensor,
 * or block quantization). */
void make_random_operand(operand &o, int rows, int K, gemm_dtype t, gemm_scale m, struct rng *r) {
    o.rows = rows, o.K = K, o.type = t, o.mode = m;
    std::vector<float> x((size_t)rows * K);
    for (int i = 0; i < rows; i++) {
        const double mag = exp(rng_range(r, -2, 2));
        for (int k = 0; k < K; k++) x[(size_t)i * K + k] = (float)(rng_normal(r) * mag);
    }
    o.codes.resize(x.size());
    o.scales.assign((size_t)o.scale_count(), 0.0f);
    if (m == GEMM_SCALE_TENSOR) {
        const float scale = fp8_current_scale(fp8_amax(x.data(), (int64_t)x.size()), fmt_of(t), 0.0f, 0);
        fp8_quantize(o.codes.data(), nullptr, x.data(), (int64_t)x.size(), scale, fmt_of(t));
        o.scales[0] = 1.0f / scale;
    } else {
        struct fp8_stats st = {0, 0, 0};
        fp8_block_quantize(o.codes.data(), o.scales.data(), nullptr, nullptr, &st, x.data(), rows, K, block_of(m),
                           fmt_of(t), 0.0f, 1);
    }
}


gemm_status run_product(struct gpu_gemm *g, cudaStream_t stream, product &pr, const operand &A, const operand &B,
                        std::vector<float> &d) {
    const int m = A.rows, n = B.rows, k = A.K;
    const bool f32 = pr.out == GEMM_OUT_F32;
    const size_t esz = f32 ? 4 : 2;
    std::vector<unsigned char> img((size_t)m * n * esz);
    struct dev_buf bd, bb, ba;
    if (pr.beta == GEMM_ACCUMULATE) {
        for (size_t i = 0; i < (size_t)m * n; i++) {
            if (f32) memcpy(&img[i * 4], &pr.c[i], 4);
            else {
                const uint16_t h = bf16_from_float(pr.c[i]);
                memcpy(&img[i * 2], &h, 2);
            }
        }
        dev_buf_alloc(&bd, "D", img.size(), POISON_NONE, img.data());
    } else { /* poisoned: every element must be written */
        dev_buf_alloc(&bd, "D", img.size(), f32 ? POISON_F32 : POISON_BF16, nullptr);
    }
    std::vector<uint16_t> biasb;
    for (float v : pr.bias) biasb.push_back(bf16_from_float(v));
    dev_buf_alloc(&bb, "bias", biasb.size() * 2 + 16, POISON_NONE, nullptr);
    if (!biasb.empty()) CUDA_CHECK(cudaMemcpy(bb.data, biasb.data(), biasb.size() * 2, cudaMemcpyHostToDevice));
    const float zero = 0.0f;
    dev_buf_alloc(&ba, "amax_d", 16, POISON_NONE, nullptr);
    CUDA_CHECK(cudaMemcpy(ba.data, &zero, 4, cudaMemcpyHostToDevice));
    struct gemm_args p;
    memset(&p, 0, sizeof p);
    p.d = bd.data, p.d_type = pr.out, p.ldd = n;
    p.a = A.dcodes.data, p.op_a = GEMM_NO_TRANS, p.lda = k;
    p.b = B.dcodes.data, p.op_b = GEMM_TRANS, p.ldb = k;
    p.bias = biasb.empty() ? nullptr : (const uint16_t *)bb.data;
    p.m = m, p.n = n, p.k = k, p.batch = 1, p.alpha = pr.alpha, p.beta = pr.beta;
    p.a_type = A.type, p.b_type = B.type, p.a_scale_mode = A.mode, p.b_scale_mode = B.mode, p.accum = pr.accum;
    p.a_scale = pr.null_scales ? nullptr : (const float *)A.dscales.data;
    p.b_scale = pr.null_scales ? nullptr : (const float *)B.dscales.data;
    p.amax_d = pr.want_amax ? (float *)ba.data : nullptr;
    const gemm_status st = gpu_gemm_try(g, &p, stream);
    if (st == GEMM_OK) {
        gpu_gemm_algo_name(g, &p, pr.algo, sizeof pr.algo);
        dev_buf_download(&bd, img.data(), pr.beta == GEMM_OVERWRITE);
        d.resize((size_t)m * n);
        for (size_t i = 0; i < d.size(); i++) {
            if (f32) memcpy(&d[i], &img[i * 4], 4);
            else {
                uint16_t h;
                memcpy(&h, &img[i * 2], 2);
                d[i] = bf16_to_float(h);
            }
        }
        if (pr.want_amax) CUDA_CHECK(cudaMemcpy(&pr.amax, ba.data, 4, cudaMemcpyDeviceToHost));
    }
    for (struct dev_buf *b : {&bd, &bb, &ba}) dev_buf_free(b);
    return st;
}

/* The exact result (ref_fp8_gemm_scaled, double, one rounding) with alpha, C and the bias. */
std::vector<float> exact_product(const product &pr, const operand &A, const operand &B) {
    const int m = A.rows, n = B.rows;
    std::vector<float> acc((size_t)m * n), want((size_t)m * n);
    std::vector<float> one(1, 1.0f);
    ref_fp8_gemm_scaled(acc.data(), A.codes.data(), fmt_of(A.type), scaling_of(A.mode), pr.null_scales ? one.data() : A.scales.data(),
                        B.codes.data(), fmt_of(B.type), scaling_of(B.mode), pr.null_scales ? one.data() : B.scales.data(), m, n,
                        A.K, FP8_OUT_F32);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double v = (double)pr.alpha * acc[(size_t)i * n + j];
            if (pr.beta == GEMM_ACCUMULATE) v += pr.c[(size_t)i * n + j];
            if (!pr.bias.empty()) v += pr.bias[(size_t)j];
            want[(size_t)i * n + j] = pr.out == GEMM_OUT_F32 ? (float)v : bf16_round((float)v);
        }
    return want;
}

const int kDist[] = {1, 15, 16, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 1023, 1024, 2047, 2048, 4095};
const int kNDist = (int)(sizeof kDist / sizeof kDist[0]);
const int kGroupDist[] = {2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65, 128};
const int kNGroup = (int)(sizeof kGroupDist / sizeof kGroupDist[0]);

/* a·b = 2^e (or 3·2^e) as two E4M3 codes; returns the pair. */
static void pow2_pair(int e, int three, uint8_t *a, uint8_t *b) {
    const int ea = (e >= 0) ? (e + 1) / 2 : e / 2, eb = e - ea;
    *a = fp8_from_float((three ? 3.0f : 1.0f) * ldexpf(1.0f, ea), FP8_E4M3, FP8_SATFINITE);
    *b = fp8_from_float(ldexpf(1.0f, eb), FP8_E4M3, FP8_SATFINITE);
}

const char *acc_name(acc_kind k) { return k == ACC_PRECISE ? "precise" : k == ACC_FAST ? "fast" : "block 1x128 x 128x128"; }

/* The probe's operands: one experiment per row pair (file comment, (b)); unit scales. */
static int g_probe_group_row, g_probe_round_row; /* first rows of the group and rounding experiments */

void build_probe(operand &A, operand &B, acc_kind kind) {
    const int M = kProbeM, K = kProbeK;
    A.rows = B.rows = M, A.K = B.K = K, A.type = B.type = GEMM_E4M3;
    A.mode = kind == ACC_BLOCK ? GEMM_SCALE_1X128 : GEMM_SCALE_TENSOR;
    B.mode = kind == ACC_BLOCK ? GEMM_SCALE_128X128 : GEMM_SCALE_TENSOR;
    A.codes.assign((size_t)M * K, 0), B.codes.assign((size_t)M * K, 0);
    A.scales.assign((size_t)A.scale_count(), 1.0f), B.scales.assign((size_t)B.scale_count(), 1.0f);
    const uint8_t c256 = fp8_from_float(256.0f, FP8_E4M3, FP8_SATFINITE), cm256 = fp8_from_float(-256.0f, FP8_E4M3, FP8_SATFINITE);
    int e = 0;
    auto put = [&](int row, int k, uint8_t a, uint8_t b) { A.codes[(size_t)row * K + k] = a, B.codes[(size_t)row * K + k] = b; };
    for (int di = 0; di < kNDist; di++) /* bits(d): 2^16 at 0, 2^(16−g) at d */
        for (int g = 1; g <= 34; g++, e++) {
            uint8_t a, b;
            pow2_pair(16 - g, 0, &a, &b);
            put(e, 0, c256, c256), put(e, kDist[di], a, b);
        }
    g_probe_group_row = e;
    for (int gi = 0; gi < kNGroup; gi++, e++) { /* +2^16, −2^16, then 2^-14 at d */
        uint8_t a, b;
        pow2_pair(-14, 0, &a, &b);
        put(e, 0, c256, c256), put(e, 1, cm256, c256), put(e, kGroupDist[gi], a, b);
    }
    g_probe_round_row = e;
    for (int pp = 8; pp <= 23; pp++)
        for (int sg = 0; sg < 2; sg++, e++) { /* ±2^16, then 0.75·2^(16−p) */
            uint8_t a, b;
            pow2_pair(16 - pp - 2, 1, &a, &b);
            put(e, 0, sg ? cm256 : c256, c256), put(e, 1, a, b);
        }
    CHECK(e <= M, "probe: %d experiments", e);
}

/* Reads the measured parameters off the experiments' results diag[i] = D[i][i]. */
acc_params interpret_probe(const std::vector<float> &diag) {
    acc_params ap;
    ap.ran = 1;
    int e = 0;
    for (int di = 0; di < kNDist; di++) {
        int b = 0;
        for (int g = 1; g <= 34; g++, e++) {
            const double exact = 65536.0 + ldexp(1.0, 16 - g);
            if (b == g - 1 && g <= 23 && (double)diag[(size_t)e] == exact) b = g;
        }
        ap.bits[di] = b;
    }
    for (int di = 0; di < kNDist && !ap.interval; di++)
        if (ap.bits[di] >= 23) ap.interval = kDist[di];
    ap.p = 23;
    for (int di = 0; di < kNDist; di++)
        if (!ap.interval || kDist[di] < ap.interval) ap.p = std::min(ap.p, ap.bits[di]);
    for (int gi = 0; gi < kNGroup && !ap.group; gi++)
        if (diag[(size_t)(g_probe_group_row + gi)] == ldexpf(1.0f, -14)) ap.group = kGroupDist[gi];
    if (ap.p >= 8 && ap.p <= 23) {
        const size_t i = (size_t)(g_probe_round_row + 2 * (ap.p - 8));
        const double u = ldexp(1.0, 16 - ap.p);
        snprintf(ap.rounding, sizeof ap.rounding, "2^16 + 0.75 ulp -> %+g ulp, -2^16 + 0.75 ulp -> %+g ulp",
                 (diag[i] - 65536.0) / u, (diag[i + 1] + 65536.0) / u);
    }
    return ap;
}

acc_params measure_accumulation(struct gpu_gemm *g, cudaStream_t stream, acc_kind kind) {
    operand A, B;
    build_probe(A, B, kind);
    A.upload("probe A"), B.upload("probe B");
    product pr;
    pr.accum = kind == ACC_FAST ? GEMM_ACCUM_FAST : GEMM_ACCUM_PRECISE;
    std::vector<float> d;
    acc_params ap;
    if (run_product(g, stream, pr, A, B, d) == GEMM_OK) {
        std::vector<float> diag((size_t)kProbeM);
        for (int i = 0; i < kProbeM; i++) diag[(size_t)i] = d[(size_t)i * kProbeM + i];
        ap = interpret_probe(diag);
        snprintf(ap.algo, sizeof ap.algo, "%s", pr.algo);
    }
    A.release(), B.release();
    return ap;
}

void print_acc(acc_kind kind, const acc_params &ap, int verbose) {
    if (!ap.ran) {
        printf("accumulation %-22s: not run by cuBLASLt\n", acc_name(kind));
        return;
    }
    printf("accumulation %-22s: p = %d bits, promotion every %s products, aligned group %s; %s [%s]\n", acc_name(kind),
           ap.p, ap.interval ? std::to_string(ap.interval).c_str() : "never (<= 4095)",
           ap.group ? std::to_string(ap.group).c_str() : "> 128", ap.rounding, ap.algo);
    if (verbose) {
        printf("  bits(d) (small term at distance d from a 2^16 term; 23 = fp32):\n   ");
        for (int di = 0; di < kNDist; di++) printf(" d=%d:%d", kDist[di], ap.bits[di]);
        printf("\n");
    }
}

/* The model accumulator (file comment, (c)): Σ a_k·b_k with per-block scales sblk (nullptr: none). */
double model_dot(const float *a, const float *b, int K, const acc_params &m, const double *sblk) {
    const int I = sblk ? 128 : (m.interval ? m.interval : 1 << 30), g = std::min(m.group ? m.group : 128, I);
    float facc = 0.0f;
    double acc = 0.0;
    for (int k0 = 0; k0 < K; k0 += g) {
        const int k1 = std::min(K, k0 + g);
        double big = fabs(acc);
        for (int k = k0; k < k1; k++) big = fmax(big, fabs((double)a[k] * b[k]));
        if (big > 0) {
            int ex;
            frexp(big, &ex); /* big = f·2^ex, f in [0.5, 1): leading exponent ex − 1 */
            const double q = ldexp(1.0, ex - 1 - m.p);
            double s = trunc(acc / q) * q;
            for (int k = k0; k < k1; k++) s += trunc((double)a[k] * b[k] / q) * q;
            acc = s;
        }
        if (k1 % I == 0 || k1 == K) {
            const double scaled = sblk ? (double)(float)(acc * sblk[(k1 - 1) / 128]) : acc;
            facc = (float)((double)facc + scaled);
            acc = 0.0;
        }
    }
    return facc;
}


void evaluate_samples(sample_eval &ev, const std::vector<float> &d, const operand &A, const operand &B,
                             const acc_params &mp, gemm_out out, int n_samples, struct rng *r) {
    const int K = A.K, N = B.rows;
    std::vector<float> a((size_t)K), b((size_t)K);
    const bool blocks = A.mode != GEMM_SCALE_TENSOR || B.mode != GEMM_SCALE_TENSOR;
    std::vector<double> sblk((size_t)(K + 127) / 128);
    for (int s = 0; s < n_samples; s++) {
        const int i = rng_int(r, A.rows), j = rng_int(r, N);
        double exact = 0, sabs = 0;
        for (int k = 0; k < K; k++) {
            a[(size_t)k] = fp8_to_float(A.codes[(size_t)i * K + k], fmt_of(A.type));
            b[(size_t)k] = fp8_to_float(B.codes[(size_t)j * K + k], fmt_of(B.type));
            const double sc = A.sigma(i, k) * B.sigma(j, k);
            exact += (double)a[(size_t)k] * b[(size_t)k] * sc;
            sabs += fabs((double)a[(size_t)k] * b[(size_t)k] * sc);
        }
        for (size_t kb = 0; kb < sblk.size(); kb++) sblk[kb] = (float)(A.sigma(i, (int)kb * 128) * B.sigma(j, (int)kb * 128));
        /* The measurement fixes p and I; which products are aligned together in one truncation
         * it bounds only from below (g). Both the measured g and one tensor-core instruction's
         * 32 products are consistent with it: the model's value is the one of the two that errs
         * more (the envelope, so the tolerance does not rest on the structure guessed). */
        float model = 0.0f;
        acc_params m2 = mp;
        for (int v = 0; v < (mp.group == 32 ? 1 : 2); v++) {
            m2.group = v == 0 ? mp.group : 32;
            double mv = model_dot(a.data(), b.data(), K, m2, blocks ? sblk.data() : nullptr);
            if (!blocks) mv = (double)((float)mv * (float)(A.sigma(i, 0) * B.sigma(j, 0)));
            const float mf = out == GEMM_OUT_BF16 ? bf16_round((float)mv) : (float)mv;
            if (v == 0 || fabs((double)mf - exact) > fabs((double)model - exact)) model = mf;
        }
        ev.exact.push_back((float)exact);
        ev.model.push_back(model);
        ev.got.push_back(d[(size_t)i * N + j]);
        ev.s_max = fmax(ev.s_max, sabs);
    }
}
