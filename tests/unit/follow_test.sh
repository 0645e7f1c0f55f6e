#!/usr/bin/env bash
# follow_test.sh — tools/follow.py on a recorded metrics.jsonl (testdata/metrics_run: a 12-step
# //ref:train run of the tiny golden model, evaluations every 4 steps; the test adds sample
# records of the documented form):
#   1. --once: TensorBoard holds train/loss, train/lr, ... at steps 1..12 and eval/val_loss at
#      0, 4, 8, 12, with the file's values;
#   2. following a file that grows line by line (a line written in two pieces is read once
#      complete), then is rewritten as a resumed run rewrites it (truncated to its checkpoint's
#      records, then the same records again and new ones): every step is logged exactly once and
#      the samples arrive as text;
#   3. Weights & Biases offline: a run folder that `wandb sync` uploads, holding every training
#      loss.
# Needs a python3 with tensorboard and wandb (torch adds the samples' text): tools/setup.sh makes
# one, the venv $REFINE_CACHE/venv (tools/follow_requirements.txt). REFINE_PYTHON names the
# interpreter instead (bazel test --test_env=REFINE_PYTHON=...); when it is set, as .ci/run sets it,
# a missing tensorboard or wandb fails the test. Without REFINE_PYTHON the first python3 with
# tensorboard is used, and a missing library skips its part, saying so (torch's part always).
set -uo pipefail
follow=${1:?usage: follow_test.sh FOLLOW.py RECORDED_METRICS.jsonl}
recorded=${2:?usage: follow_test.sh FOLLOW.py RECORDED_METRICS.jsonl}
tmp=${TEST_TMPDIR:-/tmp}/follow_test.$$
mkdir -p "$tmp"
export HOME=${HOME:-$tmp} WANDB_SILENT=true WANDB_DISABLE_GIT=true
source tests/common/checks.sh || exit 1 # check NAME COMMAND...; pass=0 fail=0
if [ -n "${REFINE_PYTHON:-}" ]; then
    check "REFINE_PYTHON=$REFINE_PYTHON imports tensorboard and wandb (tools/setup.sh: \$REFINE_CACHE/venv)" \
        "$REFINE_PYTHON" -c "import tensorboard, wandb"
    [ $fail -eq 0 ] || { echo "follow_test: $pass passed, $fail failed"; exit 1; }
fi
# The first Python with tensorboard: $REFINE_PYTHON, the venv of tools/setup.sh, python3 on the PATH
# (Bazel's fixed one), the user's pyenv or /usr/local one.
py=""
for cand in "${REFINE_PYTHON:-}" "${REFINE_CACHE:-$HOME/.cache/refine}/venv/bin/python3" python3 \
    "$HOME/.pyenv/shims/python3" /usr/local/bin/python3; do
    [ -n "$cand" ] && "$cand" -c "import tensorboard" 2>/dev/null && { py=$(command -v "$cand"); break; }
done
if [ -z "$py" ]; then
    echo "skip no python3 with the tensorboard package (tools/setup.sh makes one): tools/follow.py is not exercised"
    echo "follow_test: 0 passed, 0 failed"
    exit 0
fi
python3() { "$py" "$@"; }
echo "python: $py"
has_torch=$(python3 -c 'import torch.utils.tensorboard' 2>/dev/null && echo 1 || echo 0)

# The TensorBoard events of LOGDIR/RUN as "tag step value" lines, and the text entries' tags.
# A scalar comes in either of the two forms TensorBoard reads: the legacy simple_value (torch's
# SummaryWriter) or a float32 tensor under the "scalars" plugin (tensorboard.summary.Writer).
events() {
    python3 - "$1" <<'PY'
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
ea.Reload()
for tag in sorted(ea.Tags()["scalars"]):
    for ev in ea.Scalars(tag):
        print(tag, ev.step, repr(ev.value))
for tag in sorted(ea.Tags()["tensors"]):
    scalar = ea.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"
    for ev in ea.Tensors(tag):
        if scalar:
            print(tag, ev.step, repr(float(tensor_util.make_ndarray(ev.tensor_proto).item())))
        else:
            print("text", tag, ev.step)
PY
}
# What the recorded file says: "tag step value" for each train and eval number (float32).
expected() {
    python3 - "$1" <<'PY'
import json, sys
import numpy as np
for line in open(sys.argv[1]):
    r = json.loads(line)
    keys = {"train": ("loss", "lr", "grad_norm", "tokens_per_s", "mfu", "mem_GiB"), "eval": ("val_loss", "val_ppl")}.get(r["kind"], ())
    for k in keys:
        print(f"{r['kind']}/{k}", r["step"], repr(float(np.float32(r[k]))))
PY
}

