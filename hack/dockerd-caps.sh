# Sourced by hack/docker-engine.sh and hack/kind-up.sh: whether the dockerd running on this
# machine lacks CAP_SYS_RESOURCE in its bounding set (seen on some VMs). Both the runtime
# workaround and kind's restrict_oom_score_adj patch depend on that one reading.
CAP_SYS_RESOURCE_BIT=24

# Succeeds when dockerd runs here and its bounding set lacks CAP_SYS_RESOURCE; a remote engine,
# or none, is not ours to judge.
dockerd_lacks_sys_resource() {
  local pid bounding
  pid=$(pidof dockerd 2>/dev/null | awk '{print $1}' || true)
  [ -n "$pid" ] || return 1
  bounding=$(awk '/^CapBnd:/ {print $2}' "/proc/$pid/status")
  (( (16#$bounding >> CAP_SYS_RESOURCE_BIT & 1) == 0 ))
}
