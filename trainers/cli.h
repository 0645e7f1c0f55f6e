/* cli.h — the program around the training loop, shared by //ref:train and //gpu:train.
 *
 * train_main does everything a trainer program does except building its engine:
 *   1. under `bazel run`, enter the user's working directory (BUILD_WORKING_DIRECTORY);
 *   2. options: defaults (train/options.h, the artifact cache), argv, --help, the trainer's own
 *      checks (t->check: e.g. "no CUDA device", "--dropout is not supported here"); then the
 *      --out folder is claimed (train/run_dir.h: locked for the run's life; one that holds
 *      another run is refused unless resumed or --overwrite);
 *   3. the model (io/model_source.h: HF folder or GGUF), the sequence length against it (--seq
 *      auto: the trainer's longest; beyond max_position_embeddings: a warning), the refusal of full
 *      fine-tuning on a 4-bit checkpoint, the tokenizer (checked against the model's vocabulary);
 *   4. the data (train/data.h) through the tokenizer and its chat template, every id checked
 *      against the vocabulary; in a job of several ranks, the check that every rank has the same
 *      options, model files and data (trainers/job_check.h); the run's identity
 *      (train/identity.h: content hashes of the model and data files) for its checkpoints;
 *   5. the engine (t->create, which may change the options it owns, e.g. --auto-batch picking
 *      the micro-batch), the loop (train/loop.h), then the exports (rank 0, once, after the
 *      engine gathered a sharded state): the PEFT adapter for the adapter methods, the merged HF
 *      model with --export merged and always for --method full.
 * Every failure of user input ends in one message and exit status 1 (io_exit); nothing written
 * by an earlier run is touched before the loop starts writing its own --out folder. Rank 0 prints.
 * SIGTERM, SIGINT or SIGHUP during the loop (train/signals.h) ends it after the step in progress,
 * with a checkpoint; the program then prints where it is and the command that resumes it (the
 * same argv with --resume OUT/checkpoint), writes no exports, and exits 0.
 */
#ifndef REFINE_TRAINERS_CLI_H
#define REFINE_TRAINERS_CLI_H

#include "io/error.h"
#include "io/model_source.h"
#include "train/comm.h"
#include "train/engine.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

struct trainer {
    const char *program; /* how the user runs it, for --help: "bazel run //ref:train --" */
    /* Options this trainer refuses or the machine cannot run; NULL: none. Runs before the model
     * and the data are read. */
    int (*check)(const struct train_options *o, struct io_err *e);
    /* Builds the engine for the opened model, on this rank of the job comm (train/comm.h); may
     * adjust options it decides (micro_batch under --auto-batch, at most max_micro_batch: the
     * training sequences over --grad-accum and the ranks, so that one step has data) before the
     * loop sees them. */
    int (*create)(struct train_engine *eng, struct train_options *o, const struct model_source *src,
                  int max_micro_batch, const struct train_comm *comm, struct io_err *e);
    /* --seq auto: sets o->seq to the longest sequence this trainer can run (its memory plan), before
     * the data is packed; NULL: the trainer plans no memory and refuses --seq auto. */
    int (*longest_seq)(struct train_options *o, const struct model_source *src, struct io_err *e);
    /* The trainer's part of a launcher's job (NULL: the MPI job's host collectives suffice): e.g.
     * the GPU trainer picks its GPU and rewires c's slab collectives to NCCL. Runs before check. */
    int (*join)(struct train_comm *c, struct io_err *e);
};

/* The start of every program on the trainers' flag table: under `bazel run`, enter the user's
 * working directory (BUILD_WORKING_DIRECTORY); the options of prog over their defaults (the
 * artifact cache: REFINE_CACHE or ~/.cache/refine), bad input ending in one message and exit
 * status 1; --help printed with `program`, how the user runs it. Returns 1 when --help was given
 * (the program exits 0), else 0. */
int program_options(struct train_options *o, int argc, char **argv, enum options_program prog, const char *program);

/* The whole program; returns main's exit status (0), or exits with status 1 on bad input. */
int train_main(int argc, char **argv, const struct trainer *t);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAINERS_CLI_H */
