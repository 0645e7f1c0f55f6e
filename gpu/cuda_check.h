/* cuda_check.h — CUDA_CHECK and KERNEL_CHECK for the .cu files of gpu/ and tests/parity/.
 *
 * CUDA_CHECK(call) takes a CUDA runtime (cudaError_t), cuBLASLt (cublasStatus_t) or NCCL
 * (ncclResult_t) call; on failure it prints file:line, the call, and the library's own error
 * string, then exits with status 2. KERNEL_CHECK(stream) follows every kernel launch: it checks
 * cudaGetLastError(), and in builds with --config=sync (REFINE_SYNC_LAUNCH) it also synchronizes
 * the stream (unless the stream is being captured into a graph) so that an asynchronous fault is
 * reported at the launch that caused it.
 *
 * refine_sm_count() is the current device's multiprocessor count, asked once per device (the
 * launch sizing of several kernels).
 *
 * C++ only (overloads on the status type); included by .cu files, never by the C-callable
 * C-callable op headers of gpu/.
 */
#ifndef REFINE_GPU_CUDA_CHECK_H
#define REFINE_GPU_CUDA_CHECK_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef REFINE_SYNC_LAUNCH
#define REFINE_SYNC_LAUNCH 0
#endif

[[noreturn]] inline void refine_cuda_fail(const char *lib, const char *msg, int code, const char *call,
                                          const char *file, int line) {
    fprintf(stderr, "%s:%d: %s error %d (%s) in %s\n", file, line, lib, code, msg, call);
    fflush(stderr);
    exit(2);
}

inline void refine_cuda_check(cudaError_t e, const char *call, const char *file, int line) {
    if (e != cudaSuccess) refine_cuda_fail("CUDA", cudaGetErrorString(e), (int)e, call, file, line);
}

inline void refine_cuda_check(cublasStatus_t s, const char *call, const char *file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) refine_cuda_fail("cuBLASLt", cublasLtGetStatusString(s), (int)s, call, file, line);
}

inline void refine_cuda_check(ncclResult_t r, const char *call, const char *file, int line) {
    if (r != ncclSuccess) refine_cuda_fail("NCCL", ncclGetErrorString(r), (int)r, call, file, line);
}

#define CUDA_CHECK(call) refine_cuda_check((call), #call, __FILE__, __LINE__)

inline void refine_kernel_check(cudaStream_t stream, const char *file, int line) {
    refine_cuda_check(cudaGetLastError(), "kernel launch", file, line);
    if (REFINE_SYNC_LAUNCH) {
        cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        refine_cuda_check(cudaStreamIsCapturing(stream, &st), "cudaStreamIsCapturing", file, line);
        if (st == cudaStreamCaptureStatusNone)
            refine_cuda_check(cudaStreamSynchronize(stream), "kernel execution (sync after launch)", file, line);
    }
}

#define KERNEL_CHECK(stream) refine_kernel_check((stream), __FILE__, __LINE__)

inline int refine_sm_count() {
    static int cached[64]; /* per device; a benign race writes the same value */
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 64) dev = 63;
    if (cached[dev] == 0) {
        int n = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
        cached[dev] = n > 0 ? n : 1;
    }
    return cached[dev];
}

#endif /* REFINE_GPU_CUDA_CHECK_H */
