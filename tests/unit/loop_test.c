/* loop_test.c — the training loop with a small deterministic engine and synthetic data:
 * resumption is bit-identical, a kill at any moment leaves a loadable checkpoint, a non-finite
 * loss stops the run without touching the last checkpoint, and bad resumptions are refused.
 *
 * The engine: one table w[16] of parameters; the prediction for a position is w[token % 16], the
 * target (label % 7)/7, the per-token loss ½(w − target)²; a "dropout" term derived from the
 * micro_index perturbs the gradient so that a resume that loses the micro-batch count diverges;
 * a momentum optimizer whose state is a second tensor.
 * Samples (--sample-every): the toy's generate hook answers tokens read from its weights, so a
 * sample shows the state; they are recorded before the first step, every N steps and at the end,
 * and a run stopped and resumed keeps the records up to its checkpoint and writes the same ones.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/file.h"
#include "io/safetensors.h"
#include "tests/common/harness.h"
#include "train/checkpoint.h"
#include "train/loop.h"

enum { P = 16 };

struct toy {
    float w[P], mom[P], grad[P];
    double nll; /* Σ NLL of the micro-batches since the last step */
    int nan_at_micro; /* produce a NaN loss at this micro_index (-1: never) */
    int slow_read;    /* sleep in tensor_read (widens the window for the kill test) */
};

static struct train_comm g_comm; /* the single-process job */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int toy_micro(void *s, const int32_t *tokens, const int32_t *labels, int B, int T, float grad_scale,
                     uint64_t micro_index, struct io_err *e) {
    (void)e;
    struct toy *t = s;
    double sum = 0;
    for (int i = 0; i < B * T; i++) {
        if (labels[i] == -100) continue;
        int k = tokens[i] % P;
        float target = (float)(labels[i] % 7) / 7.0f;
        float d = t->w[k] - target;
        sum += 0.5 * (double)d * d;
        float noise = (float)(mix(micro_index * 1000003u + (uint64_t)i) % 1000) * 1e-6f;
        t->grad[k] += grad_scale * (d + noise);
    }
    t->nll += (int)micro_index == t->nan_at_micro ? NAN : sum;
    return 0;
}

static int toy_eval(void *s, const int32_t *tokens, const int32_t *labels, int B, int T, double *nll, struct io_err *e) {
    (void)e;
    struct toy *t = s;
    double sum = 0;
    for (int i = 0; i < B * T; i++) {
        if (labels[i] == -100) continue;
        float d = t->w[tokens[i] % P] - (float)(labels[i] % 7) / 7.0f;
        sum += 0.5 * (double)d * d;
    }
    *nll = sum;
    return 0;
}

static int toy_step(void *s, const struct optim_step *h, double *nll, double *gnorm, struct io_err *e) {
    struct toy *t = s;
    *nll = t->nll;
    t->nll = 0.0;
    if (!isfinite(*nll)) {
        memset(t->grad, 0, sizeof t->grad);
        return 0;
    }
    double n2 = 0;
    for (int i = 0; i < P; i++) n2 += (double)t->grad[i] * t->grad[i];
    *gnorm = sqrt(n2);
    if (!isfinite(*gnorm)) return io_fail(e, "gradient of 'w' is not finite");
    float c = h->clip > 0 && *gnorm > h->clip ? (float)(h->clip / (*gnorm + 1e-6)) : 1.0f;
    for (int i = 0; i < P; i++) {
        t->mom[i] = 0.9f * t->mom[i] + c * t->grad[i];
        t->w[i] -= (float)h->hp.lr * t->mom[i];
        t->grad[i] = 0.0f;
    }
    return 0;
}

static int toy_n(void *s) {
    (void)s;
    return 2;
}

static int toy_info(void *s, int i, struct engine_tensor *info) {
    (void)s;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", i == 0 ? "w" : "w.momentum");
    info->role = i == 0 ? ROLE_PARAM : ROLE_OPTIM;
    info->dtype = ST_F32;
    info->ndim = 1;
    info->shape[0] = P;
    return 0;
}

static int toy_read(void *s, int i, void *host, struct io_err *e) {
    (void)e;
    struct toy *t = s;
    if (t->slow_read) usleep(2000);
    memcpy(host, i == 0 ? t->w : t->mom, sizeof t->w);
    return 0;
}

static int toy_write(void *s, int i, const void *host, struct io_err *e) {
    (void)e;
    struct toy *t = s;
    memcpy(i == 0 ? t->w : t->mom, host, sizeof t->w);
    return 0;
}

static char *read_text(const char *dir, const char *file);

