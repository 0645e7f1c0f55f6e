/* tokenizer_golden_test.c — io/tokenizer against the reference tokenizers' ids
 * (tests/golden/gen/gen_tokens.py: HF tokenizers, tiktoken, transformers apply_chat_template).
 *
 *   SmolLM2 (committed fixture tests/golden/data/tokenizer/smollm2/): every string's ids equal
 *     HF tokenizers'; decode gives the string back; the same through tokenizer_from_gguf_kv fed
 *     with the fixture's tokens, types and merges (pre "smollm"); ChatML conversations equal
 *     apply_chat_template, and the loss mask selects exactly the assistant turns.
 *   SmolLM2 from the real GGUF ($REFINE_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by
 *     tools/setup.sh) through io/model_source: the same ids and conversations. Skipped, with a
 *     message, when the cached file is absent.
 *   Llama 3 (Meta's tokenizer.model in $REFINE_CACHE/tokenizers/llama3.tiktoken, fetched by
 *     tools/setup.sh): ids equal tiktoken's with Meta's pattern and specials; Llama 3 chat
 *     conversations equal apply_chat_template. Also the HF tokenizer.json when
 *     $REFINE_CACHE/tokenizers/llama3/tokenizer.json exists. Skipped, with a message, when the
 *     cached file is absent.
 *   Each of them written as HF files (tokenizer_write_hf: a merged model folder's tokenizer) and
 *     read back: the same ids for every string and conversation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cJSON.h"
#include "io/error.h"
#include "io/file.h"
#include "io/model_source.h"
#include "io/tokenizer.h"
#include "tests/common/harness.h"
#include "train/options.h" /* train_cache_dir */

#define DATA "tests/golden/data/tokenizer/"

static cJSON *g_data;
static char **g_strings;
static size_t *g_lens;
static int g_n;

static int hexval(int c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

static void load_data(void) {
    char *text;
    size_t len;
    struct io_err e;
    if (read_file_text(&text, &len, DATA "tokens.json", 64u << 20, &e)) io_exit(&e);
    g_data = cJSON_ParseWithLength(text, len);
    free(text);
    if (!g_data) {
        fprintf(stderr, "tokens.json is not valid JSON\n");
        exit(1);
    }
    const cJSON *strings = cJSON_GetObjectItem(g_data, "strings");
    g_n = cJSON_GetArraySize(strings);
    g_strings = calloc((size_t)g_n, sizeof *g_strings);
    g_lens = calloc((size_t)g_n, sizeof *g_lens);
    for (int i = 0; i < g_n; i++) {
        const char *h = cJSON_GetArrayItem(strings, i)->valuestring;
        size_t n = strlen(h) / 2;
        g_strings[i] = malloc(n + 1);
        for (size_t k = 0; k < n; k++) g_strings[i][k] = (char)(hexval(h[2 * k]) << 4 | hexval(h[2 * k + 1]));
        g_strings[i][n] = 0;
        g_lens[i] = n;
    }
}

static int ids_equal(const uint32_t *got, size_t n, const cJSON *want) {
    if ((size_t)cJSON_GetArraySize(want) != n) return 0;
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, want) if (got[i++] != (uint32_t)it->valuedouble) return 0;
    return 1;
}

