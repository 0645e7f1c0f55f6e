/* embedding_test.c — ref/embedding against mathematics: a hand case, gather/scatter-add
 * properties (the backward is the transpose of the forward), finite differences.
 *
 *   bazel test //tests/unit:embedding_test        (replay: --test_arg=--seed=N)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/embedding.h"
#include "tests/common/compare.h"
#include "tests/common/gradcheck.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"
#include "tests/common/rng.h"

static uint64_t g_seed;

/* table rows [1,2], [3,4], [5,6]; ids [2, 0, 2]. */
static void test_hand_case(void) {
    const float table[6] = {1, 2, 3, 4, 5, 6};
    const int32_t ids[3] = {2, 0, 2};
    float out[6];
    ref_embedding_forward(out, ids, table, 3, 3, 2);
    const float want[6] = {5, 6, 1, 2, 5, 6};
    struct cmp_case c = {"embedding_forward", "out", "N=3 V=3 C=2", "f32", 0};
    cmp_exact_f32(&c, out, want, 6);

    /* dout rows [1,10], [100,1000], [0.5,0.25]: row 2 receives rows 0 and 2, row 0 receives row 1,
     * row 1 is untouched; dtable starts at 7 (accumulation). */
    const float dout[6] = {1, 10, 100, 1000, 0.5f, 0.25f};
    float dt[6] = {7, 7, 7, 7, 7, 7};
    ref_embedding_backward(dt, dout, ids, 3, 3, 2);
    const float wantd[6] = {107, 1007, 7, 7, 8.5f, 17.25f};
    struct cmp_case cd = {"embedding_backward", "dtable", "N=3 V=3 C=2", "f32", 0};
    cmp_exact_f32(&cd, dt, wantd, 6);
}

/* ⟨g, E(table)⟩ = ⟨Eᵀ g, table⟩ for random g, table: the scatter-add is the adjoint of the gather. */
static void test_adjoint(int N, int V, int C) {
    struct rng r;
    rng_init(&r, g_seed + (uint64_t)(N * 7919 + V * 31 + C));
    int64_t nt = (int64_t)V * C, no = (int64_t)N * C;
    float *table = malloc(sizeof(float) * nt), *dtable = calloc((size_t)nt, sizeof(float));
    struct guarded go;
    float *out = guarded_alloc(&go, sizeof(float) * no);
    float *g = malloc(sizeof(float) * no);
    int32_t *ids = malloc(sizeof(int32_t) * (N > 0 ? N : 1));
    for (int n = 0; n < N; n++) ids[n] = rng_int(&r, V);
    rng_fill_normal(&r, table, nt, 0.0, 1.0);
    rng_fill_normal(&r, g, no, 0.0, 1.0);
    poison_f32(out, no);
    ref_embedding_forward(out, ids, table, N, V, C);
    EXPECT(count_poison_f32(out, no) == 0, "forward left unwritten elements (N=%d V=%d C=%d)", N, V, C);
    guarded_check(&go, "embedding out");
    int64_t mism = 0;
    for (int n = 0; n < N; n++)
        mism += memcmp(out + (int64_t)n * C, table + (int64_t)ids[n] * C, sizeof(float) * C) != 0;
    EXPECT(mism == 0, "%lld rows differ from their table row", (long long)mism);

    ref_embedding_backward(dtable, g, ids, N, V, C);
    double lhs = 0, rhs = 0, scale = 0;
    for (int64_t j = 0; j < no; j++) lhs += (double)g[j] * out[j], scale += fabs((double)g[j] * out[j]);
    for (int64_t j = 0; j < nt; j++) rhs += (double)dtable[j] * table[j];
    /* dtable holds fp32 sums of up to N terms: relative error ≤ N·ε per element. */
    EXPECT(fabs(lhs - rhs) <= (N + 1) * 1.2e-7 * scale + 1e-12, "adjoint: <g,Ex>=%.12g <E'g,x>=%.12g", lhs, rhs);

    /* Accumulation: with integer-valued gradients every sum is exact, so a second backward into
     * the same dtable gives exactly twice the first. */
    rng_fill_int(&r, g, no, -8, 8);
    memset(dtable, 0, sizeof(float) * nt);
    ref_embedding_backward(dtable, g, ids, N, V, C);
    float *twice = malloc(sizeof(float) * nt);
    memcpy(twice, dtable, sizeof(float) * nt);
    ref_embedding_backward(twice, g, ids, N, V, C);
    for (int64_t j = 0; j < nt; j++) dtable[j] *= 2.0f;
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d V=%d C=%d", N, V, C);
    struct cmp_case ca = {"embedding_backward", "accumulates", shape, "f32", g_seed};
    cmp_exact_f32(&ca, twice, dtable, nt);
    free(table), free(dtable), free(g), free(ids), free(twice);
    guarded_free(&go);
}

struct fd_ctx {
    int N, V, C;
    const int32_t *ids;
    float *table, *g, *out;
};

static double fd_loss(void *p) {
    struct fd_ctx *c = p;
    ref_embedding_forward(c->out, c->ids, c->table, c->N, c->V, c->C);
    double s = 0;
    for (int64_t j = 0; j < (int64_t)c->N * c->C; j++) s += (double)c->g[j] * (double)c->out[j];
    return s;
}

static void test_gradients(int N, int V, int C) {
    struct rng r;
    rng_init(&r, g_seed * 17 + (uint64_t)(N + V + C));
    int32_t *ids = malloc(sizeof(int32_t) * N);
    for (int n = 0; n < N; n++) ids[n] = rng_int(&r, V);
    struct fd_ctx c = {N, V, C, ids, malloc(sizeof(float) * V * C), malloc(sizeof(float) * N * C),
                       malloc(sizeof(float) * N * C)};
    rng_fill_normal(&r, c.table, (int64_t)V * C, 0.0, 1.0);
    rng_fill_normal(&r, c.g, (int64_t)N * C, 0.0, 1.0);
    float *dt = calloc((size_t)V * C, sizeof(float));
    ref_embedding_backward(dt, c.g, ids, N, V, C);
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d V=%d C=%d", N, V, C);
    struct cmp_case cc = {"embedding_backward", "dtable", shape, "f32", g_seed};
    gradcheck(&cc, fd_loss, &c, c.table, dt, (int64_t)V * C, 64, g_seed, 1e-3, 1e-4);
    free(ids), free(c.table), free(c.g), free(c.out), free(dt);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261123);
    test_hand_case();
    const int shapes[][3] = {{0, 3, 5}, {1, 1, 1}, {13, 5, 7}, {33, 97, 17}, {64, 11, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        test_adjoint(shapes[s][0], shapes[s][1], shapes[s][2]);
    test_gradients(9, 5, 3);
    test_gradients(31, 13, 7);
    return test_finish("embedding_test");
}
