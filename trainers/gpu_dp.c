/* gpu_dp.c — data parallelism of the GPU model over the job (gpu_dp.h). */
#include "trainers/gpu_dp.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gpu_dp {
    struct gpu_llama *m;
    const struct train_comm *comm;
    cudaStream_t comm_stream;
    cudaEvent_t ready;     /* the model's work so far (re-recorded before each wait) */
    cudaEvent_t reduced;   /* the communication stream's work so far */
    cudaEvent_t t_model, t_comm; /* timing: the end of the model's work, of the reductions */
    int n_buckets;
    float **first;
    int64_t *n;
    unsigned char *done; /* buckets reduced in this step */
    int step;            /* the step whose gradients are being reduced (for the messages) */
    int failed;          /* a hook's collective failed: reported by gpu_dp_reduce */
    struct io_err err;
    int sharded;
    void *(*gathered)[GPU_SHARD_ARRAYS]; /* rank 0 after gpu_dp_gather: every rank's flat arrays */
    /* sharded gradients (ZeRO-2) */
    int grads;
    float **part_first;      /* [bucket · world + rank]: rank's part of the bucket */
    int64_t *part_n;
    cudaEvent_t freed[4];    /* per gradient buffer (the head's, the embedding's, layers' even, odd):
                                its last bucket reduced, taken and cleared */
    int pending;             /* a micro-batch began whose buckets are not all reduced yet */
};

/* The buffer bucket b's gradients use (sharded gradients): the head's, the embedding's, or the
 * layer rows of its parity. */
static int buffer_of(const struct gpu_dp *d, int b) {
    if (b == 0) return 0;
    if (b == d->n_buckets - 1) return 1;
    return 2 + b % 2;
}

static int cuda_ok(cudaError_t r, const char *what, struct io_err *e) {
    return r == cudaSuccess ? 0 : io_fail(e, "%s: %s", what, cudaGetErrorString(r));
}

/* Enqueues the all-reduce of bucket b on the communication stream, after the model's work so far. */
static int reduce_bucket(struct gpu_dp *d, int b, struct io_err *e) {
    d->done[b] = 1;
    if (d->n[b] == 0) return 0;
    char what[96];
    if (b == 0)
        snprintf(what, sizeof what, "the head's gradients (step %d)", d->step);
    else if (b == d->n_buckets - 1)
        snprintf(what, sizeof what, "the embedding's gradients (step %d)", d->step);
    else
        snprintf(what, sizeof what, "layer %d's gradients (step %d)", d->n_buckets - 2 - b, d->step);
    cudaStream_t ms = gpu_llama_stream(d->m);
    if (cuda_ok(cudaEventRecord(d->ready, ms), "cudaEventRecord", e) ||
        cuda_ok(cudaStreamWaitEvent(d->comm_stream, d->ready, 0), "cudaStreamWaitEvent", e))
        return -1;
    if (!d->grads) return d->comm->all_reduce(d->comm->self, d->first[b], d->n[b], COMM_F32, d->comm_stream, what, e);
    /* each owner's part summed into it (one group), its pieces added into its accumulator, the
     * bucket cleared; then the buffer is free for the next bucket that uses it */
    const int W = d->comm->world;
    if (d->comm->group(d->comm->self, 1, e)) return -1;
    int rc = 0;
    for (int r = 0; r < W && rc == 0; r++)
        if (d->part_n[b * W + r] > 0)
            rc = d->comm->reduce(d->comm->self, d->part_first[b * W + r], d->part_n[b * W + r], COMM_F32, r,
                                 d->comm_stream, what, e);
    if (d->comm->group(d->comm->self, 0, rc == 0 ? e : NULL) != 0 || rc != 0) return -1;
    gpu_llama_bucket_take(d->m, b, d->comm_stream);
    return cuda_ok(cudaEventRecord(d->freed[buffer_of(d, b)], d->comm_stream), "cudaEventRecord", e);
}

/* The buckets backward did not reduce (a micro-batch that ran none: no valid label here; or, at the
 * step's end, any left), so that every rank issues the same collectives in the same order. */
