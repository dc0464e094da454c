#!/usr/bin/env bash
# What a write gains through the REAL kube-apiserver with driftguard, against
# the cheapest possible webhook. Starts etcd and kube-apiserver (built by
# scripts/build-tools.sh), driftguard (release build) and a no-op validating
# webhook (benches/apiserver, Go standard library), then runs interleaved
# rounds; in each round, for each configuration, in an order that rotates:
#   none        no webhook configuration at all;
#   noop        one validating webhook with driftguard's rules, conditions,
#               failurePolicy, timeoutSeconds and sideEffects (taken from
#               `driftguard register --dry-run`), calling the no-op;
#   driftguard  both webhooks, exactly as `driftguard register` applies them.
# Each configuration is applied, then probed with dry-run writes until the
# apiserver calls the webhook it names and no other. Then the Go load client
# PATCHes (merge patch of one annotation) as user `bench`, a human with a
# client certificate, sequentially and with 8 concurrent writers, on MANAGED
# ConfigMaps (Argo CD tracking id; the policy ignores the patched annotation,
# so driftguard allows), UNMANAGED ones, and the STATUS subresource of managed
# Services (a human's status write, judged since issue 19). Reports added p50 and p99 (config
# minus no webhook in the same round, median over rounds) and the ratio
# driftguard / no-op of the added p50. A benchmark, never part of the tests.
# With BENCH_VALIDATE_ONLY=1, a fourth configuration, driftguard-validate:
# the no-op's registration pointed at driftguard's /validate, to tell the cost
# of driftguard's answer from the cost of a second webhook call.
# Usage: [BENCH_VALIDATE_ONLY=1] scripts/bench-apiserver.sh [ROUNDS] [WRITES]    (default 5 300)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=${1:-5}
writes=${2:-300}
target=${CARGO_TARGET_DIR:-$root/target}

