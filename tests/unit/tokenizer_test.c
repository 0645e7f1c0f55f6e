/* tokenizer_test.c — io/tokenizer on small hand-made vocabularies whose ids follow from the BPE
 * rules by hand: merge order and ties, ignore_merges, both merge spellings, added/special tokens
 * (leftmost-longest, split_special), the BOS post-processor, tiktoken ranks as merges, GGUF
 * metadata, chat templates and their loss masks, round trips on random bytes (invalid UTF-8
 * included), and a malformed-file suite where every case is a clear error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cJSON.h"
#include "io/error.h"
#include "io/file.h"
#include "io/model_source.h"
#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static char g_dir[512];

static const char *tmp_path(const char *name) {
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_text(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(s, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void write_str(const char *path, const char *s) { write_text(path, s, strlen(s)); }

/* The mapped (ByteLevel) spelling of a byte string, NUL-terminated, in a static buffer. */
static const char *mapped(const char *bytes) {
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    size_t n = tok_bytelevel_encode(buf[k], (const uint8_t *)bytes, strlen(bytes));
    buf[k][n] = 0;
    return buf[k];
}

/* Tiny vocabulary: ids 0..255 are the bytes (except `missing_byte` when ≥ 0), then
 *   256 "he"  257 "ll"  258 "hell"  259 "hello"  260 " w"  261 "abc" (no merge builds it)
 * merges in rank order: h e, l l, he ll, hell o, Ġ w.  Added: 262 "<|x|>" (special),
 * 263 "<y>" (not special), 264 "<|x|>!" (special), 265 "<|im_start|>", 266 "<|im_end|>",
 * 267 "<|start_header_id|>", 268 "<|end_header_id|>", 269 "<|eot_id|>" (special). */
enum { ID_HE = 256, ID_LL, ID_HELL, ID_HELLO, ID_SP_W, ID_ABC, ID_X, ID_Y, ID_X_BANG, ID_IM_START,
       ID_IM_END, ID_HDR_START, ID_HDR_END, ID_EOT };

struct tiny_opts {
    int list_merges;   /* merges as ["a","b"] instead of "a b" */
    int ignore_merges;
    int bos_template;  /* TemplateProcessing with <|x|> as BOS */
    int missing_byte;  /* -1 for none */
    int bos_id;        /* with bos_template: the id it names (0: <|x|>'s) */
    const char *split_regex; /* NULL: ByteLevel use_regex (GPT-2 pattern) */
    const char *chat_template;
};

static void write_tiny(const char *dir, const struct tiny_opts *o) {
    mkdir(dir, 0755);
    cJSON *root = cJSON_CreateObject();
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddBoolToObject(model, "ignore_merges", o->ignore_merges);
    cJSON_AddNullToObject(model, "dropout");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int b = 0; b < 256; b++) {
        if (b == o->missing_byte) continue;
        char s[2] = {(char)b, 0};
        char m[8];
        size_t n = tok_bytelevel_encode(m, (const uint8_t *)s, 1);
        m[n] = 0;
        cJSON_AddNumberToObject(vocab, m, b);
    }
    const char *words[] = {"he", "ll", "hell", "hello", " w", "abc"};
    for (int i = 0; i < 6; i++) cJSON_AddNumberToObject(vocab, mapped(words[i]), 256 + i);
    const char *merges[][2] = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}};
    cJSON *ml = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < 5; i++) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%s", mapped(merges[i][0]));
        snprintf(b, sizeof b, "%s", mapped(merges[i][1]));
        if (o->list_merges) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateString(a));
            cJSON_AddItemToArray(pair, cJSON_CreateString(b));
            cJSON_AddItemToArray(ml, pair);
        } else {
            char s[70];
            snprintf(s, sizeof s, "%s %s", a, b);
            cJSON_AddItemToArray(ml, cJSON_CreateString(s));
        }
    }
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    const char *adds[] = {"<|x|>", "<y>", "<|x|>!", "<|im_start|>", "<|im_end|>", "<|start_header_id|>",
                          "<|end_header_id|>", "<|eot_id|>"};
    for (int i = 0; i < 8; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", ID_X + i);
        cJSON_AddStringToObject(a, "content", adds[i]);
        cJSON_AddBoolToObject(a, "special", i != 1);
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    if (o->split_regex) {
        cJSON_AddStringToObject(pre, "type", "Sequence");
        cJSON *l = cJSON_AddArrayToObject(pre, "pretokenizers");
        cJSON *sp = cJSON_CreateObject();
        cJSON_AddStringToObject(sp, "type", "Split");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "pattern"), "Regex", o->split_regex);
        cJSON_AddStringToObject(sp, "behavior", "Isolated");
        cJSON_AddBoolToObject(sp, "invert", 0);
        cJSON_AddItemToArray(l, sp);
        cJSON *bl = cJSON_CreateObject();
        cJSON_AddStringToObject(bl, "type", "ByteLevel");
        cJSON_AddBoolToObject(bl, "add_prefix_space", 0);
        cJSON_AddBoolToObject(bl, "use_regex", 0);
        cJSON_AddItemToArray(l, bl);
    } else {
        cJSON_AddStringToObject(pre, "type", "ByteLevel");
        cJSON_AddBoolToObject(pre, "add_prefix_space", 0);
        cJSON_AddBoolToObject(pre, "use_regex", 1);
    }
    if (o->bos_template) {
        cJSON *pp = cJSON_AddObjectToObject(root, "post_processor");
        cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
        cJSON *single = cJSON_AddArrayToObject(pp, "single");
        cJSON *s0 = cJSON_CreateObject();
        cJSON_AddStringToObject(cJSON_AddObjectToObject(s0, "SpecialToken"), "id", "<|x|>");
        cJSON_AddItemToArray(single, s0);
        cJSON *s1 = cJSON_CreateObject();
        cJSON_AddStringToObject(cJSON_AddObjectToObject(s1, "Sequence"), "id", "A");
        cJSON_AddItemToArray(single, s1);
        cJSON *st = cJSON_AddObjectToObject(cJSON_AddObjectToObject(pp, "special_tokens"), "<|x|>");
        cJSON *ids = cJSON_AddArrayToObject(st, "ids");
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(o->bos_id ? o->bos_id : ID_X));
    } else {
        cJSON_AddNullToObject(root, "post_processor");
    }
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
    char *text = cJSON_PrintUnformatted(root);
    char path[700];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_text(path, text, strlen(text));
    free(text);
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (o->chat_template) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "chat_template", o->chat_template);
        cJSON_AddStringToObject(c, "eos_token", "<|eot_id|>");
        text = cJSON_PrintUnformatted(c);
        write_text(path, text, strlen(text));
        free(text);
        cJSON_Delete(c);
    } else {
        remove(path);
    }
}

