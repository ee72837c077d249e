# The two commands a newcomer needs are in README.md: `make demo` and `make test`.
.PHONY: demo test testbed helm karpenter-crds testbed-up testbed-down bench fmt lint crds

demo:
	bash hack/demo.sh

# cargo test --workspace, the demo (6 pods) and the quick scheduler benchmark, two jobs at a
# time, slowest first (hack/test.sh; TEST_JOBS=1 for one at a time, or name jobs to run).
test: testbed helm karpenter-crds
	bash hack/test.sh

testbed:
	bash hack/testbed/build.sh >/dev/null

# Karpenter's own CRDs (the pinned Go module, cached), which tests/karpenter_crds.rs compares
# ours with.
karpenter-crds:
	bash hack/karpenter/crds.sh >/dev/null

# The pinned helm the chart's tests use (built once from the Go module proxy, cached).
helm:
	bash hack/helm/build.sh >/dev/null

testbed-up:
	bash hack/testbed/up.sh

testbed-down:
	bash hack/testbed/down.sh

# Karpenter side by side: the scheduler on identical pods, then the end-to-end scale-out on
# the testbed (1000 pods; hack/bench/e2e.sh --pods 5000 for more), then the differential
# conformance run over Karpenter's own scheduling tests (docs/conformance.md). Not part of
# `make test` beyond the quick scheduler row and the recorded conformance corpus.
bench: testbed
	bash hack/bench/scheduling.sh
	bash hack/bench/e2e.sh
	bash hack/conformance/run.sh

fmt:
	cargo fmt --all

lint:
	cargo clippy --workspace --all-targets -- -D warnings

crds:
	cargo run -q --bin karpenter-capi -- crds
	cargo run -q --bin karpenter-capi -- crds --out deploy/base/crds
	cargo run -q --bin karpenter-capi -- crds --out charts/karpenter-capi/crds
	cargo run -q -p kwok --example crd -- crds
