//! The provider plays a DRA driver: for each Node it creates from a template that declares
//! devices ([`api::dra`]: the resource-slices annotation or Cluster Autoscaler's dra-driver
//! with gpu-count, on the TestMachine or the template it was cloned from), it publishes the
//! ResourceSlices a driver's kubelet plugin would: one per driver, named
//! `<node>-<driver>`, `spec.nodeName` the Node, pool the Node's name (generation 1, one
//! slice), the declared devices (`gpu-0…` for the Cluster Autoscaler form), owned by the Node.
//! Deleting the Node deletes them (the provider does, and the garbage collector would).
//! A bad annotation is logged and publishes nothing; so does a template annotated
//! [`NO_SLICES_ANNOTATION`] (a driver that never publishes). A template annotated
//! [`REAL_SLICES_ANNOTATION`] publishes those devices instead of the declared ones (hardware
//! richer than its declaration). Idempotent: creates accept 409.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::ResourceSlice;

use super::*;

/// On a template that declares devices: its Nodes' DRA driver publishes no ResourceSlice
/// (a driver that never comes up); the test publishes them itself when it wants.
pub const NO_SLICES_ANNOTATION: &str = "testbed.cluster.x-k8s.io/no-resource-slices";
/// On a template that declares devices: what its Nodes' DRA driver really publishes (the
/// resource-slices annotation's form), when the hardware has more than was declared.
pub const REAL_SLICES_ANNOTATION: &str = "testbed.cluster.x-k8s.io/real-resource-slices";

/// The ResourceSlices of a Node the provider created for `machine` (a TestMachine).
pub(super) async fn publish_slices(
    ctx: &Ctx,
    workload: &Client,
    machine: &DynamicObject,
    node: &Node,
) -> Result<()> {
    let slices = declared(ctx, machine).await?;
    if slices.is_empty() {
        return Ok(());
    }
    let name = node.name_any();
    let api: Api<ResourceSlice> = Api::all(workload.clone());
    for s in slices {
        let slice: ResourceSlice = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": slice_name(&name, &s.driver), "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": name,
                "uid": node.metadata.uid.clone().unwrap_or_default()
            }]},
            "spec": {
                "driver": s.driver,
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": s.devices,
            }
        }))?;
        match api.create(&PostParams::default(), &slice).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The name of the slice of `driver` on `node`.
pub fn slice_name(node: &str, driver: &str) -> String {
    format!("{node}-{driver}")
}

/// Deletes the ResourceSlices published for Node `node`.
pub(super) async fn delete_slices(workload: &Client, node: &str) -> Result<()> {
    let api: Api<ResourceSlice> = Api::all(workload.clone());
    let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
    let list = match api.list(&lp).await {
        Ok(l) => l,
        // A workload cluster that does not serve resource.k8s.io/v1 has none.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for s in list {
        match api.delete(&s.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The devices the TestMachine's annotations declare, else its template's; a bad
/// annotation is logged and read as none.
async fn declared(ctx: &Ctx, machine: &DynamicObject) -> Result<Vec<api::dra::DeclaredSlice>> {
    let mut annotations = machine.annotations().clone();
    let mut template = BTreeMap::new();
    if let Some(name) = machine.annotations().get(CLONED_FROM_NAME_ANNOTATION) {
        let templates = namespaced(ctx, machine, &test_machine_template_resource())?;
        if let Some(t) = templates.get_opt(name).await? {
            template = t.annotations().clone();
        }
    }
    let own = annotations.clone();
    if api::dra::declared(&annotations).is_ok_and(|d| d.is_empty()) {
        annotations = template.clone();
    }
    // What the test's hardware does: the machine's (cloned) annotations, else the template's.
    let flag = |key: &str| own.get(key).or_else(|| template.get(key)).cloned();
    if flag(NO_SLICES_ANNOTATION).is_some() {
        return Ok(Vec::new());
    }
    if let Some(real) = flag(REAL_SLICES_ANNOTATION) {
        return Ok(api::dra::parse_resource_slices(&real).unwrap_or_else(|error| {
            tracing::warn!(machine = %machine.name_any(), %error, "test provider: ignoring {REAL_SLICES_ANNOTATION}");
            Vec::new()
        }));
    }
    Ok(
        api::dra::declared(&annotations).unwrap_or_else(|(key, error)| {
            tracing::warn!(machine = %machine.name_any(), %error, "test provider: ignoring {key}");
            Vec::new()
        }),
    )
}
