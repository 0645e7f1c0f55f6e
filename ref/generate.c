/* generate.c — the reference model with a key/value cache (generate.h). */
#include "ref/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "ref/bf16.h"
#include "ref/decode_attention.h"
#include "ref/embedding.h"
#include "ref/linear.h"
#include "ref/rmsnorm.h"
#include "ref/swiglu.h"

static float *falloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    CHECK(p != NULL, "out of memory allocating %zu floats", n);
    return p;
}

static size_t cache_floats(const struct ref_gen *g) {
    return (size_t)g->S * (size_t)g->T_max * (size_t)g->cfg.KVH * (size_t)g->cfg.D;
}

void ref_gen_init(struct ref_gen *g, const struct model_config *c, const struct llama_weights *w, int S, int T_max,
                  int N_max, enum act_dtype act, int blas) {
    memset(g, 0, sizeof *g);
    CHECK(S >= 1 && T_max >= 1 && N_max >= 1, "S=%d T_max=%d N_max=%d", S, T_max, N_max);
    CHECK(c->H % c->KVH == 0 && c->D % 2 == 0, "H=%d KVH=%d D=%d", c->H, c->KVH, c->D);
    g->cfg = *c;
    g->w = w;
    g->act = act;
    g->blas = blas;
    g->S = S;
    g->T_max = T_max;
    g->N_max = N_max;
    g->attn_scale = (float)(1.0 / sqrt((double)c->D));
    ref_rope_cache_build(&g->rope, T_max, c->D, c->rope_theta, &c->rope_scaling);
    const size_t L = (size_t)c->L, N = (size_t)N_max, C = (size_t)c->C, F = (size_t)c->F,
                 QD = (size_t)c->H * (size_t)c->D, KD = (size_t)c->KVH * (size_t)c->D;
    g->k_cache = falloc(L * cache_floats(g));
    g->v_cache = falloc(L * cache_floats(g));
    g->len = calloc((size_t)S, sizeof *g->len);
    g->seq = calloc(N, sizeof *g->seq);
    g->pos = calloc(N, sizeof *g->pos);
    g->rows = calloc(N, sizeof *g->rows);
    CHECK(g->len && g->seq && g->pos && g->rows, "out of memory");
    g->x = falloc(N * C);
    g->n = falloc(N * C);
    g->q = falloc(N * QD);
    g->k = falloc(N * KD);
    g->v = falloc(N * KD);
    g->att = falloc(N * QD);
    g->h = falloc(N * C);
    g->gate = falloc(N * F);
    g->up = falloc(N * F);
    g->mlp = falloc(N * F);
    g->tmp = falloc(N * (C > QD ? C : QD));
    g->rstd = falloc(N);
    g->attn_ws = calloc((size_t)T_max, sizeof *g->attn_ws);
    CHECK(g->attn_ws != NULL, "out of memory");
}

void ref_gen_free(struct ref_gen *g) {
    ref_rope_cache_free(&g->rope);
    free(g->k_cache), free(g->v_cache), free(g->len), free(g->seq), free(g->pos), free(g->rows);
    free(g->x), free(g->n), free(g->q), free(g->k), free(g->v), free(g->att), free(g->h);
    free(g->gate), free(g->up), free(g->mlp), free(g->tmp), free(g->rstd), free(g->attn_ws);
    memset(g, 0, sizeof *g);
}

void ref_gen_reset(struct ref_gen *g, int s) {
    CHECK(s >= 0 && s < g->S, "sequence %d of %d", s, g->S);
    g->len[s] = 0;
}

static void lin(const struct ref_gen *g, float *y, const float *x, const float *w, const float *b, int N, int ci,
                int co, enum act_dtype act) {
    if (g->blas)
        ref_linear_forward(y, x, w, b, N, ci, co, act);
    else
        ref_linear_forward_naive(y, x, w, b, N, ci, co, act);
}

static void add_into(float *y, const float *x, size_t n, enum act_dtype act) {
    for (size_t i = 0; i < n; i++) {
        const float v = y[i] + x[i];
        y[i] = act == ACT_BF16 ? bf16_round(v) : v;
    }
}

/* Rows ids[0..N) of sequences g->seq at positions g->pos (set by the caller, cache lengths
 * already counted); logits of the rows listed in out_rows[0..n_out) into logits (n_out, V). */
