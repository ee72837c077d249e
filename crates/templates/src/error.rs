//! Typed errors. Every template problem names the template and the field.

use crate::quantity::QuantityError;
use crate::reference::TemplateRef;

/// Why one template does not yield an instance type. The template keeps being excluded
/// until it is fixed; the other templates are not affected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateError {
    /// The object is not an `infrastructure.cluster.x-k8s.io` `*MachineTemplate`.
    #[error("{template}: not an InfrastructureMachineTemplate: {reason}")]
    NotATemplate {
        template: Box<TemplateRef>,
        reason: String,
    },
    /// A quantity (status.capacity entry or capacity annotation) cannot be parsed.
    #[error("{template}: {field}: unparseable quantity {value:?}: {source}")]
    Quantity {
        template: Box<TemplateRef>,
        field: String,
        value: String,
        source: QuantityError,
    },
    /// A quantity or count is negative.
    #[error("{template}: {field}: must not be negative, got {value:?}")]
    Negative {
        template: Box<TemplateRef>,
        field: String,
        value: String,
    },
    /// An integer annotation (maxPods, gpu-count) is not a non-negative integer.
    #[error("{template}: {field}: expected a non-negative integer, got {value:?}")]
    Integer {
        template: Box<TemplateRef>,
        field: String,
        value: String,
    },
    /// Neither status.capacity.cpu nor the cpu annotation gives a positive cpu.
    #[error(
        "{template}: no cpu: set status.capacity.cpu or annotation capacity.cluster-autoscaler.kubernetes.io/cpu (scale from zero needs cpu and memory)"
    )]
    NoCpu { template: Box<TemplateRef> },
    /// Neither status.capacity.memory nor the memory annotation gives a positive memory.
    #[error(
        "{template}: no memory: set status.capacity.memory or annotation capacity.cluster-autoscaler.kubernetes.io/memory (scale from zero needs cpu and memory)"
    )]
    NoMemory { template: Box<TemplateRef> },
    /// A taint in the taints annotation is malformed.
    #[error("{template}: {field}: bad taint {value:?}: {reason} (expected key=value:Effect)")]
    Taint {
        template: Box<TemplateRef>,
        field: String,
        value: String,
        reason: String,
    },
    /// An item of the CSI driver annotation is not `driver=limit` with a valid driver name
    /// and a limit from 0 to 2147483647, or names a driver twice.
    #[error(
        "{template}: {field}: bad CSI driver limit {value:?}: {reason} (expected driver=limit,driver2=limit2)"
    )]
    CsiDriver {
        template: Box<TemplateRef>,
        field: String,
        value: String,
        reason: String,
    },
    /// A device annotation (the resource-slices YAML, or Cluster Autoscaler's dra-driver
    /// with gpu-count) is malformed.
    #[error("{template}: {field}: bad devices: {reason}")]
    Devices {
        template: Box<TemplateRef>,
        field: String,
        reason: String,
    },
    /// A label (labels annotation, instance-type name, zone) is malformed.
    #[error("{template}: {field}: bad label {value:?}: {reason}")]
    Label {
        template: Box<TemplateRef>,
        field: String,
        value: String,
        reason: String,
    },
    /// The architecture is not one Kubernetes knows.
    #[error(
        "{template}: {field}: unknown architecture {value:?} (expected amd64, arm64, s390x or ppc64le)"
    )]
    Architecture {
        template: Box<TemplateRef>,
        field: String,
        value: String,
    },
    /// The operating system is not linux or windows.
    #[error("{template}: {field}: unknown operating system {value:?} (expected linux or windows)")]
    OperatingSystem {
        template: Box<TemplateRef>,
        field: String,
        value: String,
    },
    /// The capacity type is not spot, on-demand or reserved.
    #[error(
        "{template}: {field}: unknown capacity type {value:?} (expected spot, on-demand or reserved)"
    )]
    CapacityType {
        template: Box<TemplateRef>,
        field: String,
        value: String,
    },
    /// The price annotation is not a finite non-negative decimal.
    #[error("{template}: {field}: bad price {value:?}: {reason}")]
    Price {
        template: Box<TemplateRef>,
        field: String,
        value: String,
        reason: String,
    },
    /// A count annotation (max-machines, node-group max size, available-count and its
    /// timestamp) is malformed.
    #[error("{template}: {field}: bad count {value:?}: {reason}")]
    Count {
        template: Box<TemplateRef>,
        field: String,
        value: String,
        reason: String,
    },
    /// After kubeReserved, systemReserved and evictionHard nothing is left for pods.
    #[error(
        "{template}: allocatable {resource} is {allocatable} after kubeReserved, systemReserved and evictionHard (capacity {capacity})"
    )]
    NothingAllocatable {
        template: Box<TemplateRef>,
        resource: String,
        capacity: String,
        allocatable: String,
    },
    /// Another template publishes the same instance-type name with a different shape.
    #[error(
        "{template}: instance type {instance_type:?} is already defined by {other} with a different {difference}"
    )]
    ConflictingShape {
        template: Box<TemplateRef>,
        instance_type: String,
        other: Box<TemplateRef>,
        difference: String,
    },
    /// Another template already offers the same instance type in the same zone and capacity type.
    #[error(
        "{template}: instance type {instance_type:?} zone {zone} capacity type {capacity_type} is already offered by {other}"
    )]
    DuplicateOffering {
        template: Box<TemplateRef>,
        instance_type: String,
        zone: String,
        capacity_type: String,
        other: Box<TemplateRef>,
    },
    /// A resizable template's annotation (range, memory per cpu, field map, price,
    /// headroom) is malformed.
    #[error("{template}: {field}: bad resizable setting {value:?}: {reason}")]
    Resizable {
        template: Box<TemplateRef>,
        field: String,
        value: String,
        reason: String,
    },
}

