#!/usr/bin/env bash
# gpu_train_cli_test.sh — //gpu:train's command line, on any machine (no GPU needed):
#   - it takes exactly //ref:train's flags (one table, train/options.c) — same --help flag list;
#   - --precision fp32 is refused with one message pointing to //ref:train (exit status 1);
#     --grad-dtype bf16 with an adapter method is refused with one message (exit status 1), and so is
#     --grad-dtype bf16 under mpirun, by every rank (where mpirun is installed);
#   - on a machine without a CUDA device it says so, points to //ref:train, and exits 1 before
#     reading the model or the data, --precision fp8 included (and //gpu:bench --precision fp8)
#     (skipped where a device answers nvidia-smi), while `//gpu:bench --plan-only --memory-limit G`
#     plans a card of G GiB there (the longest sequence, a plan that does not fit: exit 1);
#   - //gpu:bench reads the same flag table: every flag it lists that the trainers take has the
#     trainers' default, --micro-batch and its alias --batch are there, the trainers' data and
#     output flags are refused by name (exit status 1), and its own flags are refused by the
#     trainers.
set -uo pipefail
usage="usage: gpu_train_cli_test.sh GPU_TRAIN REF_TRAIN GPU_BENCH"
gpu=${1:?$usage}
ref=${2:?$usage}
bench=${3:?$usage}
tmp=${TEST_TMPDIR:-/tmp}/gpu_train_cli_test.$$
mkdir -p "$tmp"
source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
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
"$gpu" --method lora --grad-dtype bf16 --model "$tmp/none" >"$tmp/g16.log" 2>&1
rc=$?
check "--grad-dtype bf16 with lora: exit status $rc (1), one message" \
    test $rc -eq 1 -a "$(grep -c '^refine: --grad-dtype bf16 is for --method full' "$tmp/g16.log")" -eq 1 \
    -a "$(wc -l <"$tmp/g16.log")" -eq 1

"$ref" --recompute-mlp --model "$tmp/none" >"$tmp/rmlp.log" 2>&1
rc=$?
check "//ref:train --recompute-mlp: exit status $rc (1), one message pointing to //gpu:train" \
    test $rc -eq 1 -a "$(grep -c '^refine: --recompute-mlp .*//gpu:train' "$tmp/rmlp.log")" -eq 1 \
    -a "$(wc -l <"$tmp/rmlp.log")" -eq 1

"$ref" --keep-mlp-input --model "$tmp/none" >"$tmp/kmlp.log" 2>&1
rc=$?
check "//ref:train --keep-mlp-input: exit status $rc (1), one message pointing to //gpu:train" \
    test $rc -eq 1 -a "$(grep -c '^refine: --keep-mlp-input .*//gpu:train' "$tmp/kmlp.log")" -eq 1 \
    -a "$(wc -l <"$tmp/kmlp.log")" -eq 1
"$ref" --keep-norms --model "$tmp/none" >"$tmp/knorm.log" 2>&1
rc=$?
check "//ref:train --keep-norms: exit status $rc (1), one message pointing to //gpu:train" \
    test $rc -eq 1 -a "$(grep -c '^refine: --keep-norms .*//gpu:train' "$tmp/knorm.log")" -eq 1 \
    -a "$(wc -l <"$tmp/knorm.log")" -eq 1
"$gpu" --recompute-mlp --keep-mlp-input --model "$tmp/none" >"$tmp/both.log" 2>&1
rc=$?
check "--recompute-mlp with --keep-mlp-input: exit status $rc (1), one message" \
    test $rc -eq 1 -a "$(grep -c '^refine: --recompute-mlp and --keep-mlp-input' "$tmp/both.log")" -eq 1 \
    -a "$(wc -l <"$tmp/both.log")" -eq 1

"$ref" --recompute layer --mlp-chunk 64 --model "$tmp/none" >"$tmp/chunk.log" 2>&1
rc=$?
check "//ref:train --mlp-chunk 64: exit status $rc (1), one message pointing to //gpu:train" \
    test $rc -eq 1 -a "$(grep -c '^refine: --mlp-chunk .*//gpu:train' "$tmp/chunk.log")" -eq 1 \
    -a "$(wc -l <"$tmp/chunk.log")" -eq 1

for k in 2 auto; do
    "$ref" --recompute layer --recompute-keep $k --model "$tmp/none" >"$tmp/keep.log" 2>&1
    rc=$?
    check "//ref:train --recompute-keep $k: exit status $rc (1), one message pointing to //gpu:train" \
        test $rc -eq 1 -a "$(grep -c '^refine: --recompute-keep .*//gpu:train' "$tmp/keep.log")" -eq 1 \
        -a "$(wc -l <"$tmp/keep.log")" -eq 1
done

