/* schedule.h — the learning rate of optimizer step `step` (0-based) of `total`.
 *
 *   warm-up (step < warmup):   lr · (step + 1) / warmup
 *   then, with p = (step − warmup) / max(1, total − warmup − 1) ∈ [0, 1]:
 *     cosine:    lr · (r + (1 − r) · ½(1 + cos πp))
 *     linear:    lr · (r + (1 − r) · (1 − p))
 *     constant:  lr
 *   where r = min_lr_ratio: the last step runs at lr·r (cosine, linear).
 * transformers' get_*_schedule_with_warmup evaluate the warm-up at `step / warmup`, so their
 * first step has learning rate 0; refine's first step already moves (step + 1). Computed in
 * double; returned as float.
 */
#ifndef REFINE_TRAIN_SCHEDULE_H
#define REFINE_TRAIN_SCHEDULE_H

#include "train/options.h"

#ifdef __cplusplus
extern "C" {
#endif

float train_lr_at(enum lr_schedule kind, float lr, float min_lr_ratio, int warmup, int total, int step);

#ifdef __cplusplus
}
#endif

#endif /* REFINE_TRAIN_SCHEDULE_H */
