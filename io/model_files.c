/* model_files.c — binding a model folder's tensors to its config, with every check done before
 * any use (model_files.h). */
#include "io/model_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "io/check.h"

static const char *const weight_suffix[MW_COUNT] = {
    [MW_EMBED] = "model.embed_tokens.weight",
    [MW_FINAL_NORM] = "model.norm.weight",
    [MW_LM_HEAD] = "lm_head.weight",
    [MW_ATTN_NORM] = "input_layernorm.weight",
    [MW_Q] = "self_attn.q_proj.weight",
    [MW_K] = "self_attn.k_proj.weight",
    [MW_V] = "self_attn.v_proj.weight",
    [MW_O] = "self_attn.o_proj.weight",
    [MW_Q_BIAS] = "self_attn.q_proj.bias",
    [MW_K_BIAS] = "self_attn.k_proj.bias",
    [MW_V_BIAS] = "self_attn.v_proj.bias",
    [MW_MLP_NORM] = "post_attention_layernorm.weight",
    [MW_GATE] = "mlp.gate_proj.weight",
    [MW_UP] = "mlp.up_proj.weight",
    [MW_DOWN] = "mlp.down_proj.weight",
};

/* How each expected shape follows from the config (for messages). */
static const char *const weight_shape_rule[MW_COUNT] = {
    [MW_EMBED] = "[vocab_size, hidden_size]",
    [MW_FINAL_NORM] = "[hidden_size]",
    [MW_LM_HEAD] = "[vocab_size, hidden_size]",
    [MW_ATTN_NORM] = "[hidden_size]",
    [MW_Q] = "[num_attention_heads*head_dim, hidden_size]",
    [MW_K] = "[num_key_value_heads*head_dim, hidden_size]",
    [MW_V] = "[num_key_value_heads*head_dim, hidden_size]",
    [MW_O] = "[hidden_size, num_attention_heads*head_dim]",
    [MW_Q_BIAS] = "[num_attention_heads*head_dim]",
    [MW_K_BIAS] = "[num_key_value_heads*head_dim]",
    [MW_V_BIAS] = "[num_key_value_heads*head_dim]",
    [MW_MLP_NORM] = "[hidden_size]",
    [MW_GATE] = "[intermediate_size, hidden_size]",
    [MW_UP] = "[intermediate_size, hidden_size]",
    [MW_DOWN] = "[hidden_size, intermediate_size]",
};

static int is_layer_kind(enum model_weight k) { return k >= MW_ATTN_NORM && k < MW_COUNT; }

void model_weight_name(char *buf, size_t cap, enum model_weight kind, int layer) {
    CHECK(kind >= 0 && kind < MW_COUNT, "weight kind %d", (int)kind);
    if (is_layer_kind(kind))
        snprintf(buf, cap, "model.layers.%d.%s", layer, weight_suffix[kind]);
    else
        snprintf(buf, cap, "%s", weight_suffix[kind]);
}

int model_weight_is_linear(enum model_weight k) {
    return k == MW_Q || k == MW_K || k == MW_V || k == MW_O || k == MW_GATE || k == MW_UP || k == MW_DOWN ||
           k == MW_LM_HEAD;
}

int model_weight_shape(int64_t s[2], const struct model_config *c, enum model_weight kind) {
    int64_t q = (int64_t)c->H * c->D, kv = (int64_t)c->KVH * c->D;
    switch (kind) {
    case MW_EMBED:
    case MW_LM_HEAD: s[0] = c->V, s[1] = c->C; return 2;
    case MW_FINAL_NORM:
    case MW_ATTN_NORM:
    case MW_MLP_NORM: s[0] = c->C; return 1;
    case MW_Q: s[0] = q, s[1] = c->C; return 2;
    case MW_K:
    case MW_V: s[0] = kv, s[1] = c->C; return 2;
    case MW_O: s[0] = c->C, s[1] = q; return 2;
    case MW_Q_BIAS: s[0] = q; return c->attention_bias ? 1 : 0;
    case MW_K_BIAS:
    case MW_V_BIAS: s[0] = kv; return c->attention_bias ? 1 : 0;
    case MW_GATE:
    case MW_UP: s[0] = c->F, s[1] = c->C; return 2;
    case MW_DOWN: s[0] = c->C, s[1] = c->F; return 2;
    default: CHECK(0, "weight kind %d", (int)kind); return 0;
    }
}

