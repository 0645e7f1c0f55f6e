/* gguf_model.c — a Llama-family model from a GGUF file: metadata → model_config, GGUF tensor
 * names → HF names, shape checks against the config, and HF-ordered fp32 weights (gguf.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "io/gguf.h"

/* ---- names ----------------------------------------------------------------------------------- */

struct name_map {
    const char *gguf; /* without the .weight/.bias suffix */
    enum model_weight weight, bias; /* bias MW_COUNT: no bias form */
};

static const struct name_map global_names[] = {
    {"token_embd", MW_EMBED, MW_COUNT},
    {"output_norm", MW_FINAL_NORM, MW_COUNT},
    {"output", MW_LM_HEAD, MW_COUNT},
};

static const struct name_map layer_names[] = {
    {"attn_norm", MW_ATTN_NORM, MW_COUNT}, {"attn_q", MW_Q, MW_Q_BIAS},  {"attn_k", MW_K, MW_K_BIAS},
    {"attn_v", MW_V, MW_V_BIAS},           {"attn_output", MW_O, MW_COUNT}, {"ffn_norm", MW_MLP_NORM, MW_COUNT},
    {"ffn_gate", MW_GATE, MW_COUNT},       {"ffn_up", MW_UP, MW_COUNT},  {"ffn_down", MW_DOWN, MW_COUNT},
};

/* (kind, layer) of a GGUF tensor name; -1 when not a Llama tensor. layer is -1 for globals. */
static int parse_name(const char *name, enum model_weight *kind, int *layer) {
    const char *dot = strrchr(name, '.');
    if (dot == NULL) return -1;
    int is_bias = strcmp(dot, ".bias") == 0;
    if (!is_bias && strcmp(dot, ".weight") != 0) return -1;
    size_t stem_len = (size_t)(dot - name);
    const char *stem = name;
    const struct name_map *table = global_names;
    size_t n_table = sizeof global_names / sizeof global_names[0];
    *layer = -1;
    if (strncmp(name, "blk.", 4) == 0) {
        const char *p = name + 4;
        long v = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 7) v = v * 10 + (*p++ - '0'), digits++;
        if (digits == 0 || *p != '.' || (digits > 1 && name[4] == '0')) return -1;
        *layer = (int)v;
        stem = p + 1;
        stem_len = (size_t)(dot - stem);
        table = layer_names;
        n_table = sizeof layer_names / sizeof layer_names[0];
    }
    for (size_t i = 0; i < n_table; i++) {
        if (strlen(table[i].gguf) != stem_len || strncmp(stem, table[i].gguf, stem_len) != 0) continue;
        enum model_weight k = is_bias ? table[i].bias : table[i].weight;
        if (k == MW_COUNT) return -1;
        *kind = k;
        return 0;
    }
    return -1;
}

int gguf_hf_name(char *buf, size_t cap, const char *gguf_name) {
    enum model_weight kind;
    int layer;
    if (parse_name(gguf_name, &kind, &layer) != 0) return -1;
    model_weight_name(buf, cap, kind, layer);
    return 0;
}

/* ---- config ---------------------------------------------------------------------------------- */

/* An integer key "<arch>.<key>" in [lo, hi]; an array of integers (per-layer values) must hold
 * one value. Absent: dflt when !required. */
static int arch_int(int *out, const struct gguf_file *g, const char *arch, const char *key, int required, int dflt,
                    int64_t lo, int64_t hi, struct io_err *e) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    const struct gguf_kv *kv = gguf_find_kv(g, full);
    if (kv == NULL) {
        if (required) return io_fail(e, "%s: the key '%s' is missing; a %s model needs it", g->file.path, full, arch);
        *out = dflt;
        return 0;
    }
    int64_t v = 0;
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->n == 0) return io_fail(e, "%s: '%s' is an empty array; expected an integer", g->file.path, full);
        for (uint64_t i = 0; i < kv->n; i++) {
            int64_t x;
            if (gguf_arr_int(&x, kv, i) != 0)
                return io_fail(e, "%s: '%s' is an array of %s; expected an integer (or one per layer)", g->file.path,
                               full, gguf_type_name(kv->arr_type));
            if (i == 0) v = x;
            if (x != v)
                return io_fail(e, "%s: '%s' varies per layer (%lld and %lld); refine needs one value for all layers",
                               g->file.path, full, (long long)v, (long long)x);
        }
    } else if (gguf_get_int(&v, g, full, e) != 0) {
        return -1;
    }
    if (v < lo || v > hi)
        return io_fail(e, "%s: '%s' is %lld; expected %lld..%lld", g->file.path, full, (long long)v, (long long)lo,
                       (long long)hi);
    *out = (int)v;
    return 0;
}

