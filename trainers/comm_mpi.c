/* comm_mpi.c — the job of several processes over MPI (train/comm.h), built as the plugin
 * librefine_mpi.so, which the trainer programs load only when a launcher (mpirun, srun) started
 * them (trainers/comm_open.h): the programs themselves never link MPI, so a plain run needs no MPI
 * library. Its one entry point, refine_comm_mpi_open, fills a struct train_comm.
 *
 * Start: MPI_Init_thread (MPI_THREAD_SERIALIZED is enough: one thread calls MPI), rank and world
 * from MPI_COMM_WORLD, the local rank (this process's index on its host: the GPU it drives) from
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); the collectives run on a duplicate of MPI_COMM_WORLD,
 * the roll call on another. REFINE_COMM_TIMEOUT (seconds, default 1200) bounds every wait.
 *
 * Collectives, all built from nonblocking point-to-point messages so that a wait can time out and
 * say which peers never sent anything (every rank calls them in the same order; a collective's
 * messages carry its sequence number as their tag, send / recv a tag of their own):
 *   sum          every rank sends its n values to every other; each sums in rank order:
 *                out[i] = ((v_0[i] + v_1[i]) + v_2[i]) + … — the same bits on every rank;
 *   all_reduce   the same sum for a slab: rank r sums segment r of every rank's buffer in rank
 *                order (reduce-scatter) and sends the result to every rank (all-gather); the
 *                segments go in pieces of at most 64 MiB (REFINE_COMM_PIECE_BYTES changes it, for
 *                tests), so the extra memory is world pieces;
 *   reduce       the same reduce-scatter with one segment, the whole slab, on rank root: every
 *                other rank sends its buffer there piece by piece and root sums in rank order,
 *                in place (the other ranks' buffers are left as they were);
 *   reduce_scatter, all_gather, bcast, broadcast, barrier, send, recv: the plain exchanges.
 * Host memory only (the GPU engine's slabs go through NCCL, trainers/comm_nccl.h); COMM_BF16 and
 * COMM_U8 move but are never summed.
 *
 * Faults: a wait polls its requests; while it waits it answers peers' roll calls (where it waits).
 * When the timeout passes, it asks every peer where it is (a roll call, a grace period of
 * min(60 s, timeout / 2)) and fails with one sentence: the operation, the ranks it still waits on
 * (nothing received from them, or what it sent them not taken), the ranks that did not answer
 * (died, hang, or still computing) and where the others wait.
 * The caller ends the program with that message; exiting (any status, CHECK failures included)
 * without destroy calls MPI_Abort from an atexit handler, so the launcher ends every rank, the
 * stopped and the hung ones too.
 *
 * Test: tests/unit/comm_mpi_test.sh (mpirun -np 2 and 3 over this plugin: the sums' fixed order,
 * slabs of several pieces, a rank that stops answering named by the others).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/comm.h"

#ifdef REFINE_HAVE_MPI
#include <mpi.h>

#define TAG_QUERY 1                  /* roll call: "where are you?" */
#define TAG_ANSWER 2                 /* roll call: "waiting in ..." */
#define TAG_P2P 32767                /* send / recv (the collectives' tags are below) */
#define WHERE_CAP 160

struct mpi_job {
    MPI_Comm comm;  /* the collectives */
    MPI_Comm watch; /* roll calls */
    int rank, world, local_rank;
    double timeout_s;
    size_t piece_bytes; /* the largest message, and the all_reduce's unit of work */
    unsigned long long seq; /* collectives begun */
    int p2p;                /* a send or recv is in progress */
    int broken;             /* a wait timed out: the job can only be aborted */
    char name[160];
    /* the requests of the wait in progress */
    MPI_Request *req;
    int *req_peer; /* the peer of each request */
    int n_req, cap_req;
    void *scratch; /* world pieces for all_reduce / reduce_scatter / reduce */
    size_t scratch_bytes;
};

static int g_open;      /* MPI initialized by this plugin and not yet finalized */
static int g_finalized; /* destroy ran: a normal end */

