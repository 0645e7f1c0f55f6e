/* safetensors.c — the safetensors reader, dtype table and conversions (safetensors.h).
 *
 * The reader follows safetensors' Rust `read_metadata` + `Metadata::validate` (NUMERICS.md §4)
 * and is stricter in a few places that cannot matter for a well-formed file:
 *   - the header must be valid UTF-8 and contain no control bytes other than JSON whitespace
 *     (cJSON would otherwise skip any byte below 0x20 as whitespace);
 *   - after the JSON object only JSON whitespace may follow (the reference writer pads with
 *     spaces; serde_json accepts any JSON whitespace there);
 *   - at most ST_MAX_DIMS dimensions;
 *   - numbers must be integers in [0, 2^53): cJSON parses numbers as doubles, so larger values
 *     could not be represented exactly (no real file comes near: 2^53 bytes is 8 PiB). A number
 *     written "2.0" is read as the integer 2 (serde would reject it).
 * Every check names the file and, where there is one, the tensor.
 */
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/utf8.h"

#define ST_MAX_HEADER 100000000ull
#define ST_MAX_INT 9007199254740992.0 /* 2^53: every smaller non-negative integer is exact */

static const struct {
    const char *name;
    int bits;
} dtype_table[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 8},
    [ST_F4] = {"F4", 4},
    [ST_F6_E2M3] = {"F6_E2M3", 6},
    [ST_F6_E3M2] = {"F6_E3M2", 6},
    [ST_U8] = {"U8", 8},
    [ST_I8] = {"I8", 8},
    [ST_F8_E5M2] = {"F8_E5M2", 8},
    [ST_F8_E4M3] = {"F8_E4M3", 8},
    [ST_F8_E8M0] = {"F8_E8M0", 8},
    [ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [ST_I16] = {"I16", 16},
    [ST_U16] = {"U16", 16},
    [ST_F16] = {"F16", 16},
    [ST_BF16] = {"BF16", 16},
    [ST_I32] = {"I32", 32},
    [ST_U32] = {"U32", 32},
    [ST_F32] = {"F32", 32},
    [ST_C64] = {"C64", 64},
    [ST_F64] = {"F64", 64},
    [ST_I64] = {"I64", 64},
    [ST_U64] = {"U64", 64},
};

const char *st_dtype_name(enum st_dtype t) {
    if ((int)t < 0 || t >= ST_DTYPE_COUNT) return "?";
    return dtype_table[t].name;
}

int st_dtype_from_name(enum st_dtype *t, const char *name) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (strcmp(dtype_table[i].name, name) == 0) {
            *t = (enum st_dtype)i;
            return 0;
        }
    }
    return -1;
}

int st_dtype_bits(enum st_dtype t) {
    if ((int)t < 0 || t >= ST_DTYPE_COUNT) return 0;
    return dtype_table[t].bits;
}

int st_shape_bytes(int64_t *numel, size_t *nbytes, enum st_dtype dtype, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return -1;
    }
    int64_t bits;
    if (__builtin_mul_overflow(n, (int64_t)st_dtype_bits(dtype), &bits)) return -1;
    if (bits % 8 != 0) return -2;
    *numel = n;
    *nbytes = (size_t)(bits / 8);
    return 0;
}

void st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* ---- header validation helpers ---- */

static int is_json_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* A JSON number that is an integer in [0, 2^53). */
static int json_uint(int64_t *out, const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d < ST_MAX_INT) || d != (double)(int64_t)d) return -1;
    *out = (int64_t)d;
    return 0;
}

static int cmp_name_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name occurring twice among n, or NULL. Sorts a copy of the pointer array. */
const char *st_first_duplicate(const char *const *names, int n) {
    if (n < 2) return NULL;
    const char **s = malloc(sizeof *s * (size_t)n);
    CHECK(s != NULL, "out of memory for %d names", n);
    memcpy(s, names, sizeof *s * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_name_ptr);
    const char *dup = NULL;
    for (int i = 1; i < n && dup == NULL; i++)
        if (strcmp(s[i - 1], s[i]) == 0) dup = s[i];
    free(s);
    return dup;
}

