/* golden.h — loading golden fixtures (safetensors files under tests/golden/data/<group>/).
 *
 * golden_open(g, "tests/golden/data/ops/rmsnorm.safetensors") opens a fixture (paths relative
 * to the workspace root, which is the working directory of a Bazel test); a missing or invalid
 * fixture is a test failure with the reader's message, and the test ends.
 * golden_f32(g, name, ndim, shape) returns a malloc'ed fp32 copy of the named tensor (F32, F16,
 * BF16 or F64 in the file), after checking its shape when ndim ≥ 0; golden_i64 / golden_i32 the
 * same for integer tensors (I64, I32). Absent tensors and wrong shapes end the test with a
 * message naming the fixture and the tensor. golden_scalar reads a one-element tensor.
 * golden_meta returns a "__metadata__" value (seeds, shapes, versions), NULL if absent.
 */
#ifndef REFINE_TESTS_GOLDEN_GOLDEN_H
#define REFINE_TESTS_GOLDEN_GOLDEN_H

#include <stdint.h>

#include "io/safetensors.h"
#include "tests/common/compare.h"

#ifdef __cplusplus
extern "C" {
#endif

struct golden {
    struct safetensors st;
    char path[512];
};

void golden_open(struct golden *g, const char *path);
void golden_close(struct golden *g);
int golden_has(const struct golden *g, const char *name);
float *golden_f32(const struct golden *g, const char *name, int ndim, const int64_t *shape);
int64_t *golden_i64(const struct golden *g, const char *name, int ndim, const int64_t *shape);
int32_t *golden_i32(const struct golden *g, const char *name, int ndim, const int64_t *shape);
double golden_scalar(const struct golden *g, const char *name);
const char *golden_meta(const struct golden *g, const char *key);
/* Number of elements of a tensor (exits if absent). */
int64_t golden_numel(const struct golden *g, const char *name);

/* Fixtures holding several cases name their tensors "<case>.<name>": golden_f32 of that name with
 * shape (d0) when ndim is 1, (d0, d1) when 2. */
float *golden_case_f32(const struct golden *g, const char *cs, const char *name, int ndim, int64_t d0, int64_t d1);

/* Adapter fixtures with dropout p > 0 on an input x of rows × cols: draws refine's mask
 * (ref_dropout_mask with seed and offset), checks it and the keep scale 1/(1−p) against the mask
 * the generator fed PEFT ("<case>.keep", "<case>.keep_scale"), and returns (malloc'ed) the mask
 * and the dropped input x_d = keep ? x·scale : 0, with the scale. c names the case in reports;
 * its `what` is left pointing at the last check. */
void golden_dropout_case(const struct golden *g, const char *cs, struct cmp_case *c, const float *x, int rows,
                         int cols, float p, uint64_t seed, uint64_t offset, uint8_t **keep, float **xd,
                         float *keep_scale);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TESTS_GOLDEN_GOLDEN_H */
