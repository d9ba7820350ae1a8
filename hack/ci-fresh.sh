#!/usr/bin/env bash
# `make ci-fresh`: run .ci/run as CI does on a new machine, on a clean clone of HEAD, with every
# cache it would use moved aside: the project's build cache (~/.cache/modelpool-controlplane),
# Go's build and module caches, pip's cache, and the Docker images the project builds (removed:
# they are rebuilt by the run). The moved caches stay beside the originals (*.aside-TIMESTAMP)
# for you to delete or move back; the run leaves new, complete caches in the usual places.
#
# What it cannot undo: Debian packages installed by an earlier run (docker.io, debootstrap) stay
# installed; their install takes about a minute on a new machine.
# Prints each step's time (hack/timed.sh) and the whole run's; the log is kept in $LOG.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=$(date +%Y%m%d-%H%M%S)
LOG="${LOG:-/tmp/modelpool-ci-fresh-$stamp.log}"
log() { echo "[ci-fresh] $*" >&2; }

aside() {
  local dir="$1"
  if [ -e "$dir" ]; then
    mv "$dir" "$dir.aside-$stamp"
    log "moved $dir aside to $dir.aside-$stamp"
  fi
}
aside "${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
if command -v go >/dev/null; then
  aside "$(go env GOCACHE)"
  gomodcache=$(go env GOMODCACHE)
  # The module cache is read-only by design; moving it needs its folders writable.
  [ -e "$gomodcache" ] && chmod -R u+w "$gomodcache"
  aside "$gomodcache"
fi
aside "${XDG_CACHE_HOME:-$HOME/.cache}/pip"
# The engine is started first when it is not running (a machine just booted), or the images the
# project builds would survive the run unseen and their builds be skipped: a run then measured
# "network-policies: done in 1 s" instead of about 18 minutes.
hack/docker-engine.sh >/dev/null
if docker info >/dev/null 2>&1; then
  kind_clusters=$(docker ps -a --filter label=io.x-k8s.kind.cluster --format '{{.Names}}')
  [ -z "$kind_clusters" ] || { echo "$kind_clusters" | xargs -r docker rm -f >/dev/null; log "removed kind nodes: $kind_clusters"; }
  images=$(docker images --format '{{.Repository}}:{{.Tag}}' \
    | grep -E '^(modelpool\.dev/|registry\.k8s\.io/|docker\.io/kindest/|kindest/)' || true)
  [ -z "$images" ] || { echo "$images" | xargs -r docker rmi -f >/dev/null; log "removed $(echo "$images" | wc -l) project images"; }
  docker image prune -f >/dev/null
fi

clone=$(mktemp -d /tmp/modelpool-ci-fresh-XXXX)
git clone --quiet . "$clone/repo"
log "running .ci/run on a clean clone of $(git rev-parse --short HEAD) in $clone/repo (log: $LOG)"
start=$(date +%s)
status=0
(cd "$clone/repo" && bash .ci/run) 2>&1 | tee "$LOG" || status=$?
took=$(( $(date +%s) - start ))
log "steps:"
grep -E '^\[step\] .*(done in|failed after)' "$LOG" | sed 's/^/  /' >&2 || true
log ".ci/run exited $status after $(( took / 60 )) min $(( took % 60 )) s"
rm -rf "$clone"
exit "$status"