static int opt_token_id(int *out, const struct gguf_file *g, const char *key, int V, struct io_err *e) {
    *out = -1;
    if (gguf_find_kv(g, key) == NULL) return 0;
    int64_t v;
    if (gguf_get_int(&v, g, key, e) != 0) return -1;
    if (v < 0 || v >= V) return io_fail(e, "%s: '%s' is %lld; expected a token id in 0..%d", g->file.path, key, (long long)v, V - 1);
    *out = (int)v;
    return 0;
}

/* Llama 3.1+ conversions store the llama3 rope scaling as the per-frequency divisors of
 * rope_freqs.weight (llama.cpp convert_hf_to_gguf.py LlamaModel.generate_extra_tensors). Find
 * the Meta parameters that reproduce them (transformers _compute_llama3_parameters). */
static int llama3_from_rope_freqs(struct model_config *c, const struct gguf_file *g, const struct gguf_tensor *t,
                                  struct io_err *e) {
    int half = c->D / 2;
    if (t->type != GGML_TYPE_F32 || t->ndim != 1 || t->ne[0] != half)
        return io_fail(e, "%s: 'rope_freqs.weight' is %s with %lld elements; expected F32 [%d] (head_dim/2)",
                       g->file.path, ggml_type_name(t->type), (long long)t->numel, half);
    float *got = malloc((size_t)half * sizeof *got);
    CHECK(got != NULL, "out of memory");
    if (gguf_tensor_to_f32(got, g, t, e) != 0) {
        free(got);
        return -1;
    }
    static const float factors[] = {8.0f, 32.0f, 16.0f, 4.0f};
    const double low = 1.0, high = 4.0, orig = 8192.0;
    for (size_t k = 0; k < sizeof factors / sizeof factors[0]; k++) {
        double factor = factors[k];
        int ok = 1;
        for (int i = 0; i < half && ok; i++) {
            double freq = 1.0 / pow((double)c->rope_theta, (2.0 * i) / c->D);
            double wavelen = 2.0 * 3.14159265358979323846 / freq, want;
            if (wavelen < orig / high) {
                want = 1.0;
            } else if (wavelen > orig / low) {
                want = factor;
            } else {
                double smooth = (orig / wavelen - low) / (high - low);
                want = 1.0 / ((1.0 - smooth) / factor + smooth);
            }
            ok = fabs(got[i] - want) <= 1e-4 * want;
        }
        if (ok) {
            free(got);
            c->rope_scaling.kind = ROPE_SCALING_LLAMA3;
            c->rope_scaling.factor = (float)factor;
            c->rope_scaling.low_freq_factor = (float)low;
            c->rope_scaling.high_freq_factor = (float)high;
            c->rope_scaling.original_max_position_embeddings = (int)orig;
            return 0;
        }
    }
    free(got);
    return io_fail(e, "%s: 'rope_freqs.weight' holds rope factors that are not the llama3 scaling (factor 4, 8, 16 or 32, "
                   "low_freq_factor 1, high_freq_factor 4, original context 8192); load the HF model folder instead",
                   g->file.path);
}

