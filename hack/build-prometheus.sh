#!/usr/bin/env bash
# Build Prometheus's `promtool` (the alert rules' unit tests: `promtool check rules`,
# `promtool test rules`) and, with --server, the Prometheus server itself (the kind tier's real
# Prometheus, hack/build-monitoring-images.sh), both from the Go module
# github.com/prometheus/prometheus at one version, so the second build reuses the first's Go build
# cache: the server adds 167 packages to the 1,117 promtool needs. The local tier builds promtool
# alone (make promtool-bin); the server is built only for the kind tier (make monitoring-images).
#
# Why from source: the machines this runs on have no Docker and no registry but the Go module
# proxy, the same reason the control-plane binaries are built (hack/build-controlplane.sh).
# The release has no `replace` lines, so a wrapper module that requires it is enough.
#
# Why the build tags: every service-discovery plugin (AWS, Azure, GCE, Consul, ...) is a file
# under plugins/ guarded by `!remove_all_sd || enable_<name>_sd`. `remove_all_sd` drops them all
# and `enable_kubernetes_sd` keeps the one a cluster's Prometheus uses (promtool imports the
# kubernetes and file discoveries directly in any case; the server's prometheus-operator
# configuration uses kubernetes_sd_configs only).
#
# Why no `builtinassets` tag for the server: that tag embeds web/ui/static, which the module does
# not ship (the React UI is built by npm in Prometheus's release process). Without it the server
# serves its UI from ./web/ui/static at run time, absent here, so the web UI pages are empty, while
# the HTTP API (/api/v1/query, /api/v1/targets), /metrics and the health endpoints, all the tests
# use, are complete.
#
# The binaries land in a cache folder keyed by version and are never rebuilt when present.
# PROMTOOL_BINARY (PROMETHEUS_BINARY with --server) pointing at an executable wins and nothing is
# built.
#
# Prints the path of promtool (with --server: of prometheus) on its last line of stdout.
set -euo pipefail
. "$(dirname "$0")/go-flags.sh"

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
PROMETHEUS_TAGS="${PROMETHEUS_TAGS:-remove_all_sd,enable_kubernetes_sd}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
BIN_DIR="$CACHE_ROOT/bin/prometheus-${PROMETHEUS_VERSION}"
SRC_DIR="$CACHE_ROOT/src/prometheus-${PROMETHEUS_VERSION}"
MODULE=github.com/prometheus/prometheus

case "${1:-}" in
  --server) COMMAND=prometheus; OVERRIDE=PROMETHEUS_BINARY ;;
  "") COMMAND=promtool; OVERRIDE=PROMTOOL_BINARY ;;
  *) echo "usage: $0 [--server]" >&2; exit 2 ;;
esac

log() { echo "[$COMMAND-bin] $*" >&2; }

if [ -n "${!OVERRIDE:-}" ] && [ -x "${!OVERRIDE}" ]; then
  log "using $OVERRIDE=${!OVERRIDE} (nothing to build)"
  echo "${!OVERRIDE}"; exit 0
fi
if [ -x "$BIN_DIR/$COMMAND" ]; then
  log "binary present: $BIN_DIR/$COMMAND (nothing to build)"
  echo "$BIN_DIR/$COMMAND"; exit 0
fi
[ -z "${MODELPOOL_NO_BUILD:-}" ] || { log "error: $BIN_DIR/$COMMAND is not built and MODELPOOL_NO_BUILD is set: run 'make kind-prereqs'"; exit 1; }

command -v go >/dev/null || { log "error: 'go' is not on PATH; it is needed to build $COMMAND"; exit 1; }
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

# The module's v0.3XX.Y is the release 3.XX.Y; --version says the release.
release=$(echo "$PROMETHEUS_VERSION" | sed -n 's/^v0\.3\([0-9][0-9]\)\.\([0-9]*\)$/3.\1.\2/p')
pkg=github.com/prometheus/common/version
ldflags="-s -w -X $pkg.Version=${release:-$PROMETHEUS_VERSION} -X $pkg.Branch=module"
ldflags="$ldflags -X $pkg.BuildUser=modelpool -X $pkg.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
log "building cmd/$COMMAND $PROMETHEUS_VERSION, tags $PROMETHEUS_TAGS (minutes on 2 cores)"
rm -rf "$BIN_DIR/.tmp-$COMMAND" && mkdir -p "$BIN_DIR/.tmp-$COMMAND"
# go's output (one line a package, or the errors) is counted, its last lines kept for a failure
# (under pipefail the pipeline fails when go build does).
(cd "$SRC_DIR" && go build -v -trimpath -gcflags "$GO_GCFLAGS_TOOL" -tags "$PROMETHEUS_TAGS" -ldflags "$ldflags" \
    -o "$BIN_DIR/.tmp-$COMMAND/" "$MODULE/cmd/$COMMAND" 2>&1) \
  | tee "$BIN_DIR/.tmp-$COMMAND/build.log" \
  | awk -v tag="[$COMMAND-bin]" '{ n++; if (n % 200 == 0) { printf "%s %d packages compiled\n", tag, n > "/dev/stderr"; fflush("/dev/stderr") } }
         END { printf "%s %d packages compiled in all\n", tag, n > "/dev/stderr" }' \
  || { tail -n 20 "$BIN_DIR/.tmp-$COMMAND/build.log" >&2; log "error: $COMMAND build failed"; rm -rf "$BIN_DIR/.tmp-$COMMAND"; exit 1; }
mv "$BIN_DIR/.tmp-$COMMAND/$COMMAND" "$BIN_DIR/$COMMAND"
rm -rf "$BIN_DIR/.tmp-$COMMAND"
log "built in $(( $(date +%s) - start )) s: $BIN_DIR/$COMMAND"
echo "$BIN_DIR/$COMMAND"
