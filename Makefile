# The two commands a newcomer needs are in README.md: `make demo` and `make test`.
.PHONY: demo test testbed helm testbed-up testbed-down bench fmt lint crds

demo:
	bash hack/demo.sh

test: testbed helm
	cargo test --workspace --locked
	DEMO_PODS=6 bash hack/demo.sh && bash hack/testbed/down.sh --purge
	BENCH_QUICK=1 bash hack/bench/scheduling.sh

testbed:
	bash hack/testbed/build.sh >/dev/null

# The pinned helm the chart's tests use (built once from the Go module proxy, cached).
helm:
	bash hack/helm/build.sh >/dev/null

testbed-up:
	bash hack/testbed/up.sh

testbed-down:
	bash hack/testbed/down.sh

bench:
	bash hack/bench/scheduling.sh

fmt:
	cargo fmt --all

lint:
	cargo clippy --workspace --all-targets -- -D warnings

crds:
	cargo run -q --bin karpenter-capi -- crds
	cargo run -q --bin karpenter-capi -- crds --out deploy/base/crds
	cargo run -q --bin karpenter-capi -- crds --out charts/karpenter-capi/crds
