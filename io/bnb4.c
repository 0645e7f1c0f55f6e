/* bnb4.c — the parts of a bitsandbytes 4-bit weight, checked before use (bnb4.h). */
#include "io/bnb4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "io/check.h"

#define QS_NF4 ".quant_state.bitsandbytes__nf4"
#define QS_FP4 ".quant_state.bitsandbytes__fp4"
#define QS_MAX_BYTES 65536
#define SHAPE_MAX 1000000000.0 /* per dimension: far above any Linear, and n = out·in fits int64 */

static const struct st_tensor *file_find(void *ctx, const char *name) {
    return safetensors_find((const struct safetensors *)ctx, name);
}

/* The lookup only reads through ctx: the const is restored in file_find. */
struct bnb4_lookup bnb4_lookup_file(const struct safetensors *st) {
    return (struct bnb4_lookup){file_find, (void *)st};
}

/* One rule for the first-level blocksize and the nested one, since both come from bitsandbytes'
 * blockwise quantizers: its CUDA backend (0.46 on) accepts the powers of two from 32 to 4096
 * (earlier releases and ROCm from 64), so every checkpoint it writes has one of them, and ref/nf4
 * and gpu/nf4 (16 codes a thread, never straddling a block) are built for exactly that range.
 * Anything else (16, 48, a nested block of 2^20) is no bitsandbytes file, and gpu/nf4's CHECK
 * would stop on it: refused here with a message instead. */
int bnb4_blocksize_ok(int blocksize) {
    return blocksize >= 32 && blocksize <= 4096 && (blocksize & (blocksize - 1)) == 0;
}

static int json_int_in(const cJSON *o, const char *key, double lo, double hi, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return -1;
    *out = (int64_t)v->valuedouble;
    return 0;
}

/* The quant_state JSON into b and shape (checked against expect when given). */
static int parse_quant_state(struct bnb4_weight *b, int64_t shape[2], const struct st_tensor *qs, const char *where,
                             const char *name, const struct bnb4_expect *expect, struct io_err *e) {
    if (qs->dtype != ST_U8 || qs->ndim != 1 || qs->nbytes == 0 || qs->nbytes > QS_MAX_BYTES)
        return io_fail(e, "%s: tensor '%s' should be a U8 list of at most %d bytes of UTF-8 JSON", where, qs->name,
                       QS_MAX_BYTES);
    char *text = malloc(qs->nbytes + 1);
    CHECK(text != NULL, "out of memory");
    memcpy(text, qs->data, qs->nbytes);
    text[qs->nbytes] = '\0';
    cJSON *o = cJSON_ParseWithLength(text, qs->nbytes);
    free(text);
    int rc = 0;
    int64_t v = 0;
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(o, "quant_type"), *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
    if (!cJSON_IsObject(o) || !cJSON_IsString(qt) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) ||
        json_int_in(o, "blocksize", -2147483648.0, 2147483647.0, &v) != 0) {
        rc = io_fail(e, "%s: tensor '%s' is not a JSON object with quant_type, blocksize, dtype and shape", where,
                     qs->name);
        goto out;
    }
    b->blocksize = (int)v;
    /* Only the __nf4 key reaches here (bnb4_bind refuses __fp4 first): its quant_type must agree. */
    if (strcmp(qt->valuestring, "nf4") != 0) {
        rc = io_fail(e, "%s: tensor '%s' says quant_type \"%.20s\"; its name says \"nf4\"", where, qs->name,
                     qt->valuestring);
        goto out;
    }
    if (strcmp(dt->valuestring, "float32") != 0 && strcmp(dt->valuestring, "bfloat16") != 0 &&
        strcmp(dt->valuestring, "float16") != 0) {
        rc = io_fail(e, "%s: tensor '%s' has dtype \"%.20s\"; expected float32, bfloat16 or float16", where, qs->name,
                     dt->valuestring);
        goto out;
    }
    snprintf(b->dtype, sizeof b->dtype, "%s", dt->valuestring);
    if (!bnb4_blocksize_ok(b->blocksize)) {
        rc = io_fail(e, "%s: tensor '%s' has blocksize %d; expected a power of two from 32 to 4096", where, qs->name,
                     b->blocksize);
        goto out;
    }
    int nd = cJSON_GetArraySize(sh);
    int64_t got[2] = {1, 1};
    for (int d = 0; d < nd && d < 2; d++) {
        const cJSON *x = cJSON_GetArrayItem(sh, d);
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > SHAPE_MAX ||
            x->valuedouble != floor(x->valuedouble)) {
            nd = -1;
            break;
        }
        got[nd == 1 ? 1 : d] = (int64_t)x->valuedouble;
    }
    if (nd < 1 || nd > 2) {
        rc = io_fail(e, "%s: tensor '%s' has a bad shape; expected [out, in] or [n] of positive integers", where,
                     qs->name);
        goto out;
    }
    if (expect != NULL && (nd != 2 || got[0] != expect->shape[0] || got[1] != expect->shape[1])) {
        char has[64];
        st_shape_str(has, sizeof has, nd, nd == 2 ? got : got + 1);
        rc = io_fail(e, "%s: tensor '%s' gives another shape than %s for '%s': %s = [%lld, %lld], not %s", where,
                     qs->name, expect->source, name, expect->rule, (long long)expect->shape[0],
                     (long long)expect->shape[1], has);
        goto out;
    }
    shape[0] = got[0];
    shape[1] = got[1];
    b->nested = cJSON_GetObjectItemCaseSensitive(o, "nested_blocksize") != NULL;
    if (b->nested) {
        const cJSON *ndt = cJSON_GetObjectItemCaseSensitive(o, "nested_dtype");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "nested_offset");
        if (json_int_in(o, "nested_blocksize", -2147483648.0, 2147483647.0, &v) != 0 || !cJSON_IsString(ndt) ||
            strcmp(ndt->valuestring, "float32") != 0 || !cJSON_IsNumber(off) || !isfinite(off->valuedouble)) {
            rc = io_fail(e, "%s: tensor '%s' needs nested_blocksize, nested_dtype \"float32\" and a finite nested_offset",
                         where, qs->name);
            goto out;
        }
        b->nested_blocksize = (int)v;
        if (!bnb4_blocksize_ok(b->nested_blocksize)) {
            rc = io_fail(e, "%s: tensor '%s' has nested_blocksize %d; expected a power of two from 32 to 4096", where,
                         qs->name, b->nested_blocksize);
            goto out;
        }
        b->nested_offset = (float)off->valuedouble;
    }
