#!/usr/bin/env bash
# train_parity.sh — the GPU trainer against the CPU trainer, whole runs (DESIGN.md "Testing"):
#
#   train_parity.sh REF_TRAIN GPU_TRAIN TRAIN_COMPARE [--only tiny|smollm2] [--variants LIST] [--ref-cache DIR]
#                   [--cpu-only]
#
# Run from the repository root: by Bazel (//tests/parity:train_parity, tag "gpu"), or on a GPU
# host without Bazel with the three binaries copied there. Models: the tiny Llama-3-like and the
# tiny Qwen2 golden models (tests/golden/data/e2e, byte-level tokenizer; --only tiny) and
# SmolLM2-135M-Instruct (the GGUF in $REFINE_CACHE or ~/.cache/refine, on the first 3000 lines of
# its King James Bible; --only smollm2). For each model and each method (lora, dora, qlora,
# qdora, full; full-split: --master split, ref/master_pair.h; full-g16: --grad-dtype bf16, NUMERICS.md
# §5.6; full-w16: --master bf16, the bf16 weights alone, §5.5; -w16sr: --master bf16-sr, rounded
# stochastically), and each precision variant, three
# runs with identical flags:
#   REF_TRAIN --precision fp32   the oracle
#   REF_TRAIN --precision P      the naive same-precision run
#   GPU_TRAIN --precision P      the candidate
# The variants (--variants, default all): bf16; fp8-delayed, fp8-current, fp8-block (--precision fp8
# --fp8-recipe R: the FP8 rows, NUMERICS.md §6.6); bf16-base8 (lora and dora: --precision bf16
# --base-dtype fp8, whose oracle is --precision fp32 --base-dtype fp8, the same FP8-rounded base).
# The CPU half runs the oracles and same-precision runs of the variants wanted only (bf16-base8
# alone: lora's and dora's).
# and `train_compare tolerance` (the rules: tests/parity/train_compare.c; per run the losses may be
# 5× and one tensor 6× as far from the oracle as the same-precision run, the parameters together
# 2×), and over all runs the geometric mean of their loss ratios must be at most 2 (tier (c)'s
# 2×, where it is a stable statistic; one suite per family, bf16 and fp8). Besides:
#   - the oracle trains (its validation loss falls), so that the comparison is of a run that moves;
#   - determinism (tiny Llama LoRA and DoRA, SmolLM2 LoRA, full fine-tuning with split masters and
#     AdamW or the 8-bit optimizer, the latter with bf16 gradients too, and with bf16 weights (nearest
#     and stochastic rounding), the 8-bit optimizer and bf16 gradients, bf16; tiny Llama LoRA and full fine-tuning
#     fp8-delayed, DoRA fp8-block, SmolLM2 LoRA fp8-current): a second identical GPU run is bitwise
#     the first (`train_compare identical`); kill and resume: a GPU run with --checkpoint-every 5
#     is killed (-9) once its LATEST names step-10 or later, rerun with --resume to the end, and
#     must be bitwise the uninterrupted run (if it finished before the kill, that is said, and the
#     resume of the finished run must still be identical);
#   - CUDA graphs change no number (the runs without them, REFINE_CUDA_GRAPHS=0, are bitwise the same);
#   - the weight-gradient stream changes no number (LoRA's folded dB and dA on the step's stream,
#     REFINE_WG_STREAM=0, with and without CUDA graphs: bitwise the same);
#   - recomputation changes no number (--recompute-keep, --recompute-mlp and --keep-mlp-input too; LoRA, QDoRA, full; full fine-tuning under FP8 with --recompute
#     layer or attn, whose trained weights are then cast a layer at a time, in every recipe);
#   - --base-dtype fp8 under --precision fp8 changes memory, not numbers: bitwise the run with the
#     bf16 base, its Wᵀ codes kept or (--recompute attn, --recompute-mlp) formed a layer at a time (tiny Llama LoRA
#     fp8-delayed, DoRA fp8-block, tiny Qwen2 LoRA fp8-current);
#   - bad input: GPU_TRAIN with a missing --data file exits 1 with one "refine:" message.
# Settings (flags_of): 20 optimizer steps, warm-up 2, evaluation every 10 steps on 2 batches,
# rank 8, alpha 16, seed 7. Tiny models: 120 generated lines (as tests/unit/ref_train_test.sh
# writes them), --seq 64 --micro-batch 2 --grad-accum 2 (one full attention tile per sequence),
# lr 1e-2 (full: 1e-3; they are random models). SmolLM2: --seq 32 --micro-batch 2 --grad-accum 1
# (a partial tile, the real widths and GQA 9:3), lr 1e-3 (full: 1e-4), DoRA and QDoRA on q,v only:
# the reference DoRA costs 13 s per step on all seven targets. Reference runs on 2 cores (docs/
# RESULTS.md, 2026-11-27): the tiny models under 2 s each; SmolLM2 16-46 s each, the 8-bit AdamW
# ones 56 s (192 s before their requantization went by table) — the bf16 rows' 16 runs took 1142 s
# one at a time with the slower 8-bit runs; a host with 16 cores runs 8 at a time.
# --ref-cache DIR: the CPU runs are reused from DIR/<model>-<method>-{fp32,bf16} when their key
# (sha256 of REF_TRAIN, of the model files and of the data, and the flags) matches, and written
# there otherwise, each run's as soon as it finishes (a CPU half cut short keeps what it completed;
# tests/unit/train_parity_cpu_half_test.sh): the CPU half can run ahead on another machine and be
# carried to the GPU host, or be spread over several time-limited commands on one host.
# --cpu-only: only the CPU half (the ref runs and the oracle check); GPU_TRAIN is not run.
# Prints one line per check and "train_parity: N passed, M failed"; exit status 1 on any failure.
# Run folders and logs stay in the temporary folder printed at the start (under Bazel, the logs
# go to the test's undeclared outputs).
set -uo pipefail

