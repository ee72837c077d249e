//! Choosing what to launch for a NodeClaim: a reserved offering, else the cheapest one, that
//! launch may use now (not backed off, count left), among the
//! catalog's instance types, whose labels satisfy every requirement of the NodeClaim (the
//! scheduler's [`scheduling::Requirements`], so launch and scheduling never disagree) and
//! whose allocatable fits its resource requests. Pure; launch calls it.

use std::collections::BTreeMap;

use templates::model::{Catalog, InstanceType, Offering, Resources};
use templates::quantity::{parse_milli, parse_value};

/// One NodeClaim requirement (`key`, `operator`, `values`), as in `karpenter.sh/v1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Requirement {
    pub(crate) key: String,
    pub(crate) operator: String,
    pub(crate) values: Vec<String>,
}

/// The requirements in the scheduler's algebra, so launch and scheduling read them the same
/// way; `None` when an operator is unknown (nothing satisfies it).
fn scheduling_requirements(requirements: &[&Requirement]) -> Option<scheduling::Requirements> {
    let list = requirements
        .iter()
        .map(|r| {
            Some(scheduling::Requirement {
                key: r.key.clone(),
                operator: scheduling::Operator::parse(&r.operator)?,
                values: r.values.clone(),
                min_values: None,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(scheduling::Requirements::from_list(&list))
}

/// Resource requests in the catalog's units (cpu millicores, bytes, counts).
pub(crate) fn requests_from_quantities<'a>(
    requests: impl IntoIterator<Item = (&'a String, &'a str)>,
) -> Result<Resources, String> {
    let mut out = BTreeMap::new();
    for (name, q) in requests {
        let v = if name == Resources::CPU {
            parse_milli(q)
        } else {
            parse_value(q)
        }
        .map_err(|e| format!("resources.requests[{name}]: {e}"))?;
        out.insert(name.clone(), v);
    }
    Ok(Resources(out))
}

/// What launch will create.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Choice<'a> {
    pub(crate) instance_type: &'a InstanceType,
    pub(crate) offering: &'a Offering,
    /// The Node's labels for this offering (instance-type, zone, capacity-type, arch, os...).
    pub(crate) labels: BTreeMap<String, String>,
}

/// Why nothing could be chosen (the message of the InsufficientCapacity event).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoOffering {
    #[error("no instance type in the catalog satisfies the requirements ({0})")]
    Incompatible(String),
    #[error("no compatible instance type has {0} allocatable for the requests")]
    TooSmall(String),
    #[error("every compatible offering is unavailable ({0})")]
    Unavailable(String),
}

/// The preferred compatible offering `skip` does not refuse (it says why it refuses one:
/// backed off after a failed launch, no count left): reserved first, then the cheapest
/// (ties: instance type name, zone).
pub(crate) fn choose<'a>(
    catalog: &'a Catalog,
    requirements: &[Requirement],
    requests: &Resources,
    skip: &dyn Fn(&InstanceType, &Offering) -> Option<String>,
) -> Result<Choice<'a>, NoOffering> {
    let mut compatible = 0usize;
    let mut fitting = 0usize;
    let mut too_small = None;
    let mut last_unavailable = None;
    let mut best: Option<Choice<'a>> = None;
    // As in Karpenter (undefined well-known labels allowed), a requirement on a label no
    // instance type defines (the NodePool's own labels, `karpenter.sh/nodepool`) constrains
    // the Node's labels, not the choice.
    let known: std::collections::HashSet<String> = catalog
        .instance_types
        .iter()
        .flat_map(|it| {
            it.offerings
                .iter()
                .flat_map(|o| it.node_labels(o).into_keys())
        })
        .collect();
    let requirements: Vec<&Requirement> = requirements
        .iter()
        .filter(|r| known.contains(&r.key))
        .collect();
    let allowed = scheduling_requirements(&requirements);
    for it in &catalog.instance_types {
        let fits = requests
            .0
            .iter()
            .find(|(name, want)| it.allocatable.get(name) < **want)
            .map(|(name, _)| name.clone());
        for offering in &it.offerings {
            let labels = it.node_labels(offering);
            if !allowed.as_ref().is_some_and(|r| r.allows(&labels)) {
                continue;
            }
            compatible += 1;
            if let Some(name) = &fits {
                too_small.get_or_insert_with(|| name.clone());
                continue;
            }
            fitting += 1;
            if let Some(reason) = skip(it, offering) {
                last_unavailable = Some(format!(
                    "{} {}: {reason}",
                    it.name,
                    offering.zone.as_deref().unwrap_or("-")
                ));
                continue;
            }
            let better = best.as_ref().is_none_or(|b| {
                (
                    !offering.is_reserved(),
                    offering.price,
                    &it.name,
                    &offering.zone,
                ) < (
                    !b.offering.is_reserved(),
                    b.offering.price,
                    &b.instance_type.name,
                    &b.offering.zone,
                )
            });
            if better {
                best = Some(Choice {
                    instance_type: it,
                    offering,
                    labels,
                });
            }
        }
    }
    match best {
        Some(choice) => Ok(choice),
        None if compatible == 0 => Err(NoOffering::Incompatible(
            requirements
                .iter()
                .map(|r| format!("{} {} [{}]", r.key, r.operator, r.values.join(", ")))
                .collect::<Vec<_>>()
                .join(", "),
        )),
        None if fitting == 0 => Err(NoOffering::TooSmall(too_small.unwrap_or_default())),
        None => Err(NoOffering::Unavailable(
            last_unavailable.unwrap_or_default(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use templates::model::{PriceSource, TemplateRef};

    use crate::availability::counts::{LaunchState, OfferingCounts};
    use crate::availability::unavailable::{OfferingKey, UnavailableOfferings};

    fn all(_: &InstanceType, _: &Offering) -> Option<String> {
        None
    }

    fn it(name: &str, cpu: i64, zones: &[(&str, f64)]) -> InstanceType {
        let template = TemplateRef {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
            kind: "DockerMachineTemplate".into(),
            namespace: Some("ns".into()),
            name: format!("{name}-tpl"),
        };
        InstanceType {
            devices: None,
            volume_limits: Default::default(),
            name: name.into(),
            capacity: Resources(BTreeMap::from([("cpu".into(), cpu * 1000)])),
            allocatable: Resources(BTreeMap::from([
                ("cpu".into(), cpu * 1000 - 100),
                ("memory".into(), cpu << 31),
                ("pods".into(), 110),
            ])),
            labels: BTreeMap::from([
                ("node.kubernetes.io/instance-type".into(), name.into()),
                (
                    "kubernetes.io/arch".into(),
                    if name.starts_with("arm") {
                        "arm64"
                    } else {
                        "amd64"
                    }
                    .into(),
                ),
                (
                    "karpenter.cluster.x-k8s.io/instance-cpu".into(),
                    cpu.to_string(),
                ),
            ]),
            taints: vec![],
            offerings: zones
                .iter()
                .map(|(z, price)| {
                    templates::model::offering(
                        &template,
                        Some(z.to_string()),
                        "on-demand",
                        *price,
                        PriceSource::Annotation,
                    )
                })
                .collect(),
            capacity_overlaid: false,
        }
    }

    fn catalog() -> Catalog {
        Catalog::of(vec![
            it("small", 2, &[("a", 0.2), ("b", 0.19)]),
            it("large", 8, &[("a", 0.8)]),
            it("arm-medium", 4, &[("a", 0.3)]),
        ])
    }

    fn req(key: &str, op: &str, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn cpu(milli: i64) -> Resources {
        Resources(BTreeMap::from([("cpu".into(), milli)]))
    }

    #[test]
    fn requirements_on_labels_no_type_defines_do_not_restrict_the_choice() {
        let c = catalog();
        let reqs = [
            req("karpenter.sh/nodepool", "In", &["default"]),
            req("team", "In", &["web"]),
            req("node.kubernetes.io/instance-type", "In", &["large"]),
        ];
        let choice = choose(&c, &reqs, &cpu(1000), &all).expect("choice");
        assert_eq!(choice.instance_type.name, "large");
        // A defined label still has to match.
        let reqs = [req("node.kubernetes.io/instance-type", "In", &["huge"])];
        assert!(matches!(
            choose(&c, &reqs, &cpu(1000), &all),
            Err(NoOffering::Incompatible(_))
        ));
    }

    #[test]
    fn cheapest_compatible_fitting_offering() {
        let c = catalog();
        let choice = choose(&c, &[], &cpu(1000), &all).expect("choice");
        assert_eq!(
            (
                choice.instance_type.name.as_str(),
                choice.offering.zone.as_deref()
            ),
            ("small", Some("b"))
        );
        assert_eq!(choice.labels["topology.kubernetes.io/zone"], "b");

        let choice = choose(
            &c,
            &[req("topology.kubernetes.io/zone", "In", &["a"])],
            &cpu(1000),
            &all,
        )
        .expect("choice");
        assert_eq!(choice.offering.zone.as_deref(), Some("a"));

        let choice = choose(&c, &[], &cpu(3000), &all).expect("choice");
        assert_eq!(
            choice.instance_type.name, "arm-medium",
            "small is too small"
        );

        let choice = choose(
            &c,
            &[req("kubernetes.io/arch", "In", &["amd64"])],
            &cpu(3000),
            &all,
        )
        .expect("choice");
        assert_eq!(choice.instance_type.name, "large");

        let choice = choose(
            &c,
            &[req("karpenter.cluster.x-k8s.io/instance-cpu", "Gt", &["4"])],
            &cpu(100),
            &all,
        )
        .expect("choice");
        assert_eq!(choice.instance_type.name, "large");
    }

    #[test]
    fn backed_off_and_exhausted_offerings_are_skipped() {
        let mut c = catalog();
        let u = UnavailableOfferings::default();
        let now = Instant::now();
        let small_b = c.instance_types[0].offerings[1].clone();
        assert_eq!(small_b.zone.as_deref(), Some("b"));
        u.mark(OfferingKey::of(&small_b), "InsufficientCapacity", now);
        let counts = OfferingCounts::default();
        let state = LaunchState {
            unavailable: &u,
            counts: &counts,
            now,
        };
        let choice = choose(&c, &[], &cpu(1000), &|it, o| state.skip(&c, it, o)).expect("choice");
        assert_eq!(choice.offering.zone.as_deref(), Some("a"));
        let only_b = [req("topology.kubernetes.io/zone", "In", &["b"])];
        assert!(matches!(
            choose(&c, &only_b, &cpu(1000), &|it, o| state.skip(&c, it, o)),
            Err(NoOffering::Unavailable(_))
        ));
        // large's template allows no Machine at all: skipped, with the count in the reason.
        for o in c.instance_types[1].offerings.clone() {
            c.limits.insert(
                o.id.clone(),
                templates::count::CountLimits {
                    max_machines: Some(0),
                    ..Default::default()
                },
            );
        }
        let only_large = [req("node.kubernetes.io/instance-type", "In", &["large"])];
        let e = choose(&c, &only_large, &cpu(1000), &|it, o| state.skip(&c, it, o))
            .expect_err("exhausted");
        assert!(
            e.to_string()
                .contains("no count left (karpenter.cluster.x-k8s.io/max-machines 0)"),
            "{e}"
        );
    }

    #[test]
    fn reserved_offerings_come_first() {
        let mut c = catalog();
        let mut reserved = c.instance_types[1].offerings[0].clone();
        reserved.capacity_type = "reserved".into();
        reserved.price = 5.0;
        c.instance_types[1].offerings.push(reserved);
        let choice = choose(&c, &[], &cpu(1000), &all).expect("choice");
        assert_eq!(
            (
                choice.instance_type.name.as_str(),
                choice.offering.capacity_type.as_str()
            ),
            ("large", "reserved")
        );
    }

    #[test]
    fn explains_failures() {
        let c = catalog();
        assert!(matches!(
            choose(
                &c,
                &[req("node.kubernetes.io/instance-type", "In", &["huge"])],
                &cpu(1),
                &all
            ),
            Err(NoOffering::Incompatible(_))
        ));
        assert_eq!(
            choose(&c, &[], &cpu(64_000), &all),
            Err(NoOffering::TooSmall("cpu".into()))
        );
    }

    #[test]
    fn operators_are_the_schedulers() {
        let c = catalog();
        let chosen = |op: &str, values: &[&str]| {
            let reqs = [req("karpenter.cluster.x-k8s.io/instance-cpu", op, values)];
            choose(&c, &reqs, &cpu(1000), &all).map(|choice| choice.instance_type.name.clone())
        };
        // Catalog: small (2 cpu, 0.19), arm-medium (4, 0.3), large (8, 0.8).
        assert_eq!(chosen("In", &["4", "8"]).as_deref(), Ok("arm-medium"));
        assert_eq!(chosen("NotIn", &["2"]).as_deref(), Ok("arm-medium"));
        assert_eq!(chosen("Exists", &[]).as_deref(), Ok("small"));
        assert_eq!(chosen("Gte", &["4"]).as_deref(), Ok("arm-medium"));
        assert_eq!(chosen("Gt", &["4"]).as_deref(), Ok("large"));
        assert_eq!(chosen("Lte", &["4"]).as_deref(), Ok("small"));
        assert_eq!(
            chosen("Lt", &["2"]),
            Err(NoOffering::Incompatible(
                "karpenter.cluster.x-k8s.io/instance-cpu Lt [2]".into()
            ))
        );
        assert!(matches!(
            chosen("DoesNotExist", &[]),
            Err(NoOffering::Incompatible(_))
        ));
        assert!(matches!(
            chosen("Gt", &["x"]),
            Err(NoOffering::Incompatible(_))
        ));
        assert!(matches!(
            chosen("Bogus", &[]),
            Err(NoOffering::Incompatible(_))
        ));
    }

    #[test]
    fn parses_requests() {
        let q = BTreeMap::from([
            ("cpu".to_string(), "1500m".to_string()),
            ("memory".to_string(), "1Gi".to_string()),
        ]);
        let r = requests_from_quantities(q.iter().map(|(k, v)| (k, v.as_str()))).expect("parses");
        assert_eq!(r.get("cpu"), 1500);
        assert_eq!(r.get("memory"), 1 << 30);
        let bad = BTreeMap::from([("cpu".to_string(), "lots".to_string())]);
        assert!(requests_from_quantities(bad.iter().map(|(k, v)| (k, v.as_str()))).is_err());
    }
}
