/* llama_fp8.c — the reference model's FP8 state: allocation, the weights' quantization, the end of
 * an optimizer step, and what the metrics read (llama.h, "FP8 block linears"). The quantization
 * points of the forward and backward are in llama.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "ref/fp8.h"
#include "ref/fp8_linear.h"
#include "ref/llama.h"

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    CHECK(p != NULL, "out of memory allocating %zu × %zu bytes for the FP8 state", n, size);
    return p;
}

/* An operand's storage: rows·cols codes and room for the scales of any mode of (rows, cols). */
static void operand_alloc(struct fp8_operand *o, int64_t rows, int64_t cols) {
    memset(o, 0, sizeof *o);
    const int64_t a = fp8_block_scale_count(FP8_BLOCK_1X128, rows, cols),
                  b = fp8_block_scale_count(FP8_BLOCK_128X128, rows, cols);
    o->q = xcalloc((size_t)(rows * cols), 1);
    o->s_inv = xcalloc((size_t)(a > b ? a : b), sizeof(float));
    o->rows = rows;
    o->cols = cols;
}

static void operand_free(struct fp8_operand *o) {
    free(o->q);
    free(o->s_inv);
    memset(o, 0, sizeof *o);
}

static int is_target(const struct llama_options *o, int t) { return o->mode != LLAMA_FULL && (o->targets >> t & 1u); }

void ref_llama_fp8_alloc(struct llama_fp8 *s, const struct model_config *c, const struct llama_options *o, int N,
                         enum fp8_recipe r) {
    CHECK(r >= 0 && r < FP8_RECIPE_COUNT && N >= 1 && c->L >= 1, "fp8 state: recipe %d N=%d L=%d", (int)r, N, c->L);
    memset(s, 0, sizeof *s);
    s->recipe = r;
    s->weights = o->mode == LLAMA_FULL ? FP8_WEIGHT_TRAINED : FP8_WEIGHT_FROZEN;
    s->how = o->linear == LINEAR_BLAS ? FP8_PRODUCT_BLAS : FP8_PRODUCT_EXACT;
    s->recording = FP8_RECORD;
    s->L = c->L;
    s->n = FP8_N_ROLES * c->L * LLAMA_N_LINEAR;
    s->scale = xcalloc((size_t)s->n, sizeof(float));
    s->flags = xcalloc((size_t)s->n, sizeof(unsigned));
    if (r == FP8_RECIPE_DELAYED) {
        s->history_len = FP8_DELAYED_HISTORY_LEN;
        s->history = xcalloc((size_t)s->n * (size_t)s->history_len, sizeof(float));
        for (int i = 0; i < s->n; i++) s->scale[i] = 1.0f; /* TE's initial scale */
    }
    s->w = xcalloc((size_t)c->L, sizeof *s->w);
    s->w_t = xcalloc((size_t)c->L, sizeof *s->w_t);
    s->z = xcalloc((size_t)c->L, sizeof *s->z);
    int max_in = 0, max_out = 0;
    size_t ws = 0;
    for (int t = 0; t < LLAMA_N_LINEAR; t++) {
        int co, ci;
        llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
        max_in = ci > max_in ? ci : max_in;
        max_out = co > max_out ? co : max_out;
        const size_t need = ref_fp8_linear_workspace_size(N, ci, co);
        ws = need > ws ? need : ws;
        for (int l = 0; l < c->L; l++) {
            operand_alloc(&s->w[l][t], co, ci);
            operand_alloc(&s->w_t[l][t], ci, co);
            /* z, or o's output: the reference's layer adds the residual into that buffer in place */
            if (is_target(o, t) && o->mode == LLAMA_DORA && (llama_dora_saved(c, t) == DORA_SAVED_Z || t == LLAMA_O))
                s->z[l][t] = xcalloc((size_t)N * (size_t)co, sizeof(float));
        }
    }
    operand_alloc(&s->xq, N, max_in);
    operand_alloc(&s->xt, max_in, N);
    operand_alloc(&s->dq, N, max_out);
    operand_alloc(&s->dt, max_out, N);
    if (o->mode == LLAMA_DORA) s->dys = xcalloc((size_t)N * (size_t)max_out, sizeof(float));
    s->ws = xcalloc(ws, sizeof(float));
}

void ref_llama_fp8_free(struct llama_fp8 *s) {
    if (s->w)
        for (int l = 0; l < s->L; l++)
            for (int t = 0; t < LLAMA_N_LINEAR; t++) {
                operand_free(&s->w[l][t]);
                operand_free(&s->w_t[l][t]);
                free(s->z[l][t]);
            }
    operand_free(&s->xq);
    operand_free(&s->xt);
    operand_free(&s->dq);
    operand_free(&s->dt);
    free(s->w);
    free(s->w_t);
    free(s->z);
    free(s->dys);
    free(s->ws);
    free(s->history);
    free(s->scale);
    free(s->flags);
    memset(s, 0, sizeof *s);
}

