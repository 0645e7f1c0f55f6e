/* tokenizer_load.c — building a tokenizer from an HF tokenizer.json (+ tokenizer_config.json), a
 * tiktoken rank file, or GGUF metadata (io/tokenizer.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/file.h"
#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"

#define TOKENIZER_MAX_BYTES ((size_t)1 << 30)

/* ---- shared ------------------------------------------------------------------------------ */

static int merges_add(struct tokenizer *t, const char *a, size_t la, const char *b, size_t lb,
                      uint32_t rank, const char *src, struct io_err *e) {
    uint32_t ia, ib, im;
    if (!tok_strmap_get(&t->by_str, a, la, &ia) || !tok_strmap_get(&t->by_str, b, lb, &ib))
        return io_fail(e, "%s: merge %u ('%.*s' '%.*s') names a token that is not in the vocabulary",
                       src, rank, (int)(la > 40 ? 40 : la), a, (int)(lb > 40 ? 40 : lb), b);
    char buf[1024];
    if (la + lb > sizeof buf) return io_fail(e, "%s: merge %u is too long", src, rank);
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    if (!tok_strmap_get(&t->by_str, buf, la + lb, &im))
        return io_fail(e, "%s: merge %u ('%.*s' '%.*s') produces '%.*s', which is not in the vocabulary",
                       src, rank, (int)(la > 40 ? 40 : la), a, (int)(lb > 40 ? 40 : lb), b,
                       (int)(la + lb > 80 ? 80 : la + lb), buf);
    tok_pairmap_put(&t->merges, ia, ib, rank, im);
    return 0;
}

/* "a b" (legacy merges string): exactly one space separates two non-empty tokens. */
static int merge_string(struct tokenizer *t, const char *s, size_t n, uint32_t rank,
                        const char *src, struct io_err *e) {
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
        return io_fail(e, "%s: merge %u '%.*s' is not two tokens separated by one space", src, rank,
                       (int)(n > 80 ? 80 : n), s);
    return merges_add(t, s, (size_t)(sp - s), sp + 1, (size_t)(s + n - sp - 1), rank, src, e);
}

static void tok_set_bos_eos_by_name(struct tokenizer *t, const char *bos, const char *eos) {
    if (bos) {
        int64_t id = tokenizer_token_to_id(t, bos, strlen(bos));
        if (id >= 0) t->bos_id = id;
    }
    if (eos) {
        int64_t id = tokenizer_token_to_id(t, eos, strlen(eos));
        if (id >= 0) t->eos_id = id;
    }
}

/* ---- tokenizer.json ---------------------------------------------------------------------- */

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int json_true(const cJSON *o, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static int json_is_null_or_absent(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return !v || cJSON_IsNull(v);
}

/* Pre-tokenizers: regexes appended in order; *bytelevel set when a ByteLevel step is seen. */
static int parse_pre_tokenizer(struct tokenizer *t, const cJSON *p, int *bytelevel, const char *src,
                               struct io_err *e) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = json_str(p, "type");
    if (!type) return io_fail(e, "%s: pre_tokenizer has no \"type\"", src);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return io_fail(e, "%s: Sequence pre_tokenizer has no \"pretokenizers\" list", src);
        const cJSON *it;
        cJSON_ArrayForEach(it, list) if (parse_pre_tokenizer(t, it, bytelevel, src, e)) return -1;
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const char *behavior = json_str(p, "behavior");
        if (!behavior || strcmp(behavior, "Isolated") != 0)
            return io_fail(e, "%s: Split pre_tokenizer behavior '%s' is not supported (only \"Isolated\")",
                           src, behavior ? behavior : "(none)");
        if (json_true(p, "invert")) return io_fail(e, "%s: Split pre_tokenizer with invert: true is not supported", src);
        const char *re = json_str(pat, "Regex");
        const char *lit = json_str(pat, "String");
        if (re) return tok_add_regex(t, re, src, e);
        if (lit) {
            size_t n = strlen(lit);
            char *q = malloc(n + 5);
            CHECK(q, "out of memory");
            snprintf(q, n + 5, "\\Q%s\\E", lit);
            int rc = strstr(lit, "\\E") ? io_fail(e, "%s: Split pattern string contains \\E", src)
                                         : tok_add_regex(t, q, src, e);
            free(q);
            return rc;
        }
        return io_fail(e, "%s: Split pre_tokenizer has no \"pattern\" {\"Regex\"} or {\"String\"}", src);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (json_true(p, "add_prefix_space"))
            return io_fail(e, "%s: ByteLevel pre_tokenizer with add_prefix_space: true is not supported", src);
        *bytelevel = 1;
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
        if (!ur || cJSON_IsTrue(ur)) return tok_add_regex(t, TOK_RE_GPT2, src, e);
        return 0;
    }
    if (strcmp(type, "Digits") == 0)
        return tok_add_regex(t, json_true(p, "individual_digits") ? TOK_RE_DIGITS : "\\p{N}+", src, e);
    return io_fail(e, "%s: pre_tokenizer type '%s' is not supported (Split, ByteLevel, Digits, Sequence)",
                   src, type);
}

