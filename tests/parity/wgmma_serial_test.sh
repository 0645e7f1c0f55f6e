#!/usr/bin/env bash
# wgmma_serial_test.sh — what ptxas makes of the Hopper kernels, checked without a GPU.
#
# ptxas reports (info, not a warning or an error: the build passes) when it cannot keep warpgroup
# MMAs in flight — a wgmma on a divergent path, a register it would have to move while a product is
# in flight, a call inside the pipeline — and then serializes every wgmma of the kernel: the
# kernels stay correct and run up to ~20% slower (docs/RESULTS.md, 2026-11-29, seventh session).
# So this test compiles each sm_90a attention file as //gpu:attention does and fails on any such
# report ("(C75xx)": serialized wgmma, or a warpgroup arrive/wait ptxas had to inject), on any
# spill and on any stack frame (a register array the compiler could not index statically lands in
# local memory without a spill report: a forward built so ran 3.5× slower). First it compiles wgmma_serial_probe.cu, a kernel that must be serialized, and fails unless
# the check recognizes the report there: a change in ptxas's wording cannot make this test pass
# vacuously.
#
#   wgmma_serial_test.sh        (from the workspace root or Bazel's runfiles; NVCC overrides nvcc)
set -u
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
tmp=${TEST_TMPDIR:-$(mktemp -d)}
passed=0
failed=0
check() { # description, condition (0 = holds)
    if [ "$2" -eq 0 ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: $1"
    fi
}
ptxas_report() { # file: ptxas's -v report, or a line "COMPILE ERROR" and the messages
    "$nvcc" -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I. \
        -I/usr/local/cuda/include -Xptxas -v -c "$1" -o "$tmp/wgmma_serial.o" 2>&1 || echo "COMPILE ERROR"
}
if [ ! -x "$nvcc" ]; then
    echo "wgmma_serial_test: nvcc not found at $nvcc (the CUDA toolkit: tools/setup.sh)"
    exit 1
fi

probe=$(ptxas_report tests/parity/wgmma_serial_probe.cu)
echo "$probe" | grep -q "COMPILE ERROR" && echo "$probe"
check "the probe compiles" "$(echo "$probe" | grep -c "COMPILE ERROR")"
check "the check sees the probe's serialized wgmma (ptxas said: $(echo "$probe" | grep -m1 'C75' || echo nothing))" \
    "$(echo "$probe" | grep -qE '\(C75[0-9][0-9]\).*serialized' && echo 0 || echo 1)"

for f in gpu/attention_sm90_fwd.cu gpu/attention_sm90_bwd.cu gpu/attention_sm90_probe.cu; do
    report=$(ptxas_report "$f")
    if echo "$report" | grep -q "COMPILE ERROR"; then
        echo "$report"
        check "$f compiles for sm_90a" 1
        continue
    fi
    entries=$(echo "$report" | grep -c "Compiling entry function")
    check "$f: ptxas compiled its kernels ($entries entry functions)" "$([ "$entries" -gt 0 ] && echo 0 || echo 1)"
    reports=$(echo "$report" | grep -E '\(C75[0-9][0-9]\)')
    [ -n "$reports" ] && echo "$reports"
    check "$f: no wgmma serialized or arrive/wait injected by ptxas" "$([ -z "$reports" ] && echo 0 || echo 1)"
    spills=$(echo "$report" | grep -E '[1-9][0-9]* bytes (spill (stores|loads)|stack frame)')
    [ -n "$spills" ] && echo "$spills"
    check "$f: no spills and no local-memory arrays (0-byte stack frames)" "$([ -z "$spills" ] && echo 0 || echo 1)"
    echo "$f: $entries kernels, $(echo "$report" | grep -oE 'Used [0-9]+ registers' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
done
echo "wgmma_serial_test: $passed checks, $failed failed"
[ "$failed" -eq 0 ]
