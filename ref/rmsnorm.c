/* rmsnorm.c — the reference RMSNorm (rmsnorm.h). One function per pass, row by row, double sums. */
#include "ref/rmsnorm.h"

#include <math.h>
#include <stdint.h>

#include "ref/bf16.h"


void ref_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps,
                         enum act_dtype act) {
    for (int i = 0; i < N; i++) {
        const float *xi = x + (int64_t)i * C;
        float *oi = out + (int64_t)i * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)xi[c] * (double)xi[c];
        /* torch computes variance in fp32 then rsqrt(var + eps) in fp32; the reference keeps the
         * mean exact in double and rounds rstd once to fp32. */
        float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
        rstd[i] = r;
        for (int c = 0; c < C; c++) {
            float n = act_round(xi[c] * r, act);
            oi[c] = act_round(n * w[c], act);
        }
    }
}

void ref_rmsnorm_residual_forward(float *res_out, float *out, float *rstd, const float *res_in,
                                  const float *delta, const float *w, int N, int C, float eps,
                                  enum act_dtype act) {
    int64_t total = (int64_t)N * C;
    for (int64_t j = 0; j < total; j++) res_out[j] = act_round(res_in[j] + delta[j], act);
    ref_rmsnorm_forward(out, rstd, res_out, w, N, C, eps, act);
}

/* dx = act(dres + rstd·(dn − n̂·mean(dn·n̂))), dres optional (NULL: no residual term). */
static void rmsnorm_backward_rows(float *dx, float *dw, const float *dy, const float *dres, const float *x,
                                  const float *w, const float *rstd, int N, int C, enum act_dtype act) {
    if (dw != NULL) {
        /* Column sums in row order: dw[c] += Σ_i dy[i,c]·act(n̂[i,c]). */
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int i = 0; i < N; i++) {
                int64_t j = (int64_t)i * C + c;
                s += (double)dy[j] * (double)act_round(x[j] * rstd[i], act);
            }
            dw[c] = (float)((double)dw[c] + s);
        }
    }
    for (int i = 0; i < N; i++) {
        const float *xi = x + (int64_t)i * C;
        const float *dyi = dy + (int64_t)i * C;
        float *dxi = dx + (int64_t)i * C;
        float r = rstd[i];
        double dot = 0.0;
        for (int c = 0; c < C; c++) dot += (double)(dyi[c] * w[c]) * (double)(xi[c] * r);
        float mean = (float)(dot / (double)C);
        for (int c = 0; c < C; c++) {
            float dn = dyi[c] * w[c];
            float nh = xi[c] * r;
            float g = r * (dn - nh * mean);
            if (dres != NULL) g = dres[(int64_t)i * C + c] + g;
            dxi[c] = act_round(g, act);
        }
    }
}

void ref_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                          const float *rstd, int N, int C, enum act_dtype act) {
    rmsnorm_backward_rows(dx, dw, dy, NULL, x, w, rstd, N, C, act);
}

void ref_rmsnorm_residual_backward(float *dx, float *dw, const float *dy, const float *dres, const float *x,
                                   const float *w, const float *rstd, int N, int C, enum act_dtype act) {
    rmsnorm_backward_rows(dx, dw, dy, dres, x, w, rstd, N, C, act);
}
