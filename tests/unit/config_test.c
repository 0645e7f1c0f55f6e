/* config_test.c — io/config: HF config.json of each family in the transformers 4 (hub) and 5
 * (testdata/configs/gen_configs_v5.py) spellings, the named configs (NUMERICS.md §7.3), and
 * configs refine cannot run (each rejected with one clear message).
 *
 *   bazel test //tests/unit:config_test
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config.h"
#include "io/file.h"
#include "tests/common/harness.h"

#define TD "tests/unit/testdata/configs/"

static char g_dir[1024];

static const char *write_json(const char *name, const char *text) {
    static char path[1300];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    struct io_err e;
    if (write_file_atomic(path, text, strlen(text), &e) != 0) io_exit(&e);
    return path;
}

static struct model_config load(const char *path) {
    struct model_config c;
    struct io_err e = {{0}};
    int rc = config_from_hf_json(&c, path, &e);
    EXPECT(rc == 0, "%s rejected: %s", path, e.msg);
    return c;
}

static void expect_same(const struct model_config *a, const struct model_config *b, const char *what) {
    EXPECT(strcmp(a->model_type, b->model_type) == 0 && a->C == b->C && a->F == b->F && a->L == b->L && a->H == b->H &&
               a->KVH == b->KVH && a->D == b->D && a->V == b->V,
           "%s: shapes differ", what);
    EXPECT(a->max_position_embeddings == b->max_position_embeddings && a->rms_norm_eps == b->rms_norm_eps &&
               a->rope_theta == b->rope_theta && a->tie_word_embeddings == b->tie_word_embeddings &&
               a->attention_bias == b->attention_bias && a->bos_token_id == b->bos_token_id &&
               a->pad_token_id == b->pad_token_id && strcmp(a->torch_dtype, b->torch_dtype) == 0,
           "%s: scalars differ", what);
    EXPECT(memcmp(&a->rope_scaling, &b->rope_scaling, sizeof a->rope_scaling) == 0, "%s: rope scaling differs", what);
    EXPECT(a->n_eos >= 1 && b->n_eos >= 1 && a->eos_token_ids[0] == b->eos_token_ids[0], "%s: eos differs", what);
}

static void test_families(void) {
    struct model_config named, c;
    struct io_err e;
    EXPECT(config_named(&named, "llama-3.2-1b", &e) == 0, "%s", e.msg);
    c = load(TD "llama-3.2-1b.json");
    expect_same(&c, &named, "hub llama-3.2-1b vs named");
    EXPECT(c.n_eos == 1 && c.quant.kind == QUANT_NONE && c.sliding_window == 0, "llama-3.2-1b eos/quant/window");

    c = load(TD "v5-llama-3.2-1b.json");
    expect_same(&c, &named, "transformers-5 llama-3.2-1b vs named");
    EXPECT(c.n_eos == 3 && c.eos_token_ids[0] == 128001 && c.eos_token_ids[1] == 128008 && c.eos_token_ids[2] == 128009,
           "eos list: %d ids", c.n_eos);

    EXPECT(config_named(&named, "llama-3.1-8b", &e) == 0, "%s", e.msg);
    c = load(TD "llama-3.1-8b-instruct-bnb-4bit.json");
    expect_same(&c, &named, "llama-3.1-8b bnb vs named");
    EXPECT(c.rope_scaling.kind == ROPE_SCALING_LLAMA3 && c.rope_scaling.factor == 8.0f, "\"type\" spelling of llama3");
    EXPECT(c.quant.kind == QUANT_BNB_NF4 && c.quant.double_quant == 1 && c.quant.blocksize == 64 &&
               strcmp(c.quant.compute_dtype, "bfloat16") == 0,
           "bnb quant config");
    EXPECT(c.D == 128 && c.tie_word_embeddings == 0, "head_dim from C/H");

    EXPECT(config_named(&named, "smollm2-135m", &e) == 0, "%s", e.msg);
    c = load(TD "smollm2-135m.json");
    expect_same(&c, &named, "hub smollm2-135m vs named");
    EXPECT(c.rope_scaling.kind == ROPE_SCALING_NONE && c.pad_token_id == 2 && c.rms_norm_eps == 1e-5f, "smollm2 fields");

    c = load(TD "qwen2.5-0.5b.json");
    EXPECT(strcmp(c.model_type, "qwen2") == 0 && c.attention_bias == 1 && c.C == 896 && c.H == 14 && c.KVH == 2 &&
               c.D == 64 && c.rope_theta == 1e6f && c.tie_word_embeddings == 1 && c.sliding_window == 0 &&
               c.rms_norm_eps == 1e-6f && c.bos_token_id == 151643,
           "qwen2.5-0.5b: bias %d D %d window %d", c.attention_bias, c.D, c.sliding_window);

    c = load(TD "v5-qwen2-window.json");
    EXPECT(c.attention_bias == 1 && c.sliding_window == 4096 && c.rope_theta == 1e6f && c.pad_token_id == -1 &&
               strcmp(c.torch_dtype, "bfloat16") == 0,
           "transformers-5 qwen2 with a window: window %d theta %g", c.sliding_window, (double)c.rope_theta);
    EXPECT(config_check_seq_len(&c, 4096, &e) == 0, "T = window: %s", e.msg);
    EXPECT(config_check_seq_len(&c, 4097, &e) == -1 && strstr(e.msg, "sliding window of 4096"), "T > window: %s", e.msg);

    c = load(TD "mistral-7b-v0.1.json");
    EXPECT(strcmp(c.model_type, "mistral") == 0 && c.attention_bias == 0 && c.sliding_window == 4096 && c.D == 128 &&
               c.max_position_embeddings == 32768,
           "mistral-7b-v0.1");
    c = load(TD "v5-mistral-bnb-fp4.json");
    EXPECT(c.quant.kind == QUANT_BNB_FP4 && c.quant.double_quant == 0 && strcmp(c.quant.compute_dtype, "float16") == 0 &&
               c.sliding_window == 0 && c.D == 32,
           "fp4 is parsed (and refused by the weight loader)");

    /* A directory holding config.json. */
    write_json("config.json", "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":96,"
                              "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100}");
    c = load(g_dir);
    EXPECT(c.C == 64 && c.KVH == 4 && c.D == 16 && c.rms_norm_eps == 1e-6f && c.rope_theta == 10000.0f &&
               c.max_position_embeddings == 2048 && c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2 &&
               c.pad_token_id == -1 && c.torch_dtype[0] == '\0',
           "LlamaConfig defaults for the optional keys");
    /* beyond max_position_embeddings: computed (RoPE extrapolates), the caller warns */
    EXPECT(config_check_seq_len(&c, 2048, &e) == 0 && config_check_seq_len(&c, 2049, &e) == 0 &&
               !config_seq_beyond_context(&c, 2048) && config_seq_beyond_context(&c, 2049),
           "seq len vs max positions: %s", e.msg);
    EXPECT(config_check_seq_len(&c, 0, &e) == -1 && strstr(e.msg, "positive"), "seq len 0 refused: %s", e.msg);
}

