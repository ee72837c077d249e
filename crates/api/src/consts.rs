//! Every label, annotation, taint, finalizer, condition type and reason the project uses.
//! Code elsewhere refers to these constants, never to the string literals.

/// API groups and versions.
pub mod groups {
    /// Karpenter's API group (NodePool, NodeClaim).
    pub const KARPENTER: &str = "karpenter.sh";
    pub const KARPENTER_VERSION: &str = "v1";
    /// Our API group (ClusterAPINodeClass) and the prefix of our labels and annotations.
    pub const NODECLASS: &str = "karpenter.cluster.x-k8s.io";
    pub const NODECLASS_VERSION: &str = "v1alpha1";
    pub const NODECLASS_KIND: &str = "ClusterAPINodeClass";
    /// Cluster API core (Machine, Cluster).
    pub const CLUSTER_API: &str = "cluster.x-k8s.io";
    pub const CLUSTER_API_VERSION: &str = "v1beta2";
    /// Infrastructure providers' group (InfrastructureMachineTemplates).
    pub const INFRASTRUCTURE: &str = "infrastructure.cluster.x-k8s.io";
    /// Bootstrap providers' group (KubeadmConfigTemplate, KubeadmConfig).
    pub const BOOTSTRAP: &str = "bootstrap.cluster.x-k8s.io";
}

/// Labels.
pub mod labels {
    // Karpenter (karpenter.sh).
    pub const NODEPOOL: &str = "karpenter.sh/nodepool";
    pub const INITIALIZED: &str = "karpenter.sh/initialized";
    pub const REGISTERED: &str = "karpenter.sh/registered";
    pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";
    pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
    /// Values of [`CAPACITY_TYPE`].
    pub const CAPACITY_TYPE_SPOT: &str = "spot";
    pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
    pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

    // Kubernetes well-known labels.
    pub const HOSTNAME: &str = "kubernetes.io/hostname";
    pub const ARCH: &str = "kubernetes.io/arch";
    pub const OS: &str = "kubernetes.io/os";
    pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
    pub const ZONE: &str = "topology.kubernetes.io/zone";
    pub const REGION: &str = "topology.kubernetes.io/region";
    pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

    // Ours (karpenter.cluster.x-k8s.io): instance-type labels derived from templates.
    pub const INSTANCE_CPU: &str = "karpenter.cluster.x-k8s.io/instance-cpu";
    pub const INSTANCE_MEMORY: &str = "karpenter.cluster.x-k8s.io/instance-memory";
    pub const INSTANCE_GPU_COUNT: &str = "karpenter.cluster.x-k8s.io/instance-gpu-count";
    /// Also on our Machines and their clones: the template they were cloned from.
    pub const INSTANCE_TEMPLATE: &str = "karpenter.cluster.x-k8s.io/instance-template";
    /// On nodes launched from a `reserved` template: the reservation (the template's name).
    pub const RESERVATION_ID: &str = "karpenter.cluster.x-k8s.io/reservation-id";
    /// On Machines and their clones: the NodeClaim they were created for.
    pub const NODECLAIM: &str = "karpenter.cluster.x-k8s.io/nodeclaim";
    /// On Machines and their clones: the identity of the workload cluster whose operator
    /// created them (`--cluster-id`, default its kube-system namespace UID).
    pub const CLUSTER_ID: &str = "karpenter.cluster.x-k8s.io/cluster-id";
    /// On a replacement NodeClaim: the id of the disruption command that created it.
    pub const DISRUPTION_COMMAND: &str = "karpenter.cluster.x-k8s.io/disruption-command";
    /// The node-class label `<group>/<lower(kind)>` = NodeClass name.
    pub const NODECLASS: &str = "karpenter.cluster.x-k8s.io/clusterapinodeclass";
    /// On a Cluster API `Cluster`: `"true"` opts it in to hub mode (`run --mode hub`).
    pub const HUB_ENABLED: &str = "karpenter.cluster.x-k8s.io/enabled";

