#!/usr/bin/env bash
# ref_train_fp8_test.sh — //ref:train --precision fp8 end to end on the tiny golden Llama (the
# settings of ref_train_test.sh), for each --fp8-recipe (delayed, current, block):
#   - LoRA trains (the validation loss falls), its losses differ from the bf16 run's (the FP8
#     rounding is real) yet every step's stays within 3% of the fp32 oracle's;
#   - the metrics log carries the step's FP8 statistics; the checkpoint holds delayed scaling's
#     state (fp8.amax_history, fp8.scale) and the other recipes hold none;
#   - two identical runs give identical bytes; 3 steps, a stop and a resume give the same adapter,
#     checkpoint state and per-step records (losses and FP8 statistics) as 6 steps — for LoRA with
#     each recipe, for full fine-tuning and DoRA with delayed scaling (its histories and scales,
#     the trained weights' FP8 copies requantized at the resume);
#   - --base-dtype fp8 changes memory, not numbers, under --precision fp8 (the same losses), and
#     under bf16 it trains another model (the FP8-rounded base);
#   - DoRA (merged export), QLoRA, QDoRA and full fine-tuning run under each recipe;
#   - what must be refused is (exit 1, one message): --base-dtype fp8 with qlora and full, an
#     unknown recipe.
set -uo pipefail
bin=${1:?usage: ref_train_fp8_test.sh PATH_TO_REF_TRAIN}
source tests/unit/tiny_run.sh || exit 1
tiny_run_setup ref_train_fp8_test

source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
losses() { grep '"kind":"train"' "$1/metrics.jsonl" | sed 's/.*"loss":\([^,]*\).*/\1/'; }
# the train records without their timing fields (what a resumed run must reproduce)
records() { grep '"kind":"train"' "$1/metrics.jsonl" | sed 's/"tokens_per_s":[^,]*,"mfu":[^,]*,"mem_GiB":[^,]*,"elapsed_s":[^,}]*//'; }
val_loss() { # val_loss LOG first|last
    grep 'validation loss' "$1" | { if [ "$2" = first ]; then head -1; else tail -1; fi; } |
        sed 's/.*validation loss \([0-9.]*\).*/\1/'
}
less_than() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
has_tensor() { grep -a -q "\"$2\"" "$1/checkpoint/step-6/state.safetensors"; }
common=(--model "$tmp/model" --data "$tmp/data.txt" --seq 16 --micro-batch 2 --grad-accum 2 --max-steps 6
    --warmup 1 --eval-every 3 --eval-batches 2 --lr 1e-2 --rank 4 --alpha 8 --seed 7)

"$bin" "${common[@]}" --precision fp32 --out "$tmp/o" >"$tmp/o.log" 2>&1
check "the fp32 oracle runs" test $? -eq 0
"$bin" "${common[@]}" --precision bf16 --out "$tmp/h" >"$tmp/h.log" 2>&1
check "the bf16 run runs" test $? -eq 0

