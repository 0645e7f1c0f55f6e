/* fp8.c — FP8 conversions, Transformer Engine scaling recipes and the reference FP8 GEMM (fp8.h). */
#include "ref/fp8.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "io/check.h"
#include "ref/bf16.h"

struct fp8_params {
    int mbits, bias, emin; /* emin: exponent of the smallest normal */
    float maxf;
};

static struct fp8_params params(enum fp8_format f) {
    if (f == FP8_E4M3) return (struct fp8_params){3, 7, -6, FP8_E4M3_MAX};
    return (struct fp8_params){2, 15, -14, FP8_E5M2_MAX};
}

static uint8_t nan_code(uint8_t sign) { return (uint8_t)(sign | 0x7F); }

uint8_t fp8_from_float(float x, enum fp8_format f, enum fp8_sat sat) {
    struct fp8_params P = params(f);
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    if (isnan(x)) return nan_code(sign);
    float a = fabsf(x);
    uint8_t max_code = f == FP8_E4M3 ? 0x7E : 0x7B;
    int saturate = sat == FP8_SATFINITE || (sat == FP8_TORCH && f == FP8_E4M3);
    if (isinf(a)) {
        if (saturate) return (uint8_t)(sign | max_code);
        return f == FP8_E4M3 ? nan_code(sign) : (uint8_t)(sign | 0x7C);
    }
    if (a == 0.0f) return sign;
    /* The quantum at a's binade (never below the subnormal quantum 2^(emin − mbits)). */
    int e;
    frexpf(a, &e); /* a = m·2^e, m in [0.5, 1): floor(log2 a) = e − 1 */
    int eb = e - 1 < P.emin ? P.emin : e - 1;
    int qexp = eb - P.mbits;
    /* a / 2^qexp is exact (a power-of-two scaling of a float that stays in range: qexp ≥ −16 and
     * a ≤ FLT_MAX with |qexp| small), rintf rounds to nearest even in the default mode. */
    float r = rintf(ldexpf(a, -qexp));
    double v = ldexp((double)r, qexp);
    if (v > (double)P.maxf) {
        if (saturate) return (uint8_t)(sign | max_code);
        return f == FP8_E4M3 ? nan_code(sign) : (uint8_t)(sign | 0x7C);
    }
    if (r == 0.0f) return sign;
    /* Encode v: r is an integer in [1, 2^(mbits+1)]; r == 2^(mbits+1) means the binade moved up. */
    int ri = (int)r;
    int efield;
    int mant;
    if (ri >= (1 << (P.mbits + 1))) {
        eb += 1;
        ri >>= 1;
    }
    if (ri < (1 << P.mbits)) { /* subnormal: only possible at eb == emin */
        efield = 0;
        mant = ri;
    } else {
        efield = eb + P.bias;
        mant = ri - (1 << P.mbits);
    }
    return (uint8_t)(sign | (efield << P.mbits) | mant);
}

float fp8_to_float(uint8_t q, enum fp8_format f) {
    struct fp8_params P = params(f);
    int sign = q >> 7;
    int efield = (q & 0x7F) >> P.mbits;
    int mant = q & ((1 << P.mbits) - 1);
    float v;
    if (f == FP8_E4M3 && (q & 0x7F) == 0x7F) return sign ? -NAN : NAN;
    if (f == FP8_E5M2 && efield == 31) {
        if (mant != 0) return sign ? -NAN : NAN;
        return sign ? -INFINITY : INFINITY;
    }
    if (efield == 0)
        v = ldexpf((float)mant, P.emin - P.mbits);
    else
        v = ldexpf((float)((1 << P.mbits) + mant), efield - P.bias - P.mbits);
    return sign ? -v : v;
}

int fp8_is_nan(uint8_t q, enum fp8_format f) {
    if (f == FP8_E4M3) return (q & 0x7F) == 0x7F;
    return (q & 0x7C) == 0x7C && (q & 0x03) != 0;
}

void fp8_quantize(uint8_t *q, float *amax, const float *x, int64_t n, float scale, enum fp8_format f) {
    float m = amax ? *amax : 0.0f;
    for (int64_t i = 0; i < n; i++) {
        q[i] = fp8_from_float(x[i] * scale, f, FP8_SATFINITE);
        m = fmaxf(m, fabsf(x[i]));
    }
    if (amax) *amax = m;
}

void fp8_dequantize(float *out, const uint8_t *q, int64_t n, float scale_inv, enum fp8_format f) {
    for (int64_t i = 0; i < n; i++) out[i] = fp8_to_float(q[i], f) * scale_inv;
}

void fp8_delayed_record(struct fp8_delayed *s, float amax) {
    CHECK(s->history_len >= 1, "fp8_delayed: history_len %d", s->history_len);
    s->history[0] = fmaxf(s->history[0], amax);
}

