/* bnb4_test.c — io/bnb4's reader of bitsandbytes 4-bit parts on hand-made tables of tensors: a
 * good weight (nested and not, 2-D and 1-D shape, with and without an expected shape), then each
 * part and each quant_state key broken in turn. Every rejection must return BNB4_BAD (or
 * BNB4_ABSENT for a weight without quant_state) with a message naming the file, the tensor and
 * the problem; a bound weight must have looked up every part it has (a model folder marks what
 * it looks up as taken, and reports what nobody took).
 *
 * The parts' values are not read here (only their dtypes and shapes): dequantizing them is
 * ref/nf4's, tested in nf4_test and against bitsandbytes in formats_golden_test.
 *
 *   bazel test //tests/unit:bnb4_test
 */
#include <stdio.h>
#include <string.h>

#include "io/bnb4.h"
#include "tests/common/harness.h"

#define WHERE "fixture.safetensors"
#define NAME "lin.weight"
#define MAX_T 10

/* [4, 33]: n = 132 weights, 66 packed bytes, 3 blocks of 64, 1 nested block of 256. */
static const char *const k_nested_json =
    "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [4, 33], "
    "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 0.25}";
static const char *const k_plain_json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"float32\", "
                                        "\"shape\": [4, 33]}";
static uint8_t g_bytes[4096]; /* the parts' data: never read by the binder */

struct table {
    struct st_tensor t[MAX_T];
    char names[MAX_T][96];
    int n;
    char json[512];
};

static struct st_tensor *add(struct table *tb, const char *suffix, enum st_dtype dtype, int ndim, int64_t d0,
                             int64_t d1) {
    struct st_tensor *t = &tb->t[tb->n];
    snprintf(tb->names[tb->n], sizeof tb->names[0], NAME "%s", suffix);
    tb->n++;
    memset(t, 0, sizeof *t);
    t->name = tb->names[tb->n - 1];
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->numel = ndim == 2 ? d0 * d1 : d0;
    t->data = g_bytes;
    t->nbytes = (size_t)t->numel * (size_t)(st_dtype_bits(dtype) / 8);
    return t;
}

static void set_json(struct table *tb, const char *json) {
    snprintf(tb->json, sizeof tb->json, "%s", json);
    for (int i = 0; i < tb->n; i++)
        if (strstr(tb->t[i].name, ".quant_state.") != NULL) {
            tb->t[i].data = (const uint8_t *)tb->json;
            tb->t[i].nbytes = strlen(tb->json);
            tb->t[i].numel = tb->t[i].shape[0] = (int64_t)tb->t[i].nbytes;
        }
}

/* The parts bitsandbytes saves for a [4, 33] weight, nested (double quantization) or not. */
static void build(struct table *tb, int nested) {
    tb->n = 0;
    add(tb, "", ST_U8, 2, 66, 1);
    add(tb, ".absmax", nested ? ST_U8 : ST_F32, 1, 3, 0);
    add(tb, ".quant_map", ST_F32, 1, 16, 0);
    if (nested) {
        add(tb, ".nested_absmax", ST_F32, 1, 1, 0);
        add(tb, ".nested_quant_map", ST_F32, 1, 256, 0);
    }
    add(tb, ".quant_state.bitsandbytes__nf4", ST_U8, 1, 1, 0);
    set_json(tb, nested ? k_nested_json : k_plain_json);
}

static struct st_tensor *part(struct table *tb, const char *suffix) {
    char full[128];
    snprintf(full, sizeof full, NAME "%s", suffix);
    for (int i = 0; i < tb->n; i++)
        if (strcmp(tb->t[i].name, full) == 0) return &tb->t[i];
    return NULL;
}

static void drop(struct table *tb, const char *suffix) {
    struct st_tensor *t = part(tb, suffix);
    if (t == NULL) return;
    int i = (int)(t - tb->t);
    for (; i + 1 < tb->n; i++) {
        tb->t[i] = tb->t[i + 1];
        memcpy(tb->names[i], tb->names[i + 1], sizeof tb->names[0]);
        tb->t[i].name = tb->names[i];
    }
    tb->n--;
}

/* A lookup over the table that records what was looked up and found (as a model folder's does). */
struct recorder {
    struct table *tb;
    int taken[MAX_T];
};

static const struct st_tensor *record_find(void *ctx, const char *name) {
    struct recorder *r = ctx;
    for (int i = 0; i < r->tb->n; i++)
        if (strcmp(r->tb->t[i].name, name) == 0) {
            r->taken[i] = 1;
            return &r->tb->t[i];
        }
    return NULL;
}

