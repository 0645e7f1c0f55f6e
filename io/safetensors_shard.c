/* safetensors_shard.c — HF checkpoints of one or several safetensors files (safetensors.h).
 *
 * As transformers resolves them: <dir>/model.safetensors when it exists, else
 * <dir>/model.safetensors.index.json = {"metadata": {...}, "weight_map": {tensor: shard file}}.
 * Every shard the map names is opened and validated; each mapped tensor must be in the shard the
 * map names, and every tensor of every shard must be listed in the map (a shard holding tensors
 * the index does not know is a mixed-up checkpoint).
 */
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "io/check.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define INDEX_MAX_BYTES (64u << 20)

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    CHECK(d != NULL, "out of memory");
    memcpy(d, s, n);
    return d;
}

static int open_single(struct sharded_checkpoint *ck, const char *path, struct io_err *e) {
    ck->shards = calloc(1, sizeof *ck->shards);
    ck->shard_names = calloc(1, sizeof *ck->shard_names);
    CHECK(ck->shards != NULL && ck->shard_names != NULL, "out of memory");
    if (safetensors_open(&ck->shards[0], path, e) != 0) return -1;
    ck->n_shards = 1;
    ck->shard_names[0] = dup_str(SINGLE_NAME);
    int n = ck->shards[0].n_tensors;
    ck->entry_names = calloc((size_t)n + 1, sizeof *ck->entry_names);
    ck->entry_shard = calloc((size_t)n + 1, sizeof *ck->entry_shard);
    CHECK(ck->entry_names != NULL && ck->entry_shard != NULL, "out of memory");
    for (int i = 0; i < n; i++) ck->entry_names[i] = dup_str(ck->shards[0].tensors[i].name);
    ck->n_entries = n;
    return 0;
}

static int valid_shard_name(const char *s) {
    return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int open_index(struct sharded_checkpoint *ck, const char *dir, const char *index_path, struct io_err *e) {
    char *text = NULL;
    size_t len = 0;
    if (read_file_text(&text, &len, index_path, INDEX_MAX_BYTES, e) != 0) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (root == NULL) return io_fail(e, "%s: not valid JSON", index_path);
    int rc = 0;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(map)) {
        rc = io_fail(e, "%s: expected a JSON object with a \"weight_map\" object (tensor name -> shard file)", index_path);
        goto out;
    }
    int n = cJSON_GetArraySize(map);
    if (n == 0) {
        rc = io_fail(e, "%s: the weight_map is empty", index_path);
        goto out;
    }
    ck->entry_names = calloc((size_t)n, sizeof *ck->entry_names);
    ck->entry_shard = calloc((size_t)n, sizeof *ck->entry_shard);
    ck->shard_names = calloc((size_t)n, sizeof *ck->shard_names);
    ck->shards = calloc((size_t)n, sizeof *ck->shards);
    CHECK(ck->entry_names && ck->entry_shard && ck->shard_names && ck->shards, "out of memory for %d entries", n);
    for (const cJSON *it = map->child; it != NULL; it = it->next) {
        if (!cJSON_IsString(it) || !valid_shard_name(it->valuestring)) {
            rc = io_fail(e, "%s: weight_map entry '%s' is not the file name of a shard in the same directory", index_path,
                         it->string);
            goto out;
        }
        int s = 0;
        while (s < ck->n_shards && strcmp(ck->shard_names[s], it->valuestring) != 0) s++;
        if (s == ck->n_shards) ck->shard_names[ck->n_shards++] = dup_str(it->valuestring);
        ck->entry_names[ck->n_entries] = dup_str(it->string);
        ck->entry_shard[ck->n_entries++] = s;
    }
    const char *dup = st_first_duplicate((const char *const *)ck->entry_names, ck->n_entries);
    if (dup != NULL) {
        rc = io_fail(e, "%s: weight_map lists '%s' twice", index_path, dup);
        goto out;
    }
    /* Shards not opened are zeroed; sharded_close closes them harmlessly. */
    for (int s = 0; s < ck->n_shards; s++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, ck->shard_names[s]) >= (int)sizeof path) {
            rc = io_fail(e, "%s: shard path too long", index_path);
            goto out;
        }
        if ((rc = safetensors_open(&ck->shards[s], path, e)) != 0) goto out;
    }
    /* Map → shard, and shard → map (counting: every entry found once, and the shard sizes add up). */
    int64_t total = 0;
    for (int s = 0; s < ck->n_shards; s++) total += ck->shards[s].n_tensors;
    for (int i = 0; i < ck->n_entries; i++) {
        const struct safetensors *sh = &ck->shards[ck->entry_shard[i]];
        if (safetensors_find(sh, ck->entry_names[i]) == NULL) {
            rc = io_fail(e, "%s: weight_map places '%s' in %s, which has no such tensor", index_path, ck->entry_names[i],
                         ck->shard_names[ck->entry_shard[i]]);
            goto out;
        }
    }
    if (total != ck->n_entries) {
        /* Some shard holds a tensor the map does not list: name the first. */
        for (int s = 0; s < ck->n_shards; s++) {
            for (int t = 0; t < ck->shards[s].n_tensors; t++) {
                const char *name = ck->shards[s].tensors[t].name;
                int listed = 0;
                for (int i = 0; i < ck->n_entries && !listed; i++)
                    listed = ck->entry_shard[i] == s && strcmp(ck->entry_names[i], name) == 0;
                if (!listed) {
                    rc = io_fail(e, "%s: shard %s holds tensor '%s', which the weight_map does not list", index_path,
                                 ck->shard_names[s], name);
                    goto out;
                }
            }
        }
    }
out:
    cJSON_Delete(root);
    return rc;
}

int sharded_open(struct sharded_checkpoint *ck, const char *dir, struct io_err *e) {
    memset(ck, 0, sizeof *ck);
    char single[4096], index[4096];
    if (snprintf(single, sizeof single, "%s/%s", dir, SINGLE_NAME) >= (int)sizeof single ||
        snprintf(index, sizeof index, "%s/%s", dir, INDEX_NAME) >= (int)sizeof index)
        return io_fail(e, "%s: path too long", dir);
    int rc;
    if (file_exists(single))
        rc = open_single(ck, single, e);
    else if (file_exists(index))
        rc = open_index(ck, dir, index, e);
    else
        rc = io_fail(e, "%s: no %s or %s in this directory", dir, SINGLE_NAME, INDEX_NAME);
    if (rc != 0) sharded_close(ck);
    return rc;
}

void sharded_close(struct sharded_checkpoint *ck) {
    for (int s = 0; s < ck->n_shards; s++) {
        if (ck->shards != NULL) safetensors_close(&ck->shards[s]);
        free(ck->shard_names[s]);
    }
    for (int i = 0; i < ck->n_entries; i++) free(ck->entry_names[i]);
    free(ck->shards);
    free(ck->shard_names);
    free(ck->entry_names);
    free(ck->entry_shard);
    memset(ck, 0, sizeof *ck);
}

const struct st_tensor *sharded_find(const struct sharded_checkpoint *ck, const char *name) {
    for (int i = 0; i < ck->n_entries; i++)
        if (strcmp(ck->entry_names[i], name) == 0) return safetensors_find(&ck->shards[ck->entry_shard[i]], name);
    return NULL;
}
