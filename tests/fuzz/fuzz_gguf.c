/* fuzz_gguf.c — libFuzzer target: io/gguf on arbitrary bytes: parse, typed metadata access,
 * dequantize every tensor, and, when the metadata describes a model, bind it and convert every
 * weight to its HF layout. Build and run: tools/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private copy: the parser must never read past `size` (ASan checks the heap block). */
    uint8_t *copy = malloc(size + 1);
    memcpy(copy, data, size);
    struct gguf_file g;
    struct io_err e;
    if (gguf_parse(&g, copy, size, "fuzz.gguf", &e) != 0) {
        free(copy);
        return 0;
    }
    for (int64_t i = 0; i < g.n_kv; i++) {
        const struct gguf_kv *kv = &g.kv[i];
        int64_t v;
        double d;
        struct gguf_str s;
        gguf_get_int(&v, &g, kv->key, &e);
        gguf_get_float(&d, &g, kv->key, &e);
        gguf_get_string(&s, &g, kv->key, &e);
        if (kv->type == GGUF_TYPE_ARRAY)
            for (uint64_t j = 0; j < kv->n && j < 64; j++) {
                gguf_arr_int(&v, kv, j);
                gguf_arr_float(&d, kv, j);
            }
        if (gguf_find_kv(&g, kv->key) == NULL) abort();
    }
    for (int64_t i = 0; i < g.n_tensors; i++) {
        const struct gguf_tensor *t = &g.tensors[i];
        if (t->numel > (1 << 22)) continue;
        float *f = malloc((size_t)t->numel * sizeof *f + 1);
        gguf_tensor_to_f32(f, &g, t, &e);
        free(f);
    }
    struct gguf_model m;
    if (gguf_model_from_file(&m, &g, &e) == 0) {
        for (int s = 0; s < m.n_weights; s++) {
            const struct gguf_model_weight *w = &m.weights[s];
            if (!w->present) continue;
            int64_t n = w->shape[0] * (w->ndim == 2 ? w->shape[1] : 1);
            if (n > (1 << 22)) continue;
            float *f = malloc((size_t)n * sizeof *f + 1);
            gguf_model_weight_f32(f, &m, w, &e);
            free(f);
        }
        gguf_model_close(&m);
    }
    free(copy);
    return 0;
}
