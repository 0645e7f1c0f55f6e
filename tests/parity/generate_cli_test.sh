#!/usr/bin/env bash
# generate_cli_test.sh — //ref:generate and //gpu:generate's command line (no GPU needed):
#   - the two programs take the same flags (one flow, trainers/generate_main.c);
#   - --prompt on the tiny golden model with the byte tokenizer: a completion on stdout, the
#     token count on stderr; the same seed gives the same sample twice;
#   - --prompts FILE.jsonl: one JSON line per request, in order, with the fields documented;
#     a chat line is refused for a tokenizer without a chat template (one message, exit 1);
#   - bad input ends with one "refine:" line and exit status 1: an unknown flag, no mode, two
#     modes, a malformed JSONL line, a missing model;
#   - //gpu:generate --precision fp32 is refused; without a CUDA device it says so before reading
#     the model (skipped where a device answers nvidia-smi).
set -uo pipefail
ref=${1:?usage: generate_cli_test.sh REF_GENERATE GPU_GENERATE}
gpu=${2:?usage: generate_cli_test.sh REF_GENERATE GPU_GENERATE}
tmp=${TEST_TMPDIR:-/tmp}/generate_cli_test.$$
mkdir -p "$tmp"
source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
one_error() { # one_error LOG RC: exit status 1 and exactly one line, a refine: message
    [ "$2" -eq 1 ] && [ "$(wc -l <"$1")" -eq 1 ] && grep -q '^refine: ' "$1"
}
model=$tmp/tiny
mkdir -p "$model"
cp tests/golden/data/e2e/llama/config.json tests/golden/data/e2e/llama/model.safetensors "$model/"
tok=tests/unit/testdata/bytes_tokenizer.json

flags() { "$1" --help | sed -n 's/^  \(--[a-z0-9-]*\) .*/\1/p'; }
check "the same flags in both programs" test "$(flags "$ref")" = "$(flags "$gpu")" -a -n "$(flags "$ref")"

"$ref" --model "$model" --tokenizer $tok --prompt "In the beginning" --max-new-tokens 12 >"$tmp/out.txt" 2>"$tmp/err.txt"
rc=$?
check "--prompt: exit 0 ($rc), a completion, 12 tokens counted" \
    test $rc -eq 0 -a -s "$tmp/out.txt" -a "$(grep -c '^12 tokens' "$tmp/err.txt")" -eq 1
for i in 1 2; do
    "$ref" --model "$model" --tokenizer $tok --prompt "abc" --max-new-tokens 16 --temperature 1.2 --top-k 50 --seed 9 \
        >"$tmp/sample$i.txt" 2>/dev/null
done
check "a seeded sample twice: the same text" cmp -s "$tmp/sample1.txt" "$tmp/sample2.txt"

printf '{"prompt": "first"}\n\n{"prompt": "second one"}\n{"prompt": "third"}\n' >"$tmp/p.jsonl"
"$ref" --model "$model" --tokenizer $tok --prompts "$tmp/p.jsonl" --max-new-tokens 5 --batch 2 --out "$tmp/out.jsonl" \
    2>"$tmp/err.txt"
rc=$?
check "--prompts: exit 0 ($rc), 3 JSON lines in order with index, completion, tokens, finish, ids" \
    test $rc -eq 0 -a "$(grep -c '"completion":' "$tmp/out.jsonl")" -eq 3 -a \
    "$(sed -n 's/.*"index":\([0-9]*\).*"tokens":5,"finish":"length","ids":\[.*/\1/p' "$tmp/out.jsonl" | tr -d '\n')" = 012

printf '{"messages": [{"role": "user", "content": "hi"}]}\n' >"$tmp/chat.jsonl"
"$ref" --model "$model" --tokenizer $tok --prompts "$tmp/chat.jsonl" >/dev/null 2>"$tmp/e1.txt"
rc=$?
check "a chat line without a chat template: one message, exit 1" one_error "$tmp/e1.txt" $rc
printf '{"prompt": "ok"}\n{"prompt": \n' >"$tmp/bad.jsonl"
"$ref" --model "$model" --tokenizer $tok --prompts "$tmp/bad.jsonl" >/dev/null 2>"$tmp/e2.txt"
rc=$?
check "a malformed JSONL line: one message naming line 2, exit 1" \
    sh -c "[ $rc -eq 1 ] && [ \$(wc -l <'$tmp/e2.txt') -eq 1 ] && grep -q 'bad.jsonl:2' '$tmp/e2.txt'"
"$ref" --model "$model" --tokenizer $tok --bogus 1 >/dev/null 2>"$tmp/e3.txt"
check "an unknown flag: one message, exit 1" one_error "$tmp/e3.txt" $?
"$ref" --model "$model" --tokenizer $tok >/dev/null 2>"$tmp/e4.txt"
check "no mode: one message, exit 1" one_error "$tmp/e4.txt" $?
"$ref" --model "$model" --tokenizer $tok --chat --prompt x >/dev/null 2>"$tmp/e5.txt"
check "two modes: one message, exit 1" one_error "$tmp/e5.txt" $?
"$ref" --model "$tmp/missing" --prompt x >/dev/null 2>"$tmp/e6.txt"
check "a missing model: one message, exit 1" one_error "$tmp/e6.txt" $?

"$gpu" --precision fp32 --prompt x --model "$tmp/missing" >/dev/null 2>"$tmp/g1.txt"
rc=$?
check "//gpu:generate --precision fp32: one message pointing to //ref:generate, exit 1" \
    sh -c "[ $rc -eq 1 ] && grep -q '^refine: .*//ref:generate' '$tmp/g1.txt' && [ \$(wc -l <'$tmp/g1.txt') -eq 1 ]"
if nvidia-smi -L >/dev/null 2>&1; then
    echo "skip a CUDA device answers here: the no-device message is not checked"
else
    "$gpu" --prompt x --model "$tmp/missing-model" >/dev/null 2>"$tmp/g2.txt"
    rc=$?
    check "//gpu:generate without a CUDA device: says so before reading the model, exit 1" \
        sh -c "[ $rc -eq 1 ] && grep -q '^refine: no CUDA device' '$tmp/g2.txt' && ! grep -q missing-model '$tmp/g2.txt'"
fi
echo "generate_cli_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
