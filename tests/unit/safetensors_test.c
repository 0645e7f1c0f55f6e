/* safetensors_test.c — io/safetensors against the format (NUMERICS.md §4) and the reference
 * writer: byte-for-byte agreement with files written by the python safetensors library
 * (testdata/st_ref_*.safetensors, from testdata/gen_safetensors_ref.py), random round trips,
 * exhaustive F16 conversion, sharded checkpoints, and malformed files (each one clear message).
 *
 *   bazel test //tests/unit:safetensors_test        (replay: --test_arg=--seed=N)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/file.h"
#include "io/safetensors.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"

static uint64_t g_seed;
static char g_dir[1024];

static void tmp_dir_init(void) {
    const char *t = getenv("TEST_TMPDIR");
    if (t != NULL && *t) {
        snprintf(g_dir, sizeof g_dir, "%s/safetensors_test", t);
    } else {
        snprintf(g_dir, sizeof g_dir, "/tmp/safetensors_test.XXXXXX");
        if (mkdtemp(g_dir) == NULL) exit(1);
    }
    struct io_err e;
    if (make_dirs(g_dir, &e) != 0) io_exit(&e);
}

static const char *tmp_path(const char *name) {
    static char buf[4][1280];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *p, size_t n) {
    struct io_err e;
    if (write_file_atomic(path, p, n, &e) != 0) io_exit(&e);
}

/* A file of: declared header length, the header text, data_len pattern bytes. */
static const char *raw_file(const char *name, uint64_t declared, const char *header, size_t hlen, size_t data_len) {
    size_t n = 8 + hlen + data_len;
    uint8_t *b = malloc(n + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(declared >> (8 * i));
    memcpy(b + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++) b[8 + hlen + i] = (uint8_t)(i * 13 + 1);
    const char *path = tmp_path(name);
    write_bytes(path, b, n);
    free(b);
    return path;
}

/* The common case: header length = strlen(header). */
static const char *st_file(const char *name, const char *header, size_t data_len) {
    return raw_file(name, strlen(header), header, strlen(header), data_len);
}

static void expect_reject(const char *path, const char *phrase, const char *what) {
    struct safetensors st;
    struct io_err e = {{0}};
    int rc = safetensors_open(&st, path, &e);
    EXPECT(rc == -1, "%s: accepted, expected a rejection mentioning \"%s\"", what, phrase);
    if (rc == 0) {
        safetensors_close(&st);
        return;
    }
    EXPECT(strstr(e.msg, phrase) != NULL, "%s: message \"%s\" lacks \"%s\"", what, e.msg, phrase);
    EXPECT(strstr(e.msg, path) != NULL, "%s: message \"%s\" does not name the file", what, e.msg);
    printf("  rejected (%s): %s\n", what, e.msg);
}

static void expect_accept(const char *path, const char *what, int n_tensors) {
    struct safetensors st;
    struct io_err e = {{0}};
    int rc = safetensors_open(&st, path, &e);
    EXPECT(rc == 0, "%s: rejected: %s", what, e.msg);
    if (rc != 0) return;
    EXPECT(st.n_tensors == n_tensors, "%s: %d tensors, expected %d", what, st.n_tensors, n_tensors);
    safetensors_close(&st);
}

/* ---- the python library's files ---- */

struct ref_tensor {
    const char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[2];
};

/* Same order as TENSORS in gen_safetensors_ref.py. */
static const struct ref_tensor ref_tensors[] = {
    {"b.weight", ST_F32, 2, {2, 3}},  {"a.bias", ST_F32, 1, {3}},     {"Upper", ST_F32, 1, {1}},
    {"z", ST_BF16, 1, {5}},           {"emb", ST_F16, 2, {2, 2}},     {"ids", ST_I64, 1, {4}},
    {"mask", ST_BOOL, 1, {3}},        {"scalar", ST_F64, 0, {0}},     {"empty", ST_U8, 2, {0, 4}},
    {"u8", ST_U8, 1, {7}},            {"q", ST_I32, 1, {2}},          {"f8", ST_F8_E4M3, 1, {3}},
    {"g8", ST_F8_E5M2, 1, {2}},       {"s16", ST_I16, 1, {3}},        {"u16", ST_U16, 1, {1}},
    {"quote\"back\\slash\tnl\n", ST_F32, 1, {1}}, {"\xc3\xbcn\xc3\xaf", ST_I8, 1, {2}},
};
#define N_REF ((int)(sizeof ref_tensors / sizeof ref_tensors[0]))

static uint8_t *ref_bytes(int i, size_t *nbytes) {
    const struct ref_tensor *r = &ref_tensors[i];
    int64_t numel;
    st_shape_bytes(&numel, nbytes, r->dtype, r->ndim, r->shape);
    uint8_t *b = malloc(*nbytes + 1);
    for (size_t k = 0; k < *nbytes; k++) b[k] = r->dtype == ST_BOOL ? (uint8_t)(k % 2) : (uint8_t)(31 * i + 7 * k + 3);
    return b;
}

static void write_ref_subset(const char *path, const int *subset, int n, int with_meta) {
    struct st_tensor t[N_REF];
    uint8_t *bufs[N_REF];
    memset(t, 0, sizeof t);
    for (int j = 0; j < n; j++) {
        int i = subset[j];
        memset(&t[j], 0, sizeof t[j]);
        t[j].name = (char *)ref_tensors[i].name;
        t[j].dtype = ref_tensors[i].dtype;
        t[j].ndim = ref_tensors[i].ndim;
        memcpy(t[j].shape, ref_tensors[i].shape, sizeof ref_tensors[i].shape);
        bufs[j] = ref_bytes(i, &t[j].nbytes);
        t[j].data = bufs[j];
    }
    struct st_meta meta = {"format", "pt"};
    struct io_err e;
    int rc = safetensors_write(path, t, n, &meta, with_meta ? 1 : 0, &e);
    EXPECT(rc == 0, "write %s: %s", path, e.msg);
    for (int j = 0; j < n; j++) free(bufs[j]);
}

static void expect_same_file(const char *got_path, const char *ref_path) {
    struct mapped_file a, b;
    struct io_err e;
    if (map_file(&a, got_path, &e) != 0 || map_file(&b, ref_path, &e) != 0) {
        EXPECT(0, "%s", e.msg);
        return;
    }
    size_t first = 0;
    while (first < a.size && first < b.size && a.data[first] == b.data[first]) first++;
    EXPECT(a.size == b.size && first == a.size, "%s (%zu bytes) differs from %s (%zu bytes) first at byte %zu", got_path,
           a.size, ref_path, b.size, first);
    unmap_file(&a);
    unmap_file(&b);
}

static void test_python_agreement(void) {
    int all[N_REF];
    for (int i = 0; i < N_REF; i++) all[i] = i;
    write_ref_subset(tmp_path("all.safetensors"), all, N_REF, 1);
    expect_same_file(tmp_path("all.safetensors"), "tests/unit/testdata/st_ref_all.safetensors");
    const int sub[3] = {0, 3, 9};
    write_ref_subset(tmp_path("nometa.safetensors"), sub, 3, 0);
    expect_same_file(tmp_path("nometa.safetensors"), "tests/unit/testdata/st_ref_nometa.safetensors");
    write_ref_subset(tmp_path("empty.safetensors"), sub, 0, 0);
    expect_same_file(tmp_path("empty.safetensors"), "tests/unit/testdata/st_ref_empty.safetensors");

    /* Reading the library's file: every tensor, its bytes, the metadata, file order. */
    struct safetensors st;
    struct io_err e;
    if (safetensors_open(&st, "tests/unit/testdata/st_ref_all.safetensors", &e) != 0) {
        EXPECT(0, "%s", e.msg);
        return;
    }
    EXPECT(st.n_tensors == N_REF, "%d tensors, expected %d", st.n_tensors, N_REF);
    const char *fmt = safetensors_meta(&st, "format");
    EXPECT(fmt != NULL && strcmp(fmt, "pt") == 0, "metadata format = %s", fmt ? fmt : "(absent)");
    EXPECT(safetensors_meta(&st, "nope") == NULL, "absent metadata key found");
    for (int i = 0; i < N_REF; i++) {
        const struct st_tensor *t = safetensors_find(&st, ref_tensors[i].name);
        EXPECT(t != NULL, "tensor %d missing", i);
        if (t == NULL) continue;
        size_t nb;
        uint8_t *want = ref_bytes(i, &nb);
        EXPECT(st_expect(&st, t, ref_tensors[i].dtype, ref_tensors[i].ndim, ref_tensors[i].shape, &e) == 0, "%s", e.msg);
        EXPECT(t->nbytes == nb && (nb == 0 || memcmp(t->data, want, nb) == 0), "tensor %d bytes differ", i);
        free(want);
    }
    for (int i = 1; i < st.n_tensors; i++)
        EXPECT(st.tensors[i - 1].data + st.tensors[i - 1].nbytes == st.tensors[i].data, "tensors %d,%d not in file order",
               i - 1, i);
    EXPECT(safetensors_find(&st, "absent") == NULL, "found an absent tensor");
    const struct st_tensor *bw = safetensors_find(&st, "b.weight");
    int64_t wrong[2] = {3, 2};
    EXPECT(bw != NULL && st_expect(&st, bw, ST_F32, 2, wrong, &e) == -1 && strstr(e.msg, "expected F32 [3, 2]") &&
               strstr(e.msg, "is F32 [2, 3]"),
           "st_expect message: %s", e.msg);
    EXPECT(bw != NULL && st_expect(&st, bw, ST_BF16, -1, NULL, &e) == -1 && strstr(e.msg, "expected BF16"),
           "st_expect dtype message: %s", e.msg);
    safetensors_close(&st);
}

/* ---- round trips ---- */

static void test_round_trip(void) {
    struct rng r;
    rng_init(&r, g_seed);
    enum { N = 41 };
    struct st_tensor t[N];
    char names[N][32];
    for (int i = 0; i < N; i++) {
        memset(&t[i], 0, sizeof t[i]);
        snprintf(names[i], sizeof names[i], "layer.%d.%c", rng_int(&r, 1000), 'a' + i % 26);
        snprintf(names[i] + strlen(names[i]), 8, "%d", i); /* unique */
        t[i].name = names[i];
        t[i].dtype = (enum st_dtype)rng_int(&r, ST_DTYPE_COUNT);
        t[i].ndim = rng_int(&r, 5);
        for (int d = 0; d < t[i].ndim; d++) t[i].shape[d] = rng_int(&r, 6) + (i % 7 == 0 ? 0 : 1);
        int64_t numel;
        while (st_shape_bytes(&numel, &t[i].nbytes, t[i].dtype, t[i].ndim, t[i].shape) != 0) {
            /* sub-byte dtypes: make numel a multiple of 4 */
            t[i].ndim = 1;
            t[i].shape[0] = 4 * (rng_int(&r, 3) + 1);
        }
        uint8_t *b = malloc(t[i].nbytes + 1);
        for (size_t k = 0; k < t[i].nbytes; k++) b[k] = (uint8_t)rng_u64(&r);
        t[i].data = b;
    }
    struct st_meta meta[3] = {{"zeta", "last"}, {"format", "pt"}, {"note", "tab\there \"q\" \xc3\xa9"}};
    const char *path = tmp_path("round.safetensors");
    struct io_err e;
    EXPECT(safetensors_write(path, t, N, meta, 3, &e) == 0, "write: %s", e.msg);
    struct safetensors st;
    if (safetensors_open(&st, path, &e) != 0) {
        EXPECT(0, "read back: %s", e.msg);
    } else {
        EXPECT(st.n_tensors == N && st.n_meta == 3, "read back %d tensors %d meta", st.n_tensors, st.n_meta);
        for (int m = 0; m < 3; m++) {
            const char *v = safetensors_meta(&st, meta[m].key);
            EXPECT(v != NULL && strcmp(v, meta[m].value) == 0, "metadata %s", meta[m].key);
        }
        EXPECT(strcmp(st.meta[0].key, "format") == 0 && strcmp(st.meta[2].key, "zeta") == 0, "metadata not sorted");
        for (int i = 0; i < N; i++) {
            const struct st_tensor *g = safetensors_find(&st, t[i].name);
            EXPECT(g != NULL && g->dtype == t[i].dtype && g->ndim == t[i].ndim && g->nbytes == t[i].nbytes &&
                       (g->nbytes == 0 || memcmp(g->data, t[i].data, g->nbytes) == 0) &&
                       memcmp(g->shape, t[i].shape, sizeof(int64_t) * (size_t)t[i].ndim) == 0,
                   "tensor %s did not round-trip", t[i].name);
        }
        /* File order = the reference writer's order: dtype descending, then name ascending. */
        for (int i = 1; i < st.n_tensors; i++) {
            const struct st_tensor *a = &st.tensors[i - 1], *b = &st.tensors[i];
            EXPECT(a->dtype > b->dtype || (a->dtype == b->dtype && strcmp(a->name, b->name) < 0),
                   "order: %s (%s) before %s (%s)", a->name, st_dtype_name(a->dtype), b->name, st_dtype_name(b->dtype));
        }
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | st.file.data[i];
        EXPECT(hl % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hl);
        safetensors_close(&st);
    }
    for (int i = 0; i < N; i++) free((void *)t[i].data);
}

static void test_writer_rejects(void) {
    float x[4] = {1, 2, 3, 4};
    struct st_tensor t[2] = {{.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = (const uint8_t *)x, .nbytes = 16},
                             {.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = (const uint8_t *)x, .nbytes = 16}};
    struct io_err e;
    const char *p = tmp_path("bad_write.safetensors");
    EXPECT(safetensors_write(p, t, 2, NULL, 0, &e) == -1 && strstr(e.msg, "two tensors are named 'a'"), "dup: %s", e.msg);
    t[1].name = "b";
    t[1].nbytes = 12;
    EXPECT(safetensors_write(p, t, 2, NULL, 0, &e) == -1 && strstr(e.msg, "16 bytes but 12 bytes were given"), "size: %s",
           e.msg);
    t[1].nbytes = 16;
    t[1].name = "__metadata__";
    EXPECT(safetensors_write(p, t, 2, NULL, 0, &e) == -1 && strstr(e.msg, "__metadata__"), "reserved: %s", e.msg);
    t[1].name = "b";
    struct st_meta m[2] = {{"k", "1"}, {"k", "2"}};
    EXPECT(safetensors_write(p, t, 2, m, 2, &e) == -1 && strstr(e.msg, "metadata key 'k'"), "meta dup: %s", e.msg);
    t[1].dtype = ST_F4;
    t[1].shape[0] = 3;
    t[1].nbytes = 1;
    EXPECT(safetensors_write(p, t, 2, NULL, 0, &e) == -1 && strstr(e.msg, "whole number of bytes"), "F4: %s", e.msg);
    EXPECT(!file_exists(p), "a rejected write left a file behind");
}

/* ---- conversions ---- */

static double f16_value(uint16_t h) {
    int s = h >> 15, ex = (h >> 10) & 31, m = h & 1023;
    double v = ex == 0 ? ldexp(m, -24) : ldexp(1024 + m, ex - 25);
    return s ? -v : v;
}

static void test_conversions(void) {
    /* Every F16 pattern against its value from the definition. */
    uint16_t *h = malloc(65536 * 2);
    float *f = malloc(65536 * 4);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    struct st_tensor t = {.name = "h", .dtype = ST_F16, .ndim = 1, .shape = {65536}, .numel = 65536,
                          .data = (const uint8_t *)h, .nbytes = 131072};
    struct io_err e;
    EXPECT(st_tensor_to_f32(f, &t, &e) == 0, "%s", e.msg);
    int64_t bad = 0;
    for (int i = 0; i < 65536; i++) {
        int ex = (i >> 10) & 31, m = i & 1023;
        if (ex == 31) {
            bad += m ? !isnan(f[i]) : !(isinf(f[i]) && (signbit(f[i]) != 0) == (i >> 15));
        } else {
            bad += (double)f[i] != f16_value((uint16_t)i) || (signbit(f[i]) != 0) != (i >> 15);
        }
    }
    EXPECT(bad == 0, "%lld of 65536 F16 values convert wrongly", (long long)bad);

    /* F16 → bf16 is one RNE rounding of the exact value: 1 + 2^-8 (0x3C04) is a tie → 1.0
     * (0x3F80); 1 + 3·2^-8 (0x3C0C) ties up to 0x3F82; 2^-24 (0x0001) is exact in bf16. */
    uint16_t hs[3] = {0x3C04, 0x3C0C, 0x0001}, bs[3];
    struct st_tensor t3 = {.name = "h3", .dtype = ST_F16, .ndim = 1, .shape = {3}, .numel = 3,
                           .data = (const uint8_t *)hs, .nbytes = 6};
    EXPECT(st_tensor_to_bf16(bs, &t3, &e) == 0 && bs[0] == 0x3F80 && bs[1] == 0x3F82 && bs[2] == 0x3380,
           "f16→bf16: %04x %04x %04x", bs[0], bs[1], bs[2]);
    float fs[3] = {NAN, -0.0f, 3.0e38f};
    struct st_tensor tf = {.name = "f3", .dtype = ST_F32, .ndim = 1, .shape = {3}, .numel = 3,
                           .data = (const uint8_t *)fs, .nbytes = 12};
    EXPECT(st_tensor_to_bf16(bs, &tf, &e) == 0 && bs[0] == 0x7FC0 && bs[1] == 0x8000 && bs[2] == 0x7F62,
           "f32→bf16: %04x %04x %04x", bs[0], bs[1], bs[2]);
    double ds[2] = {0.1, -1e300};
    struct st_tensor td = {.name = "d", .dtype = ST_F64, .ndim = 1, .shape = {2}, .numel = 2,
                           .data = (const uint8_t *)ds, .nbytes = 16};
    EXPECT(st_tensor_to_f32(f, &td, &e) == 0 && f[0] == 0.1f && isinf(f[1]) && f[1] < 0, "f64: %g %g", (double)f[0],
           (double)f[1]);
    uint16_t bb[2] = {0x3F80, 0xC040};
    struct st_tensor tb = {.name = "b", .dtype = ST_BF16, .ndim = 1, .shape = {2}, .numel = 2,
                           .data = (const uint8_t *)bb, .nbytes = 4};
    EXPECT(st_tensor_to_f32(f, &tb, &e) == 0 && f[0] == 1.0f && f[1] == -3.0f, "bf16: %g %g", (double)f[0], (double)f[1]);
    tb.dtype = ST_I16;
    EXPECT(st_tensor_to_f32(f, &tb, &e) == -1 && strstr(e.msg, "'b' is I16"), "I16 to f32: %s", e.msg);
    EXPECT(st_tensor_to_bf16(bs, &tb, &e) == -1 && strstr(e.msg, "only F32, F16 and BF16"), "I16 to bf16: %s", e.msg);
    free(h);
    free(f);
}

static void test_dtype_table(void) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        enum st_dtype d;
        EXPECT(st_dtype_from_name(&d, st_dtype_name((enum st_dtype)i)) == 0 && d == (enum st_dtype)i, "dtype %d name", i);
    }
    enum st_dtype d;
    EXPECT(st_dtype_from_name(&d, "bf16") == -1 && st_dtype_from_name(&d, "") == -1, "lower-case dtype accepted");
    EXPECT(st_dtype_bits(ST_F4) == 4 && st_dtype_bits(ST_F6_E2M3) == 6 && st_dtype_bits(ST_BF16) == 16 &&
               st_dtype_bits(ST_C64) == 64 && st_dtype_bits(ST_BOOL) == 8,
           "dtype bits");
    EXPECT(strcmp(st_dtype_name(ST_F8_E4M3FNUZ), "F8_E4M3FNUZ") == 0 && strcmp(st_dtype_name(ST_U64), "U64") == 0,
           "dtype names");
}

