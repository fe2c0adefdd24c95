#!/usr/bin/env python3
"""Writes the memviz test fixtures in PyTorch's snapshot layout.

The layout is the one `torch.cuda.memory._dump_snapshot` pickles (see
`torch.cuda.memory._snapshot`'s docstring): a dict with `segments`,
`device_traces` (one list per device) and `allocator_settings`. Pickles use
Python's default protocol (4 on Python 3.8-3.13), like `_dump_snapshot`.
Frame dicts are shared between entries, as PyTorch's symbolizer shares them,
so the pickles exercise MEMOIZE/BINGET of filled containers.

Run from the repository root:  python3 scripts/make_memviz_fixtures.py
The tests read the committed files and need no Python.
"""
import json
import os
import pickle

OUT = os.path.join("crates", "tensorguard-cli", "tests", "fixtures")

KiB = 1024
MiB = 1024 * KiB


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


# Shared frame objects (PyTorch's symbolizer reuses them across tracebacks).
CPP_MALLOC = frame("??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc")
CPP_EMPTY = frame("aten/src/ATen/native/TensorFactories.cpp", 0, "at::native::empty_cuda")
MAIN = frame("/work/proj/train.py", 50, "main")
FWD = [CPP_MALLOC, CPP_EMPTY, frame("/work/proj/model.py", 10, "forward"), MAIN]
STEP = [CPP_MALLOC, frame("/work/proj/train.py", 20, "step"), MAIN]
LOAD = [CPP_MALLOC, frame("/work/proj/data.py", 5, "load"), MAIN]
BWD = [CPP_MALLOC, frame("/work/proj/model.py", 30, "backward"), MAIN]

S0 = 0x7F0000000000
S1 = 0x7F2000000000
EXP = 0x7F1000000000
T0 = 1_700_000_000_000_000


def ev(i, action, addr=None, size=0, frames=(), **extra):
    e = {"action": action, "size": size, "stream": 0, "time_us": T0 + 1000 * i,
         "frames": list(frames), "compile_context": "N/A", "user_metadata": ""}
    if addr is not None:
        e["addr"] = addr
    e.update(extra)
    return e


def small_snapshot():
    """18 events; expected facts are asserted in crates/tensorguard-cli/tests/memviz.rs."""
    A, B, C, D, E = S0, S0 + 512 * KiB, S0, S0 + 1536 * KiB, EXP
    trace = [
        ev(1, "segment_alloc", S0, 2 * MiB, FWD),
        ev(2, "alloc", A, 512 * KiB, FWD),
        ev(3, "alloc", B, 1 * MiB, STEP),
        ev(4, "free_requested", A, 512 * KiB, FWD),
        ev(5, "free_completed", A, 512 * KiB, FWD),
        ev(6, "alloc", C, 256 * KiB, FWD),
        ev(7, "alloc", D, 384 * KiB, LOAD),
        ev(8, "oom", None, 4 * MiB, STEP, device_free=1000),
        ev(9, "free_requested", B, 1 * MiB, STEP),
        ev(10, "free_completed", B, 1 * MiB, STEP),
        ev(11, "segment_map", EXP, 2 * MiB, BWD),
        ev(12, "alloc", E, 896 * KiB, BWD),
        ev(13, "annotate", E, 0, BWD, user_metadata="{'layer': 3}"),
        ev(14, "free_completed", E, 896 * KiB, BWD),
        ev(15, "segment_unmap", EXP, 2 * MiB, BWD),
        # Allocated before recording started (its alloc fell out of the ring buffer).
        ev(16, "free_completed", S1, 128 * KiB, []),
        ev(17, "snapshot", 0, 0, []),
        ev(18, "an_action_from_a_future_pytorch", 0, 0, []),
    ]
    segments = [
        {"device": 0, "address": S0, "total_size": 2 * MiB, "stream": 0,
         "segment_type": "large", "segment_pool_id": (0, 0), "allocated_size": 640 * KiB,
         "active_size": 640 * KiB, "requested_size": 640 * KiB, "is_expandable": False,
         "frames": FWD,
         "blocks": [
             {"address": C, "size": 256 * KiB, "requested_size": 256 * KiB,
              "state": "active_allocated", "frames": FWD},
             {"address": S0 + 256 * KiB, "size": 1280 * KiB, "requested_size": 0,
              "state": "inactive", "frames": []},
             {"address": D, "size": 384 * KiB, "requested_size": 384 * KiB,
              "state": "active_allocated", "frames": LOAD},
             {"address": S0 + 1920 * KiB, "size": 128 * KiB, "requested_size": 0,
              "state": "inactive", "frames": []},
         ]},
        {"device": 0, "address": S1, "total_size": 1 * MiB, "stream": 0,
         "segment_type": "large", "segment_pool_id": (0, 0), "allocated_size": 64 * KiB,
         "active_size": 64 * KiB, "requested_size": 60000, "is_expandable": False,
         "blocks": [
             {"address": S1, "size": 128 * KiB, "requested_size": 0, "state": "inactive", "frames": []},
             # In use since before the trace: never allocated in it.
             {"address": S1 + 128 * KiB, "size": 64 * KiB, "requested_size": 60000,
              "state": "active_allocated", "frames": STEP},
             {"address": S1 + 192 * KiB, "size": 832 * KiB, "requested_size": 0,
              "state": "inactive", "frames": []},
         ]},
    ]
    return {
        "segments": segments,
        "device_traces": [trace, []],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                               "garbage_collection_threshold": 0.0, "expandable_segments": False,
                               "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                               "pinned_use_cuda_host_register": False, "roundup_power2_divisions": {}},
        "external_annotations": [],
    }


