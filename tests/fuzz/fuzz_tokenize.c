/* fuzz_tokenize.c — libFuzzer target: encode arbitrary bytes with a byte-level BPE tokenizer
 * (Llama 3 pre-tokenizer regex, a few merges and special tokens, built in memory through
 * tokenizer_from_gguf_kv) and require decode(encode(x)) == x, with and without matching special
 * tokens; then the same bytes as chat content. Build and run: tools/fuzz.sh SECONDS tokenize. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tokenizer *make(void) {
    static char tok[262][32];
    static const char *tokens[262];
    static int32_t types[262];
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        tok[b][tok_bytelevel_encode(tok[b], &c, 1)] = 0;
        types[b] = TOKEN_TYPE_BYTE;
    }
    const char *extra[6] = {"Ġt", "he", "Ġthe", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    for (int i = 0; i < 6; i++) {
        strcpy(tok[256 + i], extra[i]);
        types[256 + i] = i < 3 ? TOKEN_TYPE_NORMAL : TOKEN_TYPE_CONTROL;
    }
    for (int i = 0; i < 262; i++) tokens[i] = tok[i];
    static const char *merges[3] = {"Ġ t", "h e", "Ġt he"};
    struct tokenizer_gguf_kv kv = {.source = "fuzz", .model = "gpt2", .pre = "llama-bpe", .n_tokens = 262,
                                   .tokens = tokens, .token_type = types, .n_merges = 3, .merges = merges,
                                   .bos_id = -1, .eos_id = 261, .add_bos = 0,
                                   .chat_template = "<|start_header_id|>"};
    struct io_err e;
    struct tokenizer *t = tokenizer_from_gguf_kv(&kv, &e);
    if (t == NULL) abort();
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct tokenizer *t;
    if (t == NULL) t = make();
    const char *s = (const char *)data;
    struct tok_ids ids = {0};
    struct tok_bytes out = {0};
    struct io_err e;
    for (int flags = 0; flags < 2; flags++) {
        ids.n = 0;
        tokenizer_encode(t, s, size, flags ? TOKENIZER_SPLIT_SPECIAL : 0, &ids);
        if (tokenizer_decode(t, ids.ids, ids.n, 0, &out, &e) != 0) abort();
        if (out.n != size || (size && memcmp(out.data, s, size) != 0)) abort();
    }
    struct chat_message m[2] = {{"user", s, size}, {"assistant", s, size}};
    struct chat_tokens c = {0};
    if (tokenizer_apply_chat(t, m, 2, 0, &c, &e) != 0) abort();
    for (size_t i = 0; i < c.n; i++)
        if (c.mask[i] > 1) abort();
    chat_tokens_free(&c);
    tok_ids_free(&ids);
    tok_bytes_free(&out);
    return 0;
}
