#!/usr/bin/env bash
# ref_train_mpi_test.sh — //ref:train under mpirun on CPU processes, the oracle of data-parallel
# training (the tiny golden model, as ref_train_test.sh), against one process:
#   bitwise (train_compare identical: every printed loss, every checkpoint tensor; and the exports):
#     - 2 ranks × --grad-accum 1 = 1 process × --grad-accum 2, for LoRA, full fine-tuning (merged
#       export; and bf16 with split masters, and with bf16 weights rounded stochastically), DoRA in
#       bf16, QLoRA with 8-bit AdamW; 3 ranks × 1 =
#       1 × 3. The CPU engine computes each micro-batch's gradient alone and the job sums in rank
#       order, so one micro-batch per rank is summed exactly as one process accumulates
#       (trainers/cpu_engine.c);
#     - a stop and a resume on 2 ranks = the uninterrupted 2-rank run;
#     - a rank killed (kill -9) after a checkpoint: the job ends, the launcher names the rank, and
#       resuming from the checkpoint continues bitwise as a run that was never interrupted;
#   within the tolerance of tests/parity/train_compare (the bf16 run as the yardstick), not bitwise:
#     - 2 ranks × 2 against 1 × 4 (((g0 + g1) + (g2 + g3)) against (((g0 + g1) + g2) + g3));
#     - a 2 × 2 checkpoint resumed on 1 rank × 4, which says that it is not bitwise; 1 × 2 (another
#       step size) is refused;
#   faults: a rank that stops (SIGSTOP) is named by the other within REFINE_COMM_TIMEOUT and the job
#   ends; ranks that disagree on options, data or model files are named at start; --grad-dtype bf16
#   is refused under several ranks (one process only for now); no MPI library in a plain run (ldd).
# Skipped, with a message, where mpirun is not installed.
set -uo pipefail
usage="usage: ref_train_mpi_test.sh REF_TRAIN TRAIN_COMPARE"
bin=${1:?$usage}
compare=${2:?$usage}
source "$(dirname "$0")/mpi_env.sh" || exit 1
if mpirun_missing; then
    echo "SKIP: mpirun is not installed (Debian: openmpi-bin); //ref:train under mpirun is not tested here"
    exit 0
fi
bin=$PWD/$bin
compare=$PWD/$compare
source tests/unit/tiny_run.sh || exit 1
tiny_run_setup ref_train_mpi_test

source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
common=(--model "$tmp/model" --data "$tmp/data.txt" --seq 16 --micro-batch 2 --max-steps 6 --warmup 1 --eval-every 3
    --eval-batches 2 --lr 1e-2 --rank 4 --alpha 8 --seed 7)
run1() { # run1 OUT FLAGS...: one process
    local out=$1
    shift
    "$bin" "${common[@]}" --out "$tmp/$out" "$@" >"$tmp/$out.log" 2>&1
}
runN() { # runN N OUT FLAGS...: a job of N ranks
    local n=$1 out=$2
    shift 2
    timeout 300 "$mpirun_bin" -np "$n" "$bin" "${common[@]}" --out "$tmp/$out" "$@" >"$tmp/$out.log" 2>&1 </dev/null
}
identical() { "$compare" identical "$tmp/$1" "$tmp/$2" >"$tmp/cmp.$1.$2" 2>&1 || { cat "$tmp/cmp.$1.$2"; return 1; }; }
different() { ! "$compare" identical "$tmp/$1" "$tmp/$2" >"$tmp/cmp.$1.$2" 2>&1 && grep -q DIFFERENT "$tmp/cmp.$1.$2"; }

# --- bitwise: one micro-batch per rank ----------------------------------------------------------
run1 lora_1x2 --grad-accum 2
runN 2 lora_2x1 --grad-accum 1
check "LoRA: 2 ranks × 1 runs (exit $?)" test -s "$tmp/lora_2x1/adapter/adapter_model.safetensors"
check "LoRA: 2 ranks × 1 = 1 × 2, bitwise (losses, checkpoint)" identical lora_1x2 lora_2x1
check "LoRA: the same adapter bytes" cmp -s "$tmp/lora_1x2/adapter/adapter_model.safetensors" "$tmp/lora_2x1/adapter/adapter_model.safetensors"
check "the checkpoint records its 2 ranks" grep -q '"world":2' "$tmp/lora_2x1/checkpoint/step-6/trainer.json"
check "rank 0 alone prints (one progress line per step)" test "$(grep -c '^step 6/6 | loss' "$tmp/lora_2x1.log")" -eq 1

run1 full_1x2 --grad-accum 2 --method full --lr 1e-3
runN 2 full_2x1 --grad-accum 1 --method full --lr 1e-3
check "full: 2 ranks × 1 = 1 × 2, bitwise" identical full_1x2 full_2x1
check "full: the merged model written once, the same bytes" \
    cmp -s "$tmp/full_1x2/merged/model.safetensors" "$tmp/full_2x1/merged/model.safetensors"