static void test_named(void) {
    struct model_config c;
    struct io_err e;
    EXPECT(config_named(&c, "llama-3.2-3b", &e) == 0, "%s", e.msg);
    EXPECT(c.C == 3072 && c.F == 8192 && c.L == 28 && c.H == 24 && c.KVH == 8 && c.D == 128 && c.V == 128256 &&
               c.tie_word_embeddings && c.rope_scaling.factor == 32.0f && c.rope_scaling.original_max_position_embeddings == 8192,
           "llama-3.2-3b");
    EXPECT(config_named(&c, "llama-3.1-8b", &e) == 0 && c.C == 4096 && c.F == 14336 && c.L == 32 && c.H == 32 && c.D == 128 &&
               !c.tie_word_embeddings && c.rope_scaling.factor == 8.0f && c.rope_scaling.low_freq_factor == 1.0f &&
               c.rope_scaling.high_freq_factor == 4.0f && c.rope_theta == 500000.0f && c.max_position_embeddings == 131072,
           "llama-3.1-8b");
    EXPECT(config_named(&c, "llama-3.2-1b", &e) == 0 && c.C == 2048 && c.L == 16 && c.D == 64 && c.H == 32 &&
               c.bos_token_id == 128000 && c.eos_token_ids[0] == 128001,
           "llama-3.2-1b");
    EXPECT(config_named(&c, "smollm2-135m", &e) == 0 && c.C == 576 && c.F == 1536 && c.L == 30 && c.H == 9 && c.KVH == 3 &&
               c.D == 64 && c.V == 49152 && c.rope_theta == 100000.0f && c.max_position_embeddings == 8192 &&
               c.tie_word_embeddings,
           "smollm2-135m");
    EXPECT(config_named(&c, "llama-4", &e) == -1 && strstr(e.msg, "unknown model name \"llama-4\""), "unknown: %s", e.msg);
}