/* Sample tokens from the weights: token j = prompt[0] + round(100·w[j % P]) % 50. */
static int toy_generate(const struct train_engine *eng, const int32_t *const *prompts, const int *lens, int n,
                        int max_new, const int32_t *end_ids, int n_end, int32_t *const *out, int *n_out,
                        struct io_err *e) {
    (void)lens, (void)end_ids, (void)n_end, (void)e;
    const struct toy *t = eng->self;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < max_new; j++) out[i][j] = prompts[i][0] + (int32_t)lroundf(100.0f * t->w[j % P]) % 50;
        n_out[i] = max_new;
    }
    return 0;
}

static char *toy_decode(void *ctx, const int32_t *ids, int n) {
    (void)ctx;
    char *s = calloc((size_t)n * 12 + 1, 1);
    for (int i = 0; i < n; i++) sprintf(s + strlen(s), "t%d ", ids[i]);
    return s;
}

/* The sample records of a log, in order. */
static void samples_of(const char *dir, char *out, size_t cap) {
    char *text = read_text(dir, "metrics.jsonl");
    out[0] = '\0';
    if (text == NULL) return;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n"))
        if (strstr(line, "\"kind\":\"sample\"") && strlen(out) + strlen(line) + 2 < cap) strcat(strcat(out, line), "\n");
    free(text);
}

static void toy_engine(struct train_engine *eng, struct toy *t) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < P; i++) t->w[i] = 0.05f * (float)i;
    t->nan_at_micro = -1;
    memset(eng, 0, sizeof *eng);
    eng->name = "toy";
    eng->self = t;
    eng->micro_step = toy_micro;
    eng->eval = toy_eval;
    eng->optimizer_step = toy_step;
    eng->n_tensors = toy_n;
    eng->tensor_info = toy_info;
    eng->tensor_read = toy_read;
    eng->tensor_write = toy_write;
}

/* Synthetic data: 40 training and 8 validation sequences of T = 8 tokens; the epoch order is a
 * permutation that depends on (epoch, seed) like the real dataset's. */
struct synth {
    int T;
};

static int64_t fill(int64_t seq, int T, int32_t *tok, int32_t *lab) {
    int64_t valid = 0;
    for (int t = 0; t < T; t++) {
        tok[t] = (int32_t)(mix((uint64_t)seq * 131 + (uint64_t)t) % 1000);
        lab[t] = t == T - 1 || (seq + t) % 5 == 0 ? -100 : (int32_t)(mix((uint64_t)seq * 137 + (uint64_t)t + 1) % 1000);
        valid += lab[t] != -100;
    }
    return valid;
}

static int64_t synth_train(void *s, int epoch, int64_t pos, int B, int32_t *tok, int32_t *lab) {
    struct synth *d = s;
    int64_t v = 0;
    for (int b = 0; b < B; b++) {
        int64_t seq = (int64_t)((mix((uint64_t)epoch * 7919 + (uint64_t)(pos + b)) % 40));
        v += fill(seq, d->T, tok + (size_t)b * d->T, lab + (size_t)b * d->T);
    }
    return v;
}

static int64_t synth_val(void *s, int64_t first, int B, int32_t *tok, int32_t *lab) {
    struct synth *d = s;
    int64_t v = 0;
    for (int b = 0; b < B; b++) v += fill(1000 + (first + b) % 8, d->T, tok + (size_t)b * d->T, lab + (size_t)b * d->T);
    return v;
}

static void options(struct train_options *o, const char *out, int max_steps) {
    /* out is at most 600 bytes: far below OPT_PATH_MAX. */
    train_options_defaults(o, "/nonexistent");
    snprintf(o->out, sizeof o->out, "%s", out);
    o->max_steps = max_steps;
    o->micro_batch = 2;
    o->grad_accum = 3;
    o->warmup = 2;
    o->lr = 0.05f;
    o->eval_every = 4;
    o->eval_batches = 2;
    o->seq = 8;
}

static char *read_text(const char *dir, const char *file) {
    char path[2048], *text = NULL;
    struct io_err e;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (read_file_text(&text, NULL, path, 1 << 24, &e) != 0) return NULL;
    return text;
}

/* The train records of a metrics log without their timing fields. */
static void losses(const char *dir, char *out, size_t cap) {
    char *text = read_text(dir, "metrics.jsonl");
    out[0] = '\0';
    if (text == NULL) return;
    for (char *p = strstr(text, "\"kind\":\"train\""); p != NULL; p = strstr(p + 1, "\"kind\":\"train\"")) {
        char *l = strstr(p, "\"loss\""), *g = strstr(p, "\"tokens\"");
        if (l == NULL || g == NULL) break;
        strncat(out, l, (size_t)(g - l) < cap - strlen(out) - 1 ? (size_t)(g - l) : cap - strlen(out) - 1);
    }
    free(text);
}

