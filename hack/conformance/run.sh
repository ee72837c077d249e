#!/usr/bin/env bash
# Differential conformance against Karpenter's own scheduling tests (docs/conformance.md).
# Runs Karpenter's pkg/controllers/provisioning/scheduling suite (the version pinned in
# hack/conformance/go.mod) with every Solve recorded (main.go), then replays each record with
# our solver and checks both results (crates/conformance, example `conformance`), printing the
# table. Needs Go (GOTOOLCHAIN=go1.27.3 or newer; the pinned Karpenter needs Go >= 1.26.9) and
# the testbed's kube-apiserver and etcd (hack/testbed/build.sh, for Karpenter's envtest).
#
#   hack/conformance/run.sh                 # record (about 6 min) and compare
#   CONFORMANCE_RECORDS=DIR hack/conformance/run.sh   # compare existing records only
#
# Output: .cache/conformance/records/ (solve-*.json, go-test.log), table.md, details.md.
# To refresh the quick corpus make test replays (tests/conformance/quick.json), see
# docs/conformance.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$repo/.cache/conformance
mkdir -p "$out"
records=${CONFORMANCE_RECORDS:-}
if [ -z "$records" ]; then
  records=$out/records
  assets=$(bash "$repo/hack/testbed/build.sh")/bin
  rm -rf "$records"
  (cd "$here" && GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3} go run . -assets "$assets" -out "$records" -work "$out/work")
fi
cd "$repo"
cargo build --quiet --release --locked -p conformance --example conformance
"${CARGO_TARGET_DIR:-target}/release/examples/conformance" "$records" --details "$out/details.md" | tee "$out/table.md"
echo "conformance: every disagreement and checker finding in $out/details.md" >&2
