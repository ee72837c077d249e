//! Bare-metal hosts, as Metal3 keeps them: a trimmed `BareMetalHost` CRD (`metal3.io/v1alpha1`:
//! `spec.consumerRef`, `spec.online`, `status.provisioning.state`, `status.poweredOn`,
//! everything else kept) and the parts of Metal3 that claim and reboot hosts, run when
//! [`ProviderConfig::bare_metal_hosts`] is set:
//! - provisioning (the Metal3 machine controller, on TestMachines whose spec carries a
//!   `hostSelector`, cloned from the template's `spec.template.spec.hostSelector`): a host
//!   already naming the TestMachine in `spec.consumerRef` is kept; otherwise a free host of
//!   the namespace (no `consumerRef`, state `available` or `ready`, not being deleted)
//!   matching the selector (`matchLabels`; `matchExpressions` with `in`/`notin`/`exists`/`!`
//!   in either spelling) gets `consumerRef` (a write conditional on its resourceVersion, so
//!   two machines never take one host), state `provisioned` and `poweredOn: true`; the
//!   TestMachine gets the annotation [`HOST_ANNOTATION`]` = <namespace>/<host>`, as CAPM3
//!   puts it on a Metal3Machine; with none free the TestMachine fails ([`NO_HOST_REASON`],
//!   as [`FAIL_ANNOTATION`] does);
//! - reboot (the baremetal-operator's power management): a provisioned (or externally
//!   provisioned) host with an annotation [`REBOOT_ANNOTATION`] or `reboot.metal3.io/<key>`
//!   is powered off (`status.poweredOn: false`, `status.lastUpdated`); once off, the
//!   suffix-less annotation is removed (keyed ones stay until their writer removes them, and
//!   keep the host off); with no reboot annotation left, `spec.online` not false and
//!   [`POWER_OFF_TIME`] spent off, the host powers on (`status.poweredOn: true`) and the Node
//!   of the TestMachine consuming it boots again: a new `status.nodeInfo.bootID`
//!   (`boot-<n>-<node>`; every Node starts at `boot-1-<node>`), and the annotation
//!   `kwok.x-k8s.io/node: fake` put back, so a Node a test broke (kwok's annotation removed,
//!   `Ready=False`) is made Ready by kwok again;
//! - deletion: the host is released (no `consumerRef`, state `available`).

use std::collections::BTreeMap;

use super::*;

pub const METAL3_GROUP: &str = "metal3.io";
pub const METAL3_VERSION: &str = "v1alpha1";
pub const BARE_METAL_HOST_KIND: &str = "BareMetalHost";
/// On a TestMachine holding a host (as CAPM3 puts it on a Metal3Machine): `<namespace>/<host>`.
pub const HOST_ANNOTATION: &str = "metal3.io/BareMetalHost";
/// The baremetal-operator's reboot annotation (suffix-less; `reboot.metal3.io/<key>` too).
pub const REBOOT_ANNOTATION: &str = "reboot.metal3.io";
/// How long a rebooting host stays powered off.
pub const POWER_OFF_TIME: Duration = Duration::from_secs(2);
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
    if let Some(held) = all.iter().find(|h| consumer(h) == Some(name.as_str())) {
        annotate_machine(ctx, obj, &held.name_any()).await?;
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
        &Patch::Merge(
            json!({"status": {"provisioning": {"state": "provisioned"}, "poweredOn": true}}),
        ),
    )
    .await?;
    annotate_machine(ctx, obj, &host.name_any()).await?;
    Ok(true)
}

/// Names the TestMachine's host on it, as CAPM3 does on a Metal3Machine.
async fn annotate_machine(ctx: &Ctx, obj: &DynamicObject, host: &str) -> Result<()> {
    let value = format!("{}/{host}", obj.namespace().unwrap_or_default());
    if obj.annotations().get(HOST_ANNOTATION) == Some(&value) {
        return Ok(());
    }
    namespaced(ctx, obj, &test_machine_resource())?
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {HOST_ANNOTATION: value}}})),
        )
        .await?;
    Ok(())
}

