/* data_test.c — the data pipeline with a byte-level test encoder: packing and label shift,
 * loss masks of prompt/response and chat data, split and epoch order, the token cache, bad data;
 * the format decided by content (JSON lines in x.json or x.JSONL, text otherwise, --data-format),
 * text after a JSON object, text the encoder cannot represent (file and line), and token ids
 * beyond the vocabulary (from the encoder: an error; from a cache entry: rebuilt). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/file.h"
#include "io/sha256.h"
#include "tests/common/harness.h"
#include "train/data.h"

/* Test encoder: byte c → id c + 3; BOS 1, EOS 2; chat: role byte marker (id 300 + first letter),
 * then content; assistant content and the end-of-turn id 299 are targets. */
static int enc_bytes(void *self, const char *text, size_t len, uint32_t target, struct token_vec *out,
                     size_t *bad_offset, struct io_err *e) {
    (void)self;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '\x04') { /* a byte this vocabulary lacks */
            if (bad_offset) *bad_offset = i;
            return io_fail(e, "the byte 0x04 has no token");
        }
    for (size_t i = 0; i < len; i++)
        if (token_vec_push(out, ((uint32_t)(unsigned char)text[i] + 3) | target, e)) return -1;
    return 0;
}

static int enc_chat(void *self, const struct chat_message *m, int n, struct token_vec *out, struct io_err *e) {
    if (token_vec_push(out, 1, e)) return -1;
    for (int i = 0; i < n; i++) {
        const uint32_t t = strcmp(m[i].role, "assistant") == 0 ? DATA_TARGET : 0;
        if (token_vec_push(out, 300u + (unsigned char)m[i].role[0], e)) return -1;
        if (enc_bytes(self, m[i].content, strlen(m[i].content), t, out, NULL, e)) return -1;
        if (token_vec_push(out, 299u | t, e)) return -1;
    }
    return 0;
}

static struct data_encoder test_encoder(int add_bos) {
    struct data_encoder enc = {0};
    strcpy(enc.identity, "bytes+3");
    enc.add_bos = add_bos;
    enc.bos = 1;
    enc.eos = 2;
    enc.encode = enc_bytes;
    enc.encode_chat = enc_chat;
    return enc;
}

static char tmp[1024];

static void write_text(const char *name, const char *text, size_t n, char *path_out) {
    snprintf(path_out, 2048, "%s/%s", tmp, name);
    FILE *f = fopen(path_out, "wb");
    if (!f) {
        test_fail("cannot write %s", path_out);
        return;
    }
    fwrite(text, 1, n, f);
    fclose(f);
}

