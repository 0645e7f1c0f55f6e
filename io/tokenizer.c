/* tokenizer.c — maps, the ByteLevel table, pre-tokenization, BPE, encode and decode
 * (io/tokenizer.h). Loading lives in io/tokenizer_load.c, chat templates in io/chat.c. */
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"
#ifndef PCRE2_CODE_UNIT_WIDTH /* set by //third_party:pcre2; also for builds outside Bazel */
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include "pcre2.h"

/* ---- hashing and maps -------------------------------------------------------------------- */

uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 32;
    return h;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

void tok_strmap_init(struct tok_strmap *m, size_t expected) {
    m->cap = pow2_at_least(expected * 2 + 1);
    m->n = 0;
    m->slots = calloc(m->cap, sizeof *m->slots);
    CHECK(m->slots, "out of memory (%zu map slots)", m->cap);
}

void tok_strmap_free(struct tok_strmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static void strmap_insert_slot(struct tok_strmap *m, const struct tok_strmap_slot *s) {
    size_t mask = m->cap - 1;
    for (size_t i = s->hash & mask;; i = (i + 1) & mask) {
        if (!m->slots[i].key) {
            m->slots[i] = *s;
            m->n++;
            return;
        }
    }
}

int tok_strmap_put(struct tok_strmap *m, const char *key, size_t len, uint32_t val,
                   uint32_t *old) {
    CHECK(key && len < UINT32_MAX, "bad map key");
    uint64_t h = tok_hash(key, len);
    size_t mask = m->cap - 1;
    for (size_t i = h & mask; m->slots[i].key; i = (i + 1) & mask) {
        const struct tok_strmap_slot *s = &m->slots[i];
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            if (old) *old = s->val;
            return 1;
        }
    }
    if (2 * (m->n + 1) > m->cap) {
        struct tok_strmap g;
        g.cap = m->cap * 2;
        g.n = 0;
        g.slots = calloc(g.cap, sizeof *g.slots);
        CHECK(g.slots, "out of memory (%zu map slots)", g.cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) strmap_insert_slot(&g, &m->slots[i]);
        free(m->slots);
        *m = g;
    }
    struct tok_strmap_slot s = {key, (uint32_t)len, val, h};
    strmap_insert_slot(m, &s);
    return 0;
}

int tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len, uint32_t *val) {
    if (!m->slots) return 0;
    uint64_t h = tok_hash(key, len);
    size_t mask = m->cap - 1;
    for (size_t i = h & mask; m->slots[i].key; i = (i + 1) & mask) {
        const struct tok_strmap_slot *s = &m->slots[i];
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            *val = s->val;
            return 1;
        }
    }
    return 0;
}

static uint64_t pair_key(uint32_t l, uint32_t r) { return (((uint64_t)l << 32) | r) + 1; }

static size_t pair_slot(uint64_t key, size_t mask) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & mask;
}

void tok_pairmap_init(struct tok_pairmap *m, size_t expected) {
    m->cap = pow2_at_least(expected * 2 + 1);
    m->n = 0;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->rank = malloc(m->cap * sizeof *m->rank);
    m->merged = malloc(m->cap * sizeof *m->merged);
    CHECK(m->keys && m->rank && m->merged, "out of memory (%zu merge slots)", m->cap);
}

void tok_pairmap_free(struct tok_pairmap *m) {
    free(m->keys);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

static void pairmap_grow(struct tok_pairmap *m) {
    struct tok_pairmap g;
    tok_pairmap_init(&g, m->cap);
    size_t mask = g.cap - 1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = pair_slot(m->keys[i], mask);
        while (g.keys[j]) j = (j + 1) & mask;
        g.keys[j] = m->keys[i];
        g.rank[j] = m->rank[i];
        g.merged[j] = m->merged[i];
        g.n++;
    }
    tok_pairmap_free(m);
    *m = g;
}

