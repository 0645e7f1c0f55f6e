/* comm.c — the single-process job (comm.h). */
#include "train/comm.h"

#include <stdio.h>
#include <string.h>

static int single_sum(void *self, void *buf, int64_t n, enum comm_dtype t, const char *what, struct io_err *e) {
    (void)self, (void)buf, (void)what;
    if (n < 0 || (t != COMM_I64 && t != COMM_F64)) return io_fail(e, "comm sum of %s: %lld values of type %d", what,
                                                                   (long long)n, (int)t);
    return 0;
}

static int single_broadcast(void *self, void *buf, size_t bytes, int root, const char *what, struct io_err *e) {
    (void)self, (void)buf, (void)bytes;
    return root == 0 ? 0 : io_fail(e, "comm broadcast of %s from rank %d: the job has one rank", what, root);
}

static int single_barrier(void *self, const char *what, struct io_err *e) {
    (void)self, (void)what, (void)e;
    return 0;
}

static int single_all_reduce(void *self, void *buf, int64_t n, enum comm_dtype t, void *stream, const char *what,
                             struct io_err *e) {
    (void)self, (void)buf, (void)t, (void)stream;
    return n >= 0 ? 0 : io_fail(e, "comm all_reduce of %s: %lld values", what, (long long)n);
}

static int in_place(const void *send, void *recv, int64_t n, const char *op, const char *what, struct io_err *e) {
    if (n < 0) return io_fail(e, "comm %s of %s: %lld values", op, what, (long long)n);
    if (send != recv)
        return io_fail(e, "comm %s of %s: a single-process job moves no memory, so recv must be send", op, what);
    return 0;
}

static int single_reduce_scatter(void *self, const void *send, void *recv, int64_t n, enum comm_dtype t, void *stream,
                                 const char *what, struct io_err *e) {
    (void)self, (void)t, (void)stream;
    return in_place(send, recv, n, "reduce_scatter", what, e);
}

static int single_all_gather(void *self, const void *send, void *recv, int64_t n, enum comm_dtype t, void *stream,
                             const char *what, struct io_err *e) {
    (void)self, (void)t, (void)stream;
    return in_place(send, recv, n, "all_gather", what, e);
}

static int single_bcast(void *self, void *buf, int64_t n, enum comm_dtype t, int root, void *stream, const char *what,
                        struct io_err *e) {
    (void)self, (void)buf, (void)t, (void)stream;
    if (n < 0) return io_fail(e, "comm bcast of %s: %lld values", what, (long long)n);
    return root == 0 ? 0 : io_fail(e, "comm bcast of %s from rank %d: the job has one rank", what, root);
}

static int single_reduce(void *self, void *buf, int64_t n, enum comm_dtype t, int root, void *stream, const char *what,
                         struct io_err *e) {
    (void)self, (void)buf, (void)t, (void)stream;
    if (n < 0) return io_fail(e, "comm reduce of %s: %lld values", what, (long long)n);
    return root == 0 ? 0 : io_fail(e, "comm reduce of %s to rank %d: the job has one rank", what, root);
}

static int single_group(void *self, int begin, struct io_err *e) {
    (void)self, (void)begin, (void)e;
    return 0;
}

static int single_wait(void *self, void *stream, const char *what, struct io_err *e) {
    (void)self, (void)stream, (void)what, (void)e;
    return 0;
}

static int single_send(void *self, const void *buf, size_t bytes, int peer, const char *what, struct io_err *e) {
    (void)self, (void)buf, (void)bytes;
    return io_fail(e, "comm send of %s to rank %d: the job has one rank", what, peer);
}

static int single_recv(void *self, void *buf, size_t bytes, int peer, const char *what, struct io_err *e) {
    (void)self, (void)buf, (void)bytes;
    return io_fail(e, "comm recv of %s from rank %d: the job has one rank", what, peer);
}

static void single_serve(void *self, const char *waiting_in) { (void)self, (void)waiting_in; }

static void single_roll_call(void *self, const char *waiting_in, char *report, size_t cap) {
    (void)self, (void)waiting_in;
    snprintf(report, cap, "the job has one rank");
}

static void single_destroy(void *self) { (void)self; }

void comm_single(struct train_comm *c) {
    memset(c, 0, sizeof *c);
    c->rank = 0;
    c->world = 1;
    c->local_rank = 0;
    c->name = "single process";
    c->timeout_s = 0.0; /* nothing is ever waited for */
    c->slabs = COMM_HOST;
    c->sum = single_sum;
    c->broadcast = single_broadcast;
    c->barrier = single_barrier;
    c->all_reduce = single_all_reduce;
    c->reduce_scatter = single_reduce_scatter;
    c->all_gather = single_all_gather;
    c->bcast = single_bcast;
    c->reduce = single_reduce;
    c->group = single_group;
    c->wait = single_wait;
    c->send = single_send;
    c->recv = single_recv;
    c->serve = single_serve;
    c->roll_call = single_roll_call;
    c->destroy = single_destroy;
}
