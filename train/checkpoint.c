/* checkpoint.c — atomic, verified, resumable checkpoints of the engine state and the loop position
 * (checkpoint.h). */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/file.h"
#include "io/file_digest.h"
#include "io/safetensors.h"
#include "train/identity.h"
#include "train/run_dir.h"

enum { CHECKPOINT_FORMAT = 2 };

/* Settings a resumed run may change (checkpoint.h, reading step 3): they steer the steps to come
 * or what is reported and where, and every saved tensor keeps its meaning. Any option not listed
 * here (or in k_meta_options) must keep its value. */
static const char *const k_changeable[] = {
    "lr",        "min-lr-ratio", "warmup",    "schedule",   "weight-decay",     "clip",       "beta1",
    "beta2",     "eps",          "max-steps", "epochs",     "dropout",          "eval-every", "eval-batches",
    "log-every", "export",       "recompute", "auto-batch", "checkpoint-every", "stop-after", "out",
    "model",     "data",         "nvtx",      "memory-limit", "offload",        "gguf-type",  "sample-every",
    "sample-prompts", "recompute-mlp", "keep-mlp-input", "keep-norms", "mlp-chunk", "recompute-keep", "sample-tokens", "shard-optimizer",
    "shard-gradients", NULL};
/* How this invocation was asked to start: never compared, never recorded as a change. */
static const char *const k_meta_options[] = {"resume", "overwrite", "resume-anyway", NULL};

static int listed(const char *k, const char *const *list) {
    for (int i = 0; list[i] != NULL; i++)
        if (strcmp(k, list[i]) == 0) return 1;
    return 0;
}

static size_t tensor_bytes(const struct engine_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return (size_t)n * (size_t)(st_dtype_bits(t->dtype) / 8);
}

static const char *const k_summed[] = {"state.safetensors", "trainer.json"};
enum { N_SUMMED = 2 };

/* SHA256SUMS of the files in dir, from the bytes on disk. */
static int write_sums(const char *dir, struct io_err *e) {
    char path[2400], text[512] = "", hex[65];
    for (int i = 0; i < N_SUMMED; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, k_summed[i]);
        if (sha256_file_hex(hex, path, e) != 0) return -1;
        const size_t n = strlen(text);
        snprintf(text + n, sizeof text - n, "%s  %s\n", hex, k_summed[i]);
    }
    snprintf(path, sizeof path, "%s/SHA256SUMS", dir);
    return write_file_atomic(path, text, strlen(text), e);
}

