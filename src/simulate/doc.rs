//! One document of a snapshot being read: the checks and defaults applied before it is read
//! into a typed object (an error names the file, the document and the field).

use serde_json::{Value, json};
use templates::offline::Document;

use super::{Error, str_at};

/// One document being read, for error messages.
pub(super) struct Doc<'a> {
    pub(super) d: &'a Document,
    pub(super) kind: &'a str,
    pub(super) namespace: Option<&'a str>,
    pub(super) name: &'a str,
}

impl<'a> Doc<'a> {
    pub(super) fn new(d: &'a Document) -> Self {
        Self {
            d,
            kind: str_at(&d.object, "/kind").unwrap_or_default(),
            namespace: str_at(&d.object, "/metadata/namespace"),
            name: str_at(&d.object, "/metadata/name").unwrap_or_default(),
        }
    }

    pub(super) fn what(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    pub(super) fn err(&self, message: impl Into<String>) -> Error {
        Error::Invalid {
            path: self.d.path.clone(),
            index: self.d.index,
            object: self.what(),
            message: message.into(),
        }
    }

    /// The namespace of a namespaced object (`default` when not set).
    pub(super) fn ns(&self) -> &'a str {
        self.namespace.unwrap_or("default")
    }
}

/// Checks a quantity map (`{cpu: 500m, ...}`) at `field`.
pub(super) fn check_quantities(v: &Value, field: &str) -> Result<(), String> {
    let m = match v {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => {
            return Err(format!(
                "{field}: expected a map of quantities, got {other}"
            ));
        }
    };
    for (k, q) in m {
        let text = match q {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err(format!("{field}.{k}: expected a quantity, got {other}")),
        };
        let parsed = if k == "cpu" {
            templates::quantity::parse_milli(&text)
        } else {
            templates::quantity::parse_value(&text)
        };
        parsed.map_err(|e| format!("{field}.{k}: {text:?} is not a quantity: {e}"))?;
    }
    Ok(())
}

/// An optional non-negative integer at `field` (`spec.replicas`, ...).
pub(super) fn count(v: &Value, pointer: &str, field: &str) -> Result<Option<u64>, String> {
    match v.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{field}: expected a non-negative integer, got {n}")),
    }
}

/// Checks the parts of a pod spec the scheduler reads, and defaults container requests from
/// limits as the API server does.
pub(super) fn normalize_pod_spec(spec: &mut Value, field: &str) -> Result<(), String> {
    if !spec.is_object() {
        return Err(format!("{field}: expected an object"));
    }
    if !spec["containers"].is_array() {
        return Err(format!("{field}.containers: expected a list of containers"));
    }
    for list in ["containers", "initContainers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for (i, c) in cs.iter_mut().enumerate() {
            let at = format!("{field}.{list}[{i}].resources");
            check_quantities(&c["resources"]["requests"], &format!("{at}.requests"))?;
            check_quantities(&c["resources"]["limits"], &format!("{at}.limits"))?;
            let Some(limits) = c["resources"]["limits"].as_object().cloned() else {
                continue;
            };
            let requests = &mut c["resources"]["requests"];
            if requests.is_null() {
                *requests = json!({});
            }
            if let Some(r) = requests.as_object_mut() {
                for (k, q) in limits {
                    r.entry(k).or_insert(q);
                }
            }
        }
    }
    check_quantities(&spec["overhead"], &format!("{field}.overhead"))?;
    if !spec["nodeSelector"].is_null()
        && !spec["nodeSelector"]
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string))
    {
        return Err(format!("{field}.nodeSelector: expected a map of strings"));
    }
    Ok(())
}

/// `doc`'s object (checked and defaulted) as the typed object `K`; an error names the field.
pub(super) fn typed<K: serde::de::DeserializeOwned>(doc: &Doc, v: Value) -> Result<K, Error> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            doc.err(e.inner().to_string())
        } else {
            doc.err(format!("{path}: {}", e.inner()))
        }
    })
}

/// What the API server would have defaulted or a snapshot may leave out: requirements
/// (NodePool template, NodeClaim) are an empty list, owner references without a uid have an
/// empty one.
pub(super) fn default_fields(obj: &mut Value, kind: &str) {
    let spec = match kind {
        "NodePool" => obj.pointer_mut("/spec/template/spec"),
        "NodeClaim" => obj.pointer_mut("/spec"),
        _ => None,
    };
    if let Some(Value::Object(spec)) = spec {
        spec.entry("requirements").or_insert_with(|| json!([]));
    }
    if let Some(Value::Array(owners)) = obj.pointer_mut("/metadata/ownerReferences") {
        for o in owners.iter_mut().filter_map(Value::as_object_mut) {
            o.entry("uid").or_insert_with(|| json!(""));
        }
    }
}

/// Checks what every object read needs: a name, and maps (or nothing) where the reader
/// writes defaults (`metadata`, `spec`, `spec.template`, `status`).
pub(super) fn require_object(doc: &Doc) -> Result<(), Error> {
    if doc.name.is_empty() {
        return Err(doc.err("metadata.name is required"));
    }
    for field in ["metadata", "spec", "spec.template", "status"] {
        let at = format!("/{}", field.replace('.', "/"));
        match doc.d.object.pointer(&at) {
            None | Some(Value::Null | Value::Object(_)) => {}
            Some(other) => return Err(doc.err(format!("{field}: expected a map, got {other}"))),
        }
    }
    Ok(())
}
