/* cross_entropy.c — the reference causal-LM loss (cross_entropy.h): the plain form on given logits,
 * and the fused lm_head + loss that works on (n_chunk × v_chunk) logits tiles with an online
 * logsumexp. Statistics and GEMM sums in double, in index order. */
#include "ref/cross_entropy.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "io/check.h"
#include "ref/bf16.h"


static int label_ok(int32_t y, int V) { return y == REF_IGNORE_INDEX || (y >= 0 && y < V); }

int64_t ref_cross_entropy_count_valid(const int32_t *labels, int N) {
    int64_t n = 0;
    for (int i = 0; i < N; i++) n += labels[i] != REF_IGNORE_INDEX;
    return n;
}

static void check_args(const int32_t *labels, int N, int V, int64_t n_valid_total) {
    CHECK(N >= 0 && V >= 1, "N=%d V=%d", N, V);
    CHECK(n_valid_total >= 1, "n_valid_total=%lld: a batch with no valid label has no loss",
          (long long)n_valid_total);
    for (int i = 0; i < N; i++)
        CHECK(label_ok(labels[i], V), "label %d of row %d is neither in [0, %d) nor %d", (int)labels[i], i, V,
              REF_IGNORE_INDEX);
    int64_t here = ref_cross_entropy_count_valid(labels, N);
    CHECK(here <= n_valid_total, "this micro-batch has %lld valid labels, more than n_valid_total=%lld",
          (long long)here, (long long)n_valid_total);
}

/* log Σ_v exp(z[v]), max-shifted, in double. */
static double row_lse(const float *z, int V) {
    double m = -INFINITY;
    for (int v = 0; v < V; v++) m = z[v] > m ? z[v] : m;
    double s = 0.0;
    for (int v = 0; v < V; v++) s += exp((double)z[v] - m);
    return m + log(s);
}

void ref_cross_entropy_forward(double *loss, float *lse, const float *logits, const int32_t *labels, int N, int V,
                               int64_t n_valid_total) {
    check_args(labels, N, V, n_valid_total);
    double sum = 0.0;
    for (int i = 0; i < N; i++) {
        const float *z = logits + (int64_t)i * V;
        double l = row_lse(z, V);
        if (lse != NULL) lse[i] = (float)l;
        if (labels[i] != REF_IGNORE_INDEX) sum += l - (double)z[labels[i]];
    }
    if (loss != NULL) *loss = sum / (double)n_valid_total;
}

void ref_cross_entropy_backward(float *dlogits, const float *logits, const int32_t *labels, int N, int V,
                                int64_t n_valid_total, float grad_scale, enum act_dtype act) {
    check_args(labels, N, V, n_valid_total);
    const double w = (double)grad_scale / (double)n_valid_total;
    for (int i = 0; i < N; i++) {
        const float *z = logits + (int64_t)i * V;
        float *dz = dlogits + (int64_t)i * V;
        int32_t y = labels[i];
        if (y == REF_IGNORE_INDEX) {
            memset(dz, 0, sizeof(float) * (size_t)V);
            continue;
        }
        double l = row_lse(z, V); /* the whole row is read before any of it is written */
        for (int v = 0; v < V; v++) {
            double p = exp((double)z[v] - l);
            dz[v] = act_round((float)(w * (p - (v == y ? 1.0 : 0.0))), act);
        }
    }
}

/* Workspace of the fused form, in doubles: tile (n_chunk·v_chunk), m, s, zy, lse (n_chunk each),
 * dhidden accumulator (n_chunk·C). */
size_t ref_cross_entropy_fused_workspace_size(int n_chunk, int v_chunk, int C) {
    CHECK(n_chunk >= 1 && v_chunk >= 1 && C >= 1, "n_chunk=%d v_chunk=%d C=%d", n_chunk, v_chunk, C);
    size_t nc = (size_t)n_chunk;
    return sizeof(double) * (nc * (size_t)v_chunk + 4 * nc + nc * (size_t)C);
}

