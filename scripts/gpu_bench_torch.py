"""PyTorch's side of the GPU benchmarks: the workloads of `tensorguard bench gpu`,
timed the same way (each sample: the op issued `reps` times, then
torch.cuda.synchronize(); the wall time / reps; the median of the samples after two
warm-up rounds), written as JSON with the same keys.

usage: python3 scripts/gpu_bench_torch.py OUT.json [--quick] [--samples N] [--device cuda:0]

tensorguard never needs this script: scripts/gpu-check.sh runs it on a GPU machine
to have a peer measured in the same run.
"""
import argparse
import json
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--quick", action="store_true")
p.add_argument("--samples", type=int, default=11)
p.add_argument("--device", default="cuda:0")
args = p.parse_args()

dev = torch.device(args.device)
torch.backends.cuda.matmul.allow_tf32 = False  # as tensorguard's default
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
vec_len, mats, fewer = ((1 << 16), (64, 128), 10) if args.quick else ((1 << 28), (4096, 8192), 1)


def time_op(reps, op):
    for _ in range(2):
        for _ in range(reps):
            op()
        sync()
    t = []
    for _ in range(args.samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            op()
        sync()
        t.append((time.perf_counter() - t0) / reps)
    return statistics.median(t)


results = {}


def put(key, seconds, work=0.0, unit=""):
    rate = None
    if unit == "GB/s":
        rate = work / seconds / 1e9
    elif unit == "TFLOP/s":
        rate = work / seconds / 1e12
    results[key] = {"seconds": seconds, "rate": rate, "unit": unit}
    print(f"{key:<20} {seconds * 1e6:12.2f} us  {'' if rate is None else f'{rate:.2f} {unit}'}", flush=True)


a = torch.ones(vec_len, device=dev)
b = torch.ones(vec_len, device=dev)
put("add_f32", time_op(5, lambda: torch.add(a, b)), 12.0 * vec_len, "GB/s")
dst = torch.empty(vec_len, device=dev)
put("d2d_copy_f32", time_op(5, lambda: dst.copy_(a)), 8.0 * vec_len, "GB/s")
del a, b, dst
torch.cuda.empty_cache()
for dtype, short in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
    for m in mats:
        x = torch.randn(m, m, device=dev).to(dtype)
        y = torch.randn(m, m, device=dev).to(dtype)
        put(f"matmul_{short}_{m}", time_op(20 if m <= 1024 else 3, lambda: x @ y), 2.0 * m**3, "TFLOP/s")
        del x, y
        torch.cuda.empty_cache()
one = torch.ones(1, device=dev)
put("tiny_add", time_op(1000 // fewer, lambda: one + one))
put("alloc_cached", time_op(1000 // fewer, lambda: torch.empty(1 << 18, device=dev)))


def raw():
    t = torch.empty(1 << 18, device=dev)
    del t
    torch.cuda.empty_cache()


put("alloc_raw", time_op(50 // fewer, raw))

with open(args.out, "w") as f:
    json.dump(
        {
            "runtime": "pytorch " + torch.__version__,
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev),
            "quick": args.quick,
            "samples": args.samples,
            "vector_elements": vec_len,
            "results": results,
        },
        f,
        indent=2,
    )