/* ---- malformed files: each rejected with a message naming the file and the problem ---- */

static void test_malformed(void) {
    const char *p;
    write_bytes(tmp_path("zero.st"), "", 0);
    expect_reject(tmp_path("zero.st"), "8-byte header length", "empty file");
    write_bytes(tmp_path("five.st"), "\x02\0\0\0\0", 5);
    expect_reject(tmp_path("five.st"), "8-byte header length", "5-byte file");
    p = raw_file("huge_len.st", 0x8000000000000000ull, "{}", 2, 0);
    expect_reject(p, "exceeds the limit", "header length 2^63");
    p = raw_file("over_limit.st", 100000001ull, "{}", 2, 0);
    expect_reject(p, "exceeds the limit", "header length 1e8+1");
    p = raw_file("lying_len.st", 200, "{}", 2, 50);
    expect_reject(p, "runs past the end", "header length past the end of the file");
    p = raw_file("short_len.st", 1, "{}", 2, 0);
    expect_reject(p, "not valid JSON", "header length cuts the JSON");
    p = st_file("list.st", "[]", 0);
    expect_reject(p, "does not start with '{'", "JSON list");
    p = st_file("lead_space.st", " {}", 0);
    expect_reject(p, "does not start with '{'", "leading space");
    p = raw_file("zero_len.st", 0, "", 0, 8);
    expect_reject(p, "does not start with '{'", "zero header length");
    p = st_file("utf8.st", "{\"\xff\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1);
    expect_reject(p, "not valid UTF-8", "byte 0xff in a name");
    p = st_file("overlong.st", "{\"\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1);
    expect_reject(p, "not valid UTF-8", "overlong UTF-8");
    p = st_file("surrogate.st", "{\"\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1);
    expect_reject(p, "not valid UTF-8", "UTF-8 surrogate");
    p = st_file("cut_utf8.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}\xe2\x82", 1);
    expect_reject(p, "not valid UTF-8", "UTF-8 sequence cut at the end");
    p = st_file("ctrl.st", "{\x01\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1);
    expect_reject(p, "control byte 0x01", "control byte between tokens");
    p = raw_file("nul_pad.st", 4, "{}\0\0", 4, 0);
    expect_reject(p, "control byte 0x00", "NUL padding");
    p = st_file("cut_json.st", "{\"a\":", 0);
    expect_reject(p, "not valid JSON", "cut JSON");
    p = st_file("bad_json.st", "{\"a\" 1}", 0);
    expect_reject(p, "not valid JSON", "missing colon");
    p = st_file("trailing.st", "{}x", 0);
    expect_reject(p, "bytes after its JSON object", "garbage after the object");
    p = st_file("two_objects.st", "{} {}", 0);
    expect_reject(p, "bytes after its JSON object", "two objects");
    {
        char deep[2100] = "{\"a\":";
        size_t n = strlen(deep);
        for (int i = 0; i < 1500; i++) deep[n++] = '[';
        deep[n] = '\0';
        p = st_file("deep.st", deep, 0);
        expect_reject(p, "not valid JSON", "1500 nested lists");
    }
    p = st_file("dtype.st", "{\"a\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "unknown dtype 'F17'", "unknown dtype");
    p = st_file("dtype_lc.st", "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "unknown dtype 'f32'", "lower-case dtype");
    p = st_file("dtype_num.st", "{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "not a string", "numeric dtype");
    p = st_file("no_shape.st", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "lacks \"shape\"", "missing shape");
    p = st_file("no_offsets.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4);
    expect_reject(p, "lacks \"data_offsets\"", "missing data_offsets");
    p = st_file("shape_obj.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "not a list", "shape not a list");
    p = st_file("neg_dim.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "not a non-negative integer", "negative dimension");
    p = st_file("frac_dim.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "not a non-negative integer", "fractional dimension");
    p = st_file("str_dim.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "not a non-negative integer", "string dimension");
    p = st_file("big_dim.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[9007199254740993],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "not a non-negative integer", "dimension beyond 2^53");
    p = st_file("nine_dims.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1);
    expect_reject(p, "9 dimensions", "nine dimensions");
    p = st_file("overflow.st",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,4503599627370496],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "overflows 64 bits", "dimension product overflows");
    p = st_file("overflow_bits.st", "{\"a\":{\"dtype\":\"F64\",\"shape\":[4503599627370496,512],\"data_offsets\":[0,4]}}",
                4);
    expect_reject(p, "overflows 64 bits", "numel·bits overflows");
    p = st_file("huge_ok_numel.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1000000,1000000],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "needs 4000000000000 bytes", "huge tensor claimed in a small file");
    p = st_file("f4_odd.st", "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2);
    expect_reject(p, "whole number of bytes", "F4 with an odd count");
    p = st_file("size.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,10]}}", 10);
    expect_reject(p, "needs 16 bytes", "offsets disagree with the shape");
    p = st_file("backwards.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4);
    expect_reject(p, "end before they begin", "end < begin");
    p = st_file("three_offs.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4,8]}}", 4);
    expect_reject(p, "two non-negative integers", "three offsets");
    p = st_file("neg_off.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-4,0]}}", 4);
    expect_reject(p, "two non-negative integers", "negative offset");
    p = st_file("hole.st",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}",
                10);
    expect_reject(p, "belong to no tensor", "hole between tensors");
    p = st_file("hole0.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6);
    expect_reject(p, "bytes [0, 2)", "hole at the start");
    p = st_file("overlap.st",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
                6);
    expect_reject(p, "overlap", "overlapping tensors");
    p = st_file("alias.st",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                4);
    expect_reject(p, "overlap", "two tensors on the same bytes");
    p = st_file("trail_data.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 9);
    expect_reject(p, "trailing bytes", "data after the last tensor");
    p = st_file("trunc.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 7);
    expect_reject(p, "truncated", "data cut short");
    p = st_file("dup.st",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
                8);
    expect_reject(p, "names 'a' twice", "duplicate tensor names");
    p = st_file("dup_meta.st", "{\"__metadata__\":{\"x\":\"1\"},\"__metadata__\":{\"y\":\"2\"}}", 0);
    expect_reject(p, "'__metadata__' twice", "two __metadata__");
    p = st_file("dup_meta_key.st", "{\"__metadata__\":{\"x\":\"1\",\"x\":\"2\"}}", 0);
    expect_reject(p, "key 'x' twice", "duplicate metadata key");
    p = st_file("meta_num.st", "{\"__metadata__\":{\"x\":1}}", 0);
    expect_reject(p, "not a string", "metadata value not a string");
    p = st_file("meta_list.st", "{\"__metadata__\":[\"x\"]}", 0);
    expect_reject(p, "not an object of strings", "metadata is a list");
    p = st_file("dup_field.st", "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4);
    expect_reject(p, "key \"dtype\" twice", "repeated dtype key");
    p = st_file("entry_num.st", "{\"a\":5}", 0);
    expect_reject(p, "is not an object", "tensor entry is a number");
    expect_reject(g_dir, "not a regular file", "a directory");
    expect_reject(tmp_path("does_not_exist.st"), "cannot open", "a missing file");

    /* Legal corner cases. */
    expect_accept(st_file("pad_ws.st", "{}  \n\t \r", 0), "JSON whitespace padding", 0);
    expect_accept(st_file("meta_null.st", "{\"__metadata__\":null}", 0), "null metadata", 0);
    expect_accept(st_file("extra_key.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"x\":[]}}", 4),
                  "unknown key in an entry", 1);
    expect_accept(st_file("empties.st",
                          "{\"e2\":{\"dtype\":\"F32\",\"shape\":[0,9],\"data_offsets\":[2,2]},"
                          "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                          "\"e1\":{\"dtype\":\"BF16\",\"shape\":[3,0],\"data_offsets\":[2,2]},"
                          "\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[2,3]}}",
                          3),
                  "empty tensors sharing an offset, a scalar", 4);
    expect_accept(st_file("f6.st", "{\"a\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[0,3]}}", 3),
                  "F6 with 4 elements = 3 bytes", 1);
}

/* ---- sharded checkpoints ---- */

static void write_shard(const char *dir, const char *file, const char **names, int n) {
    float v[3] = {1.5f, -2.0f, 0.25f};
    struct st_tensor t[4];
    for (int i = 0; i < n; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].name = (char *)names[i];
        t[i].dtype = ST_F32;
        t[i].ndim = 1;
        t[i].shape[0] = 3;
        t[i].data = (const uint8_t *)v;
        t[i].nbytes = 12;
    }
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct io_err e;
    EXPECT(safetensors_write(path, t, n, NULL, 0, &e) == 0, "%s", e.msg);
}

static void write_index(const char *dir, const char *json) {
    char path[1400];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_bytes(path, json, strlen(json));
}

static void expect_shard_reject(const char *dir, const char *phrase, const char *what) {
    struct sharded_checkpoint ck;
    struct io_err e = {{0}};
    int rc = sharded_open(&ck, dir, &e);
    EXPECT(rc == -1 && strstr(e.msg, phrase) != NULL, "%s: rc %d message \"%s\" lacks \"%s\"", what, rc, e.msg, phrase);
    if (rc == 0) sharded_close(&ck);
    else printf("  rejected (%s): %s\n", what, e.msg);
}

static void test_sharded(void) {
    struct io_err e;
    char dir[1300];
    snprintf(dir, sizeof dir, "%s/sharded", g_dir);
    make_dirs(dir, &e);
    const char *s1[2] = {"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight"};
    const char *s2[2] = {"model.norm.weight", "lm_head.weight"};
    write_shard(dir, "model-00001-of-00002.safetensors", s1, 2);
    write_shard(dir, "model-00002-of-00002.safetensors", s2, 2);
    write_index(dir, "{\"metadata\":{\"total_size\":48},\"weight_map\":{"
                     "\"lm_head.weight\":\"model-00002-of-00002.safetensors\","
                     "\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\","
                     "\"model.layers.0.mlp.up_proj.weight\":\"model-00001-of-00002.safetensors\","
                     "\"model.norm.weight\":\"model-00002-of-00002.safetensors\"}}");
    struct sharded_checkpoint ck;
    if (sharded_open(&ck, dir, &e) != 0) {
        EXPECT(0, "sharded_open: %s", e.msg);
    } else {
        EXPECT(ck.n_shards == 2 && ck.n_entries == 4, "%d shards %d entries", ck.n_shards, ck.n_entries);
        const struct st_tensor *t = sharded_find(&ck, "model.norm.weight");
        int s2i = strcmp(ck.shard_names[0], "model-00002-of-00002.safetensors") == 0 ? 0 : 1;
        EXPECT(strcmp(ck.shard_names[s2i], "model-00002-of-00002.safetensors") == 0, "shard names");
        EXPECT(t != NULL && t->numel == 3 && t->data >= ck.shards[s2i].file.data &&
                   t->data < ck.shards[s2i].file.data + ck.shards[s2i].file.size,
               "model.norm.weight not found in shard 2");
        EXPECT(sharded_find(&ck, "model.embed_tokens.weight") != NULL && sharded_find(&ck, "absent") == NULL, "find");
        sharded_close(&ck);
    }
    write_index(dir, "{\"weight_map\":{\"lm_head.weight\":\"model-00003-of-00002.safetensors\"}}");
    expect_shard_reject(dir, "cannot open", "a missing shard");
    write_index(dir, "{\"weight_map\":{\"lm_head.weight\":\"../model-00002-of-00002.safetensors\"}}");
    expect_shard_reject(dir, "not the file name of a shard", "a path outside the directory");
    write_index(dir, "{\"weight_map\":{\"lm_head.weight\":3}}");
    expect_shard_reject(dir, "not the file name of a shard", "a number as shard");
    write_index(dir, "{\"weight_map\":{}}");
    expect_shard_reject(dir, "weight_map is empty", "an empty map");
    write_index(dir, "{\"weight_map\":[]}");
    expect_shard_reject(dir, "\"weight_map\" object", "a list as map");
    write_index(dir, "{\"weight_map\":{\"a\":\"x\",");
    expect_shard_reject(dir, "not valid JSON", "cut JSON");
    write_index(dir, "{\"weight_map\":{\"lm_head.weight\":\"model-00001-of-00002.safetensors\","
                     "\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\","
                     "\"model.layers.0.mlp.up_proj.weight\":\"model-00001-of-00002.safetensors\","
                     "\"model.norm.weight\":\"model-00002-of-00002.safetensors\"}}");
    expect_shard_reject(dir, "has no such tensor", "a tensor in the wrong shard");
    write_index(dir, "{\"weight_map\":{\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\","
                     "\"model.layers.0.mlp.up_proj.weight\":\"model-00001-of-00002.safetensors\","
                     "\"model.norm.weight\":\"model-00002-of-00002.safetensors\"}}");
    expect_shard_reject(dir, "does not list", "a tensor the map does not list");
    write_index(dir, "{\"weight_map\":{\"lm_head.weight\":\"model-00002-of-00002.safetensors\","
                     "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}");
    expect_shard_reject(dir, "lists 'lm_head.weight' twice", "a duplicate map entry");
    char empty_dir[1400];
    snprintf(empty_dir, sizeof empty_dir, "%s/none", dir);
    make_dirs(empty_dir, &e);
    expect_shard_reject(empty_dir, "no model.safetensors or model.safetensors.index.json", "an empty directory");

    /* A single model.safetensors wins over an index, as in transformers. */
    const char *one[1] = {"w"};
    write_shard(dir, "model.safetensors", one, 1);
    if (sharded_open(&ck, dir, &e) != 0) {
        EXPECT(0, "single file: %s", e.msg);
    } else {
        EXPECT(ck.n_shards == 1 && ck.n_entries == 1 && sharded_find(&ck, "w") != NULL, "single file");
        sharded_close(&ck);
    }
}


int main(int argc, char **argv) {
    g_seed = test_seed(argc, argv, 20240611);
    tmp_dir_init();
    test_dtype_table();
    test_python_agreement();
    test_round_trip();
    test_writer_rejects();
    test_conversions();
    test_malformed();
    test_sharded();
    return test_finish("safetensors_test");
}
