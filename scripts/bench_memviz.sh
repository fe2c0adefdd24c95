#!/usr/bin/env bash
# Times `tensorguard memviz` on a 1M-event snapshot in PyTorch's layout and,
# where PyTorch is installed, `python3 -m torch.cuda._memory_viz stats|trace`
# on the same file, and prints the ratios (wall time and CPU time: on a busy
# machine the CPU time is the steadier figure).
#
#   scripts/bench_memviz.sh [EVENTS]      (default 1000000)
#
# The snapshot is written by scripts/make_big_snapshot.py (plain Python, no
# torch) into target/memviz-bench/. Figures are of single runs; they include
# reading and decoding the pickle.
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-1000000}"
dir=target/memviz-bench
mkdir -p "$dir"
snap="$dir/big-$events.pickle"
if [ ! -f "$snap" ]; then
  python3 scripts/make_big_snapshot.py "$snap" --events "$events"
fi
cargo build --release --quiet -p tensorguard-cli --bin tensorguard
bin=target/release/tensorguard

timed() { # label, command...: prints "label wall_seconds cpu_seconds"
  local label="$1"; shift
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -o "$dir/$label.time" -f "%e %U %S" "$@" >"$dir/$label.out" 2>"$dir/$label.err"
    awk -v l="$label" '{printf "%s %.2f %.2f\n", l, $1, $2 + $3}' "$dir/$label.time"
  else
    local start end
    start=$(date +%s.%N)
    "$@" >"$dir/$label.out" 2>"$dir/$label.err"
    end=$(date +%s.%N)
    awk -v l="$label" -v a="$start" -v b="$end" 'BEGIN{printf "%s %.2f 0\n", l, b-a}'
  fi
}

results=()
results+=("$(timed memviz_report "$bin" memviz "$snap")")
results+=("$(timed memviz_html_png "$bin" memviz "$snap" --html "$dir/big.html" --png "$dir/big.png")")
if python3 -c "import torch" >/dev/null 2>&1; then
  results+=("$(timed torch_stats python3 -m torch.cuda._memory_viz stats "$snap")")
  results+=("$(timed torch_trace python3 -m torch.cuda._memory_viz trace "$snap")")
else
  echo "PyTorch is not installed: timing tensorguard only"
fi

echo "snapshot: $snap ($(stat -c %s "$snap") bytes, $events events)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo n/a) on $(nproc) cpus"
printf '%-18s %8s %8s\n' command wall_s cpu_s
for r in "${results[@]}"; do printf '%-18s %8s %8s\n' $r; done
printf '%s\n' "${results[@]}" | awk '
  $1 == "memviz_report" { w = $2; c = $3 }
  $1 ~ /^torch_/ { n++; k[n] = $1; tw[n] = $2; tc[n] = $3 }
  END {
    for (i = 1; i <= n; i++) {
      cpu = (c > 0) ? sprintf(", %.1fx cpu", tc[i] / c) : ""
      printf "ratio %s / memviz_report: %.1fx wall%s\n", k[i], tw[i] / w, cpu
    }
  }'
