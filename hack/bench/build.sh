#!/usr/bin/env bash
# Builds, once per version, the Karpenter binaries the benchmarks compare against, from the Go
# module sigs.k8s.io/karpenter pinned in hack/bench/go/go.mod, into a git-ignored cache:
#   schedbench       Karpenter's scheduler on its scheduling benchmark's workload (go/schedbench)
#   karpenter-kwok   Karpenter's kwok provider (sigs.k8s.io/karpenter/kwok)
# plus its CRDs (karpenter.sh NodePool, NodeClaim, NodeOverlay; CapacityBuffer; KWOKNodeClass).
#
#   hack/bench/build.sh [schedbench|karpenter-kwok]...   # default: both; prints the directory
#
# Env: BENCH_CACHE (default <repo>/.cache/bench).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/go.sh
source "$here/../lib/go.sh"
need_go bench/build
version=$(sed -n 's/^\tsigs.k8s.io\/karpenter v\(.*\)$/\1/p' "$here/go/go.mod")
[ -n "$version" ] || { echo "bench/build: no sigs.k8s.io/karpenter in $here/go/go.mod" >&2; exit 1; }
cache=${BENCH_CACHE:-$(cd "$here/../.." && pwd)/.cache/bench}
out=$cache/karpenter-$version
mkdir -p "$out/crds"
exec 9> "$cache/.build.lock"
flock 9
export GOFLAGS="${GOFLAGS:-} -trimpath" CGO_ENABLED=0
[ $# -gt 0 ] || set -- schedbench karpenter-kwok
for what in "$@"; do
  case $what in
    schedbench) pkg=./schedbench ;;
    karpenter-kwok) pkg=sigs.k8s.io/karpenter/kwok ;;
    *) echo "bench/build: unknown binary $what" >&2; exit 2 ;;
  esac
  # schedbench is our source: rebuilt when it changed since the cached build.
  [ -x "$out/$what" ] && { [ "$what" != schedbench ] || [ "$out/$what" -nt "$here/go/schedbench/main.go" ]; } && continue
  echo "bench/build: building $what from sigs.k8s.io/karpenter v$version (first time takes minutes)" >&2
  t0=$SECONDS
  (cd "$here/go" && go build -ldflags "-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version=v$version" \
    -o "$out/$what.tmp" "$pkg")
  mv "$out/$what.tmp" "$out/$what"
  echo "bench/build: built $what in $((SECONDS - t0))s" >&2
done
if [ ! -s "$out/crds/kwok.yaml" ]; then
  dir=$(cd "$here/go" && go mod download -json sigs.k8s.io/karpenter | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  cat "$dir"/kwok/charts/crds/*.yaml > "$out/crds/karpenter.yaml.tmp"
  cp "$dir"/kwok/apis/crds/*.yaml "$out/crds/kwok.yaml.tmp"
  mv "$out/crds/karpenter.yaml.tmp" "$out/crds/karpenter.yaml"
  mv "$out/crds/kwok.yaml.tmp" "$out/crds/kwok.yaml"
fi
echo "$out"
