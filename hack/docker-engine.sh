#!/usr/bin/env bash
# Make sure a Docker engine answers, for the kind tier, `make image` and `make kind-up`.
#
# A running engine (DOCKER_HOST or /var/run/docker.sock) is used as it is. Otherwise, as root,
# Debian's `docker.io` is installed when dockerd is missing and dockerd is started in the
# background (these machines have no systemd), logging to $DOCKERD_LOG. Without root and without
# an engine, one message says what is missing and how to get it.
#
# Some VMs run dockerd with a bounding set lacking CAP_SYS_RESOURCE, and then every privileged
# container (a kind node) fails with "unable to apply caps". Only when that capability is really
# missing from dockerd's bounding set, hack/runc-without-sys-resource is installed as dockerd's
# default runtime (in /etc/docker/daemon.json, reloaded with SIGHUP).
#
# With --with-debootstrap it also installs Debian's debootstrap (the image builds make their roots
# with it), so that the builds `make -j` runs at once never call apt-get at the same time.
# Idempotent; prints "docker engine ready" on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKERD_LOG="${DOCKERD_LOG:-/var/log/modelpool-dockerd.log}"
RUNTIME_NAME=modelpool-runc
RUNTIME_PATH=/usr/local/libexec/modelpool/runc-without-sys-resource

log() { echo "[docker-engine] $*" >&2; }
die() { log "error: $*"; exit 1; }

command -v docker >/dev/null || {
  [ "$(id -u)" = 0 ] || die "no 'docker' client on PATH; install Docker (Debian: apt-get install docker.io)"
}

engine_answers() { docker info >/dev/null 2>&1; }

wait_for_engine() {
  for _ in $(seq 1 120); do engine_answers && return 0; sleep 0.5; done
  die "dockerd did not answer within 60 s; its log: $DOCKERD_LOG"
}

if ! engine_answers; then
  [ "$(id -u)" = 0 ] || die "no Docker engine answers and starting one needs root: run 'sudo dockerd &' (Debian package docker.io), or set DOCKER_HOST"
  if ! command -v dockerd >/dev/null; then
    log "installing Debian's docker.io (dockerd, containerd, runc)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; } \
      || die "apt-get install docker.io failed"
  fi
  log "starting dockerd (log: $DOCKERD_LOG)"
  nohup dockerd >>"$DOCKERD_LOG" 2>&1 &
  wait_for_engine
fi

# Only where dockerd's own bounding set lacks CAP_SYS_RESOURCE (hack/dockerd-caps.sh).
source hack/dockerd-caps.sh
if dockerd_lacks_sys_resource; then
  if ! docker info --format '{{json .Runtimes}}' | grep -q "\"$RUNTIME_NAME\""; then
    log "dockerd's bounding set lacks CAP_SYS_RESOURCE: installing the $RUNTIME_NAME runtime"
    install -D -m 0755 hack/runc-without-sys-resource "$RUNTIME_PATH"
    mkdir -p /etc/docker
    /usr/bin/python3 - "$RUNTIME_NAME" "$RUNTIME_PATH" <<'PY'
import json, os, sys
name, path = sys.argv[1:3]
file = "/etc/docker/daemon.json"
config = json.load(open(file)) if os.path.exists(file) and os.path.getsize(file) else {}
config.setdefault("runtimes", {})[name] = {"path": path}
config["default-runtime"] = name
json.dump(config, open(file, "w"), indent=2)
PY
    kill -HUP "$(pidof dockerd | awk '{print $1}')"
    for _ in $(seq 1 40); do
      docker info --format '{{json .Runtimes}}' | grep -q "\"$RUNTIME_NAME\"" && break
      sleep 0.25
    done
    docker info --format '{{.DefaultRuntime}}' | grep -qx "$RUNTIME_NAME" \
      || die "dockerd did not take the $RUNTIME_NAME runtime from /etc/docker/daemon.json"
  fi
fi
if [ "${1:-}" = "--with-debootstrap" ] && ! command -v debootstrap >/dev/null; then
  [ "$(id -u)" = 0 ] || die "no debootstrap on PATH and installing it needs root (apt-get install debootstrap)"
  log "installing Debian's debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } \
    || die "apt-get install debootstrap failed"
fi
log "server $(docker version --format '{{.Server.Version}}'), default runtime $(docker info --format '{{.DefaultRuntime}}')"
echo "docker engine ready"