static int parse_post_processor(struct tokenizer *t, const cJSON *p, const char *src, struct io_err *e) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = json_str(p, "type");
    if (!type) return io_fail(e, "%s: post_processor has no \"type\"", src);
    if (strcmp(type, "ByteLevel") == 0) return 0; /* offsets only */
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(p, "processors"))
            if (parse_post_processor(t, it, src, e)) return -1;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return io_fail(e, "%s: post_processor type '%s' is not supported (ByteLevel, TemplateProcessing)", src, type);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
    if (!cJSON_IsArray(single)) return io_fail(e, "%s: TemplateProcessing has no \"single\" list", src);
    int i = 0, seen_a = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        if (sq && !seen_a) {
            seen_a = 1;
        } else if (sp && i == 0) {
            const char *name = json_str(sp, "id");
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "special_tokens"), name ? name : "");
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(st, "ids");
            if (!name || cJSON_GetArraySize(ids) != 1 || !cJSON_IsNumber(cJSON_GetArrayItem(ids, 0)))
                return io_fail(e, "%s: TemplateProcessing special token '%s' has no single id", src, name ? name : "");
            double v = cJSON_GetArrayItem(ids, 0)->valuedouble;
            if (v < 0 || v >= t->V) return io_fail(e, "%s: TemplateProcessing id %g is out of range", src, v);
            t->bos_id = (int64_t)v;
            t->adds_bos = 1;
        } else {
            return io_fail(e, "%s: TemplateProcessing \"single\" must be [optional leading special token, $A]", src);
        }
        i++;
    }
    return 0;
}

/* tokenizer_config.json next to the tokenizer.json: bos/eos, add_bos_token, chat_template. */
static int read_tokenizer_config(struct tokenizer *t, const char *json_path, int bos_from_post,
                                 struct io_err *e) {
    const char *slash = strrchr(json_path, '/');
    int dir_len = slash ? (int)(slash - json_path + 1) : 0;
    char cfg_path[1200];
    if (dir_len > 1100) return 0;
    snprintf(cfg_path, sizeof cfg_path, "%.*stokenizer_config.json", dir_len, json_path);
    char *text = NULL;
    size_t len;
    if (!file_exists(cfg_path)) return 0;
    if (read_file_text(&text, &len, cfg_path, 64u << 20, e)) return -1;
    cJSON *c = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(c)) {
        cJSON_Delete(c);
        return io_fail(e, "%s: not a JSON object", cfg_path);
    }
    const char *keys[2] = {"bos_token", "eos_token"};
    int64_t *ids[2] = {&t->bos_id, &t->eos_id};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, keys[k]);
        const char *name = cJSON_IsString(v) ? v->valuestring : json_str(v, "content");
        if (v && !cJSON_IsNull(v) && !name) {
            cJSON_Delete(c);
            return io_fail(e, "%s: \"%s\" is neither a string nor {\"content\": string}", cfg_path, keys[k]);
        }
        if (!name || (k == 0 && bos_from_post)) continue;
        int64_t id = tokenizer_token_to_id(t, name, strlen(name));
        if (id < 0) {
            io_fail(e, "%s: %s '%.80s' is not a token of %s", cfg_path, keys[k], name, json_path);
            cJSON_Delete(c);
            return -1;
        }
        *ids[k] = id;
    }
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(c, "add_bos_token");
    if (cJSON_IsBool(ab)) t->adds_bos = cJSON_IsTrue(ab);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(c, "chat_template");
    if (cJSON_IsString(ct)) {
        tok_detect_chat_template(t, ct->valuestring);
    } else if (cJSON_IsArray(ct)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, ct) {
            const char *name = json_str(it, "name");
            if (name && strcmp(name, "default") == 0) tok_detect_chat_template(t, json_str(it, "template"));
        }
    }
    cJSON_Delete(c);
    return 0;
}

