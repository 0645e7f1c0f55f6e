#!/usr/bin/env bash
# tools/fp8_runs.sh — FP8 training on the GPU host, measured: quality against bf16, speed against
# bf16 in the same command, the FP8-stored base's memory, and torchao's float8 training beside it.
#
#   tools/fp8_runs.sh DIR OUT [quality] [speed] [workloads] [peer]
#
# DIR is a bundle (tools/gpu_bundle.sh DIR //gpu:train //gpu:bench), run from the repository root;
# OUT collects every log, every JSON line (OUT/bench.jsonl) and the tables (OUT/table.txt). The
# sections (all four when none is named):
#   quality    SmolLM2-135M-Instruct (the GGUF tools/setup.sh fetched) on the King James Bible,
#              LoRA and full fine-tuning, 200 steps of 8×256 tokens (warm-up 10, lr 1e-3 LoRA, 1e-4
#              full), --precision bf16 and fp8 with each --fp8-recipe: the final validation loss
#              (16 batches) of each fp8 run against bf16's; target |fp8 − bf16| ≤ 1% of bf16.
#              About 8 runs of 10-15 s on an H100.
#   speed      //gpu:bench --precision bf16, then fp8 with each recipe, one after the other in this
#              command: Llama-3.1-8B LoRA 16×512 and Llama-3.2-1B full fine-tuning 16×512 (target:
#              fp8 ≥ 1.35× bf16's tokens/s); and Llama-3.1-8B LoRA 16×512 --precision fp8
#              --base-dtype fp8 for its memory (target: peak under 40 GiB; bf16: 46.8 GiB).
#              About 9 runs of 15-25 s.
#   workloads  every workload of tools/bench_table.sh, bf16 then fp8 (delayed, TE's default
#              recipe), 5 timed steps each. About 26 runs of 10-20 s.
#   peer       ../shared/bench/hf_peer.py (PEER=path to override) with --float8 tensorwise and
#              rowwise (torchao's convert_to_float8_training on the block linears, lm_head in bf16,
#              torch.compile) and without, on Llama-3.2-1B full 16×512: torchao's own FP8 ratio
#              beside ours. Skipped (and said) when torchao or its CUDA kernels are missing.
#              About 3-4 minutes (compilation).
# Prints one table line per comparison and, last, the table again with the verdicts (PASS/FAIL
# against the targets above). Exit status 0 when every run produced its figure.
set -u
dir=${1:?usage: tools/fp8_runs.sh DIR OUT [quality] [speed] [workloads] [peer]}
out=${2:?usage: tools/fp8_runs.sh DIR OUT [quality] [speed] [workloads] [peer]}
shift 2
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(quality speed workloads peer)
want() { local s; for s in "${sections[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
mkdir -p "$out"
export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
train=$dir/bin/gpu_train
bench=$dir/bin/gpu_bench
peer=${PEER:-../shared/bench/hf_peer.py}
cache=${REFINE_CACHE:-$HOME/.cache/refine}
table=$out/table.txt
: >"$table"
missing=0
row() { printf '%s\n' "$*" | tee -a "$table"; }
field() { sed -n "s/.*\"$2\": *\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"; }
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else print "-" }'; }
verdict() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { if (v == "-" || v == "") { print "NO FIGURE"; exit }
    ok = op == ">=" ? v + 0 >= t + 0 : v + 0 <= t + 0; print ok ? "PASS" : "FAIL" }'; }