int checkpoint_save(const char *out_dir, const struct train_engine *eng, const struct loop_position *pos,
                    const char *options_json, const char *identity_json, struct io_err *e) {
    char root[2048], tmp[2300], final[2300], path[2400], tmp_name[64], final_name[64];
    snprintf(root, sizeof root, "%s/checkpoint", out_dir);
    if (make_dirs(root, e) != 0) return -1;
    snprintf(tmp_name, sizeof tmp_name, "step-%d.tmp", pos->step);
    snprintf(final_name, sizeof final_name, "step-%d", pos->step);
    snprintf(tmp, sizeof tmp, "%s/%s", root, tmp_name);
    snprintf(final, sizeof final, "%s/%s", root, final_name);
    run_dir_remove_step(root, tmp_name);
    if (make_dirs(tmp, e) != 0) return -1;

    const int n = eng->n_tensors(eng->self);
    struct st_tensor *ts = calloc((size_t)(n > 0 ? n : 1), sizeof *ts);
    struct engine_tensor *infos = calloc((size_t)(n > 0 ? n : 1), sizeof *infos);
    CHECK(ts != NULL && infos != NULL, "out of memory");
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = eng->tensor_info(eng->self, i, &infos[i]);
        if (rc != 0) {
            io_fail(e, "engine tensor %d: no description", i);
            break;
        }
        size_t bytes = tensor_bytes(&infos[i]);
        uint8_t *buf = malloc(bytes > 0 ? bytes : 1);
        CHECK(buf != NULL, "out of memory for %zu bytes of %s", bytes, infos[i].name);
        ts[i].name = infos[i].name;
        ts[i].dtype = infos[i].dtype;
        ts[i].ndim = infos[i].ndim;
        for (int d = 0; d < infos[i].ndim; d++) ts[i].shape[d] = infos[i].shape[d];
        ts[i].data = buf;
        ts[i].nbytes = bytes;
        rc = eng->tensor_read(eng->self, i, buf, e);
    }
    if (rc == 0) {
        struct st_meta meta = {(char *)"format", (char *)"refine-checkpoint-1"};
        snprintf(path, sizeof path, "%s/state.safetensors", tmp);
        rc = safetensors_write(path, ts, n, &meta, 1, e);
    }
    for (int i = 0; i < n; i++) free((void *)ts[i].data);
    free(ts);
    free(infos);
    if (rc != 0) return -1;

    const char *identity = identity_json != NULL ? identity_json : "null";
    char *json = malloc(strlen(options_json) + strlen(identity) + 1024);
    CHECK(json != NULL, "out of memory");
    sprintf(json, "{\"format\":%d,\"step\":%d,\"micro_index\":%" PRIu64 ",\"epoch\":%d,\"position\":%" PRId64
                  ",\"world\":%d,\"engine\":\"%s\",\"options\":%s,\"identity\":%s}\n",
            CHECKPOINT_FORMAT, pos->step, pos->micro_index, pos->epoch, pos->position, pos->world > 0 ? pos->world : 1,
            eng->name, options_json, identity);
    snprintf(path, sizeof path, "%s/trainer.json", tmp);
    rc = write_file_atomic(path, json, strlen(json), e);
    free(json);
    if (rc != 0 || write_sums(tmp, e) != 0) return -1;

    run_dir_remove_step(root, final_name); /* a leftover from an earlier run that stopped at this very step */
    if (rename(tmp, final) != 0) return io_fail(e, "%s: cannot rename %s to it: %s", final, tmp, strerror(errno));
    char latest[64];
    snprintf(latest, sizeof latest, "step-%d\n", pos->step);
    snprintf(path, sizeof path, "%s/LATEST", root);
    if (write_file_atomic(path, latest, strlen(latest), e) != 0) return -1;

    /* Only now that LATEST names the new checkpoint are the older ones removed. */
    DIR *d = opendir(root);
    if (d != NULL) {
        struct dirent *ent;
        char(*old)[256] = NULL;
        size_t n_old = 0, cap = 0;
        while ((ent = readdir(d)) != NULL) {
            if (strncmp(ent->d_name, "step-", 5) != 0 || strcmp(ent->d_name, final_name) == 0) continue;
            if (n_old == cap) {
                cap = cap ? 2 * cap : 8;
                old = realloc(old, cap * sizeof *old);
                CHECK(old != NULL, "out of memory");
            }
            snprintf(old[n_old++], sizeof *old, "%s", ent->d_name);
        }
        closedir(d);
        for (size_t i = 0; i < n_old; i++) run_dir_remove_step(root, old[i]);
        free(old);
    }
    return 0;
}

/* Finds the step-<N> folder to load from `dir`. */
static int resolve_dir(char *out, size_t cap, const char *dir, struct io_err *e) {
    char path[2400];
    snprintf(path, sizeof path, "%s/trainer.json", dir);
    if (file_exists(path)) {
        snprintf(out, cap, "%s", dir);
        return 0;
    }
    const char *roots[2] = {"checkpoint", "."};
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/%s/LATEST", dir, roots[r]);
        if (!file_exists(path)) continue;
        char *text = NULL;
        if (read_file_text(&text, NULL, path, 4096, e) != 0) return -1;
        text[strcspn(text, "\r\n")] = '\0';
        const char *p = text + 5;
        while (*p >= '0' && *p <= '9') p++;
        if (strncmp(text, "step-", 5) != 0 || p == text + 5 || *p != '\0') {
            free(text);
            return io_fail(e, "%s: does not name a checkpoint (expected 'step-<N>')", path);
        }
        if (r == 0) snprintf(out, cap, "%s/%s/%s", dir, roots[r], text);
        else snprintf(out, cap, "%s/%s", dir, text);
        free(text);
        return 0;
    }
    return io_fail(e, "%s: no checkpoint here (expected checkpoint/LATEST from an earlier run with this --out)", dir);
}

