/* tokenizer.h — byte-level BPE tokenizers: HF tokenizer.json, tiktoken rank files (Meta's Llama 3
 * tokenizer.model) and the tokenizer embedded in GGUF metadata; encode, decode, special tokens,
 * and the chat templates refine trains with (Llama 3, ChatML as used by SmolLM2).
 *
 * What encode computes (mirrors HF `tokenizers` Tokenizer.encode(text, add_special_tokens) for
 * the tokenizer.json subset below, and tiktoken Encoding.encode(text, allowed_special="all")):
 *   1. Added/special tokens are matched in the raw text first (leftmost, longest at a position);
 *      the text between them is tokenized by steps 2–4, the matched tokens map to their ids.
 *      With TOKENIZER_SPLIT_SPECIAL they are not matched: "<|eot_id|>" in user data is plain text.
 *   2. Pre-tokenization splits each text segment into words: the Split regex (PCRE2, UTF and
 *      UCP mode, \s widened to Unicode White_Space; bytes that are not valid UTF-8 are never
 *      matched, so each run of them becomes a word of its own — the references accept only
 *      valid UTF-8, this keeps any input encodable and decodable), the
 *      ByteLevel pre-tokenizer's GPT-2 regex when its use_regex is true, and Digits
 *      (individual_digits). behavior "Isolated" only (what every Llama-family tokenizer uses).
 *   3. ByteLevel mapping: every byte of a word becomes one printable code point (GPT-2's
 *      bytes_to_unicode table); tiktoken works on the raw bytes, which is the same thing.
 *   4. BPE on each word: if ignore_merges and the whole word is in the vocabulary, it is one
 *      token; else start from single bytes and repeatedly apply the merge of lowest rank among
 *      adjacent pairs (leftmost first on ties), until no pair has a merge. Merges come from the
 *      "merges" list (either ["a","b"] pairs or legacy "a b" strings), or for tiktoken from the
 *      ranks themselves (the pair (a,b) has rank rank(a‖b) when a‖b is in the table).
 *      A byte with no single-byte token in the vocabulary (SmolLM2 lacks 21, e.g. 0x04) is
 *      dropped, as HF's BPE does when unk_token is null; tokenizer_encode_exact and CHAT_EXACT
 *      report it instead (training data must not lose text silently).
 *   5. TOKENIZER_ADD_BOS prepends the BOS id (the TemplateProcessing post-processor's
 *      "single" template with a leading special token, or tokenizer_config / GGUF add_bos).
 * Decode is the inverse mapping: ids → vocabulary strings → bytes (ByteLevel decoder); added
 * tokens decode to their content. decode(encode(x)) == x for every byte string x (invalid UTF-8
 * included) when encode did not add BOS and the vocabulary has all 256 bytes. Decoding is per
 * byte: a token may end inside a UTF-8 sequence, so decoding a prefix of ids can yield an
 * incomplete character.
 *
 * Supported tokenizer.json: model.type "BPE" with byte_fallback false, no dropout, no
 * continuing_subword_prefix / end_of_word_suffix (empty strings are accepted); normalizer null;
 * pre_tokenizer Split / ByteLevel / Digits or a Sequence of them; post_processor ByteLevel,
 * TemplateProcessing or a Sequence of them; decoder ByteLevel. Anything else is rejected with a
 * message naming the file and the unsupported field (never silently mis-tokenized).
 *
 * Errors follow io/error.h: functions that read user input return NULL / -1 with one sentence in
 * *e. Ids passed to decode are checked (an id ≥ vocab size is an error, not a crash).
 *
 * Threads: encode uses a per-tokenizer word cache and is not safe to call on the same tokenizer
 * from several threads at once; load one tokenizer per thread (or serialize). Everything else is
 * read-only after load.
 */
#ifndef REFINE_IO_TOKENIZER_H
#define REFINE_IO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "io/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tokenizer;

/* ---- loading ----------------------------------------------------------------------------- */

/* Loads <path>: an HF tokenizer.json (or a directory holding one; a tokenizer_config.json next to
 * it supplies bos/eos tokens, add_bos_token and chat_template when present), or a tiktoken rank
 * file ("<base64 token> <rank>" per line: Meta's Llama 3 tokenizer.model), recognized by content.
 * A tiktoken file of 128,000 ranks gets Llama 3's pattern and its 256 special tokens
 * (<|begin_of_text|> = 128000, <|end_of_text|>, <|reserved_special_token_N|>,
 * <|start_header_id|>, <|end_header_id|>, <|eot_id|> = 128009, ...), BOS 128000, EOS 128001,
 * chat template Llama 3 — exactly as Meta's llama3 tokenizer.py defines them. Returns NULL with
 * *e set on any error. */
struct tokenizer *tokenizer_load(const char *path, struct io_err *e);