for r in delayed current block; do
    f=(--precision fp8 --fp8-recipe "$r")
    "$bin" "${common[@]}" "${f[@]}" --out "$tmp/$r" >"$tmp/$r.log" 2>&1
    check "$r: exits 0 and writes its adapter" test $? -eq 0 -a -s "$tmp/$r/adapter/adapter_model.safetensors"
    first=$(val_loss "$tmp/$r.log" first)
    last=$(val_loss "$tmp/$r.log" last)
    check "$r: validation loss falls ($first -> $last)" less_than "$last" "$first"
    check "$r: the FP8 rounding is real (losses differ from bf16)" test "$(losses "$tmp/$r")" != "$(losses "$tmp/h")"
    # E4M3 keeps 4 significant bits (relative step 2^-3, rounding error ≤ 2^-4 per element); a loss
    # averages many products of many such errors: measured 0.5% at most from fp32 over these six
    # steps for every recipe. 3% rejects a product that misses a scale (a factor 2 or more).
    check "$r: every step's loss within 3% of fp32" awk 'NR == FNR { f[FNR] = $1; next }
        { n++; d = $1 - f[FNR]; if (d < 0) d = -d; if (!(d <= 0.03 * f[FNR])) bad = 1 }
        END { exit !(n == 6 && !bad) }' <(losses "$tmp/o") <(losses "$tmp/$r")
    check "$r: the metrics carry the FP8 statistics" \
        test "$(grep '"kind":"train"' "$tmp/$r/metrics.jsonl" | grep -c '"fp8_scale_min":[0-9].*"fp8_scale_max":[0-9].*"fp8_saturated":[0-9]')" -eq 6
    if [ $r = delayed ]; then
        check "delayed: the checkpoint holds the amax histories and scales" \
            has_tensor "$tmp/$r" fp8.amax_history
    else
        check "$r: the checkpoint holds no FP8 state" eval '! has_tensor "$tmp/$r" fp8.amax_history'
    fi
    "$bin" "${common[@]}" "${f[@]}" --out "$tmp/$r-2" >/dev/null 2>&1
    check "$r: identical runs give identical adapters" \
        cmp -s "$tmp/$r/adapter/adapter_model.safetensors" "$tmp/$r-2/adapter/adapter_model.safetensors"
    "$bin" "${common[@]}" "${f[@]}" --out "$tmp/$r-r" --stop-after 3 >/dev/null 2>&1
    "$bin" "${common[@]}" "${f[@]}" --out "$tmp/$r-r" --resume "$tmp/$r-r" >"$tmp/$r-r.log" 2>&1
    check "$r: resume exits 0" test $? -eq 0
    check "$r: 3 + resume 3 == 6: adapter bytes" \
        cmp -s "$tmp/$r/adapter/adapter_model.safetensors" "$tmp/$r-r/adapter/adapter_model.safetensors"
    check "$r: 3 + resume 3 == 6: checkpoint state" \
        cmp -s "$tmp/$r/checkpoint/step-6/state.safetensors" "$tmp/$r-r/checkpoint/step-6/state.safetensors"
    check "$r: 3 + resume 3 == 6: per-step records and FP8 statistics" test "$(records "$tmp/$r")" = "$(records "$tmp/$r-r")"
    "$bin" "${common[@]}" "${f[@]}" --method dora --export merged --out "$tmp/$r-d" >"$tmp/$r-d.log" 2>&1
    check "$r: DoRA with merged export" test $? -eq 0 -a -s "$tmp/$r-d/merged/model.safetensors"
    "$bin" "${common[@]}" "${f[@]}" --method qlora --out "$tmp/$r-q" >"$tmp/$r-q.log" 2>&1
    check "$r: QLoRA" test $? -eq 0 -a -s "$tmp/$r-q/adapter/adapter_model.safetensors"
    "$bin" "${common[@]}" "${f[@]}" --method qdora --out "$tmp/$r-qd" >"$tmp/$r-qd.log" 2>&1
    check "$r: QDoRA" test $? -eq 0 -a -s "$tmp/$r-qd/adapter/adapter_model.safetensors"
    "$bin" "${common[@]}" "${f[@]}" --method full --out "$tmp/$r-f" >"$tmp/$r-f.log" 2>&1
    check "$r: full fine-tuning exports the model" test $? -eq 0 -a -s "$tmp/$r-f/merged/model.safetensors"
    "$bin" "${common[@]}" "${f[@]}" --base-dtype fp8 --out "$tmp/$r-b8" >"$tmp/$r-b8.log" 2>&1
    check "$r: --base-dtype fp8 exits 0" test $? -eq 0
    check "$r: --base-dtype fp8 under fp8 changes no number" test "$(losses "$tmp/$r")" = "$(losses "$tmp/$r-b8")"
done

# Resume with trained weights (their FP8 copies are requantized from the restored masters, with
# the restored scales) and with DoRA (its saved pre-magnitude outputs), delayed scaling.
for m in full dora; do
    f=(--precision fp8 --fp8-recipe delayed --method "$m")
    "$bin" "${common[@]}" "${f[@]}" --out "$tmp/$m-u" >/dev/null 2>&1
    "$bin" "${common[@]}" "${f[@]}" --out "$tmp/$m-r" --stop-after 3 >/dev/null 2>&1
    "$bin" "${common[@]}" "${f[@]}" --out "$tmp/$m-r" --resume "$tmp/$m-r" >"$tmp/$m-r.log" 2>&1
    check "$m delayed: resume exits 0" test $? -eq 0
    check "$m delayed: 3 + resume 3 == 6: checkpoint state" \
        cmp -s "$tmp/$m-u/checkpoint/step-6/state.safetensors" "$tmp/$m-r/checkpoint/step-6/state.safetensors"
    check "$m delayed: 3 + resume 3 == 6: per-step records" test "$(records "$tmp/$m-u")" = "$(records "$tmp/$m-r")"
done

"$bin" "${common[@]}" --precision bf16 --base-dtype fp8 --out "$tmp/hb8" >"$tmp/hb8.log" 2>&1
check "bf16 with --base-dtype fp8 exits 0" test $? -eq 0
check "bf16 with --base-dtype fp8 trains another model (the FP8-rounded base)" test "$(losses "$tmp/hb8")" != "$(losses "$tmp/h")"
grep -q '"engine":"ref (CPU, fp8 delayed)"' "$tmp/delayed/metrics.jsonl"
check "the engine's name says fp8 and the recipe" test $? -eq 0

for bad in "--method qlora --base-dtype fp8" "--method full --base-dtype fp8" "--precision fp8 --fp8-recipe mxfp8"; do
    # shellcheck disable=SC2086 # the flags are words
    "$bin" "${common[@]}" $bad --out "$tmp/e" >"$tmp/e.log" 2>&1
    rc=$?
    check "refused: $bad (exit $rc, one refine: message)" test $rc -eq 1 -a "$(grep -c '^refine:' "$tmp/e.log")" -eq 1
done
"$bin" --help >"$tmp/help.log" 2>&1
check "--help documents --fp8-recipe and --base-dtype" grep -q -- '--fp8-recipe' "$tmp/help.log"

if [ $fail -ne 0 ]; then
    for f in "$tmp"/*.log; do echo "== $f"; tail -n 5 "$f"; done
fi
echo "ref_train_fp8_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