static struct tokenizer *load_json(const char *path, const char *text, size_t len, struct io_err *e) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        io_fail(e, "%s: not valid JSON (near byte %zu)", path, (size_t)(cJSON_GetErrorPtr() - text));
        return NULL;
    }
    struct tokenizer *t = NULL;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const char *mtype = json_str(model, "type");
    const cJSON *it;
    if (!cJSON_IsObject(model) || !cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        io_fail(e, "%s: expected a tokenizer.json with \"model\": {\"vocab\": {...}, \"merges\": [...]}", path);
        goto fail;
    }
    if (mtype && strcmp(mtype, "BPE") != 0) {
        io_fail(e, "%s: model type '%s' is not supported (only byte-level \"BPE\")", path, mtype);
        goto fail;
    }
    if (json_true(model, "byte_fallback") || !json_is_null_or_absent(model, "dropout")) {
        io_fail(e, "%s: BPE with byte_fallback or dropout is not supported", path);
        goto fail;
    }
    const char *cs = json_str(model, "continuing_subword_prefix"), *ew = json_str(model, "end_of_word_suffix");
    if ((cs && *cs) || (ew && *ew)) {
        io_fail(e, "%s: BPE continuing_subword_prefix / end_of_word_suffix are not supported", path);
        goto fail;
    }
    if (!json_is_null_or_absent(root, "normalizer")) {
        io_fail(e, "%s: normalizers are not supported (byte-level BPE tokenizers have none)", path);
        goto fail;
    }
    if (added && !cJSON_IsArray(added)) {
        io_fail(e, "%s: \"added_tokens\" is not a list", path);
        goto fail;
    }
    /* V = 1 + the largest id. */
    double max_id = -1;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 16777215 ||
            it->valuedouble != (double)(int64_t)it->valuedouble) {
            io_fail(e, "%s: vocab entry '%.60s' has id that is not an integer in [0, 2^24)", path, it->string);
            goto fail;
        }
        if (it->valuedouble > max_id) max_id = it->valuedouble;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777215 || !json_str(it, "content")) {
            io_fail(e, "%s: an added token lacks an integer \"id\" in [0, 2^24) or a \"content\" string", path);
            goto fail;
        }
        if (json_true(it, "lstrip") || json_true(it, "rstrip") || json_true(it, "single_word")) {
            io_fail(e, "%s: added token '%.60s' uses lstrip/rstrip/single_word, which is not supported", path,
                    json_str(it, "content"));
            goto fail;
        }
        if (id->valuedouble > max_id) max_id = id->valuedouble;
    }
    if (max_id < 0) {
        io_fail(e, "%s: the vocabulary is empty", path);
        goto fail;
    }
    t = tok_new((uint32_t)max_id + 1);
    t->ignore_merges = json_true(model, "ignore_merges");
    char *buf = malloc(4096);
    CHECK(buf, "out of memory");
    cJSON_ArrayForEach(it, vocab) {
        size_t sl = strlen(it->string);
        if (sl > 4096) {
            free(buf);
            io_fail(e, "%s: vocab entry of %zu bytes is too long", path, sl);
            goto fail;
        }
        size_t bl = tok_bytelevel_decode(buf, it->string, sl);
        if (tok_set(t, (uint32_t)it->valuedouble, it->string, sl, buf, bl, 0, path, e)) {
            free(buf);
            goto fail;
        }
    }
    free(buf);
    cJSON_ArrayForEach(it, added) {
        const char *content = json_str(it, "content");
        uint32_t flags = TOK_ADDED | (json_true(it, "special") ? TOK_SPECIAL : 0);
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        if (tok_set(t, id, content, strlen(content), content, strlen(content), flags, path, e)) goto fail;
    }
    tok_pairmap_init(&t->merges, (size_t)cJSON_GetArraySize(merges));
    uint32_t rank = 0;
    cJSON_ArrayForEach(it, merges) {
        int rc;
        if (cJSON_IsString(it)) {
            rc = merge_string(t, it->valuestring, strlen(it->valuestring), rank, path, e);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            const char *a = cJSON_GetArrayItem(it, 0)->valuestring, *b = cJSON_GetArrayItem(it, 1)->valuestring;
            rc = merges_add(t, a, strlen(a), b, strlen(b), rank, path, e);
        } else {
            rc = io_fail(e, "%s: merge %u is neither \"a b\" nor [\"a\", \"b\"]", path, rank);
        }
        if (rc) goto fail;
        rank++;
    }
    int bytelevel = 0;
    if (parse_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &bytelevel, path, e))
        goto fail;
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    const char *dtype = json_str(dec, "type");
    if (dec && !cJSON_IsNull(dec) && (!dtype || strcmp(dtype, "ByteLevel") != 0)) {
        io_fail(e, "%s: decoder type '%s' is not supported (only ByteLevel)", path, dtype ? dtype : "(none)");
        goto fail;
    }
    if (!bytelevel && !dtype) {
        io_fail(e, "%s: not a byte-level BPE tokenizer (no ByteLevel pre-tokenizer or decoder)", path);
        goto fail;
    }
    if (parse_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), path, e)) goto fail;
    int bos_from_post = t->adds_bos;
    /* Defaults by name, then tokenizer_config.json. Llama 3 prepends <|begin_of_text|> unless its
     * config says otherwise (its post-processor does so in Meta's releases). */
    tok_set_bos_eos_by_name(t, "<|begin_of_text|>", "<|end_of_text|>");
    if (!bos_from_post && t->bos_id >= 0) t->adds_bos = 1;
    if (read_tokenizer_config(t, path, bos_from_post, e)) goto fail;
    if (tok_finish(t, path, e)) goto fail;
    cJSON_Delete(root);
    return t;
