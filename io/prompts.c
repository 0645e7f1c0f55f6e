/* prompts.c — prompt files as token ids (prompts.h). */
#include "io/prompts.h"

#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/file.h"

static void push_ids(int32_t **ids, int *n, const uint32_t *src, size_t m) {
    *ids = realloc(*ids, ((size_t)*n + m + 1) * sizeof **ids);
    CHECK(*ids != NULL, "out of memory");
    for (size_t i = 0; i < m; i++) (*ids)[(*n)++] = (int32_t)src[i];
}

int prompt_encode_text(struct tokenizer *tok, const char *text, int32_t **ids, int *n, struct io_err *e) {
    struct tok_ids t = {0};
    const int bos = tokenizer_adds_bos(tok) && tokenizer_bos_id(tok) >= 0;
    tokenizer_encode(tok, text, strlen(text), bos ? TOKENIZER_ADD_BOS : 0, &t);
    *ids = NULL, *n = 0;
    push_ids(ids, n, t.ids, t.n);
    tok_ids_free(&t);
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return io_fail(e, "the prompt is empty (no tokens)");
    }
    return 0;
}

int prompt_encode_chat(struct tokenizer *tok, const struct chat_message *m, int n_m, int32_t **ids, int *n,
                       struct io_err *e) {
    struct chat_tokens ct = {0};
    if (tokenizer_apply_chat(tok, m, (size_t)n_m, CHAT_ADD_GENERATION_PROMPT, &ct, e) != 0) return -1;
    *ids = NULL, *n = 0;
    push_ids(ids, n, ct.ids, ct.n);
    chat_tokens_free(&ct);
    return 0;
}

static char *dup_str(const char *s) {
    char *d = strdup(s);
    CHECK(d != NULL, "out of memory");
    return d;
}

/* One line into p. */
static int parse_line(struct prompt *p, struct tokenizer *tok, const char *line, struct io_err *e) {
    cJSON *j = cJSON_Parse(line);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return io_fail(e, "not a JSON object");
    }
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt"), *ms = cJSON_GetObjectItemCaseSensitive(j, "messages");
    int rc;
    if (cJSON_IsString(pr)) {
        rc = prompt_encode_text(tok, pr->valuestring, &p->ids, &p->n, e);
        if (rc == 0) p->text = dup_str(pr->valuestring);
    } else if (cJSON_IsArray(ms) && cJSON_GetArraySize(ms) > 0) {
        const int k = cJSON_GetArraySize(ms);
        struct chat_message *m = calloc((size_t)k, sizeof *m);
        CHECK(m != NULL, "out of memory");
        rc = 0;
        for (int i = 0; i < k && rc == 0; i++) {
            const cJSON *it = cJSON_GetArrayItem(ms, i);
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role"),
                        *content = cJSON_GetObjectItemCaseSensitive(it, "content");
            if (!cJSON_IsString(role) || !cJSON_IsString(content))
                rc = io_fail(e, "message %d needs a \"role\" and a \"content\" string", i);
            else
                m[i].role = role->valuestring, m[i].content = content->valuestring,
                m[i].content_len = strlen(content->valuestring);
        }
        if (rc == 0) rc = prompt_encode_chat(tok, m, k, &p->ids, &p->n, e);
        if (rc == 0) p->text = dup_str(m[k - 1].content);
        free(m);
    } else {
        rc = io_fail(e, "expected {\"prompt\": \"...\"} or {\"messages\": [...]}");
    }
    if (rc == 0 && p->n == 0) rc = io_fail(e, "the prompt is empty (no tokens)");
    cJSON_Delete(j);
    return rc;
}

int prompts_read(struct prompt_list *l, const char *path, struct tokenizer *tok, struct io_err *e) {
    memset(l, 0, sizeof *l);
    char *text;
    size_t len;
    if (read_file_text(&text, &len, path, (size_t)1 << 30, e) != 0) return -1;
    int cap = 0, lineno = 0, rc = 0;
    for (char *line = text; line && *line && rc == 0;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        lineno++;
        const char *q = line;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (*q) {
            if (l->n == cap) {
                cap = cap ? 2 * cap : 16;
                l->p = realloc(l->p, (size_t)cap * sizeof *l->p);
                CHECK(l->p != NULL, "out of memory");
            }
            struct prompt *p = &l->p[l->n];
            memset(p, 0, sizeof *p);
            if ((rc = parse_line(p, tok, line, e)) != 0) {
                free(p->ids), free(p->text);
                io_fail_context(e, "%s:%d", path, lineno);
            } else {
                if (p->n > l->longest) l->longest = p->n;
                l->n++;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    if (rc == 0 && l->n == 0) rc = io_fail(e, "%s: no prompts (expected one JSON object a line)", path);
    if (rc) prompts_free(l);
    return rc;
}

void prompts_free(struct prompt_list *l) {
    for (int i = 0; i < l->n; i++) free(l->p[i].ids), free(l->p[i].text);
    free(l->p);
    memset(l, 0, sizeof *l);
}
