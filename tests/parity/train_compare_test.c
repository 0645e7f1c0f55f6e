/* train_compare_test.c — the run comparison of train_compare on synthetic run folders (no GPU).
 *
 * Writes small run folders into TEST_TMPDIR as the trainers write them (metrics.jsonl with
 * nan printed as the log prints it, checkpoint/LATEST, checkpoint/step-N/state.safetensors with
 * fp32 parameters, fp32 moments and 8-bit optimizer state) from one oracle with controlled
 * deviations, and checks each verdict:
 *   tolerance: candidate error 1.5× the same-precision error passes; 3× fails (the aggregate
 *   parameters, 2×); losses 4× off pass and 6× (training) or 50× (validation) fail (5× per run,
 *   pooled); one tensor 20× its own error but within its kind's typical error passes, 7× its budget
 *   fails on that tensor alone; a NaN loss or parameter, a missing, extra or reshaped tensor, or a
 *   different number of steps fails; FP8 engine state ("fp8.*") held by the same-precision run
 *   and the candidate but not the oracle passes, missing from the candidate fails;
 *   identical: folders differing only in timing fields, in how training and evaluation records
 *   interleave, or in the "resume" records of a resumed run are identical; one byte of an optimizer tensor, one digit of one loss, a missing
 *   evaluation or tensor, or another LATEST step makes them differ; unreadable folders are one
 *   message, never a crash.
 *
 *   bazel test //tests/parity:train_compare_test        (REFINE_VERBOSE=1: every summary line)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "io/safetensors.h"
#include "tests/common/harness.h"
#include "tests/common/rng.h"
#include "tests/parity/train_compare.h"

enum { STEPS = 10, N_EVAL = 3, N_PARAM = 4, NUMEL_MAX = 256 };

static const char *const k_param[N_PARAM] = {
    "model.layers.0.self_attn.q_proj.lora_A.weight",
    "model.layers.0.self_attn.q_proj.lora_B.weight",
    "model.layers.0.self_attn.q_proj.lora_magnitude_vector",
    "model.layers.0.self_attn.v_proj.lora_A.weight",
};
static const int k_ndim[N_PARAM] = {2, 2, 1, 2};
static const int64_t k_shape[N_PARAM][2] = {{8, 32}, {32, 8}, {32, 0}, {1, 8}};
/* Relative size of the same-precision error per tensor: the small v_proj lora_A's is 100× below
 * that of its kind (q_proj's lora_A), so that the ε_k term of the per-tensor rule decides it. */
static const double k_rel[N_PARAM] = {1e-2, 1e-2, 1e-3, 1e-4};
static const int k_eval_step[N_EVAL] = {0, 5, 10};

static char g_root[1024];
static float g_oracle[N_PARAM][NUMEL_MAX], g_dev[N_PARAM][NUMEL_MAX];
static double g_loss[STEPS], g_dloss[STEPS], g_val[N_EVAL], g_dval[N_EVAL];
static int g_verbose;

static int64_t numel_of(int p) { return k_shape[p][0] * (k_ndim[p] == 2 ? k_shape[p][1] : 1); }

/* What a synthetic run deviates by: the oracle is all zeros (spec_oracle), the same-precision
 * run k = 1 everywhere. Loss deviations are k·δ(s), parameter deviations k·d. */
struct spec {
    double k_train, k_val;
    double k_param[N_PARAM];
    int n_steps;             /* training records written */
    int latest;              /* checkpoint step */
    int nan_loss_step;       /* a "nan" training loss at this step; 0: none */
    int nan_param;           /* a NaN in the first parameter */
    int reshape;             /* the first parameter's exp_avg written flat */
    const char *drop;        /* a tensor left out */
    const char *extra;       /* an extra tensor */
    const char *flip;        /* a tensor with one bit of its first byte flipped */
    int digit_step;          /* the last digit of this step's printed loss changed; 0: none */
    double timing;           /* the timing fields' values */
    int eval0_late;          /* the step-0 evaluation after the first training record */
    int drop_last_eval;      /* the last evaluation left out */
    int resumed_at;          /* a "resume" record after this step, as a resumed run's log has; 0: none */
};