# ---- quality ----------------------------------------------------------------------------------------
if want quality; then
    gguf=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
    row "== quality: SmolLM2-135M-Instruct, King James Bible, 200 steps of 8x256: final validation loss"
    for method in lora full; do
        lr=1e-3
        [ $method = full ] && lr=1e-4
        base=""
        for prec in bf16 fp8-delayed fp8-current fp8-block; do
            pf=(--precision bf16)
            [ $prec != bf16 ] && pf=(--precision fp8 --fp8-recipe "${prec#fp8-}")
            run=$out/quality-$method-$prec
            t0=$(date +%s)
            "$train" --model "$gguf" --data "$cache/corpus/kjv.txt" --method $method --seq 256 --micro-batch 8 \
                --max-steps 200 --warmup 10 --lr $lr --eval-every 100 --eval-batches 16 --seed 7 "${pf[@]}" \
                --out "$run" >"$run.log" 2>&1
            rc=$?
            v=$(grep '"kind":"eval"' "$run/metrics.jsonl" 2>/dev/null | tail -n 1 | sed 's/.*"val_loss":\([^,]*\).*/\1/')
            [ $rc -ne 0 ] || [ -z "$v" ] && { missing=1; v="-"; }
            [ $prec = bf16 ] && base=$v
            rel=$(awk -v a="$v" -v b="$base" 'BEGIN { if (a == "-" || b == "-" || b == "") print "-"; else { d = (a - b) / b; printf "%.4f", d < 0 ? -d : d } }')
            sat=$(grep '"kind":"train"' "$run/metrics.jsonl" 2>/dev/null | sed -n 's/.*"fp8_saturated":\([0-9]*\).*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
            line=$(printf '%-6s %-12s val_loss %-10s |rel| vs bf16 %-7s saturated %-8s (%ds, rc %d)' $method $prec "$v" "$rel" "$sat" $(( $(date +%s) - t0 )) $rc)
            [ $prec != bf16 ] && line="$line $(verdict "$rel" "<=" 0.01)"
            row "$line"
        done
    done
fi

# ---- speed --------------------------------------------------------------------------------------------
bench_run() { # name args...: one //gpu:bench JSON line into bench.jsonl, printed
    local name=$1
    shift
    "$bench" "$@" >"$out/$name.log" 2>&1
    local line
    line=$(grep '^{"system"' "$out/$name.log" | tail -n 1)
    [ -n "$line" ] && echo "$line" >>"$out/bench.jsonl"
    [ -z "$line" ] && missing=1
    echo "$line"
}
if want speed; then
    row "== speed: //gpu:bench --precision bf16 vs fp8 in this command (tokens/s, peak GiB)"
    for w in llama-3.1-8b:lora llama-3.2-1b:full; do
        model=${w%%:*} method=${w##*:}
        b=$(bench_run "speed-$model-$method-bf16" --model "$model" --method "$method" --micro-batch 16 --seq 512 --precision bf16)
        tb=$(field "$b" tokens_per_s)
        row "$(printf '%-14s %-5s bf16         %9s tok/s %6s GiB' "$model" "$method" "${tb:--}" "$(field "$b" peak_mem_GiB)")"
        for r in delayed current block; do
            f=$(bench_run "speed-$model-$method-fp8-$r" --model "$model" --method "$method" --micro-batch 16 --seq 512 \
                --precision fp8 --fp8-recipe $r)
            tf=$(field "$f" tokens_per_s)
            x=$(ratio "$tf" "$tb")
            row "$(printf '%-14s %-5s fp8 %-8s %9s tok/s %6s GiB  %sx bf16 %s' "$model" "$method" $r "${tf:--}" \
                "$(field "$f" peak_mem_GiB)" "$x" "$(verdict "$x" ">=" 1.35)")"
        done
    done
    f=$(bench_run "speed-llama-3.1-8b-lora-fp8-base8" --model llama-3.1-8b --method lora --micro-batch 16 --seq 512 \
        --precision fp8 --base-dtype fp8)
    mem=$(field "$f" peak_mem_GiB)
    row "$(printf '%-14s %-5s fp8 base8    %9s tok/s %6s GiB (cuda %s GiB)  under 40 GiB: %s' llama-3.1-8b lora \
        "$(field "$f" tokens_per_s)" "${mem:--}" "$(field "$f" cuda_mem_GiB)" "$(verdict "${mem:--}" "<=" 40)")"
fi

# ---- every benchmark workload -------------------------------------------------------------------------
if want workloads; then
    row "== workloads of tools/bench_table.sh: bf16 vs fp8 (delayed), 5 timed steps"
    for w in llama-3.2-1b:lora:16:512 llama-3.2-1b:dora:16:512 llama-3.2-1b:full:16:512 \
        llama-3.2-1b:full:16:512:none:adamw8bit llama-3.2-1b:lora:16:512:layer llama-3.2-1b:qlora:16:512 \
        llama-3.2-3b:lora:16:512 llama-3.2-3b:dora:16:512 llama-3.2-3b:dora:8:512 llama-3.2-3b:qlora:19:512:layer \
        llama-3.1-8b:lora:4:512:layer smollm2-135m:lora:32:512 smollm2-135m:full:32:512; do
        IFS=: read -r model method batch seq recompute flag <<<"$w"
        recompute=${recompute:-none}
        optimizer=adamw
        [ "${flag:-}" = adamw8bit ] && optimizer=adamw8bit
        name="$model.$method.${batch}x$seq.$recompute${flag:+.$flag}"
        common=(--model "$model" --method "$method" --micro-batch "$batch" --seq "$seq" --recompute "$recompute"
            --optimizer "$optimizer" --steps 5 --warmup-steps 2)
        b=$(bench_run "work-$name-bf16" "${common[@]}" --precision bf16)
        f=$(bench_run "work-$name-fp8" "${common[@]}" --precision fp8)
        row "$(printf '%-40s bf16 %9s tok/s %6s GiB | fp8 %9s tok/s %6s GiB | %sx' "$name" "$(field "$b" tokens_per_s)" \
            "$(field "$b" peak_mem_GiB)" "$(field "$f" tokens_per_s)" "$(field "$f" peak_mem_GiB)" \
            "$(ratio "$(field "$f" tokens_per_s)" "$(field "$b" tokens_per_s)")")"
    done
fi

# ---- the peer: torchao float8 ---------------------------------------------------------------------------
if want peer; then
    row "== peer: HF + torchao float8 training (convert_to_float8_training, torch.compile), Llama-3.2-1B full 16x512"
    if ! python3 -c 'import torchao.float8' >/dev/null 2>&1; then
        row "torchao is not importable with this host's torch: no peer figure (Transformer Engine's published Llama"
        row "figures are the reference then; see docs/RESULTS.md)"
    else
        pb=""
        for f8 in none tensorwise rowwise; do
            args=(--model llama-3.2-1b --method full --batch 16 --seq 512 --compile)
            [ $f8 != none ] && args+=(--float8 "$f8")
            PYTHONUNBUFFERED=1 python3 "$peer" "${args[@]}" >"$out/peer-$f8.log" 2>&1
            line=$(grep '^{' "$out/peer-$f8.log" | grep tokens_per_s | tail -n 1)
            [ -n "$line" ] && echo "$line" >>"$out/bench.jsonl"
            t=$(field "$line" tokens_per_s)
            [ $f8 = none ] && pb=$t
            row "$(printf 'hf+peft compile float8 %-10s %9s tok/s %6s GiB  %sx its bf16' $f8 "${t:--}" \
                "$(field "$line" peak_mem_GiB)" "$(ratio "$t" "$pb")")"
            [ -z "$t" ] && row "   (no figure: $(tail -c 200 "$out/peer-$f8.log" | tr '\n' ' '))"
        done
    fi
fi
echo "---- table (also in $table) ----"
cat "$table"
exit $missing