    // Cluster API.
    /// Opt-in label: only InfrastructureMachineTemplates carrying it are offered.
    pub const KARPENTER_MEMBER: &str = "node.cluster.x-k8s.io/karpenter-member";
    pub const CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";
    /// Cluster API's static sharding label: a controller started with `--watch-filter=<v>`
    /// serves only objects carrying it with value `<v>`.
    pub const WATCH_FILTER: &str = "cluster.x-k8s.io/watch-filter";
    /// Never copied onto our Machines (a MachineSet would adopt them).
    pub const SET_NAME: &str = "cluster.x-k8s.io/set-name";
    pub const DEPLOYMENT_NAME: &str = "cluster.x-k8s.io/deployment-name";
    /// Label key prefixes Cluster API syncs from Machines onto Nodes.
    pub const CAPI_SYNCED_PREFIXES: &[&str] = &[
        "node-role.kubernetes.io",
        "node-restriction.kubernetes.io",
        "node.cluster.x-k8s.io",
    ];
    /// CRD contract labels (value: versions joined by `_`).
    pub const CONTRACT_V1BETA2: &str = "cluster.x-k8s.io/v1beta2";
    pub const CONTRACT_V1BETA1: &str = "cluster.x-k8s.io/v1beta1";

    /// Label keys Karpenter restricts on NodePools (besides the `karpenter.sh` domain).
    pub const RESTRICTED: &[&str] = &[HOSTNAME, NODEPOOL];
    /// Well-known labels a requirement may name.
    pub const WELL_KNOWN: &[&str] = &[
        NODEPOOL,
        ZONE,
        REGION,
        INSTANCE_TYPE,
        ARCH,
        OS,
        CAPACITY_TYPE,
        WINDOWS_BUILD,
        INSTANCE_CPU,
        INSTANCE_MEMORY,
        INSTANCE_GPU_COUNT,
        INSTANCE_TEMPLATE,
    ];
}

/// Annotations.
pub mod annotations {
    // Karpenter.
    pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
    /// On a Node or NodeClaim (`"true"`): never repaired, whatever its health (v1.15).
    pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
    /// On a pod (an int32): what evicting it costs, in candidate ordering (v1.15); without
    /// it, [`POD_DELETION_COST`] is read.
    pub const DISRUPTION_COST: &str = "karpenter.sh/disruption-cost";
    /// Kubernetes' ReplicaSet scale-down hint, the fallback of [`DISRUPTION_COST`].
    pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
    /// On a NodeClaim (`"true"`): launched with minValues relaxed
    /// (`--min-values-policy=BestEffort`).
    pub const NODECLAIM_MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
    /// On a NodeClaim: the DRA drivers (sorted, comma-joined) whose devices its pods' claims
    /// take; it is not Initialized until the Node has a complete pool of each (v1.15).
    pub const REQUESTED_DRA_DRIVERS: &str = "karpenter.sh/requested-dra-drivers";
    pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
    pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
    pub const NODECLAIM_TERMINATION_TIMESTAMP: &str =
        "karpenter.sh/nodeclaim-termination-timestamp";
    /// On a NodeClaim being rebooted: how long its pods get to leave first (a duration;
    /// absent: unbounded, `0`: no drain) (v1.15).
    pub const REBOOT_TERMINATION_GRACE_PERIOD: &str =
        "karpenter.sh/reboot-termination-grace-period";
    /// On a NodeClaim being rebooted: its Node's `bootID` before the reboot (v1.15).
    pub const REBOOT_PRE_BOOT_ID: &str = "karpenter.sh/reboot-pre-boot-id";
    /// On a NodeClaim (`"true"`): one of its instance types has an offering a NodeOverlay
    /// priced.
    pub const PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
    /// On a NodeClaim (`"true"`): one of its instance types has capacity a NodeOverlay
    /// added.
    pub const CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";

