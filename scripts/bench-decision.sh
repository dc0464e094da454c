#!/usr/bin/env bash
# Runs the decision benchmark and prints each case as a ratio to the bare parse,
# all measured side by side in one run. Usage: scripts/bench-decision.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench decision -- --warm-up-time 2 --measurement-time 6 "$@"
python3 - <<'PY'
import json, pathlib
base = pathlib.Path("target/criterion/deployment-update")
est = {n: json.loads((base / n / "new/estimates.json").read_text())["median"]["point_estimate"]
       for n in ("bare-parse", "decide-20-rules", "decide-1020-rules")}
print(f"bare parse            {est['bare-parse']/1000:8.1f} us")
print(f"decide, 20 rules      {est['decide-20-rules']/1000:8.1f} us  = {est['decide-20-rules']/est['bare-parse']:.2f}x bare parse (target <= 2x)")
print(f"decide, 1020 rules    {est['decide-1020-rules']/1000:8.1f} us  = {est['decide-1020-rules']/est['decide-20-rules']:.3f}x the 20-rule case (target <= 1.1x)")
PY

# Instruction counts (callgrind) do not depend on what else the machine runs.
if command -v valgrind >/dev/null 2>&1; then
  cargo build --release --example profile_decision >/dev/null 2>&1
  count() { valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/profile_decision "$@" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'; }
  setup=$(count 0 x); decide=$(count 300 x); parse=$(count 300 parse)
  python3 -c "s,d,p=$setup,$decide,$parse; print(f'instructions per review: decision {(d-s)/300:,.0f}, bare parse {(p-s)/300:,.0f} = {(d-s)/(p-s):.2f}x')"
fi
