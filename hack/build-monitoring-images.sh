#!/usr/bin/env bash
# Build the images of the kind tier's real Prometheus (tests/e2e/test_kind_prometheus.py) with no
# registry: the Prometheus server (hack/build-prometheus.sh --server), prometheus-operator and
# prometheus-config-reloader (hack/build-prometheus-operator.sh), all from their Go modules; and
# cache the operator's CRDs of the same version (hack/fetch-prometheus-operator-crds.sh).
#
# Each binary is static (CGO_ENABLED=0), so each image is a folder holding the one program (and
# /tmp, an /etc/passwd naming nobody), `docker import`ed with the program as its entrypoint, the
# way hack/build-kind-node.sh makes the node's component images. The operator runs the reloader
# by its upstream path, /bin/prometheus-config-reloader (it sets the container's command), and
# the Prometheus pods it makes keep their data in /prometheus, a volume it mounts, so the programs
# sit in /bin. The tags are the release's version and a hash of the binary: a rebuilt binary
# gives a new tag and superseded tags are dropped. Nothing is rebuilt when present; under
# MODELPOOL_NO_BUILD (the e2e suite's kind tier) a missing binary or image is an error naming the
# Make target that builds it, never a build.
#
# Prints the Prometheus, prometheus-operator and prometheus-config-reloader image references and
# the folder of the operator's CRDs on its last four lines of stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

REPOSITORY="${MONITORING_IMAGE_REPOSITORY:-modelpool.dev}"
# prometheus-operator's release (hack/build-prometheus-operator.sh says why not v0.94.1).
OPERATOR_VERSION="${MONITORING_OPERATOR_VERSION:-v0.93.1}"

log() { echo "[monitoring-images] $*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "building the images needs root (docker)"
hack/docker-engine.sh >/dev/null

# The Go builds niced, as kube-router's is (hack/build-network-policies.sh): they give way to
# whatever else runs.
prometheus=$(nice hack/build-prometheus.sh --server | tail -n 1) || die "the Prometheus server is not built"
operator_bin=$(PROMETHEUS_OPERATOR_VERSION="$OPERATOR_VERSION" nice hack/build-prometheus-operator.sh | tail -n 1) \
  || die "prometheus-operator is not built"
# Its CRDs, not the ones the local tier's schema test is given (PROMETHEUS_OPERATOR_CRDS).
crds=$(PROMETHEUS_OPERATOR_VERSION="$OPERATOR_VERSION" PROMETHEUS_OPERATOR_CRDS= \
  hack/fetch-prometheus-operator-crds.sh | tail -n 1) || die "the CRDs of prometheus-operator $OPERATOR_VERSION are not cached"

# The release a binary says it is (`--version`'s first line, e.g. "prometheus, version 3.16.0").
release() { "$1" --version 2>&1 | sed -n '1s/.*version \([0-9][0-9.]*\).*/\1/p'; }

# $1 repository, $2 binary, $3 path in the image: the image's reference, built when missing.
static_image() {
  local repository="$1" binary="$2" path="$3" ref dir
  ref="$repository:v$(release "$binary")-$(sha256sum "$binary" | cut -c1-12)"
  if docker image inspect "$ref" >/dev/null 2>&1; then
    log "image present: $ref (nothing to build)"
    echo "$ref"; return
  fi
  [ -z "${MODELPOOL_NO_BUILD:-}" ] || die "image $ref is not built and MODELPOOL_NO_BUILD is set: run 'make kind-prereqs'"
  dir=$(mktemp -d)
  mkdir -p "$dir$(dirname "$path")" "$dir/tmp" "$dir/etc"
  chmod 0755 "$dir" && chmod 1777 "$dir/tmp"
  install -m 0755 "$binary" "$dir$path"
  echo "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin" >"$dir/etc/passwd"
  echo "nogroup:x:65534:" >"$dir/etc/group"
  tar -C "$dir" --numeric-owner -c . | docker import \
    -c "ENTRYPOINT [\"$path\"]" -c 'USER 65534:65534' - "$ref" >/dev/null
  rm -rf "$dir"
  # Earlier builds of this repository are superseded: dropped, so each rebuild keeps no copy.
  docker images "$repository" --format '{{.Repository}}:{{.Tag}}' | grep -vx "$ref" \
    | xargs -r docker rmi >/dev/null 2>&1 || true
  log "built $ref ($(( $(docker image inspect "$ref" --format '{{.Size}}') / 1000000 )) MB)"
  echo "$ref"
}

static_image "$REPOSITORY/prometheus" "$prometheus" /bin/prometheus
static_image "$REPOSITORY/prometheus-operator" "$operator_bin/operator" /bin/operator
static_image "$REPOSITORY/prometheus-config-reloader" "$operator_bin/prometheus-config-reloader" \
  /bin/prometheus-config-reloader
echo "$crds"
