/* llama_shard_parity.c — the GPU model's sharded optimizer (ZeRO-1, gpu/llama.h and
 * gpu/llama_shard.cu) against the unsharded model, W ranks simulated in one process on one GPU.
 * Tier (a): exact. Part of the llama_dp_parity binary (llama_dp_parity.c calls it).
 *
 * A full fine-tuning model (3 layers, C = 64, tied and untied heads; AdamW and 8-bit AdamW) is
 * built unsharded and as W = 2 and 3 sharded ranks, all from the same random weights, and each
 * takes 3 steps on the same micro-batches (every rank computes the same gradients, so no
 * all-reduce of gradients is needed here); the job's parts of the step are done by hand as
 * trainers/gpu_dp.c does them with NCCL: the ranks' partial sums of squares summed in rank order
 * and written back into every rank, then each rank's part of the bf16 copies copied into the
 * other ranks. Checked:
 *   - every step's Σ NLL and gradient norm, bit for bit the unsharded model's;
 *   - every weight the models compute with (bf16 copies) on every rank, bit for bit;
 *   - every checkpoint tensor (masters, AdamW moments or 8-bit codes and maxima) assembled from
 *     the ranks' flat arrays (gpu_llama_tensor_assemble), bit for bit the unsharded tensor;
 *   - a resume: fresh sharded ranks written from the unsharded model's tensors
 *     (gpu_llama_tensor_write) take one more step in step with it, bit for bit;
 *   - the plans: every rank's masters and moments about 1/W of the unsharded ones.
 * With the gradients sharded too (ZeRO-2, options.shard_grads): each rank's hook takes every bucket
 * as backward finishes it (gpu_llama_bucket_take on the model's stream: this rank's pieces into its
 * accumulator, the bucket cleared — no sum is needed, every rank computes the same gradients), the
 * layers sharing two buffers; checked as above, bit for bit, with one micro-batch a step; with two
 * (the accumulation the trainer runs), the losses and norms within 1e-5 of the unsharded model's
 * (the embedding's rows are summed per micro-batch, then across: another order of fp32 sums).
 *
 *   bazel test --config=gpu //tests/parity:llama_dp_parity
 */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/llama.h"
#include "io/config.h"
#include "io/model_files.h"
#include "tests/common/harness.h"
#include "tests/parity/llama_shard_parity.h"

#define MAXW 3

static void small_config(struct model_config *c, int tied) {
    struct io_err e;
    if (config_named(c, "smollm2-135m", &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    c->L = 3, c->C = 64, c->F = 128, c->H = 4, c->KVH = 2, c->D = 16, c->V = 256;
    c->tie_word_embeddings = tied;
    c->max_position_embeddings = 1024;
}

static struct gpu_llama *build(const struct model_config *c, enum optimizer_kind opt, int W, int r, int grads,
                               uint64_t seed) {
    struct gpu_llama_options o;
    memset(&o, 0, sizeof o);
    o.mode = LLAMA_FULL, o.optimizer = opt, o.B = 2, o.T = 32, o.seed = seed;
    o.shard_world = W, o.shard_rank = r, o.shard_grads = grads;
    struct io_err e = {{0}};
    struct gpu_llama *m = build_gpu_llama(c, &o, &e);
    if (m == NULL) {
        fprintf(stderr, "build (W=%d, rank %d): %s\n", W, r, e.msg);
        exit(1);
    }
    gpu_llama_random_weights(m, seed);
    return m;
}

static void batch(int32_t *tok, int32_t *lab, int N, int T, int V, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 11;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)V);
    }
    for (int i = 0; i < N; i++) lab[i] = (i + 1) % T ? tok[i + 1] : -100;
}

/* Sharded gradients: a rank takes each bucket as backward finishes it (the sum over the ranks is
 * the identity here), on the model's stream. */
static void take_bucket(void *ctx, int b) {
    struct gpu_llama *m = ctx;
    gpu_llama_bucket_take(m, b, gpu_llama_stream(m));
}

/* One step of A micro-batches on the unsharded model and the W ranks; the job's parts by hand.
 * tol = 0: the loss sum and norm bit for bit the unsharded model's; else within tol (relative). */
