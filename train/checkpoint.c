/* checkpoint.c — atomic, resumable checkpoints of the engine state and the loop position. */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/file.h"
#include "io/safetensors.h"

/* Options that may differ between a checkpoint and the run resuming it: they change what is
 * reported, where it goes, when the run stops, or how the state is held (a sharded optimizer's
 * update is the unsharded one's) — never the computation of a step. */
static const char *const k_free_options[] = {"out",    "resume",           "eval-every", "eval-batches", "log-every",
                                             "export", "checkpoint-every", "stop-after", "auto-batch",
                                             "shard-optimizer"};

static int is_free_option(const char *k) {
    for (size_t i = 0; i < sizeof k_free_options / sizeof k_free_options[0]; i++)
        if (strcmp(k, k_free_options[i]) == 0) return 1;
    return 0;
}

static int remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d == NULL) return unlink(path);
    struct dirent *ent;
    char child[4096];
    while ((ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0) continue;
        snprintf(child, sizeof child, "%s/%s", path, ent->d_name);
        remove_tree(child);
    }
    closedir(d);
    return rmdir(path);
}

static size_t tensor_bytes(const struct engine_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return (size_t)n * (size_t)(st_dtype_bits(t->dtype) / 8);
}

int checkpoint_save(const char *out_dir, const struct train_engine *eng, const struct loop_position *pos,
                    const char *options_json, struct io_err *e) {
    char root[2048], tmp[2300], final[2300], path[2400];
    snprintf(root, sizeof root, "%s/checkpoint", out_dir);
    if (make_dirs(root, e) != 0) return -1;
    snprintf(tmp, sizeof tmp, "%s/step-%d.tmp", root, pos->step);
    snprintf(final, sizeof final, "%s/step-%d", root, pos->step);
    remove_tree(tmp);
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

    char *json = malloc(strlen(options_json) + 1024);
    CHECK(json != NULL, "out of memory");
    sprintf(json, "{\"format\":1,\"step\":%d,\"micro_index\":%" PRIu64 ",\"epoch\":%d,\"position\":%" PRId64
                  ",\"world\":%d,\"engine\":\"%s\",\"options\":%s}\n",
            pos->step, pos->micro_index, pos->epoch, pos->position, pos->world > 0 ? pos->world : 1, eng->name,
            options_json);
    snprintf(path, sizeof path, "%s/trainer.json", tmp);
    rc = write_file_atomic(path, json, strlen(json), e);
    free(json);
    if (rc != 0) return -1;

    remove_tree(final); /* a leftover from an earlier run that stopped at this very step */
    if (rename(tmp, final) != 0) return io_fail(e, "%s: cannot rename %s to it: %s", final, tmp, strerror(errno));
    char latest[64];
    snprintf(latest, sizeof latest, "step-%d\n", pos->step);
    snprintf(path, sizeof path, "%s/LATEST", root);
    if (write_file_atomic(path, latest, strlen(latest), e) != 0) return -1;

    /* Only now that LATEST names the new checkpoint are the older ones removed. */
    DIR *d = opendir(root);
    if (d != NULL) {
        struct dirent *ent;
        char keep[64];
        snprintf(keep, sizeof keep, "step-%d", pos->step);
        while ((ent = readdir(d)) != NULL) {
            if (strncmp(ent->d_name, "step-", 5) != 0 || strcmp(ent->d_name, keep) == 0) continue;
            snprintf(path, sizeof path, "%s/%s", root, ent->d_name);
            remove_tree(path);
        }
        closedir(d);
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
        if (strncmp(text, "step-", 5) != 0 || strchr(text, '/') != NULL) {
            free(text);
            return io_fail(e, "%s: does not name a checkpoint (expected 'step-<N>')", path);
        }
        snprintf(out, cap, "%s/%s/%s", dir, roots[r], text);
        free(text);
        return 0;
    }
    return io_fail(e, "%s: no checkpoint here (expected checkpoint/LATEST from an earlier run with this --out)", dir);
}

