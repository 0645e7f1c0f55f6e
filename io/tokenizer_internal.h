/* tokenizer_internal.h — the representation shared by io/tokenizer.c (maps, BPE, encode/decode),
 * io/tokenizer_load.c (tokenizer.json, tiktoken, GGUF) and io/chat.c (chat templates). Not part
 * of the public interface (io/tokenizer.h).
 *
 * Every token id has two spellings: `str`, the string the file uses (ByteLevel-mapped for BPE
 * vocabulary tokens, e.g. "Ġthe"; the content for added tokens) and `bytes`, what it decodes to.
 * BPE works on byte ids: byte b starts as the token whose bytes are exactly {b}; a merge table
 * maps a pair of adjacent ids to (rank, merged id).
 */
#ifndef REFINE_IO_TOKENIZER_INTERNAL_H
#define REFINE_IO_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "io/tokenizer.h"

/* String → uint32 map (open addressing, linear probing); keys are not copied. */
struct tok_strmap {
    struct tok_strmap_slot {
        const char *key;
        uint32_t len;
        uint32_t val;
        uint64_t hash;
    } *slots;
    size_t cap, n;
};

/* (left id, right id) → (rank, merged id). */
struct tok_pairmap {
    uint64_t *keys; /* (left << 32 | right) + 1; 0 = empty */
    uint32_t *rank;
    uint32_t *merged;
    size_t cap, n;
};

/* Chunked arena for strings that live as long as the tokenizer. */
struct tok_arena {
    char **chunks;
    size_t n_chunks, used, chunk_cap;
};

enum tok_flags {
    TOK_PRESENT = 1,
    TOK_ADDED = 2,   /* matched in raw text before pre-tokenization */
    TOK_SPECIAL = 4, /* special/control: skipped by TOKENIZER_SKIP_SPECIAL */
};

struct tok_entry {
    const char *str;
    const char *bytes;
    uint32_t str_len, bytes_len;
    uint32_t flags;
};

#define TOK_MAX_SPLITS 4

struct tokenizer {
    uint32_t V;
    struct tok_entry *tok; /* V entries */
    struct tok_arena arena;
    struct tok_strmap by_str;   /* str → id, every token */
    struct tok_strmap by_bytes; /* bytes → id, BPE vocabulary tokens only (not added tokens) */
    struct tok_pairmap merges;
    int32_t byte_id[256]; /* id of the single-byte token, -1 if absent */
    int ignore_merges;    /* a whole word in by_bytes is one token */

    /* Pre-tokenizer: words are split by each regex in turn ("Isolated"). */
    void *re[TOK_MAX_SPLITS];       /* pcre2_code_8 * */
    void *match_data;               /* pcre2_match_data_8 * */
    int n_re;
    const char *re_pattern[TOK_MAX_SPLITS]; /* the patterns as given (arena copies), for exports */

    /* Added tokens, matched leftmost-longest in raw text. */
    struct tok_strmap added;       /* content → id */
    uint32_t *added_lens;          /* distinct lengths, descending */
    int n_added_lens;
    uint8_t added_first[256];      /* 1 when some added token starts with this byte */
    uint8_t special_first[256];    /* the same, non-special added tokens excluded */

    int64_t bos_id, eos_id;
    int adds_bos;
    /* The first byte that an encode since the last reset dropped for lack of a token: its offset
     * in the text of that call (SIZE_MAX: none) and its value (tokenizer_encode_exact,
     * CHAT_EXACT). */
    size_t drop_at;
    uint8_t drop_byte;
    enum chat_template_kind chat;
    char *chat_system_default; /* ChatML default system message, NULL when none */
    char *chat_template_src;   /* the chat_template text as read, NULL when none (for exports) */

