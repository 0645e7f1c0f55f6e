/* schedule_test.c — warm-up, cosine, linear and constant learning rates at hand-computed points. */
#include <math.h>

#include "tests/common/harness.h"
#include "train/schedule.h"

static int close_to(float a, double b) { return fabs((double)a - b) <= 1e-6 * fabs(b) + 1e-12; }

int main(void) {
    /* warmup 4 of 14: steps 0..3 ramp 1/4..4/4; then p = (s-4)/9 over steps 4..13. */
    for (int s = 0; s < 4; s++)
        EXPECT(close_to(train_lr_at(SCHEDULE_COSINE, 1e-3f, 0.1f, 4, 14, s), 1e-3 * (s + 1) / 4.0), "warmup step %d", s);
    EXPECT(close_to(train_lr_at(SCHEDULE_COSINE, 1e-3f, 0.1f, 4, 14, 4), 1e-3), "cosine starts at the peak");
    EXPECT(close_to(train_lr_at(SCHEDULE_COSINE, 1e-3f, 0.1f, 4, 14, 13), 1e-4), "cosine ends at lr*ratio");
    double mid = 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 4.5 / 9.0));
    EXPECT(close_to(train_lr_at(SCHEDULE_COSINE, 1.0f, 0.1f, 4, 14, 8), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 4.0 / 9.0))) &&
               mid > 0.1,
           "cosine interior");
    EXPECT(close_to(train_lr_at(SCHEDULE_LINEAR, 2.0f, 0.0f, 0, 11, 5), 1.0), "linear halfway");
    EXPECT(close_to(train_lr_at(SCHEDULE_LINEAR, 2.0f, 0.0f, 0, 11, 10), 0.0), "linear end");
    EXPECT(close_to(train_lr_at(SCHEDULE_CONSTANT, 3.0f, 0.1f, 2, 10, 9), 3.0), "constant");
    EXPECT(close_to(train_lr_at(SCHEDULE_COSINE, 1.0f, 0.5f, 0, 1, 0), 0.5), "a single step runs at the floor");
    float prev = 1e9f;
    int monotone = 1;
    for (int s = 3; s < 100; s++) {
        float lr = train_lr_at(SCHEDULE_COSINE, 1.0f, 0.0f, 3, 100, s);
        monotone &= lr <= prev;
        prev = lr;
    }
    EXPECT(monotone, "cosine decays monotonically after warm-up");
    return test_finish("schedule_test");
}