    // Ours.
    /// On templates: hourly price of an instance (decimal).
    pub const PRICE: &str = "karpenter.cluster.x-k8s.io/price";
    /// On templates: at most this many Machines from the template at once (a count source).
    pub const MAX_MACHINES: &str = "karpenter.cluster.x-k8s.io/max-machines";
    /// On templates: how many more Machines the infrastructure can take from the template,
    /// written by an outside inventory job together with [`AVAILABLE_COUNT_UPDATED`].
    pub const AVAILABLE_COUNT: &str = "karpenter.cluster.x-k8s.io/available-count";
    /// On templates: when [`AVAILABLE_COUNT`] was written (RFC 3339).
    pub const AVAILABLE_COUNT_UPDATED: &str = "karpenter.cluster.x-k8s.io/available-count-updated";
    /// On templates: a resizable vCPU range, `min-max/step` (e.g. `2-64/2`). With
    /// [`RESIZABLE_MEMORY`] it makes the template resizable: no `status.capacity` needed.
    pub const RESIZABLE_CPU: &str = "karpenter.cluster.x-k8s.io/resizable-cpu";
    /// On templates: a resizable memory range, `min-max/step` (e.g. `4Gi-512Gi/4Gi`).
    pub const RESIZABLE_MEMORY: &str = "karpenter.cluster.x-k8s.io/resizable-memory";
    /// On templates (optional): the memory per vCPU a size must keep, `min-max` (e.g.
    /// `1Gi-16Gi`).
    pub const RESIZABLE_MEMORY_PER_CPU: &str =
        "karpenter.cluster.x-k8s.io/resizable-memory-per-cpu";
    /// On templates (optional): where the size goes in the clone, `role=path[:unit]`,
    /// comma-separated (roles `cpu`, `cpu-sockets`, `cpu-cores-per-socket`, `memory`; units
    /// `MiB`, `GiB`, `quantity`); built in for vSphere, Nutanix, Proxmox, Elf, KubeVirt and
    /// the test provider.
    pub const RESIZABLE_FIELDS: &str = "karpenter.cluster.x-k8s.io/resizable-fields";
    /// On templates (optional): headroom added to a NodeClaim's demand before sizing, in
    /// percent (e.g. `10`).
    pub const RESIZABLE_HEADROOM: &str = "karpenter.cluster.x-k8s.io/resizable-headroom";
    /// On resizable templates: hourly price per vCPU (decimal).
    pub const PRICE_PER_CPU: &str = "karpenter.cluster.x-k8s.io/price-per-cpu";
    /// On resizable templates: hourly price per GiB of memory (decimal).
    pub const PRICE_PER_GIB: &str = "karpenter.cluster.x-k8s.io/price-per-gib";
    /// On a NodeClaim, its Machine and InfraMachine of a resizable template: the size
    /// chosen after the solve, `cpu=<vCPU>,memory=<quantity>`.
    pub const RESIZED: &str = "karpenter.cluster.x-k8s.io/size";
    /// On a static NodePool (`"true"`): its NodeClaims are spread round-robin over the zones
    /// of its compatible offerings (opt-in; Karpenter leaves the zone to the launch).
    pub const STATIC_ZONE_SPREAD: &str = "karpenter.cluster.x-k8s.io/static-zone-spread";
    /// On a NodeClaim: the launch plan (JSON), written before anything is created.
    pub const LAUNCH_PLAN: &str = "karpenter.cluster.x-k8s.io/launch";
    /// On the Machine and its clones: the UID of the NodeClaim they were created for.
    pub const NODECLAIM_UID: &str = "karpenter.cluster.x-k8s.io/nodeclaim-uid";
    /// On a NodeClaim: `<namespace>/<name>` of its Machine.
    pub const MACHINE: &str = "cluster.x-k8s.io/machine";
    /// On a disruption candidate: the surge-first command it is part of (JSON).
    pub const DISRUPTION_COMMAND: &str = "karpenter.cluster.x-k8s.io/disruption-command";
    /// On a NodeClaim whose surge-first command was rolled back: when (RFC 3339); it is not
    /// tried again for a while.
    pub const DISRUPTION_FAILED: &str = "karpenter.cluster.x-k8s.io/disruption-failed";
    /// On a replacement NodeClaim: the NodeClaims it replaces (comma-separated names).
    pub const REPLACES: &str = "karpenter.cluster.x-k8s.io/replaces";
    /// On a Cluster API `Cluster` (hub mode): the Secret (same namespace, key `value`) with
    /// the kubeconfig the hub uses for the workload cluster; default `<cluster>-kubeconfig`.
    pub const KUBECONFIG_SECRET: &str = "karpenter.cluster.x-k8s.io/kubeconfig-secret";

    // Cluster API.
    pub const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
    pub const CLONED_FROM_GROUPKIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";
    pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io";
    pub const PRE_TERMINATE_HOOK_PREFIX: &str =
        "pre-terminate.delete.hook.machine.cluster.x-k8s.io";
    pub const EXCLUDE_NODE_DRAINING: &str = "machine.cluster.x-k8s.io/exclude-node-draining";
    /// On any Cluster API object: its controllers leave it alone (any value).
    pub const PAUSED: &str = "cluster.x-k8s.io/paused";

