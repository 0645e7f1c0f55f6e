/* config.c — the model config from an HF config.json, by name, and its validation (config.h).
 *
 * Reading follows transformers' config classes (LlamaConfig, MistralConfig, Qwen2Config; both
 * the v4 spelling — top-level rope_theta, rope_scaling with "type" or "rope_type", torch_dtype —
 * and the v5 one — rope_parameters holding rope_theta and the scaling, dtype):
 *   required: model_type ("llama", "mistral", "qwen2"), hidden_size, intermediate_size,
 *     num_hidden_layers, num_attention_heads, vocab_size — a config without them is broken, and
 *     transformers' silent defaults (4096, 32 layers, ...) would describe another model;
 *   optional, with the family's transformers default: num_key_value_heads (H), head_dim (C/H),
 *     rms_norm_eps (1e-6), rope_theta (10000), max_position_embeddings (llama 2048, mistral
 *     131072, qwen2 32768), tie_word_embeddings (false), bos/eos (llama and mistral 1/2, qwen2
 *     none), pad_token_id (none).
 * What refine cannot run is rejected with the reason: hidden_act other than "silu", mlp_bias,
 * attention_bias on a Llama/Mistral config (that also puts a bias on o_proj; only Qwen2's q/k/v
 * biases are supported), attention_dropout > 0, rope types other than default and llama3, a
 * quantization other than bitsandbytes 4-bit (8-bit, GPTQ, AWQ, ...), architectures other than
 * *ForCausalLM of the three families. Sliding windows are kept (config.h: sliding_window) and
 * enforced per sequence length by config_check_seq_len. bnb fp4 is parsed (QUANT_BNB_FP4) and
 * refused by the weight loader, which names the tensors.
 */
#include "io/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cJSON.h"
#include "io/file.h"
#include "io/utf8.h"

#define CONFIG_MAX_BYTES (4u << 20)

/* Limits far above any Llama-family model, low enough that every size product fits in int64. */
#define MAX_C (1 << 17)
#define MAX_F (1 << 20)
#define MAX_L 1024
#define MAX_H 1024
#define MAX_D 1024
#define MAX_V (1 << 23)

static const char *json_type(const cJSON *v) {
    if (v == NULL) return "absent";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "a list";
    return "an object";
}

/* An item by exact key; a key given twice is an error (cJSON keeps both). */
static int item(const cJSON **out, const cJSON *obj, const char *key, const char *path, struct io_err *e) {
    *out = NULL;
    for (const cJSON *c = obj->child; c != NULL; c = c->next) {
        if (strcmp(c->string, key) != 0) continue;
        if (*out != NULL) return io_fail(e, "%s: the key \"%s\" is given twice", path, key);
        *out = c;
    }
    return 0;
}

static int is_int(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= -2147483648.0 && v->valuedouble <= 2147483647.0 &&
           v->valuedouble == floor(v->valuedouble);
}

/* An integer key; absent or null gives dflt when !required. */
static int get_int(int *out, const cJSON *obj, const char *key, int required, int dflt, const char *path,
                   struct io_err *e) {
    const cJSON *v;
    if (item(&v, obj, key, path, e) != 0) return -1;
    if (v == NULL || cJSON_IsNull(v)) {
        if (required) return io_fail(e, "%s: \"%s\" is %s; it is required", path, key, json_type(v));
        *out = dflt;
        return 0;
    }
    if (cJSON_IsNumber(v) && !is_int(v))
        return io_fail(e, "%s: \"%s\" must be an integer, got %g", path, key, v->valuedouble);
    if (!is_int(v)) return io_fail(e, "%s: \"%s\" must be an integer, got %s", path, key, json_type(v));
    *out = (int)v->valuedouble;
    return 0;
}

