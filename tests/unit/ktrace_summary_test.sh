#!/usr/bin/env bash
# ktrace_summary_test.sh — tools/ktrace/summary.py on two made-up ktrace files (tools/ktrace/ktrace.c's
# format): the per-step figures are (B − A) / (steps_B − steps_A) — setup kernels that ran once in
# both cancel out, a kernel only B ran counts —, the largest first, small ones left out, a file
# that is not ktrace's is refused with exit status 1 and one message; --against compares two pairs
# kernel by kernel.
set -uo pipefail
summary=${1:?usage: ktrace_summary_test.sh tools/ktrace/summary.py}
tmp=${TEST_TMPDIR:-/tmp}/ktrace_summary_test.$$
mkdir -p "$tmp"
source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
# A: 3 steps; B: 7 steps. gemm: 2 launches a step of 500 µs; norm: 4 a step of 25 µs; setup: once
# in each (5 ms); tail: only in B (4 launches, 40 µs each: 40 µs a step over the 4 extra steps).
printf '#total_kernel_ns\t%d\tspan_ns\t1\ngemm\t6\t3000000\nnorm\t12\t300000\nsetup\t1\t5000000\n' 8300000 >"$tmp/a.tsv"
printf '#total_kernel_ns\t%d\tspan_ns\t1\ngemm\t14\t7000000\nnorm\t28\t700000\nsetup\t1\t5000000\ntail\t4\t160000\n' \
    12860000 >"$tmp/b.tsv"
python3 "$summary" "$tmp/a.tsv" 3 "$tmp/b.tsv" 7 --min-us 30 >"$tmp/out.txt" 2>&1
rc=$?
check "exit status $rc (0)" test $rc -eq 0
check "kernel time a step: (12.86 − 8.30 ms) / 4 = 1.14 ms" grep -q '^kernel time a step: 1.14 ms$' "$tmp/out.txt"
check "gemm: 1.000 ms a step, 2 launches, 500 µs each, first" \
    test "$(sed -n 2p "$tmp/out.txt" | tr -s ' ')" = " 1.000 ms 2x 500.0 us gemm"
check "norm: 0.100 ms a step, 4 launches of 25 µs" \
    test "$(grep -c '^ *0.100 ms *4x *25.0 us  norm$' "$tmp/out.txt")" -eq 1
check "tail: 0.040 ms a step (only B ran it)" test "$(grep -c '^ *0.040 ms *1x *40.0 us  tail$' "$tmp/out.txt")" -eq 1
check "setup (once in each run) left out" test "$(grep -c setup "$tmp/out.txt")" -eq 0
python3 "$summary" "$tmp/a.tsv" 3 "$tmp/b.tsv" 7 --min-us 50 >"$tmp/out50.txt" 2>&1
check "--min-us 50 leaves out the 40 µs kernel" test "$(grep -c tail "$tmp/out50.txt")" -eq 0
printf 'not a ktrace file\n' >"$tmp/bad.tsv"
python3 "$summary" "$tmp/bad.tsv" 3 "$tmp/b.tsv" 7 >"$tmp/bad.txt" 2>&1
rc=$?
check "a file that is not ktrace's: exit status $rc (1), one message" \
    test $rc -eq 1 -a "$(wc -l <"$tmp/bad.txt")" -eq 1 -a "$(grep -c '^summary.py: .*not a ktrace file' "$tmp/bad.txt")" -eq 1
python3 "$summary" "$tmp/a.tsv" 7 "$tmp/b.tsv" 3 >"$tmp/order.txt" 2>&1
rc=$?
check "STEPS_B not above STEPS_A: exit status $rc (1)" test $rc -eq 1
# --against: a second build's pair — gemm at 450 µs, norm unchanged, tail gone, a new kernel "fused"
# of 60 µs a step: the totals and each change at least --min-us, the largest saving first.
printf '#total_kernel_ns	%d	span_ns	1
gemm	6	2700000
norm	12	300000
setup	1	5000000
' 8000000 >"$tmp/c.tsv"
printf '#total_kernel_ns	%d	span_ns	1
gemm	14	6300000
norm	28	700000
setup	1	5000000
fused	4	240000
' \
    12240000 >"$tmp/d.tsv"
python3 "$summary" "$tmp/a.tsv" 3 "$tmp/b.tsv" 7 --against "$tmp/c.tsv" 3 "$tmp/d.tsv" 7 >"$tmp/vs.txt" 2>&1
rc=$?
check "--against: exit status $rc (0)" test $rc -eq 0
check "--against: kernel time a step 1.14 ms -> 1.06 ms (-0.08)" \
    grep -q '^kernel time a step: 1.14 ms -> 1.06 ms (-0.08)$' "$tmp/vs.txt"
check "--against: gemm first, -0.100 ms (1.000 ms, 2 launches -> 0.900 ms, 2)" \
    test "$(sed -n 2p "$tmp/vs.txt" | tr -s ' ')" = " -0.100 ms 1.000 ms 2x -> 0.900 ms 2x gemm"
check "--against: tail -0.040 ms (gone), fused +0.060 ms (new) last" \
    test "$(sed -n '3,4p' "$tmp/vs.txt" | tr -s ' ' | paste -sd'|')" = \
    " -0.040 ms 0.040 ms 1x -> 0.000 ms 0x tail| +0.060 ms 0.000 ms 0x -> 0.060 ms 1x fused"
check "--against: norm (unchanged) left out" test "$(grep -c norm "$tmp/vs.txt")" -eq 0
python3 "$summary" "$tmp/a.tsv" 3 "$tmp/b.tsv" 7 --against "$tmp/c.tsv" x "$tmp/d.tsv" 7 >"$tmp/vsbad.txt" 2>&1
rc=$?
check "--against with a step count that is not a number: exit status $rc (1), one message" \
    test $rc -eq 1 -a "$(wc -l <"$tmp/vsbad.txt")" -eq 1
rm -rf "$tmp"
echo "ktrace_summary_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
