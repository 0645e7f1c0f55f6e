/* llama_dp_parity.c — the GPU model's side of data parallelism (gpu/llama.h, gpu/llama_dp.cu): the
 * gradient buckets and the hook that backward calls as each bucket finishes; and, from
 * llama_shard_parity.c, the sharded optimizer against the unsharded model. Tier (a): exact.
 *
 * For small random models (3 layers, C = 64, GQA; tied and untied heads; Qwen2 biases) and every
 * method (full, LoRA grouped and with dropout (ungrouped), DoRA, QLoRA, with --recompute layer):
 *   - the buckets are disjoint, every trainable tensor's gradient lies in exactly one (its layer's,
 *     the head's or the embedding's) and every layer's bucket holds something;
 *   - backward calls the hook once per bucket, in bucket order 0 … L + 1;
 *   - a bucket is final when its hook runs: a copy of each bucket's gradients enqueued at its hook
 *     (on the model's stream) equals, bit for bit, the gradients once the whole micro-batch is done
 *     — also when the hook runs on the second micro-batch of an accumulation, the case the trainer
 *     uses (the copy taken at the hook must already hold both micro-batches' sums).
 * Outputs poisoned with NaN before each copy. Seeds fixed and printed.
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
#include "tests/common/harness.h"
#include "tests/parity/llama_shard_parity.h"

struct snap {
    struct gpu_llama *m;
    int order[64];
    int n_calls;
    float *dev[64]; /* per bucket: a device copy taken at its hook */
};

static void on_bucket(void *ctx, int b) {
    struct snap *s = ctx;
    if (s->n_calls < 64) s->order[s->n_calls] = b;
    s->n_calls++;
    float *first;
    int64_t n;
    gpu_llama_bucket(s->m, b, &first, &n);
    if (n > 0 && s->dev[b] != NULL)
        cudaMemcpyAsync(s->dev[b], first, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, gpu_llama_stream(s->m));
}

