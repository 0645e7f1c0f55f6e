/* dora.c — the reference DoRA adapter (dora.h): both row-norm forms, forward and backward. */
#include "ref/dora.h"

#include <math.h>

#include "io/check.h"
#include "ref/bf16.h"
#include "ref/lora.h"


/* Column block of the cache-friendly loops (a stack array of doubles). */
enum { COL_BLOCK = 256 };

static void check_dims(int N, int C_in, int C_out, int R) {
    CHECK(N >= 0 && C_in >= 0 && C_out >= 0 && R > 0, "N=%d C_in=%d C_out=%d R=%d", N, C_in, C_out, R);
}

void ref_dora_weight_norm(float *wnorm, const float *w, const float *lora_a, const float *lora_b, int C_in,
                          int C_out, int R, float scale) {
    check_dims(0, C_in, C_out, R);
    for (int o = 0; o < C_out; o++) {
        const float *wo = w + (int64_t)o * C_in;
        const float *bo = lora_b + (int64_t)o * R;
        double ss = 0.0;
        for (int i = 0; i < C_in; i++) {
            double ba = 0.0;
            for (int r = 0; r < R; r++) ba += (double)bo[r] * (double)lora_a[(int64_t)r * C_in + i];
            /* PEFT: weight + scaling * lora_weight, two fp32 roundings. */
            float wp = wo[i] + scale * (float)ba;
            ss += (double)wp * (double)wp;
        }
        wnorm[o] = (float)sqrt(ss);
    }
}

void ref_dora_weight_sq(float *w_sq, const float *w, int C_in, int C_out) {
    check_dims(0, C_in, C_out, 1);
    for (int o = 0; o < C_out; o++) {
        const float *wo = w + (int64_t)o * C_in;
        double ss = 0.0;
        for (int i = 0; i < C_in; i++) ss += (double)wo[i] * (double)wo[i];
        w_sq[o] = (float)ss;
    }
}

size_t ref_dora_weight_norm_factored_workspace_size(int C_out, int R) {
    return (size_t)R * (size_t)R + (size_t)C_out * (size_t)R;
}

void ref_dora_weight_norm_factored(float *wnorm, const float *w_sq, const float *w, const float *lora_a,
                                   const float *lora_b, int C_in, int C_out, int R, float scale,
                                   double *workspace) {
    check_dims(0, C_in, C_out, R);
    double *aat = workspace;                  /* A Aᵀ (R, R) */
    double *wat = workspace + (size_t)R * R;  /* W Aᵀ (C_out, R) */
    for (int r = 0; r < R; r++) {
        for (int q = 0; q < R; q++) {
            double s = 0.0;
            for (int i = 0; i < C_in; i++)
                s += (double)lora_a[(int64_t)r * C_in + i] * (double)lora_a[(int64_t)q * C_in + i];
            aat[(size_t)r * R + q] = s;
        }
    }
    for (int o = 0; o < C_out; o++) {
        const float *wo = w + (int64_t)o * C_in;
        for (int r = 0; r < R; r++) {
            double s = 0.0;
            for (int i = 0; i < C_in; i++) s += (double)wo[i] * (double)lora_a[(int64_t)r * C_in + i];
            wat[(size_t)o * R + r] = s;
        }
    }
    double sd = (double)scale;
    for (int o = 0; o < C_out; o++) {
        const float *bo = lora_b + (int64_t)o * R;
        double cross = 0.0, quad = 0.0;
        for (int r = 0; r < R; r++) {
            cross += wat[(size_t)o * R + r] * (double)bo[r];
            double t = 0.0;
            for (int q = 0; q < R; q++) t += aat[(size_t)r * R + q] * (double)bo[q];
            quad += (double)bo[r] * t;
        }
        double n2 = (double)w_sq[o] + 2.0 * sd * cross + sd * sd * quad;
        wnorm[o] = (float)sqrt(n2 > 0.0 ? n2 : 0.0); /* cancellation can leave a tiny negative */
    }
}

