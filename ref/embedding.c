/* embedding.c — the reference token embedding (embedding.h): a row copy and a scatter-add. */
#include "ref/embedding.h"

#include <string.h>

#include "io/check.h"

static void check_ids(const int32_t *ids, int N, int V) {
    for (int n = 0; n < N; n++)
        CHECK(ids[n] >= 0 && ids[n] < V, "token %d has id %d outside the vocabulary [0, %d)", n, (int)ids[n], V);
}

void ref_embedding_forward(float *out, const int32_t *ids, const float *table, int N, int V, int C) {
    CHECK(N >= 0 && V >= 1 && C >= 1, "N=%d V=%d C=%d", N, V, C);
    check_ids(ids, N, V);
    for (int n = 0; n < N; n++)
        memcpy(out + (int64_t)n * C, table + (int64_t)ids[n] * C, sizeof(float) * (size_t)C);
}

void ref_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N, int V, int C) {
    CHECK(N >= 0 && V >= 1 && C >= 1, "N=%d V=%d C=%d", N, V, C);
    check_ids(ids, N, V);
    /* One fp32 add per token, tokens in increasing n: the order the header promises. */
    for (int n = 0; n < N; n++) {
        float *row = dtable + (int64_t)ids[n] * C;
        const float *g = dout + (int64_t)n * C;
        for (int c = 0; c < C; c++) row[c] += g[c];
    }
}
