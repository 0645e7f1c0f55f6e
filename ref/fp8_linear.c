/* fp8_linear.c — the FP8 linear layer and the recipes' quantization rules (fp8_linear.h). */
#include "ref/fp8_linear.h"

#include <cblas.h>
#include <math.h>

#include "io/check.h"
#include "ref/bf16.h"

const char *const fp8_recipe_names[FP8_RECIPE_COUNT + 1] = {"delayed", "current", "block", NULL};

enum fp8_rule fp8_rule_for(enum fp8_recipe recipe, enum fp8_role role, enum fp8_weight_kind kind) {
    CHECK(recipe >= 0 && recipe < FP8_RECIPE_COUNT && role >= 0 && role < FP8_N_ROLES, "recipe %d role %d",
          (int)recipe, (int)role);
    if (role == FP8_ROLE_W) {
        if (recipe == FP8_RECIPE_BLOCK) return FP8_RULE_BLOCK_128X128;
        if (kind == FP8_WEIGHT_FROZEN) return FP8_RULE_CURRENT_POW2;
        return recipe == FP8_RECIPE_DELAYED ? FP8_RULE_GIVEN : FP8_RULE_CURRENT;
    }
    if (recipe == FP8_RECIPE_BLOCK) return FP8_RULE_BLOCK_1X128;
    return recipe == FP8_RECIPE_DELAYED ? FP8_RULE_GIVEN : FP8_RULE_CURRENT;
}

enum fp8_scaling fp8_rule_scaling(enum fp8_rule rule) {
    return rule == FP8_RULE_BLOCK_1X128     ? FP8_SCALING_1X128
           : rule == FP8_RULE_BLOCK_128X128 ? FP8_SCALING_128X128
                                            : FP8_SCALING_TENSOR;
}

int64_t fp8_operand_scale_count(enum fp8_scaling mode, int64_t rows, int64_t cols) {
    if (mode == FP8_SCALING_TENSOR) return 1;
    return fp8_block_scale_count(mode == FP8_SCALING_1X128 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128, rows, cols);
}

static void describe(struct fp8_operand *op, enum fp8_scaling mode, enum fp8_format f, int64_t rows, int64_t cols) {
    op->mode = mode;
    op->format = f;
    op->rows = rows;
    op->cols = cols;
}

float ref_fp8_quantize(struct fp8_operand *q, struct fp8_operand *q_t, struct fp8_stats *st, float *amax,
                       const float *x, int64_t rows, int64_t cols, enum fp8_format f, enum fp8_rule rule,
                       float scale) {
    CHECK(rows >= 1 && cols >= 1 && (q != NULL || q_t != NULL), "ref_fp8_quantize: rows=%lld cols=%lld",
          (long long)rows, (long long)cols);
    struct fp8_stats local = {0.0f, 0, 0u};
    float used;
    const enum fp8_scaling mode = fp8_rule_scaling(rule);
    if (mode == FP8_SCALING_TENSOR) {
        if (rule == FP8_RULE_GIVEN) {
            used = scale;
        } else {
            const float a = fp8_amax(x, rows * cols);
            if (!isfinite(a)) local.flags |= FP8_FLAG_AMAX_NONFINITE;
            used = fp8_current_scale(a, f, 0.0f, rule == FP8_RULE_CURRENT_POW2);
        }
        fp8_cast_transpose(q ? q->q : NULL, q_t ? q_t->q : NULL, &local, x, rows, cols, used, f);
        const float s_inv = 1.0f / used;
        if (q) {
            q->s_inv[0] = s_inv;
            describe(q, mode, f, rows, cols);
        }
        if (q_t) {
            q_t->s_inv[0] = s_inv;
            describe(q_t, mode, f, cols, rows);
        }
    } else {
        CHECK(q != NULL, "ref_fp8_quantize: the block rules write the codes along cols");
        const enum fp8_block b = mode == FP8_SCALING_1X128 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128;
        fp8_block_quantize(q->q, q->s_inv, q_t ? q_t->q : NULL, q_t ? q_t->s_inv : NULL, &local, x, rows, cols, b, f,
                           0.0f, 1);
        describe(q, mode, f, rows, cols);
        if (q_t) describe(q_t, mode, f, cols, rows);
        used = fp8_current_scale(local.amax, f, 0.0f, 1);
    }
    if (st) {
        st->amax = fmaxf(st->amax, local.amax);
        st->saturated += local.saturated;
        st->flags |= local.flags;
    }
    if (amax) *amax = local.amax;
    return used;
}

/* σ of operand a at row r, K block kb. */
static float sigma(const struct fp8_operand *a, int64_t r, int64_t kb) {
    if (a->mode == FP8_SCALING_TENSOR) return a->s_inv[0];
    const enum fp8_block b = a->mode == FP8_SCALING_1X128 ? FP8_BLOCK_1X128 : FP8_BLOCK_128X128;
    return a->s_inv[fp8_block_scale_index(b, a->rows, a->cols, r, kb * FP8_BLOCK_SIZE)];
}