static void print_ids(const char *what, const uint32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %u", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* Encodes every string and compares with data[key]; decode must give the string back. */
static void check_strings(struct tokenizer *t, const char *name, const char *key, int skip_reserved) {
    const cJSON *want = cJSON_GetObjectItem(g_data, key);
    struct tok_ids ids = {0};
    struct tok_bytes back = {0};
    int bad = 0;
    /* Bytes the vocabulary has no token for are dropped by encode (as by HF's BPE). */
    uint8_t dropped[256];
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        ids.n = 0;
        dropped[b] = tokenizer_encode(t, &c, 1, TOKENIZER_SPLIT_SPECIAL, &ids) == 0;
    }
    for (int i = 0; i < g_n; i++) {
        if (skip_reserved && strstr(g_strings[i], "reserved_special")) continue;
        ids.n = 0;
        tokenizer_encode(t, g_strings[i], g_lens[i], 0, &ids);
        const cJSON *w = cJSON_GetArrayItem(want, i);
        int ok = ids_equal(ids.ids, ids.n, w);
        EXPECT(ok, "%s: string %d ('%.60s') tokenizes differently from the reference", name, i, g_strings[i]);
        if (!ok && bad++ < 3) {
            print_ids("got ", ids.ids, ids.n);
            uint32_t ref[512];
            size_t n = 0;
            const cJSON *it;
            cJSON_ArrayForEach(it, w) if (n < 512) ref[n++] = (uint32_t)it->valuedouble;
            print_ids("want", ref, n);
        }
        struct io_err e;
        int rc = tokenizer_decode(t, ids.ids, ids.n, 0, &back, &e);
        char *kept = malloc(g_lens[i] + 1);
        size_t nk = 0;
        for (size_t k = 0; k < g_lens[i]; k++)
            if (!dropped[(uint8_t)g_strings[i][k]]) kept[nk++] = g_strings[i][k];
        EXPECT(rc == 0 && back.n == nk && memcmp(back.data, kept, nk) == 0,
               "%s: decode(encode(string %d)) is not the string", name, i);
        free(kept);
    }
    printf("%s: %d strings compared\n", name, g_n);
    tok_ids_free(&ids);
    tok_bytes_free(&back);
}

/* Conversations of data["chat"] for this tokenizer: ids equal apply_chat_template; the masked
 * tokens decode to the assistant contents (trimmed for Llama 3) each followed by its end token. */
static void check_chat(struct tokenizer *t, const char *name, const char *key) {
    const cJSON *conv;
    int count = 0;
    struct tok_bytes got = {0};
    cJSON_ArrayForEach(conv, cJSON_GetObjectItem(g_data, "chat")) {
        if (strcmp(cJSON_GetObjectItem(conv, "tokenizer")->valuestring, key) != 0) continue;
        const cJSON *msgs = cJSON_GetObjectItem(conv, "messages");
        int n = cJSON_GetArraySize(msgs);
        struct chat_message m[16];
        char want_text[4096];
        size_t wn = 0;
        const char *end_tok = strcmp(key, "llama3") == 0 ? "<|eot_id|>" : "<|im_end|>";
        for (int i = 0; i < n && i < 16; i++) {
            const cJSON *mi = cJSON_GetArrayItem(msgs, i);
            m[i].role = cJSON_GetObjectItem(mi, "role")->valuestring;
            m[i].content = cJSON_GetObjectItem(mi, "content")->valuestring;
            m[i].content_len = strlen(m[i].content);
            if (strcmp(m[i].role, "assistant") == 0) {
                const char *c = m[i].content;
                size_t cl = m[i].content_len;
                if (strcmp(key, "llama3") == 0) { /* |trim, ASCII whitespace in these cases */
                    while (cl && strchr(" \t\n\r", c[0])) c++, cl--;
                    while (cl && strchr(" \t\n\r", c[cl - 1])) cl--;
                }
                memcpy(want_text + wn, c, cl);
                wn += cl;
                memcpy(want_text + wn, end_tok, strlen(end_tok));
                wn += strlen(end_tok);
            }
        }
        int gen = cJSON_IsTrue(cJSON_GetObjectItem(conv, "add_generation_prompt"));
        struct chat_tokens ct = {0};
        struct io_err e;
        int rc = tokenizer_apply_chat(t, m, (size_t)n, gen ? CHAT_ADD_GENERATION_PROMPT : 0, &ct, &e);
        EXPECT(rc == 0, "%s: chat %d: %s", name, count, rc ? e.msg : "");
        if (rc == 0) {
            int ok = ids_equal(ct.ids, ct.n, cJSON_GetObjectItem(conv, "ids"));
            EXPECT(ok, "%s: conversation %d tokenizes differently from apply_chat_template", name, count);
            if (!ok) print_ids("got ", ct.ids, ct.n);
            uint32_t *sel = malloc((ct.n + 1) * sizeof *sel);
            size_t ns = 0;
            for (size_t i = 0; i < ct.n; i++)
                if (ct.mask[i]) sel[ns++] = ct.ids[i];
            rc = tokenizer_decode(t, sel, ns, 0, &got, &e);
            EXPECT(rc == 0 && got.n == wn && memcmp(got.data, want_text, wn) == 0,
                   "%s: conversation %d: the loss mask does not select exactly the assistant turns "
                   "(got '%.200s')", name, count, rc == 0 ? got.data : e.msg);
            free(sel);
        }
        chat_tokens_free(&ct);
        count++;
    }
    tok_bytes_free(&got);
    EXPECT(count > 0, "%s: no conversations in the fixture", name);
    printf("%s: %d conversations compared\n", name, count);
}

