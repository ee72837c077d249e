//! Reboot of a NodeClaim's instance in place (the seam's `CloudProvider::reboot`), for the
//! Machines Metal3 runs on a BareMetalHost:
//!
//! 1. the claim's Machine (its launch plan names it; the cache, else the API server; a
//!    Machine of another workload cluster is no instance of ours);
//! 2. its infrastructure machine (the Machine's `spec.infrastructureRef`, e.g. a
//!    Metal3Machine);
//! 3. its host: the infrastructure machine's annotation [`HOST_ANNOTATION`]
//!    (`<namespace>/<name>`, what CAPM3 puts on a Metal3Machine), else a BareMetalHost of its
//!    namespace whose `spec.consumerRef` names it (from the inventory's host cache when a
//!    NodeClass already watches BareMetalHosts, else one list). No host:
//!    [`Error::RebootNotImplemented`] naming the Machine (the core replaces the node);
//! 4. the host is patched (a merge patch conditional on the resourceVersion it was read at)
//!    with [`REBOOT_ANNOTATION`] = [`HARD_REBOOT`] — the suffix-less key: the
//!    baremetal-operator powers the host off, deletes the annotation and powers it on — and
//!    [`OPERATION_ANNOTATION`] = the operation, so the same operation asked again (after a
//!    restart too) writes nothing. A host that is not provisioned (`status.provisioning.state`
//!    neither `provisioned` nor `externally provisioned`) or kept off (`spec.online: false`:
//!    it would never power on again) is [`Error::RebootFailed`].
//!
//! API errors are [`Retry::Api`] (a stale read, [`Retry::Conflict`]); nothing read from the
//! cluster is unwrapped.

use std::sync::Arc;

use api::NodeClaim;
use cloudprovider::{Error, Retry};
use clusterapi_api::Machine;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::context::Context;
use crate::fence::{self, Ownership};
use crate::plan::Plan;
use karpenter_core::objects::uid_of;
use karpenter_core::write::{Outcome, Writer, guard, manager};

/// On a Metal3Machine (CAPM3): the BareMetalHost it runs on, `<namespace>/<name>`.
pub const HOST_ANNOTATION: &str = "metal3.io/BareMetalHost";
/// The baremetal-operator's reboot request; suffix-less, so the operator removes it itself
/// once the host is powered off, and powers the host on again.
pub const REBOOT_ANNOTATION: &str = "reboot.metal3.io";
/// The value of [`REBOOT_ANNOTATION`]: a hard power cycle (the node is unhealthy; a soft
/// power-off may hang).
pub const HARD_REBOOT: &str = r#"{"mode":"hard"}"#;
/// Ours, on a BareMetalHost: the operation of the last reboot we asked for.
pub const OPERATION_ANNOTATION: &str = "karpenter.cluster.x-k8s.io/reboot-operation";

const METAL3_GROUP: &str = "metal3.io";
const METAL3_VERSION: &str = "v1alpha1";
const BARE_METAL_HOST: &str = "BareMetalHost";
/// The provisioning states in which the baremetal-operator reboots a host.
const REBOOTABLE_STATES: [&str; 2] = ["provisioned", "externally provisioned"];

/// `metal3.io/v1alpha1` BareMetalHosts.
pub fn host_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(METAL3_GROUP, METAL3_VERSION, BARE_METAL_HOST),
        templates::inventory::METAL3_PLURAL,
    )
}

/// A host, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BareMetalHost {}/{}", self.namespace, self.name)
    }
}

impl HostKey {
    fn of(host: &DynamicObject) -> HostKey {
        HostKey {
            namespace: host.namespace().unwrap_or_default(),
            name: host.name_any(),
        }
    }
}

/// What a reboot request came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requested {
    /// The host was annotated: the baremetal-operator power-cycles it.
    Annotated(HostKey),
    /// The host already carries this operation: nothing written.
    AlreadyRequested(HostKey),
}

/// The host an infrastructure machine's [`HOST_ANNOTATION`] names (`<namespace>/<name>`; a
/// bare name is in the machine's namespace). `None` without a readable one.
pub fn annotated_host(infra: &DynamicObject) -> Option<HostKey> {
    let value = infra.annotations().get(HOST_ANNOTATION)?.trim();
    let (namespace, name) = match value.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name),
        None => (infra.namespace()?, value),
    };
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/')).then(|| HostKey {
        namespace,
        name: name.to_string(),
    })
}

