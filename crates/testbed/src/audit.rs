//! The kube-apiserver audit log of a testbed started with [`crate::Options::audit_log`]:
//! one JSON event per line (`audit.k8s.io/v1` `Event`, Metadata level). Tests read it to
//! prove who wrote what: each client sends its own User-Agent.

use serde::Deserialize;

/// The fields of an audit event that tests look at.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// `ResponseStarted` (watches), `ResponseComplete` or `Panic`.
    pub stage: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`...
    pub verb: String,
    #[serde(default)]
    pub user_agent: String,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    #[serde(default)]
    pub object_ref: Option<AuditObjectRef>,
    #[serde(default)]
    pub response_status: Option<AuditStatus>,
    /// RFC 3339 with microseconds.
    #[serde(default)]
    pub request_received_timestamp: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AuditObjectRef {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub api_group: Option<String>,
    #[serde(default)]
    pub subresource: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct AuditStatus {
    #[serde(default)]
    pub code: Option<u16>,
}

impl AuditEvent {
    /// A request that changes state (whether or not the server accepted it).
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// The resource (plural, e.g. `leases`), empty for non-resource URLs.
    pub fn resource(&self) -> &str {
        self.object_ref
            .as_ref()
            .map(|r| r.resource.as_str())
            .unwrap_or_default()
    }

    /// The final event of a request (watches also log `ResponseStarted`).
    pub fn is_complete(&self) -> bool {
        self.stage == "ResponseComplete"
    }
}

/// Parses audit log text. A last line without its newline is skipped: the server may be
/// writing it while the test reads.
pub fn parse(text: &str) -> Result<Vec<AuditEvent>, serde_json::Error> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = concat!(
        r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/apis/coordination.k8s.io/v1/namespaces/karpenter/leases/l","verb":"patch","user":{"username":"testbed-admin"},"userAgent":"karpenter-capi/0.1.0 (replica-a)","objectRef":{"resource":"leases","namespace":"karpenter","name":"l","apiGroup":"coordination.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}"#,
        "\n",
        r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"b","stage":"ResponseStarted","requestURI":"/api/v1/nodes?watch=true","verb":"watch","user":{"username":"testbed-admin"},"userAgent":"kubectl/v1.36.3","objectRef":{"resource":"nodes","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}"#,
        "\n",
        r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/readyz","verb":"get"}"#,
        "\n",
    );

    #[test]
    fn parses_events_of_the_metadata_level() {
        let events = parse(TWO).expect("parses");
        assert_eq!(events.len(), 3);
        let lease = &events[0];
        assert!(lease.is_write() && lease.is_complete());
        assert_eq!(lease.resource(), "leases");
        assert_eq!(lease.user_agent, "karpenter-capi/0.1.0 (replica-a)");
        assert_eq!(
            lease.object_ref.as_ref().and_then(|r| r.name.as_deref()),
            Some("l")
        );
        assert_eq!(
            lease.response_status.as_ref().and_then(|s| s.code),
            Some(200)
        );
        let watch = &events[1];
        assert!(!watch.is_write() && !watch.is_complete());
        assert_eq!(watch.resource(), "nodes");
        // A non-resource URL has no objectRef.
        assert_eq!(events[2].resource(), "");
        assert_eq!(events[2].user_agent, "");
    }

    #[test]
    fn a_line_being_written_is_skipped() {
        let partial = format!("{TWO}{{\"kind\":\"Event\",\"stage\":\"Resp");
        assert_eq!(parse(&partial).expect("parses").len(), 3);
        assert!(parse("").expect("empty").is_empty());
    }

    #[test]
    fn a_broken_line_is_an_error() {
        assert!(parse("{not json}\n").is_err());
    }
}
