//! Errors of the NodeClaim loops.

/// Errors of the NodeClaim loops. Each variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("reading {what}: {source}")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// Retried: the cause may go away (a cache filling, a NodeClass not judged yet).
    #[error("{0}")]
    Launch(String),
    /// Never succeeds for this NodeClaim: it is given up (Launched=False with `reason`, an
    /// event, deleted) so that the provisioner plans its pods again.
    #[error("{reason}: {message}")]
    Permanent {
        reason: &'static str,
        message: String,
    },
}

impl Error {
    /// Short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "api",
            Error::Decode { .. } => "decode",
            Error::Launch(_) => "launch",
            Error::Permanent { .. } => "permanent",
        }
    }

    /// A permanent failure with `reason`.
    pub fn permanent(reason: &'static str, message: impl Into<String>) -> Error {
        Error::Permanent {
            reason,
            message: message.into(),
        }
    }

    /// Whether the API server answered 404, or discovery found no such kind.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 404)
            || matches!(
                self,
                Error::Kube(kube::Error::Discovery(
                    kube::error::DiscoveryError::MissingKind(_)
                        | kube::error::DiscoveryError::MissingApiGroup(_)
                ))
            )
    }

    /// A write computed from a stale read (409): retry at once from the fresh object.
    pub fn is_conflict(&self) -> bool {
        // 422 with a failed `test` op: a JSON patch guarded by the value it was computed from.
        matches!(self, Error::Kube(kube::Error::Api(s))
            if s.code == 409 || (s.code == 422 && s.message.contains("test")))
    }
}
