//go:build karpenter_conformance

// Copied next to Karpenter's scheduling tests, and (its package line rewritten) next to the
// provisioning package's DRA tests, by hack/conformance: names each Solve record after the
// running spec.
package scheduling_test

import (
	. "github.com/onsi/ginkgo/v2"

	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
)

var _ = BeforeEach(func() {
	scheduling.ConformanceScenario = CurrentSpecReport().FullText()
})
