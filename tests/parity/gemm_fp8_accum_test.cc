/* gemm_fp8_accum_test.cc — the FP8 accumulation measurement of gemm_fp8_parity, on the CPU: feed
 * its experiments through the accumulator model with known parameters (as if the model were the
 * GPU) and demand that interpret_probe reads those parameters back; a correctly rounded fp32
 * accumulator must read as p = 23 with a promotion after every product; and the model itself
 * against hand cases. No device is touched (runs in every `bazel test //...`).
 *
 *   bazel test //tests/parity:gemm_fp8_accum_test
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "ref/fp8.h"
#include "tests/common/harness.h"
#include "tests/parity/gemm_fp8_accum.h"

/* The probe's diagonal as an accumulator computes it: acc(a, b) for every experiment row. */
template <typename F>
static std::vector<float> run_probe_on(F acc) {
    operand A, B;
    build_probe(A, B, ACC_PRECISE);
    std::vector<float> diag((size_t)kProbeM), a((size_t)kProbeK), b((size_t)kProbeK);
    for (int i = 0; i < kProbeM; i++) {
        for (int k = 0; k < kProbeK; k++) {
            a[(size_t)k] = fp8_to_float(A.codes[(size_t)i * kProbeK + k], FP8_E4M3);
            b[(size_t)k] = fp8_to_float(B.codes[(size_t)i * kProbeK + k], FP8_E4M3);
        }
        diag[(size_t)i] = acc(a.data(), b.data());
    }
    return diag;
}

int main(int argc, char **argv) {
    (void)test_seed(argc, argv, 1);
    const int truths[][3] = {{13, 32, 128}, {13, 4, 0}, {14, 16, 256}, {22, 2, 64}, {10, 128, 0}, {17, 8, 512}};
    for (const auto &t : truths) {
        acc_params m;
        m.p = t[0], m.group = t[1], m.interval = t[2];
        const std::vector<float> diag =
            run_probe_on([&](const float *a, const float *b) { return (float)model_dot(a, b, kProbeK, m, nullptr); });
        const acc_params got = interpret_probe(diag);
        EXPECT(got.p == m.p && got.group == m.group && got.interval == m.interval,
               "model p=%d g=%d I=%d read back as p=%d g=%d I=%d", m.p, m.group, m.interval, got.p, got.group,
               got.interval);
        EXPECT(strstr(got.rounding, "-> +0 ulp, ") != nullptr, "truncating model read as rounding: %s", got.rounding);
    }
    /* an fp32 accumulator rounding to nearest after every product */
    const std::vector<float> diag = run_probe_on([](const float *a, const float *b) {
        float s = 0.0f;
        for (int k = 0; k < kProbeK; k++) s += a[k] * b[k];
        return s;
    });
    const acc_params got = interpret_probe(diag);
    EXPECT(got.p == 23 && got.interval == 1, "fp32 accumulation read as p=%d I=%d", got.p, got.interval);
    EXPECT(strstr(got.rounding, "-> +1 ulp") != nullptr, "fp32 rounding read as %s", got.rounding);

    /* model_dot by hand: p = 2 bits below the leading one, groups of 2, no promotion.
     * 8 + 1.5 → group max 8 (2^3): quantum 2^(3−2) = 2: 8 + trunc(1.5/2)·2 = 8; then + 3 + 0.75:
     * max(8, 3) → quantum 2: 8 + 2 + 0 = 10. */
    const float a[4] = {8, 1.5f, 3, 0.75f}, one[4] = {1, 1, 1, 1};
    acc_params m;
    m.p = 2, m.group = 2, m.interval = 0;
    EXPECT(model_dot(a, one, 4, m, nullptr) == 10.0, "model_dot hand case: %g, want 10", model_dot(a, one, 4, m, nullptr));
    m.interval = 2; /* promoted after each group: 8, then a fresh sum 3 + 0.75 with quantum 2^(1−2) =
                       0.5: 3 + 0.5; fp32: 8 + 3.5 = 11.5 */
    EXPECT(model_dot(a, one, 4, m, nullptr) == 11.5, "model_dot promoted: %g, want 11.5", model_dot(a, one, 4, m, nullptr));
    return test_finish("gemm_fp8_accum_test");
}
