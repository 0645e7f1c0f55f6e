#!/usr/bin/env bash
# tools/multi_gpu.sh — refine on the GPUs of one host (README, "Several GPUs and hosts"): the data
# parallel trainer's parity and faults, and the scaling benchmark beside HF + PEFT under torch DDP.
#
#   tools/multi_gpu.sh BUNDLE [--gpus N] [--peer DDP_PEER_PY] [--only parity|sharded|bench]
#                      [--models tiny|all|smollm2] [--workloads REGEX]
#
# BUNDLE is what `tools/gpu_bundle.sh BUNDLE --with-openmpi //gpu:train //gpu:bench //ref:train
# //tests/parity:train_compare` made; its mpi_env.sh provides mpirun and NCCL. Run from the
# repository root. N: the GPUs to use (default: every GPU nvidia-smi lists).
#
# Parity (the tiny Llama and Qwen2 golden models; SmolLM2 too with --models all, when its GGUF is
# in the cache), every method (lora, dora, qlora, qdora, full, and on the tiny Llama full with 8-bit
# AdamW, full with split masters, whose optimizer stays whole on every rank, and — N > 1 — full
# with the gradients sharded too, ZeRO-2), 20 steps (train_parity.sh's settings):
#   N = 1, a host of one GPU: `mpirun -np 1 gpu_train ...` — the NCCL path: bucketed all-reduces,
#     the loss summed, the host's bounded waits — is bitwise the plain `gpu_train ...`
#     (train_compare identical), and its log's job line names NCCL;
#   N > 1: `mpirun -np N gpu_train ... --grad-accum A` (A = 1, and 2 on the tiny models) against the
#     CPU oracle with accumulation N·A (ref_train fp32, with ref_train bf16 as the same-precision
#     yardstick: train_compare tolerance, tests/parity/train_compare.c's rule); two identical runs
#     of N GPUs bitwise; full fine-tuning with --shard-optimizer on bitwise off; on 2 GPUs
#     --shard-gradients on bitwise off (one micro-batch a rank: each sum is one addition either way);
#     a stop after 10
#     steps resumed on N GPUs bitwise the uninterrupted run; a rank killed (kill -9) after the first
#     checkpoint: the job ends, the launcher naming the rank; a rank stopped (SIGSTOP): the others
#     end the job within REFINE_COMM_TIMEOUT (20 s here), naming it; SIGTERM to one rank: every
#     rank checkpoints and exits 0 and the resume is bitwise — where the build handles SIGTERM
#     (else that check says so and is skipped).
# Scaling: gpu_bench under mpirun -np 1 and -np N for Llama-3.2-1B LoRA and full (ZeRO-2 where it
# saves memory, and ZeRO-1: --shard-gradients off), Llama-3.1-8B LoRA and DoRA, 16×512 per GPU (8B
# DoRA with --recompute attn when 16×512 does not fit), and on 4 or more GPUs Llama-3.1-8B full with
# --recompute layer (ZeRO-2; ZeRO-1 beside it, which may not fit); the peer
# (--peer ../shared/bench/ddp_peer.py: HF + PEFT, Llama-3.2-1B LoRA, torch DDP over NCCL, and its
# NCCL all-reduce bus bandwidth) with torchrun at 1 and N GPUs, in the same command. The table gives
# the job's tokens/s, per GPU, the speed-up over one GPU at the same micro-batch, the exposed
# communication per step, and PERFORMANCE.md's targets (adapters ≥ 1.97× on 2 GPUs and ≥ 7.8× on 8;
# full fine-tuning ≥ 1.9× / ≥ 7.5×).
# --models smollm2: the parity of SmolLM2 alone (every method, no job-level checks).
# --only sharded: of the parity, only the sharded optimizer's and gradients' bitwise checks (N > 1);
# --workloads: only the scaling workloads whose line ("llama-3.2-1b full --shard-gradients off")
# matches the extended regular expression.
# One line per check; the table; "multi_gpu: N passed, M failed" last; exit status 1 on a failure.
# Runs and logs stay in the folder printed first.
set -uo pipefail
usage() {
    echo "usage: tools/multi_gpu.sh BUNDLE [--gpus N] [--peer DDP_PEER_PY] [--only parity|sharded|bench]" \
        "[--models tiny|all|smollm2] [--workloads REGEX]" >&2
    exit 1
}
[ $# -ge 1 ] || usage
bundle=$(cd "$1" && pwd) || usage
shift
gpus="" peer="" only="" models_arg=tiny select=.
while [ $# -gt 0 ]; do
    case $1 in
    --gpus) gpus=${2:?}; shift 2 ;;
    --peer) peer=$(cd "$(dirname "${2:?}")" && pwd)/$(basename "$2"); shift 2 ;;
    --only) only=${2:?}; shift 2 ;;
    --models) models_arg=${2:?}; shift 2 ;;
    --workloads) select=${2:?}; shift 2 ;;
    *) usage ;;
    esac