static struct tokenizer *load_ok(const char *path) {
    struct io_err e;
    struct tokenizer *t = tokenizer_load(path, &e);
    if (!t) {
        fprintf(stderr, "cannot load %s: %s\n", path, e.msg);
        exit(1);
    }
    return t;
}

/* Encodes s and compares with want[0..n). */
static void expect_ids(struct tokenizer *t, const char *s, int flags, const uint32_t *want, size_t n,
                       const char *what) {
    struct tok_ids ids = {0};
    tokenizer_encode(t, s, strlen(s), flags, &ids);
    int ok = ids.n == n && (n == 0 || memcmp(ids.ids, want, n * sizeof *want) == 0);
    EXPECT(ok, "%s: '%s' gives %zu ids (first %u), expected %zu (first %u)", what, s, ids.n,
           ids.n ? ids.ids[0] : 0, n, n ? want[0] : 0);
    tok_ids_free(&ids);
}

#define IDS(...) (const uint32_t[]){__VA_ARGS__}, sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t)

static void test_bpe_rules(void) {
    for (int list = 0; list < 2; list++) {
        struct tiny_opts o = {.list_merges = list, .ignore_merges = 0, .missing_byte = -1};
        write_tiny(tmp_path("tiny"), &o);
        struct tokenizer *t = load_ok(tmp_path("tiny"));
        const char *form = list ? "list merges" : "string merges";
        EXPECT(tokenizer_vocab_size(t) == 270, "%s: V = %u, expected 270", form, tokenizer_vocab_size(t));
        expect_ids(t, "hello", 0, IDS(ID_HELLO), form);
        expect_ids(t, "hello world", 0, IDS(ID_HELLO, ID_SP_W, 'o', 'r', 'l', 'd'), form);
        /* (l,l) applies leftmost first: "lll" → ll, l. */
        expect_ids(t, "lll", 0, IDS(ID_LL, 'l'), form);
        expect_ids(t, "llll", 0, IDS(ID_LL, ID_LL), form);
        /* rank order, not position: in "hell" (l,l) (rank 1) waits for (h,e) (rank 0), then he+ll. */
        expect_ids(t, "hell", 0, IDS(ID_HELL), form);
        expect_ids(t, "ehell", 0, IDS('e', ID_HELL), form);
        /* no merge builds "abc": without ignore_merges it stays bytes */
        expect_ids(t, "abc", 0, IDS('a', 'b', 'c'), form);
        /* GPT-2 regex: " w" only merges inside the word " world", not across words */
        expect_ids(t, "a w", 0, IDS('a', ID_SP_W), form);
        expect_ids(t, "a  w", 0, IDS('a', ' ', ID_SP_W), form);
        expect_ids(t, "", 0, NULL, 0, form);
        tokenizer_free(t);
    }
    struct tiny_opts o = {.ignore_merges = 1, .missing_byte = -1};
    write_tiny(tmp_path("tiny"), &o);
    struct tokenizer *t = load_ok(tmp_path("tiny"));
    expect_ids(t, "abc", 0, IDS(ID_ABC), "ignore_merges");
    expect_ids(t, "abcabc", 0, IDS('a', 'b', 'c', 'a', 'b', 'c'), "ignore_merges (word not in vocab)");
    tokenizer_free(t);
}