static int slot(enum model_weight kind, int layer) {
    if (!is_layer_kind(kind)) return (int)kind;
    return MW_N_GLOBAL + layer * MW_N_LAYER + (int)(kind - MW_ATTN_NORM);
}

const struct model_weight_ref *model_files_get(const struct model_files *m, enum model_weight kind, int layer) {
    if ((int)kind < 0 || kind >= MW_COUNT) return NULL;
    if (is_layer_kind(kind) && (layer < 0 || layer >= m->config.L)) return NULL;
    const struct model_weight_ref *w = &m->weights[slot(kind, layer)];
    return w->present ? w : NULL;
}

int model_weight_to_f32(float *out, const struct model_weight_ref *w, struct io_err *e) {
    if (w->t == NULL) return io_fail(e, "tensor '%s' is stored bitsandbytes 4-bit; dequantize it with the nf4 op", w->name);
    return st_tensor_to_f32(out, w->t, e);
}

/* ---- lookup with use marks ---- */

struct index_entry {
    const char *name;
    int entry; /* into ck->entry_names */
};

struct index {
    const struct sharded_checkpoint *ck;
    struct index_entry *sorted; /* by name */
    char *used;                 /* per entry */
};

static int cmp_index_entry(const void *a, const void *b) {
    return strcmp(((const struct index_entry *)a)->name, ((const struct index_entry *)b)->name);
}

static void index_build(struct index *ix, const struct sharded_checkpoint *ck) {
    ix->ck = ck;
    ix->sorted = malloc(sizeof *ix->sorted * (size_t)(ck->n_entries + 1));
    ix->used = calloc((size_t)ck->n_entries + 1, 1);
    CHECK(ix->sorted != NULL && ix->used != NULL, "out of memory");
    for (int i = 0; i < ck->n_entries; i++) ix->sorted[i] = (struct index_entry){ck->entry_names[i], i};
    qsort(ix->sorted, (size_t)ck->n_entries, sizeof *ix->sorted, cmp_index_entry);
}

static void index_free(struct index *ix) {
    free(ix->sorted);
    free(ix->used);
}

