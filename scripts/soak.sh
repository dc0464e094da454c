#!/usr/bin/env bash
# Soak: driftguard (release build) behind the real kube-apiserver for MINUTES
# (default 30) under mixed load, certificate rotation, policy reloads and the
# status churn of 2,000 Argo CD Applications (tests/soak.rs). Then judges the
# issue's goals and draws target/soak/<run>/soak.png (matplotlib, in a venv).
#   scripts/soak.sh 30            # the reported run
#   PUBLISH=1 scripts/soak.sh 30  # also copy the plot to docs/soak.png
set -euo pipefail
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."
minutes="${1:-30}"
[[ "$minutes" =~ ^[0-9]+$ && "$minutes" -ge 2 ]] || { echo "usage: $0 MINUTES (at least 2)" >&2; exit 2; }
out="$PWD/target/soak/$(date -u +%Y%m%dT%H%M%SZ)-${minutes}m"
mkdir -p "$out"

scripts/build-tools.sh >/dev/null
tested=0
SOAK_SECONDS=$((minutes * 60)) SOAK_OUT="$out" \
  cargo test --release --features e2e --test soak -- --nocapture 2>&1 | tee "$out/soak.log" || tested=$?
[[ -f "$out/summary.json" ]] || { echo "soak: no summary; see $out/soak.log" >&2; exit 1; }

goals=0
python3 - "$out/summary.json" <<'PY' || goals=$?
import json, sys
s = json.load(open(sys.argv[1]))
d = s["decisionMicros"]
rss = s["rssKiB"]
g = s["growthAfterWarmUp"]
goals = [
    ("0 failed reviews", s["failures"] == 0 and s["auditInternalErrors"] == 0,
     f"{s['failures']} failed of {sum(s['outcomes'].values())}, {s['auditInternalErrors']} internal errors"),
    ("RSS at the end within 5% of after warm-up", abs(rss["end"] / rss["afterWarmUp"] - 1) <= 0.05,
     f"{rss['afterWarmUp'] / 1024:.1f} → {rss['end'] / 1024:.1f} MiB ({(rss['end'] / rss['afterWarmUp'] - 1) * 100:+.1f}%)"),
    ("no growth in fds, threads, tokio tasks", g["fds"] <= 2 and g["threads"] <= 0 and g["tasks"] <= 4,
     f"fds {g['fds']:+d}, threads {g['threads']:+d}, tasks {g['tasks']:+d}"),
    ("decision p99 churning ≤ 1.1x quiet", d["p99ChurnOverQuiet"] <= 1.1,
     f"{d['churn']['p99']} µs vs {d['quiet']['p99']} µs = {d['p99ChurnOverQuiet']:.2f}x "
     f"({d['churn']['reviews']} and {d['quiet']['reviews']} reviews)"),
]
for name, ok, detail in goals:
    print(f"{'PASS' if ok else 'MISS'}  {name}: {detail}")
open(sys.argv[1].replace("summary.json", "goals.txt"), "w").write(
    "\n".join(f"{'PASS' if ok else 'MISS'}  {n}: {d}" for n, ok, d in goals) + "\n")
sys.exit(0 if all(ok for _, ok, _ in goals) else 1)
PY

venv=target/soak-venv
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'matplotlib==3.11.2'
fi
"$venv/bin/python" scripts/plot-soak.py "$out"
if [[ "${PUBLISH:-0}" == 1 ]]; then
  cp "$out/soak.png" docs/soak.png
  cp "$out/summary.json" docs/soak-summary.json
fi
[[ "$tested" == 0 && "$goals" == 0 ]]
