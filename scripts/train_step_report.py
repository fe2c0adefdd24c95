"""Summarise interleaved training-step rounds (JSON lines from the
train_step bench and scripts/bench_train_torch.py mlp) as a table:
for each workload, the median over rounds of each framework's per-round
median step time, and the ratio PyTorch / tensorguard (> 1: ours faster).

    python3 scripts/train_step_report.py ROUNDS.jsonl [OUT.md]
"""
import collections
import json
import statistics
import sys

rows = collections.defaultdict(lambda: collections.defaultdict(list))
device = "?"
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        rows[r["workload"]][r["framework"]].append(r["median_s"])
        device = r.get("device", device)

lines = [
    f"training step on {device}: median over rounds of each round's median step (synchronised)",
    "",
    "| workload | tensorguard | PyTorch | PyTorch / tensorguard | rounds |",
    "|---|---|---|---|---|",
]
for w in sorted(rows):
    tg, pt = rows[w].get("tensorguard", []), rows[w].get("pytorch", [])
    if not tg or not pt:
        continue
    a, b = statistics.median(tg), statistics.median(pt)
    lines.append(f"| {w} | {a * 1e6:.1f} us | {b * 1e6:.1f} us | {b / a:.3f} | {min(len(tg), len(pt))} |")
text = "\n".join(lines)
print(text)
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write(text + "\n")
