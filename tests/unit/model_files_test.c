/* model_files_test.c — io/model_files against folders written by transformers and bitsandbytes
 * (testdata/models, from testdata/gen_model_files.py) and against synthetic folders with one
 * thing wrong each: every mismatch between config and weights is one clear message.
 *
 *   bazel test //tests/unit:model_files_test
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "io/model_files.h"
#include "tests/common/harness.h"

#define MD "tests/unit/testdata/models/"

static char g_dir[1024];

static void test_transformers_folders(void) {
    struct model_files m;
    struct io_err e;
    if (model_files_open(&m, MD "llama_tied_bf16", &e) != 0) {
        EXPECT(0, "llama_tied_bf16: %s", e.msg);
    } else {
        EXPECT(m.config.L == 2 && m.config.C == 32 && m.lm_head_tied && !m.lm_head_stored_but_tied && m.n_bnb == 0,
               "llama_tied_bf16 summary");
        const struct model_weight_ref *head = model_files_get(&m, MW_LM_HEAD, -1), *emb = model_files_get(&m, MW_EMBED, -1);
        EXPECT(head != NULL && emb != NULL && head->t == emb->t && strcmp(head->name, "model.embed_tokens.weight") == 0,
               "tied lm_head reads the embedding");
        const struct model_weight_ref *k = model_files_get(&m, MW_K, 1);
        EXPECT(k != NULL && k->t != NULL && k->t->dtype == ST_BF16 && k->shape[0] == 16 && k->shape[1] == 32 &&
                   strcmp(k->name, "model.layers.1.self_attn.k_proj.weight") == 0,
               "k_proj of layer 1");
        EXPECT(model_files_get(&m, MW_Q_BIAS, 0) == NULL, "llama has no q bias");
        EXPECT(model_files_get(&m, MW_UP, 2) == NULL && model_files_get(&m, MW_UP, -1) == NULL, "layer out of range");
        const struct model_weight_ref *n = model_files_get(&m, MW_FINAL_NORM, 0);
        float *f = malloc(sizeof(float) * 32);
        EXPECT(n != NULL && model_weight_to_f32(f, n, &e) == 0 && f[0] == 1.0f && f[31] == 1.0f, "norm weight is ones");
        free(f);
        model_files_close(&m);
    }
    if (model_files_open(&m, MD "qwen2_f16", &e) != 0) {
        EXPECT(0, "qwen2_f16: %s", e.msg);
    } else {
        EXPECT(!m.lm_head_tied && m.config.attention_bias, "qwen2 untied, biased");
        const struct model_weight_ref *b = model_files_get(&m, MW_V_BIAS, 1), *q = model_files_get(&m, MW_Q, 0);
        EXPECT(b != NULL && b->t != NULL && b->t->dtype == ST_F16 && b->ndim == 1 && b->shape[0] == 16, "v bias");
        EXPECT(q != NULL && q->shape[0] == 48 && q->shape[1] == 48, "q_proj [H*D, C] with head_dim 16");
        EXPECT(model_files_get(&m, MW_LM_HEAD, -1)->t != model_files_get(&m, MW_EMBED, -1)->t, "untied lm_head");
        model_files_close(&m);
    }
    if (model_files_open(&m, MD "llama_bnb_nf4", &e) != 0) {
        EXPECT(0, "llama_bnb_nf4: %s", e.msg);
    } else {
        EXPECT(m.n_bnb == 2 * 7 && m.config.quant.kind == QUANT_BNB_NF4, "14 quantized linears, got %d", m.n_bnb);
        const struct model_weight_ref *g = model_files_get(&m, MW_GATE, 1);
        EXPECT(g != NULL && g->t == NULL && g->bnb != NULL, "gate_proj is 4-bit");
        if (g != NULL && g->bnb != NULL) {
            const struct bnb4_weight *b = g->bnb;
            float qm[16];
            EXPECT(st_tensor_to_f32(qm, b->quant_map, &e) == 0 && qm[0] == -1.0f && qm[7] == 0.0f && qm[15] == 1.0f,
                   "quant_map is the NF4 table");
            EXPECT(b->blocksize == 64 && b->nested && b->nested_blocksize == 256 && b->n_blocks == 96 * 64 / 64 &&
                       b->packed->shape[0] == 96 * 64 / 2 && b->absmax->dtype == ST_U8 &&
                       b->nested_quant_map->numel == 256 && b->nested_offset > 0.0f && strcmp(b->dtype, "bfloat16") == 0,
                   "gate_proj bnb parts");
            EXPECT(model_weight_to_f32(qm, g, &e) == -1 && strstr(e.msg, "nf4 op"), "to_f32 of a 4-bit weight");
        }
        const struct model_weight_ref *h = model_files_get(&m, MW_LM_HEAD, -1);
        EXPECT(h != NULL && h->t != NULL && h->t->dtype == ST_BF16, "lm_head stays bf16 in a bnb checkpoint");
        model_files_close(&m);
    }
}

/* ---- synthetic folders ---- */