/* u[n,:] = x_a[n,:] Aᵀ (R), rounded to fp32 (and act) */
static void project_row(float *un, const float *xn, const float *lora_a, int C_in, int R, enum act_dtype act) {
    for (int r = 0; r < R; r++) {
        const float *ar = lora_a + (int64_t)r * C_in;
        double s = 0.0;
        for (int i = 0; i < C_in; i++) s += (double)xn[i] * (double)ar[i];
        un[r] = act_round((float)s, act);
    }
}

static float dot_f(const float *a, const float *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return (float)s;
}

void ref_dora_forward(float *y, float *u, const float *x, const float *x_d, const float *w, const float *bias,
                      const float *lora_a, const float *lora_b, const float *mag, const float *wnorm, int N,
                      int C_in, int C_out, int R, float scale, enum act_dtype act) {
    check_dims(N, C_in, C_out, R);
    const float *xa = x_d != NULL ? x_d : x;
    for (int n = 0; n < N; n++) {
        float *un = u + (int64_t)n * R;
        project_row(un, xa + (int64_t)n * C_in, lora_a, C_in, R, act);
        float *yn = y + (int64_t)n * C_out;
        for (int o = 0; o < C_out; o++) {
            float mns = mag[o] / wnorm[o];
            float l = dot_f(un, lora_b + (int64_t)o * R, R);
            float base;
            if (x_d != NULL)
                base = dot_f(x_d + (int64_t)n * C_in, w + (int64_t)o * C_in, C_in); /* F.linear(dropout(x), W) */
            else
                base = bias != NULL ? yn[o] - bias[o] : yn[o]; /* result - bias */
            float delta = (mns - 1.0f) * base + (mns * l) * scale;
            yn[o] = act_round(yn[o] + delta, act);
        }
    }
}

size_t ref_dora_backward_workspace_size(int N, int C_out, int R) { return (size_t)N * (size_t)R + (size_t)C_out; }

