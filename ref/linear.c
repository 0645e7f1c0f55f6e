/* linear.c — the reference linear layer (linear.h): OpenBLAS sgemm and the naive triple loop. */
#include "ref/linear.h"

#include <cblas.h>
#include <stdint.h>

#include "io/check.h"
#include "ref/bf16.h"


static void check_dims(int N, int C_in, int C_out) {
    CHECK(N >= 0 && C_in >= 0 && C_out >= 0, "N=%d C_in=%d C_out=%d must be non-negative", N, C_in, C_out);
}

static void round_all(float *p, int64_t n, enum act_dtype act) {
    if (act == ACT_F32) return;
    for (int64_t j = 0; j < n; j++) p[j] = act_round(p[j], act);
}

/* db[o] += Σ_n dy[n,o], in double in row order (shared by both paths: it is a reduction, not a
 * GEMM, and bit-reproducible either way). */
static void bias_backward(float *db, const float *dy, int N, int C_out) {
    for (int o = 0; o < C_out; o++) {
        double s = 0.0;
        for (int n = 0; n < N; n++) s += (double)dy[(int64_t)n * C_out + o];
        db[o] = (float)((double)db[o] + s);
    }
}

void ref_linear_forward(float *y, const float *x, const float *w, const float *b, int N, int C_in, int C_out,
                        enum act_dtype act) {
    check_dims(N, C_in, C_out);
    if (N == 0 || C_out == 0) return;
    /* y = b broadcast over rows (or 0), then y = 1·x Wᵀ + 1·y: the bias enters as sgemm's C. */
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C_out; o++) y[(int64_t)n * C_out + o] = b != NULL ? b[o] : 0.0f;
    if (C_in > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, C_out, C_in, 1.0f, x, C_in, w, C_in, 1.0f, y,
                    C_out);
    round_all(y, (int64_t)N * C_out, act);
}

void ref_linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int N,
                         int C_in, int C_out, enum act_dtype act) {
    check_dims(N, C_in, C_out);
    if (dx != NULL && N > 0 && C_in > 0) {
        if (C_out > 0) {
            /* dx (N, C_in) = dy (N, C_out) · W (C_out, C_in) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C_in, C_out, 1.0f, dy, C_out, w, C_in, 0.0f,
                        dx, C_in);
        } else {
            for (int64_t j = 0; j < (int64_t)N * C_in; j++) dx[j] = 0.0f;
        }
        round_all(dx, (int64_t)N * C_in, act);
    }
    if (dw != NULL && N > 0 && C_in > 0 && C_out > 0) {
        /* dW (C_out, C_in) += dyᵀ (C_out, N) · x (N, C_in) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C_out, C_in, N, 1.0f, dy, C_out, x, C_in, 1.0f, dw,
                    C_in);
    }
    if (db != NULL) bias_backward(db, dy, N, C_out);
}

void ref_linear_forward_naive(float *y, const float *x, const float *w, const float *b, int N, int C_in, int C_out,
                              enum act_dtype act) {
    check_dims(N, C_in, C_out);
    for (int n = 0; n < N; n++) {
        const float *xn = x + (int64_t)n * C_in;
        for (int o = 0; o < C_out; o++) {
            const float *wo = w + (int64_t)o * C_in;
            double s = 0.0;
            for (int i = 0; i < C_in; i++) s += (double)xn[i] * (double)wo[i];
            if (b != NULL) s += (double)b[o];
            y[(int64_t)n * C_out + o] = act_round((float)s, act);
        }
    }
}

void ref_linear_backward_naive(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int N,
                               int C_in, int C_out, enum act_dtype act) {
    check_dims(N, C_in, C_out);
    if (dx != NULL) {
        for (int n = 0; n < N; n++) {
            const float *dyn = dy + (int64_t)n * C_out;
            for (int i = 0; i < C_in; i++) {
                double s = 0.0;
                for (int o = 0; o < C_out; o++) s += (double)dyn[o] * (double)w[(int64_t)o * C_in + i];
                dx[(int64_t)n * C_in + i] = act_round((float)s, act);
            }
        }
    }
    if (dw != NULL) {
        for (int o = 0; o < C_out; o++) {
            for (int i = 0; i < C_in; i++) {
                double s = 0.0;
                for (int n = 0; n < N; n++)
                    s += (double)dy[(int64_t)n * C_out + o] * (double)x[(int64_t)n * C_in + i];
                float *d = dw + (int64_t)o * C_in + i;
                *d = (float)((double)*d + s);
            }
        }
    }
    if (db != NULL) bias_backward(db, dy, N, C_out);
}