usage() {
    echo "usage: train_parity.sh REF_TRAIN GPU_TRAIN TRAIN_COMPARE [--only tiny|smollm2] [--variants LIST] [--ref-cache DIR] [--cpu-only]" >&2
    exit 1
}
[ $# -ge 3 ] || usage
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
ref=$(abs "$1")
gpu=$(abs "$2")
cmp=$(abs "$3")
shift 3
only=""
ref_cache=""
cpu_only=0
variants_wanted="bf16 fp8-delayed fp8-current fp8-block bf16-base8"
while [ $# -gt 0 ]; do
    case $1 in
    --only)
        case ${2:-} in tiny | smollm2) ;; *) usage ;; esac
        only=$2
        shift 2
        ;;
    --variants)
        [ $# -ge 2 ] || usage
        for v in $2; do
            case $v in bf16 | fp8-delayed | fp8-current | fp8-block | bf16-base8) ;; *) usage ;; esac
        done
        variants_wanted=$2
        shift 2
        ;;
    --ref-cache)
        [ $# -ge 2 ] || usage
        ref_cache=$(abs "$2")
        shift 2
        ;;
    --cpu-only)
        cpu_only=1
        shift
        ;;
    *) usage ;;
    esac
done
[ -f tests/golden/data/e2e/llama/model.safetensors ] || {
    echo "train_parity.sh: run it from the repository root (tests/golden/data/e2e not found)" >&2
    exit 1
}
for b in "$ref" "$cmp"; do [ -x "$b" ] || { echo "train_parity.sh: $b is not an executable" >&2; exit 1; }; done
[ $cpu_only -eq 1 ] || [ -x "$gpu" ] || { echo "train_parity.sh: $gpu is not an executable" >&2; exit 1; }

artifacts=${REFINE_CACHE:-$HOME/.cache/refine}
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/train_parity.XXXXXX")
logs=${TEST_UNDECLARED_OUTPUTS_DIR:-$tmp/logs}
mkdir -p "$logs" "$tmp/runs"
[ -n "$ref_cache" ] && mkdir -p "$ref_cache"
export REFINE_CACHE=$tmp/cache # the token caches of these runs stay with them
echo "train_parity: runs in $tmp, logs in $logs"

source tests/common/checks.sh || exit 1 # check_log NAME LOG COMMAND..., check; pass=0 fail=0 failed_logs=()
now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
val_losses() { grep '"kind":"eval"' "$1/metrics.jsonl" | sed 's/.*"val_loss":\([^,]*\).*/\1/'; }

# ---- models and data -----------------------------------------------------------------------------
declare -A model_path model_hash model_flags model_data
for i in $(seq 1 120); do
    echo "In the beginning $i the model learned that line $i follows line $((i - 1)), and so on."