/// The reboot annotations of a host: (suffix-less present, keyed ones present).
fn reboot_annotations(host: &DynamicObject) -> (bool, bool) {
    let keys = host.annotations().keys();
    let prefix = format!("{REBOOT_ANNOTATION}/");
    let mut plain = false;
    let mut keyed = false;
    for k in keys {
        plain |= k == REBOOT_ANNOTATION;
        keyed |= k.starts_with(&prefix);
    }
    (plain, keyed)
}

/// What the power management does next to a host.
#[derive(Debug, PartialEq)]
enum Power {
    /// Nothing (until the host changes).
    Idle,
    /// A reboot is asked: power off.
    Off,
    /// Off, and the suffix-less annotation is still there: remove it.
    Unannotate,
    /// Off, nothing keeps it off: power on after this much more time.
    OnIn(Duration),
}

fn next_power(host: &DynamicObject, off_for: Duration) -> Power {
    let (plain, keyed) = reboot_annotations(host);
    let status = &host.data["status"];
    let rebootable = matches!(
        status["provisioning"]["state"].as_str(),
        Some("provisioned" | "externally provisioned")
    );
    if status["poweredOn"] == false {
        if plain {
            Power::Unannotate
        } else if keyed || host.data["spec"]["online"] == false {
            Power::Idle
        } else {
            Power::OnIn(POWER_OFF_TIME.saturating_sub(off_for))
        }
    } else if (plain || keyed) && rebootable {
        Power::Off
    } else {
        Power::Idle
    }
}

/// The baremetal-operator's power management of one host (see the module documentation).
pub(super) async fn reconcile_host(host: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
    if host.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api = namespaced(&ctx, &host, &bare_metal_host_resource())?;
    let since = host.data["status"]["lastUpdated"]
        .as_str()
        .and_then(|t| t.parse::<Timestamp>().ok());
    // Off since an unknown time (a host created off): long enough.
    let off_for = since.map_or(Duration::MAX, |t| {
        Duration::try_from(Timestamp::now().duration_since(t)).unwrap_or(Duration::ZERO)
    });
    match next_power(&host, off_for) {
        Power::Idle => Ok(Action::await_change()),
        Power::Off => {
            set_power(&api, &host, false).await?;
            Ok(Action::await_change())
        }
        Power::Unannotate => {
            api.patch(
                &host.name_any(),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"resourceVersion": host.resource_version(),
                    "annotations": {REBOOT_ANNOTATION: null}}}),
                ),
            )
            .await?;
            Ok(Action::await_change())
        }
        Power::OnIn(wait) if !wait.is_zero() => Ok(Action::requeue(wait)),
        Power::OnIn(_) => {
            // The Node boots before the host reports on: a failed status write boots it
            // again (another bootID), never leaves it un-booted.
            boot_consumer_node(&ctx, &host).await?;
            set_power(&api, &host, true).await?;
            Ok(Action::await_change())
        }
    }
}

/// Reports the host powered on or off, conditional on the version it was read at.
async fn set_power(api: &Api<DynamicObject>, host: &DynamicObject, on: bool) -> Result<()> {
    api.patch_status(
        &host.name_any(),
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"resourceVersion": host.resource_version()},
            "status": {"poweredOn": on, "lastUpdated": now()}}),
        ),
    )
    .await?;
    Ok(())
}

/// The first bootID of a Node.
pub(super) fn first_boot_id(node: &str) -> String {
    format!("boot-1-{node}")
}

/// The bootID after `previous` (`boot-<n>-<node>` → `boot-<n+1>-<node>`).
fn next_boot_id(previous: &str, node: &str) -> String {
    let n = previous
        .strip_prefix("boot-")
        .and_then(|rest| rest.split_once('-'))
        .and_then(|(n, _)| n.parse::<u64>().ok())
        .unwrap_or(1);
    format!("boot-{}-{node}", n.saturating_add(1))
}

