//! Label and taint syntax: Kubernetes' rules for label keys and values, and the
//! cluster-autoscaler `…/labels` and `…/taints` annotation formats.

use std::collections::BTreeMap;

use api::consts::{groups, labels as label};
use k8s_openapi::api::core::v1::Taint;

pub use cloudprovider::label_syntax::{validate_label_key, validate_label_value};

/// Labels a template may not set through the labels annotation: the `karpenter.sh` domain
/// (except `karpenter.sh/capacity-type`), `kubernetes.io/hostname`, and our own domain
/// (its well-known labels are computed from the template).
pub(crate) fn is_restricted_label(key: &str) -> bool {
    let domain = key.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let in_domain = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    (in_domain("karpenter.sh") && key != label::CAPACITY_TYPE)
        || key == "kubernetes.io/hostname"
        || in_domain(groups::NODECLASS)
}

/// Parses `k1=v1,k2=v2` (the cluster-autoscaler labels annotation).
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, (String, String)> {
    let mut out = BTreeMap::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((k, v)) = entry.split_once('=') else {
            return Err((entry.to_string(), "expected key=value".into()));
        };
        let (k, v) = (k.trim(), v.trim());
        validate_label_key(k).map_err(|e| (entry.to_string(), format!("key: {e}")))?;
        validate_label_value(v).map_err(|e| (entry.to_string(), format!("value: {e}")))?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// Checks a label selector in the API server's syntax (`a=b,c!=d,e in (f,g),h notin (i),j,!k`,
/// `l>1`): what a `labelSelector` query accepts, so a bad one is refused before it is sent.
/// The error names the requirement and why.
pub fn validate_selector(s: &str) -> Result<(), String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or(format!("{s:?}: unbalanced ')'"))?
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("{s:?}: unbalanced '('"));
    }
    parts.push(&s[start..]);
    for part in parts {
        requirement(part.trim()).map_err(|e| format!("{:?}: {e}", part.trim()))?;
    }
    Ok(())
}

/// One requirement of a label selector.
fn requirement(r: &str) -> Result<(), String> {
    if r.is_empty() {
        return Err("empty requirement".into());
    }
    if let Some(key) = r.strip_prefix('!') {
        return validate_label_key(key.trim()).map_err(|e| format!("key: {e}"));
    }
    let end = r
        .find(|c: char| c.is_whitespace() || matches!(c, '=' | '!' | '<' | '>' | '('))
        .unwrap_or(r.len());
    let (key, rest) = (&r[..end], r[end..].trim_start());
    validate_label_key(key).map_err(|e| format!("key: {e}"))?;
    let value = |v: &str| validate_label_value(v.trim()).map_err(|e| format!("value: {e}"));
    if rest.is_empty() {
        return Ok(());
    }
    if let Some(v) = ["==", "!=", "="]
        .iter()
        .find_map(|op| rest.strip_prefix(op))
    {
        return value(v);
    }
    if let Some(v) = rest.strip_prefix('>').or_else(|| rest.strip_prefix('<')) {
        return v
            .trim()
            .parse::<i64>()
            .map(|_| ())
            .map_err(|_| format!("{:?} is not an integer", v.trim()));
    }
    let set = rest
        .strip_prefix("notin")
        .or_else(|| rest.strip_prefix("in"))
        .map(str::trim_start)
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.strip_suffix(')'))
        .ok_or(format!(
            "expected =, ==, !=, in (...), notin (...), < or > after the key, got {rest:?}"
        ))?;
    if set.trim().is_empty() {
        return Err("an empty set of values".into());
    }
    set.split(',').try_for_each(value)
}

/// Parses `key=value:Effect,key:Effect` (the cluster-autoscaler taints annotation).
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, (String, String)> {
    let mut out: Vec<Taint> = Vec::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let err = |reason: &str| (entry.to_string(), reason.to_string());
        let Some((kv, effect)) = entry.rsplit_once(':') else {
            return Err(err("missing :Effect"));
        };
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(err(
                "effect must be NoSchedule, PreferNoSchedule or NoExecute",
            ));
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (kv, None),
        };
        validate_label_key(key).map_err(|e| err(&format!("key: {e}")))?;
        if let Some(v) = value {
            validate_label_value(v).map_err(|e| err(&format!("value: {e}")))?;
        }
        if out.iter().any(|t| t.key == key && t.effect == effect) {
            return Err(err("duplicate key and effect"));
        }
        out.push(Taint {
            key: key.to_string(),
            value: value.filter(|v| !v.is_empty()).map(str::to_string),
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_in_the_api_servers_syntax() {
        for good in [
            "env=prod",
            "env==prod, tier != db",
            "env in (prod, staging),team notin (a),example.com/x,!gone",
            "gen>3,gen<10",
            "empty=",
        ] {
            assert_eq!(validate_selector(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("env=prod,", "\"\": empty requirement"),
            ("env in (prod", "unbalanced '('"),
            ("env in ()", "an empty set of values"),
            ("env=prod!", "value: must be alphanumerics"),
            ("bad key=x", "expected =, ==, !=, in (...)"),
            ("-env=x", "key: name must be alphanumerics"),
            ("gen>three", "\"three\" is not an integer"),
            ("env ~ x", "expected =, ==, !="),
        ] {
            let err = validate_selector(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn taints() {
        let t = parse_taints("a=b:NoSchedule, gpu:NoExecute ,").expect("valid");
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].key, "a");
        assert_eq!(t[0].value.as_deref(), Some("b"));
        assert_eq!(t[1].value, None);
        assert_eq!(t[1].effect, "NoExecute");
        let ex = parse_taints("example.com/x=y:NoSchedule").expect("prefixed key");
        assert_eq!(ex[0].key, "example.com/x");
        for bad in [
            "a=b",
            "a=b:Never",
            "=b:NoSchedule",
            "a b=c:NoSchedule",
            "a=b c:NoSchedule",
            "a:NoSchedule,a=x:NoSchedule",
        ] {
            assert!(parse_taints(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn labels() {
        let l = parse_labels("a=b, example.com/c=d,e=").expect("valid");
        assert_eq!(l.len(), 3);
        assert_eq!(l["e"], "");
        for bad in [
            "a",
            "Bad_Prefix/x=y",
            "a=-b",
            &format!("a={}", "x".repeat(64)),
        ] {
            assert!(parse_labels(bad).is_err(), "{bad}");
        }
    }
}
