/* swiglu.c — the reference SwiGLU activation (swiglu.h), element by element, in double with one
 * fp32 rounding per line of the header, then act(). */
#include "ref/swiglu.h"

#include <math.h>
#include <stdint.h>

#include "io/check.h"
#include "ref/bf16.h"


static inline double sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }

void ref_swiglu_forward(float *out, const float *gate, const float *up, int N, int F, int ld, enum act_dtype act) {
    CHECK(N >= 0 && F >= 1 && ld >= F, "N=%d F=%d ld=%d", N, F, ld);
    for (int n = 0; n < N; n++) {
        const float *g = gate + (int64_t)n * ld, *u = up + (int64_t)n * ld;
        float *o = out + (int64_t)n * F;
        for (int f = 0; f < F; f++) {
            double gd = g[f];
            float a = act_round((float)(gd * sigmoid(gd)), act);
            o[f] = act_round((float)((double)a * (double)u[f]), act);
        }
    }
}

void ref_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,
                         int F, int ld, enum act_dtype act) {
    CHECK(N >= 0 && F >= 1 && ld >= F, "N=%d F=%d ld=%d", N, F, ld);
    for (int n = 0; n < N; n++) {
        const float *g = gate + (int64_t)n * ld, *u = up + (int64_t)n * ld;
        const float *dy = dout + (int64_t)n * F;
        float *dg = dgate + (int64_t)n * ld, *du = dup + (int64_t)n * ld;
        for (int f = 0; f < F; f++) {
            double gd = g[f], ud = u[f]; /* read both before writing (dgate may be gate, dup up) */
            double s = sigmoid(gd);
            float a = act_round((float)(gd * s), act);
            float da = act_round((float)((double)dy[f] * ud), act);
            du[f] = act_round((float)((double)dy[f] * (double)a), act);
            /* silu'(g) = σ(g)·(1 + g·(1 − σ(g))), torch's silu_backward form */
            dg[f] = act_round((float)((double)da * (s * (1.0 + gd * (1.0 - s)))), act);
        }
    }
}