static void step_all(struct gpu_llama *ref, struct gpu_llama **rk, int W, int step, const char *name, uint64_t seed,
                     int grads, int A, double tol) {
    const int N = 64, T = 32;
    int32_t tok[64], lab[64];
    struct gpu_llama *all[MAXW + 1] = {ref};
    for (int r = 0; r < W; r++) all[r + 1] = rk[r];
    for (int a = 0; a < A; a++) {
        batch(tok, lab, N, T, 256, seed + (uint64_t)step + 1000u * (uint64_t)a);
        for (int k = 0; k <= W; k++) {
            gpu_llama_set_grad_hook(all[k], k > 0 && grads ? take_bucket : NULL, all[k]);
            gpu_llama_set_batch(all[k], tok, lab);
            gpu_llama_train_micro(all[k], N - 2, 1.0f / (float)(A * (N - 2)), (uint64_t)(step * A + a));
            gpu_llama_set_grad_hook(all[k], NULL, NULL);
        }
    }
    /* the norm's partial sums: summed in rank order, written into every rank */
    int64_t n = 0;
    float *sum = NULL, *part = NULL, *dev[MAXW];
    for (int r = 0; r < W; r++) {
        dev[r] = gpu_llama_shard_partials(rk[r], &n);
        if (!sum) sum = calloc((size_t)n, sizeof *sum), part = calloc((size_t)n, sizeof *part);
        cudaStreamSynchronize(gpu_llama_stream(rk[r]));
        cudaMemcpy(part, dev[r], sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost);
        for (int64_t j = 0; j < n; j++) sum[j] = r == 0 ? part[j] : sum[j] + part[j];
    }
    for (int r = 0; r < W; r++) cudaMemcpy(dev[r], sum, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice);
    free(sum);
    free(part);
    const struct optim_step h = {step, {1e-3, 0.9, 0.999, 1e-8, 0.01}, 0.5}; /* clips at 0.5 */
    double nll0, norm0;
    gpu_llama_optimizer_step(ref, &h, &nll0, &norm0);
    for (int r = 0; r < W; r++) {
        double nll, norm;
        gpu_llama_optimizer_step(rk[r], &h, &nll, &norm);
        if (tol > 0) {
            EXPECT(fabs(nll - nll0) <= tol * fabs(nll0) && fabs(norm - norm0) <= tol * fabs(norm0),
                   "%s step %d rank %d: loss sum %.17g norm %.9g, unsharded %.17g %.9g (within %g)", name, step, r, nll,
                   norm, nll0, norm0, tol);
            continue;
        }
        EXPECT(memcmp(&nll, &nll0, sizeof nll) == 0 && memcmp(&norm, &norm0, sizeof norm) == 0,
               "%s step %d rank %d: loss sum %.17g norm %.9g, unsharded %.17g %.9g", name, step, r, nll, norm, nll0,
               norm0);
    }
    /* every rank's part of the copies into the others */
    for (int r = 0; r < W; r++) {
        uint16_t *src;
        int64_t cnt;
        gpu_llama_shard_copies(rk[r], r, &src, &cnt);
        for (int q = 0; q < W && cnt > 0; q++) {
            if (q == r) continue;
            uint16_t *dst;
            int64_t cnt2;
            gpu_llama_shard_copies(rk[q], r, &dst, &cnt2);
            EXPECT(cnt2 == cnt, "%s: rank %d's copies are %" PRId64 " values in rank %d, %" PRId64 " in rank %d", name,
                   r, cnt, r, cnt2, q);
            cudaMemcpy(dst, src, sizeof(uint16_t) * (size_t)cnt, cudaMemcpyDeviceToDevice);
        }
    }
}

static void compare_weights(struct gpu_llama *ref, struct gpu_llama **rk, int W, const struct model_config *c,
                            const char *name) {
    const int64_t most = (int64_t)c->V * c->C;
    float *a = malloc(sizeof(float) * (size_t)most), *b = malloc(sizeof(float) * (size_t)most);
    char wname[128];
    int64_t differ = 0, checked = 0;
    for (int k = 0; k < MW_COUNT; k++)
        for (int l = 0; l < c->L; l++) {
            model_weight_name(wname, sizeof wname, (enum model_weight)k, l);
            struct io_err e;
            if (gpu_llama_base_weight_read(ref, wname, a, &e) != 0) continue; /* none of this kind */
            int64_t shape[2];
            const int nd = model_weight_shape(shape, c, (enum model_weight)k);
            const int64_t cnt = nd == 2 ? shape[0] * shape[1] : shape[0];
            for (int r = 0; r < W; r++) {
                gpu_llama_base_weight_read(rk[r], wname, b, &e);
                checked++;
                differ += memcmp(a, b, sizeof(float) * (size_t)cnt) != 0;
            }
        }
    EXPECT(checked > 0 && differ == 0, "%s: %" PRId64 " of %" PRId64 " weights (bf16 copies) differ from the unsharded", name,
           differ, checked);
    free(a);
    free(b);
}