int main(void) {
    comm_single(&g_comm);
    const char *tmp = getenv("TEST_TMPDIR");
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s/loop_a", tmp ? tmp : "/tmp");
    snprintf(b, sizeof b, "%s/loop_b", tmp ? tmp : "/tmp");
    snprintf(c, sizeof c, "%s/loop_c", tmp ? tmp : "/tmp");
    struct synth sd = {8};
    struct batch_source src = {&sd, 8, 40, 8, synth_train, synth_val, NULL};
    struct train_options o;
    struct train_engine eng;
    struct toy ta, tb;
    struct loop_result r;
    struct io_err e;

    /* 15 steps in one run (each step 6 sequences: the 40-sequence epoch wraps twice). */
    options(&o, a, 15);
    toy_engine(&eng, &ta);
    EXPECT(train_loop_run(&o, &eng, &src, &g_comm, &r, &e) == 0, "run A: %s", e.msg);
    EXPECT(r.steps_done == 15 && r.total_steps == 15 && !r.stopped_early, "run A did 15 of 15 steps (%d)", r.steps_done);
    EXPECT(r.last_val_loss < r.first_val_loss, "validation loss falls: %g -> %g", r.first_val_loss, r.last_val_loss);

    /* 6 steps, stop; resume for the other 9. */
    options(&o, b, 15);
    o.max_steps_this_run = 6;
    toy_engine(&eng, &tb);
    EXPECT(train_loop_run(&o, &eng, &src, &g_comm, &r, &e) == 0 && r.steps_done == 6 && r.stopped_early, "run B stops at 6: %s",
           e.msg);
    toy_engine(&eng, &tb); /* a fresh process: the state comes only from the checkpoint */
    options(&o, b, 15);
    snprintf(o.resume, sizeof o.resume, "%s", b);
    EXPECT(train_loop_run(&o, &eng, &src, &g_comm, &r, &e) == 0 && r.steps_done == 15, "run B resumes to 15: %s", e.msg);
    EXPECT(memcmp(ta.w, tb.w, sizeof ta.w) == 0 && memcmp(ta.mom, tb.mom, sizeof ta.mom) == 0,
           "k steps + resume gives the same bits as one run");
    static char la[65536], lb[65536];
    losses(a, la, sizeof la);
    losses(b, lb, sizeof lb);
    EXPECT(la[0] != '\0' && strcmp(la, lb) == 0, "the per-step losses and learning rates agree");

    /* Resuming with an option that changes the computation is refused with the option named. */
    toy_engine(&eng, &tb);
    options(&o, b, 15);
    snprintf(o.resume, sizeof o.resume, "%s", b);
    o.lr = 0.01f;
    EXPECT(train_loop_run(&o, &eng, &src, &g_comm, &r, &e) == -1 && strstr(e.msg, "--lr") != NULL, "changed --lr refused: %s",
           e.msg);
    options(&o, b, 15);
    snprintf(o.resume, sizeof o.resume, "%s/nowhere", b);
    EXPECT(train_loop_run(&o, &eng, &src, &g_comm, &r, &e) == -1 && strstr(e.msg, "no checkpoint") != NULL,
           "missing checkpoint: %s", e.msg);

    /* A NaN loss at micro-batch 20 (step 7) stops the run; the checkpoint of step 5 stays. */
    struct toy tc;
    options(&o, c, 15);
    o.checkpoint_every = 5;
    toy_engine(&eng, &tc);
    tc.nan_at_micro = 20;
    EXPECT(train_loop_run(&o, &eng, &src, &g_comm, &r, &e) == -1 && strstr(e.msg, "step 7") != NULL &&
               strstr(e.msg, "intact") != NULL && strstr(e.msg, "nan") != NULL,
           "NaN loss stops at step 7 naming it: %s", e.msg);
    EXPECT(r.steps_done == 6, "the NaN step is not counted: %d steps done", r.steps_done);
    char *latest = read_text(c, "checkpoint/LATEST");
    EXPECT(latest != NULL && strcmp(latest, "step-5\n") == 0, "LATEST still names step 5");
    free(latest);

    /* Kill a run that checkpoints every step at many moments; each time LATEST must name a
     * checkpoint that loads completely. */
    int loads = 0;
    for (int trial = 0; trial < 12; trial++) {
        char d[600];
        snprintf(d, sizeof d, "%s/kill%d", tmp ? tmp : "/tmp", trial);
        pid_t pid = fork();
        if (pid == 0) {
            struct toy tk;
            struct train_engine ek;
            struct train_options ok;
            options(&ok, d, 1000000);
            ok.checkpoint_every = 1;
            ok.eval_every = 0;
            toy_engine(&ek, &tk);
            tk.slow_read = 1;
            struct loop_result rk;
            struct io_err ee;
            train_loop_run(&ok, &ek, &src, &g_comm, &rk, &ee);
            _exit(0);
        }
        usleep((useconds_t)(30000 + 7919 * trial % 40000));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        struct toy tk;
        struct train_engine ek;
        toy_engine(&ek, &tk);
        char *l = read_text(d, "checkpoint/LATEST");
        if (l == NULL) continue; /* killed before the first checkpoint completed: nothing to load */
        free(l);
        struct loop_position pos;
        struct train_options ok;
        options(&ok, d, 1000000);
        ok.checkpoint_every = 1;
        ok.eval_every = 0;
        char opts[65536];
        train_options_to_json(&ok, opts, sizeof opts);
        int rc = checkpoint_load(d, &ek, &pos, opts, &e);
        EXPECT(rc == 0 && pos.step >= 1, "kill trial %d: LATEST loads (%s)", trial, rc ? e.msg : "ok");
        loads += rc == 0;
    }
    EXPECT(loads >= 6, "at least half of the kill trials had a checkpoint to load (%d)", loads);

    /* Samples: every 5 steps of 12, before the first and at the end; stop at 6 and resume. */
    char d1[600], d2[600];
    snprintf(d1, sizeof d1, "%s/samples_a", tmp ? tmp : "/tmp");
    snprintf(d2, sizeof d2, "%s/samples_b", tmp ? tmp : "/tmp");
    const int32_t p0[2] = {3, 4}, p1[1] = {7};
    const int32_t *pids[2] = {p0, p1};
    const int plens[2] = {2, 1};
    const char *ptext[2] = {"first \"prompt\"", "second\nprompt"};
    const struct train_samples ts = {2, pids, plens, ptext, 6, NULL, 0, toy_decode, NULL};
    struct batch_source ssrc = src;
    ssrc.samples = &ts;
    options(&o, d1, 12);
    o.sample_every = 5;
    snprintf(o.sample_prompts, sizeof o.sample_prompts, "unused");
    toy_engine(&eng, &ta);
    EXPECT(train_loop_run(&o, &eng, &ssrc, &g_comm, &r, &e) == -1 && strstr(e.msg, "cannot generate"),
           "an engine without a generate hook: '%s'", e.msg);
    toy_engine(&eng, &ta);
    eng.generate = toy_generate;
    EXPECT(train_loop_run(&o, &eng, &ssrc, &g_comm, &r, &e) == 0, "samples run: %s", e.msg);
    static char sa[65536], sb[65536];
    samples_of(d1, sa, sizeof sa);
    int count = 0, at[4] = {0};
    for (const char *q = sa; (q = strstr(q, "\"step\":")) != NULL; q++) {
        const int st = atoi(q + 7);
        count++;
        at[0] += st == 0, at[1] += st == 5, at[2] += st == 10, at[3] += st == 12;
    }
    EXPECT(count == 8 && at[0] == 2 && at[1] == 2 && at[2] == 2 && at[3] == 2,
           "8 sample records at steps 0, 5, 10 and 12 (%d)", count);
    EXPECT(strstr(sa, "\"prompt\":\"first \\\"prompt\\\"\"") && strstr(sa, "second\\nprompt"),
           "prompts JSON-escaped in the records");
    options(&o, d2, 12);
    o.sample_every = 5;
    snprintf(o.sample_prompts, sizeof o.sample_prompts, "unused");
    o.max_steps_this_run = 6;
    toy_engine(&eng, &tb);
    eng.generate = toy_generate;
    EXPECT(train_loop_run(&o, &eng, &ssrc, &g_comm, &r, &e) == 0 && r.steps_done == 6, "samples run stops at 6: %s", e.msg);
    toy_engine(&eng, &tb);
    eng.generate = toy_generate;
    options(&o, d2, 12);
    o.sample_every = 5;
    snprintf(o.sample_prompts, sizeof o.sample_prompts, "unused");
    snprintf(o.resume, sizeof o.resume, "%s", d2);
    EXPECT(train_loop_run(&o, &eng, &ssrc, &g_comm, &r, &e) == 0 && r.steps_done == 12, "samples run resumes: %s", e.msg);
    samples_of(d2, sb, sizeof sb);
    EXPECT(sa[0] && strcmp(sa, sb) == 0, "stopped and resumed, the sample records are the uninterrupted run's");
    return test_finish("loop_test");
}
