#!/usr/bin/env bash
# The one-command demo: a real local control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok, the Cluster API core manager), the test
# infrastructure provider and the karpenter-capi operator. A Deployment scales from 0 to
# DEMO_PODS (default 20): pending pods become NodeClaims, NodeClaims become Cluster API
# Machines, Machines become (kwok) Nodes, and the pods run. Then it scales back to 0 and disruption removes the empty nodes.
#
#   hack/demo.sh            # DEMO_PODS=20
#   DEMO_PODS=5 hack/demo.sh
#   hack/demo.sh --hub      # one hub for two workload clusters (hack/demo-hub.sh)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case ${1:-} in
  --hub) exec bash "$here/demo-hub.sh" ;;
  "") ;;
  *) echo "demo.sh: unknown argument $1 (--hub, or none)" >&2; exit 2 ;;
esac
repo=$(cd "$here/.." && pwd)
pods=${DEMO_PODS:-20}
t0=$SECONDS
say() { printf '[%4ss] %s\n' "$((SECONDS - t0))" "$*"; }
run_dir=$repo/.cache/demo
mkdir -p "$run_dir"

target=${CARGO_TARGET_DIR:-$repo/target}/debug
# DEMO_BUILT=1 (make test): this run's `cargo test --workspace --no-run` has just built both
# binaries from this tree; building them again here (other features, so other artifacts)
# would cost a minute and replace the binary the other test jobs are running.
if [ "${DEMO_BUILT:-}" = 1 ] && [ -x "$target/karpenter-capi" ] && [ -x "$target/testbed-provider" ]; then
  say "using karpenter-capi and the test provider make test just built"
else
  say "building karpenter-capi and the test provider (cached after the first run)"
  (cd "$repo" && cargo build -q --bin karpenter-capi && cargo build -q -p testbed --bin testbed-provider)
fi
out=$(bash "$here/testbed/build.sh")
kubectl=$out/bin/kubectl

say "starting etcd, kube-apiserver, controller-manager, scheduler, kwok and the Cluster API manager"
bash "$here/testbed/up.sh" --components all >/dev/null
export KUBECONFIG=$repo/.cache/testbed/kubeconfig
k() { "$kubectl" "$@"; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

say "starting the test infrastructure provider and a Cluster API Cluster demo/demo (zones zone-a, zone-b)"
k delete namespace demo --ignore-not-found --wait=true >/dev/null 2>&1 || true
"$target/testbed-provider" --kubeconfig "$KUBECONFIG" --cluster demo/demo --failure-domains zone-a,zone-b \
  > "$run_dir/provider.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 240); do grep -qs 'cluster ready' "$run_dir/provider.log" && break; sleep 0.5; done
grep -q 'cluster ready' "$run_dir/provider.log" || { cat "$run_dir/provider.log"; echo "demo: Cluster not ready" >&2; exit 1; }

say "applying templates (small/medium/large), the ClusterAPINodeClass, the NodePool and a Deployment at 0"
k apply -f "$repo/examples/demo/templates.yaml" -f "$repo/examples/demo/nodeclass.yaml" \
  -f "$repo/examples/demo/workload.yaml" >/dev/null

ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r metrics_port health_port <<< "$ports"
say "starting karpenter-capi run (metrics on 127.0.0.1:$metrics_port)"
"$target/karpenter-capi" run --kubeconfig "$KUBECONFIG" --disable-leader-election \
  --metrics-addr "127.0.0.1:$metrics_port" --health-addr "127.0.0.1:$health_port" \
  > "$run_dir/operator.log" 2>&1 &
pids+=($!)
k wait --for=condition=Ready clusterapinodeclass/default --timeout=120s >/dev/null
k wait --for=condition=Ready nodepool/default --timeout=60s >/dev/null
say "NodeClass ready: $(k get clusterapinodeclass default -o jsonpath='{.status.instanceTypes[*].name}')"
k get clusterapinodeclass default

status_line() {
  local nc m n r
  nc=$(k get nodeclaims --no-headers 2>/dev/null | wc -l)
  m=$(k get machines -n demo --no-headers 2>/dev/null | wc -l)
  n=$(k get nodes -l karpenter.sh/initialized=true --no-headers 2>/dev/null | wc -l)
  r=$(k get pods -n default -l app=inflate --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l)
  echo "nodeclaims=$nc machines=$m nodes(initialized)=$n pods running=$r/$1"
  [ "$r" -eq "$1" ]
}

say "scaling the Deployment from 0 to $pods pods (500m cpu, 512Mi each): they are Pending, no node fits"
k scale deployment inflate -n default --replicas "$pods" >/dev/null
# From here on it is the operator's job: the provisioner batches the pending pods, bin-packs
# them onto the cheapest templates and creates NodeClaims; each becomes an orphan Machine.
deadline=$((SECONDS + 240))
until line=$(status_line "$pods"); do
  say "$line"
  [ $SECONDS -lt $deadline ] || { say "timed out; operator log: $run_dir/operator.log"; exit 1; }
  sleep 3
done
say "$line"
echo
k get nodeclaims -o wide
echo
k get machines -n demo
echo
k get nodepool default
echo
say "karpenter-capi inspect (NodePool -> NodeClaim -> Machine -> Node):"
"$target/karpenter-capi" inspect --kubeconfig "$KUBECONFIG"
echo

say "scaling to 0: the nodes are empty; disruption removes them after consolidateAfter (10s) + 15s validation, 50% at a time"
k scale deployment inflate -n default --replicas 0 >/dev/null
deadline=$((SECONDS + 240))
until [ "$(k get machines -n demo --no-headers 2>/dev/null | wc -l)" -eq 0 ]; do
  say "nodeclaims=$(k get nodeclaims --no-headers 2>/dev/null | wc -l) machines=$(k get machines -n demo --no-headers 2>/dev/null | wc -l)"
  [ $SECONDS -lt $deadline ] || { say "timed out waiting for Machines to go"; exit 1; }
  sleep 3
done
say "all Machines and their Nodes are gone"
echo
echo "Summary: $pods pods -> NodeClaims -> Cluster API Machines -> Nodes -> Running, then back to 0, in $((SECONDS - t0))s."
echo "Operator metrics (Karpenter names):"
curl -s "127.0.0.1:$metrics_port/metrics" | grep -E '^karpenter_(nodeclaims_created|capi_machines_launched|nodes_created|nodeclaims_disrupted|nodeclaims_terminated|nodes_terminated)_total' | sed 's/^/  /'
echo "Operator log: $run_dir/operator.log"
echo "Explore: export KUBECONFIG=$KUBECONFIG; $kubectl get nodepools,nodeclaims,clusterapinodeclasses; $kubectl get machines -A; $target/karpenter-capi inspect"
echo "Stop:    bash hack/testbed/down.sh   (logs: $run_dir/)"