static const char *folder(const char *name) {
    static char p[1300];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    struct io_err e;
    if (make_dirs(p, &e) != 0) io_exit(&e);
    return p;
}

static void put_file(const char *dir, const char *file, const void *data, size_t n) {
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    struct io_err e;
    if (write_file_atomic(p, data, n, &e) != 0) io_exit(&e);
}

/* Mutations of the full tensor list of a config. */
struct mutation {
    const char *drop;       /* a name to leave out ("*" = all of layer 1) */
    const char *reshape;    /* a name written with shape [3] */
    const char *retype;     /* a name written as I32 */
    const char *extra;      /* an extra name */
};

static uint8_t g_zeros[1 << 16];

static void write_model(const char *dir, const struct model_config *c, struct mutation mu, int with_lm_head) {
    struct st_tensor t[64];
    int n = 0;
    for (int s = 0; s < MW_N_GLOBAL + c->L * MW_N_LAYER; s++) {
        enum model_weight kind = s < MW_N_GLOBAL ? (enum model_weight)s
                                                 : (enum model_weight)(MW_ATTN_NORM + (s - MW_N_GLOBAL) % MW_N_LAYER);
        int layer = s < MW_N_GLOBAL ? -1 : (s - MW_N_GLOBAL) / MW_N_LAYER;
        struct st_tensor *x = &t[n];
        memset(x, 0, sizeof *x);
        x->ndim = model_weight_shape(x->shape, c, kind);
        if (x->ndim == 0 || (kind == MW_LM_HEAD && c->tie_word_embeddings && !with_lm_head)) continue;
        x->name = malloc(96);
        model_weight_name(x->name, 96, kind, layer);
        if ((mu.drop && strcmp(mu.drop, x->name) == 0) || (mu.drop && strcmp(mu.drop, "*") == 0 && layer == 1)) {
            free(x->name);
            continue;
        }
        x->dtype = ST_BF16;
        if (mu.reshape && strcmp(mu.reshape, x->name) == 0) x->ndim = 1, x->shape[0] = 3;
        if (mu.retype && strcmp(mu.retype, x->name) == 0) x->dtype = ST_I32;
        int64_t numel;
        st_shape_bytes(&numel, &x->nbytes, x->dtype, x->ndim, x->shape);
        x->data = g_zeros;
        n++;
    }
    if (mu.extra) {
        memset(&t[n], 0, sizeof t[n]);
        t[n].name = malloc(96);
        snprintf(t[n].name, 96, "%s", mu.extra);
        t[n].dtype = ST_F32, t[n].ndim = 1, t[n].shape[0] = 2, t[n].nbytes = 8, t[n].data = g_zeros;
        n++;
    }
    char p[1400];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    struct io_err e;
    if (safetensors_write(p, t, n, NULL, 0, &e) != 0) io_exit(&e);
    for (int i = 0; i < n; i++) free(t[i].name);
}

#define TINY_CONFIG                                                                                                     \
    "{\"model_type\":\"llama\",\"hidden_size\":16,\"intermediate_size\":24,\"num_hidden_layers\":2,"                    \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":10,\"tie_word_embeddings\":%s}"

