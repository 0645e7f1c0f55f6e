/* comm_mpi_check.c — the MPI job of train/comm.h (trainers/comm_mpi.c), run under mpirun by
 * comm_mpi_test.sh; every rank checks, and prints one summary line.
 *
 *   comm_mpi_check [--seed=N]        the collectives
 *   comm_mpi_check --fault hang      rank 1 stops answering (sleeps); the others must end the job,
 *                                    naming it, within REFINE_COMM_TIMEOUT and the roll call
 *   comm_mpi_check --fault exit      rank 1 exits on its own before a collective
 *
 * What is checked on every rank (world ≥ 2):
 *   - comm_open found the launcher: world, rank and local rank from MPI;
 *   - sum (f64, i64): the fixed rank order, bit for bit: values drawn so that another order gives
 *     another result (1, 2^-60, −1 at the first three ranks), on every rank the same bits;
 *   - all_reduce (f32, f64, i64) of n values, n prime and larger than several pieces
 *     (comm_mpi_test.sh sets REFINE_COMM_PIECE_BYTES small): each value the rank-order sum,
 *     computed here from every rank's seeded inputs; in place;
 *   - reduce to rank 0 and to the last rank (f32 of one and of several pieces, f64): on root
 *     each value the rank-order sum, bit for bit; in place; a root that is not a rank refused;
 *   - reduce_scatter, all_gather, bcast, broadcast, barrier, send/recv around the ring;
 *   - a slab collective with a stream and a sum of a device type are refused with a message.
 * Inputs are drawn from (seed, rank) so every rank can recompute every other rank's; outputs are
 * poisoned (NaN) before each collective.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "trainers/comm_open.h"

static float value_f32(uint64_t seed, int rank, int64_t i) {
    struct rng g;
    rng_init(&g, seed * 1000003u + (uint64_t)rank * 7919u + (uint64_t)i);
    return (float)(rng_uniform(&g) * 2.0 - 1.0) * (rank == 1 ? 1e-3f : 1.0f);
}

static void poison_f32(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

/* The rank-order sum of value_f32 over ranks 0..W-1 at index i. */
static float expected_f32(uint64_t seed, int W, int64_t i) {
    float acc = value_f32(seed, 0, i);
    for (int r = 1; r < W; r++) acc = acc + value_f32(seed, r, i);
    return acc;
}

static int check_all_reduce_f32(const struct train_comm *c, uint64_t seed, int64_t n) {
    struct io_err e = {{0}};
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = value_f32(seed, c->rank, i);
    EXPECT(c->all_reduce(c->self, x, n, COMM_F32, NULL, "test values", &e) == 0, "all_reduce f32: %s", e.msg);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (memcmp(&x[i], &(float){expected_f32(seed, c->world, i)}, sizeof(float)) != 0) bad = i;
    EXPECT(bad < 0, "all_reduce f32 n=%" PRId64 " (seed %" PRIu64 "): index %" PRId64 " is %.9g, the rank-order sum %.9g",
           n, seed, bad, bad >= 0 ? (double)x[bad] : 0.0, bad >= 0 ? (double)expected_f32(seed, c->world, bad) : 0.0);
    free(x);
    return bad < 0;
}

/* reduce of n values to root: on root, each value the rank-order sum (the other ranks' buffers are
 * unspecified and not looked at). */
static int check_reduce_f32(const struct train_comm *c, uint64_t seed, int64_t n, int root) {
    struct io_err e = {{0}};
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = value_f32(seed, c->rank, i);
    EXPECT(c->reduce(c->self, x, n, COMM_F32, root, NULL, "test bucket", &e) == 0, "reduce f32 to rank %d: %s", root,
           e.msg);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0 && c->rank == root; i++)
        if (memcmp(&x[i], &(float){expected_f32(seed, c->world, i)}, sizeof(float)) != 0) bad = i;
    EXPECT(bad < 0,
           "reduce f32 n=%" PRId64 " to rank %d (seed %" PRIu64 "): index %" PRId64 " is %.9g, the rank-order sum %.9g",
           n, root, seed, bad, bad >= 0 ? (double)x[bad] : 0.0,
           bad >= 0 ? (double)expected_f32(seed, c->world, bad) : 0.0);
    free(x);
    return bad < 0;
}

