#!/usr/bin/env bash
# Builds the pinned helm (the version `go.mod` next to this script requires) from the Go
# module proxy into a git-ignored cache keyed by that version, once; prints the binary's path.
# The chart's tests (tests/helm_chart.rs) and `make testbed` call it.
#
# Env: HELM_CACHE (default <repo>/.cache/helm), HELM_BIN (use this helm instead of building).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${HELM_BIN:-}" ]; then
  echo "$HELM_BIN"
  exit 0
fi
# shellcheck source=../lib/go.sh
source "$here/../lib/go.sh"
version=$(sed -n 's#^[[:space:]]*helm.sh/helm/v4 \(v[0-9.]*\).*#\1#p' "$here/go.mod")
[ -n "$version" ] || { echo "helm/build: no helm.sh/helm/v4 version in $here/go.mod" >&2; exit 1; }
cache=${HELM_CACHE:-$(cd "$here/../.." && pwd)/.cache/helm}
out=$cache/helm-$version
mkdir -p "$out"
if [ ! -x "$out/helm" ]; then
  # One build at a time (parallel test processes all call this script).
  exec 9> "$cache/.build.lock"
  flock 9
  if [ ! -x "$out/helm" ]; then
    need_go helm/build
    echo "helm/build: building helm $version (first time takes a few minutes)" >&2
    t0=$SECONDS
    tmp=$(mktemp -d "$out/build.XXXX")
    (cd "$here" && CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.metadata=" \
      -o "$tmp/helm" helm.sh/helm/v4/cmd/helm)
    mv "$tmp/helm" "$out/helm"
    rmdir "$tmp"
    echo "helm/build: built helm $version in $((SECONDS - t0))s" >&2
  fi
fi
echo "$out/helm"