/* The tensor of that name (marked used), or NULL. */
static const struct st_tensor *take(struct index *ix, const char *name) {
    struct index_entry key = {name, -1};
    const struct index_entry *f = bsearch(&key, ix->sorted, (size_t)ix->ck->n_entries, sizeof key, cmp_index_entry);
    if (f == NULL) return NULL;
    ix->used[f->entry] = 1;
    return safetensors_find(&ix->ck->shards[ix->ck->entry_shard[f->entry]], name);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---- checks ---- */

static int plain_dtype(enum st_dtype d) { return d == ST_F32 || d == ST_F16 || d == ST_BF16; }

static int check_plain(const struct model_files *m, const struct st_tensor *t, const struct model_weight_ref *w,
                       struct io_err *e) {
    int ok = t->ndim == w->ndim;
    for (int d = 0; ok && d < w->ndim; d++) ok = t->shape[d] == w->shape[d];
    char has[256], want[64];
    st_shape_str(has, sizeof has, t->ndim, t->shape);
    st_shape_str(want, sizeof want, w->ndim, w->shape);
    if (!ok)
        return io_fail(e, "%s: tensor '%s' is %s %s, but config.json implies %s = %s", m->dir, t->name,
                       st_dtype_name(t->dtype), has, weight_shape_rule[w->kind], want);
    if (!plain_dtype(t->dtype))
        return io_fail(e, "%s: tensor '%s' is %s %s; expected F32, F16 or BF16%s", m->dir, t->name, st_dtype_name(t->dtype),
                       has, t->dtype == ST_U8 ? " (a 4-bit weight without its quant_state?)" : "");
    return 0;
}

static int json_int_in(const cJSON *o, const char *key, int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return -1;
    *out = (int)v->valuedouble;
    return 0;
}

/* Reads the quant_state JSON of a bnb 4-bit weight into b (and checks it against the shape). */
static int parse_quant_state(struct bnb4_weight *b, const struct st_tensor *qs, const struct model_weight_ref *w,
                             const char *dir, struct io_err *e) {
    if (qs->dtype != ST_U8 || qs->ndim != 1 || qs->nbytes == 0 || qs->nbytes > 65536)
        return io_fail(e, "%s: tensor '%s' should be a U8 list of UTF-8 JSON bytes", dir, qs->name);
    char *text = malloc(qs->nbytes + 1);
    CHECK(text != NULL, "out of memory");
    memcpy(text, qs->data, qs->nbytes);
    text[qs->nbytes] = '\0';
    cJSON *o = cJSON_ParseWithLength(text, qs->nbytes);
    free(text);
    int rc = 0;
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(o, "quant_type"), *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
    if (!cJSON_IsObject(o) || !cJSON_IsString(qt) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) ||
        json_int_in(o, "blocksize", 1, 1 << 20, &b->blocksize) != 0) {
        rc = io_fail(e, "%s: tensor '%s' is not a JSON object with quant_type, blocksize, dtype and shape", dir, qs->name);
        goto out;
    }
    int nf4 = ends_with(qs->name, "__nf4");
    if (strcmp(qt->valuestring, nf4 ? "nf4" : "fp4") != 0) {
        rc = io_fail(e, "%s: tensor '%s' says quant_type \"%s\"", dir, qs->name, qt->valuestring);
        goto out;
    }
    if (strcmp(dt->valuestring, "float32") != 0 && strcmp(dt->valuestring, "bfloat16") != 0 &&
        strcmp(dt->valuestring, "float16") != 0) {
        rc = io_fail(e, "%s: tensor '%s' has dtype \"%.20s\"; expected float32, bfloat16 or float16", dir, qs->name,
                     dt->valuestring);
        goto out;
    }
    snprintf(b->dtype, sizeof b->dtype, "%s", dt->valuestring);
    int bs = b->blocksize;
    if (bs < 16 || bs > 4096 || (bs & (bs - 1)) != 0) {
        rc = io_fail(e, "%s: tensor '%s' has blocksize %d; expected a power of two from 16 to 4096", dir, qs->name, bs);
        goto out;
    }
    const cJSON *s0 = shape->child, *s1 = s0 ? s0->next : NULL;
    if (cJSON_GetArraySize(shape) != 2 || !cJSON_IsNumber(s0) || !cJSON_IsNumber(s1) ||
        s0->valuedouble != (double)w->shape[0] || s1->valuedouble != (double)w->shape[1]) {
        rc = io_fail(e, "%s: tensor '%s' gives another shape than config.json implies for '%s': %s = [%lld, %lld]", dir,
                     qs->name, w->name, weight_shape_rule[w->kind], (long long)w->shape[0], (long long)w->shape[1]);
        goto out;
    }
    b->nested = cJSON_GetObjectItemCaseSensitive(o, "nested_blocksize") != NULL;
    if (b->nested) {
        const cJSON *nd = cJSON_GetObjectItemCaseSensitive(o, "nested_dtype");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "nested_offset");
        if (json_int_in(o, "nested_blocksize", 1, 1 << 20, &b->nested_blocksize) != 0 || !cJSON_IsString(nd) ||
            strcmp(nd->valuestring, "float32") != 0 || !cJSON_IsNumber(off) || !isfinite(off->valuedouble)) {
            rc = io_fail(e, "%s: tensor '%s' needs nested_blocksize, nested_dtype \"float32\" and a finite nested_offset",
                         dir, qs->name);
            goto out;
        }
        b->nested_offset = (float)off->valuedouble;
    }
out:
    cJSON_Delete(o);
    return rc;
}

static int expect_part(const struct st_tensor *t, const char *name, enum st_dtype dtype, int ndim, int64_t d0, int64_t d1,
                       const char *dir, struct io_err *e) {
    if (t == NULL) return io_fail(e, "%s: the 4-bit weight lacks its part '%s'", dir, name);
    if (t->dtype == dtype && t->ndim == ndim && t->shape[0] == d0 && (ndim < 2 || t->shape[1] == d1)) return 0;
    char has[256];
    st_shape_str(has, sizeof has, t->ndim, t->shape);
    if (ndim == 2)
        return io_fail(e, "%s: tensor '%s' is %s %s, expected %s [%lld, %lld]", dir, name, st_dtype_name(t->dtype), has,
                       st_dtype_name(dtype), (long long)d0, (long long)d1);
    return io_fail(e, "%s: tensor '%s' is %s %s, expected %s [%lld]", dir, name, st_dtype_name(t->dtype), has,
                   st_dtype_name(dtype), (long long)d0);
}

