#!/usr/bin/env bash
# train_parity_cpu_half_test.sh — tests/parity/train_parity.sh's CPU half (the reference runs) on the
# CPU, with a stand-in reference trainer that writes its run folder as //ref:train does (the
# checkpoint's LATEST, falling validation losses):
#   - the runs a variant set needs: --variants bf16-base8 runs lora's and dora's fp32-base8 oracle
#     and bf16-base8 run for each tiny model, and nothing for the methods it does not apply to;
# --ref-cache when the CPU half is cut short (a command's time limit, preemption):
#   - the CPU half, one run at a time, is stopped while its third run is in progress: the two runs
#     it finished are in the cache with their keys, the third has none;
#   - the next invocation reuses those two (its check lines say so, and the stand-in is not run for
#     them), runs the rest, and passes;
#   - a third invocation reuses every run and runs none.
set -uo pipefail
script=${1:?usage: train_parity_cpu_half_test.sh tests/parity/train_parity.sh}
tmp=${TEST_TMPDIR:-/tmp}/train_parity_cpu_half_test.$$
rm -rf "$tmp"
mkdir -p "$tmp"
source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
export STANDIN_DIR=$tmp script tmp
cat >"$tmp/ref" <<'SH'
#!/usr/bin/env bash
out="" prev=""
for a in "$@"; do
    [ "$prev" = --out ] && out=$a
    prev=$a
done
echo "$out" >>"$STANDIN_DIR/calls"
if [ "$(wc -l <"$STANDIN_DIR/calls")" -eq "${STANDIN_BLOCK_AT:-0}" ]; then
    touch "$STANDIN_DIR/blocked"
    sleep 120
fi
mkdir -p "$out/checkpoint/step-20"
echo step-20 >"$out/checkpoint/LATEST"
printf '{"kind":"eval","step":10,"val_loss":3.0,"val_batches":2}\n{"kind":"eval","step":20,"val_loss":2.5,"val_batches":2}\n' \
    >"$out/metrics.jsonl"
SH
chmod +x "$tmp/ref"
run() { # out-file variants [flags...]: the CPU half of the tiny models, one run at a time
    local out=$1 variants=$2
    shift 2
    TRAIN_PARITY_JOBS=1 TEST_TMPDIR=$tmp bash "$script" "$tmp/ref" /bin/false /bin/true --only tiny \
        --variants "$variants" --cpu-only "$@" >"$out" 2>&1
}
keyed() { find "$tmp/cache" -name parity_key | wc -l; }

# 0. the runs of --variants bf16-base8 (no cache)
run "$tmp/base8.txt" bf16-base8
rc=$?
want=$(for m in tiny-llama tiny-qwen2; do for x in lora dora; do for p in fp32-base8 bf16-base8; do
    echo "$m-$x-$p"; done; done; done | sort | paste -sd' ')
got=$(xargs -n1 basename <"$tmp/calls" | sort | paste -sd' ')
check "bf16-base8: exit status $rc (0), the runs: $got" test $rc -eq 0 -a "$got" = "$want"
check "bf16-base8: each base8 oracle is checked to train" \
    test "$(grep -c 'ok   .*: the fp32-base8 oracle trains' "$tmp/base8.txt")" -eq 4
rm -f "$tmp/calls"

# 1. stopped in its third run
STANDIN_BLOCK_AT=3 setsid bash -c "$(declare -f run); run $tmp/first.txt bf16 --ref-cache $tmp/cache" &
pid=$!
for _ in $(seq 1 600); do
    [ -e "$tmp/blocked" ] && break
    sleep 0.1
done
check "the stand-in reached its third run" test -e "$tmp/blocked"
kill -TERM -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
third=$(sed -n 3p "$tmp/calls")
check "two runs finished before the stop are in the cache with their keys ($(keyed))" test "$(keyed)" -eq 2
check "the run stopped part way has no key" test ! -e "$third/parity_key"
# 2. the next invocation reuses the two
: >"$tmp/calls"
run "$tmp/second.txt" bf16 --ref-cache "$tmp/cache"
rc=$?
cat "$tmp/second.txt"
runs_total=$(($(wc -l <"$tmp/calls") + 2))
check "second invocation: exit status $rc (0)" test $rc -eq 0
check "second invocation: two runs reused" test "$(grep -c '(reused)' "$tmp/second.txt")" -eq 2
check "second invocation: the stand-in ran for all others ($(wc -l <"$tmp/calls") of $runs_total)" \
    test "$(wc -l <"$tmp/calls")" -eq $((runs_total - 2)) -a "$runs_total" -gt 4
check "second invocation: the stopped run ran again" grep -qx "$third" "$tmp/calls"

# 3. everything reused
: >"$tmp/calls"
run "$tmp/third.txt" bf16 --ref-cache "$tmp/cache"
rc=$?
check "third invocation: exit status $rc (0), no run, $runs_total reused" \
    test $rc -eq 0 -a "$(wc -l <"$tmp/calls")" -eq 0 -a "$(grep -c '(reused)' "$tmp/third.txt")" -eq "$runs_total"
rm -rf "$tmp"
echo "train_parity_cpu_half_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
