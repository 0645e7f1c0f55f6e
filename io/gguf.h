/* gguf.h — reading GGUF files (llama.cpp's model format, versions 2 and 3) and the Llama-family
 * models stored in them.
 *
 * Format (ggml docs/gguf.md; gguf-py gguf_reader.py), all little-endian:
 *   magic "GGUF" (4 bytes), version u32 (2 or 3), tensor_count u64, kv_count u64;
 *   kv_count key-values: key (string), value type u32, value;
 *     a string is a u64 byte length then the bytes (no NUL; UTF-8 required here);
 *     types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool (one byte, 0 or 1), 8 string,
 *            9 array (element type u32, count u64, elements; no nested arrays), 10 u64, 11 i64,
 *            12 f64;
 *   tensor_count tensor infos: name (string), n_dims u32 (1..4), n_dims dims u64 (ggml order:
 *     ne[0] is the fastest-varying, the row length), ggml type u32, offset u64 (relative to the
 *     data section);
 *   padding to the alignment (key "general.alignment", u32 power of two, default 32), then the
 *   data section. Each tensor's offset is a multiple of the alignment.
 * Validation (everything before gguf_open returns; one message naming the file, the key or tensor,
 * what is wrong and what was expected): magic, version, every length and count against the bytes
 * that remain (a lying count fails before any allocation it would size), known value and tensor
 * types, bool bytes, UTF-8 keys and strings, duplicate keys or tensor names, dims ≥ 1 whose
 * product (and byte size) fits in 63 bits, row length a multiple of the type's block, offsets
 * aligned, inside the file, and not overlapping one another.
 *
 * Tensor types dequantized to fp32 (ggml-quants.c dequantize_row_*, gguf-py quants.py; float
 * arithmetic in the same order, so the results are bit-identical):
 *   F32; F16; BF16;
 *   Q8_0: blocks of 32 = f16 d, i8 q[32];            x[j] = d·q[j]
 *   Q4_0: blocks of 32 = f16 d, u8 qs[16];           x[j] = d·((qs[j] & 15) − 8),
 *                                                    x[j+16] = d·((qs[j] >> 4) − 8)   (j < 16)
 *   Q4_1: blocks of 32 = f16 d, f16 m, u8 qs[16];    x[j] = d·(qs[j] & 15) + m,
 *                                                    x[j+16] = d·(qs[j] >> 4) + m
 * Other ggml types are listed by their names (so a message can say what the file holds) but not
 * dequantized.
 *
 * Models (gguf_model_open): the metadata of architecture "llama" (also "qwen2", q/k/v biases) is
 * mapped to struct model_config (io/config.h) as transformers' GGUF loader and llama.cpp read it:
 *   <arch>.embedding_length → C, .feed_forward_length → F, .block_count → L,
 *   .attention.head_count → H, .attention.head_count_kv → KVH (default H),
 *   .attention.key_length → D (default C/H; .rope.dimension_count must equal D when present),
 *   .context_length → max_position_embeddings, .attention.layer_norm_rms_epsilon → rms_norm_eps,
 *   .rope.freq_base → rope_theta (default 10000), .rope.scaling.type "none"/absent (linear, yarn
 *   refused), V = the length of tokenizer.ggml.tokens (and .vocab_size must agree when present),
 *   tokenizer.ggml.bos/eos/padding_token_id, tied embeddings when output.weight is absent.
 *   A "rope_freqs.weight" tensor (Llama 3.1+ conversions store the llama3 rope factors that way)
 *   is matched against the llama3 scaling of Meta's parameters (factor 8 or 32, low 1, high 4,
 *   original context 8192); other factors are refused.
 * Tensor names map to HF names: token_embd → model.embed_tokens, output_norm → model.norm,
 * output → lm_head, blk.N.{attn_norm → input_layernorm, attn_q/k/v → self_attn.q/k/v_proj,
 * attn_output → self_attn.o_proj, ffn_norm → post_attention_layernorm, ffn_gate/up/down →
 * mlp.gate/up/down_proj} (.weight/.bias kept). Every tensor's presence and shape is checked
 * against the config like io/model_files.h does; unknown tensors are refused.
 * llama.cpp's converter permutes the rows of q_proj and k_proj for its RoPE (pairs (i, i+D/2)
 * become adjacent rows); gguf_model_weight_f32 undoes it as transformers does
 * (LlamaTensorProcessor._reverse_permute_weights): per head h, HF row h·D + s·(D/2) + i is GGUF
 * row h·D + 2i + s (s ∈ {0,1}, i < D/2). Qwen2 files are not permuted.
 */
#ifndef REFINE_IO_GGUF_H
#define REFINE_IO_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "io/config.h"
#include "io/error.h"
#include "io/file.h"
#include "io/model_files.h"