static int get_num(double *out, const cJSON *obj, const char *key, int required, double dflt, const char *path,
                   struct io_err *e) {
    const cJSON *v;
    if (item(&v, obj, key, path, e) != 0) return -1;
    if (v == NULL || cJSON_IsNull(v)) {
        if (required) return io_fail(e, "%s: \"%s\" is %s; it is required", path, key, json_type(v));
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return io_fail(e, "%s: \"%s\" must be a finite number, got %s", path, key, json_type(v));
    *out = v->valuedouble;
    return 0;
}

static int get_bool(int *out, const cJSON *obj, const char *key, int dflt, const char *path, struct io_err *e) {
    const cJSON *v;
    if (item(&v, obj, key, path, e) != 0) return -1;
    if (v == NULL || cJSON_IsNull(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v)) return io_fail(e, "%s: \"%s\" must be true or false, got %s", path, key, json_type(v));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 0;
}

/* A string key copied into out[cap]; absent or null gives "" (or dflt). */
static int get_str(char *out, size_t cap, const cJSON *obj, const char *key, const char *dflt, const char *path,
                   struct io_err *e) {
    const cJSON *v;
    if (item(&v, obj, key, path, e) != 0) return -1;
    if (v == NULL || cJSON_IsNull(v)) {
        snprintf(out, cap, "%s", dflt);
        return 0;
    }
    if (!cJSON_IsString(v)) return io_fail(e, "%s: \"%s\" must be a string, got %s", path, key, json_type(v));
    if (strlen(v->valuestring) >= cap)
        return io_fail(e, "%s: \"%s\" is \"%.40s...\", longer than any value refine knows", path, key, v->valuestring);
    snprintf(out, cap, "%s", v->valuestring);
    return 0;
}

/* rope_scaling (v4) or rope_parameters (v5): {"rope_type" | "type": ..., factor, ...}. */
static int parse_rope(struct model_config *c, const cJSON *rs, const char *key, const char *path, struct io_err *e) {
    memset(&c->rope_scaling, 0, sizeof c->rope_scaling);
    if (rs == NULL || cJSON_IsNull(rs)) return 0;
    if (!cJSON_IsObject(rs)) return io_fail(e, "%s: \"%s\" must be an object or null, got %s", path, key, json_type(rs));
    char type[32], alt[32];
    if (get_str(type, sizeof type, rs, "rope_type", "", path, e) != 0) return -1;
    if (get_str(alt, sizeof alt, rs, "type", "", path, e) != 0) return -1;
    if (type[0] == '\0') snprintf(type, sizeof type, "%s", alt);
    if (type[0] != '\0' && alt[0] != '\0' && strcmp(type, alt) != 0)
        return io_fail(e, "%s: \"%s\" says rope_type \"%s\" and type \"%s\"", path, key, type, alt);
    if (type[0] == '\0') {
        /* rope_parameters may hold only rope_theta; a rope_scaling object must say its type. */
        if (strcmp(key, "rope_parameters") == 0) return 0;
        return io_fail(e, "%s: \"%s\" has no \"rope_type\" (or \"type\")", path, key);
    }
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "llama3") != 0)
        return io_fail(e, "%s: %s type \"%s\" is not supported (refine implements the default RoPE and \"llama3\")", path,
                       key, type);
    double f, lo, hi;
    int orig;
    if (get_num(&f, rs, "factor", 1, 0, path, e) != 0 || get_num(&lo, rs, "low_freq_factor", 1, 0, path, e) != 0 ||
        get_num(&hi, rs, "high_freq_factor", 1, 0, path, e) != 0 ||
        get_int(&orig, rs, "original_max_position_embeddings", 1, 0, path, e) != 0) {
        char why[IO_ERR_CAP] = "";
        if (e != NULL && strchr(e->msg, '"') != NULL) snprintf(why, sizeof why, " (%s)", strchr(e->msg, '"'));
        return io_fail(e, "%s: llama3 %s needs the numbers factor, low_freq_factor, high_freq_factor and "
                       "original_max_position_embeddings%s", path, key, why);
    }
    c->rope_scaling.kind = ROPE_SCALING_LLAMA3;
    c->rope_scaling.factor = (float)f;
    c->rope_scaling.low_freq_factor = (float)lo;
    c->rope_scaling.high_freq_factor = (float)hi;
    c->rope_scaling.original_max_position_embeddings = orig;
    return 0;
}

