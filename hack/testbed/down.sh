#!/usr/bin/env bash
# Stops exactly the processes hack/testbed/up.sh started for a testbed directory.
#   hack/testbed/down.sh [--dir DIR] [--purge] [--quiet]
# --purge also removes the directory (state, logs, certs), so nothing is kept that a graceful
# shutdown would save: the processes are killed at once (SIGKILL) rather than asked to stop
# (SIGTERM, then SIGKILL after 10 s: kube-apiserver waits for an etcd stopped beside it).
# Safe to run twice.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TESTBED_CACHE:-$(cd "$here/../.." && pwd)/.cache/testbed}
dir=$cache/run purge= quiet=
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --purge) purge=1; shift ;;
    --quiet) quiet=1; shift ;;
    *) echo "down.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -d "$dir" ] || exit 0
dir=$(cd "$dir" && pwd)
pids=$dir/pids
ours() { # pid is alive and is one of ours (its command line names our directory)
  kill -0 "$1" 2>/dev/null && tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF "$dir"
}
signal=TERM
[ -n "$purge" ] && signal=KILL
if [ -f "$pids" ]; then
  # Reverse start order: components first, kube-apiserver, then etcd.
  mapfile -t entries < <(tac "$pids")
  stopped=()
  for e in "${entries[@]}"; do
    name=${e% *} pid=${e#* }
    if ours "$pid"; then kill "-$signal" "$pid" 2>/dev/null || true; stopped+=("$name:$pid"); fi
  done
  for s in "${stopped[@]}"; do
    pid=${s#*:}
    for _ in $(seq 1 100); do ours "$pid" || break; sleep 0.1; done
    ours "$pid" && kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$pids"
  [ -n "$quiet" ] || echo "testbed: stopped ${stopped[*]:-nothing (already stopped)}" >&2
fi
[ -n "$purge" ] && rm -rf "$dir"
exit 0
