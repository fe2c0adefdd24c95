#!/usr/bin/env bash
# The GPU check: run on a machine with an NVIDIA GPU, the CUDA 13 driver and
# PyTorch (for its CUDA libraries and as the peer), without a Rust toolchain
# or network. It runs binaries built beforehand on any machine with
#
#   scripts/build_gpu_check.sh        # -> target/gpu-bin/{tensorguard,lib_tests,gpu_suite}
#
# and writes everything into OUTDIR:
#   summary.txt          one line per step: its exit status and time, then the totals
#   env.txt              nvidia-smi, the libraries found, the Python and torch versions
#   doctor.log           tensorguard doctor -v (GPUs, driver, NVRTC; self-check)
#   lib_tests.log        the library's unit tests (conformance cases on cuda:0, NVRTC)
#   gpu_suite.log        the device suite (every case on cpu, emu:N and cuda:0), file by file
#   torch/               scripts/gpu_reference.py: PyTorch's copy table, snapshot, profile
#   bench_copy.{log,csv,json,png}  tensorguard bench copy --device cuda:0 (beside PyTorch's)
#   bench_gpu.json, bench_gpu_torch.json  the GPU workloads, ours and PyTorch's
#   gpu_bench.{md,csv,json,png}   scripts/gpu_bench_report.py: ratios vs PyTorch, targets
#   train_*.{json,log}   tensorguard train on cuda:0 (digits MLP, digits CNN, DDP on NCCL)
#   train_step.{jsonl,md}  the training step against PyTorch's, interleaved rounds
#   (every step also writes NAME.log: its whole output)
# Every step runs even when an earlier one fails; the script exits non-zero
# when any step failed. It is meant to finish in under 6 minutes on an H200.
#
#   scripts/gpu-check.sh OUTDIR       # TENSORGUARD_GPU_BIN overrides target/gpu-bin
#   GPU_CHECK_STEPS="lib_tests gpu_suite" scripts/gpu-check.sh OUTDIR   # a rerun of some steps
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
bin=${TENSORGUARD_GPU_BIN:-target/gpu-bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/summary.txt"
: >"$summary"
t_start=$(date +%s)
failed=0

for b in tensorguard lib_tests gpu_suite train_step; do
  if [ ! -x "$bin/$b" ]; then
    echo "gpu-check: $bin/$b is missing. Build it on a machine with a Rust toolchain with scripts/build_gpu_check.sh and carry $bin along." | tee -a "$summary"
    exit 2
  fi
done

# CUDA's libraries: the driver from the system; NVRTC and cuBLAS from PyTorch's
# pip packages (nvidia-*) or a CUDA toolkit, whichever is there.
PY=${PYTHON:-python3}
libdirs=$("$PY" - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages(), "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
dirs = []
for r in roots:
    for pat in ("nvidia/*/lib", "nvidia/cu13/lib", "torch/lib", ""):
        for d in glob.glob(os.path.join(r, pat)):
            if any(glob.glob(os.path.join(d, lib)) for lib in ("libnvrtc.so*", "libcublas*.so*", "libnccl.so*")):
                if d not in dirs:
                    dirs.append(d)
print(":".join(dirs))
PY
)
if [ -n "$libdirs" ]; then
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# NCCL (PyTorch's nvidia-nccl wheel): found on the path above, so its tests must run
for d in ${libdirs//:/ }; do
  if [ -e "$d/libnccl.so.2" ]; then
    export TENSORGUARD_NCCL_LIB="$d/libnccl.so.2" TENSORGUARD_REQUIRE_NCCL=1
  fi
done
export TENSORGUARD_KERNEL_CACHE=${TENSORGUARD_KERNEL_CACHE:-/tmp/tensorguard-kernels}
export RUST_BACKTRACE=1

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -a)"
  nvidia-smi 2>&1 || echo "nvidia-smi: not found"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  for d in ${libdirs//:/ }; do ls "$d" | grep -E 'libnvrtc|libcublas|libnccl' | sed "s|^|$d/|"; done
  echo "TENSORGUARD_NCCL_LIB=${TENSORGUARD_NCCL_LIB:-}"
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  ls -l "$bin"
} >"$out/env.txt" 2>&1

# step NAME SECONDS CMD...: run CMD with a time limit, its output in NAME.log
# (only the steps named in GPU_CHECK_STEPS, when it is set)
step() {
  local name=$1 limit=$2
  shift 2
  if [ -n "${GPU_CHECK_STEPS:-}" ] && [[ " $GPU_CHECK_STEPS " != *" $name "* ]]; then
    return 0
  fi
  local t0 rc
  t0=$(date +%s)
  echo "== $name: $*"
  # through bash, so that a step can be a function of this script (exported)
  timeout --kill-after=10 "$limit" bash -c '"$@"' _ "$@" >"$out/$name.log" 2>&1
  rc=$?
  local dt=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then
    printf '%-22s ok      %4ds\n' "$name" "$dt" | tee -a "$summary"
  else
    [ $rc -eq 124 ] && echo "(timed out after ${limit}s)" >>"$out/$name.log"
    printf '%-22s FAILED  %4ds  (exit %d; see %s.log)\n' "$name" "$dt" "$rc" "$name" | tee -a "$summary"
    failed=$((failed + 1))
  fi
  tail -3 "$out/$name.log"
}

step doctor 60 "$bin/tensorguard" -v doctor
# the library's unit tests: the conformance cases on cpu, emu and cuda:0, the NVRTC tests
step lib_tests 150 "$bin/lib_tests" --test-threads 8
# the device suite: each test file of crates/tensorguard/tests is a module of
# gpu_suite and runs in a process of its own, as it does under `cargo test`
# (the files configure process-wide state: emulated devices, memory fractions)
suite() {
  local m rc=0
  for m in $("$bin/gpu_suite" --list 2>/dev/null | sed -n 's/^\([a-z_0-9]*\)::.*: test$/\1/p' | sort -u); do
    echo "---- $m"
    "$bin/gpu_suite" "$m::" --test-threads 8 || rc=1
  done
  return $rc
}
export -f suite
export bin
step gpu_suite 240 suite
# PyTorch's reference: copy table (1 KiB .. 1 GiB), snapshot, profile
step torch_reference 90 "$PY" scripts/gpu_reference.py "$out/torch"
step bench_copy 90 "$bin/tensorguard" -q bench copy --device cuda:0 \
  --csv "$out/bench_copy.csv" --json "$out/bench_copy.json" --plot "$out/bench_copy.png" \
  --reference "$out/torch/copy_table.csv"
step bench_gpu 90 "$bin/tensorguard" -q bench gpu --device cuda:0 --json "$out/bench_gpu.json"
step bench_gpu_torch 90 "$PY" scripts/gpu_bench_torch.py "$out/bench_gpu_torch.json"
step gpu_bench_report 30 "$PY" scripts/gpu_bench_report.py "$out"
step train_mlp 90 "$bin/tensorguard" train --device cuda:0 --no-progress \
  --metrics-json "$out/train_mlp.json"
step train_cnn 90 "$bin/tensorguard" train --device cuda:0 --model cnn --epochs 2 --no-progress \
  --metrics-json "$out/train_cnn.json" --memory-snapshot "$out/train_cnn_snapshot.json"
# a DDP step on cuda:0 with its gradients reduced on NCCL (a world of one)
train_ddp() {
  "$bin/tensorguard" train --device cuda:0 --distributed --epochs 1 --no-progress \
    --metrics-json "$out/train_ddp_nccl.json" || return 1
  "$PY" -c 'import json, sys; m = json.load(open(sys.argv[1])); print(m["collectives"], m["test_accuracy"]); assert m["collectives"] == "nccl", m' \
    "$out/train_ddp_nccl.json"
}
export -f train_ddp
export out PY
step train_ddp_nccl 90 train_ddp

# the training step (the nn MLP with Adam, and the raw-tensor SGD step)
# against PyTorch on cuda:0, interleaved rounds (issue 14)
train_step_bench() {
  local r jsonl="$out/train_step.jsonl"
  : >"$jsonl"
  for r in 1 2 3; do
    "$bin/train_step" --device cuda:0 --batches 64,256,1024 --warmup 20 --steps 200 >>"$jsonl" || return 1
    "$PY" scripts/bench_train_torch.py mlp --device cuda --batches 64,256,1024 --warmup 20 --steps 200 >>"$jsonl" || return 1
  done
  "$PY" scripts/train_step_report.py "$jsonl" "$out/train_step.md"
}
export -f train_step_bench
step train_step_bench 150 train_step_bench

for log in lib_tests gpu_suite; do
  if [ -f "$out/$log.log" ]; then
    passed=$(grep -Eo '[0-9]+ passed' "$out/$log.log" | awk '{s+=$1} END {print s+0}')
    failed_n=$(grep -Eo '[0-9]+ failed' "$out/$log.log" | awk '{s+=$1} END {print s+0}')
    skipped=$(grep -c '^skipped:' "$out/$log.log")
    echo "$log: $passed passed, $failed_n failed, $skipped printed 'skipped:'" | tee -a "$summary"
  fi
done
echo "total: $(($(date +%s) - t_start))s, $failed step(s) failed" | tee -a "$summary"
[ "$failed" -eq 0 ]