static int parse_quant(struct model_config *c, const cJSON *q, const char *path, struct io_err *e) {
    memset(&c->quant, 0, sizeof c->quant);
    if (q == NULL || cJSON_IsNull(q)) return 0;
    if (!cJSON_IsObject(q)) return io_fail(e, "%s: \"quantization_config\" must be an object, got %s", path, json_type(q));
    char method[32], type[16];
    int in4, in8, dq;
    if (get_str(method, sizeof method, q, "quant_method", "", path, e) != 0) return -1;
    if (strcmp(method, "bitsandbytes") != 0)
        return io_fail(e, "%s: quantization_config quant_method \"%s\" is not supported (refine reads bitsandbytes 4-bit "
                       "checkpoints; give it the unquantized model for other formats)", path, method);
    if (get_bool(&in4, q, "load_in_4bit", -1, path, e) != 0 || get_bool(&in8, q, "load_in_8bit", 0, path, e) != 0) return -1;
    if (in4 == -1 && get_bool(&in4, q, "_load_in_4bit", 0, path, e) != 0) return -1;
    if (in8) return io_fail(e, "%s: bitsandbytes 8-bit (load_in_8bit) checkpoints are not supported; only 4-bit NF4", path);
    if (in4 != 1) return io_fail(e, "%s: quantization_config is bitsandbytes but load_in_4bit is not true", path);
    /* BitsAndBytesConfig defaults: fp4, no double quantization, float32 compute. */
    if (get_str(type, sizeof type, q, "bnb_4bit_quant_type", "fp4", path, e) != 0) return -1;
    if (strcmp(type, "nf4") == 0)
        c->quant.kind = QUANT_BNB_NF4;
    else if (strcmp(type, "fp4") == 0)
        c->quant.kind = QUANT_BNB_FP4;
    else
        return io_fail(e, "%s: bnb_4bit_quant_type \"%s\" is unknown (expected \"nf4\" or \"fp4\")", path, type);
    if (get_bool(&dq, q, "bnb_4bit_use_double_quant", 0, path, e) != 0) return -1;
    c->quant.double_quant = dq;
    c->quant.blocksize = 64;
    if (get_str(c->quant.compute_dtype, sizeof c->quant.compute_dtype, q, "bnb_4bit_compute_dtype", "float32", path, e) !=
        0)
        return -1;
    if (strcmp(c->quant.compute_dtype, "float32") != 0 && strcmp(c->quant.compute_dtype, "bfloat16") != 0 &&
        strcmp(c->quant.compute_dtype, "float16") != 0)
        return io_fail(e, "%s: bnb_4bit_compute_dtype \"%s\" is unknown (expected float32, bfloat16 or float16)", path,
                       c->quant.compute_dtype);
    char storage[16];
    if (get_str(storage, sizeof storage, q, "bnb_4bit_quant_storage", "uint8", path, e) != 0) return -1;
    if (strcmp(storage, "uint8") != 0)
        return io_fail(e, "%s: bnb_4bit_quant_storage \"%s\" is not supported (expected \"uint8\")", path, storage);
    return 0;
}

static int parse_eos(struct model_config *c, const cJSON *root, int dflt, const char *path, struct io_err *e) {
    const cJSON *v;
    if (item(&v, root, "eos_token_id", path, e) != 0) return -1;
    c->n_eos = 0;
    if (v == NULL) {
        if (dflt >= 0) c->eos_token_ids[c->n_eos++] = dflt;
        return 0;
    }
    if (cJSON_IsNull(v)) return 0;
    if (is_int(v)) {
        c->eos_token_ids[c->n_eos++] = (int)v->valuedouble;
        return 0;
    }
    if (!cJSON_IsArray(v)) return io_fail(e, "%s: \"eos_token_id\" must be an integer or a list of integers", path);
    for (const cJSON *x = v->child; x != NULL; x = x->next) {
        if (!is_int(x)) return io_fail(e, "%s: \"eos_token_id\" holds %s; expected integers", path, json_type(x));
        if (c->n_eos == CONFIG_MAX_EOS)
            return io_fail(e, "%s: \"eos_token_id\" lists more than %d ids", path, CONFIG_MAX_EOS);
        c->eos_token_ids[c->n_eos++] = (int)x->valuedouble;
    }
    return 0;
}

