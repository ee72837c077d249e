#!/usr/bin/env bash
# The hub demo (`hack/demo.sh --hub`): one karpenter-capi in the management cluster serves two
# workload clusters. A management control plane (etcd, kube-apiserver, controller-manager,
# scheduler, kwok, the Cluster API core manager) and two workload clusters beside it (their own
# kube-apiserver on the management etcd, with a controller-manager, a scheduler and kwok each);
# the test infrastructure provider creates each Cluster's Nodes in its workload cluster through
# the Cluster's kubeconfig Secret. Clusters alpha/alpha and beta/beta opt in with the label
# karpenter.cluster.x-k8s.io/enabled=true; `karpenter-capi run --mode hub` engages both. Each
# workload cluster's Deployment scales to DEMO_PODS (default 6): its NodeClaims become Machines
# in its own namespace of the management cluster; then both scale back to 0.
#
#   hack/demo.sh --hub
#   DEMO_PODS=10 hack/demo.sh --hub
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
pods=${DEMO_PODS:-6}
t0=$SECONDS
say() { printf '[%4ss] %s\n' "$((SECONDS - t0))" "$*"; }
run_dir=$repo/.cache/demo-hub
mkdir -p "$run_dir"

say "building karpenter-capi and the test provider (cached after the first run)"
(cd "$repo" && cargo build -q --bin karpenter-capi && cargo build -q -p testbed --bin testbed-provider)
target=${CARGO_TARGET_DIR:-$repo/target}/debug
out=$(bash "$here/testbed/build.sh")
kubectl=$out/bin/kubectl

say "starting the management cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok, Cluster API)"
bash "$here/testbed/up.sh" --components all >/dev/null
mgmt=$repo/.cache/testbed/kubeconfig
etcd=$(cat "$repo/.cache/testbed/run/etcd-url")
for c in alpha beta; do
  say "starting workload cluster $c (kube-apiserver on the management etcd under /demo-$c, controller-manager, scheduler, kwok)"
  bash "$here/testbed/up.sh" --dir "$run_dir/$c" --components controller-manager,scheduler,kwok \
    --etcd "$etcd" --etcd-prefix "/demo-$c" >/dev/null
done
m() { "$kubectl" --kubeconfig "$mgmt" "$@"; }
w() { local c=$1; shift; "$kubectl" --kubeconfig "$run_dir/$c/kubeconfig" "$@"; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

say "starting the test provider and the Clusters alpha/alpha and beta/beta (kubeconfig Secrets: their workload clusters)"
for c in alpha beta; do m delete namespace "$c" --ignore-not-found --wait=true >/dev/null 2>&1 || true; done
"$target/testbed-provider" --kubeconfig "$mgmt" \
  --cluster "alpha/alpha=$run_dir/alpha/kubeconfig" --cluster "beta/beta=$run_dir/beta/kubeconfig" \
  > "$run_dir/provider.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 240); do grep -qs 'cluster ready' "$run_dir/provider.log" && break; sleep 0.5; done
grep -q 'cluster ready' "$run_dir/provider.log" || { cat "$run_dir/provider.log"; echo "demo: Clusters not ready" >&2; exit 1; }

say "templates in each Cluster's namespace; NodeClass, NodePool and Deployment (0) in each workload cluster; opting both in"
for c in alpha beta; do
  sed "s/namespace: demo/namespace: $c/" "$repo/examples/demo/templates.yaml" | m apply -f - >/dev/null
  sed "s/clusterRef: {namespace: demo, name: demo}/clusterRef: {namespace: $c, name: $c}/" "$repo/examples/demo/nodeclass.yaml" \
    | w "$c" apply -f - >/dev/null
  w "$c" apply -f "$repo/examples/demo/workload.yaml" >/dev/null
  m label cluster.cluster.x-k8s.io -n "$c" "$c" karpenter.cluster.x-k8s.io/enabled=true --overwrite >/dev/null
done

read -r metrics_port health_port <<< "$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')"
say "starting karpenter-capi run --mode hub against the management cluster (metrics on 127.0.0.1:$metrics_port)"
"$target/karpenter-capi" run --mode hub --kubeconfig "$mgmt" --disable-leader-election \
  --metrics-addr "127.0.0.1:$metrics_port" --health-addr "127.0.0.1:$health_port" \
  > "$run_dir/operator.log" 2>&1 &
pids+=($!)
for c in alpha beta; do
  w "$c" wait --for=condition=Ready clusterapinodeclass/default --timeout=120s >/dev/null
  w "$c" wait --for=condition=Ready nodepool/default --timeout=60s >/dev/null
  say "$c engaged: its NodeClass is Ready"
done

running() { w "$1" get pods -n default -l app=inflate --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l; }
say "scaling both Deployments from 0 to $pods pods"
for c in alpha beta; do w "$c" scale deployment inflate -n default --replicas "$pods" >/dev/null; done
deadline=$((SECONDS + 240))
until [ "$(running alpha)" -eq "$pods" ] && [ "$(running beta)" -eq "$pods" ]; do
  say "alpha: $(running alpha)/$pods running, machines $(m get machines -n alpha --no-headers 2>/dev/null | wc -l); beta: $(running beta)/$pods running, machines $(m get machines -n beta --no-headers 2>/dev/null | wc -l)"
  [ $SECONDS -lt $deadline ] || { say "timed out; operator log: $run_dir/operator.log"; exit 1; }
  sleep 3
done
for c in alpha beta; do
  echo; say "workload cluster $c: NodeClaims, and its Machines in namespace $c of the management cluster"
  w "$c" get nodeclaims
  m get machines -n "$c"
done
echo
say "hub metrics:"
curl -s "127.0.0.1:$metrics_port/metrics" | grep -E '^karpenter_capi_cluster_(connected|engagements_total)' | sed 's/^/  /'

say "scaling both to 0: disruption removes the empty nodes in each cluster"
for c in alpha beta; do w "$c" scale deployment inflate -n default --replicas 0 >/dev/null; done
deadline=$((SECONDS + 240))
until [ "$(m get machines -n alpha --no-headers 2>/dev/null | wc -l)" -eq 0 ] && [ "$(m get machines -n beta --no-headers 2>/dev/null | wc -l)" -eq 0 ]; do
  say "machines: alpha $(m get machines -n alpha --no-headers 2>/dev/null | wc -l), beta $(m get machines -n beta --no-headers 2>/dev/null | wc -l)"
  [ $SECONDS -lt $deadline ] || { say "timed out waiting for Machines to go"; exit 1; }
  sleep 3
done
echo
echo "Summary: one hub served two workload clusters: $pods pods each -> NodeClaims -> Machines in each Cluster's namespace -> Nodes -> Running, then back to 0, in $((SECONDS - t0))s."
echo "Operator log: $run_dir/operator.log"
echo "Explore: $kubectl --kubeconfig $mgmt get clusters,machines -A; $kubectl --kubeconfig $run_dir/alpha/kubeconfig get nodepools,nodeclaims,nodes"
echo "Stop:    for c in alpha beta; do bash hack/testbed/down.sh --dir $run_dir/\$c; done; bash hack/testbed/down.sh"