    // cluster-autoscaler scale-from-zero capacity annotations on InfrastructureMachineTemplates.
    pub const CA_PREFIX: &str = "capacity.cluster-autoscaler.kubernetes.io/";
    pub const CA_CPU: &str = "capacity.cluster-autoscaler.kubernetes.io/cpu";
    pub const CA_MEMORY: &str = "capacity.cluster-autoscaler.kubernetes.io/memory";
    pub const CA_EPHEMERAL_DISK: &str = "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk";
    pub const CA_MAX_PODS: &str = "capacity.cluster-autoscaler.kubernetes.io/maxPods";
    pub const CA_GPU_COUNT: &str = "capacity.cluster-autoscaler.kubernetes.io/gpu-count";
    pub const CA_GPU_TYPE: &str = "capacity.cluster-autoscaler.kubernetes.io/gpu-type";
    pub const CA_LABELS: &str = "capacity.cluster-autoscaler.kubernetes.io/labels";
    pub const CA_TAINTS: &str = "capacity.cluster-autoscaler.kubernetes.io/taints";
    /// `driver=limit,…`: the CSI drivers the template's nodes run and their attach limits
    /// (`0`: no limit); parsed in the `csi` module.
    pub const CA_CSI_DRIVER: &str = "capacity.cluster-autoscaler.kubernetes.io/csi-driver";
    /// A DRA driver: with `…/gpu-count`, the template's nodes publish that many devices
    /// `gpu-0…` of this driver (Cluster Autoscaler's synthetic ResourceSlice).
    pub const CA_DRA_DRIVER: &str = "capacity.cluster-autoscaler.kubernetes.io/dra-driver";
    /// The devices the template's nodes publish, as ResourceSlices (YAML): what
    /// `kubectl get resourceslices -o yaml` shows for a running node, or its slices' `spec`s.
    pub const RESOURCE_SLICES: &str = "karpenter.cluster.x-k8s.io/resource-slices";
    /// cluster-autoscaler's node-group maximum size, honoured on templates as a count source.
    pub const CA_NODE_GROUP_MAX_SIZE: &str =
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";
}

/// Taint keys.
pub mod taints {
    /// Nodes register with it (`NoExecute`); removed at registration.
    pub const UNREGISTERED: &str = "karpenter.sh/unregistered";
    /// Candidates being disrupted (`NoSchedule`).
    pub const DISRUPTED: &str = "karpenter.sh/disrupted";
    /// On the Node of a NodeClaim being rebooted (`NoSchedule`, v1.15).
    pub const REBOOTING: &str = "karpenter.sh/rebooting";
    /// Removed by Cluster API once the Machine's Node is linked.
    pub const CAPI_UNINITIALIZED: &str = "node.cluster.x-k8s.io/uninitialized";
    /// Taints that do not block initialization (they go away on their own).
    pub const EPHEMERAL: &[&str] = &[
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
        UNREGISTERED,
    ];
    /// Prefix of readiness taints, also ephemeral.
    pub const READINESS_PREFIX: &str = "readiness.k8s.io/";
}

/// Finalizers.
pub mod finalizers {
    /// On NodeClaims and Nodes.
    pub const TERMINATION: &str = "karpenter.sh/termination";
    /// On ClusterAPINodeClasses: held until no NodeClaim refers to the NodeClass.
    pub const NODECLASS: &str = "karpenter.cluster.x-k8s.io/termination";
    /// Cluster API's own, on Machines.
    pub const MACHINE: &str = "machine.cluster.x-k8s.io";
}

/// Condition types.
pub mod conditions {
    // Shared.
    pub const READY: &str = "Ready";

    // NodeClaim.
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    pub const DRIFTED: &str = "Drifted";
    pub const DRAINED: &str = "Drained";
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
    /// A repair reboots the instance (v1.15): True while it does.
    pub const REBOOTING: &str = "Rebooting";
    /// Ours: True while something other than the operator's repair owns the remediation of
    /// the NodeClaim's instance (for Cluster API, a MachineHealthCheck selecting its
    /// Machine); the message names it.
    pub const EXTERNAL_REMEDIATION: &str = "ExternalRemediation";
    /// NodeClaim `Ready` = all of these True.
    pub const NODECLAIM_READY_PARTS: &[&str] = &[LAUNCHED, REGISTERED, INITIALIZED];

    // NodePool.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    pub const NODECLASS_READY: &str = "NodeClassReady";
    pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
    /// NodePool `Ready` = all of these True.
    pub const NODEPOOL_READY_PARTS: &[&str] = &[VALIDATION_SUCCEEDED, NODECLASS_READY];

