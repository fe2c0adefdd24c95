#!/usr/bin/env bash
# Training-speed benchmarks: tensorguard against PyTorch and candle, measured
# in the same run on the same machine (cpu, f32).
#
#   1. mlp_step_b64 / mlp_step_b256: one training step of the 784-256-256-10
#      MLP (forward, cross-entropy, backward, Adam lr 1e-3, zero_grad(set to
#      none)) on fixed random inputs; each process warms up, then reports the
#      median of STEPS steps. The frameworks run interleaved, A/B/C/A/B/C, for
#      ROUNDS rounds; the table shows the median of the per-round medians.
#      raw_step_b64 / raw_step_b256: the issue's raw-tensor SGD step of the
#      same MLP (matmul/add/relu, log_softmax + gather loss, backward, p -=
#      lr * grad under no_grad), tensorguard and PyTorch only.
#   2. cnn_epoch: one epoch of `tensorguard train --dataset fashion-mnist
#      --model cnn --epochs 1` (its metrics JSON's `wall_s`: training plus
#      evaluation on the 10k test set) against the same model and loop in
#      PyTorch (scripts/bench_train_torch.py cnn). candle has no CNN here.
#
# Usage: scripts/bench_train.sh [--quick]
# Environment: ROUNDS (3), STEPS (200), WARMUP (20), CNN_ROUNDS (2),
#   LIMIT (training examples for the CNN epoch; empty = all 60,000),
#   THREADS (PyTorch intra-op threads; default: nproc), BENCH_VENV (a venv
#   with torch; default /tmp/tvenv, made with `python3 -m venv` + `pip install
#   torch` when torch is missing), OUT (the results JSON; default
#   benches/results/train_step_<hostname>.json), CARGO_TARGET_DIR.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
CNN_ROUNDS=${CNN_ROUNDS:-2}
LIMIT=${LIMIT-}
if [[ "${1-}" == "--quick" ]]; then
    ROUNDS=1 STEPS=30 WARMUP=5 CNN_ROUNDS=1 LIMIT=${LIMIT:-2000}
fi
NPROC=$(nproc)
THREADS=${THREADS:-$NPROC}
HOST=$(hostname 2>/dev/null || echo rust-2core)
OUT=${OUT:-benches/results/train_step_${HOST}.json}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BENCH_VENV=${BENCH_VENV:-/tmp/tvenv}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
RAW=$WORK/raw.jsonl
: >"$RAW"