void tok_pairmap_put(struct tok_pairmap *m, uint32_t left, uint32_t right, uint32_t rank,
                     uint32_t merged) {
    if (2 * (m->n + 1) > m->cap) pairmap_grow(m);
    uint64_t k = pair_key(left, right);
    size_t mask = m->cap - 1;
    size_t i = pair_slot(k, mask);
    for (; m->keys[i]; i = (i + 1) & mask) {
        if (m->keys[i] == k) {
            if (rank < m->rank[i]) {
                m->rank[i] = rank;
                m->merged[i] = merged;
            }
            return;
        }
    }
    m->keys[i] = k;
    m->rank[i] = rank;
    m->merged[i] = merged;
    m->n++;
}

static inline int pairmap_get(const struct tok_pairmap *m, uint32_t left, uint32_t right,
                              uint32_t *rank, uint32_t *merged) {
    uint64_t k = pair_key(left, right);
    size_t mask = m->cap - 1;
    for (size_t i = pair_slot(k, mask); m->keys[i]; i = (i + 1) & mask) {
        if (m->keys[i] == k) {
            *rank = m->rank[i];
            if (merged) *merged = m->merged[i];
            return 1;
        }
    }
    return 0;
}

#define ARENA_CHUNK (1u << 20)

char *tok_arena_copy(struct tok_arena *a, const char *s, size_t n) {
    if (!a->chunks || a->used + n + 1 > a->chunk_cap) {
        size_t cap = n + 1 > ARENA_CHUNK ? n + 1 : ARENA_CHUNK;
        char **c = realloc(a->chunks, (a->n_chunks + 1) * sizeof *c);
        CHECK(c, "out of memory");
        a->chunks = c;
        a->chunks[a->n_chunks] = malloc(cap);
        CHECK(a->chunks[a->n_chunks], "out of memory (%zu bytes)", cap);
        a->n_chunks++;
        a->used = 0;
        a->chunk_cap = cap;
    }
    char *p = a->chunks[a->n_chunks - 1] + a->used;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    a->used += n + 1;
    return p;
}

void tok_arena_free(struct tok_arena *a) {
    for (size_t i = 0; i < a->n_chunks; i++) free(a->chunks[i]);
    free(a->chunks);
    memset(a, 0, sizeof *a);
}

/* ---- ByteLevel (GPT-2 bytes_to_unicode) --------------------------------------------------- */

static int byte_is_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++) n += !byte_is_printable(i);
    return 256 + n;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable((int)cp) ? (int)cp : -1;
    uint32_t n = 256;
    for (int b = 0; b < 256; b++) {
        if (byte_is_printable(b)) continue;
        if (n == cp) return b;
        n++;
    }
    return -1;
}

static uint32_t g_b2cp[256];
static int16_t g_cp2b[324];
static int g_tables_ready;

