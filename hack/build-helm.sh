#!/usr/bin/env bash
# Build Helm (`helm.sh/helm/v4/cmd/helm`) from its Go module, for the chart's tests (lint,
# template, install on kind) and for users who install ModelPool from charts/modelpool.
#
# Why from source: no registry but the Go module proxy is reachable here, the same reason the
# control-plane binaries and Jaeger are built (hack/build-controlplane.sh, hack/build-jaeger.sh).
# Helm's go.mod has no `replace` lines, so a plain `go install module/cmd@version` builds it; the
# version is stamped the way Helm's own Makefile does (-X .../internal/version.version), so
# `helm version` and the chart's `kubeVersion`/capability checks see a real version.
#
# The binary lands in a cache folder keyed by version and is never rebuilt when present.
# HELM_BINARY pointing at an executable wins and nothing is built.
#
# Prints the path of the binary on its last line of stdout.
set -euo pipefail
. "$(dirname "$0")/go-flags.sh"

HELM_VERSION="${HELM_VERSION:-v4.3.2}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
BIN_DIR="$CACHE_ROOT/bin/helm-${HELM_VERSION}"
BINARY="$BIN_DIR/helm"

log() { echo "[helm-bin] $*" >&2; }

if [ -n "${HELM_BINARY:-}" ] && [ -x "$HELM_BINARY" ]; then
  log "using HELM_BINARY=$HELM_BINARY (nothing to build)"
  echo "$HELM_BINARY"; exit 0
fi
if [ -x "$BINARY" ]; then
  log "binary present: $BINARY (nothing to build)"
  echo "$BINARY"; exit 0
fi

command -v go >/dev/null || { log "error: 'go' is not on PATH; it is needed to build Helm"; exit 1; }
export CGO_ENABLED=0 GOFLAGS="-mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$BIN_DIR"
start=$(date +%s)
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
log "building helm.sh/helm/v4/cmd/helm@$HELM_VERSION (a few minutes on 2 cores, cold)"
(GOBIN="$BIN_DIR/.tmp" go install -v -trimpath -gcflags "$GO_GCFLAGS_TOOL" -ldflags "$ldflags" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" 2>&1) \
  | awk '{ n++; if (n % 200 == 0) { printf "[helm-bin] %d packages compiled\n", n > "/dev/stderr"; fflush("/dev/stderr") } }
         END { printf "[helm-bin] %d packages compiled in all\n", n > "/dev/stderr" }'
[ "${PIPESTATUS[0]}" -eq 0 ] || { log "error: helm build failed"; rm -rf "$BIN_DIR/.tmp"; exit 1; }
mv "$BIN_DIR/.tmp/helm" "$BINARY"
rm -rf "$BIN_DIR/.tmp"
log "built in $(( $(date +%s) - start )) s: $BINARY"
echo "$BINARY"
