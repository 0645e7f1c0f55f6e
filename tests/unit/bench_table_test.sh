#!/usr/bin/env bash
# bench_table_test.sh — tools/bench_table.sh's table logic on the CPU, with a stand-in //gpu:bench
# and stand-in peers that print fixed figures and record their arguments:
#   - each side gets the settings its row names (refine --recompute/--offload/--optimizer, HF
#     --recompute, Unsloth --checkpointing unsloth), and prints them on the row;
#   - the ratio is refine's tokens/s over the peer's; a row the peer wins in speed or in memory is
#     marked GAP, a row refine wins in both is not;
#   - refine-alone rows (adamw8bit, nopeer) run no peer; compact rows (split masters, 8-bit AdamW)
#     and lean rows (bf16-sr weights, bf16 gradients, 8-bit AdamW, the MLP input recomputed) run
#     beside the peers; an unknown flag is refused (exit 1);
#   - refine's figure is the plain run's, and a second run with --profile (not with PROFILE=0)
#     records the parts, its JSON lines tagged "profiled";
#   - PEER_TIMEOUT stops a peer that runs too long: its row says so, an error line is kept, and the
#     next peer and workload still run.
set -uo pipefail
table=${1:?usage: bench_table_test.sh tools/bench_table.sh}
tmp=${TEST_TMPDIR:-/tmp}/bench_table_test.$$
mkdir -p "$tmp/peers"
source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
# refine: 100 tok/s in 10 GiB, or 50 tok/s in 3 GiB with --offload; 7% slower with --profile
cat >"$tmp/bench" <<'SH'
#!/usr/bin/env bash
echo "$*" >>"$(dirname "$0")/bench.args"
t=100 m=10.00
case " $* " in *" --offload "*) t=50 m=3.00 ;; esac
case " $* " in *" --profile "*) t=$((t * 93 / 100)) ;; esac
echo "{\"system\":\"refine\",\"tokens_per_s\":$t,\"peak_mem_GiB\":$m}"
SH
chmod +x "$tmp/bench"
# the peers: 80 tok/s in 12 GiB, or in 2 GiB with Unsloth's offloaded checkpointing
for p in hf_peer unsloth_peer; do
    cat >"$tmp/peers/$p.py" <<PY
import json, os, sys
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "$p.args"), "a").write(" ".join(sys.argv[1:]) + "\n")
mem = 2.0 if "unsloth" in sys.argv else 12.0
if "--compile" in sys.argv:  # a compilation that takes minutes
    import time
    time.sleep(60)
print(json.dumps({"system": "$p", "tokens_per_s": 80, "peak_mem_GiB": mem}))
PY
done
PEERS=hf,unsloth bash "$table" "$tmp/bench" "$tmp/peers/hf_peer.py" "$tmp/out" llama-3.2-1b:lora:16:512 \
    llama-3.2-1b:lora:16:512:layer:offload llama-3.2-1b:full:16:512:none:adamw8bit \
    llama-3.1-8b:full:4:512:layer:compact smollm2-135m:full:32:512:none:lean >"$tmp/table.txt" 2>"$tmp/table.err"
rc=$?
cat "$tmp/table.txt"
row() { grep "^$1 .*| $2 " "$tmp/table.txt"; }
plain_args() { grep -v -- '--profile' "$tmp/bench.args"; } # the runs whose figures the table shows
check "exit status $rc (0), nine rows (two peers for each of four workloads, one refine alone)" \
    test $rc -eq 0 -a "$(wc -l <"$tmp/table.txt")" -eq 9
check "refine ahead in speed and memory: ratio 1.25, no GAP (HF)" \
    bash -c "grep -q 'ratio 1.25 \\[' <<<'$(row llama-3.2-1b.lora.16x512.none hf)'"
check "the same against Unsloth, each side's settings named" \
    bash -c "grep -q 'ratio 1.25 \\[refine --recompute none; unsloth defaults\\]' <<<'$(row llama-3.2-1b.lora.16x512.none unsloth)'"
check "the offload row: refine with --recompute layer --offload, Unsloth with its offloaded checkpointing" \
    test "$(plain_args | grep -- '--recompute layer' | grep -c -- '--offload')" -eq 1 \
    -a "$(plain_args | grep -c -- '--offload')" -eq 1 \
    -a "$(grep -- '--method lora' "$tmp/peers/unsloth_peer.args" | grep -c -- '--checkpointing unsloth')" -eq 1 \
    -a "$(grep -- '--method lora' "$tmp/peers/hf_peer.args" | grep -c -- '--recompute')" -eq 1
check "a row the peer wins (slower, more memory) is a GAP, with its ratio 0.62" \
    bash -c "grep -q 'ratio 0.62 GAP \\[refine --recompute layer --offload; unsloth --checkpointing unsloth\\]' <<<'$(row llama-3.2-1b.lora.16x512.layer.offload unsloth)'"
check "speed alone makes a GAP too (HF: 50 against 80 tok/s, though in more memory)" \
    bash -c "grep -q 'GAP' <<<'$(row llama-3.2-1b.lora.16x512.layer.offload hf)'"
