#!/usr/bin/env bash
# Run a command as one named step of a build or of CI, and say how long it took:
#   hack/timed.sh STEP COMMAND [ARG...]
# prints "[step] STEP: started" and "[step] STEP: done in N s, C s of CPU" (or "failed after N s")
# on stderr, so a log of parallel builds still shows each part's time, and the CPU it used (user +
# system of everything it ran) tells what it costs on 2 cores beside the others. Exits with the
# command's status.
set -uo pipefail
step="$1"; shift
start=$(date +%s)
echo "[step] $step: started" >&2
"$@"
status=$?
took=$(( $(date +%s) - start ))
# `times` prints the children's user and system time on its second line, as "XmY.YYYs XmY.YYYs".
# It runs in this shell (a command substitution would fork and see no children).
times_file=$(mktemp)
times >"$times_file"
cpu=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] }; printf "%d", n }' "$times_file")
rm -f "$times_file"
if [ "$status" = 0 ]; then
  echo "[step] $step: done in $took s, $cpu s of CPU" >&2
else
  echo "[step] $step: failed after $took s (exit $status)" >&2
fi
exit "$status"
