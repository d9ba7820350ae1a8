#!/usr/bin/env bash
# Run a command as one named step of a build or of CI, and say how long it took:
#   hack/timed.sh STEP COMMAND [ARG...]
# prints "[step] STEP: started" and "[step] STEP: done in N s" (or "failed after N s") on stderr,
# so a log of parallel builds still shows each part's time. Exits with the command's status.
set -uo pipefail
step="$1"; shift
start=$(date +%s)
echo "[step] $step: started" >&2
"$@"
status=$?
took=$(( $(date +%s) - start ))
if [ "$status" = 0 ]; then
  echo "[step] $step: done in $took s" >&2
else
  echo "[step] $step: failed after $took s (exit $status)" >&2
fi
exit "$status"
