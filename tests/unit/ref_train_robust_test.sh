#!/usr/bin/env bash
# ref_train_robust_test.sh — a run loses nothing: the trainer end to end, as a user (and a hostile
# one) would drive it, on the tiny Llama-3-like golden model with a byte-level tokenizer.
#
#   ref_train_robust_test.sh TRAIN [--only SECTIONS] [-- EXTRA_FLAGS...]
#
# TRAIN is //ref:train (Bazel runs it so) or //gpu:train (tests/parity/robust_gpu.sh, on a GPU
# host); SECTIONS a comma-separated subset of the ones below (default: all); EXTRA_FLAGS are added
# to every training command. Sections:
#   out          an --out that holds a run is refused (saying how to resume, keep or --overwrite)
#                and left untouched; --overwrite replaces it; a second run on a folder in use is
#                refused naming the first one's pid, and the log is not interleaved; the leftovers of
#                killed runs (*.tmp.<pid>) are cleaned; symbolic links at and inside checkpoint
#                folders keep their targets when refine deletes old checkpoints.
#   signals      real SIGTERM, SIGINT and SIGHUP to the running trainer: the step is finished, a
#                checkpoint written, the resume command printed, exit 0; the checkpoint is bitwise
#                the one a run told to stop at that step writes, and the printed command resumes
#                bit-identically; a second signal ends the process at once.
#   checkpoints  a flipped bit, a truncated file and a file swapped in from another run are refused
#                naming the file; trainer.json fields out of range (checksums recomputed) are
#                refused, never a crash; data or model files changed behind the same paths are
#                refused naming the file unless --resume-anyway; a half last line in metrics.jsonl
#                (a kill) does not block the resume.
#   tokenizer    a tokenizer with ids beyond the model's vocabulary, BOS or EOS on a gap of the
#                vocabulary, and data with a byte the vocabulary lacks: exit 1 naming the file
#                (and the data's line), never a crash or a silently dropped byte.
#   data         JSON lines in x.json and x.JSONL are read as JSON lines (the prompt is not
#                trained), by content also in x.txt; --data-format text overrides; text after a
#                JSON object is an error naming file and line.
#   resume       a lower learning rate (and other steering settings) on resume is accepted, said
#                and recorded in metrics.jsonl; rank, seed and the sequences per step are refused.
# Prints one line per check and "ref_train_robust_test: N passed, M failed"; exit status 1 on any
# failure; the logs of failed checks are printed at the end.
set -uo pipefail
# Job control: background trainers get SIGINT as a terminal's jobs do (a shell without it starts
# them with SIGINT ignored, and the trainer keeps a signal ignored on entry ignored).
set -m
usage() {
    echo "usage: ref_train_robust_test.sh TRAIN [--only out,signals,checkpoints,tokenizer,data,resume] [-- FLAGS...]" >&2
    exit 1
}
[ $# -ge 1 ] || usage
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
bin=$(abs "$1")
shift
only=out,signals,checkpoints,tokenizer,data,resume
extra=()
while [ $# -gt 0 ]; do
    case $1 in
    --only) only=${2:?}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) usage ;;
    esac
done
want() { [[ ",$only," == *",$1,"* ]]; }

source tests/unit/tiny_run.sh || exit 1
tiny_run_setup ref_train_robust_test

source tests/common/checks.sh || exit 1 # check_log NAME LOG COMMAND..., check; pass=0 fail=0 failed_logs=()
has() { grep -q -- "$2" "$1"; }        # has LOG PHRASE
train() { "$bin" "$@" "${extra[@]}"; } # the trainer with the extra flags
train_bg() { "$bin" "$@" "${extra[@]}" & } # in the background: $! is the trainer itself
n_train() { # train records in DIR's log (0 when there is none)
    local n
    n=$(grep -c '"kind":"train"' "$1/metrics.jsonl" 2>/dev/null)
    echo "${n:-0}"
}
latest() { cat "$1/checkpoint/LATEST" 2>/dev/null | tr -d '\n'; }
losses() { grep '"kind":"train"' "$1/metrics.jsonl" | sed 's/.*"loss":\([^,]*\).*/\1/'; }
# wait_train DIR N PID: until DIR's log holds N train records (0 when it does, 1 when PID ended first).
wait_train() {
    local deadline=$((SECONDS + 120))
    while [ "$(n_train "$1")" -lt "$2" ]; do
        kill -0 "$3" 2>/dev/null || return 1
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.02
    done
}
tree_sum() { (cd "$1" && find . -type f ! -name .refine.lock -print0 | sort -z | xargs -0 md5sum) | md5sum; }
settings=(--seq 16 --micro-batch 2 --grad-accum 2 --warmup 1 --eval-every 3 --eval-batches 2 --lr 1e-2 --rank 4
    --alpha 8 --seed 7)
