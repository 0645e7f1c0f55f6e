#!/usr/bin/env bash
# ref_train_test.sh — //ref:train end to end on the tiny Llama-3-like model of the golden fixtures
# (2 layers, C = 64, GQA 4:1, tied, llama3 RoPE) with a byte-level tokenizer:
#   - a run writes metrics, plot, checkpoint and a PEFT adapter, and the validation loss falls;
#   - 3 steps, a stop, and a resume give the same adapter bytes and per-step losses as 6 steps;
#   - two identical runs give identical bytes; DoRA, QLoRA, QDoRA and full fine-tuning run, and
#     DoRA and full export merged models;
#   - --export gguf (f16, bf16, q8_0) writes a GGUF that //ref:generate loads with the tokenizer it
#     carries; F16 and BF16 generate the merged folder's greedy tokens, Q8_0 generates; merged/
#     carries the source's tokenizer (an HF source's files copied, a GGUF source's written);
#   - --precision bf16 trains, its losses differ from the fp32 run's yet stay close, its stop and
#     resume is bitwise the uninterrupted run, and its DoRA, QLoRA, QDoRA and full runs succeed;
#   - full fine-tuning with bf16 gradients (--grad-dtype bf16) trains the same first step, then
#     differs from fp32 gradients yet stays close, resumes bitwise, and is refused for adapters;
#   - bad input (missing data, a malformed JSONL line, chat data for a tokenizer without a template, an
#     unknown flag) ends with exit status 1
#     and one message, leaves an earlier run's outputs alone and no empty --out folder behind.
# The refusals and recoveries of issue "a run loses nothing" (signals, --out, checkpoints, tokenizer
# against model, data formats, resume with changes) are ref_train_robust_test.sh's; kill -9 at
# random moments is ref_train_kill_test.sh's.
set -uo pipefail
bin=${1:?usage: ref_train_test.sh PATH_TO_REF_TRAIN PATH_TO_REF_GENERATE}
gen=${2:?usage: ref_train_test.sh PATH_TO_REF_TRAIN PATH_TO_REF_GENERATE}
source tests/unit/tiny_run.sh || exit 1
tiny_run_setup ref_train_test
printf '%s\n' '{"prompt": "Q: two plus two?", "response": " A: four."}' >"$tmp/qa.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}' >"$tmp/chat.jsonl"

source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
losses() { grep '"kind":"train"' "$1/metrics.jsonl" | sed 's/.*"loss":\([^,]*\).*/\1/'; }
# losses_within FRACTION BASE RUN: RUN's six per-step losses, each within FRACTION (relative) of BASE's
losses_within() {
    awk -v tol="$1" 'NR == FNR { f[FNR] = $1; next }
        { n++; d = $1 - f[FNR]; if (d < 0) d = -d; if (!(d <= tol * f[FNR])) bad = 1 }
        END { exit !(n == 6 && !bad) }' <(losses "$2") <(losses "$3")
}
# resumed DIR FLAGS...: a run with FLAGS stopped after 3 steps and resumed to the end in DIR (the
# resume's output in DIR.log)
resumed() {
    local d=$1
    shift
    "$bin" "${common[@]}" "$@" --out "$d" --stop-after 3 >/dev/null 2>&1
    "$bin" "${common[@]}" "$@" --out "$d" --resume "$d" >"$d.log" 2>&1
}
val_loss() { # val_loss LOG first|last
    grep 'validation loss' "$1" | { if [ "$2" = first ]; then head -1; else tail -1; fi; } |
        sed 's/.*validation loss \([0-9.]*\).*/\1/'
}
less_than() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
common=(--model "$tmp/model" --data "$tmp/data.txt" --seq 16 --micro-batch 2 --grad-accum 2 --max-steps 6
    --warmup 1 --eval-every 3 --eval-batches 2 --lr 1e-2 --rank 4 --alpha 8 --seed 7)

"$bin" "${common[@]}" --out "$tmp/a" >"$tmp/a.log" 2>&1
check "run a exits 0" test $? -eq 0
check "adapter written" test -s "$tmp/a/adapter/adapter_model.safetensors" -a -s "$tmp/a/adapter/adapter_config.json"
check "metrics and plot written" test -s "$tmp/a/metrics.jsonl" -a -s "$tmp/a/loss.svg"
first=$(val_loss "$tmp/a.log" first)
last=$(val_loss "$tmp/a.log" last)
check "validation loss falls ($first -> $last)" less_than "$last" "$first"