/// Whether `host`'s `spec.consumerRef` names `infra` (same namespace; the kind, when the
/// reference gives one, equal).
pub fn consumes(host: &DynamicObject, infra: &DynamicObject) -> bool {
    let consumer = &host.data["spec"]["consumerRef"];
    let infra_ns = infra.namespace();
    let same_ns = |ns: Option<&str>| ns.is_none_or(|ns| Some(ns) == infra_ns.as_deref());
    consumer["name"].as_str() == Some(infra.name_any().as_str())
        && host.namespace() == infra_ns
        && same_ns(consumer["namespace"].as_str())
        && consumer["kind"]
            .as_str()
            .is_none_or(|k| infra.types.as_ref().is_none_or(|t| t.kind == k))
}

/// The host among `hosts` that consumes `infra` (the first by name, should two claim it).
pub fn consumer_host<'a>(
    hosts: impl IntoIterator<Item = &'a DynamicObject>,
    infra: &DynamicObject,
) -> Option<&'a DynamicObject> {
    hosts
        .into_iter()
        .filter(|h| consumes(h, infra))
        .min_by_key(|h| h.name_any())
}

/// What to do with a host asked to reboot for `operation`.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// It carries `operation` already.
    Done,
    /// It cannot reboot: why.
    Refused(String),
    /// Merge-patch it with this body (carrying the resourceVersion it was read at: a host
    /// changed since is read again, never overwritten).
    Patch(Value),
}

/// What a reboot for `operation` does to `host`.
pub fn decide(host: &DynamicObject, operation: &str) -> Decision {
    let key = HostKey::of(host);
    if host
        .annotations()
        .get(OPERATION_ANNOTATION)
        .map(String::as_str)
        == Some(operation)
    {
        return Decision::Done;
    }
    let state = host.data["status"]["provisioning"]["state"]
        .as_str()
        .unwrap_or_default();
    if !REBOOTABLE_STATES.contains(&state) {
        let state = if state.is_empty() { "none" } else { state };
        return Decision::Refused(format!(
            "{key} is not provisioned (provisioning state {state}): the baremetal-operator reboots only provisioned hosts"
        ));
    }
    if host.data["spec"]["online"] == false {
        return Decision::Refused(format!(
            "{key} is kept powered off (spec.online: false): it would not power on again"
        ));
    }
    let body = json!({"metadata": {"annotations": {
        REBOOT_ANNOTATION: HARD_REBOOT,
        OPERATION_ANNOTATION: operation,
    }}});
    Decision::Patch(guard(body, host.resource_version()))
}

fn api_error(what: &str, e: &kube::Error) -> Error {
    Error::retryable(Retry::Api, format!("{what}: {e}"))
}

fn not_served(e: &kube::Error) -> bool {
    karpenter_core::write::is_gone(e)
}

/// Reboots the host under `machine`, whose infrastructure machine is of resource `infra`,
/// for `operation`. `hosts`: the BareMetalHosts already cached (the consumerRef lookup
/// lists the namespace's hosts without them).
pub async fn request(
    client: &Client,
    machine: &Machine,
    infra: &ApiResource,
    hosts: Option<&[Arc<DynamicObject>]>,
    operation: &str,
) -> Result<Requested, Error> {
    let ns = machine.namespace().unwrap_or_default();
    let what = format!("Machine {ns}/{}", machine.name_any());
    let infra_ref = &machine.spec.infrastructure_ref;
    if infra_ref.name.is_empty() {
        return Err(Error::RebootNotImplemented(format!(
            "{what} has no infrastructure machine"
        )));
    }
    let infra_what = format!("{} {ns}/{}", infra_ref.kind, infra_ref.name);
    let infra_obj = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, infra)
        .get_opt(&infra_ref.name)
        .await
        .map_err(|e| api_error(&format!("reading {infra_what}"), &e))?
        .ok_or_else(|| Error::RebootNotImplemented(format!("{what}: its {infra_what} is gone")))?;
    let host = find_host(client, &infra_obj, hosts).await?;
    let Some(host) = host else {
        return Err(Error::RebootNotImplemented(format!(
            "{what} runs on no BareMetalHost (its {infra_what} has no {HOST_ANNOTATION} annotation naming an existing host, and no host's spec.consumerRef names it)"
        )));
    };
    let key = HostKey::of(&host);
    match decide(&host, operation) {
        Decision::Done => Ok(Requested::AlreadyRequested(key)),
        Decision::Refused(why) => Err(Error::RebootFailed(format!("{what}: {why}"))),
        Decision::Patch(body) => {
            let api = Api::<DynamicObject>::namespaced_with(
                client.clone(),
                &key.namespace,
                &host_resource(),
            );
            match Writer::new(api, manager::LIFECYCLE)
                .patch(&host, body)
                .await
            {
                Ok(Outcome::Written(_)) => Ok(Requested::Annotated(key)),
                Ok(Outcome::Conflict) => Err(Error::retryable(
                    Retry::Conflict,
                    format!("{key} changed since it was read"),
                )),
                Ok(Outcome::Gone) => Err(Error::retryable(
                    Retry::Api,
                    format!("{key} is gone since it was read"),
                )),
                Err(e) => Err(api_error(&format!("annotating {key}"), &e)),
            }
        }
    }
}