static void forward_rows(struct ref_gen *g, const int32_t *ids, int N, const int *out_rows, int n_out,
                         float *logits) {
    const struct model_config *c = &g->cfg;
    const struct llama_weights *w = g->w;
    const enum act_dtype act = g->act;
    const int C = c->C, F = c->F, QD = c->H * c->D, KD = c->KVH * c->D;
    ref_embedding_forward(g->x, ids, w->embed, N, c->V, C);
    for (int l = 0; l < c->L; l++) {
        const struct llama_layer *ly = &w->layers[l];
        float *kc = g->k_cache + (size_t)l * cache_floats(g), *vc = g->v_cache + (size_t)l * cache_floats(g);
        ref_rmsnorm_forward(g->n, g->rstd, g->x, ly->attn_norm, N, C, c->rms_norm_eps, act);
        lin(g, g->q, g->n, ly->w[LLAMA_Q], ly->bias[LLAMA_Q], N, C, QD, act);
        lin(g, g->k, g->n, ly->w[LLAMA_K], ly->bias[LLAMA_K], N, C, KD, act);
        lin(g, g->v, g->n, ly->w[LLAMA_V], ly->bias[LLAMA_V], N, C, KD, act);
        ref_rope_forward(g->q, g->k, g->pos, &g->rope, 1, N, c->H, c->KVH, c->D, act);
        for (int i = 0; i < N; i++) {
            const size_t at = ((size_t)g->seq[i] * (size_t)g->T_max + (size_t)g->pos[i]) * (size_t)KD;
            memcpy(kc + at, g->k + (size_t)i * KD, (size_t)KD * sizeof(float));
            memcpy(vc + at, g->v + (size_t)i * KD, (size_t)KD * sizeof(float));
        }
        ref_decode_attention_forward(g->att, g->q, kc, vc, g->seq, g->pos, N, c->H, c->KVH, c->D, g->S, g->T_max,
                                     g->attn_scale, act, g->attn_ws);
        lin(g, g->h, g->att, ly->w[LLAMA_O], NULL, N, QD, C, act);
        add_into(g->h, g->x, (size_t)N * C, act); /* h = x + o_proj(att) */
        ref_rmsnorm_forward(g->n, g->rstd, g->h, ly->mlp_norm, N, C, c->rms_norm_eps, act);
        lin(g, g->gate, g->n, ly->w[LLAMA_GATE], NULL, N, C, F, act);
        lin(g, g->up, g->n, ly->w[LLAMA_UP], NULL, N, C, F, act);
        ref_swiglu_forward(g->mlp, g->gate, g->up, N, F, F, act);
        lin(g, g->x, g->mlp, ly->w[LLAMA_DOWN], NULL, N, F, C, act);
        add_into(g->x, g->h, (size_t)N * C, act); /* x' = h + down(mlp) */
    }
    for (int i = 0; i < n_out; i++) {
        const int r = out_rows[i];
        ref_rmsnorm_forward(g->n, g->rstd, g->x + (size_t)r * C, w->final_norm, 1, C, c->rms_norm_eps, act);
        lin(g, logits + (size_t)i * c->V, g->n, w->lm_head, NULL, 1, C, c->V, ACT_F32);
    }
}

int ref_gen_prefill(struct ref_gen *g, int s, const int32_t *ids, int n, float *logits, struct io_err *e) {
    CHECK(s >= 0 && s < g->S && n >= 1, "sequence %d of %d, %d tokens", s, g->S, n);
    if (g->len[s] + n > g->T_max)
        return io_fail(e, "the sequence would hold %d tokens, more than the %d this generator was sized for",
                       g->len[s] + n, g->T_max);
    for (int at = 0; at < n; at += g->N_max) {
        const int m = n - at < g->N_max ? n - at : g->N_max;
        for (int i = 0; i < m; i++) {
            CHECK(ids[at + i] >= 0 && ids[at + i] < g->cfg.V, "token %d outside the vocabulary", ids[at + i]);
            g->seq[i] = s;
            g->pos[i] = g->len[s]++;
        }
        const int last = m - 1;
        forward_rows(g, ids + at, m, &last, at + m == n ? 1 : 0, logits);
    }
    return 0;
}

