//! Resource amounts as Kubernetes computes them for scheduling.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource name → amount (cpu in millicores, everything else in units).
pub(super) type Amounts = BTreeMap<String, i64>;

pub(super) fn parse(q: &BTreeMap<String, Quantity>) -> Amounts {
    q.iter()
        .filter_map(|(k, v)| {
            let n = if k == "cpu" {
                templates::quantity::parse_milli(&v.0)
            } else {
                templates::quantity::parse_value(&v.0)
            };
            n.ok().map(|n| (k.clone(), n))
        })
        .collect()
}

/// One amount in units (0 when it does not parse).
pub(super) fn quantity(q: &Quantity) -> i64 {
    templates::quantity::parse_value(&q.0).unwrap_or(0)
}

fn requests(c: &Container) -> Amounts {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .map(parse)
        .unwrap_or_default()
}

pub(super) fn add(into: &mut Amounts, r: &Amounts) {
    for (k, v) in r {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

fn max_into(into: &mut Amounts, r: &Amounts) {
    for (k, v) in r {
        let e = into.entry(k.clone()).or_insert(0);
        *e = (*e).max(*v);
    }
}

/// The pod's effective requests (the kube-scheduler's, KEP-753 sidecars included): the larger
/// of the app containers plus all sidecars and, for each regular init container, itself plus
/// the sidecars started before it; plus the pod overhead and `pods: 1`.
pub(super) fn pod_requests(spec: Option<&PodSpec>) -> Amounts {
    let mut out = Amounts::new();
    if let Some(spec) = spec {
        let mut sidecars = Amounts::new();
        let mut init_peak = Amounts::new();
        for c in spec.init_containers.iter().flatten() {
            let r = requests(c);
            if c.restart_policy.as_deref() == Some("Always") {
                add(&mut sidecars, &r);
                max_into(&mut init_peak, &sidecars);
            } else {
                let mut with = sidecars.clone();
                add(&mut with, &r);
                max_into(&mut init_peak, &with);
            }
        }
        for c in &spec.containers {
            add(&mut out, &requests(c));
        }
        add(&mut out, &sidecars);
        max_into(&mut out, &init_peak);
        if let Some(o) = &spec.overhead {
            add(&mut out, &parse(o));
        }
    }
    out.insert("pods".into(), 1);
    out
}

/// The first resource in `used` that exceeds `allocatable` (a missing resource is zero).
pub(super) fn exceeded(used: &Amounts, allocatable: &Amounts) -> Option<String> {
    used.iter()
        .find(|(k, v)| **v > 0 && **v > allocatable.get(*k).copied().unwrap_or(0))
        .map(|(k, v)| format!("{k} {v} > {}", allocatable.get(k).copied().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sidecars_add_to_the_app_containers_and_init_containers_take_the_peak() {
        let spec: PodSpec = serde_json::from_value(json!({
            "initContainers": [
                {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                {"name": "i", "resources": {"requests": {"cpu": "5", "memory": "1Gi"}}}
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}],
            "overhead": {"cpu": "100m"}
        }))
        .expect("spec");
        let r = pod_requests(Some(&spec));
        // max(2 + 1, 1 + 5) + 0.1
        assert_eq!(r["cpu"], 6100);
        assert_eq!(r["memory"], 1 << 30);
        assert_eq!(r["pods"], 1);
    }
}