struct raw_entry {
    int64_t begin, end;
    int index;        /* into the tensors array in header order */
    const char *name; /* the tie-break of empty tensors at one offset */
};

static int cmp_offsets(const void *a, const void *b) {
    const struct raw_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d != NULL) memcpy(d, s, n);
    return d;
}

static int parse_metadata(struct safetensors *st, const cJSON *obj, const char *path, struct io_err *e) {
    if (cJSON_IsNull(obj)) return 0;
    if (!cJSON_IsObject(obj)) return io_fail(e, "%s: \"__metadata__\" is not an object of strings", path);
    int n = cJSON_GetArraySize(obj);
    st->meta = calloc((size_t)(n > 0 ? n : 1), sizeof *st->meta);
    if (st->meta == NULL) return io_fail(e, "%s: out of memory", path);
    for (const cJSON *m = obj->child; m != NULL; m = m->next) {
        if (!cJSON_IsString(m) || m->valuestring == NULL)
            return io_fail(e, "%s: \"__metadata__\" entry '%s' is not a string (metadata maps strings to strings)", path,
                           m->string);
        struct st_meta *sm = &st->meta[st->n_meta];
        sm->key = dup_str(m->string);
        sm->value = dup_str(m->valuestring);
        if (sm->key == NULL || sm->value == NULL) {
            free(sm->key), free(sm->value);
            return io_fail(e, "%s: out of memory", path);
        }
        st->n_meta++;
    }
    const char **keys = malloc(sizeof *keys * (size_t)(n > 0 ? n : 1));
    if (keys == NULL) return io_fail(e, "%s: out of memory", path);
    for (int i = 0; i < st->n_meta; i++) keys[i] = st->meta[i].key;
    const char *dup = st_first_duplicate(keys, st->n_meta);
    int rc = dup ? io_fail(e, "%s: \"__metadata__\" has the key '%s' twice", path, dup) : 0;
    free(keys);
    return rc;
}

/* One tensor entry {"dtype", "shape", "data_offsets"}; keys other than these are ignored (as the
 * reference reader does), a repeated one is an error. */
static int parse_entry(struct st_tensor *t, struct raw_entry *r, const cJSON *v, const char *path, struct io_err *e) {
    if (!cJSON_IsObject(v))
        return io_fail(e, "%s: tensor '%s' is not an object {\"dtype\", \"shape\", \"data_offsets\"}", path, t->name);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *f = v->child; f != NULL; f = f->next) {
        const cJSON **slot = strcmp(f->string, "dtype") == 0          ? &dtype
                             : strcmp(f->string, "shape") == 0        ? &shape
                             : strcmp(f->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (slot == NULL) continue;
        if (*slot != NULL) return io_fail(e, "%s: tensor '%s' has the key \"%s\" twice", path, t->name, f->string);
        *slot = f;
    }
    if (dtype == NULL || shape == NULL || offs == NULL)
        return io_fail(e, "%s: tensor '%s' lacks \"%s\" (each tensor needs dtype, shape and data_offsets)", path, t->name,
                       dtype == NULL ? "dtype" : shape == NULL ? "shape" : "data_offsets");
    if (!cJSON_IsString(dtype) || st_dtype_from_name(&t->dtype, dtype->valuestring) != 0)
        return io_fail(e, "%s: tensor '%s' has unknown dtype %s%s%s (expected one of BOOL, U8, I8, F8_E4M3, F8_E5M2, I16, "
                       "U16, F16, BF16, I32, U32, F32, F64, I64, U64, ...)",
                       path, t->name, cJSON_IsString(dtype) ? "'" : "",
                       cJSON_IsString(dtype) ? dtype->valuestring : "(not a string)", cJSON_IsString(dtype) ? "'" : "");
    if (!cJSON_IsArray(shape)) return io_fail(e, "%s: tensor '%s' has a shape that is not a list", path, t->name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > ST_MAX_DIMS)
        return io_fail(e, "%s: tensor '%s' has %d dimensions; at most %d are supported", path, t->name, nd, ST_MAX_DIMS);
    t->ndim = 0;
    for (const cJSON *d = shape->child; d != NULL; d = d->next) {
        if (json_uint(&t->shape[t->ndim], d) != 0)
            return io_fail(e, "%s: tensor '%s' has a shape entry that is not a non-negative integer", path, t->name);
        t->ndim++;
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || json_uint(&r->begin, offs->child) != 0 ||
        json_uint(&r->end, offs->child->next) != 0)
        return io_fail(e, "%s: tensor '%s' has data_offsets that are not two non-negative integers [begin, end]", path,
                       t->name);
    if (r->end < r->begin)
        return io_fail(e, "%s: tensor '%s' has data_offsets [%lld, %lld) that end before they begin", path, t->name,
                       (long long)r->begin, (long long)r->end);
    char sh[256];
    st_shape_str(sh, sizeof sh, t->ndim, t->shape);
    int rc = st_shape_bytes(&t->numel, &t->nbytes, t->dtype, t->ndim, t->shape);
    if (rc == -1)
        return io_fail(e, "%s: tensor '%s' has shape %s whose size in bytes overflows 64 bits", path, t->name, sh);
    if (rc == -2)
        return io_fail(e, "%s: tensor '%s' is %s %s, which is not a whole number of bytes", path, t->name,
                       st_dtype_name(t->dtype), sh);
    if ((uint64_t)(r->end - r->begin) != (uint64_t)t->nbytes)
        return io_fail(e, "%s: tensor '%s' has data_offsets [%lld, %lld) (%lld bytes) but %s %s needs %zu bytes", path,
                       t->name, (long long)r->begin, (long long)r->end, (long long)(r->end - r->begin),
                       st_dtype_name(t->dtype), sh, t->nbytes);
    return 0;
}