def viewer_examples():
    """Minimal examples of PyTorch's viewer tests (test/profiler/test_memory_viz.js)."""
    def make(traces, segments):
        return {"device_traces": [traces], "segments": segments, "categories": []}

    def e(action, addr, size):
        return {"action": action, "addr": addr, "size": size, "frames": [], "stream": 0}

    mixed = make(
        [e("alloc", 100, 200), e("alloc", 5000, 400),
         e("free_completed", 100, 200), e("free_completed", 5000, 400)],
        [{"device": 0, "address": 0, "total_size": 4096, "segment_pool_id": [0, 0], "stream": 0, "blocks": []},
         {"device": 0, "address": 4096, "total_size": 8192, "segment_pool_id": [1, 5], "stream": 0, "blocks": []}])
    free_first = make(
        [e("free_completed", 0x788C2000000, 94371840), e("alloc", 0x788C2000000, 256)],
        [{"device": 0, "address": 0x788C0000000, "total_size": 83886080, "segment_pool_id": [1, 42],
          "stream": 0, "blocks": []}])
    return mixed, free_first


def main():
    os.makedirs(OUT, exist_ok=True)
    small = small_snapshot()
    with open(os.path.join(OUT, "pytorch_small.pickle"), "wb") as f:
        pickle.dump(small, f, protocol=4)
    with open(os.path.join(OUT, "pytorch_small.json"), "w") as f:
        json.dump(small, f)
    mixed, free_first = viewer_examples()
    with open(os.path.join(OUT, "viewer_mixed_pool.pickle"), "wb") as f:
        pickle.dump(mixed, f, protocol=4)
    with open(os.path.join(OUT, "viewer_free_without_alloc.pickle"), "wb") as f:
        pickle.dump(free_first, f, protocol=4)
    # The "segments only" form `_memory_viz.py` also accepts: a bare list.
    with open(os.path.join(OUT, "segments_only.pickle"), "wb") as f:
        pickle.dump(small["segments"], f, protocol=4)
    # A pickle that is not a snapshot.
    with open(os.path.join(OUT, "no_segments.pickle"), "wb") as f:
        pickle.dump({"device_traces": [], "weights": [1.0, 2.0]}, f, protocol=4)


if __name__ == "__main__":
    main()
