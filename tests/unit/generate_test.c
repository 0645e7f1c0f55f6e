/* generate_test.c — generation on the CPU reference against mathematics and against itself:
 * decode attention equals the rows of the causal attention; the KV-cache model equals
 * ref_llama_forward's logits, position by position (prefill in chunks, then decode steps);
 * sequences decoded together equal sequences decoded alone (bit for bit); sampling draws are
 * seeded and independent of batching; top-k 1 is greedy; the text stream never splits a UTF-8
 * character and cuts at stop strings that arrive over several tokens; the driver ends at stop
 * strings and end ids.
 * (Agreement with transformers: tests/golden/generate_golden_test.c.)
 *
 *   bazel test //tests/unit:generate_test        (replay: --test_arg=--seed=N)
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/model_source.h"
#include "io/text_stream.h"
#include "io/tokenizer.h"
#include "ref/attention.h"
#include "ref/decode_attention.h"
#include "ref/generate.h"
#include "ref/llama.h"
#include "ref/sample.h"
#include "tests/common/compare.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "trainers/gen_ref.h"
#include "trainers/gen_run.h"

#define TINY "tests/golden/data/e2e/llama"
#define BYTES_TOK "tests/unit/testdata/bytes_tokenizer.json"

static uint64_t g_seed;

/* decode attention of every row against a cache holding the whole sequence = naive causal. */
static void decode_attention_rows(void) {
    const int T = 13, H = 4, KVH = 2, D = 16, S = 2, T_max = 16;
    struct rng r;
    rng_init(&r, g_seed);
    const size_t qn = (size_t)T * H * D, kn = (size_t)T * KVH * D;
    float *q = malloc(qn * 4), *k = malloc(kn * 4), *v = malloc(kn * 4), *out = malloc(qn * 4), *ref = malloc(qn * 4),
          *lse = malloc((size_t)H * T * 4), *ws = malloc(ref_attention_naive_workspace_size(1, T, H));
    float *kc = calloc((size_t)S * T_max * KVH * D, 4), *vc = calloc((size_t)S * T_max * KVH * D, 4);
    rng_fill_normal(&r, q, (int64_t)qn, 0, 1);
    rng_fill_normal(&r, k, (int64_t)kn, 0, 1);
    rng_fill_normal(&r, v, (int64_t)kn, 0, 1);
    /* the sequence in slot 1; slot 0 holds other values that must not be read */
    rng_fill_normal(&r, kc, (int64_t)T_max * KVH * D, 0, 100);
    memcpy(kc + (size_t)T_max * KVH * D, k, kn * 4);
    memcpy(vc + (size_t)T_max * KVH * D, v, kn * 4);
    int32_t seq[13], pos[13];
    for (int t = 0; t < T; t++) seq[t] = 1, pos[t] = t;
    double dws[16];
    for (size_t i = 0; i < qn; i++) out[i] = NAN;
    ref_decode_attention_forward(out, q, kc, vc, seq, pos, T, H, KVH, D, S, T_max, 0.25f, ACT_F32, dws);
    ref_attention_naive_forward(ref, lse, q, k, v, 1, T, H, KVH, D, 0.25f, ACT_F32, (float *)ws);
    struct cmp_case cc = {"decode_attention", "out", "T=13 H=4 KVH=2 D=16", "f32", g_seed};
    cmp_elementwise(&cc, out, ref, (int64_t)qn, FLT_EPSILON, 4.0, cmp_rms(ref, (int64_t)qn), NULL);
    free(q), free(k), free(v), free(out), free(ref), free(lse), free(ws), free(kc), free(vc);
}

