//! The provider seam: Karpenter's cloudprovider interface (`pkg/cloudprovider/types.go`) as a
//! Rust trait. The NodeClaim loops launch, look up, delete and judge drift of a NodeClaim's
//! instance through [`CloudProvider`], and read the instance types of a NodeClass from it.
//! Implementations: the Cluster API provider (one standalone Machine per NodeClaim), the
//! kwok provider (a Node per NodeClaim), and the `fake` module, an in-memory one for tests
//! like Karpenter's `cloudprovider/fake`.
//!
//! The checklist a provider answers, in the order the lifecycle asks:
//! 1. [`CloudProvider::create`]: launch the claim's instance exactly once (idempotent; a
//!    restart adopts what an earlier attempt made); what must be remembered before any side
//!    effect comes back as [`Created::Record`] for the core to write on the NodeClaim (with
//!    its finalizer), then `create` runs again on the written claim. The core persists the
//!    NodeClaim and its status; the provider never writes it. Typed errors say what happened:
//!    [`Error::InsufficientCapacity`], [`Error::NodeClassNotReady`] and [`Error::Create`] give
//!    the claim up (`Launched=False` with the reason, an event, the claim deleted so its pods
//!    are planned again); [`Error::Retryable`] retries with backoff, bound by the launch
//!    timeout ([`Retry::Launch`]: the core records `Launched=Unknown`, `LaunchFailed`).
//! 2. [`CloudProvider::get`]: the instance as the provider sees it now: its providerID once it
//!    exists (then `Launched=True`), a failure that means it never will, a provider health
//!    signal for repair. [`Error::NodeClaimNotFound`]: the instance is gone.
//! 3. Registration and initialization are the workload cluster's (Node by providerID).
//! 4. [`CloudProvider::repair_policies`]: Node conditions that, held long enough, replace it
//!    (none: nothing is repaired); an instance whose remediation belongs to someone else
//!    ([`Instance::remediated_elsewhere`]) is never repaired by them, only replaced when that
//!    remediator asks.
//! 5. [`CloudProvider::is_drifted`]: the provider's drift reasons (for Cluster API: NodeClass,
//!    templates); the core ones (NodePool hash, requirements, an instance type gone from
//!    [`CloudProvider::instance_types`]) are judged by the lifecycle for every provider.
//! 6. [`CloudProvider::delete`]: remove the instance; called until nothing is left.
//! 7. [`CloudProvider::list`]: every instance this provider made for this cluster, for
//!    garbage collection (`garbagecollection`): an instance whose NodeClaim UID is gone, past
//!    a grace period, is deleted through [`CloudProvider::delete`] with
//!    [`Instance::as_claim`].
//!
//! Besides Karpenter's interface: [`CloudProvider::changes`] (which NodeClaims the provider's
//! own watches say changed), [`CloudProvider::timeouts`], [`CloudProvider::private_annotations`],
//! [`CloudProvider::launch_failed`] and [`CloudProvider::launch_succeeded`] (offering backoff
//! after an asynchronous launch failure), [`CloudProvider::drain_rules`] (how the core's drain
//! treats each pod: for Cluster API, the MachineDrainRules selecting the claim's Machine).

use crate::drain::DrainRules;
use crate::repair::RepairPolicy;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::jiff::Timestamp;

use crate::instance_types::InstanceTypes;