/* tile[i·vc + j] = act(Σ_c h[n0+i, c]·W[v0+j, c]) for i < nc, j < vc. */
static void logits_tile(double *tile, const float *hidden, const float *w, int n0, int nc, int v0, int vc, int C,
                        enum act_dtype act) {
    for (int i = 0; i < nc; i++) {
        const float *h = hidden + (int64_t)(n0 + i) * C;
        for (int j = 0; j < vc; j++) {
            const float *wr = w + (int64_t)(v0 + j) * C;
            double acc = 0.0;
            for (int c = 0; c < C; c++) acc += (double)h[c] * (double)wr[c];
            tile[(int64_t)i * vc + j] = act_round((float)acc, act);
        }
    }
}

size_t ref_cross_entropy_fused_blas_workspace_size(int n_chunk, int v_chunk, int C) {
    return ref_cross_entropy_fused_workspace_size(n_chunk, v_chunk, C) +
           sizeof(float) * ((size_t)n_chunk * (size_t)v_chunk + (size_t)n_chunk * (size_t)C);
}

/* The logits tile through sgemm (fp32 accumulation), then act() and widened to double. */
static void logits_tile_blas(double *tile, float *ftile, const float *hidden, const float *w, int n0, int nc, int v0,
                             int vc, int C, enum act_dtype act) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nc, vc, C, 1.0f, hidden + (int64_t)n0 * C, C,
                w + (int64_t)v0 * C, C, 0.0f, ftile, vc);
    for (int64_t k = 0; k < (int64_t)nc * vc; k++) tile[k] = act_round(ftile[k], act);
}

