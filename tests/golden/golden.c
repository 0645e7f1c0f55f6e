/* golden.c — fixture loading for the golden tests (golden.h). */
#include "tests/golden/golden.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "ref/dropout.h"

static void die(const struct golden *g, const char *fmt, const char *name, const char *detail) {
    fprintf(stderr, "FAIL golden fixture %s: ", g->path);
    fprintf(stderr, fmt, name, detail);
    fputc('\n', stderr);
    exit(1);
}

void golden_open(struct golden *g, const char *path) {
    struct io_err e;
    snprintf(g->path, sizeof g->path, "%s", path);
    if (safetensors_open(&g->st, path, &e) != 0) {
        fprintf(stderr, "FAIL cannot open golden fixture: %s\n", e.msg);
        exit(1);
    }
}

void golden_close(struct golden *g) { safetensors_close(&g->st); }

int golden_has(const struct golden *g, const char *name) { return safetensors_find(&g->st, name) != NULL; }

static const struct st_tensor *find_checked(const struct golden *g, const char *name, int ndim, const int64_t *shape) {
    const struct st_tensor *t = safetensors_find(&g->st, name);
    if (t == NULL) die(g, "tensor '%s' is missing%s", name, "");
    if (ndim >= 0) {
        int ok = t->ndim == ndim;
        for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
        if (!ok) die(g, "tensor '%s' has another shape than the test expects%s", name, "");
    }
    return t;
}

int64_t golden_numel(const struct golden *g, const char *name) { return find_checked(g, name, -1, NULL)->numel; }

float *golden_f32(const struct golden *g, const char *name, int ndim, const int64_t *shape) {
    const struct st_tensor *t = find_checked(g, name, ndim, shape);
    float *out = malloc(sizeof(float) * (size_t)(t->numel > 0 ? t->numel : 1));
    CHECK(out != NULL, "out of memory for %lld floats", (long long)t->numel);
    struct io_err e;
    if (st_tensor_to_f32(out, t, &e) != 0) die(g, "tensor '%s': %s", name, e.msg);
    return out;
}

int64_t *golden_i64(const struct golden *g, const char *name, int ndim, const int64_t *shape) {
    const struct st_tensor *t = find_checked(g, name, ndim, shape);
    int64_t *out = malloc(sizeof(int64_t) * (size_t)(t->numel > 0 ? t->numel : 1));
    CHECK(out != NULL, "out of memory");
    for (int64_t i = 0; i < t->numel; i++) {
        if (t->dtype == ST_I64) {
            memcpy(&out[i], t->data + 8 * i, 8);
        } else if (t->dtype == ST_I32) {
            int32_t v;
            memcpy(&v, t->data + 4 * i, 4);
            out[i] = v;
        } else {
            die(g, "tensor '%s' is %s, expected I64 or I32", name, st_dtype_name(t->dtype));
        }
    }
    return out;
}

int32_t *golden_i32(const struct golden *g, const char *name, int ndim, const int64_t *shape) {
    int64_t *w = golden_i64(g, name, ndim, shape);
    int64_t n = golden_numel(g, name);
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    CHECK(out != NULL, "out of memory");
    for (int64_t i = 0; i < n; i++) out[i] = (int32_t)w[i];
    free(w);
    return out;
}

double golden_scalar(const struct golden *g, const char *name) {
    const struct st_tensor *t = find_checked(g, name, -1, NULL);
    if (t->numel != 1) die(g, "tensor '%s' is not a scalar%s", name, "");
    if (t->dtype == ST_F64) {
        double d;
        memcpy(&d, t->data, 8);
        return d;
    }
    if (t->dtype == ST_I64 || t->dtype == ST_I32) {
        int64_t *v = golden_i64(g, name, -1, NULL);
        double d = (double)v[0];
        free(v);
        return d;
    }
    float *f = golden_f32(g, name, -1, NULL);
    double d = f[0];
    free(f);
    return d;
}

const char *golden_meta(const struct golden *g, const char *key) { return safetensors_meta(&g->st, key); }

float *golden_case_f32(const struct golden *g, const char *cs, const char *name, int ndim, int64_t d0, int64_t d1) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", cs, name);
    int64_t shape[2] = {d0, d1};
    return golden_f32(g, key, ndim, shape);
}

void golden_dropout_case(const struct golden *g, const char *cs, struct cmp_case *c, const float *x, int rows,
                         int cols, float p, uint64_t seed, uint64_t offset, uint8_t **keep, float **xd,
                         float *keep_scale) {
    const int64_t n = (int64_t)rows * cols;
    *keep = malloc((size_t)n);
    *xd = malloc(sizeof(float) * (size_t)n);
    float *keep_f = malloc(sizeof(float) * (size_t)n);
    CHECK(*keep != NULL && *xd != NULL && keep_f != NULL, "out of memory");
    ref_dropout_mask(*keep, n, p, seed, offset);
    float *keep_ref = golden_case_f32(g, cs, "keep", 2, rows, cols);
    float *ks_ref = golden_case_f32(g, cs, "keep_scale", 1, 1, 0);
    for (int64_t j = 0; j < n; j++) keep_f[j] = (*keep)[j];
    c->what = "dropout mask (ref_dropout_mask vs the one PEFT used)";
    cmp_exact_f32(c, keep_f, keep_ref, n);
    *keep_scale = (float)(1.0 / (1.0 - (double)p));
    c->what = "keep_scale";
    cmp_exact_f32(c, keep_scale, ks_ref, 1);
    for (int64_t j = 0; j < n; j++) (*xd)[j] = (*keep)[j] ? x[j] * *keep_scale : 0.0f;
    free(keep_f), free(keep_ref), free(ks_ref);
}
