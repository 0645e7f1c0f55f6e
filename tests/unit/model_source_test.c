/* model_source_test.c — one door to both model formats: the tiny GGUF fixture and the HF folder of
 * the end-to-end fixture open through model_source_open, give the config of their readers, and
 * every weight comes out as fp32 equal to what the format's own reader gives; wrong paths and
 * files that are neither are refused with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "io/model_source.h"
#include "io/safetensors.h"
#include "tests/common/harness.h"

static const char *const k_gguf = "tests/golden/data/gguf/tiny_llama.gguf";
static const char *const k_hf = "tests/golden/data/e2e/qwen2";

static void check_all_weights(const struct model_source *s, const char *what) {
    const struct model_config *c = &s->config;
    int checked = 0, ok = 1;
    for (int slot = 0; slot < MW_N_GLOBAL + c->L * MW_N_LAYER; slot++) {
        int layer;
        const enum model_weight kind = model_weight_of_slot(slot, &layer);
        int64_t shape[2];
        const int nd = model_source_shape(s, kind, layer, shape);
        if (nd == 0) continue;
        const int64_t n = nd == 2 ? shape[0] * shape[1] : shape[0];
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
        struct io_err e;
        ok &= model_source_weight_f32(s, kind, layer, a, &e) == 0;
        /* the format's own reader */
        if (s->kind == MODEL_SOURCE_GGUF) {
            const struct gguf_model_weight *w = gguf_model_get(&s->gguf, kind, layer);
            ok &= w && gguf_model_weight_f32(b, &s->gguf, w, &e) == 0;
        } else {
            const struct model_weight_ref *w = model_files_get(&s->hf, kind, layer);
            ok &= w && model_weight_to_f32(b, w, &e) == 0;
        }
        ok &= memcmp(a, b, (size_t)n * 4) == 0;
        int finite = 1;
        for (int64_t i = 0; i < n; i++) finite &= a[i] == a[i];
        ok &= finite;
        checked++;
        free(a);
        free(b);
    }
    EXPECT(ok && checked > 10, "%s: %d weights read, equal to the format's reader", what, checked);
}

int main(void) {
    struct model_source s;
    struct io_err e = {{0}};
    EXPECT(model_source_open(&s, k_gguf, &e) == 0 && s.kind == MODEL_SOURCE_GGUF, "GGUF opens: %s", e.msg);
    if (s.kind == MODEL_SOURCE_GGUF && s.config.L > 0) {
        EXPECT(memcmp(&s.config, &s.gguf.config, sizeof s.config) == 0, "GGUF config is the reader's");
        EXPECT(s.tokenizer_json[0] == '\0', "a GGUF file has no tokenizer.json");
        check_all_weights(&s, "gguf");
        model_source_close(&s);
    }
    EXPECT(model_source_open(&s, k_hf, &e) == 0 && s.kind == MODEL_SOURCE_HF, "HF folder opens: %s", e.msg);
    if (s.kind == MODEL_SOURCE_HF && s.config.L > 0) {
        EXPECT(s.config.attention_bias && !s.config.tie_word_embeddings, "Qwen2-like: bias, untied");
        EXPECT(!model_source_is_bnb(&s, MW_Q, 0), "plain storage");
        check_all_weights(&s, "hf");
        model_source_close(&s);
    }
    EXPECT(model_source_open(&s, "tests/golden/data/nowhere", &e) == -1 && strstr(e.msg, "no such model"),
           "missing: %s", e.msg);
    EXPECT(model_source_open(&s, "tests/golden/data/MANIFEST", &e) == -1 && strstr(e.msg, "not a model"),
           "neither format: %s", e.msg);
    return test_finish("model_source_test");
}
