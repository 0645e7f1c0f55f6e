/* checkpoint_test.c — nothing in a checkpoint is trusted blindly (train/checkpoint.h): a flipped
 * bit, a truncated file and a file swapped in from another checkpoint are refused by the
 * checksums; trainer.json fields out of range (with checksums that match, so that only the field
 * checks stand in the way) are refused naming the field; the position must follow from the step;
 * settings that steer the next steps may change (and are reported), those that would corrupt the
 * state may not; another model or data is refused naming the file unless accepted; and the
 * removal of older checkpoints never follows a link. The engine: two small tensors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/file.h"
#include "io/file_digest.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "train/checkpoint.h"
#include "train/options.h"

enum { P = 24 };

struct toy {
    float w[P], mom[P];
};

static int toy_n(void *s) {
    (void)s;
    return 2;
}

static int toy_info(void *s, int i, struct engine_tensor *info) {
    (void)s;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", i == 0 ? "w" : "w.exp_avg");
    info->role = i == 0 ? ROLE_PARAM : ROLE_OPTIM;
    info->dtype = ST_F32;
    info->ndim = 1;
    info->shape[0] = P;
    return 0;
}

static int toy_read(void *s, int i, void *host, struct io_err *e) {
    (void)e;
    struct toy *t = s;
    memcpy(host, i == 0 ? t->w : t->mom, sizeof t->w);
    return 0;
}

static int toy_write(void *s, int i, const void *host, struct io_err *e) {
    (void)e;
    struct toy *t = s;
    memcpy(i == 0 ? t->w : t->mom, host, sizeof t->w);
    return 0;
}

static void engine(struct train_engine *eng, struct toy *t, float base) {
    for (int i = 0; i < P; i++) t->w[i] = base + 0.25f * (float)i, t->mom[i] = -base * (float)i;
    memset(eng, 0, sizeof *eng);
    eng->name = "toy";
    eng->self = t;
    eng->n_tensors = toy_n;
    eng->tensor_info = toy_info;
    eng->tensor_read = toy_read;
    eng->tensor_write = toy_write;
}

static char g_tmp[900]; /* paths below: g_tmp + a relative part of at most 600 bytes */
static char g_opts[65536];
static const char *k_identity =
    "{\"model\":[{\"file\":\"/m/model.safetensors\",\"sha256\":\"aa\"},{\"file\":\"/m/config.json\",\"sha256\":\"bb\"}],"
    "\"data\":[{\"file\":\"/d/a.txt\",\"sha256\":\"cc\"},{\"file\":\"/d/b.txt\",\"sha256\":\"dd\"}]}";

/* g_tmp/<fmt with a>, in a ring of 8 buffers: copy a result that must outlive 8 more calls. */
static const char *at(const char *fmt, const char *a) {
    static char buf[8][1600];
    static int k;
    k = (k + 1) % 8;
    char rel[600];
    snprintf(rel, sizeof rel, fmt, a);
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, rel);
    return buf[k];
}

static void options_json(struct train_options *o) {
    train_options_defaults(o, "/nonexistent");
    snprintf(o->out, sizeof o->out, "%s", g_tmp);
    o->micro_batch = 2;
    o->grad_accum = 3;
    train_options_to_json(o, g_opts, sizeof g_opts);
}

static int load(const char *dir, struct train_engine *eng, struct loop_position *pos, const char *opts,
                const char *identity, int accept, char *changes, char *notes, struct io_err *e) {
    struct checkpoint_resume r = {opts, identity, accept, "", NULL, NULL, NULL};
    const int rc = checkpoint_load(dir, eng, pos, &r, e);
    if (changes) snprintf(changes, 4096, "%s", r.changes ? r.changes : "");
    if (notes) snprintf(notes, 4096, "%s", r.notes ? r.notes : "");
    checkpoint_resume_free(&r);
    return rc;
}

static void copy_file(const char *from, const char *to) {
    struct mapped_file m;
    struct io_err e;
    if (map_file(&m, from, &e) != 0 || write_file_atomic(to, m.data, m.size, &e) != 0) test_fail("copy: %s", e.msg);
    unmap_file(&m);
}

/* Rewrites SHA256SUMS from the files as they are: a damaged field is then found by the field
 * checks alone. */
