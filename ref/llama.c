/* llama.c — the reference Llama model: the ops of ref/ composed as HF's LlamaForCausalLM (see
 * llama.h for the math, the slab plan and the calling conventions). */
#include "ref/llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "ref/attention.h"
#include "ref/bf16.h"
#include "ref/cross_entropy.h"
#include "ref/dora.h"
#include "ref/embedding.h"
#include "ref/fp8_linear.h"
#include "ref/linear.h"
#include "ref/lora.h"
#include "ref/nf4.h"
#include "ref/rmsnorm.h"
#include "ref/rope.h"
#include "ref/swiglu.h"

const char *const train_method_names[METHOD_COUNT + 1] = {"lora", "dora", "qlora", "qdora", "full", NULL};
const char *const recompute_names[RECOMPUTE_COUNT + 1] = {"none", "attn", "layer", NULL};

enum llama_mode llama_method_mode(enum train_method m) {
    CHECK(m >= 0 && m < METHOD_COUNT, "method %d", (int)m);
    return m == METHOD_FULL ? LLAMA_FULL : m == METHOD_DORA || m == METHOD_QDORA ? LLAMA_DORA : LLAMA_LORA;
}

int llama_method_nf4(enum train_method m) { return m == METHOD_QLORA || m == METHOD_QDORA; }

void ref_llama_options_default(struct llama_options *o) {
    memset(o, 0, sizeof *o);
    o->mode = LLAMA_FULL;
    o->targets = LLAMA_ALL_TARGETS;
    o->R = 8;
    o->alpha = 16.0;
    o->scaling = LORA_SCALE_STANDARD;
    o->act = ACT_F32;
}

static int is_target(const struct llama_options *o, enum llama_linear t) {
    return o->mode != LLAMA_FULL && (o->targets >> t & 1u);
}

static float *xcalloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    CHECK(p != NULL, "out of memory allocating %zu floats", n);
    return p;
}

/* ---------------------------------------------------------------- weights and adapters */

void ref_llama_weights_alloc(struct llama_weights *w, const struct model_config *c) {
    memset(w, 0, sizeof *w);
    w->embed = xcalloc((size_t)c->V * (size_t)c->C);
    w->lm_head = c->tie_word_embeddings ? w->embed : xcalloc((size_t)c->V * (size_t)c->C);
    w->final_norm = xcalloc((size_t)c->C);
    w->layers = calloc((size_t)c->L, sizeof *w->layers);
    CHECK(w->layers != NULL, "out of memory");
    for (int l = 0; l < c->L; l++) {
        struct llama_layer *ly = &w->layers[l];
        ly->attn_norm = xcalloc((size_t)c->C);
        ly->mlp_norm = xcalloc((size_t)c->C);
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            int co, ci;
            llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            ly->w[t] = xcalloc((size_t)co * (size_t)ci);
            ly->bias[t] = llama_linear_has_bias(c, (enum llama_linear)t) ? xcalloc((size_t)co) : NULL;
        }
    }
}

void ref_llama_weights_free(struct llama_weights *w, const struct model_config *c) {
    if (w->layers) {
        for (int l = 0; l < c->L; l++) {
            free(w->layers[l].attn_norm);
            free(w->layers[l].mlp_norm);
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                free(w->layers[l].w[t]);
                free(w->layers[l].bias[t]);
            }
        }
    }
    free(w->layers);
    if (w->lm_head != w->embed) free(w->lm_head);
    free(w->embed);
    free(w->final_norm);
    memset(w, 0, sizeof *w);
}

void ref_llama_adapters_alloc(struct llama_adapters *a, const struct model_config *c, const struct llama_options *o) {
    CHECK(o->R >= 1, "R=%d", o->R);
    a->layers = calloc((size_t)c->L, sizeof *a->layers);
    CHECK(a->layers != NULL, "out of memory");
    for (int l = 0; l < c->L; l++) {
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            struct llama_adapter *ad = &a->layers[l][t];
            if (!is_target(o, (enum llama_linear)t)) continue;
            int co, ci;
            llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            ad->a = xcalloc((size_t)o->R * (size_t)ci);
            ad->b = xcalloc((size_t)co * (size_t)o->R);
            ad->mag = o->mode == LLAMA_DORA ? xcalloc((size_t)co) : NULL;
        }
    }
}

void ref_llama_adapters_free(struct llama_adapters *a, const struct model_config *c) {
    if (a->layers) {
        for (int l = 0; l < c->L; l++) {
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                free(a->layers[l][t].a);
                free(a->layers[l][t].b);
                free(a->layers[l][t].mag);
            }
        }
    }
    free(a->layers);
    a->layers = NULL;
}

