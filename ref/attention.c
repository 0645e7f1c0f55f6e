/* attention.c — the reference causal GQA attention (attention.h): a naive form that materializes
 * P, and a flash-style form that walks tiles with an online softmax and recomputes P from lse.
 *
 * Every dot product and every sum runs in double, in ascending index order; fp32 appears only
 * where a value is stored (P in the naive workspace, lse, Δ, the outputs). With ACT_BF16 the
 * values the GPU feeds to its bf16 MMAs (P, dS) and the bf16 outputs are rounded with
 * bf16_round(), nothing else.
 *
 * Loop structure of the flash form (mirrors FlashAttention-2 and gpu/attention.cu):
 *   forward  query tiles × key tiles up to the diagonal; per query row a running max m, sum l and
 *            accumulator acc of D doubles. Rows are independent, so walking the rows of a query
 *            tile one by one gives the same numbers as a whole-tile step; block_k decides where
 *            the running max moves, and with ACT_BF16 the rounded P is relative to that max.
 *   backward Δ pass; dK/dV pass over key tiles of each (b, kv head), walking the query tiles of
 *            every head of the group (head-major, query rows ascending); dQ pass over query
 *            tiles walking key tiles up to the diagonal. Each output row owns a double
 *            accumulator and sums in ascending order, so the backward's result does not depend
 *            on the block sizes at all (a property the unit test checks bit for bit).
 * Double accumulators live on the stack, D ≤ REF_ATTENTION_MAX_D.
 */
#include "ref/attention.h"

#include <math.h>
#include <stdint.h>

#include "io/check.h"
#include "ref/bf16.h"

/* Largest head dimension the stack accumulators hold (Llama uses 64 and 128). */
#define REF_ATTENTION_MAX_D 512

/* act() of attention.h on a double intermediate: identity for ACT_F32, bf16 RNE through fp32
 * (the GPU computes the value in fp32 and then packs it to bf16) for ACT_BF16. */
static inline double act_d(double x, enum act_dtype act) {
    return act == ACT_BF16 ? (double)bf16_round((float)x) : x;
}

/* Rounding of a finished double result into its stored fp32 / bf16 form. */
static inline float act_store(double x, enum act_dtype act) {
    float f = (float)x;
    return act_round(f, act);
}

static void check_dims(int B, int T, int H, int KVH, int D) {
    CHECK(B >= 1 && T >= 1 && H >= 1 && KVH >= 1 && D >= 1, "B=%d T=%d H=%d KVH=%d D=%d must be positive", B, T, H,
          KVH, D);
    CHECK(H % KVH == 0, "H=%d must be a multiple of KVH=%d", H, KVH);
    CHECK(D <= REF_ATTENTION_MAX_D, "D=%d exceeds the reference's limit %d", D, REF_ATTENTION_MAX_D);
}

/* Row t of head h in a (B, T, heads, D) tensor. */
static inline int64_t row_at(int b, int t, int h, int T, int heads, int D) {
    return (((int64_t)b * T + t) * heads + h) * (int64_t)D;
}

/* Index of (b, h, t) in a (B, H, T) tensor (lse, Δ). */
static inline int64_t stat_at(int b, int h, int t, int T, int H) { return ((int64_t)b * H + h) * T + t; }

static inline double dot(const float *a, const float *b, int D) {
    double s = 0.0;
    for (int d = 0; d < D; d++) s += (double)a[d] * (double)b[d];
    return s;
}

/* Δ = Σ_d dout·out, summed in double and stored as fp32 (the GPU's preprocess pass keeps fp32). */
static inline float row_delta(const float *dout, const float *out, int D) { return (float)dot(dout, out, D); }

/* ------------------------------------------------------------------------------------------ */
/* Naive: P materialized.                                                                      */

size_t ref_attention_naive_workspace_size(int B, int T, int H) {
    return (size_t)B * (size_t)H * (size_t)T * (size_t)T * sizeof(float);
}