/* The KV-cache model on the tiny golden Llama: logits of every position equal ref_llama_forward's. */
static void cache_equals_forward(void) {
    struct model_source src;
    struct io_err e = {{0}};
    if (model_source_open(&src, TINY, &e) != 0) {
        test_fail("%s", e.msg);
        return;
    }
    const struct model_config *c = &src.config;
    struct llama_weights w;
    EXPECT(ref_gen_load_weights(&w, &src, NULL, &e) == 0, "%s", e.msg);
    const int T = 20, V = c->V, P = 7;
    struct rng r;
    rng_init(&r, g_seed + 1);
    int32_t ids[20], tg[20];
    for (int t = 0; t < T; t++) ids[t] = (int32_t)rng_int(&r, V), tg[t] = -100;
    tg[0] = 0;
    struct llama_options o;
    ref_llama_options_default(&o);
    struct llama_model m;
    ref_llama_init(&m, c, &o, 1, T, T);
    float *slab = malloc(ref_llama_slab_floats(&m) * 4), *want = malloc((size_t)T * V * 4),
          *got = malloc((size_t)T * V * 4);
    struct llama_batch b = {1, T, ids, tg, NULL, 1};
    ref_llama_forward(&m, &w, NULL, &b, slab, want);
    struct ref_gen g;
    ref_gen_init(&g, c, &w, 2, T, 3, ACT_F32, 0); /* N_max 3: the prefill runs in chunks */
    for (size_t i = 0; i < (size_t)T * V; i++) got[i] = NAN;
    EXPECT(ref_gen_prefill(&g, 1, ids, P, got + (size_t)(P - 1) * V, &e) == 0, "%s", e.msg);
    const int32_t one = 1;
    for (int t = P; t < T; t++) EXPECT(ref_gen_decode(&g, &one, &ids[t], 1, got + (size_t)t * V, &e) == 0, "%s", e.msg);
    struct cmp_case cc = {"ref_gen", "logits", "tiny llama T=20", "f32", g_seed};
    /* rows P−1 .. T−1 were produced; the flash (training) and the decode attention sum in other
     * orders: a few fp32 roundings through 2 layers */
    const int64_t n = (int64_t)(T - P + 1) * V;
    cmp_elementwise(&cc, got + (size_t)(P - 1) * V, want + (size_t)(P - 1) * V, n, FLT_EPSILON, 64.0,
                    cmp_rms(want + (size_t)(P - 1) * V, n), NULL);
    /* a full sequence is refused with a message */
    EXPECT(ref_gen_decode(&g, &one, &ids[0], 1, got, &e) == -1 && strstr(e.msg, "more than"), "full cache: '%s'", e.msg);

    /* two sequences decoded together = each alone, bit for bit (naive linears: row-independent) */
    struct ref_gen g2;
    ref_gen_init(&g2, c, &w, 2, T, 4, ACT_F32, 0);
    float *l0 = malloc((size_t)V * 4), *l1 = malloc((size_t)V * 4), *pair = malloc((size_t)2 * V * 4);
    EXPECT(ref_gen_prefill(&g2, 0, ids, 5, l0, &e) == 0 && ref_gen_prefill(&g2, 1, ids + 5, 3, l1, &e) == 0, "%s",
           e.msg);
    const int32_t seqs[2] = {0, 1}, toks[2] = {ids[10], ids[11]};
    EXPECT(ref_gen_decode(&g2, seqs, toks, 2, pair, &e) == 0, "%s", e.msg);
    ref_gen_reset(&g2, 0), ref_gen_reset(&g2, 1);
    EXPECT(ref_gen_prefill(&g2, 1, ids, 5, l0, &e) == 0 && ref_gen_decode(&g2, &seqs[1], &toks[0], 1, l0, &e) == 0,
           "%s", e.msg);
    EXPECT(ref_gen_prefill(&g2, 0, ids + 5, 3, l1, &e) == 0 && ref_gen_decode(&g2, &seqs[0], &toks[1], 1, l1, &e) == 0,
           "%s", e.msg);
    EXPECT(memcmp(pair, l0, (size_t)V * 4) == 0 && memcmp(pair + V, l1, (size_t)V * 4) == 0,
           "batched decode differs from decoding each sequence alone");
    free(l0), free(l1), free(pair);
    ref_gen_free(&g2);
    ref_gen_free(&g);
    ref_llama_free(&m);
    free(slab), free(want), free(got);
    ref_llama_weights_free(&w, c);
    model_source_close(&src);
}