/* Feeds tokenizer_from_gguf_kv what a GGUF file holds, taken from a loaded tokenizer.json: token
 * strings by id, CONTROL types for special tokens, merges as "a b" strings in rank order. */
static void check_gguf_path(const struct tokenizer *ref) {
    char *text;
    size_t len;
    struct io_err e;
    if (read_file_text(&text, &len, DATA "smollm2/tokenizer.json", 64u << 20, &e)) io_exit(&e);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges");
    uint32_t V = tokenizer_vocab_size(ref);
    const char **tokens = calloc(V, sizeof *tokens);
    uint64_t *lens = calloc(V, sizeof *lens);
    int32_t *types = calloc(V, sizeof *types);
    for (uint32_t i = 0; i < V; i++) {
        size_t l = 0;
        tokens[i] = tokenizer_id_to_token(ref, i, &l);
        lens[i] = l;
        types[i] = tokenizer_is_special(ref, i) ? TOKEN_TYPE_CONTROL : TOKEN_TYPE_NORMAL;
    }
    size_t nm = (size_t)cJSON_GetArraySize(merges);
    const char **ms = calloc(nm, sizeof *ms);
    size_t k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) ms[k++] = it->valuestring;
    struct tokenizer_gguf_kv kv = {
        .source = "smollm2 (GGUF form)", .model = "gpt2", .pre = "smollm", .n_tokens = V, .tokens = tokens,
        .token_lens = lens, .token_type = types, .n_merges = nm, .merges = ms, .bos_id = 1, .eos_id = 2,
        .add_bos = 0, .chat_template = "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'}}"};
    struct tokenizer *t = tokenizer_from_gguf_kv(&kv, &e);
    EXPECT(t != NULL, "tokenizer_from_gguf_kv: %s", t ? "" : e.msg);
    if (t) {
        EXPECT(tokenizer_bos_id(t) == 1 && tokenizer_eos_id(t) == 2 && !tokenizer_adds_bos(t),
               "GGUF path: bos/eos/add_bos not taken from the metadata");
        EXPECT(tokenizer_chat_template(t) == CHAT_TEMPLATE_CHATML, "GGUF path: ChatML template not recognized");
        check_strings(t, "smollm2 via GGUF metadata", "smollm2", 0);
        tokenizer_free(t);
    }
    free(tokens);
    free(lens);
    free(types);
    free(ms);
    cJSON_Delete(root);
}

/* The tokenizer written as HF files (tokenizer_write_hf) and read back: the same vocabulary, specials,
 * template and ids for every string and conversation (what a merged model folder carries). A
 * tokenizer without template text (tiktoken's: Llama 3's chat is known by its special tokens)
 * writes none (has_template 0): the copy then has no chat template. */
