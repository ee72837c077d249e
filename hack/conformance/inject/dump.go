//go:build karpenter_conformance

// This file is copied into a scratch copy of sigs.k8s.io/karpenter's
// pkg/controllers/provisioning/scheduling by hack/conformance (main.go), which also inserts two
// calls into scheduler.go: conformanceRecordInput at the end of NewScheduler and
// conformanceRecordOutput before Solve returns. With CONFORMANCE_OUT set, every Solve writes
// one JSON file there: the scenario (the Ginkgo spec's full text), what the scheduler was
// given (NodePools, instance types per NodePool with offerings, the state nodes' Node and
// NodeClaim objects, the bound pods, the DaemonSets, the PersistentVolumeClaims,
// PersistentVolumes, StorageClasses and CSINodes, the DRA objects — ResourceClaims,
// ResourceClaimTemplates, DeviceClasses, ResourceSlices — and the instance types' DRA
// ResourceSliceTemplates, the pods to schedule) and what it decided
// (new NodeClaims with their pods, requirements, instance type options and cheapest price;
// pods placed on existing nodes; pod errors). Nothing else in Karpenter changes.
package scheduling

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
)

// ConformanceScenario is the running spec's full text (set by the injected BeforeEach).
var ConformanceScenario string

var (
	conformanceMu     sync.Mutex
	conformanceSeq    int
	conformanceInputs = map[*Scheduler]*conformanceInput{}
)

type conformanceOffering struct {
	Requirements        []v1.NodeSelectorRequirementWithMinValues `json:"requirements"`
	Zone                string                                    `json:"zone"`
	CapacityType        string                                    `json:"capacityType"`
	Price               float64                                   `json:"price"`
	Available           bool                                      `json:"available"`
	ReservationCapacity int                                       `json:"reservationCapacity,omitempty"`
	// Offering-level replacements of the instance type's capacity and overhead entries.
	CapacityOverride corev1.ResourceList `json:"capacityOverride,omitempty"`
	OverheadOverride corev1.ResourceList `json:"overheadOverride,omitempty"`
}

type conformanceInstanceType struct {
	Name         string                                    `json:"name"`
	Requirements []v1.NodeSelectorRequirementWithMinValues `json:"requirements"`
	Capacity     corev1.ResourceList                       `json:"capacity"`
	Overhead     corev1.ResourceList                       `json:"overhead"`
	Offerings    []conformanceOffering                     `json:"offerings"`
	// Expected attach limits per CSI driver until the node's CSINode says (no entry: none).
	VolumeAttachmentLimits map[string]int `json:"volumeAttachmentLimits,omitempty"`
	// The DRA devices a node of this type publishes (DynamicResources.ResourceSliceTemplates).
	ResourceSliceTemplates []conformanceSliceTemplate `json:"resourceSliceTemplates,omitempty"`
	// DynamicResources.AttributeBindings: how many (the replay does not model them).
	AttributeBindings int `json:"attributeBindings,omitempty"`
}

// A cloudprovider.ResourceSliceTemplate, its devices as a ResourceSlice's.
type conformanceSliceTemplate struct {
	Driver         string                  `json:"driver"`
	Pool           string                  `json:"pool"`
	Devices        []resourcev1.Device     `json:"devices,omitempty"`
	SharedCounters []resourcev1.CounterSet `json:"sharedCounters,omitempty"`
}

type conformanceInput struct {
	NodePools     []*v1.NodePool                       `json:"nodePools"`
	InstanceTypes map[string][]conformanceInstanceType `json:"instanceTypes"`
	Nodes         []*corev1.Node                       `json:"nodes"`
	NodeClaims    []*v1.NodeClaim                      `json:"nodeClaims"`
	BoundPods     []corev1.Pod                         `json:"boundPods"`
	DaemonSets    []appsv1.DaemonSet                   `json:"daemonSets"`
	// The volume objects the scheduler's client sees (the tests create them in envtest):
	// what pods' volumes resolve against, and the nodes' published attach limits.
	PersistentVolumeClaims []corev1.PersistentVolumeClaim `json:"persistentVolumeClaims,omitempty"`
	PersistentVolumes      []corev1.PersistentVolume      `json:"persistentVolumes,omitempty"`
	StorageClasses         []storagev1.StorageClass       `json:"storageClasses,omitempty"`
	CSINodes               []storagev1.CSINode            `json:"csiNodes,omitempty"`
	// The Dynamic Resource Allocation objects the scheduler's client sees.
	ResourceClaims         []resourcev1.ResourceClaim         `json:"resourceClaims,omitempty"`
	ResourceClaimTemplates []resourcev1.ResourceClaimTemplate `json:"resourceClaimTemplates,omitempty"`
	DeviceClasses          []resourcev1.DeviceClass           `json:"deviceClasses,omitempty"`
	ResourceSlices         []resourcev1.ResourceSlice         `json:"resourceSlices,omitempty"`
	// Some pod to schedule has volume topology requirements; DRA is in use.
	VolumeRequirements bool `json:"volumeRequirements,omitempty"`
	DRA                bool `json:"dra,omitempty"`
}

