/* model_source.c — see model_source.h. */
#include "io/model_source.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "io/file.h"

int model_source_open(struct model_source *s, const char *path, struct io_err *e) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    struct stat st;
    if (stat(path, &st) != 0)
        return io_fail(e, "%s: no such model (expected an HF model folder or a .gguf file)", path);
    if (S_ISDIR(st.st_mode)) {
        s->kind = MODEL_SOURCE_HF;
        if (model_files_open(&s->hf, path, e)) return -1;
        s->config = s->hf.config;
        snprintf(s->tokenizer_json, sizeof s->tokenizer_json, "%s/tokenizer.json", path);
        if (!file_exists(s->tokenizer_json)) s->tokenizer_json[0] = '\0';
        return 0;
    }
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    const size_t got = f ? fread(magic, 1, 4, f) : 0;
    if (f) fclose(f);
    if (got != 4 || memcmp(magic, "GGUF", 4) != 0)
        return io_fail(e, "%s: not a model (expected an HF model folder with config.json, or a GGUF file)", path);
    s->kind = MODEL_SOURCE_GGUF;
    if (gguf_model_open(&s->gguf, path, e)) return -1;
    s->config = s->gguf.config;
    return 0;
}

void model_source_close(struct model_source *s) {
    if (s->kind == MODEL_SOURCE_HF) model_files_close(&s->hf);
    else gguf_model_close(&s->gguf);
    memset(s, 0, sizeof *s);
}

int model_source_shape(const struct model_source *s, enum model_weight kind, int layer, int64_t shape[2]) {
    (void)layer;
    shape[1] = 1;
    return model_weight_shape(shape, &s->config, kind);
}

const struct bnb4_weight *model_source_bnb(const struct model_source *s, enum model_weight kind, int layer) {
    if (s->kind != MODEL_SOURCE_HF) return NULL;
    const struct model_weight_ref *w = model_files_get(&s->hf, kind, layer);
    return w ? w->bnb : NULL;
}

int model_source_is_bnb(const struct model_source *s, enum model_weight kind, int layer) {
    return model_source_bnb(s, kind, layer) != NULL;
}

int model_source_weight_f32(const struct model_source *s, enum model_weight kind, int layer, float *out,
                            struct io_err *e) {
    char name[128];
    model_weight_name(name, sizeof name, kind, layer);
    if (s->kind == MODEL_SOURCE_GGUF) {
        const struct gguf_model_weight *w = gguf_model_get(&s->gguf, kind, layer);
        if (!w || !w->present) return io_fail(e, "%s: the model has no weight %s", s->path, name);
        return gguf_model_weight_f32(out, &s->gguf, w, e);
    }
    const struct model_weight_ref *w = model_files_get(&s->hf, kind, layer);
    if (!w || !w->present) return io_fail(e, "%s: the model has no weight %s", s->path, name);
    if (w->bnb) return io_fail(e, "%s: %s is bitsandbytes 4-bit; dequantize it with the nf4 op", s->path, name);
    return model_weight_to_f32(out, w, e);
}