static void fused_core(double *loss, float *dhidden, float *dw, const float *hidden, const float *w,
                       const int32_t *labels, int N, int C, int V, int64_t n_valid_total, float grad_scale,
                       int n_chunk, int v_chunk, enum act_dtype act, void *workspace, int blas) {
    CHECK(C >= 1 && n_chunk >= 1 && v_chunk >= 1, "C=%d n_chunk=%d v_chunk=%d", C, n_chunk, v_chunk);
    CHECK(((uintptr_t)workspace & 7u) == 0, "the workspace must be 8-byte aligned");
    check_args(labels, N, V, n_valid_total);
    double *tile = workspace;
    double *m = tile + (size_t)n_chunk * (size_t)v_chunk;
    double *s = m + n_chunk, *zy = s + n_chunk, *lse = zy + n_chunk;
    double *dacc = lse + n_chunk;
    float *ftile = (float *)(dacc + (size_t)n_chunk * (size_t)C); /* blas only */
    float *ftmp = ftile + (size_t)n_chunk * (size_t)v_chunk;
    const double gw = (double)grad_scale / (double)n_valid_total;
    const int want_grad = dhidden != NULL || dw != NULL;
    double sum = 0.0;

    for (int n0 = 0; n0 < N; n0 += n_chunk) {
        const int nc = N - n0 < n_chunk ? N - n0 : n_chunk;
        /* Pass 1: online logsumexp over the vocabulary chunks. */
        for (int i = 0; i < nc; i++) m[i] = -INFINITY, s[i] = 0.0, zy[i] = 0.0;
        for (int v0 = 0; v0 < V; v0 += v_chunk) {
            const int vc = V - v0 < v_chunk ? V - v0 : v_chunk;
            if (blas) logits_tile_blas(tile, ftile, hidden, w, n0, nc, v0, vc, C, act);
            else logits_tile(tile, hidden, w, n0, nc, v0, vc, C, act);
            for (int i = 0; i < nc; i++) {
                const double *z = tile + (int64_t)i * vc;
                double mt = m[i];
                for (int j = 0; j < vc; j++) mt = z[j] > mt ? z[j] : mt;
                double acc = s[i] * exp(m[i] - mt); /* exp(−inf) = 0 on the first chunk */
                for (int j = 0; j < vc; j++) acc += exp(z[j] - mt);
                m[i] = mt, s[i] = acc;
                int32_t y = labels[n0 + i];
                if (y >= v0 && y < v0 + vc) zy[i] = z[y - v0];
            }
        }
        for (int i = 0; i < nc; i++) {
            lse[i] = m[i] + log(s[i]);
            if (labels[n0 + i] != REF_IGNORE_INDEX) sum += lse[i] - zy[i];
        }
        if (!want_grad) continue;

        /* Pass 2: recompute each tile, dz = act(gw·(softmax − onehot)), accumulate the gradients. */
        if (dhidden != NULL) memset(dacc, 0, sizeof(double) * (size_t)nc * (size_t)C);
        for (int v0 = 0; v0 < V; v0 += v_chunk) {
            const int vc = V - v0 < v_chunk ? V - v0 : v_chunk;
            if (blas) logits_tile_blas(tile, ftile, hidden, w, n0, nc, v0, vc, C, act);
            else logits_tile(tile, hidden, w, n0, nc, v0, vc, C, act);
            for (int i = 0; i < nc; i++) { /* the tile becomes dz in place */
                double *z = tile + (int64_t)i * vc;
                int32_t y = labels[n0 + i];
                for (int j = 0; j < vc; j++) {
                    if (y == REF_IGNORE_INDEX) {
                        z[j] = 0.0;
                        continue;
                    }
                    double p = exp(z[j] - lse[i]);
                    z[j] = act_round((float)(gw * (p - (v0 + j == y ? 1.0 : 0.0))), act);
                }
            }
            if (blas) {
                for (int64_t k = 0; k < (int64_t)nc * vc; k++) ftile[k] = (float)tile[k];
                if (dhidden != NULL) { /* dacc += dz·W[v0..] through sgemm, widened per chunk */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nc, C, vc, 1.0f, ftile, vc,
                                w + (int64_t)v0 * C, C, 0.0f, ftmp, C);
                    for (int64_t k = 0; k < (int64_t)nc * C; k++) dacc[k] += (double)ftmp[k];
                }
                if (dw != NULL) /* dW[v0..] += dzᵀ·h */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, vc, C, nc, 1.0f, ftile, vc,
                                hidden + (int64_t)n0 * C, C, 1.0f, dw + (int64_t)v0 * C, C);
                continue;
            }
            if (dhidden != NULL) /* dacc[i,:] += Σ_j dz[i,j]·W[v0+j,:], v in increasing order */
                for (int i = 0; i < nc; i++) {
                    double *acc = dacc + (int64_t)i * C;
                    for (int j = 0; j < vc; j++) {
                        double d = tile[(int64_t)i * vc + j];
                        const float *wr = w + (int64_t)(v0 + j) * C;
                        for (int c = 0; c < C; c++) acc[c] += d * (double)wr[c];
                    }
                }
            if (dw != NULL) /* dW[v0+j,:] += Σ_i dz[i,j]·h[n0+i,:], i in increasing order */
                for (int j = 0; j < vc; j++) {
                    float *wr = dw + (int64_t)(v0 + j) * C;
                    for (int c = 0; c < C; c++) {
                        double acc = 0.0;
                        for (int i = 0; i < nc; i++)
                            acc += tile[(int64_t)i * vc + j] * (double)hidden[(int64_t)(n0 + i) * C + c];
                        wr[c] = (float)((double)wr[c] + acc);
                    }
                }
        }
        if (dhidden != NULL)
            for (int i = 0; i < nc; i++)
                for (int c = 0; c < C; c++)
                    dhidden[(int64_t)(n0 + i) * C + c] = act_round((float)dacc[(int64_t)i * C + c], act);
    }
    if (loss != NULL) *loss = sum / (double)n_valid_total;
}

void ref_cross_entropy_fused(double *loss, float *dhidden, float *dw, const float *hidden, const float *w,
                             const int32_t *labels, int N, int C, int V, int64_t n_valid_total, float grad_scale,
                             int n_chunk, int v_chunk, enum act_dtype act, void *workspace) {
    fused_core(loss, dhidden, dw, hidden, w, labels, N, C, V, n_valid_total, grad_scale, n_chunk, v_chunk, act,
               workspace, 0);
}

void ref_cross_entropy_fused_blas(double *loss, float *dhidden, float *dw, const float *hidden, const float *w,
                                  const int32_t *labels, int N, int C, int V, int64_t n_valid_total, float grad_scale,
                                  int n_chunk, int v_chunk, enum act_dtype act, void *workspace) {
    fused_core(loss, dhidden, dw, hidden, w, labels, N, C, V, n_valid_total, grad_scale, n_chunk, v_chunk, act,
               workspace, 1);
}