/* Step 1 of reading: SHA256SUMS lists exactly the summed files, and each matches. */
static int verify_sums(const char *step_dir, struct io_err *e) {
    char path[2400], *text = NULL;
    snprintf(path, sizeof path, "%s/SHA256SUMS", step_dir);
    if (!file_exists(path))
        return io_fail(e, "%s: missing: the checkpoint is incomplete, or was written by a refine without checksums; "
                          "resume from another checkpoint or start again",
                       path);
    if (read_file_text(&text, NULL, path, 4096, e) != 0) return -1;
    char want[N_SUMMED][65] = {{0}};
    int rc = 0, line = 0;
    for (char *p = text; rc == 0 && *p != '\0';) {
        char *nl = strchr(p, '\n');
        if (nl == NULL) {
            rc = io_fail(e, "%s: line %d is not terminated (a damaged file)", path, line + 1);
            break;
        }
        *nl = '\0';
        line++;
        int k = -1;
        for (int i = 0; i < N_SUMMED; i++)
            if (strlen(p) == 66 + strlen(k_summed[i]) && p[64] == ' ' && p[65] == ' ' && strcmp(p + 66, k_summed[i]) == 0)
                k = i;
        int hex = k >= 0;
        for (int i = 0; hex && i < 64; i++) hex = (p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f');
        if (!hex || want[k][0] != '\0')
            rc = io_fail(e, "%s:%d: not '<sha256>  <file>' for one of state.safetensors, trainer.json", path, line);
        else
            memcpy(want[k], p, 64);
        p = nl + 1;
    }
    free(text);
    for (int i = 0; rc == 0 && i < N_SUMMED; i++) {
        char file[2400], hex[65];
        snprintf(file, sizeof file, "%s/%s", step_dir, k_summed[i]);
        if (want[i][0] == '\0') {
            rc = io_fail(e, "%s: lists no checksum for %s", path, k_summed[i]);
        } else if (sha256_file_hex(hex, file, e) != 0) {
            rc = -1;
        } else if (strcmp(hex, want[i]) != 0) {
            rc = io_fail(e, "%s: its sha256 (%.16s...) is not the one SHA256SUMS records (%.16s...): the file is damaged "
                            "or was replaced; resume from another checkpoint or start again",
                         file, hex, want[i]);
        }
    }
    return rc;
}

/* An integer-valued JSON number in [lo, hi]. */
static int json_int(const cJSON *o, const char *k, double lo, double hi, double *v, const char *path, struct io_err *e) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x)) return io_fail(e, "%s: \"%s\" is missing or not a number", path, k);
    if (!(x->valuedouble >= lo && x->valuedouble <= hi) || x->valuedouble != floor(x->valuedouble))
        return io_fail(e, "%s: \"%s\" is %.17g; expected an integer in [%.0f, %.0f]", path, k, x->valuedouble, lo, hi);
    *v = x->valuedouble;
    return 0;
}

static char *print_value(const cJSON *v) {
    char *s = v != NULL ? cJSON_PrintUnformatted(v) : strdup("(absent)");
    CHECK(s != NULL, "out of memory");
    return s;
}

/* Appends to a growing string. */
static void cat(char **s, const char *add) {
    const size_t a = *s != NULL ? strlen(*s) : 0, b = strlen(add);
    char *grown = realloc(*s, a + b + 1);
    CHECK(grown != NULL, "out of memory");
    memcpy(grown + a, add, b + 1);
    *s = grown;
}

