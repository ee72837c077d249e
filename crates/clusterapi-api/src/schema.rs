//! Schema fragments of the ClusterAPINodeClass that schemars cannot derive.

use api::schema::QUANTITY;
use schemars::{Schema, SchemaGenerator, json_schema};

/// `ClusterAPINodeClass` `spec.inventory.preset`: one of the presets (no `null`).
pub(crate) fn inventory_preset(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": ["Metal3"],
    })
}

/// ClusterAPINodeClass `kubelet.kubeReserved` / `systemReserved`.
pub(crate) fn reserved_resources(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "x-kubernetes-int-or-string": true,
            "pattern": QUANTITY,
        },
        "x-kubernetes-validations": [{
            "message": "valid keys are ['cpu','memory','ephemeral-storage','pid']",
            "rule": "self.all(x, x in ['cpu', 'memory', 'ephemeral-storage', 'pid'])",
        }],
    })
}

/// ClusterAPINodeClass `kubelet.evictionHard`.
pub(crate) fn eviction_thresholds(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Hard eviction thresholds (quantity or percentage), as the kubelet's --eviction-hard.",
        "type": "object",
        "additionalProperties": {
            "type": "string",
            "pattern": r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%|(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$",
        },
        "x-kubernetes-validations": [{
            "message": "valid keys are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",
            "rule": "self.all(x, x in ['memory.available', 'nodefs.available', 'nodefs.inodesFree', 'imagefs.available', 'imagefs.inodesFree', 'pid.available'])",
        }],
    })
}
