#!/usr/bin/env bash
# End-to-end scale-out, karpenter-capi and Karpenter side by side, in one run.
#
#   hack/bench/e2e.sh                 # 1000 pods, both
#   hack/bench/e2e.sh --pods 5000     # (or --large)
#   hack/bench/e2e.sh --only ours     # or --only karpenter; E2E_LABEL=after names the run
#   hack/bench/e2e.sh --provider kwok # ours with its kwok provider (default clusterapi), on a
#                                     # testbed identical to Karpenter's; both: ours over Cluster
#                                     # API, ours over kwok and Karpenter, one three-way table
#   hack/bench/e2e.sh --kube-api-qps 200   # kube-controller-manager, kube-scheduler and Cluster
#                                     # API manager client rate limit (default theirs, 20 / 50 /
#                                     # 100 QPS: the ReplicaSet then creates about 20 pods/s on
#                                     # both sides)
#   hack/bench/e2e.sh --cycles 2     # 0 -> N -> 0 twice: does RSS come back after each burst?
#   E2E_FEATURES=system-alloc E2E_WRAP="heaptrack -o /tmp/op" hack/bench/e2e.sh --only ours  # run our operator under a
#                                     # profiler (its RSS/CPU figures then include the wrapper)
#
# karpenter-capi (--provider clusterapi): a testbed with every component (Cluster API included)
# and the kube-apiserver audit log, the test infrastructure provider, the demo's templates
# (small/medium/large) and the release operator. Karpenter: its kwok provider
# (sigs.k8s.io/karpenter/kwok, pinned in hack/bench/go/go.mod, built once by
# hack/bench/build.sh) on a fresh testbed without Cluster API (up.sh --no-cluster-api) with
# Karpenter's CRDs and instance types of the same shapes, prices and zones. karpenter-capi-kwok
# (--provider kwok): the release operator with its kwok provider (`run --provider kwok`) on a
# testbed like Karpenter's (same components, no Cluster API, the same kwok stages) with this
# project's CRDs, the same instance-type file (e2e/kwok-instance-types.json) and the same
# NodePool and KWOKNodeClass (e2e/karpenter.yaml). On each, the demo's Deployment (500m /
# 512Mi per pod) goes from 0 to N pods and back to 0 while bench-e2e
# (crates/testbed/src/bin/bench-e2e.rs) watches; it reports times, the per-pod breakdown, the
# autoscaler's peak RSS and CPU, and its API requests from the audit log (by User-Agent
# prefix: karpenter-capi/ and karpenter/). Results: .cache/bench/e2e/; the summaries (JSON,
# reports, the side-by-side table) are also copied to hack/bench/baseline/
# <date>-e2e-<pods>[-qps<N>][-<label>][-kwok|-both]/ to be committed with the figures the docs
# quote (BENCH_BASELINE=0: not). Figures are reported, not asserted.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=baseline.sh
source "$here/baseline.sh"
pods=${E2E_PODS:-1000}
only=
qps=()
cycles=1
provider=clusterapi
while [ $# -gt 0 ]; do
  case $1 in
    --pods) pods=$2; shift 2 ;;
    --large) pods=5000; shift ;;
    --only) only=$2; shift 2 ;;
    --kube-api-qps) qps=(--kube-api-qps "$2"); shift 2 ;;
    --cycles) cycles=$2; shift 2 ;;
    --provider) provider=$2; shift 2 ;;
    -h|--help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "e2e.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $provider in clusterapi|kwok|both) ;;
  *) echo "e2e.sh: --provider clusterapi|kwok|both" >&2; exit 2 ;;
esac
case $only in ""|ours|karpenter) ;;
  *) echo "e2e.sh: --only ours|karpenter" >&2; exit 2 ;;
esac
# Our runs' labels: over Cluster API, over kwok.
capi_label=${E2E_LABEL:-karpenter-capi}
kwok_label=$capi_label-kwok
t0=$SECONDS
say() { printf '[%4ss] %s\n' "$((SECONDS - t0))" "$*" >&2; }
out=$repo/.cache/bench/e2e
mkdir -p "$out"

