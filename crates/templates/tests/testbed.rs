//! The watching part on a real API server (testbed): provider-like template CRDs with
//! contract labels, templates, and the catalog served from reflector caches following
//! template edits, broken templates and CRDs installed after start-up.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use templates::selection::Selection;
use templates::watch::{TemplateIndex, WatchConfig, run};
use templates::{Catalog, CatalogSettings};
use testbed::{Options, Testbed, wait_for};

const GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// A provider-like template CRD; `contract` is (label key, label value) or none.
fn template_crd(
    kind: &str,
    versions: &[&str],
    contract: Option<(&str, &str)>,
) -> CustomResourceDefinition {
    let plural = format!("{}s", kind.to_lowercase());
    let labels = match contract {
        Some((k, v)) => json!({ k: v }),
        None => json!({}),
    };
    let last = versions.len().saturating_sub(1);
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}"), "labels": labels},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "versions": versions.iter().enumerate().map(|(i, v)| json!({
                "name": v, "served": true, "storage": i == last,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}
            })).collect::<Vec<_>>(),
        }
    }))
    .expect("static CRD is valid")
}

fn api(tb: &Testbed, ns: &str, kind: &str, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, version, kind),
        &format!("{}s", kind.to_lowercase()),
    );
    Api::namespaced_with(tb.client(), ns, &ar)
}

fn template(
    kind: &str,
    version: &str,
    name: &str,
    labels: Value,
    annotations: Value,
    status: Value,
) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{version}"),
        "kind": kind,
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"template": {"spec": {}}},
        "status": status,
    }))
    .expect("static template is valid")
}

fn member() -> Value {
    json!({"node.cluster.x-k8s.io/karpenter-member": "true"})
}

fn names(c: &Catalog) -> Vec<String> {
    c.instance_types.iter().map(|t| t.name.clone()).collect()
}

async fn catalog_where(
    index: &TemplateIndex,
    selection: &Selection,
    settings: &CatalogSettings,
    what: &str,
    pred: impl Fn(&Catalog) -> bool,
) -> Catalog {
    wait_for(what, Duration::from_secs(20), || {
        let c = index.catalog(selection, settings).expect("settings valid");
        let ok = pred(&c);
        async move { ok.then_some(c) }
    })
    .await
    .unwrap_or_else(|e| {
        let now = index.catalog(selection, settings).expect("settings valid");
        panic!(
            "{e}; catalog now: {:?} excluded {:?}",
            names(&now),
            now.excluded
        )
    })
}