run1 split_1x2 --grad-accum 2 --method full --lr 1e-3 --precision bf16 --master split
runN 2 split_2x1 --grad-accum 1 --method full --lr 1e-3 --precision bf16 --master split
check "full, bf16, split masters: 2 ranks × 1 = 1 × 2, bitwise" identical split_1x2 split_2x1
# stochastic rounding draws by (seed, step, tensor, element): every rank rounds alike
run1 sr_1x2 --grad-accum 2 --method full --lr 1e-3 --precision bf16 --master bf16-sr
runN 2 sr_2x1 --grad-accum 1 --method full --lr 1e-3 --precision bf16 --master bf16-sr
check "full, bf16 weights rounded stochastically: 2 ranks × 1 = 1 × 2, bitwise" identical sr_1x2 sr_2x1

run1 dora16_1x2 --grad-accum 2 --method dora --precision bf16
runN 2 dora16_2x1 --grad-accum 1 --method dora --precision bf16
check "DoRA bf16: 2 ranks × 1 = 1 × 2, bitwise" identical dora16_1x2 dora16_2x1

run1 q8_1x2 --grad-accum 2 --method qlora --optimizer adamw8bit
runN 2 q8_2x1 --grad-accum 1 --method qlora --optimizer adamw8bit
check "QLoRA + 8-bit AdamW: 2 ranks × 1 = 1 × 2, bitwise" identical q8_1x2 q8_2x1

run1 lora_1x3 --grad-accum 3
runN 3 lora_3x1 --grad-accum 1
check "LoRA: 3 ranks × 1 = 1 × 3, bitwise" identical lora_1x3 lora_3x1

runN 2 lora_2x1_b --grad-accum 1 --stop-after 3
check "2 ranks: a stop after 3 steps writes no adapter" test ! -e "$tmp/lora_2x1_b/adapter"
runN 2 lora_2x1_b --grad-accum 1 --resume "$tmp/lora_2x1_b"
check "2 ranks: 3 + resume 3 = 6, bitwise" identical lora_2x1 lora_2x1_b

# --- within tolerance: two micro-batches per rank -----------------------------------------------
run1 lora_1x4 --grad-accum 4
run1 lora_1x4_bf16 --grad-accum 4 --precision bf16
runN 2 lora_2x2 --grad-accum 2
check "2 ranks × 2 is not bitwise 1 × 4 (the sums' order differs)" different lora_1x4 lora_2x2
"$compare" tolerance --oracle "$tmp/lora_1x4" --same "$tmp/lora_1x4_bf16" --candidate "$tmp/lora_2x2" \
    --name "2 ranks × 2 against 1 × 4" >"$tmp/tol_2x2.log" 2>&1
check "2 ranks × 2 against 1 × 4: within train_compare's tolerance ($(head -1 "$tmp/tol_2x2.log"))" test $? -eq 0

runN 2 lora_2x2_r --grad-accum 2 --stop-after 3
run1 lora_2x2_r --grad-accum 4 --resume "$tmp/lora_2x2_r"
check "a 2 × 2 checkpoint resumes on 1 rank × 4 (exit $?)" test -s "$tmp/lora_2x2_r/adapter/adapter_model.safetensors"
check "... saying that it is not bitwise" grep -q 'written by a job of 2 ranks, this one has 1.*not bitwise' "$tmp/lora_2x2_r.log"
"$compare" tolerance --oracle "$tmp/lora_1x4" --same "$tmp/lora_1x4_bf16" --candidate "$tmp/lora_2x2_r" \
    --name "2 × 2, resumed on 1 × 4" >"$tmp/tol_r.log" 2>&1
check "... within tolerance of the uninterrupted run ($(head -1 "$tmp/tol_r.log"))" test $? -eq 0
runN 2 lora_2x2_s --grad-accum 2 --stop-after 3
"$bin" "${common[@]}" --grad-accum 2 --out "$tmp/lora_2x2_s" --resume "$tmp/lora_2x2_s" >"$tmp/refused.log" 2>&1
check "a 2 × 2 checkpoint on 1 rank × 2 is refused (exit $?, 1), naming the step sizes" \
    grep -q 'refine: .*--grad-accum 2 on 2 ranks, this run has [0-9]* and 2 on 1: the sequences per optimizer step (micro-batch × grad-accum × ranks)' "$tmp/refused.log"

# --- faults -------------------------------------------------------------------------------------
# Rank 1 runs its own signal when rank 0's first checkpoint is there; `exec` keeps its pid the one
# mpirun started. The run is long (it never ends on its own).
long=(--model "$tmp/model" --data "$tmp/data.txt" --seq 16 --micro-batch 2 --grad-accum 1 --max-steps 100000
    --warmup 1 --eval-every 0 --lr 1e-3 --rank 4 --alpha 8 --seed 7 --checkpoint-every 10)
