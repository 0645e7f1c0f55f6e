/* lora.c — the reference LoRA adapter (lora.h): plain loops, double sums in index order. */
#include "ref/lora.h"

#include <math.h>

#include "io/check.h"
#include "ref/bf16.h"


float ref_lora_scale(double alpha, int R, enum lora_scaling mode) {
    CHECK(R > 0, "rank R=%d must be positive", R);
    CHECK(mode == LORA_SCALE_STANDARD || mode == LORA_SCALE_RSLORA, "unknown lora_scaling %d", (int)mode);
    return (float)(mode == LORA_SCALE_RSLORA ? alpha / sqrt((double)R) : alpha / (double)R);
}

void ref_lora_init(float *lora_a, float *lora_b, int C_in, int C_out, int R, double (*uniform01)(void *ctx),
                   void *ctx) {
    CHECK(C_in > 0 && C_out > 0 && R > 0, "C_in=%d C_out=%d R=%d must be positive", C_in, C_out, R);
    /* kaiming_uniform_(a=√5): gain = √(2/(1+5)) = √(1/3), bound = √3·gain/√fan_in = 1/√C_in. */
    double bound = 1.0 / sqrt((double)C_in);
    for (int64_t j = 0; j < (int64_t)R * C_in; j++) lora_a[j] = (float)((2.0 * uniform01(ctx) - 1.0) * bound);
    for (int64_t j = 0; j < (int64_t)C_out * R; j++) lora_b[j] = 0.0f;
}

void ref_lora_forward(float *y, float *u, const float *x, const float *x_d, const float *lora_a,
                      const float *lora_b, int N, int C_in, int C_out, int R, float scale, enum act_dtype act) {
    CHECK(N >= 0 && C_in >= 0 && C_out >= 0 && R > 0, "N=%d C_in=%d C_out=%d R=%d", N, C_in, C_out, R);
    const float *xa = x_d != NULL ? x_d : x;
    for (int n = 0; n < N; n++) {
        const float *xn = xa + (int64_t)n * C_in;
        float *un = u + (int64_t)n * R;
        for (int r = 0; r < R; r++) {
            const float *ar = lora_a + (int64_t)r * C_in;
            double s = 0.0;
            for (int i = 0; i < C_in; i++) s += (double)xn[i] * (double)ar[i];
            un[r] = act_round((float)s, act);
        }
        float *yn = y + (int64_t)n * C_out;
        for (int o = 0; o < C_out; o++) {
            const float *bo = lora_b + (int64_t)o * R;
            double s = 0.0;
            for (int r = 0; r < R; r++) s += (double)un[r] * (double)bo[r];
            float l = (float)s;
            yn[o] = act_round(yn[o] + l * scale, act);
        }
    }
}

/* Column block of the cache-friendly loop (a stack array of doubles). */
enum { COL_BLOCK = 256 };

void ref_adapter_grad_a(float *dlora_a, const float *du, const float *xa, int N, int C_in, int R) {
    /* Columns in blocks, rows of x_a streamed inside: each element sums over n in ascending order,
     * the result of the plain triple loop bit for bit. */
    for (int r = 0; r < R; r++) {
        for (int i0 = 0; i0 < C_in; i0 += COL_BLOCK) {
            int nb = C_in - i0 < COL_BLOCK ? C_in - i0 : COL_BLOCK;
            double acc[COL_BLOCK];
            for (int i = 0; i < nb; i++) acc[i] = 0.0;
            for (int n = 0; n < N; n++) {
                double c = (double)du[(int64_t)n * R + r];
                const float *xn = xa + (int64_t)n * C_in + i0;
                for (int i = 0; i < nb; i++) acc[i] += c * (double)xn[i];
            }
            float *d = dlora_a + (int64_t)r * C_in + i0;
            for (int i = 0; i < nb; i++) d[i] = (float)((double)d[i] + acc[i]);
        }
    }
}

size_t ref_lora_backward_workspace_size(int N, int R) { return (size_t)N * (size_t)R; }

void ref_lora_backward(float *dx, float *dlora_a, float *dlora_b, const float *dy, const float *x,
                       const float *x_d, const uint8_t *keep, float keep_scale, const float *u,
                       const float *lora_a, const float *lora_b, int N, int C_in, int C_out, int R, float scale,
                       enum act_dtype act, float *workspace) {
    CHECK(N >= 0 && C_in >= 0 && C_out >= 0 && R > 0, "N=%d C_in=%d C_out=%d R=%d", N, C_in, C_out, R);
    CHECK(workspace != NULL || N == 0, "ref_lora_backward needs a workspace of %zu floats",
          ref_lora_backward_workspace_size(N, R));
    const float *xa = x_d != NULL ? x_d : x;
    float *du = workspace;

    /* dB[o,r] += Σ_n (dy[n,o]·s)·u[n,r] */
    if (dlora_b != NULL) {
        for (int o = 0; o < C_out; o++) {
            for (int r = 0; r < R; r++) {
                double s = 0.0;
                for (int n = 0; n < N; n++)
                    s += (double)(dy[(int64_t)n * C_out + o] * scale) * (double)u[(int64_t)n * R + r];
                float *d = dlora_b + (int64_t)o * R + r;
                *d = (float)((double)*d + s);
            }
        }
    }
    if (dlora_a == NULL && dx == NULL) return;

    /* du[n,r] = Σ_o (dy[n,o]·s)·B[o,r] */
    for (int n = 0; n < N; n++) {
        const float *dyn = dy + (int64_t)n * C_out;
        for (int r = 0; r < R; r++) {
            double s = 0.0;
            for (int o = 0; o < C_out; o++) s += (double)(dyn[o] * scale) * (double)lora_b[(int64_t)o * R + r];
            du[(int64_t)n * R + r] = (float)s;
        }
    }

    /* dA[r,i] += Σ_n du[n,r]·x_a[n,i] */
    if (dlora_a != NULL) ref_adapter_grad_a(dlora_a, du, xa, N, C_in, R);

    /* dx[n,i] += mask(Σ_r du[n,r]·A[r,i]) */
    if (dx != NULL) {
        for (int n = 0; n < N; n++) {
            const float *dun = du + (int64_t)n * R;
            for (int i = 0; i < C_in; i++) {
                double s = 0.0;
                for (int r = 0; r < R; r++) s += (double)dun[r] * (double)lora_a[(int64_t)r * C_in + i];
                float t = (float)s;
                if (keep != NULL) t = keep[(int64_t)n * C_in + i] ? t * keep_scale : 0.0f;
                float *d = dx + (int64_t)n * C_in + i;
                *d = act_round(*d + t, act);
            }
        }
    }
}
