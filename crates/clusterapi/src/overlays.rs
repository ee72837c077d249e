//! NodeOverlays as the loops see them: the shared NodeOverlay cache evaluated over every
//! NodeClass's catalog ([`templates::overlay::evaluate`], Karpenter's validation and
//! conflict walk) and applied to each catalog as it is read ([`templates::overlay::apply`]).
//! Both are memoized: the evaluation per (overlay specs, the base catalogs it saw), each applied catalog per (base catalog, evaluation), so a catalog is rebuilt only
//! when its templates, its NodeClass or an overlay changed. The catalogs' `IndexCatalogs`
//! owns one; the status loop is the overlay status module.

use std::sync::{Arc, Mutex};

use api::NodeOverlay;
use kube::ResourceExt;
use templates::model::Catalog;
use templates::overlay::{Evaluation, Overlay, apply, evaluate};

use karpenter_core::cache::Cache;

/// At most this many applied catalogs are kept (one per NodeClass in practice).
const APPLIED_CACHE_SIZE: usize = 64;

/// The evaluation of one overlay generation over one set of base catalogs.
struct Memo {
    /// Each overlay's name and `metadata.generation` (its spec's version).
    specs: Vec<(String, Option<i64>)>,
    bases: Vec<Arc<Catalog>>,
    evaluation: Arc<Evaluation>,
}

/// A base catalog with an evaluation's overlays applied.
struct Applied {
    base: Arc<Catalog>,
    evaluation: Arc<Evaluation>,
    out: Arc<Catalog>,
}

struct Inner {
    cache: Cache<NodeOverlay>,
    memo: Mutex<Option<Memo>>,
    applied: Mutex<Vec<Applied>>,
}

/// The NodeOverlays of the workload cluster, when the `NodeOverlay` feature gate is on.
/// Cheap to clone. `Default`: off (no overlay is ever applied).
#[derive(Clone, Default)]
pub struct Overlays {
    inner: Option<Arc<Inner>>,
}

impl Overlays {
    /// Overlays read from `cache`.
    pub fn new(cache: Cache<NodeOverlay>) -> Self {
        Overlays {
            inner: Some(Arc::new(Inner {
                cache,
                memo: Mutex::new(None),
                applied: Mutex::new(Vec::new()),
            })),
        }
    }

    /// The cache overlays are read from (`None`: the feature gate is off).
    pub fn cache(&self) -> Option<&Cache<NodeOverlay>> {
        self.inner.as_ref().map(|i| &i.cache)
    }