"$bin" "${common[@]}" --out "$tmp/a2" >/dev/null 2>&1
check "identical runs give identical adapters" cmp -s "$tmp/a/adapter/adapter_model.safetensors" "$tmp/a2/adapter/adapter_model.safetensors"

"$bin" "${common[@]}" --out "$tmp/b" --stop-after 3 >"$tmp/b1.log" 2>&1
check "stop after 3 exits 0" test $? -eq 0
check "no adapter after a stopped run" test ! -e "$tmp/b/adapter"
"$bin" "${common[@]}" --out "$tmp/b" --resume "$tmp/b" >"$tmp/b2.log" 2>&1
check "resume exits 0" test $? -eq 0
check "3 + resume 3 == 6: adapter bytes" cmp -s "$tmp/a/adapter/adapter_model.safetensors" "$tmp/b/adapter/adapter_model.safetensors"
check "3 + resume 3 == 6: per-step losses" test "$(losses "$tmp/a")" = "$(losses "$tmp/b")"

"$bin" "${common[@]}" --method dora --export merged --data "$tmp/qa.jsonl" --data "$tmp/data.txt" --out "$tmp/d" >"$tmp/d.log" 2>&1
check "DoRA with prompt/response data and merged export" test $? -eq 0 -a -s "$tmp/d/merged/model.safetensors" -a -s "$tmp/d/merged/config.json"
"$bin" "${common[@]}" --method full --out "$tmp/f" >"$tmp/f.log" 2>&1
check "full fine-tuning exports the model" test $? -eq 0 -a -s "$tmp/f/merged/model.safetensors"

# --export gguf: the merged model as one GGUF, read back by //ref:generate with the tokenizer the
# file carries (no --tokenizer: the byte-level tokenizer's GPT-2 pre-tokenizer is written as "gpt2")
# and decoded greedily from three prompts. --lr 1e-3 keeps the trained model's continuations varied
# (at 1e-2 it answers only spaces) and unlike the base model's, so a GGUF of the base, or with q/k
# rows left permuted, generates other tokens.
#   BF16: merged/'s bf16 weights bit for bit (norms F32, exact): merged/'s tokens exactly.
#   F16: every bf16 value of magnitude >= 2^-17 exactly (8 significant bits within f16's 11,
#     subnormals included), smaller ones moved by <= 2^-25: merged/'s tokens unless two logits
#     tie within ~1e-7.
#   Q8_0: each weight moved by up to 1/254 of its block's largest, enough to flip the near-ties of
#     this random tiny model (measured: 2 of 3 prompts leave merged/'s tokens after 5 and 8), so it
#     must load and generate every token; Q8_0's error through the reader is gguf_write_test's.
printf '%s\n' '{"prompt": "In the beginning 7"}' '{"prompt": "and so on."}' '{"prompt": "line 3"}' >"$tmp/gguf_prompts.jsonl"
greedy() { # greedy OUT GENERATE_FLAGS...: 24 greedy tokens for each prompt, as JSON lines
    local out=$1
    shift
    "$gen" "$@" --prompts "$tmp/gguf_prompts.jsonl" --max-new-tokens 24 --out "$out" >/dev/null 2>&1
}
greedy "$tmp/gguf_base.jsonl" --model "$tmp/model"
for t in f16 bf16 q8_0; do
    "$bin" "${common[@]}" --lr 1e-3 --export gguf --gguf-type $t --out "$tmp/g_$t" >"$tmp/g_$t.log" 2>&1
    check "--export gguf --gguf-type $t: exit 0, model-$t.gguf and merged/ written" \
        test $? -eq 0 -a -s "$tmp/g_$t/model-$t.gguf" -a -s "$tmp/g_$t/merged/model.safetensors"
    greedy "$tmp/g_$t.jsonl" --model "$tmp/g_$t/model-$t.gguf"
    check "--gguf-type $t: //ref:generate loads the GGUF and its tokenizer, 24 tokens for each prompt" \
        test $? -eq 0 -a "$(grep -c '"tokens":24,"finish":"length"' "$tmp/g_$t.jsonl" 2>/dev/null)" -eq 3
    [ $t = q8_0 ] && continue
    greedy "$tmp/g_${t}_merged.jsonl" --model "$tmp/g_$t/merged" --tokenizer "$tmp/model/tokenizer.json"
    check "--gguf-type $t: merged/ generates other tokens than the base model" \
        test -s "$tmp/g_${t}_merged.jsonl" -a "$(cat "$tmp/g_${t}_merged.jsonl")" != "$(cat "$tmp/gguf_base.jsonl")"
    check "--gguf-type $t: the GGUF generates merged/'s greedy tokens" \
        cmp -s "$tmp/g_$t.jsonl" "$tmp/g_${t}_merged.jsonl"