static void tables_init(void) {
    if (g_tables_ready) return;
    for (int i = 0; i < 324; i++) g_cp2b[i] = (int16_t)tok_cp_to_byte((uint32_t)i);
    for (int b = 0; b < 256; b++) g_b2cp[b] = tok_byte_to_cp((uint8_t)b);
    g_tables_ready = 1;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

size_t tok_bytelevel_encode(char *out, const uint8_t *bytes, size_t n) {
    tables_init();
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += put_utf8(out + k, g_b2cp[bytes[i]]);
    return k;
}

size_t tok_bytelevel_decode(char *out, const char *s, size_t n) {
    tables_init();
    const uint8_t *u = (const uint8_t *)s;
    size_t k = 0, i = 0;
    while (i < n) {
        uint32_t cp = 0;
        size_t len = 0;
        if (u[i] < 0x80) {
            cp = u[i];
            len = 1;
        } else if ((u[i] & 0xE0) == 0xC0 && i + 1 < n && (u[i + 1] & 0xC0) == 0x80) {
            cp = ((uint32_t)(u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
            len = 2;
        }
        if (len && cp < 324 && g_cp2b[cp] >= 0) {
            out[k++] = (char)g_cp2b[cp];
            i += len;
            continue;
        }
        /* Not a mapped character: keep its bytes (a whole UTF-8 sequence when well formed). */
        size_t m = 1;
        if (u[i] >= 0xC0) {
            size_t want = u[i] >= 0xF0 ? 4 : u[i] >= 0xE0 ? 3 : 2;
            while (m < want && i + m < n && (u[i + m] & 0xC0) == 0x80) m++;
        }
        memcpy(out + k, s + i, m);
        k += m;
        i += m;
    }
    return k;
}

/* ---- construction ------------------------------------------------------------------------ */

const char *const TOK_RE_LLAMA3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const TOK_RE_GPT2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char *const TOK_RE_DIGITS = "\\p{N}";

struct tokenizer *tok_new(uint32_t V) {
    tables_init();
    struct tokenizer *t = calloc(1, sizeof *t);
    CHECK(t, "out of memory");
    t->V = V;
    t->tok = calloc(V ? V : 1, sizeof *t->tok);
    CHECK(t->tok, "out of memory (%u tokens)", V);
    tok_strmap_init(&t->by_str, V);
    tok_strmap_init(&t->by_bytes, V);
    tok_strmap_init(&t->added, 16);
    tok_strmap_init(&t->cache, 1 << 12);
    t->bos_id = t->eos_id = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    return t;
}

int tok_set(struct tokenizer *t, uint32_t id, const char *str, size_t str_len, const char *bytes,
            size_t bytes_len, uint32_t flags, const char *src, struct io_err *e) {
    if (id >= t->V) return io_fail(e, "%s: token id %u is beyond the vocabulary size %u", src, id, t->V);
    if (str_len >= UINT32_MAX || bytes_len >= UINT32_MAX)
        return io_fail(e, "%s: token %u is too long", src, id);
    struct tok_entry *k = &t->tok[id];
    if (k->flags & TOK_PRESENT) {
        /* An added token may restate a vocabulary token with the same string (SmolLM2's
         * <|endoftext|>): it then becomes added/special. */
        if ((flags & TOK_ADDED) && k->str_len == str_len && memcmp(k->str, str, str_len) == 0) {
            k->bytes = tok_arena_copy(&t->arena, bytes, bytes_len);
            k->bytes_len = (uint32_t)bytes_len;
            k->flags |= flags;
            return 0;
        }
        return io_fail(e, "%s: token id %u is given twice ('%.*s' and '%.*s')", src, id,
                       (int)(k->str_len > 60 ? 60 : k->str_len), k->str,
                       (int)(str_len > 60 ? 60 : str_len), str);
    }
    k->str = tok_arena_copy(&t->arena, str, str_len);
    k->str_len = (uint32_t)str_len;
    k->bytes = tok_arena_copy(&t->arena, bytes, bytes_len);
    k->bytes_len = (uint32_t)bytes_len;
    k->flags = flags | TOK_PRESENT;
    uint32_t old;
    if (tok_strmap_put(&t->by_str, k->str, str_len, id, &old))
        return io_fail(e, "%s: token '%.*s' appears twice (ids %u and %u)", src,
                       (int)(str_len > 60 ? 60 : str_len), str, old, id);
    if (!(flags & TOK_ADDED)) tok_strmap_put(&t->by_bytes, k->bytes, bytes_len, id, NULL);
    return 0;
}

int tok_add_regex(struct tokenizer *t, const char *pattern, const char *src, struct io_err *e) {
    if (t->n_re == TOK_MAX_SPLITS)
        return io_fail(e, "%s: more than %d splitting pre-tokenizers", src, TOK_MAX_SPLITS);
    t->re_pattern[t->n_re] = tok_arena_copy(&t->arena, pattern, strlen(pattern));
    /* PCRE2's \s under PCRE2_UCP is Unicode Z plus \t\n\v\f\r; the reference tokenizers' \s is
     * the White_Space property, which adds U+0085 (NEL). Rewrite \s and \S accordingly. */
    size_t n = strlen(pattern);
    char *p = malloc(n * 12 + 1);
    CHECK(p, "out of memory");
    size_t k = 0;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pattern[i];
        if (c == '\\' && i + 1 < n) {
            char d = pattern[i + 1];
            if (d == 's') {
                const char *r = in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
                memcpy(p + k, r, strlen(r));
                k += strlen(r);
            } else if (d == 'S' && !in_class) {
                memcpy(p + k, "[^\\s\\x{85}]", 11);
                k += 11;
            } else {
                p[k++] = c;
                p[k++] = d;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) in_class = 1;
        else if (c == ']' && in_class) in_class = 0;
        p[k++] = c;
    }
    p[k] = 0;
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, k, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                                   &errcode, &erroff, NULL);
    free(p);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return io_fail(e, "%s: pre-tokenizer regex '%s' does not compile at offset %zu: %s", src,
                       pattern, (size_t)erroff, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter when absent */
    t->re[t->n_re++] = re;
    if (!t->match_data) {
        t->match_data = pcre2_match_data_create(4, NULL);
        CHECK(t->match_data, "out of memory");
    }
    return 0;
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

int tok_finish(struct tokenizer *t, const char *src, struct io_err *e) {
    int n_bytes = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        uint32_t id;
        t->byte_id[b] = tok_strmap_get(&t->by_bytes, &c, 1, &id) ? (int32_t)id : -1;
        n_bytes += t->byte_id[b] >= 0;
    }
    if (n_bytes < 128)
        return io_fail(e, "%s: the vocabulary has tokens for only %d of the 256 bytes; not a byte-level "
                          "BPE vocabulary", src, n_bytes);
    free(t->added_lens);
    t->added_lens = NULL;
    t->n_added_lens = 0;
    memset(t->added_first, 0, sizeof t->added_first);
    memset(t->special_first, 0, sizeof t->special_first);
    for (uint32_t id = 0; id < t->V; id++) {
        const struct tok_entry *k = &t->tok[id];
        if (!(k->flags & TOK_ADDED)) continue;
        if (k->bytes_len == 0) return io_fail(e, "%s: added token %u is empty", src, id);
        uint32_t old;
        if (tok_strmap_put(&t->added, k->bytes, k->bytes_len, id, &old) && old != id)
            return io_fail(e, "%s: added tokens %u and %u have the same content", src, old, id);
        uint8_t first = (uint8_t)k->bytes[0];
        t->added_first[first] = 1;
        if (!(k->flags & TOK_SPECIAL)) t->special_first[first] = 1;
        int seen = 0;
        for (int i = 0; i < t->n_added_lens; i++) seen |= t->added_lens[i] == k->bytes_len;
        if (!seen) {
            uint32_t *l = realloc(t->added_lens, (size_t)(t->n_added_lens + 1) * sizeof *l);
            CHECK(l, "out of memory");
            t->added_lens = l;
            t->added_lens[t->n_added_lens++] = k->bytes_len;
        }
    }
    if (t->n_added_lens > 1)
        qsort(t->added_lens, (size_t)t->n_added_lens, sizeof *t->added_lens, cmp_u32_desc);
    if (t->bos_id >= (int64_t)t->V || t->eos_id >= (int64_t)t->V)
        return io_fail(e, "%s: bos/eos id beyond the vocabulary size %u", src, t->V);
    return 0;
}

void tokenizer_free(struct tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_re; i++) pcre2_code_free((pcre2_code *)t->re[i]);
    pcre2_match_data_free((pcre2_match_data *)t->match_data);
    free(t->tok);
    tok_arena_free(&t->arena);
    tok_strmap_free(&t->by_str);
    tok_strmap_free(&t->by_bytes);
    tok_strmap_free(&t->added);
    tok_strmap_free(&t->cache);
    tok_arena_free(&t->cache_arena);
    tok_pairmap_free(&t->merges);
    free(t->added_lens);
    free(t->chat_system_default);
    free(t->chat_template_src);
    free(t->cache_ids);
    free(t->sym_id);
    free(t->sym_prev);
    free(t->sym_next);
    free(t->sym_len);
    free(t->heap);
    free(t);
}

/* ---- queries ----------------------------------------------------------------------------- */

uint32_t tokenizer_vocab_size(const struct tokenizer *t) { return t->V; }
int64_t tokenizer_bos_id(const struct tokenizer *t) { return t->bos_id; }
int64_t tokenizer_eos_id(const struct tokenizer *t) { return t->eos_id; }
int tokenizer_adds_bos(const struct tokenizer *t) { return t->adds_bos && t->bos_id >= 0; }

int64_t tokenizer_token_to_id(const struct tokenizer *t, const char *token, size_t len) {
    uint32_t id;
    return tok_strmap_get(&t->by_str, token, len, &id) ? (int64_t)id : -1;
}

const char *tokenizer_id_to_token(const struct tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->V || !(t->tok[id].flags & TOK_PRESENT)) return NULL;
    if (len) *len = t->tok[id].str_len;
    return t->tok[id].str;
}

int tokenizer_is_special(const struct tokenizer *t, uint32_t id) {
    return id < t->V && (t->tok[id].flags & TOK_SPECIAL) != 0;
}

/* ---- growable arrays --------------------------------------------------------------------- */

static void ids_reserve(struct tok_ids *v, size_t extra) {
    if (v->n + extra <= v->cap) return;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + extra) cap *= 2;
    uint32_t *p = realloc(v->ids, cap * sizeof *p);
    CHECK(p, "out of memory (%zu ids)", cap);
    v->ids = p;
    v->cap = cap;
}

