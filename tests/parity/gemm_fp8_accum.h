/* gemm_fp8_accum.h — FP8 GEMM test operands and the GPU's FP8 accumulation, measured and modeled
 * (for tests/parity/gemm_fp8_parity.cu; C++, test-only).
 *
 *   operand          FP8 codes (rows, K) K-major with their dequantization scales in a scale mode's
 *                    layout (ref/fp8.h), on the host and, after upload(), on the device;
 *   make_*_operand   integer codes with power-of-two scales (exact products), or normals quantized
 *                    as the recipes do (current scaling per tensor, block quantization);
 *   run_product      D (m, n) = A·Bᵀ through gpu_gemm_try (D poisoned unless accumulating, guards
 *                    checked); exact_product: ref_fp8_gemm_scaled with alpha, old D and bias;
 *   measure_accumulation  one GEMM whose diagonal carries the experiments of gemm_fp8_parity's
 *                    file comment (b): bits(d), the promotion interval, the aligned group, rounding;
 *                    build_probe / interpret_probe are its two halves (testable without a GPU);
 *   model_dot        the model of the measured accumulator (file comment (c) of gemm_fp8_parity);
 *   evaluate_samples exact value, model value and the GPU's value of sampled outputs.
 */
#ifndef REFINE_TESTS_PARITY_GEMM_FP8_ACCUM_H
#define REFINE_TESTS_PARITY_GEMM_FP8_ACCUM_H

#include <math.h>
#include <stdint.h>

#include <vector>

#include "gpu/gemm.h"
#include "ref/fp8.h"
#include "tests/common/rng.h"
#include "tests/parity/parity.h"

static inline enum fp8_format fmt_of(gemm_dtype t) { return t == GEMM_E5M2 ? FP8_E5M2 : FP8_E4M3; }
static inline enum fp8_scaling scaling_of(gemm_scale s) {
    return s == GEMM_SCALE_TENSOR ? FP8_SCALING_TENSOR : s == GEMM_SCALE_1X128 ? FP8_SCALING_1X128 : FP8_SCALING_128X128;
}
static inline enum fp8_block block_of(gemm_scale s) { return s == GEMM_SCALE_1X128 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128; }
static inline const char *tname(gemm_dtype t) { return t == GEMM_E4M3 ? "E4M3" : t == GEMM_E5M2 ? "E5M2" : "bf16"; }
static inline const char *sname(gemm_scale s) {
    return s == GEMM_SCALE_TENSOR ? "tensor" : s == GEMM_SCALE_1X128 ? "1x128" : "128x128";
}

/* One FP8 operand (rows, K) on the host and on the device. */
struct operand {
    int rows = 0, K = 0;
    gemm_dtype type = GEMM_E4M3;
    gemm_scale mode = GEMM_SCALE_TENSOR;
    std::vector<uint8_t> codes;
    std::vector<float> scales; /* dequantization scales in the mode's layout (tensor: 1) */
    struct dev_buf dcodes, dscales;
    int on_device = 0;
    int64_t scale_count() const { return mode == GEMM_SCALE_TENSOR ? 1 : fp8_block_scale_count(block_of(mode), rows, K); }
    double sigma(int r, int k) const { /* the scale of element (r, k) */
        if (mode == GEMM_SCALE_TENSOR) return scales[0];
        return scales[(size_t)fp8_block_scale_index(block_of(mode), rows, K, r, k)];
    }
    void upload(const char *name) {
        dev_buf_alloc(&dcodes, name, codes.size(), POISON_NONE, codes.data());
        dev_buf_alloc(&dscales, "scales", scales.size() * 4, POISON_NONE, scales.data());
        on_device = 1;
    }
    void release() {
        if (on_device) dev_buf_free(&dcodes), dev_buf_free(&dscales);
        on_device = 0;
    }
    struct gemm_fp8_operand dev(int null_scale = 0) const {
        return {(const uint8_t *)dcodes.data, type, null_scale ? nullptr : (const float *)dscales.data, mode};
    }
};

void make_int_operand(operand &o, int rows, int K, gemm_dtype t, gemm_scale m, int vmax, int e0, struct rng *r);
void make_random_operand(operand &o, int rows, int K, gemm_dtype t, gemm_scale m, struct rng *r);

/* D (m, n) = op(A)·op(B)ᵀ through gpu_gemm_try; returns the status, D in d (as floats). */
struct product {
    gemm_out out = GEMM_OUT_F32;
    gemm_beta beta = GEMM_OVERWRITE;
    gemm_accum accum = GEMM_ACCUM_PRECISE;
    float alpha = 1.0f;
    std::vector<float> c, bias; /* old D (beta = 1), bias (bf16 values) */
    int want_amax = 0, null_scales = 0;
    float amax = NAN;
    char algo[128] = "";
};

gemm_status run_product(struct gpu_gemm *g, cudaStream_t stream, product &pr, const operand &A, const operand &B,
                        std::vector<float> &d);
std::vector<float> exact_product(const product &pr, const operand &A, const operand &B);

/* The measured accumulator of one accumulation mode. */
struct acc_params {
    int p = 0;        /* fraction bits kept below the leading one before promotion */
    int interval = 0; /* products between promotions into fp32; 0 = never seen */
    int group = 0;    /* products aligned together; 0 = more than 128 */
    int bits[32];     /* bits(d) per distance */
    char rounding[96] = "";
    char algo[128] = "";
    int ran = 0;
};

enum acc_kind { ACC_PRECISE = 0, ACC_FAST = 1, ACC_BLOCK = 2 };
const char *acc_name(acc_kind k);
extern const int kDist[], kNDist, kGroupDist[], kNGroup;
const int kProbeM = 2048, kProbeK = 4096;

void build_probe(operand &A, operand &B, acc_kind kind);
acc_params interpret_probe(const std::vector<float> &diag);
acc_params measure_accumulation(struct gpu_gemm *g, cudaStream_t stream, acc_kind kind);
void print_acc(acc_kind kind, const acc_params &ap, int verbose);

/* Σ a_k·b_k as the model accumulates it; sblk: per-128-block combined scales (block scaling) or
 * nullptr (the caller applies the per-tensor scales). */
double model_dot(const float *a, const float *b, int K, const acc_params &m, const double *sblk);

/* Error of sampled outputs: exact (double), model, GPU. */
struct sample_eval {
    std::vector<float> got, model, exact;
    double s_max = 0; /* max Σ|σa·σb·a·b| */
};

void evaluate_samples(sample_eval &ev, const std::vector<float> &d, const operand &A, const operand &B,
                      const acc_params &mp, gemm_out out, int n_samples, struct rng *r);

#endif /* REFINE_TESTS_PARITY_GEMM_FP8_ACCUM_H */