static struct spec spec_oracle(void) {
    struct spec s;
    memset(&s, 0, sizeof s);
    s.n_steps = STEPS;
    s.latest = STEPS;
    s.timing = 1.0;
    return s;
}

static struct spec spec_scaled(double k_train, double k_val, double k_params) {
    struct spec s = spec_oracle();
    s.k_train = k_train;
    s.k_val = k_val;
    for (int p = 0; p < N_PARAM; p++) s.k_param[p] = k_params;
    return s;
}

static void die(const struct io_err *e) {
    fprintf(stderr, "train_compare_test: cannot write a synthetic run: %s\n", e->msg);
    exit(1);
}

/* The printed loss with its last digit changed. */
static void change_last_digit(char *num) {
    char *d = num + strlen(num) - 1;
    while (d > num && (*d < '0' || *d > '9')) d--;
    *d = *d == '9' ? '8' : (char)(*d + 1);
}

static void write_eval(FILE *f, const struct spec *s, int e) {
    const double v = g_val[e] + s->k_val * g_dval[e];
    fprintf(f, "{\"kind\":\"eval\",\"step\":%d,\"val_loss\":%.9g,\"val_ppl\":%.9g,\"val_tokens\":128,\"elapsed_s\":%.6g}\n",
            k_eval_step[e], v, exp(v), k_eval_step[e] * s->timing + 0.5);
}

static void write_metrics(const char *dir, const struct spec *s) {
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "train_compare_test: cannot write %s\n", path);
        exit(1);
    }
    fprintf(f, "{\"kind\":\"run\",\"engine\":\"synthetic\",\"total_steps\":%d,\"options\":{\"out\":\"%s\",\"lr\":0.001,"
               "\"targets\":[\"q\",\"v\"],\"nested\":{\"a\":\"}\"}}}\n",
            STEPS, dir);
    int e = s->eval0_late ? 1 : 0;
    const int n_eval = s->drop_last_eval ? N_EVAL - 1 : N_EVAL;
    for (int step = 0; step <= s->n_steps; step++) {
        if (step > 0) {
            char loss[64];
            snprintf(loss, sizeof loss, "%.9g", g_loss[step - 1] + s->k_train * g_dloss[step - 1]);
            if (step == s->nan_loss_step) snprintf(loss, sizeof loss, "nan");
            if (step == s->digit_step) change_last_digit(loss);
            fprintf(f,
                    "{\"kind\":\"train\",\"step\":%d,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":64,"
                    "\"tokens_per_s\":%.6g,\"mfu\":%.6g,\"mem_GiB\":%.6g,\"elapsed_s\":%.6g}\n",
                    step, loss, 1e-3 * step / STEPS, 0.5 + 0.01 * step, 1000 * s->timing, 0.1 * s->timing,
                    0.01 * s->timing, step * s->timing);
        }
        if (step == 1 && s->eval0_late) write_eval(f, s, 0);
        if (e < n_eval && k_eval_step[e] == step) write_eval(f, s, e++);
        if (step > 0 && step == s->resumed_at)
            fprintf(f, "{\"kind\":\"resume\",\"step\":%d,\"from\":\"%s/checkpoint/step-%d\",\"changed\":{}}\n", step, dir,
                    step);
    }
    fclose(f);
}