static enum bnb4_bind_result bind(struct bnb4_weight *b, int64_t shape[2], struct table *tb, struct recorder *r,
                                  const struct bnb4_expect *expect, struct io_err *e) {
    memset(r, 0, sizeof *r);
    r->tb = tb;
    e->msg[0] = '\0';
    return bnb4_bind(b, shape, (struct bnb4_lookup){record_find, r}, WHERE, NAME, expect, e);
}

static void test_blocksize_rule(void) {
    for (int b = 32; b <= 4096; b *= 2) EXPECT(bnb4_blocksize_ok(b), "blocksize %d allowed", b);
    const int bad[] = {0, -64, 1, 16, 48, 96, 8192, 1 << 20};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT(!bnb4_blocksize_ok(bad[i]), "blocksize %d refused", bad[i]);
}

static void test_good(void) {
    struct table tb;
    struct recorder r;
    struct bnb4_weight b;
    int64_t shape[2] = {-1, -1};
    struct io_err e;

    build(&tb, 1);
    EXPECT(bind(&b, shape, &tb, &r, NULL, &e) == BNB4_BOUND, "nested weight: %s", e.msg);
    EXPECT(shape[0] == 4 && shape[1] == 33 && b.kind == QUANT_BNB_NF4 && b.nested && b.blocksize == 64 &&
               b.nested_blocksize == 256 && b.nested_offset == 0.25f && b.n_blocks == 3 &&
               strcmp(b.dtype, "bfloat16") == 0,
           "nested quant_state read: shape [%lld, %lld] nested %d blocksize %d/%d offset %g blocks %lld dtype %s",
           (long long)shape[0], (long long)shape[1], b.nested, b.blocksize, b.nested_blocksize,
           (double)b.nested_offset, (long long)b.n_blocks, b.dtype);
    EXPECT(b.packed == part(&tb, "") && b.absmax == part(&tb, ".absmax") && b.quant_map == part(&tb, ".quant_map") &&
               b.nested_absmax == part(&tb, ".nested_absmax") && b.nested_quant_map == part(&tb, ".nested_quant_map"),
           "nested parts bound to their tensors");
    int taken = 0;
    for (int i = 0; i < tb.n; i++) taken += r.taken[i];
    EXPECT(taken == tb.n, "a bound nested weight looked up all %d of its tensors, got %d", tb.n, taken);

    /* With the shape the caller expects. */
    struct bnb4_expect ex = {{4, 33}, "the test implies", "[out, in]"};
    EXPECT(bind(&b, shape, &tb, &r, &ex, &e) == BNB4_BOUND, "nested weight with its expected shape: %s", e.msg);

    build(&tb, 0);
    EXPECT(bind(&b, shape, &tb, &r, &ex, &e) == BNB4_BOUND, "plain weight: %s", e.msg);
    EXPECT(!b.nested && b.absmax->dtype == ST_F32 && b.nested_absmax == NULL && b.nested_quant_map == NULL &&
               strcmp(b.dtype, "float32") == 0,
           "plain quant_state read");
    taken = 0;
    for (int i = 0; i < tb.n; i++) taken += r.taken[i];
    EXPECT(taken == tb.n, "a bound plain weight looked up all %d of its tensors, got %d", tb.n, taken);

    /* A 1-D shape [n] reads as [1, n]. */
    set_json(&tb, "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"float16\", \"shape\": [132]}");
    EXPECT(bind(&b, shape, &tb, &r, NULL, &e) == BNB4_BOUND && shape[0] == 1 && shape[1] == 132,
           "1-D shape: [%lld, %lld] %s", (long long)shape[0], (long long)shape[1], e.msg);

    /* The file lookup finds the same parts. */
    build(&tb, 1);
    struct safetensors st;
    memset(&st, 0, sizeof st);
    st.n_tensors = tb.n;
    st.tensors = tb.t;
    EXPECT(bnb4_bind(&b, shape, bnb4_lookup_file(&st), WHERE, NAME, NULL, &e) == BNB4_BOUND &&
               b.nested_quant_map == part(&tb, ".nested_quant_map"),
           "bnb4_lookup_file: %s", e.msg);
}