/* uniform01 for ref_lora_init: splitmix64 of a counter. */
static double splitmix_uniform01(void *ctx) {
    uint64_t *s = ctx;
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

void ref_llama_adapters_init(struct llama_adapters *a, const struct model_config *c, const struct llama_options *o,
                             uint64_t seed) {
    uint64_t state = seed ^ 0x5EEDA11CE5ull;
    for (int l = 0; l < c->L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            struct llama_adapter *ad = &a->layers[l][t];
            if (!ad->a) continue;
            int co, ci;
            llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            ref_lora_init(ad->a, ad->b, ci, co, o->R, splitmix_uniform01, &state);
        }
}

static int load_one(float *dst, const struct model_source *s, enum model_weight kind, int layer, struct io_err *e) {
    if (model_source_is_bnb(s, kind, layer)) {
        /* QLoRA: the NF4 weight dequantized to fp32, as bitsandbytes' Linear4bit does with
         * compute dtype fp32 */
        int64_t shape[2];
        int nd = model_source_shape(s, kind, layer, shape);
        CHECK(nd == 2, "bnb weight kind %d with %d dims", (int)kind, nd);
        return nf4_dequantize_bnb(dst, model_source_bnb(s, kind, layer), shape[0] * shape[1], ACT_F32, e);
    }
    return model_source_weight_f32(s, kind, layer, dst, e);
}

int ref_llama_weights_load(struct llama_weights *w, const struct model_source *s, struct io_err *e) {
    const struct model_config *c = &s->config;
    if (load_one(w->embed, s, MW_EMBED, 0, e) != 0 || load_one(w->final_norm, s, MW_FINAL_NORM, 0, e) != 0) return -1;
    if (!c->tie_word_embeddings && load_one(w->lm_head, s, MW_LM_HEAD, 0, e) != 0) return -1;
    for (int l = 0; l < c->L; l++) {
        struct llama_layer *ly = &w->layers[l];
        if (load_one(ly->attn_norm, s, MW_ATTN_NORM, l, e) != 0 || load_one(ly->mlp_norm, s, MW_MLP_NORM, l, e) != 0)
            return -1;
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            if (load_one(ly->w[t], s, llama_linears[t].weight, l, e) != 0) return -1;
            if (ly->bias[t] && load_one(ly->bias[t], s, llama_linears[t].bias, l, e) != 0) return -1;
        }
    }
    return 0;
}

static void add_tensor(struct llama_tensor *list, int *n, const char *name, float *data, int ndim, int64_t d0,
                       int64_t d1, int trainable) {
    if (list) {
        struct llama_tensor *e = &list[*n];
        memset(e, 0, sizeof *e);
        int k = snprintf(e->name, sizeof e->name, "%s", name);
        CHECK(k > 0 && (size_t)k < sizeof e->name, "tensor name too long: %s", name);
        e->data = data;
        e->ndim = ndim;
        e->shape[0] = d0;
        e->shape[1] = ndim == 2 ? d1 : 0;
        e->numel = ndim == 2 ? d0 * d1 : d0;
        e->trainable = trainable;
    }
    (*n)++;
}

int ref_llama_tensors(struct llama_tensor *list, const struct model_config *c, const struct llama_options *o,
                      const struct llama_weights *w, const struct llama_adapters *a) {
    int n = 0, full = o->mode == LLAMA_FULL;
    char name[160];
    add_tensor(list, &n, "model.embed_tokens.weight", w->embed, 2, c->V, c->C, full);
    for (int l = 0; l < c->L; l++) {
        const struct llama_layer *ly = &w->layers[l];
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        add_tensor(list, &n, name, ly->attn_norm, 1, c->C, 0, full);
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            int co, ci;
            llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, llama_linears[t].module);
            add_tensor(list, &n, name, ly->w[t], 2, co, ci, full);
            if (ly->bias[t]) {
                snprintf(name, sizeof name, "model.layers.%d.%s.bias", l, llama_linears[t].module);
                add_tensor(list, &n, name, ly->bias[t], 1, co, 0, full);
            }
        }
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        add_tensor(list, &n, name, ly->mlp_norm, 1, c->C, 0, full);
    }
    add_tensor(list, &n, "model.norm.weight", w->final_norm, 1, c->C, 0, full);
    if (!c->tie_word_embeddings) add_tensor(list, &n, "lm_head.weight", w->lm_head, 2, c->V, c->C, full);
    if (a && a->layers && !full) {
        for (int l = 0; l < c->L; l++) {
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                const struct llama_adapter *ad = &a->layers[l][t];
                if (!is_target(o, (enum llama_linear)t)) continue;
                int co, ci;
                llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_A.weight", l, llama_linears[t].module);
                add_tensor(list, &n, name, ad->a, 2, o->R, ci, 1);
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_B.weight", l, llama_linears[t].module);
                add_tensor(list, &n, name, ad->b, 2, co, o->R, 1);
                if (o->mode == LLAMA_DORA) {
                    snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_magnitude_vector", l,
                             llama_linears[t].module);
                    add_tensor(list, &n, name, ad->mag, 1, co, 0, 1);
                }
            }
        }
    }
    return n;
}

/* ---------------------------------------------------------------- plan */

/* Offsets are kept multiples of 4 floats (16 bytes): the cross-entropy workspace is read as
 * doubles. */
static size_t take(size_t *top, size_t n) {
    size_t at = *top;
    *top += (n + 3) & ~(size_t)3;
    return at;
}

static int n_chunk(const struct llama_options *o) { return o->ce_n_chunk > 0 ? o->ce_n_chunk : o->linear == LINEAR_BLAS ? 256 : 64; }
static int v_chunk(const struct llama_options *o) { return o->ce_v_chunk > 0 ? o->ce_v_chunk : o->linear == LINEAR_BLAS ? 4096 : 256; }
static int block_q(const struct llama_options *o) { return o->attn_block_q > 0 ? o->attn_block_q : 16; }
static int block_k(const struct llama_options *o) { return o->attn_block_k > 0 ? o->attn_block_k : 16; }

