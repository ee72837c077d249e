// schedbench runs Karpenter's provisioning scheduler (sigs.k8s.io/karpenter, the version pinned
// in ../go.mod) on the workload of Karpenter's own scheduling benchmark
// (pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go, build tag
// test_performance): fake.InstanceTypes(400), one NodePool, and makeDiversePods(n) (five equal
// groups: generic, zonal spread, hostname spread, zonal self-affinity, hostname anti-affinity;
// cpu and memory drawn from math/rand seeded with 42). The scheduler is set up as the benchmark
// sets it up (no API server: a fake controller-runtime client) and is timed as the benchmark
// times it (testing.Benchmark: batches until a batch lasts -benchtime, the last batch's mean),
// each time on a freshly set-up scheduler. Timed: the set-up from the pods (NewTopology,
// NewScheduler) and Solve, as our solver's timed solve starts from its raw input too; Solve
// alone and the first run's time ("cold") are written as well.
//
// For each size it writes into -out:
//
//	input-<n>.json      the instance types and the pods exactly as Karpenter saw them, for our
//	                    solver to read (hack/bench/scheduling.sh)
//	karpenter-<n>.json  {"pods", "seconds", "solveSeconds", "coldSeconds", "runs",
//	                    "nodeClaims", "price", "podErrors"}: seconds is the mean of set-up
//	                    and Solve, solveSeconds of Solve alone, over runs runs; coldSeconds
//	                    the first run's set-up and Solve; price sums,
//	                    per NodeClaim, the cheapest available offering compatible with its
//	                    requirements among its instance type options
//
// -catalogs picks the instance types (comma-separated; files of a catalog other than
// "karpenter" are named input-<catalog>-<n>.json and karpenter-<catalog>-<n>.json):
//
//	karpenter   fake.InstanceTypes(400), the benchmark's own (price linear in cpu and memory)
//	bare-metal  VM flavours of 1-48 cpu (4Gi per cpu, 110 pods) at 0.04/cpu + 0.005/GiB, and
//	            bare-metal flavours of 64, 96 and 128 cpu (4Gi per cpu, 250 pods) billed 30 %
//	            more per cpu and GiB (whole hosts)
//	resizable   one resizable template's sizes: 2-64 cpu in steps of 2 × 2, 4 or 8 GiB per
//	            cpu (96 types, 110 pods) at 0.03/cpu + 0.004/GiB
//	overlay     fake.InstanceTypes(400) with a NodeOverlay-style discount of 30 % on the types
//	            of at most 4 cpu (the prices the scheduler sees after overlays)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	fakecr "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	kscheduling "sigs.k8s.io/karpenter/pkg/scheduling"
	"sigs.k8s.io/karpenter/pkg/test"
)

func main() {
	sizes := flag.String("sizes", "1000", "comma-separated pod counts")
	out := flag.String("out", ".", "directory for input-<n>.json and karpenter-<n>.json")
	catalogs := flag.String("catalogs", "karpenter", "comma-separated catalogs: karpenter, bare-metal, resizable, overlay")
	benchtime := flag.Duration("benchtime", time.Second, "how long a batch of Solves must last (testing.Benchmark's -benchtime)")
	flag.Parse()
	log.SetLogger(logging.NopLogger)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fail(fmt.Errorf("size %q: %w", s, err))
		}
		for _, c := range strings.Split(*catalogs, ",") {
			if err := run(n, strings.TrimSpace(c), *out, *benchtime); err != nil {
				fail(err)
			}
		}
	}
}

