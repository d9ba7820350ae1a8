#!/usr/bin/env bash
# Build Prometheus's `promtool` (the alert rules' unit tests: `promtool check rules`,
# `promtool test rules`) from the Go module github.com/prometheus/prometheus. Only promtool: the
# server would add 167 packages to the 1,117 promtool needs (a minute of a fresh CI run), and no
# test runs it yet.
#
# Why from source: the machines this runs on have no Docker and no registry but the Go module
# proxy, the same reason the control-plane binaries are built (hack/build-controlplane.sh).
# The release has no `replace` lines, so a wrapper module that requires it is enough.
#
# Why the build tags: every service-discovery plugin (AWS, Azure, GCE, Consul, ...) is a file
# under plugins/ guarded by `!remove_all_sd || enable_<name>_sd`. `remove_all_sd` drops them all
# and `enable_kubernetes_sd` keeps the one a cluster's Prometheus uses (promtool imports the
# kubernetes and file discoveries directly in any case).
#
# The binary lands in a cache folder keyed by version and is never rebuilt when present.
# PROMTOOL_BINARY pointing at an executable wins and nothing is built.
#
# Prints the path of promtool on its last line of stdout.
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
PROMETHEUS_TAGS="${PROMETHEUS_TAGS:-remove_all_sd,enable_kubernetes_sd}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
BIN_DIR="$CACHE_ROOT/bin/prometheus-${PROMETHEUS_VERSION}"
SRC_DIR="$CACHE_ROOT/src/prometheus-${PROMETHEUS_VERSION}"
MODULE=github.com/prometheus/prometheus

log() { echo "[promtool-bin] $*" >&2; }

if [ -n "${PROMTOOL_BINARY:-}" ] && [ -x "$PROMTOOL_BINARY" ]; then
  log "using PROMTOOL_BINARY=$PROMTOOL_BINARY (nothing to build)"
  echo "$PROMTOOL_BINARY"; exit 0
fi
if [ -x "$BIN_DIR/promtool" ]; then
  log "binary present: $BIN_DIR/promtool (nothing to build)"
  echo "$BIN_DIR/promtool"; exit 0
fi

command -v go >/dev/null || { log "error: 'go' is not on PATH; it is needed to build promtool"; exit 1; }
export CGO_ENABLED=0 GOFLAGS="-mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$BIN_DIR" "$SRC_DIR"
start=$(date +%s)

log "reading $MODULE@$PROMETHEUS_VERSION"
gomod=$(cd "$SRC_DIR" && GOFLAGS= go mod download -json "$MODULE@$PROMETHEUS_VERSION" \
  | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -f "$gomod" ] || { log "error: could not download $MODULE@$PROMETHEUS_VERSION"; exit 1; }
if grep -q '^replace' "$gomod"; then
  log "error: $MODULE@$PROMETHEUS_VERSION has replace directives this script does not copy"; exit 1
fi
{
  echo "module modelpool.dev/controlplane-bins/prometheus"
  echo
  echo "go $(sed -n 's/^go \(.*\)$/\1/p' "$gomod")"
  echo
  echo "require $MODULE $PROMETHEUS_VERSION"
} >"$SRC_DIR/go.mod"

# The module's v0.3XX.Y is the release 3.XX.Y; promtool's --version says the release.
release=$(echo "$PROMETHEUS_VERSION" | sed -n 's/^v0\.3\([0-9][0-9]\)\.\([0-9]*\)$/3.\1.\2/p')
pkg=github.com/prometheus/common/version
ldflags="-s -w -X $pkg.Version=${release:-$PROMETHEUS_VERSION} -X $pkg.Branch=module"
ldflags="$ldflags -X $pkg.BuildUser=modelpool -X $pkg.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
log "building cmd/promtool $PROMETHEUS_VERSION, tags $PROMETHEUS_TAGS (minutes on 2 cores)"
mkdir -p "$BIN_DIR/.tmp"
(cd "$SRC_DIR" && go build -v -trimpath -tags "$PROMETHEUS_TAGS" -ldflags "$ldflags" \
    -o "$BIN_DIR/.tmp/" "$MODULE/cmd/promtool" 2>&1) \
  | awk '{ n++; if (n % 200 == 0) { printf "[promtool-bin] %d packages compiled\n", n > "/dev/stderr"; fflush("/dev/stderr") } }
         END { printf "[promtool-bin] %d packages compiled in all\n", n > "/dev/stderr" }'
[ "${PIPESTATUS[0]}" -eq 0 ] || { log "error: promtool build failed"; rm -rf "$BIN_DIR/.tmp"; exit 1; }
mv "$BIN_DIR/.tmp/promtool" "$BIN_DIR/promtool"
rmdir "$BIN_DIR/.tmp"
log "built in $(( $(date +%s) - start )) s: $BIN_DIR/promtool"
echo "$BIN_DIR/promtool"
