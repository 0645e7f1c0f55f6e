/* schedule.c — warm-up then cosine / linear / constant learning rate (schedule.h). */
#include "train/schedule.h"

#include <math.h>

float train_lr_at(enum lr_schedule kind, float lr, float min_lr_ratio, int warmup, int total, int step) {
    if (step < warmup) return (float)((double)lr * (double)(step + 1) / (double)warmup);
    if (kind == SCHEDULE_CONSTANT) return lr;
    int span = total - warmup - 1;
    double p = span > 0 ? (double)(step - warmup) / (double)span : 1.0;
    if (p > 1.0) p = 1.0;
    if (p < 0.0) p = 0.0;
    double r = min_lr_ratio;
    double f = kind == SCHEDULE_COSINE ? r + (1.0 - r) * 0.5 * (1.0 + cos(M_PI * p)) : r + (1.0 - r) * (1.0 - p);
    return (float)((double)lr * f);
}