#[tokio::test]
async fn catalog_follows_templates_and_crds() {
    let tb = Testbed::start(Options::default())
        .await
        .expect("testbed starts");
    tb.install_crds(&[
        // Contract label with two versions: the highest one is watched.
        template_crd(
            "AcmeMachineTemplate",
            &["v1beta1", "v1beta2"],
            Some(("cluster.x-k8s.io/v1beta2", "v1beta1_v1beta2")),
        ),
        // Only the v1beta1 contract label (fallback).
        template_crd(
            "ZetaMachineTemplate",
            &["v1beta1"],
            Some(("cluster.x-k8s.io/v1beta1", "v1beta1")),
        ),
        // Raw config/crd/bases CRD without contract label: ignored.
        template_crd("RawMachineTemplate", &["v1beta1"], None),
    ])
    .await
    .expect("CRDs established");
    let ns = tb.temp_namespace().await.expect("namespace");
    let acme = api(&tb, &ns, "AcmeMachineTemplate", "v1beta2");
    let zeta = api(&tb, &ns, "ZetaMachineTemplate", "v1beta1");
    let raw = api(&tb, &ns, "RawMachineTemplate", "v1beta1");
    let pp = PostParams::default();
    acme.create(
        &pp,
        &template(
            "AcmeMachineTemplate",
            "v1beta2",
            "acme-small",
            member(),
            json!({"capacity.cluster-autoscaler.kubernetes.io/cpu": "2",
               "capacity.cluster-autoscaler.kubernetes.io/memory": "4Gi"}),
            json!({}),
        ),
    )
    .await
    .expect("create acme-small");
    acme.create(
        &pp,
        &template(
            "AcmeMachineTemplate",
            "v1beta2",
            "acme-not-member",
            json!({}),
            json!({"capacity.cluster-autoscaler.kubernetes.io/cpu": "2",
               "capacity.cluster-autoscaler.kubernetes.io/memory": "4Gi"}),
            json!({}),
        ),
    )
    .await
    .expect("create acme-not-member");
    zeta.create(&pp, &template("ZetaMachineTemplate", "v1beta1", "zeta-gpu",
        json!({"node.cluster.x-k8s.io/karpenter-member": "true", "topology.kubernetes.io/zone": "zone-z"}),
        json!({}),
        json!({"capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
               "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"}})))
        .await
        .expect("create zeta-gpu");
    raw.create(
        &pp,
        &template(
            "RawMachineTemplate",
            "v1beta1",
            "raw",
            member(),
            json!({"capacity.cluster-autoscaler.kubernetes.io/cpu": "2",
               "capacity.cluster-autoscaler.kubernetes.io/memory": "4Gi"}),
            json!({}),
        ),
    )
    .await
    .expect("create raw");

    let index = TemplateIndex::new();
    let watcher = tokio::spawn(run(tb.client(), index.clone(), WatchConfig::default()));
    let selection = Selection {
        namespace: Some(ns.clone()),
        ..Default::default()
    };
    let settings = CatalogSettings {
        failure_domains: vec!["fd-1".into(), "fd-2".into()],
        ..Default::default()
    };

    let c = catalog_where(
        &index,
        &selection,
        &settings,
        "acme-small and zeta-gpu",
        |c| c.instance_types.len() == 2,
    )
    .await;
    assert_eq!(names(&c), ["acme-small", "zeta-gpu"]);
    let small = c.get("acme-small").expect("acme-small");
    assert_eq!(
        templates::model::templates_of(small)[0].api_version,
        "infrastructure.cluster.x-k8s.io/v1beta2"
    );
    let zones: Vec<_> = small
        .offerings
        .iter()
        .filter_map(|o| o.zone.as_deref())
        .collect();
    assert_eq!(zones, ["fd-1", "fd-2"]);
    let gpu = c.get("zeta-gpu").expect("zeta-gpu");
    assert_eq!(gpu.capacity.gpu_count(), 1);
    assert_eq!(gpu.labels["kubernetes.io/arch"], "arm64");
    assert_eq!(gpu.offerings[0].zone.as_deref(), Some("zone-z"));
    let kinds: Vec<String> = index
        .kinds()
        .into_iter()
        .map(|k| format!("{}/{}", k.kind, k.version))
        .collect();
    assert!(
        kinds.contains(&"AcmeMachineTemplate/v1beta2".to_string()),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&"ZetaMachineTemplate/v1beta1".to_string()),
        "{kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k.starts_with("RawMachineTemplate")),
        "{kinds:?}"
    );

    // Editing a template annotation is visible within 2 s.
    let changes = index.subscribe();
    let started = Instant::now();
    acme.patch(
        "acme-small",
        &PatchParams::default(),
        &Patch::Merge(json!({
        "metadata": {"annotations": {"capacity.cluster-autoscaler.kubernetes.io/cpu": "4"}}})),
    )
    .await
    .expect("patch acme-small");
    catalog_where(
        &index,
        &selection,
        &settings,
        "acme-small with 4 cpu",
        |c| {
            c.get("acme-small")
                .is_some_and(|t| t.capacity.cpu_milli() == 4000)
        },
    )
    .await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "template change took {took:?}"
    );
    assert!(
        changes.has_changed().unwrap_or(false),
        "change counter bumped"
    );

    // A broken template is excluded and named; the others keep serving.
    zeta.patch("zeta-gpu", &PatchParams::default(), &Patch::Merge(json!({
        "metadata": {"annotations": {"capacity.cluster-autoscaler.kubernetes.io/memory": "lots"}}})))
        .await
        .expect("patch zeta-gpu");
    let c = catalog_where(&index, &selection, &settings, "zeta-gpu excluded", |c| {
        !c.excluded.is_empty()
    })
    .await;
    assert_eq!(names(&c), ["acme-small"]);
    assert_eq!(c.excluded[0].template.name, "zeta-gpu");
    assert_eq!(c.excluded[0].error.reason(), "InvalidQuantity");
    assert!(
        c.excluded[0]
            .error
            .to_string()
            .contains("capacity.cluster-autoscaler.kubernetes.io/memory")
    );

    // A provider installed after start-up is picked up.
    tb.install_crds(&[template_crd(
        "LateMachineTemplate",
        &["v1beta2"],
        Some(("cluster.x-k8s.io/v1beta2", "v1beta2")),
    )])
    .await
    .expect("late CRD established");
    let late = api(&tb, &ns, "LateMachineTemplate", "v1beta2");
    // The CRD watch may see the CRD a moment after it is Established: retry the create.
    wait_for("late template created", Duration::from_secs(20), || {
        let late = late.clone();
        async move {
            late.create(
                &PostParams::default(),
                &template(
                    "LateMachineTemplate",
                    "v1beta2",
                    "late-medium",
                    member(),
                    json!({}),
                    json!({"capacity": {"cpu": "4", "memory": "8Gi"}}),
                ),
            )
            .await
            .ok()
        }
    })
    .await
    .expect("create late-medium");
    let c = catalog_where(&index, &selection, &settings, "late-medium listed", |c| {
        c.get("late-medium").is_some()
    })
    .await;
    assert_eq!(names(&c), ["acme-small", "late-medium"]);

    watcher.abort();
}