common=(--model "$tmp/model" --data "$tmp/data.txt" "${settings[@]}")
long=("${common[@]}" --max-steps 100000) # stopped by signals or --stop-after long before its end

if want out; then
    o=$tmp/o1
    train "${common[@]}" --max-steps 6 --out "$o" >"$tmp/o1.log" 2>&1
    check_log "out: a first run exits 0" "$tmp/o1.log" test $? -eq 0
    before=$(tree_sum "$o")
    train "${common[@]}" --max-steps 6 --out "$o" >"$tmp/o1b.log" 2>&1
    check_log "out: the same command again exits 1" "$tmp/o1b.log" test $? -eq 1
    check_log "out: ... saying how to resume, keep or replace the run" "$tmp/o1b.log" \
        has "$tmp/o1b.log" "holds an earlier run; to continue it, run the same command with --resume $o/checkpoint; to keep it, choose another --out; to replace it, add --overwrite"
    check "out: ... and the earlier run is untouched" test "$(tree_sum "$o")" = "$before"
    train "${common[@]}" --max-steps 6 --out "$o" --overwrite >"$tmp/o1c.log" 2>&1
    check_log "out: --overwrite replaces it" "$tmp/o1c.log" test $? -eq 0 -a "$(n_train "$o")" -eq 6 \
        -a "$(grep -c '"kind":"run"' "$o/metrics.jsonl")" -eq 1
    # Two runs on one folder: the second is refused naming the first; the log stays one run's.
    train_bg "${long[@]}" --out "$tmp/o2" >"$tmp/o2.log" 2>&1
    pid=$!
    wait_train "$tmp/o2" 1 $pid
    train "${common[@]}" --max-steps 6 --out "$tmp/o2" >"$tmp/o2b.log" 2>&1
    rc=$?
    check_log "out: a second run on a folder in use exits 1 naming the first's pid ($pid)" "$tmp/o2b.log" \
        test $rc -eq 1 -a "$(grep -c "another refine run (pid $pid)" "$tmp/o2b.log")" -eq 1
    kill -TERM $pid
    wait $pid
    check_log "out: the first run ends normally (SIGTERM)" "$tmp/o2.log" test $? -eq 0
    check_log "out: its log is one run's: steps 1, 2, ... once each" "$tmp/o2.log" \
        awk -F'"step":' '/"kind":"train"/ { split($2, a, ","); if (a[1] != ++n) bad = 1 } END { exit bad || n < 1 }' "$tmp/o2/metrics.jsonl"
    echo x >"$tmp/afile"
    train "${common[@]}" --max-steps 6 --out "$tmp/afile" >"$tmp/o3.log" 2>&1
    check_log "out: a file as --out: exit 1" "$tmp/o3.log" test $? -eq 1 -a "$(grep -c 'not a folder' "$tmp/o3.log")" -eq 1
    # The leftovers of killed runs go at the next start.
    echo "step-" >"$o/checkpoint/LATEST.tmp.99999"
    echo "{" >"$o/adapter/adapter_config.json.tmp.12345"
    train "${common[@]}" --max-steps 6 --out "$o" --resume "$o" >"$tmp/o4.log" 2>&1
    check_log "out: a resume of the finished run exits 0" "$tmp/o4.log" test $? -eq 0
    check "out: LATEST.tmp.<pid> and adapter_config.json.tmp.<pid> are gone" \
        test ! -e "$o/checkpoint/LATEST.tmp.99999" -a ! -e "$o/adapter/adapter_config.json.tmp.12345"
    # Links where refine deletes old checkpoints: their targets are left alone.
    mkdir -p "$tmp/victim1" "$tmp/victim2"
    echo precious >"$tmp/victim1/a.txt"
    echo precious >"$tmp/victim2/b.txt"
    train "${common[@]}" --max-steps 6 --stop-after 2 --out "$tmp/o5" >"$tmp/o5.log" 2>&1
    ln -s "$tmp/victim1" "$tmp/o5/checkpoint/step-1"
    ln -s "$tmp/victim2" "$tmp/o5/checkpoint/step-2/extra"
    train "${common[@]}" --max-steps 6 --checkpoint-every 1 --out "$tmp/o5" --resume "$tmp/o5" >"$tmp/o5b.log" 2>&1
    check_log "out: the run with links in its checkpoint folder finishes" "$tmp/o5b.log" test $? -eq 0
    check_log "out: deleting old checkpoints followed no link (both targets intact)" "$tmp/o5b.log" \
        test -s "$tmp/victim1/a.txt" -a -s "$tmp/victim2/b.txt"
    check_log "out: the old checkpoints are gone (the link step-1 itself included)" "$tmp/o5b.log" \
        test ! -e "$tmp/o5/checkpoint/step-1" -a "$(latest "$tmp/o5")" = step-6
