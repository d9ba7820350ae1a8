#!/usr/bin/env bash
# Build the Jaeger all-in-one (`cmd/jaeger`: OTLP receiver, in-memory store, query API) from
# its Go module, for the e2e tier's trace backend and for `make demo` / `make dev`.
#
# Why from source: the machines this runs on have no Docker and no registry but the Go module
# proxy, the same reason the control-plane binaries are built (hack/build-controlplane.sh).
# A small wrapper module requires github.com/jaegertracing/jaeger at JAEGER_VERSION and copies
# the `replace` lines of the release's own go.mod (a dependency's replaces are ignored by Go, and
# Jaeger pins a fork of sarama that way), read from the release, never typed by hand.
#
# The binary lands in a cache folder keyed by version and is never rebuilt when present.
# JAEGER_BINARY pointing at an executable wins and nothing is built. The UI assets are not part
# of the Go module, so the binary serves a placeholder page; the query API is complete.
#
# Prints the path of the binary on its last line of stdout.
set -euo pipefail
. "$(dirname "$0")/go-flags.sh"

JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
BIN_DIR="$CACHE_ROOT/bin/jaeger-${JAEGER_VERSION}"
SRC_DIR="$CACHE_ROOT/src/jaeger-${JAEGER_VERSION}"
BINARY="$BIN_DIR/jaeger"

log() { echo "[jaeger-bin] $*" >&2; }

if [ -n "${JAEGER_BINARY:-}" ] && [ -x "$JAEGER_BINARY" ]; then
  log "using JAEGER_BINARY=$JAEGER_BINARY (nothing to build)"
  echo "$JAEGER_BINARY"; exit 0
fi
if [ -x "$BINARY" ]; then
  log "binary present: $BINARY (nothing to build)"
  echo "$BINARY"; exit 0
fi

command -v go >/dev/null || { log "error: 'go' is not on PATH; it is needed to build Jaeger"; exit 1; }
export CGO_ENABLED=0 GOFLAGS="-mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$BIN_DIR" "$SRC_DIR"
start=$(date +%s)

log "reading github.com/jaegertracing/jaeger@$JAEGER_VERSION"
gomod=$(cd "$SRC_DIR" && GOFLAGS= go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" \
  | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -f "$gomod" ] || { log "error: could not download github.com/jaegertracing/jaeger@$JAEGER_VERSION"; exit 1; }
{
  echo "module modelpool.dev/controlplane-bins/jaeger"
  echo
  echo "go $(sed -n 's/^go \(.*\)$/\1/p' "$gomod")"
  echo
  echo "require github.com/jaegertracing/jaeger $JAEGER_VERSION"
  echo
  # Single-line replaces (`replace a => b vX`) and the lines of a `replace ( ... )` block.
  awk '/^replace \(/ { block = 1; next } block && /^\)/ { block = 0; next }
       block && $2 == "=>" { print "replace " $0; next }
       /^replace / && $3 == "=>" { print }' "$gomod"
} >"$SRC_DIR/go.mod"
log "$(grep -c '^replace ' "$SRC_DIR/go.mod" || true) replace directives copied from the release"

pkg=github.com/jaegertracing/jaeger/internal/version
ldflags="-s -w -X $pkg.latestVersion=$JAEGER_VERSION -X $pkg.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
log "building cmd/jaeger $JAEGER_VERSION (minutes on 2 cores)"
(cd "$SRC_DIR" && go build -v -trimpath -gcflags "$GO_GCFLAGS_TOOL" -ldflags "$ldflags" -o "$BINARY.tmp" \
    github.com/jaegertracing/jaeger/cmd/jaeger 2>&1) \
  | awk '{ n++; if (n % 200 == 0) { printf "[jaeger-bin] %d packages compiled\n", n > "/dev/stderr"; fflush("/dev/stderr") } }
         END { printf "[jaeger-bin] %d packages compiled in all\n", n > "/dev/stderr" }'
[ "${PIPESTATUS[0]}" -eq 0 ] || { log "error: jaeger build failed"; rm -f "$BINARY.tmp"; exit 1; }
mv "$BINARY.tmp" "$BINARY"
log "built in $(( $(date +%s) - start )) s: $BINARY"
echo "$BINARY"