done >"$tmp/tiny.txt"
tiny_flags="--seq 64 --micro-batch 2 --grad-accum 2"
setup_tiny() { # name golden-folder
    mkdir -p "$tmp/models/$1"
    cp "tests/golden/data/e2e/$2/config.json" "tests/golden/data/e2e/$2/model.safetensors" "$tmp/models/$1/"
    cp tests/unit/testdata/bytes_tokenizer.json "$tmp/models/$1/tokenizer.json"
    model_path[$1]=$tmp/models/$1
    model_hash[$1]=$(cat "$tmp/models/$1"/* | sha256sum | cut -d' ' -f1)
    model_flags[$1]=$tiny_flags
    model_data[$1]=$tmp/tiny.txt
}
models=()
setup_tiny tiny-llama llama # always: the bad-input check uses it
[ "$only" != smollm2 ] && setup_tiny tiny-qwen2 qwen2 && models+=(tiny-llama tiny-qwen2)
if [ "$only" != tiny ]; then
    gguf=$artifacts/models/SmolLM2-135M-Instruct.Q4_1.gguf
    check "SmolLM2 GGUF and corpus in $artifacts (tools/setup.sh fetches them)" \
        test -s "$gguf" -a -s "$artifacts/corpus/kjv.txt"
    if [ -s "$gguf" ] && [ -s "$artifacts/corpus/kjv.txt" ]; then
        head -n 3000 "$artifacts/corpus/kjv.txt" >"$tmp/kjv3000.txt"
        model_path[smollm2]=$gguf
        model_hash[smollm2]=$(sha256sum "$gguf" | cut -d' ' -f1)
        model_flags[smollm2]="--seq 32 --micro-batch 2 --grad-accum 1"
        model_data[smollm2]=$tmp/kjv3000.txt
        models+=(smollm2)
    fi
fi
methods=(lora dora qlora qdora full)
# The methods run on a model: the five, and on the tiny Llama also full fine-tuning with the 8-bit
# optimizer (its embedding and MLP weights are large enough for 8-bit states).
# Full fine-tuning with split masters (--master split: the bf16 copy and the low halves) on every
# model, with the 8-bit optimizer as well on the tiny Llama.
# bf16 gradients (--grad-dtype bf16) on every model: with AdamW and fp32 masters (the tiny models),
# with split masters and the 8-bit optimizer (the peers' 8 bytes a parameter; tiny Llama, SmolLM2).
# bf16 weights (--master bf16, no fp32 master): with AdamW (the tiny models), and with the 8-bit
# optimizer and bf16 gradients (6 bytes a parameter; tiny Llama, SmolLM2); rounded stochastically
# (--master bf16-sr) with AdamW (tiny Qwen2) and with the 8-bit optimizer and bf16 gradients (tiny Llama).
methods_of() {
    case $1 in
    tiny-llama) echo "${methods[*]} full-adamw8bit full-split full-adamw8bit-split full-g16 full-adamw8bit-split-g16" \
        "full-w16 full-adamw8bit-w16-g16 full-adamw8bit-w16sr-g16" ;;
    tiny-qwen2) echo "${methods[*]} full-split full-g16 full-w16 full-w16sr" ;;
    *) echo "${methods[*]} full-split full-adamw8bit-split-g16 full-adamw8bit-w16-g16" ;;
    esac
}
ref_sha=$(sha256sum "$ref" | cut -d' ' -f1)
# The precision variants of a (model, method): those wanted, bf16-base8 for the methods with a
# frozen bf16 base (lora, dora) only.
variants_of() {
    local v out=""
    for v in $variants_wanted; do
        [ "$v" = bf16-base8 ] && [ "$2" != lora ] && [ "$2" != dora ] && continue
        out="$out $v"
    done
    echo "$out"
}
# The flags of a run variant (the candidates' and the references', the oracles fp32 and fp32-base8).
variant_flags() {
    case $1 in
    fp32) echo "--precision fp32" ;;
    fp32-base8) echo "--precision fp32 --base-dtype fp8" ;;
    bf16) echo "--precision bf16" ;;
    bf16-base8) echo "--precision bf16 --base-dtype fp8" ;;
    fp8-*) echo "--precision fp8 --fp8-recipe ${1#fp8-}" ;;
    esac
}
oracle_of() { if [ "$1" = bf16-base8 ]; then echo fp32-base8; else echo fp32; fi; }
family_of() { case $1 in fp8-*) echo fp8 ;; *) echo bf16 ;; esac; }
# The run folder of a GPU candidate: the bf16 ones keep their names of before the variants.
gpu_name() { if [ "$3" = bf16 ]; then echo "$1-$2-gpu"; else echo "$1-$2-gpu-$3"; fi; }

# The flags of a (model, method) run but --model, --data, --out and --precision.
flags_of() { # model method
    local lr
    case $1-$2 in
    tiny-*-full*) lr=1e-3 ;;
    tiny-*) lr=1e-2 ;; # the tiny models are random: they learn the text at a higher rate
    *-full*) lr=1e-4 ;;
    *) lr=1e-3 ;;
    esac
    local targets=""
    # The reference DoRA forms W + sBA for its row norms and recomputes x Wᵀ in backward, in
    # plain loops: 13 s per step on SmolLM2 with all seven targets on 2 cores, about 1 s with q,v.
    case $1-$2 in smollm2-dora | smollm2-qdora) targets="--targets q,v" ;; esac
    local method="--method $2"
    case $2 in
    full-adamw8bit) method="--method full --optimizer adamw8bit" ;;
    full-split) method="--method full --master split" ;;
    full-adamw8bit-split) method="--method full --optimizer adamw8bit --master split" ;;
    full-g16) method="--method full --grad-dtype bf16" ;;
    full-adamw8bit-split-g16) method="--method full --optimizer adamw8bit --master split --grad-dtype bf16" ;;
    full-w16) method="--method full --master bf16" ;;
    full-adamw8bit-w16-g16) method="--method full --optimizer adamw8bit --master bf16 --grad-dtype bf16" ;;
    full-w16sr) method="--method full --master bf16-sr" ;;
    full-adamw8bit-w16sr-g16) method="--method full --optimizer adamw8bit --master bf16-sr --grad-dtype bf16" ;;
    esac
    echo "${model_flags[$1]} $method $targets --max-steps 20 --warmup 2 --eval-every 10 --eval-batches 2" \
        "--lr $lr --rank 8 --alpha 16 --seed 7"
}
train_args() { # model method out: the run's whole command line after the binary, into args
    local -a f
    read -ra f <<<"$(flags_of "$1" "$2")"
    args=(--model "${model_path[$1]}" --data "${model_data[$1]}" "${f[@]}" --out "$3")
}
run_train() { # binary model method out log extra-flags...
    local bin=$1 model=$2 method=$3 out=$4 log=$5
    shift 5
    train_args "$model" "$method" "$out"
    "$bin" "${args[@]}" "$@" >"$log" 2>&1
}

# ---- the CPU half: the oracle and the same-precision run, cached with --ref-cache ------------------
# Independent runs, run side by side on a large host: TRAIN_PARITY_JOBS at a time (default: one
# per two cores), each with its share of the cores for OpenBLAS unless OPENBLAS_NUM_THREADS is set.
cpu_start=$(now)
jobs_max=${TRAIN_PARITY_JOBS:-$(($(nproc) / 2))}
[ "$jobs_max" -ge 1 ] || jobs_max=1
[ -n "${OPENBLAS_NUM_THREADS:-}" ] || [ "$jobs_max" -eq 1 ] || export OPENBLAS_NUM_THREADS=$(($(nproc) / jobs_max))
mkdir -p "$tmp/status"
declare -A oracle same ref_key
ref_todo=()
refruns_of() { # the reference runs of a (model, method): the oracles its variants need, and its
    # same-precision runs (none for a method no wanted variant applies to: bf16-base8 alone runs
    # lora's and dora's, not every method's fp32 oracle)
    local v out="" o
    for v in $(variants_of "$1" "$2"); do
        o=$(oracle_of "$v")
        case " $out " in *" $o "*) ;; *) out="$out $o" ;; esac
        out="$out $v"
    done
    echo "$out"
}
for model in "${models[@]}"; do
    for method in $(methods_of "$model"); do
        for prec in $(refruns_of "$model" "$method"); do
            name=$model-$method-$prec
            dir=$tmp/runs/$name
            ref_key[$name]=$(printf 'ref_train %s\nmodel %s\ndata %s\nflags %s %s\n' "$ref_sha" \
                "${model_hash[$model]}" "$(sha256sum <"${model_data[$model]}" | cut -d' ' -f1)" \
                "$(flags_of "$model" "$method")" "$(variant_flags "$prec")")
            if [ -n "$ref_cache" ]; then
                dir=$ref_cache/$name
                if [ -s "$dir/checkpoint/LATEST" ] && [ "$(cat "$dir/parity_key" 2>/dev/null)" = "${ref_key[$name]}" ]; then
                    echo "0 reused" >"$tmp/status/$name"
                else
                    rm -rf "$dir"
                    ref_todo+=("$model $method $prec $dir")
                fi
            else
                ref_todo+=("$model $method $prec $dir")
            fi
            case $prec in fp32*) oracle[$model-$method-$prec]=$dir ;; *) same[$model-$method-$prec]=$dir ;; esac
        done
    done
done
ref_job() { # model method run-variant out: the run's exit status and time into the status folder
    local t0 rc
    t0=$(now)
    # shellcheck disable=SC2046 # the variant's flags are words
    run_train "$ref" "$1" "$2" "$4" "$logs/$1-$2-$3.log" $(variant_flags "$3")
    rc=$?
    # A cached run is usable as soon as it has finished: its key goes in now, so that a CPU half
    # stopped part way (a time limit, preemption) keeps every run it completed for the next attempt.
    if [ "$rc" -eq 0 ] && [ -n "$ref_cache" ]; then echo "${ref_key[$1-$2-$3]}" >"$4/parity_key"; fi
    echo "$rc $(seconds_since "$t0") s" >"$tmp/status/$1-$2-$3"
}
for job in "${ref_todo[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    # shellcheck disable=SC2086 # four words
    ref_job $job &
done
wait
for model in "${models[@]}"; do
    for method in $(methods_of "$model"); do
        for prec in $(refruns_of "$model" "$method"); do
            name=$model-$method-$prec
            rc=1 how="no status"
            [ -s "$tmp/status/$name" ] && read -r rc how <"$tmp/status/$name"
            case $prec in
            fp32*) dir=${oracle[$model-$method-$prec]} what="the $prec oracle run" ;;
            *) dir=${same[$model-$method-$prec]} what="the $prec same-precision run" ;;
            esac
            check_log "$model $method: $what ($how)" "$logs/$name.log" test "$rc" -eq 0
        done
        for prec in $(refruns_of "$model" "$method"); do
            case $prec in fp32) what="the oracle" ;; fp32*) what="the $prec oracle" ;; *) continue ;; esac
            v=$(val_losses "${oracle[$model-$method-$prec]}" 2>/dev/null | paste -sd' ')
            check "$model $method: $what trains (validation loss: $v)" \
                awk -v v="$v" 'BEGIN { n = split(v, a, " "); exit !(n >= 2 && a[n] + 0 < a[1] + 0) }'
        done
    done
done
echo "     CPU half: $(seconds_since "$cpu_start") s (${#ref_todo[@]} runs, $jobs_max at a time; the rest reused)"

# ---- the GPU half ----------------------------------------------------------------------------------
compare() { # name log mode args...: train_compare's lines, its verdict as the check
    local name=$1 log=$2
    shift 2
    "$cmp" "$@" >"$log" 2>&1
    local rc=$?
    check_log "$name: $(head -n 1 "$log")" "$log" test $rc -eq 0
    [ $rc -eq 0 ] || tail -n +2 "$log" | sed 's/^/     /'
}

# Alive and not a zombie (a finished child that the shell has not reaped yet).
alive() {
    local s
    s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
    [ -n "$s" ] && [ "$s" != Z ]
}
latest_step() { sed -n 's/^step-\([0-9]*\)$/\1/p' "$1/checkpoint/LATEST" 2>/dev/null; }

kill_and_resume() { # model method uninterrupted-run [variant]
    local model=$1 method=$2 base=$3 variant=${4:-bf16} name=$1-$2-gpu-resume
    [ "$variant" != bf16 ] && name=$name-$variant
    local dir=$tmp/runs/$name log=$logs/$name.log what="$1 $2"
    [ "$variant" != bf16 ] && what="$what $variant"
    local -a vf
    read -ra vf <<<"$(variant_flags "$variant")"
    train_args "$model" "$method" "$dir"
    "$gpu" "${args[@]}" "${vf[@]}" --checkpoint-every 5 >"$log" 2>&1 & # $!: the trainer itself
    local pid=$! deadline=$((SECONDS + 900)) n="" rc how
    while alive $pid && [ $SECONDS -lt $deadline ]; do
        n=$(latest_step "$dir")
        [ -n "$n" ] && [ "$n" -ge 10 ] && break
        sleep 0.01
    done
    kill -9 $pid 2>/dev/null
    { wait $pid; } 2>/dev/null # no "Killed" notice from the shell: the check below says it
    rc=$?
    n=$(latest_step "$dir")
    case $rc in
    137) how="killed with LATEST step-${n:-none}" ;;
    0) how="finished before the kill (LATEST step-${n:-none})" ;;
    *) how="exited with status $rc before the kill" ;;
    esac
    check_log "$what: kill -9 once LATEST >= step-10: $how" "$log" \
        test "${n:-0}" -ge 10 -a \( "$rc" -eq 137 -o "$rc" -eq 0 \)
    run_train "$gpu" "$model" "$method" "$dir" "$logs/$name-2.log" "${vf[@]}" --checkpoint-every 5 --resume "$dir"
    check_log "$what: the resumed run exits 0" "$logs/$name-2.log" test $? -eq 0
    local before=$fail
    compare "$what: kill and resume == uninterrupted" "$logs/$name-compare.log" identical "$base" "$dir"
    # a resume that differs: both halves' logs too (where each stopped and started)
    [ $fail -eq $before ] || failed_logs+=("$log" "$logs/$name-2.log")
}

declare -A loss_ratios # per family, bf16 and fp8: the runs' loss ratios
if [ $cpu_only -eq 0 ]; then
    for model in "${models[@]}"; do
        for method in $(methods_of "$model"); do
            for variant in $(variants_of "$model" "$method"); do
                name=$(gpu_name "$model" "$method" "$variant")
                cname=$model-$method what="$model $method"
                [ "$variant" != bf16 ] && cname=$cname-$variant what="$what $variant"
                t0=$(now)
                # shellcheck disable=SC2046 # the variant's flags are words
                run_train "$gpu" "$model" "$method" "$tmp/runs/$name" "$logs/$name.log" $(variant_flags "$variant")
                check_log "$what: the GPU run exits 0 ($(seconds_since "$t0") s)" "$logs/$name.log" test $? -eq 0
                compare "$what: tolerance" "$logs/$name-compare.log" tolerance --name "$cname" \
                    --oracle "${oracle[$model-$method-$(oracle_of "$variant")]}" \
                    --same "${same[$model-$method-$variant]}" --candidate "$tmp/runs/$name"
                fam=$(family_of "$variant")
                loss_ratios[$fam]="${loss_ratios[$fam]:-} $(sed -n '1s/.* loss_ratio=\([^ ]*\) .*/\1/p' "$logs/$name-compare.log")"
                case $model-$method-$variant in
                tiny-llama-lora-bf16 | tiny-llama-dora-bf16 | smollm2-lora-bf16 | tiny-llama-lora-fp8-delayed | \
                    tiny-llama-full-fp8-delayed | tiny-llama-dora-fp8-block | smollm2-lora-fp8-current | \
                    tiny-llama-full-split-bf16 | tiny-llama-full-adamw8bit-split-bf16 | \
                    tiny-llama-full-adamw8bit-split-g16-bf16 | tiny-llama-full-adamw8bit-w16-g16-bf16 | \
                    tiny-llama-full-adamw8bit-w16sr-g16-bf16 | tiny-llama-full-adamw8bit-w16sr-g16-fp8-delayed)
                    # shellcheck disable=SC2046
                    run_train "$gpu" "$model" "$method" "$tmp/runs/$name-2" "$logs/$name-2.log" $(variant_flags "$variant")
                    check_log "$what: a second GPU run exits 0" "$logs/$name-2.log" test $? -eq 0
                    compare "$what: two GPU runs are identical" "$logs/$name-2-compare.log" identical \
                        "$tmp/runs/$name" "$tmp/runs/$name-2"
                    kill_and_resume "$model" "$method" "$tmp/runs/$name" "$variant"
                    ;;
                esac
                case $model-$method-$variant in
                tiny-llama-lora-fp8-delayed | tiny-llama-dora-fp8-block | tiny-qwen2-lora-fp8-current)
                    # shellcheck disable=SC2046
                    run_train "$gpu" "$model" "$method" "$tmp/runs/$name-b8" "$logs/$name-b8.log" \
                        $(variant_flags "$variant") --base-dtype fp8
                    check_log "$what --base-dtype fp8: exits 0" "$logs/$name-b8.log" test $? -eq 0
                    compare "$what: --base-dtype fp8 == bf16 base, bitwise" "$logs/$name-b8-compare.log" identical \
                        "$tmp/runs/$name" "$tmp/runs/$name-b8"
                    # with recomputation the FP8-stored base forms its Wᵀ a layer at a time: the same codes
                    # shellcheck disable=SC2046
                    run_train "$gpu" "$model" "$method" "$tmp/runs/$name-b8a" "$logs/$name-b8a.log" \
                        $(variant_flags "$variant") --base-dtype fp8 --recompute attn
                    check_log "$what --base-dtype fp8 --recompute attn: exits 0" "$logs/$name-b8a.log" test $? -eq 0
                    compare "$what: --base-dtype fp8 --recompute attn == bf16 base, bitwise" "$logs/$name-b8a-compare.log" \
                        identical "$tmp/runs/$name" "$tmp/runs/$name-b8a"
                    # shellcheck disable=SC2046
                    run_train "$gpu" "$model" "$method" "$tmp/runs/$name-b8m" "$logs/$name-b8m.log" \
                        $(variant_flags "$variant") --base-dtype fp8 --recompute-mlp
                    check_log "$what --base-dtype fp8 --recompute-mlp: exits 0" "$logs/$name-b8m.log" test $? -eq 0
                    compare "$what: --base-dtype fp8 --recompute-mlp == bf16 base, bitwise" "$logs/$name-b8m-compare.log" \
                        identical "$tmp/runs/$name" "$tmp/runs/$name-b8m"
                    ;;
                esac
            done
        done
    done
    # Tier (c)'s 2× on the losses, over the suite of each family: one run's loss ratio scatters (log
    # standard deviation 0.39, train_compare.c), the geometric mean of n runs' ratios by 0.39/√n.
    for fam in bf16 fp8; do
        [ -n "${loss_ratios[$fam]:-}" ] || continue
        # shellcheck disable=SC2086 # the ratios are words
        g=$(printf '%s\n' ${loss_ratios[$fam]} | awk '$1 + 0 > 0 { s += log($1); n++ } END { if (n) printf "%.3f %d", exp(s / n), n }')
        check "suite $fam: the geometric mean of the runs' loss ratios, ${g% *} over ${g#* } runs, is at most 2" \
            awk -v g="${g% *}" 'BEGIN { exit !(g != "" && g + 0 <= 2) }'
    done
    # ---- the GPU trainer's own features (no CPU counterpart to compare with) ----------------------
    # (the features below compare with the bf16 runs: without the bf16 variant only the FP8
    # recomputation rows run)
    bf16_ran=0
    case " $variants_wanted " in *" bf16 "*) bf16_ran=1 ;; esac
    if [ "$only" != smollm2 ]; then
        # Recomputation re-runs the same kernels on the same inputs: bitwise the run without it.
        # Full fine-tuning under FP8 with --recompute layer or attn casts the trained weights a layer
        # at a time instead of storing every layer's codes: the same codes and records, bitwise too.
        for rc_case in "tiny-llama lora layer" "tiny-llama lora attn" "tiny-llama qdora layer" "tiny-qwen2 full attn" \
            "tiny-llama full layer fp8-delayed" "tiny-qwen2 full layer fp8-current" "tiny-llama full layer fp8-block" \
            "tiny-llama full attn fp8-delayed" "tiny-qwen2 full attn fp8-block" "tiny-llama full attn fp8-current" \
            "tiny-llama full-adamw8bit-split layer fp8-delayed" "tiny-llama full-g16 layer" \
            "tiny-llama full-adamw8bit-w16-g16 layer" "tiny-llama full-adamw8bit-w16-g16 attn fp8-delayed" \
            "tiny-qwen2 full-w16sr layer"; do
            read -r model method policy variant <<<"$rc_case"
            variant=${variant:-bf16}
            case " $variants_wanted " in *" $variant "*) ;; *) continue ;; esac
            name=$model-$method-recompute-$policy
            [ "$variant" != bf16 ] && name=$name-$variant
            # shellcheck disable=SC2046 # the variant's flags are words
            run_train "$gpu" "$model" "$method" "$tmp/runs/$name" "$logs/$name.log" $(variant_flags "$variant") \
                --recompute "$policy"
            check_log "$model $method $variant --recompute $policy: exits 0" "$logs/$name.log" test $? -eq 0
            compare "$model $method $variant: --recompute $policy == none, bitwise" "$logs/$name-compare.log" identical \
                "$tmp/runs/$(gpu_name "$model" "$method" "$variant")" "$tmp/runs/$name"
        done
        # The MLP input recomputed or kept: formed again from the same gate and up by the same
        # arithmetic (SwiGLU's forward, or the backward's pass over gate and up: LoRA's joined down
        # pass, full fine-tuning's SwiGLU backward with down's dW after it), so the runs are bitwise
        # equal. Where the default recomputes it (LoRA and full fine-tuning with bf16 products) or
        # does not read it (full fine-tuning under FP8 with per-tensor scaling and nothing recomputed:
        # down's dW reads the forward's transposed codes) the row keeps it (--keep-mlp-input);
        # elsewhere it recomputes (--recompute-mlp): adapters; full fine-tuning with its Qwen2 biases;
        # the 8-byte arrangement; under FP8's block scaling, whose down dW then waits for the formed
        # input's codes; with attention recomputation, itself bitwise none. (Full fine-tuning under
        # FP8 with per-tensor scaling and nothing recomputed keeps each input's transposed codes from
        # the forward, where recomputation recasts them: the recomputation rows above are bitwise.)
        # Likewise each layer's normalized inputs kept (--keep-norms) instead of formed again before
        # its backward: LoRA, QDoRA (whose kept o output forms h and n2 again), full fine-tuning with
        # Qwen2's biases, under FP8.
        for mlp_case in "tiny-llama lora none bf16 --keep-mlp-input" "tiny-qwen2 full none bf16 --keep-mlp-input" \
            "tiny-llama full-adamw8bit-split-g16 none bf16 --keep-mlp-input" "tiny-llama qdora attn bf16 --recompute-mlp" \
            "tiny-llama full none fp8-delayed --keep-mlp-input" "tiny-qwen2 full none fp8-block --recompute-mlp" \
            "tiny-llama full-adamw8bit-w16sr-g16 none fp8-delayed --keep-mlp-input" "tiny-llama lora none bf16 --keep-norms" \
            "tiny-llama qdora none bf16 --keep-norms" "tiny-qwen2 full none bf16 --keep-norms" \
            "tiny-llama full none fp8-delayed --keep-norms"; do
            read -r model method policy variant mlp_flag <<<"$mlp_case"
            case " $variants_wanted " in *" $variant "*) ;; *) continue ;; esac
            name=$model-$method-mlp-$policy
            [ "$mlp_flag" = --keep-norms ] && name=$model-$method-norms-$policy
            [ "$variant" != bf16 ] && name=$name-$variant
            # shellcheck disable=SC2046 # the variant's flags are words
            run_train "$gpu" "$model" "$method" "$tmp/runs/$name" "$logs/$name.log" $(variant_flags "$variant") \
                --recompute "$policy" "$mlp_flag"
            check_log "$model $method $variant $mlp_flag --recompute $policy: exits 0" "$logs/$name.log" test $? -eq 0
            compare "$model $method $variant: $mlp_flag --recompute $policy == the default, bitwise" \
                "$logs/$name-compare.log" identical "$tmp/runs/$(gpu_name "$model" "$method" "$variant")" "$tmp/runs/$name"
        done
        # Offloaded layer inputs: the same bits copied out and back, so bitwise the run without it
        # (with layer recomputation, the offload's use; with attention or no recomputation; full
        # fine-tuning, whose input gradients run down to the embedding).
        for off_case in "tiny-llama lora layer" "tiny-llama lora none" "tiny-llama qdora layer" "tiny-qwen2 full attn" \
            "tiny-llama full none"; do
            [ $bf16_ran -eq 1 ] || continue
            read -r model method policy <<<"$off_case"
            name=$model-$method-offload-$policy
            run_train "$gpu" "$model" "$method" "$tmp/runs/$name" "$logs/$name.log" --precision bf16 --recompute "$policy" \
                --offload
            check_log "$model $method --offload --recompute $policy: exits 0" "$logs/$name.log" test $? -eq 0
            compare "$model $method: --offload --recompute $policy == no offload, bitwise" "$logs/$name-compare.log" \
                identical "$tmp/runs/$model-$method-gpu" "$tmp/runs/$name"
        done
        # --recompute-keep 2 on the three-layer tiny Qwen2: layer 1 keeps its own saved set and is not
        # recomputed (layer 2, the top, never is; layer 0 is), so bitwise the run without recomputation
        # (LoRA, with offloaded inputs too; QDoRA, whose backward reads the down product; full
        # fine-tuning under attention recomputation, with bf16-sr weights, under FP8); auto keeps as
        # many as the card holds: both layers below the top here, the same run, said in the log.
        for keep_case in "tiny-qwen2 lora layer bf16 2" "tiny-qwen2 lora layer bf16 2 --offload" \
            "tiny-qwen2 qdora layer bf16 2" "tiny-qwen2 full attn bf16 2" "tiny-qwen2 full-w16sr layer bf16 2" \
            "tiny-qwen2 full layer fp8-current 2" "tiny-qwen2 lora layer bf16 auto"; do
            read -r model method policy variant keep extra <<<"$keep_case"
            case " $variants_wanted " in *" $variant "*) ;; *) continue ;; esac
            name=$model-$method-keep$keep-$policy-$variant${extra:+-offload}
            # shellcheck disable=SC2046,SC2086 # the variant's flags and the extra flag are words
            run_train "$gpu" "$model" "$method" "$tmp/runs/$name" "$logs/$name.log" $(variant_flags "$variant") \
                --recompute "$policy" --recompute-keep "$keep" $extra
            check_log "$model $method $variant --recompute $policy --recompute-keep $keep $extra: exits 0" "$logs/$name.log" \
                test $? -eq 0
            [ "$keep" = auto ] && check_log "$model $method --recompute-keep auto: 2 layers kept, said once" \
                "$logs/$name.log" test "$(grep -c '^recompute-keep auto: 2 layers kept' "$logs/$name.log")" -eq 1
            compare "$model $method $variant: --recompute $policy --recompute-keep $keep $extra == none, bitwise" \
                "$logs/$name-compare.log" identical "$tmp/runs/$(gpu_name "$model" "$method" "$variant")" "$tmp/runs/$name"
        done
        # MLP token chunks (--mlp-chunk with --recompute layer): 64 of the micro-batch's 128 rows at a
        # time, so each layer's MLP and its backward run twice; every row's products are the unchunked
        # ones but the MLP weights' gradients are summed chunk by chunk, so the run is held to the
        # oracle by the tolerance rules (LoRA; QLoRA; DoRA and QDoRA, whose row norms are formed per
        # chunk and magnitudes' gradients summed by chunk; full fine-tuning with Qwen2's biases; the
        # 8-byte arrangement with bf16 gradients, offloaded), and is deterministic and resumes bitwise.
        for ch_case in "tiny-llama lora" "tiny-llama qlora" "tiny-llama dora" "tiny-qwen2 qdora" "tiny-qwen2 full" \
            "tiny-llama full-adamw8bit-split-g16"; do
            [ $bf16_ran -eq 1 ] || continue
            read -r model method <<<"$ch_case"
            name=$model-$method-chunk
            extra=(--precision bf16 --recompute layer --mlp-chunk 64)
            [ "$method" = full-adamw8bit-split-g16 ] && extra+=(--offload)
            run_train "$gpu" "$model" "$method" "$tmp/runs/$name" "$logs/$name.log" "${extra[@]}"
            check_log "$model $method ${extra[*]}: exits 0" "$logs/$name.log" test $? -eq 0
            check_log "$model $method --mlp-chunk 64: the plan's MLP buffers hold 64 rows" "$logs/$name.log" \
                grep -q "MLP in chunks of 64 rows" "$logs/$name.log"
            compare "$model $method --mlp-chunk 64: tolerance" "$logs/$name-compare.log" tolerance \
                --name "$model-$method" --oracle "${oracle[$model-$method-fp32]}" --same "${same[$model-$method-bf16]}" \
                --candidate "$tmp/runs/$name"
            if [ "$model-$method" = tiny-llama-lora ] || [ "$model-$method" = tiny-llama-full-adamw8bit-split-g16 ]; then
                run_train "$gpu" "$model" "$method" "$tmp/runs/$name-2" "$logs/$name-2.log" "${extra[@]}"
                compare "$model $method --mlp-chunk 64: two runs identical" "$logs/$name-2-compare.log" identical \
                    "$tmp/runs/$name" "$tmp/runs/$name-2"
                run_train "$gpu" "$model" "$method" "$tmp/runs/$name-r" "$logs/$name-r1.log" "${extra[@]}" --stop-after 10
                run_train "$gpu" "$model" "$method" "$tmp/runs/$name-r" "$logs/$name-r2.log" "${extra[@]}" \
                    --resume "$tmp/runs/$name-r"
                compare "$model $method --mlp-chunk 64: stop at 10 + resume == uninterrupted" \
                    "$logs/$name-r-compare.log" identical "$tmp/runs/$name" "$tmp/runs/$name-r"
            fi
        done
        # Under FP8 with delayed scaling a chunk's codes are those of the whole tensor (the given
        # scale; its amax max-recorded over the chunks): within tolerance of the FP8 oracle pair too.
        for ch_case in "tiny-llama lora" "tiny-qwen2 qlora" "tiny-llama full"; do
            case " $variants_wanted " in *" fp8-delayed "*) ;; *) continue ;; esac
            read -r model method <<<"$ch_case"
            name=$model-$method-chunk-fp8
            # shellcheck disable=SC2046 # the variant's flags are words
            run_train "$gpu" "$model" "$method" "$tmp/runs/$name" "$logs/$name.log" $(variant_flags fp8-delayed) \
                --recompute layer --mlp-chunk 64
            check_log "$model $method fp8-delayed --recompute layer --mlp-chunk 64: exits 0" "$logs/$name.log" test $? -eq 0
            compare "$model $method fp8-delayed --mlp-chunk 64: tolerance" "$logs/$name-compare.log" tolerance \
                --name "$model-$method-fp8-delayed" --oracle "${oracle[$model-$method-fp32]}" \
                --same "${same[$model-$method-fp8-delayed]}" --candidate "$tmp/runs/$name"
        done
    fi
    if [ "$only" != smollm2 ]; then
        # CUDA graphs (the training micro-steps, on by default where eligible: gpu/llama.cu) replay the
        # same kernels on the same buffers: bitwise the run without them (REFINE_CUDA_GRAPHS=0); the
        # host's layer caches (NF4, FP8 codes) are part of a graph's key.
        for g_case in "tiny-llama lora bf16" "tiny-llama qlora bf16" "tiny-llama qdora bf16" "tiny-llama dora bf16" \
            "tiny-qwen2 full bf16" "tiny-llama full-adamw8bit-split bf16" "tiny-llama lora fp8-delayed" \
            "tiny-llama qlora fp8-current" "tiny-llama full fp8-delayed" "tiny-llama dora fp8-block" \
            "tiny-llama lora bf16-base8" "tiny-llama full-adamw8bit-split-g16 bf16" \
            "tiny-llama full-adamw8bit-w16sr-g16 bf16"; do
            read -r model method variant <<<"$g_case"
            case " $variants_wanted " in *" $variant "*) ;; *) continue ;; esac
            name=$model-$method-nographs-$variant
            # shellcheck disable=SC2046 # the variant's flags are words
            REFINE_CUDA_GRAPHS=0 run_train "$gpu" "$model" "$method" "$tmp/runs/$name" "$logs/$name.log" \
                $(variant_flags "$variant")
            check_log "$model $method $variant without CUDA graphs: exits 0" "$logs/$name.log" test $? -eq 0
            compare "$model $method $variant: CUDA graphs == none, bitwise" "$logs/$name-compare.log" identical \
                "$tmp/runs/$(gpu_name "$model" "$method" "$variant")" "$tmp/runs/$name"
        done
    fi
    if [ "$only" != smollm2 ]; then
        # The folded LoRA groups' dB and dA on their own stream (on by default where eligible:
        # gpu/llama.cu wg_join) run the same products in the same order: bitwise the run with them on
        # the step's stream (REFINE_WG_STREAM=0); with CUDA graphs and without.
        for w_case in "tiny-llama lora bf16" "tiny-qwen2 lora bf16" "tiny-llama qlora bf16"; do
            read -r model method variant <<<"$w_case"
            case " $variants_wanted " in *" $variant "*) ;; *) continue ;; esac
            for graphs in 1 0; do
                name=$model-$method-wg0-g$graphs-$variant
                # shellcheck disable=SC2046 # the variant's flags are words
                REFINE_WG_STREAM=0 REFINE_CUDA_GRAPHS=$graphs run_train "$gpu" "$model" "$method" "$tmp/runs/$name" \
                    "$logs/$name.log" $(variant_flags "$variant")
                check_log "$model $method $variant, dB and dA on the step's stream (graphs $graphs): exits 0" \
                    "$logs/$name.log" test $? -eq 0
                compare "$model $method $variant: the weight-gradient stream == none (graphs $graphs), bitwise" \
                    "$logs/$name-compare.log" identical "$tmp/runs/$(gpu_name "$model" "$method" "$variant")" \
                    "$tmp/runs/$name"
            done
        done
    fi
    if [ "$only" != smollm2 ] && [ $bf16_ran -eq 1 ]; then
        # Adapter dropout (LoRA): trains, changes the run, is deterministic, resumes bit-identically
        # (its masks are keyed by the micro-batch index).
        d=$tmp/runs/tiny-llama-lora-dropout
        run_train "$gpu" tiny-llama lora "$d" "$logs/dropout.log" --dropout 0.1
        check_log "tiny-llama lora --dropout 0.1: exits 0" "$logs/dropout.log" test $? -eq 0
        v=$(val_losses "$d" 2>/dev/null | paste -sd' ')
        check "tiny-llama lora --dropout 0.1: trains (validation loss: $v)" \
            awk -v v="$v" 'BEGIN { n = split(v, a, " "); exit !(n >= 2 && a[n] + 0 < a[1] + 0) }'
        check "tiny-llama lora --dropout 0.1: the losses differ from the run without dropout" \
            test "$(val_losses "$d" | tail -n 1)" != "$(val_losses "$tmp/runs/tiny-llama-lora-gpu" | tail -n 1)"
        run_train "$gpu" tiny-llama lora "$d-2" "$logs/dropout-2.log" --dropout 0.1
        compare "tiny-llama lora --dropout 0.1: two runs identical" "$logs/dropout-2-compare.log" identical "$d" "$d-2"
        run_train "$gpu" tiny-llama lora "$d-r" "$logs/dropout-r1.log" --dropout 0.1 --stop-after 10
        run_train "$gpu" tiny-llama lora "$d-r" "$logs/dropout-r2.log" --dropout 0.1 --resume "$d-r"
        compare "tiny-llama lora --dropout 0.1: stop at 10 + resume == uninterrupted" "$logs/dropout-r-compare.log" \
            identical "$d" "$d-r"
        # Layer recomputation with dropout: the recomputed forward draws the same masks (and forms the
        # down adapter's intermediate on the dropped input without the down product): bitwise.
        run_train "$gpu" tiny-llama lora "$d-layer" "$logs/dropout-layer.log" --dropout 0.1 --recompute layer
        check_log "tiny-llama lora --dropout 0.1 --recompute layer: exits 0" "$logs/dropout-layer.log" test $? -eq 0
        compare "tiny-llama lora --dropout 0.1: --recompute layer == none, bitwise" "$logs/dropout-layer-compare.log" \
            identical "$d" "$d-layer"
        # Dropout in MLP chunks: each chunk draws its slice of the whole tensor's masks (dropout_parity
        # checks the slices bit for bit), so the run is the unchunked dropout run's up to the MLP
        # adapters' gradient sums: deterministic, resumable, its losses within 2% of that run's.
        dc=$tmp/runs/tiny-llama-lora-dropout-chunk
        chf=(--dropout 0.1 --recompute layer --mlp-chunk 64)
        run_train "$gpu" tiny-llama lora "$dc" "$logs/dropout-chunk.log" "${chf[@]}"
        check_log "tiny-llama lora ${chf[*]}: exits 0" "$logs/dropout-chunk.log" test $? -eq 0
        a=$(val_losses "$d" | tail -n 1) b=$(val_losses "$dc" 2>/dev/null | tail -n 1)
        check "tiny-llama lora --dropout 0.1 --mlp-chunk 64: final validation loss $b within 2% of the unchunked $a" \
            awk -v a="$a" -v b="$b" 'BEGIN { exit !(b != "" && a + 0 > 0 && (b - a) / a < 0.02 && (a - b) / a < 0.02) }'
        run_train "$gpu" tiny-llama lora "$dc-2" "$logs/dropout-chunk-2.log" "${chf[@]}"
        compare "tiny-llama lora --dropout 0.1 --mlp-chunk 64: two runs identical" "$logs/dropout-chunk-2-compare.log" \
            identical "$dc" "$dc-2"
        run_train "$gpu" tiny-llama lora "$dc-r" "$logs/dropout-chunk-r1.log" "${chf[@]}" --stop-after 10
        run_train "$gpu" tiny-llama lora "$dc-r" "$logs/dropout-chunk-r2.log" "${chf[@]}" --resume "$dc-r"
        compare "tiny-llama lora --dropout 0.1 --mlp-chunk 64: stop at 10 + resume == uninterrupted" \
            "$logs/dropout-chunk-r-compare.log" identical "$dc" "$dc-r"
        # --auto-batch: the largest micro-batch the plan fits and the data fills, confirmed by a step.
        run_train "$gpu" tiny-llama lora "$tmp/runs/auto" "$logs/auto-batch.log" --auto-batch --max-steps 2 --warmup 1
        check_log "tiny-llama lora --auto-batch: exits 0, $(grep -o 'auto-batch: micro-batch [0-9]*' "$logs/auto-batch.log")" \
            "$logs/auto-batch.log" test $? -eq 0 -a "$(grep -c '^auto-batch: micro-batch [0-9]' "$logs/auto-batch.log")" -eq 1
    fi
    if [ "$only" != tiny ] && [ -n "${model_path[smollm2]:-}" ]; then
        # A plan larger than the GPU is refused before anything is allocated, naming what fits.
        run_train "$gpu" smollm2 lora "$tmp/runs/oom" "$logs/oom.log" --seq 512 --micro-batch 16384
        rc=$?
        check_log "smollm2 lora 16384x512: refused (exit status $rc, 1 expected) with the largest micro-batch that fits" \
            "$logs/oom.log" test $rc -eq 1 -a "$(grep -c '^refine: the model does not fit.*largest micro-batch that fits is [0-9]' "$logs/oom.log")" -eq 1
    fi
    run_train "$gpu" tiny-llama lora "$tmp/runs/bad" "$logs/bad-input.log" --data "$tmp/missing.txt"
    rc=$?
    check_log "GPU trainer, missing --data: exit status $rc (1 expected) and one refine: message naming the file" \
        "$logs/bad-input.log" test $rc -eq 1 -a "$(grep -c '^refine:' "$logs/bad-input.log")" -eq 1 \
        -a "$(grep -c '^refine: .*missing.txt' "$logs/bad-input.log")" -eq 1
fi

if [ $fail -ne 0 ]; then
    for f in "${failed_logs[@]}"; do
        echo "== $f"
        tail -n 5 "$f"
    done
fi
echo "train_parity: $pass passed, $fail failed"
[ $fail -eq 0 ]