void ref_attention_naive_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                                 int H, int KVH, int D, float scale, enum act_dtype act, float *workspace) {
    check_dims(B, T, H, KVH, D);
    const int G = H / KVH;
    double acc[REF_ATTENTION_MAX_D];
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const int kvh = h / G;
            float *P = workspace + ((int64_t)b * H + h) * T * (int64_t)T;
            for (int i = 0; i < T; i++) {
                const float *qi = q + row_at(b, i, h, T, H, D);
                float *Pi = P + (int64_t)i * T;
                /* softmax over j ≤ i: max, Σ exp(s − max), lse = max + log Σ, p = exp(s − lse).
                 * The scores are recomputed in each pass rather than stored in fp32. */
                double m = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    double s = (double)scale * dot(qi, k + row_at(b, j, kvh, T, KVH, D), D);
                    if (s > m) m = s;
                }
                double l = 0.0;
                for (int j = 0; j <= i; j++) {
                    double s = (double)scale * dot(qi, k + row_at(b, j, kvh, T, KVH, D), D);
                    l += exp(s - m);
                }
                const double L = m + log(l);
                lse[stat_at(b, h, i, T, H)] = (float)L;
                for (int j = 0; j <= i; j++) {
                    double s = (double)scale * dot(qi, k + row_at(b, j, kvh, T, KVH, D), D);
                    Pi[j] = (float)exp(s - L);
                }
                for (int j = i + 1; j < T; j++) Pi[j] = 0.0f; /* masked: the whole workspace is defined */

                /* out = act(Σ_j act(p)·v): eager attention casts the fp32 softmax to the query dtype
                 * before the P·V matmul. */
                for (int d = 0; d < D; d++) acc[d] = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double p = act_d((double)Pi[j], act);
                    const float *vj = v + row_at(b, j, kvh, T, KVH, D);
                    for (int d = 0; d < D; d++) acc[d] += p * (double)vj[d];
                }
                float *oi = out + row_at(b, i, h, T, H, D);
                for (int d = 0; d < D; d++) oi[d] = act_store(acc[d], act);
            }
        }
    }
}

