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