static void ids_push(struct tok_ids *v, uint32_t id) {
    ids_reserve(v, 1);
    v->ids[v->n++] = id;
}

void tok_ids_free(struct tok_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

void tok_bytes_free(struct tok_bytes *v) {
    free(v->data);
    memset(v, 0, sizeof *v);
}

/* ---- BPE --------------------------------------------------------------------------------- */

static void scratch_reserve(struct tokenizer *t, size_t n) {
    if (n <= t->scratch_cap) return;
    size_t cap = t->scratch_cap ? t->scratch_cap : 256;
    while (cap < n) cap *= 2;
    t->sym_id = realloc(t->sym_id, cap * sizeof *t->sym_id);
    t->sym_prev = realloc(t->sym_prev, cap * sizeof *t->sym_prev);
    t->sym_next = realloc(t->sym_next, cap * sizeof *t->sym_next);
    CHECK(t->sym_id && t->sym_prev && t->sym_next, "out of memory (%zu symbols)", cap);
    t->scratch_cap = cap;
}

static inline int heap_less(struct tok_heap_item a, struct tok_heap_item b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(struct tokenizer *t, size_t *hn, uint32_t rank, uint32_t pos) {
    if (*hn == t->heap_cap) {
        t->heap_cap = t->heap_cap ? 2 * t->heap_cap : 256;
        t->heap = realloc(t->heap, t->heap_cap * sizeof *t->heap);
        CHECK(t->heap, "out of memory");
    }
    struct tok_heap_item it = {rank, pos};
    size_t i = (*hn)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(it, t->heap[p])) break;
        t->heap[i] = t->heap[p];
        i = p;
    }
    t->heap[i] = it;
}