check "adamw8bit: refine alone with --optimizer adamw8bit, no peer ran for it" \
    test "$(plain_args | grep -c -- '--model llama-3.2-1b --method full .*--optimizer adamw8bit')" -eq 1 \
    -a "$(grep -c -- '--model llama-3.2-1b --method full' "$tmp/peers/hf_peer.args" "$tmp/peers/unsloth_peer.args" | grep -c ':0$')" -eq 2 \
    -a "$(grep -c '^llama-3.2-1b.full.16x512.none.adamw8bit .*refine .*\[--recompute none --optimizer adamw8bit\]' "$tmp/table.txt")" -eq 1
check "compact: refine with split masters and 8-bit AdamW beside the peers (HF with --recompute), settings named" \
    test "$(plain_args | grep -- '--method full' | grep -- '--master split' | grep -c -- '--optimizer adamw8bit')" -eq 1 \
    -a "$(grep -c -- '--model llama-3.1-8b --method full .*--recompute' "$tmp/peers/hf_peer.args")" -eq 1 \
    -a "$(grep -c '^llama-3.1-8b.full.4x512.layer.compact .*| hf .*\[refine --recompute layer --master split --optimizer adamw8bit; hf --recompute\]' "$tmp/table.txt")" -eq 1
check "lean: refine with bf16-sr weights, bf16 gradients, 8-bit AdamW and the MLP input recomputed beside the peers" \
    test "$(plain_args | grep -- '--master bf16-sr --grad-dtype bf16 --recompute-mlp' | grep -c -- '--optimizer adamw8bit')" -eq 1 \
    -a "$(grep -c '^smollm2-135m.full.32x512.none.lean .*| unsloth .*\[refine --recompute none --master bf16-sr --grad-dtype bf16 --recompute-mlp --optimizer adamw8bit; unsloth defaults\]' "$tmp/table.txt")" -eq 1
check "every JSON line kept, the peers' tagged, the profiled runs' tagged" \
    test "$(grep -c '"peer":"unsloth"' "$tmp/out/bench.jsonl")" -eq 4 -a "$(grep -c '"system":"refine"' "$tmp/out/bench.jsonl")" -eq 10 \
    -a "$(grep -c '^{"profiled":1,"system":"refine"' "$tmp/out/bench.jsonl")" -eq 5 \
    -a "$(grep -c '^{"profiled":1,"system":"refine","tokens_per_s":93,' "$tmp/out/bench.jsonl")" -eq 4
check "refine's figure from the run without --profile; each workload run once more with it" \
    test "$(grep -c -- '--profile' "$tmp/bench.args")" -eq 5 -a "$(grep -vc -- '--profile' "$tmp/bench.args")" -eq 5 \
    -a "$(grep -cE 'refine +(93|46) tok/s' "$tmp/table.txt")" -eq 0 -a "$(grep -cE 'refine +(100|50) tok/s' "$tmp/table.txt")" -eq 9
PROFILE=0 PEER=none bash "$table" "$tmp/bench" "$tmp/peers/hf_peer.py" "$tmp/out3" llama-3.2-1b:lora:16:512 >"$tmp/table3.txt"
check "PROFILE=0: no --profile run" test "$(grep -c -- '--profile' "$tmp/bench.args")" -eq 5 -a "$(wc -l <"$tmp/table3.txt")" -eq 1
start=$(date +%s)
PEERS=compile,hf PEER_TIMEOUT=1 PROFILE=0 bash "$table" "$tmp/bench" "$tmp/peers/hf_peer.py" "$tmp/out4" \
    llama-3.2-1b:lora:16:512 smollm2-135m:lora:32:512 >"$tmp/table4.txt" 2>/dev/null
rc=$? took=$(($(date +%s) - start))
cat "$tmp/table4.txt"
check "PEER_TIMEOUT=1: exit status $rc (0), the compiling peer stopped twice (${took} s), four rows" \
    test $rc -eq 0 -a "$took" -lt 30 -a "$(wc -l <"$tmp/table4.txt")" -eq 4 \
    -a "$(grep -c '| compile        - tok/s .*ratio - \[refine --recompute none; compile --compile\] (stopped after 1 s)$' "$tmp/table4.txt")" -eq 2
check "PEER_TIMEOUT: the other peer's rows as before, an error line for each stopped run" \
    test "$(grep -c '| hf .*ratio 1.25 \[' "$tmp/table4.txt")" -eq 2 \
    -a "$(grep -c '"peer":"compile",.*"error":"stopped after 1 s: ' "$tmp/out4/bench.jsonl")" -eq 2
bash "$table" "$tmp/bench" "$tmp/peers/hf_peer.py" "$tmp/out2" llama-3.2-1b:lora:16:512:none:offlaod >/dev/null 2>"$tmp/bad.err"
rc=$?
check "an unknown flag: exit status $rc (1), named" test $rc -eq 1 -a "$(grep -c "unknown flag 'offlaod'" "$tmp/bad.err")" -eq 1
rm -rf "$tmp"
echo "bench_table_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