/// The host of `infra`: the one its [`HOST_ANNOTATION`] names, else the one of its
/// namespace whose consumerRef names it (among `cached`, else listed). `None`: no such
/// host, or the kind is not served.
async fn find_host(
    client: &Client,
    infra: &DynamicObject,
    cached: Option<&[Arc<DynamicObject>]>,
) -> Result<Option<DynamicObject>, Error> {
    if let Some(key) = annotated_host(infra) {
        let api =
            Api::<DynamicObject>::namespaced_with(client.clone(), &key.namespace, &host_resource());
        return match api.get_opt(&key.name).await {
            Ok(found) => Ok(found),
            Err(e) if not_served(&e) => Ok(None),
            Err(e) => Err(api_error(&format!("reading {key}"), &e)),
        };
    }
    if let Some(cached) = cached {
        return Ok(consumer_host(cached.iter().map(AsRef::as_ref), infra).cloned());
    }
    let ns = infra.namespace().unwrap_or_default();
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &host_resource());
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(consumer_host(&list.items, infra).cloned()),
        Err(e) if not_served(&e) => Ok(None),
        Err(e) => Err(api_error(
            &format!("listing the BareMetalHosts of namespace {ns}"),
            &e,
        )),
    }
}

/// The claim's Machine (cache, else the API server), ours: `NodeClaimNotFound` otherwise.
async fn machine_of(ctx: &Context, claim: &NodeClaim) -> Result<Arc<Machine>, Error> {
    let not_found = || Error::NodeClaimNotFound(claim.name_any());
    let plan = Plan::of(claim).ok_or_else(not_found)?;
    let cached = ctx
        .machines
        .get(&ObjectRef::new(&plan.machine).within(&plan.namespace));
    let machine = match cached {
        Some(m) => m,
        None => Arc::new(
            ctx.machines_api(&plan.namespace)
                .get_opt(&plan.machine)
                .await
                .map_err(|e| {
                    api_error(
                        &format!("reading Machine {}/{}", plan.namespace, plan.machine),
                        &e,
                    )
                })?
                .ok_or_else(not_found)?,
        ),
    };
    if fence::ownership(machine.as_ref(), &uid_of(claim), &ctx.cluster_id) == Ownership::Foreign {
        return Err(not_found());
    }
    Ok(machine)
}

