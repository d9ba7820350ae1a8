#!/usr/bin/env bash
# Build a kind node image for Kubernetes $KUBE_VERSION with no registry, cached by version.
#
# kind's own images (kindest/base, kindest/node) and every image a node preloads live in
# registries these machines cannot reach, so each is made here:
#   * the base image: a Debian root (debootstrap) with systemd, Debian's containerd and runc,
#     iptables/nftables, crictl and the CNI plugins, plus the files of kind's own base image read
#     from the kind module (entrypoint, systemd units, containerd config); a `ctr` shim bridges
#     what kind v0.33 asks of containerd 1.6's `ctr` (hack/kind-ctr-shim);
#   * the control-plane images (apiserver, controller manager, scheduler, proxy, etcd, CoreDNS,
#     pause) from the binaries of hack/build-controlplane.sh and hack/build-kind-tools.sh;
#   * `kind build node-image --type file` over a release-shaped tarball of those.
# kindnetd and local-path-provisioner cannot be had here: clusters made from this image disable
# kind's default CNI (a bridge CNI config is baked into the node instead: one node) and have no
# dynamic volume provisioning (kind falls back to its legacy host-path StorageClass). kind's build
# still insists on finding their images, so it is given placeholder images under their names,
# which no cluster made from this image ever runs.
#
# Prints the node image's reference on its last line of stdout. With --roots, it only makes the two
# Debian roots (network-bound debootstraps, which `make kind-prereqs` runs while Go compiles).
# Under MODELPOOL_NO_BUILD a missing node image is an error, never a build.
set -euo pipefail
. "$(dirname "$0")/debian-root.sh"
cd "$(dirname "$0")/.."

KIND_VERSION="${KIND_VERSION:-v0.33.0}"
KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
SUITE="${DEBIAN_SUITE:-bookworm}"
# The tags kind v0.33.0 and kubeadm $KUBE_VERSION look for (kubeadm config images list).
ETCD_TAG="${ETCD_TAG:-3.6.8-0}"
COREDNS_TAG="${COREDNS_TAG:-v1.14.2}"
PAUSE_TAG="${PAUSE_TAG:-3.10}"
PLACEHOLDERS=(
  docker.io/kindest/kindnetd:v20260820-69b56db7
  docker.io/kindest/local-path-provisioner:v20260820-69b56db7
  docker.io/kindest/local-path-helper:v20260131-7181c60a
)
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
NODE_IMAGE="${KIND_NODE_IMAGE:-modelpool.dev/kind-node:${KUBE_VERSION}-kind-${KIND_VERSION}}"
BASE_IMAGE="modelpool.dev/kind-base:${SUITE}-kind-${KIND_VERSION}"
BASE_ROOT="$CACHE_ROOT/rootfs/kind-base-${SUITE}-kind-${KIND_VERSION}"
PROXY_ROOT="$CACHE_ROOT/rootfs/kube-proxy-${SUITE}"