/* Floats of the adapters' backward workspace: the largest any target needs. */
static size_t adapter_ws_floats(const struct model_config *c, const struct llama_options *o, int N) {
    size_t most = 0;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        if (!is_target(o, (enum llama_linear)t)) continue;
        int co, ci;
        llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
        size_t n = o->mode == LLAMA_LORA ? ref_lora_backward_workspace_size(N, o->R)
                                         : ref_dora_backward_workspace_size(N, co, o->R);
        if (n > most) most = n;
    }
    return most;
}

void ref_llama_init(struct llama_model *m, const struct model_config *c, const struct llama_options *o, int B, int T,
                    int max_pos) {
    memset(m, 0, sizeof *m);
    CHECK(B >= 1 && T >= 1, "B=%d T=%d", B, T);
    CHECK(c->L >= 1 && c->C >= 1 && c->F >= 1 && c->V >= 1 && c->H >= 1 && c->KVH >= 1 && c->H % c->KVH == 0 &&
              c->D >= 2 && c->D % 2 == 0,
          "config L=%d C=%d F=%d V=%d H=%d KVH=%d D=%d", c->L, c->C, c->F, c->V, c->H, c->KVH, c->D);
    CHECK(o->mode == LLAMA_FULL || (o->R >= 1 && (o->targets & ~LLAMA_ALL_TARGETS) == 0), "mode %d R=%d targets %#x",
          (int)o->mode, o->R, o->targets);
    m->cfg = *c;
    m->opt = *o;
    m->B = B;
    m->T = T;
    if (max_pos < T) max_pos = T;
    ref_rope_cache_build(&m->rope, max_pos, c->D, c->rope_theta, &c->rope_scaling);
    const size_t N = (size_t)B * (size_t)T;
    m->pos0 = malloc(N * sizeof *m->pos0);
    CHECK(m->pos0 != NULL, "out of memory");
    for (size_t n = 0; n < N; n++) m->pos0[n] = (int32_t)(n % (size_t)T);
    m->lora_scale = o->mode == LLAMA_FULL ? 0.0f : ref_lora_scale(o->alpha, o->R, o->scaling);
    m->attn_scale = (float)(1.0 / sqrt((double)c->D));

    const size_t C = (size_t)c->C, F = (size_t)c->F, QD = (size_t)c->H * (size_t)c->D,
                 KD = (size_t)c->KVH * (size_t)c->D, BHT = (size_t)B * (size_t)c->H * (size_t)T;
    /* one layer's saved set */
    size_t top = 0;
    struct llama_plan_layer *p = &m->pl;
    p->rstd1 = take(&top, N);
    p->n1 = take(&top, N * C);
    p->q = take(&top, N * QD);
    p->k = take(&top, N * KD);
    p->v = take(&top, N * KD);
    p->att = take(&top, N * QD);
    p->lse = take(&top, BHT);
    p->attw = take(&top, o->attn == ATTN_NAIVE ? ref_attention_naive_workspace_size(B, T, c->H) : 0);
    p->h = take(&top, N * C);
    p->rstd2 = take(&top, N);
    p->n2 = take(&top, N * C);
    p->gate = take(&top, N * F);
    p->up = take(&top, N * F);
    p->mlp = take(&top, N * F);
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        int co, ci;
        llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
        p->u[t] = take(&top, is_target(o, (enum llama_linear)t) ? N * (size_t)o->R : 0);
        p->wnorm[t] = take(&top, is_target(o, (enum llama_linear)t) && o->mode == LLAMA_DORA ? (size_t)co : 0);
    }
    m->per_layer = top;
    m->layer_stride = o->recompute != RECOMPUTE_NONE ? 0 : top;

    /* the slab */
    top = 0;
    m->x_in = take(&top, ((size_t)c->L + 1) * N * C);
    m->layer0 = take(&top, o->recompute != RECOMPUTE_NONE ? m->per_layer : (size_t)c->L * m->per_layer);
    m->rstd_f = take(&top, N);
    m->nf = take(&top, N * C);
    /* backward scratch: G, dn, tmp (N, max(C, F, QD)), datt/dq (N, QD), dk, dv (N, KD), dmlp,
     * dgate, dup (N, F), attention Δ, adapter workspace, cross-entropy workspace (bytes → floats) */
    size_t wide = C > F ? C : F;
    if (QD > wide) wide = QD;
    size_t s = 0;
    s += 3 * ((N * wide + 3) & ~(size_t)3);
    s += 2 * ((N * QD + 3) & ~(size_t)3) + 2 * ((N * KD + 3) & ~(size_t)3);
    s += 3 * ((N * F + 3) & ~(size_t)3);
    s += (ref_attention_flash_backward_workspace_size(B, T, c->H) + 3) & ~(size_t)3;
    s += (adapter_ws_floats(c, o, (int)N) + 3) & ~(size_t)3;
    s += (((o->linear == LINEAR_BLAS ? ref_cross_entropy_fused_blas_workspace_size(n_chunk(o), v_chunk(o), c->C)
                  : ref_cross_entropy_fused_workspace_size(n_chunk(o), v_chunk(o), c->C)) + 3) / 4 + 3) & ~(size_t)3;
    m->scratch_floats = s;
    m->scratch = take(&top, s);
    m->total = top;
}

