/* shard_test.c — the sharded optimizer's partition (ref/shard.h) and the sharded update against the
 * unsharded one, with the reference optimizers. Tier (a): exact.
 *
 * Partition, for tensor lists with awkward sizes (1, 3, 4095, 8191, 8192, 8193, 3·8192 + 5, …) and
 * world sizes 1, 2, 3, 5, 8 and more ranks than chunks:
 *   - every element of every tensor is owned by exactly one rank (and shard_owner names it);
 *   - pieces start at a chunk boundary and end at one or at the tensor's end; flat offsets are
 *     multiples of 4, increasing, non-overlapping, and *elements is the end of the last piece;
 *   - every rank holds within one chunk of E/W elements; one rank holds everything in a flat
 *     array that is the tensors' concatenation (with 4-element alignment).
 * Update, ranks simulated in one process: each rank takes the same global clip coefficient
 * (from per-chunk partial sums that each rank computes for its own chunks, the others' zero, then
 * summed over the ranks — the same array, bit for bit, as one process computes), then steps its
 * pieces with
 *   - ref_adamw_step (torch order) on its flat masters and moments: 3 steps, masters and moments
 *     equal the unsharded run's bit for bit;
 *   - adamw8bit_step (bitsandbytes 8-bit, a state per piece, 8-bit exactly when the whole tensor
 *     is): 3 steps, parameters, codes and block maxima equal the unsharded run's bit for bit.
 * Seeded inputs (printed seed).
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/adamw.h"
#include "ref/adamw8bit.h"
#include "ref/shard.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

#define C SHARD_CHUNK

static const int64_t sizes_a[] = {1, 3, 4095, 8191, 8192, 8193, 3 * C + 5, 4, 640, 2 * C};
static const int64_t sizes_b[] = {5 * C + 1};
static const int64_t sizes_c[] = {64, 64, 64};

static void check_partition(const int64_t *n, int T, int W, const char *what) {
    int64_t E = 0;
    for (int t = 0; t < T; t++) E += n[t];
    int64_t owned_total = 0;
    uint8_t **seen = calloc((size_t)T, sizeof *seen);
    for (int t = 0; t < T; t++) seen[t] = calloc((size_t)n[t], 1);
    struct shard_piece p[32];
    for (int r = 0; r < W; r++) {
        int64_t elements = -1;
        const int k = shard_pieces(p, &elements, n, T, W, r);
        EXPECT(k <= T, "%s W=%d r=%d: %d pieces of %d tensors", what, W, r, k, T);
        int64_t end = 0, mine = 0;
        for (int i = 0; i < k; i++) {
            const struct shard_piece q = p[i];
            EXPECT(q.tensor >= 0 && q.tensor < T && (i == 0 || q.tensor > p[i - 1].tensor),
                   "%s W=%d r=%d: piece %d of tensor %d out of order", what, W, r, i, q.tensor);
            EXPECT(q.lo % C == 0 && q.lo < q.hi && (q.hi == n[q.tensor] || q.hi % C == 0),
                   "%s W=%d r=%d: piece [%" PRId64 ", %" PRId64 ") of tensor %d (n %" PRId64 ") not on chunks", what,
                   W, r, q.lo, q.hi, q.tensor, n[q.tensor]);
            EXPECT(q.off % 4 == 0 && q.off >= end, "%s W=%d r=%d: piece %d at offset %" PRId64 " (after %" PRId64 ")",
                   what, W, r, i, q.off, end);
            end = q.off + (q.hi - q.lo);
            mine += q.hi - q.lo;
            for (int64_t j = q.lo; j < q.hi; j++) {
                seen[q.tensor][j]++;
                if (j % 997 == 0 || j == q.lo || j == q.hi - 1)
                    EXPECT(shard_owner(n, T, W, q.tensor, j) == r, "%s W=%d: owner of %d[%" PRId64 "] is not %d",
                           what, W, q.tensor, j, r);
            }
        }
        EXPECT(elements == end, "%s W=%d r=%d: elements %" PRId64 ", the last piece ends at %" PRId64, what, W, r,
               elements, end);
        const double fair = (double)E / W;
        EXPECT(fabs((double)mine - fair) <= C, "%s W=%d r=%d: %" PRId64 " elements, fair share %.0f", what, W, r, mine,
               fair);
        owned_total += mine;
    }
    int64_t twice = 0, never = 0;
    for (int t = 0; t < T; t++)
        for (int64_t j = 0; j < n[t]; j++) twice += seen[t][j] > 1, never += seen[t][j] == 0;
    EXPECT(twice == 0 && never == 0 && owned_total == E, "%s W=%d: %" PRId64 " elements owned twice, %" PRId64 " never",
           what, W, twice, never);
    for (int t = 0; t < T; t++) free(seen[t]);
    free(seen);
}

/* The per-chunk partial sums of squares of the chunks rank r owns (−1: all), into partial[] (one
 * per chunk over the tensors in order; the others left as they are). */