static void test_added_tokens(void) {
    struct tiny_opts o = {.missing_byte = -1, .bos_template = 1};
    write_tiny(tmp_path("tiny"), &o);
    struct tokenizer *t = load_ok(tmp_path("tiny"));
    expect_ids(t, "a<|x|>b", 0, IDS('a', ID_X, 'b'), "special token");
    expect_ids(t, "<|x|>!", 0, IDS(ID_X_BANG), "longest added token at a position");
    expect_ids(t, "<|x|><|x|>", 0, IDS(ID_X, ID_X), "adjacent special tokens");
    expect_ids(t, "he<y>llo", 0, IDS(ID_HE, ID_Y, ID_LL, 'o'), "added token splits a word");
    expect_ids(t, "<|x|", 0, IDS('<', '|', 'x', '|'), "incomplete special token is text");
    expect_ids(t, "a<|x|>b<y>", TOKENIZER_SPLIT_SPECIAL, IDS('a', '<', '|', 'x', '|', '>', 'b', ID_Y),
               "split_special: specials are text, other added tokens still match");
    /* BOS from the TemplateProcessing post-processor */
    EXPECT(tokenizer_bos_id(t) == ID_X && tokenizer_adds_bos(t), "BOS from TemplateProcessing");
    expect_ids(t, "hello", TOKENIZER_ADD_BOS, IDS(ID_X, ID_HELLO), "ADD_BOS");
    expect_ids(t, "", TOKENIZER_ADD_BOS, IDS(ID_X), "ADD_BOS on empty text");
    /* lookups */
    EXPECT(tokenizer_token_to_id(t, "<|eot_id|>", 10) == ID_EOT, "token_to_id of a special token");
    EXPECT(tokenizer_token_to_id(t, mapped(" w"), strlen(mapped(" w"))) == ID_SP_W, "token_to_id of 'Ġw'");
    EXPECT(tokenizer_token_to_id(t, "nope", 4) == -1, "token_to_id of an absent token");
    size_t len = 0;
    const char *s = tokenizer_id_to_token(t, ID_SP_W, &len);
    EXPECT(s && len == strlen(mapped(" w")) && memcmp(s, mapped(" w"), len) == 0, "id_to_token(260) = 'Ġw'");
    EXPECT(tokenizer_id_to_token(t, 270, &len) == NULL, "id_to_token beyond V is NULL");
    EXPECT(tokenizer_is_special(t, ID_X) && !tokenizer_is_special(t, ID_Y) && !tokenizer_is_special(t, 'a'),
           "is_special");
    /* decode, with and without specials */
    struct tok_bytes out = {0};
    struct io_err e;
    uint32_t ids[] = {ID_X, ID_HELLO, ID_Y, ID_SP_W, ID_EOT};
    EXPECT(tokenizer_decode(t, ids, 5, 0, &out, &e) == 0 && strcmp(out.data, "<|x|>hello<y> w<|eot_id|>") == 0,
           "decode keeps specials: '%s'", out.data ? out.data : "");
    EXPECT(tokenizer_decode(t, ids, 5, TOKENIZER_SKIP_SPECIAL, &out, &e) == 0 && strcmp(out.data, "hello<y> w") == 0,
           "decode skips specials: '%s'", out.data ? out.data : "");
    uint32_t bad[] = {'a', 270};
    EXPECT(tokenizer_decode(t, bad, 2, 0, &out, &e) == -1 && strstr(e.msg, "270"), "decode of id 270 fails: %s", e.msg);
    EXPECT(tokenizer_decode(t, ids, 0, 0, &out, &e) == 0 && out.n == 0 && out.data[0] == 0, "decode of nothing");
    tok_bytes_free(&out);
    tokenizer_free(t);
}