done
# merged/ carries its tokenizer: an HF source's files byte for byte, so //ref:generate needs no
# --tokenizer; a GGUF source's tokenizer written as tokenizer.json + tokenizer_config.json
# (io/tokenizer_write.c), with which merged/ generates what the source's own tokenizer makes it.
check "merged/ holds the HF source's tokenizer.json, byte for byte" \
    cmp -s "$tmp/model/tokenizer.json" "$tmp/g_bf16/merged/tokenizer.json"
greedy "$tmp/g_bf16_own.jsonl" --model "$tmp/g_bf16/merged"
check "merged/ generates with its own tokenizer as with the source's" cmp -s "$tmp/g_bf16_own.jsonl" "$tmp/g_bf16_merged.jsonl"
"$bin" "${common[@]}" --model "$tmp/g_bf16/model-bf16.gguf" --max-steps 2 --warmup 0 --export merged --out "$tmp/gm" \
    >"$tmp/gm.log" 2>&1
check "training from the exported GGUF (its eos from the config) writes merged/ with tokenizer.json and tokenizer_config.json" \
    test $? -eq 0 -a -s "$tmp/gm/merged/tokenizer.json" -a -s "$tmp/gm/merged/tokenizer_config.json"
greedy "$tmp/gm_own.jsonl" --model "$tmp/gm/merged"
greedy "$tmp/gm_src.jsonl" --model "$tmp/gm/merged" --tokenizer "$tmp/model/tokenizer.json"
check "a GGUF source's merged/ generates with its written tokenizer as with the original tokenizer.json" \
    test "$(grep -c '"tokens":24,' "$tmp/gm_own.jsonl" 2>/dev/null)" -eq 3 -a -s "$tmp/gm_src.jsonl" \
    && cmp -s "$tmp/gm_own.jsonl" "$tmp/gm_src.jsonl"

"$bin" "${common[@]}" --method qlora --out "$tmp/q" >"$tmp/q.log" 2>&1
check "QLoRA (NF4 base) runs and writes its adapter" test $? -eq 0 -a -s "$tmp/q/adapter/adapter_model.safetensors"
check "QLoRA trains another model than LoRA (NF4 base)" test "$(losses "$tmp/q")" != "$(losses "$tmp/a")"
"$bin" "${common[@]}" --method qdora --out "$tmp/qd" >"$tmp/qd.log" 2>&1
check "QDoRA runs" test $? -eq 0 -a -s "$tmp/qd/adapter/adapter_model.safetensors"

"$bin" "${common[@]}" --method full --optimizer adamw8bit --out "$tmp/o" >"$tmp/o.log" 2>&1
check "8-bit AdamW (full: 8-bit states for the large tensors) runs" test $? -eq 0 -a -s "$tmp/o/merged/model.safetensors"
resumed "$tmp/o2" --method full --optimizer adamw8bit
check "8-bit AdamW: 3 + resume 3 == 6 (model bytes)" cmp -s "$tmp/o/merged/model.safetensors" "$tmp/o2/merged/model.safetensors"
check "8-bit AdamW: 3 + resume 3 == 6 (losses)" test "$(losses "$tmp/o")" = "$(losses "$tmp/o2")"

