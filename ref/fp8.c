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

unsigned fp8_delayed_update(struct fp8_delayed *s) {
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
    return isfinite(amax) ? 0u : FP8_FLAG_AMAX_NONFINITE;
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

/* ---- Statistics, cast + transpose, block quantization, the scaled GEMM ---- */

int fp8_saturates(float v, enum fp8_format f) {
    if (isnan(v)) return 0;
    /* The overflow thresholds of round-to-nearest-even (fp8.h, FP8_NOSAT): beyond them the
     * unclamped result would be the next binade's first value (480 for E4M3, 65536 for E5M2). */
    float a = fabsf(v);
    return f == FP8_E4M3 ? a > 464.0f : a >= 61440.0f;
}

static void note_input(struct fp8_stats *st, float x) {
    st->amax = fmaxf(st->amax, fabsf(x));
    if (!isfinite(x)) st->flags |= FP8_FLAG_INPUT_NONFINITE;
}

void fp8_cast_transpose(uint8_t *q, uint8_t *q_t, struct fp8_stats *st, const float *x, int64_t rows, int64_t cols,
                        float scale, enum fp8_format f) {
    CHECK(rows >= 0 && cols >= 0 && (q != NULL || q_t != NULL), "fp8_cast_transpose: rows=%lld cols=%lld",
          (long long)rows, (long long)cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = x[r * cols + c] * scale;
            uint8_t code = fp8_from_float(v, f, FP8_SATFINITE);
            if (q) q[r * cols + c] = code;
            if (q_t) q_t[c * rows + r] = code;
            note_input(st, x[r * cols + c]);
            st->saturated += fp8_saturates(v, f);
        }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t fp8_block_scale_ld(enum fp8_block b, int64_t rows, int64_t cols) {
    if (b == FP8_BLOCK_1X128) return rows;
    return (ceil_div(cols, FP8_BLOCK_SIZE) + 3) / 4 * 4;
}

int64_t fp8_block_scale_count(enum fp8_block b, int64_t rows, int64_t cols) {
    if (b == FP8_BLOCK_1X128) return ceil_div(cols, FP8_BLOCK_SIZE) * rows;
    return ceil_div(rows, FP8_BLOCK_SIZE) * fp8_block_scale_ld(b, rows, cols);
}

int64_t fp8_block_scale_index(enum fp8_block b, int64_t rows, int64_t cols, int64_t r, int64_t c) {
    if (b == FP8_BLOCK_1X128) return (c / FP8_BLOCK_SIZE) * rows + r;
    return (r / FP8_BLOCK_SIZE) * fp8_block_scale_ld(b, rows, cols) + c / FP8_BLOCK_SIZE;
}

/* Quantizes the block rows [r0, r1) × cols [c0, c1) of x (rows, cols) with the block's own scale;
 * the codes go to q (rows, cols), or with transpose to q (cols, rows) at the transposed position.
 * Returns the dequantization scale. */
static float quantize_block(uint8_t *q, int transpose, struct fp8_stats *st, const float *x, int64_t rows,
                            int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1, enum fp8_format f,
                            float amax_eps, int power_2) {
    float amax = 0.0f;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(x[r * cols + c]));
    if (!isfinite(amax)) st->flags |= FP8_FLAG_AMAX_NONFINITE;
    float scale = fp8_current_scale(amax, f, amax_eps, power_2);
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) {
            float v = x[r * cols + c] * scale;
            uint8_t code = fp8_from_float(v, f, FP8_SATFINITE);
            if (transpose)
                q[c * rows + r] = code;
            else
                q[r * cols + c] = code;
            st->saturated += fp8_saturates(v, f);
        }
    return 1.0f / scale;
}

