#!/usr/bin/env bash
# `make test`: what `cargo test --workspace` runs, plus the demo and the quick scheduler
# benchmark, but several jobs at a time. Cargo runs test binaries one after the other, and ours
# mostly wait on a real control plane (a Machine to be provisioned, a Node to register), so
# running TEST_JOBS of them side by side (each binary shares one control plane among its
# tests, and its tests run in parallel inside it) takes about half the time on two cores.
# Two by default: with three, the timing-heavy suites starve each other on two cores.
#
#   hack/test.sh                  # everything, TEST_JOBS=2 at a time
#   TEST_JOBS=1 hack/test.sh      # one job at a time (cargo's order of work, for comparison)
#   hack/test.sh lifecycle drift  # only these jobs (test binary names, `demo`, `bench`, `doc`)
#
# Each job's output goes to .cache/test/<job>.log; a failed job's log is printed in full. The
# slowest jobs start first: the order comes from the last run's times (.cache/test/times.tsv),
# or, on a fresh clone, from the hints below. At the end, a table of every job's time.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
jobs_max=${TEST_JOBS:-2}
out=$repo/.cache/test
mkdir -p "$out"
t0=$SECONDS
say() { printf '== test [%4ss] %s\n' "$((SECONDS - t0))" "$*"; }

say "building every test binary (cargo test --workspace --locked --no-run)"
list=$out/binaries.json
cargo test --workspace --locked --no-run --message-format=json-render-diagnostics >"$list" || exit 1

# name<TAB>working directory<TAB>executable, one per test binary (cargo runs each from its
# package's directory). The root package's integration tests are named as they are
# (`lifecycle`); a member crate's are prefixed with it (`scheduling-dra`), so a name never
# depends on the order cargo reports them in (tests/dra.rs and crates/scheduling/tests/dra.rs).
mapfile -t binaries < <(python3 - "$list" "$repo" <<'EOF'
import json, os, sys
root = os.path.realpath(sys.argv[2])
seen = set()
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("profile", {}).get("test") or not m.get("executable"):
        continue
    t = m["target"]
    path, _, frag = m["package_id"].partition("#")
    pkg = frag.split("@")[0] if "@" in frag else path.rstrip("/").split("/")[-1]
    at_root = os.path.realpath(os.path.dirname(m["manifest_path"])) == root
    if "test" in t["kind"]:
        name = t["name"] if at_root else f"{pkg}-{t['name']}"
    else:
        name = f"{pkg}-{t['kind'][0]}-{t['name']}"
    if name in seen:
        print(f"== FAIL: two test binaries named {name}", file=sys.stderr)
        sys.exit(1)
    seen.add(name)
    print(f"{name}\t{os.path.dirname(m['manifest_path'])}\t{m['executable']}")
EOF
)

# A broken filter above (or a cargo whose JSON changed) would leave binaries out, and the run
# would pass on what is left: compare what it listed with the test targets the workspace
# declares (targets with test = true: lib/bin unit tests, tests/*.rs, tested examples and
# benches), by count and by name.
cargo metadata --no-deps --format-version 1 --locked >"$out/metadata.json" || exit 1
printf '%s\n' "${binaries[@]}" >"$out/binaries.tsv"
python3 - "$out/metadata.json" "$out/binaries.tsv" <<'EOF' || exit 1
import json, sys
meta = json.load(open(sys.argv[1]))
members = set(meta["workspace_members"])
declared = [
    (p["name"], t["kind"][0], t["name"])
    for p in meta["packages"] if p["id"] in members
    for t in p["targets"]
    if t.get("test") and t["kind"][0] in ("lib", "bin", "proc-macro", "test", "example", "bench")
]
listed = {line.split("\t")[0] for line in open(sys.argv[2]) if line.strip()}
def names(pkg, kind, name):  # what the filter calls it (see above)
    return {name, f"{pkg}-{name}"} if kind == "test" else {f"{pkg}-{kind}-{name}"}
missing = [d for d in declared if not names(*d) & listed]
print(f"== test binaries: the build listed {len(listed)}, the workspace declares {len(declared)}")
if missing or len(listed) < len(declared):
    print("== FAIL: test binaries missing from the list (package, kind, target):", file=sys.stderr)
    for m in missing:
        print(f"   {m}", file=sys.stderr)
    sys.exit(1)
EOF