# Under a launcher, --grad-dtype bf16 is refused by every rank before any device work (the ranks'
# sum of bf16 gradients is not specified yet): on any machine with mpirun.
source tests/unit/mpi_env.sh || exit 1
if mpirun_missing; then
    echo "skip mpirun is not installed: the launcher refusal of --grad-dtype bf16 is not checked"
else
    mpi 2 "$bench" --model llama-3.2-1b --method full --grad-dtype bf16 --plan-only --memory-limit 80 \
        >"$tmp/g16mpi.log" 2>&1
    rc=$?
    # (the first rank to fail aborts the job: the other may not get to print)
    check "mpirun -np 2 //gpu:bench --grad-dtype bf16: exit status $rc (non-zero), a rank says one process" \
        test $rc -ne 0 -a "$(grep -c '^refine: rank [01]: --grad-dtype bf16 runs in one process' "$tmp/g16mpi.log")" -ge 1
fi

if nvidia-smi -L >/dev/null 2>&1; then
    echo "skip a CUDA device answers here: the no-device message is not checked"
else
    "$gpu" --model "$tmp/missing-model" >"$tmp/nodev.log" 2>&1
    rc=$?
    check "no CUDA device: exit status $rc (1), says so and points to //ref:train, before reading the model" \
        test $rc -eq 1 -a "$(grep -c '^refine: no CUDA device.*//ref:train' "$tmp/nodev.log")" -eq 1 \
        -a "$(grep -c missing-model "$tmp/nodev.log")" -eq 0
    "$gpu" --precision fp8 --model "$tmp/missing-model" >"$tmp/nodev8.log" 2>&1
    rc=$?
    check "--precision fp8, no CUDA device: exit status $rc (1), one message, before reading the model" \
        test $rc -eq 1 -a "$(grep -c '^refine: no CUDA device' "$tmp/nodev8.log")" -eq 1 -a "$(wc -l <"$tmp/nodev8.log")" -eq 1
    "$bench" --precision fp8 --model llama-3.2-1b >"$tmp/bench8.log" 2>&1
    rc=$?
    check "//gpu:bench --precision fp8, no CUDA device: exit status $rc (1), one message" \
        test $rc -eq 1 -a "$(grep -c '^refine: no CUDA device' "$tmp/bench8.log")" -eq 1
    # --plan-only with --memory-limit plans a card of that size without one
    "$bench" --model llama-3.1-8b --method qlora --batch 1 --max-seq --recompute layer --offload --rank 32 \
        --memory-limit 24 --plan-only >"$tmp/plan24.json" 2>"$tmp/plan24.log"
    rc=$?
    seq=$(sed -n 's/.*"seq":\([0-9]*\).*/\1/p' "$tmp/plan24.json")
    check "bench --plan-only --max-seq --memory-limit 24, no device: exit status $rc (0), a 24 GiB card's longest 8B QLoRA sequence (${seq:-none}) in one JSON line" \
        test $rc -eq 0 -a "$(grep -c '"system":"refine-plan".*"fits":1.*"device":"none (a 24 GiB card)"' "$tmp/plan24.json")" -eq 1 \
        -a "${seq:-0}" -ge 32768 -a "${seq:-0}" -lt 262144
    # The MLP input's default: not kept where the backward forms it for free (LoRA and QLoRA without
    # dropout at rank <= 64, full fine-tuning, bf16 products) or does not read it (FP8 full
    # fine-tuning with per-tensor scaling, whose weight gradients read the forward's transposed codes):
    # 1B 16x512 plans L·N·F·2 = 2 GiB less than --keep-mlp-input, less one layer's shared buffer; kept
    # by default for DoRA, dropout and rank 128 (the same plan as --keep-mlp-input), which
    # --recompute-mlp still drops.
    plan_total() { "$bench" --model llama-3.2-1b --micro-batch 16 --seq 512 --memory-limit 80 --plan-only "$@" 2>/dev/null |
        sed -n 's/.*"plan_GiB":{"total":\([0-9.]*\).*/\1/p'; }
    less_by_2gib() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { d = b - a; exit !(a > 0 && d > 1.874 && d < 1.876) }'; }
    for m in lora qlora "lora --rank 64" full "full --precision fp8"; do
        # shellcheck disable=SC2086 # the method's flags are words
        a=$(plan_total --method $m) b=$(plan_total --method $m --keep-mlp-input)
        check "bench --plan-only 1B $m: the MLP input not kept by default (${a:-?} GiB; --keep-mlp-input ${b:-?})" \
            less_by_2gib "$a" "$b"
    done
    # --keep-norms: each layer's n1 and n2 at their folded strides (2112 columns each at 1B LoRA, r 16):
    # 16 · 8192 · 4224 · 2 bytes = 1.031 GiB more; with --recompute it is refused with one message
    a=$(plan_total --method lora) b=$(plan_total --method lora --keep-norms)
    check "bench --plan-only 1B lora --keep-norms: 1.031 GiB more (${a:-?} → ${b:-?} GiB)" \
        awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { d = b - a; exit !(a > 0 && d > 1.025 && d < 1.04) }'
    "$bench" --model llama-3.2-1b --method lora --micro-batch 16 --seq 512 --recompute layer --keep-norms \
        --memory-limit 80 --plan-only >"$tmp/knr.json" 2>"$tmp/knr.log"
    rc=$?
    check "bench --plan-only --keep-norms --recompute layer: exit status $rc (1), one message" \
        test $rc -eq 1 -a "$(grep -c '^refine: --keep-norms with --recompute layer' "$tmp/knr.log")" -eq 1
    for flags in "--method dora" "--method lora --dropout 0.1" "--method lora --rank 128"; do
        # shellcheck disable=SC2086 # the flags are words
        a=$(plan_total $flags) b=$(plan_total $flags --keep-mlp-input) r=$(plan_total $flags --recompute-mlp)
        check "bench --plan-only 1B $flags: the MLP input kept by default (${a:-?} GiB = ${b:-?}), --recompute-mlp drops it (${r:-?})" \
            test -n "$a" -a "$a" = "$b" -a -n "$r" -a "$(less_by_2gib "$r" "$a" && echo yes)" = yes
    done
    # --recompute-keep: 1B full with the 6-byte state and three layers kept plans under 10 GiB (9.54:
    # two layers' sets beyond --recompute layer's 8.57); without recomputation it is refused with one
    # message naming what it needs
    "$bench" --model llama-3.2-1b --method full --micro-batch 16 --seq 512 --recompute layer --recompute-keep 3 \
        --optimizer adamw8bit --master bf16-sr --grad-dtype bf16 --memory-limit 80 --plan-only >"$tmp/keep10.json" 2>&1
    rc=$?
    total=$(sed -n 's/.*"plan_GiB":{"total":\([0-9.]*\).*/\1/p' "$tmp/keep10.json")
    check "bench --plan-only: 1B full --recompute layer --recompute-keep 3 plans ${total:-?} GiB (9 to 10): exit status $rc (0)" \
        test $rc -eq 0 -a "$(awk -v t="${total:-0}" 'BEGIN {print (t > 9 && t < 10)}')" -eq 1
    # --recompute-keep auto fills the card: 1B full on an 11 GiB card (10.25 GiB of budget) keeps 5 layers
    # (10.01 GiB: the kept layers' MLP inputs are formed again in the backward by default, not kept);
    # with --keep-mlp-input 4 (10.02 GiB; 5 would be 10.5)
    for k in 5 4; do
        keep_flag=()
        [ $k -eq 4 ] && keep_flag=(--keep-mlp-input)
        "$bench" --model llama-3.2-1b --method full --micro-batch 16 --seq 512 --recompute layer --recompute-keep auto \
            --optimizer adamw8bit --master bf16-sr --grad-dtype bf16 --memory-limit 11 --plan-only "${keep_flag[@]}" \
            >"$tmp/keepa.json" 2>"$tmp/keepa.log"
        rc=$?
        check "bench --plan-only --recompute-keep auto on an 11 GiB card${keep_flag[*]:+ ${keep_flag[*]}}: exit status $rc (0), $k layers kept, fits" \
            test $rc -eq 0 -a "$(grep -c "^recompute-keep auto: $k layers kept from recomputation" "$tmp/keepa.log")" -eq 1 \
            -a "$(grep -c '"fits":1' "$tmp/keepa.json")" -eq 1
    done
    "$bench" --model llama-3.2-1b --method lora --micro-batch 16 --seq 512 --recompute-keep auto --memory-limit 80 \
        --plan-only >"$tmp/keepan.json" 2>"$tmp/keepan.log"
    rc=$?
    check "bench --plan-only --recompute-keep auto without --recompute: exit status $rc (1), one message" \
        test $rc -eq 1 -a "$(grep -c '^refine: --recompute-keep auto: the layers kept from recomputation need --recompute layer or attn' "$tmp/keepan.log")" -eq 1 \
        -a "$(wc -l <"$tmp/keepan.log")" -eq 1
    "$bench" --model llama-3.2-1b --method lora --micro-batch 16 --seq 512 --recompute-keep 3 --memory-limit 80 \
        --plan-only >"$tmp/keepn.json" 2>"$tmp/keepn.log"
    rc=$?
    check "bench --plan-only --recompute-keep 3 without --recompute: exit status $rc (1), one message" \
        test $rc -eq 1 -a "$(grep -c '^refine: --recompute-keep 3: the layers kept from recomputation need --recompute layer or attn' "$tmp/keepn.log")" -eq 1 \
        -a "$(wc -l <"$tmp/keepn.log")" -eq 1
    "$bench" --model llama-3.1-8b --method lora --micro-batch 16 --seq 512 --memory-limit 16 --plan-only \
        >"$tmp/plan16.json" 2>"$tmp/plan16.log"
    rc=$?
    check "bench --plan-only: 8B LoRA 16×512 on a 16 GiB card does not fit: exit status $rc (1), \"fits\":0" \
        test $rc -eq 1 -a "$(grep -c '"fits":0' "$tmp/plan16.json")" -eq 1
    # Llama-3.1-8B full fine-tuning on one 80 GB card: with split masters, 8-bit AdamW and layer
    # recomputation it plans to fit (bf16, and fp8 whose trained codes then go a layer at a time);
    # with fp32 masters it does not
    for p in bf16 fp8; do
        "$bench" --model llama-3.1-8b --method full --micro-batch 4 --seq 512 --recompute layer --optimizer adamw8bit \
            --master split --precision $p --memory-limit 80 --plan-only >"$tmp/plan8full_$p.json" 2>&1
        rc=$?
        check "bench --plan-only: 8B full 4×512 $p, split masters + 8-bit AdamW + layer recompute, on an 80 GiB card: exit status $rc (0), fits" \
            test $rc -eq 0 -a "$(grep -c '"fits":1' "$tmp/plan8full_$p.json")" -eq 1
    done
    "$bench" --model llama-3.1-8b --method full --micro-batch 4 --seq 512 --recompute layer --optimizer adamw8bit \
        --memory-limit 80 --plan-only >"$tmp/plan8full32.json" 2>&1
    rc=$?
    check "bench --plan-only: the same with fp32 masters does not fit: exit status $rc (1)" \
        test $rc -eq 1 -a "$(grep -c '"fits":0' "$tmp/plan8full32.json")" -eq 1
    "$bench" --model llama-3.2-1b --plan-only >"$tmp/plannolimit.log" 2>&1
    rc=$?
    check "bench --plan-only without --memory-limit, no device: exit status $rc (1), says so" \
        test $rc -eq 1 -a "$(grep -c '^refine: no CUDA device' "$tmp/plannolimit.log")" -eq 1
