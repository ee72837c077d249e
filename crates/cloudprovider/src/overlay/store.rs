//! The NodeOverlays of a workload cluster and their evaluation ([`OverlayStore`]), and the
//! decorator that applies them to what any provider's `instance_types` answers
//! ([`Overlaid`], Karpenter's `overlay.Decorate`).
//!
//! The evaluation (what applies, what conflicts, what each overlay selects) is over the
//! instance types of every NodeClass the store's lister names, as the provider answers them
//! without overlays. It is memoized per (overlay specs, those instance types), so it is
//! computed again only when an overlay's spec (its generation) or a provider's answer
//! changed; each overlaid answer is memoized per (answer, evaluation).

use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::Store;

use super::{Evaluation, Overlay, apply, evaluate};
use crate::instance_types::InstanceTypes;
use crate::provider::CloudProvider;

/// At most this many overlaid answers are kept (one per NodeClass in practice).
const APPLIED_CACHE_SIZE: usize = 64;

/// The evaluation of one overlay generation over one set of answers.
struct Memo {
    /// Each overlay's name and `metadata.generation` (its spec's version).
    specs: Vec<(String, Option<i64>)>,
    bases: Vec<Arc<InstanceTypes>>,
    evaluation: Arc<Evaluation>,
}

/// An answer with an evaluation's overlays applied.
struct Applied {
    base: Arc<InstanceTypes>,
    evaluation: Arc<Evaluation>,
    out: Arc<InstanceTypes>,
}

/// The NodeClasses to evaluate the overlays over (the caller's view, e.g. those the
/// NodePools reference).
pub type NodeClassLister = Box<dyn Fn() -> Vec<String> + Send + Sync>;

/// The NodeOverlays (a reflector store of them) and their memoized evaluation.
pub struct OverlayStore {
    overlays: Store<api::NodeOverlay>,
    nodeclasses: NodeClassLister,
    memo: Mutex<Option<Memo>>,
    applied: Mutex<Vec<Applied>>,
}

impl OverlayStore {
    /// Overlays read from `overlays`, evaluated over the NodeClasses `nodeclasses` names.
    pub fn new(overlays: Store<api::NodeOverlay>, nodeclasses: NodeClassLister) -> OverlayStore {
        OverlayStore {
            overlays,
            nodeclasses,
            memo: Mutex::new(None),
            applied: Mutex::new(Vec::new()),
        }
    }

    /// Whether any overlay exists.
    pub fn any(&self) -> bool {
        !self.overlays.is_empty()
    }

    /// The overlays evaluated over `base` of every NodeClass the lister names (sorted, each
    /// once; a NodeClass `base` has no instance types for is left out). `base` answers
    /// without overlays.
    pub fn evaluation(&self, base: &dyn Fn(&str) -> Option<Arc<InstanceTypes>>) -> Arc<Evaluation> {
        let mut objects = self.overlays.state();
        objects.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let specs: Vec<(String, Option<i64>)> = objects
            .iter()
            .map(|o| (o.name_any(), o.metadata.generation))
            .collect();
        let mut names = (self.nodeclasses)();
        names.sort();
        names.dedup();
        let bases: Vec<Arc<InstanceTypes>> = names.iter().filter_map(|n| base(n)).collect();
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = memo.as_ref()
            && m.specs == specs
            && m.bases.len() == bases.len()
            && m.bases
                .iter()
                .zip(&bases)
                .all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
        {
            return Arc::clone(&m.evaluation);
        }
        let parsed = objects
            .iter()
            .map(|o| {
                Overlay::from_api(o).map_err(|why| (o.name_any(), o.spec.weight.unwrap_or(0), why))
            })
            .collect();
        let refs: Vec<&[crate::model::InstanceType]> =
            bases.iter().map(|b| b.instance_types.as_slice()).collect();
        let evaluation = Arc::new(evaluate(parsed, &refs));
        *memo = Some(Memo {
            specs,
            bases,
            evaluation: Arc::clone(&evaluation),
        });
        evaluation
    }

    /// `base` with the overlays of `evaluation` applied (`base` itself when none applies).
    pub fn apply(
        &self,
        base: &Arc<InstanceTypes>,
        evaluation: &Arc<Evaluation>,
    ) -> Arc<InstanceTypes> {
        if evaluation.applied.is_empty() {
            return Arc::clone(base);
        }
        let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = applied
            .iter()
            .find(|a| Arc::ptr_eq(&a.base, base) && Arc::ptr_eq(&a.evaluation, evaluation))
        {
            return Arc::clone(&a.out);
        }
        let out = Arc::new(apply(base, &evaluation.applied));
        // Entries of an older evaluation or an older answer for the same base are dead.
        applied.retain(|a| Arc::ptr_eq(&a.evaluation, evaluation) && !Arc::ptr_eq(&a.base, base));
        if applied.len() >= APPLIED_CACHE_SIZE {
            applied.remove(0);
        }
        applied.push(Applied {
            base: Arc::clone(base),
            evaluation: Arc::clone(evaluation),
            out: Arc::clone(&out),
        });
        out
    }
}

/// `inner` with the NodeOverlays of `store` applied to every `instance_types` answer; every
/// other call is passed on unchanged. The provider itself never applies overlays to what it
/// answers.
pub struct Overlaid {
    inner: Arc<dyn CloudProvider>,
    store: Arc<OverlayStore>,
}

impl Overlaid {
    pub fn new(inner: Arc<dyn CloudProvider>, store: Arc<OverlayStore>) -> Overlaid {
        Overlaid { inner, store }
    }

    /// The overlays evaluated over the inner provider's answers (what the NodeOverlay
    /// status reports).
    pub fn evaluation(&self) -> Arc<Evaluation> {
        self.store.evaluation(&|nc| self.inner.instance_types(nc))
    }
}

impl CloudProvider for Overlaid {
    fn instance_types(&self, nodeclass: &str) -> Option<Arc<InstanceTypes>> {
        let base = self.inner.instance_types(nodeclass)?;
        if !self.store.any() {
            return Some(base);
        }
        Some(self.store.apply(&base, &self.evaluation()))
    }

    crate::forward::forward!(inner: create, delete, get, list, is_drifted, reboot);
    crate::forward::forward!(inner: settings);
}

#[cfg(test)]
mod tests;
