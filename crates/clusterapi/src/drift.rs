//! The Cluster API provider's drift reasons (its `CloudProvider::is_drifted`), judged by
//! the NodeClaim lifecycle after Karpenter's core ones (`nodeclaim::drift`) find none:
//!
//! 1. `NodeClassDrifted`: the Kubernetes version a Machine would get now (NodeClass
//!    `version`, else the version the control plane runs) differs from the Machine's
//!    `spec.version` — judged only while a Machine of that version could launch (Cluster
//!    API's preflight checks pass: the control plane has reached and settled on it, skew
//!    allows it), so a version change drifts nothing until the control plane is done — or
//!    the NodeClass's bootstrap source is not the one launched.
//! 2. `TemplateDrifted`: the InfrastructureMachineTemplate (or bootstrap config template)
//!    cloned at launch changed its `spec` since (the launch plan records a hash of each),
//!    is gone, or is no longer selected by the NodeClass.
//!
//! The control plane comes from its watch (`control_planes`); the bootstrap template is read
//! from the API, remembered for [`LOOKUP_TTL`](super::context::LOOKUP_TTL).

use api::NodeClaim;
use api::consts::reasons;
use clusterapi_api::ClusterAPINodeClass;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use templates::model::Catalog;

use super::objects::bootstrap_template_hash;
use super::plan::{Plan, spec_hash};
use crate::context::Context;
use crate::versions;
use cloudprovider::Drift;

/// Everything the provider's reasons are judged on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observed<'a> {
    pub(crate) plan: &'a Plan,
    pub(crate) nodeclass: Option<&'a ClusterAPINodeClass>,
    /// The NodeClass's catalog (`None`: not judged on; whether a template is still selected
    /// is then not asked).
    pub(crate) catalog: Option<&'a Catalog>,
    /// `spec.version` of the Machine; `None` while it is not cached.
    pub(crate) machine_version: Option<Option<&'a str>>,
    /// The version a Machine would get now (`None`: unknown).
    pub(crate) want_version: Option<&'a str>,
    /// Spec hash of the plan's InfrastructureMachineTemplate now (`None`: gone).
    pub(crate) infrastructure_template: Option<&'a str>,
    /// Spec hash of the plan's bootstrap config template now (`None`: no template used,
    /// or unknown; `Some(None)`: gone).
    pub(crate) bootstrap_template: Option<Option<&'a str>>,
}

/// The first of the provider's reasons that holds: the NodeClass, then the templates.
pub(crate) fn drifted(o: &Observed) -> Option<Drift> {
    nodeclass_drifted(o).or_else(|| template_drifted(o))
}

fn nodeclass_drifted(o: &Observed) -> Option<Drift> {
    if let (Some(want), Some(have)) = (o.want_version, o.machine_version)
        && have != Some(want)
    {
        return Drift::hit(
            reasons::NODECLASS_DRIFTED,
            format!("Kubernetes version {} -> {want}", have.unwrap_or("(unset)")),
        );
    }
    let bootstrap = &o.nodeclass?.spec.bootstrap;
    let now = bootstrap
        .config_template_ref
        .as_ref()
        .map(|r| (r.kind.as_str(), r.name.as_str()));
    let then = o
        .plan
        .bootstrap_template
        .as_ref()
        .map(|r| (r.kind.as_str(), r.name.as_str()));
    if now != then || bootstrap.data_secret_name != o.plan.data_secret_name {
        return Drift::hit(
            reasons::NODECLASS_DRIFTED,
            format!(
                "bootstrap source changed ({} -> {})",
                source(then, o.plan.data_secret_name.as_deref()),
                source(now, bootstrap.data_secret_name.as_deref())
            ),
        );
    }
    None
}

fn source(template: Option<(&str, &str)>, secret: Option<&str>) -> String {
    match (template, secret) {
        (Some((kind, name)), _) => format!("{kind} {name}"),
        (None, Some(s)) => format!("Secret {s}"),
        (None, None) => "none".into(),
    }
}

