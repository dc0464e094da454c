#!/usr/bin/env bash
# Peak RSS of one review against its body size: `driftguard check` (the
# server's decision code) on the largest reviews a user can make the
# apiserver send (scripts/gen-big-reviews.py), minus the peak of a tiny
# review. Prints MiB of RSS per MiB of body; the server's memory budget
# (src/server/budget.rs, BYTES_PER_BODY_BYTE) must be at least the largest.
# Usage: scripts/review-rss.sh [path/to/driftguard] (default: a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [[ -z "$bin" ]]; then
  cargo build --release --bin driftguard >/dev/null
  bin="${CARGO_TARGET_DIR:-target}/release/driftguard"
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
peak_kib() { /usr/bin/time -f %M "$bin" check --decision-timeout=29s "$1" 2>&1 >/dev/null | tail -1; }
python3 scripts/gen-big-reviews.py configmap-patch 1 argocd >"$tmp/tiny.json"
base=$(peak_kib "$tmp/tiny.json")
printf '%-28s %10s %10s %12s\n' review body_MiB peak_MiB RSS/body
printf '%-28s %10.2f %10.1f %12s\n' tiny "$(stat -c %s "$tmp/tiny.json" | awk '{print $1/1048576}')" "$(echo "$base" | awk '{print $1/1024}')" -
for spec in "deployment-env 20000" "deployment-env 70000" "deployment-env-update 10000" "deployment-env-update 35000" \
            "configmap-patch 40000 flux" "configmap-patch 150000 flux" "configmap-patch 150000 argocd" \
            "configmap-tiny 200000 flux" "configmap-tiny 200000 argocd" "configmap-annotated 32"; do
  python3 scripts/gen-big-reviews.py $spec >"$tmp/r.json"
  bytes=$(stat -c %s "$tmp/r.json")
  peak=$(peak_kib "$tmp/r.json")
  awk -v s="$spec" -v b="$bytes" -v p="$peak" -v z="$base" \
    'BEGIN { printf "%-28s %10.2f %10.1f %11.1fx\n", s, b/1048576, p/1024, (p-z)*1024/b }'
done