fail:
    tokenizer_free(t);
    cJSON_Delete(root);
    return NULL;
}

/* ---- tiktoken ---------------------------------------------------------------------------- */

static int b64_value(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes base64 s[0..n) (with '=' padding) into out; returns the length or -1. */
static long b64_decode(uint8_t *out, const char *s, size_t n) {
    if (n == 0 || n % 4) return -1;
    long k = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            if (s[i + j] == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
            } else if (pad || (v[j] = b64_value((unsigned char)s[i + j])) < 0) {
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[k++] = (uint8_t)(w >> 16);
        if (pad < 2) out[k++] = (uint8_t)(w >> 8);
        if (pad < 1) out[k++] = (uint8_t)w;
    }
    return k;
}

static const char *const LLAMA3_SPECIAL[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
    "<|image|>",
};
#define LLAMA3_N_SPECIAL 256

/* The decimal rank in s[0..n): all digits, < 2^24; -1 otherwise. (Not strtol: the text is
 * one big buffer, not a string per line.) */
static long parse_rank(const char *s, size_t n) {
    if (n == 0 || n > 8) return -1;
    long r = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        r = 10 * r + (s[i] - '0');
    }
    return r < (1L << 24) ? r : -1;
}

static int looks_like_tiktoken(const char *text, size_t len) {
    size_t i = 0;
    while (i < len && b64_value((unsigned char)text[i]) >= 0) i++;
    while (i < len && text[i] == '=') i++;
    if (i == 0 || i >= len || text[i] != ' ') return 0;
    i++;
    size_t d = i;
    while (i < len && text[i] >= '0' && text[i] <= '9') i++;
    return i > d && (i == len || text[i] == '\n' || text[i] == '\r');
}

