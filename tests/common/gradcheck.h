/* gradcheck.h — central-difference gradient checks.
 *
 * gradcheck(c, f, ctx, param, grad, n, samples, seed, h, tol)
 *   f(ctx) evaluates a scalar loss (double) from the current contents of `param` (n floats).
 *   For `samples` indices (every index when n ≤ samples, else drawn from `seed`), x = param[i] is
 *   moved to the float nearest x ± h·max(1, |x|); the central difference uses the exact float
 *   steps actually taken: fd = (f(x+) − f(x−)) / (x+ − x−). It must agree with grad[i]:
 *       |fd − grad[i]| ≤ tol·(|grad[i]| + rms(grad)) + 8·FLT_EPSILON·(|f(x+)| + |f(x−)|)/(x+ − x−),
 *   the last term being the resolution of a difference quotient of fp32-computed losses.
 *   param is restored exactly. Counts one check; prints a report on failure; returns 0/1.
 * The truncation error of the central difference is O(h²·f'''), the rounding error
 * O(ε_f32·|f|/h); h = 1e-2..1e-3 with losses of O(1) keeps both near 1e-4 relative.
 */
#ifndef REFINE_TESTS_COMMON_GRADCHECK_H
#define REFINE_TESTS_COMMON_GRADCHECK_H

#include <stdint.h>

#include "tests/common/compare.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef double (*gradcheck_fn)(void *ctx);

int gradcheck(const struct cmp_case *c, gradcheck_fn f, void *ctx, float *param, const float *grad,
              int64_t n, int samples, uint64_t seed, double h, double tol);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TESTS_COMMON_GRADCHECK_H */
