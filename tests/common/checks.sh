# shellcheck shell=bash
# checks.sh — sourced by the shell tests (tests/unit/*_test.sh, tests/parity/*.sh) and by
# tools/multi_gpu.sh, from the repository root (under `bazel test`, the runfiles root):
#   source tests/common/checks.sh || exit 1
# so that every script counts and prints its checks the same way: one line per check, "ok   NAME"
# or "FAIL NAME" (a long run's log can be grepped for FAIL), and the counts for the script's last
# line ("NAME: $pass passed, $fail failed") and exit status ([ $fail -eq 0 ]).
#   check NAME COMMAND...          runs COMMAND; its exit status passes or fails the check
#   check_log NAME LOG COMMAND...  the same, and a failed check adds LOG (when not empty) to
#                                  failed_logs, whose tails the script prints at the end
# Sourcing it starts the counts: pass=0, fail=0, failed_logs=() — source it once, before the
# first check. An sh_test whose script sources it has //tests/common:checks.sh in its data.
pass=0
fail=0
failed_logs=()

check() { # check NAME COMMAND...
    local _check_name=$1
    shift
    check_log "$_check_name" "" "$@"
}

check_log() { # check_log NAME LOG COMMAND...
    local _check_name=$1 _check_log=$2
    shift 2
    if "$@"; then
        pass=$((pass + 1))
        echo "ok   $_check_name"
    else
        fail=$((fail + 1))
        echo "FAIL $_check_name"
        [ -n "$_check_log" ] && failed_logs+=("$_check_log")
    fi
    return 0
}