static struct tokenizer *load_tiktoken(const char *path, const char *text, size_t len, struct io_err *e) {
    /* First pass: count lines and the largest rank. */
    size_t lines = 0;
    long max_rank = -1;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        size_t end = j > i && text[j - 1] == '\r' ? j - 1 : j;
        if (end > i) {
            const char *sp = memchr(text + i, ' ', end - i);
            long r = sp ? parse_rank(sp + 1, (size_t)(text + end - sp - 1)) : -1;
            if (r < 0) {
                io_fail(e, "%s: line %zu is not '<base64 token> <rank>'", path, lines + 1);
                return NULL;
            }
            if (r > max_rank) max_rank = r;
            lines++;
        }
        i = j + 1;
    }
    if (lines == 0) {
        io_fail(e, "%s: the tiktoken file has no ranks", path);
        return NULL;
    }
    int llama3 = max_rank + 1 == 128000;
    uint32_t V = (uint32_t)max_rank + 1 + (llama3 ? LLAMA3_N_SPECIAL : 0);
    struct tokenizer *t = tok_new(V);
    t->ignore_merges = 1;
    uint8_t bytes[1024];
    char str[2048];
    size_t line = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        size_t end = j > i && text[j - 1] == '\r' ? j - 1 : j;
        if (end > i) {
            line++;
            const char *sp = memchr(text + i, ' ', end - i);
            size_t bl = (size_t)(sp - (text + i));
            long n = bl <= 4 * sizeof bytes / 3 ? b64_decode(bytes, text + i, bl) : -1;
            if (n <= 0) {
                io_fail(e, "%s: line %zu: '%.*s' is not a base64 token", path, line, (int)(bl > 60 ? 60 : bl), text + i);
                goto fail;
            }
            size_t sl = tok_bytelevel_encode(str, bytes, (size_t)n);
            if (tok_set(t, (uint32_t)parse_rank(sp + 1, (size_t)(text + end - sp - 1)), str, sl, (const char *)bytes, (size_t)n, 0, path, e))
                goto fail;
        }
        i = j + 1;
    }
    if (llama3) {
        char name[64];
        for (int k = 0; k < LLAMA3_N_SPECIAL; k++) {
            const int n_named = (int)(sizeof LLAMA3_SPECIAL / sizeof *LLAMA3_SPECIAL);
            if (k < n_named) snprintf(name, sizeof name, "%s", LLAMA3_SPECIAL[k]);
            else snprintf(name, sizeof name, "<|reserved_special_token_%d|>", 2 + k - n_named);
            if (tok_set(t, 128000u + (uint32_t)k, name, strlen(name), name, strlen(name), TOK_ADDED | TOK_SPECIAL,
                        path, e))
                goto fail;
        }
        if (tok_add_regex(t, TOK_RE_LLAMA3, path, e)) goto fail;
        t->bos_id = 128000;
        t->eos_id = 128001;
        t->adds_bos = 1;
        t->chat = CHAT_TEMPLATE_LLAMA3;
    } else {
        if (tok_add_regex(t, TOK_RE_GPT2, path, e)) goto fail;
    }
    /* Merges from ranks: the pair (a, b) merges into a‖b with rank(a‖b) when all three exist. */
    tok_pairmap_init(&t->merges, 2 * (size_t)V);
    for (uint32_t id = 0; id < V; id++) {
        const struct tok_entry *k = &t->tok[id];
        if (!(k->flags & TOK_PRESENT) || (k->flags & TOK_ADDED) || k->bytes_len < 2) continue;
        for (uint32_t s = 1; s < k->bytes_len; s++) {
            uint32_t a, b;
            if (tok_strmap_get(&t->by_bytes, k->bytes, s, &a) &&
                tok_strmap_get(&t->by_bytes, k->bytes + s, k->bytes_len - s, &b))
                tok_pairmap_put(&t->merges, a, b, id, id);
        }
    }
    if (tok_finish(t, path, e)) goto fail;
    return t;
fail:
    tokenizer_free(t);
    return NULL;
}

/* ---- entry points ------------------------------------------------------------------------ */

struct tokenizer *tokenizer_load(const char *path, struct io_err *e) {
    char full[1100];
    struct stat st;
    if (stat(path, &st) != 0) {
        io_fail(e, "%s: no such tokenizer file or directory", path);
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(full, sizeof full, "%s/tokenizer.json", path);
        if (!file_exists(full)) {
            io_fail(e, "%s: the directory holds no tokenizer.json", path);
            return NULL;
        }
        path = full;
    }
    char *text = NULL;
    size_t len = 0;
    if (read_file_text(&text, &len, path, TOKENIZER_MAX_BYTES, e)) return NULL;
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) i++;
    struct tokenizer *t = NULL;
    if (i < len && text[i] == '{') t = load_json(path, text, len, e);
    else if (looks_like_tiktoken(text, len)) t = load_tiktoken(path, text, len, e);
    else io_fail(e, "%s: neither a tokenizer.json (JSON object) nor a tiktoken rank file ('<base64> <rank>' lines)", path);
    free(text);
    return t;
}

