/* gen_gpu.c — the GPU generation backend (gen_gpu.h). */
#include "trainers/gen_gpu.h"

#include <stdio.h>
#include <string.h>

#include "gpu/generate.h"
#include "io/check.h"

/* Rows of one forward call: prefill chunks of up to 512 tokens, and at least S for a decode. */
#define GPU_GEN_CHUNK 512

static int gb_prefill(void *self, int s, const int32_t *ids, int n, float *logits, struct io_err *e) {
    return gpu_gen_prefill(self, s, ids, n, logits, e);
}

static int gb_decode(void *self, const int32_t *seqs, const int32_t *tokens, int n, float *logits, struct io_err *e) {
    return gpu_gen_decode(self, seqs, tokens, n, logits, NULL, e);
}

static int gb_decode_argmax(void *self, const int32_t *seqs, const int32_t *tokens, int n, int32_t *next,
                            struct io_err *e) {
    return gpu_gen_decode(self, seqs, tokens, n, NULL, next, e);
}

static void gb_reset(void *self, int s) { gpu_gen_reset(self, s); }

static void gb_destroy(void *self) { free_gpu_gen(self); }

static int gpu_check(enum gen_precision p, struct io_err *e) {
    if (p == GEN_PRECISION_FP32)
        return io_fail(e, "--precision fp32: //gpu:generate computes in bf16; the fp32 generator is //ref:generate");
    return gpu_gen_device_check(e);
}

static int gpu_create(struct gen_backend *b, const struct model_config *c, const struct llama_weights *w, int S,
                      int T_max, enum gen_precision p, struct io_err *e) {
    (void)p;
    struct gpu_gen *g = build_gpu_gen(c, w, S, T_max, S > GPU_GEN_CHUNK ? S : GPU_GEN_CHUNK, e);
    if (!g) return -1;
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "gpu (%s, bf16)", gpu_gen_device_name(g));
    b->self = g;
    b->S = S;
    b->T_max = T_max;
    b->V = c->V;
    b->prefill = gb_prefill;
    b->decode = gb_decode;
    b->decode_argmax = gb_decode_argmax;
    b->reset = gb_reset;
    b->destroy = gb_destroy;
    return 0;
}

const struct gen_device gen_gpu_device = {"bazel run //gpu:generate --", gpu_check, gpu_create};
