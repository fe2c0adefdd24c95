#!/usr/bin/env python3
"""PyTorch CPU's side of `tensorguard bench compare`.

A peer process speaking the comparison's line protocol on stdin/stdout (the
harness, crates/tensorguard-cli/src/bench/compare_peers.rs, starts it; it is
not meant to be run by hand):

  at start          -> `ready {json}` (torch's version, threads, MKL, OpenMP)
  setup NAME KIND ARGS...  -> `ok`, or `skip REASON` when torch has no equivalent
  run NAME BUDGET_S MIN_REPS MAX_REPS -> `ok MEDIAN_S REPS INNER`
  free              -> `ok` (drops every input)
  quit              -> exits

Errors are answered as `error MESSAGE`. The timing schedule is the same as
the tensorguard and candle sides: warm up for a quarter of the budget (at
least one call), then repetitions of INNER calls (enough for 100 us) until
the budget is spent, at least MIN_REPS and at most MAX_REPS; the median
seconds per call is answered.
"""
import json
import math
import statistics
import sys
import time
import warnings

# the venv may have torch alone; torch warns once that numpy is missing
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402


def side(n):
    return int(round(math.sqrt(n)))


def mlp(batch):
    """The raw-tensor SGD step of tensorguard's benches/autograd.rs (784-256-256-10)."""
    torch.manual_seed(0)
    sizes = [784, 256, 256, 10]
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        w = torch.randn(fan_in, fan_out) * math.sqrt(2.0 / fan_in)
        params.append(w.requires_grad_(True))
        params.append(torch.zeros(fan_out).requires_grad_(True))
    x = torch.randn(batch, 784)
    t = torch.tensor([(i * 7 + 3) % 10 for i in range(batch)]).unsqueeze(1)
    lr = 0.01

    def step():
        for p in params:
            p.grad = None
        h = x
        layers = len(params) // 2
        for i in range(layers):
            h = h.matmul(params[2 * i]) + params[2 * i + 1]
            if i + 1 < layers:
                h = h.relu()
        loss = -torch.log_softmax(h, -1).gather(1, t).mean()
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad * lr)
        return loss.item()

    return step


def setup(kind, args):
    """The call that runs one workload, its inputs made here."""
    if kind == "ew":
        op, n, layout = args[0], int(args[1]), args[2]
        if layout == "t":
            s = side(n)
            a, b = torch.randn(s, s).t(), torch.randn(s, s).t()
        else:
            a, b = torch.randn(n), torch.randn(n)
        if op == "add":
            return lambda: a + b
        if op == "mul":
            return lambda: a * b
        if op == "exp":
            return lambda: a.exp()
        raise ValueError(f"unknown elementwise op `{op}`")
    if kind == "sum":
        s = side(int(args[0]))
        x = torch.randn(s, s)
        if args[1] == "last":
            return lambda: x.sum(-1)
        if args[1] == "first":
            return lambda: x.sum(0)
        return lambda: x.sum()
    if kind == "softmax":
        x = torch.randn(int(args[0]), int(args[1]))
        return lambda: torch.softmax(x, -1)
    if kind == "matmul":
        b, m, k, n = (int(a) for a in args[:4])
        if b == 0:
            x, y = torch.randn(m, k), torch.randn(k, n)
        else:
            x, y = torch.randn(b, m, k), torch.randn(b, k, n)
        return lambda: x.matmul(y)
    if kind == "chain":
        length, grad = int(args[0]), args[1] == "1"
        a = torch.ones(1, requires_grad=grad)
        b = torch.ones(1)

        def chain():
            x = a
            for _ in range(length):
                x = x + b
            return x

        if grad:
            return chain

        def chain_no_grad():
            with torch.no_grad():
                return chain()

        return chain_no_grad
    if kind == "mlp":
        return mlp(int(args[0]))
    if kind == "copy_t":
        s = int(args[0])
        x = torch.randn(s, s).t()
        if args[1] == "contiguous":
            return lambda: x.contiguous()
        # torch's clone keeps the strides (memory_format=torch.preserve_format)
        return lambda: x.clone()
    if kind == "empty":
        n = int(args[0]) // 4
        return lambda: torch.empty(n)
    if kind == "to":
        raise SkipError("PyTorch CPU has no second device here (emu:N is tensorguard's emulated device)")
    raise ValueError(f"unknown workload kind `{kind}`")


class SkipError(Exception):
    pass


def measure(f, budget, min_reps, max_reps):
    start = time.perf_counter()
    calls = 0
    while True:
        f()
        calls += 1
        if time.perf_counter() - start >= budget / 4 or calls >= 10_000:
            break
    est = (time.perf_counter() - start) / calls
    inner = min(max(1, math.ceil(1e-4 / max(est, 1e-9))), 10_000)
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < budget):
        t = time.perf_counter()
        for _ in range(inner):
            f()
        times.append((time.perf_counter() - t) / inner)
    return statistics.median(times), len(times), inner


def info():
    return {
        "framework": "torch",
        "version": torch.__version__,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "openmp": torch.backends.openmp.is_available(),
        "python": sys.version.split()[0],
    }


def main():
    work = {}
    out = sys.stdout
    out.write("ready " + json.dumps(info()) + "\n")
    out.flush()
    for line in sys.stdin:
        words = line.split()
        try:
            if words == ["quit"]:
                break
            if words == ["free"]:
                work.clear()
                reply = "ok"
            elif len(words) >= 3 and words[0] == "setup":
                try:
                    work[words[1]] = setup(words[2], words[3:])
                    reply = "ok"
                except SkipError as e:
                    reply = f"skip {e}"
            elif len(words) == 5 and words[0] == "run":
                if words[1] not in work:
                    reply = f"error `{words[1]}` was not set up"
                else:
                    med, reps, inner = measure(work[words[1]], float(words[2]), int(words[3]), int(words[4]))
                    reply = f"ok {med:.12e} {reps} {inner}"
            else:
                reply = f"error unknown command `{line.strip()}`"
        except Exception as e:  # noqa: BLE001 - every failure is answered, never fatal
            reply = f"error {type(e).__name__}: {e}"
        out.write(reply.replace("\n", " ") + "\n")
        out.flush()


if __name__ == "__main__":
    with warnings.catch_warnings():
        main()