# --precision bf16: bf16 base weights and activations, fp32 masters with bf16 compute copies.
"$bin" "${common[@]}" --precision bf16 --out "$tmp/h" >"$tmp/h.log" 2>&1
check "bf16 run exits 0 and writes its adapter" test $? -eq 0 -a -s "$tmp/h/adapter/adapter_model.safetensors"
first=$(val_loss "$tmp/h.log" first)
last=$(val_loss "$tmp/h.log" last)
check "bf16: validation loss falls ($first -> $last)" less_than "$last" "$first"
check "bf16: the rounding is real (losses differ from fp32)" test "$(losses "$tmp/h")" != "$(losses "$tmp/a")"
# Every step's loss within 2% of the fp32 run's. bf16's unit roundoff is u = 2^-9 ≈ 0.2%: step 1
# is the same model up to rounded weights and activations (a few u), and six small steps compound
# that by the training's own sensitivity; measured: at most 0.12%. 2% (≈ 10u) still rejects a
# compute copy that lags its master by one optimizer step (3-7% from step 2 on).
check "bf16: every step's loss within 2% of fp32" losses_within 0.02 "$tmp/a" "$tmp/h"
# The resumed run must compute with the checkpoint's masters: its compute copies are refreshed
# when the checkpoint is written into the engine.
resumed "$tmp/hb" --precision bf16
check "bf16 resume exits 0" test $? -eq 0
check "bf16: 3 + resume 3 == 6: adapter bytes" cmp -s "$tmp/h/adapter/adapter_model.safetensors" "$tmp/hb/adapter/adapter_model.safetensors"
check "bf16: 3 + resume 3 == 6: per-step losses" test "$(losses "$tmp/h")" = "$(losses "$tmp/hb")"
"$bin" "${common[@]}" --precision bf16 --method full --out "$tmp/hf" >"$tmp/hf.log" 2>&1
check "bf16 full fine-tuning exports the model" test $? -eq 0 -a -s "$tmp/hf/merged/model.safetensors"
# --master split: full fine-tuning's masters kept as the values a bf16 copy + 16 low bits hold
# (ref/master_pair.h). The compute copy is the same bf16 of the same master, so each step's loss
# matches the fp32-master run's; masters differ only by the one-ulp moves at rare ties, within
# 1e-4 relative over six steps (measured: identical). Stop and resume are bitwise.
"$bin" "${common[@]}" --precision bf16 --method full --master split --out "$tmp/hs" >"$tmp/hs.log" 2>&1
check "--master split (bf16 full) exports the model" test $? -eq 0 -a -s "$tmp/hs/merged/model.safetensors"
check "--master split: every step's loss within 1e-4 of the fp32-master run's" losses_within 1e-4 "$tmp/hf" "$tmp/hs"
resumed "$tmp/hs2" --precision bf16 --method full --master split
check "--master split: 3 + resume 3 == 6 (model bytes)" cmp -s "$tmp/hs/merged/model.safetensors" "$tmp/hs2/merged/model.safetensors"
"$bin" "${common[@]}" --precision bf16 --method full --out "$tmp/hs4" --stop-after 3 --master split >/dev/null 2>&1
"$bin" "${common[@]}" --precision bf16 --method full --out "$tmp/hs4" --resume "$tmp/hs4" >"$tmp/hs4.log" 2>&1
check "--master split: resuming its checkpoint with fp32 masters is refused naming it" \
    test $? -eq 1 -a "$(grep -c -- '--master "split", this run has "fp32"' "$tmp/hs4.log")" -eq 1
# --master bf16: no fp32 master, the weight is its bf16 value (each update computed in fp32 and
# rounded to bf16, as the peers' bf16 parameters). Step 1 precedes any update: the fp32-master run's
# loss; later steps differ (updates under half an ulp are lost) by about the bf16 rounding of the
# weights, the 2% bound of the compute copies above. Stop and resume are bitwise.
"$bin" "${common[@]}" --precision bf16 --method full --master bf16 --out "$tmp/hw" >"$tmp/hw.log" 2>&1
check "--master bf16 (bf16 full) exports the model" test $? -eq 0 -a -s "$tmp/hw/merged/model.safetensors"
check "--master bf16: step 1's loss is the fp32-master run's" \
    test "$(losses "$tmp/hw" | head -1)" = "$(losses "$tmp/hf" | head -1)"
