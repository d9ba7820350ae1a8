#!/usr/bin/env bash
# Bring up (or find) the one-node kind cluster $KIND_CLUSTER from the node image built here
# (hack/build-kind-node.sh), and make its context kubectl's current one. Idempotent.
#
# The cluster's configuration follows from the node image and from this host: kind's default CNI
# is disabled (the image carries a bridge CNI of its own), kube-proxy runs in nftables mode, the
# kubelet is allowed cgroup v1 when the host has no cgroup v2 hierarchy, and containerd is told
# not to lower oom_score_adj only where dockerd's bounding set lacks CAP_SYS_RESOURCE (lowering it
# needs that capability, and pod sandboxes fail without the setting there).
# Prints the kubeconfig context's name on its last line; with --print-config, prints the cluster
# configuration instead and creates nothing (the e2e suite's kind tier creates through pytest-kind).
set -euo pipefail
cd "$(dirname "$0")/.."

KIND_CLUSTER="${KIND_CLUSTER:-modelpool}"
log() { echo "[kind-up] $*" >&2; }
die() { log "error: $*"; exit 1; }

source hack/dockerd-caps.sh

# The cluster configuration for node image $1, following this host (see the header).
print_config() {
  local node_image="$1" cgroup_v1=false restrict_oom=false
  [ -f /sys/fs/cgroup/cgroup.controllers ] || cgroup_v1=true
  if dockerd_lacks_sys_resource; then restrict_oom=true; fi
  cat <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
  kubeProxyMode: nftables
  podSubnet: 10.244.0.0/16
nodes:
  - role: control-plane
    image: $node_image
YAML
  if [ "$cgroup_v1" = true ]; then
    cat <<'YAML'
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
YAML
  fi
  if [ "$restrict_oom" = true ]; then
    cat <<'YAML'
containerdConfigPatches:
  - |-
    [plugins."io.containerd.grpc.v1.cri"]
      restrict_oom_score_adj = true
YAML
  fi
}

hack/docker-engine.sh >/dev/null
node_image=$(hack/build-kind-node.sh | tail -n 1)
if [ "${1:-}" = "--print-config" ]; then print_config "$node_image"; exit 0; fi
tools=$(hack/build-kind-tools.sh 2>/dev/null | tail -n 1)
kind="$tools/kind"

if "$kind" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  container="$KIND_CLUSTER-control-plane"
  if [ "$(docker inspect -f '{{.State.Running}}' "$container" 2>/dev/null)" != true ]; then
    log "starting the stopped node $container"
    docker start "$container" >/dev/null
  fi
  "$kind" export kubeconfig --name "$KIND_CLUSTER" >&2
  log "cluster $KIND_CLUSTER is up"
  echo "kind-$KIND_CLUSTER"; exit 0
fi

config=$(mktemp)
trap 'rm -f "$config"' EXIT
print_config "$node_image" >"$config"
log "creating kind cluster $KIND_CLUSTER from $node_image"
"$kind" create cluster --name "$KIND_CLUSTER" --config "$config" --wait 120s >&2 \
  || die "kind create cluster failed; 'docker logs $KIND_CLUSTER-control-plane' shows the node's boot"
echo "kind-$KIND_CLUSTER"
