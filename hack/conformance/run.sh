#!/usr/bin/env bash
# Differential conformance against Karpenter's own scheduling tests (docs/conformance.md).
# Runs Karpenter's pkg/controllers/provisioning/scheduling suite (the version pinned in
# hack/conformance/go.mod) with every Solve recorded (main.go), then replays each record with
# our solver and checks both results (crates/conformance, example `conformance`), printing the
# table. Needs Go (the toolchain hack/lib/go.sh pins, fetched by any Go >= 1.21) and
# the testbed's kube-apiserver and etcd (hack/testbed/build.sh, for Karpenter's envtest).
#
#   hack/conformance/run.sh                 # record (about 6 min) and compare
#   CONFORMANCE_RECORDS=DIR hack/conformance/run.sh   # compare existing records only
#   CONFORMANCE_KNOWN=FILE hack/conformance/run.sh    # judge by another known list ([] = none)
#
# Exits non-zero when a spec of Karpenter's suite fails (the comparison still runs, on the
# records made), when a disagreement is not excused by (scenario, kind) in
# crates/conformance/known.json (the list the quick corpus test uses too), or when a listed
# disagreement no longer occurs.
#
# Output: .cache/conformance/records/ (solve-*.json, go-test.log), table.md, details.md.
# To refresh the quick corpus make test replays (tests/conformance/quick.json), see
# docs/conformance.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../lib/go.sh
source "$repo/hack/lib/go.sh"
out=$repo/.cache/conformance
mkdir -p "$out"
records=${CONFORMANCE_RECORDS:-}
recorded=0
if [ -z "$records" ]; then
  records=$out/records
  assets=$(bash "$repo/hack/testbed/build.sh")/bin
  rm -rf "$records"
  need_go conformance
  (cd "$here" && go run . -assets "$assets" -out "$records" -work "$out/work") || recorded=$?
  if ! compgen -G "$records/solve-*.json" >/dev/null; then
    echo "conformance: no Solve recorded (log: $records/go-test.log)" >&2
    exit 1
  fi
fi
cd "$repo"
cargo build --quiet --release --locked -p conformance --example conformance
known=()
[ -z "${CONFORMANCE_KNOWN:-}" ] || known=(--known "$CONFORMANCE_KNOWN")
compared=0
"${CARGO_TARGET_DIR:-target}/release/examples/conformance" "$records" --details "$out/details.md" "${known[@]}" | tee "$out/table.md" || compared=$?
echo "conformance: every disagreement and checker finding in $out/details.md" >&2
if [ "$recorded" -ne 0 ]; then
  echo "conformance: FAIL: Karpenter's suite failed with the recorder in (go run exit $recorded; $records/go-test.log)" >&2
fi
if [ "$compared" -ne 0 ]; then
  echo "conformance: FAIL: disagreements not excused by crates/conformance/known.json, or listed ones gone (above)" >&2
fi
[ "$recorded" -eq 0 ] && [ "$compared" -eq 0 ]
