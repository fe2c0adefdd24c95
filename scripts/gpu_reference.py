"""Reference data recorded with real PyTorch on a CUDA GPU (run on a GPU machine).

Writes into the folder given as argv[1]:
- pytorch_h200.pickle   a memory snapshot (torch.cuda.memory._dump_snapshot) of a
                        known allocation pattern: small and large pools, a free,
                        a side-stream use, an out-of-memory caught, a tiny MLP step;
- memviz_stats.txt      `python -m torch.cuda._memory_viz stats` of that file;
- profiler_table.txt    key_averages().table(sort_by="cuda_time_total") of a small
                        workload, and profiler_trace.json its chrome trace;
- copy_table.csv        the article's section 1.2 copy-cost table measured with PyTorch:
                        median time per copy for host->device (pageable, pinned),
                        device->host (pageable, pinned), device->device, same-device clone,
                        blocking and non_blocking, 1 KiB .. 1 GiB (powers of 4).

tensorguard never needs this script; its outputs are fixtures and reference figures.
"""
import csv
import os
import statistics
import subprocess
import sys
import time

import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
dev = torch.device("cuda:0")
print(torch.__version__, torch.cuda.get_device_name(0), flush=True)

# ---------------------------------------------------------------- snapshot
torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")


def pattern():
    keep = [torch.empty(n, dtype=torch.float32, device=dev) for n in (1, 256, 262144, 3_000_000)]
    tmp = torch.ones(1 << 20, device=dev)
    del tmp
    side = torch.cuda.Stream()
    x = torch.randn(1024, 1024, device=dev)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    x.record_stream(side)
    del x
    torch.cuda.current_stream().wait_stream(side)
    try:
        torch.empty(1 << 45, dtype=torch.uint8, device=dev)  # 32 TiB: out of memory
    except torch.cuda.OutOfMemoryError:
        pass
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        data = torch.randn(64, 784, device=dev)
        loss = torch.nn.functional.cross_entropy(model(data), torch.randint(0, 10, (64,), device=dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return keep, y, model


state = pattern()
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(os.path.join(out, "pytorch_h200.pickle"))
torch.cuda.memory._record_memory_history(None)
del state
stats = subprocess.run(
    [sys.executable, "-m", "torch.cuda._memory_viz", "stats", os.path.join(out, "pytorch_h200.pickle")],
    capture_output=True, text=True,
)
open(os.path.join(out, "memviz_stats.txt"), "w").write(stats.stdout + stats.stderr)
print("snapshot done", flush=True)

# ---------------------------------------------------------------- profiler
from torch.profiler import ProfilerActivity, profile, record_function

a = torch.randn(512, 512, device=dev)
b = torch.randn(512, 512, device=dev)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, profile_memory=True) as prof:
    with record_function("block"):
        for _ in range(3):
            c = a @ b
            d = c + a
            e = d.relu().sum()
    h = e.cpu()
open(os.path.join(out, "profiler_table.txt"), "w").write(
    prof.key_averages().table(sort_by="cuda_time_total", row_limit=10)
    + "\n\n"
    + prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total", row_limit=8)
)
prof.export_chrome_trace(os.path.join(out, "profiler_trace.json"))
print("profiler done", flush=True)

# ---------------------------------------------------------------- copy table
def med(fn, reps):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


rows = []
sizes = [1024 * 4**k for k in range(11)]  # 1 KiB .. 1 GiB
for nbytes in sizes:
    n = nbytes // 4
    reps = 20 if nbytes <= (16 << 20) else 5
    host = torch.randn(n)
    pinned = host.pin_memory()
    d = host.to(dev)
    d2 = torch.empty_like(d)
    hout = torch.empty(n)
    hout_pinned = torch.empty(n).pin_memory()
    kinds = {
        "h2d_pageable": lambda nb: d.copy_(host, non_blocking=nb),
        "h2d_pinned": lambda nb: d.copy_(pinned, non_blocking=nb),
        "d2h_pageable": lambda nb: hout.copy_(d, non_blocking=nb),
        "d2h_pinned": lambda nb: hout_pinned.copy_(d, non_blocking=nb),
        "d2d": lambda nb: d2.copy_(d, non_blocking=nb),
        "clone": lambda nb: d.clone(),
    }
    for kind, fn in kinds.items():
        for nb in (False, True):
            t = med(lambda: fn(nb), reps)
            rows.append((kind, nb, nbytes, t * 1e6, nbytes / t / 1e9))
    del host, pinned, d, d2, hout, hout_pinned
    print("copy", nbytes, flush=True)
# pin_memory cost: fresh vs a cache hit of PyTorch's caching host allocator
x = torch.randn(1 << 20)
t0 = time.perf_counter(); p = x.pin_memory(); t_first = time.perf_counter() - t0
del p
t0 = time.perf_counter(); p = x.pin_memory(); t_hit = time.perf_counter() - t0
rows.append(("pin_memory_first_4MiB", False, 4 << 20, t_first * 1e6, 0.0))
rows.append(("pin_memory_cached_4MiB", False, 4 << 20, t_hit * 1e6, 0.0))
with open(os.path.join(out, "copy_table.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["kind", "non_blocking", "bytes", "median_us", "GB_per_s"])
    w.writerows(rows)
print("all done", flush=True)
