//! Per-cluster series in hub mode: a [`ScopedFamily`] is a metric family whose series carry,
//! besides their own labels, the `cluster="<namespace>/<name>"` label of the engagement that
//! wrote them — first, so a dashboard can sum or split by cluster. Each engagement gets a
//! view of the same families with its cluster set (`Metrics::scoped`); single-cluster mode
//! (and a hub started with `--metrics-cluster-label=false`) has no scope, and its series are
//! exactly as before. A disengaged cluster's series are dropped (`Metrics::forget_cluster`):
//! the replica that serves it now reports them.

use std::collections::HashSet;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::family::{Family, MetricConstructor};

/// A series' labels: the optional cluster, then the metric's own.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Scoped<L> {
    pub cluster: Option<Arc<str>>,
    pub labels: L,
}

impl<L: EncodeLabelSet> EncodeLabelSet for Scoped<L> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        if let Some(cluster) = &self.cluster {
            ("cluster", cluster.as_ref()).encode(encoder.encode_label())?;
        }
        self.labels.encode(encoder)
    }
}

/// A metric family written through a cluster scope (see the module doc). Clones share the
/// series.
#[derive(Debug)]
pub struct ScopedFamily<L, M, C = fn() -> M> {
    family: Family<Scoped<L>, M, C>,
    scope: Option<Arc<str>>,
    /// The label sets written with a scope, to drop a cluster's series.
    scoped: Arc<Mutex<HashSet<Scoped<L>>>>,
}

impl<L, M, C: Clone> Clone for ScopedFamily<L, M, C> {
    fn clone(&self) -> Self {
        ScopedFamily {
            family: self.family.clone(),
            scope: self.scope.clone(),
            scoped: self.scoped.clone(),
        }
    }
}

impl<L: Clone + Hash + Eq, M: Default> Default for ScopedFamily<L, M> {
    fn default() -> Self {
        ScopedFamily {
            family: Family::default(),
            scope: None,
            scoped: Arc::default(),
        }
    }
}

impl<L: Clone + Hash + Eq, M, C: MetricConstructor<M> + Clone> ScopedFamily<L, M, C> {
    pub(crate) fn new_with_constructor(constructor: C) -> Self {
        ScopedFamily {
            family: Family::new_with_constructor(constructor),
            scope: None,
            scoped: Arc::default(),
        }
    }

    fn key(&self, labels: &L) -> Scoped<L> {
        Scoped {
            cluster: self.scope.clone(),
            labels: labels.clone(),
        }
    }

    /// The series of `labels` in this scope.
    pub fn get_or_create(&self, labels: &L) -> impl Deref<Target = M> + '_ {
        let key = self.key(labels);
        if key.cluster.is_some() {
            let mut scoped = self.scoped.lock().unwrap_or_else(|p| p.into_inner());
            if !scoped.contains(&key) {
                scoped.insert(key.clone());
            }
        }
        self.family.get_or_create(&key)
    }

    /// Drops the series of `labels` in this scope.
    pub fn remove(&self, labels: &L) -> bool {
        self.family.remove(&self.key(labels))
    }

    /// The same family, written with `cluster`'s label (none: unlabelled).
    pub fn scoped(&self, cluster: Option<Arc<str>>) -> Self {
        ScopedFamily {
            scope: cluster,
            ..self.clone()
        }
    }

    /// The cluster this view writes for (`None`: unlabelled).
    pub fn scope(&self) -> Option<Arc<str>> {
        self.scope.clone()
    }

    /// Drops every series written with `cluster`'s label.
    pub fn forget(&self, cluster: &str) {
        let mut scoped = self.scoped.lock().unwrap_or_else(|p| p.into_inner());
        scoped.retain(|k| {
            let ours = k.cluster.as_deref() == Some(cluster);
            if ours {
                self.family.remove(k);
            }
            !ours
        });
    }

    /// The family to register.
    pub fn family(&self) -> Family<Scoped<L>, M, C> {
        self.family.clone()
    }
}

/// Implements `Metrics::scoped` and `Metrics::forget_cluster` over the per-cluster families
/// it is given (invoked in `metrics`, where `Metrics` is).
macro_rules! scoped_families {
    ($($field:ident),* $(,)?) => {
        impl Metrics {
            /// The same metrics, the per-cluster series written with `cluster`'s label
            /// (`None`: unlabelled, as in single-cluster mode).
            pub fn scoped(&self, cluster: Option<&str>) -> Metrics {
                let scope: Option<std::sync::Arc<str>> = cluster.map(std::sync::Arc::from);
                Metrics {
                    $($field: self.$field.scoped(scope.clone()),)*
                    ..self.clone()
                }
            }

            /// Drops the per-cluster series of `cluster` (disengaged).
            pub fn forget_cluster(&self, cluster: &str) {
                $(self.$field.forget(cluster);)*
            }
        }
    };
}
pub(crate) use scoped_families;

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::registry::Registry;

    #[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
    struct Pool {
        nodepool: String,
    }

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).expect("encodes");
        out
    }

    #[test]
    fn a_scope_adds_the_cluster_label_and_none_adds_nothing() {
        let family: ScopedFamily<Pool, Counter> = ScopedFamily::default();
        let mut registry = Registry::default();
        registry.register("launched", "help", family.family());
        let pool = Pool {
            nodepool: "default".into(),
        };
        family.get_or_create(&pool).inc();
        let a = family.scoped(Some("t1/a".into()));
        a.get_or_create(&pool).inc();
        a.get_or_create(&pool).inc();
        family
            .scoped(Some("t2/b".into()))
            .get_or_create(&pool)
            .inc();
        let page = text(&registry);
        assert!(
            page.contains("launched_total{nodepool=\"default\"} 1\n"),
            "{page}"
        );
        assert!(
            page.contains("launched_total{cluster=\"t1/a\",nodepool=\"default\"} 2\n"),
            "{page}"
        );
        a.forget("t1/a");
        let page = text(&registry);
        assert!(!page.contains("t1/a"), "{page}");
        assert!(page.contains("cluster=\"t2/b\""), "{page}");
        assert!(
            page.contains("launched_total{nodepool=\"default\"} 1\n"),
            "{page}"
        );
    }
}
