/* gguf.c — parsing and validating a GGUF file, typed metadata access, dequantization (gguf.h).
 *
 * The parser walks the header with a bounds-checked cursor: every read first checks that the
 * bytes exist, and every count that sizes an allocation is first checked against the smallest
 * number of bytes its items could occupy in what remains of the file, so a lying count fails
 * with a message before anything is allocated.
 */
#include "io/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/check.h"
#include "io/utf8.h"

#define GGUF_MAX_NAME 64           /* ggml GGML_MAX_NAME: tensor names are shorter */
#define GGUF_MAX_KEY (1u << 16)    /* far above any real key */

static const char *const gguf_type_names[GGUF_TYPE_COUNT] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
    "BOOL",  "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};

/* Byte size of a fixed-size value type; 0 for STRING and ARRAY. */
static const int gguf_type_size[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_type_name(enum gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? gguf_type_names[t] : "?";
}

struct ggml_type_info {
    const char *name;
    int block;       /* elements per block; 0: layout unknown here */
    int block_bytes;
};

/* ggml.c type_traits (blck_size, type_size) of the types a Llama GGUF commonly holds. */
static struct ggml_type_info type_info(enum ggml_type t) {
    switch ((int)t) {
    case 0: return (struct ggml_type_info){"F32", 1, 4};
    case 1: return (struct ggml_type_info){"F16", 1, 2};
    case 2: return (struct ggml_type_info){"Q4_0", 32, 18};
    case 3: return (struct ggml_type_info){"Q4_1", 32, 20};
    case 6: return (struct ggml_type_info){"Q5_0", 32, 22};
    case 7: return (struct ggml_type_info){"Q5_1", 32, 24};
    case 8: return (struct ggml_type_info){"Q8_0", 32, 34};
    case 9: return (struct ggml_type_info){"Q8_1", 32, 36};
    case 10: return (struct ggml_type_info){"Q2_K", 256, 84};
    case 11: return (struct ggml_type_info){"Q3_K", 256, 110};
    case 12: return (struct ggml_type_info){"Q4_K", 256, 144};
    case 13: return (struct ggml_type_info){"Q5_K", 256, 176};
    case 14: return (struct ggml_type_info){"Q6_K", 256, 210};
    case 15: return (struct ggml_type_info){"Q8_K", 256, 292};
    case 24: return (struct ggml_type_info){"I8", 1, 1};
    case 25: return (struct ggml_type_info){"I16", 1, 2};
    case 26: return (struct ggml_type_info){"I32", 1, 4};
    case 27: return (struct ggml_type_info){"I64", 1, 8};
    case 28: return (struct ggml_type_info){"F64", 1, 8};
    case 30: return (struct ggml_type_info){"BF16", 1, 2};
    default: return (struct ggml_type_info){NULL, 0, 0};
    }
}

const char *ggml_type_name(enum ggml_type t) {
    const char *n = type_info(t).name;
    return n != NULL ? n : "?";
}

int ggml_block_size(enum ggml_type t) { return type_info(t).block; }

int ggml_row_bytes(size_t *nbytes, enum ggml_type t, int64_t n) {
    struct ggml_type_info ti = type_info(t);
    if (ti.block == 0 || n < 0 || n % ti.block != 0) return -1;
    uint64_t blocks = (uint64_t)n / (uint64_t)ti.block;
    if (blocks > (UINT64_MAX >> 1) / (uint64_t)ti.block_bytes) return -1;
    *nbytes = (size_t)(blocks * (uint64_t)ti.block_bytes);
    return 0;
}

/* ---- the cursor ------------------------------------------------------------------------------ */

struct cursor {
    const uint8_t *base;
    size_t pos, size;
    const char *name;
    struct io_err *e;
};

static size_t remaining(const struct cursor *c) { return c->size - c->pos; }

static int need(struct cursor *c, uint64_t n, const char *what) {
    if (n > remaining(c))
        return io_fail(c->e, "%s: truncated: %s needs %llu bytes at offset %zu but the file has %zu bytes", c->name,
                       what, (unsigned long long)n, c->pos, c->size);
    return 0;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int rd_u32(struct cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what) != 0) return -1;
    *v = (uint32_t)le(c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(struct cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what) != 0) return -1;
    *v = le(c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* A string; `what` names it in messages. max_len 0: no limit beyond the file. */
static int rd_str(struct cursor *c, struct gguf_str *s, uint64_t max_len, const char *what) {
    uint64_t n;
    if (rd_u64(c, &n, what) != 0) return -1;
    if (n > remaining(c))
        return io_fail(c->e, "%s: %s declares a length of %llu bytes but only %zu bytes remain in the file", c->name,
                       what, (unsigned long long)n, remaining(c));
    if (max_len != 0 && n >= max_len)
        return io_fail(c->e, "%s: %s is %llu bytes long; at most %llu are allowed", c->name, what,
                       (unsigned long long)n, (unsigned long long)(max_len - 1));
    if (utf8_invalid_at(c->base + c->pos, n) >= 0) return io_fail(c->e, "%s: %s is not valid UTF-8", c->name, what);
    s->ptr = (const char *)(c->base + c->pos);
    s->len = n;
    c->pos += (size_t)n;
    return 0;
}

static char *str_dup(struct gguf_str s) {
    char *p = malloc((size_t)s.len + 1);
    CHECK(p != NULL, "out of memory");
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

/* ---- key-values ------------------------------------------------------------------------------ */

static int rd_value(struct cursor *c, struct gguf_kv *kv) {
    uint32_t t;
    char what[160];
    snprintf(what, sizeof what, "the type of key '%s'", kv->key);
    if (rd_u32(c, &t, what) != 0) return -1;
    if (t >= GGUF_TYPE_COUNT)
        return io_fail(c->e, "%s: key '%s' has value type %u; known types are 0..%d", c->name, kv->key, t,
                       GGUF_TYPE_COUNT - 1);
    kv->type = (enum gguf_type)t;
    kv->n = 1;
    snprintf(what, sizeof what, "the value of key '%s'", kv->key);
    if (t == GGUF_TYPE_STRING) {
        kv->raw = c->base + c->pos;
        return rd_str(c, &kv->str, 0, what);
    }
    if (t != GGUF_TYPE_ARRAY) {
        if (need(c, (uint64_t)gguf_type_size[t], what) != 0) return -1;
        kv->raw = c->base + c->pos;
        if (t == GGUF_TYPE_BOOL && kv->raw[0] > 1)
            return io_fail(c->e, "%s: key '%s' is a bool with byte value %u; expected 0 or 1", c->name, kv->key,
                           kv->raw[0]);
        c->pos += (size_t)gguf_type_size[t];
        return 0;
    }
    uint32_t at;
    uint64_t n;
    snprintf(what, sizeof what, "the element type of array '%s'", kv->key);
    if (rd_u32(c, &at, what) != 0) return -1;
    if (at >= GGUF_TYPE_COUNT || at == GGUF_TYPE_ARRAY)
        return io_fail(c->e, "%s: array '%s' has element type %u; expected a type in 0..%d other than ARRAY (9)",
                       c->name, kv->key, at, GGUF_TYPE_COUNT - 1);
    kv->arr_type = (enum gguf_type)at;
    snprintf(what, sizeof what, "the length of array '%s'", kv->key);
    if (rd_u64(c, &n, what) != 0) return -1;
    uint64_t min_each = at == GGUF_TYPE_STRING ? 8 : (uint64_t)gguf_type_size[at];
    if (n > remaining(c) / min_each)
        return io_fail(c->e,
                       "%s: array '%s' declares %llu elements of type %s, more than the %zu bytes left in the file "
                       "can hold",
                       c->name, kv->key, (unsigned long long)n, gguf_type_name(kv->arr_type), remaining(c));
    kv->n = n;
    kv->raw = c->base + c->pos;
    if (at != GGUF_TYPE_STRING) {
        if (at == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (kv->raw[i] > 1)
                    return io_fail(c->e, "%s: array '%s' element %llu is a bool with byte value %u; expected 0 or 1",
                                   c->name, kv->key, (unsigned long long)i, kv->raw[i]);
        c->pos += (size_t)(n * min_each);
        return 0;
    }
    kv->strs = calloc(n > 0 ? (size_t)n : 1, sizeof *kv->strs);
    CHECK(kv->strs != NULL, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        snprintf(what, sizeof what, "element %llu of array '%s'", (unsigned long long)i, kv->key);
        if (rd_str(c, &kv->strs[i], 0, what) != 0) return -1;
    }
    return 0;
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The first name given twice, or NULL. */
static const char *first_dup(char **names, int64_t n) {
    if (n < 2) return NULL;
    char **s = malloc((size_t)n * sizeof *s);
    CHECK(s != NULL, "out of memory");
    memcpy(s, names, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_str_ptr);
    const char *dup = NULL;
    for (int64_t i = 1; i < n && dup == NULL; i++)
        if (strcmp(s[i - 1], s[i]) == 0) dup = s[i];
    free(s);
    return dup;
}

/* ---- tensor infos ---------------------------------------------------------------------------- */

static int rd_tensor(struct cursor *c, struct gguf_tensor *t, int64_t idx) {
    char what[160];
    struct gguf_str s;
    snprintf(what, sizeof what, "the name of tensor %lld", (long long)idx);
    if (rd_str(c, &s, GGUF_MAX_NAME, what) != 0) return -1;
    t->name = str_dup(s);
    uint32_t nd;
    snprintf(what, sizeof what, "the dimension count of tensor '%s'", t->name);
    if (rd_u32(c, &nd, what) != 0) return -1;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return io_fail(c->e, "%s: tensor '%s' has %u dimensions; expected 1..%d", c->name, t->name, nd, GGUF_MAX_DIMS);
    t->ndim = (int)nd;
    for (int j = 0; j < GGUF_MAX_DIMS; j++) t->ne[j] = 1;
    uint64_t numel = 1;
    for (uint32_t j = 0; j < nd; j++) {
        uint64_t d;
        snprintf(what, sizeof what, "dimension %u of tensor '%s'", j, t->name);
        if (rd_u64(c, &d, what) != 0) return -1;
        if (d > (uint64_t)INT64_MAX || (d != 0 && numel > ((uint64_t)INT64_MAX) / d))
            return io_fail(c->e, "%s: tensor '%s' dimension %u is %llu: the element count overflows 63 bits",
                           c->name, t->name, j, (unsigned long long)d);
        numel *= d;
        t->ne[j] = (int64_t)d;
    }
    t->numel = (int64_t)numel;
    uint32_t ty;
    snprintf(what, sizeof what, "the type of tensor '%s'", t->name);
    if (rd_u32(c, &ty, what) != 0) return -1;
    t->type = (enum ggml_type)ty;
    struct ggml_type_info ti = type_info(t->type);
    if (ti.block == 0)
        return io_fail(c->e, "%s: tensor '%s' has ggml type %u, which this reader does not know", c->name, t->name, ty);
    if (t->ne[0] % ti.block != 0)
        return io_fail(c->e, "%s: tensor '%s' of type %s has rows of %lld elements, not a multiple of its block of %d",
                       c->name, t->name, ti.name, (long long)t->ne[0], ti.block);
    if (ggml_row_bytes(&t->nbytes, t->type, t->numel) != 0)
        return io_fail(c->e, "%s: tensor '%s' is too large (%lld elements of %s)", c->name, t->name,
                       (long long)t->numel, ti.name);
    snprintf(what, sizeof what, "the offset of tensor '%s'", t->name);
    return rd_u64(c, &t->offset, what);
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a, *y = *(const struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

static int check_layout(struct gguf_file *g, struct cursor *c) {
    if (g->n_tensors == 0) return 0;
    size_t data_size = g->data_offset <= c->size ? c->size - g->data_offset : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return io_fail(c->e, "%s: tensor '%s' has data offset %llu, not a multiple of the alignment %u", c->name,
                           t->name, (unsigned long long)t->offset, g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return io_fail(c->e,
                           "%s: tensor '%s' needs bytes [%llu, %llu) of the data section, which has %zu bytes "
                           "(the file is truncated or the offset is wrong)",
                           c->name, t->name, (unsigned long long)t->offset,
                           (unsigned long long)(t->offset + (uint64_t)t->nbytes), data_size);
        /* An empty tensor may sit at the very end (or past a short file's data section). */
        t->data = t->nbytes > 0 ? c->base + g->data_offset + t->offset : c->base;
    }
    const struct gguf_tensor **byoff = malloc((size_t)g->n_tensors * sizeof *byoff);
    CHECK(byoff != NULL, "out of memory");
    for (int64_t i = 0; i < g->n_tensors; i++) byoff[i] = &g->tensors[i];
    qsort(byoff, (size_t)g->n_tensors, sizeof *byoff, cmp_tensor_offset);
    int rc = 0;
    for (int64_t i = 1; i < g->n_tensors && rc == 0; i++) {
        const struct gguf_tensor *a = byoff[i - 1], *b = byoff[i];
        if (a->offset + a->nbytes > b->offset)
            rc = io_fail(c->e, "%s: the data of tensors '%s' [%llu, %llu) and '%s' [%llu, ...) overlap", c->name,
                         a->name, (unsigned long long)a->offset, (unsigned long long)(a->offset + a->nbytes),
                         b->name, (unsigned long long)b->offset);
    }
    free(byoff);
    return rc;
}

static int parse(struct gguf_file *g, struct cursor *c) {
    if (need(c, 4, "the magic") != 0) return -1;
    if (memcmp(c->base, "GGUF", 4) != 0)
        return io_fail(c->e, "%s: not a GGUF file (the first 4 bytes are not \"GGUF\")", c->name);
    c->pos = 4;
    if (rd_u32(c, &g->version, "the version") != 0) return -1;
    if (g->version != 2 && g->version != 3)
        return io_fail(c->e, "%s: GGUF version %u; versions 2 and 3 are supported", c->name, g->version);
    uint64_t nt, nkv;
    if (rd_u64(c, &nt, "the tensor count") != 0 || rd_u64(c, &nkv, "the key-value count") != 0) return -1;
    /* Smallest possible sizes: a kv is key length (8) + type (4) + one byte; a tensor info is
     * name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8). */
    if (nkv > remaining(c) / 13)
        return io_fail(c->e, "%s: the header declares %llu key-values, more than the %zu remaining bytes can hold",
                       c->name, (unsigned long long)nkv, remaining(c));
    g->kv = calloc(nkv > 0 ? (size_t)nkv : 1, sizeof *g->kv);
    CHECK(g->kv != NULL, "out of memory");
    for (uint64_t i = 0; i < nkv; i++) {
        struct gguf_str k;
        char what[64];
        snprintf(what, sizeof what, "the key of key-value %llu", (unsigned long long)i);
        if (rd_str(c, &k, GGUF_MAX_KEY, what) != 0) return -1;
        if (k.len == 0) return io_fail(c->e, "%s: key-value %llu has an empty key", c->name, (unsigned long long)i);
        g->kv[i].key = str_dup(k);
        g->n_kv = (int64_t)i + 1;
        if (rd_value(c, &g->kv[i]) != 0) return -1;
    }
    char **names = malloc((g->n_kv > 0 ? (size_t)g->n_kv : 1) * sizeof *names);
    CHECK(names != NULL, "out of memory");
    for (int64_t i = 0; i < g->n_kv; i++) names[i] = g->kv[i].key;
    const char *dup = first_dup(names, g->n_kv);
    free(names);
    if (dup != NULL) return io_fail(c->e, "%s: the key '%s' is given twice", c->name, dup);

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *al = gguf_find_kv(g, "general.alignment");
    if (al != NULL) {
        if (al->type != GGUF_TYPE_UINT32)
            return io_fail(c->e, "%s: 'general.alignment' is %s; expected UINT32", c->name, gguf_type_name(al->type));
        uint32_t a = (uint32_t)le(al->raw, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return io_fail(c->e, "%s: 'general.alignment' is %u; expected a power of two", c->name, a);
        g->alignment = a;
    }

    if (nt > remaining(c) / 32)
        return io_fail(c->e, "%s: the header declares %llu tensors, more than the %zu remaining bytes can hold",
                       c->name, (unsigned long long)nt, remaining(c));
    g->tensors = calloc(nt > 0 ? (size_t)nt : 1, sizeof *g->tensors);
    CHECK(g->tensors != NULL, "out of memory");
    for (uint64_t i = 0; i < nt; i++) {
        g->n_tensors = (int64_t)i + 1;
        if (rd_tensor(c, &g->tensors[i], (int64_t)i) != 0) return -1;
    }
    names = malloc((g->n_tensors > 0 ? (size_t)g->n_tensors : 1) * sizeof *names);
    CHECK(names != NULL, "out of memory");
    for (int64_t i = 0; i < g->n_tensors; i++) names[i] = g->tensors[i].name;
    dup = first_dup(names, g->n_tensors);
    free(names);
    if (dup != NULL) return io_fail(c->e, "%s: the tensor '%s' is given twice", c->name, dup);

    uint64_t off = ((uint64_t)c->pos + g->alignment - 1) / g->alignment * g->alignment;
    g->data_offset = (size_t)off;
    return check_layout(g, c);
}

int gguf_parse(struct gguf_file *g, const uint8_t *data, size_t size, const char *name, struct io_err *e) {
    memset(g, 0, sizeof *g);
    snprintf(g->file.path, sizeof g->file.path, "%s", name);
    struct cursor c = {data, 0, size, name, e};
    if (parse(g, &c) != 0) {
        gguf_close(g);
        return -1;
    }
    return 0;
}

int gguf_open(struct gguf_file *g, const char *path, struct io_err *e) {
    struct mapped_file m;
    memset(g, 0, sizeof *g);
    if (map_file(&m, path, e) != 0) return -1;
    if (gguf_parse(g, m.data, m.size, path, e) != 0) {
        unmap_file(&m);
        return -1;
    }
    g->file = m;
    return 0;
}

void gguf_close(struct gguf_file *g) {
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].strs);
    }
    free(g->kv);
    for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->tensors);
    if (g->file.data != NULL || g->file.size != 0) unmap_file(&g->file);
    memset(g, 0, sizeof *g);
}

/* ---- access ---------------------------------------------------------------------------------- */

const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name) {
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
    return NULL;
}

static int int_at(const uint8_t *p, enum gguf_type t, int64_t *v) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_BOOL: *v = p[0]; return 0;
    case GGUF_TYPE_INT8: *v = (int8_t)p[0]; return 0;
    case GGUF_TYPE_UINT16: *v = (int64_t)le(p, 2); return 0;
    case GGUF_TYPE_INT16: *v = (int16_t)(uint16_t)le(p, 2); return 0;
    case GGUF_TYPE_UINT32: *v = (int64_t)le(p, 4); return 0;
    case GGUF_TYPE_INT32: *v = (int32_t)(uint32_t)le(p, 4); return 0;
    case GGUF_TYPE_INT64: *v = (int64_t)le(p, 8); return 0;
    case GGUF_TYPE_UINT64: {
        uint64_t u = le(p, 8);
        if (u > (uint64_t)INT64_MAX) return -1;
        *v = (int64_t)u;
        return 0;
    }
    default: return -1;
    }
}

static int float_at(const uint8_t *p, enum gguf_type t, double *v) {
    if (t == GGUF_TYPE_FLOAT32) {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        *v = f;
        return 0;
    }
    if (t == GGUF_TYPE_FLOAT64) {
        uint64_t u = le(p, 8);
        memcpy(v, &u, 8);
        return 0;
    }
    return -1;
}

static const char *file_name(const struct gguf_file *g) { return g->file.path[0] ? g->file.path : "gguf"; }

int gguf_get_int(int64_t *out, const struct gguf_file *g, const char *key, struct io_err *e) {
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (kv == NULL) return io_fail(e, "%s: the key '%s' is missing", file_name(g), key);
    if (kv->type == GGUF_TYPE_ARRAY || int_at(kv->raw, kv->type, out) != 0)
        return io_fail(e, "%s: the key '%s' is %s; expected an integer", file_name(g), key, gguf_type_name(kv->type));
    return 0;
}

int gguf_get_float(double *out, const struct gguf_file *g, const char *key, struct io_err *e) {
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (kv == NULL) return io_fail(e, "%s: the key '%s' is missing", file_name(g), key);
    if (kv->type == GGUF_TYPE_ARRAY || float_at(kv->raw, kv->type, out) != 0)
        return io_fail(e, "%s: the key '%s' is %s; expected FLOAT32 or FLOAT64", file_name(g), key,
                       gguf_type_name(kv->type));
    return 0;
}

int gguf_get_string(struct gguf_str *out, const struct gguf_file *g, const char *key, struct io_err *e) {
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (kv == NULL) return io_fail(e, "%s: the key '%s' is missing", file_name(g), key);
    if (kv->type != GGUF_TYPE_STRING)
        return io_fail(e, "%s: the key '%s' is %s; expected STRING", file_name(g), key, gguf_type_name(kv->type));
    *out = kv->str;
    return 0;
}

int gguf_arr_int(int64_t *out, const struct gguf_kv *kv, uint64_t i) {
    CHECK(kv->type == GGUF_TYPE_ARRAY && i < kv->n, "'%s' has no element %llu", kv->key, (unsigned long long)i);
    if (kv->arr_type == GGUF_TYPE_STRING) return -1;
    return int_at(kv->raw + i * (uint64_t)gguf_type_size[kv->arr_type], kv->arr_type, out);
}

int gguf_arr_float(double *out, const struct gguf_kv *kv, uint64_t i) {
    CHECK(kv->type == GGUF_TYPE_ARRAY && i < kv->n, "'%s' has no element %llu", kv->key, (unsigned long long)i);
    if (kv->arr_type == GGUF_TYPE_STRING) return -1;
    return float_at(kv->raw + i * (uint64_t)gguf_type_size[kv->arr_type], kv->arr_type, out);
}
