//! The names the control loops use, under the names the loops know them by. Every value
//! comes from `api::consts`, the project's single list of labels, annotations, taints and
//! finalizers.

use api::consts::{annotations, finalizers, groups, labels, taints};

pub const CAPI_GROUP: &str = groups::CLUSTER_API;
pub const CAPI_VERSION: &str = groups::CLUSTER_API_VERSION;
pub const CAPI_CLUSTER_NAME_LABEL: &str = labels::CLUSTER_NAME;
pub const CAPI_SET_NAME_LABEL: &str = labels::SET_NAME;
pub const CAPI_DEPLOYMENT_NAME_LABEL: &str = labels::DEPLOYMENT_NAME;
pub const CAPI_CLONED_FROM_NAME_ANNOTATION: &str = annotations::CLONED_FROM_NAME;
pub const CAPI_CLONED_FROM_GROUPKIND_ANNOTATION: &str = annotations::CLONED_FROM_GROUPKIND;
pub const DO_NOT_SYNC_TAINTS_LABEL: &str = labels::DO_NOT_SYNC_TAINTS;
pub const NODE_REGISTERED_LABEL: &str = labels::REGISTERED;
pub const NODE_INITIALIZED_LABEL: &str = labels::INITIALIZED;
pub const UNREGISTERED_TAINT_KEY: &str = taints::UNREGISTERED;
pub const TERMINATION_FINALIZER: &str = finalizers::TERMINATION;
/// Taints expected while a node starts (Karpenter's known ephemeral taints).
pub const EPHEMERAL_TAINT_KEYS: &[&str] = taints::EPHEMERAL;
pub const READINESS_TAINT_PREFIX: &str = taints::READINESS_PREFIX;
pub const NODEPOOL_LABEL: &str = labels::NODEPOOL;
pub const NODECLAIM_LABEL: &str = labels::NODECLAIM;
pub const KARPENTER_MEMBER_LABEL: &str = labels::KARPENTER_MEMBER;
/// On a NodeClaim: `<namespace>/<name>` of its Machine.
pub const CAPI_MACHINE_ANNOTATION: &str = annotations::MACHINE;
/// On a NodeClaim: the launch plan (JSON), written before anything is created.
pub const LAUNCH_PLAN_ANNOTATION: &str = annotations::LAUNCH_PLAN;
/// On the Machine and its clones: the UID of the NodeClaim they were created for.
pub const NODECLAIM_UID_ANNOTATION: &str = annotations::NODECLAIM_UID;