void ref_attention_naive_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                  const float *v, const float *out, int B, int T, int H, int KVH, int D, float scale,
                                  enum act_dtype act, const float *workspace) {
    check_dims(B, T, H, KVH, D);
    const int G = H / KVH;
    double acc[REF_ATTENTION_MAX_D], acc2[REF_ATTENTION_MAX_D];

    /* dq[i] = scale·Σ_{j≤i} act(ds[i,j])·k[j]. */
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const int kvh = h / G;
            const float *P = workspace + ((int64_t)b * H + h) * T * (int64_t)T;
            for (int i = 0; i < T; i++) {
                const float *gi = dout + row_at(b, i, h, T, H, D);
                const double delta = row_delta(gi, out + row_at(b, i, h, T, H, D), D);
                for (int d = 0; d < D; d++) acc[d] = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double p = (double)P[(int64_t)i * T + j];
                    const double dp = dot(gi, v + row_at(b, j, kvh, T, KVH, D), D);
                    const double ds = act_d(p * (dp - delta), act);
                    const float *kj = k + row_at(b, j, kvh, T, KVH, D);
                    for (int d = 0; d < D; d++) acc[d] += ds * (double)kj[d];
                }
                float *dqi = dq + row_at(b, i, h, T, H, D);
                for (int d = 0; d < D; d++) dqi[d] = act_store((double)scale * acc[d], act);
            }
        }
    }

    /* dk[j] = scale·Σ_{h in group} Σ_{i≥j} act(ds[i,j])·q[i],  dv[j] = Σ_{h in group} Σ_{i≥j} act(p)·dout[i]. */
    for (int b = 0; b < B; b++) {
        for (int kvh = 0; kvh < KVH; kvh++) {
            for (int j = 0; j < T; j++) {
                const float *vj = v + row_at(b, j, kvh, T, KVH, D);
                for (int d = 0; d < D; d++) acc[d] = 0.0, acc2[d] = 0.0;
                for (int g = 0; g < G; g++) {
                    const int h = kvh * G + g;
                    const float *P = workspace + ((int64_t)b * H + h) * T * (int64_t)T;
                    for (int i = j; i < T; i++) {
                        const float *gi = dout + row_at(b, i, h, T, H, D);
                        const float *qi = q + row_at(b, i, h, T, H, D);
                        const double delta = row_delta(gi, out + row_at(b, i, h, T, H, D), D);
                        const double p = (double)P[(int64_t)i * T + j];
                        const double pa = act_d(p, act);
                        const double dp = dot(gi, vj, D);
                        const double ds = act_d(p * (dp - delta), act);
                        for (int d = 0; d < D; d++) {
                            acc[d] += ds * (double)qi[d];
                            acc2[d] += pa * (double)gi[d];
                        }
                    }
                }
                float *dkj = dk + row_at(b, j, kvh, T, KVH, D), *dvj = dv + row_at(b, j, kvh, T, KVH, D);
                for (int d = 0; d < D; d++) {
                    dkj[d] = act_store((double)scale * acc[d], act);
                    dvj[d] = act_store(acc2[d], act);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Flash: tiles, online softmax, P recomputed from lse.                                        */

void ref_attention_flash_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                                 int H, int KVH, int D, float scale, int block_q, int block_k, enum act_dtype act) {
    check_dims(B, T, H, KVH, D);
    CHECK(block_q >= 1 && block_k >= 1, "block_q=%d block_k=%d must be positive", block_q, block_k);
    const int G = H / KVH;
    double acc[REF_ATTENTION_MAX_D];
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const int kvh = h / G;
            for (int q0 = 0; q0 < T; q0 += block_q) {
                const int q1 = q0 + block_q < T ? q0 + block_q : T;
                for (int i = q0; i < q1; i++) {
                    const float *qi = q + row_at(b, i, h, T, H, D);
                    double m = -INFINITY, l = 0.0;
                    for (int d = 0; d < D; d++) acc[d] = 0.0;
                    /* Key tiles up to the diagonal of the query tile; in the tile that straddles
                     * the diagonal, keys j > i are masked (they add nothing and move no max). */
                    for (int k0 = 0; k0 < q1; k0 += block_k) {
                        const int k1 = k0 + block_k < T ? k0 + block_k : T;
                        const int jend = k1 <= i + 1 ? k1 : i + 1; /* visible keys: [k0, jend) */
                        if (jend <= k0) continue;                  /* fully masked for this row */
                        double mt = -INFINITY;
                        for (int j = k0; j < jend; j++) {
                            double s = (double)scale * dot(qi, k + row_at(b, j, kvh, T, KVH, D), D);
                            if (s > mt) mt = s;
                        }
                        const double m_new = mt > m ? mt : m;
                        /* Rescale the running sum and accumulator to the new max (m = −inf on the
                         * first visible tile: nothing to rescale). */
                        const double corr = m == -INFINITY ? 0.0 : exp(m - m_new);
                        l *= corr;
                        for (int d = 0; d < D; d++) acc[d] *= corr;
                        for (int j = k0; j < jend; j++) {
                            const float *kj = k + row_at(b, j, kvh, T, KVH, D);
                            const float *vj = v + row_at(b, j, kvh, T, KVH, D);
                            const double pt = exp((double)scale * dot(qi, kj, D) - m_new);
                            l += pt;                          /* the sum uses the unrounded p̃ */
                            const double pa = act_d(pt, act); /* the P·V operand */
                            for (int d = 0; d < D; d++) acc[d] += pa * (double)vj[d];
                        }
                        m = m_new;
                    }
                    float *oi = out + row_at(b, i, h, T, H, D);
                    for (int d = 0; d < D; d++) oi[d] = act_store(acc[d] / l, act);
                    lse[stat_at(b, h, i, T, H)] = (float)(m + log(l));
                }
            }
        }
    }
}

size_t ref_attention_flash_backward_workspace_size(int B, int T, int H) {
    return (size_t)B * (size_t)H * (size_t)T * sizeof(float);
}

void ref_attention_flash_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                  const float *v, const float *out, const float *lse, int B, int T, int H, int KVH,
                                  int D, float scale, int block_q, int block_k, enum act_dtype act, float *workspace) {
    check_dims(B, T, H, KVH, D);
    CHECK(block_q >= 1 && block_k >= 1, "block_q=%d block_k=%d must be positive", block_q, block_k);
    const int G = H / KVH;
    float *delta = workspace; /* (B, H, T) */
    double acc[REF_ATTENTION_MAX_D], acc2[REF_ATTENTION_MAX_D];

    /* Preprocess: Δ = rowsum(dout ∘ out). */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++)
                delta[stat_at(b, h, i, T, H)] =
                    row_delta(dout + row_at(b, i, h, T, H, D), out + row_at(b, i, h, T, H, D), D);

    /* dK, dV: one key tile of one (b, kv head) at a time, walking the query tiles at or below the
     * diagonal for every query head of the group. */
    for (int b = 0; b < B; b++) {
        for (int kvh = 0; kvh < KVH; kvh++) {
            for (int k0 = 0; k0 < T; k0 += block_k) {
                const int k1 = k0 + block_k < T ? k0 + block_k : T;
                for (int j = k0; j < k1; j++) {
                    const float *kj = k + row_at(b, j, kvh, T, KVH, D);
                    const float *vj = v + row_at(b, j, kvh, T, KVH, D);
                    for (int d = 0; d < D; d++) acc[d] = 0.0, acc2[d] = 0.0;
                    for (int g = 0; g < G; g++) {
                        const int h = kvh * G + g;
                        for (int q0 = 0; q0 < T; q0 += block_q) {
                            const int q1 = q0 + block_q < T ? q0 + block_q : T;
                            if (q1 <= k0) continue; /* tile entirely above the diagonal */
                            for (int i = q0 > j ? q0 : j; i < q1; i++) {
                                const float *qi = q + row_at(b, i, h, T, H, D);
                                const float *gi = dout + row_at(b, i, h, T, H, D);
                                const double s = (double)scale * dot(qi, kj, D);
                                const double p = exp(s - (double)lse[stat_at(b, h, i, T, H)]);
                                const double pa = act_d(p, act);
                                const double dp = dot(gi, vj, D);
                                const double ds = act_d(p * (dp - (double)delta[stat_at(b, h, i, T, H)]), act);
                                for (int d = 0; d < D; d++) {
                                    acc[d] += ds * (double)qi[d];
                                    acc2[d] += pa * (double)gi[d];
                                }
                            }
                        }
                    }
                    float *dkj = dk + row_at(b, j, kvh, T, KVH, D), *dvj = dv + row_at(b, j, kvh, T, KVH, D);
                    for (int d = 0; d < D; d++) {
                        dkj[d] = act_store((double)scale * acc[d], act);
                        dvj[d] = act_store(acc2[d], act);
                    }
                }
            }
        }
    }

    /* dQ: one query tile of one (b, h) at a time, walking the key tiles up to the diagonal. */
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const int kvh = h / G;
            for (int q0 = 0; q0 < T; q0 += block_q) {
                const int q1 = q0 + block_q < T ? q0 + block_q : T;
                for (int i = q0; i < q1; i++) {
                    const float *qi = q + row_at(b, i, h, T, H, D);
                    const float *gi = dout + row_at(b, i, h, T, H, D);
                    const double L = (double)lse[stat_at(b, h, i, T, H)];
                    const double dl = (double)delta[stat_at(b, h, i, T, H)];
                    for (int d = 0; d < D; d++) acc[d] = 0.0;
                    for (int k0 = 0; k0 < q1; k0 += block_k) {
                        const int k1 = k0 + block_k < T ? k0 + block_k : T;
                        const int jend = k1 <= i + 1 ? k1 : i + 1;
                        for (int j = k0; j < jend; j++) {
                            const float *kj = k + row_at(b, j, kvh, T, KVH, D);
                            const double p = exp((double)scale * dot(qi, kj, D) - L);
                            const double dp = dot(gi, v + row_at(b, j, kvh, T, KVH, D), D);
                            const double ds = act_d(p * (dp - dl), act);
                            for (int d = 0; d < D; d++) acc[d] += ds * (double)kj[d];
                        }
                    }
                    float *dqi = dq + row_at(b, i, h, T, H, D);
                    for (int d = 0; d < D; d++) dqi[d] = act_store((double)scale * acc[d], act);
                }
            }
        }
    }
}