void ref_llama_free(struct llama_model *m) {
    ref_rope_cache_free(&m->rope);
    free(m->pos0);
    m->pos0 = NULL;
}

size_t ref_llama_slab_floats(const struct llama_model *m) { return m->total; }

/* ---------------------------------------------------------------- pieces */

struct layer_set {
    float *rstd1, *n1, *q, *k, *v, *att, *lse, *attw, *h, *rstd2, *n2, *gate, *up, *mlp;
    float *u[LLAMA_N_LINEAR], *wnorm[LLAMA_N_LINEAR];
};

/* The saved output of linear t where DoRA's backward reads it (llama_dora_saved: v, gate, up). */
static const float *y_of(const struct layer_set *s, enum llama_linear t) {
    CHECK(t == LLAMA_V || t == LLAMA_GATE || t == LLAMA_UP, "linear %d's output is not saved", (int)t);
    return t == LLAMA_V ? s->v : t == LLAMA_GATE ? s->gate : s->up;
}

static void layer_set(struct layer_set *s, const struct llama_model *m, float *slab, int l) {
    float *base = slab + m->layer0 + (size_t)l * m->layer_stride;
    const struct llama_plan_layer *p = &m->pl;
    s->rstd1 = base + p->rstd1;
    s->n1 = base + p->n1;
    s->q = base + p->q;
    s->k = base + p->k;
    s->v = base + p->v;
    s->att = base + p->att;
    s->lse = base + p->lse;
    s->attw = base + p->attw;
    s->h = base + p->h;
    s->rstd2 = base + p->rstd2;
    s->n2 = base + p->n2;
    s->gate = base + p->gate;
    s->up = base + p->up;
    s->mlp = base + p->mlp;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        s->u[t] = base + p->u[t];
        s->wnorm[t] = base + p->wnorm[t];
    }
}

static float *x_in(const struct llama_model *m, float *slab, int l) {
    return slab + m->x_in + (size_t)l * (size_t)m->B * (size_t)m->T * (size_t)m->cfg.C;
}

struct scratch {
    float *G, *dn, *tmp, *datt, *dq, *dk, *dv, *dmlp, *dgate, *dup, *attn_ws, *ad_ws;
    void *ce_ws;
};

static void scratch_set(struct scratch *s, const struct llama_model *m, float *slab) {
    const struct model_config *c = &m->cfg;
    const size_t N = (size_t)m->B * (size_t)m->T, C = (size_t)c->C, F = (size_t)c->F,
                 QD = (size_t)c->H * (size_t)c->D, KD = (size_t)c->KVH * (size_t)c->D;
    size_t wide = C > F ? C : F;
    if (QD > wide) wide = QD;
    size_t top = m->scratch;
    s->G = slab + take(&top, N * wide);
    s->dn = slab + take(&top, N * wide);
    s->tmp = slab + take(&top, N * wide);
    s->datt = slab + take(&top, N * QD);
    s->dq = slab + take(&top, N * QD);
    s->dk = slab + take(&top, N * KD);
    s->dv = slab + take(&top, N * KD);
    s->dmlp = slab + take(&top, N * F);
    s->dgate = slab + take(&top, N * F);
    s->dup = slab + take(&top, N * F);
    s->attn_ws = slab + take(&top, ref_attention_flash_backward_workspace_size(m->B, m->T, c->H));
    s->ad_ws = slab + take(&top, adapter_ws_floats(c, &m->opt, (int)N));
    s->ce_ws = slab + top;
}

static void lin_fwd(const struct llama_model *m, float *y, const float *x, const float *w, const float *b, int N,
                    int ci, int co) {
    if (m->opt.linear == LINEAR_BLAS)
        ref_linear_forward(y, x, w, b, N, ci, co, m->opt.act);
    else
        ref_linear_forward_naive(y, x, w, b, N, ci, co, m->opt.act);
}

static void lin_bwd(const struct llama_model *m, float *dx, float *dw, float *db, const float *dy, const float *x,
                    const float *w, int N, int ci, int co) {
    if (m->opt.linear == LINEAR_BLAS)
        ref_linear_backward(dx, dw, db, dy, x, w, N, ci, co, m->opt.act);
    else
        ref_linear_backward_naive(dx, dw, db, dy, x, w, N, ci, co, m->opt.act);
}

/* ---- FP8 block linears (llama.h): the quantization points -------------------------------------- */

/* Records one quantization of row: its statistics, and its amax (delayed) or scale. */
static void fp8_record(struct llama_fp8 *f, int row, enum fp8_rule rule, const struct fp8_stats *st, float amax,
                       float scale) {
    if (f->recording != FP8_RECORD) return;
    f->saturated += st->saturated;
    f->flags[row] |= st->flags;
    if (rule == FP8_RULE_GIVEN) {
        float *slot = &f->history[(size_t)row * (size_t)f->history_len];
        *slot = fmaxf(*slot, amax);
    } else {
        f->scale[row] = scale;
    }
}

/* The forward quantization of x (N, ci), the input of linear `first` of layer l and of the
 * linears that share it (q/k/v, gate/up: recorded in first's row), into f->xq. */
