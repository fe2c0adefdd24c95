#!/usr/bin/env python3
"""PyTorch's side of scripts/bench_train.sh (CPU, f32).

  mlp:  one training step of the 784-256-256-10 MLP (Linear+ReLU,
        Linear+ReLU, Linear), cross-entropy on class indices, backward,
        Adam(lr=1e-3) step, zero_grad(set_to_none=True), fixed random
        inputs; warm-up, then the median of --steps steps, per batch size.
        Then the raw-tensor SGD step (raw_step_bN) of
        crates/tensorguard-nn/benches/train_step.rs: weights [in, out],
        grads set to None, matmul + add + relu, loss
        -log_softmax(logits).gather(1, y).mean(), backward, p -= 0.01 *
        grad in place under no_grad.
  cnn:  one epoch of tensorguard train's CNN on Fashion-MNIST (the model of
        crates/tensorguard-cli/src/train/model.rs: conv3x3(1->16, pad 1),
        ReLU, maxpool2, conv3x3(16->32, pad 1), ReLU, maxpool2, flatten,
        Linear(32*7*7 -> 128), ReLU, Linear(128 -> 10)), batch 64, Adam
        lr 1e-3, shuffled each epoch, the running loss and accuracy kept as
        tensorguard's loop keeps them, then evaluation on the 10k test set in
        batches of 1000 under no_grad. Timed like tensorguard's `wall_s`:
        from the first training step to the end of evaluation (loading the
        IDX files is not timed).

Prints one JSON object per measurement on stdout.
"""
import argparse
import gzip
import json
import os
import statistics
import sys
import time
import warnings

# the venv has torch alone; torch warns once that numpy is missing
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def sync(args):
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(args, step):
    """Median seconds of one step after warm-up; a step ends when its device
    work has (torch.cuda.synchronize on a GPU)."""
    for _ in range(args.warmup):
        step()
    sync(args)
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        sync(args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def raw(args, batch):
    torch.manual_seed(0)
    sizes = [784, 256, 256, 10]
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        w = (torch.randn(fan_in, fan_out, device=args.device) * (2.0 / fan_in) ** 0.5).requires_grad_(True)
        params += [w, torch.zeros(fan_out, device=args.device).requires_grad_(True)]
    x = torch.randn(batch, 784, device=args.device)
    y = torch.randint(0, 10, (batch,), device=args.device)

    def step():
        for p in params:
            p.grad = None
        h = x
        layers = len(params) // 2
        for i in range(layers):
            h = h @ params[2 * i] + params[2 * i + 1]
            if i + 1 < layers:
                h = h.relu()
        loss = -h.log_softmax(-1).gather(1, y.unsqueeze(1)).mean()
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad * 0.01)

    print(json.dumps({
        "framework": "pytorch", "workload": f"raw_step_b{batch}",
        "batch": batch, "device": args.device, "median_s": timed(args, step), "steps": args.steps,
    }), flush=True)


def mlp(args):
    for batch in args.batches:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(),
            nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, 10),
        ).to(args.device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(batch, 784, device=args.device)
        y = torch.randint(0, 10, (batch,), device=args.device)

        def step():
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        if "mlp" in args.workloads:
            print(json.dumps({
                "framework": "pytorch", "workload": f"mlp_step_b{batch}",
                "batch": batch, "device": args.device, "median_s": timed(args, step),
                "steps": args.steps,
            }), flush=True)
        if "raw" in args.workloads:
            raw(args, batch)


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    # torch.frombuffer instead of numpy: the venv needs nothing but torch
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def cnn(args):
    d = args.data
    xtr = idx(os.path.join(d, "train-images-idx3-ubyte.gz"))
    ytr = idx(os.path.join(d, "train-labels-idx1-ubyte.gz"))
    xte = idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"))
    yte = idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"))
    if args.limit:
        xtr, ytr = xtr[: args.limit], ytr[: args.limit]
    # [N, 1, 28, 28] in [0, 1], as tensorguard's fashion_mnist loader (/ 255)
    xtr = (xtr.to(torch.float32) / 255.0).unsqueeze(1).contiguous()
    ytr = ytr.to(torch.int64)
    xte = (xte.to(torch.float32) / 255.0).unsqueeze(1).contiguous()
    yte = yte.to(torch.int64)

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10),
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    bs = 64
    t0 = time.perf_counter()
    model.train()
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(ytr), generator=g)
    loss_sum = torch.zeros(())
    correct = torch.zeros((), dtype=torch.int64)
    opt.zero_grad(set_to_none=True)
    for s in range(0, len(ytr), bs):
        ix = perm[s: s + bs]
        x, y = xtr[ix], ytr[ix]
        logits = model(x)
        with torch.no_grad():
            correct += (logits.argmax(1) == y).sum()
        loss = F.cross_entropy(logits, y)
        with torch.no_grad():
            loss_sum += loss.detach() * len(y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    train_s = time.perf_counter() - t0
    model.eval()
    tl = torch.zeros(())
    tc = torch.zeros((), dtype=torch.int64)
    with torch.no_grad():
        for s in range(0, len(yte), 1000):
            x, y = xte[s: s + 1000], yte[s: s + 1000]
            logits = model(x)
            tl += F.cross_entropy(logits, y) * len(y)
            tc += (logits.argmax(1) == y).sum()
    wall = time.perf_counter() - t0
    print(json.dumps({
        "framework": "pytorch", "workload": "cnn_epoch", "median_s": wall,
        "train_s": train_s, "samples": len(ytr),
        "train_loss": loss_sum.item() / len(ytr),
        "train_accuracy": correct.item() / len(ytr),
        "test_loss": tl.item() / len(yte), "test_accuracy": tc.item() / len(yte),
    }), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["mlp", "cnn", "info"])
    p.add_argument("--batches", default="64,256")
    p.add_argument("--workloads", default="mlp,raw")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--device", default="cpu", help="mlp mode: cpu or cuda[:N]")
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.workloads = args.workloads.split(",")
    # intra-op threads = the cores; one inter-op thread (nothing to overlap)
    torch.set_num_threads(args.threads)
    if args.mode == "info":
        print(json.dumps({
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "mkldnn": torch.backends.mkldnn.is_available(),
            "mkl": torch.backends.mkl.is_available(),
            "parallel_info": torch.__config__.parallel_info().strip().splitlines()[:6],
        }))
    elif args.mode == "mlp":
        mlp(args)
    else:
        cnn(args)


if __name__ == "__main__":
    sys.exit(main())