static void write_run(const char *dir, const struct spec *s) {
    struct io_err e;
    char path[1300];
    snprintf(path, sizeof path, "%s/checkpoint/step-%d", dir, s->latest);
    if (make_dirs(path, &e) != 0) die(&e);
    write_metrics(dir, s);
    snprintf(path, sizeof path, "%s/checkpoint/LATEST", dir);
    char latest[32];
    snprintf(latest, sizeof latest, "step-%d\n", s->latest);
    if (write_file_atomic(path, latest, strlen(latest), &e) != 0) die(&e);

    /* Parameters, AdamW moments for A and B, 8-bit state for the magnitude vector. */
    enum { MAX_T = 16 };
    static float data[MAX_T][NUMEL_MAX];
    static uint8_t codes[2][NUMEL_MAX];
    static char names[MAX_T][256];
    struct st_tensor t[MAX_T];
    int n = 0;
    memset(t, 0, sizeof t);
    for (int p = 0; p < N_PARAM; p++) {
        const int64_t m = numel_of(p);
        const int pi = n;
        for (int64_t i = 0; i < m; i++) data[pi][i] = g_oracle[p][i] + (float)(s->k_param[p] * g_dev[p][i]);
        if (p == 0 && s->nan_param) data[pi][7] = NAN;
        snprintf(names[n], sizeof names[n], "%s", k_param[p]);
        t[pi] = (struct st_tensor){names[pi], ST_F32, k_ndim[p], {k_shape[p][0], k_shape[p][1]}, 0, (uint8_t *)data[pi],
                                   (size_t)m * 4};
        n++;
        if (p != 2) {
            for (int k = 0; k < 2; k++) {
                for (int64_t i = 0; i < m; i++) data[n][i] = k == 0 ? 0.1f * data[pi][i] : data[pi][i] * data[pi][i];
                snprintf(names[n], sizeof names[n], "%s%s", k_param[p], k == 0 ? ".exp_avg" : ".exp_avg_sq");
                t[n] = t[pi];
                t[n].name = names[n];
                t[n].data = (uint8_t *)data[n];
                if (p == 0 && k == 0 && s->reshape) t[n].ndim = 1, t[n].shape[0] = m, t[n].shape[1] = 0;
                n++;
            }
        } else {
            for (int k = 0; k < 2; k++) {
                for (int64_t i = 0; i < m; i++) codes[k][i] = (uint8_t)(37 * i + 11 * k + 1);
                snprintf(names[n], sizeof names[n], "%s.state%d", k_param[p], k + 1);
                t[n] = (struct st_tensor){names[n], ST_U8, 1, {m}, 0, codes[k], (size_t)m};
                n++;
                data[n][0] = 0.25f * (float)(k + 1);
                snprintf(names[n], sizeof names[n], "%s.absmax%d", k_param[p], k + 1);
                t[n] = (struct st_tensor){names[n], ST_F32, 1, {1}, 0, (uint8_t *)data[n], 4};
                n++;
            }
        }
    }
    if (s->extra != NULL) {
        snprintf(names[n], sizeof names[n], "%s", s->extra);
        data[n][0] = 1.0f;
        t[n] = (struct st_tensor){names[n], ST_F32, 1, {1}, 0, (uint8_t *)data[n], 4};
        n++;
    }
    struct st_tensor kept[MAX_T];
    int nk = 0;
    for (int i = 0; i < n; i++) {
        if (s->drop != NULL && strcmp(t[i].name, s->drop) == 0) continue;
        kept[nk++] = t[i];
    }
    /* The flip goes into a copy: the oracle's parameter buffers are shared across tensors above. */
    static uint8_t flipped[NUMEL_MAX * 4];
    for (int i = 0; i < nk; i++)
        if (s->flip != NULL && strcmp(kept[i].name, s->flip) == 0) {
            memcpy(flipped, kept[i].data, kept[i].nbytes);
            flipped[0] ^= 1;
            kept[i].data = flipped;
        }
    struct st_meta meta = {(char *)"format", (char *)"refine-checkpoint-1"};
    snprintf(path, sizeof path, "%s/checkpoint/step-%d/state.safetensors", dir, s->latest);
    if (safetensors_write(path, kept, nk, &meta, 1, &e) != 0) die(&e);
}

static const char *run_dir(const char *name) {
    static char buf[4][1200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_root, name);
    return buf[k];
}

static int open_run(struct run *r, const char *name) {
    struct io_err e;
    if (run_open(r, run_dir(name), &e) != 0) {
        test_fail("%s: run_open failed: %s", name, e.msg);
        return -1;
    }
    return 0;
}

/* Writes the candidate, compares it with the oracle and the same-precision run, and checks the
 * verdict (and, for a failure, that the reported reason names `reason`). */
