/* parity.h — device-side pieces of the GPU parity harness (tests/parity/, tag "gpu").
 *
 * Device buffers with guard regions: dev_buf_alloc allocates [guard | data | guard] on the
 * device and uploads the guard pattern of tests/common/poison.h with the data poisoned
 * (POISON_F32 / POISON_BF16 by element kind, or left as uploaded). dev_buf_download copies the
 * whole image back, checks both guards (a test failure names the buffer on a write out of bounds)
 * and, for poisoned outputs, that every element was written; then it hands the data to the caller.
 *
 * Benchmarks (--bench): bench_time runs fn warm-up times, then `samples` timed samples of
 * `inner` back-to-back calls each, timed with CUDA events, and reports the median and the minimum
 * per call. bench_copy_ceiling measures the device-to-device copy rate (bytes read + written per
 * second) on this GPU, the ceiling that memory-bound kernels are measured against
 * (PERFORMANCE.md). bench_json prints one JSON line per measurement.
 *
 * parity_init() selects device 0 and prints its name; with no CUDA device it fails the test run
 * with a clear message (a GPU test never passes without a GPU).
 */
#ifndef REFINE_TESTS_PARITY_PARITY_H
#define REFINE_TESTS_PARITY_PARITY_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum poison_kind { POISON_NONE = 0, POISON_F32 = 1, POISON_BF16 = 2 };

struct dev_buf {
    unsigned char *image; /* device: leading guard */
    void *data;           /* device: image + GUARD_BYTES */
    size_t nbytes;
    enum poison_kind kind;
    const char *name;
};

/* Allocates and uploads: `host` (nbytes) as the data when non-NULL, else poison of `kind`. */
void *dev_buf_alloc(struct dev_buf *b, const char *name, size_t nbytes, enum poison_kind kind, const void *host);
/* Re-uploads the guards and the data (host data, or poison when host is NULL). */
void dev_buf_reset(struct dev_buf *b, const void *host);
/* Downloads into host (nbytes); checks guards, and that no poisoned element survived when
 * check_written is 1. Returns the number of problems recorded (0 when clean). */
int dev_buf_download(struct dev_buf *b, void *host, int check_written);
void dev_buf_free(struct dev_buf *b);

struct bench_result {
    double median_ms; /* per call */
    double min_ms;
    int samples, inner;
};

typedef void (*bench_fn)(void *ctx, cudaStream_t stream);

struct bench_result bench_time(bench_fn fn, void *ctx, cudaStream_t stream, int warmup, int samples, int inner);
double bench_copy_ceiling(cudaStream_t stream); /* GB/s, read + write */
/* One JSON line: op, shape, bytes and/or flops per call, the timing, achieved GB/s or TFLOP/s
 * and the % of `ceiling` (GB/s for bytes, TFLOP/s for flops). */
void bench_json(const char *op, const char *shape, double bytes, double flops, struct bench_result r, double ceiling);

void parity_init(void);
const char *parity_device_name(void);

#ifdef __cplusplus
}

/* Host-side helpers of the parity tests (C++): bf16 bit patterns of float vectors and back, and
 * the naive same-precision product of the vs-naive tier. */
#include <vector>

#include "ref/bf16.h"

static inline std::vector<uint16_t> bits_of(const std::vector<float> &v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); i++) b[i] = bf16_from_float(v[i]);
    return b;
}

static inline std::vector<float> floats_of(const std::vector<uint16_t> &b) {
    std::vector<float> v(b.size());
    for (size_t i = 0; i < b.size(); i++) v[i] = bf16_to_float(b[i]);
    return v;
}

/* out (M, P) = Σ_k a(i,k)·b(k,j), sequential fp32 sums in k order (the naive same-precision
 * product); a(i,k) = a[i·as_i + k·as_k], b(k,j) = b[k·bs_k + j·bs_j]. The loop order follows b's
 * layout (each element still sums its terms in k order, from 0). */
static inline void naive_mm(float *out, const float *a, int64_t as_i, int64_t as_k, const float *b, int64_t bs_k,
                            int64_t bs_j, int M, int P, int K) {
    if (bs_j == 1) {
        for (int i = 0; i < M; i++) {
            float *o = out + (int64_t)i * P;
            for (int j = 0; j < P; j++) o[j] = 0.0f;
            for (int k = 0; k < K; k++) {
                const float av = a[i * as_i + k * as_k];
                const float *bk = b + k * bs_k;
                for (int j = 0; j < P; j++) o[j] += av * bk[j];
            }
        }
        return;
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < P; j++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += a[i * as_i + k * as_k] * b[k * bs_k + j * bs_j];
            out[(int64_t)i * P + j] = s;
        }
}
#endif

#endif /* REFINE_TESTS_PARITY_PARITY_H */