static const char *tiny(const char *name, int tied, struct mutation mu, int with_lm_head) {
    const char *dir = folder(name);
    char cfg[512];
    snprintf(cfg, sizeof cfg, TINY_CONFIG, tied ? "true" : "false");
    put_file(dir, "config.json", cfg, strlen(cfg));
    struct model_config c;
    struct io_err e;
    char cp[1400];
    snprintf(cp, sizeof cp, "%s/config.json", dir);
    if (config_from_hf_json(&c, cp, &e) != 0) io_exit(&e);
    write_model(dir, &c, mu, with_lm_head);
    return dir;
}

static void expect_open(const char *dir, const char *phrase, const char *what) {
    struct model_files m;
    struct io_err e = {{0}};
    int rc = model_files_open(&m, dir, &e);
    if (phrase == NULL) {
        EXPECT(rc == 0, "%s: rejected: %s", what, e.msg);
        if (rc == 0) model_files_close(&m);
        return;
    }
    EXPECT(rc == -1 && strstr(e.msg, phrase) != NULL, "%s: rc %d, message \"%s\" lacks \"%s\"", what, rc, e.msg, phrase);
    if (rc == 0) model_files_close(&m);
    else printf("  rejected (%s): %s\n", what, strstr(e.msg, g_dir) ? e.msg + strlen(g_dir) + 1 : e.msg);
}