static void test_missing_byte(void) {
    struct tiny_opts o = {.missing_byte = 4};
    write_tiny(tmp_path("tiny"), &o);
    struct tokenizer *t = load_ok(tmp_path("tiny"));
    /* "he\x04llo": three pre-tokens (letters, the control byte, letters); the byte is dropped */
    expect_ids(t, "he\x04llo", 0, IDS(ID_HE, ID_LL, 'o'), "a byte without a token is dropped");
    expect_ids(t, "\x04", 0, NULL, 0, "a word of dropped bytes gives nothing");
    /* ... which training data must not suffer silently: encode_exact names the first such byte,
     * every time (a word that lost a byte is not served from the word cache). */
    struct tok_ids ids = {0};
    size_t bad = 0;
    for (int k = 0; k < 2; k++) {
        ids.n = 0;
        EXPECT(tokenizer_encode_exact(t, "ok he\x04llo \x04", 11, 0, &ids, &bad) == -1 && bad == 5,
               "encode_exact reports the byte at offset 5 (pass %d; got %zu)", k, bad);
    }
    ids.n = 0;
    EXPECT(tokenizer_encode_exact(t, "ok hello", 8, 0, &ids, &bad) == 0 && ids.n > 0, "representable text passes");
    tok_ids_free(&ids);
    tokenizer_free(t);
    /* a conversation: CHAT_EXACT refuses it, naming the byte */
    o.chat_template = "{{ '<|start_header_id|>' + role }}";
    write_tiny(tmp_path("tiny"), &o);
    t = load_ok(tmp_path("tiny"));
    struct chat_message m[] = {{"user", "a\x04" "b", 3}, {"assistant", "hello", 5}};
    struct chat_tokens c = {0};
    struct io_err e = {{0}};
    EXPECT(tokenizer_apply_chat(t, m, 2, 0, &c, &e) == 0, "without CHAT_EXACT the byte is dropped (HF's behaviour)");
    const int rc = tokenizer_apply_chat(t, m, 2, CHAT_EXACT, &c, &e);
    EXPECT(rc == -1 && strstr(e.msg, "0x04") != NULL, "CHAT_EXACT refuses it (%d): %s", rc, e.msg);
    chat_tokens_free(&c);
    tokenizer_free(t);
}

/* The tokenizer against the model it comes with (io/model_source.h). */
static void test_against_model(void) {
    struct tiny_opts o = {.missing_byte = -1, .chat_template = "{{ '<|start_header_id|>' + role }}"};
    write_tiny(tmp_path("tiny"), &o);
    struct tokenizer *t = load_ok(tmp_path("tiny"));
    static struct model_source s;
    memset(&s, 0, sizeof s);
    s.kind = MODEL_SOURCE_HF;
    snprintf(s.tokenizer_json, sizeof s.tokenizer_json, "%s/tokenizer.json", tmp_path("tiny"));
    s.config.V = 270;
    struct io_err e = {{0}};
    EXPECT(model_source_check_tokenizer(&s, t, &e) == 0, "a tokenizer of 270 ids fits a model of 270: %s", e.msg);
    s.config.V = 256;
    EXPECT(model_source_check_tokenizer(&s, t, &e) == -1 && strstr(e.msg, "tokenizer.json") != NULL &&
               strstr(e.msg, "269") != NULL && strstr(e.msg, "<|eot_id|>") != NULL && strstr(e.msg, "256") != NULL,
           "a tokenizer with ids beyond the model's vocabulary is refused, naming the id: %s", e.msg);
    s.config.V = 270;
    s.config.n_eos = 1;
    s.config.eos_token_ids[0] = 4;
    EXPECT(model_source_check_tokenizer(&s, t, &e) == 0, "the model's eos 4 is a token");
    tokenizer_free(t);
    /* a vocabulary with a gap at 4, and BOS (from the post-processor) or EOS on it */
    o.missing_byte = 4;
    o.bos_template = 1;
    o.bos_id = 4;
    write_tiny(tmp_path("tiny"), &o);
    t = load_ok(tmp_path("tiny"));
    EXPECT(model_source_check_tokenizer(&s, t, &e) == -1 && strstr(e.msg, "beginning-of-sequence id 4") != NULL,
           "BOS on a gap of the vocabulary is refused: %s", e.msg);
    tokenizer_free(t);
    o.bos_template = 0;
    write_tiny(tmp_path("tiny"), &o);
    t = load_ok(tmp_path("tiny"));
    EXPECT(model_source_check_tokenizer(&s, t, &e) == -1 && strstr(e.msg, "end-of-sequence id 4") != NULL,
           "the model's EOS on a gap is refused: %s", e.msg);
    tokenizer_free(t);
}

/* decode(encode(x)) == x on random byte strings: ASCII, multi-byte UTF-8, invalid bytes,
 * specials, whitespace runs. */
