/* identity.c — the model and data a run trains on, by content (identity.h). */
#include "train/identity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "io/check.h"
#include "io/file_digest.h"

static void add_file(cJSON *arr, const char *path, const char *hex) {
    cJSON *o = cJSON_CreateObject();
    CHECK(o != NULL, "out of memory");
    cJSON_AddStringToObject(o, "file", path);
    cJSON_AddStringToObject(o, "sha256", hex);
    cJSON_AddItemToArray(arr, o);
}

char *run_identity_json(const struct model_source *model, const struct dataset *data, const char *memo_dir,
                        struct io_err *e) {
    cJSON *root = cJSON_CreateObject(), *m = cJSON_CreateArray(), *d = cJSON_CreateArray();
    CHECK(root != NULL && m != NULL && d != NULL, "out of memory");
    cJSON_AddItemToObject(root, "model", m);
    cJSON_AddItemToObject(root, "data", d);
    const int n = model_source_files(model, NULL, 0);
    char(*paths)[MODEL_SOURCE_PATH_MAX] = calloc((size_t)(n > 0 ? n : 1), sizeof *paths);
    CHECK(paths != NULL, "out of memory");
    model_source_files(model, paths, n);
    int rc = 0;
    char hex[65];
    for (int i = 0; i < n && rc == 0; i++)
        if ((rc = file_sha256(hex, paths[i], memo_dir, e)) == 0) add_file(m, paths[i], hex);
    free(paths);
    for (int i = 0; i < data->n_files && rc == 0; i++) add_file(d, data->files[i].path, data->files[i].sha256);
    char *json = rc == 0 ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (rc == 0) CHECK(json != NULL, "out of memory");
    return json;
}

static const char *field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The entry of arr whose sha256 is hex; NULL when none. */
static const cJSON *find_digest(const cJSON *arr, const char *hex) {
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) if (strcmp(field(it, "sha256"), hex) == 0) return it;
    return NULL;
}

/* The first difference between saved and now, into msg (empty when none). */
static void first_difference(char *msg, size_t cap, const cJSON *saved, const cJSON *now) {
    msg[0] = '\0';
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(saved, "model"), *nm = cJSON_GetObjectItemCaseSensitive(now, "model");
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(saved, "data"), *nd = cJSON_GetObjectItemCaseSensitive(now, "data");
    if (!cJSON_IsArray(sm) || !cJSON_IsArray(sd)) {
        snprintf(msg, cap, "the checkpoint's record of its model and data is malformed");
        return;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, nm) {
        if (find_digest(sm, field(it, "sha256")) == NULL) {
            snprintf(msg, cap, "the model file %s is not one the checkpoint was made with (its sha256 %.16s... is not "
                               "among the checkpoint's model files)",
                     field(it, "file"), field(it, "sha256"));
            return;
        }
    }
    cJSON_ArrayForEach(it, sm) {
        if (find_digest(nm, field(it, "sha256")) == NULL) {
            snprintf(msg, cap, "the checkpoint was made with the model file %s (sha256 %.16s...), which this run's "
                               "model lacks",
                     field(it, "file"), field(it, "sha256"));
            return;
        }
    }
    const int ns = cJSON_GetArraySize(sd), nn = cJSON_GetArraySize(nd);
    for (int i = 0; i < ns && i < nn; i++) {
        const cJSON *a = cJSON_GetArrayItem(sd, i), *b = cJSON_GetArrayItem(nd, i);
        if (strcmp(field(a, "sha256"), field(b, "sha256")) != 0) {
            snprintf(msg, cap, "the data file %s differs from the one the checkpoint was made with (%s: sha256 %.16s... "
                               "then, %.16s... now)",
                     field(b, "file"), field(a, "file"), field(a, "sha256"), field(b, "sha256"));
            return;
        }
    }
    if (ns != nn)
        snprintf(msg, cap, "the data has %d file(s), the checkpoint was made with %d", nn, ns);
}

int run_identity_compare(const char *saved, const char *now, const char *where, int accept, char **notes,
                         struct io_err *e) {
    *notes = NULL;
    char msg[IO_ERR_CAP];
    cJSON *s = saved != NULL ? cJSON_Parse(saved) : NULL, *n = cJSON_Parse(now);
    CHECK(n != NULL, "this run's identity is not JSON");
    if (s == NULL)
        snprintf(msg, sizeof msg, "the checkpoint records no identity of the model and data it was made with");
    else
        first_difference(msg, sizeof msg, s, n);
    cJSON_Delete(s);
    cJSON_Delete(n);
    if (msg[0] != '\0' && !accept)
        return io_fail(e, "%s: %s; resume with the files it was made with, or add --resume-anyway to continue from its "
                          "state with these",
                       where, msg);
    *notes = strdup(msg);
    CHECK(*notes != NULL, "out of memory");
    return 0;
}