done
[ -f tests/golden/data/e2e/llama/model.safetensors ] || { echo "multi_gpu.sh: run it from the repository root" >&2; exit 1; }
source "$bundle/mpi_env.sh"
bin=$bundle/bin
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
[ -n "$gpus" ] || gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -ge 1 ] 2>/dev/null || { echo "multi_gpu.sh: no GPU found (nvidia-smi -L)" >&2; exit 1; }
artifacts=${REFINE_CACHE:-$HOME/.cache/refine}
tmp=$(mktemp -d /tmp/multi_gpu.XXXXXX)
export REFINE_CACHE=$tmp/cache
echo "multi_gpu: $gpus GPU(s), mpirun $(command -v mpirun || echo MISSING), NCCL ${REFINE_NCCL_LIBRARY:-from the library path}; runs and logs in $tmp"
source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
skip() { echo "skip $*"; }
identical() { "$bin/parity_train_compare" identical "$tmp/runs/$1" "$tmp/runs/$2" >"$tmp/logs/cmp.$1.$2" 2>&1 ||
    { tail -3 "$tmp/logs/cmp.$1.$2"; return 1; }; }
mkdir -p "$tmp/runs" "$tmp/logs" "$tmp/models"

# ---- models, data, flags (tests/parity/train_parity.sh's) ----------------------------------------
declare -A model_path model_flags model_data
for i in $(seq 1 120); do
    echo "In the beginning $i the model learned that line $i follows line $((i - 1)), and so on."
done >"$tmp/tiny.txt"
for m in llama qwen2; do
    mkdir -p "$tmp/models/tiny-$m"
    cp "tests/golden/data/e2e/$m/config.json" "tests/golden/data/e2e/$m/model.safetensors" "$tmp/models/tiny-$m/"
    cp tests/unit/testdata/bytes_tokenizer.json "$tmp/models/tiny-$m/tokenizer.json"
    model_path[tiny-$m]=$tmp/models/tiny-$m model_flags[tiny-$m]="--seq 64 --micro-batch 2" model_data[tiny-$m]=$tmp/tiny.txt
done
models=(tiny-llama tiny-qwen2)
gguf=$artifacts/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ "$models_arg" = smollm2 ] && models=()
if [ "$models_arg" != tiny ] && [ -s "$gguf" ] && [ -s "$artifacts/corpus/kjv.txt" ]; then
    head -n 3000 "$artifacts/corpus/kjv.txt" >"$tmp/kjv3000.txt"
    model_path[smollm2]=$gguf model_flags[smollm2]="--seq 32 --micro-batch 2" model_data[smollm2]=$tmp/kjv3000.txt
    models+=(smollm2)
fi
methods_of() {
    if [ "$1" = tiny-llama ]; then
        echo "lora dora qlora qdora full full-adamw8bit full-split $([ "$N" -gt 1 ] && echo full-zero2)"
    else
        echo "lora dora qlora qdora full"
    fi
}
flags_of() { # model method: everything but --model --data --out --grad-accum --precision
    local lr targets="" method="--method $2"
    case $1-$2 in tiny-*-full*) lr=1e-3 ;; tiny-*) lr=1e-2 ;; *-full*) lr=1e-4 ;; *) lr=1e-3 ;; esac
    case $1-$2 in smollm2-dora | smollm2-qdora) targets="--targets q,v" ;; esac
    [ "$2" = full-adamw8bit ] && method="--method full --optimizer adamw8bit"
    [ "$2" = full-split ] && method="--method full --master split" # the optimizer whole on every rank
    [ "$2" = full-zero2 ] && method="--method full --shard-gradients on"
    [ "$2" = full-adamw8bit-zero2 ] && method="--method full --optimizer adamw8bit --shard-gradients on"
    echo "${model_flags[$1]} $method $targets --max-steps 20 --warmup 2 --eval-every 10 --eval-batches 2 --lr $lr" \
        "--rank 8 --alpha 16 --seed 7"
}
run() { # run NAME RANKS(0: no launcher) BINARY MODEL METHOD FLAGS...: a run into runs/NAME, log logs/NAME.log
    local name=$1 n=$2 b=$3 model=$4 method=$5
    shift 5
    local -a f
    read -ra f <<<"$(flags_of "$model" "$method")"
    local -a cmd=("$b" --model "${model_path[$model]}" --data "${model_data[$model]}" "${f[@]}" --out "$tmp/runs/$name" "$@")
    if [ "$n" -eq 0 ]; then
        timeout 1200 "${cmd[@]}" >"$tmp/logs/$name.log" 2>&1
    else
        timeout 1200 mpirun -np "$n" "${cmd[@]}" >"$tmp/logs/$name.log" 2>&1 </dev/null
    fi
}

