/* sample.c — logits processors, greedy choice and seeded sampling (sample.h). */
#include "ref/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"

void ref_sample_params_default(struct sample_params *p) {
    memset(p, 0, sizeof *p);
    p->mode = SAMPLE_GREEDY;
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
}

/* Order-preserving integer of a float (−inf < ... < +inf; NaN is never produced here). */
static uint32_t ordered(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* keys[i] = (ordered(z), index), sorted ascending: value order, then index order — a total order,
 * so the result does not depend on qsort's algorithm. */
static void sort_keys(uint64_t *keys, const float *z, int V) {
    for (int i = 0; i < V; i++) keys[i] = (uint64_t)ordered(z[i]) << 32 | (uint32_t)i;
    qsort(keys, (size_t)V, sizeof *keys, cmp_u64);
}

size_t ref_sample_workspace_size(int V) { return (size_t)V * sizeof(uint64_t); }

void ref_sample_process(float *z, int V, const int32_t *prev, int n_prev, const struct sample_params *p,
                        void *workspace) {
    uint64_t *keys = workspace;
    CHECK(V >= 1 && n_prev >= 0, "V=%d n_prev=%d", V, n_prev);
    if (p->repetition_penalty != 1.0f) {
        /* once per distinct token: mark the ones done */
        uint8_t *done = workspace;
        memset(done, 0, (size_t)V);
        for (int i = 0; i < n_prev; i++) {
            const int32_t t = prev[i];
            CHECK(t >= 0 && t < V, "token %d outside the vocabulary of %d", t, V);
            if (done[t]) continue;
            done[t] = 1;
            z[t] = z[t] < 0.0f ? z[t] * p->repetition_penalty : z[t] / p->repetition_penalty;
        }
    }
    if (p->mode == SAMPLE_GREEDY) return;
    if (p->temperature != 1.0f)
        for (int v = 0; v < V; v++) z[v] = z[v] / p->temperature;
    if (p->top_k > 0 && p->top_k < V) {
        sort_keys(keys, z, V);
        const float kth = z[(uint32_t)keys[V - p->top_k]];
        for (int v = 0; v < V; v++)
            if (z[v] < kth) z[v] = -INFINITY;
    }
    if (p->top_p < 1.0f) {
        sort_keys(keys, z, V);
        const float zmax = z[(uint32_t)keys[V - 1]];
        double total = 0.0;
        for (int i = 0; i < V; i++) total += exp((double)z[(uint32_t)keys[i]] - (double)zmax);
        const double limit = 1.0 - (double)p->top_p;
        /* the smallest tokens whose cumulative probability stays ≤ 1 − p go; the largest stays */
        double c = 0.0;
        int cut = 0;
        while (cut < V - 1) {
            c += exp((double)z[(uint32_t)keys[cut]] - (double)zmax) / total;
            if (!(c <= limit)) break;
            cut++;
        }
        for (int i = 0; i < cut; i++) z[(uint32_t)keys[i]] = -INFINITY;
    }
}

int32_t ref_sample_argmax(const float *z, int V) {
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (z[v] > z[best] || (isnan(z[best]) && !isnan(z[v]))) best = v;
    return best;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

double ref_sample_uniform(uint64_t seed, uint64_t stream, uint64_t step) {
    const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ step);
    return (double)(h >> 11) * 0x1.0p-53;
}

int32_t ref_sample_draw(const float *z, int V, double u) {
    float zmax = -INFINITY;
    for (int v = 0; v < V; v++)
        if (z[v] > zmax) zmax = z[v];
    CHECK(zmax > -INFINITY, "a logits row with no finite value to sample from");
    double total = 0.0;
    for (int v = 0; v < V; v++)
        if (z[v] > -INFINITY) total += exp((double)z[v] - (double)zmax);
    const double target = u * total;
    double c = 0.0;
    int32_t last = 0;
    for (int v = 0; v < V; v++) {
        if (!(z[v] > -INFINITY)) continue;
        c += exp((double)z[v] - (double)zmax);
        last = v;
        if (c > target) return v;
    }
    return last; /* u·total rounded up to the whole sum */
}

int32_t ref_sample_next(float *z, int V, const int32_t *prev, int n_prev, const struct sample_params *p,
                        uint64_t stream, uint64_t step, void *workspace) {
    ref_sample_process(z, V, prev, n_prev, p, workspace);
    if (p->mode == SAMPLE_GREEDY) return ref_sample_argmax(z, V);
    return ref_sample_draw(z, V, ref_sample_uniform(p->seed, stream, step));
}