fn template_drifted(o: &Observed) -> Option<Drift> {
    let p = o.plan;
    let it = &p.infrastructure_template;
    let Some(now) = o.infrastructure_template else {
        return Drift::hit(
            reasons::TEMPLATE_DRIFTED,
            format!("{} {} is gone", it.kind, it.name),
        );
    };
    if let Some(then) = &p.infrastructure_template_hash
        && then != now
    {
        return Drift::hit(
            reasons::TEMPLATE_DRIFTED,
            format!("{} {} spec changed since the clone", it.kind, it.name),
        );
    }
    if let Some(catalog) = o.catalog
        && !catalog
            .instance_types
            .iter()
            .flat_map(|t| &t.offerings)
            .filter_map(templates::model::template_of)
            .any(|t| t.kind == it.kind && t.name == it.name)
    {
        return Drift::hit(
            reasons::TEMPLATE_DRIFTED,
            format!(
                "{} {} is no longer selected by the NodeClass",
                it.kind, it.name
            ),
        );
    }
    let bt = p.bootstrap_template.as_ref()?;
    match o.bootstrap_template? {
        None => Drift::hit(
            reasons::TEMPLATE_DRIFTED,
            format!("{} {} is gone", bt.kind, bt.name),
        ),
        Some(now)
            if p.bootstrap_template_hash
                .as_deref()
                .is_some_and(|t| t != now) =>
        {
            Drift::hit(
                reasons::TEMPLATE_DRIFTED,
                format!("{} {} spec changed since the clone", bt.kind, bt.name),
            )
        }
        Some(_) => None,
    }
}

