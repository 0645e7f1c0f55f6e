/* text_stream.c — streaming detokenization with UTF-8 and stop-string hold-back (text_stream.h). */
#include "io/text_stream.h"

#include <stdlib.h>
#include <string.h>

#include "io/check.h"

void text_stream_init(struct text_stream *s, const struct tokenizer *tok, const char *const *stops, int n_stop) {
    memset(s, 0, sizeof *s);
    CHECK(n_stop >= 0 && n_stop <= TEXT_STREAM_MAX_STOPS, "%d stop strings (at most %d)", n_stop,
          TEXT_STREAM_MAX_STOPS);
    s->tok = tok;
    for (int i = 0; i < n_stop; i++) {
        CHECK(stops[i] != NULL && stops[i][0] != '\0', "stop string %d is empty", i);
        s->stop[i] = stops[i];
    }
    s->n_stop = n_stop;
}

void text_stream_free(struct text_stream *s) {
    tok_ids_free(&s->ids);
    tok_bytes_free(&s->text);
    memset(s, 0, sizeof *s);
}

size_t utf8_incomplete_tail(const char *str, size_t n) {
    const unsigned char *p = (const unsigned char *)str;
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const unsigned char c = p[n - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

/* Longest suffix of t[from..n) that is a proper prefix of a stop string. */
static size_t stop_prefix_tail(const struct text_stream *s, const char *t, size_t from, size_t n) {
    size_t best = 0;
    for (int i = 0; i < s->n_stop; i++) {
        const size_t L = strlen(s->stop[i]);
        for (size_t k = L - 1; k > best; k--) {
            if (k > n - from) continue;
            if (memcmp(t + n - k, s->stop[i], k) == 0) {
                best = k;
                break;
            }
        }
    }
    return best;
}

int text_stream_push(struct text_stream *s, uint32_t id, const char **out, size_t *out_len, struct io_err *e) {
    CHECK(!s->stopped, "text_stream_push after a stop string");
    if (s->ids.n == s->ids.cap) {
        s->ids.cap = s->ids.cap ? 2 * s->ids.cap : 64;
        s->ids.ids = realloc(s->ids.ids, s->ids.cap * sizeof *s->ids.ids);
        CHECK(s->ids.ids != NULL, "out of memory");
    }
    s->ids.ids[s->ids.n++] = id;
    if (tokenizer_decode(s->tok, s->ids.ids, s->ids.n, TOKENIZER_SKIP_SPECIAL, &s->text, e) != 0) {
        s->ids.n--;
        return -1;
    }
    const char *t = s->text.data;
    const size_t n = s->text.n;
    /* a stop string can only be new where the new bytes are: search from the emitted end less
     * the longest stop string */
    size_t longest = 0;
    for (int i = 0; i < s->n_stop; i++)
        if (strlen(s->stop[i]) > longest) longest = strlen(s->stop[i]);
    const size_t from = s->emitted > longest ? s->emitted - longest : 0;
    size_t cut = n;
    for (int i = 0; i < s->n_stop; i++) {
        const size_t L = strlen(s->stop[i]);
        for (size_t p = from; p + L <= n && p < cut; p++)
            if (memcmp(t + p, s->stop[i], L) == 0) {
                cut = p;
                break;
            }
    }
    size_t end;
    if (cut < n) {
        s->stopped = 1;
        end = cut < s->emitted ? s->emitted : cut;
    } else {
        const size_t hold_utf8 = utf8_incomplete_tail(t, n), hold_stop = stop_prefix_tail(s, t, s->emitted, n);
        const size_t hold = hold_utf8 > hold_stop ? hold_utf8 : hold_stop;
        end = n - hold < s->emitted ? s->emitted : n - hold;
    }
    *out = t + s->emitted;
    *out_len = end - s->emitted;
    s->emitted = end;
    if (s->stopped) s->text.n = end, s->text.data[end] = '\0';
    return 0;
}

void text_stream_finish(struct text_stream *s, const char **out, size_t *out_len) {
    *out = s->text.data ? s->text.data + s->emitted : "";
    *out_len = s->text.n - s->emitted;
    s->emitted = s->text.n;
}

const char *text_stream_text(const struct text_stream *s, size_t *len) {
    *len = s->emitted;
    return s->text.data ? s->text.data : "";
}