log() { printf '==> %s\n' "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-apiserver.XXXXXX")
pids=()
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ "$status" -ne 0 ]; then
    for f in "$work"/*.log; do
      [ -s "$f" ] && { log "last lines of $(basename "$f"):"; tail -n 15 "$f" >&2; }
    done
  fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- binaries -----------------------------------------------------------------
log "building driftguard (release) and examples/review_latency"
cargo build --release --bin driftguard --example review_latency >&2
driftguard=$target/release/driftguard
review_latency=$target/release/examples/review_latency
# kubectl of the apiserver's own version (DRIFTGUARD_KUBE_VERSION, default the newest).
tools=$(scripts/build-tools.sh etcd kube-apiserver kubectl)
etcd=$(sed -n 1p <<<"$tools"); apiserver=$(sed -n 2p <<<"$tools"); kubectl=$(sed -n 3p <<<"$tools")
[ -x "$etcd" ] && [ -x "$apiserver" ] && [ -x "$kubectl" ] || die "scripts/build-tools.sh gave no etcd, kube-apiserver or kubectl"
# The Go client and no-op, cached in .cache/bin under a hash of their sources.
gosrc=benches/apiserver
hash=$(cat "$gosrc"/go.mod "$gosrc"/*.go | sha256sum | cut -c1-12)
bench=$root/.cache/bin/bench-apiserver-$hash
if [ ! -x "$bench" ]; then
  log "building $gosrc -> $bench"
  mkdir -p .cache/bin
  (cd "$gosrc" && GOFLAGS=-mod=readonly GOWORK=off CGO_ENABLED=0 \
    go build -trimpath -o "$bench.tmp.$$" .)
  mv -f "$bench.tmp.$$" "$bench"
fi

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_for SECONDS WHAT PID COMMAND...: COMMAND succeeds, or fail loudly when PID
# exits or time runs out.
wait_for() {
  local secs=$1 what=$2 pid=$3; shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || die "$what exited"
    [ "$SECONDS" -lt "$deadline" ] || die "$what not ready after ${secs}s"
    sleep 0.2
  done
}

# --- certificates: one CA for the apiserver and its users; the webhooks' own
# serving pair from `driftguard certs` -------------------------------------------
cd "$work"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj /CN=bench-ca -keyout ca.key -out ca.crt 2>/dev/null
# leaf NAME SUBJECT EXTENSIONS
leaf() {
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
    -extfile <(printf '%b' "$3") -out "$1.crt" 2>/dev/null
}
leaf apiserver /CN=kube-apiserver 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth'
leaf admin /O=system:masters/CN=admin 'extendedKeyUsage=clientAuth'
leaf bench /O=developers/CN=bench 'extendedKeyUsage=clientAuth'
leaf driftguard /CN=driftguard 'extendedKeyUsage=clientAuth'
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out sa.key 2>/dev/null
openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
"$driftguard" certs --out webhook --ip 127.0.0.1 >/dev/null

# --- etcd and kube-apiserver, as testkit/src/control_plane.rs starts them ---
etcd_port=$(port); peer_port=$(port); api_port=$(port)
api=https://127.0.0.1:$api_port
"$etcd" --data-dir=etcd --listen-client-urls=http://127.0.0.1:"$etcd_port" \
  --advertise-client-urls=http://127.0.0.1:"$etcd_port" \
  --listen-peer-urls=http://127.0.0.1:"$peer_port" \
  --initial-advertise-peer-urls=http://127.0.0.1:"$peer_port" \
  --initial-cluster=default=http://127.0.0.1:"$peer_port" \
  --unsafe-no-fsync --log-level=info >/dev/null 2>etcd.log &
pids+=($!)
wait_for 60 etcd "${pids[-1]}" grep -q 'ready to serve client requests' etcd.log
"$apiserver" --etcd-servers=http://127.0.0.1:"$etcd_port" --secure-port="$api_port" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
  --tls-cert-file=apiserver.crt --tls-private-key-file=apiserver.key --client-ca-file=ca.crt \
  --service-account-key-file=sa.pub --service-account-signing-key-file=sa.key \
  --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/16 \
  --authorization-mode=RBAC --disable-admission-plugins=ServiceAccount --profiling=false \
  --v=0 >/dev/null 2>apiserver.log &
pids+=($!)
ready() { [ "$(curl -fsS --cacert ca.crt --cert admin.crt --key admin.key "$api/readyz")" = ok ]; }
wait_for 120 kube-apiserver "${pids[-1]}" ready
log "kube-apiserver ready on $api"

for user in admin bench driftguard; do
  cat >"$user.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: bench, cluster: {server: "$api", certificate-authority: "$work/ca.crt"}}]
users: [{name: $user, user: {client-certificate: "$work/$user.crt", client-key: "$work/$user.key"}}]
contexts: [{name: $user, context: {cluster: bench, user: $user}}]
current-context: $user
EOF
done
kc() { "$kubectl" --kubeconfig=admin.kubeconfig "$@"; }

# --- objects, RBAC and the policy ---------------------------------------------
n_objects=8
{
  echo 'apiVersion: v1
kind: Namespace
metadata: {name: bench}
---
# bench, a human: may read and patch ConfigMaps in namespace bench.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: configmap-editor, namespace: bench}
rules: [{apiGroups: [""], resources: [configmaps, services/status], verbs: [get, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: configmap-editors, namespace: bench}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmap-editor}
subjects: [{kind: Group, name: developers, apiGroup: rbac.authorization.k8s.io}]
---
# driftguard'"'"'s own minimum (README, Minimal RBAC): scale parents and Events.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard}
rules:
  - {apiGroups: [apps], resources: [deployments, statefulsets, replicasets], verbs: [get, list, watch]}
  - {apiGroups: [events.k8s.io], resources: [events], verbs: [create, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard}
subjects: [{kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}]'
  for i in $(seq 0 $((n_objects - 1))); do
    echo "---
apiVersion: v1
kind: ConfigMap
metadata:
  name: managed-$i
  namespace: bench
  annotations: {argocd.argoproj.io/tracking-id: \"bench:/ConfigMap:bench/managed-$i\"}
data: {key: value}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unmanaged-$i, namespace: bench}
data: {key: value}
---
apiVersion: v1
kind: Service
metadata:
  name: status-$i
  namespace: bench
  annotations: {argocd.argoproj.io/tracking-id: \"bench:/Service:bench/status-$i\"}
spec: {ports: [{port: 80}]}"
  done
} | kc apply -f - >/dev/null
# The annotation every write sets is ignored, so driftguard allows the writes.
cat >policy.yaml <<'EOF'
ignoreDifferences:
  - group: ""
    kind: ConfigMap
    jsonPointers: [/metadata/annotations/bench.driftguard.io~1seq]
  - group: ""
    kind: Service
    jsonPointers: [/metadata/annotations/bench.driftguard.io~1seq]
EOF

# --- the two webhook servers ----------------------------------------------------
dg_port=$(port); dg_probe=$(port); noop_port=$(port)
"$driftguard" serve --listen=127.0.0.1:"$dg_port" --probe-listen=127.0.0.1:"$dg_probe" \
  --tls-cert=webhook/tls.crt --tls-key=webhook/tls.key --policy=policy.yaml \
  --kubeconfig=driftguard.kubeconfig --shutdown-delay=0s >driftguard.audit 2>driftguard.log &
pids+=($!)
wait_for 30 driftguard "${pids[-1]}" curl -fsS http://127.0.0.1:"$dg_probe"/readyz
"$bench" noop -listen=127.0.0.1:"$noop_port" -cert=webhook/tls.crt -key=webhook/tls.key \
  -dump=review.json 2>noop.log &
pids+=($!)
noop_calls() { curl -fsS --cacert webhook/ca.crt https://127.0.0.1:"$noop_port"/calls; }
wait_for 30 no-op "${pids[-1]}" noop_calls

# The no-op's registration: driftguard's validating webhook with its clientConfig
# replaced, everything else (rules, matchConditions, failurePolicy, timeoutSeconds,
# sideEffects, selectors) kept. The same pointed at driftguard for driftguard-validate.
"$driftguard" register --dry-run --url=https://127.0.0.1:"$dg_port" \
  --ca-bundle=webhook/ca.crt --policy=policy.yaml |
  kc create --dry-run=client -o json -f - >registered.json
validating_only() { # NAME URL
  jq -n --arg name "$1" --arg url "$2" --arg ca "$(base64 -w0 webhook/ca.crt)" '
    [inputs | .items // [.] | .[] | select(.kind == "ValidatingWebhookConfiguration")] | first
    | .metadata.name = $name
    | .webhooks[].clientConfig = {url: $url, caBundle: $ca}' registered.json
}
validating_only bench-noop "https://127.0.0.1:$noop_port/validate" >noop-webhook.json
validating_only bench-validate-only "https://127.0.0.1:$dg_port/validate" >validate-only-webhook.json
[ "$(jq '.webhooks | length' noop-webhook.json)" -ge 1 ] || die "no validating webhook in register --dry-run"

# --- configurations ----------------------------------------------------------------
dg_calls() { wc -l <driftguard.audit; }
unregister() {
  kc delete validatingwebhookconfigurations driftguard bench-noop bench-validate-only --ignore-not-found >/dev/null
  kc delete mutatingwebhookconfigurations driftguard --ignore-not-found >/dev/null
}
# A dry-run write as bench; prints which webhooks it reached: none, noop, driftguard.
probe() {
  local noop0 dg0 noop1 dg1 seen=()
  noop0=$(noop_calls); dg0=$(dg_calls)
  curl -fsS -o /dev/null --cacert ca.crt --cert bench.crt --key bench.key -X PATCH \
    -H 'Content-Type: application/merge-patch+json' \
    -d '{"metadata":{"annotations":{"bench.driftguard.io/seq":"probe-'"$RANDOM"'"}}}' \
    "$api/api/v1/namespaces/bench/configmaps/managed-0?dryRun=All" || die "probe write refused"
  noop1=$(noop_calls); dg1=$(dg_calls)
  [ "$noop1" -gt "$noop0" ] && seen+=(noop)
  [ "$dg1" -gt "$dg0" ] && seen+=(driftguard)
  echo "${seen[*]:-none}"
}
# configure CONFIG: apply it, then wait until three probes in a row reach
# exactly its webhook (the apiserver picks up configurations asynchronously),
# and one second more for a second configuration (driftguard's mutating one).
configure() {
  unregister
  case $1 in
    noop) kc apply -f noop-webhook.json >/dev/null ;;
    driftguard-validate) kc apply -f validate-only-webhook.json >/dev/null ;;
    driftguard)
      "$driftguard" register --url=https://127.0.0.1:"$dg_port" --ca-bundle=webhook/ca.crt \
        --policy=policy.yaml --kubeconfig=admin.kubeconfig >/dev/null ;;
  esac
  local streak=0 deadline=$((SECONDS + 30)) seen
  while [ "$streak" -lt 3 ]; do
    seen=$(probe)
    if [ "$seen" = "${1%-validate}" ]; then streak=$((streak + 1)); else streak=0; fi
    [ "$SECONDS" -lt "$deadline" ] || die "configuration $1: probes still reach: $seen"
    sleep 0.1
  done
  sleep 1
}

paths() { # SET: -path flags for the objects of that set
  for i in $(seq 0 $((n_objects - 1))); do
    case $1 in
      # A human's status write on a managed Service (judged since issue 19).
      status) echo "-path=/api/v1/namespaces/bench/services/status-$i/status" ;;
      *) echo "-path=/api/v1/namespaces/bench/configmaps/$1-$i" ;;
    esac
  done
}

# --- interleaved rounds ----------------------------------------------------------
configs=(none noop driftguard)
[ "${BENCH_VALIDATE_ONLY:-}" = 1 ] && configs+=(driftguard-validate)
log "$rounds rounds x ${#configs[@]} configurations x {managed, unmanaged, status} x {1, 8 writers}, $writes writes each"
for round in $(seq 1 "$rounds"); do
  for k in "${!configs[@]}"; do
    config=${configs[$(((round + k) % ${#configs[@]}))]}
    configure "$config"
    for set in managed unmanaged status; do
      mapfile -t objects < <(paths "$set")
      for writers in 1 8; do
        "$bench" load -server="$api" -ca=ca.crt -cert=bench.crt -key=bench.key \
          -writes="$writes" -writers="$writers" "${objects[@]}" 2>>load.log |
          jq -c --argjson round "$round" --arg config "$config" --arg set "$set" \
            --argjson writers "$writers" '. + {round: $round, config: $config, set: $set, writers: $writers}' |
          tee -a results.jsonl | jq -r '"round \(.round) \(.config) \(.set) writers=\(.writers): p50 \(.p50_us) us, p99 \(.p99_us) us, \(.errors) errors"' >&2
      done
    done
  done
done
unregister

# What driftguard saw: managed writes must have been judged as managed (and
# allowed), or the benchmark measured something else.
log "driftguard's audit lines by endpoint, object set, verdict and reason (probes are dry runs):"
jq -r 'select(.namespace == "bench") | "\(.endpoint) \(.name | sub("-[0-9]+$"; "")) \(.verdict) \(.reason)\(if .dryRun then " dry-run" else "" end)"' \
  driftguard.audit | sort | uniq -c >&2
if jq -e 'select(.name | startswith("managed-") or startswith("status-")) | select(.reason == "out-of-scope" or .verdict == "deny")' \
  driftguard.audit >/dev/null; then
  die "driftguard did not judge the managed writes as managed and allowed"
fi

# --- report ---------------------------------------------------------------------
echo "== $rounds interleaved rounds x $writes writes per run, $(nproc) cores; added = config minus no webhook, same round; median over rounds (min-max)"
python3 - results.jsonl "${configs[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
configs = sys.argv[3:]  # after none
at = {(r["round"], r["config"], r["set"], r["writers"]): r for r in runs}
rounds = sorted({r["round"] for r in runs})
ms = lambda us: us / 1000

def added(config, s, w, q):
    return [ms(at[(r, config, s, w)][q] - at[(r, "none", s, w)][q]) for r in rounds]

def cell(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"

head = ["writers", "objects", "no webhook p50 / p99"]
head += [f"{c} added {q}" for c in configs for q in ("p50", "p99")]
head += [f"{c} / noop, added p50" for c in configs[1:]]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for w in (1, 8):
    for s in ("managed", "unmanaged", "status"):
        base50 = statistics.median(ms(at[(r, "none", s, w)]["p50_us"]) for r in rounds)
        base99 = statistics.median(ms(at[(r, "none", s, w)]["p99_us"]) for r in rounds)
        row = [str(w), s, f"{base50:.2f} / {base99:.2f}"]
        row += [cell(added(c, s, w, q)) for c in configs for q in ("p50_us", "p99_us")]
        noop50 = statistics.median(added("noop", s, w, "p50_us"))
        for c in configs[1:]:
            ratio = statistics.median(added(c, s, w, "p50_us")) / noop50 if noop50 > 0 else float("nan")
            row.append(f"{ratio:.2f}x")
        print("| " + " | ".join(row) + " |")
errors = sum(r["errors"] for r in runs)
print(f"\nmilliseconds; {len(runs)} runs, {sum(r['count'] for r in runs)} measured writes, {errors} errors")
for c in configs[1:]:
    per_round = [added(c, "managed", 1, "p50_us")[i] / added("noop", "managed", 1, "p50_us")[i]
                 for i in range(len(rounds))]
    print(f"{c} / noop, added p50, one writer, managed, per round: "
          + ", ".join(f"{x:.2f}" for x in per_round)
          + f"; median {statistics.median(per_round):.2f}x (min {min(per_round):.2f}, max {max(per_round):.2f})")
sys.exit(1 if errors else 0)
PY

# In driftguard: the audit record's latencyMicros (parse to decision, both
# webhooks, real writes of managed ConfigMaps) against a bare parse of a
# review the apiserver sent in this run, timed by examples/review_latency.
[ -s review.json ] || die "the no-op wrote no review to time"
jq -r 'select(.namespace == "bench" and (.name | startswith("managed-")) and (.dryRun | not))
  | "\(.latencyMicros) \(.parseMicros)"' driftguard.audit >in-server.txt
"$review_latency" 400 2000 --body review.json --policy policy.yaml >review-latency.txt
python3 - in-server.txt review-latency.txt <<'PY'
import re, sys
pairs = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
us = sorted(p[0] for p in pairs)
parse = sorted(p[1] for p in pairs)
p50, worst, parse_p50 = us[len(us) // 2], us[-1], parse[len(parse) // 2]
# The same reviews' own parse, timed by the server in the same moment: the
# yardstick with the same caches, load and CPU as the decision it measures.
print(f"in driftguard, per review: p50 {p50} us over its own parse's p50 {parse_p50} us "
      f"(audit parseMicros, same {len(us)} writes) = {p50 / max(parse_p50, 1):.2f}x")
lines = open(sys.argv[2]).read().splitlines()
bare = int(re.search(r"p50\s+(\d+)", next(l for l in lines if l.startswith("bare parse"))).group(1))
print(f"in driftguard (audit latencyMicros, {len(us)} managed writes): p50 {p50} us, max {worst} us; "
      f"bare parse of the same review {bare} us: p50 = {p50 / max(bare, 1):.2f}x bare parse")
print("where a review's time goes (examples/review_latency, same review and policy):")
for l in lines:
    print("  " + l)
PY
