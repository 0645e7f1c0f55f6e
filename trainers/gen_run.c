/* gen_run.c — continuous-batching generation over a backend (gen_run.h). */
#include "trainers/gen_run.h"

#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "io/text_stream.h"

const char *gen_finish_name(enum gen_finish f) {
    return f == GEN_FINISH_EOS ? "eos" : f == GEN_FINISH_STOP ? "stop" : "length";
}

void gen_result_free(struct gen_result *r) {
    free(r->ids);
    free(r->text);
    memset(r, 0, sizeof *r);
}

struct slot {
    int req;       /* -1: free */
    int32_t *seq;  /* prompt + generated (for the repetition penalty) */
    int n_seq;
    int32_t last;  /* the token to feed next */
    struct text_stream ts;
};

static int is_eos(const struct gen_settings *s, int32_t t) {
    for (int i = 0; i < s->n_eos; i++)
        if (s->eos[i] == t) return 1;
    return 0;
}

/* Ends the request of slot k: flushes its text into out. */
static void finish(const struct gen_settings *s, struct slot *sl, struct gen_result *out, enum gen_finish why) {
    struct gen_result *r = &out[sl->req];
    r->finish = why;
    if (s->tok) {
        const char *tail;
        size_t n;
        text_stream_finish(&sl->ts, &tail, &n);
        if (n > 0 && s->on_text) s->on_text(s->ctx, sl->req, tail, n);
        size_t len;
        const char *t = text_stream_text(&sl->ts, &len);
        r->text = malloc(len + 1);
        CHECK(r->text != NULL, "out of memory");
        memcpy(r->text, t, len);
        r->text[len] = '\0';
        r->text_len = len;
        text_stream_free(&sl->ts);
    }
    free(sl->seq);
    sl->seq = NULL;
    sl->req = -1;
}

/* Takes token t for the request of slot sl; returns 1 when the request ended. */
static int take(const struct gen_settings *s, const struct gen_request *rq, struct slot *sl, struct gen_result *out,
                int32_t t, struct io_err *e, int *err) {
    struct gen_result *r = &out[sl->req];
    r->ids[r->n++] = t;
    sl->seq[sl->n_seq++] = t;
    sl->last = t;
    if (is_eos(s, t)) {
        finish(s, sl, out, GEN_FINISH_EOS);
        return 1;
    }
    if (s->tok) {
        const char *piece;
        size_t n;
        if (text_stream_push(&sl->ts, (uint32_t)t, &piece, &n, e) != 0) {
            *err = 1;
            return 1;
        }
        if (n > 0 && s->on_text) s->on_text(s->ctx, sl->req, piece, n);
        if (sl->ts.stopped) {
            finish(s, sl, out, GEN_FINISH_STOP);
            return 1;
        }
    }
    if (r->n >= rq[sl->req].max_new) {
        finish(s, sl, out, GEN_FINISH_LENGTH);
        return 1;
    }
    return 0;
}

int gen_run(const struct gen_backend *b, const struct gen_request *rq, int n, const struct gen_settings *s,
            struct gen_result *out, struct io_err *e) {
    CHECK(s->n_stops == 0 || s->tok != NULL, "stop strings need a tokenizer");
    memset(out, 0, (size_t)n * sizeof *out);
    const int S = b->S, V = b->V;
    struct slot *slots = calloc((size_t)S, sizeof *slots);
    float *logits = malloc((size_t)S * (size_t)V * sizeof(float));
    void *ws = malloc(ref_sample_workspace_size(V));
    int32_t *seqs = malloc((size_t)S * sizeof *seqs), *toks = malloc((size_t)S * sizeof *toks),
            *next = malloc((size_t)S * sizeof *next);
    CHECK(slots && logits && ws && seqs && toks && next, "out of memory");
    for (int k = 0; k < S; k++) slots[k].req = -1;
    const int argmax_ok = b->decode_argmax != NULL && s->sample.mode == SAMPLE_GREEDY &&
                          s->sample.repetition_penalty == 1.0f;
    int rc = 0, err = 0, next_req = 0, active = 0;
    for (;;) {
        /* admit new requests into free slots */
        for (int k = 0; k < S && next_req < n && rc == 0; k++) {
            if (slots[k].req >= 0) continue;
            const int r = next_req++;
            const struct gen_request *q = &rq[r];
            CHECK(q->n_prompt >= 1 && q->max_new >= 0, "request %d: %d prompt tokens, max_new %d", r, q->n_prompt,
                  q->max_new);
            out[r].ids = malloc(((size_t)q->max_new + 1) * sizeof(int32_t));
            CHECK(out[r].ids != NULL, "out of memory");
            if (q->max_new == 0) {
                out[r].text = calloc(1, 1);
                CHECK(out[r].text != NULL, "out of memory");
                k--; /* the slot stays free */
                continue;
            }
            struct slot *sl = &slots[k];
            sl->req = r;
            sl->seq = malloc(((size_t)q->n_prompt + (size_t)q->max_new) * sizeof(int32_t));
            CHECK(sl->seq != NULL, "out of memory");
            memcpy(sl->seq, q->prompt, (size_t)q->n_prompt * sizeof(int32_t));
            sl->n_seq = q->n_prompt;
            if (s->tok) text_stream_init(&sl->ts, s->tok, s->stops, s->n_stops);
            b->reset(b->self, k);
            if ((rc = b->prefill(b->self, k, q->prompt, q->n_prompt, logits, e)) != 0) break;
            const int32_t t = ref_sample_next(logits, V, sl->seq, sl->n_seq, &s->sample, (uint64_t)r, 0, ws);
            active++;
            if (take(s, rq, sl, out, t, e, &err)) active--;
            if (err) rc = -1;
        }
        if (rc != 0 || active == 0) {
            if (rc != 0 || next_req >= n) break;
            continue;
        }
        int m = 0;
        for (int k = 0; k < S; k++)
            if (slots[k].req >= 0) seqs[m] = k, toks[m] = slots[k].last, m++;
        if (argmax_ok) {
            if ((rc = b->decode_argmax(b->self, seqs, toks, m, next, e)) != 0) break;
        } else {
            if ((rc = b->decode(b->self, seqs, toks, m, logits, e)) != 0) break;
            for (int i = 0; i < m; i++) {
                struct slot *sl = &slots[seqs[i]];
                next[i] = ref_sample_next(logits + (size_t)i * V, V, sl->seq, sl->n_seq, &s->sample,
                                          (uint64_t)sl->req, (uint64_t)out[sl->req].n, ws);
            }
        }
        for (int i = 0; i < m && rc == 0; i++) {
            if (take(s, rq, &slots[seqs[i]], out, next[i], e, &err)) active--;
            if (err) rc = -1;
        }
    }
    for (int k = 0; k < S; k++) {
        if (slots[k].req < 0) continue;
        if (s->tok) text_stream_free(&slots[k].ts);
        free(slots[k].seq);
    }
    free(slots), free(logits), free(ws), free(seqs), free(toks), free(next);
    if (rc != 0)
        for (int r = 0; r < n; r++) gen_result_free(&out[r]);
    return rc;
}