fi
# //gpu:bench: one flag table with the trainers
"$bench" --help >"$tmp/bench.help"
flag_lines() { sed -n 's/^  \(--[a-z0-9-]*\) .*/\1/p' "$1"; }
defaults() { awk '/^  --/ {f=$1} /\(default: / {sub(/.*\(default: /, ""); sub(/\)$/, ""); print f, $0}' "$1"; }
"$ref" --help >"$tmp/ref.help"
defaults "$tmp/ref.help" | sort >"$tmp/ref.defaults"
defaults "$tmp/bench.help" | sort >"$tmp/bench.defaults"
shared=$(join "$tmp/ref.defaults" "$tmp/bench.defaults" | wc -l)
check "//gpu:bench: its $shared flags shared with the trainers have the trainers' defaults" \
    test "$shared" -ge 15 -a "$(join -v 2 "$tmp/ref.defaults" "$tmp/bench.defaults" | grep -cvE '^--(batch|steps|warmup-steps|profile|ungrouped|unfolded|max-seq|plan-only) ')" -eq 0
check "//gpu:bench takes --micro-batch, --batch, --seq, --method, --rank, --recompute, --optimizer, --precision, --fp8-recipe, --base-dtype" \
    test "$(flag_lines "$tmp/bench.help" | grep -cxE -- '--(micro-batch|batch|seq|method|rank|recompute|optimizer|precision|fp8-recipe|base-dtype)')" -eq 10
"$bench" --data x.txt >"$tmp/bench_data.log" 2>&1
rc=$?
check "//gpu:bench --data: exit status $rc (1), refused by name" \
    test $rc -eq 1 -a "$(grep -c '^refine: --data is a flag of the trainers' "$tmp/bench_data.log")" -eq 1
"$ref" --steps 3 >"$tmp/ref_steps.log" 2>&1
rc=$?
check "//ref:train --steps: exit status $rc (1), refused by name" \
    test $rc -eq 1 -a "$(grep -c '^refine: --steps is a flag of the benchmark' "$tmp/ref_steps.log")" -eq 1
"$ref" --seq auto >"$tmp/ref_auto.log" 2>&1
rc=$?
check "//ref:train --seq auto: exit status $rc (1), it plans no memory" \
    test $rc -eq 1 -a "$(grep -c '^refine: --seq auto searches a memory plan' "$tmp/ref_auto.log")" -eq 1
echo "gpu_train_cli_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
