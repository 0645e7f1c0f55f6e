/* checkpoint.h — resumable checkpoints, written so that a kill at any moment leaves the last good
 * one intact (DESIGN.md "Bad input and failure"), and read so that nothing in them is trusted
 * blindly.
 *
 * Layout under <out>/checkpoint/:
 *   step-<N>/state.safetensors   every engine tensor (trainable fp32 masters and optimizer state),
 *                                by name, with __metadata__ {"format":"refine-checkpoint-1"}
 *   step-<N>/trainer.json        {"format":2,"step":N,"micro_index":M,"epoch":E,"position":P,
 *                                 "world":W,"engine":"...","options":{...},"identity":{...}}
 *                                (W: the job's ranks; identity: the content hashes of the model
 *                                and data, identity.h)
 *   step-<N>/SHA256SUMS          "<sha256>  state.safetensors\n<sha256>  trainer.json\n", the
 *                                format `sha256sum -c SHA256SUMS` checks
 *   LATEST                       "step-<N>\n": the checkpoint to resume from
 * Writing: the files go into step-<N>.tmp/ (each written atomically: temp name, fsync, rename;
 * SHA256SUMS last, from the bytes on disk), the folder is renamed to step-<N>, LATEST is replaced
 * atomically, and only then are older step-* folders removed (run_dir_remove_step: never through
 * a symbolic link, only refine's own files). Until LATEST is replaced it names the previous
 * complete checkpoint.
 *
 * Reading (checkpoint_load), in this order, before the engine is touched:
 *   1. SHA256SUMS must list exactly the two files and each file's sha256 must match (a flipped
 *      bit, a truncated or swapped file is refused, naming the file);
 *   2. trainer.json: format 2; step, micro_index, epoch, position integers in range (the loop
 *      then checks the position against the step, checkpoint_check_position);
 *   3. the options: a setting that would corrupt the saved state or the batches that follow is
 *      refused (method, rank, alpha, scaling, targets, seq, micro-batch × grad-accum, optimizer,
 *      precision, seed, val-fraction, data-format, and any option this list does not know);
 *      settings that only steer what comes next may change (lr, min-lr-ratio, warmup, schedule,
 *      weight-decay, clip, beta1, beta2, eps, max-steps, epochs, dropout, eval-every,
 *      eval-batches, log-every, checkpoint-every, stop-after, export, recompute, auto-batch, the
 *      micro-batch/grad-accum split of the same product, and the paths out, model and data, whose
 *      contents step 4 compares): each change is returned (r->changes, r->notes) for the loop to
 *      say at the start and record in metrics.jsonl. With none changed, the resumed run is
 *      bit-identical to an uninterrupted one. A job of another number of ranks resumes when
 *      ranks × --grad-accum is the checkpoint's (the same micro-batches make a step, in the same
 *      order): the state is the whole job's, whatever the ranks, but the gradients are then
 *      summed in another order, so the continuation is not bitwise the uninterrupted run (the
 *      loop says so).
 *   4. the identity: model and data contents must be those the checkpoint was made with
 *      (identity.h); --resume-anyway (r->accept_other_inputs) makes a difference a note;
 *   5. the tensors: every tensor of the engine present with the same dtype and shape, and no
 *      others.
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

/* options_json: train_options_to_json of this run; identity_json: identity.h (NULL: none). */
int checkpoint_save(const char *out_dir, const struct train_engine *eng, const struct loop_position *pos,
                    const char *options_json, const char *identity_json, struct io_err *e);

struct checkpoint_resume {
    /* in */
    const char *options_json;  /* this run's options */
    const char *identity_json; /* this run's identity; NULL: not compared (tests) */
    int accept_other_inputs;   /* --resume-anyway */
    /* out (checkpoint_resume_free releases them) */
    char step_dir[2048];       /* the step-<N> folder loaded */
    char *changes;             /* {"lr":{"from":0.001,"to":0.0005},...}: the settings this run changes */
    char *notes;               /* the same for people ("--lr 0.001 -> 0.0005; ..."), then the identity
                                  differences accepted with --resume-anyway; "" when none */
    char *accepted;            /* the identity difference accepted with --resume-anyway; "" when none */
};

/* dir: the run's --out folder, its checkpoint/ folder, or a step-<N> folder. */
int checkpoint_load(const char *dir, const struct train_engine *eng, struct loop_position *pos,
                    struct checkpoint_resume *r, struct io_err *e);
void checkpoint_resume_free(struct checkpoint_resume *r);

/* The loop position after `pos->step` steps of P = micro-batch × grad-accum sequences over epochs
 * of per_epoch sequences (a multiple of P) must be exactly pos's epoch and position, and
 * step ≤ micro_index ≤ step × 2^16; step ≤ total. -1 with a message naming trainer.json (path)
 * otherwise. */
int checkpoint_check_position(const struct loop_position *pos, int64_t P, int64_t per_epoch, int total,
                              const char *path, struct io_err *e);
/* Sets pos->epoch and pos->position to what pos->step gives (above). */
void checkpoint_position_after(struct loop_position *pos, int64_t P, int64_t per_epoch);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_CHECKPOINT_H */
