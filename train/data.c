/* data.c — see data.h. */
#include "train/data.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "io/file.h"
#include "io/file_digest.h"
#include "io/sha256.h"
#include "io/utf8.h"

/* 2: the key is built on the SHA-256 of the file and holds the resolved format */
enum { CACHE_VERSION = 2 };
static const char cache_magic[8] = {'R', 'F', 'T', 'O', 'K', '1', 0, 0};

int token_vec_push(struct token_vec *t, uint32_t word, struct io_err *e) {
    if (t->n == t->cap) {
        const size_t cap = t->cap ? t->cap * 2 : 1024;
        uint32_t *v = (uint32_t *)realloc(t->v, cap * sizeof *v);
        if (!v) return io_fail(e, "out of memory for %zu tokens", cap);
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = word;
    return 0;
}

void token_vec_free(struct token_vec *t) {
    free(t->v);
    memset(t, 0, sizeof *t);
}

/* ---- deterministic permutations ---------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias (rejection on the top of the 64-bit range). */
static uint64_t below(uint64_t *s, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do r = splitmix64(s);
    while (r >= limit);
    return r % n;
}

/* Fisher–Yates over a[0..n). */
static void shuffle(int64_t *a, int64_t n, uint64_t stream) {
    uint64_t s = stream;
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = (int64_t)below(&s, (uint64_t)i + 1);
        const int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static uint64_t stream_key(unsigned long long seed, uint64_t purpose) {
    uint64_t s = (uint64_t)seed ^ (purpose * 0xD1B54A32D192ED03ull);
    return splitmix64(&s);
}

/* ---- input files ------------------------------------------------------------------------- */

static int ends_with_nocase(const char *s, const char *suffix) {
    const size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

const char *data_format_name(enum data_format f) {
    return f == DATA_FORMAT_TEXT ? "text" : f == DATA_FORMAT_JSONL ? "jsonl" : "auto";
}

static int is_blank(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

int data_detect_format(enum data_format *out, const char *path, const uint8_t *data, size_t size,
                       enum data_format requested, struct io_err *e) {
    if (requested != DATA_FORMAT_AUTO) {
        *out = requested;
        return 0;
    }
    size_t i = size >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0 ? 3 : 0; /* a UTF-8 byte order mark */
    while (i < size && is_blank(data[i])) i++;
    const int json_name = ends_with_nocase(path, ".jsonl") || ends_with_nocase(path, ".json") ||
                          ends_with_nocase(path, ".ndjson");
    if (json_name) {
        if (i < size && data[i] != '{')
            return io_fail(e, "%s: named as JSON lines, but the content starts with '%c', not '{' (a JSON array, or "
                              "text?); write one JSON object per line, or pass --data-format text to train on the "
                              "file as text",
                           path, data[i] >= 0x20 && data[i] < 0x7f ? data[i] : '?');
        *out = DATA_FORMAT_JSONL;
        return 0;
    }
    *out = DATA_FORMAT_TEXT;
    if (i == size || data[i] != '{') return 0;
    size_t j = i;
    while (j < size && data[j] != '\n') j++;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts((const char *)data + i, j - i, &end, 0);
    if (o != NULL && cJSON_IsObject(o)) {
        size_t k = (size_t)(end - (const char *)data);
        while (k < j && is_blank(data[k])) k++;
        if (k == j) *out = DATA_FORMAT_JSONL;
    }
    cJSON_Delete(o);
    return 0;
}

/* 1 + the number of newlines in text[0..offset). */
static int line_of(const char *text, size_t offset) {
    int line = 1;
    for (size_t i = 0; i < offset; i++) line += text[i] == '\n';
    return line;
}

static int encode_doc(const struct data_encoder *enc, const char *text, size_t len, struct token_vec *out,
                      size_t *bad_offset, struct io_err *e) {
    if (enc->add_bos && token_vec_push(out, enc->bos, e)) return -1;
    if (enc->encode(enc->self, text, len, DATA_TARGET, out, bad_offset, e)) return -1;
    return token_vec_push(out, enc->eos | DATA_TARGET, e);
}

static const char *json_string(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jsonl_line(const char *path, int lineno, const char *line, size_t len, const struct data_encoder *enc,
                      struct token_vec *out, struct io_err *e) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(line, len, &end, 0);
    int rc = -1;
    size_t bad = SIZE_MAX;
    if (!j || !cJSON_IsObject(j)) {
        io_fail(e, "%s:%d: not a JSON object", path, lineno);
        goto done;
    }
    size_t rest = (size_t)(end - line);
    while (rest < len && is_blank((uint8_t)line[rest])) rest++;
    if (rest < len) {
        io_fail(e, "%s:%d: unexpected text after the JSON object: '%.24s' (one object per line)", path, lineno,
                line + rest);
        goto done;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const char *text = json_string(j, "text"), *prompt = json_string(j, "prompt"),
               *response = json_string(j, "response");
    const int kinds = (text != NULL) + (prompt != NULL || response != NULL) + (msgs != NULL);
    if (kinds != 1) {
        io_fail(e, "%s:%d: expected exactly one of \"text\", \"prompt\"+\"response\" or \"messages\" (strings)",
                path, lineno);
        goto done;
    }
    if (text) {
        if ((rc = encode_doc(enc, text, strlen(text), out, &bad, e)) != 0) io_fail_context(e, "%s:%d", path, lineno);
    } else if (prompt || response) {
        if (!prompt || !response) {
            io_fail(e, "%s:%d: \"prompt\" and \"response\" must both be strings", path, lineno);
            goto done;
        }
        if ((enc->add_bos && token_vec_push(out, enc->bos, e)) ||
            enc->encode(enc->self, prompt, strlen(prompt), 0, out, &bad, e) ||
            enc->encode(enc->self, response, strlen(response), DATA_TARGET, out, &bad, e) ||
            token_vec_push(out, enc->eos | DATA_TARGET, e)) {
            io_fail_context(e, "%s:%d", path, lineno);
            goto done;
        }
        rc = 0;
    } else {
        const int n = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : -1;
        if (n <= 0) {
            io_fail(e, "%s:%d: \"messages\" must be a non-empty array", path, lineno);
            goto done;
        }
        if (!enc->encode_chat) {
            io_fail(e, "%s:%d: this model's tokenizer has no chat template for \"messages\"", path, lineno);
            goto done;
        }
        struct chat_message *m = (struct chat_message *)calloc((size_t)n, sizeof *m);
        if (!m) {
            io_fail(e, "out of memory");
            goto done;
        }
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            const cJSON *it = cJSON_GetArrayItem(msgs, i);
            m[i].role = json_string(it, "role");
            m[i].content = json_string(it, "content");
            m[i].content_len = m[i].content ? strlen(m[i].content) : 0;
            if (!m[i].role || !m[i].content) {
                io_fail(e, "%s:%d: message %d needs string \"role\" and \"content\"", path, lineno, i);
                ok = 0;
            } else if (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") && strcmp(m[i].role, "assistant")) {
                io_fail(e, "%s:%d: message %d has role \"%s\" (expected system, user or assistant)", path, lineno, i,
                        m[i].role);
                ok = 0;
            }
        }
        if (ok && enc->encode_chat(enc->self, m, n, out, e) == 0) {
            rc = 0;
        } else if (ok) {
            io_fail_context(e, "%s:%d", path, lineno);
        }
        free(m);
    }
done:
    cJSON_Delete(j);
    return rc;
}

/* The words of one input file's bytes in its resolved format (path names it), appended to out. */
static int tokenize_bytes(const char *path, enum data_format format, const uint8_t *data, size_t size,
                          const struct data_encoder *enc, struct token_vec *out, struct io_err *e) {
    const int64_t bad = utf8_invalid_at(data, size);
    if (bad >= 0) return io_fail(e, "%s: not UTF-8 text (invalid byte sequence at byte %lld)", path, (long long)bad);
    if (format != DATA_FORMAT_JSONL) {
        if (size == 0) return 0;
        size_t at = SIZE_MAX;
        if (encode_doc(enc, (const char *)data, size, out, &at, e) == 0) return 0;
        if (at < size) return io_fail_context(e, "%s:%d", path, line_of((const char *)data, at));
        return io_fail_context(e, "%s", path);
    }
    size_t i = size >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0 ? 3 : 0; /* a UTF-8 byte order mark */
    int lineno = 0;
    while (i < size) {
        size_t j = i;
        while (j < size && data[j] != '\n') j++;
        lineno++;
        size_t k = i;
        while (k < j && (data[k] == ' ' || data[k] == '\t' || data[k] == '\r')) k++;
        if (k < j && jsonl_line(path, lineno, (const char *)data + i, j - i, enc, out, e)) return -1;
        i = j + 1;
    }
    return 0;
}

int data_tokenize_file(const char *path, enum data_format format, const struct data_encoder *enc,
                       struct token_vec *out, struct io_err *e) {
    struct mapped_file m;
    if (map_file(&m, path, e)) return -1;
    enum data_format f;
    int rc = data_detect_format(&f, path, m.data, m.size, format, e);
    if (rc == 0) rc = tokenize_bytes(path, f, m.data, m.size, enc, out, e);
    unmap_file(&m);
    return rc;
}

/* Cache: magic (8) | count u64 | words u32[count], little-endian as the host (x86-64/aarch64). */
static void cache_path_of(char *buf, size_t cap, const char *cache, const char *content_sha256,
                          enum data_format format, const struct data_encoder *enc) {
    struct sha256 s;
    sha256_init(&s);
    char head[256];
    const int hn = snprintf(head, sizeof head, "refine-tokens-v%d|%s|%d|%s|%s", CACHE_VERSION, enc->identity,
                            enc->add_bos, data_format_name(format), content_sha256);
    sha256_update(&s, head, (size_t)hn);
    uint8_t d[32];
    char hex[65];
    sha256_final(&s, d);
    sha256_hex(d, hex);
    snprintf(buf, cap, "%s/tokens/%s.tok", cache, hex);
}

/* The first word of w[0..n) whose id is ≥ vocab (0: none checked); n when all are below. */
static size_t first_beyond(const uint32_t *w, size_t n, uint32_t vocab) {
    if (vocab == 0) return n;
    for (size_t i = 0; i < n; i++)
        if ((w[i] & DATA_ID_MASK) >= vocab) return i;
    return n;
}

static int cache_read(const char *cpath, struct token_vec *out, struct io_err *e) {
    if (!file_exists(cpath)) return 1;
    struct mapped_file m;
    struct io_err ignored;
    if (map_file(&m, cpath, &ignored)) return 1;
    uint64_t count = 0;
    int ok = m.size >= 16 && memcmp(m.data, cache_magic, 8) == 0;
    if (ok) {
        memcpy(&count, m.data + 8, 8);
        ok = count <= (m.size - 16) / 4 && m.size == 16 + count * 4;
    }
    if (ok)
        for (uint64_t i = 0; i < count; i++) {
            uint32_t w;
            memcpy(&w, m.data + 16 + 4 * i, 4);
            if (token_vec_push(out, w, e)) {
                unmap_file(&m);
                return -1;
            }
        }
    unmap_file(&m);
    return ok ? 0 : 1; /* a damaged entry is rebuilt */
}

static int cache_write(const char *cache, const char *cpath, const uint32_t *w, size_t n, struct io_err *e) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/tokens", cache);
    if (make_dirs(dir, e)) return -1;
    const uint64_t count = n;
    struct file_part parts[3] = {{cache_magic, 8}, {&count, 8}, {w, n * 4}};
    return write_file_atomic_parts(cpath, parts, 3, e);
}

/* Collects the regular files under path (or path itself), sorted. */
struct path_list {
    char **p;
    int n, cap;
};

static int path_push(struct path_list *l, const char *s, struct io_err *e) {
    if (l->n == l->cap) {
        const int cap = l->cap ? 2 * l->cap : 16;
        char **p = (char **)realloc(l->p, (size_t)cap * sizeof *p);
        if (!p) return io_fail(e, "out of memory");
        l->p = p;
        l->cap = cap;
    }
    if (!(l->p[l->n] = strdup(s))) return io_fail(e, "out of memory");
    l->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int walk(const char *path, struct path_list *l, int depth, struct io_err *e) {
    struct stat st;
    if (stat(path, &st) != 0) return io_fail(e, "%s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) return path_push(l, path, e);
    if (!S_ISDIR(st.st_mode)) return io_fail(e, "%s: not a regular file or folder", path);
    if (depth > 32) return io_fail(e, "%s: folders nested too deeply", path);
    DIR *d = opendir(path);
    if (!d) return io_fail(e, "%s: %s", path, strerror(errno));
    struct path_list here = {0};
    int rc = 0;
    for (struct dirent *de; rc == 0 && (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.') continue;
        char child[4096];
        if (snprintf(child, sizeof child, "%s/%s", path, de->d_name) >= (int)sizeof child)
            rc = io_fail(e, "%s/%s: path too long", path, de->d_name);
        else
            rc = path_push(&here, child, e);
    }
    closedir(d);
    if (here.n) qsort(here.p, (size_t)here.n, sizeof *here.p, cmp_str);
    for (int i = 0; i < here.n; i++) {
        if (rc == 0) rc = walk(here.p[i], l, depth + 1, e);
        free(here.p[i]);
    }
    free(here.p);
    return rc;
}

/* ---- packing, split, batches ------------------------------------------------------------- */

static int finish_open(struct dataset *d, const struct data_options *o, struct io_err *e) {
    d->T = o->T;
    d->seed = o->seed;
    d->epoch_cached = -1;
    if (o->T < 1) return io_fail(e, "sequence length must be at least 1");
    if (d->S < (size_t)o->T + 1)
        return io_fail(e, "the data holds %zu tokens, fewer than one sequence of %d (+1) tokens", d->S, o->T);
    d->n_seq = (int64_t)((d->S - 1) / (size_t)o->T);
    for (size_t i = 0; i < d->S; i++) d->n_targets += (d->stream[i] & DATA_TARGET) != 0;
    int64_t n_val = 0;
    if (o->val_fraction > 0 && d->n_seq >= 2) {
        n_val = (int64_t)llround((double)o->val_fraction * (double)d->n_seq);
        if (n_val < 1) n_val = 1;
        if (n_val > d->n_seq - 1) n_val = d->n_seq - 1;
    }
    int64_t *perm = (int64_t *)malloc((size_t)d->n_seq * sizeof *perm);
    d->epoch_order = (int64_t *)malloc((size_t)(d->n_seq - n_val) * sizeof *d->epoch_order);
    if (!perm || !d->epoch_order) {
        free(perm);
        return io_fail(e, "out of memory");
    }
    for (int64_t i = 0; i < d->n_seq; i++) perm[i] = i;
    shuffle(perm, d->n_seq, stream_key(o->seed, 1));
    d->n_val = n_val;
    d->n_train = d->n_seq - n_val;
    d->val_order = perm;
    d->train_set = perm + n_val;
    return 0;
}

int dataset_from_stream(struct dataset *d, const uint32_t *stream, size_t S, const struct data_options *o,
                        struct io_err *e) {
    memset(d, 0, sizeof *d);
    for (size_t i = 0; i < S; i++)
        if (token_vec_push(&d->owned, stream[i], e)) return -1;
    d->stream = d->owned.v;
    d->S = d->owned.n;
    if (finish_open(d, o, e)) {
        dataset_close(d);
        return -1;
    }
    return 0;
}

int dataset_open(struct dataset *d, const char *const *paths, int n_paths, const struct data_encoder *enc,
                 const struct data_options *o, struct io_err *e) {
    memset(d, 0, sizeof *d);
    struct path_list files = {0};
    int rc = 0;
    if (n_paths < 1) rc = io_fail(e, "no training data given (--data)");
    for (int i = 0; i < n_paths && rc == 0; i++) {
        const int before = files.n;
        rc = walk(paths[i], &files, 0, e);
        if (rc == 0 && files.n == before) rc = io_fail(e, "%s: folder holds no data files", paths[i]);
    }
    if (rc == 0 && files.n > 0) {
        d->files = (struct data_file *)calloc((size_t)files.n, sizeof *d->files);
        if (!d->files) rc = io_fail(e, "out of memory");
    }
    char memo[1200];
    if (o->cache) snprintf(memo, sizeof memo, "%s/digests", o->cache);
    for (int i = 0; i < files.n && rc == 0; i++) {
        /* The content digest (remembered by the file's identity) keys the cache; the file is
         * mapped only to detect its format and, on a miss, to be tokenized. */
        struct data_file *df = &d->files[i];
        df->path = files.p[i];
        files.p[i] = NULL;
        d->n_files++;
        if ((rc = file_sha256(df->sha256, df->path, o->cache ? memo : NULL, e))) break;
        struct mapped_file m;
        if ((rc = map_file(&m, df->path, e))) break;
        enum data_format format;
        if ((rc = data_detect_format(&format, df->path, m.data, m.size, o->format, e))) {
            unmap_file(&m);
            break;
        }
        char cpath[1400];
        const size_t before = d->owned.n;
        int hit = 1;
        if (o->cache) {
            cache_path_of(cpath, sizeof cpath, o->cache, df->sha256, format, enc);
            hit = cache_read(cpath, &d->owned, e);
            if (hit < 0) rc = -1;
            /* an entry with an id beyond the vocabulary is damaged (its key names the tokenizer) */
            if (hit == 0 && first_beyond(d->owned.v + before, d->owned.n - before, o->vocab_size) < d->owned.n - before)
                hit = 1;
        }
        if (rc == 0 && hit != 0) {
            d->owned.n = before;
            rc = tokenize_bytes(df->path, format, m.data, m.size, enc, &d->owned, e);
            const size_t n = d->owned.n - before, at = rc == 0 ? first_beyond(d->owned.v + before, n, o->vocab_size) : n;
            if (at < n)
                rc = io_fail(e, "%s: the tokenizer produced token id %u, beyond the model's vocabulary of %u ids", df->path,
                             d->owned.v[before + at] & DATA_ID_MASK, o->vocab_size);
            if (rc == 0 && o->cache) {
                struct io_err werr;
                if (cache_write(o->cache, cpath, d->owned.v + before, n, &werr))
                    fprintf(stderr, "refine: warning: token cache not written (%s)\n", werr.msg);
            }
        } else if (rc == 0) {
            d->cache_hits++;
        }
        unmap_file(&m);
    }
    for (int i = 0; i < files.n; i++) free(files.p[i]);
    free(files.p);
    if (rc == 0) {
        d->stream = d->owned.v;
        d->S = d->owned.n;
        rc = finish_open(d, o, e);
    }
    if (rc) dataset_close(d);
    return rc;
}

void dataset_close(struct dataset *d) {
    for (int i = 0; d->files != NULL && i < d->n_files; i++) free(d->files[i].path);
    free(d->files);
    token_vec_free(&d->owned);
    free(d->val_order);
    free(d->epoch_order);
    memset(d, 0, sizeof *d);
}

int64_t dataset_sequence(const struct dataset *d, int64_t seq, int32_t *tokens, int32_t *labels) {
    const uint32_t *w = d->stream + (size_t)seq * (size_t)d->T;
    int64_t valid = 0;
    for (int t = 0; t < d->T; t++) {
        tokens[t] = (int32_t)(w[t] & DATA_ID_MASK);
        const uint32_t next = w[t + 1];
        if (next & DATA_TARGET) {
            labels[t] = (int32_t)(next & DATA_ID_MASK);
            valid++;
        } else {
            labels[t] = -100;
        }
    }
    return valid;
}

static const int64_t *epoch_order(struct dataset *d, int epoch) {
    if (d->epoch_cached != epoch) {
        memcpy(d->epoch_order, d->train_set, (size_t)d->n_train * sizeof *d->epoch_order);
        shuffle(d->epoch_order, d->n_train, stream_key(d->seed, 1000 + (uint64_t)epoch));
        d->epoch_cached = epoch;
    }
    return d->epoch_order;
}

static int64_t src_train_batch(void *self, int epoch, int64_t pos, int B, int32_t *tokens, int32_t *labels) {
    struct dataset *d = (struct dataset *)self;
    if (d->n_train == 0) return 0;
    const int64_t *order = epoch_order(d, epoch);
    int64_t valid = 0;
    for (int b = 0; b < B; b++) {
        const int64_t seq = order[(pos + b) % d->n_train];
        valid += dataset_sequence(d, seq, tokens + (size_t)b * d->T, labels + (size_t)b * d->T);
    }
    return valid;
}

static int64_t src_val_batch(void *self, int64_t first, int B, int32_t *tokens, int32_t *labels) {
    struct dataset *d = (struct dataset *)self;
    if (d->n_val == 0) return 0;
    int64_t valid = 0;
    for (int b = 0; b < B; b++) {
        const int64_t seq = d->val_order[(first + b) % d->n_val];
        valid += dataset_sequence(d, seq, tokens + (size_t)b * d->T, labels + (size_t)b * d->T);
    }
    return valid;
}

void dataset_batch_source(struct dataset *d, struct batch_source *src) {
    memset(src, 0, sizeof *src);
    src->self = d;
    src->T = d->T;
    src->n_train = d->n_train;
    src->n_val = d->n_val;
    src->train_batch = src_train_batch;
    src->val_batch = src_val_batch;
}