/// The Node of the TestMachine consuming `host` boots again: a new bootID, then kwok's
/// annotation back (in this order: kwok, seeing the Node again, keeps the new bootID).
async fn boot_consumer_node(ctx: &Ctx, host: &DynamicObject) -> Result<()> {
    let consumer = &host.data["spec"]["consumerRef"];
    let (Some(name), true) = (
        consumer["name"].as_str(),
        consumer["kind"] == TEST_MACHINE_KIND,
    ) else {
        return Ok(());
    };
    let ns = consumer["namespace"]
        .as_str()
        .map(str::to_string)
        .or_else(|| host.namespace())
        .unwrap_or_default();
    let machines: Api<DynamicObject> =
        Api::namespaced_with(ctx.mgmt.clone(), &ns, &test_machine_resource());
    let Some(machine) = machines.get_opt(name).await? else {
        return Ok(());
    };
    let Some(node_name) = machine.data["status"]["nodeName"].as_str() else {
        return Ok(());
    };
    let nodes: Api<Node> = Api::all(ctx.workload_of(&machine).await);
    let Some(node) = nodes.get_opt(node_name).await? else {
        return Ok(());
    };
    if node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) != Some(&provider_id(&ns, name)) {
        return Ok(());
    }
    let previous = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.clone())
        .unwrap_or_default();
    let boot_id = next_boot_id(&previous, node_name);
    nodes
        .patch_status(
            node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodeInfo": {"bootID": boot_id}}})),
        )
        .await?;
    nodes
        .patch(
            node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {KWOK_ANNOTATION: "fake"}}})),
        )
        .await?;
    tracing::debug!(node = node_name, %boot_id, host = %host.name_any(), "test provider: node rebooted");
    Ok(())
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

    fn host(annotations: Value, state: &str, powered_on: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": "h", "namespace": "capi", "annotations": annotations},
            "spec": {"online": true},
            "status": {"provisioning": {"state": state}, "poweredOn": powered_on}
        }))
        .expect("host")
    }

    #[test]
    fn a_reboot_powers_off_unannotates_then_powers_on() {
        let asked = json!({REBOOT_ANNOTATION: "{\"mode\":\"hard\"}"});
        let zero = Duration::ZERO;
        assert_eq!(
            next_power(&host(asked.clone(), "provisioned", json!(true)), zero),
            Power::Off
        );
        assert_eq!(
            next_power(
                &host(asked.clone(), "externally provisioned", json!(true)),
                zero
            ),
            Power::Off
        );
        assert_eq!(
            next_power(&host(asked.clone(), "provisioned", json!(false)), zero),
            Power::Unannotate
        );
        let off = host(json!({}), "provisioned", json!(false));
        assert_eq!(next_power(&off, zero), Power::OnIn(POWER_OFF_TIME));
        assert_eq!(
            next_power(&off, POWER_OFF_TIME * 2),
            Power::OnIn(Duration::ZERO)
        );
        // Keyed annotations keep it off until removed; spec.online false keeps it off.
        let keyed = json!({"reboot.metal3.io/remediation": ""});
        assert_eq!(
            next_power(&host(keyed.clone(), "provisioned", json!(false)), zero),
            Power::Idle
        );
        assert_eq!(
            next_power(&host(keyed, "provisioned", json!(true)), zero),
            Power::Off
        );
        let mut offline = off.clone();
        offline.data["spec"]["online"] = json!(false);
        assert_eq!(next_power(&offline, POWER_OFF_TIME), Power::Idle);
        // Not provisioned: the annotation is ignored; no annotation: nothing to do.
        assert_eq!(
            next_power(&host(asked, "available", json!(true)), zero),
            Power::Idle
        );
        assert_eq!(
            next_power(&host(json!({}), "provisioned", json!(true)), zero),
            Power::Idle
        );
        assert_eq!(
            next_power(&host(json!({}), "provisioned", Value::Null), zero),
            Power::Idle
        );
    }

    #[test]
    fn every_boot_has_a_new_boot_id() {
        let first = first_boot_id("n-1");
        assert_eq!(first, "boot-1-n-1");
        let second = next_boot_id(&first, "n-1");
        assert_eq!(second, "boot-2-n-1");
        assert_eq!(next_boot_id(&second, "n-1"), "boot-3-n-1");
        // A Node whose bootID the provider did not set still gets a new one.
        assert_eq!(next_boot_id("", "n-1"), "boot-2-n-1");
        assert_ne!(next_boot_id("0f3c-uuid", "n-1"), "0f3c-uuid");
    }
}