    // ClusterAPINodeClass.
    pub const CLUSTER_READY: &str = "ClusterReady";
    pub const TEMPLATES_READY: &str = "TemplatesReady";
    pub const BOOTSTRAP_READY: &str = "BootstrapReady";
    /// ClusterReady's reason in hub mode when `spec.clusterRef` names another Cluster than
    /// the engaged one (a tenant cannot launch into another tenant's Cluster).
    pub const CLUSTER_REF_MISMATCH: &str = "ClusterRefMismatch";
    /// NodeClass `Ready` = all of these True.
    pub const NODECLASS_READY_PARTS: &[&str] = &[CLUSTER_READY, TEMPLATES_READY, BOOTSTRAP_READY];
    /// NodeClass with `spec.inventory`: whether its hosts can be read (not a part of
    /// `Ready`: a template that counts no host is not offered, the others are).
    pub const INVENTORY_READY: &str = "InventoryReady";

    // NodeOverlay.
    /// NodeOverlay `Ready` = this True.
    pub const NODEOVERLAY_READY_PARTS: &[&str] = &[VALIDATION_SUCCEEDED];

    // Cluster API Machine.
    pub const MACHINE_AVAILABLE: &str = "Available";
    pub const MACHINE_BOOTSTRAP_CONFIG_READY: &str = "BootstrapConfigReady";
    pub const MACHINE_INFRASTRUCTURE_READY: &str = "InfrastructureReady";
    pub const MACHINE_NODE_READY: &str = "NodeReady";
    pub const MACHINE_NODE_HEALTHY: &str = "NodeHealthy";
    pub const MACHINE_DELETING: &str = "Deleting";
    // Cluster API Cluster.
    pub const CLUSTER_INFRASTRUCTURE_READY: &str = "InfrastructureReady";
    pub const CLUSTER_CONTROL_PLANE_INITIALIZED: &str = "ControlPlaneInitialized";
    pub const CLUSTER_AVAILABLE: &str = "Available";
}

/// Condition reasons.
pub mod reasons {
    // NodeClaim lifecycle.
    pub const LAUNCHED: &str = "Launched";
    pub const LAUNCH_FAILED: &str = "LaunchFailed";
    pub const NODE_NOT_FOUND: &str = "NodeNotFound";
    pub const MULTIPLE_NODES_FOUND: &str = "MultipleNodesFound";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const NOT_READY: &str = "NotReady";
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    // Reboot (the `Rebooting` condition; `Initialized` Unknown with `REBOOTING`).
    pub const REBOOT_REQUESTED: &str = "RebootRequested";
    pub const REBOOT_ISSUED: &str = "RebootIssued";
    pub const REBOOT_SUCCEEDED: &str = "RebootSucceeded";
    pub const REBOOT_FAILED: &str = "RebootFailed";
    pub const REBOOTING: &str = "Rebooting";
    /// `Drained` Unknown: the Node of a deleted NodeClaim is being drained.
    pub const DRAINING: &str = "Draining";
    // Drift.
    pub const NODEPOOL_DRIFTED: &str = "NodePoolDrifted";
    pub const REQUIREMENTS_DRIFTED: &str = "RequirementsDrifted";
    pub const INSTANCE_TYPE_NOT_FOUND: &str = "InstanceTypeNotFound";
    pub const NODECLASS_DRIFTED: &str = "NodeClassDrifted";
    pub const TEMPLATE_DRIFTED: &str = "TemplateDrifted";
    // Disruption reasons (also budget `reasons`).
    pub const UNDERUTILIZED: &str = "Underutilized";
    pub const EMPTY: &str = "Empty";
    pub const DRIFTED: &str = "Drifted";
    pub const UNHEALTHY: &str = "Unhealthy";
    pub const EXPIRED: &str = "Expired";
    // NodeClass.
    pub const TEMPLATES_READY: &str = "TemplatesReady";
    pub const TEMPLATES_EXCLUDED: &str = "TemplatesExcluded";
    pub const NO_TEMPLATES: &str = "NoTemplates";
    pub const NO_VALID_TEMPLATES: &str = "NoValidTemplates";
    pub const INVALID_KUBELET_CONFIGURATION: &str = "InvalidKubeletConfiguration";
    pub const BOOTSTRAP_READY: &str = "BootstrapReady";
    pub const CLUSTER_READY: &str = "ClusterReady";
    pub const CLUSTER_NOT_FOUND: &str = "ClusterNotFound";
    pub const READY: &str = "Ready";
    pub const NOT_READY_DEPENDENCIES: &str = "DependenciesNotReady";
    // NodeClass InventoryReady.
    pub const HOSTS_COUNTED: &str = "HostsCounted";
    /// Unknown: the host kind's first list has not completed (its templates count no host).
    pub const HOSTS_NOT_LISTED: &str = "HostsNotListed";
    /// The API server does not serve the host kind (no such CRD or version).
    pub const HOST_KIND_NOT_SERVED: &str = "HostKindNotServed";
    /// The operator may not list or watch the host kind (RBAC).
    pub const HOSTS_FORBIDDEN: &str = "HostsForbidden";
    /// Listing or watching the host kind fails otherwise.
    pub const HOSTS_UNREADABLE: &str = "HostsUnreadable";
    /// A template's host selector cannot be read: it matches no host.
    pub const HOST_SELECTOR_INVALID: &str = "HostSelectorInvalid";
    // NodeOverlay ValidationSucceeded.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// An overlay of equal weight was recorded first on a field the overlay sets.
    pub const CONFLICT: &str = "Conflict";
    /// The overlay fails the validation the CRD schema cannot express.
    pub const RUNTIME_VALIDATION: &str = "RuntimeValidation";
}

