/* fuzz_tokenizer.c — libFuzzer target: io/tokenizer's loaders on arbitrary bytes (tokenizer.json
 * or tiktoken rank file, chosen by content), then encode/decode/chat with whatever loaded.
 * Build and run: tools/fuzz.sh SECONDS tokenizer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[512];
    if (path[0] == '\0') {
        const char *t = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/refine_fuzz_tok_%d", t && *t ? t : "/tmp", (int)getpid());
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    if (size > 0 && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    struct io_err e;
    struct tokenizer *t = tokenizer_load(path, &e);
    if (t == NULL) {
        if (e.msg[0] == '\0') abort(); /* every failure says why */
        return 0;
    }
    static const char text[] = "Hello, world! 123 <|eot_id|> \xff\xfe caf\xc3\xa9 \n\n  x";
    struct tok_ids ids = {0};
    tokenizer_encode(t, text, sizeof text - 1, TOKENIZER_ADD_BOS, &ids);
    struct tok_bytes out = {0};
    if (tokenizer_decode(t, ids.ids, ids.n, 0, &out, &e) != 0) abort(); /* its own ids decode */
    struct chat_message m[2] = {{"user", "hi", 2}, {"assistant", "ok", 2}};
    struct chat_tokens c = {0};
    if (tokenizer_apply_chat(t, m, 2, CHAT_ADD_GENERATION_PROMPT, &c, &e) == 0 && c.n == 0) abort();
    chat_tokens_free(&c);
    tok_bytes_free(&out);
    tok_ids_free(&ids);
    tokenizer_free(t);
    return 0;
}
