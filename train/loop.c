/* loop.c — the training loop (loop.h). */
#include "train/loop.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/file.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/schedule.h"
#include "train/signals.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int train_total_steps(const struct train_options *o, int64_t n_train, int world) {
    const int64_t per_step = (int64_t)o->micro_batch * o->grad_accum * world;
    const int64_t spe = n_train / per_step;
    if (spe <= 0) return 0;
    int64_t total = o->max_steps > 0 ? o->max_steps : INT32_MAX;
    if (o->epochs > 0 && (int64_t)o->epochs * spe < total) total = (int64_t)o->epochs * spe;
    return (int)total;
}

/* A checkpoint of the job: the engine's sharded state gathered (every rank), written by rank 0. */
static int save_checkpoint(const struct train_options *o, const struct train_engine *eng,
                           const struct train_comm *comm, const struct loop_position *pos, const char *opts,
                           const char *identity_json, struct io_err *e) {
    if (eng->gather != NULL && eng->gather(eng->self, e) != 0) return -1;
    return comm_is_root(comm) ? checkpoint_save(o->out, eng, pos, opts, identity_json, e) : 0;
}

/* Validation loss over min(eval_batches, n_val / B) micro-batches, batch i on rank i mod world:
 * Σ NLL / Σ valid labels, both summed over the ranks. */
static int evaluate(const struct train_options *o, const struct train_engine *eng, const struct batch_source *src,
                    const struct train_comm *comm, int32_t *tokens, int32_t *labels, double *loss, int64_t *n_tokens,
                    struct io_err *e) {
    const int B = o->micro_batch, T = src->T;
    int64_t batches = src->n_val / B;
    if (batches > o->eval_batches) batches = o->eval_batches;
    double nll = 0.0;
    int64_t valid = 0;
    for (int64_t i = comm->rank; i < batches; i += comm->world) {
        int64_t v = src->val_batch(src->self, i * B, B, tokens, labels);
        double s = 0.0;
        if (eng->eval(eng->self, tokens, labels, B, T, &s, e) != 0) return -1;
        nll += s;
        valid += v;
    }
    if (comm->sum(comm->self, &nll, 1, COMM_F64, "the validation loss", e) != 0 ||
        comm->sum(comm->self, &valid, 1, COMM_I64, "the validation label count", e) != 0)
        return -1;
    *loss = valid > 0 ? nll / (double)valid : NAN;
    *n_tokens = valid;
    return 0;
}

/* The stop decision after a step, the same on every rank: the step limits are the same everywhere,
 * and a signal heard by any rank stops them all (a sum of flags over the ranks). */
static int agree_stop(const struct train_comm *comm, enum stop_reason mine, enum stop_reason *stop, struct io_err *e) {
    int64_t signalled = mine == STOP_SIGNAL;
    if (comm->sum(comm->self, &signalled, 1, COMM_I64, "the ranks' stop flags", e) != 0) return -1;
    *stop = signalled > 0 ? STOP_SIGNAL : mine;
    return 0;
}

/* The samples of step `step` (train_samples): generated, recorded and printed. */
static int take_samples(const struct train_options *o, const struct train_engine *eng, const struct batch_source *src,
                        struct metrics *m, int step, struct io_err *e) {
    const struct train_samples *s = src->samples;
    if (o->sample_every <= 0 || s == NULL || s->n == 0) return 0;
    if (eng->generate == NULL) return io_fail(e, "--sample-every: this trainer's engine cannot generate samples");
    int32_t **out = calloc((size_t)s->n, sizeof *out);
    int *n_out = calloc((size_t)s->n, sizeof *n_out);
    CHECK(out != NULL && n_out != NULL, "out of memory");
    for (int i = 0; i < s->n; i++) {
        out[i] = malloc((size_t)s->max_new * sizeof **out + 4);
        CHECK(out[i] != NULL, "out of memory");
    }
    int rc = eng->generate(eng, s->ids, s->lens, s->n, s->max_new, s->end_ids, s->n_end, out, n_out, e);
    for (int i = 0; i < s->n && rc == 0; i++) {
        char *text = s->decode(s->ctx, out[i], n_out[i]);
        rc = metrics_sample(m, step, i, s->text[i], text, n_out[i], e);
        printf("sample %d at step %d: %s\n  → %s\n", i, step, s->text[i], text);
        free(text);
    }
    fflush(stdout);
    for (int i = 0; i < s->n; i++) free(out[i]);
    free(out);
    free(n_out);
    return rc;
}