static void chunk_partials(float *partial, float *const *g, const int64_t *n, int T, int W, int r) {
    int k = 0;
    for (int t = 0; t < T; t++)
        for (int64_t s = 0; s < n[t]; s += C, k++) {
            if (r >= 0 && shard_owner(n, T, W, t, s) != r) continue;
            float acc = 0.0f;
            for (int64_t i = s; i < n[t] && i < s + C; i++) acc = acc + g[t][i] * g[t][i];
            partial[k] = acc;
        }
}

static double norm_of(const float *partial, int k) {
    double s = 0.0;
    for (int i = 0; i < k; i++) s += partial[i];
    return sqrt(s);
}

static void check_update(const int64_t *n, int T, int W, uint64_t seed, int eightbit) {
    struct rng g;
    rng_init(&g, seed);
    int n_chunks = 0;
    for (int t = 0; t < T; t++) n_chunks += (int)((n[t] + C - 1) / C);
    float **p0 = calloc((size_t)T, sizeof *p0), **gr = calloc((size_t)T, sizeof *gr);
    float **m0 = calloc((size_t)T, sizeof *m0), **v0 = calloc((size_t)T, sizeof *v0);
    struct adamw8bit_state *s0 = calloc((size_t)T, sizeof *s0);
    for (int t = 0; t < T; t++) {
        p0[t] = malloc(sizeof(float) * (size_t)n[t]);
        gr[t] = malloc(sizeof(float) * (size_t)n[t]);
        m0[t] = calloc((size_t)n[t], sizeof(float));
        v0[t] = calloc((size_t)n[t], sizeof(float));
        rng_fill_uniform(&g, p0[t], n[t], -1.0, 1.0);
        if (eightbit) adamw8bit_init(&s0[t], n[t], ADAMW8BIT_MIN_8BIT_SIZE);
    }
    /* the ranks: flat masters and moments (AdamW) or a state per piece (8-bit), from p0 */
    struct shard_piece pc[8][32];
    int np[8];
    float *fm[8], *fmom[8], *fvar[8];
    struct adamw8bit_state s8[8][32];
    for (int r = 0; r < W; r++) {
        int64_t el = 0;
        np[r] = shard_pieces(pc[r], &el, n, T, W, r);
        fm[r] = calloc((size_t)(el + 1), sizeof(float));
        fmom[r] = calloc((size_t)(el + 1), sizeof(float));
        fvar[r] = calloc((size_t)(el + 1), sizeof(float));
        for (int i = 0; i < np[r]; i++) {
            const struct shard_piece q = pc[r][i];
            memcpy(fm[r] + q.off, p0[q.tensor] + q.lo, sizeof(float) * (size_t)(q.hi - q.lo));
            if (eightbit)
                adamw8bit_init(&s8[r][i], q.hi - q.lo, n[q.tensor] >= ADAMW8BIT_MIN_8BIT_SIZE ? 0 : INT32_MAX);
        }
    }
    float *whole = malloc(sizeof(float) * (size_t)n_chunks), *summed = malloc(sizeof(float) * (size_t)n_chunks);
    float *mine = malloc(sizeof(float) * (size_t)n_chunks);
    const struct adamw_hparams hp = {1e-2, 0.9, 0.999, 1e-8, 0.1};
    int64_t bad = 0;
    for (int step = 1; step <= 3; step++) {
        for (int t = 0; t < T; t++) rng_fill_normal(&g, gr[t], n[t], 0.0, step == 2 ? 30.0 : 1.0); /* step 2 clips */
        /* the norm: one process from all partials; the ranks from theirs, summed */
        chunk_partials(whole, gr, n, T, W, -1);
        memset(summed, 0, sizeof(float) * (size_t)n_chunks);
        for (int r = 0; r < W; r++) {
            memset(mine, 0, sizeof(float) * (size_t)n_chunks);
            chunk_partials(mine, gr, n, T, W, r);
            for (int k = 0; k < n_chunks; k++) summed[k] = summed[k] + mine[k];
        }
        EXPECT(memcmp(whole, summed, sizeof(float) * (size_t)n_chunks) == 0,
               "W=%d step %d: the ranks' partial sums differ from one process's", W, step);
        const float coef = ref_clip_coef((float)norm_of(summed, n_chunks), 5.0);
        for (int t = 0; t < T; t++)
            for (int64_t i = 0; i < n[t]; i++) gr[t][i] = gr[t][i] * coef;
        struct adamw8bit_hparams h8 = adamw8bit_defaults();
        h8.hp = hp;
        for (int t = 0; t < T; t++) { /* unsharded */
            if (eightbit) {
                s0[t].step = step - 1;
                adamw8bit_step(&s0[t], p0[t], gr[t], &h8);
            } else {
                ref_adamw_step(p0[t], m0[t], v0[t], gr[t], n[t], step, &hp);
            }
        }
        for (int r = 0; r < W; r++) /* sharded */
            for (int i = 0; i < np[r]; i++) {
                const struct shard_piece q = pc[r][i];
                if (eightbit) {
                    s8[r][i].step = step - 1;
                    adamw8bit_step(&s8[r][i], fm[r] + q.off, gr[q.tensor] + q.lo, &h8);
                } else {
                    ref_adamw_step(fm[r] + q.off, fmom[r] + q.off, fvar[r] + q.off, gr[q.tensor] + q.lo, q.hi - q.lo,
                                   step, &hp);
                }
            }
    }
    for (int r = 0; r < W; r++)
        for (int i = 0; i < np[r]; i++) {
            const struct shard_piece q = pc[r][i];
            const size_t len = (size_t)(q.hi - q.lo);
            bad += memcmp(fm[r] + q.off, p0[q.tensor] + q.lo, len * sizeof(float)) != 0;
            if (!eightbit) {
                bad += memcmp(fmom[r] + q.off, m0[q.tensor] + q.lo, len * sizeof(float)) != 0;
                bad += memcmp(fvar[r] + q.off, v0[q.tensor] + q.lo, len * sizeof(float)) != 0;
            } else if (s0[q.tensor].is_8bit) {
                const int64_t b0 = q.lo / ADAMW8BIT_BLOCKSIZE, nb = adamw8bit_n_blocks(q.hi - q.lo);
                bad += s8[r][i].is_8bit != 1;
                bad += memcmp(s8[r][i].q1, s0[q.tensor].q1 + q.lo, len) != 0;
                bad += memcmp(s8[r][i].q2, s0[q.tensor].q2 + q.lo, len) != 0;
                bad += memcmp(s8[r][i].absmax1, s0[q.tensor].absmax1 + b0, (size_t)nb * sizeof(float)) != 0;
                bad += memcmp(s8[r][i].absmax2, s0[q.tensor].absmax2 + b0, (size_t)nb * sizeof(float)) != 0;
            } else {
                bad += s8[r][i].is_8bit != 0;
                bad += memcmp(s8[r][i].m, s0[q.tensor].m + q.lo, len * sizeof(float)) != 0;
                bad += memcmp(s8[r][i].v, s0[q.tensor].v + q.lo, len * sizeof(float)) != 0;
            }
        }
    EXPECT(bad == 0, "%s on %d ranks (seed %" PRIu64 "): %" PRId64 " pieces differ from the unsharded update after 3 steps",
           eightbit ? "8-bit AdamW" : "AdamW", W, seed, bad);
    for (int r = 0; r < W; r++) {
        free(fm[r]), free(fmom[r]), free(fvar[r]);
        if (eightbit)
            for (int i = 0; i < np[r]; i++) adamw8bit_free(&s8[r][i]);
    }
    for (int t = 0; t < T; t++) {
        free(p0[t]), free(gr[t]), free(m0[t]), free(v0[t]);
        if (eightbit) adamw8bit_free(&s0[t]);
    }
    free(p0), free(gr), free(m0), free(v0), free(s0), free(whole), free(summed), free(mine);
}

