/* loop.h — the training loop shared by every trainer.
 *
 * train_loop_run drives an engine (train/engine.h) over batches from a source (below) with the
 * options of train/options.h:
 *   - total steps: --max-steps, or --epochs × steps per epoch (the smaller when both are set);
 *     steps per epoch = training sequences / (micro-batch × grad-accum), the remainder dropped;
 *   - each step: grad-accum micro-batches are drawn first, their valid labels counted, and each
 *     micro-step runs with grad_scale = 1 / (valid labels of the whole step); the step's loss is
 *     Σ NLL / valid labels; then the learning rate of the schedule, clipping and the optimizer;
 *   - evaluation (validation loss and perplexity over --eval-batches micro-batches) before the
 *     first step, every --eval-every steps and at the end; metrics.jsonl, loss.svg, a progress
 *     line every --log-every steps;
 *   - checkpoints every --checkpoint-every steps, at the end, and when --stop-after or a signal
 *     ends the run early (SIGTERM, SIGINT, SIGHUP: the step in progress is finished first,
 *     train/signals.h; the decision to stop after a step is train_stop_after_step's);
 *     --resume continues from a checkpoint bit-identically (same batches, same dropout masks
 *     through micro_index, same optimizer state), after verifying it (train/checkpoint.h:
 *     checksums, ranges, the position against the step, options, the model and data identity);
 *     settings a resume changes are said at the start and recorded in metrics.jsonl;
 *   - a non-finite loss or gradient stops training with the step (and the tensor) named; nothing
 *     is written after it, so the last checkpoint stays the last good state.
 * Exports (PEFT adapter, merged model) are the caller's, after the loop returns.
 */
#ifndef REFINE_TRAIN_LOOP_H
#define REFINE_TRAIN_LOOP_H

#include <stdint.h>

#include "io/error.h"
#include "train/engine.h"
#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where batches come from (train/data.h provides one; tests provide synthetic ones). Each batch
 * function fills tokens and labels (B, T) and returns how many labels are not −100. */
struct batch_source {
    void *self;
    int T;
    int64_t n_train; /* training sequences per epoch */
    int64_t n_val;   /* validation sequences (0: no evaluation) */
    int64_t (*train_batch)(void *self, int epoch, int64_t pos, int B, int32_t *tokens, int32_t *labels);
    int64_t (*val_batch)(void *self, int64_t first, int B, int32_t *tokens, int32_t *labels);
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

/* identity_json: the content hashes of this run's model and data (train/identity.h), recorded in
 * checkpoints and the metrics header and compared on resume; NULL: none (synthetic runs). */
int train_loop_run(const struct train_options *o, const struct train_engine *eng, const struct batch_source *src,
                   const char *identity_json, struct loop_result *res, struct io_err *e);

/* Steps of the whole run for these options and this many training sequences (0 when the data
 * cannot fill one step). */
int train_total_steps(const struct train_options *o, int64_t n_train);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_LOOP_H */