/* A Linear stored bnb 4-bit: every part present and consistent. */
static int bind_bnb(struct model_files *m, struct index *ix, struct model_weight_ref *w, const struct st_tensor *qs,
                    struct io_err *e) {
    const char *dir = m->dir;
    if (ends_with(qs->name, "__fp4"))
        return io_fail(e, "%s: tensor '%s' is bitsandbytes FP4; refine supports NF4 4-bit checkpoints only", dir, w->name);
    if (m->config.quant.kind == QUANT_NONE)
        return io_fail(e, "%s: tensor '%s' is bitsandbytes 4-bit but config.json has no bitsandbytes quantization_config",
                       dir, w->name);
    if (m->config.quant.kind == QUANT_BNB_FP4)
        return io_fail(e, "%s: config.json says bnb_4bit_quant_type \"fp4\" but tensor '%s' is NF4", dir, w->name);
    struct bnb4_weight *b = &m->bnb[m->n_bnb];
    memset(b, 0, sizeof *b);
    b->kind = QUANT_BNB_NF4;
    if (parse_quant_state(b, qs, w, dir, e) != 0) return -1;
    int64_t n = w->shape[0] * w->shape[1];
    b->n_blocks = (n + b->blocksize - 1) / b->blocksize;
    char name[160];
    snprintf(name, sizeof name, "%s.nested_absmax", w->name);
    b->nested_absmax = take(ix, name);
    snprintf(name, sizeof name, "%s.nested_quant_map", w->name);
    b->nested_quant_map = take(ix, name);
    if (!b->nested && (b->nested_absmax != NULL || b->nested_quant_map != NULL))
        return io_fail(e, "%s: '%s' has nested_* tensors but its quant_state has no nested_blocksize", dir, w->name);
    b->packed = take(ix, w->name);
    if (expect_part(b->packed, w->name, ST_U8, 2, (n + 1) / 2, 1, dir, e) != 0) return -1;
    snprintf(name, sizeof name, "%s.absmax", w->name);
    if (expect_part(b->absmax = take(ix, name), name, b->nested ? ST_U8 : ST_F32, 1, b->n_blocks, 0, dir, e) != 0) return -1;
    snprintf(name, sizeof name, "%s.quant_map", w->name);
    if (expect_part(b->quant_map = take(ix, name), name, ST_F32, 1, 16, 0, dir, e) != 0) return -1;
    if (b->nested) {
        int64_t n2 = (b->n_blocks + b->nested_blocksize - 1) / b->nested_blocksize;
        snprintf(name, sizeof name, "%s.nested_absmax", w->name);
        if (expect_part(b->nested_absmax, name, ST_F32, 1, n2, 0, dir, e) != 0) return -1;
        snprintf(name, sizeof name, "%s.nested_quant_map", w->name);
        if (expect_part(b->nested_quant_map, name, ST_F32, 1, 256, 0, dir, e) != 0) return -1;
    }
    if (b->nested != m->config.quant.double_quant)
        return io_fail(e, "%s: config.json says bnb_4bit_use_double_quant %s but '%s' is stored %s double quantization", dir,
                       m->config.quant.double_quant ? "true" : "false", w->name, b->nested ? "with" : "without");
    w->bnb = b;
    m->n_bnb++;
    return 0;
}

/* Appends name to a "missing" or "unexpected" list: counts all, names the first few. */
struct name_list {
    int count;
    char text[640];
};

static void list_add(struct name_list *l, const char *name, int ndim, const int64_t *shape) {
    if (l->count++ >= 4) return;
    size_t n = strlen(l->text);
    char sh[64] = "";
    if (ndim > 0) {
        sh[0] = ' ';
        st_shape_str(sh + 1, sizeof sh - 1, ndim, shape);
    }
    snprintf(l->text + n, sizeof l->text - n, "%s%s%s", n ? ", " : "", name, sh);
}

