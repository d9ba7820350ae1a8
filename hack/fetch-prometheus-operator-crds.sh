#!/usr/bin/env bash
# Cache prometheus-operator's CRDs for ServiceMonitor, PodMonitor and PrometheusRule, so that the
# e2e tier can install them on its local API server and have the real server's schema validation
# check manifests/monitoring/ (tests/e2e/test_monitoring_manifests.py; only the schemas are needed
# there), and for Probe and Prometheus, which the kind tier's real prometheus-operator also needs
# (it watches Probes whenever it runs Prometheus: tests/e2e/test_kind_prometheus.py).
#
# Why from the Go module: prometheus-operator's module holds the generated CRDs
# (example/prometheus-operator-crd/), and the Go module proxy is the one source this machine has;
# `go mod download` verifies the module against the checksum database. v0.95.2 is not served by
# the proxy, so the default is v0.94.1. The kind tier's prometheus-operator is v0.93.1 (see
# hack/build-prometheus-operator.sh): hack/build-monitoring-images.sh runs this script with
# PROMETHEUS_OPERATOR_VERSION=v0.93.1 for the CRDs that match it (a folder of their own).
#
# The files land in a cache folder keyed by version and are never fetched again while present.
# PROMETHEUS_OPERATOR_CRDS naming a folder that holds them wins and nothing is fetched.
#
# Prints the folder holding the CRD files on its last line of stdout.
set -euo pipefail

VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.94.1}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
DIR="$CACHE_ROOT/crds/prometheus-operator-${VERSION}"
MODULE=github.com/prometheus-operator/prometheus-operator
CRDS=(servicemonitors podmonitors prometheusrules probes prometheuses)

log() { echo "[monitoring-crds] $*" >&2; }

have_all() {
  local dir="$1" crd
  for crd in "${CRDS[@]}"; do [ -f "$dir/monitoring.coreos.com_$crd.yaml" ] || return 1; done
}

if [ -n "${PROMETHEUS_OPERATOR_CRDS:-}" ]; then
  have_all "$PROMETHEUS_OPERATOR_CRDS" || { log "error: PROMETHEUS_OPERATOR_CRDS=$PROMETHEUS_OPERATOR_CRDS lacks monitoring.coreos.com_{${CRDS[*]}}.yaml"; exit 1; }
  log "using PROMETHEUS_OPERATOR_CRDS=$PROMETHEUS_OPERATOR_CRDS (nothing to fetch)"
  echo "$PROMETHEUS_OPERATOR_CRDS"; exit 0
fi
if have_all "$DIR"; then
  log "CRDs present in $DIR (nothing to fetch)"
  echo "$DIR"; exit 0
fi

[ -z "${MODELPOOL_NO_BUILD:-}" ] || { log "error: the CRDs of $MODULE@$VERSION are not in $DIR and MODELPOOL_NO_BUILD is set: run 'make kind-prereqs'"; exit 1; }
command -v go >/dev/null || { log "error: 'go' is not on PATH; it fetches $MODULE"; exit 1; }
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "downloading $MODULE@$VERSION"
src=$(cd "$work" && GOFLAGS= go mod download -json "$MODULE@$VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[ -d "$src/example/prometheus-operator-crd" ] || { log "error: could not download $MODULE@$VERSION (or it has no example/prometheus-operator-crd/)"; exit 1; }
mkdir -p "$DIR.tmp"
for crd in "${CRDS[@]}"; do
  cp "$src/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" "$DIR.tmp/"
done
chmod -R u+w "$DIR.tmp"
rm -rf "$DIR"
mv "$DIR.tmp" "$DIR"
log "CRDs of $MODULE@$VERSION in $DIR"
echo "$DIR"