int gguf_config(struct model_config *c, const struct gguf_file *g, struct io_err *e) {
    memset(c, 0, sizeof *c);
    const char *path = g->file.path;
    struct gguf_str a;
    if (gguf_get_string(&a, g, "general.architecture", e) != 0) return -1;
    char arch[32];
    if (a.len >= sizeof arch || !((a.len == 5 && memcmp(a.ptr, "llama", 5) == 0) ||
                                  (a.len == 5 && memcmp(a.ptr, "qwen2", 5) == 0)))
        return io_fail(e, "%s: general.architecture is \"%.*s\"; refine loads \"llama\" and \"qwen2\" GGUF files", path,
                       (int)(a.len > 64 ? 64 : a.len), a.ptr);
    memcpy(arch, a.ptr, (size_t)a.len);
    arch[a.len] = '\0';
    snprintf(c->model_type, sizeof c->model_type, "%s", arch);
    c->attention_bias = strcmp(arch, "qwen2") == 0;

    if (arch_int(&c->C, g, arch, "embedding_length", 1, 0, 1, 1 << 17, e) != 0 ||
        arch_int(&c->F, g, arch, "feed_forward_length", 1, 0, 1, 1 << 20, e) != 0 ||
        arch_int(&c->L, g, arch, "block_count", 1, 0, 1, 1024, e) != 0 ||
        arch_int(&c->H, g, arch, "attention.head_count", 1, 0, 1, 1024, e) != 0 ||
        arch_int(&c->KVH, g, arch, "attention.head_count_kv", 0, c->H, 1, 1024, e) != 0 ||
        arch_int(&c->D, g, arch, "attention.key_length", 0, c->C / c->H, 1, 1024, e) != 0 ||
        arch_int(&c->max_position_embeddings, g, arch, "context_length", 0, 2048, 1, INT32_MAX, e) != 0)
        return -1;
    int dv, rot;
    if (arch_int(&dv, g, arch, "attention.value_length", 0, c->D, 1, 1024, e) != 0 ||
        arch_int(&rot, g, arch, "rope.dimension_count", 0, c->D, 1, 1024, e) != 0)
        return -1;
    if (dv != c->D)
        return io_fail(e, "%s: %s.attention.value_length %d differs from key_length %d; refine needs them equal", path,
                       arch, dv, c->D);
    if (rot != c->D)
        return io_fail(e, "%s: %s.rope.dimension_count is %d but the head dimension is %d; refine rotates whole heads",
                       path, arch, rot, c->D);

    char key[128];
    double v;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if (gguf_get_float(&v, g, key, e) != 0) return -1;
    c->rms_norm_eps = (float)v;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    c->rope_theta = 10000.0f;
    if (gguf_find_kv(g, key) != NULL) {
        if (gguf_get_float(&v, g, key, e) != 0) return -1;
        c->rope_theta = (float)v;
    }
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1) || !(c->rope_theta > 1 && c->rope_theta < 1e12f))
        return io_fail(e, "%s: rms epsilon %g or rope freq_base %g out of range", path, (double)c->rms_norm_eps,
                       (double)c->rope_theta);
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_find_kv(g, key) != NULL) {
        struct gguf_str s;
        if (gguf_get_string(&s, g, key, e) != 0) return -1;
        if (!(s.len == 4 && memcmp(s.ptr, "none", 4) == 0))
            return io_fail(e, "%s: '%s' is \"%.*s\"; refine supports no rope scaling or llama3's", path, key,
                           (int)(s.len > 32 ? 32 : s.len), s.ptr);
    }

    /* Vocabulary: the token list; else <arch>.vocab_size; else the embedding's rows. */
    const struct gguf_kv *tokens = gguf_find_kv(g, "tokenizer.ggml.tokens");
    const struct gguf_tensor *embd = gguf_find_tensor(g, "token_embd.weight");
    int64_t V = -1;
    if (tokens != NULL) {
        if (tokens->type != GGUF_TYPE_ARRAY || tokens->arr_type != GGUF_TYPE_STRING)
            return io_fail(e, "%s: 'tokenizer.ggml.tokens' is %s; expected an array of STRING", path,
                           gguf_type_name(tokens->type));
        V = (int64_t)tokens->n;
    }
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    if (gguf_find_kv(g, key) != NULL) {
        int64_t vs;
        if (gguf_get_int(&vs, g, key, e) != 0) return -1;
        if (V >= 0 && vs != V)
            return io_fail(e, "%s: '%s' is %lld but tokenizer.ggml.tokens holds %lld tokens", path, key, (long long)vs,
                           (long long)V);
        V = vs;
    }
    if (V < 0 && embd != NULL && embd->ndim == 2) V = embd->ne[1];
    if (V < 1 || V > (1 << 23))
        return io_fail(e, "%s: the vocabulary size is %lld (from the token list, %s or token_embd.weight); expected "
                       "1..%d", path, (long long)V, key, 1 << 23);
    c->V = (int)V;

    c->tie_word_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    if (opt_token_id(&c->bos_token_id, g, "tokenizer.ggml.bos_token_id", c->V, e) != 0 ||
        opt_token_id(&c->eos_token_ids[0], g, "tokenizer.ggml.eos_token_id", c->V, e) != 0 ||
        opt_token_id(&c->pad_token_id, g, "tokenizer.ggml.padding_token_id", c->V, e) != 0)
        return -1;
    c->n_eos = c->eos_token_ids[0] >= 0 ? 1 : 0;
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "float32");

    const struct gguf_tensor *rf = gguf_find_tensor(g, "rope_freqs.weight");
    if (rf != NULL && llama3_from_rope_freqs(c, g, rf, e) != 0) return -1;
    if (config_validate(c, e) != 0) return io_fail_context(e, "%s", path);
    return 0;
}

