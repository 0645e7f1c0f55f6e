/* gen_ref.c — the CPU generation backend (gen_ref.h). */
#include "trainers/gen_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/check.h"
#include "ref/generate.h"

struct ref_backend {
    struct model_config cfg;
    struct llama_weights w; /* own copy */
    struct ref_gen g;
};

static int rb_prefill(void *self, int s, const int32_t *ids, int n, float *logits, struct io_err *e) {
    return ref_gen_prefill(&((struct ref_backend *)self)->g, s, ids, n, logits, e);
}

static int rb_decode(void *self, const int32_t *seqs, const int32_t *tokens, int n, float *logits, struct io_err *e) {
    return ref_gen_decode(&((struct ref_backend *)self)->g, seqs, tokens, n, logits, e);
}

static void rb_reset(void *self, int s) { ref_gen_reset(&((struct ref_backend *)self)->g, s); }

static void rb_destroy(void *self) {
    struct ref_backend *r = self;
    ref_gen_free(&r->g);
    ref_llama_weights_free(&r->w, &r->cfg);
    free(r);
}

int gen_ref_create(struct gen_backend *b, const struct model_config *c, const struct llama_weights *w, int S,
                   int T_max, enum gen_precision p, int blas, struct io_err *e) {
    (void)e;
    struct ref_backend *r = calloc(1, sizeof *r);
    CHECK(r != NULL, "out of memory");
    r->cfg = *c;
    ref_llama_weights_alloc(&r->w, c);
    struct llama_options o;
    ref_llama_options_default(&o);
    const int n = ref_llama_tensors(NULL, c, &o, &r->w, NULL);
    struct llama_tensor *dst = calloc((size_t)n, sizeof *dst), *src = calloc((size_t)n, sizeof *src);
    CHECK(dst && src, "out of memory");
    ref_llama_tensors(dst, c, &o, &r->w, NULL);
    ref_llama_tensors(src, c, &o, w, NULL);
    for (int i = 0; i < n; i++) memcpy(dst[i].data, src[i].data, (size_t)src[i].numel * sizeof(float));
    free(dst);
    free(src);
    const enum act_dtype act = p == GEN_PRECISION_BF16 ? ACT_BF16 : ACT_F32;
    if (act == ACT_BF16) ref_gen_round_weights(&r->w, c);
    ref_gen_init(&r->g, c, &r->w, S, T_max, S > 64 ? S : 64, act, blas);
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "ref (CPU, %s%s)", act == ACT_BF16 ? "bf16" : "fp32", blas ? "" : ", naive");
    b->self = r;
    b->S = S;
    b->T_max = T_max;
    b->V = c->V;
    b->prefill = rb_prefill;
    b->decode = rb_decode;
    b->reset = rb_reset;
    b->destroy = rb_destroy;
    return 0;
}

static int ref_create(struct gen_backend *b, const struct model_config *c, const struct llama_weights *w, int S,
                      int T_max, enum gen_precision p, struct io_err *e) {
    return gen_ref_create(b, c, w, S, T_max, p, 1, e);
}

const struct gen_device gen_ref_device = {"bazel run //ref:generate --", NULL, ref_create};

void gen_ref_openblas_coretype(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") != NULL) return;
    __builtin_cpu_init();
    const char *t = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell" : NULL;
    if (t == NULL || setenv("OPENBLAS_CORETYPE", t, 1) != 0) return;
    execv("/proc/self/exe", argv); /* on failure: carry on with the generic kernels */
}