static int flush_buckets(struct gpu_dp *d, struct io_err *e) {
    int rc = 0;
    for (int b = 0; b < d->n_buckets && rc == 0; b++)
        if (!d->done[b]) rc = reduce_bucket(d, b, e);
    for (int b = 0; b < d->n_buckets; b++) d->done[b] = 0;
    d->pending = 0;
    return rc;
}

static void on_bucket(void *ctx, int b) {
    struct gpu_dp *d = ctx;
    if (d->failed) return;
    if (reduce_bucket(d, b, &d->err) != 0) d->failed = 1;
}

/* Sharded gradients: before backward writes bucket b's buffer, the model waits until it is free. */
static void on_gate(void *ctx, int b) {
    struct gpu_dp *d = ctx;
    if (d->failed) return;
    if (cuda_ok(cudaStreamWaitEvent(gpu_llama_stream(d->m), d->freed[buffer_of(d, b)], 0), "cudaStreamWaitEvent",
                &d->err))
        d->failed = 1;
}

enum gpu_dp_shard gpu_dp_shard_of(const struct gpu_llama_options *g) {
    return g->shard_grads ? GPU_DP_SHARD_GRADIENTS : g->shard_world > 1 ? GPU_DP_SHARD_OPTIMIZER : GPU_DP_WHOLE;
}

struct gpu_dp *gpu_dp_create(struct gpu_llama *m, const struct train_comm *comm, enum gpu_dp_shard shard,
                             struct io_err *e) {
    struct gpu_dp *d = calloc(1, sizeof *d);
    if (d == NULL) return io_fail(e, "out of host memory"), NULL;
    d->m = m;
    d->comm = comm;
    d->sharded = shard != GPU_DP_WHOLE;
    d->grads = shard == GPU_DP_SHARD_GRADIENTS;
    d->step = 1;
    d->n_buckets = gpu_llama_n_buckets(m);
    d->first = calloc((size_t)d->n_buckets, sizeof *d->first);
    d->n = calloc((size_t)d->n_buckets, sizeof *d->n);
    d->done = calloc((size_t)d->n_buckets, 1);
    if (!d->first || !d->n || !d->done) {
        gpu_dp_free(d);
        return io_fail(e, "out of host memory"), NULL;
    }
    for (int b = 0; b < d->n_buckets; b++) gpu_llama_bucket(m, b, &d->first[b], &d->n[b]);
    if (d->grads) {
        const size_t parts = (size_t)d->n_buckets * (size_t)comm->world;
        d->part_first = calloc(parts, sizeof *d->part_first);
        d->part_n = calloc(parts, sizeof *d->part_n);
        if (!d->part_first || !d->part_n) {
            gpu_dp_free(d);
            return io_fail(e, "out of host memory"), NULL;
        }
        for (int b = 0; b < d->n_buckets; b++)
            for (int r = 0; r < comm->world; r++)
                gpu_llama_bucket_part(m, b, r, &d->part_first[b * comm->world + r], &d->part_n[b * comm->world + r]);
        for (int k = 0; k < 4; k++)
            if (cuda_ok(cudaEventCreateWithFlags(&d->freed[k], cudaEventDisableTiming), "cudaEventCreate", e)) {
                gpu_dp_free(d);
                return NULL;
            }
    }
    if (cuda_ok(cudaStreamCreateWithFlags(&d->comm_stream, cudaStreamNonBlocking), "cudaStreamCreate", e) ||
        cuda_ok(cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming), "cudaEventCreate", e) ||
        cuda_ok(cudaEventCreateWithFlags(&d->reduced, cudaEventDisableTiming), "cudaEventCreate", e) ||
        cuda_ok(cudaEventCreate(&d->t_model), "cudaEventCreate", e) ||
        cuda_ok(cudaEventCreate(&d->t_comm), "cudaEventCreate", e)) {
        gpu_dp_free(d);
        return NULL;
    }
    return d;
}