void ref_fp8_dequantize_operand(float *dq, const struct fp8_operand *a) {
    float lut[256];
    for (int c = 0; c < 256; c++) lut[c] = fp8_to_float((uint8_t)c, a->format);
    for (int64_t r = 0; r < a->rows; r++)
        for (int64_t c = 0; c < a->cols; c++)
            dq[r * a->cols + c] = lut[a->q[r * a->cols + c]] * sigma(a, r, c / FP8_BLOCK_SIZE);
}

static size_t round4(size_t n) { return (n + 3) & ~(size_t)3; }

size_t ref_fp8_product_workspace_size(int M, int P, int K) {
    return round4((size_t)M * K) + round4((size_t)P * K) + round4((size_t)M * P);
}

static void check_operand(const struct fp8_operand *a, int rows, int cols, const char *what) {
    CHECK(a != NULL && a->q != NULL && a->s_inv != NULL && a->rows == rows && a->cols == cols,
          "fp8 product: operand %s is (%lld, %lld), expected (%d, %d)", what, a ? (long long)a->rows : -1LL,
          a ? (long long)a->cols : -1LL, rows, cols);
}

static void decode(float *out, const struct fp8_operand *a) {
    float lut[256];
    for (int c = 0; c < 256; c++) lut[c] = fp8_to_float((uint8_t)c, a->format);
    const int64_t n = a->rows * a->cols;
    for (int64_t i = 0; i < n; i++) out[i] = lut[a->q[i]];
}

void ref_fp8_product(float *out, const struct fp8_operand *a, const struct fp8_operand *b, int M, int P, int K,
                     enum fp8_product how, float *workspace) {
    check_operand(a, M, K, "A");
    check_operand(b, P, K, "B");
    CHECK(!(a->format == FP8_E5M2 && b->format == FP8_E5M2), "fp8 product: E5M2 x E5M2 is not a cuBLASLt product");
    if (how == FP8_PRODUCT_EXACT) {
        ref_fp8_gemm_scaled(out, a->q, a->format, a->mode, a->s_inv, b->q, b->format, b->mode, b->s_inv, M, P, K,
                            FP8_OUT_F32);
        return;
    }
    float *da = workspace, *db = da + round4((size_t)M * K), *part = db + round4((size_t)P * K);
    decode(da, a);
    decode(db, b);
    const int64_t MP = (int64_t)M * P;
    if (a->mode == FP8_SCALING_TENSOR && b->mode == FP8_SCALING_TENSOR) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, P, K, 1.0f, da, K, db, K, 0.0f, out, P);
        const float s = a->s_inv[0] * b->s_inv[0];
        for (int64_t i = 0; i < MP; i++) out[i] *= s;
        return;
    }
    for (int64_t i = 0; i < MP; i++) out[i] = 0.0f;
    for (int k0 = 0, kb = 0; k0 < K; k0 += FP8_BLOCK_SIZE, kb++) {
        const int kn = K - k0 < FP8_BLOCK_SIZE ? K - k0 : FP8_BLOCK_SIZE;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, P, kn, 1.0f, da + k0, K, db + k0, K, 0.0f, part, P);
        for (int m = 0; m < M; m++) {
            const float sa = sigma(a, m, kb);
            for (int p = 0; p < P; p++) out[(int64_t)m * P + p] += part[(int64_t)m * P + p] * (sa * sigma(b, p, kb));
        }
    }
}

void ref_fp8_linear_forward(float *y, const struct fp8_operand *x, const struct fp8_operand *w, const float *b, int N,
                            int C_in, int C_out, enum fp8_product how, enum act_dtype act, float *workspace) {
    ref_fp8_product(y, x, w, N, C_out, C_in, how, workspace);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < C_out; o++) {
            float *v = &y[(int64_t)n * C_out + o];
            *v = act_round(b ? *v + b[o] : *v, act);
        }
}

void ref_fp8_linear_backward_dx(float *dx, const struct fp8_operand *dy, const struct fp8_operand *w_t, int N,
                                int C_in, int C_out, enum fp8_product how, enum act_dtype act, float *workspace) {
    ref_fp8_product(dx, dy, w_t, N, C_in, C_out, how, workspace);
    if (act == ACT_F32) return;
    for (int64_t i = 0; i < (int64_t)N * C_in; i++) dx[i] = act_round(dx[i], act);
}

size_t ref_fp8_linear_workspace_size(int N, int C_in, int C_out) {
    size_t f = ref_fp8_product_workspace_size(N, C_out, C_in), d = ref_fp8_product_workspace_size(N, C_in, C_out);
    size_t w = ref_fp8_product_workspace_size(C_out, C_in, N) + round4((size_t)C_out * C_in);
    return f > d ? (f > w ? f : w) : (d > w ? d : w);
}

void ref_fp8_linear_backward_dw(float *dw, const struct fp8_operand *dy_t, const struct fp8_operand *x_t, int N,
                                int C_in, int C_out, enum fp8_product how, float *workspace) {
    /* the product into an (C_out, C_in) part after the product's own workspace, then added */
    float *acc = workspace + ref_fp8_product_workspace_size(C_out, C_in, N);
    ref_fp8_product(acc, dy_t, x_t, C_out, C_in, N, how, workspace);
    for (int64_t i = 0; i < (int64_t)C_out * C_in; i++) dw[i] += acc[i];
}
