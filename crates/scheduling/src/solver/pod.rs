//! One pending pod's scheduling state and Karpenter's relaxation order.

use super::*;

#[derive(Clone)]
pub(super) struct PodData {
    pub(super) input: usize,
    pub(super) requests: Vec<i64>,
    pub(super) ns: u32,
    pub(super) labels: Vec<(Key, Sym)>,
    pub(super) tolerations: Vec<Toleration>,
    pub(super) ports: Vec<HostPort>,
    /// See [`crate::Pod::moving`].
    pub(super) moving: bool,
    /// nodeSelector requirements.
    pub(super) selector_reqs: IReqs,
    pub(super) required_terms: Vec<IReqs>,
    /// Sorted by weight descending.
    pub(super) preferred_terms: Vec<IReqs>,
    /// What its volumes require ([`crate::Pod::volume_requirements`]): alternatives, of
    /// which `vol_alt` is the one tried.
    pub(super) vol_alts: Vec<IReqs>,
    pub(super) vol_alt: usize,
    /// Its volumes (interned, sorted; see [`super::volumes`]).
    pub(super) vols: Vec<u32>,
    /// Its ResourceClaims (see [`super::dra`]); `None`: it claims no device.
    pub(super) dra: Option<Box<super::dra::PodDra>>,
    pub(super) spreads: Vec<(usize, bool)>,
    pub(super) affinity: Vec<usize>,
    pub(super) anti: Vec<usize>,
    pub(super) pref_affinity: Vec<usize>,
    pub(super) pref_anti: Vec<usize>,
    /// Groups whose selector matches this pod.
    pub(super) matched: Vec<usize>,
    /// Required anti-affinity groups whose selector matches this pod (it must avoid their owners).
    pub(super) repelled: Vec<usize>,
    // Relaxation state.
    pub(super) term: usize,
    pub(super) pref_node_removed: usize,
    pub(super) pref_aff_removed: usize,
    pub(super) pref_anti_removed: usize,
    pub(super) schedule_anyway_removed: bool,
    pub(super) tolerate_prefer_no_schedule: bool,
    pub(super) reqs: IReqs,
    /// What the pod itself requires: `reqs` without the preferred term and without its
    /// volumes' alternative (topology spread counts domains by the pod's own affinity, as
    /// Karpenter's `StrictRequirements`).
    pub(super) strict_reqs: IReqs,
}

impl PodData {
    pub(super) fn rebuild_reqs(&mut self) {
        let mut r = self.selector_reqs.clone();
        if let Some(t) = self.required_terms.get(self.term) {
            r.intersect(t);
        }
        self.strict_reqs = r.clone();
        if let Some(t) = self.vol_alts.get(self.vol_alt) {
            r.intersect(t);
        }
        if let Some(t) = self.preferred_terms.get(self.pref_node_removed) {
            r.intersect(t);
        }
        self.reqs = r;
    }

    /// Active owned topology groups (gid, is-required-anti).
    pub(super) fn owned(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        let spreads = self
            .spreads
            .iter()
            .filter(|(_, hard)| *hard || !self.schedule_anyway_removed)
            .map(|(g, _)| (*g, false));
        spreads
            .chain(self.affinity.iter().map(|g| (*g, false)))
            .chain(self.anti.iter().map(|g| (*g, true)))
            .chain(
                self.pref_affinity
                    .iter()
                    .skip(self.pref_aff_removed)
                    .map(|g| (*g, false)),
            )
            .chain(
                self.pref_anti
                    .iter()
                    .skip(self.pref_anti_removed)
                    .map(|g| (*g, false)),
            )
    }

    /// Karpenter's relaxation order; false when nothing is left to relax.
    ///
    /// The volumes' alternatives come first and cycle under every other step: each
    /// relaxation is tried with each alternative. Karpenter tries the alternatives per node
    /// (the first that fits a node wins); here one alternative holds for a whole attempt
    /// (existing nodes, planned and new NodeClaims), and the next is tried only when the pod
    /// fits nowhere under it: a pod whose volumes allow two zones goes to a new node in the
    /// first before an existing node in the second.
    pub(super) fn relax(&mut self) -> bool {
        if self.vol_alt + 1 < self.vol_alts.len() {
            self.vol_alt += 1;
            self.rebuild_reqs();
            return true;
        }
        let vol_alt = std::mem::take(&mut self.vol_alt);
        if self.relax_pod() {
            return true;
        }
        self.vol_alt = vol_alt;
        false
    }

    /// Relaxes the pod's own preferences (Karpenter's order); false when nothing is left.
    fn relax_pod(&mut self) -> bool {
        if self.term + 1 < self.required_terms.len() {
            self.term += 1;
        } else if self.pref_aff_removed < self.pref_affinity.len() {
            self.pref_aff_removed += 1;
        } else if self.pref_anti_removed < self.pref_anti.len() {
            self.pref_anti_removed += 1;
        } else if self.pref_node_removed < self.preferred_terms.len() {
            self.pref_node_removed += 1;
        } else if !self.schedule_anyway_removed && self.spreads.iter().any(|(_, hard)| !hard) {
            self.schedule_anyway_removed = true;
        } else if !self.tolerate_prefer_no_schedule {
            self.tolerate_prefer_no_schedule = true;
            self.tolerations.push(Toleration::exists(
                None,
                Some(TaintEffect::PreferNoSchedule),
            ));
        } else {
            return false;
        }
        self.rebuild_reqs();
        true
    }
}

impl PodData {
    pub(super) fn host_ports_conflict(&self, ports: &[HostPort]) -> Option<u16> {
        self.host_ports_ref()
            .iter()
            .find(|hp| ports.iter().any(|o| o.conflicts(hp)))
            .map(|hp| hp.port)
    }
}

impl PodData {
    pub(super) fn host_ports_ref(&self) -> &[HostPort] {
        &self.ports
    }
    pub(super) fn host_ports(&self) -> Vec<HostPort> {
        self.ports.clone()
    }
}