# 1. --once
mkdir -p "$tmp/once"
cp "$recorded" "$tmp/once/metrics.jsonl"
python3 "$follow" "$tmp/once" --tensorboard "$tmp/tb" --once 2>"$tmp/once.log"
events "$tmp/tb/once" | grep -v '^text' | sort >"$tmp/got1"
expected "$recorded" | sort >"$tmp/want1"
check "--once: every train and eval number at its step ($(wc -l <"$tmp/want1") values)" cmp -s "$tmp/got1" "$tmp/want1"

# 2. growth, a split line, a resume's rewrite, samples
run=$tmp/grow
mkdir -p "$run"
python3 "$follow" "$run" --tensorboard "$tmp/tb" --poll 0.1 --idle-exit 4 2>"$tmp/grow.log" &
pid=$!
for _ in $(seq 1 300); do ls "$tmp"/tb/grow/events.* >/dev/null 2>&1 && break; sleep 0.1; done # started
n=$(wc -l <"$recorded")
head -n 6 "$recorded" >"$run/metrics.jsonl"
sleep 0.5
line7=$(sed -n 7p "$recorded")
printf '%s' "${line7:0:20}" >>"$run/metrics.jsonl" # half a line: not read yet
sleep 0.5
printf '%s\n' "${line7:20}" >>"$run/metrics.jsonl"
sed -n "8,${n}p" "$recorded" | head -n 4 >>"$run/metrics.jsonl"
sleep 0.5
# the resume: the file rewritten in place with the records up to step 4, then everything again
head -n 7 "$recorded" >"$run/metrics.jsonl"
sleep 0.5
sed -n "8,${n}p" "$recorded" >>"$run/metrics.jsonl"
printf '%s\n' '{"kind":"sample","step":12,"index":0,"prompt":"In the beginning","completion":" 1 the model","tokens":4}' \
    '{"kind":"sample","step":12,"index":1,"prompt":"line","completion":" 7 follows","tokens":3}' >>"$run/metrics.jsonl"
sleep 0.5
# a second resume whose rewrite has grown past the old end before the follower looks again
{ head -n 7 "$recorded"; sed -n "8,${n}p" "$recorded" | sed 's/"elapsed_s":/"elapsed_s":1/'; tail -n 2 "$run/metrics.jsonl"; } \
    >"$run/metrics.tmp"
cat "$run/metrics.tmp" >"$run/metrics.jsonl"
printf '%s\n' '{"kind":"sample","step":12,"index":2,"prompt":"x","completion":"y","tokens":1}' >>"$run/metrics.jsonl"
wait $pid
events "$tmp/tb/grow" >"$tmp/got2"
grep -v '^text' "$tmp/got2" | sort >"$tmp/got2s"
check "growth, a split line and a resume's rewrite: each value logged once ($(wc -l <"$tmp/got2s") values)" \
    cmp -s "$tmp/got2s" "$tmp/want1"
if [ "$has_torch" = 1 ]; then
    check "the three samples as text at step 12" test "$(grep -c '^text sample/[012]/text_summary 12' "$tmp/got2")" -eq 3
else
    echo "skip torch is not installed: the samples' text is not checked"
fi

# 3. W&B offline
if python3 -c 'import wandb' 2>/dev/null; then
    python3 "$follow" "$tmp/once" --wandb refine-test --offline --wandb-dir "$tmp/wb" --once >"$tmp/wandb.log" 2>&1
    rc=$?
    runfile=$(ls "$tmp"/wb/wandb/offline-run-*/run-*.wandb 2>/dev/null | head -1)
    check "W&B offline: exit 0 ($rc), an offline run for wandb sync" test $rc -eq 0 -a -s "$runfile"
    # the run file's records are protobuf with the logged values as JSON text inside: every
    # training loss of the recorded file is there (wandb 0.31 has no public reader of the file)
    missing=0
    for loss in $(grep '"kind":"train"' "$recorded" | sed 's/.*"loss":\([^,]*\).*/\1/'); do
        grep -aqF "$loss" "$runfile" || missing=$((missing + 1))
    done
    check "W&B offline: the run holds every training loss ($missing missing)" test $missing -eq 0
else
    echo "skip python3 has no wandb package (tools/setup.sh's venv has it): the W&B part is not exercised"
fi
echo "follow_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
