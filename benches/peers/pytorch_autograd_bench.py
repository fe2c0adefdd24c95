#!/usr/bin/env python3
"""Peer benchmark: the MLP training step of tensorguard's benches/autograd.rs, in PyTorch CPU.

Usage:  python3 benches/peers/pytorch_autograd_bench.py [--json out.json] [--quick]

One step of a 3-layer MLP, batch 64, 784-256-256-10, float32, relu, loss =
mean over the batch of -log_softmax(logits)[target] (written out as in the
Rust bench: log_softmax + gather + neg + mean), parameters requiring grad:
clear the grads (p.grad = None, what zero_grad() does by default), forward,
backward. Also the 1-element `a + b` with `a` requiring grad vs under
torch.no_grad(), the counterpart of the Rust overhead bench.

Single process, PyTorch's default intra-op thread count (reported). Each
benchmark is warmed up, then timed with time.perf_counter; the median of the
samples is reported (seconds per step / per op). Weights, inputs and targets
come from torch.manual_seed(0) (their values do not affect the timing).

JSON keys: mlp_step (seconds), mlp_step_min, tiny_add_graph_ns, tiny_add_no_grad_ns,
plus metadata (torch_version, num_threads, ...).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import time

import torch

BATCH = 64
SIZES = [784, 256, 256, 10]


def make_mlp():
    torch.manual_seed(0)
    params = []
    for fan_in, fan_out in zip(SIZES, SIZES[1:]):
        w = (torch.randn(fan_in, fan_out) * (2.0 / fan_in) ** 0.5).requires_grad_(True)
        b = torch.zeros(fan_out).requires_grad_(True)
        params += [w, b]
    x = torch.randn(BATCH, SIZES[0])
    targets = torch.randint(0, SIZES[-1], (BATCH,))
    return params, x, targets


def step(params, x, targets):
    for p in params:
        p.grad = None
    h = x
    layers = len(params) // 2
    for i in range(layers):
        h = h @ params[2 * i] + params[2 * i + 1]
        if i + 1 < layers:
            h = h.relu()
    loss = -h.log_softmax(-1).gather(1, targets.unsqueeze(1)).mean()
    loss.backward()
    return loss.item()


def timed(fn, warmup, samples, inner=1):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t0) / inner)
    return statistics.median(out), min(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write results as JSON to this path")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    samples = 20 if args.quick else 200

    params, x, targets = make_mlp()
    loss = step(params, x, targets)
    assert all(p.grad is not None for p in params)
    med, mn = timed(lambda: step(params, x, targets), warmup=20, samples=samples)

    a = torch.ones(1, requires_grad=True)
    b = torch.ones(1)
    g_med, _ = timed(lambda: a + b, warmup=1000, samples=30, inner=2000)
    with torch.no_grad():
        n_med, _ = timed(lambda: a + b, warmup=1000, samples=30, inner=2000)

    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        "num_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "samples": samples,
        "statistic": "median seconds per step after warm-up",
        "mlp_step": med,
        "mlp_step_min": mn,
        "mlp_loss_first_step": loss,
        "tiny_add_graph_ns": g_med * 1e9,
        "tiny_add_no_grad_ns": n_med * 1e9,
    }
    print(f"PyTorch CPU autograd peer benchmark  torch={out['torch_version']}  "
          f"threads={out['num_threads']}  cpus={out['cpu_count']}")
    print(f"MLP step (batch {BATCH}, {'-'.join(map(str, SIZES))}, f32, zero_grad+fwd+bwd): "
          f"median {med * 1e3:.3f} ms, min {mn * 1e3:.3f} ms over {samples} steps")
    print(f"1-elem add: {g_med * 1e9:.0f} ns with graph, {n_med * 1e9:.0f} ns under no_grad "
          f"(+{(g_med - n_med) * 1e9:.0f} ns per recorded op)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