static const struct fp8_operand *fp8_input(const struct llama_model *m, int l, enum llama_linear first,
                                           const float *x, int ci) {
    struct llama_fp8 *f = m->fp8;
    const int row = llama_fp8_row(f->L, FP8_ROLE_X, l, first);
    const enum fp8_rule rule = fp8_rule_for(f->recipe, FP8_ROLE_X, f->weights);
    struct fp8_stats st = {0.0f, 0, 0u};
    float amax = 0.0f;
    const float sc = ref_fp8_quantize(&f->xq, NULL, &st, &amax, x, (int64_t)m->B * m->T, ci, FP8_E4M3, rule,
                                      f->scale[row]);
    fp8_record(f, row, rule, &st, amax, sc);
    return &f->xq;
}

/* The weight gradient's x̂ᵀ (ci, N) of the same input, into f->xt: per tensor the forward's codes
 * transposed (its scale; nothing recorded), 1×128 the second quantization along N (its
 * statistics recorded; the kernel writes the row-wise codes again, into f->xq). */
static const struct fp8_operand *fp8_input_t(const struct llama_model *m, int l, enum llama_linear first,
                                             const float *x, int ci) {
    struct llama_fp8 *f = m->fp8;
    const int row = llama_fp8_row(f->L, FP8_ROLE_X, l, first);
    const enum fp8_rule rule = fp8_rule_for(f->recipe, FP8_ROLE_X, f->weights);
    struct fp8_stats st = {0.0f, 0, 0u};
    const int block = rule == FP8_RULE_BLOCK_1X128;
    ref_fp8_quantize(block ? &f->xq : NULL, &f->xt, &st, NULL, x, (int64_t)m->B * m->T, ci, FP8_E4M3, rule,
                     f->scale[row]);
    if (block && f->recording == FP8_RECORD) {
        f->saturated += st.saturated;
        f->flags[row] |= st.flags;
    }
    return &f->xt;
}

/* y = linear t of layer l applied to x, with its adapter; xq: x quantized (FP8), else NULL. */
static void proj_fwd(const struct llama_model *m, const struct llama_weights *w, const struct llama_adapters *a,
                     struct layer_set *s, int l, enum llama_linear t, float *y, const float *x,
                     const struct fp8_operand *xq) {
    const int N = m->B * m->T, R = m->opt.R;
    int co, ci;
    llama_linear_shape(&m->cfg, t, &co, &ci);
    const float *W = w->layers[l].w[t], *b = w->layers[l].bias[t];
    if (m->fp8)
        ref_fp8_linear_forward(y, xq, &m->fp8->w[l][t], b, N, ci, co, m->fp8->how, m->opt.act, m->fp8->ws);
    else
        lin_fwd(m, y, x, W, b, N, ci, co);
    if (!is_target(&m->opt, t)) return;
    const struct llama_adapter *ad = &a->layers[l][t];
    if (m->opt.mode == LLAMA_LORA) {
        ref_lora_forward(y, s->u[t], x, NULL, ad->a, ad->b, N, ci, co, R, m->lora_scale, m->opt.act);
    } else {
        ref_dora_weight_norm(s->wnorm[t], W, ad->a, ad->b, ci, co, R, m->lora_scale);
        /* FP8: z = act((ŷ − b) + s·(u Bᵀ)), the pre-magnitude output dm needs (the GPU's), where
         * the output itself does not serve (llama_dora_saved) */
        float *z = m->fp8 ? m->fp8->z[l][t] : NULL; /* o's: its output, copied below */
        if (z)
            for (int n = 0; n < N; n++)
                for (int o = 0; o < co; o++) z[(int64_t)n * co + o] = b ? y[(int64_t)n * co + o] - b[o] : y[(int64_t)n * co + o];
        ref_dora_forward(y, s->u[t], x, NULL, W, b, ad->a, ad->b, ad->mag, s->wnorm[t], N, ci, co, R, m->lora_scale,
                         m->opt.act);
        if (z && t == LLAMA_O) { /* the output itself (llama_dora_saved), before the residual joins it */
            memcpy(z, y, sizeof(float) * (size_t)N * (size_t)co);
            z = NULL;
        }
        if (z)
            for (int n = 0; n < N; n++)
                for (int o = 0; o < co; o++) {
                    double l_no = 0.0;
                    for (int r = 0; r < R; r++) l_no += (double)s->u[t][(int64_t)n * R + r] * (double)ad->b[(int64_t)o * R + r];
                    float *zz = &z[(int64_t)n * co + o];
                    *zz = act_round(*zz + (float)l_no * m->lora_scale, m->opt.act);
                }
    }
}

/* FP8: the backward of linear t of layer l (llama.h): dy (DoRA: dy_s) quantized for dx and, when W
 * trains, for dW with x̂ᵀ = xt; then the adapter with the act-precision x and dy (dy_s). */
