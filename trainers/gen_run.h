/* gen_run.h — generation over a backend (gen_backend.h): prompts in, completions out, with
 * continuous batching, the sampling rules of ref/sample.h, stop rules and streaming text.
 *
 * gen_run(b, requests): up to b->S requests are in flight at a time, each in its own cache slot;
 * a finished request frees its slot for the next one (in request order). A request is prefilled
 * alone (its prompt's logits), then decoded together with every other request in flight, one
 * token per step. Each next token: ref_sample_next on its logits row with the request's tokens so
 * far (prompt + generated) for the repetition penalty, stream = the request's index, step = the
 * index of the token being chosen — so a request's tokens do not depend on batching or on the
 * other requests. Greedy decoding without a repetition penalty uses the backend's decode_argmax
 * when it has one (the same choice: the first index of the maximum).
 * A request ends (finish reason) when:
 *   GEN_FINISH_EOS     the token is one of the end ids (kept as the last id; not part of the text,
 *                      as a special token);
 *   GEN_FINISH_STOP    its text (io/text_stream.h) contains a stop string (the text ends before it;
 *                      the ids keep the token that completed it);
 *   GEN_FINISH_LENGTH  max_new tokens were generated.
 * Streaming: settings->on_text(ctx, request, bytes, n) receives each piece of final text as it
 * becomes final (UTF-8 characters never split), then the remainder at the end.
 * Errors (-1 with e): a backend failure, an undecodable id.
 */
#ifndef REFINE_TRAINERS_GEN_RUN_H
#define REFINE_TRAINERS_GEN_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "io/error.h"
#include "io/tokenizer.h"
#include "ref/sample.h"
#include "trainers/gen_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gen_request {
    const int32_t *prompt;
    int n_prompt; /* ≥ 1 */
    int max_new;  /* ≥ 0 */
};

enum gen_finish { GEN_FINISH_LENGTH = 0, GEN_FINISH_EOS = 1, GEN_FINISH_STOP = 2 };

struct gen_result {
    int32_t *ids; /* generated ids (malloc) */
    int n;
    char *text;   /* the text (malloc, NUL-terminated); NULL without a tokenizer */
    size_t text_len;
    enum gen_finish finish;
};

#define GEN_MAX_EOS 8

struct gen_settings {
    struct sample_params sample;
    int32_t eos[GEN_MAX_EOS];
    int n_eos;
    const char *const *stops; /* stop strings (need a tokenizer) */
    int n_stops;
    const struct tokenizer *tok; /* NULL: ids only */
    void (*on_text)(void *ctx, int request, const char *bytes, size_t n);
    void *ctx;
};

const char *gen_finish_name(enum gen_finish f); /* "length", "eos", "stop" */

int gen_run(const struct gen_backend *b, const struct gen_request *rq, int n, const struct gen_settings *s,
            struct gen_result *out, struct io_err *e);
void gen_result_free(struct gen_result *r);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_GEN_RUN_H */
