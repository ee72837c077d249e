#!/usr/bin/env bash
# Starts a real local control plane on loopback: etcd, kube-apiserver (RBAC, client-cert
# auth) and, by default, kube-controller-manager, kube-scheduler and kwok; optionally the
# Cluster API core manager. Installs the Cluster API CRDs (unless --no-cluster-api) and this
# project's CRDs (crds/). Returns when every started component reports healthy and prints
# `export KUBECONFIG=...`.
#
#   hack/testbed/up.sh [--dir DIR] [--components LIST] [--crds PATH]... [--audit-log] [--kube-api-qps N]
#                      [--no-cluster-api] [--etcd URL --etcd-prefix PREFIX] [--watch-pid PID] [--quiet]
#
#   --dir DIR          state, logs, certs and kubeconfig (default: .cache/testbed/run;
#                      the default instance also copies its kubeconfig to .cache/testbed/kubeconfig)
#   --components LIST  comma-separated, from: controller-manager, scheduler, kwok, capi, none
#                      (default: controller-manager,scheduler,kwok; "all" adds capi)
#   --crds PATH        extra CRD file or directory to install (repeatable)
#   --audit-log        kube-apiserver writes an audit log of every request (Metadata level,
#                      JSON lines) to DIR/logs/audit.log (also TESTBED_AUDIT_LOG=1; with
#                      TESTBED_AUDIT_BODIES=1 also the bodies of writes to karpenter.sh objects)
#   --kube-api-qps N   client rate limit of kube-controller-manager, kube-scheduler and the
#                      Cluster API manager (burst 2N; default theirs: 20, 50 and 100 QPS), e.g.
#                      so a ReplicaSet of thousands of pods is created faster than 20 pods/s
#                      (also TESTBED_KUBE_API_QPS)
#   --no-cluster-api   a control plane without Cluster API: its CRDs (cluster.x-k8s.io,
#                      bootstrap.cluster.x-k8s.io) are not installed, so the API server does not
#                      serve Machines or Clusters; refuses the capi component. This project's
#                      CRDs (crds/) and --crds are installed as always (e.g. for the kwok provider)
#   --etcd URL         use this running etcd (another testbed's) instead of starting one, with
#   --etcd-prefix P    kube-apiserver's --etcd-prefix P: several API servers (e.g. the workload
#                      clusters of a hub test) share one etcd, each its own key space
#   --watch-pid PID    stop this testbed when process PID exits (used by the Rust testbed)
#
# With TESTBED_START_LOG=FILE each start appends a line to FILE (time, start-up duration,
# the --watch-pid process's binary, components): how test runs count their control planes.
#
# Running it again on a live testbed is safe: it reports the running instance and starts the
# components that are missing. hack/testbed/down.sh stops exactly what this started.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${TESTBED_CACHE:-$repo/.cache/testbed}
dir=$cache/run
components=controller-manager,scheduler,kwok
extra_crds=()
watch_pid=
quiet=
audit_log=${TESTBED_AUDIT_LOG:-}
kube_api_qps=${TESTBED_KUBE_API_QPS:-}
etcd_url=
etcd_prefix=/registry
cluster_api=1
[ "$audit_log" = 0 ] && audit_log=

while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --components) components=$2; shift 2 ;;
    --crds) extra_crds+=("$2"); shift 2 ;;
    --audit-log) audit_log=1; shift ;;
    --kube-api-qps) kube_api_qps=$2; shift 2 ;;
    --no-cluster-api) cluster_api=; shift ;;
    --etcd) etcd_url=$2; shift 2 ;;
    --etcd-prefix) etcd_prefix=$2; shift 2 ;;
    --watch-pid) watch_pid=$2; shift 2 ;;
    --quiet) quiet=1; shift ;;
    -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "up.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$components" = all ] && components=controller-manager,scheduler,kwok,capi
