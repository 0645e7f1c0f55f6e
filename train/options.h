/* options.h — the command-line options shared by //ref:train and //gpu:train.
 *
 * One table (options.c) defines every flag: its name, kind, default and help line. Both trainers
 * parse their argv with train_options_parse, so they accept exactly the same flags and write the
 * same files. `--help` prints every flag with its default. A bad flag or value is bad user input:
 * parse returns -1 with one clear message (the flag, what was given, what is allowed).
 *
 * Defaults give the short demonstration run of both trainers: LoRA on SmolLM2-135M-Instruct with
 * the King James Bible from the cache that tools/setup.sh fills, 30 optimizer steps of 2×128
 * tokens, evaluation (4 batches) every 10 steps and at the end: a few minutes on
 * 2 CPU cores with //ref:train.
 */
#ifndef REFINE_TRAIN_OPTIONS_H
#define REFINE_TRAIN_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "io/error.h"
#include "io/family.h"
#include "ref/adamw.h"
#include "ref/fp8_linear.h"
#include "ref/llama.h"
#include "ref/lora.h"
#include "ref/master_pair.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model vocabulary is ref/'s: enum train_method and enum recompute_policy (ref/llama.h),
 * enum optimizer_kind (ref/adamw.h), the linear layers and their --targets names (io/family.h). */
enum lr_schedule { SCHEDULE_COSINE = 0, SCHEDULE_LINEAR, SCHEDULE_CONSTANT };
enum export_kind { EXPORT_ADAPTER = 0, EXPORT_MERGED, EXPORT_GGUF };
enum gguf_out_type { GGUF_OUT_F16 = 0, GGUF_OUT_BF16, GGUF_OUT_Q8_0 };
/* PRECISION_AUTO: the trainer's own arithmetic (fp32 on the CPU, bf16 on the GPU). PRECISION_FP8:
 * bf16 with the block linears' products in FP8 (NUMERICS.md §6.6). */
enum precision { PRECISION_AUTO = 0, PRECISION_FP32, PRECISION_BF16, PRECISION_FP8 };
/* --base-dtype: how the adapter methods store their frozen base linears (bf16, or FP8 E4M3 codes
 * with the frozen weights' scales of --fp8-recipe). */
enum base_dtype { BASE_DTYPE_BF16 = 0, BASE_DTYPE_FP8 };
/* --data-format: every file's format, or AUTO: decided by content (train/data.h). */
enum data_format { DATA_FORMAT_AUTO = 0, DATA_FORMAT_TEXT, DATA_FORMAT_JSONL };
/* The GPU trainer's optimizer in a job of several GPUs: SHARD_AUTO shards it (ZeRO-1) for --method
 * full, SHARD_ON as well (refused for adapters), SHARD_OFF keeps it whole on every rank. The update
 * is the same bits either way: only memory and communication differ. */
enum shard_optimizer { SHARD_AUTO = 0, SHARD_ON, SHARD_OFF };
extern const char *const shard_optimizer_names[];
/* --grad-dtype: enum grad_storage (ref/master_pair.h). */
extern const char *const grad_storage_names[];


/* The programs that read this flag table: the trainers (//ref:train, //gpu:train) and the
 * benchmark (//gpu:bench, which times the trainer's step on random weights). Each flag says which
 * of them take it; a flag given to a program that does not take it is refused by name. */
enum options_program { PROGRAM_TRAIN = 1, PROGRAM_BENCH = 2 };

#define OPT_PATH_MAX 1024
/* --seq auto: the longest sequence whose memory plan fits (GPU trainer and benchmark). */
#define OPT_SEQ_AUTO 0
#define OPT_KEEP_AUTO (-1) /* --recompute-keep auto: as many layers as the memory holds */
#define OPT_MAX_DATA 16

