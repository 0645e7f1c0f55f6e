/* model_source.c — see model_source.h. */
#include "io/model_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/file.h"
#include "io/sha256.h"

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

/* ---- tokenizer ------------------------------------------------------------------------------ */

static char *dup_str(const struct gguf_str *s) {
    char *p = (char *)malloc(s->len + 1);
    if (p) {
        memcpy(p, s->ptr, s->len);
        p[s->len] = '\0';
    }
    return p;
}

struct gguf_tok_arrays {
    const char **tokens, **merges;
    uint64_t *token_lens, *merge_lens;
    int32_t *types;
    char *model, *pre, *chat;
};

static void gguf_tok_free(struct gguf_tok_arrays *a) {
    free(a->tokens), free(a->merges), free(a->token_lens), free(a->merge_lens), free(a->types);
    free(a->model), free(a->pre), free(a->chat);
    memset(a, 0, sizeof *a);
}

/* Fills kv (pointers into the mapping and into a) from the GGUF metadata. */
static int gguf_tok_kv(struct tokenizer_gguf_kv *kv, struct gguf_tok_arrays *a, const struct gguf_file *g,
                       const char *path, struct io_err *e) {
    memset(kv, 0, sizeof *kv);
    memset(a, 0, sizeof *a);
    kv->source = path;
    struct gguf_str str;
    /* gguf_get_* name the file in their messages already */
    if (gguf_get_string(&str, g, "tokenizer.ggml.model", e)) return -1;
    kv->model = a->model = dup_str(&str);
    if (gguf_find_kv(g, "tokenizer.ggml.pre")) {
        if (gguf_get_string(&str, g, "tokenizer.ggml.pre", e)) return -1;
        kv->pre = a->pre = dup_str(&str);
    }
    const struct gguf_kv *tk = gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!tk || tk->type != GGUF_TYPE_ARRAY || !tk->strs)
        return io_fail(e, "%s: no tokenizer.ggml.tokens string array", path);
    kv->n_tokens = tk->n;
    a->tokens = (const char **)calloc(tk->n, sizeof *a->tokens);
    a->token_lens = (uint64_t *)calloc(tk->n, sizeof *a->token_lens);
    if (!a->tokens || !a->token_lens) return io_fail(e, "out of memory");
    for (uint64_t i = 0; i < tk->n; i++) a->tokens[i] = tk->strs[i].ptr, a->token_lens[i] = tk->strs[i].len;
    kv->tokens = a->tokens;
    kv->token_lens = a->token_lens;
    const struct gguf_kv *ty = gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (ty) {
        if (ty->type != GGUF_TYPE_ARRAY || ty->n != tk->n)
            return io_fail(e, "%s: tokenizer.ggml.token_type has %llu entries for %llu tokens", path,
                           (unsigned long long)ty->n, (unsigned long long)tk->n);
        a->types = (int32_t *)calloc(ty->n, sizeof *a->types);
        if (!a->types) return io_fail(e, "out of memory");
        for (uint64_t i = 0; i < ty->n; i++) {
            int64_t v;
            if (gguf_arr_int(&v, ty, i)) return io_fail(e, "%s: tokenizer.ggml.token_type is not integers", path);
            a->types[i] = (int32_t)v;
        }
        kv->token_type = a->types;
    }
    const struct gguf_kv *mg = gguf_find_kv(g, "tokenizer.ggml.merges");
    if (mg) {
        if (mg->type != GGUF_TYPE_ARRAY || !mg->strs) return io_fail(e, "%s: tokenizer.ggml.merges is not strings", path);
        kv->n_merges = mg->n;
        a->merges = (const char **)calloc(mg->n ? mg->n : 1, sizeof *a->merges);
        a->merge_lens = (uint64_t *)calloc(mg->n ? mg->n : 1, sizeof *a->merge_lens);
        if (!a->merges || !a->merge_lens) return io_fail(e, "out of memory");
        for (uint64_t i = 0; i < mg->n; i++) a->merges[i] = mg->strs[i].ptr, a->merge_lens[i] = mg->strs[i].len;
        kv->merges = a->merges;
        kv->merge_lens = a->merge_lens;
    }
    int64_t v;
    kv->bos_id = kv->eos_id = -1;
    kv->add_bos = -1;
    /* present but not an integer: an error, not a silent "absent" */
    if (gguf_find_kv(g, "tokenizer.ggml.bos_token_id")) {
        if (gguf_get_int(&v, g, "tokenizer.ggml.bos_token_id", e)) return -1;
        kv->bos_id = v;
    }
    if (gguf_find_kv(g, "tokenizer.ggml.eos_token_id")) {
        if (gguf_get_int(&v, g, "tokenizer.ggml.eos_token_id", e)) return -1;
        kv->eos_id = v;
    }
    if (gguf_find_kv(g, "tokenizer.ggml.add_bos_token")) {
        if (gguf_get_int(&v, g, "tokenizer.ggml.add_bos_token", e)) return -1;
        kv->add_bos = (int)v;
    }
    if (gguf_find_kv(g, "tokenizer.chat_template")) {
        if (gguf_get_string(&str, g, "tokenizer.chat_template", e)) return -1;
        kv->chat_template = a->chat = dup_str(&str);
    }
    return 0;
}

/* A token id the model's embedding has no row for would be an out-of-bounds read on the device:
 * every id the tokenizer can emit, and the BOS/EOS the data pipeline inserts, must be below V,
 * and those two must be tokens of the vocabulary (not a gap between ids). */