static int bind_all(struct model_files *m, struct index *ix, struct io_err *e) {
    const struct model_config *c = &m->config;
    struct name_list missing = {0};
    for (int s = 0; s < m->n_weights; s++) {
        enum model_weight kind = s < MW_N_GLOBAL ? (enum model_weight)s
                                                 : (enum model_weight)(MW_ATTN_NORM + (s - MW_N_GLOBAL) % MW_N_LAYER);
        int layer = s < MW_N_GLOBAL ? -1 : (s - MW_N_GLOBAL) / MW_N_LAYER;
        struct model_weight_ref *w = &m->weights[s];
        w->kind = kind;
        w->layer = layer;
        w->ndim = model_weight_shape(w->shape, c, kind);
        w->present = w->ndim > 0;
        if (!w->present) continue;
        model_weight_name(w->name, sizeof w->name, kind, layer);
        if (kind == MW_LM_HEAD && c->tie_word_embeddings) continue; /* bound after the loop */
        if (model_weight_is_linear(kind)) {
            char qname[160];
            snprintf(qname, sizeof qname, "%s.quant_state.bitsandbytes__nf4", w->name);
            const struct st_tensor *qs = take(ix, qname);
            if (qs == NULL) {
                snprintf(qname, sizeof qname, "%s.quant_state.bitsandbytes__fp4", w->name);
                qs = take(ix, qname);
            }
            if (qs != NULL) {
                if (bind_bnb(m, ix, w, qs, e) != 0) return -1;
                continue;
            }
        }
        const struct st_tensor *t = take(ix, w->name);
        if (t == NULL) {
            list_add(&missing, w->name, w->ndim, w->shape);
            continue;
        }
        if (check_plain(m, t, w, e) != 0) return -1;
        w->t = t;
    }
    if (missing.count > 0)
        return io_fail(e, "%s: the checkpoint lacks %d tensor%s that config.json implies (%d layers): %s%s", m->dir,
                       missing.count, missing.count == 1 ? "" : "s", c->L, missing.text, missing.count > 4 ? ", ..." : "");
    if (c->tie_word_embeddings) {
        struct model_weight_ref *head = &m->weights[MW_LM_HEAD];
        const struct st_tensor *stored = take(ix, "lm_head.weight");
        if (stored != NULL) {
            if (check_plain(m, stored, head, e) != 0) return -1;
            m->lm_head_stored_but_tied = 1;
        }
        *head = m->weights[MW_EMBED];
        head->kind = MW_LM_HEAD;
        m->lm_head_tied = 1;
    }
    struct name_list extra = {0};
    for (int i = 0; i < m->ck.n_entries; i++) {
        if (ix->used[i] || ends_with(m->ck.entry_names[i], ".rotary_emb.inv_freq")) continue;
        list_add(&extra, m->ck.entry_names[i], 0, NULL);
    }
    if (extra.count > 0)
        return io_fail(e, "%s: the checkpoint holds %d tensor%s that config.json does not describe (%s%s); is config.json "
                       "that of another model?", m->dir, extra.count, extra.count == 1 ? "" : "s", extra.text,
                       extra.count > 4 ? ", ..." : "");
    if (c->quant.kind != QUANT_NONE && m->n_bnb == 0)
        return io_fail(e, "%s: config.json says bitsandbytes 4-bit but no tensor of the checkpoint is quantized", m->dir);
    return 0;
}

int model_files_open(struct model_files *m, const char *dir, struct io_err *e) {
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    if (config_from_hf_json(&m->config, dir, e) != 0) return -1;
    if (m->config.quant.kind == QUANT_BNB_FP4)
        return io_fail(e, "%s: config.json says bnb_4bit_quant_type \"fp4\"; refine supports NF4 4-bit checkpoints only "
                       "(re-quantize with bnb_4bit_quant_type=\"nf4\", or give the unquantized model)", dir);
    if (sharded_open(&m->ck, dir, e) != 0) return -1;
    m->n_weights = MW_N_GLOBAL + m->config.L * MW_N_LAYER;
    m->weights = calloc((size_t)m->n_weights, sizeof *m->weights);
    m->bnb = calloc((size_t)m->n_weights, sizeof *m->bnb);
    CHECK(m->weights != NULL && m->bnb != NULL, "out of memory for %d weights", m->n_weights);
    struct index ix;
    index_build(&ix, &m->ck);
    int rc = bind_all(m, &ix, e);
    index_free(&ix);
    if (rc != 0) model_files_close(m);
    return rc;
}

void model_files_close(struct model_files *m) {
    sharded_close(&m->ck);
    free(m->weights);
    free(m->bnb);
    memset(m, 0, sizeof *m);
}