static void round_trips(struct tokenizer *t, struct rng *r, const char *what, int n_cases) {
    static const char *pieces[] = {"hello", " world", "\n\n", "  ", "<|x|>", "<|eot_id|>", "日本", "é",
                                   "🎉", "123", "'s", "\xff", "\xc3", "\xe6\x97", "\x80\x80", "\t"};
    char buf[600];
    struct tok_ids ids = {0};
    struct tok_bytes out = {0};
    struct io_err e;
    int bad = 0;
    for (int c = 0; c < n_cases; c++) {
        size_t n = 0;
        size_t target = (uint32_t)rng_u64(r) % 500;
        while (n < target) {
            uint32_t k = (uint32_t)rng_u64(r) % 3;
            if (k == 0) {
                buf[n++] = (char)((uint32_t)rng_u64(r) & 0xFF);
            } else {
                const char *p = pieces[(uint32_t)rng_u64(r) % (sizeof pieces / sizeof *pieces)];
                size_t l = strlen(p);
                if (n + l > sizeof buf) break;
                memcpy(buf + n, p, l);
                n += l;
            }
        }
        ids.n = 0;
        tokenizer_encode(t, buf, n, 0, &ids);
        int ok = tokenizer_decode(t, ids.ids, ids.n, 0, &out, &e) == 0 && out.n == n && memcmp(out.data, buf, n) == 0;
        if (!ok) bad++;
        EXPECT(ok, "%s: round trip of random case %d (%zu bytes) fails", what, c, n);
        /* encoding is a function of the text: a second encode (cached words) agrees */
        struct tok_ids again = {0};
        tokenizer_encode(t, buf, n, 0, &again);
        EXPECT(again.n == ids.n && (ids.n == 0 || memcmp(again.ids, ids.ids, ids.n * sizeof *ids.ids) == 0),
               "%s: encode is not repeatable on case %d", what, c);
        tok_ids_free(&again);
        if (bad > 3) break;
    }
    tok_ids_free(&ids);
    tok_bytes_free(&out);
}

static void test_round_trips(struct rng *r) {
    struct tiny_opts o = {.missing_byte = -1};
    write_tiny(tmp_path("tiny"), &o);
    struct tokenizer *t = load_ok(tmp_path("tiny"));
    round_trips(t, r, "tiny (GPT-2 regex)", 300);
    tokenizer_free(t);
    o.split_regex = TOK_RE_LLAMA3;
    write_tiny(tmp_path("tiny"), &o);
    t = load_ok(tmp_path("tiny"));
    round_trips(t, r, "tiny (Llama 3 Split regex)", 300);
    tokenizer_free(t);
}

/* tiktoken: ranks are the merges. Bytes 0..255 rank = byte, then "ab" 256, "bc" 257, "abc" 258. */
static void test_tiktoken(void) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *text = malloc(256 * 16 + 100);
    size_t n = 0;
    for (int b = 0; b < 256; b++) {
        n += (size_t)sprintf(text + n, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    }
    n += (size_t)sprintf(text + n, "YWI= 256\nYmM= 257\nYWJj 258\n"); /* ab, bc, abc */
    write_text(tmp_path("tiny.tiktoken"), text, n);
    free(text);
    struct tokenizer *t = load_ok(tmp_path("tiny.tiktoken"));
    EXPECT(tokenizer_vocab_size(t) == 259, "tiktoken V = %u", tokenizer_vocab_size(t));
    expect_ids(t, "abc", 0, IDS(258), "tiktoken whole word");
    expect_ids(t, "abcd", 0, IDS(258, 'd'), "tiktoken ab (256) before bc (257), then abc");
    expect_ids(t, "bcab", 0, IDS(257, 256), "tiktoken lowest rank first");
    expect_ids(t, "xbc", 0, IDS('x', 257), "tiktoken");
    EXPECT(tokenizer_bos_id(t) == -1 && tokenizer_chat_template(t) == CHAT_TEMPLATE_NONE,
           "a non-Llama-3 tiktoken file has no BOS or chat template");
    tokenizer_free(t);
}