int model_source_check_tokenizer(const struct model_source *s, const struct tokenizer *t, struct io_err *e) {
    const char *src = s->kind == MODEL_SOURCE_HF ? s->tokenizer_json : s->path;
    const uint32_t V = (uint32_t)s->config.V, Vt = tokenizer_vocab_size(t);
    if (Vt > V) {
        uint32_t id = Vt - 1;
        while (id > V && tokenizer_id_to_token(t, id, NULL) == NULL) id--;
        size_t n = 0;
        const char *str = tokenizer_id_to_token(t, id, &n);
        return io_fail(e, "%s: the tokenizer has token id %u ('%.*s') but the model's vocabulary has %u ids (vocab_size): "
                          "the tokenizer does not belong to this model",
                       src, id, (int)(n > 40 ? 40 : n), str ? str : "", V);
    }
    if (tokenizer_adds_bos(t) && tokenizer_id_to_token(t, (uint32_t)tokenizer_bos_id(t), NULL) == NULL)
        return io_fail(e, "%s: the beginning-of-sequence id %lld is not a token of the vocabulary", src,
                       (long long)tokenizer_bos_id(t));
    const int64_t eos = s->config.n_eos > 0 ? s->config.eos_token_ids[0] : tokenizer_eos_id(t);
    if (eos >= 0 && (eos >= (int64_t)V || tokenizer_id_to_token(t, (uint32_t)eos, NULL) == NULL))
        return io_fail(e, "%s: the end-of-sequence id %lld (%s) is not a token of the vocabulary", src, (long long)eos,
                       s->config.n_eos > 0 ? "the model's eos_token_id" : "the tokenizer's");
    return 0;
}

struct tokenizer *model_source_tokenizer(const struct model_source *s, struct io_err *e) {
    struct tokenizer *t = NULL;
    if (s->kind == MODEL_SOURCE_HF) {
        if (!s->tokenizer_json[0]) {
            io_fail(e, "%s: the model folder has no tokenizer.json", s->path);
            return NULL;
        }
        t = tokenizer_load(s->tokenizer_json, e);
    } else {
        struct tokenizer_gguf_kv kv;
        struct gguf_tok_arrays a;
        if (gguf_tok_kv(&kv, &a, &s->gguf.g, s->path, e) == 0) t = tokenizer_from_gguf_kv(&kv, e);
        gguf_tok_free(&a);
    }
    if (t != NULL && model_source_check_tokenizer(s, t, e) != 0) {
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

int model_source_files(const struct model_source *s, char (*paths)[MODEL_SOURCE_PATH_MAX], int cap) {
    int n = 0;
    if (s->kind == MODEL_SOURCE_GGUF) {
        if (n < cap) snprintf(paths[n], MODEL_SOURCE_PATH_MAX, "%s", s->path);
        return 1;
    }
    static const char *const k_side[] = {"config.json", "model.safetensors.index.json", "tokenizer.json",
                                         "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof k_side / sizeof *k_side; i++) {
        char p[MODEL_SOURCE_PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", s->path, k_side[i]);
        if (!file_exists(p)) continue;
        if (n < cap) snprintf(paths[n], MODEL_SOURCE_PATH_MAX, "%s", p);
        n++;
    }
    for (int i = 0; i < s->hf.ck.n_shards; i++) {
        if (n < cap) snprintf(paths[n], MODEL_SOURCE_PATH_MAX, "%s/%s", s->path, s->hf.ck.shard_names[i]);
        n++;
    }
    return n;
}

static void hash_file_if_present(struct sha256 *h, const char *path) {
    struct mapped_file m;
    struct io_err ignored;
    if (!file_exists(path) || map_file(&m, path, &ignored)) return;
    if (m.size) sha256_update(h, m.data, m.size);
    unmap_file(&m);
}

int model_source_tokenizer_identity(const struct model_source *s, char hex[65], struct io_err *e) {
    struct sha256 h;
    sha256_init(&h);
    if (s->kind == MODEL_SOURCE_HF) {
        if (!s->tokenizer_json[0]) return io_fail(e, "%s: the model folder has no tokenizer.json", s->path);
        hash_file_if_present(&h, s->tokenizer_json);
        char cfg[1200];
        snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", s->path);
        hash_file_if_present(&h, cfg);
    } else {
        struct tokenizer_gguf_kv kv;
        struct gguf_tok_arrays a;
        if (gguf_tok_kv(&kv, &a, &s->gguf.g, s->path, e)) {
            gguf_tok_free(&a);
            return -1;
        }
        const char *fields[] = {kv.model, kv.pre ? kv.pre : "", kv.chat_template ? kv.chat_template : ""};
        for (int i = 0; i < 3; i++) sha256_update(&h, fields[i], strlen(fields[i]) + 1);
        for (size_t i = 0; i < kv.n_tokens; i++) {
            sha256_update(&h, kv.tokens[i], kv.token_lens[i]);
            sha256_update(&h, "", 1);
            if (kv.token_type) sha256_update(&h, &kv.token_type[i], sizeof kv.token_type[i]);
        }
        for (size_t i = 0; i < kv.n_merges; i++) {
            sha256_update(&h, kv.merges[i], kv.merge_lens[i]);
            sha256_update(&h, "", 1);
        }
        const int64_t ids[3] = {kv.bos_id, kv.eos_id, kv.add_bos};
        sha256_update(&h, ids, sizeof ids);
        gguf_tok_free(&a);
    }
    uint8_t d[32];
    sha256_final(&h, d);
    sha256_hex(d, hex);
    return 0;
}
