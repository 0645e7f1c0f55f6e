/* parity.cu — guarded device buffers, CUDA-event timing and the device banner (parity.h). */
#include "tests/parity/parity.h"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "gpu/cuda_check.h"
#include "tests/common/harness.h"
#include "tests/common/poison.h"

static char g_device_name[256] = "unknown";

void parity_init(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        fprintf(stderr, "no CUDA device (%s): GPU parity tests need one; run `bazel test //...` for the CPU suites\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "device count 0");
        exit(1);
    }
    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    snprintf(g_device_name, sizeof g_device_name, "%s", p.name);
    printf("device 0: %s, sm_%d%d, %d SMs, %.1f GiB\n", p.name, p.major, p.minor, p.multiProcessorCount,
           (double)p.totalGlobalMem / (1 << 30));
}

const char *parity_device_name(void) { return g_device_name; }

/* Host image of a buffer: guards around the data, the data from host or poisoned. */
static std::vector<unsigned char> host_image(const struct dev_buf *b, const void *host) {
    const size_t total = guarded_image_bytes(b->nbytes);
    std::vector<unsigned char> img(total);
    guard_fill(img.data(), GUARD_BYTES);
    guard_fill(img.data() + GUARD_BYTES + b->nbytes, total - GUARD_BYTES - b->nbytes);
    unsigned char *d = img.data() + GUARD_BYTES;
    if (host != nullptr) {
        memcpy(d, host, b->nbytes);
    } else if (b->kind == POISON_F32) {
        poison_f32(reinterpret_cast<float *>(d), (int64_t)(b->nbytes / 4));
    } else if (b->kind == POISON_BF16) {
        poison_bf16(reinterpret_cast<uint16_t *>(d), (int64_t)(b->nbytes / 2));
    } else {
        memset(d, 0x5A, b->nbytes);
    }
    return img;
}

void *dev_buf_alloc(struct dev_buf *b, const char *name, size_t nbytes, enum poison_kind kind, const void *host) {
    b->nbytes = nbytes;
    b->kind = kind;
    b->name = name;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void **>(&b->image), guarded_image_bytes(nbytes)));
    b->data = b->image + GUARD_BYTES;
    dev_buf_reset(b, host);
    return b->data;
}

void dev_buf_reset(struct dev_buf *b, const void *host) {
    std::vector<unsigned char> img = host_image(b, host);
    CUDA_CHECK(cudaMemcpy(b->image, img.data(), img.size(), cudaMemcpyHostToDevice));
}

int dev_buf_download(struct dev_buf *b, void *host, int check_written) {
    const size_t total = guarded_image_bytes(b->nbytes);
    std::vector<unsigned char> img(total);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(img.data(), b->image, total, cudaMemcpyDeviceToHost));
    struct guarded g = {img.data(), img.data() + GUARD_BYTES, b->nbytes};
    int problems = guarded_check(&g, b->name);
    if (check_written) {
        int64_t left = 0;
        if (b->kind == POISON_F32) left = count_poison_f32(reinterpret_cast<const float *>(g.data), (int64_t)(b->nbytes / 4));
        if (b->kind == POISON_BF16)
            left = count_poison_bf16(reinterpret_cast<const uint16_t *>(g.data), (int64_t)(b->nbytes / 2));
        EXPECT(left == 0, "%s: %lld elements never written (still poisoned)", b->name, (long long)left);
        problems += left != 0;
    }
    memcpy(host, g.data, b->nbytes);
    return problems;
}

void dev_buf_free(struct dev_buf *b) {
    CUDA_CHECK(cudaFree(b->image));
    b->image = nullptr;
    b->data = nullptr;
}

struct bench_result bench_time(bench_fn fn, void *ctx, cudaStream_t stream, int warmup, int samples, int inner) {
    for (int i = 0; i < warmup; i++) fn(ctx, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<cudaEvent_t> ev(2 * samples);
    for (auto &e : ev) CUDA_CHECK(cudaEventCreate(&e));
    for (int s = 0; s < samples; s++) {
        CUDA_CHECK(cudaEventRecord(ev[2 * s], stream));
        for (int i = 0; i < inner; i++) fn(ctx, stream);
        CUDA_CHECK(cudaEventRecord(ev[2 * s + 1], stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> t(samples);
    for (int s = 0; s < samples; s++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * s], ev[2 * s + 1]));
        t[s] = ms / inner;
    }
    for (auto &e : ev) CUDA_CHECK(cudaEventDestroy(e));
    std::sort(t.begin(), t.end());
    struct bench_result r;
    r.median_ms = samples % 2 ? t[samples / 2] : 0.5 * (t[samples / 2 - 1] + t[samples / 2]);
    r.min_ms = t[0];
    r.samples = samples;
    r.inner = inner;
    return r;
}

struct copy_ctx {
    void *dst;
    const void *src;
    size_t bytes;
};

static void copy_once(void *p, cudaStream_t s) {
    struct copy_ctx *c = static_cast<struct copy_ctx *>(p);
    CUDA_CHECK(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, s));
}

double bench_copy_ceiling(cudaStream_t stream) {
    const size_t bytes = (size_t)1 << 30;
    struct copy_ctx c;
    CUDA_CHECK(cudaMalloc(&c.dst, bytes));
    CUDA_CHECK(cudaMalloc(const_cast<void **>(&c.src), bytes));
    CUDA_CHECK(cudaMemset(const_cast<void *>(c.src), 0x3C, bytes));
    c.bytes = bytes;
    struct bench_result r = bench_time(copy_once, &c, stream, 3, 11, 2);
    CUDA_CHECK(cudaFree(c.dst));
    CUDA_CHECK(cudaFree(const_cast<void *>(c.src)));
    const double gbps = 2.0 * (double)bytes / (r.median_ms * 1e-3) / 1e9;
    printf("{\"op\":\"copy_ceiling\",\"device\":\"%s\",\"GBps\":%.1f,\"median_ms\":%.4f}\n", g_device_name, gbps,
           r.median_ms);
    return gbps;
}

void bench_json(const char *op, const char *shape, double bytes, double flops, struct bench_result r, double ceiling) {
    const double s = r.median_ms * 1e-3;
    printf("{\"op\":\"%s\",\"shape\":\"%s\",\"device\":\"%s\",\"median_ms\":%.5f,\"min_ms\":%.5f", op, shape, g_device_name,
           r.median_ms, r.min_ms);
    if (bytes > 0) {
        const double gbps = bytes / s / 1e9;
        printf(",\"bytes\":%.0f,\"GBps\":%.1f", bytes, gbps);
        if (flops <= 0 && ceiling > 0) printf(",\"pct_of_ceiling\":%.1f", 100.0 * gbps / ceiling);
    }
    if (flops > 0) {
        const double tf = flops / s / 1e12;
        printf(",\"flops\":%.0f,\"TFLOPs\":%.1f", flops, tf);
        if (ceiling > 0) printf(",\"pct_of_ceiling\":%.1f", 100.0 * tf / ceiling);
    }
    printf(",\"samples\":%d,\"inner\":%d}\n", r.samples, r.inner);
    fflush(stdout);
}
