/* rng_test.c — the test RNG is reproducible, covers its ranges, and has the right moments. */
#include <math.h>

#include "tests/common/harness.h"
#include "tests/common/rng.h"

int main(int argc, char **argv) {
    uint64_t seed = test_seed(argc, argv, 42);
    struct rng a, b;
    rng_init(&a, seed);
    rng_init(&b, seed);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= rng_u64(&a) == rng_u64(&b);
    EXPECT(same, "two streams from one seed must agree");
    rng_init(&b, seed + 1);
    EXPECT(rng_u64(&a) != rng_u64(&b), "different seeds give different streams");

    /* Known first output for seed 0 (splitmix64 → xoshiro256**), pinned so the stream never
     * changes silently and replayed seeds keep meaning the same inputs. */
    rng_init(&a, 0);
    uint64_t first = rng_u64(&a);
    EXPECT(first == 0x99EC5F36CB75F2B4ull, "xoshiro256** first output for seed 0: 0x%016llx",
           (unsigned long long)first);

    enum { N = 200000 };
    double s = 0, s2 = 0, u_min = 1, u_max = 0;
    int counts[7] = {0};
    rng_init(&a, seed);
    for (int i = 0; i < N; i++) {
        double z = rng_normal(&a);
        s += z;
        s2 += z * z;
        double u = rng_uniform(&a);
        if (u < u_min) u_min = u;
        if (u > u_max) u_max = u;
        counts[rng_int(&a, 7)]++;
    }
    double mean = s / N, var = s2 / N - mean * mean;
    EXPECT(fabs(mean) < 5.0 / sqrt(N), "normal mean %.5f", mean);
    EXPECT(fabs(var - 1.0) < 0.02, "normal variance %.5f", var);
    EXPECT(u_min >= 0.0 && u_max < 1.0 && u_min < 1e-3 && u_max > 1 - 1e-3, "uniform range [%g, %g]", u_min, u_max);
    for (int k = 0; k < 7; k++)
        EXPECT(fabs(counts[k] - N / 7.0) < 5 * sqrt(N / 7.0), "rng_int bucket %d has %d", k, counts[k]);
    float ints[1000];
    rng_fill_int(&a, ints, 1000, -3, 3);
    int ok = 1, seen_lo = 0, seen_hi = 0;
    for (int i = 0; i < 1000; i++) {
        ok &= ints[i] >= -3 && ints[i] <= 3 && ints[i] == floorf(ints[i]);
        seen_lo |= ints[i] == -3;
        seen_hi |= ints[i] == 3;
    }
    EXPECT(ok && seen_lo && seen_hi, "rng_fill_int gives integers covering [-3, 3]");
    return test_finish("rng_test");
}