static void compare_tensors(struct gpu_llama *ref, struct gpu_llama **rk, int W, const char *name) {
    const void *rows[MAXW][GPU_SHARD_ARRAYS];
    void *host[MAXW][GPU_SHARD_ARRAYS];
    for (int r = 0; r < W; r++)
        for (int k = 0; k < GPU_SHARD_ARRAYS; k++) {
            size_t bytes = 0;
            const void *dev = gpu_llama_shard_array(rk[r], k, &bytes);
            EXPECT(bytes == gpu_llama_shard_array_bytes(rk[0], r, k), "%s: rank %d's array %d size", name, r, k);
            host[r][k] = malloc(bytes + 1);
            if (bytes) cudaMemcpy(host[r][k], dev, bytes, cudaMemcpyDeviceToHost);
            rows[r][k] = host[r][k];
        }
    const void *const *arrays[MAXW];
    for (int r = 0; r < W; r++) arrays[r] = rows[r];
    int64_t differ = 0;
    const int nt = gpu_llama_n_tensors(ref);
    for (int i = 0; i < nt; i++) {
        const struct gpu_llama_tensor *t = gpu_llama_tensor_info(ref, i);
        const size_t bytes = (size_t)t->numel * (t->is_u8 ? 1 : 4);
        void *a = malloc(bytes), *b = malloc(bytes);
        memset(b, 0xA5, bytes);
        gpu_llama_tensor_read(ref, i, a);
        gpu_llama_tensor_assemble(rk[0], i, b, arrays);
        if (memcmp(a, b, bytes) != 0) {
            if (differ == 0) EXPECT(0, "%s: tensor %s assembled from %d ranks differs from the unsharded", name, t->name, W);
            differ++;
        }
        free(a);
        free(b);
    }
    EXPECT(differ == 0, "%s: %" PRId64 " of %d checkpoint tensors differ", name, differ, nt);
    for (int r = 0; r < W; r++)
        for (int k = 0; k < GPU_SHARD_ARRAYS; k++) free(host[r][k]);
}

static void run_case(int tied, enum optimizer_kind opt, int W, int grads, uint64_t seed) {
    char name[128];
    snprintf(name, sizeof name, "%s head, %s, %d ranks%s (seed %" PRIu64 ")", tied ? "tied" : "untied",
             opt == OPTIMIZER_ADAMW ? "AdamW" : "8-bit AdamW", W, grads ? ", gradients sharded" : "", seed);
    struct model_config c;
    small_config(&c, tied);
    struct gpu_llama *ref = build(&c, opt, 1, 0, 0, seed), *rk[MAXW];
    for (int r = 0; r < W; r++) rk[r] = build(&c, opt, W, r, grads, seed);
    const struct gpu_llama_plan *p1 = gpu_llama_get_plan(ref);
    for (int r = 0; r < W; r++) {
        const struct gpu_llama_plan *pr = gpu_llama_get_plan(rk[r]);
        /* within a chunk of 1 / W; sharded gradients: one layer's rows fewer (3 layers), 1/W more */
        EXPECT(pr->optim < p1->optim / W + 96 * 1024 && (grads ? pr->grads != p1->grads : pr->grads == p1->grads),
               "%s rank %d: optimizer %zu bytes (unsharded %zu), gradients %zu (%zu)", name, r, pr->optim, p1->optim,
               pr->grads, p1->grads);
    }
    for (int step = 1; step <= 3; step++) step_all(ref, rk, W, step, name, seed, grads, 1, 0.0);
    compare_weights(ref, rk, W, &c, name);
    compare_tensors(ref, rk, W, name);
    /* resume: fresh ranks from the unsharded tensors, one more step */
    struct gpu_llama *fresh[MAXW];
    const int nt = gpu_llama_n_tensors(ref);
    for (int r = 0; r < W; r++) {
        fresh[r] = build(&c, opt, W, r, grads, seed + 999); /* other weights: the writes must replace them */
        for (int i = 0; i < nt; i++) {
            const struct gpu_llama_tensor *t = gpu_llama_tensor_info(ref, i);
            void *a = malloc((size_t)t->numel * (t->is_u8 ? 1 : 4));
            gpu_llama_tensor_read(ref, i, a);
            gpu_llama_tensor_write(fresh[r], i, a);
            free(a);
        }
    }
    char rname[192];
    snprintf(rname, sizeof rname, "%s, resumed", name);
    step_all(ref, fresh, W, 4, rname, seed, grads, 1, 0.0);
    compare_weights(ref, fresh, W, &c, rname);
    compare_tensors(ref, fresh, W, rname);
    if (grads) { /* two micro-batches a step: the same training within fp32 summation order */
        snprintf(rname, sizeof rname, "%s, 2 micro-batches a step", name);
        for (int step = 5; step <= 7; step++) step_all(ref, fresh, W, step, rname, seed, grads, 2, 1e-5);
    }
    for (int r = 0; r < W; r++) free_gpu_llama(rk[r]), free_gpu_llama(fresh[r]);
    free_gpu_llama(ref);
}

void llama_shard_parity(uint64_t seed) {
    run_case(1, OPTIMIZER_ADAMW, 2, 0, seed);
    run_case(0, OPTIMIZER_ADAMW, 3, 0, seed + 1);
    run_case(1, OPTIMIZER_ADAMW8BIT, 3, 0, seed + 2);
    run_case(0, OPTIMIZER_ADAMW8BIT, 2, 0, seed + 3);
    run_case(1, OPTIMIZER_ADAMW, 2, 1, seed + 4);
    run_case(0, OPTIMIZER_ADAMW, 3, 1, seed + 5);
    run_case(1, OPTIMIZER_ADAMW8BIT, 3, 1, seed + 6);
    run_case(0, OPTIMIZER_ADAMW8BIT, 2, 1, seed + 7);
}