static void end_job_on_abnormal_exit(void) {
    if (g_open && !g_finalized) MPI_Abort(MPI_COMM_WORLD, 1);
}

static int fail(struct io_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct io_err *e, const char *fmt, ...) {
    if (e == NULL) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t dtype_bytes(enum comm_dtype t) {
    switch (t) {
        case COMM_I64: return 8;
        case COMM_F64: return 8;
        case COMM_F32: return 4;
        case COMM_BF16: return 2;
        case COMM_U8: return 1;
    }
    return 0;
}

static const char *dtype_name(enum comm_dtype t) {
    static const char *const names[] = {"i64", "f64", "f32", "bf16", "u8"};
    return (unsigned)t < 5 ? names[t] : "?";
}

/* ---- requests and the wait --------------------------------------------------------------------- */

static void req_reset(struct mpi_job *m) { m->n_req = 0; }

static MPI_Request *req_add(struct mpi_job *m, int peer) {
    if (m->n_req == m->cap_req) {
        m->cap_req = m->cap_req ? 2 * m->cap_req : 64;
        m->req = realloc(m->req, (size_t)m->cap_req * sizeof *m->req);
        m->req_peer = realloc(m->req_peer, (size_t)m->cap_req * sizeof *m->req_peer);
        if (m->req == NULL || m->req_peer == NULL) {
            fprintf(stderr, "refine: out of memory for MPI requests\n");
            exit(1);
        }
    }
    m->req_peer[m->n_req] = peer;
    return &m->req[m->n_req++];
}

/* The tag of the messages of the collective in progress: its number (modulo the tags MPI
 * guarantees), or TAG_P2P for send / recv, whose two sides need not have run as many collectives. */
static int tag_of(const struct mpi_job *m) { return m->p2p ? TAG_P2P : (int)(m->seq % TAG_P2P); }

/* bytes to/from peer in messages of at most piece_bytes, tagged with tag_of. */
static void post_send(struct mpi_job *m, const void *buf, size_t bytes, int peer) {
    const int tag = tag_of(m);
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += m->piece_bytes) {
        const size_t k = bytes - off < m->piece_bytes ? bytes - off : m->piece_bytes;
        MPI_Isend((const char *)buf + off, (int)k, MPI_BYTE, peer, tag, m->comm, req_add(m, peer));
        if (bytes == 0) break;
    }
}

static void post_recv(struct mpi_job *m, void *buf, size_t bytes, int peer) {
    const int tag = tag_of(m);
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += m->piece_bytes) {
        const size_t k = bytes - off < m->piece_bytes ? bytes - off : m->piece_bytes;
        MPI_Irecv((char *)buf + off, (int)k, MPI_BYTE, peer, tag, m->comm, req_add(m, peer));
        if (bytes == 0) break;
    }
}

/* Answers the roll calls that peers have sent (where this rank waits). */
static void serve_queries(struct mpi_job *m, const char *where) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, m->watch, &flag, &st);
        if (!flag) return;
        char q;
        MPI_Recv(&q, 1, MPI_CHAR, st.MPI_SOURCE, TAG_QUERY, m->watch, MPI_STATUS_IGNORE);
        char answer[WHERE_CAP];
        snprintf(answer, sizeof answer, "%s", where);
        /* a small message: sent eagerly, so the blocking send returns at once */
        MPI_Send(answer, WHERE_CAP, MPI_CHAR, st.MPI_SOURCE, TAG_ANSWER, m->watch);
    }
}

static void job_serve(void *self, const char *waiting_in) { serve_queries(self, waiting_in); }

