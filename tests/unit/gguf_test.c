/* gguf_test.c — io/gguf against files written and read by the reference implementations:
 *   - tiny_llama.gguf, written by the gguf package (tests/golden/gen/gen_gguf_tiny.py): metadata
 *     of every value type, tensors of every type refine dequantizes (Q8_0, Q4_0, Q4_1, F16,
 *     BF16, F32), compared bit for bit with gguf.quants.dequantize, and q/k rows in HF order as
 *     transformers' reverse permutation gives them;
 *   - F16 dequantization of all 65536 bit patterns against io/safetensors' exhaustively tested
 *     F16 conversion;
 *   - the real SmolLM2-135M-Instruct Q4_1 file from the cache (tools/setup.sh; skipped with a
 *     message when absent): config, every tensor dequantized and finite, and rows compared bit
 *     for bit with what transformers' own GGUF loader produces
 *     (tests/golden/gen/gen_gguf_smollm2.py).
 * Malformed files: tests/unit/malformed_test.c.
 *
 *   bazel test //tests/unit:gguf_test
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "train/options.h" /* train_cache_dir */

#define GD "tests/golden/data/gguf/"

static int str_is(struct gguf_str s, const char *want) {
    return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

static void test_tiny_metadata(const struct gguf_file *g) {
    struct io_err e = {{0}};
    EXPECT(g->version == 3 && g->alignment == 64 && g->data_offset % 64 == 0, "version %u alignment %u data at %zu",
           g->version, g->alignment, g->data_offset);
    /* The values gen_gguf_tiny.py writes, one key per value type. */
    static const struct {
        const char *key;
        enum gguf_type type;
        int64_t v;
    } ints[] = {
        {"test.u8", GGUF_TYPE_UINT8, 200},          {"test.i8", GGUF_TYPE_INT8, -100},
        {"test.u16", GGUF_TYPE_UINT16, 60000},      {"test.i16", GGUF_TYPE_INT16, -30000},
        {"test.u32", GGUF_TYPE_UINT32, 4000000000}, {"test.i32", GGUF_TYPE_INT32, -2000000000},
        {"test.bool", GGUF_TYPE_BOOL, 1},           {"test.i64", GGUF_TYPE_INT64, -(INT64_C(1) << 62)},
        {"llama.block_count", GGUF_TYPE_UINT32, 2},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const struct gguf_kv *kv = gguf_find_kv(g, ints[i].key);
        int64_t v = 0;
        EXPECT(kv != NULL && kv->type == ints[i].type, "%s: type %s", ints[i].key,
               kv ? gguf_type_name(kv->type) : "absent");
        EXPECT(gguf_get_int(&v, g, ints[i].key, &e) == 0 && v == ints[i].v, "%s = %lld, expected %lld (%s)",
               ints[i].key, (long long)v, (long long)ints[i].v, e.msg);
    }
    /* 2^63 + 5 does not fit int64: refused with a message, not wrapped. */
    int64_t v;
    EXPECT(gguf_get_int(&v, g, "test.u64", &e) == -1 && strstr(e.msg, "test.u64") != NULL, "u64 over INT64_MAX: %s",
           e.msg);
    const struct gguf_kv *u64 = gguf_find_kv(g, "test.u64");
    uint64_t raw = 0;
    for (int i = 7; u64 != NULL && i >= 0; i--) raw = raw << 8 | u64->raw[i];
    EXPECT(raw == (UINT64_C(1) << 63) + 5, "raw u64 %llu", (unsigned long long)raw);
    double f;
    EXPECT(gguf_get_float(&f, g, "test.f32", &e) == 0 && f == (double)0.1f, "f32 %.9g", f);
    EXPECT(gguf_get_float(&f, g, "test.f64", &e) == 0 && f == 1.0 / 3.0, "f64 %.17g", f);
    EXPECT(gguf_get_float(&f, g, "test.u8", &e) == -1 && strstr(e.msg, "UINT8") != NULL, "f from u8: %s", e.msg);
    struct gguf_str s;
    EXPECT(gguf_get_string(&s, g, "test.string", &e) == 0 && str_is(s, "h\xc3\xa9llo w\xc3\xb6rld"), "string");
    EXPECT(gguf_get_string(&s, g, "general.architecture", &e) == 0 && str_is(s, "llama"), "architecture");
    EXPECT(gguf_get_int(&v, g, "no.such.key", &e) == -1 && strstr(e.msg, "no.such.key") != NULL, "absent: %s", e.msg);

    const struct gguf_kv *a = gguf_find_kv(g, "test.arr_i32");
    int64_t x[3] = {0};
    EXPECT(a != NULL && a->type == GGUF_TYPE_ARRAY && a->arr_type == GGUF_TYPE_INT32 && a->n == 3, "arr_i32");
    if (a != NULL && a->n == 3) {
        for (int i = 0; i < 3; i++) EXPECT(gguf_arr_int(&x[i], a, (uint64_t)i) == 0, "arr_i32[%d]", i);
        EXPECT(x[0] == 1 && x[1] == -2 && x[2] == 3, "arr_i32 values");
        double d;
        EXPECT(gguf_arr_float(&d, a, 0) == -1, "float of an int array refused");
    }
    a = gguf_find_kv(g, "test.arr_f32");
    double d0 = 0, d1 = 0;
    EXPECT(a != NULL && a->arr_type == GGUF_TYPE_FLOAT32 && a->n == 2 && gguf_arr_float(&d0, a, 0) == 0 &&
               gguf_arr_float(&d1, a, 1) == 0 && d0 == 0.5 && d1 == -1.25,
           "arr_f32");
    a = gguf_find_kv(g, "test.arr_str");
    EXPECT(a != NULL && a->arr_type == GGUF_TYPE_STRING && a->n == 3 && a->strs != NULL && str_is(a->strs[0], "x") &&
               str_is(a->strs[1], "") && str_is(a->strs[2], "zz"),
           "arr_str");
    a = gguf_find_kv(g, "tokenizer.ggml.tokens");
    EXPECT(a != NULL && a->n == 40 && str_is(a->strs[0], "<s>") && str_is(a->strs[4], "\xc3\xa9") &&
               str_is(a->strs[5], "\xe6\x97\xa5\xe6\x9c\xac") && str_is(a->strs[6], "\xc4\xa0the") &&
               str_is(a->strs[39], "t32"),
           "token list");
    a = gguf_find_kv(g, "tokenizer.ggml.merges");
    EXPECT(a != NULL && a->n == 2 && str_is(a->strs[0], "a b"), "merges");
}

/* Every tensor against gguf.quants.dequantize, bit for bit. */
static void test_tiny_tensors(const struct gguf_file *g, const struct safetensors *ex) {
    int seen_type[GGML_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        char key[160];
        snprintf(key, sizeof key, "gguf:%s", t->name);
        const struct st_tensor *r = safetensors_find(ex, key);
        EXPECT(r != NULL && r->numel == t->numel && r->dtype == ST_F32, "%s in the fixture", key);
        EXPECT(t->offset % g->alignment == 0, "%s aligned", t->name);
        if (r == NULL || r->numel != t->numel) continue;
        float *got = malloc((size_t)t->numel * sizeof *got), *ref = malloc((size_t)t->numel * sizeof *ref);
        struct io_err e = {{0}};
        EXPECT(st_tensor_to_f32(ref, r, &e) == 0, "%s", e.msg);
        EXPECT(gguf_tensor_to_f32(got, g, t, &e) == 0, "%s: %s", t->name, e.msg);
        struct cmp_case c = {"gguf_tensor_to_f32", t->name, "", ggml_type_name(t->type), 0};
        cmp_exact_f32(&c, got, ref, t->numel);
        seen_type[t->type] = 1;
        free(got);
        free(ref);
    }
    EXPECT(seen_type[GGML_TYPE_F32] && seen_type[GGML_TYPE_F16] && seen_type[GGML_TYPE_BF16] &&
               seen_type[GGML_TYPE_Q8_0] && seen_type[GGML_TYPE_Q4_0] && seen_type[GGML_TYPE_Q4_1],
           "the fixture covers every dequantized type");
}

/* The model view: config from the metadata, HF names, reverse permutation of q/k. */
static void test_tiny_model(const struct safetensors *ex) {
    struct gguf_model m;
    struct io_err e = {{0}};
    if (gguf_model_open(&m, GD "tiny_llama.gguf", &e) != 0) {
        EXPECT(0, "tiny model: %s", e.msg);
        return;
    }
    const struct model_config *c = &m.config;
    EXPECT(c->C == 32 && c->F == 64 && c->L == 2 && c->H == 2 && c->KVH == 1 && c->D == 16 && c->V == 40,
           "tiny config C=%d F=%d L=%d H=%d KVH=%d D=%d V=%d", c->C, c->F, c->L, c->H, c->KVH, c->D, c->V);
    EXPECT(c->rope_theta == 500000.0f && c->rms_norm_eps == 1e-5f && c->max_position_embeddings == 256 &&
               !c->tie_word_embeddings && !m.lm_head_tied && c->bos_token_id == 0 && c->n_eos == 1 &&
               c->eos_token_ids[0] == 1 && c->pad_token_id == -1 && c->rope_scaling.kind == ROPE_SCALING_NONE &&
               strcmp(c->model_type, "llama") == 0,
           "tiny config scalars");
    int checked = 0;
    for (int s = 0; s < m.n_weights; s++) {
        const struct gguf_model_weight *w = &m.weights[s];
        if (!w->present) continue;
        char key[160];
        snprintf(key, sizeof key, "hf:%s", w->name);
        const struct st_tensor *r = safetensors_find(ex, key);
        if (r == NULL) {
            EXPECT(!w->rope_permuted, "%s: permuted weights have an hf: entry", w->name);
            snprintf(key, sizeof key, "gguf:%s", w->t->name);
            r = safetensors_find(ex, key);
        } else {
            EXPECT(w->rope_permuted, "%s: hf: entries are the permuted ones", w->name);
        }
        int64_t n = w->shape[0] * (w->ndim == 2 ? w->shape[1] : 1);
        EXPECT(r != NULL && r->numel == n && r->ndim == w->ndim && r->shape[0] == w->shape[0], "%s: fixture shape",
               w->name);
        if (r == NULL || r->numel != n) continue;
        float *got = malloc((size_t)n * sizeof *got), *ref = malloc((size_t)n * sizeof *ref);
        EXPECT(st_tensor_to_f32(ref, r, &e) == 0 && gguf_model_weight_f32(got, &m, w, &e) == 0, "%s: %s", w->name,
               e.msg);
        struct cmp_case cc = {"gguf_model_weight_f32", w->name, "", ggml_type_name(w->t->type), 0};
        cmp_exact_f32(&cc, got, ref, n);
        free(got);
        free(ref);
        checked++;
    }
    EXPECT(checked == 3 + 2 * 9, "checked %d weights", checked);
    /* The permutation really moves rows (else the test above could not tell). */
    const struct gguf_model_weight *q = gguf_model_get(&m, MW_Q, 1);
    EXPECT(q != NULL && q->rope_permuted && q->shape[0] == 32 && q->shape[1] == 32, "q_proj of layer 1");
    if (q != NULL) {
        float *hf = malloc(32 * 32 * sizeof *hf), *raw = malloc(32 * 32 * sizeof *raw);
        gguf_model_weight_f32(hf, &m, q, &e);
        gguf_tensor_to_f32(raw, &m.g, q->t, &e);
        /* HF row 1 (head 0, first half, i=1) is GGUF row 2; HF row 8 (second half, i=0) is GGUF row 1. */
        EXPECT(memcmp(hf + 1 * 32, raw + 2 * 32, 32 * sizeof(float)) == 0 &&
                   memcmp(hf + 8 * 32, raw + 1 * 32, 32 * sizeof(float)) == 0 &&
                   memcmp(hf + 16 * 32, raw + 16 * 32, 32 * sizeof(float)) == 0 &&
                   memcmp(hf + 1 * 32, raw + 1 * 32, 32 * sizeof(float)) != 0,
               "row permutation");
        free(hf);
        free(raw);
    }
    EXPECT(gguf_model_get(&m, MW_Q_BIAS, 0) == NULL && gguf_model_get(&m, MW_Q, 2) == NULL, "absent weights");
    EXPECT(gguf_model_find(&m, "model.layers.1.self_attn.q_proj.weight") == q &&
               gguf_model_find(&m, "lm_head.weight") == gguf_model_get(&m, MW_LM_HEAD, -1) &&
               gguf_model_find(&m, "model.layers.2.self_attn.q_proj.weight") == NULL &&
               gguf_model_find(&m, "model.layers.0.self_attn.q_proj.bias") == NULL,
           "find by HF name");
    gguf_model_close(&m);
}

static void test_names(void) {
    static const char *const pairs[][2] = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"output_norm.weight", "model.norm.weight"},
        {"output.weight", "lm_head.weight"},
        {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
        {"blk.12.attn_q.weight", "model.layers.12.self_attn.q_proj.weight"},
        {"blk.3.attn_k.bias", "model.layers.3.self_attn.k_proj.bias"},
        {"blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight"},
        {"blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"},
        {"blk.29.ffn_norm.weight", "model.layers.29.post_attention_layernorm.weight"},
        {"blk.1.ffn_gate.weight", "model.layers.1.mlp.gate_proj.weight"},
        {"blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight"},
        {"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"},
    };
    char buf[128];
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        EXPECT(gguf_hf_name(buf, sizeof buf, pairs[i][0]) == 0 && strcmp(buf, pairs[i][1]) == 0, "%s -> %s (got %s)",
               pairs[i][0], pairs[i][1], buf);
    static const char *const bad[] = {"blk..attn_q.weight", "blk.01.attn_q.weight", "blk.1.attn_q", "output.bias",
                                      "blk.1.attn_norm.bias", "rope_freqs.weight", "blk.1.ffn_gate_exps.weight", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT(gguf_hf_name(buf, sizeof buf, bad[i]) == -1, "'%s' is not a Llama tensor", bad[i]);
}

/* F16: every bit pattern, against safetensors' F16 conversion (itself tested exhaustively). */
static void test_f16_exhaustive(void) {
    static uint8_t bytes[65536 * 2];
    for (int i = 0; i < 65536; i++) bytes[2 * i] = (uint8_t)i, bytes[2 * i + 1] = (uint8_t)(i >> 8);
    struct gguf_file g;
    memset(&g, 0, sizeof g);
    struct gguf_tensor t = {.name = "f16", .type = GGML_TYPE_F16, .ndim = 1, .ne = {65536, 1, 1, 1},
                            .numel = 65536, .data = bytes, .nbytes = sizeof bytes};
    struct st_tensor s = {.name = "f16", .dtype = ST_F16, .ndim = 1, .shape = {65536}, .numel = 65536,
                          .data = bytes, .nbytes = sizeof bytes};
    float *got = malloc(65536 * sizeof *got), *ref = malloc(65536 * sizeof *ref);
    struct io_err e;
    EXPECT(gguf_tensor_to_f32(got, &g, &t, &e) == 0 && st_tensor_to_f32(ref, &s, &e) == 0, "f16 conversions");
    struct cmp_case c = {"gguf_tensor_to_f32", "all f16 patterns", "65536", "f16", 0};
    cmp_exact_f32(&c, got, ref, 65536);
    /* NaN payloads are kept bit for bit (cmp_exact_f32 lets any NaN match any NaN). */
    EXPECT(memcmp(got, ref, 65536 * sizeof *got) == 0, "f16 bitwise");
    free(got);
    free(ref);
}

static void test_tiny(void) {
    struct gguf_file g;
    struct safetensors ex;
    struct io_err e = {{0}};
    if (safetensors_open(&ex, GD "tiny_llama_expected.safetensors", &e) != 0) {
        EXPECT(0, "%s", e.msg);
        return;
    }
    if (gguf_open(&g, GD "tiny_llama.gguf", &e) != 0) {
        EXPECT(0, "%s", e.msg);
    } else {
        test_tiny_metadata(&g);
        test_tiny_tensors(&g, &ex);
        gguf_close(&g);
    }
    test_tiny_model(&ex);
    safetensors_close(&ex);
}

/* rope_freqs.weight (Llama 3.1+ conversions) gives the llama3 scaling; qwen2 keeps its q/k rows
 * as they are and has q/k/v biases. */
static void test_small_variants(void) {
    struct gguf_model m;
    struct io_err e = {{0}};
    if (gguf_model_open(&m, GD "tiny_llama3_rope.gguf", &e) != 0) {
        EXPECT(0, "llama3 rope: %s", e.msg);
    } else {
        const struct rope_scaling *r = &m.config.rope_scaling;
        EXPECT(r->kind == ROPE_SCALING_LLAMA3 && r->factor == 32.0f && r->low_freq_factor == 1.0f &&
                   r->high_freq_factor == 4.0f && r->original_max_position_embeddings == 8192,
               "llama3 scaling from rope_freqs: kind %d factor %g", (int)r->kind, (double)r->factor);
        const struct gguf_model_weight *head = gguf_model_find(&m, "lm_head.weight");
        EXPECT(head != NULL && head->t == gguf_model_find(&m, "model.embed_tokens.weight")->t &&
                   head->kind == MW_LM_HEAD,
               "tied lm_head found by name, reading the embedding");
        EXPECT(m.config.tie_word_embeddings && m.lm_head_tied && m.config.max_position_embeddings == 131072 &&
                   m.config.rope_theta == 500000.0f && m.config.bos_token_id == -1 && m.config.n_eos == 0,
               "llama3 rope file config");
        gguf_model_close(&m);
    }
    if (gguf_model_open(&m, GD "tiny_qwen2.gguf", &e) != 0) {
        EXPECT(0, "qwen2: %s", e.msg);
        return;
    }
    EXPECT(strcmp(m.config.model_type, "qwen2") == 0 && m.config.attention_bias && m.config.rope_theta == 1e6f,
           "qwen2 config");
    static const enum model_weight kinds[] = {MW_Q, MW_K, MW_Q_BIAS, MW_K_BIAS, MW_V_BIAS};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const struct gguf_model_weight *w = gguf_model_get(&m, kinds[i], 0);
        EXPECT(w != NULL && w->t != NULL && !w->rope_permuted, "qwen2 weight %d bound, not permuted", (int)kinds[i]);
        if (w == NULL || w->t == NULL) continue;
        float *a = malloc((size_t)w->t->numel * sizeof *a), *b = malloc((size_t)w->t->numel * sizeof *b);
        EXPECT(gguf_model_weight_f32(a, &m, w, &e) == 0 && gguf_tensor_to_f32(b, &m.g, w->t, &e) == 0, "%s", e.msg);
        EXPECT(memcmp(a, b, (size_t)w->t->numel * sizeof *a) == 0, "%s is the GGUF tensor as stored", w->name);
        free(a);
        free(b);
    }
    EXPECT(strcmp(gguf_model_get(&m, MW_V_BIAS, 0)->name, "model.layers.0.self_attn.v_proj.bias") == 0, "bias name");
    gguf_model_close(&m);
}