/* The micro-batches of one step, ranks × --grad-accum, must be the checkpoint's: the ranks may differ. */
static int compare_step_size(const cJSON *saved, const cJSON *now, int saved_world, int world, const char *path,
                             struct io_err *e) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(saved, "grad-accum");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, "grad-accum");
    CHECK(cJSON_IsNumber(b), "the run's own options have no grad-accum");
    if (!cJSON_IsNumber(a)) return io_fail(e, "%s: the checkpoint's options have no grad-accum", path);
    if ((int64_t)saved_world * a->valueint == (int64_t)world * b->valueint) return 0;
    return io_fail(e, "%s: the checkpoint's steps were %d rank%s × --grad-accum %d = %d micro-batches, this run's are "
                      "%d × %d = %d; resuming needs ranks × --grad-accum = %d",
                   path, saved_world, saved_world > 1 ? "s" : "", a->valueint, saved_world * a->valueint, world,
                   b->valueint, world * b->valueint, saved_world * a->valueint);
}

static int compare_options(const cJSON *saved, const char *options_json, int saved_world, int world, const char *path,
                           struct io_err *e) {
    cJSON *now = cJSON_Parse(options_json);
    CHECK(now != NULL, "the run's own options are not JSON");
    int rc = compare_step_size(saved, now, saved_world, world, path, e);
    const cJSON *it;
    cJSON_ArrayForEach(it, now) {
        if (rc != 0) break;
        if (is_free_option(it->string) || strcmp(it->string, "grad-accum") == 0) continue;
        const cJSON *old = cJSON_GetObjectItemCaseSensitive(saved, it->string);
        char *a = cJSON_PrintUnformatted(it), *b = old != NULL ? cJSON_PrintUnformatted(old) : NULL;
        if (b == NULL || strcmp(a, b) != 0) {
            rc = io_fail(e, "%s: the checkpoint was written with --%s %s, this run has %s; resuming bit-identically "
                            "needs the same value",
                         path, it->string, b != NULL ? b : "(absent)", a);
        }
        free(a);
        free(b);
        if (rc != 0) break;
    }
    cJSON_Delete(now);
    return rc;
}

static int json_int(const cJSON *o, const char *k, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x)) return -1;
    *v = x->valuedouble;
    return 0;
}

int checkpoint_load(const char *dir, const struct train_engine *eng, struct loop_position *pos,
                    const char *options_json, struct io_err *e) {
    char step_dir[2048], path[2400];
    if (resolve_dir(step_dir, sizeof step_dir, dir, e) != 0) return -1;
    snprintf(path, sizeof path, "%s/trainer.json", step_dir);
    char *text = NULL;
    if (read_file_text(&text, NULL, path, (size_t)1 << 24, e) != 0) return -1;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (j == NULL) return io_fail(e, "%s: not valid JSON", path);
    double fmt, step, micro, epoch, position;
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(j, "options");
    if (json_int(j, "format", &fmt) != 0 || fmt != 1 || json_int(j, "step", &step) != 0 ||
        json_int(j, "micro_index", &micro) != 0 || json_int(j, "epoch", &epoch) != 0 ||
        json_int(j, "position", &position) != 0 || !cJSON_IsObject(opts)) {
        cJSON_Delete(j);
        return io_fail(e, "%s: not a refine checkpoint (format 1 with step, micro_index, epoch, position, options)",
                       path);
    }
    double world = 1;
    if (cJSON_GetObjectItemCaseSensitive(j, "world") != NULL && (json_int(j, "world", &world) != 0 || world < 1)) {
        cJSON_Delete(j);
        return io_fail(e, "%s: 'world' is not a number of ranks", path);
    }
    if (compare_options(opts, options_json, (int)world, pos->world > 0 ? pos->world : 1, path, e) != 0) {
        cJSON_Delete(j);
        return -1;
    }
    cJSON_Delete(j);

    snprintf(path, sizeof path, "%s/state.safetensors", step_dir);
    struct safetensors st;
    if (safetensors_open(&st, path, e) != 0) return -1;
    const int n = eng->n_tensors(eng->self);
    int rc = 0;
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
