#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh runs on a GPU machine, which has no Rust
# toolchain: the CLI, the training-step bench and two test binaries (the library's unit tests, which
# hold the conformance cases, and tests/gpu_suite.rs, the device suite in one
# binary), release, with `--features nccl` (CUDA and the NCCL collectives),
# stripped, into target/gpu-bin/. CUDA and NCCL are loaded at run time, so this builds on a machine without CUDA.
#
#   scripts/build_gpu_check.sh            # then carry target/gpu-bin (< 64 MiB with the tree)
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/gpu-bin
rm -rf "$out"
mkdir -p "$out"
cargo build --release -p tensorguard-cli --features nccl --bin tensorguard
cp target/release/tensorguard "$out/tensorguard"
cargo test --release -p tensorguard --features nccl --lib --test gpu_suite --no-run \
  --message-format=json >target/gpu-bin-build.json
python3 - "$out" <<'PY'
import json, shutil, sys
out = sys.argv[1]
found = {}
for line in open("target/gpu-bin-build.json"):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable") if m.get("reason") == "compiler-artifact" else None
    if not exe or m["target"]["name"] not in ("tensorguard", "gpu_suite"):
        continue
    name = "lib_tests" if m["target"]["kind"] == ["lib"] else "gpu_suite"
    found[name] = exe
for name, exe in found.items():
    shutil.copy(exe, f"{out}/{name}")
missing = {"lib_tests", "gpu_suite"} - set(found)
if missing:
    sys.exit(f"build_gpu_check: cargo built no {', '.join(sorted(missing))} binary")
PY
# the training-step bench (tensorguard-nn), for the step against PyTorch
cargo bench --no-run -p tensorguard-nn --features tensorguard/nccl --bench train_step \
  --message-format=json >target/gpu-bin-bench.json
python3 - "$out" <<'PY'
import json, shutil, sys
for line in open("target/gpu-bin-bench.json"):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "train_step":
        shutil.copy(m["executable"], f"{sys.argv[1]}/train_step")
        break
else:
    sys.exit("build_gpu_check: cargo built no train_step bench binary")
PY
strip "$out"/*
ls -l "$out"
du -ch "$out"/* | tail -1