struct bad_case {
    const char *what, *json, *phrase;
};

#define BASE "\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
#define BASE_H "\"num_attention_heads\":4,\"vocab_size\":100"

static void test_rejects(void) {
    static const struct bad_case cases[] = {
        {"not JSON", "{\"model_type\": llama}", "not valid JSON"},
        {"a list", "[1, 2]", "expected a JSON object"},
        {"no model_type", "{\"hidden_size\":64}", "\"model_type\" is missing"},
        {"gpt2", "{\"model_type\":\"gpt2\"}", "model_type \"gpt2\" is not supported"},
        {"architecture", "{" BASE BASE_H ",\"architectures\":[\"LlamaForSequenceClassification\"]}",
         "architecture \"LlamaForSequenceClassification\""},
        {"no hidden_size", "{\"model_type\":\"llama\",\"intermediate_size\":96}", "\"hidden_size\" is absent; it is required"},
        {"null vocab", "{" BASE "\"num_attention_heads\":4,\"vocab_size\":null}", "\"vocab_size\" is null"},
        {"string size", "{\"model_type\":\"llama\",\"hidden_size\":\"64\"}", "\"hidden_size\" must be an integer, got a string"},
        {"fractional", "{\"model_type\":\"llama\",\"hidden_size\":64.5}", "\"hidden_size\" must be an integer, got "},
        {"huge", "{\"model_type\":\"llama\",\"hidden_size\":1e300}", "\"hidden_size\" must be an integer, got "},
        {"negative C", "{\"model_type\":\"llama\",\"hidden_size\":-64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
                       "\"num_attention_heads\":4,\"vocab_size\":100,\"head_dim\":16}",
         "hidden_size is -64"},
        {"zero heads", "{" BASE "\"num_attention_heads\":0,\"vocab_size\":100}", "num_attention_heads is 0"},
        {"GQA", "{" BASE BASE_H ",\"num_key_value_heads\":3}", "does not divide num_attention_heads 4"},
        {"KVH > H", "{" BASE BASE_H ",\"num_key_value_heads\":8}", "num_key_value_heads 8"},
        {"C % H", "{" BASE "\"num_attention_heads\":5,\"vocab_size\":100}", "not a multiple of num_attention_heads 5"},
        {"odd head_dim", "{" BASE BASE_H ",\"head_dim\":15}", "head_dim is 15"},
        {"gelu", "{" BASE BASE_H ",\"hidden_act\":\"gelu\"}", "hidden_act \"gelu\" is not supported"},
        {"mlp_bias", "{" BASE BASE_H ",\"mlp_bias\":true}", "mlp_bias is true"},
        {"llama attention_bias", "{" BASE BASE_H ",\"attention_bias\":true}", "also puts a bias on o_proj"},
        {"bool as int", "{" BASE BASE_H ",\"tie_word_embeddings\":1}", "must be true or false"},
        {"dropout", "{" BASE BASE_H ",\"attention_dropout\":0.1}", "attention_dropout is 0.1"},
        {"yarn", "{" BASE BASE_H ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}}",
         "type \"yarn\" is not supported"},
        {"linear", "{" BASE BASE_H ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}}", "type \"linear\" is not supported"},
        {"v5 dynamic", "{" BASE BASE_H ",\"rope_parameters\":{\"rope_type\":\"dynamic\",\"rope_theta\":1e4}}",
         "rope_parameters type \"dynamic\""},
        {"no rope type", "{" BASE BASE_H ",\"rope_scaling\":{\"factor\":2.0}}", "has no \"rope_type\""},
        {"two rope types", "{" BASE BASE_H ",\"rope_scaling\":{\"type\":\"llama3\",\"rope_type\":\"yarn\"}}",
         "says rope_type \"yarn\" and type \"llama3\""},
        {"llama3 no factor", "{" BASE BASE_H ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"low_freq_factor\":1,"
                             "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}}",
         "llama3 rope_scaling needs the numbers factor"},
        {"llama3 low >= high", "{" BASE BASE_H ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,"
                               "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}}",
         "0 < low < high"},
        {"rope list", "{" BASE BASE_H ",\"rope_scaling\":[1]}", "must be an object or null"},
        {"theta 0", "{" BASE BASE_H ",\"rope_theta\":0}", "rope_theta is 0"},
        {"eps 0", "{" BASE BASE_H ",\"rms_norm_eps\":0}", "rms_norm_eps is 0"},
        {"eos string", "{" BASE BASE_H ",\"eos_token_id\":\"</s>\"}", "integer or a list of integers"},
        {"eos list of strings", "{" BASE BASE_H ",\"eos_token_id\":[1,\"x\"]}", "holds a string"},
        {"eos too many", "{" BASE BASE_H ",\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", "more than 8 ids"},
        {"eos outside", "{" BASE BASE_H ",\"eos_token_id\":100}", "eos_token_id 100 is outside the vocabulary of 100"},
        {"bos outside", "{" BASE BASE_H ",\"bos_token_id\":-5}", "bos_token_id -5"},
        {"duplicate key", "{" BASE BASE_H ",\"hidden_size\":128}", "\"hidden_size\" is given twice"},
        {"gptq", "{" BASE BASE_H ",\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4}}",
         "quant_method \"gptq\" is not supported"},
        {"bnb 8-bit", "{" BASE BASE_H ",\"quantization_config\":{\"quant_method\":\"bitsandbytes\",\"load_in_8bit\":true}}",
         "8-bit (load_in_8bit) checkpoints are not supported"},
        {"bnb not 4-bit", "{" BASE BASE_H ",\"quantization_config\":{\"quant_method\":\"bitsandbytes\"}}",
         "load_in_4bit is not true"},
        {"bnb int4", "{" BASE BASE_H ",\"quantization_config\":{\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,"
                     "\"bnb_4bit_quant_type\":\"int4\"}}",
         "bnb_4bit_quant_type \"int4\" is unknown"},
        {"bnb compute", "{" BASE BASE_H ",\"quantization_config\":{\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,"
                        "\"bnb_4bit_quant_type\":\"nf4\",\"bnb_4bit_compute_dtype\":\"float8\"}}",
         "bnb_4bit_compute_dtype \"float8\" is unknown"},
        {"bnb storage", "{" BASE BASE_H ",\"quantization_config\":{\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,"
                        "\"bnb_4bit_quant_type\":\"nf4\",\"bnb_4bit_quant_storage\":\"bfloat16\"}}",
         "bnb_4bit_quant_storage \"bfloat16\""},
        {"window negative", "{\"model_type\":\"mistral\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
                            "\"num_attention_heads\":4,\"vocab_size\":100,\"sliding_window\":-1}",
         "\"sliding_window\" is -1"},
        {"long dtype string", "{" BASE BASE_H ",\"torch_dtype\":\"a-very-long-dtype-name-indeed\"}", "longer than any value"},
        {"huge vocab", "{" BASE "\"num_attention_heads\":4,\"vocab_size\":100000000}", "vocab_size is 100000000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad_%zu.json", i);
        const char *path = write_json(name, cases[i].json);
        struct model_config c;
        struct io_err e = {{0}};
        int rc = config_from_hf_json(&c, path, &e);
        EXPECT(rc == -1 && strstr(e.msg, cases[i].phrase) != NULL && strstr(e.msg, name) != NULL,
               "%s: rc %d, message \"%s\" lacks \"%s\" or the file name", cases[i].what, rc, e.msg, cases[i].phrase);
        if (rc == -1) printf("  rejected (%s): %s\n", cases[i].what, strstr(e.msg, name));
    }
    struct model_config c;
    struct io_err e;
    char missing[1300];
    snprintf(missing, sizeof missing, "%s/none/config.json", g_dir);
    EXPECT(config_from_hf_json(&c, missing, &e) == -1 && strstr(e.msg, "cannot open"), "missing file: %s", e.msg);

    /* config_validate on hand-built configs. */
    EXPECT(config_named(&c, "smollm2-135m", &e) == 0, "%s", e.msg);
    c.KVH = 2;
    EXPECT(config_validate(&c, &e) == -1 && strstr(e.msg, "H % KVH == 0"), "validate KVH: %s", e.msg);
    c.KVH = 3;
    c.rope_scaling.kind = (enum rope_scaling_kind)7;
    EXPECT(config_validate(&c, &e) == -1 && strstr(e.msg, "rope scaling kind 7"), "validate rope kind: %s", e.msg);
    c.rope_scaling.kind = ROPE_SCALING_NONE;
    c.n_eos = 0;
    EXPECT(config_validate(&c, &e) == 0, "no eos is valid: %s", e.msg);
}