static void proj_bwd_fp8(const struct llama_model *m, const struct llama_weights *w, const struct llama_adapters *a,
                         struct layer_set *s, struct scratch *sc, struct llama_weights *grads,
                         struct llama_adapters *agrads, int l, enum llama_linear t, float *dx, const float *dy,
                         const float *x, const struct fp8_operand *xt) {
    struct llama_fp8 *f = m->fp8;
    const int N = m->B * m->T, R = m->opt.R;
    int co, ci;
    llama_linear_shape(&m->cfg, t, &co, &ci);
    const int target = is_target(&m->opt, t);
    const struct llama_adapter *ad = target ? &a->layers[l][t] : NULL;
    struct llama_adapter *g = target ? &agrads->layers[l][t] : NULL;
    const float *gy = dy;
    if (target && m->opt.mode == LLAMA_DORA) {
        const enum dora_saved kind = llama_dora_saved(&m->cfg, t);
        ref_dora_rescale(f->dys, g->mag, dy, kind == DORA_SAVED_Z || t == LLAMA_O ? f->z[l][t] : y_of(s, t), kind,
                         ad->mag, s->wnorm[t], N, co, m->opt.act);
        gy = f->dys;
    }
    if (dx != NULL || grads != NULL) {
        const int row = llama_fp8_row(f->L, FP8_ROLE_DY, l, t);
        const enum fp8_rule rule = fp8_rule_for(f->recipe, FP8_ROLE_DY, f->weights);
        struct fp8_stats st = {0.0f, 0, 0u};
        float amax = 0.0f;
        const float sc8 = ref_fp8_quantize(dx != NULL || rule == FP8_RULE_BLOCK_1X128 ? &f->dq : NULL,
                                           grads ? &f->dt : NULL, &st, &amax, gy, N, co, fp8_role_format(f->recipe, FP8_ROLE_DY), rule,
                                           f->scale[row]);
        fp8_record(f, row, rule, &st, amax, sc8);
    }
    if (dx != NULL) ref_fp8_linear_backward_dx(dx, &f->dq, &f->w_t[l][t], N, ci, co, f->how, m->opt.act, f->ws);
    if (grads != NULL) {
        ref_fp8_linear_backward_dw(grads->layers[l].w[t], &f->dt, xt, N, ci, co, f->how, f->ws);
        if (grads->layers[l].bias[t]) /* the bias gradient is a sum of the act-precision dy */
            ref_linear_backward_naive(NULL, NULL, grads->layers[l].bias[t], dy, x, w->layers[l].w[t], N, ci, co,
                                      m->opt.act);
    }
    if (!target) return;
    ref_lora_backward(dx, g->a, g->b, gy, x, NULL, NULL, 1.0f, s->u[t], ad->a, ad->b, N, ci, co, R, m->lora_scale,
                      m->opt.act, sc->ad_ws);
}

/* dx = (gradient through linear t of layer l of dy), OVERWRITTEN (NULL: not formed); parameter
 * gradients accumulate. xt: FP8 full fine-tuning's x̂ᵀ, else NULL. */
static void proj_bwd(const struct llama_model *m, const struct llama_weights *w, const struct llama_adapters *a,
                     struct layer_set *s, struct scratch *sc, struct llama_weights *grads,
                     struct llama_adapters *agrads, int l, enum llama_linear t, float *dx, const float *dy,
                     const float *x, const struct fp8_operand *xt) {
    if (m->fp8) {
        proj_bwd_fp8(m, w, a, s, sc, grads, agrads, l, t, dx, dy, x, xt);
        return;
    }
    const int N = m->B * m->T, R = m->opt.R;
    int co, ci;
    llama_linear_shape(&m->cfg, t, &co, &ci);
    const float *W = w->layers[l].w[t];
    float *dW = grads ? grads->layers[l].w[t] : NULL;
    float *db = grads ? grads->layers[l].bias[t] : NULL;
    lin_bwd(m, dx, dW, db, dy, x, W, N, ci, co);
    if (!is_target(&m->opt, t)) return;
    const struct llama_adapter *ad = &a->layers[l][t];
    struct llama_adapter *g = &agrads->layers[l][t];
    if (m->opt.mode == LLAMA_LORA) {
        ref_lora_backward(dx, g->a, g->b, dy, x, NULL, NULL, 1.0f, s->u[t], ad->a, ad->b, N, ci, co, R,
                          m->lora_scale, m->opt.act, sc->ad_ws);
    } else {
        ref_dora_backward(dx, g->mag, g->a, g->b, dy, x, NULL, NULL, 1.0f, s->u[t], W, ad->a, ad->b, ad->mag,
                          s->wnorm[t], N, ci, co, R, m->lora_scale, m->opt.act, sc->ad_ws);
    }
}

/* y = act(y + x), elementwise. */
static void add_into(float *y, const float *x, size_t n, enum act_dtype act) {
    for (size_t i = 0; i < n; i++) {
        float v = y[i] + x[i];
        y[i] = act_round(v, act);
    }
}

static const int32_t *positions(const struct llama_model *m, const struct llama_batch *b) {
    return b->positions ? b->positions : m->pos0;
}

