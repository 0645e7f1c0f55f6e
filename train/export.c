/* export.c — see export.h. */
#include "train/export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "io/gguf_write.h"
#include "io/model_files.h"
#include "io/peft.h"
#include "io/safetensors.h"

static int find_tensor(const struct train_engine *eng, const char *name, struct engine_tensor *info) {
    const int n = eng->n_tensors(eng->self);
    for (int i = 0; i < n; i++) {
        if (eng->tensor_info(eng->self, i, info) == 0 && info->role == ROLE_PARAM && strcmp(info->name, name) == 0)
            return i;
    }
    return -1;
}

static int64_t numel_of(const struct engine_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static int read_param(const struct train_engine *eng, const char *name, int64_t want, float **out,
                      struct io_err *e) {
    struct engine_tensor info;
    const int i = find_tensor(eng, name, &info);
    *out = NULL;
    if (i < 0) return 1;
    if (info.dtype != ST_F32 || numel_of(&info) != want)
        return io_fail(e, "export: trained tensor %s has %lld elements, expected %lld fp32", name,
                       (long long)numel_of(&info), (long long)want);
    *out = (float *)malloc((size_t)want * sizeof(float));
    if (!*out) return io_fail(e, "export: out of memory for %s", name);
    if (eng->tensor_read(eng->self, i, *out, e)) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* W (out, in) += s·B·A, then the DoRA rescale when m is given. */
static int merge_adapter(float *w, int64_t out, int64_t in, const float *A, const float *B, const float *m, int R,
                         float scale, struct io_err *e) {
    double *row = (double *)malloc((size_t)in * sizeof *row);
    if (!row) return io_fail(e, "export: out of memory");
    for (int64_t o = 0; o < out; o++) {
        double ss = 0;
        for (int64_t i = 0; i < in; i++) {
            double acc = 0;
            for (int r = 0; r < R; r++) acc += (double)B[o * R + r] * (double)A[(int64_t)r * in + i];
            row[i] = (double)w[o * in + i] + (double)scale * (double)(float)acc;
            ss += row[i] * row[i];
        }
        const double k = m ? (double)m[o] / sqrt(ss) : 1.0;
        for (int64_t i = 0; i < in; i++) w[o * in + i] = (float)(row[i] * k);
    }
    free(row);
    return 0;
}

int export_merged_weight(float *w, const struct model_config *c, const struct train_engine *eng, int full, float scale,
                         enum model_weight kind, int layer, struct io_err *e) {
    char name[112];
    int64_t shape[2];
    const int ndim = model_weight_shape(shape, c, kind);
    const int64_t numel = ndim == 2 ? shape[0] * shape[1] : shape[0];
    model_weight_name(name, sizeof name, kind, layer);
    if (full) {
        float *p = NULL;
        const int got = read_param(eng, name, numel, &p, e);
        if (got < 0) return -1;
        if (got > 0) return io_fail(e, "export: full fine-tuning engine has no tensor %s", name);
        memcpy(w, p, (size_t)numel * sizeof *w);
        free(p);
        return 0;
    }
    if (eng->base_weight_read(eng->self, name, w, e)) return -1;
    if (!model_weight_is_linear(kind)) return 0;
    char module[112], key[160];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(name) - strlen(".weight")), name);
    snprintf(key, sizeof key, "%s.lora_A.weight", module);
    struct engine_tensor ia;
    const int ai = find_tensor(eng, key, &ia);
    if (ai < 0) return 0;
    const int R = (int)ia.shape[0];
    float *A = NULL, *B = NULL, *m = NULL;
    int g = read_param(eng, key, (int64_t)R * shape[1], &A, e);
    snprintf(key, sizeof key, "%s.lora_B.weight", module);
    if (g == 0) g = read_param(eng, key, shape[0] * R, &B, e);
    snprintf(key, sizeof key, "%s.lora_magnitude_vector", module);
    if (g == 0 && read_param(eng, key, shape[0], &m, e) < 0) g = -1;
    if (g > 0) g = io_fail(e, "export: %s has lora_A but no lora_B", module);
    if (g == 0) g = merge_adapter(w, shape[0], shape[1], A, B, m, R, scale, e);
    free(A), free(B), free(m);
    return g;
}

int export_merged(const char *dir, const struct model_config *c, const struct train_engine *eng, int full,
                  float scale, struct io_err *e) {
    if (make_dirs(dir, e)) return -1;
    char path[1400];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct model_config out_c = *c;
    memset(&out_c.quant, 0, sizeof out_c.quant);
    strcpy(out_c.torch_dtype, "bfloat16");
    if (config_write_hf_json(&out_c, path, e)) return -1;

    const int n_slots = MW_N_GLOBAL + c->L * MW_N_LAYER;
    struct st_tensor *ts = (struct st_tensor *)calloc((size_t)n_slots, sizeof *ts);
    char (*names)[112] = (char (*)[112])calloc((size_t)n_slots, sizeof *names);
    int n = 0, rc = 0;
    if (!ts || !names) rc = io_fail(e, "export: out of memory");
    for (int slot = 0; slot < n_slots && rc == 0; slot++) {
        int layer;
        const enum model_weight kind = model_weight_of_slot(slot, &layer);
        int64_t shape[2];
        const int ndim = model_weight_shape(shape, c, kind);
        if (ndim == 0 || (kind == MW_LM_HEAD && c->tie_word_embeddings)) continue;
        model_weight_name(names[n], sizeof names[n], kind, layer);
        const int64_t numel = ndim == 2 ? shape[0] * shape[1] : shape[0];
        float *w = (float *)malloc((size_t)numel * sizeof *w);
        if (!w) rc = io_fail(e, "export: out of memory for %s", names[n]);
        else rc = export_merged_weight(w, c, eng, full, scale, kind, layer, e);
        if (rc == 0) {
            /* fp32 → BF16 (RNE) through io's converter */
            struct st_tensor src = {.name = names[n], .dtype = ST_F32, .ndim = ndim, .numel = numel,
                                    .data = (const uint8_t *)w, .nbytes = (size_t)numel * 4};
            memcpy(src.shape, shape, sizeof shape);
            uint16_t *bf = (uint16_t *)malloc((size_t)numel * 2);
            if (!bf) rc = io_fail(e, "export: out of memory");
            else rc = st_tensor_to_bf16(bf, &src, e);
            ts[n] = src;
            ts[n].dtype = ST_BF16;
            ts[n].data = (const uint8_t *)bf;
            ts[n].nbytes = (size_t)numel * 2;
            n++;
        }
        free(w);
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        char k[] = "format", v[] = "pt";
        struct st_meta meta = {k, v};
        rc = safetensors_write(path, ts, n, &meta, 1, e);
    }
    for (int i = 0; ts && i < n; i++) free((void *)ts[i].data);
    free(ts);
    free(names);
    return rc;
}