/* The real SmolLM2-135M-Instruct Q4_1 file. */
static void test_smollm2(void) {
    char cache[1024], path[1200];
    train_cache_dir(cache, sizeof cache);
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    if (!file_exists(path)) {
        printf("SKIPPED the SmolLM2 GGUF checks: %s is absent (tools/setup.sh fetches it)\n", path);
        return;
    }
    struct gguf_model m;
    struct io_err e = {{0}};
    if (gguf_model_open(&m, path, &e) != 0) {
        EXPECT(0, "SmolLM2: %s", e.msg);
        return;
    }
    const struct model_config *c = &m.config;
    struct model_config named;
    EXPECT(config_named(&named, "smollm2-135m", &e) == 0, "%s", e.msg);
    EXPECT(c->C == 576 && c->L == 30 && c->H == 9 && c->KVH == 3 && c->V == 49152 && c->D == 64 && c->F == 1536 &&
               c->tie_word_embeddings && m.lm_head_tied,
           "SmolLM2 config C=%d L=%d H=%d KVH=%d V=%d D=%d F=%d tied=%d", c->C, c->L, c->H, c->KVH, c->V, c->D, c->F,
           c->tie_word_embeddings);
    EXPECT(c->rms_norm_eps == named.rms_norm_eps && c->rope_theta == named.rope_theta &&
               c->max_position_embeddings == named.max_position_embeddings && c->bos_token_id == 1 &&
               c->eos_token_ids[0] == 2 && c->pad_token_id == 2 && c->rope_scaling.kind == ROPE_SCALING_NONE,
           "SmolLM2 scalars eps=%g theta=%g ctx=%d", (double)c->rms_norm_eps, (double)c->rope_theta,
           c->max_position_embeddings);
    const struct gguf_kv *tok = gguf_find_kv(&m.g, "tokenizer.ggml.tokens");
    EXPECT(tok != NULL && tok->n == 49152 && str_is(tok->strs[1], "<|im_start|>") && str_is(tok->strs[49151], "ectable"),
           "SmolLM2 token list");

    struct safetensors fx;
    int have_fx = safetensors_open(&fx, GD "smollm2_q4_1_rows.safetensors", &e) == 0;
    EXPECT(have_fx, "fixture: %s", e.msg);
    if (have_fx) {
        const char *md = safetensors_meta(&fx, "source_sha256");
        EXPECT(md != NULL && strcmp(md, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53") == 0,
               "fixture made from the pinned file");
    }
    size_t cap = (size_t)c->V * (size_t)c->C;
    float *buf = malloc(cap * sizeof *buf);
    int n_weights = 0, n_compared = 0;
    for (int s = 0; s < m.n_weights; s++) {
        const struct gguf_model_weight *w = &m.weights[s];
        if (!w->present) continue;
        int64_t rows = w->shape[0], cols = w->ndim == 2 ? w->shape[1] : 1;
        if (gguf_model_weight_f32(buf, &m, w, &e) != 0) {
            EXPECT(0, "%s: %s", w->name, e.msg);
            continue;
        }
        n_weights++;
        int64_t nonfinite = 0;
        for (int64_t i = 0; i < rows * cols; i++) nonfinite += !isfinite(buf[i]);
        EXPECT(nonfinite == 0, "%s: %lld non-finite values", w->name, (long long)nonfinite);
        if (!have_fx || w->kind == MW_LM_HEAD) continue;
        const struct st_tensor *ref = safetensors_find(&fx, w->name);
        if (ref == NULL) continue;
        char rname[160];
        snprintf(rname, sizeof rname, "%s.rows", w->name);
        const struct st_tensor *ri = safetensors_find(&fx, rname);
        int64_t k = ri != NULL ? ri->numel : 1;
        float *r = malloc((size_t)ref->numel * sizeof *r);
        EXPECT(st_tensor_to_f32(r, ref, &e) == 0 && ref->numel == k * (ri != NULL ? cols : rows), "%s fixture", w->name);
        for (int64_t j = 0; j < k && ref->numel == k * (ri != NULL ? cols : rows); j++) {
            int64_t row = 0;
            if (ri != NULL) memcpy(&row, ri->data + 8 * j, 8);
            int64_t len = ri != NULL ? cols : rows;
            char what[200];
            snprintf(what, sizeof what, "%s row %lld", w->name, (long long)row);
            struct cmp_case cc = {"gguf_model_weight_f32 vs transformers", what, "", ggml_type_name(w->t->type), 0};
            cmp_exact_f32(&cc, buf + row * cols, r + j * len, len);
        }
        free(r);
        n_compared++;
    }
    EXPECT(n_weights == 3 + 30 * 9, "dequantized %d weights", n_weights);
    EXPECT(!have_fx || n_compared == 13, "compared %d tensors with transformers", n_compared);
    printf("SmolLM2 Q4_1: %d weights dequantized, %d compared with transformers\n", n_weights, n_compared);
    free(buf);
    if (have_fx) safetensors_close(&fx);
    gguf_model_close(&m);
}

int main(int argc, char **argv) {
    test_seed(argc, argv, 1);
    test_names();
    test_f16_exhaustive();
    test_tiny();
    test_small_variants();
    test_smollm2();
    return test_finish("gguf_test");
}