static void small_config(struct model_config *c, int tied, int bias) {
    struct io_err e;
    if (config_named(c, "smollm2-135m", &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    c->L = 3, c->C = 64, c->F = 128, c->H = 4, c->KVH = 2, c->D = 16, c->V = 256;
    c->tie_word_embeddings = tied;
    c->attention_bias = bias;
    c->max_position_embeddings = 1024;
}

static void run_case(const char *name, int tied, int bias, enum llama_mode mode, enum gpu_base_storage base,
                     float dropout, enum recompute_policy rc, uint64_t seed) {
    struct model_config c;
    small_config(&c, tied, bias);
    struct gpu_llama_options o;
    memset(&o, 0, sizeof o);
    o.mode = mode, o.base = base, o.targets = LLAMA_ALL_TARGETS, o.R = 4, o.lora_scale = 2.0f;
    o.dropout = dropout, o.seed = seed, o.recompute = rc, o.optimizer = OPTIMIZER_ADAMW, o.nested_nf4 = 1;
    o.B = 2, o.T = 32;
    struct io_err e = {{0}};
    struct gpu_llama *m = build_gpu_llama(&c, &o, &e);
    EXPECT(m != NULL, "%s: build: %s", name, e.msg);
    if (!m) return;
    gpu_llama_random_weights(m, seed);
    gpu_llama_init_adapters(m, seed);
    const int nb = gpu_llama_n_buckets(m);
    EXPECT(nb == c.L + 2, "%s: %d buckets, expected L + 2 = %d", name, nb, c.L + 2);
    float *first[64];
    int64_t n[64];
    for (int b = 0; b < nb; b++) gpu_llama_bucket(m, b, &first[b], &n[b]);
    for (int b = 1; b <= c.L; b++) EXPECT(n[b] > 0, "%s: layer bucket %d is empty", name, b);
    const int full = mode == LLAMA_FULL;
    EXPECT((n[0] > 0) == (full != 0) && (n[nb - 1] > 0) == (full != 0),
           "%s: head bucket %" PRId64 ", embedding bucket %" PRId64 " values (full: both, adapters: neither)", name,
           n[0], n[nb - 1]);
    for (int a = 0; a < nb; a++)
        for (int b = a + 1; b < nb; b++)
            EXPECT(n[a] == 0 || n[b] == 0 || first[a] + n[a] <= first[b] || first[b] + n[b] <= first[a],
                   "%s: buckets %d and %d overlap", name, a, b);

    struct snap s;
    memset(&s, 0, sizeof s);
    s.m = m;
    for (int b = 0; b < nb; b++)
        if (n[b] > 0 && cudaMalloc((void **)&s.dev[b], (size_t)n[b] * sizeof(float)) != cudaSuccess) s.dev[b] = NULL;
    const int N = o.B * o.T;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)N), *lab = malloc(sizeof(int32_t) * (size_t)N);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 3;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)c.V);
    }
    for (int i = 0; i < N; i++) lab[i] = (i + 1) % o.T ? tok[i + 1] : -100;
    /* two micro-batches; the hook on the second (the step's last) */
    for (int mb = 0; mb < 2; mb++) {
        for (int b = 0; b < nb; b++)
            if (s.dev[b]) cudaMemset(s.dev[b], 0xFF, (size_t)n[b] * sizeof(float)); /* NaN */
        gpu_llama_set_grad_hook(m, mb == 1 ? on_bucket : NULL, &s);
        gpu_llama_set_batch(m, tok, lab);
        gpu_llama_train_micro(m, N, 0.5f, (uint64_t)mb);
    }
    gpu_llama_set_grad_hook(m, NULL, NULL);
    (void)gpu_llama_loss(m); /* waits for the queue */
    EXPECT(s.n_calls == nb, "%s: the hook ran %d times, expected %d", name, s.n_calls, nb);
    for (int i = 0; i < s.n_calls && i < 64; i++)
        EXPECT(s.order[i] == i, "%s: call %d was for bucket %d, expected %d", name, i, s.order[i], i);
    for (int b = 0; b < nb; b++) {
        if (n[b] == 0 || s.dev[b] == NULL) continue;
        float *at_hook = malloc((size_t)n[b] * sizeof(float)), *final = malloc((size_t)n[b] * sizeof(float));
        cudaMemcpy(at_hook, s.dev[b], (size_t)n[b] * sizeof(float), cudaMemcpyDeviceToHost);
        cudaMemcpy(final, first[b], (size_t)n[b] * sizeof(float), cudaMemcpyDeviceToHost);
        int64_t bad = -1, nonzero = 0;
        for (int64_t i = 0; i < n[b]; i++) {
            nonzero += final[i] != 0.0f;
            if (bad < 0 && memcmp(&at_hook[i], &final[i], sizeof(float)) != 0) bad = i;
        }
        EXPECT(bad < 0, "%s (seed %" PRIu64 "): bucket %d (%" PRId64 " values) changed after its hook: index %" PRId64
                        " was %.9g at the hook, %.9g at the end",
               name, seed, b, n[b], bad, bad >= 0 ? (double)at_hook[bad] : 0.0, bad >= 0 ? (double)final[bad] : 0.0);
        EXPECT(nonzero > 0, "%s: bucket %d holds no gradient (all zero)", name, b);
        free(at_hook);
        free(final);
    }
    for (int b = 0; b < nb; b++) cudaFree(s.dev[b]);
    free(tok);
    free(lab);
    gpu_llama_drop_grads(m);
    free_gpu_llama(m);
}

int main(int argc, char **argv) {
    const uint64_t seed = test_seed(argc, argv, 1717);
    struct io_err e;
    if (gpu_device_query(NULL, 0, NULL, NULL, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    run_case("full, tied", 1, 0, LLAMA_FULL, GPU_BASE_BF16, 0.0f, RECOMPUTE_NONE, seed);
    run_case("full, untied, biases", 0, 1, LLAMA_FULL, GPU_BASE_BF16, 0.0f, RECOMPUTE_NONE, seed + 1);
    run_case("full, recompute layer", 0, 0, LLAMA_FULL, GPU_BASE_BF16, 0.0f, RECOMPUTE_LAYER, seed + 2);
    run_case("lora (grouped)", 1, 0, LLAMA_LORA, GPU_BASE_BF16, 0.0f, RECOMPUTE_NONE, seed + 3);
    run_case("lora, dropout (ungrouped)", 0, 0, LLAMA_LORA, GPU_BASE_BF16, 0.1f, RECOMPUTE_ATTN, seed + 4);
    run_case("dora", 1, 1, LLAMA_DORA, GPU_BASE_BF16, 0.0f, RECOMPUTE_NONE, seed + 5);
    run_case("qlora", 1, 0, LLAMA_LORA, GPU_BASE_NF4, 0.0f, RECOMPUTE_LAYER, seed + 6);
    llama_shard_parity(seed + 100);
    return test_finish("llama_dp_parity");
}