static void fault(const struct train_comm *c, const char *kind) {
    struct io_err e = {{0}};
    if (c->rank == 1) {
        if (strcmp(kind, "exit") == 0) {
            fprintf(stderr, "rank 1: exiting on purpose\n");
            exit(3);
        }
        fprintf(stderr, "rank 1: not answering on purpose\n");
        fflush(stderr);
        sleep(600); /* ended by the job's abort */
        exit(0);
    }
    double v = 1.0;
    if (c->sum(c->self, &v, 1, COMM_F64, "the fault test's value", &e) != 0) io_exit(&e);
    printf("rank %d: the sum completed without rank 1\n", c->rank);
    exit(1);
}

int main(int argc, char **argv) {
    const char *fault_kind = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--fault") == 0) fault_kind = argv[i + 1];
    const uint64_t seed = fault_kind ? 0 : test_seed(argc, argv, 20261201);
    struct train_comm c;
    struct io_err e = {{0}};
    int launched = 0;
    if (comm_open(&c, &launched, &e) != 0) io_exit(&e);
    if (fault_kind != NULL) fault(&c, fault_kind);
    const int W = c.world, R = c.rank;
    EXPECT(launched && W >= 2 && R >= 0 && R < W && c.local_rank >= 0 && c.local_rank < W,
           "launched %d, rank %d of %d, local %d", launched, R, W, c.local_rank);

    /* sum, f64: the order shows (1 + 2^-60) − 1 = 0 in rank order, 2^-60 another way */
    double v[2] = {R == 0 ? 1.0 : R == 1 ? ldexp(1.0, -60) : R == 2 ? -1.0 : (double)R, (double)R};
    double want[2] = {1.0, 0.0};
    for (int r = 1; r < W; r++)
        want[0] = want[0] + (r == 1 ? ldexp(1.0, -60) : r == 2 ? -1.0 : (double)r), want[1] = want[1] + r;
    EXPECT(c.sum(c.self, v, 2, COMM_F64, "test doubles", &e) == 0 && memcmp(v, want, sizeof v) == 0,
           "sum f64 in rank order: %.17g %.17g, want %.17g %.17g (%s)", v[0], v[1], want[0], want[1], e.msg);
    int64_t k[3] = {R, (int64_t)1 << 40, -R};
    EXPECT(c.sum(c.self, k, 3, COMM_I64, "test counts", &e) == 0 && k[0] == (int64_t)W * (W - 1) / 2 &&
               k[1] == ((int64_t)W << 40) && k[2] == -(int64_t)W * (W - 1) / 2,
           "sum i64: %" PRId64 " %" PRId64 " %" PRId64 " (%s)", k[0], k[1], k[2], e.msg);
    EXPECT(c.sum(c.self, v, 1, COMM_F32, "wrong type", &e) == -1 && strstr(e.msg, "wrong type") != NULL,
           "sum of f32 on the host refused: %s", e.msg);

    /* all_reduce: sizes around the piece size, one prime many pieces long */
    const int64_t sizes[] = {1, 7, 1024, 1025, 10007};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) check_all_reduce_f32(&c, seed + s, sizes[s]);
    double d[5] = {R * 0.5, 1.0, -2.0, R == 0 ? 1e300 : 1.0, 3.0};
    EXPECT(c.all_reduce(c.self, d, 5, COMM_F64, NULL, "test doubles", &e) == 0 && d[0] == 0.25 * W * (W - 1) &&
               d[1] == W && d[3] == 1e300 + (W - 1),
           "all_reduce f64: %g %g %g (%s)", d[0], d[1], d[3], e.msg);
    EXPECT(c.all_reduce(c.self, d, 5, COMM_F32, &c, "on a stream", &e) == -1 && strstr(e.msg, "on a stream") != NULL,
           "a slab on a stream refused: %s", e.msg);

    /* reduce: to rank 0 and to the last rank, one value, within a piece, and many pieces long */
    const int roots[2] = {0, W - 1};
    for (int ri = 0; ri < 2; ri++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            check_reduce_f32(&c, seed + 50 + s, sizes[s], roots[ri]);
    double dr[3] = {R == 0 ? 1.0 : R == 1 ? ldexp(1.0, -60) : R == 2 ? -1.0 : (double)R, (double)R, -0.5};
    EXPECT(c.reduce(c.self, dr, 3, COMM_F64, W - 1, NULL, "test doubles", &e) == 0 &&
               (R != W - 1 || (memcmp(&dr[0], &want[0], sizeof(double)) == 0 && dr[1] == want[1] && dr[2] == -0.5 * W)),
           "reduce f64 to rank %d in rank order: %.17g %.17g %.17g, want %.17g %.17g %.17g (%s)", W - 1, dr[0], dr[1],
           dr[2], want[0], want[1], -0.5 * W, e.msg);
    EXPECT(c.reduce(c.self, dr, 3, COMM_F64, W, NULL, "a bucket", &e) == -1 && strstr(e.msg, "a bucket") != NULL,
           "reduce to rank %d of %d refused: %s", W, W, e.msg);
    EXPECT(c.reduce(c.self, dr, 3, COMM_F32, 0, &c, "on a stream", &e) == -1 && strstr(e.msg, "on a stream") != NULL,
           "a reduce on a stream refused: %s", e.msg);

    /* reduce_scatter: send W·n, recv n = Σ_r send_r[R·n ..] in rank order */
    const int64_t n = 333;
    float *send = malloc(sizeof(float) * (size_t)(W * n)), *recv = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < W * n; i++) send[i] = value_f32(seed + 99, R, i);
    poison_f32(recv, n);
    EXPECT(c.reduce_scatter(c.self, send, recv, n, COMM_F32, NULL, "test slab", &e) == 0, "reduce_scatter: %s", e.msg);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += memcmp(&recv[i], &(float){expected_f32(seed + 99, W, R * n + i)}, sizeof(float)) != 0;
    EXPECT(bad == 0, "reduce_scatter: %d of %" PRId64 " values differ from the rank-order sum", bad, n);

    /* all_gather: rank r's n values at r·n */
    float *all = malloc(sizeof(float) * (size_t)(W * n));
    for (int64_t i = 0; i < n; i++) recv[i] = value_f32(seed + 5, R, i);
    poison_f32(all, W * n);
    EXPECT(c.all_gather(c.self, recv, all, n, COMM_F32, NULL, "test slab", &e) == 0, "all_gather: %s", e.msg);
    bad = 0;
    for (int r = 0; r < W; r++)
        for (int64_t i = 0; i < n; i++) bad += all[r * n + i] != value_f32(seed + 5, r, i);
    EXPECT(bad == 0, "all_gather: %d values are not their rank's", bad);

    /* bcast from the last rank, broadcast from rank 0, a barrier */
    for (int64_t i = 0; i < n; i++) recv[i] = R == W - 1 ? value_f32(seed + 6, W - 1, i) : NAN;
    EXPECT(c.bcast(c.self, recv, n, COMM_F32, W - 1, NULL, "test slab", &e) == 0 &&
               recv[n - 1] == value_f32(seed + 6, W - 1, n - 1),
           "bcast from rank %d: %s", W - 1, e.msg);
    char text[32];
    snprintf(text, sizeof text, R == 0 ? "from rank zero" : "garbage %d", R);
    EXPECT(c.broadcast(c.self, text, sizeof text, 0, "test text", &e) == 0 && strcmp(text, "from rank zero") == 0,
           "broadcast: '%s' %s", text, e.msg);
    EXPECT(c.barrier(c.self, "the test's barrier", &e) == 0, "barrier: %s", e.msg);

    /* send / recv around the ring: even ranks send first */
    uint64_t token = ((uint64_t)R << 32) | 0xABCu, got = 0;
    const int next = (R + 1) % W, prev = (R + W - 1) % W;
    int rc;
    if (R % 2 == 0)
        rc = c.send(c.self, &token, sizeof token, next, "a token", &e) || c.recv(c.self, &got, sizeof got, prev, "a token", &e);
    else
        rc = c.recv(c.self, &got, sizeof got, prev, "a token", &e) || c.send(c.self, &token, sizeof token, next, "a token", &e);
    EXPECT(rc == 0 && got == (((uint64_t)prev << 32) | 0xABCu), "send/recv around the ring: got %" PRIx64 " (%s)", got,
           e.msg);
    EXPECT(c.send(c.self, &token, sizeof token, R, "to itself", &e) == -1, "send to itself refused");

    free(send), free(recv), free(all);
    char label[32];
    snprintf(label, sizeof label, "comm_mpi_check rank %d of %d", R, W);
    const int status = test_finish(label);
    c.destroy(c.self);
    return status;
}