impl TemplateError {
    /// The template this error is about.
    pub fn template(&self) -> &TemplateRef {
        match self {
            Self::NotATemplate { template, .. }
            | Self::Quantity { template, .. }
            | Self::Negative { template, .. }
            | Self::Integer { template, .. }
            | Self::NoCpu { template }
            | Self::NoMemory { template }
            | Self::Taint { template, .. }
            | Self::CsiDriver { template, .. }
            | Self::Devices { template, .. }
            | Self::Label { template, .. }
            | Self::Architecture { template, .. }
            | Self::OperatingSystem { template, .. }
            | Self::CapacityType { template, .. }
            | Self::Price { template, .. }
            | Self::Count { template, .. }
            | Self::NothingAllocatable { template, .. }
            | Self::ConflictingShape { template, .. }
            | Self::DuplicateOffering { template, .. }
            | Self::Resizable { template, .. } => template,
        }
    }

    /// A short machine-friendly reason, e.g. for a condition reason or a metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotATemplate { .. } => "NotATemplate",
            Self::Quantity { .. } => "InvalidQuantity",
            Self::Negative { .. } => "NegativeQuantity",
            Self::Integer { .. } => "InvalidInteger",
            Self::NoCpu { .. } => "NoCPU",
            Self::NoMemory { .. } => "NoMemory",
            Self::Taint { .. } => "InvalidTaint",
            Self::CsiDriver { .. } => "InvalidCSIDriver",
            Self::Devices { .. } => "InvalidDevices",
            Self::Label { .. } => "InvalidLabel",
            Self::Architecture { .. } => "UnknownArchitecture",
            Self::OperatingSystem { .. } => "UnknownOperatingSystem",
            Self::CapacityType { .. } => "UnknownCapacityType",
            Self::Price { .. } => "InvalidPrice",
            Self::Count { .. } => "InvalidCount",
            Self::NothingAllocatable { .. } => "NothingAllocatable",
            Self::ConflictingShape { .. } => "ConflictingShape",
            Self::DuplicateOffering { .. } => "DuplicateOffering",
            Self::Resizable { .. } => "InvalidResizable",
        }
    }

    /// The message without the template prefix.
    pub fn detail(&self) -> String {
        let full = self.to_string();
        let prefix = format!("{}: ", self.template());
        full.strip_prefix(&prefix)
            .map(str::to_string)
            .unwrap_or(full)
    }
}

/// A NodeClass (or Cluster) setting the catalog depends on is invalid: the whole catalog of
/// that NodeClass is unavailable until it is fixed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{field}: unparseable quantity {value:?}: {source}")]
    Quantity {
        field: String,
        value: String,
        source: QuantityError,
    },
    #[error("{field}: bad percentage {value:?} (expected 0%..100%)")]
    Percentage { field: String, value: String },
    #[error("{field}: must not be negative, got {value}")]
    Negative { field: String, value: String },
}