    /* Word cache: word bytes → ids (pool offset, count). */
    struct tok_strmap cache;
    struct tok_arena cache_arena;
    uint32_t *cache_ids;
    size_t cache_n, cache_cap;
    /* BPE scratch */
    uint32_t *sym_id;
    int32_t *sym_prev, *sym_next;
    uint8_t *sym_len;
    struct tok_heap_item {
        uint32_t rank;
        uint32_t pos;
    } *heap;
    size_t scratch_cap, heap_cap;
};

/* maps and arena (io/tokenizer.c) */
uint64_t tok_hash(const char *s, size_t n);
void tok_strmap_init(struct tok_strmap *m, size_t expected);
void tok_strmap_free(struct tok_strmap *m);
/* Inserts key → val; returns 0, or 1 without changing anything when key is already present
 * (then *old, when non-NULL, receives its value). The key memory must outlive the map. */
int tok_strmap_put(struct tok_strmap *m, const char *key, size_t len, uint32_t val, uint32_t *old);
/* Returns 1 and *val when present. */
int tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len, uint32_t *val);
void tok_pairmap_init(struct tok_pairmap *m, size_t expected);
void tok_pairmap_free(struct tok_pairmap *m);
/* Keeps the lowest rank when the pair is already present. */
void tok_pairmap_put(struct tok_pairmap *m, uint32_t left, uint32_t right, uint32_t rank,
                     uint32_t merged);
char *tok_arena_copy(struct tok_arena *a, const char *s, size_t n);
void tok_arena_free(struct tok_arena *a);

/* ByteLevel mapping (GPT-2 bytes_to_unicode): byte → code point; code point → byte or -1. */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);
/* Writes the ByteLevel-mapped UTF-8 of bytes[0..n) into out (≤ 2n bytes); returns its length. */
size_t tok_bytelevel_encode(char *out, const uint8_t *bytes, size_t n);
/* Inverse mapping of a ByteLevel string into out (≤ n bytes): mapped code points become their
 * byte, any other character is kept as its UTF-8 bytes. Returns the byte count. */
size_t tok_bytelevel_decode(char *out, const char *s, size_t n);

/* Construction helpers used by the loaders (io/tokenizer.c). */
struct tokenizer *tok_new(uint32_t V);
/* Sets token id; returns -1 with *e when id is taken or str is a duplicate. */
int tok_set(struct tokenizer *t, uint32_t id, const char *str, size_t str_len, const char *bytes,
            size_t bytes_len, uint32_t flags, const char *src, struct io_err *e);
/* Adds a pre-tokenizer regex; returns -1 with *e on a pattern PCRE2 rejects. */
int tok_add_regex(struct tokenizer *t, const char *pattern, const char *src, struct io_err *e);
/* After all tokens are set: byte ids, added-token tables. Checks every byte has a token. */
int tok_finish(struct tokenizer *t, const char *src, struct io_err *e);
/* Recognizes a chat_template string (sets t->chat and the ChatML default system message). */
void tok_detect_chat_template(struct tokenizer *t, const char *tmpl);

/* The regexes refine knows by name. */
extern const char *const TOK_RE_LLAMA3;
extern const char *const TOK_RE_GPT2;
extern const char *const TOK_RE_DIGITS;

/* The pre-tokenizer by the name llama.cpp gives it: "llama-bpe" (Llama 3's regex), "smollm" (digits,
 * then GPT-2's), "gpt2" (GPT-2's), or NULL for any other (the exports write only these). */
const char *tok_pre_name(const struct tokenizer *t);
/* The merges in rank order (ties by left, then right id): *out (malloc'd, the caller frees) holds
 * n (left, right) id pairs; returns n. */
struct tok_merge {
    uint32_t rank, left, right;
};
size_t tok_merges_ranked(const struct tokenizer *t, struct tok_merge **out);

/* Encodes, also returning for each appended id the byte offset where its text begins (offsets
 * may be NULL). Used by the chat templates for loss masks. */
size_t tok_encode_offsets(struct tokenizer *t, const char *text, size_t len, int flags,
                          struct tok_ids *out, struct tok_ids *offsets);

#endif /* REFINE_IO_TOKENIZER_INTERNAL_H */
