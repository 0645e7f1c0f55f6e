/* checkpoint.h — resumable checkpoints, written so that a kill at any moment leaves the last good
 * one intact (DESIGN.md "Bad input and failure").
 *
 * Layout under <out>/checkpoint/:
 *   step-<N>/state.safetensors   every engine tensor (trainable fp32 masters and optimizer state),
 *                                by name, with __metadata__ {"format":"refine-checkpoint-1"}
 *   step-<N>/trainer.json        {"format":1,"step":N,"micro_index":M,"epoch":E,"position":P,
 *                                 "world":W,"engine":"...","options":{...}} (W: the job's ranks; a
 *                                 checkpoint without it was written by one process)
 *   LATEST                       "step-<N>\n": the checkpoint to resume from
 * Writing: both files go into step-<N>.tmp/ (each written atomically: temp name, fsync, rename),
 * the directory is renamed to step-<N>, LATEST is replaced atomically, and only then are older
 * step-* directories removed. Until LATEST is replaced it names the previous complete checkpoint.
 *
 * Reading: checkpoint_load restores the engine tensors (every tensor of the engine must be present
 * with the same dtype and shape, and the file may hold no others) and returns the loop position.
 * It refuses a checkpoint whose options differ from this run's in anything that changes the
 * computation (model, data, method, rank, alpha, targets, seq, batch, accumulation, optimizer and
 * its hyper-parameters, schedule, seed, dropout, ...): bit-identical resumption needs them equal.
 * Options that only change what is reported or when the run stops may differ. A job of another
 * number of ranks resumes when ranks × --grad-accum is the checkpoint's (the same micro-batches
 * make a step, in the same order): the state is the whole job's, whatever the ranks, but the
 * gradients are then summed in another order, so the continuation is not bitwise the
 * uninterrupted run (the loop says so).
 */
#ifndef REFINE_TRAIN_CHECKPOINT_H
#define REFINE_TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "io/error.h"
#include "train/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

struct loop_position {
    int step;             /* optimizer steps completed */
    uint64_t micro_index; /* micro-batches consumed since the start */
    int epoch;            /* current epoch of the training data */
    int64_t position;     /* next sequence within the epoch's order */
    int world;            /* ranks of the job (train/comm.h): checkpoint_load takes this run's and
                             returns the checkpoint's */
};

int checkpoint_save(const char *out_dir, const struct train_engine *eng, const struct loop_position *pos,
                    const char *options_json, struct io_err *e);

/* dir: the run's --out folder (or its checkpoint/ folder, or a step-<N> folder). */
int checkpoint_load(const char *dir, const struct train_engine *eng, struct loop_position *pos,
                    const char *options_json, struct io_err *e);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_CHECKPOINT_H */
