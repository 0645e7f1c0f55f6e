/* safetensors_write.c — the safetensors writer (safetensors.h), byte for byte the layout of the
 * reference writer (Rust `prepare` + `serialize`, NUMERICS.md §4):
 *   - tensors sorted by dtype descending in the enum order, then by name ascending (bytewise);
 *     data laid out in that order with no padding between tensors;
 *   - the header is compact JSON (serde_json::to_string): "__metadata__" first, then each tensor
 *     as {"dtype":"F32","shape":[2,3],"data_offsets":[0,24]} in data order; strings escaped as
 *     serde_json does (\" \\ \b \f \n \r \t, other control bytes \u00XX, UTF-8 kept as is);
 *   - the header padded with spaces to a multiple of 8 bytes.
 * The reference keeps metadata in a hash map, so the order of several metadata keys varies from
 * run to run there; here they are written sorted by key (one key, {"format": "pt"}, is the
 * common case and matches exactly).
 */
#include "io/safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"

struct strbuf {
    char *s;
    size_t n, cap;
};

static void sb_put(struct strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->n + n + 1 > cap) cap *= 2;
        char *ns = realloc(b->s, cap);
        CHECK(ns != NULL, "out of memory for a %zu-byte header", cap);
        b->s = ns, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_str(struct strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct strbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    CHECK(n >= 0 && (size_t)n < sizeof tmp, "formatted piece too long");
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string as serde_json writes it. */
static void sb_json_string(struct strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': sb_str(b, "\\\""); break;
        case '\\': sb_str(b, "\\\\"); break;
        case '\b': sb_str(b, "\\b"); break;
        case '\f': sb_str(b, "\\f"); break;
        case '\n': sb_str(b, "\\n"); break;
        case '\r': sb_str(b, "\\r"); break;
        case '\t': sb_str(b, "\\t"); break;
        default:
            if (*p < 0x20)
                sb_printf(b, "\\u%04x", *p);
            else
                sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

struct order {
    const struct st_tensor *t;
    int64_t numel;
};

static int cmp_write_order(const void *a, const void *b) {
    const struct st_tensor *x = ((const struct order *)a)->t, *y = ((const struct order *)b)->t;
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1; /* dtype descending */
    return strcmp(x->name, y->name);
}

static int cmp_meta_key(const void *a, const void *b) {
    return strcmp(((const struct st_meta *)a)->key, ((const struct st_meta *)b)->key);
}

static int check_inputs(const char *path, const struct st_tensor *tensors, int n, struct order *ord,
                        const struct st_meta *meta, int n_meta, struct io_err *e) {
    for (int i = 0; i < n; i++) {
        const struct st_tensor *t = &tensors[i];
        if (t->name == NULL) return io_fail(e, "%s: tensor %d to write has no name", path, i);
        if (strcmp(t->name, "__metadata__") == 0)
            return io_fail(e, "%s: a tensor may not be named \"__metadata__\"", path);
        if ((int)t->dtype < 0 || t->dtype >= ST_DTYPE_COUNT)
            return io_fail(e, "%s: tensor '%s' has an invalid dtype %d", path, t->name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
            return io_fail(e, "%s: tensor '%s' has %d dimensions (0 to %d allowed)", path, t->name, t->ndim, ST_MAX_DIMS);
        size_t nbytes;
        char sh[256];
        st_shape_str(sh, sizeof sh, t->ndim, t->shape);
        int rc = st_shape_bytes(&ord[i].numel, &nbytes, t->dtype, t->ndim, t->shape);
        if (rc != 0)
            return io_fail(e, "%s: tensor '%s' has shape %s, %s", path, t->name, sh,
                           rc == -1 ? "with a negative or overflowing size" : "not a whole number of bytes");
        if (nbytes != t->nbytes)
            return io_fail(e, "%s: tensor '%s' is %s %s = %zu bytes but %zu bytes were given", path, t->name,
                           st_dtype_name(t->dtype), sh, nbytes, t->nbytes);
        if (nbytes > 0 && t->data == NULL) return io_fail(e, "%s: tensor '%s' has no data", path, t->name);
        ord[i].t = t;
    }
    const char **names = malloc(sizeof *names * (size_t)(n + n_meta + 1));
    CHECK(names != NULL, "out of memory");
    for (int i = 0; i < n; i++) names[i] = tensors[i].name;
    const char *dup = st_first_duplicate(names, n);
    int rc = dup ? io_fail(e, "%s: two tensors are named '%s'", path, dup) : 0;
    for (int i = 0; rc == 0 && i < n_meta; i++) {
        if (meta[i].key == NULL || meta[i].value == NULL)
            rc = io_fail(e, "%s: metadata entry %d has no key or no value", path, i);
        names[i] = meta[i].key;
    }
    if (rc == 0 && (dup = st_first_duplicate(names, n_meta)) != NULL)
        rc = io_fail(e, "%s: the metadata key '%s' is given twice", path, dup);
    free(names);
    return rc;
}

int safetensors_write(const char *path, const struct st_tensor *tensors, int n, const struct st_meta *meta, int n_meta,
                      struct io_err *e) {
    if (n < 0 || n_meta < 0) return io_fail(e, "%s: negative tensor or metadata count", path);
    struct order *ord = calloc((size_t)n + 1, sizeof *ord);
    struct st_meta *msorted = calloc((size_t)n_meta + 1, sizeof *msorted);
    struct file_part *parts = calloc((size_t)n + 2, sizeof *parts);
    CHECK(ord != NULL && msorted != NULL && parts != NULL, "out of memory for %d tensors", n);
    struct strbuf h = {0};
    int rc = check_inputs(path, tensors, n, ord, meta, n_meta, e);
    if (rc != 0) goto out;
    qsort(ord, (size_t)n, sizeof *ord, cmp_write_order);
    if (n_meta > 0) memcpy(msorted, meta, sizeof *meta * (size_t)n_meta);
    qsort(msorted, (size_t)n_meta, sizeof *msorted, cmp_meta_key);

    sb_str(&h, "{");
    if (n_meta > 0) {
        sb_str(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_str(&h, ",");
            sb_json_string(&h, msorted[i].key);
            sb_str(&h, ":");
            sb_json_string(&h, msorted[i].value);
        }
        sb_str(&h, "}");
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const struct st_tensor *t = ord[i].t;
        if (i > 0 || n_meta > 0) sb_str(&h, ",");
        sb_json_string(&h, t->name);
        sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) sb_printf(&h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                  (unsigned long long)(offset + t->nbytes));
        offset += t->nbytes;
        parts[2 + i].data = t->data;
        parts[2 + i].size = t->nbytes;
    }
    sb_str(&h, "}");
    while (h.n % 8 != 0) sb_str(&h, " ");
    if (h.n > 100000000) {
        rc = io_fail(e, "%s: the header would be %zu bytes, over the format's limit of 100000000", path, h.n);
        goto out;
    }

    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
    parts[0].data = len, parts[0].size = 8;
    parts[1].data = h.s, parts[1].size = h.n;
    rc = write_file_atomic_parts(path, parts, n + 2, e);
out:
    free(h.s);
    free(ord);
    free(msorted);
    free(parts);
    return rc;
}
