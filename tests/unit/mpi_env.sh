# shellcheck shell=bash
# mpi_env.sh — sourced by the tests that run mpirun (comm_mpi_test.sh, ref_train_mpi_test.sh):
# Open MPI set up to work as root in a container without network interfaces, on fewer cores
# than ranks, and `mpi N ARGS...` to run a job of N ranks.
#   OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)   = --allow-run-as-root (CI runs as root)
#   OMPI_MCA_rmaps_base_oversubscribe  = --oversubscribe (2 cores, up to 3 ranks)
#   OMPI_MCA_btl=self,vader            shared memory between the local ranks, no TCP interface needed
#   OMPI_MCA_btl_vader_single_copy_mechanism=none   no CMA (ptrace is often refused in containers)
#   OMPI_MCA_hwloc_base_binding_policy=none          no core binding (cgroups may forbid it)
# Without mpirun the sourcing test prints "SKIP: ..." and exits 0 (mpirun_missing returns 0).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_btl_base_warn_component_unused=0
export OPENBLAS_NUM_THREADS=1
# Under --config=asan: Open MPI's own allocations (made at MPI_Init, some by components it unloads)
# are never freed, and LeakSanitizer would fail every rank on them; the other sanitizer checks stay.
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
mpirun_bin=$(command -v mpirun || true)
mpirun_missing() { [ -z "$mpirun_bin" ]; }
mpi() { # mpi N ARGS...: a job of N ranks (stdin closed)
    local n=$1
    shift
    "$mpirun_bin" -np "$n" "$@" </dev/null
}
