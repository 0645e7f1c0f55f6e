/* ktrace.c — per-kernel device time of any CUDA program, through CUPTI's activity API, for hosts
 * without Nsight Systems. Loaded by the CUDA driver at the program's first CUDA call:
 *
 *   CUDA_INJECTION64_PATH=/path/libktrace.so KTRACE_OUT=run.tsv PROGRAM ARGS...
 *
 * At exit it writes one line per kernel name (mangled): name <TAB> launches <TAB> total ns, after a
 * first line "#total_kernel_ns <TAB> N <TAB> span_ns <TAB> S" (S: the first kernel's start to the
 * last one's end). Kernels inside CUDA graphs are recorded one by one. Concurrent kernels are not
 * serialized (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), so the totals of kernels that overlap on
 * several streams add up to more than the wall time. tools/ktrace/summary.py turns two runs that
 * differ only in their step count into a per-step table.
 *
 * Build (not a Bazel target: CUPTI's headers are not in the toolkit this project builds with; PyPI's
 * nvidia-cuda-cupti wheel has them and libcupti.so.13, which the GPU host's torch also installs):
 *   pip download --no-deps "nvidia-cuda-cupti==13.0.*" && unzip -q nvidia_cuda_cupti-*.whl
 *   gcc -O2 -shared -fPIC -o libktrace.so tools/ktrace/ktrace.c -Invidia/cu13/include \
 *       -I/usr/local/cuda/include -Lnvidia/cu13/lib -l:libcupti.so.13
 * and run with nvidia/cu13/lib on LD_LIBRARY_PATH. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KTRACE_MAX_NAMES 4096

static struct {
    char *name;
    unsigned long long count, ns;
} tab[KTRACE_MAX_NAMES];
static int ntab, dropped;
static unsigned long long first_start = ~0ull, last_end;

static void add(const char *name, unsigned long long ns) {
    for (int i = 0; i < ntab; i++)
        if (strcmp(tab[i].name, name) == 0) {
            tab[i].count++, tab[i].ns += ns;
            return;
        }
    if (ntab == KTRACE_MAX_NAMES) {
        dropped++;
        return;
    }
    tab[ntab].name = strdup(name);
    tab[ntab].count = 1, tab[ntab].ns = ns;
    ntab++;
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        add(k->name ? k->name : "?", k->end - k->start);
        if (k->start < first_start) first_start = k->start;
        if (k->end > last_end) last_end = k->end;
    }
    free(buf);
}

static void finish(void) {
    cuptiActivityFlushAll(1);
    const char *path = getenv("KTRACE_OUT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) f = stderr;
    unsigned long long total = 0;
    for (int i = 0; i < ntab; i++) total += tab[i].ns;
    fprintf(f, "#total_kernel_ns\t%llu\tspan_ns\t%llu\n", total, ntab ? last_end - first_start : 0ull);
    for (int i = 0; i < ntab; i++) fprintf(f, "%s\t%llu\t%llu\n", tab[i].name, tab[i].count, tab[i].ns);
    if (dropped) fprintf(stderr, "ktrace: %d kernel names beyond the first %d not recorded\n", dropped, KTRACE_MAX_NAMES);
    if (f != stderr) fclose(f);
}

/* The entry point the CUDA driver calls for CUDA_INJECTION64_PATH. */
__attribute__((visibility("default"))) int InitializeInjection(void) {
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
        fprintf(stderr, "ktrace: cuptiActivityRegisterCallbacks failed: no trace\n");
        return 0;
    }
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "ktrace: kernel activity records not available: no trace\n");
        return 0;
    }
    atexit(finish);
    return 1;
}