static struct tok_heap_item heap_pop(struct tokenizer *t, size_t *hn) {
    struct tok_heap_item top = t->heap[0];
    struct tok_heap_item last = t->heap[--(*hn)];
    size_t i = 0, n = *hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(t->heap[c + 1], t->heap[c])) c++;
        if (!heap_less(t->heap[c], last)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n) t->heap[i] = last;
    return top;
}

/* BPE of one word (raw bytes w[0..n), n ≥ 1); appends its ids to out. */
static void bpe_word(struct tokenizer *t, const uint8_t *w, size_t n, struct tok_ids *out) {
    uint32_t id;
    if (t->ignore_merges && n > 1 && tok_strmap_get(&t->by_bytes, (const char *)w, n, &id)) {
        ids_push(out, id);
        return;
    }
    scratch_reserve(t, n);
    uint32_t *sid = t->sym_id;
    int32_t *prev = t->sym_prev, *next = t->sym_next;
    size_t m = 0; /* bytes without a token are dropped, as HF BPE does when unk_token is null */
    for (size_t i = 0; i < n; i++) {
        if (t->byte_id[w[i]] < 0) continue;
        sid[m] = (uint32_t)t->byte_id[w[i]];
        prev[m] = (int32_t)m - 1;
        next[m] = (int32_t)m + 1;
        m++;
    }
    if (m == 0) return;
    next[m - 1] = -1;
    n = m;
    size_t hn = 0;
    uint32_t rank;
    for (size_t i = 0; i + 1 < n; i++)
        if (pairmap_get(&t->merges, sid[i], sid[i + 1], &rank, NULL)) heap_push(t, &hn, rank, (uint32_t)i);
    while (hn) {
        struct tok_heap_item it = heap_pop(t, &hn);
        uint32_t p = it.pos;
        if (sid[p] == UINT32_MAX) continue; /* merged away */
        int32_t q = next[p];
        if (q < 0) continue;
        uint32_t merged;
        if (!pairmap_get(&t->merges, sid[p], sid[q], &rank, &merged) || rank != it.rank) continue;
        sid[p] = merged;
        sid[q] = UINT32_MAX;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = (int32_t)p;
        if (prev[p] >= 0 && pairmap_get(&t->merges, sid[prev[p]], sid[p], &rank, NULL))
            heap_push(t, &hn, rank, (uint32_t)prev[p]);
        if (next[p] >= 0 && pairmap_get(&t->merges, sid[p], sid[next[p]], &rank, NULL))
            heap_push(t, &hn, rank, p);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) ids_push(out, sid[i]);
}

