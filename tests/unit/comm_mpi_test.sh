#!/usr/bin/env bash
# comm_mpi_test.sh — the MPI job of train/comm.h (trainers/comm_mpi.c, the plugin) under mpirun:
#   - comm_mpi_check's collectives on 2 and 3 ranks (fixed rank order bit for bit, slabs of many
#     pieces: REFINE_COMM_PIECE_BYTES=4096, so 10007 floats go in 10 pieces per segment);
#   - a rank that stops answering: the others end the job within REFINE_COMM_TIMEOUT (2 s) plus
#     the roll call, naming rank 1 as the one it waits on and that did not answer;
#   - a rank that exits on its own: the job ends (the launcher's report names it), no rank hangs;
#   - launched with a plugin that is not there: one message naming it, exit status 1.
# Skipped, with a message, where mpirun is not installed (tools/setup.sh installs openmpi-bin).
set -uo pipefail
check_bin=${1:?usage: comm_mpi_test.sh COMM_MPI_CHECK PLUGIN}
plugin=${2:?usage: comm_mpi_test.sh COMM_MPI_CHECK PLUGIN}
source "$(dirname "$0")/mpi_env.sh" || exit 1
if mpirun_missing; then
    echo "SKIP: mpirun is not installed (Debian: openmpi-bin); the MPI job is not tested here"
    exit 0
fi
export REFINE_MPI_PLUGIN=$PWD/$plugin REFINE_COMM_PIECE_BYTES=4096
tmp=${TEST_TMPDIR:-/tmp}/comm_mpi_test.$$
mkdir -p "$tmp"
source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0

for n in 2 3; do
    timeout 120 mpirun -np $n "$check_bin" >"$tmp/np$n.log" 2>&1 </dev/null
    rc=$?
    check "collectives on $n ranks: exit status $rc, every rank passed" \
        test $rc -eq 0 -a "$(grep -c 'comm_mpi_check rank .*, 0 failed' "$tmp/np$n.log")" -eq $n
done

start=$(date +%s)
REFINE_COMM_TIMEOUT=2 timeout 120 mpirun -np 3 "$check_bin" --fault hang >"$tmp/hang.log" 2>&1 </dev/null
rc=$?
took=$(($(date +%s) - start))
check "a rank that stops answering: the job ends (exit status $rc) in ${took} s" test $rc -ne 0 -a $rc -ne 124 -a $took -lt 60
check "... naming rank 1: waited on, no answer from it" \
    grep -q 'waiting on rank 1 after 2 s.*no answer within 1 s from rank 1 ' "$tmp/hang.log"
check "... and where the other waits (rank 2 answered the roll call)" \
    grep -q 'rank 0: collective.*rank 2 waits in collective #' "$tmp/hang.log"

start=$(date +%s)
REFINE_COMM_TIMEOUT=30 timeout 120 mpirun -np 2 "$check_bin" --fault exit >"$tmp/exit.log" 2>&1 </dev/null
rc=$?
took=$(($(date +%s) - start))
check "a rank that exits on its own: the job ends (exit status $rc) in ${took} s, before the timeout" \
    test $rc -ne 0 -a $rc -ne 124 -a $took -lt 30
check "... the launcher names it" grep -qiE 'rank 1|process.*exited' "$tmp/exit.log"

REFINE_MPI_PLUGIN=$tmp/none.so timeout 120 mpirun -np 2 "$check_bin" >"$tmp/noplugin.log" 2>&1 </dev/null
rc=$?
check "a missing plugin: exit status $rc, one message naming it" \
    test $rc -ne 0 -a "$(grep -c "refine: started by a launcher (OMPI_COMM_WORLD_SIZE=2), but the MPI plugin $tmp/none.so is not there" "$tmp/noplugin.log")" -eq 2

if [ $fail -ne 0 ]; then
    for f in "$tmp"/*.log; do echo "== $f"; tail -n 30 "$f"; done
fi
echo "comm_mpi_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