/* Parses and validates the header JSON `hdr` (n bytes, NUL-terminated copy) against a data
 * buffer of `buf_len` bytes starting at `data`. */
static int parse_header(struct safetensors *st, const char *hdr, size_t n, const uint8_t *data, uint64_t buf_len,
                        const char *path, struct io_err *e) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, n, &end, 0);
    if (root == NULL) {
        const char *at = cJSON_GetErrorPtr();
        long off = (at != NULL && at >= hdr && at <= hdr + n) ? (long)(at - hdr) : -1;
        return io_fail(e, "%s: the header is not valid JSON (error near byte %ld of the header)", path, off);
    }
    int rc = 0;
    struct raw_entry *raw = NULL;
    const char **names = NULL;
    for (const char *p = end; p != NULL && p < hdr + n; p++) {
        if (!is_json_space((uint8_t)*p)) {
            rc = io_fail(e, "%s: the header has bytes after its JSON object (at byte %ld; only space padding may follow)",
                         path, (long)(p - hdr));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        rc = io_fail(e, "%s: the header is not a JSON object", path);
        goto done;
    }
    int n_items = cJSON_GetArraySize(root);
    names = malloc(sizeof *names * (size_t)(n_items > 0 ? n_items : 1));
    st->tensors = calloc((size_t)(n_items > 0 ? n_items : 1), sizeof *st->tensors);
    raw = calloc((size_t)(n_items > 0 ? n_items : 1), sizeof *raw);
    if (names == NULL || st->tensors == NULL || raw == NULL) {
        rc = io_fail(e, "%s: out of memory for %d header entries", path, n_items);
        goto done;
    }
    int n_names = 0;
    for (const cJSON *item = root->child; item != NULL; item = item->next) {
        names[n_names++] = item->string;
        if (strcmp(item->string, "__metadata__") == 0) {
            if (st->meta != NULL || st->n_meta != 0) continue; /* reported as a duplicate below */
            if ((rc = parse_metadata(st, item, path, e)) != 0) goto done;
            continue;
        }
        struct st_tensor *t = &st->tensors[st->n_tensors];
        if ((t->name = dup_str(item->string)) == NULL) {
            rc = io_fail(e, "%s: out of memory", path);
            goto done;
        }
        st->n_tensors++;
        raw[st->n_tensors - 1].index = st->n_tensors - 1;
        raw[st->n_tensors - 1].name = t->name;
        if ((rc = parse_entry(t, &raw[st->n_tensors - 1], item, path, e)) != 0) goto done;
    }
    const char *dup = st_first_duplicate(names, n_names);
    if (dup != NULL) {
        rc = io_fail(e, "%s: the header names '%s' twice", path, dup);
        goto done;
    }
    /* The offsets, sorted, must tile [0, buf_len) exactly. */
    qsort(raw, (size_t)st->n_tensors, sizeof *raw, cmp_offsets);
    uint64_t at = 0;
    for (int i = 0; i < st->n_tensors; i++) {
        const struct st_tensor *t = &st->tensors[raw[i].index];
        uint64_t b = (uint64_t)raw[i].begin, en = (uint64_t)raw[i].end;
        if (en > buf_len) {
            rc = io_fail(e, "%s: tensor '%s' has data_offsets [%llu, %llu) past the end of the %llu-byte data buffer "
                         "(truncated file?)", path, t->name, (unsigned long long)b, (unsigned long long)en,
                         (unsigned long long)buf_len);
            goto done;
        }
        if (b > at) {
            rc = io_fail(e, "%s: bytes [%llu, %llu) of the data buffer belong to no tensor (a hole before '%s'); "
                         "tensor data must be contiguous", path, (unsigned long long)at, (unsigned long long)b, t->name);
            goto done;
        }
        if (b < at) {
            const struct st_tensor *prev = &st->tensors[raw[i - 1].index];
            rc = io_fail(e, "%s: tensor '%s' data_offsets [%llu, %llu) overlap those of '%s' [%lld, %lld)", path, t->name,
                         (unsigned long long)b, (unsigned long long)en, prev->name, (long long)raw[i - 1].begin,
                         (long long)raw[i - 1].end);
            goto done;
        }
        at = en;
    }
    if (at != buf_len) {
        rc = io_fail(e, "%s: the data buffer is %llu bytes but the tensors cover %llu (trailing bytes after the last "
                     "tensor)", path, (unsigned long long)buf_len, (unsigned long long)at);
        goto done;
    }
    /* Reorder the tensors into file order and point them into the mapping. */
    struct st_tensor *ordered = calloc((size_t)(st->n_tensors > 0 ? st->n_tensors : 1), sizeof *ordered);
    if (ordered == NULL) {
        rc = io_fail(e, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < st->n_tensors; i++) {
        ordered[i] = st->tensors[raw[i].index];
        ordered[i].data = data + raw[i].begin;
    }
    free(st->tensors);
    st->tensors = ordered;
done:
    free(names);
    free(raw);
    cJSON_Delete(root);
    return rc;
}

int safetensors_open(struct safetensors *st, const char *path, struct io_err *e) {
    memset(st, 0, sizeof *st);
    if (map_file(&st->file, path, e) != 0) return -1;
    const uint8_t *p = st->file.data;
    size_t size = st->file.size;
    int rc = 0;
    char *hdr = NULL;
    if (size < 8) {
        rc = io_fail(e, "%s: %zu bytes long; a safetensors file starts with an 8-byte header length", path, size);
        goto out;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | p[i];
    if (n > ST_MAX_HEADER) {
        rc = io_fail(e, "%s: header length %llu exceeds the limit of %llu bytes (not a safetensors file?)", path,
                     (unsigned long long)n, ST_MAX_HEADER);
        goto out;
    }
    if (n > size - 8) {
        rc = io_fail(e, "%s: header length %llu runs past the end of the %zu-byte file (truncated?)", path,
                     (unsigned long long)n, size);
        goto out;
    }
    if (n == 0 || p[8] != '{') {
        rc = io_fail(e, "%s: the header does not start with '{' (not a safetensors file?)", path);
        goto out;
    }
    int64_t bad = utf8_invalid_at(p + 8, n);
    if (bad >= 0) {
        rc = io_fail(e, "%s: the header is not valid UTF-8 (byte %lld of the header)", path, (long long)bad);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[8 + i];
        if (c < 0x20 && !is_json_space(c)) {
            rc = io_fail(e, "%s: the header holds the control byte 0x%02x at byte %zu (invalid JSON)", path, c, i);
            goto out;
        }
    }
    /* cJSON gets a NUL-terminated copy: the mapping is not NUL-terminated. */
    hdr = malloc(n + 1);
    if (hdr == NULL) {
        rc = io_fail(e, "%s: out of memory for a %llu-byte header", path, (unsigned long long)n);
        goto out;
    }
    memcpy(hdr, p + 8, n);
    hdr[n] = '\0';
    rc = parse_header(st, hdr, n, p + 8 + n, size - 8 - n, path, e);
out:
    free(hdr);
    if (rc != 0) safetensors_close(st);
    return rc;
}

void safetensors_close(struct safetensors *st) {
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    for (int i = 0; i < st->n_meta; i++) free(st->meta[i].key), free(st->meta[i].value);
    free(st->tensors);
    free(st->meta);
    unmap_file(&st->file);
    memset(st, 0, sizeof *st);
}

const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name) {
    for (int i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

const char *safetensors_meta(const struct safetensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

int st_expect(const struct safetensors *st, const struct st_tensor *t, enum st_dtype dtype, int ndim,
              const int64_t *shape, struct io_err *e) {
    const char *path = st != NULL ? st->file.path : "safetensors";
    int ok = ndim < 0 || t->ndim == ndim;
    for (int i = 0; ok && ndim >= 0 && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (t->dtype == dtype && ok) return 0;
    char has[256], want[256];
    st_shape_str(has, sizeof has, t->ndim, t->shape);
    if (ndim >= 0)
        st_shape_str(want, sizeof want, ndim, shape);
    else
        snprintf(want, sizeof want, "(any shape)");
    return io_fail(e, "%s: tensor '%s' is %s %s, expected %s %s", path, t->name, st_dtype_name(t->dtype), has,
                   st_dtype_name(dtype), want);
}

/* ---- conversions ---- */

/* IEEE binary16 → binary32, exact (subnormals, Inf and NaN payloads kept). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, u;
    if (exp == 0x1F) {
        u = sign | 0x7F800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal: normalize */
        int shift = 0;
        while ((man & 0x400u) == 0) man <<= 1, shift++;
        u = sign | ((uint32_t)(113 - shift) << 23) | ((man & 0x3FFu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* RNE of an fp32 value to bf16; every NaN becomes 0x7FC0 (torch's convention, ref/bf16.h). */
static uint16_t f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

int st_tensor_to_f32(float *out, const struct st_tensor *t, struct io_err *e) {
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case ST_F32:
        if (t->numel > 0) memcpy(out, p, (size_t)t->numel * 4);
        return 0;
    case ST_BF16:
        for (int64_t i = 0; i < t->numel; i++) {
            uint32_t u = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
            memcpy(&out[i], &u, 4);
        }
        return 0;
    case ST_F16:
        for (int64_t i = 0; i < t->numel; i++) out[i] = f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    case ST_F64:
        for (int64_t i = 0; i < t->numel; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            out[i] = (float)d;
        }
        return 0;
    default:
        return io_fail(e, "tensor '%s' is %s; only F32, F16, BF16 and F64 convert to fp32", t->name,
                       st_dtype_name(t->dtype));
    }
}

int st_tensor_to_bf16(uint16_t *out, const struct st_tensor *t, struct io_err *e) {
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case ST_BF16:
        if (t->numel > 0) memcpy(out, p, (size_t)t->numel * 2);
        return 0;
    case ST_F32:
        for (int64_t i = 0; i < t->numel; i++) {
            float f;
            memcpy(&f, p + 4 * i, 4);
            out[i] = f32_to_bf16(f);
        }
        return 0;
    case ST_F16: /* f16 → f32 is exact, so this is one rounding */
        for (int64_t i = 0; i < t->numel; i++) out[i] = f32_to_bf16(f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)));
        return 0;
    default:
        return io_fail(e, "tensor '%s' is %s; only F32, F16 and BF16 convert to bf16", t->name, st_dtype_name(t->dtype));
    }
}