// catalog returns the instance types of a named catalog (see the package documentation).
func catalog(name string) ([]*cloudprovider.InstanceType, error) {
	switch name {
	case "karpenter":
		return fake.InstanceTypes(400), nil
	case "overlay":
		its := fake.InstanceTypes(400)
		for _, it := range its {
			if it.Capacity.Cpu().Value() <= 4 {
				for _, o := range it.Offerings {
					o.Price *= 0.7
				}
			}
		}
		return its, nil
	case "bare-metal":
		var its []*cloudprovider.InstanceType
		for _, cpu := range []int64{1, 2, 4, 8, 16, 32, 48} {
			its = append(its, priced(fmt.Sprintf("vm-%dc", cpu), cpu, 4*cpu, 110, 0.04*float64(cpu)+0.005*float64(4*cpu)))
		}
		for _, cpu := range []int64{64, 96, 128} {
			its = append(its, priced(fmt.Sprintf("metal-%dc", cpu), cpu, 4*cpu, 250, 1.3*(0.04*float64(cpu)+0.005*float64(4*cpu))))
		}
		return its, nil
	case "resizable":
		var its []*cloudprovider.InstanceType
		for cpu := int64(2); cpu <= 64; cpu += 2 {
			for _, per := range []int64{2, 4, 8} {
				its = append(its, priced(fmt.Sprintf("vm-%dc-%dg", cpu, per*cpu), cpu, per*cpu, 110, 0.03*float64(cpu)+0.004*float64(per*cpu)))
			}
		}
		return its, nil
	}
	return nil, fmt.Errorf("unknown catalog %q", name)
}

// priced is a fake instance type with the fake provider's five offerings (spot in two zones,
// on-demand in three) at one price.
func priced(name string, cpu, memGi, pods int64, price float64) *cloudprovider.InstanceType {
	var offerings []cloudprovider.Offering
	for _, o := range []struct{ ct, zone string }{
		{"spot", "test-zone-1"}, {"spot", "test-zone-2"},
		{"on-demand", "test-zone-1"}, {"on-demand", "test-zone-2"}, {"on-demand", "test-zone-3"},
	} {
		offerings = append(offerings, cloudprovider.Offering{
			Available: true,
			Requirements: kscheduling.NewLabelRequirements(map[string]string{
				v1.CapacityTypeLabelKey: o.ct, corev1.LabelTopologyZone: o.zone,
			}),
			Price: price,
		})
	}
	return fake.NewInstanceType(name,
		fake.WithResources(corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(cpu, resource.DecimalSI),
			corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dGi", memGi)),
			corev1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
		}),
		fake.WithOfferings(offerings...))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "schedbench:", err)
	os.Exit(1)
}

type result struct {
	Pods         int     `json:"pods"`
	Seconds      float64 `json:"seconds"`
	SolveSeconds float64 `json:"solveSeconds"`
	ColdSeconds  float64 `json:"coldSeconds"`
	Runs         int     `json:"runs"`
	NodeClaims   int     `json:"nodeClaims"`
	Price        float64 `json:"price"`
	PodErrors    int     `json:"podErrors"`
}

func run(n int, catalogName, out string, benchtime time.Duration) error {
	pods := diversePods(n)
	instanceTypes, err := catalog(catalogName)
	if err != nil {
		return err
	}
	prefix := ""
	if catalogName != "karpenter" {
		prefix = catalogName + "-"
	}
	if err := writeJSON(filepath.Join(out, fmt.Sprintf("input-%s%d.json", prefix, n)), input(instanceTypes, pods)); err != nil {
		return err
	}
	ctx := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
	var first *scheduling.Results
	var solving time.Duration
	once := func() (time.Duration, error) {
		start := time.Now()
		scheduler, err := newScheduler(ctx, instanceTypes, pods)
		if err != nil {
			return 0, err
		}
		solveStart := time.Now()
		results, err := scheduler.Solve(ctx, pods)
		end := time.Now()
		if err != nil {
			return 0, fmt.Errorf("solve %d pods: %w", n, err)
		}
		if first == nil {
			first = &results
		}
		solving += end.Sub(solveStart)
		return end.Sub(start), nil
	}
	cold, mean, runs, err := measure(benchtime, once, func() { solving = 0 })
	if err != nil {
		return err
	}
	r := result{Pods: n, Seconds: mean.Seconds(), SolveSeconds: solving.Seconds() / float64(runs),
		ColdSeconds: cold.Seconds(), Runs: runs, NodeClaims: len(first.NewNodeClaims), PodErrors: len(first.PodErrors)}
	for _, nc := range first.NewNodeClaims {
		r.Price += cheapest(nc)
	}
	fmt.Fprintf(os.Stderr, "schedbench: karpenter %s %d pods: %.4fs (Solve %.4fs; mean of %d, first %.4fs), %d NodeClaims, %d pod errors\n",
		catalogName, n, r.Seconds, r.SolveSeconds, runs, r.ColdSeconds, r.NodeClaims, r.PodErrors)
	return writeJSON(filepath.Join(out, fmt.Sprintf("karpenter-%s%d.json", prefix, n)), r)
}