/// Errors of a provider, typed like Karpenter's (`NodeClaimNotFoundError`,
/// `InsufficientCapacityError`, `NodeClassNotReadyError`, `CreateError`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The claim has no instance (never made, or gone).
    #[error("no instance for NodeClaim {0}")]
    NodeClaimNotFound(String),
    /// No offering can take the claim now; permanent for this claim.
    #[error("{0}")]
    InsufficientCapacity(String),
    /// The claim's NodeClass is missing or not Ready; permanent for this claim.
    #[error("{0}")]
    NodeClassNotReady(String),
    /// The launch cannot succeed for this claim (`reason` is the condition reason).
    #[error("{reason}: {message}")]
    Create {
        reason: &'static str,
        message: String,
    },
    /// Anything that may go away by itself (API errors, caches filling): retried with
    /// backoff; `kind` says what for retries and metrics.
    #[error("{message}")]
    Retryable { kind: Retry, message: String },
    /// The provider cannot reboot this instance (Karpenter's `NodeRebootNotImplementedError`):
    /// the core replaces it instead.
    #[error("reboot not implemented: {0}")]
    RebootNotImplemented(String),
    /// The reboot cannot succeed, and retrying cannot help (Karpenter's
    /// `NodeRebootFailedError`): the core replaces the instance.
    #[error("reboot failed: {0}")]
    RebootFailed(String),
    /// The launch waits for a precondition outside the claim (for Cluster API, a preflight
    /// check: a control plane upgrading): nothing was launched; `reason` (the condition and
    /// event reason) names what it waits for. The core records `Launched=Unknown` with it,
    /// publishes an event when the hold starts, and retries; the provider's
    /// [`CloudProvider::changes`] bring the claim back as soon as the precondition may hold.
    /// Not bound by the launch timeout (nothing could launch meanwhile).
    #[error("{reason}: {message}")]
    Held {
        reason: &'static str,
        message: String,
    },
}

/// What kind of passing failure an [`Error::Retryable`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A write computed from a stale read (409): retried at once from the fresh object.
    Conflict,
    /// The API server failed or refused.
    Api,
    /// Something read could not be decoded.
    Decode,
    /// Waiting for something to settle (a cache filling, a NodeClass not judged yet).
    Waiting,
    /// An attempt to launch the instance failed: the core records `Launched=Unknown` with
    /// reason `LaunchFailed` and the message, and retries.
    Launch,
}

impl Error {
    /// A passing failure of `kind`.
    pub fn retryable(kind: Retry, message: impl std::fmt::Display) -> Error {
        Error::Retryable {
            kind,
            message: message.to_string(),
        }
    }

    /// The condition/event reason of a permanent launch failure, with its message; `None`
    /// for errors that are retried.
    pub fn permanent(&self) -> Option<(&'static str, String)> {
        match self {
            Error::InsufficientCapacity(m) => {
                Some((api::consts::events::INSUFFICIENT_CAPACITY_ERROR, m.clone()))
            }
            Error::NodeClassNotReady(m) => {
                Some((api::consts::events::NODECLASS_NOT_READY, m.clone()))
            }
            Error::Create { reason, message } => Some((reason, message.clone())),
            Error::NodeClaimNotFound(_)
            | Error::Retryable { .. }
            | Error::Held { .. }
            | Error::RebootNotImplemented(_)
            | Error::RebootFailed(_) => None,
        }
    }

    /// A write computed from a stale read: retried at once.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            Error::Retryable {
                kind: Retry::Conflict,
                ..
            }
        )
    }

    /// A short label for the cloudprovider error metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NodeClaimNotFound(_) => "not_found",
            Error::InsufficientCapacity(_) => "insufficient_capacity",
            Error::NodeClassNotReady(_) => "nodeclass_not_ready",
            Error::Create { .. } => "permanent",
            Error::Held { .. } => "held",
            Error::RebootNotImplemented(_) => "reboot_not_implemented",
            Error::RebootFailed(_) => "reboot_failed",
            Error::Retryable { kind, .. } => match kind {
                Retry::Conflict | Retry::Api => "api",
                Retry::Decode => "decode",
                Retry::Waiting | Retry::Launch => "launch",
            },
        }
    }
}

/// What [`CloudProvider::create`] answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Created {
    /// Record this on the NodeClaim before anything is launched, then call `create` again
    /// with the written claim: every restart resumes the same launch.
    Record(Intent),
    /// The instance is launched, or being launched ([`CloudProvider::get`] says how far).
    Launched,
}

/// What a provider records on a NodeClaim before it launches (Karpenter's providers return
/// the NodeClaim to persist from `Create`; the core writes it, with its finalizer).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Intent {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A matched repair policy, or the provider's own health signal of an instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    /// The condition that failed (the metric's `condition` label).
    pub condition: String,
    /// e.g. `Ready=Unknown`, `NodeHealthy=False (NodeConditionsFailed)`.
    pub detail: String,
    /// Since when.
    pub since: Timestamp,
}