/* One broken variant of the nested (or plain) table. */
struct bad_case {
    const char *what;
    int plain;                     /* start from the weight without double quantization */
    const char *json;              /* the quant_state's JSON, NULL: unchanged */
    const char *drop;              /* a part to leave out */
    const char *retype;            /* a part whose dtype becomes `dtype` */
    enum st_dtype dtype;
    const char *reshape;           /* a part whose shape becomes [d0] (ndim 1) or [d0, d1]; d0 < 0: numel */
    int ndim;
    int64_t d0, d1;
    int expect;                    /* check against the expected shape [4, 33] */
    const char *phrase;            /* in the message */
    int absent;                    /* BNB4_ABSENT is expected, not BNB4_BAD */
};

#define QS ".quant_state.bitsandbytes__nf4"
#define JSON_NESTED(bs, extra)                                                                          \
    "{\"quant_type\": \"nf4\", \"blocksize\": " bs ", \"dtype\": \"bfloat16\", \"shape\": [4, 33]" extra \
    "}"
#define NESTED_KEYS ", \"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 0.25"

static const struct bad_case k_bad[] = {
    /* Each part, and the quant_state's keys. */
    {.what = "packed bytes", .reshape = "", .ndim = 2, .d0 = 65, .d1 = 1,
     .phrase = "'" NAME "' is U8 [65, 1], expected U8 [66, 1]"},
    {.what = "absmax dtype", .retype = ".absmax", .dtype = ST_F32,
     .phrase = "'" NAME ".absmax' is F32 [3], expected U8 [3]"},
    {.what = "nested_absmax size", .reshape = ".nested_absmax", .ndim = 1, .d0 = 2, .phrase = "expected F32 [1]"},
    {.what = "nested_quant_map size", .reshape = ".nested_quant_map", .ndim = 1, .d0 = 255,
     .phrase = "expected F32 [256]"},
    {.what = "quant_type fp4 under the nf4 key", .json = "{\"quant_type\": \"fp4\"}", .phrase = "not a JSON object"},
    {.what = "quant_type fp4, full JSON",
     .json = "{\"quant_type\": \"fp4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [4, 33]}",
     .phrase = "says quant_type \"fp4\""},
    {.what = "blocksize 96", .json = JSON_NESTED("96", NESTED_KEYS),
     .phrase = "blocksize 96; expected a power of two from 32 to 4096"},
    {.what = "blocksize 64.5", .json = JSON_NESTED("64.5", NESTED_KEYS), .phrase = "not a JSON object"},
    {.what = "blocksize 8192", .json = JSON_NESTED("8192", NESTED_KEYS), .phrase = "blocksize 8192"},
    {.what = "3-D shape",
     .json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [4, 33, 1]}",
     .phrase = "bad shape"},
    {.what = "zero in the shape",
     .json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [0, 33]}",
     .phrase = "bad shape"},
    {.what = "fractional shape",
     .json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [4, 33.5]}",
     .phrase = "bad shape"},
    {.what = "empty shape",
     .json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": []}",
     .phrase = "bad shape"},
    {.what = "nested_blocksize 300",
     .json = JSON_NESTED("64", ", \"nested_blocksize\": 300, \"nested_dtype\": \"float32\", \"nested_offset\": 0.25"),
     .phrase = "nested_blocksize 300"},
    {.what = "nested_dtype float16",
     .json = JSON_NESTED("64", ", \"nested_blocksize\": 256, \"nested_dtype\": \"float16\", \"nested_offset\": 0.25"),
     .phrase = "needs nested_blocksize, nested_dtype \"float32\" and a finite nested_offset"},
    {.what = "no nested_offset",
     .json = JSON_NESTED("64", ", \"nested_blocksize\": 256, \"nested_dtype\": \"float32\""),
     .phrase = "a finite nested_offset"},
    {.what = "missing nested_quant_map", .drop = ".nested_quant_map",
     .phrase = "lacks its part '" NAME ".nested_quant_map'"},
    {.what = "missing quant_map", .drop = ".quant_map", .phrase = "lacks its part '" NAME ".quant_map'"},
    {.what = "plain: absmax U8", .plain = 1, .retype = ".absmax", .dtype = ST_U8, .phrase = "expected F32 [3]"},
    {.what = "a weight without quant_state", .drop = QS, .phrase = "has no '" NAME QS "'", .absent = 1},
    /* The quant_state tensor, the weight's dtype, stray nested parts, every part's exact shape. */
    {.what = "quant_state dtype", .retype = QS, .dtype = ST_I8, .phrase = "should be a U8 list"},
    {.what = "quant_state as [bytes, 1]", .reshape = QS, .ndim = 2, .d0 = -1, .d1 = 1, .phrase = "should be a U8 list"},
    {.what = "the weight's dtype",
     .json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"int8\", \"shape\": [4, 33]}",
     .phrase = "has dtype \"int8\"; expected float32, bfloat16 or float16"},
    {.what = "nested parts without nested keys", .json = JSON_NESTED("64", ""),
     .phrase = "has nested_* tensors but its quant_state has no nested_blocksize"},
    {.what = "packed 1-D", .reshape = "", .ndim = 1, .d0 = 66, .phrase = "is U8 [66], expected U8 [66, 1]"},
    {.what = "packed I8", .retype = "", .dtype = ST_I8, .phrase = "expected U8 [66, 1]"},
    {.what = "absmax 2-D", .reshape = ".absmax", .ndim = 2, .d0 = 3, .d1 = 1, .phrase = "expected U8 [3]"},
    {.what = "quant_map [4, 4]", .reshape = ".quant_map", .ndim = 2, .d0 = 4, .d1 = 4, .phrase = "expected F32 [16]"},
    {.what = "missing packed weight", .drop = "", .phrase = "lacks its part '" NAME "'"},
    {.what = "missing absmax", .drop = ".absmax", .phrase = "lacks its part '" NAME ".absmax'"},
    {.what = "blocksize 16", .json = JSON_NESTED("16", NESTED_KEYS), .phrase = "blocksize 16"},
    /* The expected shape (a model folder's, from config.json). */
    {.what = "another shape than expected", .expect = 1,
     .json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [33, 4], "
             "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 0.25}",
     .phrase = "gives another shape than the test implies for '" NAME "': [out, in] = [4, 33], not [33, 4]"},
    {.what = "a 1-D shape where [out, in] is expected", .expect = 1,
     .json = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [132], "
             "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 0.25}",
     .phrase = "[out, in] = [4, 33], not [132]"},
};