/* One decoder layer, x → y (y = x_in[l + 1]), saving its activations in s. */
static void layer_forward(const struct llama_model *m, const struct llama_weights *w, const struct llama_adapters *a,
                          const struct llama_batch *batch, struct layer_set *s, int l, const float *x, float *y) {
    const struct model_config *c = &m->cfg;
    const int N = m->B * m->T, B = m->B, T = m->T;
    const enum act_dtype act = m->opt.act;
    const struct llama_layer *ly = &w->layers[l];
    ref_rmsnorm_forward(s->n1, s->rstd1, x, ly->attn_norm, N, c->C, c->rms_norm_eps, act);
    const struct fp8_operand *xq = m->fp8 ? fp8_input(m, l, LLAMA_Q, s->n1, c->C) : NULL; /* shared by q, k, v */
    proj_fwd(m, w, a, s, l, LLAMA_Q, s->q, s->n1, xq);
    proj_fwd(m, w, a, s, l, LLAMA_K, s->k, s->n1, xq);
    proj_fwd(m, w, a, s, l, LLAMA_V, s->v, s->n1, xq);
    ref_rope_forward(s->q, s->k, positions(m, batch), &m->rope, B, T, c->H, c->KVH, c->D, act);
    if (m->opt.attn == ATTN_NAIVE)
        ref_attention_naive_forward(s->att, s->lse, s->q, s->k, s->v, B, T, c->H, c->KVH, c->D, m->attn_scale, act,
                                    s->attw);
    else
        ref_attention_flash_forward(s->att, s->lse, s->q, s->k, s->v, B, T, c->H, c->KVH, c->D, m->attn_scale,
                                    block_q(&m->opt), block_k(&m->opt), act);
    xq = m->fp8 ? fp8_input(m, l, LLAMA_O, s->att, c->H * c->D) : NULL;
    proj_fwd(m, w, a, s, l, LLAMA_O, s->h, s->att, xq);
    add_into(s->h, x, (size_t)N * (size_t)c->C, act); /* h = x + o_proj(att): the add commutes */
    ref_rmsnorm_forward(s->n2, s->rstd2, s->h, ly->mlp_norm, N, c->C, c->rms_norm_eps, act);
    xq = m->fp8 ? fp8_input(m, l, LLAMA_GATE, s->n2, c->C) : NULL; /* shared by gate, up */
    proj_fwd(m, w, a, s, l, LLAMA_GATE, s->gate, s->n2, xq);
    proj_fwd(m, w, a, s, l, LLAMA_UP, s->up, s->n2, xq);
    ref_swiglu_forward(s->mlp, s->gate, s->up, N, c->F, c->F, act);
    xq = m->fp8 ? fp8_input(m, l, LLAMA_DOWN, s->mlp, c->F) : NULL;
    proj_fwd(m, w, a, s, l, LLAMA_DOWN, y, s->mlp, xq);
    add_into(y, s->h, (size_t)N * (size_t)c->C, act);
}

static int64_t n_valid(const struct llama_model *m, const struct llama_batch *b) {
    int64_t n = b->n_valid_total > 0 ? b->n_valid_total : ref_cross_entropy_count_valid(b->targets, m->B * m->T);
    CHECK(n >= 1, "the batch has no valid target (every label is -100)");
    return n;
}

/* ---------------------------------------------------------------- forward / backward */

double ref_llama_forward(const struct llama_model *m, const struct llama_weights *w, const struct llama_adapters *a,
                         const struct llama_batch *batch, float *slab, float *logits) {
    const struct model_config *c = &m->cfg;
    CHECK(batch->B == m->B && batch->T == m->T, "batch B=%d T=%d, model planned for B=%d T=%d", batch->B, batch->T,
          m->B, m->T);
    CHECK(m->opt.mode == LLAMA_FULL || (a != NULL && a->layers != NULL), "adapters required in mode %d",
          (int)m->opt.mode);
    const int N = m->B * m->T;
    ref_embedding_forward(x_in(m, slab, 0), batch->ids, w->embed, N, c->V, c->C);
    for (int l = 0; l < c->L; l++) {
        struct layer_set s;
        layer_set(&s, m, slab, l);
        layer_forward(m, w, a, batch, &s, l, x_in(m, slab, l), x_in(m, slab, l + 1));
    }
    float *nf = slab + m->nf;
    ref_rmsnorm_forward(nf, slab + m->rstd_f, x_in(m, slab, c->L), w->final_norm, N, c->C, c->rms_norm_eps,
                        m->opt.act);
    if (logits) ref_linear_forward_naive(logits, nf, w->lm_head, NULL, N, c->C, c->V, m->opt.act);
    struct scratch sc;
    scratch_set(&sc, m, slab);
    double loss = 0.0;
    (m->opt.linear == LINEAR_BLAS ? ref_cross_entropy_fused_blas : ref_cross_entropy_fused)(&loss, NULL, NULL, nf, w->lm_head, batch->targets, N, c->C, c->V, n_valid(m, batch), 1.0f,
                            n_chunk(&m->opt), v_chunk(&m->opt), m->opt.act, sc.ce_ws);
    return loss;
}

