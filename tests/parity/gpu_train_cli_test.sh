#!/usr/bin/env bash
# gpu_train_cli_test.sh — //gpu:train's command line, on any machine (no GPU needed):
#   - it takes exactly //ref:train's flags (one table, train/options.c) — same --help flag list;
#   - --precision fp32 is refused with one message pointing to //ref:train (exit status 1);
#   - on a machine without a CUDA device it says so, points to //ref:train, and exits 1 before
#     reading the model or the data (skipped where a device answers nvidia-smi).
set -uo pipefail
gpu=${1:?usage: gpu_train_cli_test.sh GPU_TRAIN REF_TRAIN}
ref=${2:?usage: gpu_train_cli_test.sh GPU_TRAIN REF_TRAIN}
tmp=${TEST_TMPDIR:-/tmp}/gpu_train_cli_test.$$
mkdir -p "$tmp"
pass=0
fail=0
check() { # check NAME COMMAND...
    local name=$1
    shift
    if "$@"; then pass=$((pass + 1)); echo "ok   $name"; else fail=$((fail + 1)); echo "FAIL $name"; fi
}
flags() { "$1" --help | sed -n 's/^  \(--[a-z0-9-]*\) .*/\1/p'; }
flags "$gpu" >"$tmp/gpu.flags"
flags "$ref" >"$tmp/ref.flags"
check "the same $(wc -l <"$tmp/gpu.flags") flags as //ref:train" \
    test -s "$tmp/gpu.flags" -a "$(cat "$tmp/gpu.flags")" = "$(cat "$tmp/ref.flags")"
check "--help names the GPU trainer" grep -q 'bazel run //gpu:train' <("$gpu" --help)

"$gpu" --precision fp32 --model "$tmp/none" >"$tmp/fp32.log" 2>&1
rc=$?
check "--precision fp32: exit status $rc (1), one message pointing to //ref:train" \
    test $rc -eq 1 -a "$(grep -c '^refine: .*//ref:train' "$tmp/fp32.log")" -eq 1 -a "$(wc -l <"$tmp/fp32.log")" -eq 1

if nvidia-smi -L >/dev/null 2>&1; then
    echo "skip a CUDA device answers here: the no-device message is not checked"
else
    "$gpu" --model "$tmp/missing-model" >"$tmp/nodev.log" 2>&1
    rc=$?
    check "no CUDA device: exit status $rc (1), says so and points to //ref:train, before reading the model" \
        test $rc -eq 1 -a "$(grep -c '^refine: no CUDA device.*//ref:train' "$tmp/nodev.log")" -eq 1 \
        -a "$(grep -c missing-model "$tmp/nodev.log")" -eq 0
fi
echo "gpu_train_cli_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