static void test_gguf(void) {
    /* The tiny vocabulary again, as GGUF arrays. */
    static char tokbuf[270][32];
    const char *tokens[270];
    int32_t types[270];
    for (int b = 0; b < 256; b++) {
        char s[2] = {(char)b, 0};
        size_t n = tok_bytelevel_encode(tokbuf[b], (const uint8_t *)s, 1);
        tokbuf[b][n] = 0;
        types[b] = TOKEN_TYPE_BYTE;
    }
    const char *words[] = {"he", "ll", "hell", "hello", " w", "abc"};
    for (int i = 0; i < 6; i++) {
        snprintf(tokbuf[256 + i], 32, "%s", mapped(words[i]));
        types[256 + i] = TOKEN_TYPE_NORMAL;
    }
    const char *adds[] = {"<|x|>", "<y>", "<|x|>!", "<|im_start|>", "<|im_end|>", "<|start_header_id|>",
                          "<|end_header_id|>", "<|eot_id|>"};
    for (int i = 0; i < 8; i++) {
        snprintf(tokbuf[262 + i], 32, "%s", adds[i]);
        types[262 + i] = i == 1 ? TOKEN_TYPE_USER_DEFINED : TOKEN_TYPE_CONTROL;
    }
    for (int i = 0; i < 270; i++) tokens[i] = tokbuf[i];
    static char mbuf[5][32];
    const char *pairs[][2] = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}};
    const char *merges[5];
    for (int i = 0; i < 5; i++) {
        char a[16];
        snprintf(a, sizeof a, "%s", mapped(pairs[i][0]));
        snprintf(mbuf[i], 32, "%s %s", a, mapped(pairs[i][1]));
        merges[i] = mbuf[i];
    }
    struct tokenizer_gguf_kv kv = {.source = "tiny.gguf", .model = "gpt2", .pre = "smollm", .n_tokens = 270,
                                   .tokens = tokens, .token_type = types, .n_merges = 5, .merges = merges,
                                   .bos_id = ID_IM_START, .eos_id = ID_IM_END, .add_bos = 0,
                                   .chat_template = "{{ '<|im_start|>' + m }}"};
    struct io_err e;
    struct tokenizer *t = tokenizer_from_gguf_kv(&kv, &e);
    EXPECT(t != NULL, "gguf: %s", t ? "" : e.msg);
    if (t) {
        expect_ids(t, "hello world<|x|>", 0, IDS(ID_HELLO, ID_SP_W, 'o', 'r', 'l', 'd', ID_X), "gguf");
        /* pre "smollm": digits one by one */
        expect_ids(t, "a 123", 0, IDS('a', ' ', '1', '2', '3'), "gguf smollm digits");
        EXPECT(tokenizer_bos_id(t) == ID_IM_START && !tokenizer_adds_bos(t), "gguf bos / add_bos");
        EXPECT(tokenizer_chat_template(t) == CHAT_TEMPLATE_CHATML, "gguf chat template");
        tokenizer_free(t);
    }
    struct tokenizer_gguf_kv bad = kv;
    bad.model = "llama";
    EXPECT(!tokenizer_from_gguf_kv(&bad, &e) && strstr(e.msg, "tiny.gguf") && strstr(e.msg, "llama"),
           "gguf SentencePiece model rejected: %s", e.msg);
    bad = kv;
    bad.pre = "qwen2-unknown";
    EXPECT(!tokenizer_from_gguf_kv(&bad, &e) && strstr(e.msg, "qwen2-unknown"), "unknown pre rejected: %s", e.msg);
    bad = kv;
    bad.bos_id = 270;
    EXPECT(!tokenizer_from_gguf_kv(&bad, &e), "bos id out of range rejected");
    const char *bad_merges[] = {"h e", "q zz"};
    bad = kv;
    bad.merges = bad_merges;
    bad.n_merges = 2;
    EXPECT(!tokenizer_from_gguf_kv(&bad, &e) && strstr(e.msg, "merge 1"), "merge with unknown token: %s", e.msg);
    bad = kv;
    bad.n_tokens = 0;
    EXPECT(!tokenizer_from_gguf_kv(&bad, &e), "no tokens rejected");
}