#define CACHE_MAX_IDS (1u << 23) /* the cache packs (offset << 8 | count) into 32 bits */
#define CACHE_MAX_WORD 256

static void cache_reset(struct tokenizer *t) {
    tok_strmap_free(&t->cache);
    tok_strmap_init(&t->cache, 1 << 12);
    tok_arena_free(&t->cache_arena);
    t->cache_n = 0;
}

/* One pre-tokenized word: ids (through the cache) and, when wanted, their byte offsets. */
static void emit_word(struct tokenizer *t, const char *w, size_t n, size_t base,
                      struct tok_ids *out, struct tok_ids *offsets) {
    if (n == 0) return;
    size_t start = out->n;
    uint32_t val;
    if (n <= CACHE_MAX_WORD && tok_strmap_get(&t->cache, w, n, &val)) {
        uint32_t off = val >> 8, cnt = val & 0xFF;
        if (cnt) {
            ids_reserve(out, cnt);
            memcpy(out->ids + out->n, t->cache_ids + off, cnt * sizeof(uint32_t));
            out->n += cnt;
        }
    } else {
        bpe_word(t, (const uint8_t *)w, n, out);
        size_t cnt = out->n - start;
        if (n <= CACHE_MAX_WORD && cnt < 256) {
            if (t->cache_n + cnt > CACHE_MAX_IDS || t->cache.n > (1u << 20)) cache_reset(t);
            if (t->cache_n + cnt > t->cache_cap) {
                size_t cap = t->cache_cap ? t->cache_cap * 2 : 1 << 16;
                while (cap < t->cache_n + cnt) cap *= 2;
                t->cache_ids = realloc(t->cache_ids, cap * sizeof *t->cache_ids);
                CHECK(t->cache_ids, "out of memory");
                t->cache_cap = cap;
            }
            if (cnt) memcpy(t->cache_ids + t->cache_n, out->ids + start, cnt * sizeof(uint32_t));
            char *key = tok_arena_copy(&t->cache_arena, w, n);
            tok_strmap_put(&t->cache, key, n, (uint32_t)(t->cache_n << 8) | (uint32_t)cnt, NULL);
            t->cache_n += cnt;
        }
    }
    if (offsets) {
        ids_reserve(offsets, out->n - start);
        size_t pos = base;
        for (size_t i = start; i < out->n; i++) {
            offsets->ids[offsets->n++] = (uint32_t)pos;
            pos += t->tok[out->ids[i]].bytes_len;
        }
    }
}