static void append(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
    const size_t n = strlen(buf);
    if (n + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* Asks every peer where it is and waits a grace period for the answers. */
static void job_roll_call(void *self, const char *waiting_in, char *report, size_t cap) {
    struct mpi_job *m = self;
    const int W = m->world;
    char *answers = calloc((size_t)W, WHERE_CAP);
    MPI_Request *rq = calloc((size_t)W, sizeof *rq), *sq = calloc((size_t)W, sizeof *sq);
    int *got = calloc((size_t)W, sizeof *got);
    if (!answers || !rq || !sq || !got) {
        snprintf(report, cap, "(no memory for a roll call)");
        free(answers), free(rq), free(sq), free(got);
        return;
    }
    static const char query = '?';
    for (int p = 0; p < W; p++) {
        rq[p] = sq[p] = MPI_REQUEST_NULL;
        if (p == m->rank) continue;
        MPI_Isend(&query, 1, MPI_CHAR, p, TAG_QUERY, m->watch, &sq[p]);
        MPI_Irecv(answers + (size_t)p * WHERE_CAP, WHERE_CAP, MPI_CHAR, p, TAG_ANSWER, m->watch, &rq[p]);
    }
    double grace = m->timeout_s / 2;
    if (grace > 60.0) grace = 60.0;
    const double t0 = now_s();
    int missing = W - 1;
    while (missing > 0 && now_s() - t0 < grace) {
        serve_queries(m, waiting_in); /* peers calling the roll at the same time */
        for (int p = 0; p < W; p++) {
            if (p == m->rank || got[p]) continue;
            int flag = 0;
            MPI_Test(&rq[p], &flag, MPI_STATUS_IGNORE);
            if (flag) got[p] = 1, missing--;
        }
        if (missing > 0) {
            const struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    report[0] = '\0';
    if (missing > 0) {
        append(report, cap, "no answer within %.0f s from rank", grace);
        const char *sep = missing > 1 ? "s " : " ";
        for (int p = 0; p < W; p++)
            if (p != m->rank && !got[p]) append(report, cap, "%s%d", sep, p), sep = ", ";
        append(report, cap, " (died, hangs, or computes elsewhere)");
    } else {
        append(report, cap, "every rank answered");
    }
    int first = 1;
    for (int p = 0; p < W; p++) {
        if (p == m->rank || !got[p]) continue;
        answers[(size_t)p * WHERE_CAP + WHERE_CAP - 1] = '\0';
        append(report, cap, "%s rank %d waits in %s", first ? ";" : ",", p, answers + (size_t)p * WHERE_CAP);
        first = 0;
    }
    /* the unanswered requests are left to MPI_Abort, which ends the job */
    free(answers), free(rq), free(sq), free(got);
}

/* Waits for every posted request; on timeout, a roll call and one sentence in e. */
static int wait_all(struct mpi_job *m, const char *op, const char *what, struct io_err *e) {
    char where[WHERE_CAP];
    snprintf(where, sizeof where, "collective #%llu (%s of %s)", m->seq, op, what);
    const double t0 = now_s();
    long spins = 0;
    for (;;) {
        int done = 1;
        for (int i = 0; i < m->n_req; i++) {
            if (m->req[i] == MPI_REQUEST_NULL) continue;
            int flag = 0;
            MPI_Test(&m->req[i], &flag, MPI_STATUS_IGNORE);
            if (!flag) done = 0;
        }
        if (done) {
            req_reset(m);
            return 0;
        }
        const double t = now_s() - t0;
        if (t > m->timeout_s) break;
        if ((++spins & 63) == 0) serve_queries(m, where);
        if (t > 0.5) { /* a long wait (a slow peer): stop burning the CPU it may need */
            const struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
    /* the peers with a message still in flight: nothing received from them, or what was sent to
     * them not taken */
    char silent[256] = "", report[768];
    unsigned char *pending = calloc((size_t)m->world, 1);
    for (int i = 0; i < m->n_req && pending; i++)
        if (m->req[i] != MPI_REQUEST_NULL) pending[m->req_peer[i]] = 1;
    const char *sep = "";
    for (int p = 0; p < m->world && pending; p++)
        if (pending[p]) append(silent, sizeof silent, "%s%d", sep, p), sep = ", ";
    free(pending);
    job_roll_call(m, where, report, sizeof report);
    req_reset(m);
    m->broken = 1; /* requests are left pending: the job can only end (destroy aborts it) */
    return fail(e, "%s: waiting on rank %s after %.0f s (REFINE_COMM_TIMEOUT); roll call: %s; ending the job", where,
                silent, m->timeout_s, report);
}

/* ---- the collectives ------------------------------------------------------------------------------ */

static void add_into(void *acc, const void *v, int64_t n, enum comm_dtype t) {
    if (t == COMM_F32) {
        float *a = acc;
        const float *b = v;
        for (int64_t i = 0; i < n; i++) a[i] = a[i] + b[i];
    } else if (t == COMM_F64) {
        double *a = acc;
        const double *b = v;
        for (int64_t i = 0; i < n; i++) a[i] = a[i] + b[i];
    } else {
        int64_t *a = acc;
        const int64_t *b = v;
        for (int64_t i = 0; i < n; i++) a[i] = a[i] + b[i];
    }
}

static int summable(enum comm_dtype t) { return t == COMM_F32 || t == COMM_F64 || t == COMM_I64; }

static void *scratch(struct mpi_job *m, size_t bytes) {
    if (bytes > m->scratch_bytes) {
        free(m->scratch);
        m->scratch = malloc(bytes);
        if (m->scratch == NULL) {
            fprintf(stderr, "refine: out of memory for %zu bytes of MPI buffers\n", bytes);
            exit(1);
        }
        m->scratch_bytes = bytes;
    }
    return m->scratch;
}

static int job_sum(void *self, void *buf, int64_t n, enum comm_dtype t, const char *what, struct io_err *e) {
    struct mpi_job *m = self;
    if (n < 0 || (t != COMM_I64 && t != COMM_F64))
        return fail(e, "comm sum of %s: %lld values of type %s", what, (long long)n, dtype_name(t));
    m->seq++;
    const size_t bytes = (size_t)n * 8;
    char *all = scratch(m, bytes * (size_t)m->world);
    memcpy(all + bytes * (size_t)m->rank, buf, bytes);
    for (int p = 0; p < m->world; p++) {
        if (p == m->rank) continue;
        post_send(m, buf, bytes, p);
        post_recv(m, all + bytes * (size_t)p, bytes, p);
    }
    if (wait_all(m, "sum", what, e)) return -1;
    memcpy(buf, all, bytes); /* rank 0's, then ranks 1, 2, … added in order */
    for (int p = 1; p < m->world; p++) add_into(buf, all + bytes * (size_t)p, n, t);
    return 0;
}

static int job_broadcast(void *self, void *buf, size_t bytes, int root, const char *what, struct io_err *e) {
    struct mpi_job *m = self;
    if (root < 0 || root >= m->world) return fail(e, "comm broadcast of %s from rank %d of %d", what, root, m->world);
    m->seq++;
    if (m->rank == root) {
        for (int p = 0; p < m->world; p++)
            if (p != root) post_send(m, buf, bytes, p);
    } else {
        post_recv(m, buf, bytes, root);
    }
    return wait_all(m, "broadcast", what, e);
}

static int job_barrier(void *self, const char *what, struct io_err *e) {
    struct mpi_job *m = self;
    m->seq++;
    for (int p = 0; p < m->world; p++) {
        if (p == m->rank) continue;
        post_send(m, NULL, 0, p);
        post_recv(m, NULL, 0, p);
    }
    return wait_all(m, "barrier", what, e);
}

/* Segment r of n values: [lo, hi). */
static void segment(int64_t n, int world, int r, int64_t *lo, int64_t *hi) {
    *lo = n * r / world;
    *hi = n * (r + 1) / world;
}

/* The reduce-scatter of all_reduce and reduce_scatter, one piece at a time: rank r's result is
 * values [lo[r], lo[r] + len[r]) of every rank's send buffer, summed in rank order (rank 0's, then
 * rank 1's added, …) into out. Rank q's values come in slot q of the scratch (this rank's own
 * copied there too, so out may be this rank's part of send: all_reduce works in place). */
static int reduce_pieces(struct mpi_job *m, const void *send, void *out, const int64_t *lo, const int64_t *len,
                         enum comm_dtype t, const char *op, const char *what, struct io_err *e) {
    const size_t es = dtype_bytes(t);
    const int64_t piece = (int64_t)(m->piece_bytes / es);
    int64_t longest = 0;
    for (int r = 0; r < m->world; r++) longest = len[r] > longest ? len[r] : longest;
    char *tmp = scratch(m, (size_t)piece * es * (size_t)m->world);
    for (int64_t k = 0; k < longest; k += piece) {
        m->seq++;
        const int64_t mine = len[m->rank] - k < piece ? len[m->rank] - k : piece;
        for (int p = 0; p < m->world; p++) {
            if (p == m->rank) continue;
            const int64_t theirs = len[p] - k < piece ? len[p] - k : piece;
            if (theirs > 0) post_send(m, (const char *)send + (size_t)(lo[p] + k) * es, (size_t)theirs * es, p);
            if (mine > 0) post_recv(m, tmp + (size_t)p * (size_t)piece * es, (size_t)mine * es, p);
        }
        if (mine > 0)
            memcpy(tmp + (size_t)m->rank * (size_t)piece * es, (const char *)send + (size_t)(lo[m->rank] + k) * es,
                   (size_t)mine * es);
        if (wait_all(m, op, what, e)) return -1;
        if (mine <= 0) continue;
        char *acc = (char *)out + (size_t)k * es;
        memcpy(acc, tmp, (size_t)mine * es);
        for (int p = 1; p < m->world; p++) add_into(acc, tmp + (size_t)p * (size_t)piece * es, mine, t);
    }
    return 0;
}

static int job_all_reduce(void *self, void *buf, int64_t n, enum comm_dtype t, void *stream, const char *what,
                          struct io_err *e) {
    struct mpi_job *m = self;
    if (stream != NULL) return fail(e, "comm all_reduce of %s: the MPI job reduces host memory (no stream)", what);
    if (n < 0 || !summable(t))
        return fail(e, "comm all_reduce of %s: %lld values of type %s", what, (long long)n, dtype_name(t));
    const size_t es = dtype_bytes(t);
    int64_t *lo = calloc((size_t)m->world, sizeof *lo), *len = calloc((size_t)m->world, sizeof *len);
    if (!lo || !len) return free(lo), free(len), fail(e, "out of memory");
    for (int r = 0; r < m->world; r++) {
        int64_t a, b;
        segment(n, m->world, r, &a, &b);
        lo[r] = a, len[r] = b - a;
    }
    /* reduce-scatter: this rank's segment, summed in rank order, in place (its own values are read
     * before the piece they sit in is written) */
    int rc = reduce_pieces(m, buf, (char *)buf + (size_t)lo[m->rank] * es, lo, len, t, "all_reduce", what, e);
    if (rc == 0) { /* all-gather of the reduced segments */
        m->seq++;
        for (int p = 0; p < m->world; p++) {
            if (p == m->rank) continue;
            post_send(m, (char *)buf + (size_t)lo[m->rank] * es, (size_t)len[m->rank] * es, p);
            post_recv(m, (char *)buf + (size_t)lo[p] * es, (size_t)len[p] * es, p);
        }
        rc = wait_all(m, "all_reduce", what, e);
    }
    free(lo);
    free(len);
    return rc;
}

static int job_reduce_scatter(void *self, const void *send, void *recv, int64_t n, enum comm_dtype t, void *stream,
                              const char *what, struct io_err *e) {
    struct mpi_job *m = self;
    if (stream != NULL) return fail(e, "comm reduce_scatter of %s: the MPI job reduces host memory", what);
    if (n < 0 || !summable(t))
        return fail(e, "comm reduce_scatter of %s: %lld values of type %s", what, (long long)n, dtype_name(t));
    const size_t es = dtype_bytes(t);
    if (send != recv && (const char *)recv + (size_t)n * es > (const char *)send &&
        (const char *)send + (size_t)n * es * (size_t)m->world > (const char *)recv &&
        recv != (const char *)send + (size_t)n * es * (size_t)m->rank)
        return fail(e, "comm reduce_scatter of %s: recv overlaps send other than at this rank's part", what);
    int64_t *lo = calloc((size_t)m->world, sizeof *lo), *len = calloc((size_t)m->world, sizeof *len);
    if (!lo || !len) return free(lo), free(len), fail(e, "out of memory");
    for (int r = 0; r < m->world; r++) lo[r] = n * r, len[r] = n;
    const int rc = reduce_pieces(m, send, recv, lo, len, t, "reduce_scatter", what, e);
    free(lo);
    free(len);
    return rc;
}

static int job_all_gather(void *self, const void *send, void *recv, int64_t n, enum comm_dtype t, void *stream,
                          const char *what, struct io_err *e) {
    struct mpi_job *m = self;
    if (stream != NULL) return fail(e, "comm all_gather of %s: the MPI job moves host memory", what);
    const size_t es = dtype_bytes(t), bytes = (size_t)n * es;
    if (n < 0 || es == 0) return fail(e, "comm all_gather of %s: %lld values", what, (long long)n);
    char *own = (char *)recv + bytes * (size_t)m->rank;
    if (own != send) memmove(own, send, bytes);
    m->seq++;
    for (int p = 0; p < m->world; p++) {
        if (p == m->rank) continue;
        post_send(m, own, bytes, p);
        post_recv(m, (char *)recv + bytes * (size_t)p, bytes, p);
    }
    return wait_all(m, "all_gather", what, e);
}

static int job_bcast(void *self, void *buf, int64_t n, enum comm_dtype t, int root, void *stream, const char *what,
                     struct io_err *e) {
    if (stream != NULL) return fail(e, "comm bcast of %s: the MPI job moves host memory", what);
    if (n < 0 || dtype_bytes(t) == 0) return fail(e, "comm bcast of %s: %lld values", what, (long long)n);
    return job_broadcast(self, buf, (size_t)n * dtype_bytes(t), root, what, e);
}

/* reduce_pieces with root's segment the whole slab and every other segment empty: root receives
 * every rank's buf, piece by piece, and sums them in rank order (all_reduce's order, so the same
 * bits) in place; the others only send, and write nothing. */
static int job_reduce(void *self, void *buf, int64_t n, enum comm_dtype t, int root, void *stream, const char *what,
                      struct io_err *e) {
    struct mpi_job *m = self;
    if (stream != NULL) return fail(e, "comm reduce of %s: the MPI job reduces host memory (no stream)", what);
    if (n < 0 || !summable(t))
        return fail(e, "comm reduce of %s: %lld values of type %s", what, (long long)n, dtype_name(t));
    if (root < 0 || root >= m->world) return fail(e, "comm reduce of %s to rank %d of %d", what, root, m->world);
    int64_t *lo = calloc((size_t)m->world, sizeof *lo), *len = calloc((size_t)m->world, sizeof *len);
    if (!lo || !len) return free(lo), free(len), fail(e, "out of memory");
    len[root] = n; /* lo all 0: root's segment starts at every rank's buf */
    const int rc = reduce_pieces(m, buf, buf, lo, len, t, "reduce", what, e);
    free(lo);
    free(len);
    return rc;
}

static int job_group(void *self, int begin, struct io_err *e) {
    (void)self, (void)begin, (void)e;
    return 0;
}

static int job_wait(void *self, void *stream, const char *what, struct io_err *e) {
    (void)self, (void)what;
    return stream == NULL ? 0 : fail(e, "comm wait for %s: the MPI job has no device streams", what);
}

static int job_send(void *self, const void *buf, size_t bytes, int peer, const char *what, struct io_err *e) {
    struct mpi_job *m = self;
    if (peer < 0 || peer >= m->world || peer == m->rank)
        return fail(e, "comm send of %s to rank %d (this is rank %d of %d)", what, peer, m->rank, m->world);
    m->seq++;
    m->p2p = 1;
    post_send(m, buf, bytes, peer);
    m->p2p = 0;
    return wait_all(m, "send", what, e);
}

static int job_recv(void *self, void *buf, size_t bytes, int peer, const char *what, struct io_err *e) {
    struct mpi_job *m = self;
    if (peer < 0 || peer >= m->world || peer == m->rank)
        return fail(e, "comm recv of %s from rank %d (this is rank %d of %d)", what, peer, m->rank, m->world);
    m->seq++;
    m->p2p = 1;
    post_recv(m, buf, bytes, peer);
    m->p2p = 0;
    return wait_all(m, "recv", what, e);
}

static void job_destroy(void *self) {
    struct mpi_job *m = self;
    if (m->broken) MPI_Abort(MPI_COMM_WORLD, 1); /* a peer never answered: end every rank */
    MPI_Comm_free(&m->watch);
    MPI_Comm_free(&m->comm);
    free(m->req);
    free(m->req_peer);
    free(m->scratch);
    free(m);
    g_finalized = 1;
    MPI_Finalize();
}

/* A positive number from the environment variable name (default def, at most most). */
static int read_env(const char *name, double def, double most, double *x, struct io_err *e) {
    *x = def;
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') return 0;
    char *end = NULL;
    errno = 0;
    const double y = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !(y > 0) || y > most)
        return fail(e, "%s='%s': expected a number > 0 and at most %g", name, v, most);
    *x = y;
    return 0;
}

int refine_comm_mpi_open(struct train_comm *c, int abi_version, size_t table_bytes, struct io_err *e);
int refine_comm_mpi_open(struct train_comm *c, int abi_version, size_t table_bytes, struct io_err *e) {
    if (abi_version != COMM_ABI_VERSION || table_bytes != sizeof *c)
        return fail(e, "librefine_mpi.so was built for another version of the program (comm table %d/%zu, expected "
                       "%d/%zu): rebuild both",
                    COMM_ABI_VERSION, sizeof *c, abi_version, table_bytes);
    double timeout, piece;
    if (read_env("REFINE_COMM_TIMEOUT", 1200.0, 1e7, &timeout, e) ||
        read_env("REFINE_COMM_PIECE_BYTES", (double)((size_t)1 << 26), (double)((size_t)1 << 30), &piece, e))
        return -1;
    if (piece < 16) piece = 16; /* one value of any type */
    int provided = 0, initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return fail(e, "MPI_Init failed: the launcher and this MPI library do not work together");
    g_open = 1;
    atexit(end_job_on_abnormal_exit);
    struct mpi_job *m = calloc(1, sizeof *m);
    if (m == NULL) return fail(e, "out of memory");
    MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &m->watch);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->world);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &m->local_rank);
    int on_node = 0;
    MPI_Comm_size(node, &on_node);
    MPI_Comm_free(&node);
    m->timeout_s = timeout;
    m->piece_bytes = (size_t)piece / 8 * 8;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int vlen = 0;
    MPI_Get_library_version(version, &vlen);
    version[strcspn(version, ",\n")] = '\0';
    version[80] = '\0';
    snprintf(m->name, sizeof m->name, "MPI (%.80s), %d ranks, %d on this host", version, m->world, on_node);

    memset(c, 0, sizeof *c);
    c->rank = m->rank;
    c->world = m->world;
    c->local_rank = m->local_rank;
    c->name = m->name;
    c->timeout_s = timeout;
    c->slabs = COMM_HOST;
    c->self = m;
    c->sum = job_sum;
    c->broadcast = job_broadcast;
    c->barrier = job_barrier;
    c->all_reduce = job_all_reduce;
    c->reduce_scatter = job_reduce_scatter;
    c->all_gather = job_all_gather;
    c->bcast = job_bcast;
    c->reduce = job_reduce;
    c->group = job_group;
    c->wait = job_wait;
    c->send = job_send;
    c->recv = job_recv;
    c->serve = job_serve;
    c->roll_call = job_roll_call;
    c->destroy = job_destroy;
    return 0;
}

#else /* built without MPI headers (no libopenmpi-dev): the plugin says so */

int refine_comm_mpi_open(struct train_comm *c, int abi_version, size_t table_bytes, struct io_err *e);
int refine_comm_mpi_open(struct train_comm *c, int abi_version, size_t table_bytes, struct io_err *e) {
    (void)c, (void)abi_version, (void)table_bytes;
    snprintf(e->msg, sizeof e->msg,
             "librefine_mpi.so was built without MPI (no mpi.h at build time: install libopenmpi-dev and rebuild)");
    return -1;
}

#endif