/* Sliding window as each family defines it (0 = none). */
static int parse_window(struct model_config *c, const cJSON *root, const char *path, struct io_err *e) {
    c->sliding_window = 0;
    if (strcmp(c->model_type, "llama") == 0) return 0;
    int window, use = 1;
    if (get_int(&window, root, "sliding_window", 0, 0, path, e) != 0) return -1;
    if (strcmp(c->model_type, "qwen2") == 0) {
        if (get_bool(&use, root, "use_sliding_window", 0, path, e) != 0) return -1;
        const cJSON *lt;
        if (item(&lt, root, "layer_types", path, e) != 0) return -1;
        if (lt != NULL && cJSON_IsArray(lt))
            for (const cJSON *x = lt->child; x != NULL; x = x->next)
                if (cJSON_IsString(x) && strcmp(x->valuestring, "sliding_attention") == 0) use = 1;
    }
    if (use && window != 0) {
        if (window < 0) return io_fail(e, "%s: \"sliding_window\" is %d; expected a positive integer or null", path, window);
        c->sliding_window = window;
    }
    return 0;
}

static int check_architectures(const cJSON *root, const char *path, struct io_err *e) {
    const cJSON *a;
    if (item(&a, root, "architectures", path, e) != 0) return -1;
    if (a == NULL || cJSON_IsNull(a)) return 0;
    if (!cJSON_IsArray(a)) return io_fail(e, "%s: \"architectures\" must be a list of strings", path);
    for (const cJSON *x = a->child; x != NULL; x = x->next) {
        if (!cJSON_IsString(x)) return io_fail(e, "%s: \"architectures\" must be a list of strings", path);
        if (strcmp(x->valuestring, "LlamaForCausalLM") != 0 && strcmp(x->valuestring, "MistralForCausalLM") != 0 &&
            strcmp(x->valuestring, "Qwen2ForCausalLM") != 0)
            return io_fail(e, "%s: architecture \"%s\" is not supported (expected LlamaForCausalLM, MistralForCausalLM or "
                           "Qwen2ForCausalLM)", path, x->valuestring);
    }
    return 0;
}