# What this run uses: bench-e2e; our operator unless --only karpenter; the test infrastructure
# provider when ours runs over Cluster API.
bins=(--bin bench-e2e)
if [ "$only" != karpenter ]; then
  bins+=(-p karpenter-capi --bin karpenter-capi ${E2E_FEATURES:+--features "karpenter-capi/$E2E_FEATURES"})
  [ "$provider" = kwok ] || bins+=(--bin testbed-provider)
fi
say "building (release) ${bins[*]}; testbed and Karpenter binaries (cached)"
(cd "$repo" && cargo build -q --release --locked -p testbed "${bins[@]}")
target=${CARGO_TARGET_DIR:-$repo/target}/release
tb=$(bash "$repo/hack/testbed/build.sh")
kubectl=$tb/bin/kubectl
kb=$(bash "$here/build.sh" karpenter-kwok)

pids=()
dirs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in "${dirs[@]}"; do bash "$repo/hack/testbed/down.sh" --dir "$d" --quiet || true; done
}
trap cleanup EXIT INT TERM

ports() { python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))'; }
up() { # up NAME ARGS... : a fresh testbed in $out/NAME with the audit log
  local d=$out/$1; shift
  bash "$repo/hack/testbed/down.sh" --dir "$d" --purge --quiet || true
  dirs+=("$d")
  bash "$repo/hack/testbed/up.sh" --dir "$d" --audit-log --quiet ${qps[@]+"${qps[@]}"} "$@" >/dev/null
  export KUBECONFIG=$d/kubeconfig
}
wait_for() { # wait_for SECONDS WHAT COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { say "timed out waiting for $what"; return 1; }
    sleep 1
  done
}
bench() { # bench LABEL PID AGENT METRICS_PORT ARGS...
  local label=$1 pid=$2 agent=$3 mport=$4; shift 4
  say "$label: scaling inflate 0 -> $pods -> 0"
  "$target/bench-e2e" run --kubeconfig "$KUBECONFIG" --pods "$pods" --label "$label" \
    --agent "$agent" --pid "$pid" --audit-log "$out/$label/logs/audit.log" \
    --metrics-url "http://127.0.0.1:$mport/metrics" --metric karpenter_nodeclaims_created_total \
    --cycles "$cycles" --out "$out/$label-$pods.json" "$@" | tee "$out/$label-$pods.txt"
}

run_ours() {
  local label=$capi_label
  say "$label: testbed (all components, audit log), test provider, Cluster demo/demo"
  up "$label" --components all
  # No simulated instance boot (--provision-delay 0s): Karpenter's kwok provider creates the
  # Node inside Create, so neither side waits for a pretend instance.
  "$target/testbed-provider" --kubeconfig "$KUBECONFIG" --cluster demo/demo --failure-domains zone-a,zone-b \
    --provision-delay 0s \
    > "$out/$label/logs/provider.log" 2>&1 &
  pids+=($!)
  wait_for 120 "the Cluster" grep -q 'cluster ready' "$out/$label/logs/provider.log"
  "$kubectl" apply -f "$repo/examples/demo/templates.yaml" -f "$here/e2e/capi.yaml" \
    -f "$repo/examples/demo/workload.yaml" >/dev/null
  local mport hport; read -r mport hport <<< "$(ports)"
  ${E2E_WRAP:-} "$target/karpenter-capi" run --kubeconfig "$KUBECONFIG" --disable-leader-election \
    --metrics-addr "127.0.0.1:$mport" --health-addr "127.0.0.1:$hport" > "$out/$label/logs/operator.log" 2>&1 &
  local op=$!; pids+=("$op")
  "$kubectl" wait --for=condition=Ready clusterapinodeclass/default nodepool/default --timeout=120s >/dev/null
  bench "$label" "$op" karpenter-capi/ "$mport" --machines --metric karpenter_capi_machines_launched_total
  kill "$op" 2>/dev/null || true
}

# The testbed of both kwok sides: no Cluster API (neither its CRDs nor its manager).
bare=(--no-cluster-api --components controller-manager,scheduler,kwok)

