#!/usr/bin/env bash
# Build prometheus-operator and prometheus-config-reloader (the kind tier's real Prometheus is run
# by them: hack/build-monitoring-images.sh) from the Go module
# github.com/prometheus-operator/prometheus-operator.
#
# Why v0.93.1 and not v0.94.1, the version of the CRDs the monitors' schema test uses: a release
# is three modules (the root, pkg/apis/monitoring and pkg/client), and the Go module proxy here
# refuses pkg/client at v0.94.0, v0.94.1 and v0.95.x ("This module version is not available"),
# while it serves all three at v0.93.1. The kind tier installs the CRDs of the same v0.93.1
# (hack/build-monitoring-images.sh fetches them), so the operator and its CRDs always match.
#
# Why a wrapper module with extra requirements: the release's go.mod replaces its two API
# sub-modules (pkg/apis/monitoring, pkg/client) with their folders in the repository, and a
# module's zip holds no nested module, so `go install ...@version` refuses it. The sub-modules are
# released at the same version, so the wrapper requires each at that version instead (any other
# replace line is an error, not silently dropped).
#
# The binaries land in a cache folder keyed by version and are never rebuilt when present; under
# MODELPOOL_NO_BUILD a missing one is an error, never a build.
#
# Prints the folder holding `operator` and `prometheus-config-reloader` on its last line of stdout.
set -euo pipefail
. "$(dirname "$0")/go-flags.sh"

VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.93.1}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
BIN_DIR="$CACHE_ROOT/bin/prometheus-operator-${VERSION}"
SRC_DIR="$CACHE_ROOT/src/prometheus-operator-${VERSION}"
MODULE=github.com/prometheus-operator/prometheus-operator
COMMANDS=(operator prometheus-config-reloader)

log() { echo "[prometheus-operator-bin] $*" >&2; }
die() { log "error: $*"; exit 1; }

have_all() {
  local command
  for command in "${COMMANDS[@]}"; do [ -x "$BIN_DIR/$command" ] || return 1; done
}
if have_all; then
  log "binaries present in $BIN_DIR (nothing to build)"
  echo "$BIN_DIR"; exit 0
fi
[ -z "${MODELPOOL_NO_BUILD:-}" ] || die "$BIN_DIR/{${COMMANDS[*]}} are not built and MODELPOOL_NO_BUILD is set: run 'make kind-prereqs'"
command -v go >/dev/null || die "'go' is not on PATH; it is needed to build prometheus-operator"
export CGO_ENABLED=0 GOFLAGS="-mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$BIN_DIR" "$SRC_DIR"
start=$(date +%s)

log "reading $MODULE@$VERSION"
gomod=$(cd "$SRC_DIR" && GOFLAGS= go mod download -json "$MODULE@$VERSION" \
  | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -f "$gomod" ] || die "could not download $MODULE@$VERSION"
# The replace lines, inside `replace ( ... )` or one per line: each must name a sub-module of this
# one by its folder.
replaced=$(sed -n -e '/^replace (/,/^)/{/=>/p}' -e 's/^replace \(.*=>.*\)$/\1/p' "$gomod")
subs=()
while read -r left arrow right; do
  [ -n "$left" ] || continue
  [ "$left" = "$MODULE/${right#./}" ] || die "$MODULE@$VERSION replaces $left with $right, which this script does not copy"
  subs+=("$left")
done <<<"$replaced"
{
  echo "module modelpool.dev/controlplane-bins/prometheus-operator"
  echo
  echo "go $(sed -n 's/^go \(.*\)$/\1/p' "$gomod")"
  echo
  echo "require $MODULE $VERSION"
  for sub in "${subs[@]}"; do echo "require $sub $VERSION"; done
} >"$SRC_DIR/go.mod"

pkg=github.com/prometheus/common/version
ldflags="-s -w -X $pkg.Version=${VERSION#v} -X $pkg.Branch=module"
ldflags="$ldflags -X $pkg.BuildUser=modelpool -X $pkg.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
log "building cmd/{${COMMANDS[*]}} $VERSION (minutes on 2 cores)"
rm -rf "$BIN_DIR/.tmp" && mkdir -p "$BIN_DIR/.tmp"
packages=()
for command in "${COMMANDS[@]}"; do packages+=("$MODULE/cmd/$command"); done
# go's output (one line a package, or the errors) is counted, its last lines kept for a failure.
(cd "$SRC_DIR" && go build -v -trimpath -gcflags "$GO_GCFLAGS_TOOL" -ldflags "$ldflags" -o "$BIN_DIR/.tmp/" "${packages[@]}" 2>&1) \
  | tee "$BIN_DIR/.tmp/build.log" \
  | awk '{ n++; if (n % 200 == 0) { printf "[prometheus-operator-bin] %d packages compiled\n", n > "/dev/stderr"; fflush("/dev/stderr") } }
         END { printf "[prometheus-operator-bin] %d packages compiled in all\n", n > "/dev/stderr" }' \
  || { tail -n 20 "$BIN_DIR/.tmp/build.log" >&2; rm -rf "$BIN_DIR/.tmp"; die "the build failed"; }
for command in "${COMMANDS[@]}"; do mv "$BIN_DIR/.tmp/$command" "$BIN_DIR/$command"; done
rm -rf "$BIN_DIR/.tmp"
log "built in $(( $(date +%s) - start )) s: $BIN_DIR"
echo "$BIN_DIR"
