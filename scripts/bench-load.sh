#!/usr/bin/env bash
# Load benchmark for `driftguard serve`, side by side in one run with the same
# TLS/HTTP stack answering a fixed allowed review (benches/fixed_answer_server.rs).
# Drives both over HTTPS with oha (installed from crates.io into .cache/oha):
#   1. maximum throughput, HTTP/1.1 keep-alive, fixed concurrency;
#   2. latency at half of driftguard's maximum rate (p50, p99);
#   3. a new connection (TLS handshake) per request;
# and reports driftguard's peak RSS. Traffic goes to 127.0.0.1 only.
# Usage: scripts/bench-load.sh [SECONDS] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
conc=${2:-16}
oha=.cache/oha/bin/oha
if [ ! -x "$oha" ]; then
  cargo install oha --locked --root .cache/oha
fi
cargo build --release --bin driftguard --example fixed-answer-server >/dev/null
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
target/release/driftguard certs --out "$work" --ip 127.0.0.1 >/dev/null
python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])), separators=(",", ":")))' \
  tests/data/deployment-update-image.json >"$work/review.json"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dg_port=$(port); probe_port=$(port); base_port=$(port); parse_port=$(port)
target/release/driftguard serve --listen 127.0.0.1:$dg_port --probe-listen 127.0.0.1:$probe_port \
  --tls-cert "$work/tls.crt" --tls-key "$work/tls.key" --no-cluster >/dev/null 2>"$work/driftguard.log" &
dg=$!
target/release/examples/fixed-answer-server 127.0.0.1:$base_port "$work/tls.crt" "$work/tls.key" 2>/dev/null &
target/release/examples/fixed-answer-server 127.0.0.1:$parse_port "$work/tls.crt" "$work/tls.key" --parse 2>/dev/null &
for _ in $(seq 100); do curl -fs http://127.0.0.1:$probe_port/readyz >/dev/null && break; sleep 0.1; done
sleep 0.5

run() { # url, extra oha flags... → JSON summary on stdout
  local url=$1; shift
  "$oha" --no-tui --output-format json -z "${secs}s" -c "$conc" -m POST -D "$work/review.json" \
    -H 'content-type: application/json' --insecure "$@" "$url"
}
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

echo "== ${secs}s per run, concurrency $conc, body $(wc -c <"$work/review.json") bytes (a denied Deployment UPDATE)"
base_rps=$(run https://127.0.0.1:$base_port/validate | field 'd["summary"]["requestsPerSec"]')
parse_rps=$(run https://127.0.0.1:$parse_port/validate | field 'd["summary"]["requestsPerSec"]')
dg_json=$(run https://127.0.0.1:$dg_port/validate)
dg_rps=$(echo "$dg_json" | field 'd["summary"]["requestsPerSec"]')
dg_ok=$(echo "$dg_json" | field 'd["statusCodeDistribution"]')
half=$(python3 -c "print(int($dg_rps/2))")
lat=$(run https://127.0.0.1:$dg_port/validate -q "$half" | field '"%.3f %.3f" % (d["latencyPercentiles"]["p50"]*1e3, d["latencyPercentiles"]["p99"]*1e3)')
base_new=$(run https://127.0.0.1:$base_port/validate --disable-keepalive | field 'd["summary"]["requestsPerSec"]')
dg_new=$(run https://127.0.0.1:$dg_port/validate --disable-keepalive | field 'd["summary"]["requestsPerSec"]')
rss=$(awk '/VmHWM/ {print $2}' /proc/$dg/status)
read -r p50 p99 <<<"$lat"
python3 - "$base_rps" "$dg_rps" "$half" "$p50" "$p99" "$base_new" "$dg_new" "$rss" "$dg_ok" "$parse_rps" <<'PY'
import sys
base, dg, half, p50, p99, base_new, dg_new, rss, codes, parse = sys.argv[1:]
base, dg, p50, p99, base_new, dg_new, rss, parse = map(float, (base, dg, p50, p99, base_new, dg_new, rss, parse))
print(f"status codes from driftguard: {codes}")
print(f"{'measure':44} {'value':>24} {'target':>12}")
print(f"{'throughput, keep-alive (req/s)':44} {dg:10.0f} vs {base:9.0f} = {dg/base:.2f}x {'>= 0.85x':>12}")
print(f"{'  vs a baseline that parses the body':44} {dg:10.0f} vs {parse:9.0f} = {dg/parse:.2f}x {'':>12}")
print(f"{'latency at ' + half + ' req/s (half max): p50 / p99':44} {p50:8.3f} / {p99:.3f} ms = {p99/p50:.2f}x {'<= 3x p50':>12}")
print(f"{'throughput, new connection per request':44} {dg_new:10.0f} vs {base_new:9.0f} = {dg_new/base_new:.2f}x {'':>12}")
print(f"{'driftguard peak RSS':44} {rss/1024:21.1f} MiB {'<= 32 MiB':>12}")
PY