check "--master bf16: the rounding is real (losses differ from fp32 masters')" \
    test "$(losses "$tmp/hw")" != "$(losses "$tmp/hf")"
check "--master bf16: every step's loss within 2% of the fp32-master run's" losses_within 0.02 "$tmp/hf" "$tmp/hw"
resumed "$tmp/hw2" --precision bf16 --method full --master bf16
check "--master bf16: 3 + resume 3 == 6 (model bytes)" cmp -s "$tmp/hw/merged/model.safetensors" "$tmp/hw2/merged/model.safetensors"
"$bin" "${common[@]}" --master bf16 --out "$tmp/e_w16" >"$tmp/e_w16.log" 2>&1
check "--master bf16 with an adapter method: exit 1 with one message" \
    test $? -eq 1 -a "$(grep -c '^refine: --master bf16 is for --method full' "$tmp/e_w16.log")" -eq 1
# --master bf16-sr: the same bf16 weights, each update rounded stochastically (keyed by the seed, the
# step and the tensor): not the nearest rounding's run, within the same 2% of fp32 masters; stop and
# resume bitwise (the stream is the step's, not the process's); another --seed, another run.
"$bin" "${common[@]}" --precision bf16 --method full --master bf16-sr --out "$tmp/hr" >"$tmp/hr.log" 2>&1
check "--master bf16-sr (bf16 full) exports the model" test $? -eq 0 -a -s "$tmp/hr/merged/model.safetensors"
check "--master bf16-sr: step 1's loss is the fp32-master run's" \
    test "$(losses "$tmp/hr" | head -1)" = "$(losses "$tmp/hf" | head -1)"
check "--master bf16-sr: not the nearest rounding's run" test "$(losses "$tmp/hr")" != "$(losses "$tmp/hw")"
check "--master bf16-sr: every step's loss within 2% of the fp32-master run's" losses_within 0.02 "$tmp/hf" "$tmp/hr"
resumed "$tmp/hr2" --precision bf16 --method full --master bf16-sr
check "--master bf16-sr: 3 + resume 3 == 6 (model bytes)" cmp -s "$tmp/hr/merged/model.safetensors" "$tmp/hr2/merged/model.safetensors"
# --grad-dtype bf16: the accumulator rounded to bf16 after each micro-batch (--grad-accum 2 here).
# Step 1's loss is computed before any gradient: equal to the fp32-gradient run's. The gradients'
# relative rounding is u = 2^-9, which AdamW's m/sqrt(v) carries into each update at about that
# size — the same order as bf16 compute copies, so the same 2% bound as above (measured: 0.05%).
"$bin" "${common[@]}" --precision bf16 --method full --grad-dtype bf16 --out "$tmp/hg" >"$tmp/hg.log" 2>&1
check "--grad-dtype bf16 (bf16 full) exports the model" test $? -eq 0 -a -s "$tmp/hg/merged/model.safetensors"
check "--grad-dtype bf16: step 1's loss is the fp32-gradient run's" \
    test "$(losses "$tmp/hg" | head -1)" = "$(losses "$tmp/hf" | head -1)"
check "--grad-dtype bf16: the rounding is real (losses differ from fp32 gradients')" \
    test "$(losses "$tmp/hg")" != "$(losses "$tmp/hf")"
check "--grad-dtype bf16: every step's loss within 2% of the fp32-gradient run's" losses_within 0.02 "$tmp/hf" "$tmp/hg"
resumed "$tmp/hg2" --precision bf16 --method full --grad-dtype bf16
check "--grad-dtype bf16: 3 + resume 3 == 6 (model bytes)" cmp -s "$tmp/hg/merged/model.safetensors" "$tmp/hg2/merged/model.safetensors"
"$bin" "${common[@]}" --grad-dtype bf16 --out "$tmp/e_g16" >"$tmp/e_g16.log" 2>&1
check "--grad-dtype bf16 with an adapter method: exit 1 with one message" \
    test $? -eq 1 -a "$(grep -c '^refine: --grad-dtype bf16 is for --method full' "$tmp/e_g16.log")" -eq 1
