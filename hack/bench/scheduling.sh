#!/usr/bin/env bash
# Scheduler benchmark against Karpenter itself, on identical input, in one run.
# Karpenter's scheduler (sigs.k8s.io/karpenter, pinned in hack/bench/go/go.mod, built once into
# .cache/bench by hack/bench/build.sh) solves the workload of its own scheduling benchmark
# (fake.InstanceTypes(400), makeDiversePods(n)) and writes those instance types and pods as
# JSON; our solver then solves exactly those pods, converted by the operator's own code. Both
# sides are timed by the rule of Go's testing.Benchmark, under which Karpenter's benchmark runs
# (the mean of the last batch, which lasts ≥ 1 s: Karpenter's set-up from the pods plus Solve,
# our whole solve), their first runs reported too. One table row per size (times, ratio,
# NodeClaims, total price of the cheapest offering per NodeClaim, unschedulable pods), per
# catalog: Karpenter's benchmark catalog and three that are not priced linearly in size
# (bare-metal, resizable, overlay; see go/schedbench/main.go). Fails (after the table) when our
# solver leaves more pods unschedulable than Karpenter's on the same input. A full run (not
# quick) also writes the table and Karpenter's figures to hack/bench/baseline/<date>-scheduling/
# to be committed with the figures the docs quote (BENCH_BASELINE=0: not).
#   hack/bench/scheduling.sh                 # 1000, 5000, 20000 pods, every catalog
#   BENCH_QUICK=1 hack/bench/scheduling.sh   # 1000 pods (make test, CI)
#   BENCH_SIZES=2000,10000 hack/bench/scheduling.sh
#   BENCH_CATALOGS=karpenter,overlay hack/bench/scheduling.sh   # quick mode: karpenter only
#   BENCH_REPEAT=3 hack/bench/scheduling.sh  # three runs of both sides, one after the other
# On a shared machine one run's ratio moves by a fifth and more between runs (either side can
# meet a slow second). With BENCH_REPEAT=R (R > 1), each run (Karpenter's side, then ours) goes
# to run-<r>/, and summary.md gives per row the median of the R runs' times and of their
# ratios, and each run's ratio (baselines are taken so).
# For criterion statistics of our solver alone: cargo bench -p scheduling
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=baseline.sh
source "$here/baseline.sh"
cd "$here/../.."
sizes=${BENCH_SIZES:-1000,5000,20000}
catalogs=${BENCH_CATALOGS:-karpenter,bare-metal,resizable,overlay}
# Quick mode (make test, after `cargo test --workspace`) uses the dev build of the example: the
# solver crate is optimised in dev builds too (Cargo.toml), the conversion is not timed.
profile=release
[ "${BENCH_QUICK:-}" = 1 ] || [ "${1:-}" = --quick ] && sizes=1000 profile=dev catalogs=${BENCH_CATALOGS:-karpenter}
out=$(bash "$here/build.sh" schedbench)
run=.cache/bench/scheduling
rm -rf "$run" && mkdir -p "$run"
cargo build --quiet --profile "$profile" --locked -p karpenter-core --example vs_karpenter
dir=$profile; [ "$profile" = dev ] && dir=debug
echo "Karpenter $(basename "$out" | sed 's/karpenter-/v/') scheduler vs ours ($profile build), mean per run as testing.Benchmark times it, on $(nproc) cores ($(date -u +%F)):"
repeat=${BENCH_REPEAT:-1}
tables=()
for r in $(seq 1 "$repeat"); do
  d=$run; [ "$repeat" = 1 ] || d=$run/run-$r
  mkdir -p "$d"
  "$out/schedbench" -sizes "$sizes" -catalogs "$catalogs" -out "$d"
  "${CARGO_TARGET_DIR:-target}/$dir/examples/vs_karpenter" "$d" ${sizes//,/ } | tee "$d/table.md"
  tables+=("$d/table.md")
done
if [ "$repeat" != 1 ]; then
  # In run order (a glob would put run-10 before run-2).
  bash "$here/median.sh" "${tables[@]}" | tee "$run/summary.md"
fi
if [ "$profile" = release ] && dest=$(baseline_dir scheduling) && [ -n "$dest" ]; then
  if [ "$repeat" = 1 ]; then
    cp "$run/table.md" "$run"/karpenter-*.json "$dest/"
  else
    cp "$run/summary.md" "$dest/"
    for t in "${tables[@]}"; do
      d=$(dirname "$t")
      mkdir -p "$dest/$(basename "$d")" && cp "$t" "$d"/karpenter-*.json "$dest/$(basename "$d")/"
    done
  fi
  echo "scheduling.sh: the table for the docs in $dest/ (commit it with the figures it backs)" >&2
fi