    /// Whether any overlay exists.
    pub fn any(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| !i.cache.store().is_empty())
    }

    /// The overlays evaluated over `bases` (every NodeClass's catalog without overlays, in
    /// NodeClass name order). Recomputed only when an overlay's spec (its generation) or a
    /// base catalog changed: our own status writes do not invalidate it.
    pub fn evaluation(&self, bases: Vec<Arc<Catalog>>) -> Arc<Evaluation> {
        let Some(inner) = &self.inner else {
            return Arc::default();
        };
        let mut objects = inner.cache.store().state();
        objects.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let specs: Vec<(String, Option<i64>)> = objects
            .iter()
            .map(|o| (o.name_any(), o.metadata.generation))
            .collect();
        let mut memo = inner.memo.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = memo.as_ref()
            && m.specs == specs
            && m.bases.len() == bases.len()
            && m.bases.iter().zip(&bases).all(|(a, b)| Arc::ptr_eq(a, b))
        {
            return Arc::clone(&m.evaluation);
        }
        let parsed = objects
            .iter()
            .map(|o| {
                Overlay::from_api(o).map_err(|why| (o.name_any(), o.spec.weight.unwrap_or(0), why))
            })
            .collect();
        let refs: Vec<&Catalog> = bases.iter().map(|c| c.as_ref()).collect();
        let evaluation = Arc::new(evaluate(parsed, &refs));
        *memo = Some(Memo {
            specs,
            bases,
            evaluation: Arc::clone(&evaluation),
        });
        evaluation
    }

    /// `base` with the overlays of `evaluation` applied (`base` itself when none applies).
    pub fn apply(&self, base: &Arc<Catalog>, evaluation: &Arc<Evaluation>) -> Arc<Catalog> {
        let Some(inner) = &self.inner else {
            return Arc::clone(base);
        };
        if evaluation.applied.is_empty() {
            return Arc::clone(base);
        }
        let mut applied = inner.applied.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = applied
            .iter()
            .find(|a| Arc::ptr_eq(&a.base, base) && Arc::ptr_eq(&a.evaluation, evaluation))
        {
            return Arc::clone(&a.out);
        }
        let out = Arc::new(apply(base, &evaluation.applied));
        // Entries of an older evaluation or an older base of the same catalog are dead.
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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    fn overlay(name: &str, price: &str) -> NodeOverlay {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": name}, "spec": {"requirements": [], "price": price},
        }))
        .expect("overlay")
    }

    fn base() -> Arc<Catalog> {
        let template: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "DockerMachineTemplate",
            "metadata": {"name": "m", "namespace": "ns", "annotations": {
                "capacity.cluster-autoscaler.kubernetes.io/cpu": "2",
                "capacity.cluster-autoscaler.kubernetes.io/memory": "8Gi",
                "karpenter.cluster.x-k8s.io/price": "0.5"}},
        }))
        .expect("template");
        let catalog = templates::build_catalog(&[template], &templates::CatalogSettings::default())
            .expect("catalog");
        Arc::new(catalog)
    }

    #[test]
    fn evaluations_and_catalogs_are_memoized_until_something_changes() {
        let (cache, mut feed) = Cache::<NodeOverlay>::detached();
        let overlays = Overlays::new(cache);
        let b = base();
        assert!(!overlays.any());
        let e0 = overlays.evaluation(vec![Arc::clone(&b)]);
        assert!(
            Arc::ptr_eq(&overlays.apply(&b, &e0), &b),
            "nothing to apply"
        );
        feed.apply(Event::Apply(overlay("cheap", "0.1")));
        assert!(overlays.any());
        let e1 = overlays.evaluation(vec![Arc::clone(&b)]);
        assert!(!Arc::ptr_eq(&e0, &e1));
        assert!(Arc::ptr_eq(&e1, &overlays.evaluation(vec![Arc::clone(&b)])));
        // A status write (same generation) keeps it; a spec change (new generation) not.
        let mut written = overlay("cheap", "0.1");
        written.metadata.generation = None;
        written.status = Some(Default::default());
        feed.apply(Event::Apply(written));
        assert!(Arc::ptr_eq(&e1, &overlays.evaluation(vec![Arc::clone(&b)])));
        let mut edited = overlay("cheap", "0.2");
        edited.metadata.generation = Some(2);
        feed.apply(Event::Apply(edited));
        let e2 = overlays.evaluation(vec![Arc::clone(&b)]);
        assert!(!Arc::ptr_eq(&e1, &e2));
        assert_eq!(
            overlays.apply(&b, &e2).instance_types[0].offerings[0].price,
            0.2
        );
        feed.apply(Event::Apply(overlay("cheap", "0.1")));
        let e1 = overlays.evaluation(vec![Arc::clone(&b)]);
        let c1 = overlays.apply(&b, &e1);
        assert_eq!(c1.instance_types[0].offerings[0].price, 0.1);
        assert!(Arc::ptr_eq(&c1, &overlays.apply(&b, &e1)));
        // A new base catalog: evaluated again.
        let b2 = base();
        assert!(!Arc::ptr_eq(
            &e1,
            &overlays.evaluation(vec![Arc::clone(&b2)])
        ));
        // Off: nothing applies.
        let off = Overlays::default();
        assert!(Arc::ptr_eq(&off.apply(&b, &e1), &b));
    }
}