static void sampling(void) {
    EXPECT(ref_sample_uniform(1, 2, 3) == ref_sample_uniform(1, 2, 3), "the uniform is a function of its key");
    EXPECT(ref_sample_uniform(1, 2, 3) != ref_sample_uniform(1, 2, 4) &&
               ref_sample_uniform(1, 2, 3) != ref_sample_uniform(1, 3, 3) &&
               ref_sample_uniform(1, 2, 3) != ref_sample_uniform(2, 2, 3),
           "the uniform depends on seed, stream and step");
    /* the draw follows the distribution: counts of 20000 draws within 5 sigma */
    float z[4] = {0.0f, logf(2.0f), logf(3.0f), -INFINITY};
    int count[4] = {0};
    for (int i = 0; i < 20000; i++) count[ref_sample_draw(z, 4, ref_sample_uniform(g_seed, 0, (uint64_t)i))]++;
    const double p[4] = {1 / 6.0, 2 / 6.0, 3 / 6.0, 0};
    for (int v = 0; v < 4; v++) {
        const double mean = 20000 * p[v], sd = sqrt(20000 * p[v] * (1 - p[v]));
        EXPECT(fabs(count[v] - mean) <= 5 * sd, "token %d drawn %d times, expected %.0f ± %.0f", v, count[v], mean, sd);
    }
    /* top-k 1 = greedy, whatever the temperature */
    struct rng r;
    rng_init(&r, g_seed + 2);
    float row[50], copy[50];
    rng_fill_normal(&r, row, 50, 0, 2);
    void *ws = malloc(ref_sample_workspace_size(50));
    struct sample_params sp;
    ref_sample_params_default(&sp);
    const int32_t greedy = ref_sample_argmax(row, 50);
    sp.mode = SAMPLE_MULTINOMIAL, sp.top_k = 1, sp.temperature = 3.0f;
    for (int i = 0; i < 20; i++) {
        memcpy(copy, row, sizeof row);
        EXPECT(ref_sample_next(copy, 50, NULL, 0, &sp, 0, (uint64_t)i, ws) == greedy, "top-k 1 is not greedy");
    }
    /* argmax: the first index on ties */
    float tie[5] = {1, 3, 2, 3, 0};
    EXPECT(ref_sample_argmax(tie, 5) == 1, "argmax on a tie: %d, expected 1", ref_sample_argmax(tie, 5));
    free(ws);
}

static void push_all(struct text_stream *s, const char *bytes, size_t n, char *out, size_t *out_n,
                     size_t *pieces_with_partial) {
    for (size_t i = 0; i < n; i++) {
        const char *piece;
        size_t k;
        struct io_err e;
        EXPECT(text_stream_push(s, (uint8_t)bytes[i], &piece, &k, &e) == 0, "push: %s", e.msg);
        if (k && utf8_incomplete_tail(piece, k)) (*pieces_with_partial)++;
        memcpy(out + *out_n, piece, k);
        *out_n += k;
        if (s->stopped) return;
    }
}

/* The byte tokenizer: token id = byte (ByteLevel), so a multi-byte character spans tokens. */
static void text_streams(void) {
    struct io_err e;
    struct tokenizer *tok = tokenizer_load(BYTES_TOK, &e);
    if (!tok) {
        test_fail("%s", e.msg);
        return;
    }
    const char text[] = "caf\xc3\xa9 \xe2\x82\xac" "5 \xf0\x9f\x99\x82 STOP here";
    char out[128];
    size_t n = 0, partial = 0;
    struct text_stream s;
    text_stream_init(&s, tok, NULL, 0);
    push_all(&s, text, sizeof text - 1, out, &n, &partial);
    const char *tail;
    size_t k;
    text_stream_finish(&s, &tail, &k);
    memcpy(out + n, tail, k), n += k;
    EXPECT(n == sizeof text - 1 && memcmp(out, text, n) == 0, "streamed text differs from the decoded text");
    EXPECT(partial == 0, "%zu pieces ended inside a UTF-8 character", partial);
    text_stream_free(&s);
    /* a stop string arriving over several tokens; a prefix of another stop is held, then released */
    const char *stops[2] = {"STOP", "\xe2\x82\xac" "6"};
    n = 0, partial = 0;
    text_stream_init(&s, tok, stops, 2);
    push_all(&s, text, sizeof text - 1, out, &n, &partial);
    EXPECT(s.stopped, "the stop string was not found");
    size_t len;
    const char *final = text_stream_text(&s, &len);
    const size_t want = (size_t)(strstr(text, "STOP") - text);
    EXPECT(n == want && len == want && memcmp(final, text, want) == 0 && memcmp(out, text, want) == 0,
           "stop: %zu bytes out, %zu final, expected %zu", n, len, want);
    text_stream_free(&s);
    tokenizer_free(tok);
}

/* The driver on the tiny model with the byte tokenizer: stop strings, end ids, seeded sampling
 * reproducible and independent of the batch. */
