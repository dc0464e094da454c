#!/usr/bin/env bash
# Build the Go-based e2e test tools from the Go module proxy into
# $DRIFTGUARD_TOOLS_BIN (default ~/.cache/driftguard/bin), as <tool>-<version>.
# The cache lives outside the checkout so fresh clones on one machine share it.
#
#   default:  etcd, helm, kube-apiserver, kubectl (what scripts/test.sh needs)
#   gitops:   kube-controller-manager, flux-source-controller,
#             flux-kustomize-controller, argocd, gitops-aux (Redis + Git HTTP),
#             the real controllers tests/e2e_gitops.rs and tests/e2e_appset.rs run
#             (the applicationset-controller is the same argocd binary).
#
# Flux v1.9.x and Argo CD v3.6 need Go 1.27: GOTOOLCHAIN=go1.27.3 below makes
# the go command fetch that toolchain from the module proxy (about 10 s once).
#
# Each tool is built from its own consumer module under tests/e2e/<name>/ whose
# committed go.mod + go.sum pin the full dependency graph, so builds are
# reproducible and need nothing but a Go toolchain and GOPROXY access.
# Binaries that already exist are skipped, so a warm re-run takes seconds.
#
# kube-apiserver, kube-controller-manager and kubectl are built at one of the
# supported Kubernetes versions (KUBE_VERSIONS, newest first), from the
# consumer module tests/e2e/kube-<version>: the newest unless
# DRIFTGUARD_KUBE_VERSION names another. kubectl always matches the apiserver,
# so every test stays within kubectl's version skew.
#
# Usage: scripts/build-tools.sh [TOOL|gitops ...]   (default: etcd helm kube-apiserver kubectl)
#        scripts/build-tools.sh kube-versions       (the supported versions, newest first)
# Prints the absolute path of each requested binary on stdout; progress goes
# to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
E2E_DIR="${ROOT}/tests/e2e"
BIN_DIR="${DRIFTGUARD_TOOLS_BIN:-${XDG_CACHE_HOME:-${HOME}/.cache}/driftguard/bin}"

ETCD_VERSION="v3.6.14"
HELM_VERSION="v3.22.0"
# Upstream supports 1.35 to 1.37 (1.34 left support on 2026-10-27); these are
# the newest and the oldest the module proxy serves. The first is the default.
KUBE_VERSIONS=(v1.37.2 v1.35.4)
KUBE_VERSION="${DRIFTGUARD_KUBE_VERSION:-${KUBE_VERSIONS[0]}}"
# Flux v1.10.1 does not build from this proxy (fluxcd/pkg versions refused).
FLUX_VERSION="v1.9.6"
ARGOCD_VERSION="v3.6.1"

# -mod=readonly: never rewrite the committed go.mod/go.sum; a missing go.sum
# entry is an error rather than a silent re-resolution.
export GOFLAGS="-mod=readonly"
export GOWORK=off
export CGO_ENABLED=0
export GOTOOLCHAIN=go1.27.3

log() { printf '==> %s\n' "$*" >&2; }

command -v go >/dev/null 2>&1 || { log "go not found in PATH"; exit 1; }

if [[ " ${KUBE_VERSIONS[*]} " != *" ${KUBE_VERSION} "* ]]; then
  log "DRIFTGUARD_KUBE_VERSION=${KUBE_VERSION} is not supported (want one of: ${KUBE_VERSIONS[*]})"
  exit 2
fi