static void test_synthetic(void) {
    struct mutation none = {0};
    expect_open(tiny("ok_untied", 0, none, 0), NULL, "complete untied model");
    expect_open(tiny("ok_tied", 1, none, 0), NULL, "complete tied model");
    {
        struct model_files m;
        struct io_err e;
        const char *dir = tiny("tied_with_head", 1, none, 1);
        EXPECT(model_files_open(&m, dir, &e) == 0, "tied model storing lm_head: %s", e.msg);
        if (m.weights != NULL) {
            EXPECT(m.lm_head_tied && m.lm_head_stored_but_tied, "stored lm_head of a tied model is reported");
            model_files_close(&m);
        }
    }
    expect_open(tiny("missing_one", 0, (struct mutation){.drop = "model.layers.1.mlp.up_proj.weight"}, 0),
                "lacks 1 tensor that config.json implies (2 layers): model.layers.1.mlp.up_proj.weight [24, 16]",
                "one missing tensor");
    expect_open(tiny("missing_layer", 0, (struct mutation){.drop = "*"}, 0), "lacks 9 tensors", "a missing layer");
    expect_open(tiny("missing_head", 0, (struct mutation){.drop = "lm_head.weight"}, 0), "lm_head.weight [10, 16]",
                "untied model without lm_head");
    expect_open(tiny("bad_shape", 0, (struct mutation){.reshape = "model.layers.0.self_attn.k_proj.weight"}, 0),
                "is BF16 [3], but config.json implies [num_key_value_heads*head_dim, hidden_size] = [8, 16]",
                "a wrong shape");
    expect_open(tiny("bad_dtype", 0, (struct mutation){.retype = "model.norm.weight"}, 0),
                "'model.norm.weight' is I32 [16]; expected F32, F16 or BF16", "a wrong dtype");
    expect_open(tiny("extra", 0, (struct mutation){.extra = "model.layers.2.mlp.up_proj.weight"}, 0),
                "holds 1 tensor that config.json does not describe (model.layers.2.mlp.up_proj.weight)", "an extra layer");
    expect_open(tiny("inv_freq", 0, (struct mutation){.extra = "model.layers.0.self_attn.rotary_emb.inv_freq"}, 0), NULL,
                "rotary_emb.inv_freq is ignored");
    {
        /* A tied checkpoint whose lm_head.weight has another shape. */
        const char *dir = tiny("tied_bad_head", 1, (struct mutation){.reshape = "lm_head.weight"}, 1);
        expect_open(dir, "'lm_head.weight' is BF16 [3]", "tied model storing a wrong lm_head");
    }
    {
        /* Config for one model, weights of another: the bigger config finds wrong shapes. */
        const char *dir = tiny("other_model", 0, none, 0);
        const char *cfg = "{\"model_type\":\"llama\",\"hidden_size\":32,\"intermediate_size\":24,\"num_hidden_layers\":2,"
                          "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":10}";
        put_file(dir, "config.json", cfg, strlen(cfg));
        expect_open(dir, "[vocab_size, hidden_size] = [10, 32]", "config of another model");
        cfg = "{\"model_type\":\"llama\",\"hidden_size\":16,\"intermediate_size\":24,\"num_hidden_layers\":1,"
              "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":10}";
        put_file(dir, "config.json", cfg, strlen(cfg));
        expect_open(dir, "holds 9 tensors that config.json does not describe", "config with fewer layers");
        cfg = "{\"model_type\":\"qwen2\",\"hidden_size\":16,\"intermediate_size\":24,\"num_hidden_layers\":2,"
              "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":10}";
        put_file(dir, "config.json", cfg, strlen(cfg));
        expect_open(dir, "lacks 6 tensors that config.json implies (2 layers): model.layers.0.self_attn.q_proj.bias [16]",
                    "qwen2 config, llama weights (no biases)");
        cfg = "{\"model_type\":\"llama\",\"hidden_size\":16,\"intermediate_size\":24,\"num_hidden_layers\":2,"
              "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":10,\"quantization_config\":{"
              "\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,\"bnb_4bit_quant_type\":\"nf4\"}}";
        put_file(dir, "config.json", cfg, strlen(cfg));
        expect_open(dir, "no tensor of the checkpoint is quantized", "bnb config, plain weights");
        cfg = "{\"model_type\":\"llama\",\"hidden_size\":16,\"intermediate_size\":24,\"num_hidden_layers\":2,"
              "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":10,\"quantization_config\":{"
              "\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,\"bnb_4bit_quant_type\":\"fp4\"}}";
        put_file(dir, "config.json", cfg, strlen(cfg));
        expect_open(dir, "refine supports NF4 4-bit checkpoints only", "fp4 config");
    }
    {
        /* The same model in two shards with an index. */
        const char *src_dir = tiny("to_shard", 0, none, 0);
        char p[1400], cfg[512];
        snprintf(p, sizeof p, "%s/model.safetensors", src_dir);
        struct safetensors st;
        struct io_err e;
        if (safetensors_open(&st, p, &e) != 0) io_exit(&e);
        const char *dir = folder("sharded");
        int half = st.n_tensors / 2;
        char index[8192] = "{\"metadata\":{},\"weight_map\":{";
        for (int i = 0; i < st.n_tensors; i++)
            snprintf(index + strlen(index), sizeof index - strlen(index), "%s\"%s\":\"part-%d.safetensors\"", i ? "," : "",
                     st.tensors[i].name, i < half ? 1 : 2);
        strcat(index, "}}");
        snprintf(p, sizeof p, "%s/part-1.safetensors", dir);
        if (safetensors_write(p, st.tensors, half, NULL, 0, &e) != 0) io_exit(&e);
        snprintf(p, sizeof p, "%s/part-2.safetensors", dir);
        if (safetensors_write(p, st.tensors + half, st.n_tensors - half, NULL, 0, &e) != 0) io_exit(&e);
        safetensors_close(&st);
        put_file(dir, "model.safetensors.index.json", index, strlen(index));
        snprintf(cfg, sizeof cfg, TINY_CONFIG, "false");
        put_file(dir, "config.json", cfg, strlen(cfg));
        struct model_files m;
        EXPECT(model_files_open(&m, dir, &e) == 0, "sharded model: %s", e.msg);
        if (m.weights != NULL) {
            EXPECT(m.ck.n_shards == 2 && model_files_get(&m, MW_DOWN, 1) != NULL &&
                       model_files_get(&m, MW_DOWN, 1)->t != NULL,
                   "sharded model bound");
            model_files_close(&m);
        }
    }
    expect_open(folder("empty_dir"), "cannot open", "a folder without config.json");
    {
        const char *dir = folder("config_only");
        char cfg[512];
        snprintf(cfg, sizeof cfg, TINY_CONFIG, "false");
        put_file(dir, "config.json", cfg, strlen(cfg));
        expect_open(dir, "no model.safetensors or model.safetensors.index.json", "a folder without weights");
    }
}

/* ---- bnb folders derived from the bitsandbytes one ---- */

struct edit {
    const char *drop;      /* a tensor to leave out */
    const char *rename_from, *rename_to;
    const char *qs_name;   /* a quant_state tensor whose JSON is replaced by qs_json */
    const char *qs_json;
    const char *cfg_from, *cfg_to; /* one replacement in config.json */
};

