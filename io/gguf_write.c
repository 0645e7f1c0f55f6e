/* gguf_write.c — the GGUF writer, the conversions, and the model file (gguf_write.h). */
#include "io/gguf_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "io/file.h"

/* A growable byte buffer for the header. */
struct gbuf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct gbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 1024;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p != NULL, "out of memory (%zu bytes)", b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(struct gbuf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void put_u64(struct gbuf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, 8);
}

static void put_str(struct gbuf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}

struct wtensor {
    char *name;
    enum ggml_type type;
    int ndim;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;
    size_t nbytes;
};

struct gguf_writer {
    struct gbuf kv; /* the encoded key-values */
    int64_t n_kv;
    struct wtensor *t;
    int64_t n_t, cap_t;
};

struct gguf_writer *gguf_writer_new(void) {
    struct gguf_writer *w = calloc(1, sizeof *w);
    CHECK(w != NULL, "out of memory");
    return w;
}

void gguf_writer_free(struct gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    for (int64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

static void key(struct gguf_writer *w, const char *k, enum gguf_type type) {
    put_str(&w->kv, k, strlen(k));
    put_u32(&w->kv, (uint32_t)type);
    w->n_kv++;
}

void gguf_set_str(struct gguf_writer *w, const char *k, const char *value) {
    key(w, k, GGUF_TYPE_STRING);
    put_str(&w->kv, value, strlen(value));
}

void gguf_set_u32(struct gguf_writer *w, const char *k, uint32_t value) {
    key(w, k, GGUF_TYPE_UINT32);
    put_u32(&w->kv, value);
}

void gguf_set_i32(struct gguf_writer *w, const char *k, int32_t value) {
    key(w, k, GGUF_TYPE_INT32);
    put_u32(&w->kv, (uint32_t)value);
}

void gguf_set_f32(struct gguf_writer *w, const char *k, float value) {
    uint32_t u;
    memcpy(&u, &value, 4);
    key(w, k, GGUF_TYPE_FLOAT32);
    put_u32(&w->kv, u);
}

void gguf_set_bool(struct gguf_writer *w, const char *k, int value) {
    const uint8_t b = value ? 1 : 0;
    key(w, k, GGUF_TYPE_BOOL);
    put(&w->kv, &b, 1);
}

void gguf_set_arr_str(struct gguf_writer *w, const char *k, const char *const *strs, const size_t *lens, size_t n) {
    key(w, k, GGUF_TYPE_ARRAY);
    put_u32(&w->kv, GGUF_TYPE_STRING);
    put_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++) put_str(&w->kv, strs[i], lens ? lens[i] : strlen(strs[i]));
}

void gguf_set_arr_i32(struct gguf_writer *w, const char *k, const int32_t *v, size_t n) {
    key(w, k, GGUF_TYPE_ARRAY);
    put_u32(&w->kv, GGUF_TYPE_INT32);
    put_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++) put_u32(&w->kv, (uint32_t)v[i]);
}

void gguf_set_arr_f32(struct gguf_writer *w, const char *k, const float *v, size_t n) {
    key(w, k, GGUF_TYPE_ARRAY);
    put_u32(&w->kv, GGUF_TYPE_FLOAT32);
    put_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        put_u32(&w->kv, u);
    }
}

void gguf_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type, int ndim, const int64_t *ne,
                     const void *data, size_t nbytes) {
    CHECK(ndim >= 1 && ndim <= GGUF_MAX_DIMS, "tensor %s: %d dims", name, ndim);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= ne[d];
    size_t want = 0;
    CHECK(ggml_row_bytes(&want, type, numel) == 0 && want == nbytes && ne[0] % ggml_block_size(type) == 0,
          "tensor %s: %zu bytes for %lld elements of %s", name, nbytes, (long long)numel, ggml_type_name(type));
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 64;
        w->t = realloc(w->t, (size_t)w->cap_t * sizeof *w->t);
        CHECK(w->t != NULL, "out of memory");
    }
    struct wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    CHECK(t->name != NULL, "out of memory");
    t->type = type;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->ne[d] = ne[d];
    t->data = data;
    t->nbytes = nbytes;
}

