/* loop.h — the training loop shared by every trainer.
 *
 * train_loop_run drives an engine (train/engine.h) over batches from a source (below) with the
 * options of train/options.h:
 *   - total steps: --max-steps, or --epochs × steps per epoch (the smaller when both are set);
 *     steps per epoch = training sequences / (micro-batch × grad-accum × ranks), the remainder
 *     dropped;
 *   - each step: world × grad-accum micro-batches in the data's order, rank r taking the r-th run
 *     of grad-accum of them (so a job of W ranks with accumulation A trains on the examples, in
 *     the order, of one process with accumulation W·A, with the same dropout masks: micro_index is
 *     the micro-batch's index in that order); their valid labels are counted and summed over the
 *     ranks (train/comm.h), each micro-step runs with grad_scale = 1 / (valid labels of the whole
 *     step); the step's loss is Σ NLL / valid labels; then the learning rate of the schedule,
 *     clipping and the optimizer (the engine reduces the gradients over the ranks);
 *   - evaluation (validation loss and perplexity over --eval-batches micro-batches, batch i on
 *     rank i mod world, summed over the ranks) before the first step, every --eval-every steps
 *     and at the end; metrics.jsonl, loss.svg, a progress line every --log-every steps (rank 0);
 *   - checkpoints (the engine's state gathered by every rank, written by rank 0) every
 *     --checkpoint-every steps, at the end, and when --stop-after, a signal (SIGTERM, SIGINT,
 *     SIGHUP: the step in progress is finished first, train/signals.h) or another rank's request
 *     to stop ends the run early (the decision is agreed by the ranks at the end of every step: a
 *     sum of their stop flags); --resume continues from a checkpoint bit-identically (same batches,
 *     same dropout masks through micro_index, same optimizer state) after verifying it
 *     (train/checkpoint.h: checksums, ranges, the position against the step, options, the model
 *     and data identity), and on another number of ranks with the same ranks × --grad-accum,
 *     close to but not bitwise (the gradients are summed in another order: it says so);
 *     settings a resume changes are said at the start and recorded in metrics.jsonl;
 *   - a non-finite loss or gradient stops training with the step (and the tensor) named; nothing
 *     is written after it, so the last checkpoint stays the last good state.
 * Exports (PEFT adapter, merged model) are the caller's, after the loop returns.
 */
#ifndef REFINE_TRAIN_LOOP_H
#define REFINE_TRAIN_LOOP_H

#include <stdint.h>

#include "io/error.h"
#include "train/comm.h"
#include "train/engine.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Prompts completed during training (--sample-every N): the engine's generate hook completes each
 * greedily before the first step, every N steps and at the end; each completion becomes a
 * metrics.jsonl record {"kind":"sample","step","index","prompt","completion","tokens"} and a
 * printed line. decode gives a completion's text (malloc'ed, NUL-terminated). */
struct train_samples {
    int n;
    const int32_t *const *ids;
    const int *lens;
    const char *const *text; /* the prompts, for display */
    int max_new;
    const int32_t *end_ids;
    int n_end;
    char *(*decode)(void *ctx, const int32_t *ids, int n);
    void *ctx;
};

/* Where batches come from (train/data.h provides one; tests provide synthetic ones). Each batch
 * function fills tokens and labels (B, T) and returns how many labels are not −100. */
struct batch_source {
    void *self;
    int T;
    int64_t n_train; /* training sequences per epoch */
    int64_t n_val;   /* validation sequences (0: no evaluation) */
    int64_t (*train_batch)(void *self, int epoch, int64_t pos, int B, int32_t *tokens, int32_t *labels);
    int64_t (*val_batch)(void *self, int64_t first, int B, int32_t *tokens, int32_t *labels);
    const struct train_samples *samples; /* NULL: no samples (--sample-every 0) */
};

struct loop_result {
    int steps_done;       /* optimizer steps completed, in total (a resumed run counts earlier ones) */
    int total_steps;
    int stopped_early;    /* 1 when --stop-after or a signal ended the run before total_steps */
    int stop_signal;      /* the signal that ended it early (train/signals.h); 0: none */
    double first_val_loss; /* NAN when there was no evaluation */
    double last_val_loss;
    double last_train_loss;
};

/* Runs the loop on this rank of the job comm (train/comm.h; comm_single for one process).
 * identity_json: the content hashes of this run's model and data (train/identity.h), recorded in
 * checkpoints and the metrics header and compared on resume; NULL: none (synthetic runs). */
int train_loop_run(const struct train_options *o, const struct train_engine *eng, const struct batch_source *src,
                   const struct train_comm *comm, const char *identity_json, struct loop_result *res,
                   struct io_err *e);

/* Steps of the whole run for these options, this many training sequences and this many ranks (0
 * when the data cannot fill one step). */
int train_total_steps(const struct train_options *o, int64_t n_train, int world);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_LOOP_H */
