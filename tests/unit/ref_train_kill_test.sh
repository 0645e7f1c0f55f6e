#!/usr/bin/env bash
# ref_train_kill_test.sh — kill -9 at random moments loses nothing: the trainer on the tiny golden
# Llama is killed (SIGKILL) again and again, each time restarted the way a user (or a scheduler's
# requeue) would — with --resume OUT/checkpoint when the folder holds a checkpoint, with
# --overwrite when it holds only the start of a run — and every run that reaches its end must be
# bitwise the uninterrupted one: the same adapter bytes, the same per-step losses and validation
# losses, each step logged once, no *.tmp.* leftovers.
#
#   ref_train_kill_test.sh TRAIN [--seed N] [--kills N] [--budget SECONDS]
#
# The kill moments are drawn from the seed (bash's RANDOM) and follow the run rather than the clock
# (a loaded machine may run ten times slower than an idle one): a restart is killed once a random
# number of the steps it has left is logged (0: during start-up), plus a random 0-50 ms, so that
# kills fall in start-up, steps, evaluations, checkpoint writes (every step, or every 3rd,
# alternating between chains), metrics rewrites and exports alike. A chain is 1 to 6 killed
# restarts and a last one that runs to its end (then compared). The same seed gives the same
# moments (where exactly they land depends on the machine's speed). The test stops starting
# chains once it has done --kills kills (default 100), and fails if the budget (default 240 s)
# ends first. Prints the seed, one line per chain (its kills, the restarts from a checkpoint and
# from scratch) and "ref_train_kill_test: N kills, M chains, K failed"; exit status 1 on any
# failure.
set -uo pipefail
usage() {
    echo "usage: ref_train_kill_test.sh TRAIN [--seed N] [--kills N] [--budget SECONDS]" >&2
    exit 1
}
[ $# -ge 1 ] || usage
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
bin=$(abs "$1")
shift
seed=20
kills_wanted=100
budget=240
while [ $# -gt 0 ]; do
    case $1 in
    --seed) seed=${2:?}; shift 2 ;;
    --kills) kills_wanted=${2:?}; shift 2 ;;
    --budget) budget=${2:?}; shift 2 ;;
    *) usage ;;
    esac
done
echo "seed $seed (replay with --seed $seed)"
RANDOM=$seed

source tests/unit/tiny_run.sh || exit 1
tiny_run_setup ref_train_kill_test
flags=(--model "$tmp/model" --data "$tmp/data.txt" --seq 16 --micro-batch 2 --grad-accum 2 --max-steps 24 --warmup 2
    --eval-every 5 --eval-batches 2 --lr 1e-2 --rank 4 --alpha 8 --seed 7)

n_train() { # train records in DIR's log (0 when there is none)
    local n
    n=$(grep -c '"kind":"train"' "$1/metrics.jsonl" 2>/dev/null)
    echo "${n:-0}"
}
latest_step() { local l; l=$(cat "$1/checkpoint/LATEST" 2>/dev/null); l=${l#step-}; echo "${l:-0}"; }
records() { grep "\"kind\":\"$2\"" "$1/metrics.jsonl" | sed 's/"elapsed_s":[^,}]*//; s/"tokens_per_s":[^,}]*//; s/"mem_GiB":[^,}]*//; s/"mfu":[^,}]*//'; }
steps=24

"$bin" "${flags[@]}" --out "$tmp/ref" >"$tmp/ref.log" 2>&1 || { echo "the uninterrupted run failed:"; tail "$tmp/ref.log"; exit 1; }

start=$SECONDS
kills=0
chains=0
failed=0
while [ $kills -lt $kills_wanted ] && [ $((SECONDS - start)) -lt $budget ]; do
    chains=$((chains + 1))
    out=$tmp/chain$chains
    every=$((chains % 2 == 1 ? 1 : 3))
    planned=$((1 + RANDOM % 6))
    chain_kills=0
    from_ck=0
    from_scratch=0
    log=$tmp/chain$chains.log
    : >"$log"
    for ((launch = 0; ; launch++)); do
        if [ -e "$out/checkpoint/LATEST" ]; then
            how=(--resume "$out/checkpoint")
            from_ck=$((from_ck + 1))
        else
            how=(--overwrite)
            from_scratch=$((from_scratch + 1))
        fi
        "$bin" "${flags[@]}" --checkpoint-every $every --out "$out" "${how[@]}" >>"$log" 2>&1 &
        pid=$!
        if [ $launch -lt $planned ]; then
            base=$(latest_step "$out")
            target=$((base + RANDOM % (steps - base + 1)))
            extra=$((RANDOM % 51))
            while [ "$(n_train "$out")" -lt $target ] && kill -0 $pid 2>/dev/null; do sleep 0.005; done
            sleep "0.$(printf %03d $extra)"
            kill -9 $pid 2>/dev/null
        fi
        { wait $pid; } 2>/dev/null
        rc=$?
        if [ $rc -eq 137 ]; then
            kills=$((kills + 1))
            chain_kills=$((chain_kills + 1))
            echo "--- killed after step $target + $extra ms" >>"$log"
            [ $((SECONDS - start)) -lt $budget ] && continue
            echo "FAIL: chain $chains: the budget of $budget s ended during the chain"
            failed=$((failed + 1))
            break
        fi
        if [ $rc -ne 0 ]; then
            echo "FAIL: chain $chains: a restart exited with status $rc (log: $log)"
            tail -n 5 "$log"
            failed=$((failed + 1))
            break
        fi
        bad=""
        cmp -s "$tmp/ref/adapter/adapter_model.safetensors" "$out/adapter/adapter_model.safetensors" || bad="$bad adapter"
        [ "$(records "$tmp/ref" train)" = "$(records "$out" train)" ] || bad="$bad train-records"
        [ "$(records "$tmp/ref" eval)" = "$(records "$out" eval)" ] || bad="$bad eval-records"
        [ -z "$(find "$out" -name '*.tmp*')" ] || bad="$bad leftovers"
        echo "chain $chains (checkpoint every $every): $chain_kills kills, then $from_ck restarts from a checkpoint and $((from_scratch - 1)) from scratch:${bad:- identical to the uninterrupted run}"
        if [ -n "$bad" ]; then
            echo "FAIL: chain $chains differs from the uninterrupted run:$bad (log: $log)"
            failed=$((failed + 1))
        fi
        break
    done
done
if [ $kills -lt $kills_wanted ]; then
    echo "FAIL: only $kills kills in the budget of $budget s"
    failed=$((failed + 1))
fi
echo "ref_train_kill_test: $kills kills, $chains chains in $((SECONDS - start)) s, $failed failed"
[ $failed -eq 0 ]