/* Splits s[0..n) with regex `level` and the following ones ("Isolated": matches and the text
 * between them are both pieces), then BPE on each final piece. */
static void split_level(struct tokenizer *t, int level, const char *s, size_t n, size_t base,
                        struct tok_ids *out, struct tok_ids *offsets) {
    if (n == 0) return;
    if (level == t->n_re) {
        emit_word(t, s, n, base, out, offsets);
        return;
    }
    const pcre2_code *re = (const pcre2_code *)t->re[level];
    pcre2_match_data *md = (pcre2_match_data *)t->match_data;
    size_t pos = 0, from = 0;
    while (from < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, 0, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match splits nothing */
            from = ms + 1;
            continue;
        }
        if (ms > pos) split_level(t, level + 1, s + pos, ms - pos, base + pos, out, offsets);
        split_level(t, level + 1, s + ms, me - ms, base + ms, out, offsets);
        pos = from = me;
    }
    if (pos < n) split_level(t, level + 1, s + pos, n - pos, base + pos, out, offsets);
}

size_t tok_encode_offsets(struct tokenizer *t, const char *text, size_t len, int flags,
                          struct tok_ids *out, struct tok_ids *offsets) {
    size_t start = out->n;
    if ((flags & TOKENIZER_ADD_BOS) && t->bos_id >= 0) {
        ids_push(out, (uint32_t)t->bos_id);
        if (offsets) ids_push(offsets, 0);
    }
    const uint8_t *first = (flags & TOKENIZER_SPLIT_SPECIAL) ? t->special_first : t->added_first;
    size_t seg = 0;
    for (size_t i = 0; i < len; i++) {
        if (!first[(uint8_t)text[i]]) continue;
        uint32_t id = 0;
        size_t mlen = 0;
        for (int k = 0; k < t->n_added_lens && !mlen; k++) {
            size_t l = t->added_lens[k];
            if (l > len - i || !tok_strmap_get(&t->added, text + i, l, &id)) continue;
            if ((flags & TOKENIZER_SPLIT_SPECIAL) && (t->tok[id].flags & TOK_SPECIAL)) continue;
            mlen = l;
        }
        if (!mlen) continue;
        split_level(t, 0, text + seg, i - seg, seg, out, offsets);
        ids_push(out, id);
        if (offsets) ids_push(offsets, (uint32_t)i);
        seg = i + mlen;
        i = seg - 1;
    }
    split_level(t, 0, text + seg, len - seg, seg, out, offsets);
    return out->n - start;
}

size_t tokenizer_encode(struct tokenizer *t, const char *text, size_t len, int flags,
                        struct tok_ids *out) {
    return tok_encode_offsets(t, text, len, flags, out, NULL);
}

int tokenizer_decode(const struct tokenizer *t, const uint32_t *ids, size_t n, int flags,
                     struct tok_bytes *out, struct io_err *e) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->V || !(t->tok[ids[i]].flags & TOK_PRESENT))
            return io_fail(e, "cannot decode token id %u at position %zu: the vocabulary has %u "
                              "ids%s", ids[i], i, t->V, ids[i] < t->V ? " and this one is unused" : "");
        if ((flags & TOKENIZER_SKIP_SPECIAL) && (t->tok[ids[i]].flags & TOK_SPECIAL)) continue;
        total += t->tok[ids[i]].bytes_len;
    }
    if (total + 1 > out->cap) {
        char *p = realloc(out->data, total + 1);
        CHECK(p, "out of memory (%zu bytes)", total + 1);
        out->data = p;
        out->cap = total + 1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tok_entry *tk = &t->tok[ids[i]];
        if ((flags & TOKENIZER_SKIP_SPECIAL) && (tk->flags & TOK_SPECIAL)) continue;
        memcpy(out->data + k, tk->bytes, tk->bytes_len);
        k += tk->bytes_len;
    }
    out->data[k] = 0;
    out->n = k;
    return 0;
}
