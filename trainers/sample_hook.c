/* sample_hook.c — samples during training through the engine interface (sample_hook.h). */
#include "trainers/sample_hook.h"

#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "io/model_files.h"
#include "ref/llama.h"
#include "train/export.h"
#include "trainers/gen_run.h"

struct hook_state {
    struct model_config c;
    const struct gen_device *dev;
    int full;
};

/* (kind, layer) → the ref/llama tensor of w. */
static float *tensor_of(struct llama_weights *w, enum model_weight kind, int layer) {
    switch (kind) {
    case MW_EMBED: return w->embed;
    case MW_FINAL_NORM: return w->final_norm;
    case MW_LM_HEAD: return w->lm_head;
    case MW_ATTN_NORM: return w->layers[layer].attn_norm;
    case MW_MLP_NORM: return w->layers[layer].mlp_norm;
    default: break;
    }
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        if (llama_linears[t].weight == kind) return w->layers[layer].w[t];
        if (llama_linears[t].bias == kind) return w->layers[layer].bias[t];
    }
    CHECK(0, "weight kind %d", (int)kind);
    return NULL;
}

static int hook_generate(const struct train_engine *eng, const int32_t *const *prompts, const int *lens, int n,
                         int max_new, const int32_t *end_ids, int n_end, int32_t *const *out, int *n_out,
                         struct io_err *e) {
    const struct hook_state *h = eng->gen_state;
    const struct model_config *c = &h->c;
    struct llama_weights w;
    ref_llama_weights_alloc(&w, c);
    const int n_slots = MW_N_GLOBAL + c->L * MW_N_LAYER;
    int rc = 0;
    for (int slot = 0; slot < n_slots && rc == 0; slot++) {
        int layer;
        const enum model_weight kind = model_weight_of_slot(slot, &layer);
        int64_t shape[2];
        if (model_weight_shape(shape, c, kind) == 0 || (kind == MW_LM_HEAD && c->tie_word_embeddings)) continue;
        rc = export_merged_weight(tensor_of(&w, kind, layer < 0 ? 0 : layer), c, eng, h->full, eng->adapter_scale,
                                  kind, layer, e);
    }
    int longest = 0;
    for (int i = 0; i < n; i++) longest = lens[i] > longest ? lens[i] : longest;
    struct gen_backend b;
    memset(&b, 0, sizeof b);
    if (rc == 0) rc = h->dev->create(&b, c, &w, n, longest + max_new, GEN_PRECISION_AUTO, e);
    ref_llama_weights_free(&w, c);
    if (rc != 0) return io_fail_context(e, "samples");
    struct gen_request *rq = calloc((size_t)n, sizeof *rq);
    struct gen_result *res = calloc((size_t)n, sizeof *res);
    CHECK(rq && res, "out of memory");
    for (int i = 0; i < n; i++) rq[i] = (struct gen_request){prompts[i], lens[i], max_new};
    struct gen_settings s;
    memset(&s, 0, sizeof s);
    ref_sample_params_default(&s.sample);
    for (int i = 0; i < n_end && s.n_eos < GEN_MAX_EOS; i++) s.eos[s.n_eos++] = end_ids[i];
    rc = gen_run(&b, rq, n, &s, res, e);
    for (int i = 0; i < n && rc == 0; i++) {
        memcpy(out[i], res[i].ids, (size_t)res[i].n * sizeof(int32_t));
        n_out[i] = res[i].n;
        gen_result_free(&res[i]);
    }
    free(rq), free(res);
    b.destroy(b.self);
    return rc;
}

void sample_hook_attach(struct train_engine *eng, const struct model_config *c, const struct gen_device *dev,
                        int full) {
    struct hook_state *h = calloc(1, sizeof *h);
    CHECK(h != NULL, "out of memory");
    h->c = *c;
    h->dev = dev;
    h->full = full;
    eng->generate = hook_generate;
    eng->gen_state = h;
}

void sample_hook_detach(struct train_engine *eng) {
    free(eng->gen_state);
    eng->gen_state = NULL;
    eng->generate = NULL;
}
