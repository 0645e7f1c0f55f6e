/* model_source.h — one door to the models refine reads: an HF folder (config.json + safetensors,
 * plain or bitsandbytes 4-bit, io/model_files.h) or a GGUF file (io/gguf.h).
 *
 * model_source_open(path): a directory is an HF folder; a regular file whose first four bytes are
 * "GGUF" is a GGUF file; anything else is refused with a message saying what was expected. Every
 * tensor is checked against the config before anything is allocated (both readers do).
 * model_source_weight_f32 gives any weight as fp32 in its HF shape, whatever the storage (F32,
 * F16, BF16, GGUF quantized types with the RoPE row order undone); bitsandbytes 4-bit Linears are
 * the one exception: their parts are handed out (model_source_bnb) for ref/nf4 to dequantize,
 * since the NF4 format belongs to ref/.
 * tokenizer: the folder's tokenizer.json (HF), or the GGUF metadata (see io/tokenizer.h).
 */
#ifndef REFINE_IO_MODEL_SOURCE_H
#define REFINE_IO_MODEL_SOURCE_H

#include "io/config.h"
#include "io/error.h"
#include "io/gguf.h"
#include "io/model_files.h"
#include "io/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

enum model_source_kind { MODEL_SOURCE_HF = 0, MODEL_SOURCE_GGUF = 1 };

struct model_source {
    enum model_source_kind kind;
    char path[1024];
    struct model_config config; /* a copy of the reader's */
    struct model_files hf;      /* MODEL_SOURCE_HF */
    struct gguf_model gguf;     /* MODEL_SOURCE_GGUF */
    char tokenizer_json[1100];  /* "<dir>/tokenizer.json" when the folder has one, else "" */
};

int model_source_open(struct model_source *s, const char *path, struct io_err *e);
void model_source_close(struct model_source *s);

/* Shape of a weight ((out, in), or (C) for norms); 0 when the config has none. */
int model_source_shape(const struct model_source *s, enum model_weight kind, int layer, int64_t shape[2]);
/* 1 when the weight is stored bitsandbytes 4-bit (its parts: model_source_bnb). */
int model_source_is_bnb(const struct model_source *s, enum model_weight kind, int layer);
const struct bnb4_weight *model_source_bnb(const struct model_source *s, enum model_weight kind, int layer);
/* fp32 copy (shape[0]·shape[1] floats); -1 with a message for bnb storage or a read error. */
int model_source_weight_f32(const struct model_source *s, enum model_weight kind, int layer, float *out,
                            struct io_err *e);

/* The model's tokenizer: <dir>/tokenizer.json (with tokenizer_config.json beside it) for an HF
 * folder, the tokenizer.ggml.* metadata (and tokenizer.chat_template) for a GGUF file. NULL with
 * *e set when there is none, it cannot be read, or it does not fit the model
 * (model_source_check_tokenizer). */
struct tokenizer *model_source_tokenizer(const struct model_source *s, struct io_err *e);

/* Tokenizer against model, so that no id the data pipeline produces can index past the embedding:
 * every id of the tokenizer (vocabulary and added tokens) is below the config's vocab_size; the
 * BOS it prepends (when it does) and the EOS the pipeline appends (the config's first
 * eos_token_id, else the tokenizer's) are tokens of the vocabulary, below vocab_size. The config's
 * own bos/eos/pad ids are range-checked by config_validate. -1 with a message naming the tokenizer
 * file (or the GGUF file) and the id. */
int model_source_check_tokenizer(const struct model_source *s, const struct tokenizer *t, struct io_err *e);

#define MODEL_SOURCE_PATH_MAX 1100
/* The files that make the model, for content hashes (a run's identity): the GGUF file, or the HF
 * folder's config.json, model.safetensors.index.json, tokenizer.json, tokenizer_config.json (those
 * present) and every safetensors shard. Writes at most cap paths; returns how many there are. */
int model_source_files(const struct model_source *s, char (*paths)[MODEL_SOURCE_PATH_MAX], int cap);

/* SHA-256 (hex) of what defines the tokenizer: the tokenizer.json (+ tokenizer_config.json)
 * bytes, or the GGUF tokenizer metadata (model, pre, tokens, types, merges, special ids, add_bos,
 * chat template). Token caches are keyed by it. */
int model_source_tokenizer_identity(const struct model_source *s, char hex[65], struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_MODEL_SOURCE_H */