static void tolerance_case_with(const char *name, const char *same, const struct spec *cand, int expect_pass,
                                const char *reason) {
    write_run(run_dir(name), cand);
    struct run o, s, c;
    if (open_run(&o, "oracle") != 0) return;
    if (open_run(&s, same) != 0) return;
    if (open_run(&c, name) != 0) return;
    struct tolerance_result res;
    const int rc = compare_tolerance(&o, &s, &c, &res);
    char line[4096];
    tolerance_summary(line, sizeof line, name, &res);
    const int ok = (rc == 0) == (expect_pass != 0) && (rc == 0) == (res.pass != 0) &&
                   (reason == NULL || strstr(res.failure, reason) != NULL);
    if (g_verbose || !ok) printf("%s%s%s%s\n", line, rc ? "\n  first failure: " : "", rc ? res.failure : "", ok ? "" : "  <- unexpected");
    EXPECT(ok, "tolerance %s: expected %s%s%s, got %s", name, expect_pass ? "PASS" : "FAIL",
           reason ? " naming " : "", reason ? reason : "", rc == 0 ? "PASS" : "FAIL");
    run_close(&o);
    run_close(&s);
    run_close(&c);
}

static void tolerance_case(const char *name, const struct spec *cand, int expect_pass, const char *reason) {
    tolerance_case_with(name, "same", cand, expect_pass, reason);
}

static void identical_case(const char *name, const struct spec *b, int expect_identical, const char *reason) {
    write_run(run_dir(name), b);
    struct run ra, rb;
    if (open_run(&ra, "oracle") != 0) return;
    if (open_run(&rb, name) != 0) return;
    char diff[4096] = "";
    const int rc = compare_identical(&ra, &rb, diff, sizeof diff);
    const int ok = (rc == 0) == (expect_identical != 0) && (reason == NULL || strstr(diff, reason) != NULL);
    if (g_verbose || !ok)
        printf("identical %s: %s%s%s\n", name, rc == 0 ? "IDENTICAL" : "DIFFERENT: ", diff, ok ? "" : "  <- unexpected");
    EXPECT(ok, "identical %s: expected %s%s%s", name, expect_identical ? "IDENTICAL" : "DIFFERENT",
           reason ? " naming " : "", reason ? reason : "");
    run_close(&ra);
    run_close(&rb);
}

/* A folder run_open must refuse with a message (no crash). */
static void unreadable_case(const char *name, const char *metrics, const char *latest, const char *reason) {
    struct io_err e;
    char path[1300];
    snprintf(path, sizeof path, "%s/checkpoint", run_dir(name));
    if (make_dirs(path, &e) != 0) die(&e);
    if (metrics != NULL) {
        snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir(name));
        if (write_file_atomic(path, metrics, strlen(metrics), &e) != 0) die(&e);
    }
    if (latest != NULL) {
        snprintf(path, sizeof path, "%s/checkpoint/LATEST", run_dir(name));
        if (write_file_atomic(path, latest, strlen(latest), &e) != 0) die(&e);
    }
    struct run r;
    memset(&e, 0, sizeof e);
    const int rc = run_open(&r, run_dir(name), &e);
    if (g_verbose) printf("unreadable %s: %s\n", name, e.msg);
    EXPECT(rc == -1 && strstr(e.msg, reason) != NULL, "unreadable %s: expected -1 and a message naming '%s', got %d '%s'",
           name, reason, rc, e.msg);
    if (rc == 0) run_close(&r);
}

