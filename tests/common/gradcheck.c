/* gradcheck.c — central differences against an analytic gradient (gradcheck.h). */
#include "tests/common/gradcheck.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "tests/common/harness.h"
#include "tests/common/rng.h"

int gradcheck(const struct cmp_case *c, gradcheck_fn f, void *ctx, float *param, const float *grad,
              int64_t n, int samples, uint64_t seed, double h, double tol) {
    double scale = cmp_rms(grad, n);
    struct rng r;
    rng_init(&r, seed ^ 0x6772616463686B00ull);
    int64_t count = n <= samples ? n : samples;
    int64_t bad = 0, worst = -1;
    double worst_ratio = 0, worst_fd = 0;
    for (int64_t s = 0; s < count; s++) {
        int64_t i = n <= samples ? s : (int64_t)(rng_u64(&r) % (uint64_t)n);
        float x = param[i];
        double step = h * fmax(1.0, fabs((double)x));
        float xp = (float)((double)x + step), xm = (float)((double)x - step);
        param[i] = xp;
        double fp = f(ctx);
        param[i] = xm;
        double fm = f(ctx);
        param[i] = x;
        double fd = (fp - fm) / ((double)xp - (double)xm);
        double err = fabs(fd - (double)grad[i]);
        /* The loss comes from fp32 outputs: each carries a relative error of order FLT_EPSILON,
         * so the difference quotient cannot resolve less than ~ε·(|f+| + |f−|)/step. */
        double noise = 8.0 * FLT_EPSILON * (fabs(fp) + fabs(fm)) / ((double)xp - (double)xm);
        double thr = tol * (fabs((double)grad[i]) + scale) + noise;
        double ratio = thr > 0 ? err / thr : (err > 0 ? INFINITY : 0);
        if (!(ratio <= 1.0)) bad++;
        if (!(ratio <= worst_ratio) || worst < 0) {
            worst_ratio = ratio;
            worst = i;
            worst_fd = fd;
        }
    }
    if (bad == 0) {
        test_pass();
        return 0;
    }
    test_fail("%s/%s: %" PRId64 " of %" PRId64 " sampled gradients disagree with central differences", c->op,
              c->what, bad, count);
    fprintf(stderr, "  gradcheck op=%s what=%s shape=[%s] seed=%" PRIu64 " h=%g tol=%g\n", c->op, c->what,
            c->shape ? c->shape : "?", c->seed, h, tol);
    fprintf(stderr, "  worst i=%" PRId64 " analytic=%.9g numeric=%.9g (%.0f%% of budget) rms(grad)=%.3g\n", worst,
            (double)grad[worst], worst_fd, 100.0 * worst_ratio, scale);
    return 1;
}
