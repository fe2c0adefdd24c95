"""The GPU benchmarks as ratios against PyTorch measured in the same run.

usage: python3 scripts/gpu_bench_report.py OUTDIR

Reads, in OUTDIR (written by scripts/gpu-check.sh):
  bench_gpu.json          tensorguard bench gpu --json
  bench_gpu_torch.json    scripts/gpu_bench_torch.py
  bench_copy.json         tensorguard bench copy --device cuda:0 --json
  torch/copy_table.csv    scripts/gpu_reference.py (PyTorch's copy table)
Writes gpu_bench.csv, gpu_bench.json, gpu_bench.md and, when matplotlib is
installed, gpu_bench.png. A ratio is PyTorch's time / tensorguard's (above 1:
tensorguard is faster); each row has the issue's target and whether it was met.
Missing inputs are reported and skipped, never invented.
"""
import csv
import json
import os
import sys

out = sys.argv[1]


def load_json(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        print(f"missing {path}: its rows are skipped")
        return None
    with open(path) as f:
        return json.load(f)


rows = []  # (workload, tg_seconds, torch_seconds, ratio, target, met, note)


def row(name, tg_s, torch_s, target, note=""):
    ratio = torch_s / tg_s if tg_s and torch_s else None
    met = None if ratio is None or target is None else ratio >= target
    rows.append(
        {
            "workload": name,
            "tensorguard_s": tg_s,
            "pytorch_s": torch_s,
            "ratio": ratio,
            "target": target,
            "met": met,
            "note": note,
        }
    )


# the target per workload (a ratio PyTorch time / ours), by key prefix
TARGETS = [
    ("add_f32", 0.9, "elementwise add (allocating), 256M f32 in a full run"),
    ("d2d_copy_f32", 0.9, "device -> device copy_, 1 GiB in a full run"),
    ("matmul_f32", 0.9, "TF32 off"),
    ("matmul_bf16", 0.9, ""),
    ("tiny_add", 1.0, "per-op launch cost: tensorguard's must be <= PyTorch's"),
    ("alloc_cached", None, "1 MiB empty + drop, cache hit"),
    ("alloc_raw", None, "1 MiB empty + drop + empty_cache: the driver's alloc/free"),
]
tg = load_json("bench_gpu.json")
pt = load_json("bench_gpu_torch.json")
if tg and pt:
    for key, mine in tg["results"].items():
        theirs = pt["results"].get(key, {}).get("seconds")
        if theirs is None:
            print(f"{key}: PyTorch's run has no such case, skipped")
            continue
        target, note = next(((t, n) for p, t, n in TARGETS if key.startswith(p)), (None, ""))
        row(key, mine["seconds"], theirs, target, note)
    for side, d in (("tensorguard", tg), ("pytorch", pt)):
        r = d["results"]
        if "alloc_cached" in r and "alloc_raw" in r:
            print(
                f"{side}: a cache hit costs {r['alloc_cached']['seconds'] * 1e6:.2f} us, "
                f"the driver's alloc+free {r['alloc_raw']['seconds'] * 1e6:.2f} us "
                f"({r['alloc_raw']['seconds'] / r['alloc_cached']['seconds']:.0f}x)"
            )

ours = load_json("bench_copy.json")
ref_path = os.path.join(out, "torch", "copy_table.csv")
if ours and os.path.exists(ref_path):
    ref = {}
    with open(ref_path) as f:
        for r in csv.DictReader(f):
            ref[(r["kind"], r["non_blocking"] == "True", int(r["bytes"]))] = float(r["median_us"]) * 1e-6
    for r in ours["results"]:
        kind = r["kind"]
        if kind not in ("h2d_pageable", "h2d_pinned", "d2h_pageable", "d2h_pinned", "clone"):
            continue
        if r["bytes"] < 4096:
            continue
        # PyTorch's table has no same-device clone; its d2d row is the same-GPU copy
        peer_kind = "d2d" if kind == "clone" else kind
        b = ref.get((peer_kind, r["non_blocking"], r["bytes"]))
        if b is None:
            continue
        target = 0.9 if kind == "clone" else 0.95
        nb = " non_blocking" if r["non_blocking"] else ""
        row(f"{kind}{nb} {r['bytes']}", r["median_us"] * 1e-6, b, target,
            "vs PyTorch's same-GPU d2d copy" if kind == "clone" else "")
elif ours is None or not os.path.exists(ref_path):
    print(f"no copy table pair (bench_copy.json and {ref_path}): the bandwidth rows are skipped")

fields = ["workload", "tensorguard_s", "pytorch_s", "ratio", "target", "met", "note"]
with open(os.path.join(out, "gpu_bench.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
with open(os.path.join(out, "gpu_bench.json"), "w") as f:
    json.dump({"rows": rows}, f, indent=2)


def fmt(s):
    if s is None:
        return "-"
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.2f} us"


lines = ["| workload | tensorguard | PyTorch | ratio (PyTorch / ours) | target | met |", "|---|---|---|---|---|---|"]
for r in rows:
    ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
    target = "-" if r["target"] is None else f">= {r['target']}"
    met = {None: "-", True: "yes", False: "NO"}[r["met"]]
    lines.append(f"| {r['workload']} | {fmt(r['tensorguard_s'])} | {fmt(r['pytorch_s'])} | {ratio} | {target} | {met} |")
table = "\n".join(lines) + "\n"
open(os.path.join(out, "gpu_bench.md"), "w").write(table)
print(table)
missed = [r["workload"] for r in rows if r["met"] is False]
print(f"{len(rows)} rows, {len(missed)} below target" + (f": {', '.join(missed)}" if missed else ""))

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    named = [r for r in rows if r["ratio"] is not None]
    fig, ax = plt.subplots(figsize=(10, max(3, 0.25 * len(named))))
    ax.barh([r["workload"] for r in named], [r["ratio"] for r in named])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("PyTorch time / tensorguard time (higher is better)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "gpu_bench.png"), dpi=100)
except ImportError:
    print("matplotlib is not installed: no gpu_bench.png (the CSV, JSON and table have every figure)")
