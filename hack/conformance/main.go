// conformance records Karpenter's own scheduling test suite as a differential corpus.
//
// It copies the sigs.k8s.io/karpenter module pinned in go.mod (v1.15.0) into a scratch
// directory, adds inject/dump.go to pkg/controllers/provisioning/scheduling and inserts two calls
// into its scheduler.go (one at the end of NewScheduler, one before Solve returns), adds
// inject/hook_test.go beside the tests (it names each record after the running Ginkgo spec),
// then runs that package's tests (suite_test.go, topology_test.go, instance_selection_test.go,
// defaultconstraints_test.go, reservationmanager_test.go, reserved_fallback_test.go, ...)
// unchanged against envtest (kube-apiserver and etcd from -assets). A second run records
// Karpenter's DRA specs, which live in pkg/controllers/provisioning (dra_test.go, "Dynamic
// Resource Allocation": they enable DRA with IgnoreDRARequests=false in their BeforeEach, as
// the scheduling suite does not); their records are numbered from 10001. Every Solve writes
// solve-NNNNN.json into -out: the scenario, the scheduler's input and Karpenter's result.
// Failing specs do not stop the recording; the failures are printed and the exit status is 1
// (as it is when no Solve was recorded), so hack/conformance/run.sh compares and then fails.
//
//	go run . -assets DIR -out DIR [-work DIR] [-focus REGEXP] [-seed N] [-runs scheduling,dra]
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const pkg = "pkg/controllers/provisioning/scheduling"

// A run: one test package's specs (a focus of its own, or -focus), recorded with record
// numbers from base+1. The hook naming records is copied into the package as hookPkg.
type run struct {
	name, pkg, hookPkg, focus string
	base                      int
}

var runs = []run{
	{name: "scheduling", pkg: pkg, hookPkg: "scheduling_test"},
	{name: "dra", pkg: "pkg/controllers/provisioning", hookPkg: "provisioning_test", focus: "Dynamic Resource Allocation", base: 10000},
}

// Each patch inserts text after (or before) an anchor line that must occur exactly once.
type patch struct {
	file, anchor, text string
	before             bool
}

var patches = []patch{
	{file: pkg + "/scheduler.go",
		anchor: "\ts.calculateExistingNodeClaims(ctx, stateNodes, daemonSetPods, nodeToNodePool, resolved.enforceConsolidateAfter)\n",
		text:   "\tconformanceRecordInput(ctx, s, kubeClient, nodePools, stateNodes, instanceTypes, len(volumeReqsByPod) > 0)\n"},
	{file: pkg + "/scheduler.go",
		anchor: "\treturn results, ctx.Err()\n",
		text:   "\tconformanceRecordOutput(s, pods, results)\n", before: true},
}

func main() {
	assets := flag.String("assets", "", "directory with kube-apiserver and etcd (KUBEBUILDER_ASSETS)")
	out := flag.String("out", "", "directory for the solve-*.json records")
	work := flag.String("work", "", "scratch directory for the patched module (default: a temp dir)")
	focus := flag.String("focus", "", "only specs matching this regexp (ginkgo.focus)")
	seed := flag.String("seed", "1", "Ginkgo's random seed (the order of specs, so the records, depend on it)")
	only := flag.String("runs", "scheduling,dra", "which runs: scheduling (the scheduling package), dra (the provisioning package's DRA specs)")
	flag.Parse()
	if *assets == "" || *out == "" {
		fail(fmt.Errorf("-assets and -out are required"))
	}
	src, version, err := moduleDir()
	if err != nil {
		fail(err)
	}
	if *work == "" {
		if *work, err = os.MkdirTemp("", "karpenter-conformance-"); err != nil {
			fail(err)
		}
	}
	dst := filepath.Join(*work, "karpenter-"+version)
	if err := os.RemoveAll(dst); err != nil {
		fail(err)
	}
	if err := copyTree(src, dst); err != nil {
		fail(err)
	}
	if err := inject(dst); err != nil {
		fail(err)
	}
	outAbs, _ := filepath.Abs(*out)
	assetsAbs, _ := filepath.Abs(*assets)
	if err := os.MkdirAll(outAbs, 0o755); err != nil {
		fail(err)
	}
	failed := false
	for _, r := range runs {
		if !strings.Contains(","+*only+",", ","+r.name+",") {
			continue
		}
		if err := testRun(r, dst, assetsAbs, outAbs, *focus, *seed, version); err != nil {
			failed = true
		}
	}
	records, _ := filepath.Glob(filepath.Join(outAbs, "solve-*.json"))
	fmt.Fprintf(os.Stderr, "conformance: %d Solve records in %s\n", len(records), outAbs)
	if len(records) == 0 || failed {
		os.Exit(1)
	}
}

