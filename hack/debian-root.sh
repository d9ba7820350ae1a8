# shellcheck shell=bash
# A cached Debian root made by debootstrap, for the image builds that need one
# (hack/build-image.sh, hack/build-kind-node.sh, hack/build-network-policies.sh). Sourced; the
# sourcing script defines `log`.
#
# Why a shared function: debootstrap mounts /proc inside its target and a run killed midway (a CI
# run stopped, ^C, a session ending) leaves it mounted. The next run's `rm -rf` of the half-made
# root then fails on /proc's files and debootstrap went on into the remains, failing after three
# minutes (CI from a machine whose previous run was stopped in a debootstrap). So a root is made in
# "$root.tmp" and renamed to "$root" only when complete, with whatever is still mounted beneath a
# leftover unmounted first; and a lock lets two builds on one cache folder wait for each other
# instead of writing into the same folder.

# Unmount everything mounted beneath folder $1, deepest first.
unmount_below() {
  local dir="$1" target
  findmnt -rn -o TARGET | awk -v prefix="$dir/" 'index($0, prefix) == 1' | sort -r \
    | while read -r target; do umount -l "$target" || return 1; done
}

# Remove folder $1 (a root a killed run left), unmounting what is mounted beneath it first.
remove_root() {
  local dir="$1"
  [ -e "$dir" ] || return 0
  unmount_below "$dir" && rm -rf "$dir"
}

# Make the Debian root $1 (described as $2 in logs) with the comma-separated packages $3, unless it
# is already complete. A function named by $4, if given, is called with the unfinished root's path
# to set it up before it counts as complete (e.g. to add a user). Returns non-zero on failure.
debian_root() {
  local root="$1" what="$2" packages="$3" setup="${4:-}" lock status=0
  [ -f "$root/.complete" ] && return 0
  mkdir -p "$(dirname "$root")"
  exec {lock}>"$root.lock"
  flock "$lock"
  if [ ! -f "$root/.complete" ]; then
    log "making the $what root (debootstrap ${SUITE:?}, a few minutes, cached)"
    # Not niced: a debootstrap waits on the network and dpkg, and niced beside compiles it starved
    # (23 minutes instead of 4 in a parallel build from empty caches).
    if ! { remove_root "$root.tmp" && remove_root "$root"; }; then
      log "error: cannot remove the unfinished root $root.tmp or $root"; status=1
    elif ! debootstrap --variant=minbase --include="$packages" "$SUITE" "$root.tmp" >&2; then
      log "error: debootstrap of the $what root failed (log: $root.tmp/debootstrap/debootstrap.log)"
      unmount_below "$root.tmp"; status=1
    elif [ -n "$setup" ] && ! "$setup" "$root.tmp"; then
      log "error: setting up the $what root failed"; status=1
    else
      rm -rf "$root.tmp"/var/cache/apt/archives/*.deb "$root.tmp"/var/lib/apt/lists/*
      touch "$root.tmp/.complete"
      mv "$root.tmp" "$root"
    fi
  fi
  flock -u "$lock"
  exec {lock}>&-
  return "$status"
}
