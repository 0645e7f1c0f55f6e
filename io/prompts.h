/* prompts.h — a file of prompts (JSONL) as token ids: the requests of //ref:generate and
 * //gpu:generate --prompts, and the samples of the trainers' --sample-prompts.
 *
 * One JSON object a line (blank lines skipped):
 *   {"prompt": "text"}                       the text's tokens, with BOS when the tokenizer adds
 *                                            one (as HF's tokenizer(text) does);
 *   {"messages": [{"role", "content"}, ...]} the tokenizer's chat template with the generation
 *                                            prompt (tokenizer_apply_chat).
 * Bad input (-1, one message naming the file and the line): not an object, neither key, a message
 * without a role or content, a conversation for a tokenizer without a chat template, an empty
 * prompt, no request at all.
 */
#ifndef REFINE_IO_PROMPTS_H
#define REFINE_IO_PROMPTS_H

#include <stdint.h>

#include "io/error.h"
#include "io/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct prompt {
    int32_t *ids;
    int n;
    char *text; /* for display: the prompt text, or the last message's content */
};

struct prompt_list {
    struct prompt *p;
    int n;
    int longest; /* tokens of the longest prompt */
};

/* The tokens of a raw text prompt (BOS as above) into *ids (malloc), *n ≥ 1; -1 when empty. */
int prompt_encode_text(struct tokenizer *tok, const char *text, int32_t **ids, int *n, struct io_err *e);
/* The chat template of messages with the generation prompt into *ids (malloc). */
int prompt_encode_chat(struct tokenizer *tok, const struct chat_message *m, int n_m, int32_t **ids, int *n,
                       struct io_err *e);

int prompts_read(struct prompt_list *l, const char *path, struct tokenizer *tok, struct io_err *e);
void prompts_free(struct prompt_list *l);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_PROMPTS_H */
