#!/usr/bin/env bash
# Renders `tensorguard memviz --html` in headless Chromium and fails on a
# script error or a timeline that did not draw. The page's own `#selftest`
# hovers its largest allocation and zooms once, and reports both in the DOM.
# Keeps the page, the DOM and a screenshot in target/memviz-check/.
#
#   scripts/check_memviz_html.sh [SNAPSHOT]   (default: the small fixture)
#
# Skips (exit 0, with the reason) where no Chromium is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

snapshot="${1:-crates/tensorguard-cli/tests/fixtures/pytorch_small.pickle}"
browser=""
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null 2>&1; then browser="$c"; break; fi
done
if [ -z "$browser" ]; then
  echo "memviz html check: SKIPPED: no chromium on PATH (apt-get install -y --no-install-recommends chromium)"
  exit 0
fi

out=target/memviz-check
mkdir -p "$out"
cargo run --quiet -p tensorguard-cli --bin tensorguard -- memviz "$snapshot" --html "$out/timeline.html" >/dev/null
url="file://$PWD/$out/timeline.html#selftest"
flags=(--headless --no-sandbox --disable-gpu --disable-background-networking --virtual-time-budget=10000)

"$browser" "${flags[@]}" --dump-dom "$url" >"$out/dom.html" 2>"$out/chromium.log" || {
  echo "memviz html check: FAILED: chromium could not load the page (see $out/chromium.log)"; exit 1; }
"$browser" "${flags[@]}" --hide-scrollbars --window-size=1400,900 \
  --screenshot="$PWD/$out/timeline.png" "$url" >>"$out/chromium.log" 2>&1 || true

fail=0
if grep -q 'class="memviz-script-error"' "$out/dom.html"; then
  echo "memviz html check: FAILED: the page reported a script error:"
  grep -o 'class="memviz-script-error">[^<]*' "$out/dom.html" | sed 's/.*>/  /'
  fail=1
fi
if ! grep -q '<title>memviz: timeline rendered</title>' "$out/dom.html"; then
  echo "memviz html check: FAILED: the timeline did not finish drawing (no rendered marker)"
  fail=1
fi
for what in "hover (ok|skipped)" "zoom ok"; do
  if ! grep -Eq "$what" "$out/dom.html"; then
    echo "memviz html check: FAILED: self-test line '$what' missing"
    fail=1
  fi
done
if [ ! -s "$out/timeline.png" ]; then
  echo "memviz html check: FAILED: no screenshot"
  fail=1
fi
[ "$fail" = 0 ] || exit 1
echo "memviz html check: ok ($(grep -o 'rendered [0-9]* allocations over [0-9]* time steps' "$out/dom.html")); screenshot $out/timeline.png"