# ---- parity --------------------------------------------------------------------------------------
N=$gpus
if [ "$only" != bench ]; then
    for model in $([ "$only" != sharded ] && echo "${models[@]}"); do
        for method in $(methods_of "$model"); do
            key=$model-$method
            if [ "$N" -eq 1 ]; then
                run "$key-plain" 0 "$bin/gpu_train" "$model" "$method" --grad-accum 2
                run "$key-np1" 1 "$bin/gpu_train" "$model" "$method" --grad-accum 2
                check "$key: mpirun -np 1 (NCCL) is bitwise the plain run" identical "$key-plain" "$key-np1"
                check "$key: ... through NCCL (the job line)" grep -q '^job: NCCL' "$tmp/logs/$key-np1.log"
                continue
            fi
            accs="1"
            case $model in tiny-*) accs="1 2" ;; esac
            for A in $accs; do
                run "$key-ref$((N * A))-fp32" 0 "$bin/ref_train" "$model" "$method" --grad-accum $((N * A)) --precision fp32 &
                run "$key-ref$((N * A))-bf16" 0 "$bin/ref_train" "$model" "$method" --grad-accum $((N * A)) --precision bf16 &
                run "$key-gpu${N}x$A" "$N" "$bin/gpu_train" "$model" "$method" --grad-accum "$A"
                wait
                "$bin/parity_train_compare" tolerance --oracle "$tmp/runs/$key-ref$((N * A))-fp32" \
                    --same "$tmp/runs/$key-ref$((N * A))-bf16" --candidate "$tmp/runs/$key-gpu${N}x$A" \
                    --name "$key ${N}x$A" >"$tmp/logs/tol.$key.$A" 2>&1
                check "$(head -1 "$tmp/logs/tol.$key.$A" | sed 's/^train_compare tolerance //')" test $? -eq 0
            done
        done
    done
    [ "$models_arg" = smollm2 ] && [ ${#models[@]} -eq 0 ] && check "SmolLM2's GGUF and corpus in $artifacts" false
    if [ "$N" -gt 1 ] && [ "$models_arg" != smollm2 ]; then
        m=tiny-llama
        run twice-a "$N" "$bin/gpu_train" $m lora --grad-accum 1
        run twice-b "$N" "$bin/gpu_train" $m lora --grad-accum 1
        check "$N GPUs: two identical LoRA runs are bitwise equal" identical twice-a twice-b
        run shard-on "$N" "$bin/gpu_train" $m full --grad-accum 1 --shard-optimizer on
        run shard-off "$N" "$bin/gpu_train" $m full --grad-accum 1 --shard-optimizer off
        check "$N GPUs: full fine-tuning, the sharded optimizer is bitwise the unsharded" identical shard-on shard-off
        run shard8-on "$N" "$bin/gpu_train" $m full-adamw8bit --grad-accum 1 --shard-optimizer on
        run shard8-off "$N" "$bin/gpu_train" $m full-adamw8bit --grad-accum 1 --shard-optimizer off
        check "$N GPUs: full, 8-bit AdamW: sharded bitwise unsharded" identical shard8-on shard8-off
        run zero2 "$N" "$bin/gpu_train" $m full-zero2 --grad-accum 1
        run zero2-8 "$N" "$bin/gpu_train" $m full-adamw8bit-zero2 --grad-accum 1
        check "$N GPUs: ZeRO-2 runs name it" grep -q 'gradients sharded over the ranks' "$tmp/logs/zero2.log"
        if [ "$N" -eq 2 ]; then
            check "2 GPUs: full, the gradients sharded (ZeRO-2) bitwise the optimizer alone (ZeRO-1)" identical zero2 shard-on
            check "2 GPUs: full, 8-bit AdamW, ZeRO-2 bitwise ZeRO-1" identical zero2-8 shard8-on
        fi
        for method in $([ "$only" != sharded ] && echo lora full full-zero2); do
            run "resume-$method" "$N" "$bin/gpu_train" $m $method --grad-accum 1 --stop-after 10
            run "resume-$method" "$N" "$bin/gpu_train" $m $method --grad-accum 1 --resume "$tmp/runs/resume-$method"
            run "whole-$method" "$N" "$bin/gpu_train" $m $method --grad-accum 1
            check "$N GPUs, $method: a stop after 10 steps and a resume are bitwise the uninterrupted run" \
                identical "whole-$method" "resume-$method"
        done
        # faults: rank 1 gets a signal once rank 0's first checkpoint is there (a long run)
        fault() { # fault NAME SIGNAL
            local -a f
            read -ra f <<<"$(flags_of $m lora)"
            timeout 600 mpirun -np "$N" bash -c '
                if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then
                    ( for i in $(seq 3000); do grep -qs step- "$1/checkpoint/LATEST" && break; sleep 0.1; done
                      kill -'"$2"' $$ ) &
                fi
                shift 2; exec "$@"' x "$tmp/runs/$1" "$2" "$bin/gpu_train" --model "${model_path[$m]}" \
                --data "${model_data[$m]}" "${f[@]}" --max-steps 100000 --checkpoint-every 5 --out "$tmp/runs/$1" \
                >"$tmp/logs/$1.log" 2>&1 </dev/null
        }
    fi
    if [ "$N" -gt 1 ] && [ "$only" != sharded ] && [ "$models_arg" != smollm2 ]; then
        start=$(date +%s)
        fault killed KILL
        rc=$?
        check "a rank killed: the job ends (exit $rc) in $(($(date +%s) - start)) s, the launcher naming rank 1" \
            grep -q 'rank 1 .*exited on signal 9' "$tmp/logs/killed.log"
        start=$(date +%s)
        REFINE_COMM_TIMEOUT=20 fault stopped STOP
        rc=$?
        check "a rank stopped: the others end the job (exit $rc) in $(($(date +%s) - start)) s, naming rank 1" \
            grep -qE 'refine: rank [0-9]+: .*(waiting on rank 1 |no answer within [0-9]+ s from rank 1)' "$tmp/logs/stopped.log"
        fault termed TERM
        rc=$?
        if [ $rc -eq 0 ] && [ -s "$tmp/runs/termed/checkpoint/LATEST" ]; then
            k=$(sed -n 's/step-\([0-9]*\)/\1/p' "$tmp/runs/termed/checkpoint/LATEST")
            check "SIGTERM to rank 1: every rank checkpoints step $k and exits 0" test -n "$k"
        else
            skip "SIGTERM to rank 1 ended the job with exit status $rc and no checkpoint: this build does not stop on signals"
        fi
    fi
fi

# ---- scaling -------------------------------------------------------------------------------------
declare -A tps per eff exposed mem peer_tps
if [ "$only" != parity ] && [ "$only" != sharded ]; then
    field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1" | head -1 | tr -d '"'; }
    workloads=("llama-3.2-1b lora" "llama-3.2-1b full" "llama-3.2-1b full --shard-gradients off" "llama-3.1-8b lora"
        "llama-3.1-8b dora")
    [ "$N" -ge 4 ] && workloads+=("llama-3.1-8b full --recompute layer" \
        "llama-3.1-8b full --recompute layer --shard-gradients off")
    mapfile -t workloads < <(printf '%s\n' "${workloads[@]}" | grep -E -- "$select")
    for w in "${workloads[@]}"; do
        set -- $w
        model=$1 method=$2
        shift 2
        for n in 1 $([ "$N" -gt 1 ] && echo "$N"); do
            # one GPU's 8B full: a run of its own; one GPU with --shard-gradients off: the same run as without
            case "$w $n" in "llama-3.1-8b full"*" 1" | *"--shard-gradients off 1") continue ;; esac
            name=bench-$(echo "$w" | tr -c 'a-z0-9.\n' '-')-$n
            timeout 1200 mpirun -np "$n" "$bin/gpu_bench" --model "$model" --method "$method" --micro-batch 16 --seq 512 \
                "$@" >"$tmp/logs/$name.json" 2>"$tmp/logs/$name.err" </dev/null
            if ! grep -q tokens_per_s "$tmp/logs/$name.json" && grep -q 'does not fit' "$tmp/logs/$name.err" &&
                [ $# -eq 0 ]; then
                timeout 1200 mpirun -np "$n" "$bin/gpu_bench" --model "$model" --method "$method" --micro-batch 16 \
                    --seq 512 --recompute attn >"$tmp/logs/$name.json" 2>"$tmp/logs/$name.err" </dev/null
            fi
            if ! grep -q tokens_per_s "$tmp/logs/$name.json" && grep -q 'does not fit' "$tmp/logs/$name.err"; then
                skip "bench $w on $n GPU(s): $(grep -o 'does not fit.*' "$tmp/logs/$name.err" | head -c 300)"
                continue
            fi
            check "bench $w on $n GPU(s): one JSON line" grep -q tokens_per_s "$tmp/logs/$name.json"
            cat "$tmp/logs/$name.json"
            tps[$w $n]=$(field "$tmp/logs/$name.json" tokens_per_s)
            per[$w $n]=$(field "$tmp/logs/$name.json" tokens_per_s_per_gpu)
            eff[$w $n]=$(field "$tmp/logs/$name.json" scaling_efficiency)
            exposed[$w $n]=$(field "$tmp/logs/$name.json" exposed_comm_ms)
            mem[$w $n]=$(field "$tmp/logs/$name.json" peak_mem_GiB)
        done
    done
    if [ -n "$peer" ]; then
        for n in 1 $([ "$N" -gt 1 ] && echo "$N"); do
            timeout 1200 python3 -m torch.distributed.run --standalone --nproc_per_node="$n" "$peer" \
                >"$tmp/logs/peer-$n.json" 2>"$tmp/logs/peer-$n.err"
            check "the peer (HF + PEFT, torch DDP) on $n GPU(s)" grep -q tokens_per_s_total "$tmp/logs/peer-$n.json"
            cat "$tmp/logs/peer-$n.json"
            peer_tps[$n]=$(sed -n 's/.*"tokens_per_s_total": \([0-9.]*\).*/\1/p' "$tmp/logs/peer-$n.json" | head -1)
        done
    else
        skip "the peer: no --peer ddp_peer.py given"
    fi
    echo
    printf '%-56s %4s %12s %12s %9s %9s %10s %8s %12s %9s  %s\n' workload GPUs "tok/s job" "tok/s GPU" "× 1 GPU" \
        "in-proc" "exposed" "GiB/GPU" "peer tok/s" "peer ×" target
    for w in "${workloads[@]}"; do
        for n in 1 $([ "$N" -gt 1 ] && echo "$N"); do
            t=${tps[$w $n]:-}
            t1=${tps[$w 1]:-${tps[$(echo "$w" | cut -d' ' -f1-2) 1]:-}}
            x=$(awk -v a="$t" -v b="$t1" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')
            target="-"
            case "$w $n" in *full*\ 2) target="≥ 1.9×" ;; *full*\ 8) target="≥ 7.5×" ;; *\ 2) target="≥ 1.97×" ;; *\ 8) target="≥ 7.8×" ;; esac
            p="-" px="-"
            if [ "$w" = "llama-3.2-1b lora" ] && [ -n "${peer_tps[$n]:-}" ]; then
                p=${peer_tps[$n]}
                px=$(awk -v a="$p" -v b="${peer_tps[1]:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
            fi
            printf '%-56s %4s %12s %12s %9s %9s %10s %8s %12s %9s  %s\n' "$w" "$n" "${t:--}" "${per[$w $n]:--}" "$x" \
                "${eff[$w $n]:--}" "${exposed[$w $n]:--} ms" "${mem[$w $n]:--}" "$p" "$px" "$target"
        done
    done
    grep -h allreduce_MB "$tmp"/logs/peer-*.json 2>/dev/null
fi
echo "multi_gpu: $pass passed, $fail failed"
[ $fail -eq 0 ]