run_ours_kwok() {
  local label=$kwok_label
  say "$label: testbed (no Cluster API, audit log), our kwok provider"
  up "$label" "${bare[@]}"
  "$kubectl" apply -f "$here/e2e/karpenter.yaml" -f "$repo/examples/demo/workload.yaml" >/dev/null
  local mport hport; read -r mport hport <<< "$(ports)"
  ${E2E_WRAP:-} "$target/karpenter-capi" run --provider kwok --instance-types-file "$here/e2e/kwok-instance-types.json" \
    --kubeconfig "$KUBECONFIG" --disable-leader-election \
    --metrics-addr "127.0.0.1:$mport" --health-addr "127.0.0.1:$hport" > "$out/$label/logs/operator.log" 2>&1 &
  local op=$!; pids+=("$op")
  wait_for 120 "our NodePool Ready" "$kubectl" wait --for=condition=Ready nodepool/default --timeout=5s
  bench "$label" "$op" karpenter-capi/ "$mport"
  kill "$op" 2>/dev/null || true
}

run_karpenter() {
  local label=karpenter
  say "$label: testbed (no Cluster API, audit log) with Karpenter's CRDs, its kwok provider"
  up "$label" "${bare[@]}" --crds "$kb/crds/karpenter.yaml" --crds "$kb/crds/kwok.yaml"
  "$kubectl" apply -f "$here/e2e/karpenter.yaml" -f "$repo/examples/demo/workload.yaml" >/dev/null
  local mport hport; read -r mport hport <<< "$(ports)"
  KUBECONFIG=$KUBECONFIG DISABLE_LEADER_ELECTION=true METRICS_PORT=$mport HEALTH_PROBE_PORT=$hport \
    INSTANCE_TYPES_FILE_PATH=$here/e2e/kwok-instance-types.json LOG_LEVEL=info \
    "$kb/karpenter-kwok" > "$out/$label/logs/karpenter.log" 2>&1 &
  local op=$!; pids+=("$op")
  wait_for 120 "Karpenter's NodePool Ready" "$kubectl" wait --for=condition=Ready nodepool/default --timeout=5s
  bench "$label" "$op" karpenter/ "$mport"
  kill "$op" 2>/dev/null || true
}

# Ours: per provider, the labels of the runs.
case $provider in
  clusterapi) ours=("$capi_label") ;;
  kwok) ours=("$kwok_label") ;;
  both) ours=("$capi_label" "$kwok_label") ;;
esac
if [ "$only" != karpenter ]; then
  for label in "${ours[@]}"; do
    if [ "$label" = "$kwok_label" ]; then run_ours_kwok; else run_ours; fi
  done
fi
[ "$only" = ours ] || run_karpenter
compared=()
for label in "${ours[@]}"; do compared+=("$out/$label-$pods.json"); done
if [ -z "$only" ]; then
  echo
  echo "Side by side, $pods pods, $(nproc) cores, $(date -u +%F) (hack/bench/e2e.sh --pods $pods$([ "$provider" = clusterapi ] || echo " --provider $provider")):"
  "$target/bench-e2e" compare "${compared[@]}" "$out/karpenter-$pods.json" | tee "$out/compare-$pods.md"
fi
# This run's summaries (not an earlier run's left in $out) for the docs.
ran=()
if [ "$only" != karpenter ]; then
  for label in "${ours[@]}"; do ran+=("$label-$pods.json" "$label-$pods.txt"); done
fi
[ "$only" = ours ] || ran+=("karpenter-$pods.json" "karpenter-$pods.txt")
[ -n "$only" ] || ran+=("compare-$pods.md")
name=e2e-$pods${qps[1]:+-qps${qps[1]}}
[ "$cycles" = 1 ] || name=$name-cycles$cycles
[ "$capi_label" = karpenter-capi ] || name=$name-$E2E_LABEL
[ "$provider" = clusterapi ] || name=$name-$provider
dest=$(baseline_dir "$name")
if [ -n "$dest" ]; then
  for f in "${ran[@]}"; do cp "$out/$f" "$dest/"; done
  say "summaries for the docs in ${dest#"$repo"/}/ (commit them with the figures they back)"
fi
say "done; logs and JSON in $out"