// testRun runs one package's specs with the recorder; its log goes to go-test[-NAME].log.
func testRun(r run, dst, assets, out, focus, seed, version string) error {
	args := []string{"test", "-v", "-tags", "karpenter_conformance", "-count=1", "-timeout", "90m", "./" + r.pkg + "/", "-args", "-ginkgo.no-color", "-ginkgo.seed", seed}
	if focus == "" {
		focus = r.focus
	}
	if focus != "" {
		args = append(args, "-ginkgo.focus", focus)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = dst
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+assets, "CONFORMANCE_OUT="+out, fmt.Sprintf("CONFORMANCE_SEQ_BASE=%d", r.base))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	fmt.Fprintf(os.Stderr, "conformance: running Karpenter v%s's %s tests (%s) in %s\n", version, r.name, r.pkg, dst)
	runErr := cmd.Run()
	logName := "go-test.log"
	if r.name != "scheduling" {
		logName = "go-test-" + r.name + ".log"
	}
	_ = os.WriteFile(filepath.Join(out, logName), log.Bytes(), 0o644)
	fmt.Fprintf(os.Stderr, "conformance: %s: go test: %v; log in %s\n", r.name, status(runErr), logName)
	for _, line := range strings.Split(log.String(), "\n") {
		// Ginkgo's summary: the specs the suite declares and how many ran.
		if strings.HasPrefix(line, "Ran ") && strings.Contains(line, " Specs in ") {
			fmt.Fprintln(os.Stderr, "conformance: go test:", strings.TrimSpace(line))
		}
	}
	if runErr != nil {
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, "[FAIL]") || strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "panic:") {
				fmt.Fprintln(os.Stderr, "conformance: go test:", strings.TrimSpace(line))
			}
		}
	}
	return runErr
}

func status(err error) string {
	if err == nil {
		return "all specs passed"
	}
	return "some specs failed: " + err.Error()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "conformance:", err)
	os.Exit(1)
}

// moduleDir downloads (or finds in the module cache) the pinned sigs.k8s.io/karpenter.
func moduleDir() (dir, version string, err error) {
	b, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/karpenter").Output()
	if err != nil {
		return "", "", fmt.Errorf("go mod download sigs.k8s.io/karpenter: %w", err)
	}
	var m struct{ Dir, Version string }
	if err := json.Unmarshal(b, &m); err != nil || m.Dir == "" {
		return "", "", fmt.Errorf("go mod download: no Dir in %s", b)
	}
	return m.Dir, strings.TrimPrefix(m.Version, "v"), nil
}

// copyTree copies the (read-only) module into dst, writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// inject adds the recorder and the hook and applies the patches.
func inject(dst string) error {
	here, err := os.Getwd()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(here, "inject", "dump.go"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dst, pkg, "conformance_dump.go"), b, 0o644); err != nil {
		return err
	}
	hook, err := os.ReadFile(filepath.Join(here, "inject", "hook_test.go"))
	if err != nil {
		return err
	}
	for _, r := range runs {
		text := strings.Replace(string(hook), "package scheduling_test\n", "package "+r.hookPkg+"\n", 1)
		if err := os.WriteFile(filepath.Join(dst, r.pkg, "conformance_hook_test.go"), []byte(text), 0o644); err != nil {
			return err
		}
	}
	for _, p := range patches {
		path := filepath.Join(dst, p.file)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(b)
		if n := strings.Count(text, p.anchor); n != 1 {
			return fmt.Errorf("%s: anchor %q occurs %d times (Karpenter changed; update the patch)", p.file, strings.TrimSpace(p.anchor), n)
		}
		repl := p.anchor + p.text
		if p.before {
			repl = p.text + p.anchor
		}
		if err := os.WriteFile(path, []byte(strings.Replace(text, p.anchor, repl, 1)), 0o644); err != nil {
			return err
		}
	}
	return nil
}
