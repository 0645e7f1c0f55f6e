#!/usr/bin/env bash
# tools/bench_table.sh — refine's //gpu:bench and its peers, side by side on one GPU, for the
# workloads of docs/PERFORMANCE.md's targets table.
#
#   [PEERS=hf,compile,liger,unsloth] [REFINE_FLAGS="--precision fp8"] \
#       tools/bench_table.sh BENCH PEER.py OUTDIR [WORKLOAD...]
#
# BENCH is the //gpu:bench binary, PEER.py the peer script (hf_peer.py: transformers + PEFT; the
# Unsloth peer is unsloth_peer.py in the same folder). Each workload runs refine first (with
# REFINE_FLAGS added), then every peer of PEERS (default: hf) with the same model shape, method,
# batch, sequence length, rank 16 and alpha 32:
#   hf       HF + PEFT                                  hf_peer.py
#   compile  HF + PEFT + torch.compile                  hf_peer.py --compile
#   liger    HF + PEFT + Liger Kernel's patched Llama   hf_peer.py --liger (the liger-kernel wheel on PYTHONPATH)
#   float8   HF + torchao float8 training, compiled     hf_peer.py --float8 tensorwise --compile
#   unsloth  Unsloth                                    unsloth_peer.py (its bundle on PYTHONPATH; qlora too;
#                                                       with recompute: --checkpointing unsloth)
# refine's figure is a plain run's; a second run with --profile (PROFILE=0 skips it) records the
# step's parts, its JSON lines tagged "profiled". Every JSON line goes to OUTDIR/bench.jsonl and each
# program's output to OUTDIR/<workload>.<system>.log. A workload is "model:method:batch:seq[:recompute[:flag]]", flag
# nopeer (refine alone), adamw8bit (refine with the 8-bit optimizer, alone), offload (refine
# with --offload, beside the peers: the least-memory rows, Unsloth's offloaded checkpointing
# opposite), compact (full fine-tuning with split masters and the 8-bit optimizer, beside the
# peers: refine's least-memory optimizer state against their bf16 weights and states) or lean
# (full fine-tuning at the peers' 6 bytes a parameter: bf16 weights rounded stochastically, bf16
# gradients, the 8-bit optimizer, the MLP input recomputed; beside the peers); with none given, the
# default list below runs. A peer runs only where it has the
# method. Prints one line per workload and peer: both tokens/s, the ratio, both peak memories and
# each side's settings; a row the peer wins in speed or in memory is marked GAP. PEER_TIMEOUT=S stops a
# peer's run after S seconds (torch.compile's first compilation of a small model can take minutes):
# its row says so, an error line goes to bench.jsonl, and the table goes on.
set -u
bench=${1:?usage: tools/bench_table.sh BENCH PEER.py OUTDIR [WORKLOAD...]}
peer=${2:?usage: tools/bench_table.sh BENCH PEER.py OUTDIR [WORKLOAD...]}
out=${3:?usage: tools/bench_table.sh BENCH PEER.py OUTDIR [WORKLOAD...]}
shift 3
mkdir -p "$out"
workloads=("$@")
if [ ${#workloads[@]} -eq 0 ]; then
    workloads=(
        llama-3.2-1b:lora:16:512 llama-3.2-1b:dora:16:512 llama-3.2-1b:full:16:512
        llama-3.2-1b:full:16:512:none:adamw8bit llama-3.2-1b:full:16:512:none:compact
        llama-3.2-1b:full:16:512:none:lean llama-3.2-1b:full:16:512:layer:lean
        llama-3.2-1b:lora:16:512:layer llama-3.2-1b:lora:16:512:layer:offload llama-3.2-1b:qlora:16:512
        llama-3.2-3b:lora:16:512 llama-3.2-3b:dora:16:512 llama-3.2-3b:dora:8:512
        llama-3.2-3b:qlora:19:512:layer llama-3.2-3b:qlora:19:512:layer:offload
        llama-3.1-8b:lora:16:512:none:nopeer llama-3.1-8b:lora:8:512 llama-3.1-8b:lora:4:512:layer
        llama-3.1-8b:qlora:1:32768:layer:offload llama-3.1-8b:full:4:512:layer:compact
        smollm2-135m:lora:32:512 smollm2-135m:full:32:512
    )
fi
field() { sed -n "s/.*\"$2\": *\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"; }
for w in "${workloads[@]}"; do
    IFS=: read -r model method batch seq recompute flag <<<"$w"
    recompute=${recompute:-none}
    optimizer=adamw
    extra=()
    case ${flag:-} in
    "" | nopeer) ;;
    adamw8bit) optimizer=adamw8bit ;;
    offload) extra=(--offload) ;;
    compact) optimizer=adamw8bit extra=(--master split) ;;
    lean) optimizer=adamw8bit extra=(--master bf16-sr --grad-dtype bf16 --recompute-mlp) ;;
    *) echo "bench_table.sh: unknown flag '$flag' in $w (nopeer, adamw8bit, offload, compact, lean)" >&2; exit 1 ;;
    esac
    name="$model.$method.${batch}x$seq.$recompute${flag:+.$flag}"
    settings="--recompute $recompute${extra[*]:+ ${extra[*]}}${REFINE_FLAGS:+ $REFINE_FLAGS}"
    [ "$optimizer" != adamw ] && settings+=" --optimizer $optimizer"
    echo "== $name" >&2
    # refine's run of this workload (its output appended to its log), with any further flags
    # shellcheck disable=SC2086 # REFINE_FLAGS: words
    refine_run() { "$bench" --model "$model" --method "$method" --micro-batch "$batch" --seq "$seq" --recompute "$recompute" \
        --optimizer "$optimizer" "${extra[@]}" "$@" ${REFINE_FLAGS:-} 2>>"$out/$name.refine.log" | tee -a "$out/$name.refine.log"; }
    : >"$out/$name.refine.log"
    # refine's figure from a plain run (the peers' runs synchronize nothing between ops); then, unless
    # PROFILE=0, the same run with --profile for the step's parts (its per-part synchronization costs
    # a few percent), its JSON lines tagged "profiled"
    ours=$(refine_run | grep '^{' | tee -a "$out/bench.jsonl" | grep '"system"')
    [ "${PROFILE:-1}" != 0 ] && refine_run --profile | grep '^{' | sed 's/^{/{"profiled":1,/' >>"$out/bench.jsonl"
    t1=$(field "$ours" tokens_per_s)
    m1=$(field "$ours" peak_mem_GiB)
    if [ "${PEER:-}" = none ] || [ "${flag:-}" = nopeer ] || [ "${flag:-}" = adamw8bit ]; then
        printf '%-40s refine %8s tok/s %6s GiB [%s]\n' "$name" "${t1:-fail}" "$m1" "$settings"
        continue
    fi
    IFS=, read -ra peers <<<"${PEERS:-hf}"
    for p in "${peers[@]}"; do
        args=(--model "$model" --method "$method" --batch "$batch" --seq "$seq")
        script=$peer
        case $p in
        hf) ;;
        compile) args+=(--compile) ;;
        liger) args+=(--liger) ;;
        float8) args+=(--float8 tensorwise --compile) ;;
        unsloth) script=$(dirname "$peer")/unsloth_peer.py ;;
        *) echo "bench_table.sh: unknown peer '$p' (hf, compile, liger, float8, unsloth)" >&2; exit 1 ;;
        esac
        case $p-$method in
        unsloth-lora | unsloth-qlora | unsloth-full) ;;
        unsloth-*) continue ;;
        *-qlora | *-qdora) continue ;;
        esac
        if [ "$recompute" != none ]; then
            if [ "$p" = unsloth ]; then args+=(--checkpointing unsloth); else args+=(--recompute); fi
        fi
        theirs_settings="${args[*]:8}"
        limit=()
        [ -n "${PEER_TIMEOUT:-}" ] && limit=(timeout --kill-after=10 "$PEER_TIMEOUT")
        PYTHONUNBUFFERED=1 "${limit[@]}" python3 "$script" "${args[@]}" >"$out/$name.$p.out" 2>"$out/$name.$p.log"
        prc=$?
        cat "$out/$name.$p.out" >>"$out/$name.$p.log"
        theirs=$(grep '^{' "$out/$name.$p.out" | sed "s/^{/{\"peer\":\"$p\",/" | tee -a "$out/bench.jsonl")
        rm -f "$out/$name.$p.out"
        timed=
        [ -n "${PEER_TIMEOUT:-}" ] && { [ $prc -eq 124 ] || [ $prc -eq 137 ]; } && timed=" (stopped after ${PEER_TIMEOUT} s)"
        if [ -z "$theirs" ]; then
            why=${timed:+stopped after $PEER_TIMEOUT s: }$(tail -c 300 "$out/$name.$p.log" | tr '\n"' ' ')
            echo "{\"peer\":\"$p\",\"workload\":\"$name\",\"error\":\"$why\"}" >>"$out/bench.jsonl"
        fi
        t2=$(field "$theirs" tokens_per_s)
        m2=$(field "$theirs" peak_mem_GiB)
        ratio=$(awk -v a="${t1:-0}" -v b="${t2:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')
        gap=$(awk -v a="${t1:-0}" -v b="${t2:-0}" -v ma="${m1:-0}" -v mb="${m2:-0}" \
            'BEGIN { if (b > 0 && (a < b || (mb > 0 && ma > mb))) print "GAP" }')
        printf '%-40s refine %8s tok/s %6s GiB | %-7s %8s tok/s %6s GiB | ratio %s%s [refine %s; %s %s]%s\n' "$name" \
            "${t1:-fail}" "$m1" "$p" "${t2:--}" "$m2" "$ratio" "${gap:+ $gap}" "$settings" "$p" "${theirs_settings:-defaults}" \
            "$timed"
    done
done
