/* shard.c — the sharded optimizer's partition (shard.h). */
#include "ref/shard.h"

#include <stddef.h>

/* ⌈r·E/W⌉ without overflow for E < 2^62 and W < 2^31. */
static int64_t boundary(int64_t E, int world, int r) {
    const int64_t q = E / world, rem = E % world;
    const int64_t num = rem * r; /* < W² */
    return q * r + num / world + (num % world != 0);
}

static int64_t total(const int64_t *n, int n_tensors) {
    int64_t E = 0;
    for (int t = 0; t < n_tensors; t++) E += n[t];
    return E;
}

/* ⌈a / b⌉ for a ≥ 0, b > 0; a < 0 gives 0. */
static int64_t ceil_div(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

int shard_owner(const int64_t *n, int n_tensors, int world, int t, int64_t i) {
    const int64_t E = total(n, n_tensors);
    int64_t base = 0;
    for (int k = 0; k < t; k++) base += n[k];
    const int64_t start = base + i / SHARD_CHUNK * SHARD_CHUNK; /* the chunk's first element, globally */
    int r = 0;
    while (r + 1 < world && boundary(E, world, r + 1) <= start) r++;
    return r;
}

int shard_pieces(struct shard_piece *out, int64_t *elements, const int64_t *n, int n_tensors, int world, int r) {
    const int64_t E = total(n, n_tensors), from = boundary(E, world, r), to = boundary(E, world, r + 1);
    int count = 0;
    int64_t off = 0, base = 0;
    for (int t = 0; t < n_tensors; base += n[t], t++) {
        /* chunks j of this tensor whose global start base + j·C lies in [from, to) */
        const int64_t chunks = ceil_div(n[t], SHARD_CHUNK);
        const int64_t j0 = ceil_div(from - base, SHARD_CHUNK);
        int64_t j1 = ceil_div(to - base, SHARD_CHUNK); /* one past the last */
        if (j1 > chunks) j1 = chunks;
        if (j0 >= j1) continue;
        const int64_t lo = j0 * SHARD_CHUNK, hi = j1 * SHARD_CHUNK < n[t] ? j1 * SHARD_CHUNK : n[t];
        off = (off + 3) / 4 * 4;
        if (out != NULL) out[count] = (struct shard_piece){t, lo, hi, off};
        count++;
        off += hi - lo;
    }
    *elements = off;
    return count;
}
