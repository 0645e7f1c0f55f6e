/* decode_attention.c — attention of query rows against a KV cache (decode_attention.h): per
 * (row, head), the scores in double, the softmax with the row maximum subtracted, the weighted sum
 * of the values in double, one rounding at the store. */
#include "ref/decode_attention.h"

#include <math.h>

#include "io/check.h"
#include "ref/bf16.h"

#define REF_DECODE_MAX_D 512

void ref_decode_attention_forward(float *out, const float *q, const float *k_cache, const float *v_cache,
                                  const int32_t *seq, const int32_t *pos, int N, int H, int KVH, int D, int S,
                                  int T_max, float scale, enum act_dtype act, double *workspace) {
    CHECK(N >= 0 && H >= 1 && KVH >= 1 && H % KVH == 0 && D >= 1 && D <= REF_DECODE_MAX_D && S >= 1 && T_max >= 1,
          "N=%d H=%d KVH=%d D=%d S=%d T_max=%d", N, H, KVH, D, S, T_max);
    const int G = H / KVH;
    double *s = workspace;
    double acc[REF_DECODE_MAX_D];
    for (int n = 0; n < N; n++) {
        CHECK(seq[n] >= 0 && seq[n] < S && pos[n] >= 0 && pos[n] < T_max, "row %d: seq %d pos %d (S=%d T_max=%d)", n,
              seq[n], pos[n], S, T_max);
        const int64_t base = (int64_t)seq[n] * T_max;
        for (int h = 0; h < H; h++) {
            const int g = h / G;
            const float *qr = q + ((int64_t)n * H + h) * D;
            double m = -INFINITY;
            for (int j = 0; j <= pos[n]; j++) {
                const float *kr = k_cache + ((base + j) * KVH + g) * (int64_t)D;
                double dot = 0.0;
                for (int d = 0; d < D; d++) dot += (double)qr[d] * (double)kr[d];
                s[j] = (double)scale * dot;
                if (s[j] > m) m = s[j];
            }
            double l = 0.0;
            for (int j = 0; j <= pos[n]; j++) {
                s[j] = exp(s[j] - m);
                l += s[j];
            }
            for (int d = 0; d < D; d++) acc[d] = 0.0;
            for (int j = 0; j <= pos[n]; j++) {
                const float *vr = v_cache + ((base + j) * KVH + g) * (int64_t)D;
                const double p = s[j] / l;
                for (int d = 0; d < D; d++) acc[d] += p * (double)vr[d];
            }
            float *o = out + ((int64_t)n * H + h) * D;
            for (int d = 0; d < D; d++) {
                const float f = (float)acc[d];
                o[d] = act == ACT_BF16 ? bf16_round(f) : f;
            }
        }
    }
}