/// Event reasons (Karpenter's, so alerts carry over).
pub mod events {
    pub const FAILED_SCHEDULING: &str = "FailedScheduling";
    /// Ours, on a pod: the counted offerings it could use have no count left
    /// ("template metal-large: 0 of 4 hosts available").
    pub const COUNT_EXHAUSTED: &str = "CountExhausted";
    pub const NO_COMPATIBLE_INSTANCE_TYPES: &str = "NoCompatibleInstanceTypes";
    pub const NOMINATED: &str = "Nominated";
    pub const INSUFFICIENT_CAPACITY_ERROR: &str = "InsufficientCapacityError";
    pub const UNREGISTERED_TAINT_MISSING: &str = "UnregisteredTaintMissing";
    pub const NODECLASS_NOT_READY: &str = "NodeClassNotReady";
    pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
    /// Ours, Warning: one of our boolean annotations (`"true"` on) holds another value and
    /// is read as off (`karpenter.cluster.x-k8s.io/static-zone-spread: "yes"`).
    pub const UNKNOWN_ANNOTATION_VALUE: &str = "UnknownAnnotationValue";
    pub const DISRUPTION_LAUNCHING: &str = "DisruptionLaunching";
    pub const DISRUPTION_TERMINATING: &str = "DisruptionTerminating";
    pub const DISRUPTION_WAITING_READINESS: &str = "DisruptionWaitingReadiness";
    /// Ours: a surge-first command failed (a replacement never initialized) and was undone.
    pub const DISRUPTION_ROLLED_BACK: &str = "DisruptionRolledBack";
    pub const EVICTED: &str = "Evicted";
    /// On a pod deleted past its NodeClaim's termination time (PDBs and do-not-disrupt
    /// bypassed).
    pub const DISRUPTED: &str = "Disrupted";
    pub const FAILED_DRAINING: &str = "FailedDraining";
    pub const TERMINATION_GRACE_PERIOD_EXPIRING: &str = "TerminationGracePeriodExpiring";
    pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
    /// Repair reboots a Node (the NodeClaim's `Rebooting` condition says how far).
    pub const REBOOT_REQUESTED: &str = "RebootRequested";
    /// The Node came back with a new `bootID`.
    pub const REBOOT_OBSERVED: &str = "RebootObserved";
    /// The reboot failed or timed out: the Node is replaced.
    pub const REBOOT_FAILED: &str = "RebootFailed";
    /// Repair would replace the Node, but its remediation belongs to someone else (the
    /// provider's `RemediatedElsewhere`, e.g. a Cluster API MachineHealthCheck).
    pub const NODE_REPAIR_DEFERRED: &str = "NodeRepairDeferred";
    pub const WAITING_ON_NODECLAIM_TERMINATION: &str = "WaitingOnNodeClaimTermination";
    /// Hub mode, on the Cluster API `Cluster`: its API server stopped / started answering.
    pub const CLUSTER_DISCONNECTED: &str = "ClusterDisconnected";
    pub const CLUSTER_CONNECTED: &str = "ClusterConnected";
    /// Hub mode, on the Cluster API `Cluster`: an engagement started (again) for it.
    pub const CLUSTER_ENGAGED: &str = "ClusterEngaged";
}
