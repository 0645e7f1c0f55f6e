#!/usr/bin/env python3
"""tools/ktrace/summary.py — per-step kernel times from two ktrace runs (tools/ktrace/ktrace.c) of
the same command that differ only in --steps: (B − A) / (steps_B − steps_A) removes the setup and
warm-up, leaving what one step launches.

    tools/ktrace/summary.py A.tsv STEPS_A B.tsv STEPS_B [--min-us 30]

Prints the kernel time of a step, then one line per kernel: ms a step, launches a step, µs a
launch, name (demangled by c++filt when it is installed)."""
import argparse
import shutil
import subprocess
import sys


def load(path):
    kernels, total = {}, None
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if fields[0].startswith("#"):
                total = int(fields[1])
                continue
            if len(fields) != 3:
                sys.exit(f"summary.py: {path}: not a ktrace file (line {line[:60]!r})")
            kernels[fields[0]] = (int(fields[1]), int(fields[2]))
    if total is None:
        sys.exit(f"summary.py: {path}: no #total_kernel_ns line (did the program exit normally?)")
    return kernels, total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a"), p.add_argument("steps_a", type=int)
    p.add_argument("b"), p.add_argument("steps_b", type=int)
    p.add_argument("--min-us", type=float, default=30.0, help="leave out kernels under this many µs a step")
    o = p.parse_args()
    n = o.steps_b - o.steps_a
    if n <= 0:
        sys.exit("summary.py: STEPS_B must be larger than STEPS_A")
    ka, ta = load(o.a)
    kb, tb = load(o.b)
    rows = []
    for name, (count, ns) in kb.items():
        c0, ns0 = ka.get(name, (0, 0))
        rows.append(((ns - ns0) / n / 1e3, (count - c0) / n, name))
    rows.sort(reverse=True)
    names = [r[2] for r in rows]
    if shutil.which("c++filt"):
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
        names = out.split("\n")[: len(rows)]
    print(f"kernel time a step: {(tb - ta) / n / 1e6:.2f} ms")
    for (us, launches, _), name in zip(rows, names):
        if us < o.min_us:
            continue
        print(f"{us / 1e3:8.3f} ms {launches:6.0f}x {us / max(launches, 1):8.1f} us  {name}")


if __name__ == "__main__":
    main()