"$bin" "${common[@]}" --method full --master split --out "$tmp/hs3" >"$tmp/hs3.log" 2>&1
check "--master split in fp32 (the oracle of the split runs) runs" test $? -eq 0 -a -s "$tmp/hs3/merged/model.safetensors"
"$bin" "${common[@]}" --master split --out "$tmp/e_split" >"$tmp/e_split.log" 2>&1
check "--master split with an adapter method: exit 1 with one message" \
    test $? -eq 1 -a "$(grep -c '^refine: --master split is for --method full' "$tmp/e_split.log")" -eq 1
"$bin" "${common[@]}" --precision bf16 --method dora --export merged --out "$tmp/hd" >"$tmp/hd.log" 2>&1
check "bf16 DoRA with merged export" test $? -eq 0 -a -s "$tmp/hd/merged/model.safetensors"
"$bin" "${common[@]}" --precision bf16 --method qlora --out "$tmp/hq" >"$tmp/hq.log" 2>&1
check "bf16 QLoRA runs" test $? -eq 0 -a -s "$tmp/hq/adapter/adapter_model.safetensors"
"$bin" "${common[@]}" --precision bf16 --method qdora --out "$tmp/hqd" >"$tmp/hqd.log" 2>&1
check "bf16 QDoRA runs" test $? -eq 0 -a -s "$tmp/hqd/adapter/adapter_model.safetensors"

# samples during training through the CPU engine's generate hook
printf '%s\n' '{"prompt": "And God"}' '{"prompt": "In the"}' >"$tmp/prompts.jsonl"
"$bin" "${common[@]}" --sample-every 3 --sample-prompts "$tmp/prompts.jsonl" --sample-tokens 8 --out "$tmp/s" \
    >"$tmp/s.log" 2>&1
check "--sample-every: exits 0" test $? -eq 0
check "--sample-every 3 over 6 steps: samples at steps 0, 3 and 6 for both prompts in metrics.jsonl" \
    test "$(grep -c '"kind":"sample"' "$tmp/s/metrics.jsonl" 2>/dev/null)" -eq 6
check "--sample-every: the samples are printed" test "$(grep -c '^sample ' "$tmp/s.log")" -eq 6

before=$(cat "$tmp/a/metrics.jsonl" | md5sum)
"$bin" "${common[@]}" --data "$tmp/missing.txt" --out "$tmp/a" --resume "$tmp/a" >"$tmp/e1.log" 2>&1
rc=$?
check "missing data: exit 1 with a message" test $rc -eq 1 -a "$(grep -c '^refine: .*missing.txt' "$tmp/e1.log")" -eq 1
check "missing data: the earlier run is untouched" test "$(cat "$tmp/a/metrics.jsonl" | md5sum)" = "$before"
"$bin" "${common[@]}" --data "$tmp/missing.txt" --out "$tmp/e_new" >"$tmp/e1b.log" 2>&1
check "missing data: a folder created for the run is not left behind" test $? -eq 1 -a ! -e "$tmp/e_new"
"$bin" "${common[@]}" --data "$tmp/chat.jsonl" --out "$tmp/e" >"$tmp/e4.log" 2>&1
check "chat data without a chat template: exit 1 naming it" test $? -eq 1 -a "$(grep -c 'no chat template' "$tmp/e4.log")" -eq 1
printf '%s\n' '{"text": "fine"}' '{"text": broken' >"$tmp/bad.jsonl"
"$bin" "${common[@]}" --data "$tmp/bad.jsonl" --out "$tmp/e" >"$tmp/e2.log" 2>&1
check "malformed JSONL: exit 1 naming file and line" test $? -eq 1 -a "$(grep -c 'bad.jsonl:2' "$tmp/e2.log")" -eq 1
"$bin" --no-such-flag >"$tmp/e3.log" 2>&1
check "unknown flag: exit 1" test $? -eq 1
"$bin" --help >"$tmp/help.log" 2>&1
check "--help documents the flags" grep -q -- '--micro-batch' "$tmp/help.log"
check "--help documents --precision" grep -q -- '--precision' "$tmp/help.log"

if [ $fail -ne 0 ]; then
    for f in "$tmp"/*.log; do echo "== $f"; tail -n 5 "$f"; done
fi
echo "ref_train_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
