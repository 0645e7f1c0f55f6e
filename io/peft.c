/* peft.c — PEFT adapter folders: writing and reading adapter_config.json and
 * adapter_model.safetensors (peft.h). */
#include "io/peft.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/family.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "io/utf8.h"

#define PEFT_CONFIG_MAX_BYTES (1u << 20)
#define PEFT_MAX_LAYERS 4096

/* The adapted Linears are the family's (io/family.h): table index i is enum llama_linear i. */
#define PEFT_N_KINDS LLAMA_N_LINEAR
static enum model_weight peft_kind(int i) { return llama_linears[i].weight; }

const char *peft_module_name(enum model_weight kind) {
    const int t = llama_linear_of_weight(kind);
    return t >= 0 ? llama_linears[t].peft : NULL;
}

static int kind_index(enum model_weight kind) { return llama_linear_of_weight(kind); }

/* The bit set of every adaptable Linear's kind. */
static unsigned all_kinds(void) {
    unsigned m = 0;
    for (int i = 0; i < PEFT_N_KINDS; i++) m |= 1u << peft_kind(i);
    return m;
}

void peft_key(char *buf, size_t cap, enum model_weight kind, int layer, const char *part) {
    CHECK(peft_module_name(kind) != NULL, "kind %d is not a PEFT target", (int)kind);
    char w[128];
    model_weight_name(w, sizeof w, kind, layer); /* "model.layers.3.self_attn.q_proj.weight" */
    w[strlen(w) - strlen(".weight")] = '\0';
    snprintf(buf, cap, "base_model.model.%s.%s", w, part);
}

double peft_scale(const struct peft_config *c) {
    return c->use_rslora ? c->lora_alpha / sqrt((double)c->r) : c->lora_alpha / (double)c->r;
}

/* ---- JSON text as Python's json.dumps(indent=2, sort_keys=True) writes it ---------------------- */

struct sbuf {
    char *p;
    size_t n, cap;
};

static void sb_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct sbuf *b, const char *fmt, ...) {
    if (b->p == NULL) {
        b->cap = 4096;
        b->p = malloc(b->cap);
        CHECK(b->p != NULL, "out of memory");
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        CHECK(k >= 0, "format");
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        b->cap = 2 * b->cap + (size_t)k + 64;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p != NULL, "out of memory");
    }
}

