/* gguf_write_tok.c — a tokenizer's GGUF metadata (gguf_write.h: tokenizer_gguf_metadata), the
 * keys llama.cpp's converter writes for a byte-level BPE model (convert_hf_to_gguf.py
 * _set_vocab_gpt2 / gguf-py SpecialVocab) and io/tokenizer_load.c reads back:
 *   tokenizer.ggml.model "gpt2"; tokenizer.ggml.pre by the pre-tokenizer: Llama 3's regex
 *   "llama-bpe", digits then GPT-2's "smollm", GPT-2's "gpt2"; tokenizer.ggml.tokens (the
 *   ByteLevel-mapped strings; added tokens their content); tokenizer.ggml.token_type (CONTROL for
 *   special added tokens, USER_DEFINED for other added tokens, NORMAL, UNUSED for padding);
 *   tokenizer.ggml.merges ("left right" in rank order); bos/eos (u32, when the tokenizer has
 *   them); tokenizer.ggml.add_bos_token; tokenizer.chat_template (the text as read).
 * Also the two views both exports share (tokenizer_internal.h): the pre-tokenizer's llama.cpp name
 * (tok_pre_name) and the merges in rank order (tok_merges_ranked). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "io/gguf_write.h"
#include "io/tokenizer_internal.h"

static int by_rank(const void *a, const void *b) {
    const struct tok_merge *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->left != y->left) return x->left < y->left ? -1 : 1;
    return (x->right > y->right) - (x->right < y->right);
}

size_t tok_merges_ranked(const struct tokenizer *t, struct tok_merge **out) {
    const struct tok_pairmap *m = &t->merges;
    struct tok_merge *recs = calloc(m->n ? m->n : 1, sizeof *recs);
    CHECK(recs != NULL, "out of memory");
    size_t n = 0;
    for (size_t s = 0; s < m->cap; s++) {
        if (!m->keys || m->keys[s] == 0) continue;
        const uint64_t key = m->keys[s] - 1;
        recs[n++] = (struct tok_merge){m->rank[s], (uint32_t)(key >> 32), (uint32_t)key};
    }
    qsort(recs, n, sizeof *recs, by_rank);
    *out = recs;
    return n;
}

static int same_patterns(const struct tokenizer *t, const char *const *want, int n) {
    if (t->n_re != n) return 0;
    for (int i = 0; i < n; i++)
        if (strcmp(t->re_pattern[i], want[i]) != 0) return 0;
    return 1;
}

const char *tok_pre_name(const struct tokenizer *t) {
    const char *llama3[1] = {TOK_RE_LLAMA3}, *smol[2] = {TOK_RE_DIGITS, TOK_RE_GPT2}, *gpt2[1] = {TOK_RE_GPT2};
    if (same_patterns(t, llama3, 1)) return "llama-bpe";
    if (same_patterns(t, smol, 2)) return "smollm";
    if (same_patterns(t, gpt2, 1)) return "gpt2";
    return NULL;
}

int tokenizer_gguf_metadata(const struct tokenizer *t, struct gguf_writer *w, uint32_t V, struct io_err *e) {
    const char *pre = tok_pre_name(t);
    if (!pre)
        return io_fail(e, "GGUF export: the tokenizer's pre-tokenizer is none of those llama.cpp names (Llama 3's "
                          "llama-bpe, SmolLM's smollm, GPT-2's gpt2)");
    if (V < t->V) return io_fail(e, "GGUF export: the tokenizer has %u tokens, more than the model's %u", t->V, V);
    gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_set_str(w, "tokenizer.ggml.pre", pre);
    const char **strs = calloc(V, sizeof *strs);
    size_t *lens = calloc(V, sizeof *lens);
    int32_t *types = calloc(V, sizeof *types);
    char **pads = calloc(V, sizeof *pads);
    CHECK(strs && lens && types && pads, "out of memory");
    for (uint32_t i = 0; i < V; i++) {
        const struct tok_entry *k = i < t->V ? &t->tok[i] : NULL;
        if (k && (k->flags & TOK_PRESENT)) {
            strs[i] = k->str, lens[i] = k->str_len;
            types[i] = (k->flags & TOK_ADDED) ? ((k->flags & TOK_SPECIAL) ? TOKEN_TYPE_CONTROL : TOKEN_TYPE_USER_DEFINED)
                                              : TOKEN_TYPE_NORMAL;
        } else {
            pads[i] = malloc(24);
            CHECK(pads[i] != NULL, "out of memory");
            snprintf(pads[i], 24, "[PAD%u]", i);
            strs[i] = pads[i], lens[i] = strlen(pads[i]), types[i] = TOKEN_TYPE_UNUSED;
        }
    }
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", strs, lens, V);
    gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, V);
    for (uint32_t i = 0; i < V; i++) free(pads[i]);
    free(pads), free(types), free(lens), free(strs);
    /* merges in rank order, "left right" with the ByteLevel-mapped strings */
    struct tok_merge *recs;
    const size_t n = tok_merges_ranked(t, &recs);
    char **ms = calloc(n ? n : 1, sizeof *ms);
    CHECK(ms != NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const struct tok_entry *l = &t->tok[recs[i].left], *r = &t->tok[recs[i].right];
        ms[i] = malloc((size_t)l->str_len + r->str_len + 2);
        CHECK(ms[i] != NULL, "out of memory");
        memcpy(ms[i], l->str, l->str_len);
        ms[i][l->str_len] = ' ';
        memcpy(ms[i] + l->str_len + 1, r->str, r->str_len);
        ms[i][l->str_len + 1 + r->str_len] = '\0';
    }
    gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, NULL, n);
    for (size_t i = 0; i < n; i++) free(ms[i]);
    free(ms), free(recs);
    if (t->bos_id >= 0) gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos_id);
    if (t->eos_id >= 0) gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos_id);
    gguf_set_bool(w, "tokenizer.ggml.add_bos_token", t->adds_bos);
    if (t->chat_template_src) gguf_set_str(w, "tokenizer.chat_template", t->chat_template_src);
    return 0;
}
