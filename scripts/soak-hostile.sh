#!/usr/bin/env bash
# The hostile-client soak (issue 36 item 6): driftguard (release build) behind
# the real kube-apiserver for MINUTES (default 10), deciding ordinary writes
# whose verdicts are known, while hostile clients connect straight to its
# webhook port (slow bodies, large declared bodies, dribbled headers, header
# floods, YAML alias bombs, maximal reviews) and a tenant writes Argo CD
# Applications with thousands of ignore rules (tests/soak_hostile.rs).
# Then judges the goals and prints them with a table of every figure.
#   scripts/soak-hostile.sh 10                     # the reported run
#   HOSTILE_TENANT=0 scripts/soak-hostile.sh 2     # without the tenant
#   HOSTILE_SCALE=0 scripts/soak-hostile.sh 2      # the control: no attacks
# Figures: target/soak-hostile/<run>/summary.json, goals.txt, soak.log.
set -euo pipefail
export GOTOOLCHAIN=go1.27.3
cd "$(dirname "$0")/.."
minutes="${1:-10}"
[[ "$minutes" =~ ^[0-9]+$ && "$minutes" -ge 1 ]] || { echo "usage: $0 MINUTES (at least 1)" >&2; exit 2; }
out="$PWD/target/soak-hostile/$(date -u +%Y%m%dT%H%M%SZ)-${minutes}m"
mkdir -p "$out"

scripts/build-tools.sh etcd kube-apiserver kubectl >/dev/null
tested=0
HOSTILE_SECONDS=$((minutes * 60)) HOSTILE_OUT="$out" \
  cargo test --release --features e2e --test soak_hostile -- --nocapture 2>&1 | tee "$out/soak.log" || tested=$?
[[ -f "$out/summary.json" ]] || { echo "soak-hostile: no summary; see $out/soak.log" >&2; exit 1; }

goals=0
python3 - "$out/summary.json" <<'PY' || goals=$?
import json, sys
s = json.load(open(sys.argv[1]))
o, r, rd, w = s["ordinary"], s["rssMiB"], s["readiness"], s["apiserverWebhookCalls"]
lat = o["latencyMillis"]
goals = [
    ("0 wrong verdicts for ordinary writes", o["wrongVerdicts"] == 0,
     f"{o['wrongVerdicts']} wrong of {o['writes']}"),
    ("ordinary writes' p99 < 1 s", lat["p99"] < 1000,
     f"p50 {lat['p50']:.0f} ms, p99 {lat['p99']:.0f} ms, max {lat['max']:.0f} ms "
     f"(reviewed by driftguard: p99 {o['reviewedLatencyMillis']['p99']:.0f} ms of {o['reviewedWrites']}; "
     f"the apiserver's webhook calls: {w['over1s']:.0f} of {w['calls']:.0f} over 1 s, p99 ≤ {w['p99AtMostSeconds']} s)"),
    (f"peak RSS < {r['limit']} MiB (the chart's limit)", r["peak"] < r["limit"],
     f"{r['start']:.1f} → peak {r['peak']:.1f} MiB"),
    ("readiness never lost", rd["lost"] == 0,
     f"{rd['lost']} of {rd['probes']} probes failed, longest unready {rd['longestUnreadyMillis']} ms"),
]
lines = [f"{'PASS' if ok else 'MISS'}  {name}: {detail}" for name, ok, detail in goals]
lines.append("")
lines.append(f"{'attack':<22}{'connections':>12}{'sent MiB':>10}{'ended by server':>17}{'answered':>10}{'failed':>8}{'held peak':>11}")
for name, a in s["attacks"].items():
    lines.append(f"{name:<22}{a['connections']:>12}{a['bytesSent'] / 1048576:>10.1f}{a['endedByServer']:>17}"
                 f"{a['answered']:>10}{a['failed']:>8}{a['heldPeak']:>11}")
t = s["tenant"]
lines.append(f"{'tenantApplications':<22}{t['writes']:>12} written of {t['rulesPerApplication']} rules each, {t['failed']} refused"
             if t["enabled"] else "tenantApplications    off (HOSTILE_TENANT=0)")
d = s["driftguard"]
lines.append(f"driftguard: {d['connectionsEvicted']:.0f} connections evicted, {d['connectionsTurnedAway']:.0f} turned away, "
             f"{d['memoryBudgetRefused']:.0f} reviews refused by the memory budget")
print("\n".join(lines))
open(sys.argv[1].replace("summary.json", "goals.txt"), "w").write("\n".join(lines) + "\n")
sys.exit(0 if all(ok for _, ok, _ in goals) else 1)
PY
echo "soak-hostile: $out"
[[ "$tested" == 0 && "$goals" == 0 ]]