#ifdef __cplusplus
extern "C" {
#endif

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

/* ggml tensor types (ggml.h enum ggml_type; the numbers are the file's). */
enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_COUNT = 31 /* one past the largest type number this reader knows (BF16) */
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the mapping: len bytes, not NUL-terminated, valid UTF-8. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

struct gguf_kv {
    char *key;            /* NUL-terminated copy */
    enum gguf_type type;  /* GGUF_TYPE_ARRAY for arrays */
    enum gguf_type arr_type; /* element type of an array */
    uint64_t n;           /* element count of an array; 1 for a scalar */
    const uint8_t *raw;   /* the value's bytes in the mapping (array: the first element) */
    struct gguf_str str;  /* a STRING value */
    struct gguf_str *strs; /* an array of STRING: n entries (heap), else NULL */
};

struct gguf_tensor {
    char *name;
    enum ggml_type type;
    int ndim;
    int64_t ne[GGUF_MAX_DIMS]; /* ggml order, unused dims 1 */
    int64_t numel;
    uint64_t offset;           /* relative to the data section */
    const uint8_t *data;       /* into the mapping */
    size_t nbytes;
};

struct gguf_file {
    struct mapped_file file;
    uint32_t version;
    uint32_t alignment;
    size_t data_offset; /* file offset of the data section */
    int64_t n_kv;
    struct gguf_kv *kv;
    int64_t n_tensors;
    struct gguf_tensor *tensors; /* in file order */
};

const char *gguf_type_name(enum gguf_type t);   /* "UINT32", "?" when unknown */
const char *ggml_type_name(enum ggml_type t);   /* "Q4_1", "?" when unknown */

/* Parses and validates a GGUF held in memory (the bytes must outlive g). gguf_open maps the
 * file and calls it. `name` is the file name used in messages. */
int gguf_parse(struct gguf_file *g, const uint8_t *data, size_t size, const char *name, struct io_err *e);
int gguf_open(struct gguf_file *g, const char *path, struct io_err *e);
void gguf_close(struct gguf_file *g);

const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key);      /* NULL if absent */
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name);

/* Typed access to a scalar key: integer types (and bool) as int64 exactly, float types as
 * double. -1 with a message naming the key when absent, of another type, or a UINT64 above
 * INT64_MAX. */
int gguf_get_int(int64_t *out, const struct gguf_file *g, const char *key, struct io_err *e);
int gguf_get_float(double *out, const struct gguf_file *g, const char *key, struct io_err *e);
int gguf_get_string(struct gguf_str *out, const struct gguf_file *g, const char *key, struct io_err *e);
/* Element i (< kv->n; a CHECK) of an array: 0, or -1 (no message) when the elements are not of
 * an integer (resp. FLOAT32/FLOAT64) type or a UINT64 is above INT64_MAX. */
int gguf_arr_int(int64_t *out, const struct gguf_kv *kv, uint64_t i);
int gguf_arr_float(double *out, const struct gguf_kv *kv, uint64_t i);

/* Dequantizes tensor t (F32, F16, BF16, Q8_0, Q4_0, Q4_1) to fp32 in ggml order: out holds
 * t->numel floats. Other types: -1 with a message naming the tensor and its type. */
int gguf_tensor_to_f32(float *out, const struct gguf_file *g, const struct gguf_tensor *t, struct io_err *e);

/* Bytes of `n` elements of type t (n a multiple of the block size): 0, or -1 when the type has
 * no known layout or the size overflows. */
int ggml_row_bytes(size_t *nbytes, enum ggml_type t, int64_t n);
int ggml_block_size(enum ggml_type t); /* elements per block (1 for F32/F16/BF16), 0 unknown */

struct gguf_model_weight {
    enum model_weight kind;
    int layer;
    int present;
    char name[96];      /* HF name */
    int ndim;
    int64_t shape[2];   /* HF shape ([out, in] for a Linear) */
    const struct gguf_tensor *t; /* NULL when absent (tied lm_head: the embedding is used) */
    int rope_permuted;  /* q_proj / k_proj (weight and bias) of a llama file */
};

struct gguf_model {
    struct gguf_file g;
    struct model_config config;
    struct gguf_model_weight *weights; /* MW_N_GLOBAL + L·MW_N_LAYER slots, as model_files */
    int n_weights;
    int lm_head_tied;
};

/* Opens a GGUF file, maps its metadata to the config (config_validate'd) and binds and checks
 * every tensor the config implies. */
int gguf_model_open(struct gguf_model *m, const char *path, struct io_err *e);
void gguf_model_close(struct gguf_model *m);
/* Same from a parsed file; takes ownership of g (closed by gguf_model_close). */
int gguf_model_from_file(struct gguf_model *m, struct gguf_file *g, struct io_err *e);

/* The config of the metadata alone (no tensor checks beyond output.weight presence for the tie). */
int gguf_config(struct model_config *c, const struct gguf_file *g, struct io_err *e);

/* The weight of that kind (layer ignored for the global kinds); NULL when the config has none. */
const struct gguf_model_weight *gguf_model_get(const struct gguf_model *m, enum model_weight kind, int layer);

/* The weight with this HF name ("model.layers.3.self_attn.q_proj.weight", "lm_head.weight"), or
 * NULL. A tied lm_head is found under "lm_head.weight" too. */
const struct gguf_model_weight *gguf_model_find(const struct gguf_model *m, const char *hf_name);

/* The HF tensor of weight w as fp32, row-major in the HF shape (w->shape[0]·w->shape[1] floats),
 * with the RoPE row permutation undone. A tied lm_head gives the embedding. */
int gguf_model_weight_f32(float *out, const struct gguf_model *m, const struct gguf_model_weight *w,
                          struct io_err *e);

/* The HF name of a GGUF tensor name ("blk.3.attn_q.weight" → "model.layers.3.self_attn.q_proj.weight");
 * -1 when the name is not one of the Llama tensors. */
int gguf_hf_name(char *buf, size_t cap, const char *gguf_name);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_GGUF_H */
