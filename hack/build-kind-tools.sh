#!/usr/bin/env bash
# Build, from Go modules, every program a kind node image needs besides Debian's packages:
# the kind CLI, the Kubernetes node binaries (kubeadm, kubelet, kube-scheduler, kube-proxy; the
# API server, controller manager, kubectl and etcd come from hack/build-controlplane.sh), crictl,
# the CNI plugins and CoreDNS; and `pause` from a few lines of C (any program that sleeps until
# a signal and reaps children serves as a pod sandbox).
#
# Why from source: no container registry is reachable here, so nothing kind would pull can be
# pulled; everything is built and put into images locally (hack/build-kind-node.sh).
# Each program is cached by version and never rebuilt when present; builds that are missing run
# in parallel, niced, so a machine busy with tests keeps its priority.
#
# Prints the folder holding the programs on its last line of stdout.
set -euo pipefail
. "$(dirname "$0")/go-flags.sh"
cd "$(dirname "$0")/.."

KIND_VERSION="${KIND_VERSION:-v0.33.0}"
KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.10.0}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.2}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
BIN_DIR="$CACHE_ROOT/bin/kind-tools-${KIND_VERSION}-kube-${KUBE_VERSION}"
SRC_DIR="$CACHE_ROOT/src"

log() { echo "[kind-tools] $*" >&2; }
die() { log "error: $*"; exit 1; }
# Under MODELPOOL_NO_BUILD (the e2e suite's kind tier, which only finds what `make kind-prereqs`
# built), a missing program is an error naming it, never a build inside a test's timeout.
refuse_build() {
  [ -z "${MODELPOOL_NO_BUILD:-}" ] || die "$1 is not built in $BIN_DIR and MODELPOOL_NO_BUILD is set: run 'make kind-prereqs'"
}

command -v go >/dev/null || die "'go' is not on PATH; it is needed to build kind's node image"
export CGO_ENABLED=0 GOFLAGS="-mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$BIN_DIR/cni" "$SRC_DIR"
start=$(date +%s)

# The control-plane binaries and the wrapper module of k8s.io/kubernetes they were built from.
control_plane=$(hack/build-controlplane.sh | tail -n 1)
kube_module="$SRC_DIR/kube-$KUBE_VERSION"
[ -f "$kube_module/go.mod" ] || die "no wrapper module at $kube_module (hack/build-controlplane.sh makes it)"

build_kind() {
  [ -x "$BIN_DIR/kind" ] && return
  refuse_build "kind $KIND_VERSION"
  log "kind $KIND_VERSION"
  GOBIN="$BIN_DIR" nice go install -trimpath -gcflags "$GO_GCFLAGS_TOOL" "sigs.k8s.io/kind@$KIND_VERSION"
}

build_node_binaries() {
  local missing=0 b
  for b in kubeadm kubelet kube-scheduler kube-proxy; do [ -x "$BIN_DIR/$b" ] || missing=1; done
  [ "$missing" = 0 ] && return
  refuse_build "kubeadm, kubelet, kube-scheduler, kube-proxy"
  log "kubeadm, kubelet, kube-scheduler, kube-proxy $KUBE_VERSION"
  local minor pkg ldflags=""
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  (cd "$kube_module" && nice go build -trimpath -gcflags "$GO_GCFLAGS_OPTIMIZED" -ldflags "-s -w $ldflags" -o "$BIN_DIR/" \
    k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy)
}

build_crictl() {
  [ -x "$BIN_DIR/crictl" ] && return
  refuse_build "crictl $CRICTL_VERSION"
  log "crictl $CRICTL_VERSION"
  GOBIN="$BIN_DIR" nice go install -trimpath -gcflags "$GO_GCFLAGS_TOOL" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
}

build_cni() {
  [ -x "$BIN_DIR/cni/bridge" ] && return
  refuse_build "the CNI plugins $CNI_PLUGINS_VERSION"
  log "CNI plugins $CNI_PLUGINS_VERSION (bridge, host-local, loopback, portmap)"
  local mod="$SRC_DIR/cni-plugins-$CNI_PLUGINS_VERSION"
  mkdir -p "$mod"
  printf 'module modelpool.dev/kind-tools/cni\n\ngo 1.24\n\nrequire github.com/containernetworking/plugins %s\n' \
    "$CNI_PLUGINS_VERSION" >"$mod/go.mod"
  local p
  for p in main/bridge ipam/host-local main/loopback meta/portmap; do
    (cd "$mod" && nice go build -trimpath -gcflags "$GO_GCFLAGS_TOOL" -ldflags "-s -w" -o "$BIN_DIR/cni/" \
      "github.com/containernetworking/plugins/plugins/$p")
  done
}

# CoreDNS with only the plugins kubeadm's Corefile names (errors, health, ready, kubernetes,
# prometheus, forward, cache, loop, reload, loadbalance) and log: CoreDNS's own main links every
# plugin, cloud SDKs included (route53, azure, clouddns), which is most of its build time.
COREDNS_PLUGINS=(errors health ready kubernetes metrics forward cache loop reload loadbalance log)
build_coredns() {
  [ -x "$BIN_DIR/coredns" ] && return
  refuse_build "CoreDNS $COREDNS_VERSION"
  log "CoreDNS $COREDNS_VERSION (plugins: ${COREDNS_PLUGINS[*]})"
  local mod="$SRC_DIR/coredns-$COREDNS_VERSION" p
  mkdir -p "$mod"
  printf 'module modelpool.dev/kind-tools/coredns\n\ngo 1.24\n\nrequire github.com/coredns/coredns %s\n' \
    "$COREDNS_VERSION" >"$mod/go.mod"
  {
    printf '// Generated by hack/build-kind-tools.sh: CoreDNS with the plugins a kind node uses.\n'
    printf 'package main\n\nimport (\n\t"github.com/coredns/coredns/coremain"\n'
    for p in "${COREDNS_PLUGINS[@]}"; do printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"; done
    printf ')\n\nfunc main() { coremain.Run() }\n'
  } >"$mod/main.go"
  (cd "$mod" && nice go build -trimpath -gcflags "$GO_GCFLAGS_TOOL" -ldflags "-s -w" -o "$BIN_DIR/coredns.tmp" .)
  mv "$BIN_DIR/coredns.tmp" "$BIN_DIR/coredns"
}

build_pause() {
  [ -x "$BIN_DIR/pause" ] && return
  refuse_build "pause"
  log "pause (static C)"
  cc -static -Os -o "$BIN_DIR/pause" hack/pause.c
}

pids=()
for step in build_kind build_node_binaries build_crictl build_cni build_coredns build_pause; do
  "$step" &
  pids+=("$!")
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || die "a build failed (see above)"
for b in kube-apiserver kube-controller-manager kubectl etcd; do ln -sf "$control_plane/$b" "$BIN_DIR/$b"; done
log "ready in $(( $(date +%s) - start )) s: $BIN_DIR"
echo "$BIN_DIR"