fi

if want signals; then
    for sig in TERM INT HUP; do
        d=$tmp/s_$sig
        train_bg "${long[@]}" --out "$d" >"$d.log" 2>&1
        pid=$!
        wait_train "$d" 2 $pid
        kill -$sig $pid
        wait $pid
        rc=$?
        k=$(latest "$d")
        k=${k#step-}
        check_log "signals: SIG$sig: exit 0 after finishing the step (rc $rc, stopped at step ${k:-none})" "$d.log" \
            test $rc -eq 0 -a -n "$k"
        check_log "signals: SIG$sig: says where the checkpoint is and how to resume" "$d.log" \
            has "$d.log" "stopped by SIG$sig after step $k of 100000; checkpoint: $d/checkpoint/step-$k"
        check_log "signals: SIG$sig: ... with the command" "$d.log" has "$d.log" "^to continue: .* --resume $d/checkpoint\$"
        check_log "signals: SIG$sig: the log has the $k steps, no adapter is exported" "$d.log" \
            test "$(n_train "$d")" = "$k" -a ! -e "$d/adapter"
        if [ $sig = TERM ] && [ -n "$k" ]; then
            # The checkpoint is the one a run told to stop there writes, bit for bit; the printed
            # command resumes bit-identically.
            train "${long[@]}" --stop-after "$k" --out "$tmp/s_ref" >"$tmp/s_ref.log" 2>&1
            check_log "signals: the signalled checkpoint is bitwise a --stop-after $k run's" "$tmp/s_ref.log" \
                cmp -s "$d/checkpoint/step-$k/state.safetensors" "$tmp/s_ref/checkpoint/step-$k/state.safetensors"
            cmd=$(sed -n 's/^to continue: //p' "$d.log")
            eval "$cmd --stop-after 2" >"$d-2.log" 2>&1
            check_log "signals: the printed command resumes (exit 0)" "$d-2.log" test $? -eq 0
            train "${long[@]}" --stop-after $((k + 2)) --out "$tmp/s_ref2" >"$tmp/s_ref2.log" 2>&1
            check_log "signals: signal + resume == uninterrupted: the state at step $((k + 2))" "$d-2.log" \
                cmp -s "$d/checkpoint/step-$((k + 2))/state.safetensors" "$tmp/s_ref2/checkpoint/step-$((k + 2))/state.safetensors"
            check_log "signals: signal + resume == uninterrupted: the per-step losses" "$d-2.log" \
                test "$(losses "$d")" = "$(losses "$tmp/s_ref2")"
        fi
    done
    # A second signal ends the process at once: both are sent while it is stopped, so that the second
    # finds the first recorded (whichever the kernel delivers first; the process dies of the other).
    d=$tmp/s_twice
    train_bg "${long[@]}" --out "$d" >"$d.log" 2>&1
    pid=$!
    wait_train "$d" 2 $pid
    kill -STOP $pid
    kill -TERM $pid
    kill -INT $pid
    kill -CONT $pid
    { wait $pid; } 2>/dev/null
    rc=$?
    # with job control, wait also returns when the job stops (128 + SIGSTOP): wait again for its
    # end — whether or not it is still alive (bash keeps a reaped child's status for wait; asking
    # kill -0 first raced with the process dying and kept the stop's status)
    n_waits=0
    while [ $rc -gt 128 ] && [ "$(kill -l $((rc - 128)) 2>/dev/null)" = STOP ] && [ $n_waits -lt 100 ]; do
        { wait $pid; } 2>/dev/null
        rc=$?
        n_waits=$((n_waits + 1))
    done
    check_log "signals: a second signal ends the process at once, killed by it (rc $rc)" "$d.log" \
        test \( $rc -eq 143 -o $rc -eq 130 \) -a "$(grep -c 'second signal: stopping at once' "$d.log")" -eq 1
    check_log "signals: ... without a checkpoint" "$d.log" test ! -e "$d/checkpoint/LATEST"
fi

if want checkpoints; then
    cp -r "$tmp/model" "$tmp/cmodel"
    cp "$tmp/data.txt" "$tmp/cdata.txt"
    cflags=(--model "$tmp/cmodel" --data "$tmp/cdata.txt" --seq 16 --micro-batch 2 --grad-accum 2 --warmup 1
        --eval-every 3 --eval-batches 2 --lr 1e-2 --rank 4 --alpha 8 --max-steps 6)
    train "${cflags[@]}" --seed 7 --stop-after 3 --out "$tmp/c0" >"$tmp/c0.log" 2>&1
    train "${cflags[@]}" --seed 8 --stop-after 3 --out "$tmp/cother" >"$tmp/cother.log" 2>&1
    st=checkpoint/step-3/state.safetensors
    c=$tmp/c
    fresh() { rm -rf "$c" && cp -r "$tmp/c0" "$c" && rm -f "$c/.refine.lock"; }
    resume() { train "${cflags[@]}" --seed 7 --out "$c" --resume "$c" "$@" >"$tmp/c.log" 2>&1; }
    resum() { (cd "$c/checkpoint/step-3" && sha256sum state.safetensors trainer.json >SHA256SUMS); }
    n_refused=0
    refused() { # refused NAME PHRASE: the resume exits 1 (not a crash) with PHRASE in its message
        local rc=$? log=$tmp/c-refused-$((++n_refused)).log
        cp "$tmp/c.log" "$log"
        check_log "checkpoints: $1: refused (exit $rc)" "$log" test $rc -eq 1
        check_log "checkpoints: $1: the message says '$2'" "$log" has "$log" "$2"
    }
    size=$(stat -c %s "$tmp/c0/$st")
    for off in 9 $((size / 2)) $((size - 3)); do
        fresh
        byte=$(od -An -tu1 -j $off -N1 "$c/$st" | tr -d ' ')
        printf "\\$(printf %03o $((byte ^ 16)))" | dd of="$c/$st" bs=1 seek=$off conv=notrunc 2>/dev/null
        resume
        refused "bit 4 of byte $off flipped" "step-3/state.safetensors: its sha256"
    done
    fresh
    truncate -s -5 "$c/$st"
    resume
    refused "truncated state" "step-3/state.safetensors: its sha256"
    fresh
    cp "$tmp/cother/$st" "$c/$st"
    resume
    refused "state swapped in from another run" "step-3/state.safetensors: its sha256"
    fresh
    cp "$tmp/cother/checkpoint/step-3/trainer.json" "$c/checkpoint/step-3/trainer.json"
    resume
    refused "trainer.json swapped in from another run" "step-3/trainer.json: its sha256"
    for edit in '"position":12/"position":-3/"position"' '"step":3/"step":1e15/"step"' \
        '"step":3/"step":999999/past this run'"'"'s 6 steps' '"micro_index":6/"micro_index":2.5/"micro_index"' \
        '"epoch":0/"epoch":7/do not follow from step 3'; do
        IFS=/ read -r from to phrase <<<"$edit"
        fresh
        sed -i "s/$from/$to/" "$c/checkpoint/step-3/trainer.json"
        resum
        resume
        refused "trainer.json with $to (checksums recomputed)" "$phrase"
    done
    fresh
    echo "a line added behind the checkpoint's back" >>"$tmp/cdata.txt"
    resume
    refused "data changed behind the same path" "the data file $tmp/cdata.txt differs from the one the checkpoint was made with"
    check_log "checkpoints: ... and says --resume-anyway" "$tmp/c.log" has "$tmp/c.log" "--resume-anyway"
    resume --resume-anyway
    check_log "checkpoints: --resume-anyway continues with the new data" "$tmp/c.log" test $? -eq 0 -a "$(n_train "$c")" -eq 6
    check_log "checkpoints: ... and metrics.jsonl records what it accepted" "$tmp/c.log" has "$c/metrics.jsonl" '"accepted":.*cdata.txt'
    cp "$tmp/data.txt" "$tmp/cdata.txt"
    fresh
    msize=$(stat -c %s "$tmp/cmodel/model.safetensors")
    printf '\x3f' | dd of="$tmp/cmodel/model.safetensors" bs=1 seek=$((msize - 2)) conv=notrunc 2>/dev/null
    resume
    refused "a base-model weight changed behind the same path" "the model file $tmp/cmodel/model.safetensors is not one the checkpoint was made with"
    cp "$tmp/model/model.safetensors" "$tmp/cmodel/model.safetensors"
    fresh
    printf '{"kind":"train","step":4,"lo' >>"$c/metrics.jsonl"
    resume
    check_log "checkpoints: a half last line in metrics.jsonl (a kill) does not block the resume" "$tmp/c.log" \
        test $? -eq 0 -a "$(n_train "$c")" -eq 6
    fresh
    resume
    check_log "checkpoints: the untouched checkpoint resumes" "$tmp/c.log" test $? -eq 0
fi

if want tokenizer; then
    tok=tests/unit/testdata/bytes_tokenizer.json
    mk() { mkdir -p "$tmp/$1" && cp "$tmp/model/config.json" "$tmp/model/model.safetensors" "$tmp/$1/"; }
    mk t_added
    sed 's/"added_tokens": \[\]/"added_tokens": [{"id": 300, "content": "<|x|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}]/' \
        "$tok" >"$tmp/t_added/tokenizer.json"
    train "${common[@]}" --model "$tmp/t_added" --max-steps 2 --out "$tmp/t1" >"$tmp/t1.log" 2>&1
    check_log "tokenizer: an id beyond the model's vocabulary: exit 1 naming the file and the id" "$tmp/t1.log" \
        test $? -eq 1 -a "$(grep -c "t_added/tokenizer.json: the tokenizer has token id 300 ('<|x|>') but the model's vocabulary has 256" "$tmp/t1.log")" -eq 1
    mk t_nonl
    sed '/"Ċ": 10,/d' "$tok" >"$tmp/t_nonl/tokenizer.json"
    train "${common[@]}" --model "$tmp/t_nonl" --max-steps 2 --out "$tmp/t2" >"$tmp/t2.log" 2>&1
    check_log "tokenizer: data with a byte the vocabulary lacks: exit 1 naming file, line and byte" "$tmp/t2.log" \
        test $? -eq 1 -a "$(grep -c "data.txt:1: the byte 0x0a has no token" "$tmp/t2.log")" -eq 1
    mk t_bos
    awk '/"post_processor": \{/ { print " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [0], \"tokens\": [\"<s>\"]}}},"; skip = 1; next }
        skip && /^ },/ { skip = 0; next } !skip && !/"Ā": 0,/ { print }' "$tok" >"$tmp/t_bos/tokenizer.json"
    train "${common[@]}" --model "$tmp/t_bos" --max-steps 2 --out "$tmp/t3" >"$tmp/t3.log" 2>&1
    check_log "tokenizer: BOS on a gap of the vocabulary: exit 1 naming it" "$tmp/t3.log" \
        test $? -eq 1 -a "$(grep -c "t_bos/tokenizer.json: the beginning-of-sequence id 0 is not a token" "$tmp/t3.log")" -eq 1
    mk t_eos
    sed '/"Ă": 2,/d' "$tok" >"$tmp/t_eos/tokenizer.json"
    train "${common[@]}" --model "$tmp/t_eos" --max-steps 2 --out "$tmp/t4" >"$tmp/t4.log" 2>&1
    check_log "tokenizer: the model's EOS on a gap of the vocabulary: exit 1 naming it" "$tmp/t4.log" \
        test $? -eq 1 -a "$(grep -c "the end-of-sequence id 2 (the model's eos_token_id) is not a token" "$tmp/t4.log")" -eq 1
fi

if want data; then
    for i in $(seq 1 40); do
        echo "{\"prompt\": \"Question $i: what follows line $i?\", \"response\": \" Line $((i + 1)).\"}"
    done >"$tmp/qa.json"
    cp "$tmp/qa.json" "$tmp/qa.JSONL"
    cp "$tmp/qa.json" "$tmp/qa.txt"
    trained() { sed -n 's/^data: .* \([0-9]*\) tokens (\([0-9]*\) trained).*/\1 \2/p' "$1"; } # "total trained"
    for f in qa.json qa.JSONL qa.txt; do
        train --model "$tmp/model" "${settings[@]}" --data "$tmp/$f" --max-steps 2 --out "$tmp/d_$f" >"$tmp/d_$f.log" 2>&1
        read -r total n <<<"$(trained "$tmp/d_$f.log")"
        check_log "data: $f is read as JSON lines: prompts not trained ($n of $total tokens trained)" "$tmp/d_$f.log" \
            test -n "$total" -a "${n:-0}" -gt 0 -a "$((2 * ${n:-0}))" -lt "${total:-0}"
    done
    train --model "$tmp/model" "${settings[@]}" --data "$tmp/qa.json" --data-format text --max-steps 2 --out "$tmp/d_text" \
        >"$tmp/d_text.log" 2>&1
    read -r total n <<<"$(trained "$tmp/d_text.log")"
    check_log "data: --data-format text trains the same file as text ($n of $total)" "$tmp/d_text.log" \
        test -n "$total" -a "$n" = "$total"
    { head -3 "$tmp/qa.json"; echo '{"text": "x"} garbage'; } >"$tmp/trail.jsonl"
    train --model "$tmp/model" "${settings[@]}" --data "$tmp/trail.jsonl" --max-steps 2 --out "$tmp/d_trail" >"$tmp/d_trail.log" 2>&1
    check_log "data: text after a JSON object: exit 1 naming file and line" "$tmp/d_trail.log" \
        test $? -eq 1 -a "$(grep -c 'trail.jsonl:4: unexpected text after the JSON object' "$tmp/d_trail.log")" -eq 1
fi

if want resume; then
    r=$tmp/r
    train "${common[@]}" --max-steps 6 --stop-after 3 --out "$r" >"$tmp/r1.log" 2>&1
    train "${common[@]}" --max-steps 6 --rank 8 --out "$r" --resume "$r" >"$tmp/r2.log" 2>&1
    check_log "resume: another --rank is refused naming it" "$tmp/r2.log" test $? -eq 1 -a "$(grep -c -- '--rank 4, this run has 8' "$tmp/r2.log")" -eq 1
    train "${common[@]}" --max-steps 6 --seed 8 --out "$r" --resume "$r" >"$tmp/r3.log" 2>&1
    check_log "resume: another --seed is refused naming it" "$tmp/r3.log" test $? -eq 1 -a "$(grep -c -- '--seed 7, this run has 8' "$tmp/r3.log")" -eq 1
    train "${common[@]}" --max-steps 6 --micro-batch 1 --out "$r" --resume "$r" >"$tmp/r4.log" 2>&1
    check_log "resume: fewer sequences per step are refused" "$tmp/r4.log" test $? -eq 1 -a "$(grep -c 'micro-batch × grad-accum' "$tmp/r4.log")" -eq 1
    train "${common[@]}" --max-steps 2 --out "$r" --resume "$r" >"$tmp/r5.log" 2>&1
    check_log "resume: a --max-steps below the checkpoint's step is refused" "$tmp/r5.log" test $? -eq 1 -a "$(grep -c "past this run's 2 steps" "$tmp/r5.log")" -eq 1
    train "${common[@]}" --max-steps 6 --lr 5e-3 --out "$r" --resume "$r" >"$tmp/r6.log" 2>&1
    check_log "resume: a lower --lr is accepted" "$tmp/r6.log" test $? -eq 0 -a "$(n_train "$r")" -eq 6
    check_log "resume: ... said at the start" "$tmp/r6.log" has "$tmp/r6.log" "resumed with changes: --lr 0.00999999978 -> 0.00499999989"
    check_log "resume: ... and recorded in metrics.jsonl" "$tmp/r6.log" \
        has "$r/metrics.jsonl" '{"kind":"resume","step":3,.*"changed":{"lr":{"from":0.00999999978,"to":0.00499999989}'
fi

if [ $fail -ne 0 ]; then
    for f in $(printf '%s\n' "${failed_logs[@]}" | sort -u); do echo "== $f"; tail -n 8 "$f"; done
fi
echo "ref_train_robust_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