/* ---- binding --------------------------------------------------------------------------------- */

static int is_layer_kind(enum model_weight k) { return k >= MW_ATTN_NORM && k < MW_COUNT; }

const struct gguf_model_weight *gguf_model_get(const struct gguf_model *m, enum model_weight kind, int layer) {
    if ((int)kind < 0 || kind >= MW_COUNT) return NULL;
    if (is_layer_kind(kind) && (layer < 0 || layer >= m->config.L)) return NULL;
    const struct gguf_model_weight *w = &m->weights[model_weight_slot(kind, layer)];
    return w->present ? w : NULL;
}

const struct gguf_model_weight *gguf_model_find(const struct gguf_model *m, const char *hf_name) {
    if (strcmp(hf_name, "lm_head.weight") == 0) return gguf_model_get(m, MW_LM_HEAD, -1);
    for (int s = 0; s < m->n_weights; s++)
        if (m->weights[s].present && strcmp(m->weights[s].name, hf_name) == 0) return &m->weights[s];
    return NULL;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *s) {
    if (ndim == 1) snprintf(buf, cap, "[%lld]", (long long)s[0]);
    else snprintf(buf, cap, "[%lld, %lld]", (long long)s[0], (long long)s[1]);
}

static int bind(struct gguf_model *m, struct io_err *e) {
    const struct gguf_file *g = &m->g;
    const struct model_config *c = &m->config;
    for (int s = 0; s < m->n_weights; s++) {
        struct gguf_model_weight *w = &m->weights[s];
        w->kind = model_weight_of_slot(s, &w->layer);
        w->ndim = model_weight_shape(w->shape, c, w->kind);
        w->present = w->ndim > 0;
        if (w->present) model_weight_name(w->name, sizeof w->name, w->kind, w->layer);
        w->rope_permuted = strcmp(c->model_type, "llama") == 0 &&
                           (w->kind == MW_Q || w->kind == MW_K || w->kind == MW_Q_BIAS || w->kind == MW_K_BIAS);
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        if (strcmp(t->name, "rope_freqs.weight") == 0) continue; /* read by gguf_config */
        enum model_weight kind;
        int layer;
        if (parse_name(t->name, &kind, &layer) != 0)
            return io_fail(e, "%s: tensor '%s' is not part of a %s model (expected token_embd, output_norm, output and "
                           "blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down})",
                           g->file.path, t->name, c->model_type);
        if (layer >= c->L)
            return io_fail(e, "%s: tensor '%s' belongs to layer %d but %s.block_count is %d", g->file.path, t->name,
                           layer, c->model_type, c->L);
        struct gguf_model_weight *w = &m->weights[model_weight_slot(kind, layer)];
        if (!w->present)
            return io_fail(e, "%s: tensor '%s' is a bias, which a %s model does not have", g->file.path, t->name,
                           c->model_type);
        if (t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16 &&
            t->type != GGML_TYPE_Q8_0 && t->type != GGML_TYPE_Q4_0 && t->type != GGML_TYPE_Q4_1)
            return io_fail(e, "%s: tensor '%s' has type %s; refine loads F32, F16, BF16, Q8_0, Q4_0 and Q4_1 GGUF "
                           "tensors (re-quantize the model, e.g. to Q8_0)", g->file.path, t->name, ggml_type_name(t->type));
        int64_t hf[2] = {t->ne[t->ndim - 1], t->ndim == 2 ? t->ne[0] : 0};
        if (t->ndim != w->ndim || hf[0] != w->shape[0] || (w->ndim == 2 && hf[1] != w->shape[1])) {
            char want[48], got[80];
            shape_str(want, sizeof want, w->ndim, w->shape);
            if (t->ndim <= 2) {
                int64_t s2[2] = {t->ndim == 2 ? t->ne[1] : t->ne[0], t->ne[0]};
                shape_str(got, sizeof got, t->ndim, s2);
            } else {
                snprintf(got, sizeof got, "%d dimensions", t->ndim);
            }
            return io_fail(e, "%s: tensor '%s' (%s) has shape %s (rows, columns) but the metadata implies %s", g->file.path,
                           t->name, w->name, got, want);
        }
        w->t = t;
    }
    int missing = 0;
    char first[128] = "";
    for (int s = 0; s < m->n_weights; s++) {
        struct gguf_model_weight *w = &m->weights[s];
        if (!w->present || w->t != NULL || (w->kind == MW_LM_HEAD && c->tie_word_embeddings)) continue;
        if (missing++ == 0) snprintf(first, sizeof first, "%s", w->name);
    }
    if (missing > 0)
        return io_fail(e, "%s: %d tensor%s that the metadata implies %s missing (first: the GGUF tensor for %s)",
                       g->file.path, missing, missing == 1 ? "" : "s", missing == 1 ? "is" : "are", first);
    if (c->tie_word_embeddings) {
        struct gguf_model_weight *head = &m->weights[MW_LM_HEAD];
        *head = m->weights[MW_EMBED];
        head->kind = MW_LM_HEAD;
        m->lm_head_tied = 1;
    }
    return 0;
}