static size_t align_up(size_t x) { return (x + GGUF_DEFAULT_ALIGNMENT - 1) / GGUF_DEFAULT_ALIGNMENT * GGUF_DEFAULT_ALIGNMENT; }

int gguf_writer_write(struct gguf_writer *w, const char *path, struct io_err *e) {
    struct gbuf h = {0};
    put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, (uint64_t)w->n_t);
    put_u64(&h, (uint64_t)w->n_kv);
    put(&h, w->kv.p, w->kv.n);
    size_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        put_str(&h, t->name, strlen(t->name));
        put_u32(&h, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) put_u64(&h, (uint64_t)t->ne[d]);
        put_u32(&h, (uint32_t)t->type);
        put_u64(&h, off);
        off = align_up(off + t->nbytes);
    }
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT] = {0};
    const size_t hpad = align_up(h.n) - h.n;
    struct file_part *parts = calloc((size_t)(2 * w->n_t + 2), sizeof *parts);
    CHECK(parts != NULL, "out of memory");
    int np = 0;
    parts[np++] = (struct file_part){h.p, h.n};
    parts[np++] = (struct file_part){zeros, hpad};
    for (int64_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        parts[np++] = (struct file_part){t->data, t->nbytes};
        if (i + 1 < w->n_t) parts[np++] = (struct file_part){zeros, align_up(t->nbytes) - t->nbytes};
    }
    const int rc = write_file_atomic_parts(path, parts, np, e);
    free(parts);
    free(h.p);
    return rc;
}

/* ---- conversions ------------------------------------------------------------------------------ */

uint16_t gguf_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u); /* NaN: a quiet NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* ≥ 65520 rounds to infinity */
    if (a < 0x38800000u) {                                     /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;            /* below 2^-25: rounds to 0 (ties too) */
        const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
        const int shift = 126 - (int)(a >> 23); /* 14..24: value = m·2^(e−150), f16 unit 2^-24 */
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a - 0x38000000u; /* rebias 127 → 15 (exponent field − 112) */
    const uint32_t rem = r & 0x1FFFu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

void gguf_quantize_f16(uint16_t *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = gguf_f32_to_f16(x[i]);
}

void gguf_quantize_bf16(uint16_t *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
            out[i] = (uint16_t)((u >> 16) | 64u); /* a quiet NaN */
            continue;
        }
        out[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
}

void gguf_quantize_q8_0(uint8_t *out, const float *x, int64_t n) {
    CHECK(n % 32 == 0, "Q8_0 of %lld values", (long long)n);
    for (int64_t b = 0; b < n / 32; b++, out += 34) {
        const float *v = x + 32 * b;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = gguf_f32_to_f16(d);
        out[0] = (uint8_t)dh, out[1] = (uint8_t)(dh >> 8);
        for (int j = 0; j < 32; j++) out[2 + j] = (uint8_t)(int8_t)roundf(v[j] * id);
    }
}

/* ---- the model -------------------------------------------------------------------------------- */

static const char *const k_layer_gguf[MW_COUNT] = {
    [MW_ATTN_NORM] = "attn_norm", [MW_Q] = "attn_q.weight", [MW_K] = "attn_k.weight", [MW_V] = "attn_v.weight",
    [MW_O] = "attn_output.weight", [MW_Q_BIAS] = "attn_q.bias", [MW_K_BIAS] = "attn_k.bias",
    [MW_V_BIAS] = "attn_v.bias", [MW_MLP_NORM] = "ffn_norm", [MW_GATE] = "ffn_gate.weight",
    [MW_UP] = "ffn_up.weight", [MW_DOWN] = "ffn_down.weight",
};

static void gguf_name(char *buf, size_t cap, enum model_weight kind, int layer) {
    switch (kind) {
    case MW_EMBED: snprintf(buf, cap, "token_embd.weight"); return;
    case MW_FINAL_NORM: snprintf(buf, cap, "output_norm.weight"); return;
    case MW_LM_HEAD: snprintf(buf, cap, "output.weight"); return;
    case MW_ATTN_NORM:
    case MW_MLP_NORM: snprintf(buf, cap, "blk.%d.%s.weight", layer, k_layer_gguf[kind]); return;
    default: snprintf(buf, cap, "blk.%d.%s", layer, k_layer_gguf[kind]); return;
    }
}

/* llama.cpp's row order for q/k (and their biases): GGUF row h·D + 2i + s = HF row h·D + s·D/2 + i. */
static void permute_rows(float *dst, const float *src, int64_t rows, int64_t cols, int D) {
    const int half = D / 2;
    for (int64_t h = 0; h < rows / D; h++)
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < half; i++)
                memcpy(dst + (h * D + 2 * i + s) * cols, src + (h * D + s * half + i) * cols, (size_t)cols * 4);
}

