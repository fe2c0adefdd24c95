#!/usr/bin/env python3
"""What one tiny op costs in instructions and in code, measured by valgrind.

Timings of a tiny op on a shared 2-core VM swing up to 2x between runs;
instruction counts do not, and the size of the code an op runs explains
much of the swing: a sibling hyperthread that shares the core's
instruction cache halves it, and an op path whose code no longer fits
misses on every op. For a program that takes `OPS [RECORDED [REPS]]`
(`crates/tensorguard/examples/tiny_chain.rs`, or candle's
`benches/candle-train/src/bin/candle-chain.rs`) this runs OPS and 2*OPS
ops and prints, per op (the difference of the two runs, so start-up and
warm-up cancel):

- instructions executed (callgrind), and how many of them ran in the
  program's own code and in each library (glibc's malloc and free among
  them);
- hot code: the distinct instructions every op executes, and the 64-byte
  cache lines they occupy (the op's instruction-cache footprint);
- instruction-cache misses with a 32 KiB 8-way L1i, and with 16 KiB
  4-way (half of it, as when the sibling hyperthread is busy).

    cargo build --release -p tensorguard --example tiny_chain
    python3 scripts/op_footprint.py target/release/examples/tiny_chain
    python3 scripts/op_footprint.py --recorded target/release/examples/tiny_chain
    CARGO_TARGET_DIR=target/candle-bench cargo build --release \
        --manifest-path benches/candle-train/Cargo.toml --bin candle-chain
    python3 scripts/op_footprint.py target/candle-bench/release/candle-chain

Needs valgrind (Debian: `apt-get install valgrind`); nothing in the build
or the tests runs it.
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

POSITION = re.compile(r"^(0x[0-9a-f]+|\+\d+|-\d+|\*)\s+\S+\s+(\d+)")


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"`{' '.join(cmd)}` failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return out.stderr


# `ob=` names the object of the cost lines that follow; `cob=` that of a
# call's target, and may be the first to name an object
OBJECT = re.compile(r"^(c?)ob=\((\d+)\)(?: (.*))?$")


def per_address(path):
    """Instructions executed at each code address (the self cost lines of a
    callgrind profile made with --dump-instr=yes; one Ir per execution), and
    per object file (the program, libc, ...)."""
    counts = collections.Counter()
    per_object = collections.Counter()
    objects, obj = {}, "?"
    addr, after_call = 0, False
    with open(path) as f:
        for line in f:
            if line.startswith("calls="):
                after_call = True  # the next cost line is the call's inclusive cost
                continue
            o = OBJECT.match(line.rstrip("\n"))
            if o:
                if o.group(3):
                    objects[o.group(2)] = os.path.basename(o.group(3))
                if not o.group(1):
                    obj = objects.get(o.group(2), "?")
                continue
            m = POSITION.match(line)
            if not m:
                continue
            a = m.group(1)
            if a.startswith("0x"):
                addr = int(a, 16)
            elif a[0] == "+":
                addr += int(a[1:])
            elif a[0] == "-":
                addr -= int(a[1:])
            if after_call:
                after_call = False
                continue
            counts[addr] += int(m.group(2))
            per_object[obj] += int(m.group(2))
    return counts, per_object


def callgrind(program, ops, recorded, tmp):
    path = os.path.join(tmp, f"callgrind.{ops}")
    err = run(["valgrind", "--tool=callgrind", "--dump-instr=yes",
               f"--callgrind-out-file={path}", program, str(ops), recorded, "1"])
    total = int(re.search(r"refs:\s+([\d,]+)", err).group(1).replace(",", ""))
    return (total, *per_address(path))


def i1_misses(program, ops, recorded, i1):
    err = run(["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--I1={i1}",
               "--cachegrind-out-file=/dev/null", program, str(ops), recorded, "1"])
    return int(re.search(r"I1\s+misses:\s+([\d,]+)", err).group(1).replace(",", ""))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("program", help="a program taking OPS [RECORDED [REPS]]")
    p.add_argument("--ops", type=int, default=20000, help="ops in the smaller run (default 20000)")
    p.add_argument("--recorded", action="store_true", help="ops recorded by autograd")
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    n, rec = args.ops, "1" if args.recorded else "0"
    with tempfile.TemporaryDirectory() as tmp:
        t1, c1, o1 = callgrind(args.program, n, rec, tmp)
        t2, c2, o2 = callgrind(args.program, 2 * n, rec, tmp)
    # executed at least once per op: the extra ops of the second run
    hot = [a for a in c2 if c2[a] - c1.get(a, 0) >= n]
    lines = {a >> 6 for a in hot}
    print(f"{args.program}{' (recorded)' if args.recorded else ''}, per op:")
    print(f"{'  instructions executed':42s}{(t2 - t1) / n:8.0f}")
    # the program's own code against the libraries it calls: glibc's
    # malloc and free run many instructions per call, quickly, so
    # programs that allocate differently compare by their own code
    program = os.path.basename(args.program)
    for obj in sorted(o2, key=lambda o: o1.get(o, 0) - o2[o]):
        per_op = (o2[obj] - o1.get(obj, 0)) / n
        if per_op >= 1:
            mine = " (its own code)" if obj == program else ""
            print(f"{'    in ' + obj + mine:42s}{per_op:8.0f}")
    print(f"{'  hot code':42s}{len(hot):8d} instructions in {len(lines)} lines of 64 bytes ({len(lines) * 64 / 1024:.1f} KiB)")
    for i1, what in (("32768,8,64", "32 KiB 8-way"), ("16384,4,64", "16 KiB 4-way")):
        m1 = i1_misses(args.program, n, rec, i1)
        m2 = i1_misses(args.program, 2 * n, rec, i1)
        print(f"{'  L1i misses, ' + what:42s}{(m2 - m1) / n:8.1f}")


if __name__ == "__main__":
    main()