int main(int argc, char **argv) {
    const uint64_t seed = test_seed(argc, argv, 4242);
    const int worlds[] = {1, 2, 3, 5, 8, 40};
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
        check_partition(sizes_a, 10, worlds[w], "mixed sizes");
        check_partition(sizes_b, 1, worlds[w], "one tensor of 6 chunks");
        check_partition(sizes_c, 3, worlds[w], "three small tensors");
    }
    int64_t el = 0;
    struct shard_piece p[16];
    const int k = shard_pieces(p, &el, sizes_a, 10, 1, 0);
    int64_t expect_off = 0, bad = 0;
    for (int i = 0; i < k; i++) {
        expect_off = (expect_off + 3) / 4 * 4;
        bad += p[i].tensor != i || p[i].lo != 0 || p[i].hi != sizes_a[i] || p[i].off != expect_off;
        expect_off += sizes_a[i];
    }
    EXPECT(k == 10 && bad == 0 && el == expect_off, "one rank: one whole piece per tensor, concatenated (%d pieces)", k);
    const int update_worlds[] = {1, 2, 3, 8};
    for (size_t w = 0; w < sizeof update_worlds / sizeof update_worlds[0]; w++) {
        check_update(sizes_a, 10, update_worlds[w], seed + w, 0);
        check_update(sizes_a, 10, update_worlds[w], seed + 100 + w, 1);
    }
    return test_finish("shard_test");
}