/* Step 3 of reading. */
static int compare_options(const cJSON *saved, const char *options_json, int saved_world, int world, const char *path,
                           struct checkpoint_resume *r, struct io_err *e) {
    cJSON *now = cJSON_Parse(options_json);
    CHECK(now != NULL, "the run's own options are not JSON");
    cJSON *changes = cJSON_CreateObject();
    CHECK(changes != NULL, "out of memory");
    /* the split over micro-batches and ranks may change, the sequences per step may not (every saved
     * position assumes them) */
    const cJSON *mb0 = cJSON_GetObjectItemCaseSensitive(saved, "micro-batch");
    const cJSON *ga0 = cJSON_GetObjectItemCaseSensitive(saved, "grad-accum");
    const cJSON *mb1 = cJSON_GetObjectItemCaseSensitive(now, "micro-batch");
    const cJSON *ga1 = cJSON_GetObjectItemCaseSensitive(now, "grad-accum");
    const double m0 = cJSON_IsNumber(mb0) ? mb0->valuedouble : NAN, g0 = cJSON_IsNumber(ga0) ? ga0->valuedouble : NAN;
    const double m1 = cJSON_IsNumber(mb1) ? mb1->valuedouble : NAN, g1 = cJSON_IsNumber(ga1) ? ga1->valuedouble : NAN;
    int rc = 0;
    if (!(m0 * g0 * saved_world == m1 * g1 * world))
        rc = io_fail(e, "%s: the checkpoint was made with --micro-batch %g --grad-accum %g on %d rank%s, this run has %g "
                        "and %g on %d: the sequences per optimizer step (micro-batch × grad-accum × ranks) must stay "
                        "the same",
                     path, m0, g0, saved_world, saved_world > 1 ? "s" : "", m1, g1, world);
    const cJSON *it;
    cJSON_ArrayForEach(it, now) {
        if (rc != 0) break;
        const char *k = it->string;
        if (listed(k, k_meta_options)) continue;
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(saved, k);
        if (old != NULL && cJSON_Compare(old, it, 1)) continue;
        char *a = print_value(it), *b = print_value(old);
        const int split = strcmp(k, "micro-batch") == 0 || strcmp(k, "grad-accum") == 0; /* checked above */
        if (!split && !listed(k, k_changeable)) {
            rc = io_fail(e, "%s: the checkpoint was made with --%s %s, this run has %s; it cannot change on resume (it "
                            "would not fit the saved state or the batches); run with --%s %s or start a new run",
                         path, k, b, a, k, b);
        }
        if (rc == 0) {
            cJSON *c = cJSON_CreateObject();
            CHECK(c != NULL, "out of memory");
            cJSON_AddItemToObject(c, "from", old != NULL ? cJSON_Duplicate(old, 1) : cJSON_CreateNull());
            cJSON_AddItemToObject(c, "to", cJSON_Duplicate(it, 1));
            cJSON_AddItemToObject(changes, k, c);
            char line[IO_ERR_CAP];
            snprintf(line, sizeof line, "%s--%s %s -> %s", r->notes != NULL && r->notes[0] ? "; " : "", k, b, a);
            cat(&r->notes, line);
        }
        free(a);
        free(b);
        if (rc != 0) break;
    }
    if (rc == 0) {
        r->changes = cJSON_PrintUnformatted(changes);
        CHECK(r->changes != NULL, "out of memory");
    }
    cJSON_Delete(changes);
    cJSON_Delete(now);
    return rc;
}

