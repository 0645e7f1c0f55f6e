#!/usr/bin/env bash
# fuzz_seeds_test.sh — tools/fuzz.sh seeds each libFuzzer target with fixtures of its own format:
# every target gets at least one seed, the tokenizer targets get tokenizer files and text (a
# regression: their `case` branch was missing, and both inherited the PEFT adapter_config.json
# files of the target before them), and no target gets another format's fixtures.
set -uo pipefail
fuzz=${1:?usage: fuzz_seeds_test.sh PATH_TO_FUZZ_SH}
source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
seeds() { "$fuzz" --list-seeds "$1" 2>/dev/null | sed 's|.*/||' | sort -u | tr '\n' ' '; }
for t in safetensors config gguf peft_config tokenizer tokenize; do
    s=$(seeds $t)
    echo "$t: $s"
    check "$t has seeds" test -n "$s"
done
check "tokenizer: seeded with tokenizer files" grep -q 'bytes_tokenizer.json' <<<"$(seeds tokenizer)"
check "tokenizer: no adapter_config.json" test -z "$(grep -o 'adapter_config.json' <<<"$(seeds tokenizer)")"
check "tokenize: no adapter_config.json" test -z "$(grep -o 'adapter_config.json' <<<"$(seeds tokenize)")"
check "peft_config: only adapter_config.json" test "$(seeds peft_config)" = "adapter_config.json "
check "gguf: only .gguf files" test -z "$(tr ' ' '\n' <<<"$(seeds gguf)" | grep -v '\.gguf$' | grep .)"
"$fuzz" --list-seeds no_such_target >/dev/null 2>&1
check "an unknown target has no seeds (an error)" test $? -ne 0
echo "fuzz_seeds_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
