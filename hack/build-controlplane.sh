#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kubectl and etcd from Go modules.
#
# Why from source: CI machines have no Docker (so no kind) and Debian's etcd is too
# old for a current kube-apiserver. k8s.io/kubernetes cannot be `go install`ed
# directly because it replaces its staging modules with local paths, so a small
# wrapper module requires it and maps each staging module to its published v0.X.Y.
# The staging list is read from the release's own go.mod, never typed by hand.
#
# Binaries land in a cache folder keyed by version and are never rebuilt when
# present. A user who already has binaries points KUBEBUILDER_ASSETS (or
# TEST_ASSET_KUBE_APISERVER / TEST_ASSET_ETCD) at them and nothing is built.
#
# Prints the folder holding the binaries on its last line of stdout.
set -euo pipefail
. "$(dirname "$0")/go-flags.sh"

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
BIN_DIR="$CACHE_ROOT/bin/kube-${KUBE_VERSION}-etcd-${ETCD_VERSION}"
SRC_DIR="$CACHE_ROOT/src"
BINARIES=(kube-apiserver kube-controller-manager kubectl etcd)

log() { echo "[controlplane-bins] $*" >&2; }

have_all() {
  local dir="$1" b
  for b in "${BINARIES[@]}"; do [ -x "$dir/$b" ] || return 1; done
}

# A user's own assets win: envtest conventions.
if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ]; then
  log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS (nothing to build)"
  echo "$KUBEBUILDER_ASSETS"; exit 0
fi
if [ -n "${TEST_ASSET_KUBE_APISERVER:-}" ] && [ -n "${TEST_ASSET_ETCD:-}" ]; then
  log "using TEST_ASSET_KUBE_APISERVER and TEST_ASSET_ETCD (nothing to build)"
  dirname "$TEST_ASSET_KUBE_APISERVER"; exit 0
fi
if have_all "$BIN_DIR"; then
  log "binaries present in $BIN_DIR (nothing to build)"
  echo "$BIN_DIR"; exit 0
fi

# Under MODELPOOL_NO_BUILD (the e2e suite's kind tier finds what Make built) nothing is built.
[ -z "${MODELPOOL_NO_BUILD:-}" ] || { log "error: the control-plane binaries are not built in $BIN_DIR and MODELPOOL_NO_BUILD is set: run 'make controlplane-bins'"; exit 1; }
command -v go >/dev/null || { log "error: 'go' is not on PATH; it is needed to build the control plane"; exit 1; }
export CGO_ENABLED=0 GOFLAGS="-mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$BIN_DIR" "$SRC_DIR"
start=$(date +%s)

# Show progress: `go build -v` names each package as it compiles; print every 100th.
progress() {
  awk -v what="$1" '{ n++; if (n % 100 == 0) { printf "[controlplane-bins] %s: %d packages compiled\n", what, n > "/dev/stderr"; fflush("/dev/stderr") } }
    END { printf "[controlplane-bins] %s: %d packages compiled in all\n", what, n > "/dev/stderr" }'
}

build_kube() {
  local mod="$SRC_DIR/kube-$KUBE_VERSION" minor major gomod
  mkdir -p "$mod"
  log "reading the staging modules of k8s.io/kubernetes@$KUBE_VERSION"
  gomod=$(cd "$mod" && GOFLAGS= go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  [ -f "$gomod" ] || { log "error: could not download k8s.io/kubernetes@$KUBE_VERSION"; exit 1; }
  local staging_version="v0.${KUBE_VERSION#v1.}"
  {
    echo "module modelpool.dev/controlplane-bins/kube"
    echo
    echo "go $(sed -n 's/^go \(.*\)$/\1/p' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    # Lines such as `k8s.io/api => ./staging/src/k8s.io/api`.
    awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// { print "\t" $1 " => " $1 " '"$staging_version"'" }' "$gomod"
    echo ")"
  } >"$mod/go.mod"
  log "$(grep -c ' => ' "$mod/go.mod") staging modules pinned at $staging_version"
  major=1; minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  local ldflags="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  log "building kube-apiserver, kube-controller-manager, kubectl $KUBE_VERSION (several minutes on 2 cores)"
  (cd "$mod" && go build -v -trimpath -gcflags "$GO_GCFLAGS_OPTIMIZED" -ldflags "-s -w $ldflags" -o "$BIN_DIR/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kubectl 2>&1) | progress kube
  [ "${PIPESTATUS[0]}" -eq 0 ] || { log "error: kube build failed"; exit 1; }
}

build_etcd() {
  local mod="$SRC_DIR/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  # A separate module so etcd's dependencies never raise kube's.
  printf 'module modelpool.dev/controlplane-bins/etcd\n\ngo 1.25\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$mod/go.mod"
  log "building etcd $ETCD_VERSION"
  (cd "$mod" && go build -v -trimpath -gcflags "$GO_GCFLAGS_OPTIMIZED" -ldflags "-s -w" -o "$BIN_DIR/etcd" go.etcd.io/etcd/server/v3 2>&1) | progress etcd
  [ "${PIPESTATUS[0]}" -eq 0 ] || { log "error: etcd build failed"; exit 1; }
}

[ -x "$BIN_DIR/etcd" ] || build_etcd
for b in kube-apiserver kube-controller-manager kubectl; do
  [ -x "$BIN_DIR/$b" ] || { build_kube; break; }
done
have_all "$BIN_DIR" || { log "error: build finished but binaries are missing from $BIN_DIR"; exit 1; }
log "built in $(( $(date +%s) - start )) s: $BIN_DIR"
echo "$BIN_DIR"
