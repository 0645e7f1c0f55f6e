/* gguf_write.h — writing GGUF files (version 3), the inverse of io/gguf.h's reader, and the
 * Llama-family model files llama.cpp and Ollama load.
 *
 * The generic writer: key-values (string, u32, i32, f32, bool, arrays of strings, i32 and f32) in
 * the order they are set, tensors in the order they are added (name, ggml type, dims in ggml order
 * — ne[0] the row length — and the bytes of that type), the data section aligned to 32 bytes
 * (GGUF_DEFAULT_ALIGNMENT, "general.alignment" not written) with every tensor's offset a multiple
 * of 32. The file is written atomically (io/file.h). Tensor bytes are referenced, not copied: they
 * must live until gguf_writer_write returns.
 *
 * Conversions (the llama.cpp converter's, gguf-py quants.py / ggml-quants.c, bit for bit):
 *   F16   RNE of the fp32 value (numpy astype(float16): overflow → ±inf, subnormals kept);
 *   BF16  RNE of the fp32 value (ggml_compute_fp32_to_bf16; a NaN becomes a quiet NaN);
 *   Q8_0  blocks of 32: amax = max|x|, d = amax/127 (fp32), id = d ? 1/d : 0, q[j] = roundf(x[j]·id)
 *         (halves away from zero), stored f16(d) and int8 q (quantize_row_q8_0_ref).
 *
 * The model writer (gguf_write_model) maps an HF-shaped Llama / Qwen2 model to a GGUF file:
 *   general.architecture "llama" ("qwen2" for model_type qwen2), general.name, general.file_type
 *   (llama_ftype: 0 F32, 1 F16, 7 Q8_0, 32 BF16), general.quantization_version 2;
 *   <arch>.context_length, .embedding_length, .feed_forward_length, .block_count,
 *   .attention.head_count, .attention.head_count_kv, .attention.key_length, .attention.value_length,
 *   .rope.dimension_count, .rope.freq_base, .attention.layer_norm_rms_epsilon, .vocab_size;
 *   llama3 rope scaling as the "rope_freqs.weight" tensor (F32 [D/2], the per-frequency divisors:
 *   convert_hf_to_gguf.py LlamaModel.generate_extra_tensors), which io/gguf reads back;
 *   the tokenizer (tokenizer_gguf_metadata: tokenizer.ggml.model "gpt2", .pre, .tokens,
 *   .token_type, .merges, .bos/.eos/.padding_token_id, .add_bos_token, tokenizer.chat_template).
 * Tensors: token_embd, output_norm, output (untied only), blk.N.{attn_norm, attn_q, attn_k,
 * attn_v (+ .bias), attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}; 1-D tensors (norms,
 * biases) F32, matrices in the chosen type (Q8_0 needs rows of a multiple of 32 elements: other
 * matrices are written F16, as the converter falls back). For architecture "llama" the rows of
 * q_proj and k_proj are permuted for llama.cpp's RoPE (convert_hf_to_gguf.py LlamaModel.permute):
 * per head h, GGUF row h·D + 2i + s holds HF row h·D + s·(D/2) + i — exactly what io/gguf's reader
 * undoes. Weights come from a callback, fp32 in their HF shape.
 */
#ifndef REFINE_IO_GGUF_WRITE_H
#define REFINE_IO_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "io/config.h"
#include "io/error.h"
#include "io/gguf.h"
#include "io/model_files.h"
#include "io/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gguf_writer;

struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w);

void gguf_set_str(struct gguf_writer *w, const char *key, const char *value);
void gguf_set_u32(struct gguf_writer *w, const char *key, uint32_t value);
void gguf_set_i32(struct gguf_writer *w, const char *key, int32_t value);
void gguf_set_f32(struct gguf_writer *w, const char *key, float value);
void gguf_set_bool(struct gguf_writer *w, const char *key, int value);
/* lens may be NULL (NUL-terminated strings). The strings are copied. */
void gguf_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs, const size_t *lens, size_t n);
void gguf_set_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, size_t n);
void gguf_set_arr_f32(struct gguf_writer *w, const char *key, const float *v, size_t n);

/* data: nbytes of type `type` for ne[0]·…·ne[ndim−1] elements (CHECKed against the type's
 * layout), referenced until the write. */
void gguf_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type, int ndim, const int64_t *ne,
                     const void *data, size_t nbytes);

int gguf_writer_write(struct gguf_writer *w, const char *path, struct io_err *e);

/* Conversions of n fp32 values (n a multiple of 32 for Q8_0). */
uint16_t gguf_f32_to_f16(float x);
void gguf_quantize_f16(uint16_t *out, const float *x, int64_t n);
void gguf_quantize_bf16(uint16_t *out, const float *x, int64_t n);
void gguf_quantize_q8_0(uint8_t *out, const float *x, int64_t n);

/* The tokenizer's GGUF metadata (see above), with the token list padded to V entries
 * ("[PAD<id>]", type UNUSED) when the model's vocabulary is larger. -1 with a message when the
 * tokenizer's pre-tokenizer has no llama.cpp name (Llama 3's, SmolLM's and GPT-2's have). */
int tokenizer_gguf_metadata(const struct tokenizer *t, struct gguf_writer *w, uint32_t V, struct io_err *e);

/* The weight (kind, layer) of the model as fp32 in its HF shape (model_weight_shape) into out. */
typedef int (*gguf_weight_fn)(void *ctx, enum model_weight kind, int layer, float *out, struct io_err *e);

/* The whole model (see above) as a GGUF of `type` (GGML_TYPE_F16, GGML_TYPE_BF16 or
 * GGML_TYPE_Q8_0) at path. name: general.name. */
int gguf_write_model(const char *path, const struct model_config *c, const struct tokenizer *tok, enum ggml_type type,
                     const char *name, gguf_weight_fn weight, void *ctx, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_GGUF_WRITE_H */
