//! Bare-metal hosts, as Metal3 keeps them: a trimmed `BareMetalHost` CRD (`metal3.io/v1alpha1`:
//! `spec.consumerRef`, `spec.online`, `status.provisioning.state`, everything else kept) and
//! the part of a Metal3 machine controller that claims hosts, run on TestMachines whose spec
//! carries a `hostSelector` (cloned from the template's `spec.template.spec.hostSelector`)
//! when [`ProviderConfig::bare_metal_hosts`] is set:
//! - provisioning: a host already naming the TestMachine in `spec.consumerRef` is kept;
//!   otherwise a free host of the namespace (no `consumerRef`, state `available` or `ready`,
//!   not being deleted) matching the selector (`matchLabels`; `matchExpressions` with
//!   `in`/`notin`/`exists`/`!` in either spelling) gets `consumerRef` (a write conditional on
//!   its resourceVersion, so two machines never take one host) and state `provisioned`;
//!   with none free the TestMachine fails ([`NO_HOST_REASON`], as [`FAIL_ANNOTATION`] does);
//! - deletion: the host is released (no `consumerRef`, state `available`).

use std::collections::BTreeMap;

use super::*;

pub const METAL3_GROUP: &str = "metal3.io";
pub const METAL3_VERSION: &str = "v1alpha1";
pub const BARE_METAL_HOST_KIND: &str = "BareMetalHost";
/// The failure message of a TestMachine no free host matches.
pub const NO_HOST_REASON: &str = "no free BareMetalHost matches the hostSelector";

/// `metal3.io/v1alpha1` BareMetalHost.
pub fn bare_metal_host_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(METAL3_GROUP, METAL3_VERSION, BARE_METAL_HOST_KIND),
        "baremetalhosts",
    )
}

/// The trimmed BareMetalHost CRD.
pub fn bare_metal_host_crd() -> CustomResourceDefinition {
    let v = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "baremetalhosts.metal3.io"},
        "spec": {
            "group": METAL3_GROUP,
            "names": {"kind": BARE_METAL_HOST_KIND, "listKind": "BareMetalHostList",
                      "plural": "baremetalhosts", "singular": "baremetalhost", "shortNames": ["bmh"]},
            "scope": "Namespaced",
            "versions": [{
                "name": METAL3_VERSION, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {
                            "online": {"type": "boolean"},
                            "consumerRef": {"type": "object", "properties": {
                                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                "name": {"type": "string"}, "namespace": {"type": "string"}}}
                        }},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"provisioning": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {"state": {"type": "string"}}}}}
                }}}
            }]
        }
    });
    serde_json::from_value(v).expect("static CRD definition is valid")
}

fn selector_matches(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector["matchLabels"].as_object().is_none_or(|m| {
        m.iter()
            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
    });
    let exprs_ok = selector["matchExpressions"].as_array().is_none_or(|es| {
        es.iter().all(|e| {
            let have = e["key"].as_str().and_then(|k| labels.get(k));
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|vs| vs.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let within = have.is_some_and(|h| values.contains(&h.as_str()));
            match e["operator"]
                .as_str()
                .unwrap_or_default()
                .to_ascii_lowercase()
                .as_str()
            {
                "in" | "=" | "==" => within,
                "notin" | "!=" => !within,
                "exists" => have.is_some(),
                "doesnotexist" | "!" => have.is_none(),
                _ => false,
            }
        })
    });
    labels_ok && exprs_ok
}

fn consumer(host: &DynamicObject) -> Option<&str> {
    host.data["spec"]["consumerRef"]["name"].as_str()
}

fn is_free(host: &DynamicObject) -> bool {
    host.data["spec"]["consumerRef"].is_null()
        && host.metadata.deletion_timestamp.is_none()
        && matches!(
            host.data["status"]["provisioning"]["state"].as_str(),
            Some("available" | "ready")
        )
}

fn hosts(ctx: &Ctx, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(ctx.mgmt.clone(), ns, &bare_metal_host_resource())
}

/// Claims a host for a TestMachine with a `hostSelector`: `Ok(true)` when it holds one,
/// `Ok(false)` when none is free.
pub(super) async fn claim(ctx: &Ctx, obj: &DynamicObject) -> Result<bool> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api = hosts(ctx, &ns);
    let all = api.list(&Default::default()).await?.items;
    if all.iter().any(|h| consumer(h) == Some(name.as_str())) {
        return Ok(true);
    }
    let selector = &obj.data["spec"]["hostSelector"];
    let empty = BTreeMap::new();
    let mut free: Vec<&DynamicObject> = all
        .iter()
        .filter(|h| {
            is_free(h) && selector_matches(selector, h.metadata.labels.as_ref().unwrap_or(&empty))
        })
        .collect();
    free.sort_by_key(|h| h.name_any());
    let Some(host) = free.first() else {
        return Ok(false);
    };
    // Conditional on the version read: a concurrent claim makes this fail and the
    // reconcile retry with the next free host.
    api.patch(
        &host.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"resourceVersion": host.resource_version()},
            "spec": {"consumerRef": {"apiVersion": format!("{INFRASTRUCTURE_GROUP}/{VERSION}"),
                "kind": TEST_MACHINE_KIND, "name": name, "namespace": ns}}
        })),
    )
    .await?;
    api.patch_status(
        &host.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"provisioning": {"state": "provisioned"}}})),
    )
    .await?;
    Ok(true)
}

/// Releases the hosts a deleted TestMachine holds.
pub(super) async fn release(ctx: &Ctx, obj: &DynamicObject) -> Result<()> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api = hosts(ctx, &ns);
    for h in api.list(&Default::default()).await?.items {
        if consumer(&h) != Some(name.as_str()) {
            continue;
        }
        api.patch_status(
            &h.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"provisioning": {"state": "available"}}})),
        )
        .await?;
        api.patch(
            &h.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"consumerRef": null}})),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_in_both_spellings() {
        let labels: BTreeMap<String, String> = [("size".to_string(), "large".to_string())].into();
        assert!(selector_matches(
            &json!({"matchLabels": {"size": "large"}}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchLabels": {"size": "small"}}),
            &labels
        ));
        assert!(selector_matches(
            &json!({"matchExpressions": [{"key": "size", "operator": "in", "values": ["large"]},
                                         {"key": "gpu", "operator": "DoesNotExist"}]}),
            &labels
        ));
        assert!(selector_matches(&Value::Null, &labels));
    }
}