/* A JSON string with ensure_ascii escaping; -1 when s is not valid UTF-8. */
static int sb_string(struct sbuf *b, const char *s) {
    sb_add(b, "\"");
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        uint32_t cp;
        int len;
        if (*u < 0x80) cp = *u, len = 1;
        else if ((*u & 0xE0) == 0xC0) cp = *u & 0x1F, len = 2;
        else if ((*u & 0xF0) == 0xE0) cp = *u & 0x0F, len = 3;
        else if ((*u & 0xF8) == 0xF0) cp = *u & 0x07, len = 4;
        else return -1;
        for (int k = 1; k < len; k++) {
            if ((u[k] & 0xC0) != 0x80) return -1;
            cp = (cp << 6) | (u[k] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if ((len > 1 && cp < min_cp[len]) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
        u += len;
        switch (cp) {
        case '"': sb_add(b, "\\\""); break;
        case '\\': sb_add(b, "\\\\"); break;
        case '\n': sb_add(b, "\\n"); break;
        case '\r': sb_add(b, "\\r"); break;
        case '\t': sb_add(b, "\\t"); break;
        case '\b': sb_add(b, "\\b"); break;
        case '\f': sb_add(b, "\\f"); break;
        default:
            if (cp < 0x20 || (cp >= 0x7F && cp < 0x10000)) {
                sb_add(b, "\\u%04x", cp);
            } else if (cp >= 0x10000) {
                cp -= 0x10000;
                sb_add(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                sb_add(b, "%c", (char)cp);
            }
        }
    }
    sb_add(b, "\"");
    return 0;
}

/* Python's repr of a float: the shortest digits that read back the same, with ".0" when integral. */
static void sb_float(struct sbuf *b, double v) {
    char t[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, v);
        if (strtod(t, NULL) == v) break;
    }
    if (strpbrk(t, ".eEn") == NULL) strcat(t, ".0");
    sb_add(b, "%s", t);
}

char *peft_config_json(const struct peft_config *c, struct io_err *e) {
    if (c->r < 1) return io_fail(e, "adapter config: r is %d; expected a positive rank", c->r), NULL;
    if (!isfinite(c->lora_alpha) || !isfinite(c->lora_dropout) || c->lora_dropout < 0 || c->lora_dropout >= 1)
        return io_fail(e, "adapter config: lora_alpha %g / lora_dropout %g out of range", c->lora_alpha, c->lora_dropout),
               NULL;
    if ((c->targets & ~all_kinds()) != 0 || c->targets == 0)
        return io_fail(e, "adapter config: target set 0x%x is empty or names a non-Linear weight", c->targets), NULL;
    struct sbuf b = {NULL, 0, 0};
    sb_add(&b, "{\n");
    sb_add(&b, "  \"alora_invocation_tokens\": null,\n  \"alpha_pattern\": {},\n  \"arrow_config\": null,\n"
               "  \"auto_mapping\": null,\n  \"base_model_name_or_path\": ");
    if (c->base_model[0] == '\0') {
        sb_add(&b, "null");
    } else if (sb_string(&b, c->base_model) != 0) {
        free(b.p);
        return io_fail(e, "adapter config: the base model name is not valid UTF-8"), NULL;
    }
    sb_add(&b, ",\n  \"bias\": \"none\",\n  \"corda_config\": null,\n  \"ensure_weight_tying\": false,\n"
               "  \"eva_config\": null,\n  \"exclude_modules\": null,\n  \"fan_in_fan_out\": false,\n"
               "  \"inference_mode\": true,\n  \"init_lora_weights\": true,\n  \"kasa_config\": null,\n"
               "  \"layer_replication\": null,\n  \"layers_pattern\": null,\n  \"layers_to_transform\": ");
    if (c->n_layers_to_transform == 0) {
        sb_add(&b, "null");
    } else {
        sb_add(&b, "[\n");
        for (int i = 0; i < c->n_layers_to_transform; i++)
            sb_add(&b, "    %d%s\n", c->layers_to_transform[i], i + 1 < c->n_layers_to_transform ? "," : "");
        sb_add(&b, "  ]");
    }
    sb_add(&b, ",\n  \"loftq_config\": {},\n  \"lora_alpha\": ");
    if (c->lora_alpha == floor(c->lora_alpha) && fabs(c->lora_alpha) < 1e15)
        sb_add(&b, "%lld", (long long)c->lora_alpha);
    else
        sb_float(&b, c->lora_alpha);
    sb_add(&b, ",\n  \"lora_bias\": false,\n  \"lora_dropout\": ");
    sb_float(&b, c->lora_dropout);
    sb_add(&b, ",\n  \"lora_ga_config\": null,\n  \"megatron_config\": null,\n  \"megatron_core\": \"megatron.core\",\n"
               "  \"modules_to_save\": null,\n  \"monteclora_config\": null,\n  \"peft_type\": \"LORA\",\n"
               "  \"peft_version\": \"" PEFT_FORMAT_VERSION "\",\n  \"qalora_group_size\": 16,\n  \"r\": %d,\n"
               "  \"rank_pattern\": {},\n  \"revision\": null,\n  \"target_modules\": [\n",
           c->r);
    int first = 1;
    for (int i = 0; i < PEFT_N_KINDS; i++) {
        if (!(c->targets & (1u << peft_kind(i)))) continue;
        sb_add(&b, "%s    \"%s\"", first ? "" : ",\n", llama_linears[i].peft);
        first = 0;
    }
    sb_add(&b, "\n  ],\n  \"target_parameters\": null,\n  \"task_type\": \"CAUSAL_LM\",\n"
               "  \"trainable_token_indices\": null,\n  \"use_bdlora\": null,\n  \"use_dora\": %s,\n"
               "  \"use_qalora\": false,\n  \"use_rslora\": %s,\n  \"velora_config\": null\n}",
           c->use_dora ? "true" : "false", c->use_rslora ? "true" : "false");
    return b.p;
}

int peft_write(const char *dir, const struct peft_config *c, const struct peft_module *mods, int n, struct io_err *e) {
    char *json = peft_config_json(c, e);
    if (json == NULL) return io_fail_context(e, "%s", dir);
    int per = c->use_dora ? 3 : 2;
    struct st_tensor *t = calloc((size_t)(n > 0 ? n : 1) * (size_t)per, sizeof *t);
    char (*names)[192] = calloc((size_t)(n > 0 ? n : 1) * (size_t)per, sizeof *names);
    CHECK(t != NULL && names != NULL, "out of memory");
    int k = 0, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const struct peft_module *m = &mods[i];
        CHECK(peft_module_name(m->kind) != NULL && (c->targets & (1u << m->kind)) && m->layer >= 0 && m->in > 0 &&
                  m->out > 0 && m->lora_a != NULL && m->lora_b != NULL && (!c->use_dora || m->magnitude != NULL),
              "module %d (kind %d, layer %d) does not fit the adapter config", i, (int)m->kind, m->layer);
        const char *parts[3] = {"lora_A.weight", "lora_B.weight", "lora_magnitude_vector"};
        const float *data[3] = {m->lora_a, m->lora_b, m->magnitude};
        int64_t shapes[3][2] = {{c->r, m->in}, {m->out, c->r}, {m->out, 0}};
        for (int p = 0; p < per; p++, k++) {
            peft_key(names[k], sizeof names[k], m->kind, m->layer, parts[p]);
            t[k].name = names[k];
            t[k].dtype = ST_F32;
            t[k].ndim = p == 2 ? 1 : 2;
            t[k].shape[0] = shapes[p][0];
            t[k].shape[1] = shapes[p][1];
            t[k].data = (const uint8_t *)data[p];
            t[k].nbytes = (size_t)(shapes[p][0] * (p == 2 ? 1 : shapes[p][1])) * sizeof(float);
        }
    }
    char path[1200];
    struct st_meta meta = {"format", "pt"};
    if (make_dirs(dir, e) != 0) rc = -1;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (rc == 0) rc = safetensors_write(path, t, k, &meta, 1, e);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (rc == 0) rc = write_file_atomic(path, json, strlen(json), e);
    free(t);
    free(names);
    free(json);
    return rc;
}

/* ---- reading ------------------------------------------------------------------------------- */

static const cJSON *key_of(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static int is_null_or_absent(const cJSON *v) { return v == NULL || cJSON_IsNull(v); }

static int want_bool(int *out, const cJSON *o, const char *k, int dflt, const char *name, struct io_err *e) {
    const cJSON *v = key_of(o, k);
    if (is_null_or_absent(v)) { *out = dflt; return 0; }
    if (!cJSON_IsBool(v)) return io_fail(e, "%s: \"%s\" must be true or false", name, k);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int target_from_name(const char *s) {
    for (int i = 0; i < PEFT_N_KINDS; i++)
        if (strcmp(s, llama_linears[i].peft) == 0) return (int)peft_kind(i);
    return -1;
}

int peft_config_parse(struct peft_config *c, const char *json, size_t len, const char *name, struct io_err *e) {
    memset(c, 0, sizeof *c);
    if (utf8_invalid_at(json, len) >= 0) return io_fail(e, "%s: not valid UTF-8", name);
    if (memchr(json, '\0', len) != NULL) return io_fail(e, "%s: holds a NUL byte; expected JSON text", name);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return io_fail(e, "%s: not a JSON object (PEFT's adapter_config.json)", name);
    }
    int rc = -1;
    const cJSON *v = key_of(root, "peft_type");
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "LORA") != 0) {
        io_fail(e, "%s: \"peft_type\" is %s%s%s; refine reads LORA adapters (LoRA and DoRA)", name,
                cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : v ? "not a string" : "absent",
                cJSON_IsString(v) ? "\"" : "");
        goto done;
    }
    v = key_of(root, "r");
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > 65536) {
        io_fail(e, "%s: \"r\" must be an integer rank in 1..65536", name);
        goto done;
    }
    c->r = (int)v->valuedouble;
    v = key_of(root, "lora_alpha");
    c->lora_alpha = 8; /* PEFT's default */
    if (!is_null_or_absent(v)) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
            io_fail(e, "%s: \"lora_alpha\" must be a number", name);
            goto done;
        }
        c->lora_alpha = v->valuedouble;
    }
    v = key_of(root, "lora_dropout");
    if (!is_null_or_absent(v)) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1)) {
            io_fail(e, "%s: \"lora_dropout\" must be a number in [0, 1)", name);
            goto done;
        }
        c->lora_dropout = v->valuedouble;
    }
    int fifo, lbias;
    if (want_bool(&c->use_rslora, root, "use_rslora", 0, name, e) != 0 ||
        want_bool(&c->use_dora, root, "use_dora", 0, name, e) != 0 ||
        want_bool(&fifo, root, "fan_in_fan_out", 0, name, e) != 0 ||
        want_bool(&lbias, root, "lora_bias", 0, name, e) != 0)
        goto done;
    if (fifo || lbias) {
        io_fail(e, "%s: \"%s\" is true; refine's adapters have neither", name, fifo ? "fan_in_fan_out" : "lora_bias");
        goto done;
    }
    v = key_of(root, "bias");
    if (!is_null_or_absent(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0)) {
        io_fail(e, "%s: \"bias\" must be \"none\" (adapters that train base biases are not supported)", name);
        goto done;
    }
    static const char *const must_be_empty[] = {"modules_to_save", "rank_pattern", "alpha_pattern", "layers_pattern",
                                                "layer_replication", "trainable_token_indices", "target_parameters"};
    for (size_t i = 0; i < sizeof must_be_empty / sizeof must_be_empty[0]; i++) {
        v = key_of(root, must_be_empty[i]);
        if (is_null_or_absent(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && v->child == NULL)) continue;
        if (strcmp(must_be_empty[i], "layers_pattern") == 0 && cJSON_IsString(v)) continue;
        io_fail(e, "%s: \"%s\" is set; refine supports adapters without it", name, must_be_empty[i]);
        goto done;
    }
    /* LoRA variants that compute something else, or whose initialisation rewrites the base
     * weights (PiSSA, OLoRA, CorDA, LoftQ, LoRA-GA: the adapter only fits the modified base). */
    static const char *const variants[] = {"use_qalora", "alora_invocation_tokens", "use_bdlora", "arrow_config",
                                           "kasa_config", "monteclora_config", "velora_config", "megatron_config"};
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        v = key_of(root, variants[i]);
        if (is_null_or_absent(v) || cJSON_IsFalse(v)) continue;
        io_fail(e, "%s: \"%s\" is set; refine reads plain LoRA, rsLoRA and DoRA adapters", name, variants[i]);
        goto done;
    }
    v = key_of(root, "init_lora_weights");
    if (!is_null_or_absent(v) && !cJSON_IsBool(v) &&
        !(cJSON_IsString(v) && (strcmp(v->valuestring, "gaussian") == 0 || strcmp(v->valuestring, "eva") == 0 ||
                                strcmp(v->valuestring, "orthogonal") == 0))) {
        io_fail(e, "%s: \"init_lora_weights\" is %s%.40s%s, an initialisation that changes the base weights or that "
                "refine does not know; expected true, false, \"gaussian\", \"eva\" or \"orthogonal\"", name,
                cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "not a string",
                cJSON_IsString(v) ? "\"" : "");
        goto done;
    }
    v = key_of(root, "target_modules");
    if (is_null_or_absent(v)) {
        c->targets = (1u << MW_Q) | (1u << MW_V); /* PEFT's default for llama */
    } else if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "all-linear") == 0) {
            c->targets = all_kinds();
        } else if (target_from_name(v->valuestring) >= 0) {
            c->targets = 1u << target_from_name(v->valuestring);
        } else {
            io_fail(e, "%s: \"target_modules\" is the pattern \"%.64s\"; refine reads a list of q_proj, k_proj, "
                    "v_proj, o_proj, gate_proj, up_proj, down_proj, or \"all-linear\"", name, v->valuestring);
            goto done;
        }
    } else if (cJSON_IsArray(v)) {
        for (const cJSON *it = v->child; it != NULL; it = it->next) {
            int k = cJSON_IsString(it) ? target_from_name(it->valuestring) : -1;
            if (k < 0) {
                io_fail(e, "%s: \"target_modules\" names %s%.64s%s; refine adapts q_proj, k_proj, v_proj, o_proj, "
                        "gate_proj, up_proj and down_proj", name, cJSON_IsString(it) ? "\"" : "",
                        cJSON_IsString(it) ? it->valuestring : "a non-string", cJSON_IsString(it) ? "\"" : "");
                goto done;
            }
            c->targets |= 1u << k;
        }
        if (c->targets == 0) {
            io_fail(e, "%s: \"target_modules\" is empty", name);
            goto done;
        }
    } else {
        io_fail(e, "%s: \"target_modules\" must be a list of module names", name);
        goto done;
    }
    v = key_of(root, "layers_to_transform");
    if (cJSON_IsNumber(v) || cJSON_IsArray(v)) {
        const cJSON *it = cJSON_IsArray(v) ? v->child : v;
        for (; it != NULL; it = cJSON_IsArray(v) ? it->next : NULL) {
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
                it->valuedouble >= PEFT_MAX_LAYERS || c->n_layers_to_transform >= 64) {
                io_fail(e, "%s: \"layers_to_transform\" must list at most 64 layer numbers", name);
                goto done;
            }
            c->layers_to_transform[c->n_layers_to_transform++] = (int)it->valuedouble;
        }
    } else if (!is_null_or_absent(v)) {
        io_fail(e, "%s: \"layers_to_transform\" must be a layer number or a list of them", name);
        goto done;
    }
    v = key_of(root, "base_model_name_or_path");
    if (cJSON_IsString(v)) {
        size_t n = strlen(v->valuestring);
        if (n >= sizeof c->base_model || utf8_invalid_at(v->valuestring, n) >= 0) {
            io_fail(e, "%s: \"base_model_name_or_path\" is longer than %zu bytes or not valid UTF-8 once unescaped",
                    name, sizeof c->base_model - 1);
            goto done;
        }
        memcpy(c->base_model, v->valuestring, n + 1);
    } else if (!is_null_or_absent(v)) {
        io_fail(e, "%s: \"base_model_name_or_path\" must be a string or null", name);
        goto done;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

void peft_free(struct peft_adapter *a) {
    for (int i = 0; i < a->n; i++) {
        free((void *)a->mods[i].lora_a);
        free((void *)a->mods[i].lora_b);
        free((void *)a->mods[i].magnitude);
    }
    free(a->mods);
    memset(a, 0, sizeof *a);
}

const struct peft_module *peft_find(const struct peft_adapter *a, enum model_weight kind, int layer) {
    for (int i = 0; i < a->n; i++)
        if (a->mods[i].kind == kind && a->mods[i].layer == layer) return &a->mods[i];
    return NULL;
}

/* (kind, layer, part 0/1/2) of a saved key; -1 when not one of the three forms. */
static int parse_key(const char *key, enum model_weight *kind, int *layer, int *part) {
    static const char prefix[] = "base_model.model.model.layers.";
    if (strncmp(key, prefix, sizeof prefix - 1) != 0) return -1;
    const char *p = key + sizeof prefix - 1;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 6) v = v * 10 + (*p++ - '0'), digits++;
    if (digits == 0 || *p != '.' || (digits > 1 && p[-digits] == '0')) return -1;
    p++;
    static const char *const parts[3] = {"lora_A.weight", "lora_B.weight", "lora_magnitude_vector"};
    for (int i = 0; i < PEFT_N_KINDS; i++) {
        char mod[64];
        snprintf(mod, sizeof mod, "%s.", llama_linears[i].module);
        if (strncmp(p, mod, strlen(mod)) != 0) continue;
        for (int k = 0; k < 3; k++) {
            if (strcmp(p + strlen(mod), parts[k]) != 0) continue;
            *kind = peft_kind(i);
            *layer = (int)v;
            *part = k;
            return 0;
        }
    }
    return -1;
}

