//! The Cluster API provider under the core's overlay decorator: its `instance_types` answer
//! is the catalog without overlays, so a `priceAdjustment` is applied once (by the
//! decorator), not twice; launch reads the catalog as overlaid.

use std::sync::Arc;

use cloudprovider::CloudProvider;
use cloudprovider::overlay::{Overlaid, OverlayStore};
use karpenter_core::events::{Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use templates::model::Catalog;

use crate::catalogs::Catalogs;
use crate::context::{Context, Settings};

/// One NodeClass `default` whose catalog is `base`; `overlaid` is what launch reads (the
/// store's evaluation applied to it).
struct Fixed {
    base: Arc<Catalog>,
    store: Arc<OverlayStore>,
}

impl Catalogs for Fixed {
    fn catalog(&self, nodeclass: &str) -> Option<Arc<Catalog>> {
        (nodeclass == "default").then(|| self.base.clone())
    }

    fn overlaid(&self, nodeclass: &str) -> Option<Arc<Catalog>> {
        let base = self.catalog(nodeclass)?;
        let evaluation = self
            .store
            .evaluation(&|n| self.catalog(n).map(|c| c.types.clone()));
        let types = self.store.apply(&base.types, &evaluation);
        Some(Arc::new(Catalog {
            types,
            ..Catalog::clone(&base)
        }))
    }
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

fn provider(catalogs: Arc<dyn Catalogs>) -> crate::ClusterApi {
    let client = kube::Client::try_from(kube::Config::new(
        "http://127.0.0.1:9".parse().expect("url"),
    ))
    .expect("client");
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "test".into(),
            instance: None,
        },
    );
    let metrics = karpenter_core::metrics::Metrics::register(
        &mut prometheus_client::registry::Registry::default(),
    );
    let ctx = Context {
        management: client,
        recorder,
        metrics,
        machines: reflector::store().0,
        nodeclasses: reflector::store().0,
        clusters: reflector::store().0,
        health_checks: reflector::store().0,
        drain_rules: reflector::store().0,
        nodeclaims: reflector::store().0,
        catalogs,
        unavailable: Arc::default(),
        inventory: Default::default(),
        settings: Settings::default(),
        kinds: Arc::default(),
        lookups: Arc::default(),
        control_planes: Arc::default(),
        launched: Arc::default(),
        cluster_id: "test".into(),
    };
    crate::ClusterApi::new(ctx, None)
}

fn price(p: &dyn CloudProvider) -> Option<f64> {
    let types = p.instance_types("default")?;
    Some(types.instance_types.first()?.offerings.first()?.price)
}

#[tokio::test]
async fn a_price_adjustment_is_applied_once() {
    let (overlays, mut writer) = reflector::store::<api::NodeOverlay>();
    writer.apply_watcher_event(&Event::Apply(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": "dearer", "generation": 1},
            "spec": {"requirements": [], "priceAdjustment": "+0.1"},
        }))
        .expect("overlay"),
    ));
    let store = Arc::new(OverlayStore::new(
        overlays,
        Box::new(|| vec!["default".to_string()]),
    ));
    let catalogs = Arc::new(Fixed {
        base: base(),
        store: store.clone(),
    });
    let capi = Arc::new(provider(catalogs.clone()));
    // The provider answers its templates' price; launch reads the overlaid one.
    assert_eq!(price(capi.as_ref()), Some(0.5));
    let launch = catalogs.overlaid("default").expect("catalog");
    let launched_at = launch.instance_types[0].offerings[0].price;
    assert!((launched_at - 0.6).abs() < 1e-9, "{launched_at}");
    // Through the decorator: adjusted once (twice would be 0.7).
    let overlaid = Overlaid::new(capi, store);
    let p = price(&overlaid).expect("price");
    assert!((p - 0.6).abs() < 1e-9, "adjusted once: {p}");
    assert_eq!(
        p, launched_at,
        "the core plans on the price launch chooses by"
    );
}
