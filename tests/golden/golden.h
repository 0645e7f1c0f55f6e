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

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TESTS_GOLDEN_GOLDEN_H */