static const char *const k_role_words[FP8_N_ROLES] = {"input", "weight", "output gradient"};

void llama_fp8_row_describe(char *buf, size_t cap, int L, int row) {
    const int role = row / (L * LLAMA_N_LINEAR), l = row / LLAMA_N_LINEAR % L, t = row % LLAMA_N_LINEAR;
    snprintf(buf, cap, "model.layers.%d.%s's %s", l, llama_linears[t].module, k_role_words[role]);
}

int llama_fp8_row_active(int L, enum llama_mode mode, int row) {
    const int role = row / (L * LLAMA_N_LINEAR), l = row / LLAMA_N_LINEAR % L, t = row % LLAMA_N_LINEAR;
    /* k, v and up share the input of q and gate: one quantization, recorded in the first's row */
    if (role == FP8_ROLE_X && (t == LLAMA_K || t == LLAMA_V || t == LLAMA_UP)) return 0;
    /* the adapter methods form no input gradient for layer 0 */
    if (role == FP8_ROLE_DY && mode != LLAMA_FULL && l == 0 && t <= LLAMA_V) return 0;
    return 1;
}

void ref_llama_fp8_quantize_weights(struct llama_fp8 *s, const struct model_config *c, const struct llama_weights *w,
                                    enum fp8_recording rec) {
    const enum fp8_rule rule = fp8_rule_for(s->recipe, FP8_ROLE_W, s->weights);
    for (int l = 0; l < c->L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            int co, ci;
            llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            const int row = llama_fp8_row(s->L, FP8_ROLE_W, l, (enum llama_linear)t);
            struct fp8_stats st = {0.0f, 0, 0u};
            float amax = 0.0f;
            const float sc = ref_fp8_quantize(&s->w[l][t], &s->w_t[l][t], &st, &amax, w->layers[l].w[t], co, ci,
                                              FP8_E4M3, rule, s->scale[row]);
            if (rule == FP8_RULE_GIVEN) {
                float *slot = &s->history[(size_t)row * (size_t)s->history_len];
                *slot = fmaxf(*slot, amax);
            } else {
                s->scale[row] = sc;
            }
            if (rec == FP8_RECORD) s->flags[row] |= st.flags; /* saturated codes: activations and gradients only */
        }
}

void ref_llama_fp8_freeze_weights(struct llama_fp8 *s, const struct model_config *c, struct llama_weights *w) {
    CHECK(s->weights == FP8_WEIGHT_FROZEN, "fp8: freeze_weights on trained weights");
    ref_llama_fp8_quantize_weights(s, c, w, FP8_DISCARD);
    for (int l = 0; l < c->L; l++) /* a non-finite weight: flagged in its row (the caller refuses it) */
        for (int t = 0; t < LLAMA_N_LINEAR; t++) {
            int co, ci;
            llama_linear_shape(c, (enum llama_linear)t, &co, &ci);
            const float *x = w->layers[l].w[t];
            for (int64_t i = 0; i < (int64_t)co * ci; i++)
                if (!isfinite(x[i])) {
                    s->flags[llama_fp8_row(s->L, FP8_ROLE_W, l, (enum llama_linear)t)] |= FP8_FLAG_INPUT_NONFINITE;
                    break;
                }
        }
    for (int l = 0; l < c->L; l++)
        for (int t = 0; t < LLAMA_N_LINEAR; t++) ref_fp8_dequantize_operand(w->layers[l].w[t], &s->w[l][t]);
}

void ref_llama_fp8_scale_range(const struct llama_fp8 *s, enum llama_mode mode, float *lo, float *hi) {
    float a = INFINITY, b = 0.0f;
    for (int i = 0; i < s->n; i++) {
        if (!llama_fp8_row_active(s->L, mode, i)) continue;
        a = fminf(a, s->scale[i]);
        b = fmaxf(b, s->scale[i]);
    }
    *lo = a;
    *hi = b;
}

unsigned ref_llama_fp8_step_end(struct llama_fp8 *s) {
    unsigned flags = 0;
    if (s->recipe == FP8_RECIPE_DELAYED)
        for (int i = 0; i < s->n; i++) {
            struct fp8_delayed d = {s->history_len, FP8_DELAYED_ALGO, FP8_DELAYED_MARGIN,
                                    fp8_role_format(s->recipe, (enum fp8_role)(i / (s->L * LLAMA_N_LINEAR))),
                                    s->history + (size_t)i * (size_t)s->history_len, s->scale[i], 1.0f / s->scale[i]};
            flags |= fp8_delayed_update(&d);
            s->scale[i] = d.scale;
        }
    s->saturated = 0;
    memset(s->flags, 0, (size_t)s->n * sizeof *s->flags);
    return flags;
}

int ref_llama_fp8_first_flagged(const struct llama_fp8 *s) {
    for (int i = 0; i < s->n; i++)
        if (s->flags[i]) return i;
    return -1;
}