static int parse_root(struct model_config *c, const cJSON *root, const char *path, struct io_err *e) {
    if (!cJSON_IsObject(root)) return io_fail(e, "%s: expected a JSON object", path);
    if (get_str(c->model_type, sizeof c->model_type, root, "model_type", "", path, e) != 0) return -1;
    if (c->model_type[0] == '\0') return io_fail(e, "%s: \"model_type\" is missing (expected \"llama\", \"mistral\" or \"qwen2\")", path);
    int llama = strcmp(c->model_type, "llama") == 0, mistral = strcmp(c->model_type, "mistral") == 0,
        qwen2 = strcmp(c->model_type, "qwen2") == 0;
    if (!llama && !mistral && !qwen2)
        return io_fail(e, "%s: model_type \"%s\" is not supported (refine trains LlamaForCausalLM-shaped models: "
                       "\"llama\", \"mistral\", \"qwen2\")", path, c->model_type);
    if (check_architectures(root, path, e) != 0) return -1;

    if (get_int(&c->C, root, "hidden_size", 1, 0, path, e) != 0 || get_int(&c->F, root, "intermediate_size", 1, 0, path, e) ||
        get_int(&c->L, root, "num_hidden_layers", 1, 0, path, e) || get_int(&c->H, root, "num_attention_heads", 1, 0, path, e) ||
        get_int(&c->V, root, "vocab_size", 1, 0, path, e))
        return -1;
    if (c->H <= 0 || c->H > MAX_H) return io_fail(e, "%s: num_attention_heads is %d; expected 1 to %d", path, c->H, MAX_H);
    if (get_int(&c->KVH, root, "num_key_value_heads", 0, c->H, path, e) != 0) return -1;
    if (get_int(&c->D, root, "head_dim", 0, 0, path, e) != 0) return -1;
    if (c->D == 0) {
        if (c->C % c->H != 0)
            return io_fail(e, "%s: no head_dim, and hidden_size %d is not a multiple of num_attention_heads %d", path, c->C,
                           c->H);
        c->D = c->C / c->H;
    }
    int dflt_pos = llama ? 2048 : mistral ? 131072 : 32768;
    if (get_int(&c->max_position_embeddings, root, "max_position_embeddings", 0, dflt_pos, path, e) != 0) return -1;
    double eps, theta;
    if (get_num(&eps, root, "rms_norm_eps", 0, 1e-6, path, e) != 0) return -1;
    c->rms_norm_eps = (float)eps;

    const cJSON *rp, *rs;
    if (item(&rp, root, "rope_parameters", path, e) != 0 || item(&rs, root, "rope_scaling", path, e) != 0) return -1;
    if (get_num(&theta, root, "rope_theta", 0, 10000.0, path, e) != 0) return -1;
    if (rp != NULL && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp)) return io_fail(e, "%s: \"rope_parameters\" must be an object, got %s", path, json_type(rp));
        if (get_num(&theta, rp, "rope_theta", 0, theta, path, e) != 0) return -1;
        if (parse_rope(c, rp, "rope_parameters", path, e) != 0) return -1;
        if (c->rope_scaling.kind == ROPE_SCALING_NONE && parse_rope(c, rs, "rope_scaling", path, e) != 0) return -1;
    } else if (parse_rope(c, rs, "rope_scaling", path, e) != 0) {
        return -1;
    }
    c->rope_theta = (float)theta;

    if (get_bool(&c->tie_word_embeddings, root, "tie_word_embeddings", 0, path, e) != 0) return -1;
    int attn_bias, mlp_bias;
    if (get_bool(&attn_bias, root, "attention_bias", 0, path, e) != 0 || get_bool(&mlp_bias, root, "mlp_bias", 0, path, e) != 0)
        return -1;
    if (mlp_bias) return io_fail(e, "%s: mlp_bias is true; refine supports MLPs without biases (as in Llama)", path);
    if (attn_bias && !qwen2)
        return io_fail(e, "%s: attention_bias is true, which in %s also puts a bias on o_proj; refine supports only "
                       "Qwen2's q/k/v biases", path, c->model_type);
    c->attention_bias = qwen2 ? 1 : 0; /* Qwen2 always has q/k/v biases and no attention_bias key */
    char act[32];
    if (get_str(act, sizeof act, root, "hidden_act", "silu", path, e) != 0) return -1;
    if (strcmp(act, "silu") != 0)
        return io_fail(e, "%s: hidden_act \"%s\" is not supported (refine implements SwiGLU with \"silu\")", path, act);
    double drop;
    if (get_num(&drop, root, "attention_dropout", 0, 0.0, path, e) != 0) return -1;
    if (drop != 0.0) return io_fail(e, "%s: attention_dropout is %g; refine supports 0 only", path, drop);

    if (get_int(&c->bos_token_id, root, "bos_token_id", 0, qwen2 ? -1 : 1, path, e) != 0) return -1;
    if (parse_eos(c, root, qwen2 ? -1 : 2, path, e) != 0) return -1;
    if (get_int(&c->pad_token_id, root, "pad_token_id", 0, -1, path, e) != 0) return -1;
    if (get_str(c->torch_dtype, sizeof c->torch_dtype, root, "dtype", "", path, e) != 0) return -1;
    if (c->torch_dtype[0] == '\0' && get_str(c->torch_dtype, sizeof c->torch_dtype, root, "torch_dtype", "", path, e) != 0)
        return -1;
    const cJSON *q;
    if (item(&q, root, "quantization_config", path, e) != 0 || parse_quant(c, q, path, e) != 0) return -1;
    if (parse_window(c, root, path, e) != 0) return -1;
    if (config_validate(c, e) != 0) return io_fail_context(e, "%s", path);
    return 0;
}

