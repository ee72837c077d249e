#!/usr/bin/env bash
# Scheduling benchmark summary: one line per size (pods, seconds, pods/s, nodes, unschedulable,
# speed-up against Karpenter's published single-Solve time).
#   hack/bench/scheduling.sh            # 1, 100, 1000, 5000, 20000 pods
#   BENCH_QUICK=1 hack/bench/scheduling.sh   # 1, 100, 1000 pods (CI)
# For criterion statistics: cargo bench -p scheduling
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo run --quiet --release -p scheduling --example bench_summary -- "$@"
