#!/usr/bin/env python3
"""tools/follow.py — follow a refine training run in TensorBoard and/or Weights & Biases.

    python3 tools/follow.py RUN_DIR --tensorboard LOGDIR          # then: tensorboard --logdir LOGDIR
    python3 tools/follow.py RUN_DIR --wandb PROJECT [--offline]   # offline: `wandb sync` the run later
    python3 tools/follow.py RUN_DIR --tensorboard LOGDIR --once   # log what is there now and exit

refine's trainers need no Python: they write RUN_DIR/metrics.jsonl (train/metrics.h). This follower
tails that file and logs every record with the dashboards' own libraries:
  train   train/loss, train/lr, train/grad_norm, train/tokens_per_s, train/mfu, train/mem_GiB
  eval    eval/val_loss, eval/val_ppl
  sample  a text entry per prompt ("sample/<index>": prompt and completion; TensorBoard through
          torch.utils.tensorboard, W&B as a table of every sample so far)
  run     the options as the run's config (W&B) / a text entry (TensorBoard)
each at its step. It follows the file as it grows (a line is read once it is complete), and
survives the rewrite a resumed run does (--resume truncates the records after its checkpoint and
writes the file again): records are keyed by (kind, step, index), a key is logged once, and the
resumed run writes the same records bit for bit, so nothing is logged twice and nothing is lost.
It ends on Ctrl-C, after --idle-exit seconds without a new record, or at once with --once.

TensorBoard: torch.utils.tensorboard's SummaryWriter when torch is installed (scalars and text),
else the tensorboard package's own writer (tensorboard.summary.Writer: scalars only).
Weights & Biases: wandb (pip install wandb); --offline writes the run under LOGDIR/wandb (or
./wandb) to be uploaded later with `wandb sync`.
"""
import argparse
import json
import os
import sys
import time

TRAIN_KEYS = ("loss", "lr", "grad_norm", "tokens_per_s", "mfu", "mem_GiB")
EVAL_KEYS = ("val_loss", "val_ppl")


class TensorBoardSink:
    def __init__(self, logdir):
        try:
            from torch.utils.tensorboard import SummaryWriter
            self.w, self.text = SummaryWriter(log_dir=logdir), True
        except ImportError:
            from tensorboard.summary import Writer
            self.w, self.text = Writer(logdir), False
            print("follow: torch is not installed: TensorBoard gets the scalars, not the samples' text", file=sys.stderr)

    def scalar(self, tag, value, step):
        self.w.add_scalar(tag, value, step)

    def run(self, header):
        if self.text:
            self.w.add_text("run/options", "```\n" + json.dumps(header.get("options", {}), indent=2) + "\n```", 0)

    def sample(self, rec):
        if self.text:
            self.w.add_text(f"sample/{rec.get('index', 0)}",
                            f"**prompt:** {rec.get('prompt', '')}\n\n**completion:** {rec.get('completion', '')}",
                            rec["step"])

    def flush(self):
        self.w.flush()

    def close(self):
        self.w.close()


class WandbSink:
    def __init__(self, project, name, offline, logdir):
        import wandb
        self.wandb = wandb
        self.project, self.name, self.offline, self.logdir = project, name, offline, logdir
        self.runobj = None
        self.rows = []
        self.pending = {}
        self.pending_step = None

    def _start(self, config):
        if self.runobj is None:
            self.runobj = self.wandb.init(project=self.project, name=self.name, config=config,
                                          mode="offline" if self.offline else "online", dir=self.logdir)

    def run(self, header):
        self._start({"engine": header.get("engine"), "total_steps": header.get("total_steps"),
                     **header.get("options", {})})

    def _flush_step(self):
        if self.pending_step is not None and self.pending:
            self.runobj.log(self.pending, step=self.pending_step)
        self.pending, self.pending_step = {}, None

    def scalar(self, tag, value, step):
        self._start({})
        if self.pending_step is not None and step != self.pending_step:
            self._flush_step()
        self.pending_step = step
        self.pending[tag] = value

    def sample(self, rec):
        self._start({})
        self.rows.append([rec["step"], rec.get("index", 0), rec.get("prompt", ""), rec.get("completion", "")])
        table = self.wandb.Table(columns=["step", "index", "prompt", "completion"], data=list(self.rows))
        self.scalar("samples", table, rec["step"])

    def flush(self):
        if self.runobj is not None:
            self._flush_step()

    def close(self):
        if self.runobj is not None:
            self._flush_step()
            self.runobj.finish()


