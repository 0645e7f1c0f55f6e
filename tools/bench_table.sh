#!/usr/bin/env bash
# tools/bench_table.sh — refine's //gpu:bench and the HF + PEFT peer, side by side on one GPU, for
# the workloads of docs/PERFORMANCE.md's targets table.
#
#   tools/bench_table.sh BENCH PEER.py OUTDIR [WORKLOAD...]
#
# BENCH is the //gpu:bench binary, PEER.py the peer script (hf_peer.py: transformers + PEFT). Each
# workload runs refine first, then the peer with the same model shape, method, batch, sequence
# length, rank 16 and alpha 32; every JSON line goes to OUTDIR/bench.jsonl and each program's
# output to OUTDIR/<workload>.<system>.log. A workload is "model:method:batch:seq[:recompute[:flag]]",
# flag nopeer (refine alone) or adamw8bit (refine with the 8-bit optimizer, alone); with none
# given, the default list below runs. The peer runs only where it has the method (no
# qlora/qdora), not for flagged workloads, and not at all with PEER=none. Prints one line per
# workload: both tokens/s, the ratio, both peak memories.
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
        llama-3.2-1b:full:16:512:none:adamw8bit
        llama-3.2-1b:lora:16:512:layer llama-3.2-1b:qlora:16:512
        llama-3.2-3b:lora:16:512 llama-3.2-3b:dora:16:512 llama-3.2-3b:dora:8:512
        llama-3.2-3b:qlora:19:512:layer
        llama-3.1-8b:lora:16:512:none:nopeer llama-3.1-8b:lora:4:512:layer
        smollm2-135m:lora:32:512 smollm2-135m:full:32:512
    )
fi
field() { sed -n "s/.*\"$2\": *\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"; }
for w in "${workloads[@]}"; do
    IFS=: read -r model method batch seq recompute flag <<<"$w"
    recompute=${recompute:-none}
    optimizer=adamw
    [ "${flag:-}" = adamw8bit ] && optimizer=adamw8bit
    name="$model.$method.${batch}x$seq.$recompute${flag:+.$flag}"
    ours=$("$bench" --model "$model" --method "$method" --micro-batch "$batch" --seq "$seq" --recompute "$recompute" \
        --optimizer "$optimizer" --profile 2>"$out/$name.refine.log" | tee -a "$out/$name.refine.log" | grep '^{' | tee -a "$out/bench.jsonl" |
        grep '"system"')
    theirs=""
    if [ "${PEER:-}" != none ] && [ "$method" != qlora ] && [ "$method" != qdora ] && [ -z "${flag:-}" ]; then
        rflag=""
        [ "$recompute" != none ] && rflag="--recompute"
        theirs=$(PYTHONUNBUFFERED=1 python3 "$peer" --model "$model" --method "$method" --batch "$batch" --seq "$seq" \
            $rflag 2>"$out/$name.peer.log" | tee -a "$out/$name.peer.log" | grep '^{' | tee -a "$out/bench.jsonl")
        [ -z "$theirs" ] && echo "{\"system\":\"hf+peft\",\"workload\":\"$name\",\"error\":\"$(tail -c 300 "$out/$name.peer.log" | tr '\n"' ' ' )\"}" >>"$out/bench.jsonl"
    fi
    t1=$(field "$ours" tokens_per_s)
    t2=$(field "$theirs" tokens_per_s)
    ratio=$(awk -v a="${t1:-0}" -v b="${t2:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')
    printf '%-40s refine %8s tok/s %6s GiB | peer %8s tok/s %6s GiB | ratio %s\n' "$name" "${t1:-fail}" \
        "$(field "$ours" peak_mem_GiB)" "${t2:--}" "$(field "$theirs" peak_mem_GiB)" "$ratio"
done
