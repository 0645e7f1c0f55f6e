/* config.h — the model configuration of every LlamaForCausalLM-shaped family refine trains
 * (Llama 2/3/3.x, Mistral, Qwen2, SmolLM), read from an HF config.json or GGUF metadata, or
 * named (the shapes used by the benchmark).
 *
 * Field names use the dimension letters of ref/shapes.h. Semantics follow transformers'
 * LlamaConfig (NUMERICS.md §7): head_dim D = config.head_dim when present, else C / H;
 * rope_scaling "llama3" (factor, low/high_freq_factor, original_max_position_embeddings);
 * tie_word_embeddings (the lm_head is embed_tokens); attention_bias (q/k/v biases, Qwen2 —
 * Qwen2 configs have no attention_bias key and always use q/k/v bias, never o bias).
 */
#ifndef REFINE_IO_CONFIG_H
#define REFINE_IO_CONFIG_H

#include "io/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum rope_scaling_kind {
    ROPE_SCALING_NONE = 0,
    ROPE_SCALING_LLAMA3 = 1,
};

struct rope_scaling {
    enum rope_scaling_kind kind;
    float factor;
    float low_freq_factor;
    float high_freq_factor;
    int original_max_position_embeddings;
};

/* bitsandbytes 4-bit quantization_config of a pre-quantized checkpoint (NUMERICS.md §1.8). */
enum quant_kind {
    QUANT_NONE = 0,
    QUANT_BNB_NF4 = 1,
    QUANT_BNB_FP4 = 2, /* recognized so that it can be rejected with a clear message */
};

struct quant_config {
    enum quant_kind kind;
    int double_quant;       /* bnb_4bit_use_double_quant */
    int blocksize;          /* 64 unless the checkpoint's quant_state says otherwise */
    char compute_dtype[16]; /* bnb_4bit_compute_dtype, e.g. "bfloat16" */
};

#define CONFIG_MAX_EOS 8

struct model_config {
    char model_type[32]; /* "llama", "mistral", "qwen2" (SmolLM checkpoints say "llama") */
    int C;               /* hidden_size */
    int F;               /* intermediate_size */
    int L;               /* num_hidden_layers */
    int H;               /* num_attention_heads */
    int KVH;             /* num_key_value_heads (defaults to H) */
    int D;               /* head_dim */
    int V;               /* vocab_size */
    int max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    struct rope_scaling rope_scaling;
    int tie_word_embeddings;
    int attention_bias; /* q, k, v projections carry a bias */
    int bos_token_id;   /* -1 when absent */
    int eos_token_ids[CONFIG_MAX_EOS];
    int n_eos;
    int pad_token_id; /* -1 when absent */
    char torch_dtype[16];
    struct quant_config quant;
    /* Sliding-window attention (Mistral v0.1, Qwen2 with use_sliding_window): 0 when none. refine
     * computes full causal attention, which equals the windowed attention exactly when no
     * sequence is longer than the window: config_check_seq_len enforces that. */
    int sliding_window;
};

/* Reads <path> (a config.json, or a directory holding one). Checks every field the model needs:
 * present, of the right JSON type, in range, and consistent (H % KVH == 0, hidden_act "silu",
 * no mlp_bias, rope_scaling kind supported, ...). */
int config_from_hf_json(struct model_config *c, const char *path, struct io_err *e);

/* The shapes of the named configs: "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b",
 * "smollm2-135m" (NUMERICS.md §7.3; SmolLM2-135M from its GGUF). */
int config_named(struct model_config *c, const char *name, struct io_err *e);

/* Checks the consistency of a config however it was built (the same rules as the readers). */
int config_validate(const struct model_config *c, struct io_err *e);

/* Writes c as an HF config.json (architectures LlamaForCausalLM or Qwen2ForCausalLM /
 * MistralForCausalLM by model_type; every field above; quantization_config omitted, since an
 * exported model is not quantized) atomically to path. config_from_hf_json reads it back to an
 * equal struct (tested). */
int config_write_hf_json(const struct model_config *c, const char *path, struct io_err *e);

/* Checks that sequences of T tokens are what refine computes exactly: T ≥ 1 and, with a sliding
 * window, T ≤ sliding_window (refine's attention is full causal attention). */
int config_check_seq_len(const struct model_config *c, int T, struct io_err *e);
/* 1 when T is beyond max_position_embeddings: allowed (RoPE extrapolates; long-context fine-tuning
 * does exactly this), but the caller warns that positions past it were not trained. */
int config_seq_beyond_context(const struct model_config *c, int T);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_IO_CONFIG_H */
