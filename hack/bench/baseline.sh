# shellcheck shell=bash
# Sourced by the bench scripts (e2e.sh, hub.sh, scheduling.sh): where a run's summaries go so
# that they can be committed. Every figure README.md and docs/performance.md quote must be in
# a summary under hack/bench/baseline/ that its table names (tests/docs.rs checks it).
#
# baseline_dir NAME: creates and prints hack/bench/baseline/<UTC date>-NAME (-2, -3, ... for a
# second run the same day). BENCH_BASELINE=0: prints nothing and creates nothing (the run's
# results stay in .cache/bench/ only).
baseline_dir() {
  [ "${BENCH_BASELINE:-1}" != 0 ] || return 0
  local root base d n=1
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/baseline
  base=$root/$(date -u +%F)-$1
  d=$base
  while [ -e "$d" ]; do n=$((n + 1)); d=$base-$n; done
  mkdir -p "$d"
  echo "$d"
}