/// Remediation of an instance belongs to someone else than the core's repair (for Cluster
/// API, a MachineHealthCheck that selects the instance's Machine): the core's repair policies
/// then replace nothing; the core only carries out what that remediator asks of the
/// instance's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemediatedElsewhere {
    /// Who, in messages and `inspect` (`MachineHealthCheck <namespace>/<name>`).
    pub by: String,
    /// It judged the instance unhealthy and asks its owner (the core) to replace it now, with
    /// what it found; `None`: nothing asked (healthy, or it remediates by itself).
    pub replace: Option<Unhealthy>,
}

/// An instance as its provider sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Instance {
    /// The NodeClaim it was launched for.
    pub nodeclaim: String,
    /// Set once the instance exists.
    pub provider_id: Option<String>,
    /// What it is called in messages ("Machine ns/name").
    pub description: String,
    pub instance_type: String,
    pub zone: Option<String>,
    pub capacity_type: String,
    pub capacity: BTreeMap<String, String>,
    pub allocatable: BTreeMap<String, String>,
    /// A failure that means it will never become a Node (the offering is then avoided).
    pub failure: Option<String>,
    /// A provider health signal (repair policy match) and since when it holds.
    pub unhealthy: Option<Unhealthy>,
    /// Being deleted.
    pub terminating: bool,
    /// Remediation of this instance belongs to something other than the core's repair.
    pub remediated_elsewhere: Option<RemediatedElsewhere>,
    /// The UID of the NodeClaim it was launched for (garbage collection keeps an instance
    /// while a NodeClaim of this UID exists).
    pub nodeclaim_uid: Option<String>,
    /// When the provider created it.
    pub created: Option<Timestamp>,
    /// What a NodeClaim standing for it carries so that [`CloudProvider::delete`] finds it
    /// (Karpenter's `List` returns NodeClaims built from instances; the Cluster API provider
    /// puts its launch plan here).
    pub annotations: BTreeMap<String, String>,
}

impl Instance {
    /// A NodeClaim standing for this instance, to pass to [`CloudProvider::delete`] when
    /// its own NodeClaim is gone (garbage collection). Not an object of the cluster: it has
    /// no resourceVersion.
    pub fn as_claim(&self) -> NodeClaim {
        let mut claim = NodeClaim::new(&self.nodeclaim, Default::default());
        claim.metadata.uid = self.nodeclaim_uid.clone();
        claim.metadata.annotations = Some(self.annotations.clone());
        claim.metadata.creation_timestamp = self
            .created
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
        claim
    }
}

/// A drift reason and what changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub reason: &'static str,
    pub message: String,
}

impl Drift {
    /// The reason holds, with what changed (the form every drift check returns).
    pub fn hit(reason: &'static str, message: String) -> Option<Drift> {
        Some(Drift { reason, message })
    }
}

/// Where deletion stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// Nothing of the instance is left (Karpenter: `NodeClaimNotFoundError` from Delete).
    Gone,
    /// Going away; look again after this long (the watch usually says so sooner).
    Waiting(Duration),
}

/// How long the core waits for a claim's instance to get a providerID (`launch`) and for its
/// Node to register (`registration`) before it gives the claim up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub launch: Duration,
    pub registration: Duration,
}

impl Timeouts {
    /// Karpenter's: 10 minutes to launch, 15 to register.
    pub const DEFAULT: Timeouts = Timeouts {
        launch: Duration::from_secs(600),
        registration: Duration::from_secs(900),
    };
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts::DEFAULT
    }
}

/// A kind of NodeClass the provider serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeClassKind {
    pub group: &'static str,
    pub kind: &'static str,
}

/// Karpenter's cloudprovider interface. Object-safe: the loops hold an
/// `Arc<dyn CloudProvider>`.
pub trait CloudProvider: Send + Sync {
    /// Launches the instance of `claim`, once (idempotent: a restart adopts what an earlier
    /// attempt made). A provider that must remember a decision before its first side effect
    /// answers [`Created::Record`] first: the core writes it on the NodeClaim (conditional
    /// on the version it was computed from) and calls `create` again with the written claim.
    fn create<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Created, Error>>;

    /// Deletes the instance of `claim`; called again until it answers [`Deletion::Gone`].
    fn delete<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Deletion, Error>>;

    /// The instance of `claim` now ([`Error::NodeClaimNotFound`]: there is none).
    fn get<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Instance, Error>>;

