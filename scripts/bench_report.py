#!/usr/bin/env python3
"""Print the ratios the core benchmarks are judged by.

Reads criterion's medians from target/criterion (run
`cargo bench -p tensorguard --bench core` first) and, with --pytorch, runs
benches/peers/pytorch_bench.py in the same session (needs `pip install torch
numpy`; never needed to build or test tensorguard).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRIT = os.path.join(ROOT, "target", "criterion")


def median(group, name):
    path = os.path.join(CRIT, group, name, "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"] * 1e-9  # seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pytorch", action="store_true", help="also run the PyTorch peer bench now")
    args = ap.parse_args()

    n = 16 * 1024 * 1024
    memcpy = median("bw16M", "memcpy_parallel")
    memcpy1 = median("bw16M", "memcpy_single")
    rows = []
    gbps = lambda bytes_, s: bytes_ / s / 1e9
    # bandwidth of an elementwise op = bytes read + written; memcpy moves 2 x 64 MiB
    bw_ref = gbps(2 * 4 * n, memcpy)
    for name, nbytes in [("add_alloc", 3), ("mul_alloc", 3), ("add_inplace", 3), ("copy_", 2), ("clone_alloc", 2)]:
        s = median("bw16M", name)
        rows.append((f"{name} 16M f32", s, f"{gbps(nbytes * 4 * n, s):.1f} GB/s = {gbps(nbytes * 4 * n, s) / bw_ref:.2f} x parallel memcpy ({bw_ref:.1f} GB/s)"))
    rows.append(("memcpy 64 MiB, 1 thread", memcpy1, f"{gbps(2 * 4 * n, memcpy1):.1f} GB/s"))
    tr = median("transpose4096", "t_contiguous")
    rows.append(("t().contiguous() 4096^2 f32", tr, ""))
    mm = median("matmul1024", "tensorguard")
    gd = median("matmul1024", "gemm_direct")
    rows.append(("matmul 1024 f32", mm, f"{gd / mm:.2f} x gemm called directly ({gd * 1e3:.2f} ms)"))
    tiny = median("tiny", "add_1elem")
    rows.append(("add of two 1-element tensors", tiny, f"{tiny * 1e9:.0f} ns/op"))
    rows.append(("add_ of two 1-element tensors", median("tiny", "add_inplace_1elem"), ""))

    torch = None
    if args.pytorch:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "torch.json")
            subprocess.run([sys.executable, os.path.join(ROOT, "benches", "peers", "pytorch_bench.py"), "--json", out], check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                torch = json.load(f)
    peer = {
        "add_alloc 16M f32": "add_alloc_16M",
        "mul_alloc 16M f32": "mul_alloc_16M",
        "copy_ 16M f32": "copy_16M",
        "t().contiguous() 4096^2 f32": "transpose_contig_4096",
        "matmul 1024 f32": "matmul_1024",
        "add of two 1-element tensors": "tiny_add",
    }
    print(f"{'benchmark':<32} {'tensorguard':>12}  {'ratio / reference':<55} {'PyTorch':>10} {'speedup':>8}")
    for name, s, note in rows:
        t = torch.get(peer.get(name, ""), None) if torch else None
        tcol = f"{t * 1e3:9.3f}ms" if t else ""
        scol = f"{t / s:7.2f}x" if t else ""
        print(f"{name:<32} {s * 1e3:10.3f}ms  {note:<55} {tcol:>10} {scol:>8}")


if __name__ == "__main__":
    main()