static int cmp_mod(const void *x, const void *y) {
    const struct peft_module *a = x, *b = y;
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    return (a->kind > b->kind) - (a->kind < b->kind);
}

static int layer_transformed(const struct peft_config *c, int layer) {
    if (c->n_layers_to_transform == 0) return 1;
    for (int i = 0; i < c->n_layers_to_transform; i++)
        if (c->layers_to_transform[i] == layer) return 1;
    return 0;
}

static int read_weights(struct peft_adapter *a, const struct safetensors *st, const struct model_config *base,
                        const char *path, struct io_err *e) {
    const struct peft_config *c = &a->config;
    const struct st_tensor **found = NULL; /* [layer][kind][part] */
    int max_layer = -1;
    for (int i = 0; i < st->n_tensors; i++) {
        enum model_weight kind;
        int layer, part;
        const struct st_tensor *t = &st->tensors[i];
        if (parse_key(t->name, &kind, &layer, &part) != 0)
            return io_fail(e, "%s: tensor '%s' is not a LoRA factor of a Llama Linear (expected "
                           "base_model.model.model.layers.N.{self_attn,mlp}.<module>.{lora_A.weight,lora_B.weight,"
                           "lora_magnitude_vector})", path, t->name);
        if (!(c->targets & (1u << kind)) || !layer_transformed(c, layer))
            return io_fail(e, "%s: tensor '%s' adapts a module that adapter_config.json does not target", path, t->name);
        if (part == 2 && !c->use_dora)
            return io_fail(e, "%s: tensor '%s' is a DoRA magnitude but adapter_config.json says use_dora false", path,
                           t->name);
        if (base != NULL && layer >= base->L)
            return io_fail(e, "%s: tensor '%s' adapts layer %d but the base model has %d layers", path, t->name, layer,
                           base->L);
        if (layer >= PEFT_MAX_LAYERS) return io_fail(e, "%s: tensor '%s': layer %d is too large", path, t->name, layer);
        if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
            return io_fail(e, "%s: tensor '%s' is %s; expected F32, F16 or BF16", path, t->name, st_dtype_name(t->dtype));
        if (layer > max_layer) max_layer = layer;
    }
    int n_layers = base != NULL ? base->L : max_layer + 1;
    found = calloc((size_t)(n_layers > 0 ? n_layers : 1) * PEFT_N_KINDS * 3, sizeof *found);
    CHECK(found != NULL, "out of memory");
    for (int i = 0; i < st->n_tensors; i++) {
        enum model_weight kind;
        int layer, part;
        parse_key(st->tensors[i].name, &kind, &layer, &part);
        found[((size_t)layer * PEFT_N_KINDS + (size_t)kind_index(kind)) * 3 + (size_t)part] = &st->tensors[i];
    }
    int rc = 0, n = 0;
    a->mods = calloc((size_t)(n_layers > 0 ? n_layers : 1) * PEFT_N_KINDS, sizeof *a->mods);
    CHECK(a->mods != NULL, "out of memory");
    for (int layer = 0; layer < n_layers && rc == 0; layer++) {
        for (int ki = 0; ki < PEFT_N_KINDS && rc == 0; ki++) {
            enum model_weight kind = peft_kind(ki);
            const struct st_tensor **f = &found[((size_t)layer * PEFT_N_KINDS + (size_t)ki) * 3];
            int expected = (c->targets & (1u << kind)) && layer_transformed(c, layer) && base != NULL;
            if (f[0] == NULL && f[1] == NULL && f[2] == NULL && !expected) continue;
            char key[192];
            for (int p = 0; p < (c->use_dora ? 3 : 2) && rc == 0; p++) {
                if (f[p] != NULL) continue;
                peft_key(key, sizeof key, kind, layer, p == 0 ? "lora_A.weight" : p == 1 ? "lora_B.weight"
                                                                                          : "lora_magnitude_vector");
                rc = io_fail(e, "%s: tensor '%s' is missing%s", path, key,
                             f[0] || f[1] || f[2] ? " (the module has its other factors)"
                                                  : " (adapter_config.json targets this module of the base model)");
            }
            if (rc != 0) break;
            int64_t in = f[0]->ndim == 2 ? f[0]->shape[1] : -1, out = f[1]->ndim == 2 ? f[1]->shape[0] : -1;
            if (base != NULL) {
                int64_t s[2];
                model_weight_shape(s, base, kind);
                out = s[0], in = s[1];
            }
            char got[64];
            if (f[0]->ndim != 2 || f[0]->shape[0] != c->r || f[0]->shape[1] != in) {
                st_shape_str(got, sizeof got, f[0]->ndim, f[0]->shape);
                rc = io_fail(e, "%s: tensor '%s' has shape %s; expected [r, in] = [%d, %lld]%s", path, f[0]->name, got,
                             c->r, (long long)in, base ? " (r from adapter_config.json, in from the base model)" : "");
            } else if (f[1]->ndim != 2 || f[1]->shape[0] != out || f[1]->shape[1] != c->r) {
                st_shape_str(got, sizeof got, f[1]->ndim, f[1]->shape);
                rc = io_fail(e, "%s: tensor '%s' has shape %s; expected [out, r] = [%lld, %d]%s", path, f[1]->name, got,
                             (long long)out, c->r, base ? " (out from the base model)" : "");
            } else if (c->use_dora && (f[2]->ndim != 1 || f[2]->shape[0] != out)) {
                st_shape_str(got, sizeof got, f[2]->ndim, f[2]->shape);
                rc = io_fail(e, "%s: tensor '%s' has shape %s; expected [out] = [%lld]", path, f[2]->name, got,
                             (long long)out);
            }
            if (rc != 0) break;
            struct peft_module *m = &a->mods[n++];
            m->kind = kind, m->layer = layer, m->in = in, m->out = out;
            float *bufs[3] = {NULL, NULL, NULL};
            for (int p = 0; p < (c->use_dora ? 3 : 2) && rc == 0; p++) {
                bufs[p] = malloc((size_t)f[p]->numel * sizeof(float) + 1);
                CHECK(bufs[p] != NULL, "out of memory");
                rc = st_tensor_to_f32(bufs[p], f[p], e);
            }
            m->lora_a = bufs[0], m->lora_b = bufs[1], m->magnitude = bufs[2];
        }
    }
    a->n = n;
    free(found);
    if (rc == 0 && n == 0) rc = io_fail(e, "%s: holds no LoRA factors", path);
    if (rc == 0) qsort(a->mods, (size_t)n, sizeof *a->mods, cmp_mod);
    return rc;
}

int peft_read(struct peft_adapter *a, const char *dir, const struct model_config *base, struct io_err *e) {
    memset(a, 0, sizeof *a);
    char path[1200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *text = NULL;
    size_t len = 0;
    if (read_file_text(&text, &len, path, PEFT_CONFIG_MAX_BYTES, e) != 0) return -1;
    int rc = peft_config_parse(&a->config, text, len, path, e);
    free(text);
    if (rc != 0) return -1;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (!file_exists(path)) {
        char bin[1200];
        snprintf(bin, sizeof bin, "%s/adapter_model.bin", dir);
        if (file_exists(bin))
            return io_fail(e, "%s: refine reads adapter_model.safetensors; this adapter is a pickled "
                           "adapter_model.bin (re-save it with safe_serialization=True)", dir);
    }
    struct safetensors st;
    if (safetensors_open(&st, path, e) != 0) return -1;
    rc = read_weights(a, &st, base, path, e);
    safetensors_close(&st);
    if (rc != 0) peft_free(a);
    return rc;
}