    /// Every instance this provider launched for this cluster (fenced: never another
    /// cluster's), including what an interrupted launch left behind.
    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, Error>>;

    /// The instance types a NodeClass offers (`None`: not known here yet).
    fn instance_types(&self, nodeclass: &str) -> Option<Arc<InstanceTypes>>;

    /// The provider's drift reason for `claim`, if any.
    fn is_drifted<'a>(
        &'a self,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<Option<Drift>, Error>>;

    /// Node conditions that get a Node repaired once held for their toleration, and how
    /// (see [`crate::repair`]); empty: no repair.
    fn repair_policies(&self) -> Vec<RepairPolicy>;

    /// Reboots the instance of `claim` in place (Karpenter's `Reboot`), returning once the
    /// provider accepted the request, not once it rebooted (the core watches the Node's
    /// `bootID`). `operation` names this reboot: a second call with the same operation does
    /// not reboot again. [`Error::RebootNotImplemented`]: this provider or instance cannot
    /// (the core replaces it instead); [`Error::RebootFailed`]: retrying cannot help; other
    /// errors are retried.
    fn reboot<'a>(
        &'a self,
        claim: &'a NodeClaim,
        _operation: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let message = format!("the {} provider does not reboot instances", self.name());
        let _ = claim;
        Box::pin(async move { Err(Error::RebootNotImplemented(message)) })
    }

    /// The provider's name (metrics label).
    fn name(&self) -> &'static str;

    /// The NodeClass kinds this provider serves.
    fn supported_node_classes(&self) -> Vec<NodeClassKind>;

    /// The names of NodeClaims whose instance, or what the provider judges it on, changed
    /// (its own watches: for Cluster API a Machine, NodeClass, Cluster or template); the
    /// lifecycle reconciles each. A new stream on each call; `None`: the provider watches
    /// nothing (the lifecycle then sees changes through `get` on its own triggers and polls).
    fn changes(&self) -> Option<BoxStream<'static, String>> {
        None
    }

    /// NodeClaim annotations that are the provider's own business (recorded through
    /// [`Created::Record`]): not copied onto the Node at registration.
    fn private_annotations(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// The launch and registration timeouts of `claim` (its NodeClass may set them).
    fn timeouts(&self, _claim: &NodeClaim) -> Timeouts {
        Timeouts::DEFAULT
    }

    /// The launch of `claim` failed after `create` returned (its instance failed, or never
    /// got a providerID in time): avoid its offering for a while. Karpenter's providers learn
    /// this inside a synchronous Create; a Cluster API launch fails asynchronously.
    fn launch_failed(&self, claim: &NodeClaim, why: &str);

    /// Whether drift of the NodeClass `nodeclass`'s NodeClaims is left to the user: the core
    /// then marks them `Drifted` but never replaces them for it.
    fn manual_drift(&self, _nodeclass: &str) -> bool {
        false
    }

    /// The taint the core keeps on the Node of a drifted NodeClaim while it waits for its
    /// replacement (removed when it is no longer drifted), so that pods evicted elsewhere
    /// prefer other nodes; `None`: no taint. For Cluster API, its outdated-revision
    /// `PreferNoSchedule` taint, as a MachineDeployment rollout marks its old Machines' Nodes.
    fn drifted_taint(&self) -> Option<k8s_openapi::api::core::v1::Taint> {
        None
    }

    /// The instance of `claim` got its providerID: what `launch_failed` held against its
    /// offering may start over from the first hold.
    fn launch_succeeded(&self, _claim: &NodeClaim) {}

    /// How the core's drain of `claim`'s Node treats each pod (skipped, waited for until it
    /// completes, or evicted in groups of increasing order): the provider's own drain rules,
    /// e.g. Cluster API's MachineDrainRules. Default: every pod drained, order 0 (Karpenter's
    /// drain). An error (a cache still filling) is retried by the drain.
    fn drain_rules(&self, _claim: &NodeClaim) -> Result<DrainRules, Error> {
        Ok(DrainRules::default())
    }
}

/// A NodeClaim's resource requests, as written (name → quantity string).
pub fn claim_requests(claim: &NodeClaim) -> BTreeMap<String, String> {
    claim
        .spec
        .resources
        .as_ref()
        .map(|r| {
            r.requests
                .iter()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect()
        })
        .unwrap_or_default()
}