int train_loop_run(const struct train_options *o, const struct train_engine *eng, const struct batch_source *src,
                   const struct train_comm *comm, const char *identity_json, struct loop_result *res,
                   struct io_err *e) {
    memset(res, 0, sizeof *res);
    res->first_val_loss = res->last_val_loss = res->last_train_loss = NAN;
    const int B = o->micro_batch, T = src->T, A = o->grad_accum, W = comm->world;
    const int root = comm_is_root(comm);
    const int total = train_total_steps(o, src->n_train, W);
    if (total == 0)
        return io_fail(e, "the training data holds %" PRId64 " sequences of %d tokens; one optimizer step needs "
                          "--micro-batch %d × --grad-accum %d%s = %d (add data, or lower --seq, --micro-batch or "
                          "--grad-accum)",
                       src->n_train, T, B, A, W > 1 ? " × the ranks" : "", B * A * W);
    const int64_t per_step = (int64_t)B * A * W;                    /* sequences of one optimizer step */
    const int64_t per_epoch = (src->n_train / per_step) * per_step; /* sequences used per epoch */
    res->total_steps = total;
    if (root && make_dirs(o->out, e) != 0) return -1;

    char *opts = malloc(65536);
    CHECK(opts != NULL, "out of memory");
    CHECK(train_options_to_json(o, opts, 65536) == 0, "options do not fit their JSON buffer");
    const size_t header_cap = 65536 + 1024 + (identity_json != NULL ? strlen(identity_json) : 0);
    char *header = malloc(header_cap);
    CHECK(header != NULL, "out of memory");
    snprintf(header, header_cap,
             "{\"kind\":\"run\",\"engine\":\"%s\",\"total_steps\":%d,\"train_sequences\":%" PRId64
             ",\"val_sequences\":%" PRId64 ",\"seq\":%d,%s%s%s\"options\":%s,\"identity\":%s}",
             eng->name, total, src->n_train, src->n_val, T, eng->memory_json ? "\"memory_GiB\":" : "",
             eng->memory_json ? eng->memory_json : "", eng->memory_json ? "," : "", opts,
             identity_json != NULL ? identity_json : "null");

    train_signals_install();
    struct loop_position pos = {0, 0, 0, 0, W};
    struct checkpoint_resume cr = {opts, identity_json, o->resume_anyway, "", NULL, NULL, NULL};
    int rc = 0;
    if (o->resume[0] != '\0') {
        rc = checkpoint_load(o->resume, eng, &pos, &cr, e);
        char where[2100];
        snprintf(where, sizeof where, "%s/trainer.json", cr.step_dir);
        /* --resume-anyway: the data may differ, so the position is the one the step gives over this run's */
        if (rc == 0 && o->resume_anyway) checkpoint_position_after(&pos, per_step, per_epoch);
        if (rc == 0) rc = checkpoint_check_position(&pos, per_step, per_epoch, total, where, e);
        if (rc == 0 && root) {
            printf("resumed from %s at step %d\n", cr.step_dir, pos.step);
            if (cr.notes[0] != '\0') printf("resumed with changes: %s\n", cr.notes);
            if (pos.world != W)
                printf("the checkpoint was written by a job of %d rank%s, this one has %d: the same micro-batches "
                       "in the same order, but the gradients are summed in another order, so the run continues "
                       "close to, not bitwise as, the uninterrupted one\n",
                       pos.world, pos.world > 1 ? "s" : "", W);
        }
        pos.world = W;
    }
    struct metrics m;
    memset(&m, 0, sizeof m);
    if (rc == 0 && root) rc = metrics_open(&m, o->out, header, o->resume[0] != '\0' ? pos.step : -1, e);
    free(header);
    if (rc == 0 && root && o->resume[0] != '\0') {
        cJSON *note = cJSON_CreateObject();
        CHECK(note != NULL, "out of memory");
        cJSON_AddStringToObject(note, "kind", "resume");
        cJSON_AddNumberToObject(note, "step", pos.step);
        cJSON_AddStringToObject(note, "from", cr.step_dir);
        cJSON_AddItemToObject(note, "changed", cJSON_Parse(cr.changes));
        if (cr.accepted[0] != '\0') cJSON_AddStringToObject(note, "accepted", cr.accepted);
        char *line = cJSON_PrintUnformatted(note);
        CHECK(line != NULL, "out of memory");
        rc = metrics_note(&m, pos.step, line, e);
        free(line);
        cJSON_Delete(note);
        if (rc != 0) metrics_close(&m);
    }
    checkpoint_resume_free(&cr);
    if (rc != 0) {
        free(opts);
        return -1;
    }

    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)A * B * T);
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)A * B * T);
    int64_t *valid = malloc(sizeof(int64_t) * (size_t)A);
    CHECK(tokens != NULL && labels != NULL && valid != NULL, "out of memory for the step's batches");
    const double t0 = now_s();
    double elapsed_before = 0.0; /* time of the steps of earlier runs, from the resumed log */
    if (m.n_train > 0) elapsed_before = m.train[m.n_train - 1].elapsed_s;
    const int first_step = pos.step;
    int stop_at = o->max_steps_this_run > 0 && first_step + o->max_steps_this_run < total
                      ? first_step + o->max_steps_this_run
                      : total;
    char line[512];

    if (pos.step == 0 && src->n_val > 0) {
        double vl;
        int64_t vt;
        if ((rc = evaluate(o, eng, src, comm, tokens, labels, &vl, &vt, e)) == 0) {
            struct eval_record r = {0, vl, exp(vl), (long long)vt, elapsed_before};
            res->first_val_loss = res->last_val_loss = vl;
            if (root) {
                rc = metrics_eval(&m, &r, e);
                printf("step 0/%d | validation loss %.4f | perplexity %.3f\n", total, vl, exp(vl));
            }
        }
    } else if (m.n_eval > 0) {
        res->first_val_loss = m.eval[0].val_loss;
        res->last_val_loss = m.eval[m.n_eval - 1].val_loss;
    }
    if (rc == 0 && root && pos.step == 0) rc = take_samples(o, eng, src, &m, 0, e);

    while (rc == 0 && pos.step < stop_at) {
        const double ts = now_s();
        /* The step's W·A micro-batches in order, rank r taking those of index r·A .. r·A + A − 1:
         * together the examples, in the order, of one process with accumulation W·A. Each rank
         * draws its own first; the loss is the mean over the valid labels of all of them. */
        int64_t n_valid = 0;
        uint64_t first_micro = 0;
        for (int g = 0; g < W * A; g++) {
            if (pos.position + B > per_epoch) {
                pos.epoch++;
                pos.position = 0;
            }
            const int a = g - comm->rank * A;
            if (a >= 0 && a < A) {
                if (a == 0) first_micro = pos.micro_index + (uint64_t)g;
                valid[a] = src->train_batch(src->self, pos.epoch, pos.position, B, tokens + (size_t)a * B * T,
                                            labels + (size_t)a * B * T);
                n_valid += valid[a];
            }
            pos.position += B;
        }
        if ((rc = comm->sum(comm->self, &n_valid, 1, COMM_I64, "the step's valid-label count", e)) != 0) break;
        const float grad_scale = n_valid > 0 ? (float)(1.0 / (double)n_valid) : 0.0f;
        for (int a = 0; a < A && rc == 0; a++)
            rc = eng->micro_step(eng->self, tokens + (size_t)a * B * T, labels + (size_t)a * B * T, B, T, grad_scale,
                                 first_micro + (uint64_t)a, e);
        pos.micro_index += (uint64_t)W * A;
        if (rc != 0) break;
        const int step = pos.step + 1;
        const struct optim_step h = {
            step,
            {train_lr_at(o->schedule, o->lr, o->min_lr_ratio, o->warmup, total, pos.step), o->beta1, o->beta2, o->eps,
             o->weight_decay},
            o->clip};
        double gnorm = 0.0, nll = 0.0;
        /* a step without a valid label (all masked) trains nothing: the engine holds no loss or gradient */
        if (n_valid > 0 && (rc = eng->optimizer_step(eng->self, &h, &nll, &gnorm, e)) != 0) {
            io_fail_context(e, "step %d: training stopped (the last checkpoint, if any, is intact in %s/checkpoint)",
                            step, o->out);
            break;
        }
        const double loss = n_valid > 0 ? nll / (double)n_valid : 0.0;
        if (!isfinite(loss)) {
            rc = io_fail(e, "step %d: the training loss is %g; training stopped (the last checkpoint, if any, is "
                            "intact in %s/checkpoint)",
                         step, loss, o->out);
            break;
        }
        pos.step = step;
        const double dt = now_s() - ts, elapsed = elapsed_before + (now_s() - t0);
        const long long ntok = (long long)W * A * B * T;
        struct train_record r = {step, loss, h.hp.lr, gnorm, ntok, (double)ntok / dt, 0.0, 0.0, elapsed};
        if (eng->peak_flops > 0) r.mfu = eng->flops_per_token * r.tokens_per_s / eng->peak_flops;
        if (eng->mem_gib != NULL) r.mem_gib = eng->mem_gib(eng->self);
        res->last_train_loss = loss;
        struct engine_fp8_stats f8s;
        struct fp8_record f8 = {0, 0.0, 0.0, 0};
        if (n_valid > 0 && eng->fp8_stats != NULL && eng->fp8_stats(eng->self, &f8s) == 0)
            f8 = (struct fp8_record){1, f8s.scale_min, f8s.scale_max, f8s.saturated};
        if (root && (rc = metrics_train_fp8(&m, &r, &f8, e)) != 0) break;
        if (root && (step % o->log_every == 0 || step == 1 || step == total)) {
            const double s_per_step = (now_s() - t0) / (double)(step - first_step);
            metrics_progress_line(line, sizeof line, &r, total, s_per_step * (double)(total - step));
            printf("%s\n", line);
            fflush(stdout);
        }
        const int last = step == total;
        if (src->n_val > 0 && ((o->eval_every > 0 && step % o->eval_every == 0) || last)) {
            double vl;
            int64_t vt;
            if ((rc = evaluate(o, eng, src, comm, tokens, labels, &vl, &vt, e)) != 0) break;
            struct eval_record v = {step, vl, exp(vl), (long long)vt, elapsed_before + (now_s() - t0)};
            res->last_val_loss = vl;
            if (root) {
                if ((rc = metrics_eval(&m, &v, e)) != 0) break;
                printf("step %d/%d | validation loss %.4f | perplexity %.3f\n", step, total, vl, exp(vl));
                if ((rc = metrics_plot(&m, e)) != 0) break;
            }
        }
        if (root && ((o->sample_every > 0 && step % o->sample_every == 0) || last))
            if ((rc = take_samples(o, eng, src, &m, step, e)) != 0) break;
        /* after the step's evaluation, so that a signal during it is heard at this step; agreed by
         * every rank, so that all stop after the same step */
        enum stop_reason stop = STOP_NONE;
        if ((rc = agree_stop(comm, train_stop_after_step(step, stop_at, total), &stop, e)) != 0) break;
        /* a sharded engine's state is gathered by every rank; rank 0 writes the checkpoint */
        if ((o->checkpoint_every > 0 && step % o->checkpoint_every == 0) || stop != STOP_NONE)
            if ((rc = save_checkpoint(o, eng, comm, &pos, opts, identity_json, e)) != 0) break;
        if (stop != STOP_NONE) break;
    }
    if (rc == 0 && root) rc = metrics_plot(&m, e);
    res->steps_done = pos.step;
    res->stopped_early = rc == 0 && pos.step < total;
    res->stop_signal = res->stopped_early ? train_stop_signal() : 0;
    if (root) metrics_close(&m);
    free(tokens);
    free(labels);
    free(valid);
    free(opts);
    return rc;
}