static double norm2(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

int main(int argc, char **argv) {
    const uint64_t seed = test_seed(argc, argv, 20240611);
    g_verbose = getenv("REFINE_VERBOSE") != NULL && strcmp(getenv("REFINE_VERBOSE"), "1") == 0;
    const char *tmp = getenv("TEST_TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/train_compare_test", tmp != NULL && *tmp ? tmp : "/tmp");
    struct io_err e;
    if (make_dirs(g_root, &e) != 0) die(&e);

    struct rng r;
    rng_init(&r, seed);
    for (int s = 0; s < STEPS; s++) {
        g_loss[s] = 3.0 - 0.1 * s + 0.05 * rng_normal(&r);
        g_dloss[s] = 0.01 * rng_range(&r, 0.5, 1.5) * (rng_uniform(&r) < 0.5 ? -1 : 1);
    }
    for (int k = 0; k < N_EVAL; k++) {
        g_val[k] = 3.1 - 0.05 * k;
        g_dval[k] = 0.005 * rng_range(&r, 0.5, 1.5) * (rng_uniform(&r) < 0.5 ? -1 : 1);
    }
    for (int p = 0; p < N_PARAM; p++)
        for (int64_t i = 0; i < numel_of(p); i++) {
            g_oracle[p][i] = (float)(p == 2 ? rng_range(&r, 0.05, 0.15) : 0.1 * rng_normal(&r));
            g_dev[p][i] = (float)(k_rel[p] * g_oracle[p][i] * rng_normal(&r));
        }

    const struct spec oracle = spec_oracle();
    write_run(run_dir("oracle"), &oracle);
    const struct spec same = spec_scaled(1, 1, 1);
    write_run(run_dir("same"), &same);

    /* Tolerance: 1.5× everything (on the other side of the oracle) passes, 3× fails on the
     * aggregate parameters (2×); a run's losses may be 5× off (pooled rms and max), not 6×. */
    struct spec s = spec_scaled(-1.5, -1.5, -1.5);
    tolerance_case("cand_1.5x", &s, 1, NULL);
    s = spec_scaled(1, 1, 1);
    tolerance_case("cand_equal_to_same", &s, 1, NULL);
    s = spec_scaled(3, 3, 3);
    tolerance_case("cand_3x", &s, 0, "parameters (aggregate)");
    s = spec_scaled(-1.5, -1.5, 3);
    tolerance_case("cand_3x_params", &s, 0, "parameters (aggregate)");
    s = spec_scaled(4, 4, -1.5);
    tolerance_case("cand_4x_losses", &s, 1, NULL);
    s = spec_scaled(6, -1.5, -1.5);
    tolerance_case("cand_6x_train_losses", &s, 0, "losses (");
    s = spec_scaled(-1.5, 50, -1.5);
    tolerance_case("cand_50x_val_losses", &s, 0, "validation loss at step");

    /* One tensor against its own budget 6·(‖d_t‖ + ε_k·‖P_O,t‖): v_proj's lora_A has an own error
     * of 1e-4 relative, its kind (the lora_A tensors) about 1e-2. 20× its own error stays
     * inside; 7× the budget fails on that tensor while the aggregate still passes. */
    double o2 = 0, d2 = 0;
    for (int p = 0; p < N_PARAM; p += 3) { /* the lora_A tensors: 0 and 3 */
        o2 += pow(norm2(g_oracle[p], numel_of(p)), 2);
        d2 += pow(norm2(g_dev[p], numel_of(p)), 2);
    }
    const double eps_a = sqrt(d2 / o2), dv = norm2(g_dev[3], numel_of(3)), ov = norm2(g_oracle[3], numel_of(3));
    s = spec_scaled(-1.5, -1.5, -1.5);
    s.k_param[3] = 20;
    tolerance_case("cand_tensor_20x_own_within_eps", &s, 1, NULL);
    s.k_param[3] = 7 * (dv + eps_a * ov) / dv;
    tolerance_case("cand_tensor_7x_budget", &s, 0, "tensor model.layers.0.self_attn.v_proj.lora_A.weight:");

    s = spec_scaled(-1.5, -1.5, -1.5);
    s.nan_loss_step = 4;
    tolerance_case("cand_nan_loss", &s, 0, "training loss at step 4 is nan");
    s = spec_scaled(-1.5, -1.5, -1.5);
    s.nan_param = 1;
    tolerance_case("cand_nan_param", &s, 0, "lora_A.weight[7] is nan");
    s = spec_scaled(-1.5, -1.5, -1.5);
    s.drop = k_param[1];
    tolerance_case("cand_missing_tensor", &s, 0, "lora_B.weight of the oracle is missing");
    s = spec_scaled(-1.5, -1.5, -1.5);
    s.drop = "model.layers.0.self_attn.q_proj.lora_magnitude_vector.state2";
    tolerance_case("cand_missing_optimizer_tensor", &s, 0, "state2 of the oracle is missing");
    s = spec_scaled(-1.5, -1.5, -1.5);
    s.extra = "model.layers.0.self_attn.o_proj.lora_A.weight";
    tolerance_case("cand_extra_tensor", &s, 0, "o_proj.lora_A.weight, which the oracle's does not");
    s = spec_scaled(-1.5, -1.5, -1.5);
    s.reshape = 1;
    tolerance_case("cand_reshaped_tensor", &s, 0, "exp_avg: the oracle has F32 [8, 32]");
    s = spec_scaled(-1.5, -1.5, -1.5);
    s.n_steps = STEPS - 1;
    s.latest = STEPS - 1;
    tolerance_case("cand_fewer_steps", &s, 0, "training steps differ");

    /* Engine state the oracle cannot have (FP8 scaling, "fp8.*"): held alike by the same-precision
     * run and the candidate passes; missing from the candidate fails. */
    s = spec_scaled(1, 1, 1);
    s.extra = "fp8.scale";
    write_run(run_dir("same_fp8"), &s);
    s = spec_scaled(-1.5, -1.5, -1.5);
    s.extra = "fp8.scale";
    tolerance_case_with("cand_fp8_state", "same_fp8", &s, 1, NULL);
    s.extra = NULL;
    tolerance_case_with("cand_fp8_state_missing", "same_fp8", &s, 0,
                        "engine state fp8.scale of the same-precision run is missing in the candidate");

    /* Identity. */
    s = spec_oracle();
    s.timing = 2.5;
    identical_case("ident_timing_only", &s, 1, NULL);
    s.eval0_late = 1; /* as a resumed run's log is rewritten: the order of the kinds is no value */
    identical_case("ident_records_interleaved", &s, 1, NULL);
    s.eval0_late = 0;
    s.resumed_at = 7; /* a killed run resumed at step 7: how it went is no value either */
    identical_case("ident_resumed", &s, 1, NULL);
    s.resumed_at = 0;
    s.drop_last_eval = 1;
    identical_case("ident_missing_eval", &s, 0, "holds 3 \"eval\" records");
    s.drop_last_eval = 0;
    s.flip = "model.layers.0.self_attn.q_proj.lora_B.weight.exp_avg_sq";
    identical_case("ident_optimizer_byte", &s, 0, "lora_B.weight.exp_avg_sq (F32) differs first at element 0");
    s.flip = "model.layers.0.self_attn.q_proj.lora_magnitude_vector.state1";
    identical_case("ident_u8_state_byte", &s, 0, "state1 (U8) differs first at byte 0");
    s.flip = NULL;
    s.digit_step = 4;
    identical_case("ident_loss_digit", &s, 0, "\"train\" record 4 differs");
    s.digit_step = 0;
    s.latest = STEPS - 5;
    identical_case("ident_other_latest", &s, 0, "the last checkpoints differ");
    s = spec_oracle();
    s.drop = "model.layers.0.self_attn.q_proj.lora_A.weight.exp_avg";
    identical_case("ident_missing_tensor", &s, 0, "exp_avg of");

    /* Unreadable folders: one message each. */
    unreadable_case("no_metrics", NULL, "step-1\n", "metrics.jsonl");
    unreadable_case("bad_line", "{\"kind\":\"train\",\"step\":1,\"loss\":2.5}\n{\"kind\":\"train\",\"step\":2,\"lo", "step-1\n",
                    "metrics.jsonl:2");
    unreadable_case("no_loss", "{\"kind\":\"train\",\"step\":1,\"lr\":2.5}\n", "step-1\n", "numeric \"loss\"");
    unreadable_case("no_latest", "{\"kind\":\"train\",\"step\":1,\"loss\":2.5}\n", NULL, "no checkpoint");
    unreadable_case("bad_latest", "{\"kind\":\"train\",\"step\":1,\"loss\":2.5}\n", "step-x\n", "step-<N>");
    unreadable_case("no_state", "{\"kind\":\"train\",\"step\":1,\"loss\":2.5}\n", "step-3\n", "state.safetensors");

    return test_finish("train_compare_test");
}
