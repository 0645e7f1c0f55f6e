/* text_stream.h — the text of a generation as it grows, token by token: what can be shown now,
 * and where a stop string ends it.
 *
 * A token may end inside a UTF-8 character (byte-level BPE splits characters across tokens), and
 * a stop string may arrive over several tokens. text_stream_push(id) appends a token and returns
 * the bytes that became final:
 *   1. text = decode(all ids so far) (io/tokenizer.h, special tokens skipped: what HF's
 *      tokenizer.decode(ids, skip_special_tokens=True) gives, without clean_up_tokenization_spaces);
 *   2. if a stop string occurs in text (the earliest occurrence), the text ends just before it:
 *      the rest up to there is returned, stopped is set, and later pushes are refused (CHECK);
 *   3. otherwise the returned bytes run up to the end of text, less what is held back: the
 *      trailing bytes of an unfinished UTF-8 character (a lead byte and fewer continuation bytes
 *      than it announces), and the longest suffix that is a proper prefix of a stop string.
 * text_stream_finish returns what is still held back (the text ended without a stop string).
 * The concatenation of everything returned is therefore the final text: the decoded ids, cut at
 * the first stop string. Decoding all ids at each step costs O(n) per token; fine for the lengths
 * generated here.
 * Errors: an id the tokenizer cannot decode (≥ V) is -1 with a message.
 */
#ifndef REFINE_IO_TEXT_STREAM_H
#define REFINE_IO_TEXT_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "io/error.h"
#include "io/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TEXT_STREAM_MAX_STOPS 16

struct text_stream {
    const struct tokenizer *tok;
    struct tok_ids ids;
    struct tok_bytes text;  /* decode of ids */
    size_t emitted;         /* bytes of text already returned */
    int n_stop;
    const char *stop[TEXT_STREAM_MAX_STOPS]; /* not owned; non-empty */
    int stopped;
};

/* stops: n_stop NUL-terminated strings (≤ TEXT_STREAM_MAX_STOPS, none empty; CHECKed), kept by
 * pointer. */
void text_stream_init(struct text_stream *s, const struct tokenizer *tok, const char *const *stops, int n_stop);
void text_stream_free(struct text_stream *s);

/* Appends id; *out, *out_len: the bytes that became final (pointing into s, valid until the next
 * call). 0, or -1 with e set. */
int text_stream_push(struct text_stream *s, uint32_t id, const char **out, size_t *out_len, struct io_err *e);

/* The held-back bytes at the end of the generation (nothing after a stop). */
void text_stream_finish(struct text_stream *s, const char **out, size_t *out_len);

/* The final text so far (emitted bytes), NUL-terminated only after finish or a stop. */
const char *text_stream_text(const struct text_stream *s, size_t *len);

/* Trailing bytes of s[0..n) that begin a UTF-8 character not yet complete (0..3). */
size_t utf8_incomplete_tail(const char *s, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_TEXT_STREAM_H */
