#!/usr/bin/env bash
# Build the NetworkPolicy implementation the kind tier enforces with (docs/network.md): kube-router
# in its firewall-only mode, from its Go module, and an image of it made here (no registry).
#
# Why kube-router and not kube-network-policies: the kind node here runs a plain bridge CNI, which
# enforces no NetworkPolicy, so one must be added. kube-network-policies (the versions the Go
# module proxy serves here, v0.7.0 and v0.8.0) judges new connections through nftables' `queue`
# statement, which needs CONFIG_NFT_QUEUE; the kernel of these VMs is built without it and loads
# no modules (`nft add rule inet t c ip daddr 10.99.99.99 queue num 100 bypass` answers "Error:
# No such file or directory"), so it could enforce nothing. kube-router's network policy
# controller uses iptables (the filter table's FORWARD, INPUT and OUTPUT chains, `physdev` for
# bridged traffic) and ipsets, all built into this kernel (CONFIG_IP_SET, CONFIG_NETFILTER_XT_SET,
# CONFIG_NETFILTER_XT_MATCH_PHYSDEV, CONFIG_BRIDGE_NETFILTER). It runs with --run-firewall only
# (no routing, no service proxy), beside the bridge CNI and kube-proxy.
#
# The binary is `go install`ed from the Go module proxy into a cache folder keyed by version; the
# image is a Debian root (debootstrap: iptables, ipset, conntrack; cached) with the binary added,
# `docker import`ed as $IMAGE_REPOSITORY:$KUBE_ROUTER_VERSION. Nothing is rebuilt when present.
# Under MODELPOOL_NO_BUILD (the e2e suite's kind tier) a missing image is an error naming the Make
# target that builds it, never a build.
#
# Prints the image reference on its last line of stdout.
set -euo pipefail
. "$(dirname "$0")/go-flags.sh"
. "$(dirname "$0")/debian-root.sh"
cd "$(dirname "$0")/.."

KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"
SUITE="${DEBIAN_SUITE:-bookworm}"
IMAGE_REPOSITORY="${NETPOL_IMAGE_REPOSITORY:-modelpool.dev/kube-router}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
BIN_DIR="$CACHE_ROOT/bin/kube-router-${KUBE_ROUTER_VERSION}"
BINARY="$BIN_DIR/kube-router"
PACKAGES=iptables,ipset,conntrack
ROOT="$CACHE_ROOT/rootfs/kube-router-${SUITE}-$(echo "$PACKAGES" | sha256sum | cut -c1-8)"
IMAGE="$IMAGE_REPOSITORY:$KUBE_ROUTER_VERSION"

log() { echo "[network-policies] $*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "building the image needs root (debootstrap, docker)"
hack/docker-engine.sh >/dev/null
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "image present: $IMAGE (nothing to build)"
  echo "$IMAGE"; exit 0
fi
[ -z "${MODELPOOL_NO_BUILD:-}" ] || die "image $IMAGE is not built and MODELPOOL_NO_BUILD is set: run 'make kind-prereqs'"
start=$(date +%s)

build_binary() {
  [ -x "$BINARY" ] && return
  command -v go >/dev/null || die "'go' is not on PATH; it is needed to build kube-router"
  log "kube-router $KUBE_ROUTER_VERSION from its Go module (minutes on 2 cores)"
  rm -rf "$BIN_DIR.tmp"
  CGO_ENABLED=0 GOFLAGS= GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOBIN="$BIN_DIR.tmp" \
    nice go install -trimpath -gcflags "$GO_GCFLAGS_TOOL" -ldflags "-s -w" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION" \
    || die "go install of kube-router $KUBE_ROUTER_VERSION failed"
  mkdir -p "$BIN_DIR"
  mv "$BIN_DIR.tmp/kube-router" "$BINARY"
  rm -rf "$BIN_DIR.tmp"
}

# The Debian root, cached (hack/debian-root.sh).
make_root() {
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
    || die "apt-get install debootstrap failed"
  debian_root "$ROOT" "kube-router" "$PACKAGES"
}

make_root &
root_pid=$!
build_binary
wait "$root_pid" || die "the kube-router root failed"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$ROOT/." "$work/"
rm -f "$work/.complete"
install -m 0755 "$BINARY" "$work/usr/local/bin/kube-router"
log "importing $IMAGE"
tar -C "$work" --numeric-owner -c . | docker import \
  -c 'ENTRYPOINT ["/usr/local/bin/kube-router"]' - "$IMAGE" >/dev/null
log "built $IMAGE in $(( $(date +%s) - start )) s"
echo "$IMAGE"
