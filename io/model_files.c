/* model_files.c — binding a model folder's tensors to its config, with every check done before
 * any use (model_files.h). */
#include "io/model_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int model_weight_slot(enum model_weight kind, int layer) {
    if (!is_layer_kind(kind)) return (int)kind;
    return MW_N_GLOBAL + layer * MW_N_LAYER + (int)(kind - MW_ATTN_NORM);
}

enum model_weight model_weight_of_slot(int s, int *layer) {
    *layer = s < MW_N_GLOBAL ? -1 : (s - MW_N_GLOBAL) / MW_N_LAYER;
    return s < MW_N_GLOBAL ? (enum model_weight)s : (enum model_weight)(MW_ATTN_NORM + (s - MW_N_GLOBAL) % MW_N_LAYER);
}

const struct model_weight_ref *model_files_get(const struct model_files *m, enum model_weight kind, int layer) {
    if ((int)kind < 0 || kind >= MW_COUNT) return NULL;
    if (is_layer_kind(kind) && (layer < 0 || layer >= m->config.L)) return NULL;
    const struct model_weight_ref *w = &m->weights[model_weight_slot(kind, layer)];
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

/* take, as io/bnb4's lookup: every part the 4-bit reader finds is marked taken. */
static const struct st_tensor *take_found(void *ctx, const char *name) { return take(ctx, name); }

/* A Linear stored bnb 4-bit (io/bnb4.h, with the shape config.json implies), and the config's
 * agreement. Returns 0 bound; 1 when w is not stored 4-bit; -1 with the message in e. */
static int bind_bnb(struct model_files *m, struct index *ix, struct model_weight_ref *w, struct io_err *e) {
    const char *dir = m->dir;
    struct bnb4_weight *b = &m->bnb[m->n_bnb];
    struct bnb4_expect expect = {{w->shape[0], w->shape[1]}, "config.json implies", weight_shape_rule[w->kind]};
    int64_t shape[2];
    enum bnb4_bind_result rc = bnb4_bind(b, shape, (struct bnb4_lookup){take_found, ix}, dir, w->name, &expect, e);
    if (rc == BNB4_ABSENT) {
        if (e != NULL) e->msg[0] = '\0'; /* a plain weight: no complaint */
        return 1;
    }
    if (rc != BNB4_BOUND) return -1;
    if (m->config.quant.kind == QUANT_NONE)
        return io_fail(e, "%s: tensor '%s' is bitsandbytes 4-bit but config.json has no bitsandbytes quantization_config",
                       dir, w->name);
    if (m->config.quant.kind == QUANT_BNB_FP4)
        return io_fail(e, "%s: config.json says bnb_4bit_quant_type \"fp4\" but tensor '%s' is NF4", dir, w->name);
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
        int layer;
        const enum model_weight kind = model_weight_of_slot(s, &layer);
        struct model_weight_ref *w = &m->weights[s];
        w->kind = kind;
        w->layer = layer;
        w->ndim = model_weight_shape(w->shape, c, kind);
        w->present = w->ndim > 0;
        if (!w->present) continue;
        model_weight_name(w->name, sizeof w->name, kind, layer);
        if (kind == MW_LM_HEAD && c->tie_word_embeddings) continue; /* bound after the loop */
        if (model_weight_is_linear(kind)) {
            int rc = bind_bnb(m, ix, w, e);
            if (rc < 0) return -1;
            if (rc == 0) continue;
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
