//! Errors of the NodeClaim loops.

/// Errors of the NodeClaim loops. Each variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A conditional write refused: a conflict is retried at once from the fresh object.
    #[error(transparent)]
    Write(#[from] crate::write::Refused),
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
    /// The provider failed in a way that may pass (see `cloudprovider::Error`).
    #[error("cloud provider: {0}")]
    Provider(cloudprovider::Error),
}

impl Error {
    /// Short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) | Error::Write(_) => "api",
            Error::Decode { .. } => "decode",
            Error::Launch(_) => "launch",
            Error::Permanent { .. } => "permanent",
            Error::Provider(e) => e.metric_label(),
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
        matches!(self, Error::Kube(e) if crate::write::is_gone(e))
            || matches!(self, Error::Write(crate::write::Refused::Gone(_)))
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
        matches!(self, Error::Kube(e) if crate::write::is_conflict(e))
            || matches!(self, Error::Write(crate::write::Refused::Conflict(_)))
            || matches!(self, Error::Provider(e) if e.is_conflict())
    }

    /// The provider's form of this error (a passing failure unless it is permanent).
    pub fn to_provider(self) -> cloudprovider::Error {
        use cloudprovider::{Error as P, Retry};
        let kind = match &self {
            e if e.is_conflict() => Retry::Conflict,
            Error::Decode { .. } => Retry::Decode,
            Error::Launch(_) => Retry::Waiting,
            _ => Retry::Api,
        };
        match self {
            Error::Permanent { reason, message } => P::Create { reason, message },
            Error::Provider(e) => e,
            other => P::retryable(kind, other),
        }
    }
}

impl From<cloudprovider::Error> for Error {
    fn from(e: cloudprovider::Error) -> Error {
        match e.permanent() {
            Some((reason, message)) => Error::Permanent { reason, message },
            None => Error::Provider(e),
        }
    }
}
