/* tokenizer_write.c — a tokenizer as an HF tokenizer.json + tokenizer_config.json
 * (io/tokenizer.h: tokenizer_write_hf), the files a merged model folder needs beside its weights
 * so that transformers, vLLM and //trainers:generate load it as it is. The pre-tokenizer is
 * written in the form the original HF files use for the patterns refine knows (as
 * gguf_write_tok.c names them for llama.cpp):
 *   Llama 3 ("llama-bpe")  Sequence[Split(Regex TOK_RE_LLAMA3, Isolated), ByteLevel(use_regex false)]
 *   SmolLM ("smollm")      Sequence[Digits(individual_digits), ByteLevel(use_regex true)]
 *   GPT-2 ("gpt2")         ByteLevel(use_regex true)
 * model BPE (the ByteLevel-mapped vocabulary with the added tokens' contents at their ids — HF
 * gives an added token missing from it a new id — the merges in rank order as
 * ["a", "b"] pairs, ignore_merges as the tokenizer has it), added_tokens (content, special), a
 * TemplateProcessing post-processor that prepends BOS when the tokenizer adds it (else nothing),
 * the ByteLevel decoder; tokenizer_config.json: bos/eos token strings, add_bos_token, the
 * chat_template as read. Reading the files back (io/tokenizer_load.c) gives a tokenizer that
 * encodes and decodes every text as this one does (tests/unit/tokenizer_write_test.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/check.h"
#include "io/file.h"
#include "io/tokenizer_internal.h"

/* A string of n bytes (not NUL-terminated) as a cJSON string. */
static cJSON *str_n(const char *s, size_t n) {
    char *z = malloc(n + 1);
    CHECK(z != NULL, "out of memory");
    memcpy(z, s, n);
    z[n] = '\0';
    cJSON *j = cJSON_CreateString(z);
    free(z);
    CHECK(j != NULL, "out of memory");
    return j;
}

static cJSON *byte_level(int use_regex) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "ByteLevel");
    cJSON_AddBoolToObject(b, "add_prefix_space", 0);
    cJSON_AddBoolToObject(b, "trim_offsets", 1);
    cJSON_AddBoolToObject(b, "use_regex", use_regex);
    return b;
}

static int pre_tokenizer(const struct tokenizer *t, cJSON *root, struct io_err *e) {
    const char *name = tok_pre_name(t);
    cJSON *pre;
    if (name && strcmp(name, "llama-bpe") == 0) {
        pre = cJSON_CreateObject();
        cJSON_AddStringToObject(pre, "type", "Sequence");
        cJSON *list = cJSON_AddArrayToObject(pre, "pretokenizers");
        cJSON *split = cJSON_CreateObject();
        cJSON_AddStringToObject(split, "type", "Split");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", TOK_RE_LLAMA3);
        cJSON_AddStringToObject(split, "behavior", "Isolated");
        cJSON_AddBoolToObject(split, "invert", 0);
        cJSON_AddItemToArray(list, split);
        cJSON_AddItemToArray(list, byte_level(0));
    } else if (name && strcmp(name, "smollm") == 0) {
        pre = cJSON_CreateObject();
        cJSON_AddStringToObject(pre, "type", "Sequence");
        cJSON *list = cJSON_AddArrayToObject(pre, "pretokenizers");
        cJSON *digits = cJSON_CreateObject();
        cJSON_AddStringToObject(digits, "type", "Digits");
        cJSON_AddBoolToObject(digits, "individual_digits", 1);
        cJSON_AddItemToArray(list, digits);
        cJSON_AddItemToArray(list, byte_level(1));
    } else if (name && strcmp(name, "gpt2") == 0) {
        pre = byte_level(1);
    } else {
        return io_fail(e, "tokenizer.json export: the tokenizer's pre-tokenizer is none of Llama 3's, SmolLM's and "
                          "GPT-2's");
    }
    cJSON_AddItemToObject(root, "pre_tokenizer", pre);
    return 0;
}