echo "== building (release)" >&2
cargo build --release -p tensorguard-cli >&2
TG_CLI=$TARGET/release/tensorguard
TG_BENCH=$(cargo bench --no-run -p tensorguard-nn --bench train_step --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "train_step":
        print(m["executable"])')
CANDLE_BIN=""
CANDLE_VERSION=""
CANDLE_TARGET=$TARGET/candle-train
if [[ "${CANDLE:-1}" == "0" ]]; then
    echo "candle: skipped (CANDLE=0)" >&2
elif CARGO_TARGET_DIR=$CANDLE_TARGET cargo build --release \
    --manifest-path benches/candle-train/Cargo.toml >&2; then
    CANDLE_BIN=$CANDLE_TARGET/release/candle-train-bench
    CANDLE_VERSION=$(grep -A1 '^name = "candle-core"' benches/candle-train/Cargo.lock |
        sed -n 's/^version = "\(.*\)"/\1/p')
else
    echo "candle: skipped (the candle bench crate did not build; crates.io unreachable?)" >&2
fi

# PyTorch: a venv with torch, made when missing; skipped with the reason
PY=""
TORCH_SKIP=""
if "$BENCH_VENV/bin/python" -c 'import torch' 2>/dev/null; then
    PY=$BENCH_VENV/bin/python
else
    echo "== torch missing in $BENCH_VENV: python3 -m venv + pip install torch" >&2
    if python3 -m venv "$BENCH_VENV" >&2 &&
        "$BENCH_VENV/bin/pip" install --quiet torch \
            --index-url https://download.pytorch.org/whl/cpu >&2 &&
        "$BENCH_VENV/bin/python" -c 'import torch' 2>/dev/null; then
        PY=$BENCH_VENV/bin/python
    else
        TORCH_SKIP="pip install torch into $BENCH_VENV failed"
        echo "pytorch: skipped ($TORCH_SKIP)" >&2
    fi
fi
TORCH_INFO='{}'
if [[ -n "$PY" ]]; then
    TORCH_INFO=$("$PY" scripts/bench_train_torch.py info --threads "$THREADS")
fi
printf '%s\n' "$TORCH_INFO" >"$WORK/torch_info.json"

ARGS=(--warmup "$WARMUP" --steps "$STEPS" --batches 64,256)
for r in $(seq 1 "$ROUNDS"); do
    echo "== mlp round $r/$ROUNDS" >&2
    "$TG_BENCH" "${ARGS[@]}" | sed "s/}\$/,\"round\":$r}/" >>"$RAW"
    if [[ -n "$PY" ]]; then
        "$PY" scripts/bench_train_torch.py mlp "${ARGS[@]}" --threads "$THREADS" |
            sed "s/}\$/, \"round\": $r}/" >>"$RAW"
    fi
    if [[ -n "$CANDLE_BIN" ]]; then
        "$CANDLE_BIN" "${ARGS[@]}" | sed "s/}\$/,\"round\":$r}/" >>"$RAW"
    fi
done

LIMIT_ARGS=()
[[ -n "$LIMIT" ]] && LIMIT_ARGS=(--limit "$LIMIT")
for r in $(seq 1 "$CNN_ROUNDS"); do
    echo "== cnn epoch round $r/$CNN_ROUNDS ${LIMIT:+(--limit $LIMIT)}" >&2
    "$TG_CLI" train --dataset fashion-mnist --model cnn --epochs 1 --no-progress \
        --device cpu --metrics-json "$WORK/tg_cnn.json" "${LIMIT_ARGS[@]}" >&2
    python3 -c 'import json,sys
m = json.load(open(sys.argv[1]))
print(json.dumps({"framework": "tensorguard", "workload": "cnn_epoch", "median_s": m["wall_s"],
                  "test_accuracy": m.get("test_accuracy"), "round": int(sys.argv[2])}))' \
        "$WORK/tg_cnn.json" "$r" >>"$RAW"
    if [[ -n "$PY" ]]; then
        "$PY" scripts/bench_train_torch.py cnn --threads "$THREADS" "${LIMIT_ARGS[@]}" |
            sed "s/}\$/, \"round\": $r}/" >>"$RAW"
    fi
done

mkdir -p "$(dirname "$OUT")"
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
python3 - "$RAW" "$OUT" <<PY
import json, statistics, sys
raw, out = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(raw) if l.strip()]
workloads = ["mlp_step_b64", "mlp_step_b256", "raw_step_b64", "raw_step_b256", "cnn_epoch"]
fws = ["tensorguard", "pytorch", "candle"]
res = {}
for w in workloads:
    res[w] = {}
    for f in fws:
        v = [r["median_s"] for r in rows if r["workload"] == w and r["framework"] == f]
        if v:
            res[w][f] = {"median_s": statistics.median(v), "rounds": v}
def ratio(w, f):
    a, b = res[w].get("tensorguard"), res[w].get(f)
    return a["median_s"] / b["median_s"] if a and b else None
def fmt(x, unit):
    if x is None:
        return "n/a"
    return f"{x * 1e3:.2f} ms" if unit == "ms" else f"{x:.2f} s"
hdr = ["workload", "tensorguard", "pytorch", "candle", "tg/pytorch", "tg/candle"]
lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
workloads = [w for w in workloads if res[w]]
for w in workloads:
    unit = "s" if w == "cnn_epoch" else "ms"
    cell = lambda f: fmt(res[w][f]["median_s"], unit) if f in res[w] else "n/a"
    rp, rc = ratio(w, "pytorch"), ratio(w, "candle")
    lines.append("| " + " | ".join([w, cell("tensorguard"), cell("pytorch"), cell("candle"),
        f"{rp:.2f}" if rp else "n/a", f"{rc:.2f}" if rc else "n/a"]) + " |")
print("\n".join(lines))
print("(ratio < 1: tensorguard is faster)")
doc = {
    "machine": {"host": "$HOST", "nproc": $NPROC, "cpu": "$CPU",
                "kernel": "$(uname -r)"},
    "versions": {"tensorguard": "$(git rev-parse --short HEAD)",
                 "rustc": "$(rustc --version)",
                 "candle": "$CANDLE_VERSION" or None,
                 "torch": json.load(open("$WORK/torch_info.json"))},
    "settings": {"rounds": $ROUNDS, "steps": $STEPS, "warmup": $WARMUP,
                 "cnn_rounds": $CNN_ROUNDS, "cnn_limit": "$LIMIT" or None,
                 "torch_threads": $THREADS, "torch_skipped": "$TORCH_SKIP" or None,
                 "env": {k: __import__("os").environ.get(k) for k in
                         ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                          "RAYON_NUM_THREADS"]}},
    "results": res,
    "ratios": {w: {"tensorguard/pytorch": ratio(w, "pytorch"),
                   "tensorguard/candle": ratio(w, "candle")} for w in workloads},
    "table_markdown": "\n".join(lines),
}
json.dump(doc, open(out, "w"), indent=2)
print(f"wrote {out}")
PY