static void test_bad(void) {
    for (size_t k = 0; k < sizeof k_bad / sizeof k_bad[0]; k++) {
        const struct bad_case *c = &k_bad[k];
        struct table tb;
        struct recorder r;
        struct bnb4_weight b;
        int64_t shape[2];
        struct io_err e;
        build(&tb, !c->plain);
        if (c->json) set_json(&tb, c->json);
        if (c->drop) drop(&tb, c->drop);
        if (c->retype) {
            struct st_tensor *t = part(&tb, c->retype);
            if (t) t->dtype = c->dtype;
        }
        if (c->reshape) {
            struct st_tensor *t = part(&tb, c->reshape);
            if (t) {
                t->ndim = c->ndim;
                t->shape[0] = c->d0 < 0 ? t->numel : c->d0;
                t->shape[1] = c->ndim == 2 ? c->d1 : 0;
            }
        }
        struct bnb4_expect ex = {{4, 33}, "the test implies", "[out, in]"};
        enum bnb4_bind_result rc = bind(&b, shape, &tb, &r, c->expect ? &ex : NULL, &e);
        enum bnb4_bind_result want = c->absent ? BNB4_ABSENT : BNB4_BAD;
        EXPECT(rc == want, "%s: returned %d, expected %d (%s)", c->what, (int)rc, (int)want, e.msg);
        EXPECT(strstr(e.msg, c->phrase) != NULL, "%s: message lacks \"%s\": %s", c->what, c->phrase, e.msg);
        EXPECT(strncmp(e.msg, WHERE ": ", strlen(WHERE) + 2) == 0 && strstr(e.msg, NAME) != NULL,
               "%s: message names the file and the tensor: %s", c->what, e.msg);
        printf("  rejected (%s): %s\n", c->what, e.msg);
    }
}

static void test_fp4(void) {
    struct table tb;
    struct recorder r;
    struct bnb4_weight b;
    int64_t shape[2];
    struct io_err e;
    build(&tb, 1);
    struct st_tensor *qs = part(&tb, QS);
    snprintf(tb.names[qs - tb.t], sizeof tb.names[0], NAME ".quant_state.bitsandbytes__fp4");
    set_json(&tb, "{\"quant_type\": \"fp4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [4, 33]}");
    EXPECT(bind(&b, shape, &tb, &r, NULL, &e) == BNB4_BAD &&
               strstr(e.msg, WHERE ": tensor '" NAME "' is bitsandbytes FP4; refine supports NF4 4-bit checkpoints only"),
           "an FP4 weight is refused: %s", e.msg);
}

int main(int argc, char **argv) {
    (void)test_seed(argc, argv, 1);
    test_blocksize_rule();
    test_good();
    test_bad();
    test_fp4();
    return test_finish("bnb4_test");
}
