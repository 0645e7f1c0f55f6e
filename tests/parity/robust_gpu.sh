#!/usr/bin/env bash
# robust_gpu.sh — //gpu:train loses nothing either: the --out and signal sections of
# tests/unit/ref_train_robust_test.sh (which //ref:train passes in every `bazel test //...`) run
# against the GPU trainer, on the tiny golden Llama with --seq 64 (one full attention tile):
#   out      an --out holding a run is refused and left untouched, --overwrite replaces it, a second
#            run on a folder in use is refused naming the first's pid, leftovers of killed runs are
#            cleaned, deleting old checkpoints follows no symbolic link;
#   signals  real SIGTERM, SIGINT and SIGHUP: the step finishes, a checkpoint is written, the resume
#            command printed, exit 0; the checkpoint is bitwise the one a --stop-after run at that
#            step writes, and the printed command resumes bit-identically; a second signal ends the
#            process at once (status 130 or 143).
# The checks are host logic shared through train/ (the loop, the CLI), so the GPU run proves the
# GPU trainer is wired to them; --all runs every section (checkpoints, tokenizer, data, resume).
#
#   tests/parity/robust_gpu.sh GPU_TRAIN [--all]        from the repository root
#
# GPU_TRAIN: bazel-bin/gpu/train, or DIR/bin/gpu_train of tools/gpu_bundle.sh DIR //gpu:train
# (DIR/lib is put on LD_LIBRARY_PATH). Prints one line per check and, last,
# "ref_train_robust_test: N passed, M failed"; exit status 1 on any failure. About 20 runs of a
# few seconds each.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: tests/parity/robust_gpu.sh GPU_TRAIN [--all]" >&2; exit 1; }
case $1 in /*) gpu=$1 ;; *) gpu=$PWD/$1 ;; esac
lib=$(dirname "$gpu")/../lib
[ -d "$lib" ] && export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
sections=out,signals
[ "${2:-}" = --all ] && sections=out,signals,checkpoints,tokenizer,data,resume
exec tests/unit/ref_train_robust_test.sh "$gpu" --only "$sections" -- --seq 64