static void bnb_variant(const char *name, struct edit ed, const char *phrase, const char *what) {
    struct safetensors src;
    struct io_err e;
    if (safetensors_open(&src, MD "llama_bnb_nf4/model.safetensors", &e) != 0) io_exit(&e);
    struct st_tensor *t = calloc((size_t)src.n_tensors, sizeof *t);
    int n = 0;
    for (int i = 0; i < src.n_tensors; i++) {
        if (ed.drop && strcmp(ed.drop, src.tensors[i].name) == 0) continue;
        t[n] = src.tensors[i];
        if (ed.rename_from && strcmp(ed.rename_from, t[n].name) == 0) t[n].name = (char *)ed.rename_to;
        if (ed.qs_name && strcmp(ed.qs_name, t[n].name) == 0) {
            t[n].data = (const uint8_t *)ed.qs_json;
            t[n].nbytes = strlen(ed.qs_json);
            t[n].shape[0] = (int64_t)t[n].nbytes;
        }
        n++;
    }
    const char *dir = folder(name);
    char p[1400];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (safetensors_write(p, t, n, NULL, 0, &e) != 0) io_exit(&e);
    free(t);
    safetensors_close(&src);
    char *cfg;
    size_t len;
    if (read_file_text(&cfg, &len, MD "llama_bnb_nf4/config.json", 1 << 20, &e) != 0) io_exit(&e);
    if (ed.cfg_from) {
        char *at = strstr(cfg, ed.cfg_from);
        EXPECT(at != NULL, "%s: config.json has no \"%s\"", what, ed.cfg_from);
        if (at != NULL) {
            char *out = malloc(len + strlen(ed.cfg_to) + 1);
            size_t pre = (size_t)(at - cfg);
            memcpy(out, cfg, pre);
            strcpy(out + pre, ed.cfg_to);
            strcat(out, at + strlen(ed.cfg_from));
            free(cfg);
            cfg = out;
        }
    }
    put_file(dir, "config.json", cfg, strlen(cfg));
    free(cfg);
    expect_open(dir, phrase, what);
}