struct train_options {
    char model[OPT_PATH_MAX];
    int n_data;
    char data[OPT_MAX_DATA][OPT_PATH_MAX];
    enum data_format data_format;
    char out[OPT_PATH_MAX];
    char resume[OPT_PATH_MAX];
    int overwrite;     /* --overwrite: replace the run an existing --out holds (train/run_dir.h) */
    int resume_anyway; /* --resume-anyway: resume although the model or data changed (train/identity.h) */
    enum train_method method;
    int rank;
    float alpha;
    enum lora_scaling scaling; /* ref/lora.h: α/r or α/√r */
    float dropout;
    unsigned targets; /* bit (1u << t) per linear t of io/family.h (--targets q,k,v,o,gate,up,down) */
    int seq;          /* OPT_SEQ_AUTO until the trainer resolves it */
    int micro_batch;
    int grad_accum;
    int epochs;    /* 0: no epoch limit */
    int max_steps; /* 0: no step limit (then epochs must be set) */
    float lr;
    float min_lr_ratio; /* the schedule decays to lr·min_lr_ratio */
    int warmup;         /* steps */
    enum lr_schedule schedule;
    float weight_decay;
    float clip; /* 0: no clipping */
    float beta1, beta2, eps;
    enum optimizer_kind optimizer;
    enum master_storage master; /* full fine-tuning's masters: fp32, split or bf16 (ref/master_pair.h) */
    enum grad_storage grad_dtype; /* full fine-tuning's accumulated gradients */
    enum precision precision;
    enum fp8_recipe fp8_recipe; /* ref/fp8_linear.h: delayed | current | block */
    enum base_dtype base_dtype;
    enum recompute_policy recompute;
    enum shard_optimizer shard_optimizer;
    enum shard_optimizer shard_gradients; /* with the sharded optimizer: the gradients too (ZeRO-2);
                                             AUTO: trainers/gpu_engine.h's gpu_shards_gradients */
    int auto_batch;
    int eval_every; /* steps; 0: only at the end */
    int eval_batches;
    float val_fraction;
    unsigned long long seed;
    enum export_kind export_kind;
    enum gguf_out_type gguf_type;
    int log_every;
    int checkpoint_every; /* steps; 0: only at the end */
    int max_steps_this_run; /* stop (with a checkpoint) after this many steps of this run: 0 = off */
    int nvtx;               /* NVTX ranges for Nsight Systems (GPU) */
    int offload;            /* the saved layer inputs in pinned host memory (GPU) */
    int recompute_mlp;      /* the MLP input recomputed in backward, not kept (GPU) */
    int keep_mlp_input;     /* the MLP input kept where recomputing it would cost nothing (GPU) */
    int keep_norms;         /* each layer's normalized inputs kept, not formed again in backward (GPU) */
    int mlp_chunk;          /* rows of the MLP at a time under --recompute layer; 0: all (GPU) */
    int recompute_keep;     /* under --recompute: the top N layers keep their saved sets, or
                               OPT_KEEP_AUTO until the GPU trainer resolves it (GPU) */
    float memory_limit;     /* GiB the GPU run may plan, as on a card of that size; 0: the device's own */
    int sample_every;                  /* greedy completions of --sample-prompts every N steps: 0 = off */
    char sample_prompts[OPT_PATH_MAX]; /* JSONL: {"prompt"} or {"messages"} a line */
    int sample_tokens;                 /* new tokens per sample */
    /* //gpu:bench only */
    int bench_steps;  /* timed optimizer steps */
    int bench_warmup; /* untimed steps before them */
    int profile;      /* also time each op category (a second JSON line) */
    int plan_only;    /* print the memory plan (and --max-seq's answer) and stop before allocating */
    int ungrouped;    /* LoRA/DoRA adapters one linear at a time (comparisons) */
    int unfolded;     /* grouped LoRA adapters not folded into their base products (comparisons) */
    int help;
};

/* Fills every field with its default. `cache` is the artifact cache directory (REFINE_CACHE or
 * ~/.cache/refine) used for the default model and data paths. */
void train_options_defaults(struct train_options *o, const char *cache);

/* Parses argv[1..argc-1] for program prog over the defaults already in o ("--flag value" or
 * "--flag=value"; boolean flags take no value). Returns 0, or -1 with e naming the bad flag or
 * value. Checks ranges and combinations (e.g. --rank ≥ 1, --method full with adapter-only flags,
 * neither --epochs nor --max-steps). */
int train_options_parse(struct train_options *o, int argc, char **argv, enum options_program prog,
                        struct io_err *e);

/* Prints the usage line of `program` (how the user runs it) and every flag prog takes, with its
 * default and help. */
void train_options_help(FILE *f, const char *program, enum options_program prog, const char *cache);

/* Writes the trainers' options as one JSON object (for checkpoints and the metrics log header). */
int train_options_to_json(const struct train_options *o, char *buf, size_t cap);

/* The artifact cache directory: $REFINE_CACHE, else $HOME/.cache/refine. */
void train_cache_dir(char *buf, size_t cap);

const char *train_gguf_type_name(enum gguf_out_type t); /* "f16", "bf16", "q8_0" */

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_OPTIONS_H */
