#!/usr/bin/env python3
"""Peer benchmark: the same micro-ops tensorguard benchmarks, measured on PyTorch CPU.

Usage:  python3 benches/peers/pytorch_bench.py [--json out.json] [--quick]

Single process, PyTorch's default intra-op thread count (reported). Each op is
warmed up, then timed in interleaved rounds with time.perf_counter; the median is reported
(seconds per op). Inputs are deterministic (arange / fill), never random.
The whole run is bounded (well under 2 minutes on a 2-core machine).

JSON keys (seconds per op): add_alloc_16M, add_out_16M, mul_alloc_16M, copy_16M,
memcpy_16M (numpy np.copyto into a preallocated array, the machine's memcpy
reference), transpose_contig_4096, matmul_1024, tiny_add; plus memcpy_16M_GBps,
*_GBps for the memory-bound ops, matmul_1024_GFLOPs, tiny_add_ns and metadata.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import time

import torch

try:
    import numpy as np
except ImportError:  # numpy is optional; the memcpy reference is skipped without it
    np = None

N16M = 16 * 1024 * 1024
F32 = 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write results as JSON to this path")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    rounds, per_round = (2, 3) if args.quick else (15, 5)
    reps = rounds * per_round
    torch.manual_seed(0)  # nothing random is used; set for good measure

    res = {}
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        "numpy_version": np.__version__ if np is not None else None,
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "python": platform.python_version(),
        "samples_per_op": reps,
        "rounds": rounds,
        "statistic": "median seconds per op over all samples after warm-up (interleaved rounds)",
    }

    with torch.inference_mode():
        a = torch.arange(N16M, dtype=torch.float32) / N16M
        b = torch.arange(N16M, dtype=torch.float32).flip(0).contiguous() / N16M
        c = torch.empty_like(a)
        x = torch.arange(4096 * 4096, dtype=torch.float32).view(4096, 4096)
        m1 = (torch.arange(1024 * 1024, dtype=torch.float32) % 97).view(1024, 1024) / 97
        m2 = (torch.arange(1024 * 1024, dtype=torch.float32) % 89).view(1024, 1024) / 89
        s1 = torch.tensor([1.5])
        s2 = torch.tensor([2.25])
        ops = {  # name -> (fn, calls per sample)
            "add_alloc_16M": (lambda: a + b, 1),
            "add_out_16M": (lambda: torch.add(a, b, out=c), 1),
            "mul_alloc_16M": (lambda: a * b, 1),
            "copy_16M": (lambda: c.copy_(a), 1),
        }
        if np is not None:
            src = np.arange(N16M, dtype=np.float32)
            dst = np.empty_like(src)
            ops["memcpy_16M"] = (lambda: np.copyto(dst, src), 1)
        ops["transpose_contig_4096"] = (lambda: x.t().contiguous(), 1)
        ops["matmul_1024"] = (lambda: m1 @ m2, 1)
        ops["tiny_add"] = (lambda: s1 + s2, 20000)

        # Warm up every op, then run `rounds` interleaved rounds of `per_round` samples per op,
        # so a transient slowdown of the (shared) machine hits all ops alike instead of one.
        for fn, inner in ops.values():
            for _ in range(2 if inner == 1 else 1000):
                fn()
        samples = {k: [] for k in ops}
        for _ in range(rounds):
            for k, (fn, inner) in ops.items():
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    for _ in range(inner):
                        fn()
                    samples[k].append((time.perf_counter() - t0) / inner)
        res = {k: (statistics.median(v), min(v)) for k, v in samples.items()}

    out = dict(meta)
    for k, (med, _) in res.items():
        out[k] = med
    out["min_seconds"] = {k: mn for k, (_, mn) in res.items()}
    gb = 1e9
    bytes16 = N16M * F32
    moved = {  # bytes read + written per op (the usual STREAM-style count)
        "add_alloc_16M": 3 * bytes16, "add_out_16M": 3 * bytes16, "mul_alloc_16M": 3 * bytes16,
        "copy_16M": 2 * bytes16, "memcpy_16M": 2 * bytes16,
        "transpose_contig_4096": 2 * 4096 * 4096 * F32,
    }
    for k, nbytes in moved.items():
        if k in out:
            out[k + "_GBps"] = nbytes / out[k] / gb
    if "memcpy_16M" in out:
        # also the plain "bytes copied per second" figure
        out["memcpy_16M_copied_GBps"] = bytes16 / out["memcpy_16M"] / gb
    out["matmul_1024_GFLOPs"] = 2 * 1024 ** 3 / out["matmul_1024"] / 1e9
    out["tiny_add_ns"] = out["tiny_add"] * 1e9

    print(f"PyTorch CPU peer benchmark  date={meta['date']}  torch={meta['torch_version']}  "
          f"threads={meta['num_threads']}  cpus={meta['cpu_count']}  cpu={meta['processor']}")
    print(f"median of {reps} samples per op ({rounds} interleaved rounds x {per_round}) after warm-up; "
          "a tiny_add sample is the mean of 20000 calls")
    print(f"{'op':<24}{'median':>14}{'min':>14}  {'derived':<}")
    for k, (med, mn) in res.items():
        extra = ""
        if k + "_GBps" in out:
            extra = f"{out[k + '_GBps']:.2f} GB/s (read+write)"
            if k == "memcpy_16M":
                extra += f", {out['memcpy_16M_copied_GBps']:.2f} GB/s copied"
        elif k == "matmul_1024":
            extra = f"{out['matmul_1024_GFLOPs']:.1f} GFLOP/s"
        elif k == "tiny_add":
            extra = f"{out['tiny_add_ns']:.0f} ns/op"
        print(f"{k:<24}{_fmt(med):>14}{_fmt(mn):>14}  {extra}")
    if np is None:
        print("memcpy_16M: skipped (numpy not installed)")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"wrote {args.json}")


def _fmt(sec):
    if sec >= 1e-3:
        return f"{sec * 1e3:.3f} ms"
    if sec >= 1e-6:
        return f"{sec * 1e6:.3f} us"
    return f"{sec * 1e9:.1f} ns"


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    main()
