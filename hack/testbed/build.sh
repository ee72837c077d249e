#!/usr/bin/env bash
# Builds the pinned testbed binaries from Go modules into a git-ignored cache:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  (k8s.io/kubernetes)
#   etcd (go.etcd.io/etcd), kwok (sigs.k8s.io/kwok), cluster-api core manager
# plus the Cluster API CRDs (with the labels kustomize would add).
# Already-built pieces are skipped. Prints the directory holding bin/ and crds/.
#
# Env: TESTBED_CACHE (default <repo>/.cache/testbed), TESTBED_BIN_DIR (use these
# binaries instead of building; CRDs are still extracted from the Go module cache).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/go.sh
source "$here/../lib/go.sh"
cache=${TESTBED_CACHE:-$(cd "$here/../.." && pwd)/.cache/testbed}
out="$cache/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-capi-$CAPI_VERSION"
bin="$out/bin"
mkdir -p "$bin" "$out/crds"
# One build at a time (parallel test processes all call this script).
exec 9> "$cache/.build.lock"
flock 9
log() { echo "testbed/build: $*" >&2; }
export GOFLAGS="${GOFLAGS:-} -trimpath"
export CGO_ENABLED=0

binary() { # the binary name for a Go package path
  case $1 in sigs.k8s.io/cluster-api/core) echo cluster-api ;; *) basename "$1" ;; esac
}
build() { # build <module dir> <ldflags> <package>... ; skips packages whose binary exists
  local dir=$1 ldflags=$2; shift 2
  local todo=() p
  for p in "$@"; do [ -x "$bin/$(binary "$p")" ] || todo+=("$p"); done
  [ ${#todo[@]} -eq 0 ] && return 0
  log "building ${todo[*]##*/} (first time takes minutes)"
  local t0=$SECONDS
  local tmp; tmp=$(mktemp -d "$out/build.XXXX")
  (cd "$here/go/$dir" && go build -ldflags "-s -w $ldflags" -o "$tmp/" "${todo[@]}")
  for p in "${todo[@]}"; do mv "$tmp/$(basename "$p")" "$bin/$(binary "$p")"; done
  rmdir "$tmp"
  log "built ${todo[*]##*/} in $((SECONDS - t0))s"
}

if [ -n "${TESTBED_BIN_DIR:-}" ]; then
  bin=$TESTBED_BIN_DIR
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok cluster-api; do
    [ -x "$bin/$b" ] || log "warning: TESTBED_BIN_DIR has no $b"
  done
else
  minor=${K8S_VERSION#*.}; minor=${minor%%.*}
  kv=k8s.io/component-base/version
  kube_ld="-X $kv.gitVersion=v$K8S_VERSION -X $kv.gitMajor=1 -X $kv.gitMinor=$minor -X $kv.gitTreeState=clean"
  kube_ld="$kube_ld -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  build kube "$kube_ld" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  build etcd "" karpenter-capi/hack/testbed/etcd
  build kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
  build capi "-X sigs.k8s.io/cluster-api/version.gitVersion=v$CAPI_VERSION -X sigs.k8s.io/cluster-api/version.gitMajor=1" sigs.k8s.io/cluster-api/core
fi

# Cluster API CRDs from the same module, labelled as CAPI's kustomize config labels them.
if [ ! -s "$out/crds/cluster-api.yaml" ]; then
  capi_dir=$(cd "$here/go/capi" && go mod download -json sigs.k8s.io/cluster-api | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  k=$(mktemp -d)
  cp "$capi_dir"/core/config/crd/bases/*.yaml "$k/"
  mkdir "$k/bootstrap" && cp "$capi_dir"/bootstrap/kubeadm/config/crd/bases/*.yaml "$k/bootstrap/"
  chmod -R u+w "$k"
  {
    echo "resources:"; (cd "$k" && ls ./*.yaml | grep -v kustomization | sed 's#^\./#- #')
    echo "labels:"; echo "- pairs:"; echo "    cluster.x-k8s.io/provider: cluster-api"
  } > "$k/kustomization.yaml"
  {
    echo "resources:"; (cd "$k/bootstrap" && ls ./*.yaml | grep -v kustomization | sed 's#^\./#- #')
    echo "labels:"; echo "- pairs:"; echo "    cluster.x-k8s.io/provider: bootstrap-kubeadm"
    echo "    cluster.x-k8s.io/v1beta1: v1beta1"; echo "    cluster.x-k8s.io/v1beta2: v1beta2"
  } > "$k/bootstrap/kustomization.yaml"
  "$bin/kubectl" kustomize "$k" > "$out/crds/cluster-api.yaml.tmp"
  "$bin/kubectl" kustomize "$k/bootstrap" > "$out/crds/bootstrap-kubeadm.yaml.tmp"
  mv "$out/crds/bootstrap-kubeadm.yaml.tmp" "$out/crds/bootstrap-kubeadm.yaml"
  mv "$out/crds/cluster-api.yaml.tmp" "$out/crds/cluster-api.yaml"
  rm -rf "$k"
fi
ln -sfn "$bin" "$cache/bin" 2>/dev/null || true
ln -sfn "$out/crds" "$cache/crds" 2>/dev/null || true
echo "$out"
