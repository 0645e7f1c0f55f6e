#!/usr/bin/env bash
# Runs prebuilt GPU parity binaries on a machine with a CUDA device but no Bazel.
#
#   tools/run_parity.sh DIR [--bench] [OUTDIR]
#
# DIR holds the binaries (copied with `cp -L bazel-bin/tests/parity/<name>_parity DIR/bin/`)
# and, in DIR/lib, any shared library the GPU host lacks. Each binary's log goes to
# OUTDIR/<name>.log (default: DIR/logs); a summary line per binary is printed last, and the exit
# status is non-zero when any binary failed.
set -u
dir=${1:?usage: tools/run_parity.sh DIR [--bench] [OUTDIR]}
bench=""
[ "${2:-}" = "--bench" ] && { bench="--bench"; shift; }
out=${2:-$dir/logs}
mkdir -p "$out"
export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fail=0
summary=""
for bin in "$dir"/bin/*_parity; do
    name=$(basename "$bin")
    start=$(date +%s)
    "$bin" $bench >"$out/$name.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    [ $rc -ne 0 ] && fail=1
    summary+="$name rc=$rc ${secs}s: $(grep -E '^[a-z_0-9]+: [0-9]+ checks' "$out/$name.log" | tail -1)"$'\n'
done
printf '%s' "$summary"
exit $fail
