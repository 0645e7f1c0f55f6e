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

#ifdef __cplusplus
extern "C" {
#endif

enum train_method { METHOD_LORA = 0, METHOD_DORA, METHOD_QLORA, METHOD_QDORA, METHOD_FULL };
enum lr_schedule { SCHEDULE_COSINE = 0, SCHEDULE_LINEAR, SCHEDULE_CONSTANT };
enum optimizer_kind { OPTIMIZER_ADAMW = 0, OPTIMIZER_ADAMW8BIT };
enum recompute_policy { RECOMPUTE_NONE = 0, RECOMPUTE_ATTN, RECOMPUTE_LAYER };
enum export_kind { EXPORT_ADAPTER = 0, EXPORT_MERGED };
enum adapter_scaling { SCALING_STANDARD = 0, SCALING_RSLORA }; /* α/r or α/√r */
/* PRECISION_AUTO: the trainer's own arithmetic (fp32 on the CPU, bf16 on the GPU). */
enum precision { PRECISION_AUTO = 0, PRECISION_FP32, PRECISION_BF16 };
/* --data-format: every file's format, or AUTO: decided by content (train/data.h). */
enum data_format { DATA_FORMAT_AUTO = 0, DATA_FORMAT_TEXT, DATA_FORMAT_JSONL };

/* Bit i of targets selects target i of train_target_names (q, k, v, o, gate, up, down). */
enum { TARGET_COUNT = 7 };
extern const char *const train_target_names[TARGET_COUNT];

#define OPT_PATH_MAX 1024
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
    enum adapter_scaling scaling;
    float dropout;
    unsigned targets; /* bit mask over train_target_names */
    int seq;
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
    enum precision precision;
    enum recompute_policy recompute;
    int auto_batch;
    int eval_every; /* steps; 0: only at the end */
    int eval_batches;
    float val_fraction;
    unsigned long long seed;
    enum export_kind export_kind;
    int log_every;
    int checkpoint_every; /* steps; 0: only at the end */
    int max_steps_this_run; /* stop (with a checkpoint) after this many steps of this run: 0 = off */
    int help;
};

/* Fills every field with its default. `cache` is the artifact cache directory (REFINE_CACHE or
 * ~/.cache/refine) used for the default model and data paths. */
void train_options_defaults(struct train_options *o, const char *cache);

/* Parses argv[1..argc-1] over the defaults already in o ("--flag value" or "--flag=value";
 * boolean flags take no value). Returns 0, or -1 with e naming the bad flag or value. Checks
 * ranges and combinations (e.g. --rank ≥ 1, --method full with adapter-only flags, neither
 * --epochs nor --max-steps). */
int train_options_parse(struct train_options *o, int argc, char **argv, struct io_err *e);

/* Prints the usage line of `program` and every flag with its default and help. */
void train_options_help(FILE *f, const char *program, const char *cache);

/* Writes the options as one JSON object (for checkpoints and the metrics log header). */
int train_options_to_json(const struct train_options *o, char *buf, size_t cap);

/* The artifact cache directory: $REFINE_CACHE, else $HOME/.cache/refine. */
void train_cache_dir(char *buf, size_t cap);

const char *train_method_name(enum train_method m);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_OPTIONS_H */