/// `CloudProvider::reboot` of the Cluster API provider (see the module documentation).
pub(crate) async fn reboot(ctx: &Context, claim: &NodeClaim, operation: &str) -> Result<(), Error> {
    let machine = machine_of(ctx, claim).await?;
    let infra_ref = &machine.spec.infrastructure_ref;
    let (_, infra) = ctx
        .preferred(&infra_ref.api_group, &infra_ref.kind)
        .await
        .map_err(|e| {
            Error::retryable(
                Retry::Api,
                format!(
                    "looking up kind {} of group {}: {e}",
                    infra_ref.kind, infra_ref.api_group
                ),
            )
        })?;
    let cached: Option<Vec<Arc<DynamicObject>>> = ctx
        .inventory
        .listed_hosts(&host_resource())
        .map(|s| s.state());
    let out = request(
        &ctx.management,
        &machine,
        &infra,
        cached.as_deref(),
        operation,
    )
    .await?;
    match &out {
        Requested::Annotated(host) => {
            tracing::info!(nodeclaim = %claim.name_any(), %operation, %host, "reboot requested")
        }
        Requested::AlreadyRequested(host) => {
            tracing::debug!(nodeclaim = %claim.name_any(), %operation, %host, "reboot already requested")
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infra(annotations: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Machine",
            "metadata": {"name": "m-1", "namespace": "capi", "annotations": annotations}
        }))
        .expect("infra machine")
    }

    fn host(name: &str, consumer: Value, state: &str, annotations: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": "capi", "resourceVersion": "7",
                         "annotations": annotations},
            "spec": {"online": true, "consumerRef": consumer},
            "status": {"provisioning": {"state": state}}
        }))
        .expect("host")
    }

    fn key(ns: &str, name: &str) -> Option<HostKey> {
        Some(HostKey {
            namespace: ns.into(),
            name: name.into(),
        })
    }

    #[test]
    fn the_host_annotation_names_the_host() {
        let named = |v: &str| annotated_host(&infra(json!({HOST_ANNOTATION: v})));
        assert_eq!(named("metal/host-3"), key("metal", "host-3"));
        assert_eq!(
            named("host-3"),
            key("capi", "host-3"),
            "a bare name: own namespace"
        );
        assert_eq!(named(" capi/host-3 "), key("capi", "host-3"));
        for bad in ["", "/host", "capi/", "a/b/c"] {
            assert_eq!(named(bad), None, "{bad:?}");
        }
        assert_eq!(annotated_host(&infra(json!({}))), None);
    }

    #[test]
    fn the_consumer_ref_names_the_host() {
        let m = infra(json!({}));
        let consumer = |kind: &str, name: &str| {
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": kind,
                   "name": name, "namespace": "capi"})
        };
        let hosts = [
            host("free", Value::Null, "available", json!({})),
            host(
                "other",
                consumer("Metal3Machine", "m-2"),
                "provisioned",
                json!({}),
            ),
            host(
                "wrong-kind",
                consumer("DockerMachine", "m-1"),
                "provisioned",
                json!({}),
            ),
            host(
                "ours",
                consumer("Metal3Machine", "m-1"),
                "provisioned",
                json!({}),
            ),
        ];
        let found = consumer_host(&hosts, &m).map(ResourceExt::name_any);
        assert_eq!(found.as_deref(), Some("ours"));
        // Positive control of the kind check: without a kind in the reference it matches.
        let bare = host("bare", json!({"name": "m-1"}), "provisioned", json!({}));
        assert!(consumes(&bare, &m));
        assert!(!consumes(&hosts[2], &m));
        // Another namespace's host never consumes it.
        let mut elsewhere = hosts[3].clone();
        elsewhere.metadata.namespace = Some("other".into());
        assert!(!consumes(&elsewhere, &m));
        assert_eq!(consumer_host(&hosts[..3], &m), None);
    }

    #[test]
    fn a_provisioned_host_gets_the_hard_reboot_and_the_operation() {
        let h = host("h", Value::Null, "provisioned", json!({}));
        assert_eq!(
            decide(&h, "uid-1-boot-a"),
            Decision::Patch(json!({"metadata": {"resourceVersion": "7", "annotations": {
                "reboot.metal3.io": "{\"mode\":\"hard\"}",
                "karpenter.cluster.x-k8s.io/reboot-operation": "uid-1-boot-a"}}}))
        );
        let external = host("h", Value::Null, "externally provisioned", json!({}));
        assert!(matches!(decide(&external, "op"), Decision::Patch(_)));
        // The value is what the baremetal-operator's webhook accepts.
        let args: Value = serde_json::from_str(HARD_REBOOT).expect("JSON");
        assert_eq!(args, json!({"mode": "hard"}));
    }

    #[test]
    fn the_same_operation_twice_writes_nothing() {
        let asked = host(
            "h",
            Value::Null,
            "provisioned",
            json!({OPERATION_ANNOTATION: "op-1"}),
        );
        assert_eq!(decide(&asked, "op-1"), Decision::Done);
        // Positive control: another operation on the same host is a new reboot.
        assert!(matches!(decide(&asked, "op-2"), Decision::Patch(_)));
        // Done wins over the state: the host may be mid-reboot.
        let mid = host(
            "h",
            Value::Null,
            "provisioning",
            json!({OPERATION_ANNOTATION: "op-1"}),
        );
        assert_eq!(decide(&mid, "op-1"), Decision::Done);
    }

    #[test]
    fn a_host_not_provisioned_or_kept_off_is_refused() {
        for state in ["available", "deprovisioning", ""] {
            let h = host("h", Value::Null, state, json!({}));
            let Decision::Refused(why) = decide(&h, "op") else {
                panic!("{state:?} must be refused");
            };
            assert!(
                why.contains("BareMetalHost capi/h is not provisioned"),
                "{why}"
            );
        }
        let mut off = host("h", Value::Null, "provisioned", json!({}));
        off.data["spec"]["online"] = json!(false);
        let Decision::Refused(why) = decide(&off, "op") else {
            panic!("a host kept off must be refused");
        };
        assert!(why.contains("spec.online: false"), "{why}");
    }
}
