/* sample_hook_golden_test.c — the samples of training (trainers/sample_hook.h) against
 * transformers: an engine holding the tiny golden Llama and the PEFT LoRA adapter of
 * tests/golden/data/generate/llama_lora as its trained tensors completes the fixture's prompt
 * through its attached generate hook — the weights read out through the engine interface and
 * merged as the merged export merges them — and must give PEFT's greedy tokens (64, token for
 * token; the fixture's tie-break rule: generate_golden_test.c). The hook's end ids stop it early.
 *
 *   bazel test //tests/golden:sample_hook_golden_test
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model_source.h"
#include "io/peft.h"
#include "tests/common/harness.h"
#include "tests/golden/golden.h"
#include "train/engine.h"
#include "trainers/gen_ref.h"
#include "trainers/sample_hook.h"

struct fake {
    struct model_source src;
    struct peft_adapter a;
};

static int f_n(void *self) { return 2 * ((struct fake *)self)->a.n; }

static int f_info(void *self, int i, struct engine_tensor *info) {
    const struct peft_module *m = &((struct fake *)self)->a.mods[i / 2];
    const int R = ((struct fake *)self)->a.config.r;
    char w[112];
    model_weight_name(w, sizeof w, m->kind, m->layer);
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%.*s.%s", (int)(strlen(w) - 7), w, i % 2 ? "lora_B.weight" : "lora_A.weight");
    info->role = ROLE_PARAM;
    info->dtype = ST_F32;
    info->ndim = 2;
    info->shape[0] = i % 2 ? m->out : R;
    info->shape[1] = i % 2 ? R : m->in;
    return 0;
}

static int f_read(void *self, int i, void *host, struct io_err *e) {
    (void)e;
    const struct peft_module *m = &((struct fake *)self)->a.mods[i / 2];
    const int R = ((struct fake *)self)->a.config.r;
    if (i % 2) memcpy(host, m->lora_b, (size_t)m->out * R * 4);
    else memcpy(host, m->lora_a, (size_t)R * m->in * 4);
    return 0;
}

static int f_base(void *self, const char *hf_name, float *host, struct io_err *e) {
    const struct fake *f = self;
    const struct model_config *c = &f->src.config;
    for (int k = 0; k < MW_COUNT; k++)
        for (int l = 0; l < (k < MW_N_GLOBAL ? 1 : c->L); l++) {
            char n[112];
            int64_t shape[2];
            if (model_weight_shape(shape, c, (enum model_weight)k) == 0) continue;
            model_weight_name(n, sizeof n, (enum model_weight)k, l);
            if (strcmp(n, hf_name) == 0) return model_source_weight_f32(&f->src, (enum model_weight)k, l, host, e);
        }
    return io_fail(e, "no weight %s", hf_name);
}

int main(int argc, char **argv) {
    (void)test_seed(argc, argv, 0);
    struct fake f;
    struct io_err e = {{0}};
    if (model_source_open(&f.src, "tests/golden/data/e2e/llama", &e) != 0 ||
        peft_read(&f.a, "tests/golden/data/generate/llama_lora", &f.src.config, &e) != 0) {
        test_fail("%s", e.msg);
        return test_finish("sample_hook_golden_test");
    }
    struct train_engine eng;
    memset(&eng, 0, sizeof eng);
    eng.name = "fake";
    eng.self = &f;
    eng.adapter_scale = (float)peft_scale(&f.a.config);
    eng.n_tensors = f_n;
    eng.tensor_info = f_info;
    eng.tensor_read = f_read;
    eng.base_weight_read = f_base;
    sample_hook_attach(&eng, &f.src.config, &gen_ref_device, 0);
    struct golden g;
    golden_open(&g, "tests/golden/data/generate/tiny.safetensors");
    const int np = (int)golden_numel(&g, "llama_lora.prompt"), nw = (int)golden_numel(&g, "llama_lora.ids");
    int64_t *p64 = golden_i64(&g, "llama_lora.prompt", -1, NULL), *w64 = golden_i64(&g, "llama_lora.ids", -1, NULL);
    int32_t prompt[64], *out[2], n_out[2];
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)p64[i];
    out[0] = malloc((size_t)nw * 4), out[1] = malloc((size_t)nw * 4);
    const int32_t *prompts[2] = {prompt, prompt};
    const int lens[2] = {np, np};
    /* the second request repeats the first with an end id: the 10th generated token */
    EXPECT(eng.generate(&eng, prompts, lens, 1, nw, NULL, 0, out, n_out, &e) == 0, "%s", e.msg);
    int same = n_out[0] == nw;
    for (int i = 0; same && i < nw; i++) same = out[0][i] == (int32_t)w64[i];
    EXPECT(same, "the hook's greedy tokens differ from PEFT's (%d tokens)", n_out[0]);
    const int32_t end = (int32_t)w64[9];
    int first = 0;
    while ((int32_t)w64[first] != end) first++;
    EXPECT(eng.generate(&eng, prompts, lens, 2, nw, &end, 1, out, n_out, &e) == 0, "%s", e.msg);
    EXPECT(n_out[0] == first + 1 && n_out[1] == first + 1 && out[0][first] == end,
           "an end id stops both requests after %d tokens (%d, %d)", first + 1, n_out[0], n_out[1]);
    printf("sample hook: %d tokens equal to PEFT's greedy tokens; stopped at the end id after %d\n", nw, n_out[0]);
    sample_hook_detach(&eng);
    free(out[0]), free(out[1]), free(p64), free(w64);
    golden_close(&g);
    peft_free(&f.a);
    model_source_close(&f.src);
    return test_finish("sample_hook_golden_test");
}