fault_run() { # fault_run OUT SIGNAL: 2 ranks, rank 1 gets SIGNAL after the first checkpoint
    local out=$1 sig=$2
    timeout 120 "$mpirun_bin" -np 2 bash -c '
        if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then
            ( for i in $(seq 600); do grep -qs step- "$1/checkpoint/LATEST" && break; sleep 0.1; done
              kill -'"$sig"' $$ ) &
        fi
        shift; exec "$@"' fault "$tmp/$out" "$bin" "${long[@]}" --out "$tmp/$out" >"$tmp/$out.log" 2>&1 </dev/null
}
start=$(date +%s)
fault_run killed KILL
rc=$?
check "rank 1 killed: the job ends (exit status $rc) in $(($(date +%s) - start)) s" test $rc -ne 0 -a $rc -ne 124
check "... the launcher names rank 1" grep -q 'rank 1 with PID .* exited on signal 9' "$tmp/killed.log"
k=$(sed -n 's/step-\([0-9]*\)/\1/p' "$tmp/killed/checkpoint/LATEST")
timeout 300 "$mpirun_bin" -np 2 "$bin" "${long[@]}" --out "$tmp/killed" --resume "$tmp/killed" --stop-after 5 \
    >"$tmp/killed_resume.log" 2>&1 </dev/null
check "... resuming from its checkpoint (step $k) runs (exit $?)" grep -q "resumed from .* at step $k" "$tmp/killed_resume.log"
timeout 300 "$mpirun_bin" -np 2 "$bin" "${long[@]}" --out "$tmp/unkilled" --stop-after $((k + 5)) \
    >"$tmp/unkilled.log" 2>&1 </dev/null
check "... and continues bitwise as the run that was never interrupted" identical unkilled killed

start=$(date +%s)
REFINE_COMM_TIMEOUT=3 fault_run stopped STOP
rc=$?
check "rank 1 stopped (SIGSTOP): the job ends (exit status $rc) in $(($(date +%s) - start)) s" test $rc -ne 0 -a $rc -ne 124
check "... rank 0 names rank 1: waited on, no answer to the roll call" \
    grep -q 'refine: rank 0: .*waiting on rank 1 after 3 s.*no answer within 2 s from rank 1 ' "$tmp/stopped.log"

mkdir -p "$tmp/r0" "$tmp/r1"
cp "$tmp/data.txt" "$tmp/r0/data.txt"
{ cat "$tmp/data.txt"; echo "one more line on rank 1"; } >"$tmp/r1/data.txt"
cp -r "$tmp/model" "$tmp/r0/model"
cp -r "$tmp/model" "$tmp/r1/model"
# rank 1's model: one byte of one weight changed (still a valid model)
size=$(stat -c %s "$tmp/r1/model/model.safetensors")
printf '\x11' | dd of="$tmp/r1/model/model.safetensors" bs=1 seek=$((size - 3)) conv=notrunc 2>/dev/null
per_rank() { # per_rank OUT ARGS...: every rank in its own folder r<rank>
    local out=$1
    shift
    timeout 120 "$mpirun_bin" -np 2 bash -c 'cd "$1/r$OMPI_COMM_WORLD_RANK" && shift && exec "$@"' x "$tmp" "$bin" "$@" \
        --out "$tmp/$out" >"$tmp/$out.log" 2>&1 </dev/null
}
per_rank mismatch_data --model "$tmp/model" --data data.txt --seq 16 --max-steps 6
check "different data on rank 1: exit $?, named at start" \
    grep -q "refine: rank 0: the ranks must train the same thing, but rank 1's training data (--data) differ" \
    "$tmp/mismatch_data.log"
per_rank mismatch_model --model model --data "$tmp/data.txt" --seq 16 --max-steps 6
check "a different model file on rank 1: named at start" \
    grep -q "rank 1's model files (--model) differ from rank 0's" "$tmp/mismatch_model.log"
timeout 120 "$mpirun_bin" -np 2 bash -c 'exec "$@" --lr $((OMPI_COMM_WORLD_RANK + 1))e-3' x "$bin" \
    --model "$tmp/model" --data "$tmp/data.txt" --seq 16 --max-steps 6 --out "$tmp/mismatch_opts" \
    >"$tmp/mismatch_opts.log" 2>&1 </dev/null
check "different options on rank 1: named at start" grep -q "rank 1's options differ" "$tmp/mismatch_opts.log"
runN 2 g16_2x1 --method full --lr 1e-3 --grad-dtype bf16
rc=$?
check "--grad-dtype bf16 under 2 ranks: exit $rc (non-zero), refused as one-process only" \
    test $rc -ne 0 -a "$(grep -c "^refine: rank [01]: --grad-dtype bf16 runs in one process" "$tmp/g16_2x1.log")" -ge 1
check "a plain //ref:train links no MPI library" test "$(ldd "$bin" | grep -c libmpi)" -eq 0

if [ $fail -ne 0 ]; then
    for f in "$tmp"/*.log; do echo "== $f"; tail -n 12 "$f"; done
fi
echo "ref_train_mpi_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