int config_from_hf_json(struct model_config *c, const char *path, struct io_err *e) {
    memset(c, 0, sizeof *c);
    char file[4096];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (snprintf(file, sizeof file, "%s/config.json", path) >= (int)sizeof file) return io_fail(e, "%s: path too long", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
    }
    char *text;
    size_t len;
    if (read_file_text(&text, &len, file, CONFIG_MAX_BYTES, e) != 0) return -1;
    const int64_t bad = utf8_invalid_at(text, len);
    if (bad >= 0) {
        free(text);
        return io_fail(e, "%s: not valid UTF-8 (byte %lld); JSON text must be UTF-8", file, (long long)bad);
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (root == NULL) return io_fail(e, "%s: not valid JSON", file);
    int rc = parse_root(c, root, file, e);
    cJSON_Delete(root);
    if (rc != 0) memset(c, 0, sizeof *c);
    return rc;
}

int config_validate(const struct model_config *c, struct io_err *e) {
    if (c->C <= 0 || c->C > MAX_C) return io_fail(e, "hidden_size is %d; expected 1 to %d", c->C, MAX_C);
    if (c->F <= 0 || c->F > MAX_F) return io_fail(e, "intermediate_size is %d; expected 1 to %d", c->F, MAX_F);
    if (c->L <= 0 || c->L > MAX_L) return io_fail(e, "num_hidden_layers is %d; expected 1 to %d", c->L, MAX_L);
    if (c->H <= 0 || c->H > MAX_H) return io_fail(e, "num_attention_heads is %d; expected 1 to %d", c->H, MAX_H);
    if (c->KVH <= 0 || c->KVH > c->H || c->H % c->KVH != 0)
        return io_fail(e, "num_key_value_heads %d does not divide num_attention_heads %d (grouped-query attention needs "
                       "H %% KVH == 0)", c->KVH, c->H);
    if (c->D <= 0 || c->D > MAX_D || c->D % 2 != 0)
        return io_fail(e, "head_dim is %d; expected an even number from 2 to %d (RoPE rotates pairs)", c->D, MAX_D);
    if (c->V <= 0 || c->V > MAX_V) return io_fail(e, "vocab_size is %d; expected 1 to %d", c->V, MAX_V);
    if (c->max_position_embeddings <= 0)
        return io_fail(e, "max_position_embeddings is %d; expected a positive number", c->max_position_embeddings);
    if (!(c->rms_norm_eps > 0.0f && c->rms_norm_eps < 1.0f))
        return io_fail(e, "rms_norm_eps is %g; expected a small positive number", (double)c->rms_norm_eps);
    if (!(c->rope_theta > 1.0f && isfinite(c->rope_theta)))
        return io_fail(e, "rope_theta is %g; expected a finite number above 1", (double)c->rope_theta);
    if (c->rope_scaling.kind == ROPE_SCALING_LLAMA3) {
        const struct rope_scaling *r = &c->rope_scaling;
        if (!(r->factor >= 1.0f && isfinite(r->factor)) || !(r->low_freq_factor > 0.0f) ||
            !(r->high_freq_factor > r->low_freq_factor && isfinite(r->high_freq_factor)) ||
            r->original_max_position_embeddings <= 0)
            return io_fail(e, "llama3 rope scaling (factor %g, low_freq_factor %g, high_freq_factor %g, "
                           "original_max_position_embeddings %d) needs factor >= 1, 0 < low < high, original > 0",
                           (double)r->factor, (double)r->low_freq_factor, (double)r->high_freq_factor,
                           r->original_max_position_embeddings);
    } else if (c->rope_scaling.kind != ROPE_SCALING_NONE) {
        return io_fail(e, "rope scaling kind %d is unknown", (int)c->rope_scaling.kind);
    }
    if (c->bos_token_id < -1 || c->bos_token_id >= c->V)
        return io_fail(e, "bos_token_id %d is outside the vocabulary of %d tokens", c->bos_token_id, c->V);
    if (c->pad_token_id < -1 || c->pad_token_id >= c->V)
        return io_fail(e, "pad_token_id %d is outside the vocabulary of %d tokens", c->pad_token_id, c->V);
    if (c->n_eos < 0 || c->n_eos > CONFIG_MAX_EOS) return io_fail(e, "%d eos ids; at most %d", c->n_eos, CONFIG_MAX_EOS);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] < 0 || c->eos_token_ids[i] >= c->V)
            return io_fail(e, "eos_token_id %d is outside the vocabulary of %d tokens", c->eos_token_ids[i], c->V);
    if (c->sliding_window < 0) return io_fail(e, "sliding_window is %d", c->sliding_window);
    if (c->quant.kind != QUANT_NONE && c->quant.kind != QUANT_BNB_NF4 && c->quant.kind != QUANT_BNB_FP4)
        return io_fail(e, "quantization kind %d is unknown", (int)c->quant.kind);
    return 0;
}