// measure runs once as testing.Benchmark runs a benchmark's body (src/testing/benchmark.go,
// launch and predictN): one run, then batches grown toward benchtime (1.2× the predicted count,
// at most 100× and at least one more than the last), a GC and reset before each batch, until a
// batch's timed total reaches benchtime. It returns the first run's time and the last batch's
// mean and size. crates/core/examples/vs_karpenter.rs times our solver by the same rule.
func measure(benchtime time.Duration, once func() (time.Duration, error), reset func()) (cold, mean time.Duration, n int, err error) {
	batch := func(k int) (time.Duration, error) {
		runtime.GC()
		reset()
		var total time.Duration
		for range k {
			took, err := once()
			if err != nil {
				return 0, err
			}
			total += took
		}
		return total, nil
	}
	n = 1
	total, err := batch(n)
	if err != nil {
		return 0, 0, 0, err
	}
	cold = total
	for total < benchtime && n < 1e9 {
		last := int64(n)
		next := benchtime.Nanoseconds() * last / max(total.Nanoseconds(), 1)
		next += next / 5
		next = min(next, 100*last)
		next = max(next, last+1)
		n = int(min(next, 1e9))
		if total, err = batch(n); err != nil {
			return 0, 0, 0, err
		}
	}
	return cold, total / time.Duration(n), n, nil
}

// newScheduler is the benchmark's setupScheduler: one NodePool with huge limits, the fake
// cloud provider's instance types, a fake client, five concurrent reconciles.
func newScheduler(ctx context.Context, instanceTypes []*cloudprovider.InstanceType, pods []*corev1.Pod) (*scheduling.Scheduler, error) {
	nodePool := test.NodePool(v1.NodePool{Spec: v1.NodePoolSpec{Limits: v1.Limits{
		corev1.ResourceCPU:    resource.MustParse("10000000"),
		corev1.ResourceMemory: resource.MustParse("10000000Gi"),
	}}})
	cloudProvider := fake.NewCloudProvider()
	cloudProvider.InstanceTypes = instanceTypes
	client := fakecr.NewFakeClient()
	clk := &clock.RealClock{}
	cluster := state.NewCluster(clk, client, cloudProvider)
	byPool := map[string][]*cloudprovider.InstanceType{nodePool.Name: instanceTypes}
	opts := []scheduling.Options{scheduling.NumConcurrentReconciles(5)}
	topology, err := scheduling.NewTopology(ctx, client, cluster, nil, []*v1.NodePool{nodePool}, byPool, pods, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating topology: %w", err)
	}
	return scheduling.NewScheduler(ctx, client, []*v1.NodePool{nodePool}, cluster, nil, topology, byPool, nil,
		events.NewRecorder(&record.FakeRecorder{}), clk, nil, nil, opts...), nil
}

// cheapest is the price of the cheapest available offering compatible with the NodeClaim's
// requirements among its instance type options (what a launch would pick).
func cheapest(nc *scheduling.NodeClaim) float64 {
	best := math.Inf(1)
	for _, it := range nc.InstanceTypeOptions {
		if o := it.Offerings.Available().Compatible(nc.Requirements).Cheapest(); o != nil && o.Price < best {
			best = o.Price
		}
	}
	return best
}

// --- the benchmark's workload (makeDiversePods), drawn in the same order -----------------

type workload struct{ r *rand.Rand }