static void check_written(const struct tokenizer *t, const char *name, const char *key, int skip_reserved,
                          int has_template) {
    char dir[1100];
    const char *base = getenv("TEST_TMPDIR");
    snprintf(dir, sizeof dir, "%s/tok_written_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(dir)) {
        EXPECT(0, "%s written: cannot create %s", name, dir);
        return;
    }
    struct io_err e;
    char what[160], path[1200];
    snprintf(what, sizeof what, "%s (written as tokenizer.json)", name);
    const int rc = tokenizer_write_hf(t, dir, &e);
    EXPECT(rc == 0, "%s: %s", what, rc == 0 ? "" : e.msg);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    struct tokenizer *w = rc == 0 ? tokenizer_load(path, &e) : NULL;
    EXPECT(rc != 0 || w != NULL, "%s: reading it back: %s", what, w ? "" : e.msg);
    if (w) {
        EXPECT(tokenizer_vocab_size(w) == tokenizer_vocab_size(t) && tokenizer_bos_id(w) == tokenizer_bos_id(t) &&
                   tokenizer_eos_id(w) == tokenizer_eos_id(t) && tokenizer_adds_bos(w) == tokenizer_adds_bos(t) &&
                   tokenizer_chat_template(w) == (has_template ? tokenizer_chat_template(t) : CHAT_TEMPLATE_NONE),
               "%s: V, bos/eos, add_bos or chat template differ from the tokenizer written", what);
        check_strings(w, what, key, skip_reserved);
        if (has_template) check_chat(w, what, key);
        tokenizer_free(w);
    }
    remove(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    remove(path);
    rmdir(dir);
}

static void cache_path(char *buf, size_t cap, const char *rel) {
    char cache[1024];
    train_cache_dir(cache, sizeof cache);
    snprintf(buf, cap, "%s/%s", cache, rel);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --bench: encode ≥ 10 MB (the cached KJV corpus repeated) with each tokenizer, one thread. */
static void bench(void) {
    char path[1200];
    cache_path(path, sizeof path, "corpus/kjv.txt");
    char *text;
    size_t len;
    struct io_err e;
    if (read_file_text(&text, &len, path, 1u << 30, &e)) io_exit(&e);
    size_t reps = (10u << 20) / len + 1, n = reps * len;
    char *big = malloc(n);
    for (size_t r = 0; r < reps; r++) memcpy(big + r * len, text, len);
    free(text);
    const char *paths[2] = {DATA "smollm2", NULL};
    char l3[1200];
    cache_path(l3, sizeof l3, "tokenizers/llama3.tiktoken");
    paths[1] = l3;
    for (int k = 0; k < 2; k++) {
        double t0 = now_s();
        struct tokenizer *t = tokenizer_load(paths[k], &e);
        if (!t) io_exit(&e);
        double t1 = now_s();
        struct tok_ids ids = {0};
        tokenizer_encode(t, big, n, 0, &ids);
        double t2 = now_s();
        printf("bench %s: load %.2f s; encode %.1f MB -> %zu ids in %.2f s (%.1f MB/s)\n", paths[k], t1 - t0,
               (double)n / 1e6, ids.n, t2 - t1, (double)n / 1e6 / (t2 - t1));
        tok_ids_free(&ids);
        tokenizer_free(t);
    }
    free(big);
}

int main(int argc, char **argv) {
    load_data();
    struct io_err e;
    if (test_has_flag(argc, argv, "--bench")) {
        bench();
        return 0;
    }

    struct tokenizer *smol = tokenizer_load(DATA "smollm2", &e);
    EXPECT(smol != NULL, "smollm2: %s", smol ? "" : e.msg);
    if (smol) {
        EXPECT(tokenizer_vocab_size(smol) == 49152, "smollm2: V = %u, expected 49152", tokenizer_vocab_size(smol));
        EXPECT(tokenizer_bos_id(smol) == 1 && tokenizer_eos_id(smol) == 2, "smollm2: bos/eos ids");
        EXPECT(!tokenizer_adds_bos(smol), "smollm2 does not prepend BOS");
        EXPECT(tokenizer_chat_template(smol) == CHAT_TEMPLATE_CHATML, "smollm2: ChatML template not recognized");
        check_strings(smol, "smollm2", "smollm2", 0);
        check_chat(smol, "smollm2 chat", "smollm2");
        check_gguf_path(smol);
        check_written(smol, "smollm2", "smollm2", 0, 1);
        tokenizer_free(smol);
    }

    char path[1200];
    cache_path(path, sizeof path, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!file_exists(path)) {
        printf("SKIP smollm2 (GGUF): %s is absent; run tools/setup.sh to fetch it\n", path);
    } else {
        struct model_source src;
        struct tokenizer *t = NULL;
        if (model_source_open(&src, path, &e) == 0) {
            t = model_source_tokenizer(&src, &e);
            model_source_close(&src);
        }
        EXPECT(t != NULL, "smollm2 GGUF: %s", t ? "" : e.msg);
        if (t) {
            EXPECT(tokenizer_vocab_size(t) == 49152 && tokenizer_bos_id(t) == 1 && tokenizer_eos_id(t) == 2 &&
                       !tokenizer_adds_bos(t) && tokenizer_chat_template(t) == CHAT_TEMPLATE_CHATML,
                   "smollm2 GGUF: V, bos/eos, add_bos or chat template differ from the GGUF metadata");
            check_strings(t, "smollm2 (GGUF)", "smollm2", 0);
            check_chat(t, "smollm2 chat (GGUF)", "smollm2");
            check_written(t, "smollm2 (GGUF)", "smollm2", 0, 1);
            tokenizer_free(t);
        }
    }
    cache_path(path, sizeof path, "tokenizers/llama3.tiktoken");
    if (!file_exists(path)) {
        printf("SKIP llama3 (tiktoken): %s is absent; run tools/setup.sh to fetch it\n", path);
    } else {
        struct tokenizer *t = tokenizer_load(path, &e);
        EXPECT(t != NULL, "llama3 tiktoken: %s", t ? "" : e.msg);
        if (t) {
            EXPECT(tokenizer_vocab_size(t) == 128256, "llama3: V = %u", tokenizer_vocab_size(t));
            EXPECT(tokenizer_bos_id(t) == 128000 && tokenizer_eos_id(t) == 128001, "llama3: bos/eos ids");
            EXPECT(tokenizer_token_to_id(t, "<|eot_id|>", 10) == 128009, "llama3: <|eot_id|> is not 128009");
            EXPECT(tokenizer_adds_bos(t), "llama3 prepends BOS");
            check_strings(t, "llama3 (tiktoken)", "llama3", 0);
            check_chat(t, "llama3 chat (tiktoken)", "llama3");
            check_written(t, "llama3 (tiktoken)", "llama3", 0, 0);
            tokenizer_free(t);
        }
    }
    cache_path(path, sizeof path, "tokenizers/llama3/tokenizer.json");
    if (!file_exists(path)) {
        printf("SKIP llama3 (tokenizer.json): %s is absent (optional)\n", path);
    } else {
        struct tokenizer *t = tokenizer_load(path, &e);
        EXPECT(t != NULL, "llama3 tokenizer.json: %s", t ? "" : e.msg);
        if (t) {
            /* Same ids as tiktoken except strings naming reserved specials (named differently). */
            check_strings(t, "llama3 (tokenizer.json)", "llama3", 1);
            check_chat(t, "llama3 chat (tokenizer.json)", "llama3");
            tokenizer_free(t);
        }
    }
    for (int i = 0; i < g_n; i++) free(g_strings[i]);
    free(g_strings);
    free(g_lens);
    cJSON_Delete(g_data);
    return test_finish("tokenizer_golden_test");
}
