/* comm_open.c — one process or a launcher's job (comm_open.h). */
#include "trainers/comm_open.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLUGIN_NAME "librefine_mpi.so"

typedef int (*open_fn)(struct train_comm *c, int abi_version, size_t table_bytes, struct io_err *e);

int comm_launched(char *why, size_t cap) {
    const char *force = getenv("REFINE_COMM");
    if (force != NULL && strcmp(force, "single") == 0) return 0;
    if (force != NULL && strcmp(force, "mpi") == 0) {
        snprintf(why, cap, "REFINE_COMM=mpi");
        return 1;
    }
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const char *v = getenv(sizes[i]);
        if (v != NULL && v[0] != '\0') {
            snprintf(why, cap, "%s=%s", sizes[i], v);
            return 1;
        }
    }
    const char *tasks = getenv("SLURM_STEP_NUM_TASKS");
    if (tasks != NULL && getenv("SLURM_PROCID") != NULL && atoi(tasks) > 1) {
        snprintf(why, cap, "SLURM_STEP_NUM_TASKS=%s", tasks);
        return 1;
    }
    return 0;
}

/* The plugin's path: REFINE_MPI_PLUGIN, else beside the executable. */
static void plugin_path(char *buf, size_t cap) {
    const char *env = getenv("REFINE_MPI_PLUGIN");
    if (env != NULL && env[0] != '\0') {
        snprintf(buf, cap, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(buf, cap, "%s", PLUGIN_NAME);
        return;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash != NULL) *slash = '\0';
    snprintf(buf, cap, "%s/%s", exe, PLUGIN_NAME);
}

int comm_open(struct train_comm *c, int *launched, struct io_err *e) {
    char why[256];
    *launched = comm_launched(why, sizeof why);
    if (!*launched) {
        comm_single(c);
        return 0;
    }
    char path[PATH_MAX + 64];
    plugin_path(path, sizeof path);
    if (access(path, R_OK) != 0)
        return io_fail(e, "started by a launcher (%s), but the MPI plugin %s is not there: it is built beside the "
                          "program (bazel build //trainers:" PLUGIN_NAME ", tools/gpu_bundle.sh copies it) or "
                          "named by REFINE_MPI_PLUGIN (REFINE_COMM=single runs one process)",
                       why, path);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL)
        return io_fail(e, "started by a launcher (%s), but %s does not load: %s — it needs Open MPI's libmpi.so.40 "
                          "(Debian/Ubuntu: libopenmpi3 and openmpi-bin) on the library path (LD_LIBRARY_PATH)",
                       why, path, dlerror());
    open_fn fn;
    *(void **)&fn = dlsym(h, "refine_comm_mpi_open");
    if (fn == NULL) return io_fail(e, "%s is not refine's MPI plugin (no refine_comm_mpi_open)", path);
    if (fn(c, COMM_ABI_VERSION, sizeof *c, e) != 0) return io_fail_context(e, "%s", path);
    /* the plugin stays loaded: the job's functions live in it */
    char label[32];
    snprintf(label, sizeof label, "rank %d", c->rank);
    io_set_process_label(label);
    return 0;
}