/* Token types of GGUF's tokenizer.ggml.token_type (llama.cpp's llama_token_type). */
enum tokenizer_token_type {
    TOKEN_TYPE_UNDEFINED = 0,
    TOKEN_TYPE_NORMAL = 1,
    TOKEN_TYPE_UNKNOWN = 2,
    TOKEN_TYPE_CONTROL = 3,      /* special: matched before pre-tokenization, skippable on decode */
    TOKEN_TYPE_USER_DEFINED = 4, /* added token: matched before pre-tokenization */
    TOKEN_TYPE_UNUSED = 5,
    TOKEN_TYPE_BYTE = 6,
};

/* The tokenizer part of GGUF metadata as plain arrays (no dependency on the GGUF reader's
 * types). Strings are byte ranges (GGUF strings are not NUL-terminated); lens may be NULL when
 * every string is NUL-terminated. Only model "gpt2" (byte-level BPE) is supported. */
struct tokenizer_gguf_kv {
    const char *source;         /* file name used in error messages */
    const char *model;          /* tokenizer.ggml.model, must be "gpt2" */
    const char *pre;            /* tokenizer.ggml.pre: "llama-bpe"/"llama3" (Llama 3 regex),
                                   "smollm" (digits one by one, then GPT-2 regex), "gpt2" or
                                   "default" or NULL (GPT-2 regex); others are rejected */
    size_t n_tokens;            /* tokenizer.ggml.tokens: token i has id i */
    const char *const *tokens;
    const uint64_t *token_lens; /* may be NULL */
    const int32_t *token_type;  /* tokenizer.ggml.token_type, n_tokens entries; may be NULL */
    size_t n_merges;            /* tokenizer.ggml.merges: "a b" strings in rank order */
    const char *const *merges;
    const uint64_t *merge_lens; /* may be NULL */
    int64_t bos_id;             /* tokenizer.ggml.bos_token_id, -1 when absent */
    int64_t eos_id;             /* tokenizer.ggml.eos_token_id, -1 when absent */
    int add_bos;                /* tokenizer.ggml.add_bos_token: 0, 1, or -1 when absent */
    const char *chat_template;  /* tokenizer.chat_template (NUL-terminated), may be NULL */
};

struct tokenizer *tokenizer_from_gguf_kv(const struct tokenizer_gguf_kv *kv, struct io_err *e);

void tokenizer_free(struct tokenizer *t);

/* The tokenizer as HF files in dir (which must exist): tokenizer.json and tokenizer_config.json
 * (bos/eos, add_bos_token, the chat template), each written atomically (io/tokenizer_write.c);
 * tokenizer_load of dir/tokenizer.json gives a tokenizer that encodes and decodes as t does. -1
 * with *e for a pre-tokenizer outside Llama 3's, SmolLM's and GPT-2's, or a write failure. */
int tokenizer_write_hf(const struct tokenizer *t, const char *dir, struct io_err *e);

/* ---- queries ----------------------------------------------------------------------------- */

/* V: one more than the largest id (vocabulary plus added tokens). */
uint32_t tokenizer_vocab_size(const struct tokenizer *t);
/* -1 when the tokenizer has none. */
int64_t tokenizer_bos_id(const struct tokenizer *t);
int64_t tokenizer_eos_id(const struct tokenizer *t);
/* Whether the tokenizer's own configuration prepends BOS (HF TemplateProcessing post-processor
 * or tokenizer_config add_bos_token; without either, yes when the vocabulary has
 * <|begin_of_text|>, as Meta's Llama 3 releases do; GGUF add_bos_token; tiktoken Llama 3: yes). The data pipeline passes TOKENIZER_ADD_BOS when
 * this is 1. */
int tokenizer_adds_bos(const struct tokenizer *t);
/* The id of a token given by its exact string (for added/special tokens their content, e.g.
 * "<|eot_id|>"; for vocabulary tokens the ByteLevel-mapped string, e.g. "Ġthe"); -1 if absent. */
int64_t tokenizer_token_to_id(const struct tokenizer *t, const char *token, size_t len);
/* The string of id (as above), its length in *len; NULL when id ≥ V or id is a hole in the
 * vocabulary. The pointer lives as long as t. */
const char *tokenizer_id_to_token(const struct tokenizer *t, uint32_t id, size_t *len);
/* Whether id is a special (control) token: added with "special": true, tiktoken specials, GGUF
 * type CONTROL. */
int tokenizer_is_special(const struct tokenizer *t, uint32_t id);

/* ---- encode / decode --------------------------------------------------------------------- */

/* A growable array of ids (or bytes, for decode) that the caller owns; start from {0}. */
struct tok_ids {
    uint32_t *ids;
    size_t n, cap;
};
struct tok_bytes {
    char *data; /* NUL-terminated after every decode (data[n] == 0) */
    size_t n, cap;
};
void tok_ids_free(struct tok_ids *v);
void tok_bytes_free(struct tok_bytes *v);