void fp8_delayed_update(struct fp8_delayed *s) {
    int len = s->history_len;
    CHECK(len >= 1, "fp8_delayed: history_len %d", len);
    float amax;
    if (s->algo == FP8_AMAX_MOST_RECENT) {
        amax = s->history[0];
    } else {
        amax = s->history[0];
        for (int i = 1; i < len; i++) amax = fmaxf(amax, s->history[i]);
    }
    float first = s->history[0];
    for (int i = 0; i + 1 < len; i++) s->history[i] = s->history[i + 1];
    s->history[len - 1] = first;
    s->history[0] = 0.0f;
    if (isfinite(amax) && amax > 0.0f) {
        float scale = (fp8_max(s->format) * ldexpf(1.0f, -s->margin)) / amax;
        if (isinf(scale)) scale = FLT_MAX;
        s->scale = scale;
    }
    s->scale_inv = 1.0f / s->scale;
}

float fp8_current_scale(float amax, enum fp8_format f, float amax_eps, int power_2) {
    if (amax < amax_eps) amax = amax_eps;
    if (isinf(amax) || isnan(amax) || amax == 0.0f) return 1.0f;
    float scale = fp8_max(f) / amax;
    if (isinf(scale)) scale = FLT_MAX;
    if (power_2) scale = ref_f32_from_bits(ref_f32_bits(scale) & 0xFF800000u);
    return scale;
}

float fp8_amax(const float *x, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

void ref_fp8_gemm(float *out, uint8_t *out_q, float *amax_d, const uint8_t *A, enum fp8_format fa, float sa_inv,
                  const uint8_t *B, enum fp8_format fb, float sb_inv, int M, int N, int K, enum fp8_accum acc,
                  enum fp8_out out_kind, float d_scale) {
    CHECK(M >= 0 && N >= 0 && K >= 0, "ref_fp8_gemm: M=%d N=%d K=%d", M, N, K);
    CHECK(!(fa == FP8_E5M2 && fb == FP8_E5M2), "ref_fp8_gemm: E5M2 x E5M2 is not a cuBLASLt FP8 GEMM");
    float lut_a[256], lut_b[256];
    for (int c = 0; c < 256; c++) {
        lut_a[c] = fp8_to_float((uint8_t)c, fa);
        lut_b[c] = fp8_to_float((uint8_t)c, fb);
    }
    float s = sa_inv * sb_inv;
    float amax = 0.0f;
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            const uint8_t *a = A + (int64_t)m * K, *b = B + (int64_t)n * K;
            float d;
            if (acc == FP8_ACC_F32) {
                float sum = 0.0f;
                for (int k = 0; k < K; k++) sum += lut_a[a[k]] * lut_b[b[k]];
                d = sum * s;
            } else {
                double sum = 0.0;
                for (int k = 0; k < K; k++) sum += (double)lut_a[a[k]] * (double)lut_b[b[k]];
                d = (float)sum * s;
            }
            amax = fmaxf(amax, fabsf(d));
            int64_t o = (int64_t)m * N + n;
            switch (out_kind) {
            case FP8_OUT_F32: out[o] = d; break;
            case FP8_OUT_BF16: out[o] = bf16_round(d); break;
            case FP8_OUT_E4M3:
            case FP8_OUT_E5M2: {
                enum fp8_format fo = out_kind == FP8_OUT_E4M3 ? FP8_E4M3 : FP8_E5M2;
                uint8_t q = fp8_from_float(d * d_scale, fo, FP8_SATFINITE);
                if (out_q) out_q[o] = q;
                out[o] = fp8_to_float(q, fo);
                break;
            }
            }
        }
    }
    if (amax_d) *amax_d = amax;
}

void ref_fp8_gemm_f32(float *out, uint8_t *out_q, float *amax_d, const float *x, enum fp8_format fa, float scale_a,
                      const float *w, enum fp8_format fb, float scale_b, int M, int N, int K, enum fp8_accum acc,
                      enum fp8_out out_kind, float d_scale) {
    uint8_t *qa = malloc((size_t)M * K + 1), *qb = malloc((size_t)N * K + 1);
    CHECK(qa != NULL && qb != NULL, "out of memory");
    fp8_quantize(qa, NULL, x, (int64_t)M * K, scale_a, fa);
    fp8_quantize(qb, NULL, w, (int64_t)N * K, scale_b, fb);
    ref_fp8_gemm(out, out_q, amax_d, qa, fa, 1.0f / scale_a, qb, fb, 1.0f / scale_b, M, N, K, acc, out_kind, d_scale);
    free(qa);
    free(qb);
}