/* config_write_hf_json → config_from_hf_json gives the same struct, for every named config and
 * a Qwen2-like one with bias, untied head, several EOS ids and a sliding window. */
static void test_write_round_trip(void) {
    const char *names[] = {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "smollm2-135m"};
    struct io_err e = {{0}};
    char path[1200];
    snprintf(path, sizeof path, "%s/written_config.json", g_dir);
    for (int i = 0; i < 5; i++) {
        struct model_config a, b;
        EXPECT(config_named(&a, names[i < 4 ? i : 0], &e) == 0, "%s", e.msg);
        if (i == 4) {
            strcpy(a.model_type, "qwen2");
            a.attention_bias = 1;
            a.tie_word_embeddings = 0;
            a.rope_scaling.kind = ROPE_SCALING_NONE;
            memset(&a.rope_scaling, 0, sizeof a.rope_scaling);
            a.n_eos = 2;
            a.eos_token_ids[0] = 7;
            a.eos_token_ids[1] = 9;
            a.sliding_window = 4096;
            a.pad_token_id = 3;
        }
        EXPECT(config_write_hf_json(&a, path, &e) == 0, "write: %s", e.msg);
        b = load(path);
        expect_same(&a, &b, names[i < 4 ? i : 0]);
        EXPECT(a.n_eos == b.n_eos && memcmp(a.eos_token_ids, b.eos_token_ids, sizeof a.eos_token_ids[0] * (size_t)a.n_eos) == 0 &&
                   a.sliding_window == b.sliding_window,
               "eos list and window survive (%d)", i);
    }
}

int main(int argc, char **argv) {
    (void)test_seed(argc, argv, 1);
    const char *t = getenv("TEST_TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/config_test", t && *t ? t : "/tmp");
    struct io_err e;
    if (make_dirs(g_dir, &e) != 0) io_exit(&e);
    test_families();
    test_named();
    test_rejects();
    test_write_round_trip();
    return test_finish("config_test");
}