struct gguf_src {
    const struct model_config *c;
    const struct train_engine *eng;
    int full;
    float scale;
};

/* The merged weight as the merged folder stores it: rounded to bf16 (RNE), then widened. */
static int gguf_weight(void *ctx, enum model_weight kind, int layer, float *out, struct io_err *e) {
    const struct gguf_src *s = ctx;
    if (export_merged_weight(out, s->c, s->eng, s->full, s->scale, kind, layer, e)) return -1;
    int64_t shape[2];
    const int ndim = model_weight_shape(shape, s->c, kind);
    const int64_t n = ndim == 2 ? shape[0] * shape[1] : shape[0];
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        gguf_quantize_bf16(&h, &out[i], 1);
        const uint32_t u = (uint32_t)h << 16;
        memcpy(&out[i], &u, 4);
    }
    return 0;
}

int export_gguf(const char *path, const struct model_config *c, const struct train_engine *eng, int full, float scale,
                const struct tokenizer *tok, enum gguf_out_type type, struct io_err *e) {
    const struct gguf_src s = {c, eng, full, scale};
    const enum ggml_type t = type == GGUF_OUT_BF16 ? GGML_TYPE_BF16 : type == GGUF_OUT_Q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    return gguf_write_model(path, c, tok, t, "refine fine-tune", gguf_weight, (void *)&s, e);
}

int export_peft_adapter(const char *dir, const struct train_options *o, const struct model_config *c,
                        const struct train_engine *eng, const char *base_model, struct io_err *e) {
    const int dora = llama_method_mode(o->method) == LLAMA_DORA;
    struct peft_config pc;
    memset(&pc, 0, sizeof pc);
    pc.r = o->rank;
    pc.lora_alpha = o->alpha;
    pc.lora_dropout = o->dropout;
    pc.use_rslora = o->scaling == LORA_SCALE_RSLORA;
    pc.use_dora = dora;
    for (int t = 0; t < LLAMA_N_LINEAR; t++)
        if (o->targets & (1u << t)) pc.targets |= 1u << llama_linears[t].weight;
    snprintf(pc.base_model, sizeof pc.base_model, "%s", base_model ? base_model : "");
    struct peft_module *mods = (struct peft_module *)calloc((size_t)c->L * LLAMA_N_LINEAR, sizeof *mods);
    float **owned = (float **)calloc((size_t)c->L * LLAMA_N_LINEAR * 3, sizeof *owned);
    int n = 0, n_owned = 0, rc = 0;
    if (!mods || !owned) rc = io_fail(e, "export: out of memory");
    for (int l = 0; l < c->L && rc == 0; l++)
        for (int t = 0; t < LLAMA_N_LINEAR && rc == 0; t++) {
            if (!(o->targets & (1u << t))) continue;
            int64_t shape[2];
            model_weight_shape(shape, c, llama_linears[t].weight);
            char wname[112], key[200];
            model_weight_name(wname, sizeof wname, llama_linears[t].weight, l);
            const int mlen = (int)(strlen(wname) - strlen(".weight"));
            struct peft_module *m = &mods[n];
            m->kind = llama_linears[t].weight;
            m->layer = l;
            m->out = shape[0];
            m->in = shape[1];
            float *a = NULL, *b = NULL, *mag = NULL;
            snprintf(key, sizeof key, "%.*s.lora_A.weight", mlen, wname);
            int g = read_param(eng, key, (int64_t)o->rank * shape[1], &a, e);
            if (g == 0) {
                snprintf(key, sizeof key, "%.*s.lora_B.weight", mlen, wname);
                g = read_param(eng, key, shape[0] * o->rank, &b, e);
            }
            if (g == 0 && dora) {
                snprintf(key, sizeof key, "%.*s.lora_magnitude_vector", mlen, wname);
                g = read_param(eng, key, shape[0], &mag, e);
            }
            if (g > 0) g = io_fail(e, "export: the engine has no adapter tensor %s", key);
            owned[n_owned++] = a, owned[n_owned++] = b, owned[n_owned++] = mag;
            m->lora_a = a, m->lora_b = b, m->magnitude = mag;
            rc = g;
            n++;
        }
    if (rc == 0) rc = peft_write(dir, &pc, mods, n, e);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(mods);
    return rc;
}