# go_build <module dir> <output> <package> <ldflags>
go_build() {
  local moddir="$1" out="$2" pkg="$3" ldflags="$4"
  local tmp="${out}.tmp.$$"
  # Parallel tests ask for the same tool at once: one builds, the others
  # wait for it and take its binary.
  exec {lock}>"${out}.lock"
  flock "${lock}"
  if [[ -x "${out}" ]]; then
    exec {lock}>&-
    return
  fi
  local start=${SECONDS}
  log "building ${pkg} -> ${out}"
  # Write to a temp name and rename, so an interrupted build never leaves a
  # partial binary that a later run would treat as up to date.
  trap "rm -f '${tmp}'" EXIT
  (cd "${moddir}" && nice -n 19 go build -trimpath -ldflags "${ldflags}" -o "${tmp}" "${pkg}")
  mv -f "${tmp}" "${out}"
  trap - EXIT
  exec {lock}>&-
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

# build_kube <command>: kube-apiserver, kube-controller-manager and kubectl
# share the tests/e2e/kube-<version> consumer module.
build_kube() {
  local cmd="$1"
  local out="${BIN_DIR}/${cmd}-${KUBE_VERSION}"
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
    go_build "${E2E_DIR}/kube-${KUBE_VERSION}" "${out}" "k8s.io/kubernetes/cmd/${cmd}" "${ldflags}"
    if [[ "${cmd}" == kubectl ]]; then
      check_version "${out}" "Client Version: ${KUBE_VERSION}" version --client
    else
      check_version "${out}" "Kubernetes ${KUBE_VERSION}" --version
    fi
  fi
  echo "${out}"
}

# build_flux <source|kustomize>: the controller's main package is its module root.
build_flux() {
  local kind="$1"
  local out="${BIN_DIR}/flux-${kind}-controller-${FLUX_VERSION}"
  if [[ ! -x "${out}" ]]; then
    go_build "${E2E_DIR}/flux-${kind}" "${out}" "github.com/fluxcd/${kind}-controller" "-s -w"
    # The controllers have no --version; their flags prove the right main.
    check_version "${out}" "--metrics-addr" --help
  fi
  echo "${out}"
}

# Argo CD is one multi-call binary: ARGOCD_BINARY_NAME picks the component.
build_argocd() {
  local out="${BIN_DIR}/argocd-${ARGOCD_VERSION}"
  if [[ ! -x "${out}" ]]; then
    local ldflags="-s -w -X github.com/argoproj/argo-cd/v3/common.version=${ARGOCD_VERSION#v}"
    go_build "${E2E_DIR}/argocd" "${out}" github.com/argoproj/argo-cd/v3/cmd "${ldflags}"
    ARGOCD_BINARY_NAME=argocd-repo-server check_version "${out}" "--disable-tls" --help
  fi
  echo "${out}"
}

# module_dir <consumer module> <module path>: where the go command unpacked it.
module_dir() {
  (cd "$1" && go mod download -json "$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
}

# The tools' real CRDs (and Argo CD's git wrapper), copied out of the very
# module versions the binaries are built from. Prints the directory.
build_gitops_assets() {
  local out="${BIN_DIR}/gitops-assets-flux-${FLUX_VERSION}-argocd-${ARGOCD_VERSION}"
  if [[ ! -d "${out}" ]]; then
    local tmp="${out}.tmp.$$" dir
    rm -rf "${tmp}" && mkdir -p "${tmp}/flux" "${tmp}/argocd"
    for kind in source kustomize; do
      dir="$(module_dir "${E2E_DIR}/flux-${kind}" "github.com/fluxcd/${kind}-controller")"
      [[ -d "${dir}" ]] || { log "no module dir for ${kind}-controller"; exit 1; }
      cp "${dir}"/config/crd/bases/*.yaml "${tmp}/flux/"
    done
    dir="$(module_dir "${E2E_DIR}/argocd" github.com/argoproj/argo-cd/v3)"
    [[ -d "${dir}" ]] || { log "no module dir for argo-cd"; exit 1; }
    cp "${dir}"/manifests/crds/{application,appproject,applicationset}-crd.yaml "${tmp}/argocd/"
    cp "${dir}"/hack/git-verify-wrapper.sh "${tmp}/argocd/"
    chmod -R u+w "${tmp}" && chmod +x "${tmp}/argocd/git-verify-wrapper.sh"
    mv "${tmp}" "${out}"
  fi
  # Caches made before tests/e2e_appset.rs lack the ApplicationSet CRD: add
  # just that file (same module version), never rebuilding the binaries.
  local appset="${out}/argocd/applicationset-crd.yaml"
  if [[ ! -f "${appset}" ]]; then
    dir="$(module_dir "${E2E_DIR}/argocd" github.com/argoproj/argo-cd/v3)"
    [[ -d "${dir}" ]] || { log "no module dir for argo-cd"; exit 1; }
    cp "${dir}"/manifests/crds/applicationset-crd.yaml "${appset}.tmp.$$"
    chmod u+w "${appset}.tmp.$$" && mv -f "${appset}.tmp.$$" "${appset}"
  fi
  echo "${out}"
}

# Redis for Argo CD and a smart-HTTP Git server for Flux, from tests/e2e/gitops-aux.
build_gitops_aux() {
  local hash name out
  hash="$(cat "${E2E_DIR}"/gitops-aux/go.* "${E2E_DIR}"/gitops-aux/*/*.go | sha256sum | cut -c1-12)"
  for name in redis githttp; do
    out="${BIN_DIR}/gitops-aux-${name}-${hash}"
    if [[ ! -x "${out}" ]]; then
      go_build "${E2E_DIR}/gitops-aux" "${out}" "./${name}" "-s -w"
    fi
    echo "${out}"
  done
}

mkdir -p "${BIN_DIR}"

tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
  # Smallest first; kube-apiserver is by far the longest build.
  tools=(etcd helm kubectl kube-apiserver)
fi
if [[ " ${tools[*]} " == *" gitops "* ]]; then
  tools=(kube-controller-manager flux-source-controller flux-kustomize-controller argocd gitops-aux gitops-assets)
fi

for tool in "${tools[@]}"; do
  case "${tool}" in
    etcd) build_etcd ;;
    helm) build_helm ;;
    kube-apiserver|kube-controller-manager|kubectl) build_kube "${tool}" ;;
    kube-versions) printf '%s\n' "${KUBE_VERSIONS[@]}" ;;
    flux-source-controller) build_flux source ;;
    flux-kustomize-controller) build_flux kustomize ;;
    argocd) build_argocd ;;
    gitops-aux) build_gitops_aux ;;
    gitops-assets) build_gitops_assets ;;
    *) log "unknown tool: ${tool} (want etcd, helm, kube-apiserver, kubectl, kube-versions, gitops or one of its parts)"; exit 2 ;;
  esac
done