def record_key(rec):
    return (rec.get("kind"), rec.get("step"), rec.get("index"))


class Follower:
    """Complete lines of RUN_DIR/metrics.jsonl, each key once, across growth and rewrites."""

    def __init__(self, path, sinks):
        self.path, self.sinks = path, sinks
        self.offset, self.inode, self.partial, self.tail = 0, None, b"", b""
        self.seen = set()
        self.logged = 0

    def poll(self):
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return 0
        with open(self.path, "rb") as f:
            # a new file, or the same one rewritten (a resume rewrites it in place, and may have
            # grown past the old end again): the bytes before our offset changed. Read it again
            # from the start; the keys already logged are skipped.
            same = st.st_ino == self.inode and st.st_size >= self.offset
            if same and self.tail:
                f.seek(self.offset - len(self.tail))
                same = f.read(len(self.tail)) == self.tail
            if not same:
                self.inode, self.offset, self.partial, self.tail = st.st_ino, 0, b"", b""
            f.seek(self.offset)
            data = f.read()
        if not data:
            return 0
        self.offset += len(data)
        self.tail = (self.tail + data)[-256:]
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()  # an unfinished last line waits for its newline
        n = 0
        for raw in lines:
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                print(f"follow: {self.path}: skipping a line that is not JSON", file=sys.stderr)
                continue
            key = record_key(rec)
            if key in self.seen:
                continue
            self.seen.add(key)
            self.log(rec)
            n += 1
        for s in self.sinks:
            s.flush()
        self.logged += n
        return n

    def log(self, rec):
        kind, step = rec.get("kind"), rec.get("step", 0)
        for s in self.sinks:
            if kind == "run":
                s.run(rec)
            elif kind == "train":
                for k in TRAIN_KEYS:
                    if isinstance(rec.get(k), (int, float)):
                        s.scalar(f"train/{k}", rec[k], step)
            elif kind == "eval":
                for k in EVAL_KEYS:
                    if isinstance(rec.get(k), (int, float)):
                        s.scalar(f"eval/{k}", rec[k], step)
            elif kind == "sample":
                s.sample(rec)


def main():
    ap = argparse.ArgumentParser(description="Follow a refine run's metrics.jsonl in TensorBoard and/or W&B.")
    ap.add_argument("run_dir", help="the run's --out folder (holding metrics.jsonl)")
    ap.add_argument("--tensorboard", metavar="LOGDIR", help="write TensorBoard event files under LOGDIR/<run name>")
    ap.add_argument("--wandb", metavar="PROJECT", help="log to Weights & Biases, project PROJECT")
    ap.add_argument("--offline", action="store_true", help="W&B offline mode (upload later with `wandb sync`)")
    ap.add_argument("--wandb-dir", metavar="DIR", help="where W&B keeps its files (default: ./wandb)")
    ap.add_argument("--name", help="the run's name in the dashboards (default: the folder's name)")
    ap.add_argument("--once", action="store_true", help="log what the file holds now, then exit")
    ap.add_argument("--poll", type=float, default=1.0, help="seconds between looks at the file (default 1)")
    ap.add_argument("--idle-exit", type=float, default=0.0, help="exit after this many seconds without a new record")
    a = ap.parse_args()
    if not a.tensorboard and not a.wandb:
        ap.error("give --tensorboard LOGDIR and/or --wandb PROJECT")
    path = os.path.join(a.run_dir, "metrics.jsonl")
    name = a.name or os.path.basename(os.path.normpath(a.run_dir))
    sinks = []
    if a.tensorboard:
        sinks.append(TensorBoardSink(os.path.join(a.tensorboard, name)))
    if a.wandb:
        sinks.append(WandbSink(a.wandb, name, a.offline, a.wandb_dir))
    f = Follower(path, sinks)
    last = time.monotonic()
    try:
        while True:
            if f.poll():
                last = time.monotonic()
            if a.once or (a.idle_exit > 0 and time.monotonic() - last >= a.idle_exit):
                break
            time.sleep(a.poll)
    except KeyboardInterrupt:
        pass
    for s in sinks:
        s.close()
    print(f"follow: {f.logged} records of {path} logged", file=sys.stderr)


if __name__ == "__main__":
    main()