struct tokenizer *tokenizer_from_gguf_kv(const struct tokenizer_gguf_kv *kv, struct io_err *e) {
    const char *src = kv->source ? kv->source : "GGUF";
    if (!kv->model || strcmp(kv->model, "gpt2") != 0) {
        io_fail(e, "%s: tokenizer.ggml.model '%s' is not supported (only \"gpt2\", byte-level BPE)", src,
                kv->model ? kv->model : "(absent)");
        return NULL;
    }
    if (kv->n_tokens == 0 || kv->n_tokens > (1u << 24) || !kv->tokens) {
        io_fail(e, "%s: tokenizer.ggml.tokens has %zu entries (expected 1 to 2^24)", src, kv->n_tokens);
        return NULL;
    }
    struct tokenizer *t = tok_new((uint32_t)kv->n_tokens);
    t->ignore_merges = 0;
    char *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < kv->n_tokens; i++) {
        const char *s = kv->tokens[i];
        size_t n = kv->token_lens ? (size_t)kv->token_lens[i] : (s ? strlen(s) : 0);
        if (!s) {
            io_fail(e, "%s: token %zu is missing", src, i);
            goto fail;
        }
        int32_t type = kv->token_type ? kv->token_type[i] : TOKEN_TYPE_NORMAL;
        uint32_t flags = 0;
        if (type == TOKEN_TYPE_CONTROL) flags = TOK_ADDED | TOK_SPECIAL;
        else if (type == TOKEN_TYPE_USER_DEFINED) flags = TOK_ADDED;
        if (n + 1 > cap) {
            cap = 2 * n + 64;
            buf = realloc(buf, cap);
            CHECK(buf, "out of memory");
        }
        size_t bl = flags ? n : tok_bytelevel_decode(buf, s, n);
        if (flags) memcpy(buf, s, n);
        if (tok_set(t, (uint32_t)i, s, n, buf, bl, flags, src, e)) goto fail;
    }
    free(buf);
    buf = NULL;
    tok_pairmap_init(&t->merges, kv->n_merges);
    for (size_t i = 0; i < kv->n_merges; i++) {
        const char *s = kv->merges[i];
        if (!s) {
            io_fail(e, "%s: merge %zu is missing", src, i);
            goto fail;
        }
        size_t n = kv->merge_lens ? (size_t)kv->merge_lens[i] : strlen(s);
        if (merge_string(t, s, n, (uint32_t)i, src, e)) goto fail;
    }
    const char *pre = kv->pre ? kv->pre : "default";
    if (strcmp(pre, "llama-bpe") == 0 || strcmp(pre, "llama3") == 0) {
        if (tok_add_regex(t, TOK_RE_LLAMA3, src, e)) goto fail;
        t->ignore_merges = 1;
    } else if (strcmp(pre, "smollm") == 0) {
        if (tok_add_regex(t, TOK_RE_DIGITS, src, e) || tok_add_regex(t, TOK_RE_GPT2, src, e)) goto fail;
    } else if (strcmp(pre, "gpt2") == 0 || strcmp(pre, "default") == 0) {
        if (tok_add_regex(t, TOK_RE_GPT2, src, e)) goto fail;
    } else {
        io_fail(e, "%s: tokenizer.ggml.pre '%s' is not supported (llama-bpe, smollm, gpt2, default)", src, pre);
        goto fail;
    }
    if (kv->bos_id >= (int64_t)kv->n_tokens || kv->eos_id >= (int64_t)kv->n_tokens) {
        io_fail(e, "%s: bos/eos token id beyond the %zu tokens", src, kv->n_tokens);
        goto fail;
    }
    t->bos_id = kv->bos_id;
    t->eos_id = kv->eos_id;
    t->adds_bos = kv->add_bos > 0 ? 1 : kv->add_bos == 0 ? 0 : t->bos_id >= 0;
    if (kv->chat_template) tok_detect_chat_template(t, kv->chat_template);
    if (tok_finish(t, src, e)) goto fail;
    return t;
fail:
    free(buf);
    tokenizer_free(t);
    return NULL;
}
