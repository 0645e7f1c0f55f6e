/* safetensors.h — reading and writing the safetensors format (NUMERICS.md §4), and HF sharded
 * checkpoints (model.safetensors.index.json).
 *
 * Reading: safetensors_open maps the file read-only and validates it completely before returning:
 *   the 8-byte little-endian header length (≤ 100,000,000, within the file), UTF-8 JSON starting
 *   with '{' (trailing spaces allowed), each entry {"dtype","shape","data_offsets"} with a known
 *   dtype string, non-negative dims whose product fits, end − begin == numel·bits/8, offsets that
 *   tile the data buffer from 0 to its end with no hole or overlap, no duplicate names, and an
 *   optional "__metadata__" string→string map. Tensor data points into the mapping (no copy).
 * Writing: safetensors_write lays out tensors in the reference writer's order (dtype descending
 *   in the enum order of §4, then name ascending), pads the header with spaces to a multiple of
 *   8 bytes, writes "__metadata__" first, and writes the file atomically (io/file.h).
 * Sharded: sharded_open reads model.safetensors.index.json ("weight_map": name → shard file),
 *   opens every shard, and finds a tensor in the shard the map names.
 */
#ifndef REFINE_IO_SAFETENSORS_H
#define REFINE_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "io/error.h"
#include "io/file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* In the format's enum order (= increasing alignment); the writer sorts by it, descending. */
enum st_dtype {
    ST_BOOL = 0,
    ST_F4,
    ST_F6_E2M3,
    ST_F6_E3M2,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_F8_E8M0,
    ST_F8_E4M3FNUZ,
    ST_F8_E5M2FNUZ,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_C64,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_DTYPE_COUNT
};

#define ST_MAX_DIMS 8

struct st_tensor {
    char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data; /* into the mapping (reading) or the caller's buffer (writing) */
    size_t nbytes;
};

struct st_meta {
    char *key;
    char *value;
};

struct safetensors {
    struct mapped_file file;
    int n_tensors;
    struct st_tensor *tensors; /* in file order (ascending offsets) */
    int n_meta;
    struct st_meta *meta;
};

const char *st_dtype_name(enum st_dtype t);                       /* "BF16" */
int st_dtype_from_name(enum st_dtype *t, const char *name);       /* 0, or -1 if unknown */
int st_dtype_bits(enum st_dtype t);                               /* 16 for BF16, 4 for F4 */

int safetensors_open(struct safetensors *st, const char *path, struct io_err *e);
void safetensors_close(struct safetensors *st);
const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name);
const char *safetensors_meta(const struct safetensors *st, const char *key); /* NULL if absent */

/* Converts a tensor of dtype F32, F16, BF16 or F64 to fp32 (exactly for F16/BF16; F64 rounds
 * to nearest). `out` holds t->numel floats. Other dtypes: -1 with a message naming the tensor. */
int st_tensor_to_f32(float *out, const struct st_tensor *t, struct io_err *e);

/* Converts a tensor of dtype BF16 (copy), F32 or F16 (round to nearest even; every NaN becomes
 * 0x7FC0, as torch does) to bf16 bits. `out` holds t->numel values. Other dtypes: -1. */
int st_tensor_to_bf16(uint16_t *out, const struct st_tensor *t, struct io_err *e);

/* numel and byte size of `dtype` with this shape: 0; -1 when a dimension is negative or the
 * size overflows 64 bits; -2 when numel·bits is not a multiple of 8 (sub-byte dtypes). */
int st_shape_bytes(int64_t *numel, size_t *nbytes, enum st_dtype dtype, int ndim, const int64_t *shape);

/* Writes "[a, b, c]" into buf (for messages). */
void st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape);

/* The first name that occurs twice among names[0..n), or NULL (O(n log n)). */
const char *st_first_duplicate(const char *const *names, int n);

/* Checks dtype and shape; the message names the file, the tensor, what it has and what was
 * expected. ndim < 0 skips the shape check. */
int st_expect(const struct safetensors *st, const struct st_tensor *t, enum st_dtype dtype, int ndim,
              const int64_t *shape, struct io_err *e);

/* Writes tensors (name, dtype, shape, data, nbytes filled by the caller; numel derived) and the
 * metadata pairs to path, atomically. */
int safetensors_write(const char *path, const struct st_tensor *tensors, int n, const struct st_meta *meta, int n_meta,
                      struct io_err *e);

struct sharded_checkpoint {
    int n_shards;
    struct safetensors *shards;
    char **shard_names;
    int n_entries;
    char **entry_names;  /* weight_map keys */
    int *entry_shard;    /* index into shards */
};

/* dir holds model.safetensors.index.json, or a single model.safetensors (then one "shard"). */
int sharded_open(struct sharded_checkpoint *ck, const char *dir, struct io_err *e);
void sharded_close(struct sharded_checkpoint *ck);
const struct st_tensor *sharded_find(const struct sharded_checkpoint *ck, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_SAFETENSORS_H */
