/* comm.h — the processes of one training job, and the collective operations between them.
 *
 * A job is `world` processes (ranks 0 .. world − 1), one per GPU (or per CPU process for the
 * reference trainer under MPI), each running the same program on its own share of every
 * optimizer step's examples. The training loop (train/loop.h) and the engines (train/engine.h)
 * see the job only through this table, so that the same loop runs as one process or as many:
 *
 *   the loop    sums over the ranks the few numbers each step and evaluation need (the valid-label
 *               count of the step, before the loss is normalized by it — transformers'
 *               num_items_in_batch rule; the evaluation's Σ NLL and label count), and leaves
 *               logging, metrics, checkpoints and exports to rank 0;
 *   an engine   reduces its gradients over the ranks before the optimizer step (all_reduce over
 *               its gradient slab, or reduce_scatter + all_gather of the parameters with a sharded
 *               optimizer), on its own memory: host memory for the CPU engine, device memory and a
 *               CUDA stream for the GPU engine.
 *
 * Every rank calls the collectives in the same order with the same sizes (each call names what it
 * reduces, for the error message when a peer fails). Sums of integers are exact; sums of floating
 * point values are in a fixed order for one implementation and world size (the reduction order is
 * the implementation's to state). Every function returns 0, or −1 with one sentence in e naming the
 * operation and the rank that failed.
 *
 * Faults: a collective that a peer never joins (it died, hangs, or failed on its own) does not
 * wait forever: after the job's timeout (REFINE_COMM_TIMEOUT seconds, default 1200) it fails with
 * a message naming the ranks that did not answer, and the job ends.
 *
 * Implementations:
 *   comm_single           this file: one process; every collective is the identity.
 *   MPI (trainers/comm_mpi.c, the plugin librefine_mpi.so that trainers/comm_open.h loads when a
 *                         launcher started the job): host collectives over MPI in a fixed order
 *                         (a sum is ((v_0 + v_1) + v_2) + … in rank order, the same bits on every
 *                         rank), and the slab collectives on host memory (the CPU engine).
 *   NCCL (trainers/comm_nccl.h): the MPI job's host collectives, and the slab collectives on
 *                         device memory, enqueued on the caller's CUDA stream (the GPU engine).
 */
#ifndef REFINE_TRAIN_COMM_H
#define REFINE_TRAIN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "io/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum comm_dtype { COMM_I64 = 0, COMM_F64, COMM_F32, COMM_BF16, COMM_U8 };
/* Where the slab collectives' buffers live: host memory (the MPI job, one process) or device memory
 * on a CUDA stream (NCCL). */
enum comm_memory { COMM_HOST = 0, COMM_DEVICE };

/* The version of this table: a plugin built against another layout is refused (comm_open.h). */
#define COMM_ABI_VERSION 4

struct train_comm {
    int rank;       /* 0 .. world − 1 */
    int world;      /* processes in the job */
    int local_rank; /* this process's index on its host: the GPU it drives */
    const char *name; /* "single process", ... (printed at start) */
    double timeout_s; /* how long a collective waits for its peers before the job ends */
    enum comm_memory slabs; /* where all_reduce, reduce_scatter, all_gather, bcast and reduce work */
    void *self;

    /* Host values, blocking. sum: buf (n values of type t) becomes the element-wise sum over the
     * ranks (COMM_I64 or COMM_F64). broadcast: rank root's bytes to every rank. */
    int (*sum)(void *self, void *buf, int64_t n, enum comm_dtype t, const char *what, struct io_err *e);
    int (*broadcast)(void *self, void *buf, size_t bytes, int root, const char *what, struct io_err *e);
    int (*barrier)(void *self, const char *what, struct io_err *e);

    /* An engine's slabs (host memory, or device memory with stream a cudaStream_t), enqueued on
     * stream where there is one:
     *   all_reduce      buf (n values) becomes the sum over the ranks, in place;
     *   reduce_scatter  recv (n values) becomes the sum over the ranks of send[rank·n, (rank+1)·n)
     *                   (send holds world·n values);
     *   all_gather      recv (world·n values) becomes every rank's send (n values), rank order. */
    int (*all_reduce)(void *self, void *buf, int64_t n, enum comm_dtype t, void *stream, const char *what,
                      struct io_err *e);
    int (*reduce_scatter)(void *self, const void *send, void *recv, int64_t n, enum comm_dtype t, void *stream,
                          const char *what, struct io_err *e);
    int (*all_gather)(void *self, const void *send, void *recv, int64_t n, enum comm_dtype t, void *stream,
                      const char *what, struct io_err *e);
    /*   bcast           buf (n values) on every rank becomes rank root's (the sharded optimizer's
     *                   pieces of unequal size: each owner broadcasts its own);
     *   reduce          on rank root, buf (n values) becomes the sum over the ranks, in place; on the
     *                   other ranks buf is left unspecified (they only send) — a gradient bucket
     *                   summed into the rank that owns its part (ZeRO-2);
     *   group           begin = 1 … begin = 0 around several slab operations makes them one (NCCL's
     *                   group: the broadcasts of every owner run together); a no-op on the host;
     *   wait            blocks until the slab operations enqueued on stream have completed (NULL
     *                   stream: nothing to wait for), failing — never hanging — when a peer fails
     *                   or the timeout passes: what names the step's work for the message. */
    int (*bcast)(void *self, void *buf, int64_t n, enum comm_dtype t, int root, void *stream, const char *what,
                 struct io_err *e);
    int (*reduce)(void *self, void *buf, int64_t n, enum comm_dtype t, int root, void *stream, const char *what,
                  struct io_err *e);
    int (*group)(void *self, int begin, struct io_err *e);
    int (*wait)(void *self, void *stream, const char *what, struct io_err *e);

    /* Host bytes between two ranks, blocking (the sharded state gathered to rank 0 for a checkpoint):
     * send on one rank pairs with recv of the same size on peer. */
    int (*send)(void *self, const void *buf, size_t bytes, int peer, const char *what, struct io_err *e);
    int (*recv)(void *self, void *buf, size_t bytes, int peer, const char *what, struct io_err *e);

    /* Faults between ranks (how a wait that times out names the culprits):
     *   serve       answers the roll calls of peers; an implementation waiting on anything but its
     *               own host collectives (a device stream) calls it while it polls;
     *   roll_call   asks every peer where it is: report gets one sentence naming the ranks that did
     *               not answer within a grace period (they died, hang, or compute elsewhere) and
     *               where the others wait. waiting_in names this rank's own wait in both. */
    void (*serve)(void *self, const char *waiting_in);
    void (*roll_call)(void *self, const char *waiting_in, char *report, size_t cap);

    void (*destroy)(void *self);
};

/* One process: rank 0 of a world of 1. sum, broadcast, barrier, all_reduce, bcast, reduce, group,
 * wait and serve change nothing (roll_call reports that there is no peer; a broadcast, bcast or
 * reduce whose root is not rank 0 is refused with a message); reduce_scatter and all_gather of a
 * world of 1 are the identity and take recv == send (in place), since this implementation moves no
 * memory (a different recv is refused with a message); send and recv are refused (there is no
 * peer). */
void comm_single(struct train_comm *c);

/* 1 on the rank that logs, writes metrics, checkpoints and exports (rank 0). */
static inline int comm_is_root(const struct train_comm *c) { return c->rank == 0; }

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_COMM_H */