void gpu_dp_free(struct gpu_dp *d) {
    if (d == NULL) return;
    gpu_dp_release(d);
    if (d->m != NULL) gpu_llama_set_grad_hook(d->m, NULL, NULL), gpu_llama_set_grad_gate(d->m, NULL, NULL);
    for (int k = 0; k < 4; k++)
        if (d->freed[k]) cudaEventDestroy(d->freed[k]);
    free(d->part_first);
    free(d->part_n);
    if (d->comm_stream) cudaStreamDestroy(d->comm_stream);
    if (d->ready) cudaEventDestroy(d->ready);
    if (d->reduced) cudaEventDestroy(d->reduced);
    if (d->t_model) cudaEventDestroy(d->t_model);
    if (d->t_comm) cudaEventDestroy(d->t_comm);
    free(d->first);
    free(d->n);
    free(d->done);
    free(d);
}

void gpu_dp_micro(struct gpu_dp *d, int last) {
    if (d->grads) { /* every micro-batch hands its buckets over */
        if (d->pending && !d->failed && flush_buckets(d, &d->err) != 0) d->failed = 1;
        d->pending = 1;
        gpu_llama_set_grad_hook(d->m, on_bucket, d);
        gpu_llama_set_grad_gate(d->m, on_gate, d);
        return;
    }
    if (last) gpu_llama_set_grad_hook(d->m, on_bucket, d);
    else gpu_llama_set_grad_hook(d->m, NULL, NULL);
}

int gpu_dp_reduce(struct gpu_dp *d, int step, struct io_err *e) {
    gpu_llama_set_grad_hook(d->m, NULL, NULL);
    gpu_llama_set_grad_gate(d->m, NULL, NULL);
    d->step = step;
    d->pending = 0;
    if (d->failed) {
        d->failed = 0;
        *e = d->err;
        return -1;
    }
    if (flush_buckets(d, e) != 0) return -1;
    cudaStream_t ms = gpu_llama_stream(d->m);
    char what[64];
    snprintf(what, sizeof what, "the loss of step %d", step);
    if (cuda_ok(cudaEventRecord(d->t_model, ms), "cudaEventRecord", e) ||
        cuda_ok(cudaStreamWaitEvent(d->comm_stream, d->t_model, 0), "cudaStreamWaitEvent", e) ||
        d->comm->all_reduce(d->comm->self, gpu_llama_nll_sum_device(d->m), 1, COMM_F64, d->comm_stream, what, e) ||
        cuda_ok(cudaEventRecord(d->t_comm, d->comm_stream), "cudaEventRecord", e) ||
        cuda_ok(cudaEventRecord(d->reduced, d->comm_stream), "cudaEventRecord", e) ||
        cuda_ok(cudaStreamWaitEvent(ms, d->reduced, 0), "cudaStreamWaitEvent", e))
        return -1;
    if (d->sharded) { /* the norm's partial sums of the reduced gradients, summed over the ranks */
        int64_t n = 0;
        float *partials = gpu_llama_shard_partials(d->m, &n);
        snprintf(what, sizeof what, "the gradient norm of step %d", step);
        if (cuda_ok(cudaEventRecord(d->ready, ms), "cudaEventRecord", e) ||
            cuda_ok(cudaStreamWaitEvent(d->comm_stream, d->ready, 0), "cudaStreamWaitEvent", e) ||
            d->comm->all_reduce(d->comm->self, partials, n, COMM_F32, d->comm_stream, what, e) ||
            cuda_ok(cudaEventRecord(d->reduced, d->comm_stream), "cudaEventRecord", e) ||
            cuda_ok(cudaStreamWaitEvent(ms, d->reduced, 0), "cudaStreamWaitEvent", e))
            return -1;
    }
    snprintf(what, sizeof what, "the gradients and loss of step %d", step);
    const int rc_wait = d->comm->wait(d->comm->self, d->comm_stream, what, e);
    d->step = step + 1; /* the next step's buckets */
    return rc_wait;
}

