#!/usr/bin/env bash
# Karpenter's own CRDs (`pkg/apis/crds/*.yaml` of the Go module sigs.k8s.io/karpenter at the
# version pinned below), copied once into a git-ignored cache; prints the directory holding
# them. tests/karpenter_crds.rs compares our CRD schemas with these.
#
# The module comes from the Go module proxy through `go mod download` (the module cache of the
# testbed build, ~/go/pkg/mod); v1.15.0 declares Go 1.26.9, so the pinned toolchain of
# hack/lib/go.sh is fetched from the proxy too. After the first run the cache
# serves offline.
#
# Env: KARPENTER_CRDS_DIR (use these CRDs instead), KARPENTER_CACHE (default
# <repo>/.cache/karpenter).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/go.sh
source "$here/../lib/go.sh"
version=1.15.0
if [ -n "${KARPENTER_CRDS_DIR:-}" ]; then
  echo "$KARPENTER_CRDS_DIR"
  exit 0
fi
cache=${KARPENTER_CACHE:-$(cd "$here/../.." && pwd)/.cache/karpenter}
out=$cache/karpenter-$version/crds
if [ ! -s "$out/karpenter.sh_nodepools.yaml" ]; then
  mkdir -p "$cache"
  # One fetch at a time (test processes may call this script side by side).
  exec 9> "$cache/.fetch.lock"
  flock 9
fi
if [ ! -s "$out/karpenter.sh_nodepools.yaml" ]; then
  need_go "karpenter/crds (or set KARPENTER_CRDS_DIR)"
  echo "karpenter/crds: fetching sigs.k8s.io/karpenter@v$version from the Go module proxy" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # Outside any module (so no go.mod of ours is consulted or changed).
  if ! json=$(cd "$work" && go mod download -json "sigs.k8s.io/karpenter@v$version" 2>"$work/err"); then
    {
      echo "karpenter/crds: cannot download sigs.k8s.io/karpenter@v$version (toolchain $hack_go_toolchain): offline, or the Go module proxy is unreachable."
      echo "karpenter/crds: run once with network access (the CRDs are then cached in $out), or set KARPENTER_CRDS_DIR."
      sed 's/^/  go: /' "$work/err"
      [ -z "$json" ] || echo "$json" | sed -n 's/.*"Error": \(.*\)/  go: \1/p'
    } >&2
    exit 1
  fi
  dir=$(echo "$json" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$dir/pkg/apis/crds" ] || { echo "karpenter/crds: no pkg/apis/crds in the module (Dir=$dir)" >&2; exit 1; }
  mkdir -p "$out.tmp"
  cp "$dir"/pkg/apis/crds/*.yaml "$out.tmp/"
  chmod -R u+w "$out.tmp"
  rm -rf "$out"
  mv "$out.tmp" "$out"
fi
echo "$out"