static void resum(const char *step_dir) {
    char a[65], b[65], p[1800], text[300];
    struct io_err e;
    snprintf(p, sizeof p, "%s/state.safetensors", step_dir);
    sha256_file_hex(a, p, &e);
    snprintf(p, sizeof p, "%s/trainer.json", step_dir);
    sha256_file_hex(b, p, &e);
    snprintf(text, sizeof text, "%s  state.safetensors\n%s  trainer.json\n", a, b);
    snprintf(p, sizeof p, "%s/SHA256SUMS", step_dir);
    write_file_atomic(p, text, strlen(text), &e);
}

/* trainer.json of step_dir with `from` replaced by `to` (checksums rewritten). */
static void edit_trainer(const char *step_dir, const char *from, const char *to) {
    char p[1800], *text = NULL, out[1 << 17];
    struct io_err e;
    snprintf(p, sizeof p, "%s/trainer.json", step_dir);
    if (read_file_text(&text, NULL, p, 1 << 20, &e) != 0) return;
    char *hit = strstr(text, from);
    if (hit == NULL) {
        test_fail("trainer.json lacks '%s'", from);
        free(text);
        return;
    }
    snprintf(out, sizeof out, "%.*s%s%s", (int)(hit - text), text, to, hit + strlen(from));
    write_file_atomic(p, out, strlen(out), &e);
    free(text);
    resum(step_dir);
}

static void test_integrity(uint64_t seed) {
    struct train_options o;
    options_json(&o);
    struct toy ta, tb, tc;
    struct train_engine ea, eb, ec;
    engine(&ea, &ta, 1.0f);
    engine(&eb, &tb, 2.0f);
    struct loop_position pos = {3, 9, 0, 18, 1}, got;
    struct io_err e = {{0}};
    EXPECT(checkpoint_save(at("%s", "a"), &ea, &pos, g_opts, k_identity, &e) == 0, "save a: %s", e.msg);
    EXPECT(checkpoint_save(at("%s", "b"), &eb, &pos, g_opts, k_identity, &e) == 0, "save b: %s", e.msg);
    char step[1600];
    snprintf(step, sizeof step, "%s", at("%s/checkpoint/step-3", "a"));
    engine(&ec, &tc, 0.0f);
    EXPECT(load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e) == 0 &&
               memcmp(tc.w, ta.w, sizeof ta.w) == 0 && memcmp(tc.mom, ta.mom, sizeof ta.mom) == 0 && got.step == 3 &&
               got.micro_index == 9 && got.position == 18,
           "a checkpoint loads back exactly: %s", e.msg);

    /* A flipped bit anywhere in the tensor file (header or data): refused, nothing loaded. */
    char state[1800], keep[1800];
    snprintf(state, sizeof state, "%s/state.safetensors", step);
    snprintf(keep, sizeof keep, "%s/keep.bin", g_tmp);
    copy_file(state, keep);
    struct rng r;
    rng_init(&r, seed);
    struct stat st;
    stat(state, &st);
    for (int trial = 0; trial < 8; trial++) {
        const long off = trial < 4 ? (long)st.st_size - 1 - rng_int(&r, 4 * P) : rng_int(&r, (int)st.st_size);
        const int bit = rng_int(&r, 8);
        FILE *f = fopen(state, "r+b");
        fseek(f, off, SEEK_SET);
        int c = fgetc(f);
        fseek(f, off, SEEK_SET);
        fputc(c ^ (1 << bit), f);
        fclose(f);
        engine(&ec, &tc, 0.0f);
        const int rc = load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e);
        EXPECT(rc == -1 && strstr(e.msg, "state.safetensors") != NULL && strstr(e.msg, "SHA256SUMS") != NULL &&
                   tc.w[1] == 0.25f,
               "bit %d of byte %ld flipped: refused before the engine is touched: %s", bit, off, e.msg);
        copy_file(keep, state);
    }
    /* Truncated. */
    EXPECT(truncate(state, st.st_size - 7) == 0, "truncate");
    EXPECT(load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e) == -1 &&
               strstr(e.msg, "state.safetensors") != NULL,
           "a truncated state is refused: %s", e.msg);
    /* Swapped in from another checkpoint of the same shape. */
    copy_file(at("%s/checkpoint/step-3/state.safetensors", "b"), state);
    EXPECT(load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e) == -1 &&
               strstr(e.msg, "state.safetensors") != NULL,
           "a state swapped in from another run is refused: %s", e.msg);
    copy_file(keep, state);
    char tj[1800], tkeep[1800];
    snprintf(tj, sizeof tj, "%s/trainer.json", step);
    snprintf(tkeep, sizeof tkeep, "%s/keep.json", g_tmp);
    copy_file(tj, tkeep);
    copy_file(at("%s/checkpoint/step-3/trainer.json", "b"), tj); /* same bytes: b's trainer.json equals a's */
    EXPECT(load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e) == 0, "an identical trainer.json loads");
    FILE *f = fopen(tj, "ab");
    fputs(" ", f);
    fclose(f);
    EXPECT(load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e) == -1 && strstr(e.msg, "trainer.json") != NULL,
           "a trainer.json changed by one byte is refused: %s", e.msg);
    copy_file(tkeep, tj);
    char sums[1800];
    snprintf(sums, sizeof sums, "%s/SHA256SUMS", step);
    copy_file(sums, tkeep);
    write_file_atomic(sums, "00  state.safetensors\n", 22, &e);
    EXPECT(load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e) == -1 && strstr(e.msg, "SHA256SUMS") != NULL,
           "a damaged SHA256SUMS is refused: %s", e.msg);
    unlink(sums);
    EXPECT(load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e) == -1 && strstr(e.msg, "SHA256SUMS") != NULL,
           "a checkpoint without SHA256SUMS is refused: %s", e.msg);
    copy_file(tkeep, sums);

    /* Fields out of range, with matching checksums. */
    static const struct {
        const char *from, *to, *phrase;
    } bad[] = {
        {"\"position\":18", "\"position\":-3", "\"position\""},
        {"\"step\":3", "\"step\":1000000000000", "\"step\""},
        {"\"step\":3", "\"step\":2.5", "\"step\""},
        {"\"micro_index\":9", "\"micro_index\":\"9\"", "\"micro_index\""},
        {"\"epoch\":0", "\"epoch\":-1", "\"epoch\""},
        {"\"format\":2", "\"format\":1", "format 1"},
        {"\"options\":{", "\"options\":[{", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        copy_file(at("%s/checkpoint/step-3/trainer.json", "b"), tj);
        edit_trainer(step, bad[i].from, bad[i].to);
        EXPECT(load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e) == -1 &&
                   strstr(e.msg, bad[i].phrase) != NULL && strstr(e.msg, "trainer.json") != NULL,
               "trainer.json with %s is refused naming it: %s", bad[i].to, e.msg);
    }
    copy_file(at("%s/checkpoint/step-3/trainer.json", "b"), tj);
    resum(step);
    EXPECT(load(at("%s", "a"), &ec, &got, g_opts, k_identity, 0, NULL, NULL, &e) == 0, "restored: %s", e.msg);
}