[ "$components" = none ] && components=
IFS=, read -r -a want <<< "$components"
for c in "${want[@]}"; do
  case $c in controller-manager|scheduler|kwok|capi) ;;
    *) echo "up.sh: unknown component '$c' (controller-manager, scheduler, kwok, capi)" >&2; exit 2 ;;
  esac
  if [ "$c" = capi ] && [ -z "$cluster_api" ]; then
    echo "up.sh: --no-cluster-api and the capi component exclude each other" >&2; exit 2
  fi
done

say() { [ -n "$quiet" ] || echo "testbed: $*" >&2; }
die() { # die MESSAGE [COMPONENT]: the component's log tail helps more than the message
  echo "testbed: ERROR: $1" >&2
  local f=$dir/logs/${2:-kube-apiserver}.log
  [ -f "$f" ] && { echo "--- last lines of $f" >&2; tail -n 20 "$f" >&2; }
  exit 1
}
t0=$(date +%s.%N)
elapsed() { echo "$(date +%s.%N) $t0" | awk '{printf "%.1fs", $1-$2}'; }

out=$("$here/build.sh")
bin=${TESTBED_BIN_DIR:-$out/bin}
crds=$out/crds
mkdir -p "$dir/logs" "$dir/pki"
dir=$(cd "$dir" && pwd)
pids=$dir/pids
kubeconfig=$dir/kubeconfig
pki=$dir/pki