enum tokenizer_encode_flags {
    TOKENIZER_ADD_BOS = 1,       /* prepend BOS (error-free no-op when the tokenizer has none) */
    TOKENIZER_SPLIT_SPECIAL = 2, /* do not match added/special tokens in the text */
};

/* Appends the ids of text[0..len) to out (out->n grows; existing ids are kept). text may hold
 * any bytes, NUL and invalid UTF-8 included. Never fails on any input (allocation failure is a
 * CHECK). Returns the number of ids appended. */
size_t tokenizer_encode(struct tokenizer *t, const char *text, size_t len, int flags,
                        struct tok_ids *out);

/* The same, for text that must survive tokenization whole (training data): returns 0, or -1 when
 * a byte of text has no token (step 4's dropped bytes) with *bad_offset set to the offset in text
 * of the first such byte (the ids of the other bytes are appended all the same). */
int tokenizer_encode_exact(struct tokenizer *t, const char *text, size_t len, int flags, struct tok_ids *out,
                           size_t *bad_offset);

enum tokenizer_decode_flags {
    TOKENIZER_SKIP_SPECIAL = 1, /* drop special tokens (HF skip_special_tokens=True) */
};

/* Overwrites out with the bytes of ids[0..n) (out->n = byte count, NUL-terminated). Returns -1
 * with *e set when an id is ≥ V or a hole. */
int tokenizer_decode(const struct tokenizer *t, const uint32_t *ids, size_t n, int flags,
                     struct tok_bytes *out, struct io_err *e);

/* ---- chat templates ---------------------------------------------------------------------- */

enum chat_template_kind {
    CHAT_TEMPLATE_NONE = 0,
    /* Meta Llama 3 instruct (recognized by <|start_header_id|> in the template; the dated system
     * header of Llama 3.1+ templates is not reproduced): <|begin_of_text|> then per message
     *   <|start_header_id|>{role}<|end_header_id|>\n\n{content, whitespace-trimmed}<|eot_id|>
     * and, with CHAT_ADD_GENERATION_PROMPT, <|start_header_id|>assistant<|end_header_id|>\n\n. */
    CHAT_TEMPLATE_LLAMA3 = 1,
    /* ChatML (SmolLM2): per message <|im_start|>{role}\n{content}<|im_end|>\n, with a default
     * system message first when the template has one and messages[0] is not "system";
     * CHAT_ADD_GENERATION_PROMPT appends <|im_start|>assistant\n. No BOS. */
    CHAT_TEMPLATE_CHATML = 2,
};

/* The template recognized at load time from chat_template (tokenizer_config.json / GGUF), or
 * Llama 3 for a tiktoken Llama 3 file; NONE when absent or unrecognized. */
enum chat_template_kind tokenizer_chat_template(const struct tokenizer *t);
/* Overrides it (e.g. a flag naming the template). Returns -1 with *e set when the tokenizer
 * lacks the special tokens the template needs. */
int tokenizer_set_chat_template(struct tokenizer *t, enum chat_template_kind kind,
                                struct io_err *e);

struct chat_message {
    const char *role; /* "system", "user", "assistant", "tool", ... (NUL-terminated) */
    const char *content;
    size_t content_len;
};

enum chat_flags {
    CHAT_ADD_GENERATION_PROMPT = 1,
    CHAT_EXACT = 2, /* fail (naming the byte) when a byte of the conversation has no token */
};

/* A tokenized conversation: ids[0..n) and mask[0..n), mask[i] = 1 when token i is assistant
 * content or the end-of-turn token closing an assistant message (<|eot_id|> / <|im_end|>): the
 * tokens the loss is computed on. Headers, roles, system/user content and the newline after
 * <|im_end|> have mask 0. */
struct chat_tokens {
    uint32_t *ids;
    uint8_t *mask;
    size_t n;
};
void chat_tokens_free(struct chat_tokens *c);

/* Renders messages[0..n_messages) with the tokenizer's chat template and tokenizes the result
 * exactly as HF tokenizer.apply_chat_template(messages, tokenize=True) does (the rendered text
 * is encoded in one pass, special tokens matched, no extra BOS). Special-token strings inside
 * message content are NOT matched (they stay text), so data cannot forge turns. Overwrites *out
 * (which must be zeroed or hold an earlier result: its arrays are freed first).
 * Returns -1 with *e set when the tokenizer has no chat template or a role is empty, and with
 * CHAT_EXACT when a byte of the rendered text has no token (it would be dropped). */
int tokenizer_apply_chat(struct tokenizer *t, const struct chat_message *messages,
                         size_t n_messages, int flags, struct chat_tokens *out,
                         struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_TOKENIZER_H */