static void driver(void) {
    struct model_source src;
    struct io_err e = {{0}};
    if (model_source_open(&src, TINY, &e) != 0) {
        test_fail("%s", e.msg);
        return;
    }
    struct tokenizer *tok = tokenizer_load(BYTES_TOK, &e);
    struct llama_weights w;
    EXPECT(tok && ref_gen_load_weights(&w, &src, NULL, &e) == 0, "%s", e.msg);
    struct gen_backend b1, b3;
    EXPECT(gen_ref_create(&b1, &src.config, &w, 1, 64, GEN_PRECISION_FP32, 0, &e) == 0, "%s", e.msg);
    EXPECT(gen_ref_create(&b3, &src.config, &w, 3, 64, GEN_PRECISION_FP32, 0, &e) == 0, "%s", e.msg);
    const int32_t prompts[3][4] = {{72, 101, 108, 108}, {87, 111, 114, 108}, {65, 66, 67, 68}};
    struct gen_request rq[3];
    for (int i = 0; i < 3; i++) rq[i] = (struct gen_request){prompts[i], 4, 24};
    struct gen_settings s;
    memset(&s, 0, sizeof s);
    ref_sample_params_default(&s.sample);
    s.tok = tok;
    struct gen_result g[3], a[3], c[3];
    /* greedy: the text without a stop, then a stop string taken from inside it */
    EXPECT(gen_run(&b1, rq, 1, &s, g, &e) == 0, "%s", e.msg);
    EXPECT(g[0].n == 24 && g[0].finish == GEN_FINISH_LENGTH, "greedy: %d tokens, finish %s", g[0].n,
           gen_finish_name(g[0].finish));
    if (g[0].text_len >= 12) {
        char stop[4] = {g[0].text[9], g[0].text[10], g[0].text[11], 0};
        const char *stops[1] = {stop};
        s.stops = stops, s.n_stops = 1;
        struct gen_result st;
        EXPECT(gen_run(&b1, rq, 1, &s, &st, &e) == 0, "%s", e.msg);
        const char *at = strstr(g[0].text, stop);
        EXPECT(st.finish == GEN_FINISH_STOP && at && st.text_len == (size_t)(at - g[0].text) &&
                   memcmp(st.text, g[0].text, st.text_len) == 0,
               "stop string: finish %s, %zu bytes", gen_finish_name(st.finish), st.text_len);
        gen_result_free(&st);
        s.stops = NULL, s.n_stops = 0;
        /* an end id: the 5th greedy token ends the completion there */
        s.eos[0] = g[0].ids[4], s.n_eos = 1;
        EXPECT(gen_run(&b1, rq, 1, &s, &st, &e) == 0, "%s", e.msg);
        int first = 0;
        while (g[0].ids[first] != s.eos[0]) first++;
        EXPECT(st.finish == GEN_FINISH_EOS && st.n == first + 1, "end id: finish %s after %d tokens (expected %d)",
               gen_finish_name(st.finish), st.n, first + 1);
        gen_result_free(&st);
        s.n_eos = 0;
    }
    gen_result_free(&g[0]);
    /* sampling: the same seed twice, and in a batch of 3, gives the same tokens */
    s.sample.mode = SAMPLE_MULTINOMIAL, s.sample.temperature = 1.5f, s.sample.top_p = 0.95f,
    s.sample.repetition_penalty = 1.1f, s.sample.seed = g_seed;
    EXPECT(gen_run(&b1, rq, 3, &s, a, &e) == 0, "%s", e.msg);
    EXPECT(gen_run(&b3, rq, 3, &s, c, &e) == 0, "%s", e.msg);
    for (int i = 0; i < 3; i++) {
        EXPECT(a[i].n == c[i].n && memcmp(a[i].ids, c[i].ids, (size_t)a[i].n * 4) == 0,
               "request %d: sampled tokens depend on the batch", i);
        gen_result_free(&c[i]);
    }
    EXPECT(gen_run(&b3, rq, 3, &s, c, &e) == 0, "%s", e.msg);
    for (int i = 0; i < 3; i++) {
        EXPECT(a[i].n == c[i].n && memcmp(a[i].ids, c[i].ids, (size_t)a[i].n * 4) == 0,
               "request %d: a second run with the same seed differs", i);
        gen_result_free(&c[i]);
    }
    s.sample.seed = g_seed + 1;
    EXPECT(gen_run(&b3, rq, 3, &s, c, &e) == 0, "%s", e.msg);
    int differ = 0;
    for (int i = 0; i < 3; i++) {
        differ += c[i].n != a[i].n || memcmp(a[i].ids, c[i].ids, (size_t)a[i].n * 4) != 0;
        gen_result_free(&c[i]);
        gen_result_free(&a[i]);
    }
    EXPECT(differ > 0, "another seed gives the same samples");
    b1.destroy(b1.self);
    b3.destroy(b3.self);
    ref_llama_weights_free(&w, &src.config);
    tokenizer_free(tok);
    model_source_close(&src);
}

int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20261201);
    decode_attention_rows();
    cache_equals_forward();
    sampling();
    text_streams();
    driver();
    return test_finish("generate_test");
}