static void test_sha256(void) {
    struct {
        const char *in, *hex;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (int i = 0; i < 3; i++) {
        struct sha256 s;
        uint8_t d[32];
        char hex[65];
        sha256_init(&s);
        /* feed byte by byte and in one call: both must give the FIPS 180-4 digest */
        for (size_t k = 0; k < strlen(v[i].in); k++) sha256_update(&s, v[i].in + k, 1);
        sha256_final(&s, d);
        sha256_hex(d, hex);
        EXPECT(strcmp(hex, v[i].hex) == 0, "sha256 of \"%s\": %s", v[i].in, hex);
    }
    /* a million 'a' (FIPS 180-4 test vector), in blocks of 1000 */
    char block[1000];
    memset(block, 'a', sizeof block);
    struct sha256 s;
    uint8_t d[32];
    char hex[65];
    sha256_init(&s);
    for (int i = 0; i < 1000; i++) sha256_update(&s, block, sizeof block);
    sha256_final(&s, d);
    sha256_hex(d, hex);
    EXPECT(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0, "sha256 of 1e6 'a'");
}

static void test_packing(void) {
    /* stream 0..20 where every third word is not a target */
    uint32_t s[21];
    for (int i = 0; i < 21; i++) s[i] = (uint32_t)(100 + i) | (i % 3 == 0 ? 0 : DATA_TARGET);
    struct data_options o = {.T = 5, .val_fraction = 0.0f, .seed = 7};
    struct dataset d;
    struct io_err e;
    EXPECT(dataset_from_stream(&d, s, 21, &o, &e) == 0, "from_stream");
    EXPECT(d.n_seq == 4 && d.n_train == 4 && d.n_val == 0, "(21-1)/5 = 4 sequences, got %lld", (long long)d.n_seq);
    for (int q = 0; q < 4; q++) {
        int32_t tok[5], lab[5];
        int64_t valid = dataset_sequence(&d, q, tok, lab), want_valid = 0;
        int ok = 1;
        for (int t = 0; t < 5; t++) {
            const int i = q * 5 + t;
            ok &= tok[t] == 100 + i;
            const int target = (i + 1) % 3 != 0;
            ok &= lab[t] == (target ? 100 + i + 1 : -100);
            want_valid += target;
        }
        EXPECT(ok && valid == want_valid, "sequence %d: window, shift and mask", q);
    }
    dataset_close(&d);
    o.T = 20;
    EXPECT(dataset_from_stream(&d, s, 21, &o, &e) == 0 && d.n_seq == 1, "exactly one window of T+1");
    dataset_close(&d);
    o.T = 21;
    EXPECT(dataset_from_stream(&d, s, 21, &o, &e) == -1 && strstr(e.msg, "fewer than one sequence"),
           "too short: %s", e.msg);
}

static void test_split_and_epochs(void) {
    enum { S = 1001, T = 10 };
    uint32_t *s = (uint32_t *)malloc(S * sizeof *s);
    for (int i = 0; i < S; i++) s[i] = (uint32_t)i | DATA_TARGET;
    struct data_options o = {.T = T, .val_fraction = 0.1f, .seed = 42};
    struct dataset a, b;
    struct io_err e;
    EXPECT(dataset_from_stream(&a, s, S, &o, &e) == 0 && dataset_from_stream(&b, s, S, &o, &e) == 0, "open");
    EXPECT(a.n_seq == 100 && a.n_val == 10 && a.n_train == 90, "split 90/10");
    int seen[100] = {0}, same = 1;
    for (int i = 0; i < 10; i++) seen[a.val_order[i]]++, same &= a.val_order[i] == b.val_order[i];
    for (int i = 0; i < 90; i++) seen[a.train_set[i]] += 10;
    int cover = 1;
    for (int i = 0; i < 100; i++) cover &= seen[i] == 1 || seen[i] == 10;
    EXPECT(cover && same, "validation and training are disjoint, cover every sequence, same for the same seed");
    struct batch_source src;
    dataset_batch_source(&a, &src);
    int32_t tok[3 * T], lab[3 * T];
    int hits[100] = {0};
    for (int pos = 0; pos < 90; pos += 3) {
        EXPECT(src.train_batch(src.self, 0, pos, 3, tok, lab) == 3 * T, "all targets valid");
        for (int k = 0; k < 3; k++) hits[tok[k * T] / T]++;
    }
    int once = 1;
    for (int i = 0; i < 100; i++) once &= hits[i] == (seen[i] == 10 ? 1 : 0);
    EXPECT(once, "an epoch visits every training sequence once and no validation sequence");
    int32_t e0[T], e1[T], e0again[T], lab1[T];
    src.train_batch(src.self, 0, 5, 1, e0, lab1);
    src.train_batch(src.self, 1, 5, 1, e1, lab1);
    src.train_batch(src.self, 0, 5, 1, e0again, lab1);
    EXPECT(e0[0] == e0again[0], "epoch order is a pure function of (seed, epoch, position)");
    int differ = 0;
    for (int pos = 0; pos < 20; pos++) {
        src.train_batch(src.self, 0, pos, 1, e0, lab1);
        src.train_batch(src.self, 1, pos, 1, e1, lab1);
        differ += e0[0] != e1[0];
    }
    EXPECT(differ > 10, "epochs are reshuffled (%d of 20 positions differ)", differ);
    int64_t val42[10];
    memcpy(val42, a.val_order, sizeof val42);
    dataset_close(&a);
    dataset_close(&b);
    o.seed = 43;
    EXPECT(dataset_from_stream(&b, s, S, &o, &e) == 0, "open seed 43");
    int moved = 0;
    for (int i = 0; i < 10; i++) moved += b.val_order[i] != val42[i];
    EXPECT(moved > 0, "another seed gives another split");
    dataset_close(&b);
    free(s);
}

static void test_files_and_masks(void) {
    char p_text[2048], p_jsonl[2048];
    write_text("a.txt", "hi", 2, p_text);
    const char *jl = "{\"text\": \"ab\"}\n\n{\"prompt\": \"Q\", \"response\": \"RS\"}\n"
                     "{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}, "
                     "{\"role\": \"assistant\", \"content\": \"v\"}]}\n";
    write_text("b.jsonl", jl, strlen(jl), p_jsonl);
    struct data_encoder enc = test_encoder(1);
    struct token_vec t = {0};
    struct io_err e;
    EXPECT(data_tokenize_file(p_text, DATA_FORMAT_AUTO, &enc, &t, &e) == 0, "text file");
    const uint32_t want_text[] = {1, ('h' + 3) | DATA_TARGET, ('i' + 3) | DATA_TARGET, 2 | DATA_TARGET};
    EXPECT(t.n == 4 && memcmp(t.v, want_text, sizeof want_text) == 0, "text: BOS, targets, EOS");
    token_vec_free(&t);
    EXPECT(data_tokenize_file(p_jsonl, DATA_FORMAT_AUTO, &enc, &t, &e) == 0, "jsonl: %s", e.msg);
    const uint32_t T_ = DATA_TARGET;
    const uint32_t want[] = {1, ('a' + 3) | T_, ('b' + 3) | T_, 2 | T_,               /* text */
                             1, 'Q' + 3, ('R' + 3) | T_, ('S' + 3) | T_, 2 | T_,        /* prompt/response */
                             1, 300 + 'u', 'u' + 3, 299, 300 + 'a', ('v' + 3) | T_, 299 | T_}; /* chat */
    int same = t.n == sizeof want / sizeof *want;
    for (size_t i = 0; same && i < t.n; i++) same &= t.v[i] == want[i];
    EXPECT(same, "jsonl: prompt tokens and user turns carry no loss (%zu words)", t.n);
    token_vec_free(&t);

    /* a folder: files in name order; the cache is written, then hit, and gives the same stream */
    char dir[1100], cache[1100];
    snprintf(dir, sizeof dir, "%s/corpus", tmp);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    mkdir(dir, 0755);
    char p[2048];
    char big[600];
    for (int i = 0; i < (int)sizeof big; i++) big[i] = (char)('a' + i % 26);
    snprintf(p, sizeof p, "%s/corpus/2.txt", tmp);
    FILE *f = fopen(p, "wb");
    fwrite(big, 1, sizeof big, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/corpus/1.txt", tmp);
    f = fopen(p, "wb");
    fwrite("zz", 1, 2, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/corpus/.hidden", tmp);
    f = fopen(p, "wb");
    fwrite("\xff", 1, 1, f);
    fclose(f);
    const char *paths[] = {dir};
    struct data_options o = {.T = 16, .val_fraction = 0.25f, .seed = 1, .cache = cache};
    struct dataset d1, d2;
    EXPECT(dataset_open(&d1, paths, 1, &enc, &o, &e) == 0, "open folder: %s", e.msg);
    EXPECT(d1.n_files == 2 && d1.cache_hits == 0, "two files (hidden skipped), cache cold");
    EXPECT(d1.S == 4 + 602 && (d1.stream[1] & DATA_ID_MASK) == 'z' + 3, "1.txt first: %zu words", d1.S);
    EXPECT(dataset_open(&d2, paths, 1, &enc, &o, &e) == 0 && d2.cache_hits == 2, "cache warm");
    EXPECT(d2.S == d1.S && memcmp(d1.stream, d2.stream, d1.S * 4) == 0, "cached stream identical");
    dataset_close(&d2);
    struct data_encoder enc2 = enc;
    strcpy(enc2.identity, "another-vocab");
    EXPECT(dataset_open(&d2, paths, 1, &enc2, &o, &e) == 0 && d2.cache_hits == 0,
           "another tokenizer does not reuse the cache");
    dataset_close(&d2);
    dataset_close(&d1);
}

static void expect_error(const char *name, const char *content, const char *want) {
    char p[2048];
    write_text(name, content, strlen(content), p);
    struct data_encoder enc = test_encoder(0);
    struct token_vec t = {0};
    struct io_err e = {{0}};
    const int rc = data_tokenize_file(p, DATA_FORMAT_AUTO, &enc, &t, &e);
    EXPECT(rc == -1 && strstr(e.msg, want) != NULL, "%s: wanted '%s', got '%s'", name, want, e.msg);
    token_vec_free(&t);
}

/* The format a file is read in, by the words of its tokens: a JSONL {"prompt"} line trains only
 * the response, as text every byte is a target. */
static void expect_format(const char *name, const char *content, enum data_format req, enum data_format want) {
    char p[2048];
    write_text(name, content, strlen(content), p);
    struct mapped_file m;
    struct io_err e = {{0}};
    enum data_format got = DATA_FORMAT_AUTO;
    int rc = map_file(&m, p, &e);
    if (rc == 0) rc = data_detect_format(&got, p, m.data, m.size, req, &e);
    unmap_file(&m);
    EXPECT(rc == 0 && got == want, "%s (%s): read as %s, expected %s: %s", name, data_format_name(req),
           data_format_name(got), data_format_name(want), e.msg);
}

static void test_formats(void) {
    const char *qa = "{\"prompt\": \"Q\", \"response\": \"R\"}\n{\"text\": \"t\"}\n";
    expect_format("qa.json", qa, DATA_FORMAT_AUTO, DATA_FORMAT_JSONL);
    expect_format("qa.JSONL", qa, DATA_FORMAT_AUTO, DATA_FORMAT_JSONL);
    expect_format("qa.txt", qa, DATA_FORMAT_AUTO, DATA_FORMAT_JSONL);
    expect_format("qa_noext", "\n  \xef\xbb\xbf{\"text\": \"x\"}  \n", DATA_FORMAT_AUTO, DATA_FORMAT_TEXT);
    expect_format("bom_noext", "\xef\xbb\xbf\n{\"text\": \"x\"}\n", DATA_FORMAT_AUTO, DATA_FORMAT_JSONL);
    expect_format("code.txt", "{\n  int x;\n}\n", DATA_FORMAT_AUTO, DATA_FORMAT_TEXT);
    expect_format("prose.txt", "In the beginning\n", DATA_FORMAT_AUTO, DATA_FORMAT_TEXT);
    expect_format("half.txt", "{\"text\": \"x\"} and more\n", DATA_FORMAT_AUTO, DATA_FORMAT_TEXT);
    expect_format("forced.jsonl", qa, DATA_FORMAT_TEXT, DATA_FORMAT_TEXT);
    expect_format("forced.txt", "In the beginning\n", DATA_FORMAT_JSONL, DATA_FORMAT_JSONL);
    /* Through the tokenizer: x.json holding prompt/response is not trained on its prompt. */
    char p[2048];
    write_text("qa2.json", qa, strlen(qa), p);
    struct data_encoder enc = test_encoder(0);
    struct token_vec t = {0};
    struct io_err e = {{0}};
    int rc = data_tokenize_file(p, DATA_FORMAT_AUTO, &enc, &t, &e);
    EXPECT(rc == 0 && t.n == 5 && t.v[0] == 'Q' + 3 && t.v[1] == (('R' + 3) | DATA_TARGET),
           "qa2.json: the prompt carries no loss (%zu words): %s", t.n, e.msg);
    token_vec_free(&t);
    rc = data_tokenize_file(p, DATA_FORMAT_TEXT, &enc, &t, &e);
    EXPECT(rc == 0 && t.n == strlen(qa) + 1, "--data-format text: the same file as text (%zu words)", t.n);
    token_vec_free(&t);
    /* a byte order mark before the first object */
    const char *bom = "\xef\xbb\xbf{\"text\": \"ab\"}\n";
    write_text("bom.jsonl", bom, strlen(bom), p);
    rc = data_tokenize_file(p, DATA_FORMAT_AUTO, &enc, &t, &e);
    EXPECT(rc == 0 && t.n == 3, "a byte order mark before JSON lines is skipped (%zu words): %s", t.n, e.msg);
    token_vec_free(&t);
    /* a name that says JSON over content that is not */
    write_text("arr.json", "[{\"text\": \"x\"}]\n", 17, p);
    EXPECT(data_tokenize_file(p, DATA_FORMAT_AUTO, &enc, &t, &e) == -1 && strstr(e.msg, "arr.json") != NULL &&
               strstr(e.msg, "--data-format text") != NULL,
           "a JSON array in x.json is refused: %s", e.msg);
    token_vec_free(&t);
}

static void test_vocab_and_bytes(void) {
    /* Text the encoder cannot represent: file and line, never dropped. */
    expect_error("ctl.txt", "line one\nline two\nline \x04three\n", "ctl.txt:3");
    expect_error("ctl.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"a\\u0004b\"}\n", "ctl.jsonl:2");
    /* Ids beyond the vocabulary: the test encoder maps byte c to c + 3, so 'z' is 125. */
    char dir[1100], cache[1100], p[2048];
    snprintf(dir, sizeof dir, "%s/vocab", tmp);
    snprintf(cache, sizeof cache, "%s/vcache", tmp);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/vocab/z.txt", tmp);
    FILE *f = fopen(p, "wb");
    for (int i = 0; i < 40; i++) fputs("zzzz yyyy ", f);
    fclose(f);
    const char *paths[] = {dir};
    struct data_encoder enc = test_encoder(0);
    struct data_options o = {.T = 8, .seed = 1, .cache = cache, .vocab_size = 120};
    struct dataset d;
    struct io_err e = {{0}};
    EXPECT(dataset_open(&d, paths, 1, &enc, &o, &e) == -1 && strstr(e.msg, "z.txt") != NULL && strstr(e.msg, "125") != NULL &&
               strstr(e.msg, "120") != NULL,
           "an id beyond the vocabulary is refused naming the file: %s", e.msg);
    o.vocab_size = 0; /* unchecked: the entry is cached with ids up to 125 */
    EXPECT(dataset_open(&d, paths, 1, &enc, &o, &e) == 0, "unchecked: %s", e.msg);
    dataset_close(&d);
    o.vocab_size = 126;
    EXPECT(dataset_open(&d, paths, 1, &enc, &o, &e) == 0 && d.cache_hits == 1, "in range, the entry is used");
    dataset_close(&d);
    /* the same key, an entry holding an id beyond the vocabulary: damaged, rebuilt (and refused) */
    o.vocab_size = 125;
    EXPECT(dataset_open(&d, paths, 1, &enc, &o, &e) == -1 && strstr(e.msg, "125") != NULL, "a cached id beyond: %s", e.msg);
    /* text after a JSON object */
    expect_error("trail.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"x\"} garbage\n", "trail.jsonl:2: unexpected text");
    expect_error("two.jsonl", "{\"text\": \"a\"} {\"text\": \"b\"}\n", "two.jsonl:1: unexpected text");
}

static void test_bad_data(void) {
    expect_error("bad1.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"ok\"\n", "bad1.jsonl:2: not a JSON object");
    expect_error("bad2.jsonl", "{\"text\": \"ok\"}\n\n[1,2]\n", "bad2.jsonl:3: not a JSON object");
    expect_error("bad3.jsonl", "{\"txt\": \"x\"}\n", "bad3.jsonl:1: expected exactly one of");
    expect_error("bad4.jsonl", "{\"prompt\": \"x\"}\n", "must both be strings");
    expect_error("bad5.jsonl", "{\"messages\": []}\n", "non-empty array");
    expect_error("bad6.jsonl", "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}\n", "role \"robot\"");
    expect_error("bad7.jsonl", "{\"text\": 3}\n", "expected exactly one of");
    expect_error("bad8.txt", "ok\xc3\x28", "not UTF-8 text (invalid byte sequence at byte 2)");
    expect_error("bad9.txt", "\xed\xa0\x80", "not UTF-8"); /* a UTF-16 surrogate */
    expect_error("bad10.txt", "\xc0\xaf", "not UTF-8");    /* overlong '/' */
    struct data_encoder enc = test_encoder(0);
    struct dataset d;
    struct io_err e;
    struct data_options o = {.T = 4};
    char missing[1100], empty[1100];
    snprintf(missing, sizeof missing, "%s/nope", tmp);
    const char *p1[] = {missing};
    EXPECT(dataset_open(&d, p1, 1, &enc, &o, &e) == -1 && strstr(e.msg, "nope"), "missing path: %s", e.msg);
    snprintf(empty, sizeof empty, "%s/empty", tmp);
    mkdir(empty, 0755);
    const char *p2[] = {empty};
    EXPECT(dataset_open(&d, p2, 1, &enc, &o, &e) == -1 && strstr(e.msg, "holds no data"), "empty folder: %s", e.msg);
    EXPECT(dataset_open(&d, p2, 0, &enc, &o, &e) == -1 && strstr(e.msg, "no training data"), "no --data");
}

int main(void) {
    const char *t = getenv("TEST_TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/data_test_%d", t ? t : "/tmp", (int)getpid());
    mkdir(tmp, 0755);
    test_sha256();
    test_packing();
    test_split_and_epochs();
    test_files_and_masks();
    test_bad_data();
    test_formats();
    test_vocab_and_bytes();
    return test_finish("data_test");
}
