#!/usr/bin/env bash
# Build the project image (operator, router-proxy, simulator: one image, `controlplane` as its
# entrypoint, user 65532) with no registry: a Debian bookworm root filesystem made here, the
# project and its pinned dependencies installed from wheels into a virtualenv inside it, then
# `docker import`. The Dockerfile beside it builds the same contents for a Docker that reaches a
# registry (tests/e2e compares the two: entrypoint, user, installed packages).
#
# Why not the Dockerfile here: its base image lives in a registry these machines cannot reach.
# The Debian root (debootstrap --variant=minbase, python3) is cached by suite in the cache folder;
# the wheels are built by the host's pip (same Python minor, same glibc as bookworm).
#
# The tag is a hash of what went in (the wheels and the root's package list), so a code change
# gives a new tag and `make deploy` rolls it out. IMAGE_REPOSITORY names the repository.
# Prints the image reference (repository:tag) on its last line of stdout. With --sim, it also
# builds the member simulator image, the same contents with `controlplane llama-sim` as its
# entrypoint (it takes the llama-server arguments the operator gives a member), and prints that.
# With --llama-server, it builds the member image of the real server instead: llama-server
# (hack/build-llama-server.sh) as entrypoint and two tiny models in /models (tiny-1.gguf,
# tiny-2.gguf, from `controlplane tiny-model`), and prints that. With --all, it builds all three
# and prints the project, simulator and llama-server references on its last three lines.
# Under MODELPOOL_NO_BUILD (the e2e suite's kind tier, which finds what `make kind-prereqs`
# built) an image that is missing is an error naming it, never a build.
set -euo pipefail
. "$(dirname "$0")/debian-root.sh"
cd "$(dirname "$0")/.."

SUITE="${DEBIAN_SUITE:-bookworm}"
IMAGE_REPOSITORY="${IMAGE_REPOSITORY:-modelpool.dev/controlplane}"
SIM_REPOSITORY="${SIM_REPOSITORY:-modelpool.dev/llama-sim}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
# python3 for the project; libgomp1 for llama-server (the --llama-server image).
PACKAGES=python3,python3-venv,ca-certificates,libgomp1
BASE_ROOT="$CACHE_ROOT/rootfs/python-${SUITE}-$(echo "$PACKAGES" | sha256sum | cut -c1-8)"
LLAMA_REPOSITORY="${LLAMA_REPOSITORY:-modelpool.dev/llama-server}"
#: The tiny models the llama-server image carries (controlplane tiny-model), one per seed.
TINY_SEEDS=(1 2)
TINY_CONTEXT=2048
PYTHON="${PYTHON:-python3}"
UID_GID=65532

log() { echo "[image] $*" >&2; }
die() { log "error: $*"; exit 1; }
refuse_build() {
  [ -z "${MODELPOOL_NO_BUILD:-}" ] || die "$1 is not built and MODELPOOL_NO_BUILD is set: run 'make kind-prereqs'"
}

[ "$(id -u)" = 0 ] || die "building a root filesystem needs root (debootstrap, chroot)"
hack/docker-engine.sh >/dev/null
start=$(date +%s)

# The user the image runs as, added to the Debian root $1 (hack/debian-root.sh calls it).
add_service_user() {
  chroot "$1" groupadd --system --gid "$UID_GID" controlplane &&
    chroot "$1" useradd --system --uid "$UID_GID" --gid "$UID_GID" --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin controlplane
}

# A root the code before hack/debian-root.sh made has python3 and no .complete: it is complete too.
if [ ! -x "$BASE_ROOT/usr/bin/python3" ]; then
  refuse_build "the Debian root $BASE_ROOT"
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
    || die "apt-get install debootstrap failed"
  debian_root "$BASE_ROOT" "python3" "$PACKAGES" add_service_user || die "the Debian root failed"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "building wheels of the project and its pinned dependencies"