static void post_processor(const struct tokenizer *t, cJSON *root) {
    const int bos = t->adds_bos && t->bos_id >= 0;
    cJSON *name_j = bos ? str_n(t->tok[t->bos_id].str, t->tok[t->bos_id].str_len) : NULL;
    const char *name = bos ? cJSON_GetStringValue(name_j) : NULL;
    cJSON *p = cJSON_AddObjectToObject(root, "post_processor");
    cJSON_AddStringToObject(p, "type", "TemplateProcessing");
    const char *keys[2] = {"single", "pair"};
    for (int k = 0; k < 2; k++) {
        cJSON *list = cJSON_AddArrayToObject(p, keys[k]);
        for (int part = 0; part <= k; part++) {
            if (bos) {
                cJSON *st = cJSON_CreateObject();
                cJSON *inner = cJSON_AddObjectToObject(st, "SpecialToken");
                cJSON_AddStringToObject(inner, "id", name);
                cJSON_AddNumberToObject(inner, "type_id", part);
                cJSON_AddItemToArray(list, st);
            }
            cJSON *sq = cJSON_CreateObject();
            cJSON *seq = cJSON_AddObjectToObject(sq, "Sequence");
            cJSON_AddStringToObject(seq, "id", part ? "B" : "A");
            cJSON_AddNumberToObject(seq, "type_id", part);
            cJSON_AddItemToArray(list, sq);
        }
    }
    cJSON *sts = cJSON_AddObjectToObject(p, "special_tokens");
    if (bos) {
        cJSON *one = cJSON_AddObjectToObject(sts, name);
        cJSON_AddStringToObject(one, "id", name);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(one, "ids"), cJSON_CreateNumber((double)t->bos_id));
        cJSON_AddItemToArray(cJSON_AddArrayToObject(one, "tokens"), cJSON_CreateString(name));
    }
    cJSON_Delete(name_j);
}

static int write_json(const char *dir, const char *file, cJSON *doc, struct io_err *e) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *text = cJSON_PrintUnformatted(doc);
    CHECK(text != NULL, "out of memory");
    const int rc = write_file_atomic(path, text, strlen(text), e);
    cJSON_free(text);
    return rc;
}

int tokenizer_write_hf(const struct tokenizer *t, const char *dir, struct io_err *e) {
    cJSON *root = cJSON_CreateObject();
    CHECK(root != NULL, "out of memory");
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (uint32_t i = 0; i < t->V; i++) {
        const struct tok_entry *k = &t->tok[i];
        if (!(k->flags & TOK_PRESENT) || !(k->flags & TOK_ADDED)) continue;
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", (double)i);
        cJSON_AddItemToObject(a, "content", str_n(k->str, k->str_len));
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", (k->flags & TOK_SPECIAL) != 0);
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNullToObject(root, "normalizer");
    if (pre_tokenizer(t, root, e)) {
        cJSON_Delete(root);
        return -1;
    }
    post_processor(t, root);
    cJSON *dec = byte_level(1);
    cJSON_ReplaceItemInObject(dec, "add_prefix_space", cJSON_CreateBool(1));
    cJSON_AddItemToObject(root, "decoder", dec);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", t->ignore_merges != 0);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (uint32_t i = 0; i < t->V; i++) {
        const struct tok_entry *k = &t->tok[i];
        if (!(k->flags & TOK_PRESENT)) continue; /* added tokens too, as HF's files list them: their ids */
        char *z = malloc((size_t)k->str_len + 1);
        CHECK(z != NULL, "out of memory");
        memcpy(z, k->str, k->str_len);
        z[k->str_len] = '\0';
        cJSON_AddNumberToObject(vocab, z, (double)i);
        free(z);
    }
    struct tok_merge *recs;
    const size_t n = tok_merges_ranked(t, &recs);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (size_t i = 0; i < n; i++) {
        const struct tok_entry *l = &t->tok[recs[i].left], *r = &t->tok[recs[i].right];
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, str_n(l->str, l->str_len));
        cJSON_AddItemToArray(pair, str_n(r->str, r->str_len));
        cJSON_AddItemToArray(merges, pair);
    }
    free(recs);
    int rc = write_json(dir, "tokenizer.json", root, e);
    cJSON_Delete(root);
    if (rc) return -1;

    cJSON *cfg = cJSON_CreateObject();
    CHECK(cfg != NULL, "out of memory");
    if (t->bos_id >= 0) cJSON_AddItemToObject(cfg, "bos_token", str_n(t->tok[t->bos_id].str, t->tok[t->bos_id].str_len));
    if (t->eos_id >= 0) cJSON_AddItemToObject(cfg, "eos_token", str_n(t->tok[t->eos_id].str, t->tok[t->eos_id].str_len));
    cJSON_AddBoolToObject(cfg, "add_bos_token", t->adds_bos != 0);
    cJSON_AddBoolToObject(cfg, "add_eos_token", 0);
    cJSON_AddBoolToObject(cfg, "clean_up_tokenization_spaces", 0);
    if (t->chat_template_src) cJSON_AddStringToObject(cfg, "chat_template", t->chat_template_src);
    cJSON_AddStringToObject(cfg, "tokenizer_class", "PreTrainedTokenizerFast");
    rc = write_json(dir, "tokenizer_config.json", cfg, e);
    cJSON_Delete(cfg);
    return rc;
}