void ref_llama_backward(const struct llama_model *m, const struct llama_weights *w, const struct llama_adapters *a,
                        const struct llama_batch *batch, float *slab, struct llama_weights *grads,
                        struct llama_adapters *agrads, float grad_scale) {
    const struct model_config *c = &m->cfg;
    const int N = m->B * m->T, B = m->B, T = m->T;
    const enum act_dtype act = m->opt.act;
    const int full = m->opt.mode == LLAMA_FULL;
    CHECK(full ? grads != NULL : (agrads != NULL && agrads->layers != NULL), "mode %d needs %s gradients",
          (int)m->opt.mode, full ? "weight" : "adapter");
    if (!full) grads = NULL;
    struct scratch sc;
    scratch_set(&sc, m, slab);

    /* loss → d nf (in sc.dn) and the lm_head gradient (tied: into the embedding's, first) */
    (m->opt.linear == LINEAR_BLAS ? ref_cross_entropy_fused_blas : ref_cross_entropy_fused)(NULL, sc.dn, grads ? grads->lm_head : NULL, slab + m->nf, w->lm_head, batch->targets, N,
                            c->C, c->V, n_valid(m, batch), grad_scale, n_chunk(&m->opt), v_chunk(&m->opt), act,
                            sc.ce_ws);
    ref_rmsnorm_backward(sc.G, grads ? grads->final_norm : NULL, sc.dn, x_in(m, slab, c->L), w->final_norm,
                         slab + m->rstd_f, N, c->C, act);

    for (int l = c->L - 1; l >= 0; l--) {
        struct layer_set s;
        layer_set(&s, m, slab, l);
        const float *x = x_in(m, slab, l);
        if (m->opt.recompute != RECOMPUTE_NONE) {
            /* the recomputation quantizes as the forward did and records nothing (llama.h) */
            const enum fp8_recording rec = m->fp8 ? m->fp8->recording : FP8_DISCARD;
            if (m->fp8) m->fp8->recording = FP8_DISCARD;
            layer_forward(m, w, a, batch, &s, l, x, x_in(m, slab, l + 1));
            if (m->fp8) m->fp8->recording = rec;
        }
        struct llama_layer *gl = grads ? &grads->layers[l] : NULL;
        const struct llama_layer *ly = &w->layers[l];
        const int fp8_dw = m->fp8 != NULL && full; /* FP8 weight gradients read x̂ᵀ of each group's input */
        /* MLP: G = d x_{l+1} */
        const struct fp8_operand *xt = fp8_dw ? fp8_input_t(m, l, LLAMA_DOWN, s.mlp, c->F) : NULL;
        proj_bwd(m, w, a, &s, &sc, grads, agrads, l, LLAMA_DOWN, sc.dmlp, sc.G, s.mlp, xt);
        ref_swiglu_backward(sc.dgate, sc.dup, sc.dmlp, s.gate, s.up, N, c->F, c->F, act);
        xt = fp8_dw ? fp8_input_t(m, l, LLAMA_GATE, s.n2, c->C) : NULL;
        proj_bwd(m, w, a, &s, &sc, grads, agrads, l, LLAMA_GATE, sc.dn, sc.dgate, s.n2, xt);
        proj_bwd(m, w, a, &s, &sc, grads, agrads, l, LLAMA_UP, sc.tmp, sc.dup, s.n2, xt);
        add_into(sc.dn, sc.tmp, (size_t)N * (size_t)c->C, act);
        /* G = d h = G + rmsnorm_backward(d n2) */
        ref_rmsnorm_residual_backward(sc.G, gl ? gl->mlp_norm : NULL, sc.dn, sc.G, s.h, ly->mlp_norm, s.rstd2, N,
                                      c->C, act);
        /* attention */
        xt = fp8_dw ? fp8_input_t(m, l, LLAMA_O, s.att, c->H * c->D) : NULL;
        proj_bwd(m, w, a, &s, &sc, grads, agrads, l, LLAMA_O, sc.datt, sc.G, s.att, xt);
        if (m->opt.attn == ATTN_NAIVE)
            ref_attention_naive_backward(sc.dq, sc.dk, sc.dv, sc.datt, s.q, s.k, s.v, s.att, B, T, c->H, c->KVH, c->D,
                                         m->attn_scale, act, s.attw);
        else
            ref_attention_flash_backward(sc.dq, sc.dk, sc.dv, sc.datt, s.q, s.k, s.v, s.att, s.lse, B, T, c->H,
                                         c->KVH, c->D, m->attn_scale, block_q(&m->opt), block_k(&m->opt), act,
                                         sc.attn_ws);
        ref_rope_backward(sc.dq, sc.dk, positions(m, batch), &m->rope, B, T, c->H, c->KVH, c->D, act);
        /* Layer 0's input gradient feeds only the embedding's, which trains in full fine-tuning
         * alone: the adapter methods do not form it (as the GPU model). */
        const int need_dx = full || l > 0;
        xt = fp8_dw ? fp8_input_t(m, l, LLAMA_Q, s.n1, c->C) : NULL;
        proj_bwd(m, w, a, &s, &sc, grads, agrads, l, LLAMA_Q, need_dx ? sc.dn : NULL, sc.dq, s.n1, xt);
        proj_bwd(m, w, a, &s, &sc, grads, agrads, l, LLAMA_K, need_dx ? sc.tmp : NULL, sc.dk, s.n1, xt);
        if (need_dx) add_into(sc.dn, sc.tmp, (size_t)N * (size_t)c->C, act);
        proj_bwd(m, w, a, &s, &sc, grads, agrads, l, LLAMA_V, need_dx ? sc.tmp : NULL, sc.dv, s.n1, xt);
        if (!need_dx) continue;
        add_into(sc.dn, sc.tmp, (size_t)N * (size_t)c->C, act);
        /* G = d x_l = G + rmsnorm_backward(d n1) */
        ref_rmsnorm_residual_backward(sc.G, gl ? gl->attn_norm : NULL, sc.dn, sc.G, x, ly->attn_norm, s.rstd1, N,
                                      c->C, act);
    }
    if (grads) ref_embedding_backward(grads->embed, sc.G, batch->ids, N, c->V, c->C);
}