type conformanceNodeClaim struct {
	NodePool      string                                    `json:"nodePool"`
	Requirements  []v1.NodeSelectorRequirementWithMinValues `json:"requirements"`
	Taints        []corev1.Taint                            `json:"taints,omitempty"`
	InstanceTypes []string                                  `json:"instanceTypes"`
	Pods          []string                                  `json:"pods"`
	Price         float64                                   `json:"price"`
}

type conformanceExisting struct {
	Node string   `json:"node"`
	Pods []string `json:"pods"`
}

type conformanceResult struct {
	NodeClaims []conformanceNodeClaim `json:"nodeClaims"`
	Existing   []conformanceExisting  `json:"existing"`
	PodErrors  map[string]string      `json:"podErrors"`
}

type conformanceRecord struct {
	Scenario string            `json:"scenario"`
	Solve    int               `json:"solve"`
	Input    *conformanceInput `json:"input"`
	Pods     []*corev1.Pod     `json:"pods"`
	Result   conformanceResult `json:"karpenter"`
}

func conformanceEnabled() bool { return os.Getenv("CONFORMANCE_OUT") != "" }

// conformanceSeqBase numbers the records of a second test package after the first's
// (CONFORMANCE_SEQ_BASE, set by main.go).
func conformanceSeqBase() int {
	n, _ := strconv.Atoi(os.Getenv("CONFORMANCE_SEQ_BASE"))
	return n
}

func conformanceRequirements(r interface {
	NodeSelectorRequirements() []v1.NodeSelectorRequirementWithMinValues
}) []v1.NodeSelectorRequirementWithMinValues {
	out := r.NodeSelectorRequirements()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func conformanceInstanceTypes(its []*cloudprovider.InstanceType) []conformanceInstanceType {
	out := make([]conformanceInstanceType, 0, len(its))
	for _, it := range its {
		t := conformanceInstanceType{Name: it.Name, Requirements: conformanceRequirements(it.Requirements), Capacity: it.Capacity,
			VolumeAttachmentLimits: it.VolumeAttachmentLimits}
		if it.Overhead != nil {
			t.Overhead = it.Overhead.Total()
		}
		for _, st := range it.DynamicResources.ResourceSliceTemplates {
			tpl := conformanceSliceTemplate{Driver: st.Driver.Value(), Pool: st.Pool.Name.Value(), SharedCounters: st.SharedCounters}
			for _, d := range st.Devices {
				dev := resourcev1.Device{Name: d.Name.Value(), Attributes: d.Attributes, Capacity: d.Capacity,
					ConsumesCounters: d.ConsumesCounters}
				if d.AllowMultipleAllocations {
					dev.AllowMultipleAllocations = &d.AllowMultipleAllocations
				}
				tpl.Devices = append(tpl.Devices, dev)
			}
			t.ResourceSliceTemplates = append(t.ResourceSliceTemplates, tpl)
		}
		t.AttributeBindings = len(it.DynamicResources.AttributeBindings)
		for _, o := range it.Offerings {
			var overhead corev1.ResourceList
			if o.OverheadOverride != nil {
				overhead = o.OverheadOverride.Total()
			}
			t.Offerings = append(t.Offerings, conformanceOffering{
				CapacityOverride:    o.CapacityOverride,
				OverheadOverride:    overhead,
				Requirements:        conformanceRequirements(o.Requirements),
				Zone:                o.Requirements.Get(corev1.LabelTopologyZone).Any(),
				CapacityType:        o.Requirements.Get(v1.CapacityTypeLabelKey).Any(),
				Price:               o.Price,
				Available:           o.Available,
				ReservationCapacity: o.ReservationCapacity,
			})
		}
		out = append(out, t)
	}
	return out
}

// conformanceRecordInput keeps what NewScheduler was given, for the Solve that follows.
func conformanceRecordInput(ctx context.Context, s *Scheduler, kubeClient client.Client, nodePools []*v1.NodePool,
	stateNodes []*state.StateNode, instanceTypes map[string][]*cloudprovider.InstanceType, volumeReqs bool) {
	if !conformanceEnabled() {
		return
	}
	in := &conformanceInput{NodePools: nodePools, InstanceTypes: map[string][]conformanceInstanceType{}, VolumeRequirements: volumeReqs, DRA: s.allocator != nil}
	for name, its := range instanceTypes {
		in.InstanceTypes[name] = conformanceInstanceTypes(its)
	}
	names := sets.New[string]()
	for _, sn := range stateNodes {
		if sn.Node != nil {
			in.Nodes = append(in.Nodes, sn.Node.DeepCopy())
			names.Insert(sn.Node.Name)
		}
		if sn.NodeClaim != nil {
			in.NodeClaims = append(in.NodeClaims, sn.NodeClaim.DeepCopy())
		}
	}
	pods := &corev1.PodList{}
	if err := kubeClient.List(ctx, pods); err == nil {
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				in.BoundPods = append(in.BoundPods, p)
			}
		}
	}
	dss := &appsv1.DaemonSetList{}
	if err := kubeClient.List(ctx, dss); err == nil {
		in.DaemonSets = dss.Items
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := kubeClient.List(ctx, pvcs); err == nil {
		in.PersistentVolumeClaims = pvcs.Items
	}
	pvs := &corev1.PersistentVolumeList{}
	if err := kubeClient.List(ctx, pvs); err == nil {
		in.PersistentVolumes = pvs.Items
	}
	scs := &storagev1.StorageClassList{}
	if err := kubeClient.List(ctx, scs); err == nil {
		in.StorageClasses = scs.Items
	}
	csiNodes := &storagev1.CSINodeList{}
	if err := kubeClient.List(ctx, csiNodes); err == nil {
		in.CSINodes = csiNodes.Items
	}
	claims := &resourcev1.ResourceClaimList{}
	if err := kubeClient.List(ctx, claims); err == nil {
		in.ResourceClaims = claims.Items
	}
	claimTemplates := &resourcev1.ResourceClaimTemplateList{}
	if err := kubeClient.List(ctx, claimTemplates); err == nil {
		in.ResourceClaimTemplates = claimTemplates.Items
	}
	classes := &resourcev1.DeviceClassList{}
	if err := kubeClient.List(ctx, classes); err == nil {
		in.DeviceClasses = classes.Items
	}
	slices := &resourcev1.ResourceSliceList{}
	if err := kubeClient.List(ctx, slices); err == nil {
		in.ResourceSlices = slices.Items
	}
	conformanceMu.Lock()
	conformanceInputs[s] = in
	conformanceMu.Unlock()
}

func conformanceKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func conformanceCheapest(nc *NodeClaim) float64 {
	best := math.Inf(1)
	for _, it := range nc.InstanceTypeOptions {
		if o := it.Offerings.Available().Compatible(nc.Requirements).Cheapest(); o != nil && o.Price < best {
			best = o.Price
		}
	}
	if math.IsInf(best, 1) {
		return -1
	}
	return best
}

// conformanceRecordOutput writes one record for this Solve.
func conformanceRecordOutput(s *Scheduler, pods []*corev1.Pod, results Results) {
	if !conformanceEnabled() {
		return
	}
	conformanceMu.Lock()
	defer conformanceMu.Unlock()
	in := conformanceInputs[s]
	delete(conformanceInputs, s)
	if in == nil {
		return
	}
	r := conformanceResult{PodErrors: map[string]string{}}
	for _, nc := range results.NewNodeClaims {
		c := conformanceNodeClaim{NodePool: nc.NodePoolName, Requirements: conformanceRequirements(nc.Requirements),
			Taints: nc.Spec.Taints, Price: conformanceCheapest(nc)}
		for _, it := range nc.InstanceTypeOptions {
			c.InstanceTypes = append(c.InstanceTypes, it.Name)
		}
		for _, p := range nc.Pods {
			c.Pods = append(c.Pods, conformanceKey(p))
		}
		r.NodeClaims = append(r.NodeClaims, c)
	}
	for _, n := range results.ExistingNodes {
		if len(n.Pods) == 0 {
			continue
		}
		e := conformanceExisting{Node: n.Name()}
		for _, p := range n.Pods {
			e.Pods = append(e.Pods, conformanceKey(p))
		}
		r.Existing = append(r.Existing, e)
	}
	for p, err := range results.PodErrors {
		r.PodErrors[conformanceKey(p)] = err.Error()
	}
	conformanceSeq++
	rec := conformanceRecord{Scenario: ConformanceScenario, Solve: conformanceSeqBase() + conformanceSeq, Input: in, Pods: pods, Result: r}
	b, err := json.Marshal(rec)
	if err == nil {
		err = os.WriteFile(filepath.Join(os.Getenv("CONFORMANCE_OUT"), fmt.Sprintf("solve-%05d.json", conformanceSeqBase()+conformanceSeq)), b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: writing record:", err)
	}
}