static void test_chat(void) {
    /* Llama 3 */
    struct tiny_opts o = {.missing_byte = -1, .chat_template = "{{ '<|start_header_id|>' + role }}"};
    write_tiny(tmp_path("tiny"), &o);
    struct tokenizer *t = load_ok(tmp_path("tiny"));
    EXPECT(tokenizer_chat_template(t) == CHAT_TEMPLATE_LLAMA3, "Llama 3 template recognized");
    struct io_err e;
    struct chat_message m[] = {{"user", " hello <|eot_id|>", 17}, {"assistant", "hello\n", 6}};
    struct chat_tokens c = {0};
    int rc = tokenizer_apply_chat(t, m, 2, 0, &c, &e);
    EXPECT(rc == 0, "llama3 chat: %s", rc ? e.msg : "");
    if (rc == 0) {
        /* no BOS here (the tiny tokenizer has none): header, "user", header end, "\n\n",
         * trimmed "hello <|eot_id|>" as text, eot; then the assistant turn. */
        uint32_t want[] = {ID_HDR_START, 'u', 's', 'e', 'r', ID_HDR_END, 0x0a, 0x0a, ID_HELLO, ' ', '<', '|', 'e',
                           'o', 't', '_', 'i', 'd', '|', '>', ID_EOT, ID_HDR_START, 'a', 's', 's', 'i', 's', 't',
                           'a', 'n', 't', ID_HDR_END, 0x0a, 0x0a, ID_HELLO, ID_EOT};
        size_t nw = sizeof want / sizeof *want;
        /* "\n\n" is one pre-token of two newline bytes (no "\n\n" token in the tiny vocabulary) */
        EXPECT(c.n == nw && memcmp(c.ids, want, sizeof want) == 0, "llama3 chat ids (%zu, expected %zu)", c.n, nw);
        for (size_t i = 0; i < c.n && c.n == nw; i++)
            EXPECT(c.mask[i] == (i >= nw - 2), "llama3 chat mask[%zu] = %d", i, c.mask[i]);
    }
    rc = tokenizer_apply_chat(t, m, 1, CHAT_ADD_GENERATION_PROMPT, &c, &e);
    EXPECT(rc == 0 && c.n >= 3 && c.ids[c.n - 1] == '\n' && c.ids[c.n - 3] == ID_HDR_END,
           "generation prompt ends with <|end_header_id|>\\n\\n");
    for (size_t i = 0; rc == 0 && i < c.n; i++) EXPECT(c.mask[i] == 0, "no assistant turn, no mask");
    EXPECT(tokenizer_apply_chat(t, m, 0, 0, &c, &e) == -1 && strstr(e.msg, "no messages"), "zero messages: %s", e.msg);
    struct chat_message norole[] = {{"", "x", 1}};
    EXPECT(tokenizer_apply_chat(t, norole, 1, 0, &c, &e) == -1, "empty role rejected");
    /* ChatML with a default system turn */
    EXPECT(tokenizer_set_chat_template(t, CHAT_TEMPLATE_CHATML, &e) == 0, "set ChatML: %s", e.msg);
    rc = tokenizer_apply_chat(t, m + 1, 1, 0, &c, &e);
    if (rc == 0) {
        uint32_t want[] = {ID_IM_START, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n', ID_HELLO, '\n', ID_IM_END, '\n'};
        size_t nw = sizeof want / sizeof *want;
        EXPECT(c.n == nw && memcmp(c.ids, want, sizeof want) == 0, "chatml ids (%zu, expected %zu)", c.n, nw);
        for (size_t i = 0; i < c.n && c.n == nw; i++)
            EXPECT(c.mask[i] == (i >= 11 && i <= 13), "chatml mask[%zu] = %d", i, c.mask[i]);
    }
    chat_tokens_free(&c);
    tokenizer_free(t);
    /* no template */
    o.chat_template = NULL;
    write_tiny(tmp_path("tiny"), &o);
    t = load_ok(tmp_path("tiny"));
    EXPECT(tokenizer_apply_chat(t, m, 2, 0, &c, &e) == -1 && strstr(e.msg, "chat template"), "no template: %s", e.msg);
    tokenizer_free(t);
}

/* Every malformed file is NULL with a message naming the file and the problem. */
static void expect_load_error(const char *name, const char *content, const char *needle) {
    const char *path = tmp_path(name);
    if (content) write_text(path, content, strlen(content));
    struct io_err e;
    e.msg[0] = 0;
    struct tokenizer *t = tokenizer_load(path, &e);
    EXPECT(t == NULL, "%s: loaded although malformed", name);
    EXPECT(strstr(e.msg, name) != NULL && strstr(e.msg, needle) != NULL,
           "%s: message '%s' should name the file and say '%s'", name, e.msg, needle);
    tokenizer_free(t);
}

static void test_malformed(void) {
    expect_load_error("absent.json", NULL, "no such");
    expect_load_error("empty.json", "", "neither");
    expect_load_error("garbage.bin", "\x01\x02\x03 hello", "neither");
    expect_load_error("trunc.json", "{\"model\": {\"vocab\": {\"a\": 0", "not valid JSON");
    expect_load_error("nomodel.json", "{\"added_tokens\": []}", "model");
    expect_load_error("wordpiece.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}, \"merges\": []}}",
                      "WordPiece");
    expect_load_error("negid.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}",
                      "not an integer");
    expect_load_error("emptyvocab.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}", "empty");
    expect_load_error("badmerge.json",
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b c\"]}}",
                      "one space");
    expect_load_error("unkmerge.json",
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a q\"]}}",
                      "not in the vocabulary");
    expect_load_error("noresult.json",
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [[\"a\", \"b\"]]}}",
                      "produces");
    expect_load_error("dupid.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
                      "twice");
    expect_load_error("fewbytes.json",
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []},"
                      "\"decoder\": {\"type\": \"ByteLevel\"}}",
                      "256 bytes");
    expect_load_error("norm.json",
                      "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                      "\"merges\": []}}",
                      "normalizer");
    expect_load_error("pretok.json",
                      "{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
                      "{\"a\": 0}, \"merges\": []}}",
                      "Metaspace");
    expect_load_error("badregex.json",
                      "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": "
                      "\"Isolated\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                      "does not compile");
    expect_load_error("bytefallback.json",
                      "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 0}, \"merges\": []}}",
                      "byte_fallback");
    expect_load_error("addedbad.json",
                      "{\"added_tokens\": [{\"content\": \"x\"}], \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": "
                      "0}, \"merges\": []}}",
                      "added token");
    expect_load_error("tik_b64.tiktoken", "IQ== 0\n!!!! 1\n", "base64");
    expect_load_error("tik_rank.tiktoken", "IQ== 0\nIg== x\n", "line 2");
    expect_load_error("tik_dup.tiktoken", "IQ== 0\nIg== 0\n", "twice");
    /* tokenizer_config.json next to a valid tokenizer.json */
    struct tiny_opts o = {.missing_byte = -1};
    write_tiny(tmp_path("badcfg"), &o);
    const char *cfg = tmp_path("badcfg/tokenizer_config.json");
    struct io_err e;
    write_str(cfg, "{\"bos_token\": ");
    EXPECT(!tokenizer_load(tmp_path("badcfg"), &e) && strstr(e.msg, "tokenizer_config.json") && strstr(e.msg, "JSON"),
           "truncated tokenizer_config.json: %s", e.msg);
    write_str(cfg, "{\"eos_token\": \"<|nope|>\"}");
    EXPECT(!tokenizer_load(tmp_path("badcfg"), &e) && strstr(e.msg, "<|nope|>"), "unknown eos_token: %s", e.msg);
    write_str(cfg, "{\"bos_token\": 7}");
    EXPECT(!tokenizer_load(tmp_path("badcfg"), &e) && strstr(e.msg, "bos_token"), "numeric bos_token: %s", e.msg);
    write_str(cfg, "{\"bos_token\": {\"content\": \"<|x|>\"}, \"eos_token\": null, \"add_bos_token\": true}");
    struct tokenizer *t = tokenizer_load(tmp_path("badcfg"), &e);
    EXPECT(t && tokenizer_bos_id(t) == ID_X && tokenizer_eos_id(t) == -1 && tokenizer_adds_bos(t),
           "bos_token as {content}, eos_token null, add_bos_token: %s", t ? "" : e.msg);
    tokenizer_free(t);
    mkdir(tmp_path("emptydir"), 0755);
    expect_load_error("emptydir", NULL, "no tokenizer.json");
}

/* Truncated and byte-flipped copies of valid files: each either loads or fails with a message
 * naming the file; never a crash (run under --config=asan for the memory-safety half). */
static void test_corrupted(struct rng *r) {
    struct tiny_opts o = {.missing_byte = -1, .bos_template = 1};
    write_tiny(tmp_path("tiny"), &o);
    char srcs[2][700];
    snprintf(srcs[0], sizeof srcs[0], "%s", tmp_path("tiny/tokenizer.json"));
    snprintf(srcs[1], sizeof srcs[1], "%s", tmp_path("tiny.tiktoken"));
    for (int k = 0; k < 2; k++) {
        char *text;
        size_t len;
        struct io_err e;
        if (read_file_text(&text, &len, srcs[k], 1u << 24, &e)) io_exit(&e);
        int loaded = 0, failed = 0;
        for (int c = 0; c < 60; c++) {
            char *copy = malloc(len + 1);
            memcpy(copy, text, len);
            size_t n = len;
            if (c % 2 == 0) {
                n = (size_t)(rng_u64(r) % len);
            } else {
                for (int f = 0; f < 4; f++) copy[rng_u64(r) % len] = (char)(rng_u64(r) & 0xFF);
            }
            const char *path = tmp_path(k == 0 ? "corrupt.json" : "corrupt.tiktoken");
            write_text(path, copy, n);
            free(copy);
            e.msg[0] = 0;
            struct tokenizer *t = tokenizer_load(path, &e);
            if (t) {
                loaded++;
                struct tok_ids ids = {0};
                tokenizer_encode(t, "hello <|x|> world", 17, TOKENIZER_ADD_BOS, &ids);
                tok_ids_free(&ids);
                tokenizer_free(t);
            } else {
                failed++;
                EXPECT(strstr(e.msg, path) != NULL, "corrupted %s: message '%s' does not name the file", path, e.msg);
            }
        }
        EXPECT(failed > 0, "corrupted copies of %s were all accepted", srcs[k]);
        printf("corrupted copies of %s: %d loaded, %d rejected\n", strrchr(srcs[k], '/') + 1, loaded, failed);
        free(text);
    }
}

int main(int argc, char **argv) {
    uint64_t seed = test_seed(argc, argv, 5);
    struct rng r;
    rng_init(&r, seed);
    const char *tmp = getenv("TEST_TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/tokenizer_test", tmp && tmp[0] ? tmp : "/tmp");
    mkdir(g_dir, 0755);
    test_bpe_rules();
    test_added_tokens();
    test_missing_byte();
    test_against_model();
    test_round_trips(&r);
    test_tiktoken();
    test_gguf();
    test_chat();
    test_malformed();
    test_corrupted(&r);
    return test_finish("tokenizer_test");
}
