/* chat.c — the chat templates of io/tokenizer.h: recognizing them, rendering messages and
 * tokenizing them with a loss mask on assistant tokens. */
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"

void tok_detect_chat_template(struct tokenizer *t, const char *tmpl) {
    if (!tmpl) return;
    free(t->chat_template_src);
    t->chat_template_src = strdup(tmpl);
    CHECK(t->chat_template_src, "out of memory");
    free(t->chat_system_default);
    t->chat_system_default = NULL;
    if (strstr(tmpl, "<|start_header_id|>")) {
        t->chat = CHAT_TEMPLATE_LLAMA3;
    } else if (strstr(tmpl, "<|im_start|>")) {
        t->chat = CHAT_TEMPLATE_CHATML;
        /* A literal default system turn: '<|im_start|>system\n...<|im_end|>' (real newline or
         * the two-character escape inside the template's string literal). */
        const char *keys[2] = {"<|im_start|>system\n", "<|im_start|>system\\n"};
        for (int k = 0; k < 2 && !t->chat_system_default; k++) {
            const char *s = strstr(tmpl, keys[k]);
            if (!s) continue;
            s += strlen(keys[k]);
            const char *end = strstr(s, "<|im_end|>");
            if (!end || memchr(s, '\'', (size_t)(end - s)) || memchr(s, '{', (size_t)(end - s))) continue;
            char *copy = malloc((size_t)(end - s) + 1);
            CHECK(copy, "out of memory");
            memcpy(copy, s, (size_t)(end - s));
            copy[end - s] = 0;
            t->chat_system_default = copy;
        }
    } else {
        t->chat = CHAT_TEMPLATE_NONE;
    }
}

enum chat_template_kind tokenizer_chat_template(const struct tokenizer *t) { return t->chat; }

static int need_token(const struct tokenizer *t, const char *s, uint32_t *id, struct io_err *e) {
    *id = 0;
    int64_t v = tokenizer_token_to_id(t, s, strlen(s));
    if (v < 0) return io_fail(e, "the tokenizer has no %s token, which its chat template needs", s);
    *id = (uint32_t)v;
    return 0;
}

int tokenizer_set_chat_template(struct tokenizer *t, enum chat_template_kind kind, struct io_err *e) {
    uint32_t id;
    if (kind == CHAT_TEMPLATE_LLAMA3) {
        if (need_token(t, "<|start_header_id|>", &id, e) || need_token(t, "<|end_header_id|>", &id, e) ||
            need_token(t, "<|eot_id|>", &id, e))
            return -1;
    } else if (kind == CHAT_TEMPLATE_CHATML) {
        if (need_token(t, "<|im_start|>", &id, e) || need_token(t, "<|im_end|>", &id, e)) return -1;
    }
    if (kind != t->chat) {
        free(t->chat_system_default);
        t->chat_system_default = NULL;
    }
    t->chat = kind;
    return 0;
}

void chat_tokens_free(struct chat_tokens *c) {
    free(c->ids);
    free(c->mask);
    memset(c, 0, sizeof *c);
}

/* Python str.isspace() for the code point starting at s (length in *len). */
static int utf8_space_at(const unsigned char *s, size_t n, size_t *len) {
    if (n >= 1 && (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0D) || (s[0] >= 0x1C && s[0] <= 0x1F))) {
        *len = 1;
        return 1;
    }
    if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) {
        *len = 2;
        return 1;
    }
    if (n >= 3) {
        uint32_t cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        if ((s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 &&
            (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
             cp == 0x202F || cp == 0x205F || cp == 0x3000)) {
            *len = 3;
            return 1;
        }
    }
    return 0;
}

/* Jinja's |trim (Python str.strip()). */
static void trim(const char **s, size_t *n) {
    const unsigned char *p = (const unsigned char *)*s;
    size_t len = *n, k;
    while (len && utf8_space_at(p, len, &k)) {
        p += k;
        len -= k;
    }
    for (;;) {
        int cut = 0;
        for (size_t back = 1; back <= 3 && back <= len && !cut; back++)
            if (utf8_space_at(p + len - back, back, &k) && k == back) {
                len -= back;
                cut = 1;
            }
        if (!cut) break;
    }
    *s = (const char *)p;
    *n = len;
}

struct chat_builder {
    struct tok_ids ids, offsets;
    uint8_t *mask;
    size_t mask_cap;
    char *seg;
    size_t seg_cap;
};

static void mark(struct chat_builder *b, size_t from, uint8_t v) {
    if (b->ids.n > b->mask_cap) {
        size_t cap = b->mask_cap ? b->mask_cap : 256;
        while (cap < b->ids.n) cap *= 2;
        b->mask = realloc(b->mask, cap);
        CHECK(b->mask, "out of memory");
        b->mask_cap = cap;
    }
    for (size_t i = from; i < b->ids.n; i++) b->mask[i] = v;
}

