#!/usr/bin/env bash
# Build the Go-based e2e test tools (etcd, helm, kube-apiserver) from the Go
# module proxy into .cache/bin/<tool>-<version>.
#
# Each tool is built from its own consumer module under tests/e2e/<name>/ whose
# committed go.mod + go.sum pin the full dependency graph, so builds are
# reproducible and need nothing but a Go toolchain and GOPROXY access.
# Binaries that already exist are skipped, so a warm re-run takes seconds.
#
# Usage: scripts/build-tools.sh [etcd|helm|kube-apiserver ...]   (default: all)
# Prints the absolute path of each requested binary on stdout; progress goes
# to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
E2E_DIR="${ROOT}/tests/e2e"
BIN_DIR="${ROOT}/.cache/bin"

ETCD_VERSION="v3.6.14"
HELM_VERSION="v3.22.0"
KUBE_VERSION="v1.34.4"

# -mod=readonly: never rewrite the committed go.mod/go.sum; a missing go.sum
# entry is an error rather than a silent re-resolution.
export GOFLAGS="-mod=readonly"
export GOWORK=off
export CGO_ENABLED=0

log() { printf '==> %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || { log "go not found in PATH"; exit 1; }

# go_build <module dir> <output> <package> <ldflags>
go_build() {
  local moddir="$1" out="$2" pkg="$3" ldflags="$4"
  local tmp="${out}.tmp.$$"
  local start=${SECONDS}
  log "building ${pkg} -> ${out}"
  # Write to a temp name and rename, so an interrupted build never leaves a
  # partial binary that a later run would treat as up to date.
  trap "rm -f '${tmp}'" EXIT
  (cd "${moddir}" && nice -n 19 go build -trimpath -ldflags "${ldflags}" -o "${tmp}" "${pkg}")
  mv -f "${tmp}" "${out}"
  trap - EXIT
  log "built $(basename "${out}") in $((SECONDS - start))s"
}

# check_version <output> <expected substring> <args...>
check_version() {
  local out="$1" want="$2"; shift 2
  local got
  got="$("${out}" "$@" 2>&1)" || true
  if [[ "${got}" != *"${want}"* ]]; then
    log "$(basename "${out}") $*: expected '${want}', got: ${got}"
    rm -f "${out}"
    exit 1
  fi
}

build_etcd() {
  local out="${BIN_DIR}/etcd-${ETCD_VERSION}"
  if [[ ! -x "${out}" ]]; then
    go_build "${E2E_DIR}/etcd" "${out}" go.etcd.io/etcd/server/v3 "-s -w"
    check_version "${out}" "etcd Version: ${ETCD_VERSION#v}" --version
  fi
  echo "${out}"
}

build_helm() {
  local out="${BIN_DIR}/helm-${HELM_VERSION}"
  if [[ ! -x "${out}" ]]; then
    # Mirror helm's Makefile: default .Capabilities.KubeVersion follows the
    # client-go minor helm was built against (client-go v0.X.Y -> 1.X).
    local cg k8s_minor
    cg="$(cd "${E2E_DIR}/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)"
    k8s_minor="$(cut -d. -f2 <<<"${cg}")"
    local ldflags="-s -w"
    ldflags+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
    ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
    ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${k8s_minor}"
    ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1"
    ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${k8s_minor}"
    go_build "${E2E_DIR}/helm" "${out}" helm.sh/helm/v3/cmd/helm "${ldflags}"
    check_version "${out}" "Version:\"${HELM_VERSION}\"" version
  fi
  echo "${out}"
}

build_kube_apiserver() {
  local out="${BIN_DIR}/kube-apiserver-${KUBE_VERSION}"
  if [[ ! -x "${out}" ]]; then
    local major minor
    major="$(cut -d. -f1 <<<"${KUBE_VERSION#v}")"
    minor="$(cut -d. -f2 <<<"${KUBE_VERSION}")"
    # Same variables hack/lib/version.sh sets, in both version packages.
    local ldflags="-s -w" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
      ldflags+=" -X ${pkg}.gitMajor=${major}"
      ldflags+=" -X ${pkg}.gitMinor=${minor}"
    done
    go_build "${E2E_DIR}/kube" "${out}" k8s.io/kubernetes/cmd/kube-apiserver "${ldflags}"
    check_version "${out}" "Kubernetes ${KUBE_VERSION}" --version
  fi
  echo "${out}"
}

mkdir -p "${BIN_DIR}"

tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
  # Smallest first; kube-apiserver is by far the longest build.
  tools=(etcd helm kube-apiserver)
fi

for tool in "${tools[@]}"; do
  case "${tool}" in
    etcd) build_etcd ;;
    helm) build_helm ;;
    kube-apiserver) build_kube_apiserver ;;
    *) log "unknown tool: ${tool} (want etcd, helm or kube-apiserver)"; exit 2 ;;
  esac
done