/* llama3 rope factors (convert_hf_to_gguf.py LlamaModel.generate_extra_tensors), double. */
static void llama3_factors(float *out, const struct model_config *c) {
    const double factor = c->rope_scaling.factor, low = c->rope_scaling.low_freq_factor,
                 high = c->rope_scaling.high_freq_factor, orig = c->rope_scaling.original_max_position_embeddings;
    for (int i = 0; i < c->D / 2; i++) {
        const double freq = 1.0 / pow((double)c->rope_theta, (2.0 * i) / c->D), wavelen = 2.0 * M_PI / freq;
        if (wavelen < orig / high) {
            out[i] = 1.0f;
        } else if (wavelen > orig / low) {
            out[i] = (float)factor;
        } else {
            const double smooth = (orig / wavelen - low) / (high - low);
            out[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

int gguf_write_model(const char *path, const struct model_config *c, const struct tokenizer *tok, enum ggml_type type,
                     const char *name, gguf_weight_fn weight, void *ctx, struct io_err *e) {
    CHECK(type == GGML_TYPE_F16 || type == GGML_TYPE_BF16 || type == GGML_TYPE_Q8_0, "GGUF model type %d", (int)type);
    const int qwen2 = strcmp(c->model_type, "qwen2") == 0;
    const char *arch = qwen2 ? "qwen2" : "llama";
    if (c->rope_scaling.kind != ROPE_SCALING_NONE && c->rope_scaling.kind != ROPE_SCALING_LLAMA3)
        return io_fail(e, "GGUF export: the model's rope scaling has no GGUF form here");
    struct gguf_writer *w = gguf_writer_new();
    char k[128];
    gguf_set_str(w, "general.architecture", arch);
    gguf_set_str(w, "general.name", name && name[0] ? name : "refine");
    gguf_set_u32(w, "general.file_type", type == GGML_TYPE_F16 ? 1u : type == GGML_TYPE_BF16 ? 32u : 7u);
    gguf_set_u32(w, "general.quantization_version", 2);
#define ARCH_U32(key, v) (snprintf(k, sizeof k, "%s." key, arch), gguf_set_u32(w, k, (uint32_t)(v)))
#define ARCH_F32(key, v) (snprintf(k, sizeof k, "%s." key, arch), gguf_set_f32(w, k, (float)(v)))
    ARCH_U32("context_length", c->max_position_embeddings);
    ARCH_U32("embedding_length", c->C);
    ARCH_U32("feed_forward_length", c->F);
    ARCH_U32("block_count", c->L);
    ARCH_U32("attention.head_count", c->H);
    ARCH_U32("attention.head_count_kv", c->KVH);
    ARCH_U32("attention.key_length", c->D);
    ARCH_U32("attention.value_length", c->D);
    ARCH_U32("rope.dimension_count", c->D);
    ARCH_F32("rope.freq_base", c->rope_theta);
    ARCH_F32("attention.layer_norm_rms_epsilon", c->rms_norm_eps);
    ARCH_U32("vocab_size", c->V);
#undef ARCH_U32
#undef ARCH_F32
    int rc = tokenizer_gguf_metadata(tok, w, (uint32_t)c->V, e);
    /* the config's eos where the tokenizer names none (gguf-py's SpecialVocab falls back to
     * config.json the same way): a reader — refine's own trainer among them — finds where a sequence
     * ends. (Not bos: a reader would start prepending it, which the source model did not.) */
    if (rc == 0 && tokenizer_eos_id(tok) < 0 && c->n_eos > 0 && c->eos_token_ids[0] >= 0 && c->eos_token_ids[0] < c->V)
        gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos_token_ids[0]);

    const int n_slots = MW_N_GLOBAL + c->L * MW_N_LAYER;
    void **owned = calloc((size_t)n_slots + 1, sizeof *owned);
    CHECK(owned != NULL, "out of memory");
    int n_owned = 0;
    float *rope = NULL;
    if (rc == 0 && c->rope_scaling.kind == ROPE_SCALING_LLAMA3) {
        rope = malloc((size_t)(c->D / 2) * 4);
        CHECK(rope != NULL, "out of memory");
        llama3_factors(rope, c);
        const int64_t ne[1] = {c->D / 2};
        gguf_add_tensor(w, "rope_freqs.weight", GGML_TYPE_F32, 1, ne, rope, (size_t)(c->D / 2) * 4);
    }
    for (int slot = 0; slot < n_slots && rc == 0; slot++) {
        int layer;
        const enum model_weight kind = model_weight_of_slot(slot, &layer);
        int64_t shape[2];
        const int ndim = model_weight_shape(shape, c, kind);
        if (ndim == 0 || (kind == MW_LM_HEAD && c->tie_word_embeddings)) continue;
        const int64_t numel = ndim == 2 ? shape[0] * shape[1] : shape[0];
        float *x = malloc((size_t)numel * 4);
        CHECK(x != NULL, "out of memory for %lld floats", (long long)numel);
        if ((rc = weight(ctx, kind, layer, x, e)) != 0) {
            free(x);
            break;
        }
        const int permute = !qwen2 && (kind == MW_Q || kind == MW_K || kind == MW_Q_BIAS || kind == MW_K_BIAS);
        if (permute) {
            float *y = malloc((size_t)numel * 4);
            CHECK(y != NULL, "out of memory");
            permute_rows(y, x, shape[0], ndim == 2 ? shape[1] : 1, c->D);
            free(x);
            x = y;
        }
        char nm[96];
        gguf_name(nm, sizeof nm, kind, layer);
        const int64_t ne[2] = {ndim == 2 ? shape[1] : shape[0], shape[0]};
        enum ggml_type t = ndim == 1 ? GGML_TYPE_F32 : type;
        if (t == GGML_TYPE_Q8_0 && ne[0] % 32 != 0) t = GGML_TYPE_F16;
        size_t nbytes = 0;
        CHECK(ggml_row_bytes(&nbytes, t, numel) == 0, "row bytes");
        void *data;
        if (t == GGML_TYPE_F32) {
            data = x;
        } else {
            data = malloc(nbytes);
            CHECK(data != NULL, "out of memory");
            if (t == GGML_TYPE_F16) gguf_quantize_f16(data, x, numel);
            else if (t == GGML_TYPE_BF16) gguf_quantize_bf16(data, x, numel);
            else gguf_quantize_q8_0(data, x, numel);
            free(x);
        }
        owned[n_owned++] = data;
        gguf_add_tensor(w, nm, t, ndim, ne, data, nbytes);
    }
    if (rc == 0) rc = gguf_writer_write(w, path, e);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(rope);
    gguf_writer_free(w);
    return rc;
}