int ref_gen_decode(struct ref_gen *g, const int32_t *seqs, const int32_t *tokens, int n, float *logits,
                   struct io_err *e) {
    CHECK(n >= 1 && n <= g->N_max, "%d rows, at most %d", n, g->N_max);
    for (int i = 0; i < n; i++) {
        const int s = seqs[i];
        CHECK(s >= 0 && s < g->S, "sequence %d of %d", s, g->S);
        CHECK(tokens[i] >= 0 && tokens[i] < g->cfg.V, "token %d outside the vocabulary", tokens[i]);
        for (int j = 0; j < i; j++) CHECK(seqs[j] != s, "sequence %d twice in one decode step", s);
        if (g->len[s] + 1 > g->T_max)
            return io_fail(e, "sequence %d would hold %d tokens, more than the %d this generator was sized for", s,
                           g->len[s] + 1, g->T_max);
    }
    for (int i = 0; i < n; i++) {
        g->seq[i] = seqs[i];
        g->pos[i] = g->len[seqs[i]]++;
        g->rows[i] = i;
    }
    forward_rows(g, tokens, n, g->rows, n, logits);
    return 0;
}

void ref_gen_round_weights(struct llama_weights *w, const struct model_config *c) {
    struct llama_options o;
    ref_llama_options_default(&o);
    const int n = ref_llama_tensors(NULL, c, &o, w, NULL);
    struct llama_tensor *list = calloc((size_t)n, sizeof *list);
    CHECK(list != NULL, "out of memory");
    ref_llama_tensors(list, c, &o, w, NULL);
    for (int i = 0; i < n; i++) bf16_round_array(list[i].data, list[i].data, list[i].numel);
    free(list);
}

void ref_merge_adapter(float *w, int C_out, int C_in, const float *lora_a, const float *lora_b, const float *mag,
                       int R, float s) {
    double *row = malloc((size_t)C_in * sizeof *row);
    CHECK(row != NULL, "out of memory");
    for (int64_t o = 0; o < C_out; o++) {
        double ss = 0.0;
        for (int64_t i = 0; i < C_in; i++) {
            double acc = 0.0;
            for (int r = 0; r < R; r++) acc += (double)lora_b[o * R + r] * (double)lora_a[(int64_t)r * C_in + i];
            row[i] = (double)w[o * C_in + i] + (double)s * (double)(float)acc;
            ss += row[i] * row[i];
        }
        const double k = mag ? (double)mag[o] / sqrt(ss) : 1.0;
        for (int64_t i = 0; i < C_in; i++) w[o * C_in + i] = (float)(row[i] * k);
    }
    free(row);
}

void ref_merge_peft(struct llama_weights *w, const struct model_config *c, const struct peft_adapter *a) {
    const float s = (float)peft_scale(&a->config);
    for (int i = 0; i < a->n; i++) {
        const struct peft_module *m = &a->mods[i];
        CHECK(m->layer >= 0 && m->layer < c->L, "adapter layer %d of %d", m->layer, c->L);
        const int li = llama_linear_of_weight(m->kind);
        CHECK(li >= 0, "weight kind %d is not an adaptable linear", (int)m->kind);
        const enum llama_linear t = (enum llama_linear)li;
        int co, ci;
        llama_linear_shape(c, t, &co, &ci);
        CHECK(m->out == co && m->in == ci, "adapter module of shape %lld×%lld for a %d×%d linear",
              (long long)m->out, (long long)m->in, co, ci);
        ref_merge_adapter(w->layers[m->layer].w[t], co, ci, m->lora_a, m->lora_b, m->magnitude, a->config.r, s);
    }
}

int ref_gen_load_weights(struct llama_weights *w, const struct model_source *src, const char *adapter_dir,
                         struct io_err *e) {
    ref_llama_weights_alloc(w, &src->config);
    if (ref_llama_weights_load(w, src, e) != 0) {
        ref_llama_weights_free(w, &src->config);
        return -1;
    }
    if (adapter_dir != NULL && adapter_dir[0] != '\0') {
        struct peft_adapter a;
        if (peft_read(&a, adapter_dir, &src->config, e) != 0) {
            ref_llama_weights_free(w, &src->config);
            return -1;
        }
        ref_merge_peft(w, &src->config, &a);
        peft_free(&a);
    }
    return 0;
}