/// The Cluster API provider's drift reasons of a launched claim (its `is_drifted`), from the
/// caches and the API reads remembered in `lookups`.
pub(crate) async fn observe(ctx: &Context, claim: &NodeClaim, plan: &Plan) -> Option<Drift> {
    let nodeclass = ctx
        .nodeclasses
        .get(&ObjectRef::new(&claim.spec.node_class_ref.name));
    let machine = ctx
        .machines
        .get(&ObjectRef::new(&plan.machine).within(&plan.namespace));
    let view = nodeclass
        .as_deref()
        .map(super::nodeclass::NodeClass::from_typed)
        .unwrap_or_default();
    // Unknown (Cluster not cached, control plane unreadable), or a Machine of that version
    // could not launch now (a preflight check fails: the control plane is not done): no
    // version drift now, and the rest of the lifecycle goes on.
    let want_version = match versions::gate(ctx, &view, &plan.namespace, &plan.cluster).await {
        Ok(g) => match g.held {
            None => g.version,
            Some(f) => {
                tracing::debug!(nodeclaim = %claim.name_any(), check = f.check.name(), message = %f.message,
                    "no version drift while a preflight check fails");
                None
            }
        },
        Err(e) => {
            tracing::debug!(nodeclaim = %claim.name_any(), error = %e, "cluster version unknown");
            None
        }
    };
    let it = &plan.infrastructure_template;
    let infra = ctx
        .catalogs
        .template(it.group(), &it.kind, &plan.namespace, &it.name)
        .map(|t| spec_hash(&t));
    let bootstrap = match &plan.bootstrap_template {
        Some(bt) => ctx
            .lookups
            .get(
                format!("bootstrap/{}/{}/{}", plan.namespace, bt.kind, bt.name),
                bootstrap_template_hash(ctx, &plan.namespace, bt),
            )
            .await
            .inspect_err(|e| tracing::debug!(error = %e, "bootstrap template unknown"))
            .ok(),
        None => None,
    };
    // The NodeClass's catalog as the loops see it (`None` while it is empty or its NodeClass
    // not served: whether the template is still selected is then not judged).
    let catalog = ctx.catalogs.catalog(&claim.spec.node_class_ref.name);
    drifted(&Observed {
        plan,
        nodeclass: nodeclass.as_deref(),
        catalog: catalog.as_deref(),
        machine_version: machine.as_ref().map(|m| m.spec.version.as_deref()),
        want_version: want_version.as_deref(),
        infrastructure_template: infra.as_deref(),
        bootstrap_template: bootstrap.as_ref().map(|b| b.as_deref()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::TypedRef;
    use serde_json::{Value, json};
    use templates::model::{InstanceType, PriceSource, Resources, TemplateRef};

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("fixture")
    }

    /// A catalog of one instance type, `small`, from TestMachineTemplate `template`,
    /// offered on demand in `zone`.
    fn catalog(template: &str, zone: &str) -> Catalog {
        let tref = TemplateRef {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
            kind: "TestMachineTemplate".into(),
            namespace: Some("ns".into()),
            name: template.into(),
        };
        Catalog::of(vec![InstanceType {
            devices: None,
            volume_limits: Default::default(),
            name: "small".into(),
            capacity: Resources::default(),
            allocatable: Resources::default(),
            labels: Default::default(),
            taints: vec![],
            offerings: vec![templates::model::offering(
                &tref,
                Some(zone.into()),
                "on-demand",
                0.1,
                PriceSource::Default,
            )],
            capacity_overlaid: false,
        }])
    }

    fn nodeclass(bootstrap: Value) -> ClusterAPINodeClass {
        typed(json!({"metadata": {"name": "nc"}, "spec": {
            "clusterRef": {"namespace": "ns", "name": "c1"}, "bootstrap": bootstrap}}))
    }

    fn plan() -> Plan {
        Plan {
            instance_type: "small".into(),
            zone: Some("zone-b".into()),
            capacity_type: "on-demand".into(),
            infrastructure_template: TypedRef {
                api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
                kind: "TestMachineTemplate".into(),
                name: "small".into(),
            },
            infrastructure_template_hash: Some("h1".into()),
            data_secret_name: Some("data".into()),
            ..Plan::default()
        }
    }

    struct Case {
        plan: Plan,
        nodeclass: ClusterAPINodeClass,
        catalog: Catalog,
        machine_version: Option<&'static str>,
        want_version: Option<&'static str>,
        infra: Option<&'static str>,
        bootstrap: Option<Option<&'static str>>,
    }

    impl Case {
        fn new() -> Case {
            Case {
                plan: plan(),
                nodeclass: nodeclass(json!({"dataSecretName": "data"})),
                catalog: catalog("small", "zone-b"),
                machine_version: Some("v1.35.0"),
                want_version: Some("v1.35.0"),
                infra: Some("h1"),
                bootstrap: None,
            }
        }

        fn drift(&self) -> Option<&'static str> {
            drifted(&Observed {
                plan: &self.plan,
                nodeclass: Some(&self.nodeclass),
                catalog: Some(&self.catalog),
                machine_version: Some(self.machine_version),
                want_version: self.want_version,
                infrastructure_template: self.infra,
                bootstrap_template: self.bootstrap,
            })
            .map(|d| d.reason)
        }
    }

    #[test]
    fn nothing_changed_is_no_drift() {
        assert_eq!(Case::new().drift(), None);
    }

    #[test]
    fn nodeclass_drift_on_version_or_bootstrap_source() {
        let mut c = Case::new();
        c.want_version = Some("v1.36.0");
        assert_eq!(c.drift(), Some(reasons::NODECLASS_DRIFTED));
        c.want_version = None;
        assert_eq!(c.drift(), None, "no version wanted: nothing to compare");
        let mut c = Case::new();
        c.nodeclass = nodeclass(json!({"dataSecretName": "other"}));
        assert_eq!(c.drift(), Some(reasons::NODECLASS_DRIFTED));
        c.nodeclass = nodeclass(json!({"configTemplateRef": {
            "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "t"}}));
        assert_eq!(c.drift(), Some(reasons::NODECLASS_DRIFTED));
    }

    #[test]
    fn template_drift_on_spec_change_deletion_deselection_or_bootstrap_template() {
        let mut c = Case::new();
        c.infra = Some("h2");
        assert_eq!(c.drift(), Some(reasons::TEMPLATE_DRIFTED));
        c.infra = None;
        assert_eq!(c.drift(), Some(reasons::TEMPLATE_DRIFTED));
        let mut c = Case::new();
        c.plan.infrastructure_template_hash = None;
        c.infra = Some("h2");
        assert_eq!(
            c.drift(),
            None,
            "a plan of an older version records no hash"
        );
        let mut c = Case::new();
        for o in &mut c.catalog.instance_types[0].offerings {
            let mut t = templates::model::template_of(o).expect("a template's offering");
            t.name = "small-v2".into();
            o.id = t.id();
        }
        assert_eq!(
            c.drift(),
            Some(reasons::TEMPLATE_DRIFTED),
            "no longer selected"
        );
        let mut c = Case::new();
        c.plan.bootstrap_template = Some(TypedRef {
            api_version: "bootstrap.cluster.x-k8s.io/v1beta2".into(),
            kind: "KubeadmConfigTemplate".into(),
            name: "t".into(),
        });
        c.plan.bootstrap_template_hash = Some("b1".into());
        c.plan.data_secret_name = None;
        c.nodeclass = nodeclass(json!({"configTemplateRef": {
            "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "t"}}));
        c.bootstrap = Some(Some("b1"));
        assert_eq!(c.drift(), None);
        c.bootstrap = Some(Some("b2"));
        assert_eq!(c.drift(), Some(reasons::TEMPLATE_DRIFTED));
        c.bootstrap = Some(None);
        assert_eq!(c.drift(), Some(reasons::TEMPLATE_DRIFTED), "gone");
    }

    #[test]
    fn the_first_reason_wins() {
        let mut c = Case::new();
        c.want_version = Some("v1.36.0");
        c.infra = Some("h2");
        assert_eq!(c.drift(), Some(reasons::NODECLASS_DRIFTED));
    }
}
