//! The CLI's own commands, as a library so tests reach them: `simulate` (offline, the plan the
//! provisioner would make for a snapshot) and `inspect` (NodePool → NodeClaim → Machine → Node),
//! and the operator process's allocator options ([`memory`]).

pub mod inspect;
pub mod inspect_hub;
pub mod inspect_pending;
pub mod repair_policies;
pub mod simulate;