out:
    cJSON_Delete(o);
    return rc;
}

/* A part of the weight: present, of that dtype and shape (ndim 1: [d0]; 2: [d0, d1]). */
static int expect_part(const struct st_tensor *t, const char *name, enum st_dtype dtype, int ndim, int64_t d0,
                       int64_t d1, const char *where, struct io_err *e) {
    if (t == NULL) return io_fail(e, "%s: the 4-bit weight lacks its part '%s'", where, name);
    if (t->dtype == dtype && t->ndim == ndim && t->shape[0] == d0 && (ndim < 2 || t->shape[1] == d1)) return 0;
    char has[256];
    st_shape_str(has, sizeof has, t->ndim, t->shape);
    if (ndim == 2)
        return io_fail(e, "%s: tensor '%s' is %s %s, expected %s [%lld, %lld]", where, name, st_dtype_name(t->dtype),
                       has, st_dtype_name(dtype), (long long)d0, (long long)d1);
    return io_fail(e, "%s: tensor '%s' is %s %s, expected %s [%lld]", where, name, st_dtype_name(t->dtype), has,
                   st_dtype_name(dtype), (long long)d0);
}

static const struct st_tensor *find_part(struct bnb4_lookup look, char *buf, size_t cap, const char *name,
                                         const char *suffix) {
    snprintf(buf, cap, "%s%s", name, suffix);
    return look.find(look.ctx, buf);
}

enum bnb4_bind_result bnb4_bind(struct bnb4_weight *b, int64_t shape[2], struct bnb4_lookup look, const char *where,
                                const char *name, const struct bnb4_expect *expect, struct io_err *e) {
    char part[512];
    CHECK(strlen(name) + 40 < sizeof part, "bnb4_bind: name of %zu bytes", strlen(name));
    memset(b, 0, sizeof *b);
    b->kind = QUANT_BNB_NF4;
    const struct st_tensor *qs = find_part(look, part, sizeof part, name, QS_NF4);
    if (qs == NULL) {
        if (find_part(look, part, sizeof part, name, QS_FP4) != NULL) {
            io_fail(e, "%s: tensor '%s' is bitsandbytes FP4; refine supports NF4 4-bit checkpoints only", where, name);
            return BNB4_BAD;
        }
        io_fail(e, "%s: tensor '%s' has no '%s" QS_NF4 "' (not a bitsandbytes NF4 weight?)", where, name, name);
        return BNB4_ABSENT;
    }
    if (parse_quant_state(b, shape, qs, where, name, expect, e) != 0) return BNB4_BAD;
    const int64_t n = shape[0] * shape[1];
    b->n_blocks = (n + b->blocksize - 1) / b->blocksize;
    /* Looked up whether nested or not: stray nested parts are an error, not an unknown tensor. */
    b->nested_absmax = find_part(look, part, sizeof part, name, ".nested_absmax");
    b->nested_quant_map = find_part(look, part, sizeof part, name, ".nested_quant_map");
    if (!b->nested && (b->nested_absmax != NULL || b->nested_quant_map != NULL)) {
        io_fail(e, "%s: '%s' has nested_* tensors but its quant_state has no nested_blocksize", where, name);
        return BNB4_BAD;
    }
    b->packed = look.find(look.ctx, name);
    if (expect_part(b->packed, name, ST_U8, 2, (n + 1) / 2, 1, where, e) != 0) return BNB4_BAD;
    b->absmax = find_part(look, part, sizeof part, name, ".absmax");
    if (expect_part(b->absmax, part, b->nested ? ST_U8 : ST_F32, 1, b->n_blocks, 0, where, e) != 0) return BNB4_BAD;
    b->quant_map = find_part(look, part, sizeof part, name, ".quant_map");
    if (expect_part(b->quant_map, part, ST_F32, 1, 16, 0, where, e) != 0) return BNB4_BAD;
    if (b->nested) {
        const int64_t n2 = (b->n_blocks + b->nested_blocksize - 1) / b->nested_blocksize;
        snprintf(part, sizeof part, "%s.nested_absmax", name);
        if (expect_part(b->nested_absmax, part, ST_F32, 1, n2, 0, where, e) != 0) return BNB4_BAD;
        snprintf(part, sizeof part, "%s.nested_quant_map", name);
        if (expect_part(b->nested_quant_map, part, ST_F32, 1, 256, 0, where, e) != 0) return BNB4_BAD;
    }
    return BNB4_BOUND;
}
