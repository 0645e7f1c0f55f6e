/* comm_nccl.c — NCCL under a launcher's job (comm_nccl.h). */
#include "trainers/comm_nccl.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The NCCL entry points refine uses, loaded at run time. */
struct nccl_api {
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*abort)(ncclComm_t);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    const char *(*error_string)(ncclResult_t);
    const char *(*last_error)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                   cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
};

struct nccl_job {
    struct train_comm host; /* the MPI job's table, whose host collectives this one keeps */
    struct nccl_api api;
    void *lib;
    ncclComm_t comm;
    cudaEvent_t done;
    int device;
    int aborted;
    char last_op[160]; /* the last collective enqueued, for the fault message */
    char name[300];
};

static int g_device = -1;

int comm_nccl_device(void) { return g_device; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int load_api(struct nccl_api *a, void **lib, char *where, size_t cap, struct io_err *e) {
    const char *env = getenv("REFINE_NCCL_LIBRARY");
    const char *tries[3] = {env, "libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
    char errors[768] = "";
    *lib = NULL;
    for (int i = 0; i < 3 && *lib == NULL; i++) {
        if (tries[i] == NULL || tries[i][0] == '\0') continue;
        *lib = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
        if (*lib != NULL) {
            snprintf(where, cap, "%s", tries[i]);
        } else {
            const size_t n = strlen(errors);
            snprintf(errors + n, sizeof errors - n, "%s%s", n ? "; " : "", dlerror());
        }
        if (i == 0 && *lib == NULL) break; /* a library the user named must load */
    }
    if (*lib == NULL)
        return io_fail(e, "NCCL does not load (%s): install libnccl2, or name libnccl.so.2 in REFINE_NCCL_LIBRARY "
                          "(e.g. the one of Python's nvidia-nccl package)",
                       errors);
    struct {
        void **slot;
        const char *sym;
    } const syms[] = {
        {(void **)&a->get_version, "ncclGetVersion"},       {(void **)&a->get_unique_id, "ncclGetUniqueId"},
        {(void **)&a->init_rank, "ncclCommInitRank"},       {(void **)&a->destroy, "ncclCommDestroy"},
        {(void **)&a->abort, "ncclCommAbort"},              {(void **)&a->async_error, "ncclCommGetAsyncError"},
        {(void **)&a->error_string, "ncclGetErrorString"}, {(void **)&a->last_error, "ncclGetLastError"},
        {(void **)&a->all_reduce, "ncclAllReduce"},         {(void **)&a->reduce_scatter, "ncclReduceScatter"},
        {(void **)&a->all_gather, "ncclAllGather"},         {(void **)&a->broadcast, "ncclBroadcast"},
        {(void **)&a->group_start, "ncclGroupStart"},       {(void **)&a->group_end, "ncclGroupEnd"},
        {(void **)&a->reduce, "ncclReduce"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(*lib, syms[i].sym);
        if (*syms[i].slot == NULL) return io_fail(e, "%s: no %s (NCCL 2.13 or newer is needed)", where, syms[i].sym);
    }
    return 0;
}

static ncclDataType_t nccl_type(enum comm_dtype t) {
    switch (t) {
        case COMM_I64: return ncclInt64;
        case COMM_F64: return ncclFloat64;
        case COMM_F32: return ncclFloat32;
        case COMM_BF16: return ncclBfloat16;
        case COMM_U8: return ncclUint8;
    }
    return ncclUint8;
}

/* An NCCL call's result: 0, or −1 with the library's words. */
static int nccl_ok(struct nccl_job *j, ncclResult_t r, const char *op, const char *what, struct io_err *e) {
    if (r == ncclSuccess) return 0;
    const char *detail = j->comm != NULL ? j->api.last_error(j->comm) : "";
    return io_fail(e, "NCCL %s of %s: %s%s%s", op, what, j->api.error_string(r), detail && detail[0] ? ": " : "",
                   detail ? detail : "");
}

static int enqueue_check(struct nccl_job *j, int64_t n, const char *op, const char *what, struct io_err *e) {
    if (j->aborted) return io_fail(e, "NCCL %s of %s: the communicator was aborted after an earlier fault", op, what);
    if (n < 0) return io_fail(e, "NCCL %s of %s: %lld values", op, what, (long long)n);
    snprintf(j->last_op, sizeof j->last_op, "the %s of %s", op, what);
    return 0;
}

static int nj_all_reduce(void *self, void *buf, int64_t n, enum comm_dtype t, void *stream, const char *what,
                         struct io_err *e) {
    struct nccl_job *j = self;
    if (enqueue_check(j, n, "all_reduce", what, e)) return -1;
    return nccl_ok(j, j->api.all_reduce(buf, buf, (size_t)n, nccl_type(t), ncclSum, j->comm, (cudaStream_t)stream),
                   "all_reduce", what, e);
}

static int nj_reduce_scatter(void *self, const void *send, void *recv, int64_t n, enum comm_dtype t, void *stream,
                             const char *what, struct io_err *e) {
    struct nccl_job *j = self;
    if (enqueue_check(j, n, "reduce_scatter", what, e)) return -1;
    return nccl_ok(j,
                   j->api.reduce_scatter(send, recv, (size_t)n, nccl_type(t), ncclSum, j->comm, (cudaStream_t)stream),
                   "reduce_scatter", what, e);
}

static int nj_all_gather(void *self, const void *send, void *recv, int64_t n, enum comm_dtype t, void *stream,
                         const char *what, struct io_err *e) {
    struct nccl_job *j = self;
    if (enqueue_check(j, n, "all_gather", what, e)) return -1;
    return nccl_ok(j, j->api.all_gather(send, recv, (size_t)n, nccl_type(t), j->comm, (cudaStream_t)stream),
                   "all_gather", what, e);
}

static int nj_bcast(void *self, void *buf, int64_t n, enum comm_dtype t, int root, void *stream, const char *what,
                    struct io_err *e) {
    struct nccl_job *j = self;
    if (enqueue_check(j, n, "bcast", what, e)) return -1;
    return nccl_ok(j, j->api.broadcast(buf, buf, (size_t)n, nccl_type(t), root, j->comm, (cudaStream_t)stream),
                   "bcast", what, e);
}

/* In place (sendbuff == recvbuff, NCCL's in-place form): root's buf becomes the sum; NCCL uses
 * recvbuff on root only, and train/comm.h leaves the other ranks' buf unspecified. */
static int nj_reduce(void *self, void *buf, int64_t n, enum comm_dtype t, int root, void *stream, const char *what,
                     struct io_err *e) {
    struct nccl_job *j = self;
    if (enqueue_check(j, n, "reduce", what, e)) return -1;
    return nccl_ok(j, j->api.reduce(buf, buf, (size_t)n, nccl_type(t), ncclSum, root, j->comm, (cudaStream_t)stream),
                   "reduce", what, e);
}

static int nj_group(void *self, int begin, struct io_err *e) {
    struct nccl_job *j = self;
    return nccl_ok(j, begin ? j->api.group_start() : j->api.group_end(), begin ? "group start" : "group end",
                   "a group", e);
}

/* Blocks until stream's work is done, answering roll calls; an NCCL error or the timeout ends it. */
static int nj_wait(void *self, void *stream, const char *what, struct io_err *e) {
    struct nccl_job *j = self;
    if (stream == NULL) return 0;
    if (j->aborted) return io_fail(e, "waiting for %s: the communicator was aborted after an earlier fault", what);
    if (cudaEventRecord(j->done, (cudaStream_t)stream) != cudaSuccess)
        return io_fail(e, "waiting for %s: cudaEventRecord: %s", what, cudaGetErrorString(cudaGetLastError()));
    char where[256];
    snprintf(where, sizeof where, "a device wait for %s (last NCCL operation: %s)", what,
             j->last_op[0] ? j->last_op : "none");
    const double t0 = now_s();
    long polls = 0;
    for (;;) {
        const cudaError_t q = cudaEventQuery(j->done);
        if (q == cudaSuccess) return 0;
        if (q != cudaErrorNotReady) return io_fail(e, "waiting for %s: %s", what, cudaGetErrorString(q));
        ncclResult_t async = ncclSuccess;
        j->api.async_error(j->comm, &async);
        const double t = now_s() - t0;
        if ((async != ncclSuccess && async != ncclInProgress) || t > j->host.timeout_s) {
            char report[768];
            const char *detail = j->api.last_error(j->comm);
            char cause[512];
            if (async != ncclSuccess && async != ncclInProgress)
                snprintf(cause, sizeof cause, "NCCL reports %s%s%s", j->api.error_string(async),
                         detail && detail[0] ? ": " : "", detail ? detail : "");
            else
                snprintf(cause, sizeof cause, "not done after %.0f s (REFINE_COMM_TIMEOUT)", j->host.timeout_s);
            j->api.abort(j->comm); /* the device work queued behind the collectives completes */
            j->aborted = 1;
            j->host.roll_call(j->host.self, where, report, sizeof report);
            return io_fail(e, "%s: %s; roll call: %s; ending the job", where, cause, report);
        }
        if ((++polls & 255) == 0) j->host.serve(j->host.self, where);
        struct timespec ts = {0, t > 1.0 ? 200000 : 20000};
        nanosleep(&ts, NULL);
    }
}

/* host collectives: the MPI job's */
static int nj_sum(void *self, void *buf, int64_t n, enum comm_dtype t, const char *what, struct io_err *e) {
    struct nccl_job *j = self;
    return j->host.sum(j->host.self, buf, n, t, what, e);
}
static int nj_broadcast(void *self, void *buf, size_t bytes, int root, const char *what, struct io_err *e) {
    struct nccl_job *j = self;
    return j->host.broadcast(j->host.self, buf, bytes, root, what, e);
}
static int nj_barrier(void *self, const char *what, struct io_err *e) {
    struct nccl_job *j = self;
    return j->host.barrier(j->host.self, what, e);
}
static int nj_send(void *self, const void *buf, size_t bytes, int peer, const char *what, struct io_err *e) {
    struct nccl_job *j = self;
    return j->host.send(j->host.self, buf, bytes, peer, what, e);
}
static int nj_recv(void *self, void *buf, size_t bytes, int peer, const char *what, struct io_err *e) {
    struct nccl_job *j = self;
    return j->host.recv(j->host.self, buf, bytes, peer, what, e);
}
static void nj_serve(void *self, const char *waiting_in) {
    struct nccl_job *j = self;
    j->host.serve(j->host.self, waiting_in);
}
static void nj_roll_call(void *self, const char *waiting_in, char *report, size_t cap) {
    struct nccl_job *j = self;
    j->host.roll_call(j->host.self, waiting_in, report, cap);
}

static void nj_destroy(void *self) {
    struct nccl_job *j = self;
    if (!j->aborted) j->api.destroy(j->comm); /* an aborted communicator is gone already */
    cudaEventDestroy(j->done);
    struct train_comm host = j->host;
    free(j);
    host.destroy(host.self);
}

int comm_nccl_join(struct train_comm *c, struct io_err *e) {
    int n_dev = 0;
    const cudaError_t err = cudaGetDeviceCount(&n_dev);
    if (err != cudaSuccess || n_dev == 0)
        return io_fail(e, "no CUDA device is available (%s); //gpu:train needs an NVIDIA GPU — on a machine without "
                          "one, //ref:train trains on the CPU with the same flags",
                       err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    const int dev = n_dev == 1 ? 0 : c->local_rank;
    if (dev >= n_dev)
        return io_fail(e, "rank %d is process %d on its host, which shows %d GPUs: start one process per GPU "
                          "(mpirun -np <GPUs per host × hosts>, srun --ntasks-per-node=<GPUs> --gpus-per-task=1)",
                       c->rank, c->local_rank, n_dev);
    if (cudaSetDevice(dev) != cudaSuccess) return io_fail(e, "cudaSetDevice(%d) failed", dev);
    struct nccl_job *j = calloc(1, sizeof *j);
    if (j == NULL) return io_fail(e, "out of memory");
    j->host = *c;
    j->device = dev;
    char where[1024];
    if (load_api(&j->api, &j->lib, where, sizeof where, e)) {
        free(j);
        return -1;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0 && nccl_ok(j, j->api.get_unique_id(&id), "ncclGetUniqueId", "the job", e)) {
        free(j);
        return -1;
    }
    if (c->broadcast(c->self, &id, sizeof id, 0, "the NCCL unique id", e) ||
        nccl_ok(j, j->api.init_rank(&j->comm, c->world, id, c->rank), "ncclCommInitRank", "the job", e)) {
        free(j);
        return -1;
    }
    if (cudaEventCreateWithFlags(&j->done, cudaEventDisableTiming) != cudaSuccess) {
        j->api.destroy(j->comm);
        free(j);
        return io_fail(e, "cudaEventCreate failed");
    }
    int version = 0;
    j->api.get_version(&version);
    snprintf(j->name, sizeof j->name, "NCCL %d.%d.%d (%.100s) over %.100s, GPU %d", version / 10000,
             version / 100 % 100, version % 100, where, c->name, dev);
    g_device = dev;
    c->name = j->name;
    c->slabs = COMM_DEVICE;
    c->self = j;
    c->sum = nj_sum;
    c->broadcast = nj_broadcast;
    c->barrier = nj_barrier;
    c->all_reduce = nj_all_reduce;
    c->reduce_scatter = nj_reduce_scatter;
    c->all_gather = nj_all_gather;
    c->bcast = nj_bcast;
    c->reduce = nj_reduce;
    c->group = nj_group;
    c->wait = nj_wait;
    c->send = nj_send;
    c->recv = nj_recv;
    c->serve = nj_serve;
    c->roll_call = nj_roll_call;
    c->destroy = nj_destroy;
    return 0;
}