declare -A dir exe
names=()
for b in "${binaries[@]}"; do
  IFS=$'\t' read -r n d x <<<"$b"
  names+=("$n") dir[$n]=$d exe[$n]=$x
done
names+=(doc demo bench)

if [ $# -gt 0 ]; then
  wanted=" $* "
  kept=()
  for n in "${names[@]}"; do [[ $wanted == *" $n "* ]] && kept+=("$n"); done
  names=("${kept[@]}")
fi

# Slowest first: last run's seconds, else these hints (seconds on two cores, the full run of
# 2026-11-28; a fresh clone, as CI's, has no last run).
declare -A weight=([provisioning]=143 [lifecycle]=141 [consolidation]=128 [hub]=102 [drift]=88
  [resizable]=82 [failures]=78 [inventory]=71 [static_pools]=64 [mhc]=61 [hub_scale]=60 [doc]=60
  [demo]=60 [upgrades]=57 [termination]=54 [volumes]=52 [bench]=52 [dra]=48 [hub_shard]=47
  [providers]=44 [testbed-provider]=43 [bad_input]=39 [leader]=36 [hub_bad_input]=34 [overlay]=33
  [writes]=28 [provider_fake]=26 [docs]=24 [api_server]=23 [testbed-dra]=19 [testbed-storage]=19
  [testbed-real]=18 [metrics]=17 [kwok-kwok_provider]=17 [conformance-corpus]=13 [helm_chart]=12
  [testbed-testbed]=11)
if [ -f "$out/times.tsv" ]; then
  while IFS=$'\t' read -r n s _; do weight[$n]=$s; done <"$out/times.tsv"
fi
mapfile -t order < <(for n in "${names[@]}"; do echo "${weight[$n]:-1} $n"; done | sort -rn | cut -d' ' -f2)

run_job() { # run_job NAME: the job's command, output to its log
  local n=$1
  if [ "$n" = doc ]; then
    cargo test --workspace --locked --doc
  elif [ "$n" = demo ]; then
    DEMO_PODS=6 DEMO_BUILT=1 bash hack/demo.sh && bash hack/testbed/down.sh --purge
  elif [ "$n" = bench ]; then
    BENCH_QUICK=1 bash hack/bench/scheduling.sh
  else
    cd "${dir[$n]}" && "${exe[$n]}"
  fi
}

say "running ${#order[@]} jobs, $jobs_max at a time; logs in ${out#"$repo"/}/"
declare -A pid_of started status took
running=0 failed=()
finish() { # finish PID STATUS: record the job that ran as PID
  local p=$1 rc=$2 n
  for n in "${!pid_of[@]}"; do [ "${pid_of[$n]}" = "$p" ] && break; done
  unset "pid_of[$n]"
  took[$n]=$((SECONDS - started[$n])) status[$n]=$rc
  running=$((running - 1))
  if [ "$rc" = 0 ]; then
    say "ok   $n (${took[$n]}s): $(grep -E '^test result:' "$out/$n.log" | tail -1)"
  else
    failed+=("$n")
    say "FAIL $n (${took[$n]}s, exit $rc); its output:"
    cat "$out/$n.log"
    say "end of $n's output"
  fi
}
wait_one() {
  local p rc
  wait -n -p p
  rc=$?
  finish "$p" "$rc"
}
for n in "${order[@]}"; do
  while [ "$running" -ge "$jobs_max" ]; do wait_one; done
  started[$n]=$SECONDS
  (run_job "$n") >"$out/$n.log" 2>&1 &
  pid_of[$n]=$!
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do wait_one; done

{
  for n in "${order[@]}"; do printf '%s\t%s\t%s\n' "$n" "${took[$n]}" "${status[$n]}"; done
} | sort -t$'\t' -k2 -rn >"$out/times.tsv.new"
if [ $# -eq 0 ]; then mv "$out/times.tsv.new" "$out/times.tsv"; else rm -f "$out/times.tsv.new"; fi
say "jobs by time (seconds, exit status):"
for n in "${order[@]}"; do printf '%s %s %s\n' "${took[$n]}" "$n" "${status[$n]}"; done |
  sort -rn | awk '$1 >= 5 || $3 != 0 {printf "   %5ss  %-22s %s\n", $1, $2, ($3 == 0 ? "ok" : "FAILED")}'
if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]}"
  exit 1
fi
say "all ${#order[@]} jobs passed in $((SECONDS - t0))s"
