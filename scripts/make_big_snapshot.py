#!/usr/bin/env python3
"""Writes a large memory snapshot in PyTorch's `_dump_snapshot` layout.

    python3 scripts/make_big_snapshot.py OUT.pickle [--events 1000000] [--seed 0]

A training-loop-like trace on one device: allocations of varied sizes from a
few dozen call sites (frame dicts shared between entries, as PyTorch's
symbolizer shares them), each freed with `free_requested` + `free_completed`,
segments handed out with `segment_alloc` as the bump pointer fills them, and
the final `segments` with their blocks (`active_allocated` for what is still
alive, `inactive` gaps). Pickled with Python's default protocol, like
`torch.cuda.memory._dump_snapshot`. Used by scripts/bench_memviz.sh.
"""
import argparse
import pickle
import random

KiB = 1024
MiB = 1024 * KiB
SEGMENT = 64 * MiB
BASE = 0x7F0000000000
T0 = 1_700_000_000_000_000


def make_stacks(rng):
    cpp = [
        {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"},
        {"filename": "aten/src/ATen/native/TensorFactories.cpp", "line": 0, "name": "at::native::empty_cuda"},
    ]
    lib = [{"filename": f"/opt/venv/lib/python3.12/site-packages/torch/nn/modules/{m}.py", "line": ln, "name": fn}
           for m, ln, fn in [("linear", 134, "forward"), ("conv", 548, "_conv_forward"),
                             ("module", 1790, "_call_impl"), ("module", 1779, "_wrapped_call_impl"),
                             ("activation", 133, "forward"), ("normalization", 217, "forward")]]
    user = [{"filename": "/work/proj/model.py", "line": 10 + 7 * i, "name": f"block{i}"} for i in range(12)]
    main = {"filename": "/work/proj/train.py", "line": 88, "name": "train_step"}
    stacks = []
    for i in range(48):
        depth = rng.randint(1, 4)
        frames = cpp[: rng.randint(0, 2)] + rng.sample(lib, depth) + [user[i % len(user)], main]
        stacks.append(frames)
    return stacks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    stacks = make_stacks(rng)
    sizes = [512, 4 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB]

    trace = []
    live = {}  # addr -> (size, stack, segment index)
    live_order = []
    segments = []  # [address, used]
    t = T0

    def emit(action, addr, size, frames):
        nonlocal t
        t += rng.randint(1, 40)
        trace.append({"action": action, "addr": addr, "size": size, "stream": 0,
                      "time_us": t, "compile_context": "N/A", "user_metadata": "", "frames": frames})

    free_lists = {s: [] for s in sizes}  # a caching allocator reuses freed blocks of a size
    step = 0
    while len(trace) < args.events:
        step += 1
        # Iterations: live memory ramps up (forward) and down (backward), with
        # a slowly growing baseline so there is one overall peak.
        phase = (step % 4000) / 4000.0
        target = 60 + int(340 * (phase if phase < 0.5 else 1.0 - phase)) + step // 20000
        grow = len(live) < target if rng.random() < 0.9 else rng.random() < 0.5
        if grow or not live_order:
            size = rng.choice(sizes)
            frames = stacks[rng.randrange(len(stacks))]
            if free_lists[size]:
                addr = free_lists[size].pop()
            else:
                if not segments or segments[-1][1] + size > SEGMENT:
                    addr = BASE + len(segments) * SEGMENT
                    segments.append([addr, 0])
                    emit("segment_alloc", addr, SEGMENT, frames)
                seg = segments[-1]
                addr = seg[0] + seg[1]
                seg[1] += size
            live[addr] = (size, frames, (addr - BASE) // SEGMENT)
            live_order.append(addr)
            emit("alloc", addr, size, frames)
        else:
            i = rng.randrange(len(live_order))
            live_order[i], live_order[-1] = live_order[-1], live_order[i]
            addr = live_order.pop()
            size, frames, _ = live.pop(addr)
            free_lists[size].append(addr)
            emit("free_requested", addr, size, frames)
            emit("free_completed", addr, size, frames)
    del trace[args.events:]

    # Replay what was kept to get the final blocks.
    alive = {}
    for e in trace:
        if e["action"] == "alloc":
            alive[e["addr"]] = e
        elif e["action"] == "free_completed":
            alive.pop(e["addr"], None)
    by_segment = {}
    for addr, e in alive.items():
        by_segment.setdefault((addr - BASE) // SEGMENT, []).append(e)
    seg_out = []
    for i, (start, _) in enumerate(segments):
        blocks, pos = [], start
        for e in sorted(by_segment.get(i, []), key=lambda e: e["addr"]):
            if e["addr"] > pos:
                blocks.append({"address": pos, "size": e["addr"] - pos, "requested_size": 0,
                               "state": "inactive", "frames": []})
            blocks.append({"address": e["addr"], "size": e["size"], "requested_size": e["size"],
                           "state": "active_allocated", "frames": e["frames"]})
            pos = e["addr"] + e["size"]
        if pos < start + SEGMENT:
            blocks.append({"address": pos, "size": start + SEGMENT - pos, "requested_size": 0,
                           "state": "inactive", "frames": []})
        used = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        seg_out.append({"device": 0, "address": start, "total_size": SEGMENT, "stream": 0,
                        "segment_type": "large", "segment_pool_id": (0, 0), "allocated_size": used,
                        "active_size": used, "requested_size": used, "is_expandable": False,
                        "frames": [], "blocks": blocks})
    snapshot = {"segments": seg_out, "device_traces": [trace],
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
                "external_annotations": []}
    with open(args.out, "wb") as f:
        pickle.dump(snapshot, f)
    print(f"wrote {args.out}: {len(trace)} events, {len(seg_out)} segments, {len(alive)} allocations alive")


if __name__ == "__main__":
    main()