int config_check_seq_len(const struct model_config *c, int T, struct io_err *e) {
    if (T <= 0) return io_fail(e, "sequence length %d; expected a positive number", T);
    if (c->sliding_window > 0 && T > c->sliding_window)
        return io_fail(e, "sequence length %d is beyond the model's sliding window of %d tokens; refine computes full "
                       "causal attention, which equals the windowed attention only up to the window",
                       T, c->sliding_window);
    return 0;
}

int config_seq_beyond_context(const struct model_config *c, int T) { return T > c->max_position_embeddings; }

static void llama3(struct model_config *c, int C, int F, int L, int H, int D, float factor, int tied) {
    snprintf(c->model_type, sizeof c->model_type, "llama");
    c->C = C, c->F = F, c->L = L, c->H = H, c->KVH = 8, c->D = D, c->V = 128256;
    c->max_position_embeddings = 131072;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 500000.0f;
    c->rope_scaling = (struct rope_scaling){ROPE_SCALING_LLAMA3, factor, 1.0f, 4.0f, 8192};
    c->tie_word_embeddings = tied;
    c->bos_token_id = 128000;
    c->eos_token_ids[0] = 128001;
    c->n_eos = 1;
    c->pad_token_id = -1;
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "bfloat16");
}

int config_named(struct model_config *c, const char *name, struct io_err *e) {
    memset(c, 0, sizeof *c);
    if (strcmp(name, "llama-3.2-1b") == 0) {
        llama3(c, 2048, 8192, 16, 32, 64, 32.0f, 1);
    } else if (strcmp(name, "llama-3.2-3b") == 0) {
        llama3(c, 3072, 8192, 28, 24, 128, 32.0f, 1);
    } else if (strcmp(name, "llama-3.1-8b") == 0) {
        llama3(c, 4096, 14336, 32, 32, 128, 8.0f, 0);
    } else if (strcmp(name, "smollm2-135m") == 0) {
        /* From SmolLM2-135M-Instruct's GGUF metadata (llama.*; no output.weight: tied). */
        snprintf(c->model_type, sizeof c->model_type, "llama");
        c->C = 576, c->F = 1536, c->L = 30, c->H = 9, c->KVH = 3, c->D = 64, c->V = 49152;
        c->max_position_embeddings = 8192;
        c->rms_norm_eps = 1e-5f;
        c->rope_theta = 100000.0f;
        c->tie_word_embeddings = 1;
        c->bos_token_id = 1;
        c->eos_token_ids[0] = 2;
        c->n_eos = 1;
        c->pad_token_id = 2;
        snprintf(c->torch_dtype, sizeof c->torch_dtype, "bfloat16");
    } else {
        return io_fail(e, "unknown model name \"%s\" (known: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, smollm2-135m)", name);
    }
    return config_validate(c, e);
}
