//! Label selectors, matched without building kube's `Selector`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` match a Kubernetes label selector, as kube's `Selector` matches them
/// without building one: an empty selector matches everything; an invalid one (an unknown
/// operator, `In`/`NotIn` without values) matches nothing.
pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    by_labels
        && sel.match_expressions.iter().flatten().all(|e| {
            let v = labels.get(&e.key);
            match (e.operator.as_str(), e.values.as_deref()) {
                ("In", Some(values)) => v.is_some_and(|v| values.contains(v)),
                ("NotIn", Some(values)) => v.is_none_or(|v| !values.contains(v)),
                ("Exists", _) => v.is_some(),
                ("DoesNotExist", _) => v.is_none(),
                _ => false,
            }
        })
}
