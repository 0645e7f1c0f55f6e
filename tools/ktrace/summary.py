#!/usr/bin/env python3
"""tools/ktrace/summary.py — per-step kernel times from two ktrace runs (tools/ktrace/ktrace.c) of
the same command that differ only in --steps: (B − A) / (steps_B − steps_A) removes the setup and
warm-up, leaving what one step launches.

    tools/ktrace/summary.py A.tsv STEPS_A B.tsv STEPS_B [--min-us 30]
    tools/ktrace/summary.py A.tsv STEPS_A B.tsv STEPS_B --against A2.tsv STEPS_A2 B2.tsv STEPS_B2 [--min-us 30]

Prints the kernel time of a step, then one line per kernel: ms a step, launches a step, µs a
launch, name (demangled by c++filt when it is installed). With --against (the same command's pair
from another build, say): the two kernel times a step and their change, then one line per kernel
whose time a step changed by at least --min-us: the change in ms, the first pair's and the second
pair's ms a step and launches a step, name — the largest saving first."""
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


def per_step(a, steps_a, b, steps_b):
    """{kernel: (µs a step, launches a step)} and the kernel time a step in ms, from one pair."""
    n = steps_b - steps_a
    if n <= 0:
        sys.exit("summary.py: STEPS_B must be larger than STEPS_A")
    ka, ta = load(a)
    kb, tb = load(b)
    rows = {}
    for name, (count, ns) in kb.items():
        c0, ns0 = ka.get(name, (0, 0))
        rows[name] = ((ns - ns0) / n / 1e3, (count - c0) / n)
    return rows, (tb - ta) / n / 1e6


def demangled(names):
    if not names or not shutil.which("c++filt"):
        return names
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return out.split("\n")[: len(names)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a"), p.add_argument("steps_a", type=int)
    p.add_argument("b"), p.add_argument("steps_b", type=int)
    p.add_argument("--min-us", type=float, default=30.0,
                   help="leave out kernels under this many µs a step (with --against: changes under it)")
    p.add_argument("--against", nargs=4, metavar=("A2", "STEPS_A2", "B2", "STEPS_B2"),
                   help="a second pair of the same command (another build): the change kernel by kernel")
    o = p.parse_args()
    one, total = per_step(o.a, o.steps_a, o.b, o.steps_b)
    if o.against:
        try:
            sa2, sb2 = int(o.against[1]), int(o.against[3])
        except ValueError:
            sys.exit("summary.py: --against takes A2.tsv STEPS_A2 B2.tsv STEPS_B2 (steps as integers)")
        two, total2 = per_step(o.against[0], sa2, o.against[2], sb2)
        rows = []
        for name in set(one) | set(two):
            (us1, l1), (us2, l2) = one.get(name, (0.0, 0.0)), two.get(name, (0.0, 0.0))
            if abs(us2 - us1) >= o.min_us:
                rows.append((us2 - us1, us1, l1, us2, l2, name))
        rows.sort()
        print(f"kernel time a step: {total:.2f} ms -> {total2:.2f} ms ({total2 - total:+.2f})")
        for (d, us1, l1, us2, l2, _), name in zip(rows, demangled([r[5] for r in rows])):
            print(f"{d / 1e3:+8.3f} ms {us1 / 1e3:8.3f} ms {l1:6.0f}x -> {us2 / 1e3:8.3f} ms {l2:6.0f}x  {name}")
        return
    rows = sorted(((us, launches, name) for name, (us, launches) in one.items()), reverse=True)
    print(f"kernel time a step: {total:.2f} ms")
    for (us, launches, _), name in zip(rows, demangled([r[2] for r in rows])):
        if us < o.min_us:
            continue
        print(f"{us / 1e3:8.3f} ms {launches:6.0f}x {us / max(launches, 1):8.1f} us  {name}")


if __name__ == "__main__":
    main()