int gguf_model_from_file(struct gguf_model *m, struct gguf_file *g, struct io_err *e) {
    memset(m, 0, sizeof *m);
    m->g = *g;
    memset(g, 0, sizeof *g);
    if (gguf_config(&m->config, &m->g, e) != 0) {
        gguf_model_close(m);
        return -1;
    }
    m->n_weights = MW_N_GLOBAL + m->config.L * MW_N_LAYER;
    m->weights = calloc((size_t)m->n_weights, sizeof *m->weights);
    CHECK(m->weights != NULL, "out of memory");
    if (bind(m, e) != 0) {
        gguf_model_close(m);
        return -1;
    }
    return 0;
}

int gguf_model_open(struct gguf_model *m, const char *path, struct io_err *e) {
    struct gguf_file g;
    memset(m, 0, sizeof *m);
    if (gguf_open(&g, path, e) != 0) return -1;
    return gguf_model_from_file(m, &g, e);
}

void gguf_model_close(struct gguf_model *m) {
    gguf_close(&m->g);
    free(m->weights);
    memset(m, 0, sizeof *m);
}

int gguf_model_weight_f32(float *out, const struct gguf_model *m, const struct gguf_model_weight *w,
                          struct io_err *e) {
    CHECK(w != NULL && w->present && w->t != NULL, "weight not bound");
    if (!w->rope_permuted) return gguf_tensor_to_f32(out, &m->g, w->t, e);
    int64_t rows = w->shape[0], cols = w->ndim == 2 ? w->shape[1] : 1;
    int D = m->config.D, half = D / 2;
    CHECK(rows % D == 0 && D % 2 == 0, "rows %lld, head_dim %d", (long long)rows, D);
    float *tmp = malloc((size_t)(rows * cols) * sizeof *tmp);
    CHECK(tmp != NULL, "out of memory");
    if (gguf_tensor_to_f32(tmp, &m->g, w->t, e) != 0) {
        free(tmp);
        return -1;
    }
    for (int64_t h = 0; h < rows / D; h++)
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < half; i++)
                memcpy(out + (h * D + s * half + i) * cols, tmp + (h * D + 2 * i + s) * cols, (size_t)cols * sizeof *out);
    free(tmp);
    return 0;
}