SOURCE_DATE_EPOCH=315532800 "$PYTHON" -m pip wheel --quiet --wheel-dir "$work/wheels" . >&2 || die "pip wheel failed"
tag=$( { (cd "$work/wheels" && sha256sum ./*.whl); chroot "$BASE_ROOT" dpkg-query -W; } | sha256sum | cut -c1-12)
image="$IMAGE_REPOSITORY:dev-$tag"
# Earlier dev builds of repository $1 are superseded by $2: dropped, so each code change does not
# keep another copy.
drop_superseded() {
  docker images "$1" --format '{{.Repository}}:{{.Tag}}' | grep -vx "$2" | grep ':dev-' \
    | xargs -r docker rmi >/dev/null 2>&1 || true
}

# The member images: local builds over the project image (nothing pulled).
llama_server_image() {
  local binary ref context seed model
  binary=$(hack/build-llama-server.sh | tail -n 1)
  ref="$LLAMA_REPOSITORY:dev-$tag-$("$binary" --version 2>&1 | sed -n 's/.*commit \([0-9a-f]*\).*/\1/p' | head -n 1)"
  if ! docker image inspect "$ref" >/dev/null 2>&1; then
    refuse_build "$ref"
    context=$(mktemp -d)
    cp "$binary" "$context/llama-server"
    mkdir "$context/models"
    for seed in "${TINY_SEEDS[@]}"; do
      model=$("${CONTROLPLANE:-.venv/bin/controlplane}" tiny-model --seed "$seed" --context-length "$TINY_CONTEXT" | tail -n 1)
      cp "$model" "$context/models/tiny-$seed.gguf"
    done
    printf '%s\n' "FROM $image" "COPY llama-server /opt/llama/llama-server" "COPY models/ /models/" \
      'ENTRYPOINT ["/opt/llama/llama-server"]' 'CMD []' >"$context/Dockerfile"
    docker build -q -t "$ref" "$context" >/dev/null
    rm -rf "$context"
    drop_superseded "$LLAMA_REPOSITORY" "$ref"
    log "built $ref"
  fi
  echo "$ref"
}

sim_image() {
  local sim="$SIM_REPOSITORY:dev-$tag"
  if ! docker image inspect "$sim" >/dev/null 2>&1; then
    refuse_build "$sim"
    printf 'FROM %s\nENTRYPOINT ["controlplane", "llama-sim"]\nCMD []\n' "$image" \
      | docker build -q -t "$sim" - >/dev/null
    drop_superseded "$SIM_REPOSITORY" "$sim"
    log "built $sim"
  fi
  echo "$sim"
}

finish() {
  case "${1:-}" in
    --llama-server) llama_server_image ;;
    --sim) sim_image ;;
    --all) echo "$image"; sim_image; llama_server_image ;;
    *) echo "$image" ;;
  esac
  exit 0
}
if docker image inspect "$image" >/dev/null 2>&1; then
  log "image present: $image (nothing to build)"
  finish "$@"
fi

refuse_build "$image"
root="$work/root"
cp -a "$BASE_ROOT" "$root"
rm -f "$root/.complete"
cp -r "$work/wheels" "$root/tmp/wheels"
chroot "$root" python3 -m venv /opt/modelpool
chroot "$root" /opt/modelpool/bin/pip install --quiet --no-index --no-cache-dir \
  --find-links /tmp/wheels modelpool-controlplane >&2 || die "installing the project in the image failed"
rm -rf "$root/tmp/wheels" "$root/root/.cache"
find "$root/opt/modelpool" -name __pycache__ -prune -exec rm -rf {} +

log "importing $image"
tar -C "$root" --numeric-owner -c . | docker import \
  -c "USER $UID_GID:$UID_GID" \
  -c 'WORKDIR /' \
  -c 'ENV PATH=/opt/modelpool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV PYTHONDONTWRITEBYTECODE=1' \
  -c 'ENV PYTHONUNBUFFERED=1' \
  -c 'EXPOSE 8080 8081' \
  -c 'ENTRYPOINT ["controlplane"]' \
  -c 'CMD ["--help"]' \
  - "$image" >/dev/null
drop_superseded "$IMAGE_REPOSITORY" "$image"
size=$(docker image inspect "$image" --format '{{.Size}}')
log "built $image in $(( $(date +%s) - start )) s, $(( size / 1000000 )) MB"
finish "$@"