static void test_bnb_variants(void) {
    const char *qs = "model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__nf4";
    bnb_variant("bnb_copy", (struct edit){0}, NULL, "unchanged copy");
    bnb_variant("bnb_no_qc", (struct edit){.cfg_from = "\"quantization_config\"", .cfg_to = "\"quantization_config_off\""},
                "no bitsandbytes quantization_config", "4-bit tensors, plain config");
    bnb_variant("bnb_dq", (struct edit){.cfg_from = "\"bnb_4bit_use_double_quant\": true",
                                        .cfg_to = "\"bnb_4bit_use_double_quant\": false"},
                "bnb_4bit_use_double_quant false", "double-quant flag disagrees");
    bnb_variant("bnb_no_absmax", (struct edit){.drop = "model.layers.1.mlp.up_proj.weight.absmax"},
                "lacks its part 'model.layers.1.mlp.up_proj.weight.absmax'", "missing absmax");
    bnb_variant("bnb_no_nested", (struct edit){.drop = "model.layers.0.mlp.down_proj.weight.nested_quant_map"},
                "lacks its part 'model.layers.0.mlp.down_proj.weight.nested_quant_map'", "missing nested_quant_map");
    bnb_variant("bnb_no_packed", (struct edit){.drop = "model.layers.0.self_attn.o_proj.weight"},
                "lacks its part 'model.layers.0.self_attn.o_proj.weight'", "missing packed weight");
    bnb_variant("bnb_fp4_state", (struct edit){.rename_from = qs,
                                              .rename_to = "model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__fp4"},
                "is bitsandbytes FP4", "an FP4 tensor");
    bnb_variant("bnb_qs_shape", (struct edit){.qs_name = qs, .qs_json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, "
                                              "\"dtype\": \"bfloat16\", \"shape\": [32, 64], \"nested_blocksize\": 256, "
                                              "\"nested_dtype\": \"float32\", \"nested_offset\": 0.01}"},
                "gives another shape than config.json implies", "quant_state shape disagrees");
    bnb_variant("bnb_qs_json", (struct edit){.qs_name = qs, .qs_json = "{\"quant_type\": \"nf4\", \"blocksize\": "},
                "not a JSON object with quant_type", "quant_state not JSON");
    bnb_variant("bnb_qs_block", (struct edit){.qs_name = qs, .qs_json = "{\"quant_type\": \"nf4\", \"blocksize\": 48, "
                                              "\"dtype\": \"bfloat16\", \"shape\": [64, 64]}"},
                "blocksize 48", "odd blocksize");
    bnb_variant("bnb_qs_type", (struct edit){.qs_name = qs, .qs_json = "{\"quant_type\": \"fp4\", \"blocksize\": 64, "
                                             "\"dtype\": \"bfloat16\", \"shape\": [64, 64]}"},
                "says quant_type \"fp4\"", "quant_type disagrees with the key");
    bnb_variant("bnb_qs_nonest", (struct edit){.qs_name = qs, .qs_json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, "
                                               "\"dtype\": \"bfloat16\", \"shape\": [64, 64]}"},
                "has nested_* tensors but its quant_state has no nested_blocksize", "nested parts without nested keys");
    bnb_variant("bnb_qs_blocks", (struct edit){.qs_name = qs, .qs_json = "{\"quant_type\": \"nf4\", \"blocksize\": 128, "
                                               "\"dtype\": \"bfloat16\", \"shape\": [64, 64], \"nested_blocksize\": 256, "
                                               "\"nested_dtype\": \"float32\", \"nested_offset\": 0.01}"},
                "absmax' is U8 [64], expected U8 [32]", "blocksize disagrees with absmax");
    /* The blocksize rule of io/bnb4: powers of two from 32 to 4096, the nested blocks too. */
    bnb_variant("bnb_qs_block16", (struct edit){.qs_name = qs, .qs_json = "{\"quant_type\": \"nf4\", \"blocksize\": 16, "
                                                "\"dtype\": \"bfloat16\", \"shape\": [64, 64]}"},
                "has blocksize 16; expected a power of two from 32 to 4096", "blocksize 16");
    bnb_variant("bnb_qs_nested_block", (struct edit){.qs_name = qs, .qs_json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, "
                                                     "\"dtype\": \"bfloat16\", \"shape\": [64, 64], \"nested_blocksize\": 8192, "
                                                     "\"nested_dtype\": \"float32\", \"nested_offset\": 0.01}"},
                "has nested_blocksize 8192", "nested_blocksize 8192");
}

/* The slot order both ways: the globals first (layer -1), then each layer's weights in kind order. */
static void test_slots(void) {
    const int L = 3;
    for (int s = 0; s < MW_N_GLOBAL + L * MW_N_LAYER; s++) {
        const enum model_weight want = s < MW_N_GLOBAL ? (enum model_weight)s
                                                       : (enum model_weight)(MW_ATTN_NORM + (s - MW_N_GLOBAL) % MW_N_LAYER);
        const int want_layer = s < MW_N_GLOBAL ? -1 : (s - MW_N_GLOBAL) / MW_N_LAYER;
        int layer = -2;
        const enum model_weight kind = model_weight_of_slot(s, &layer);
        EXPECT(kind == want && layer == want_layer, "slot %d: kind %d layer %d, expected %d and %d", s, (int)kind, layer,
               (int)want, want_layer);
        EXPECT(model_weight_slot(kind, layer) == s, "slot of (%d, %d) is %d, expected %d", (int)kind, layer,
               model_weight_slot(kind, layer), s);
    }
    EXPECT(model_weight_slot(MW_LM_HEAD, 7) == (int)MW_LM_HEAD, "a global kind's slot ignores the layer");
    EXPECT(model_weight_slot(MW_ATTN_NORM, 1) == MW_N_GLOBAL + MW_N_LAYER, "layer 1 starts after layer 0's weights");
}

int main(int argc, char **argv) {
    (void)test_seed(argc, argv, 1);
    const char *t = getenv("TEST_TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/model_files_test", t && *t ? t : "/tmp");
    struct io_err e;
    if (make_dirs(g_dir, &e) != 0) io_exit(&e);
    test_transformers_folders();
    test_synthetic();
    test_bnb_variants();
    test_slots();
    return test_finish("model_files_test");
}