static void test_position(void) {
    struct io_err e;
    /* P = 6 sequences per step, 36 per epoch: after 6 steps the end of epoch 0, after 7 step 1 of epoch 1. */
    struct loop_position ok[] = {{0, 0, 0, 0, 1}, {5, 15, 0, 30, 1}, {6, 18, 0, 36, 1}, {7, 21, 1, 6, 1}, {13, 39, 2, 6, 1}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        EXPECT(checkpoint_check_position(&ok[i], 6, 36, 20, "t.json", &e) == 0, "step %d: %s", ok[i].step, e.msg);
    struct loop_position bad_epoch = {7, 21, 0, 42, 1}, bad_pos = {7, 21, 1, 12, 1}, past = {21, 63, 3, 18, 1}, micro = {7, 3, 1, 6, 1};
    EXPECT(checkpoint_check_position(&bad_epoch, 6, 36, 20, "t.json", &e) == -1 && strstr(e.msg, "expected epoch 1") != NULL,
           "an epoch that does not follow from the step: %s", e.msg);
    EXPECT(checkpoint_check_position(&bad_pos, 6, 36, 20, "t.json", &e) == -1 && strstr(e.msg, "position 6") != NULL,
           "a position that does not follow: %s", e.msg);
    EXPECT(checkpoint_check_position(&past, 6, 36, 20, "t.json", &e) == -1 && strstr(e.msg, "past this run's 20") != NULL,
           "a step past the run's end: %s", e.msg);
    EXPECT(checkpoint_check_position(&micro, 6, 36, 20, "t.json", &e) == -1 && strstr(e.msg, "micro_index") != NULL,
           "fewer micro-batches than steps: %s", e.msg);
    struct loop_position derived = {7, 21, 99, -3, 1};
    checkpoint_position_after(&derived, 6, 36);
    EXPECT(derived.epoch == 1 && derived.position == 6, "the position after 7 steps");
}

static void test_options_and_identity(void) {
    struct train_options o;
    options_json(&o);
    struct toy ta, tc;
    struct train_engine ea, ec;
    engine(&ea, &ta, 1.0f);
    struct loop_position pos = {3, 9, 0, 18, 1}, got;
    struct io_err e = {{0}};
    EXPECT(checkpoint_save(at("%s", "c"), &ea, &pos, g_opts, k_identity, &e) == 0, "save c: %s", e.msg);
    char changes[4096], notes[4096], opts[65536];

    /* Steering settings may change; each is reported. */
    o.lr = 5e-4f;
    o.max_steps = 60;
    o.micro_batch = 3, o.grad_accum = 2; /* the same 6 sequences per step */
    train_options_to_json(&o, opts, sizeof opts);
    engine(&ec, &tc, 0.0f);
    EXPECT(load(at("%s", "c"), &ec, &got, opts, k_identity, 0, changes, notes, &e) == 0, "lower lr, more steps, other split: %s",
           e.msg);
    EXPECT(strstr(changes, "\"lr\":{\"from\":0.00100000005,\"to\":0.000500000024}") != NULL &&
               strstr(changes, "\"max-steps\":{\"from\":30,\"to\":60}") != NULL && strstr(changes, "\"micro-batch\"") != NULL,
           "the changes are returned: %s", changes);
    EXPECT(strstr(notes, "--lr 0.00100000005 -> 0.000500000024") != NULL, "and said: %s", notes);
    /* Where activations live may change: --recompute-keep, also on a checkpoint written before the
     * option existed (its options without the key) */
    {
        options_json(&o);
        char old_opts[65536];
        snprintf(old_opts, sizeof old_opts, "%s", g_opts);
        char *k = strstr(old_opts, "\"recompute-keep\":0,");
        EXPECT(k != NULL, "the options JSON names recompute-keep: %s", old_opts);
        if (k) memmove(k, k + strlen("\"recompute-keep\":0,"), strlen(k + strlen("\"recompute-keep\":0,")) + 1);
        EXPECT(checkpoint_save(at("%s", "keep"), &ea, &pos, old_opts, k_identity, &e) == 0, "save keep: %s", e.msg);
        o.recompute = RECOMPUTE_LAYER, o.recompute_keep = 3;
        train_options_to_json(&o, opts, sizeof opts);
        struct toy tk;
        struct train_engine ek;
        engine(&ek, &tk, 0.0f);
        EXPECT(load(at("%s", "keep"), &ek, &got, opts, k_identity, 0, changes, notes, &e) == 0,
               "--recompute layer --recompute-keep 3 on a checkpoint without the key: %s", e.msg);
        EXPECT(strstr(changes, "\"recompute-keep\":{\"from\":null,\"to\":3}") != NULL, "the change is returned: %s", changes);
    }
    /* State-corrupting settings may not. */
    static const char *const refused[] = {"seed", "rank", "method", "precision", "optimizer", "seq", "targets",
                                          "val-fraction", "data-format"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        options_json(&o);
        if (i == 0) o.seed = 1;
        if (i == 1) o.rank = 8;
        if (i == 2) o.method = METHOD_DORA;
        if (i == 3) o.precision = PRECISION_BF16;
        if (i == 4) o.optimizer = OPTIMIZER_ADAMW8BIT;
        if (i == 5) o.seq = 64;
        if (i == 6) o.targets = 1;
        if (i == 7) o.val_fraction = 0.2f;
        if (i == 8) o.data_format = DATA_FORMAT_TEXT;
        train_options_to_json(&o, opts, sizeof opts);
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", refused[i]);
        EXPECT(load(at("%s", "c"), &ec, &got, opts, k_identity, 0, NULL, NULL, &e) == -1 && strstr(e.msg, flag) != NULL,
               "a changed %s is refused: %s", flag, e.msg);
    }
    options_json(&o);
    o.micro_batch = 3, o.grad_accum = 3;
    train_options_to_json(&o, opts, sizeof opts);
    EXPECT(load(at("%s", "c"), &ec, &got, opts, k_identity, 0, NULL, NULL, &e) == -1 && strstr(e.msg, "micro-batch") != NULL,
           "another number of sequences per step is refused: %s", e.msg);
    options_json(&o);

    /* Another model or data: refused naming the file; accepted on request, as a note. */
    char other[1024];
    snprintf(other, sizeof other, "%s", k_identity);
    memcpy(strstr(other, "\"dd\""), "\"ee\"", 4);
    EXPECT(load(at("%s", "c"), &ec, &got, g_opts, other, 0, NULL, NULL, &e) == -1 && strstr(e.msg, "/d/b.txt") != NULL &&
               strstr(e.msg, "--resume-anyway") != NULL,
           "changed data is refused naming the file: %s", e.msg);
    EXPECT(load(at("%s", "c"), &ec, &got, g_opts, other, 1, NULL, notes, &e) == 0 && strstr(notes, "/d/b.txt") != NULL &&
               strstr(notes, "--resume-anyway") != NULL,
           "and accepted with --resume-anyway, as a note: %s", notes);
    snprintf(other, sizeof other, "%s", k_identity);
    memcpy(strstr(other, "\"aa\""), "\"ab\"", 4);
    EXPECT(load(at("%s", "c"), &ec, &got, g_opts, other, 0, NULL, NULL, &e) == -1 &&
               strstr(e.msg, "model file /m/model.safetensors") != NULL,
           "a changed model file is refused naming it: %s", e.msg);
    /* The same contents under other paths (a moved model folder, renamed data) are the same run. */
    snprintf(other, sizeof other, "%s", k_identity);
    memcpy(strstr(other, "/m/model"), "/n/model", 8);
    memcpy(strstr(other, "/d/a.txt"), "/e/a.txt", 8);
    EXPECT(load(at("%s", "c"), &ec, &got, g_opts, other, 0, NULL, NULL, &e) == 0, "moved files, same contents: %s", e.msg);
    snprintf(other, sizeof other, "{\"model\":[],\"data\":[]}");
    EXPECT(load(at("%s", "c"), &ec, &got, g_opts, other, 0, NULL, NULL, &e) == -1, "missing files are a difference: %s", e.msg);
}

static void test_no_link_followed(void) {
    struct train_options o;
    options_json(&o);
    struct toy ta;
    struct train_engine ea;
    engine(&ea, &ta, 1.0f);
    struct io_err e;
    char victim[1400], p[1800];
    snprintf(victim, sizeof victim, "%s/victim", g_tmp);
    make_dirs(victim, &e);
    snprintf(p, sizeof p, "%s/precious", victim);
    write_file_atomic(p, "x", 1, &e);
    struct loop_position pos = {1, 3, 0, 6, 1};
    EXPECT(checkpoint_save(at("%s", "l"), &ea, &pos, g_opts, NULL, &e) == 0, "save step 1: %s", e.msg);
    /* step-1 replaced by a link to the victim; a link inside step-1's successor too */
    char s1[1600];
    snprintf(s1, sizeof s1, "%s", at("%s/checkpoint/step-1", "l"));
    rename(s1, at("%s/checkpoint/moved", "l"));
    EXPECT(symlink(victim, s1) == 0, "link: %s", strerror(errno));
    pos.step = 2, pos.micro_index = 6, pos.position = 12;
    EXPECT(checkpoint_save(at("%s", "l"), &ea, &pos, g_opts, NULL, &e) == 0, "save step 2: %s", e.msg);
    snprintf(p, sizeof p, "%s/precious", victim);
    EXPECT(file_exists(p), "the older checkpoint's removal did not empty the link's target");
    EXPECT(symlink(victim, at("%s/checkpoint/step-2/inside", "l")) == 0, "link inside");
    pos.step = 3, pos.micro_index = 9, pos.position = 18;
    EXPECT(checkpoint_save(at("%s", "l"), &ea, &pos, g_opts, NULL, &e) == 0, "save step 3: %s", e.msg);
    EXPECT(file_exists(p), "a link inside an older step folder kept its target");
}

int main(int argc, char **argv) {
    const uint64_t seed = test_seed(argc, argv, 20);
    const char *t = getenv("TEST_TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/checkpoint_test_%d", t ? t : "/tmp", (int)getpid());
    mkdir(g_tmp, 0755);
    test_integrity(seed);
    test_position();
    test_options_and_identity();
    test_no_link_followed();
    return test_finish("checkpoint_test");
}