func (w workload) pick(values []string) string { return values[w.r.Intn(len(values))] }
func (w workload) label(key string) map[string]string {
	return map[string]string{key: w.pick([]string{"a", "b", "c", "d", "e", "f", "g"})}
}
func (w workload) requests() corev1.ResourceRequirements {
	cpu := w.pick([]string{"100m", "250m", "500m", "1000m", "1500m"})
	mem := w.pick([]string{"100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi"})
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
}

// diversePods is makeDiversePods(n) with a generator seeded with 42 for each size. Names and
// UIDs are deterministic (pod-<i>); the benchmark's are random, which changes nothing else.
func diversePods(n int) []*corev1.Pod {
	w := workload{r: rand.New(rand.NewSource(42))} //nolint:gosec // a benchmark workload
	per := n / 5
	var pods []*corev1.Pod
	add := func(o test.PodOptions) {
		o.Name = fmt.Sprintf("pod-%d", len(pods))
		o.Namespace = "default"
		o.UID = types.UID(fmt.Sprintf("uid-%06d", len(pods)))
		pods = append(pods, test.Pod(o))
	}
	generic := func() {
		labels := w.label("my-label")
		add(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Labels: labels}, ResourceRequirements: w.requests()})
	}
	for range per {
		generic()
	}
	for _, key := range []string{corev1.LabelTopologyZone, corev1.LabelHostname} {
		for range per {
			labels := w.label("my-label")
			selector := w.label("my-label")
			add(test.PodOptions{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
					MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
					LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
				}},
				ResourceRequirements: w.requests(),
			})
		}
	}
	for range per { // zonal self-affinity (the label key is spelled as in the benchmark)
		labels := w.label("my-affininity")
		add(test.PodOptions{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			PodRequirements: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelTopologyZone,
			}},
			ResourceRequirements: w.requests(),
		})
	}
	nginx := map[string]string{"app": "nginx"}
	for range per {
		add(test.PodOptions{
			ObjectMeta: metav1.ObjectMeta{Labels: nginx},
			PodAntiRequirements: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: nginx}, TopologyKey: corev1.LabelHostname,
			}},
			ResourceRequirements: w.requests(),
		})
	}
	for len(pods) < n {
		generic()
	}
	return pods
}

// --- the input file ------------------------------------------------------------------------

type offering struct {
	Zone         string  `json:"zone"`
	CapacityType string  `json:"capacityType"`
	Price        float64 `json:"price"`
	Available    bool    `json:"available"`
}

type instanceType struct {
	Name string `json:"name"`
	// Requirements other than instance type, zone and capacity type (derived from the
	// name and the offerings), as NodeSelectorRequirements.
	Requirements []v1.NodeSelectorRequirementWithMinValues `json:"requirements"`
	Capacity     corev1.ResourceList                       `json:"capacity"`
	Overhead     corev1.ResourceList                       `json:"overhead"`
	Offerings    []offering                                `json:"offerings"`
}

func input(its []*cloudprovider.InstanceType, pods []*corev1.Pod) map[string]any {
	var out []instanceType
	for _, it := range its {
		t := instanceType{Name: it.Name, Capacity: it.Capacity, Overhead: it.Overhead.Total()}
		for _, key := range sets.List(sets.KeySet(it.Requirements)) {
			r := it.Requirements[key]
			switch key {
			case corev1.LabelInstanceTypeStable, corev1.LabelTopologyZone, v1.CapacityTypeLabelKey:
				continue
			}
			t.Requirements = append(t.Requirements, r.NodeSelectorRequirement())
		}
		for _, o := range it.Offerings {
			t.Offerings = append(t.Offerings, offering{
				Zone:         o.Requirements.Get(corev1.LabelTopologyZone).Any(),
				CapacityType: o.Requirements.Get(v1.CapacityTypeLabelKey).Any(),
				Price:        o.Price,
				Available:    o.Available,
			})
		}
		out = append(out, t)
	}
	return map[string]any{"instanceTypes": out, "pods": pods}
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