void fp8_block_quantize(uint8_t *q, float *s_inv, uint8_t *q_t, float *s_inv_t, struct fp8_stats *st, const float *x,
                        int64_t rows, int64_t cols, enum fp8_block b, enum fp8_format f, float amax_eps, int power_2) {
    CHECK(rows >= 1 && cols >= 1, "fp8_block_quantize: rows=%lld cols=%lld", (long long)rows, (long long)cols);
    CHECK((q_t == NULL) == (s_inv_t == NULL), "fp8_block_quantize: q_t and s_inv_t go together");
    const int64_t B = FP8_BLOCK_SIZE;
    for (int64_t i = 0; i < rows * cols; i++) note_input(st, x[i]);
    if (b == FP8_BLOCK_1X128) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c0 = 0; c0 < cols; c0 += B) {
                int64_t c1 = c0 + B < cols ? c0 + B : cols;
                s_inv[fp8_block_scale_index(b, rows, cols, r, c0)] =
                    quantize_block(q, 0, st, x, rows, cols, r, r + 1, c0, c1, f, amax_eps, power_2);
            }
        if (q_t) /* the 1×128 blocks of xᵀ are 128×1 blocks of x: a second quantization */
            for (int64_t c = 0; c < cols; c++)
                for (int64_t r0 = 0; r0 < rows; r0 += B) {
                    int64_t r1 = r0 + B < rows ? r0 + B : rows;
                    s_inv_t[fp8_block_scale_index(b, cols, rows, c, r0)] =
                        quantize_block(q_t, 1, st, x, rows, cols, r0, r1, c, c + 1, f, amax_eps, power_2);
                }
        return;
    }
    const int64_t ld = fp8_block_scale_ld(b, rows, cols), ld_t = q_t ? fp8_block_scale_ld(b, cols, rows) : 0;
    const int64_t nrb = ceil_div(rows, B), ncb = ceil_div(cols, B);
    for (int64_t i = 0; i < fp8_block_scale_count(b, rows, cols); i++) s_inv[i] = 0.0f; /* padding slots */
    if (q_t)
        for (int64_t i = 0; i < fp8_block_scale_count(b, cols, rows); i++) s_inv_t[i] = 0.0f;
    for (int64_t rb = 0; rb < nrb; rb++)
        for (int64_t cb = 0; cb < ncb; cb++) {
            int64_t r1 = (rb + 1) * B < rows ? (rb + 1) * B : rows, c1 = (cb + 1) * B < cols ? (cb + 1) * B : cols;
            float si = quantize_block(q, 0, st, x, rows, cols, rb * B, r1, cb * B, c1, f, amax_eps, power_2);
            s_inv[rb * ld + cb] = si;
            if (q_t) { /* the same codes and scale, transposed: counted once */
                for (int64_t r = rb * B; r < r1; r++)
                    for (int64_t c = cb * B; c < c1; c++) q_t[c * rows + r] = q[r * cols + c];
                s_inv_t[cb * ld_t + rb] = si;
            }
        }
}

/* The scale of operand X (R rows, K cols) at row r, column block kb. */
static double op_scale(enum fp8_scaling m, const float *s, int64_t R, int64_t K, int64_t r, int64_t kb) {
    if (m == FP8_SCALING_TENSOR) return s[0];
    enum fp8_block b = m == FP8_SCALING_1X128 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128;
    return s[fp8_block_scale_index(b, R, K, r, kb * FP8_BLOCK_SIZE)];
}

void ref_fp8_gemm_scaled(float *out, const uint8_t *A, enum fp8_format fa, enum fp8_scaling ma, const float *sa,
                         const uint8_t *B, enum fp8_format fb, enum fp8_scaling mb, const float *sb, int M, int N,
                         int K, enum fp8_out out_kind) {
    CHECK(M >= 0 && N >= 0 && K >= 0, "ref_fp8_gemm_scaled: M=%d N=%d K=%d", M, N, K);
    CHECK(out_kind == FP8_OUT_F32 || out_kind == FP8_OUT_BF16, "ref_fp8_gemm_scaled: out_kind %d", (int)out_kind);
    float lut_a[256], lut_b[256];
    for (int c = 0; c < 256; c++) {
        lut_a[c] = fp8_to_float((uint8_t)c, fa);
        lut_b[c] = fp8_to_float((uint8_t)c, fb);
    }
    const int nkb = (int)ceil_div(K, FP8_BLOCK_SIZE);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const uint8_t *a = A + (int64_t)m * K, *b = B + (int64_t)n * K;
            double d = 0.0;
            for (int kb = 0; kb < nkb; kb++) {
                int k1 = (kb + 1) * FP8_BLOCK_SIZE < K ? (kb + 1) * FP8_BLOCK_SIZE : K;
                double part = 0.0; /* exact: ≤ 128 products of ≤ 8 significant bits within 2^-18 .. 2^18 */
                for (int k = kb * FP8_BLOCK_SIZE; k < k1; k++) part += (double)lut_a[a[k]] * (double)lut_b[b[k]];
                d += part * (op_scale(ma, sa, M, K, m, kb) * op_scale(mb, sb, N, K, n, kb));
            }
            float v = (float)d;
            out[(int64_t)m * N + n] = out_kind == FP8_OUT_BF16 ? bf16_round(v) : v;
        }
}
