/* gradcheck_test.c — gradcheck accepts a right gradient and rejects a wrong one. */
#include <math.h>

#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

enum { N = 50 };

/* f(x) = Σ sin(x_i)·x_{i+1} + x_i³/3, a coupled, nonlinear test function. */
static double f(void *ctx) {
    const float *x = ctx;
    double s = 0;
    for (int i = 0; i < N; i++) s += sin(x[i]) * x[(i + 1) % N] + (double)x[i] * x[i] * x[i] / 3.0;
    return s;
}

int main(int argc, char **argv) {
    uint64_t seed = test_seed(argc, argv, 7);
    struct rng r;
    rng_init(&r, seed);
    float x[N], g[N];
    rng_fill_uniform(&r, x, N, -2.0, 2.0);
    for (int i = 0; i < N; i++) {
        int prev = (i + N - 1) % N;
        g[i] = (float)(cos(x[i]) * x[(i + 1) % N] + sin(x[prev]) + (double)x[i] * x[i]);
    }
    struct cmp_case c = {"gradcheck_test", "x", "N=50", "f32", seed};
    EXPECT(gradcheck(&c, f, x, x, g, N, N, seed, 1e-3, 1e-3) == 0, "exact gradient accepted");
    g[17] *= 1.05f;
    test_capture_begin();
    gradcheck(&c, f, x, x, g, N, N, seed, 1e-3, 1e-3);
    EXPECT(test_capture_end() == 1, "a gradient 5%% off at one index is rejected");
    return test_finish("gradcheck_test");
}