int checkpoint_load(const char *dir, const struct train_engine *eng, struct loop_position *pos,
                    struct checkpoint_resume *r, struct io_err *e) {
    r->changes = r->notes = r->accepted = NULL;
    cat(&r->notes, "");
    cat(&r->accepted, "");
    char path[2400];
    if (resolve_dir(r->step_dir, sizeof r->step_dir, dir, e) != 0) return -1;
    if (verify_sums(r->step_dir, e) != 0) return -1;
    snprintf(path, sizeof path, "%s/trainer.json", r->step_dir);
    char *text = NULL;
    if (read_file_text(&text, NULL, path, (size_t)1 << 24, e) != 0) return -1;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (j == NULL) return io_fail(e, "%s: not valid JSON", path);
    double fmt, step, micro, epoch, position;
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(j, "options");
    int rc = json_int(j, "format", 0, 1e9, &fmt, path, e);
    if (rc == 0 && fmt != CHECKPOINT_FORMAT)
        rc = io_fail(e, "%s: checkpoint format %.0f; this refine reads format %d", path, fmt, CHECKPOINT_FORMAT);
    if (rc == 0) rc = json_int(j, "step", 0, 1 << 30, &step, path, e);
    if (rc == 0) rc = json_int(j, "micro_index", 0, 9007199254740992.0, &micro, path, e);
    if (rc == 0) rc = json_int(j, "epoch", 0, 1 << 30, &epoch, path, e);
    if (rc == 0) rc = json_int(j, "position", 0, 4611686018427387904.0, &position, path, e);
    if (rc == 0 && !cJSON_IsObject(opts)) rc = io_fail(e, "%s: \"options\" is missing or not an object", path);
    double world = 1; /* absent: a checkpoint of one process */
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(j, "world") != NULL) rc = json_int(j, "world", 1, 1 << 20, &world, path, e);
    if (rc == 0) rc = compare_options(opts, r->options_json, (int)world, pos->world > 0 ? pos->world : 1, path, r, e);
    if (rc == 0 && r->identity_json != NULL) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "identity");
        char *saved = cJSON_IsObject(id) ? cJSON_PrintUnformatted(id) : NULL;
        char *notes = NULL;
        rc = run_identity_compare(saved, r->identity_json, r->step_dir, r->accept_other_inputs, &notes, e);
        if (rc == 0 && notes[0] != '\0') {
            cat(&r->notes, r->notes[0] ? "; accepted with --resume-anyway: " : "accepted with --resume-anyway: ");
            cat(&r->notes, notes);
            cat(&r->accepted, notes);
        }
        free(saved);
        free(notes);
    }
    cJSON_Delete(j);
    if (rc != 0) return -1;

    snprintf(path, sizeof path, "%s/state.safetensors", r->step_dir);
    struct safetensors st;
    if (safetensors_open(&st, path, e) != 0) return -1;
    const int n = eng->n_tensors(eng->self);
    if (st.n_tensors != n)
        rc = io_fail(e, "%s: holds %d tensors, this run's engine has %d (another method, rank or target set?)", path,
                     st.n_tensors, n);
    for (int i = 0; i < n && rc == 0; i++) {
        struct engine_tensor info;
        eng->tensor_info(eng->self, i, &info);
        const struct st_tensor *t = safetensors_find(&st, info.name);
        if (t == NULL) {
            rc = io_fail(e, "%s: tensor '%s' of this run is missing", path, info.name);
            break;
        }
        if (st_expect(&st, t, info.dtype, info.ndim, info.shape, e) != 0) {
            rc = -1;
            break;
        }
        rc = eng->tensor_write(eng->self, i, t->data, e);
    }
    safetensors_close(&st);
    if (rc != 0) return -1;
    pos->step = (int)step;
    pos->micro_index = (uint64_t)micro;
    pos->epoch = (int)epoch;
    pos->position = (int64_t)position;
    pos->world = (int)world;
    return 0;
}

void checkpoint_resume_free(struct checkpoint_resume *r) {
    free(r->changes);
    free(r->notes);
    free(r->accepted);
    r->changes = r->notes = r->accepted = NULL;
}

void checkpoint_position_after(struct loop_position *pos, int64_t P, int64_t per_epoch) {
    /* The loop moves to the next epoch when the next micro-batch does not fit the current one, so
     * after c = step·P sequences (per_epoch a multiple of P) it stands at the end of an epoch
     * rather than at the start of the next. */
    const int64_t c = (int64_t)pos->step * P;
    pos->epoch = c == 0 ? 0 : (int)((c - 1) / per_epoch);
    pos->position = c - (int64_t)pos->epoch * per_epoch;
}

int checkpoint_check_position(const struct loop_position *pos, int64_t P, int64_t per_epoch, int total,
                              const char *path, struct io_err *e) {
    if (pos->step > total)
        return io_fail(e, "%s: the checkpoint is at step %d, past this run's %d steps (raise --max-steps or --epochs "
                          "to continue it)",
                       path, pos->step, total);
    const uint64_t s = (uint64_t)pos->step;
    if (pos->micro_index < s || pos->micro_index > s << 16)
        return io_fail(e, "%s: \"micro_index\" %" PRIu64 " does not fit step %d (expected %d to %" PRIu64 ")", path,
                       pos->micro_index, pos->step, pos->step, s << 16);
    struct loop_position want = *pos;
    checkpoint_position_after(&want, P, per_epoch);
    if (pos->epoch != want.epoch || pos->position != want.position)
        return io_fail(e, "%s: \"epoch\" %d and \"position\" %" PRId64 " do not follow from step %d (expected epoch %d, "
                          "position %" PRId64 ")",
                       path, pos->epoch, pos->position, pos->step, want.epoch, want.position);
    return 0;
}
