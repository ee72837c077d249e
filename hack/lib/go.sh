# shellcheck shell=bash
# Sourced by every script under hack/ that runs `go` (hack/bench/build.sh, hack/testbed/build.sh,
# hack/helm/build.sh, hack/karpenter/crds.sh; the benches and demos reach Go only through
# them): the Go toolchain they build with, the same on every machine.
#
# The pinned modules need a newer Go than many machines have (Karpenter v1.15.0 declares go
# 1.26.9), and a Go whose default is GOTOOLCHAIN=local (as distributions ship it) refuses to
# switch: "go.mod requires go >= 1.26.9". So `go` runs with GOTOOLCHAIN set to the pinned
# toolchain below, which any Go >= 1.21 fetches once from the Go module proxy into the module
# cache (then offline). An explicit GOTOOLCHAIN in the environment is overridden on purpose:
# `local` is exactly what breaks. Env: HACK_GOTOOLCHAIN (another toolchain, e.g. `local` on a
# machine whose Go is new enough and that must not download one).
hack_go_toolchain=${HACK_GOTOOLCHAIN:-go1.27.3}
export GOTOOLCHAIN=$hack_go_toolchain

# need_go WHO: fails with a clear message when no go is on PATH.
need_go() {
  command -v go >/dev/null 2>&1 || {
    echo "$1: no go on PATH (install Go >= 1.21; toolchain $hack_go_toolchain is then fetched from the Go module proxy)" >&2
    exit 1
  }
}