log() { echo "[kind-node] $*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "building root filesystems needs root (debootstrap, chroot)"
hack/docker-engine.sh >/dev/null
if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then
  log "node image present: $NODE_IMAGE (nothing to build)"
  echo "$NODE_IMAGE"; exit 0
fi
[ -z "${MODELPOOL_NO_BUILD:-}" ] || die "node image $NODE_IMAGE is not built and MODELPOOL_NO_BUILD is set: run 'make kind-prereqs'"
start=$(date +%s)
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
  || die "apt-get install debootstrap failed"

# debootstrap once per root, cached (hack/debian-root.sh); $3 = comma-separated packages.
make_root() {
  debian_root "$1" "$2" "$3" || die "the $2 root failed"
}

# A directory imported as an image: $1 dir, $2 reference, rest: `docker import -c` changes.
import_dir() {
  local dir="$1" ref="$2"; shift 2
  local changes=() c
  for c in "$@"; do changes+=(-c "$c"); done
  tar -C "$dir" --numeric-owner --exclude=./.complete -c . | docker import "${changes[@]}" - "$ref" >/dev/null
}

# -- the base image ------------------------------------------------------------------------------
build_base() {
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return
  make_root "$BASE_ROOT.debian" "kind base" "$BASE_PACKAGES"
  local kind_dir root
  kind_dir=$(cd "$CACHE_ROOT" && GOFLAGS= go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  [ -d "$kind_dir/images/base/files" ] || die "no images/base/files in the kind module ($kind_dir)"
  root=$(mktemp -d "$CACHE_ROOT/rootfs/kind-base.XXXX")
  cp -a "$BASE_ROOT.debian/." "$root/"
  # kind's own base files, as its Dockerfile lays them out.
  (cd "$kind_dir/images/base/files" && cp -r --no-preserve=mode . "$root/")
  chmod 0755 "$root"/usr/local/bin/* "$root"/kind "$root"/kind/bin "$root"/kind/bin/*
  install -m 0755 hack/kind-ctr-shim "$root/usr/local/bin/ctr"
  ln -sf /usr/bin/containerd "$root/usr/local/bin/containerd"
  install -m 0755 "$tools/crictl" "$root/usr/local/bin/crictl"
  mkdir -p "$root/opt/cni/bin" "$root/etc/cni/net.d" "$root/etc/kubernetes/manifests"
  install -m 0755 "$tools"/cni/* "$root/opt/cni/bin/"
  # One node, one bridge: the pod network kind's default CNI (kindnet) would otherwise provide.
  cat >"$root/etc/cni/net.d/10-modelpool-bridge.conflist" <<'JSON'
{
  "cniVersion": "1.0.0",
  "name": "modelpool-bridge",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
JSON
  chroot "$root" /bin/sh -euc '
    find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
    rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
    echo "ReadKMsg=no" >> /etc/systemd/journald.conf
    ln -sf /lib/systemd/systemd /sbin/init
    systemctl enable kubelet.service containerd.service undo-mount-hacks.service
    systemctl mask systemd-binfmt.service
    /usr/bin/ctr oci spec \
      | jq ".hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" \
      | jq "del(.process.rlimits)" > /etc/containerd/cri-base.json
  ' >&2 || die "configuring the base root failed"
  log "importing $BASE_IMAGE"
  import_dir "$root" "$BASE_IMAGE.rootfs" 'ENV container=docker' \
    'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]'
  rm -rf "$root"
  # `docker import` cannot set a stop signal; a one-line build on the local image can (no pull).
  printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$BASE_IMAGE.rootfs" | docker build -q -t "$BASE_IMAGE" - >/dev/null
  docker rmi "$BASE_IMAGE.rootfs" >/dev/null
}

# -- the images a node preloads ------------------------------------------------------------------
# A folder holding one static program at $3 (and /tmp), imported as $1 with entrypoint $3.
static_image() {
  local ref="$1" binary="$2" path="$3" dir
  dir=$(mktemp -d)
  mkdir -p "$dir$(dirname "$path")" "$dir/tmp" "$dir/etc"
  chmod 1777 "$dir/tmp"
  install -m 0755 "$binary" "$dir$path"
  echo "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin" >"$dir/etc/passwd"
  import_dir "$dir" "$ref" 'ENV PATH=/usr/local/bin:/usr/bin:/bin' "ENTRYPOINT [\"$path\"]"
  rm -rf "$dir"
}

# `docker save` of images into one archive whose first metadata entry is `repositories`, the
# entry kind reads every tag from (of manifest.json it reads only the first image).
save_archive() {
  local out="$1"; shift
  local dir
  dir=$(mktemp -d)
  docker save "$@" | tar -C "$dir" -x
  # docker writes Docker Hub names short (kindest/x); kind looks for them in full (docker.io/...).
  sed -i -E 's#"([a-z0-9-]+/[a-z0-9-]+)([":])#"docker.io/\1\2#g' "$dir/repositories" "$dir/manifest.json"
  (cd "$dir" && tar -cf "$out" repositories manifest.json $(ls | grep -v -e '^repositories$' -e '^manifest.json$'))
  rm -rf "$dir"
}

build_release() {
  local release="$1" images="$1/kubernetes/server/bin" k8s="registry.k8s.io"
  mkdir -p "$images"
  echo "$KUBE_VERSION" >"$release/kubernetes/version"
  local b
  for b in kubeadm kubelet kubectl; do install -m 0755 "$(readlink -f "$tools/$b")" "$images/$b"; done
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    static_image "$k8s/$b:$KUBE_VERSION" "$(readlink -f "$tools/$b")" "/usr/local/bin/$b"
  done
  static_image "$k8s/etcd:$ETCD_TAG" "$(readlink -f "$tools/etcd")" /usr/local/bin/etcd
  static_image "$k8s/coredns/coredns:$COREDNS_TAG" "$tools/coredns" /coredns
  static_image "$k8s/pause:$PAUSE_TAG" "$tools/pause" /pause
  # kube-proxy programs nftables through the `nft` command: a small Debian root with it.
  make_root "$PROXY_ROOT" "kube-proxy" "$PROXY_PACKAGES"
  local proxy
  proxy=$(mktemp -d)
  cp -a "$PROXY_ROOT/." "$proxy/"
  install -m 0755 "$(readlink -f "$tools/kube-proxy")" "$proxy/usr/local/bin/kube-proxy"
  import_dir "$proxy" "$k8s/kube-proxy:$KUBE_VERSION" 'ENTRYPOINT ["/usr/local/bin/kube-proxy"]'
  rm -rf "$proxy"
  local placeholder
  for placeholder in "${PLACEHOLDERS[@]}"; do docker tag "$k8s/pause:$PAUSE_TAG" "$placeholder"; done
  log "writing the release's image archives"
  save_archive "$images/kube-apiserver.tar" "$k8s/kube-apiserver:$KUBE_VERSION" \
    "$k8s/etcd:$ETCD_TAG" "$k8s/coredns/coredns:$COREDNS_TAG" "$k8s/pause:$PAUSE_TAG"
  save_archive "$images/kube-controller-manager.tar" "$k8s/kube-controller-manager:$KUBE_VERSION"
  save_archive "$images/kube-scheduler.tar" "$k8s/kube-scheduler:$KUBE_VERSION"
  save_archive "$images/kube-proxy.tar" "$k8s/kube-proxy:$KUBE_VERSION" "${PLACEHOLDERS[@]}"
}

BASE_PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,e2fsprogs
PROXY_PACKAGES=nftables,iptables,conntrack
if [ "${1:-}" = "--roots" ]; then
  make_root "$BASE_ROOT.debian" "kind base" "$BASE_PACKAGES" &
  base=$!
  make_root "$PROXY_ROOT" "kube-proxy" "$PROXY_PACKAGES" || die "the kube-proxy root failed"
  wait "$base" || die "the kind base root failed"
  log "roots ready in $(( $(date +%s) - start )) s"
  exit 0
fi
tools=$(hack/build-kind-tools.sh | tail -n 1)
build_base
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build_release "$work/release"
tar -C "$work/release" -czf "$work/kubernetes-server-linux-amd64.tar.gz" kubernetes
log "kind build node-image (about a minute)"
"$tools/kind" build node-image --type file "$work/kubernetes-server-linux-amd64.tar.gz" \
  --base-image "$BASE_IMAGE" --image "$NODE_IMAGE.tmp" >&2 || die "kind build node-image failed"
# Without kind's storage manifest, kind applies its legacy host-path StorageClass instead of a
# local-path-provisioner this image cannot carry.
builder=$(docker create --entrypoint /bin/rm "$NODE_IMAGE.tmp" -f /kind/manifests/default-storage.yaml)
docker start -a "$builder" >/dev/null
docker commit -c 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$builder" "$NODE_IMAGE" >/dev/null
docker rm "$builder" >/dev/null
docker rmi "$NODE_IMAGE.tmp" >/dev/null
size=$(docker image inspect "$NODE_IMAGE" --format '{{.Size}}')
log "built $NODE_IMAGE in $(( $(date +%s) - start )) s, $(( size / 1000000 )) MB"
echo "$NODE_IMAGE"