# --- process bookkeeping -------------------------------------------------------------
ours() { # ours PID: alive and running one of our binaries for this dir
  # (During exec /proc/PID/cmdline can read empty, and before exec it is this script's:
  # look a few times before saying no.)
  local pid=$1 i cmd
  for i in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "$pid" 2>/dev/null || return 1
    cmd=$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" || true)
    case $cmd in "$bin"/*"$dir"*) return 0 ;; esac
    [ -n "$cmd" ] && [ "${cmd#*up.sh}" = "$cmd" ] && return 1
    sleep 0.05
  done
  return 1
}
running() { # running NAME -> prints pid when NAME (started by us, for this dir) is alive
  local name=$1 pid
  [ -f "$pids" ] || return 1
  pid=$(awk -v n="$name" '$1 == n { print $2 }' "$pids" | tail -n 1)
  [ -n "$pid" ] && ours "$pid" && echo "$pid"
}
start() { # start NAME CMD... : run detached in its own session, log to logs/NAME.log
  local name=$1; shift
  if running "$name" >/dev/null; then return 0; fi
  setsid "$@" > "$dir/logs/$name.log" 2>&1 < /dev/null &
  local pid=$! i
  echo "$name $pid" >> "$pids"
  # Wait until the child has exec'd the binary (before that its command line is ours).
  for i in $(seq 1 250); do
    case $(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" || true) in "$1"*) return 0 ;; esac
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.02
  done
}
free_ports() { # free_ports N -> N distinct free loopback ports
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}
soft=
fail() { # fail MESSAGE COMPONENT: dies, or returns 1 while $soft is set (a retried start)
  if [ -n "$soft" ]; then say "$1"; return 1; fi
  die "$1" "$2"
}
wait_http() { # wait_http NAME URL SECONDS PATTERN [curl args...] -> until the body matches
  local name=$1 url=$2 limit=$3 pattern=$4; shift 4
  local deadline=$((SECONDS + limit))
  while [ $SECONDS -lt $deadline ]; do
    running "$name" >/dev/null || { fail "$name exited during start-up" "$name"; return 1; }
    curl -s --max-time 2 "$@" "$url" 2>/dev/null | grep -qE "$pattern" && return 0
    sleep 0.2
  done
  fail "$name not healthy at $url after ${limit}s" "$name"
}

# --- certificates (generated once per dir) --------------------------------------------
cert() { # cert NAME SUBJ [SAN] : EC P-256 key + cert signed by the testbed CA
  local name=$1 subj=$2 san=${3:-}
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/$name.key" 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  local ext="basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth"
  [ -n "$san" ] && ext="$ext
subjectAltName=$san"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile <(echo "$ext") -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr"
}
if [ ! -s "$pki/admin.crt" ]; then
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=karpenter-capi-testbed-ca" -days 3650 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$pki/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc"
  cert webhook "/CN=localhost" "IP:127.0.0.1,DNS:localhost"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/sa.key" 2>/dev/null
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  cert admin "/O=system:masters/CN=testbed-admin"
fi

# --- etcd + kube-apiserver ------------------------------------------------------------
curl_api=(--cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key")
audit_args=()
if [ -n "$audit_log" ]; then
  # Who did what: verb, resource, user, userAgent, response code; no bodies. Blocking mode
  # (the log backend's default): an event is in the file when its response is sent.
  # TESTBED_AUDIT_BODIES=1 adds the request bodies of writes to karpenter.sh objects (who
  # wrote which field), at the cost of a much larger log.
  bodies=
  if [ -n "${TESTBED_AUDIT_BODIES:-}" ]; then
    bodies='- level: Request
  verbs: [create, update, patch, delete]
  resources: [{group: karpenter.sh}]'
  fi
  cat > "$dir/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
$bodies
- level: Metadata
EOF
  audit_args=(--audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/logs/audit.log"
    --audit-log-format json --audit-log-mode blocking)
fi
start_core() { # etcd + kube-apiserver on fresh free ports, until /readyz
  read -r ETCD_PORT PEER_PORT API_PORT KCM_PORT SCHED_PORT KWOK_PORT CAPI_HEALTH CAPI_WEBHOOK CAPI_METRICS <<< "$(free_ports 9)"
  declare -p ETCD_PORT PEER_PORT API_PORT KCM_PORT SCHED_PORT KWOK_PORT CAPI_HEALTH CAPI_WEBHOOK CAPI_METRICS \
    | sed 's/^declare -- //' > "$dir/ports"
  local etcd=$etcd_url
  if [ -z "$etcd" ]; then
    etcd=http://127.0.0.1:$ETCD_PORT
    start etcd "$bin/etcd" --name testbed --data-dir "$dir/etcd" \
      --listen-client-urls "$etcd" --advertise-client-urls "$etcd" \
      --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
      --initial-cluster "testbed=http://127.0.0.1:$PEER_PORT" --unsafe-no-fsync --log-level warn
    wait_http etcd "$etcd/health" 30 '"health":"true"' || return 1
  fi
  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "$etcd" --etcd-prefix "$etcd_prefix" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --secure-port "$API_PORT" --cert-dir "$dir/apiserver" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" --service-cluster-ip-range 10.96.0.0/16 \
    --authorization-mode RBAC --allow-privileged=true --disable-admission-plugins ServiceAccount \
    --enable-priority-and-fairness=false --profiling=false --storage-backend etcd3 --v 0 \
    ${audit_args[@]+"${audit_args[@]}"}
  wait_http kube-apiserver "https://127.0.0.1:$API_PORT/readyz" 90 '^ok$' "${curl_api[@]}"
}
if api_pid=$(running kube-apiserver) && [ -s "$dir/ports" ]; then
  # shellcheck source=/dev/null
  source "$dir/ports"
  say "kube-apiserver already running (pid $api_pid) at https://127.0.0.1:$API_PORT"
  wait_http kube-apiserver "https://127.0.0.1:$API_PORT/readyz" 90 '^ok$' "${curl_api[@]}"
else
  # A free port can be taken by another process between the pick and the bind (parallel
  # testbeds): start again on other ports, up to three times.
  for attempt in 1 2 3; do
    [ -f "$pids" ] && { "$here/down.sh" --dir "$dir" --quiet || true; }
    soft=1
    if start_core; then soft=; break; fi
    soft=
    [ "$attempt" -lt 3 ] || die "kube-apiserver did not start in 3 attempts" kube-apiserver
    say "start-up attempt $attempt failed; retrying on other ports"
    rm -rf "$dir/etcd"
  done
fi

# Where this testbed's data lives (what --etcd of a testbed sharing it names).
echo "${etcd_url:-http://127.0.0.1:$ETCD_PORT}" > "$dir/etcd-url"

b64() { base64 -w0 < "$1"; }
cat > "$kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(b64 "$pki/ca.crt")
users:
- name: testbed-admin
  user:
    client-certificate-data: $(b64 "$pki/admin.crt")
    client-key-data: $(b64 "$pki/admin.key")
contexts:
- name: testbed
  context: {cluster: testbed, user: testbed-admin}
current-context: testbed
EOF
mv "$kubeconfig.tmp" "$kubeconfig"
[ "$dir" = "$cache/run" ] && cp "$kubeconfig" "$cache/kubeconfig"
kc=(--kubeconfig "$kubeconfig")
say "kube-apiserver ready at https://127.0.0.1:$API_PORT ($(elapsed))"

# --- CRDs -----------------------------------------------------------------------------
crd_files=()
[ -n "$cluster_api" ] && crd_files+=("$crds/cluster-api.yaml" "$crds/bootstrap-kubeadm.yaml")
[ -d "$repo/crds" ] && compgen -G "$repo/crds/*.yaml" >/dev/null && crd_files+=("$repo/crds")
crd_files+=(${extra_crds[@]+"${extra_crds[@]}"})
apply_args=()
for f in ${crd_files[@]+"${crd_files[@]}"}; do apply_args+=(-f "$f"); done
[ ${#apply_args[@]} -gt 0 ] || die "no CRDs to install (crds/ is empty and no --crds)" crds
"$bin/kubectl" "${kc[@]}" apply --server-side --force-conflicts -o name "${apply_args[@]}" > "$dir/logs/crds.log" 2>&1 \
  || die "installing CRDs failed" crds
# `kubectl wait` errors (instead of waiting) on a CRD whose status is not written yet: retry.
established=
for _ in $(seq 1 60); do
  if "$bin/kubectl" "${kc[@]}" wait --for condition=established --timeout=30s crd --all >> "$dir/logs/crds.log" 2>&1; then
    established=1; break
  fi
  sleep 0.5
done
[ -n "$established" ] || die "CRDs not Established" crds
say "CRDs installed: $(grep -c customresourcedefinition "$dir/logs/crds.log")$([ -n "$cluster_api" ] || echo ', none of Cluster API') ($(elapsed))"

# --- optional components --------------------------------------------------------------
has() { local c; for c in "${want[@]}"; do [ "$c" = "$1" ] && return 0; done; return 1; }
qps=()
[ -n "$kube_api_qps" ] && qps=(--kube-api-qps "$kube_api_qps" --kube-api-burst "$((kube_api_qps * 2))")
start_kcm() {
  start kube-controller-manager "$bin/kube-controller-manager" "${kc[@]}" \
    --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=false --controllers '*,-csrsigning,-nodeipam' --v 0 \
    ${qps[@]+"${qps[@]}"}
}
health_kcm() { wait_http kube-controller-manager "https://127.0.0.1:$KCM_PORT/healthz" 60 '^ok$' -k; }
start_scheduler() {
  start kube-scheduler "$bin/kube-scheduler" "${kc[@]}" \
    --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --v 0 \
    ${qps[@]+"${qps[@]}"}
}
health_scheduler() { wait_http kube-scheduler "https://127.0.0.1:$SCHED_PORT/healthz" 60 '^ok$' -k; }
start_kwok() {
  start kwok "$bin/kwok" "${kc[@]}" --config "$here/kwok-stages.yaml" \
    --server-address "127.0.0.1:$KWOK_PORT" --cidr 10.244.0.1/16 --node-ip 10.0.0.1
}
health_kwok() { wait_http kwok "http://127.0.0.1:$KWOK_PORT/healthz" 60 '^ok$'; }
start_capi() {
  # The manager always serves webhooks: it gets a self-signed serving cert; no webhook
  # configurations are installed (CRDs come from bases, conversion None).
  mkdir -p "$dir/capi-certs"
  cp "$pki/webhook.crt" "$dir/capi-certs/tls.crt"; cp "$pki/webhook.key" "$dir/capi-certs/tls.key"
  KUBECONFIG=$kubeconfig start cluster-api "$bin/cluster-api" "${kc[@]}" --leader-elect=false \
    --health-addr "127.0.0.1:$CAPI_HEALTH" --webhook-port "$CAPI_WEBHOOK" --webhook-cert-dir "$dir/capi-certs" \
    --diagnostics-address "127.0.0.1:$CAPI_METRICS" --insecure-diagnostics \
    ${qps[@]+"${qps[@]}"}
}
health_capi() { wait_http cluster-api "http://127.0.0.1:$CAPI_HEALTH/readyz" 120 '^ok$'; }
# A port picked free can be taken before the component binds it, seconds later (another
# testbed, or the ephemeral port of some outgoing connection): a component that exited with
# "address already in use" starts again on fresh ports, up to three times.
healthy() { # healthy NAME KEY PORT_VAR... : waits for health_KEY, restarting with start_KEY
  local name=$1 key=$2 attempt; shift 2
  for attempt in 1 2 3; do
    soft=1
    if "health_$key"; then soft=; return 0; fi
    soft=
    if [ "$attempt" -eq 3 ] || running "$name" >/dev/null \
      || ! grep -q "address already in use" "$dir/logs/$name.log" 2>/dev/null; then
      die "$name did not start (attempt $attempt)" "$name"
    fi
    say "$name: a port was taken before it bound it (attempt $attempt); starting it on other ports"
    cp "$dir/logs/$name.log" "$dir/logs/$name.attempt$attempt.log"
    read -r "$@" <<< "$(free_ports $#)"
    declare -p ETCD_PORT PEER_PORT API_PORT KCM_PORT SCHED_PORT KWOK_PORT CAPI_HEALTH CAPI_WEBHOOK CAPI_METRICS \
      | sed 's/^declare -- //' > "$dir/ports"
    "start_$key"
  done
}
has controller-manager && start_kcm
has scheduler && start_scheduler
has kwok && start_kwok
has capi && start_capi

# --- health ---------------------------------------------------------------------------
has controller-manager && healthy kube-controller-manager kcm KCM_PORT
has scheduler && healthy kube-scheduler scheduler SCHED_PORT
has kwok && healthy kwok kwok KWOK_PORT
has capi && healthy cluster-api capi CAPI_HEALTH CAPI_WEBHOOK CAPI_METRICS

if [ -n "$watch_pid" ]; then
  # Stop the testbed when the owning process is gone, even if it was killed.
  setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -f "$2/pids" ]; do sleep 1; done; "$3" --dir "$2" --quiet --purge' \
    testbed-watchdog "$watch_pid" "$dir" "$here/down.sh" > /dev/null 2>&1 < /dev/null &
fi
say "ready in $(elapsed): ${components:-apiserver only}; logs in $dir/logs"
# One line per start for whoever counts them (e.g. a test run): time, seconds it took, the
# process it serves (the test binary) and the components.
if [ -n "${TESTBED_START_LOG:-}" ]; then
  owner=$( [ -n "$watch_pid" ] && basename "$(readlink "/proc/$watch_pid/exe" 2>/dev/null)" 2>/dev/null || echo "-")
  echo "$(date +%s) $(elapsed) ${owner:--} ${components:-apiserver}" >> "$TESTBED_START_LOG"
fi
echo "export KUBECONFIG=$kubeconfig"