int gpu_dp_after_step(struct gpu_dp *d, struct io_err *e) {
    if (!d->sharded) return 0;
    cudaStream_t ms = gpu_llama_stream(d->m);
    char what[64];
    snprintf(what, sizeof what, "the updated weights of step %d", d->step - 1);
    if (cuda_ok(cudaEventRecord(d->ready, ms), "cudaEventRecord", e) ||
        cuda_ok(cudaStreamWaitEvent(d->comm_stream, d->ready, 0), "cudaStreamWaitEvent", e) ||
        d->comm->group(d->comm->self, 1, e))
        return -1;
    int rc = 0;
    for (int r = 0; r < d->comm->world && rc == 0; r++) {
        uint16_t *first;
        int64_t n;
        gpu_llama_shard_copies(d->m, r, &first, &n);
        if (n > 0) rc = d->comm->bcast(d->comm->self, first, n, COMM_BF16, r, d->comm_stream, what, e);
    }
    if (d->comm->group(d->comm->self, 0, rc == 0 ? e : NULL) != 0 || rc != 0) return -1;
    if (cuda_ok(cudaEventRecord(d->reduced, d->comm_stream), "cudaEventRecord", e) ||
        cuda_ok(cudaStreamWaitEvent(ms, d->reduced, 0), "cudaStreamWaitEvent", e))
        return -1;
    return 0;
}

void gpu_dp_release(struct gpu_dp *d) {
    if (d->gathered == NULL) return;
    for (int r = 0; r < d->comm->world; r++)
        for (int k = 0; k < GPU_SHARD_ARRAYS; k++) free(d->gathered[r][k]);
    free(d->gathered);
    d->gathered = NULL;
}

int gpu_dp_gather(struct gpu_dp *d, struct io_err *e) {
    if (!d->sharded) return 0;
    gpu_dp_release(d);
    if (gpu_dp_quiesce(d, "the state before a checkpoint", e) != 0 ||
        cuda_ok(cudaStreamSynchronize(gpu_llama_stream(d->m)), "cudaStreamSynchronize", e))
        return -1;
    const int W = d->comm->world, root = d->comm->rank == 0;
    if (root) {
        d->gathered = calloc((size_t)W, sizeof *d->gathered);
        if (d->gathered == NULL) return io_fail(e, "out of host memory gathering the optimizer state");
    }
    int rc = 0;
    for (int k = 0; k < GPU_SHARD_ARRAYS && rc == 0; k++) {
        size_t bytes = 0;
        const void *dev = gpu_llama_shard_array(d->m, k, &bytes);
        void *mine = malloc(bytes > 0 ? bytes : 1);
        if (mine == NULL) return io_fail(e, "out of host memory (%zu bytes of optimizer state)", bytes);
        if (bytes > 0 && (rc = cuda_ok(cudaMemcpy(mine, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", e)) != 0)
            break;
        char what[64];
        snprintf(what, sizeof what, "the optimizer state (array %d) for a checkpoint", k);
        if (!root) {
            rc = bytes > 0 ? d->comm->send(d->comm->self, mine, bytes, 0, what, e) : 0;
            free(mine);
            continue;
        }
        d->gathered[0][k] = mine;
        for (int r = 1; r < W && rc == 0; r++) {
            const size_t b = gpu_llama_shard_array_bytes(d->m, r, k);
            d->gathered[r][k] = malloc(b > 0 ? b : 1);
            if (d->gathered[r][k] == NULL) return io_fail(e, "out of host memory gathering the optimizer state");
            if (b > 0) rc = d->comm->recv(d->comm->self, d->gathered[r][k], b, r, what, e);
        }
    }
    return rc;
}

int gpu_dp_tensor_read(struct gpu_dp *d, int i, void *host, struct io_err *e) {
    if (d->gathered == NULL) return io_fail(e, "tensor %d: the sharded state was not gathered on this rank", i);
    const void *const **rows = malloc(sizeof *rows * (size_t)d->comm->world);
    if (rows == NULL) return io_fail(e, "out of host memory");
    for (int r = 0; r < d->comm->world; r++) rows[r] = (const void *const *)d->gathered[r];
    gpu_llama_tensor_assemble(d->m, i, host, rows);
    free(rows);
    return 0;
}

int gpu_dp_quiesce(struct gpu_dp *d, const char *what, struct io_err *e) {
    return d->comm->wait(d->comm->self, d->comm_stream, what, e);
}

double gpu_dp_exposed_ms(struct gpu_dp *d) {
    float ms = 0.0f;
    if (cudaEventSynchronize(d->t_comm) != cudaSuccess ||
        cudaEventElapsedTime(&ms, d->t_model, d->t_comm) != cudaSuccess)
        return 0.0;
    return ms > 0.0f ? (double)ms : 0.0;
}