static void push_special(struct chat_builder *b, uint32_t id, uint8_t m) {
    size_t from = b->ids.n;
    if (b->ids.n == b->ids.cap) {
        b->ids.cap = b->ids.cap ? 2 * b->ids.cap : 256;
        b->ids.ids = realloc(b->ids.ids, b->ids.cap * sizeof(uint32_t));
        CHECK(b->ids.ids, "out of memory");
    }
    b->ids.ids[b->ids.n++] = id;
    mark(b, from, m);
}

/* Encodes prefix‖content as one text segment (special tokens not matched); tokens starting at
 * or after the content get mask m, the others 0. */
static void push_text(struct tokenizer *t, struct chat_builder *b, const char *prefix, size_t np,
                      const char *content, size_t nc, uint8_t m) {
    if (np + nc + 1 > b->seg_cap) {
        b->seg_cap = 2 * (np + nc) + 64;
        b->seg = realloc(b->seg, b->seg_cap);
        CHECK(b->seg, "out of memory");
    }
    memcpy(b->seg, prefix, np);
    if (nc) memcpy(b->seg + np, content, nc);
    size_t from = b->ids.n;
    b->offsets.n = 0;
    tok_encode_offsets(t, b->seg, np + nc, TOKENIZER_SPLIT_SPECIAL, &b->ids, &b->offsets);
    mark(b, from, 0);
    if (m)
        for (size_t i = from; i < b->ids.n; i++) b->mask[i] = b->offsets.ids[i - from] >= np;
}

int tokenizer_apply_chat(struct tokenizer *t, const struct chat_message *messages, size_t n_messages,
                         int flags, struct chat_tokens *out, struct io_err *e) {
    if (t->chat == CHAT_TEMPLATE_NONE)
        return io_fail(e, "the tokenizer has no chat template refine knows (Llama 3 or ChatML); "
                          "conversations cannot be tokenized");
    if (n_messages == 0) return io_fail(e, "a conversation has no messages");
    for (size_t i = 0; i < n_messages; i++)
        if (!messages[i].role || !messages[i].role[0] || (!messages[i].content && messages[i].content_len))
            return io_fail(e, "message %zu of a conversation has no role or no content", i);
    struct chat_builder b;
    memset(&b, 0, sizeof b);
    int gen = (flags & CHAT_ADD_GENERATION_PROMPT) != 0;
    uint32_t start = 0, end = 0;
    if (t->chat == CHAT_TEMPLATE_LLAMA3) {
        uint32_t head_end = 0;
        if (need_token(t, "<|start_header_id|>", &start, e) || need_token(t, "<|end_header_id|>", &head_end, e) ||
            need_token(t, "<|eot_id|>", &end, e))
            return -1;
        if (t->bos_id >= 0) push_special(&b, (uint32_t)t->bos_id, 0);
        for (size_t i = 0; i < n_messages; i++) {
            const char *c = messages[i].content ? messages[i].content : "";
            size_t nc = messages[i].content_len;
            trim(&c, &nc);
            uint8_t m = strcmp(messages[i].role, "assistant") == 0;
            push_special(&b, start, 0);
            push_text(t, &b, messages[i].role, strlen(messages[i].role), NULL, 0, 0);
            push_special(&b, head_end, 0);
            push_text(t, &b, "\n\n", 2, c, nc, m);
            push_special(&b, end, m);
        }
        if (gen) {
            push_special(&b, start, 0);
            push_text(t, &b, "assistant", 9, NULL, 0, 0);
            push_special(&b, head_end, 0);
            push_text(t, &b, "\n\n", 2, NULL, 0, 0);
        }
    } else {
        if (need_token(t, "<|im_start|>", &start, e) || need_token(t, "<|im_end|>", &end, e)) return -1;
        if (t->chat_system_default && strcmp(messages[0].role, "system") != 0) {
            push_special(&b, start, 0);
            push_text(t, &b, "system\n", 7, t->chat_system_default, strlen(t->chat_system_default), 0);
            push_special(&b, end, 0);
            push_text(t, &b, "\n", 1, NULL, 0, 0);
        }
        for (size_t i = 0; i < n_messages; i++) {
            uint8_t m = strcmp(messages[i].role, "assistant") == 0;
            size_t nr = strlen(messages[i].role);
            char *prefix = malloc(nr + 2);
            CHECK(prefix, "out of memory");
            memcpy(prefix, messages[i].role, nr);
            prefix[nr] = '\n';
            push_special(&b, start, 0);
            push_text(t, &b, prefix, nr + 1, messages[i].content, messages[i].content_len, m);
            free(prefix);
            push_special(&b, end, m);
            push_text(t, &b, "\n", 1, NULL, 0, 0);
        }
        if (gen) {
            push_special(&b, start, 0);
            push_text(t, &b, "assistant\n", 10, NULL, 0, 0);
        }
    }
    free(b.seg);
    tok_ids_free(&b.offsets);
    chat_tokens_free(out);
    out->ids = b.ids.ids;
    out->mask = b.mask;
    out->n = b.ids.n;
    return 0;
}
