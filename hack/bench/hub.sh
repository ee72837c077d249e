#!/usr/bin/env bash
# Hub mode against single-cluster operators, in one run: N workload clusters × P pods served by
# one `karpenter-capi run --mode hub`, then N fresh workload clusters × P pods served by N
# single-cluster operators, on one management testbed (Cluster API manager, audit log, the
# test infrastructure provider). The workload clusters are kube-apiservers on the management
# etcd (each its own key prefix) with a controller-manager, a scheduler and kwok each.
#
#   hack/bench/hub.sh                       # 10 clusters × 200 pods
#   hack/bench/hub.sh --clusters 3 --pods 50
#
# Reports (crates/testbed/src/bin/bench-hub.rs): the operators' summed RSS (hub with 1 idle
# cluster, N idle, one at P pods, all at P pods; the singles idle and at P pods), the time
# until all pods of a cluster are Running (per cluster: min–max), and API writes per
# NodeClaim (audit logs, User-Agent karpenter-capi/). Release build. Results:
# .cache/bench/hub/report.md (operator logs beside it), the report also copied to
# hack/bench/baseline/<date>-hub-<N>x<P>/ to be committed with the figures the docs quote
# (BENCH_BASELINE=0: not). Figures are reported, not asserted.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=baseline.sh
source "$here/baseline.sh"
clusters=10
pods=200
while [ $# -gt 0 ]; do
  case $1 in
    --clusters) clusters=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "hub.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out=$repo/.cache/bench/hub
mkdir -p "$out"
echo "hub.sh: building (release) karpenter-capi and bench-hub; the testbed binaries (cached)" >&2
(cd "$repo" && cargo build -q --release --locked -p karpenter-capi -p testbed --bin karpenter-capi --bin bench-hub)
target=${CARGO_TARGET_DIR:-$repo/target}/release
bash "$repo/hack/testbed/build.sh" >/dev/null
"$target/bench-hub" --operator "$target/karpenter-capi" --clusters "$clusters" --pods "$pods" --out "$out"
dest=$(baseline_dir "hub-${clusters}x$pods")
if [ -n "$dest" ]; then
  cp "$out/report.md" "$dest/"
  echo "hub.sh: the report for the docs in ${dest#"$repo"/}/ (commit it with the figures it backs)" >&2
fi