void ref_dora_backward(float *dx, float *dmag, float *dlora_a, float *dlora_b, const float *dy, const float *x,
                       const float *x_d, const uint8_t *keep, float keep_scale, const float *u, const float *w,
                       const float *lora_a, const float *lora_b, const float *mag, const float *wnorm, int N,
                       int C_in, int C_out, int R, float scale, enum act_dtype act, float *workspace) {
    check_dims(N, C_in, C_out, R);
    CHECK(workspace != NULL || N == 0, "ref_dora_backward needs a workspace of %zu floats",
          ref_dora_backward_workspace_size(N, C_out, R));
    const float *xa = x_d != NULL ? x_d : x;
    float *du = workspace;
    float *mns = workspace + (size_t)N * R;
    for (int o = 0; o < C_out; o++) mns[o] = mag[o] / wnorm[o];

    /* dm[o] += (Σ_n dy·base' + (dy·s)·l) / n[o]: base' and l recomputed. */
    if (dmag != NULL) {
        for (int o = 0; o < C_out; o++) {
            const float *wo = w + (int64_t)o * C_in;
            const float *bo = lora_b + (int64_t)o * R;
            double s = 0.0;
            for (int n = 0; n < N; n++) {
                float g = dy[(int64_t)n * C_out + o];
                float base = dot_f(xa + (int64_t)n * C_in, wo, C_in);
                float l = dot_f(u + (int64_t)n * R, bo, R);
                s += (double)g * (double)base + (double)(g * scale) * (double)l;
            }
            dmag[o] = (float)((double)dmag[o] + s / (double)wnorm[o]);
        }
    }

    /* dB[o,r] += Σ_n gl[n,o]·u[n,r], gl = (dy·s)·mns */
    if (dlora_b != NULL) {
        for (int o = 0; o < C_out; o++) {
            for (int r = 0; r < R; r++) {
                double s = 0.0;
                for (int n = 0; n < N; n++)
                    s += (double)((dy[(int64_t)n * C_out + o] * scale) * mns[o]) * (double)u[(int64_t)n * R + r];
                float *d = dlora_b + (int64_t)o * R + r;
                *d = (float)((double)*d + s);
            }
        }
    }
    if (dlora_a == NULL && dx == NULL) return;

    /* du[n,r] = Σ_o gl[n,o]·B[o,r] */
    for (int n = 0; n < N; n++) {
        const float *dyn = dy + (int64_t)n * C_out;
        for (int r = 0; r < R; r++) {
            double s = 0.0;
            for (int o = 0; o < C_out; o++) s += (double)((dyn[o] * scale) * mns[o]) * (double)lora_b[(int64_t)o * R + r];
            du[(int64_t)n * R + r] = (float)s;
        }
    }

    /* dA[r,i] += Σ_n du[n,r]·x_a[n,i] */
    if (dlora_a != NULL) ref_adapter_grad_a(dlora_a, du, xa, N, C_in, R);

    /* dx[n,i] += mask(Σ_o ((mns−1)·dy[n,o])·W[o,i] + Σ_r du[n,r]·A[r,i]) */
    if (dx != NULL) {
        /* Columns in blocks of COL_BLOCK, rows of W streamed inside: each element still sums over o
         * then r in ascending order, so the result is that of the plain triple loop, bit for bit. */
        for (int n = 0; n < N; n++) {
            const float *dyn = dy + (int64_t)n * C_out;
            const float *dun = du + (int64_t)n * R;
            for (int i0 = 0; i0 < C_in; i0 += COL_BLOCK) {
                int nb = C_in - i0 < COL_BLOCK ? C_in - i0 : COL_BLOCK;
                double acc[COL_BLOCK];
                for (int i = 0; i < nb; i++) acc[i] = 0.0;
                for (int o = 0; o < C_out; o++) {
                    double c = (double)((mns[o] - 1.0f) * dyn[o]);
                    const float *wo = w + (int64_t)o * C_in + i0;
                    for (int i = 0; i < nb; i++) acc[i] += c * (double)wo[i];
                }
                for (int r = 0; r < R; r++) {
                    double c = (double)dun[r];
                    const float *ar = lora_a + (int64_t)r * C_in + i0;
                    for (int i = 0; i < nb; i++) acc[i] += c * (double)ar[i];
                }
                for (int i = 0; i < nb; i++) {
                    int64_t j = (int64_t)n * C_in + i0 + i;
                    float t = (float)acc[i];
                    if (keep != NULL) t = keep[j] ? t * keep_scale : 0.0f;
                    dx[j] = act_round(dx[j] + t, act);
                }
            }
        }
    }
}

void ref_dora_rescale(float *dy_s, float *dmag, const float *dy, const float *saved, enum dora_saved kind,
                      const float *mag, const float *wnorm, int N, int C_out, enum act_dtype act) {
    CHECK(N >= 0 && C_out >= 0, "ref_dora_rescale: N=%d C_out=%d", N, C_out);
    CHECK(kind == DORA_SAVED_Z || kind == DORA_SAVED_Y, "ref_dora_rescale: saved kind %d", (int)kind);
    for (int o = 0; o < C_out; o++) {
        const float mns = mag[o] / wnorm[o];
        double s = 0.0;
        for (int n = 0; n < N; n++) {
            const int64_t j = (int64_t)n * C_out + o;
            s += (double)dy[j] * (double)saved[j];
            dy_s[j] = act_round(mns * dy[j], act);
        }
        /* z/n = y/m: the same quotient from either saved tensor */
        const double den = kind == DORA_SAVED_Z ? (double)wnorm[o] : (double)mag[o];
        if (dmag != NULL) dmag[o] = (float)((double)dmag[o] + s / den);
    }
}
