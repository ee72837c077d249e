//! `karpenter-capi simulate`: offline, the plan the provisioner would make for a snapshot
//! of the cluster read from YAML (no API server).
//!
//! [`load`] reads the objects (workloads are expanded into the pods their controllers would
//! create), [`plan`] builds each NodeClass's catalog the way `instance-types` does, feeds the
//! provisioner's own `snapshot::build` (over the cluster state's join of the objects) and [`scheduling::solve`], and returns a [`Plan`];
//! [`render_table`] prints it. With existing NodeClaims, the plan also carries each one's
//! disruption verdict ([`DisruptionVerdict`], from the loop's own `verdicts`).

mod counts;
mod disruption;
mod doc;
mod drift;
mod expand;
mod load;
pub(crate) mod plan;
mod render;
mod static_pools;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use templates::offline::{Inputs, LoadError};

use karpenter_core::state::Objects;

pub use counts::CountedTemplate;
pub use disruption::DisruptionVerdict;
pub use drift::DriftedNodeClaim;
pub use plan::{Plan, plan};
pub use render::render_table;

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{path}: document {index}: {object}: {message}")]
    Invalid {
        path: PathBuf,
        index: usize,
        /// `Kind namespace/name` (or what is known of it).
        object: String,
        message: String,
    },
}

/// The most pods one workload is expanded into: a slip such as `replicas: 4000000000` is an
/// error, not minutes of work and gigabytes of pods.
pub(crate) const MAX_WORKLOAD_PODS: u64 = 100_000;

/// The snapshot read from files.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Templates, Clusters and NodeClasses (the catalog's inputs).
    pub inputs: Inputs,
    /// Nodes, NodeClaims, NodePools, DaemonSets, PodDisruptionBudgets and all pods (bound
    /// and pending), typed: what the cluster state would hold.
    pub state: Objects,
    /// Pods to place: pending Pods and the replicas of workloads.
    pub pending: Vec<Arc<Pod>>,
    /// NodeOverlays, applied to the catalogs as the operator applies them.
    pub overlays: Vec<api::NodeOverlay>,
    /// DeviceClasses, ResourceClaims, ResourceClaimTemplates and ResourceSlices: what pods'
    /// claims ask for and what nodes publish.
    pub dra: DraObjects,
    /// `Kind namespace/name` of the objects the simulation does not read.
    pub ignored: Vec<String>,
    /// Objects of other kinds, as given: the hosts a NodeClass's inventory counts are
    /// among them.
    pub others: Vec<kube::api::DynamicObject>,
    /// Problems with the snapshot that do not stop the simulation.
    pub warnings: Vec<String>,
}

/// The snapshot's Dynamic Resource Allocation objects (`resource.k8s.io/v1`).
#[derive(Debug, Default)]
pub struct DraObjects {
    pub classes: Vec<k8s_openapi::api::resource::v1::DeviceClass>,
    pub claims: Vec<k8s_openapi::api::resource::v1::ResourceClaim>,
    pub templates: Vec<k8s_openapi::api::resource::v1::ResourceClaimTemplate>,
    pub slices: Vec<k8s_openapi::api::resource::v1::ResourceSlice>,
}

impl DraObjects {
    pub fn objects(&self) -> devices::Objects<'_> {
        devices::Objects {
            classes: &self.classes,
            claims: &self.claims,
            templates: &self.templates,
            slices: &self.slices,
        }
    }
}

/// Reads one YAML text; `path` names it in errors.
pub fn load_yaml(path: &Path, text: &str) -> Result<Loaded, Error> {
    let mut inputs = Inputs::default();
    inputs.add_yaml(path, text)?;
    load::from_inputs(inputs)
}

/// Reads files, directories (`*.yaml`, `*.yml`, `*.json`, sorted) and `-` (stdin).
pub fn load(paths: &[PathBuf]) -> Result<Loaded, Error> {
    load::from_inputs(Inputs::load(paths)?)
}

/// A string of a document being read (the reader checks documents before they are typed).
fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// `namespace/name` of a pod in the plan.
fn pod_ref(p: &scheduling::PodRef) -> String {
    format!("{}/{}", p.namespace, p.name)
}

#[cfg(test)]
mod tests {
    use super::render::{POD_LIST_WIDTH, pod_list};
    use super::*;
    use karpenter_core::model::convert;

    const CATALOG: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: c, namespace: capi}
status:
  failureDomains: [{name: z1}, {name: z2}]
---
apiVersion: karpenter.cluster.x-k8s.io/v1alpha1
kind: ClusterAPINodeClass
metadata: {name: default}
spec:
  clusterRef: {name: c, namespace: capi}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata:
  name: small
  namespace: capi
  labels: {node.cluster.x-k8s.io/karpenter-member: ""}
  annotations:
    capacity.cluster-autoscaler.kubernetes.io/cpu: "2"
    capacity.cluster-autoscaler.kubernetes.io/memory: 8Gi
    karpenter.cluster.x-k8s.io/price: "0.1"
"#;

    fn pool(name: &str, nodeclass: &str) -> String {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: {nodeclass}}}\n"
        )
    }

    fn load(docs: &[&str]) -> Loaded {
        load_yaml(Path::new("snap.yaml"), &docs.join("\n---\n")).expect("valid snapshot")
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect()
    }

    #[test]
    fn workloads_expand_into_pending_pods() {
        let loaded = load(&[
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, resources: {requests: {cpu: 250m}, limits: {memory: 1Gi}}}]
"#,
            // No replicas: one.
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  template:\n    spec: {containers: [{name: c}]}\n",
            // Parallelism bounded by completions.
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  parallelism: 5\n  completions: 2\n  template:\n    spec: {containers: [{name: c}]}\n",
            // Two replicas, one already running: one more.
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: c}]}
"#,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: api-0, labels: {app: api}}\nspec: {nodeName: n1, containers: [{name: c}]}\n",
            // A ReplicaSet of a Deployment of the snapshot is not expanded again.
            r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: api-5d8f
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: api, controller: true}]
spec:
  replicas: 2
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: c}]}
"#,
        ]);
        assert_eq!(
            names(&loaded.pending),
            ["web-0", "web-1", "web-2", "db-0", "j-0", "j-1", "api-1"]
        );
        let web = &loaded.pending[0].metadata;
        assert_eq!(web.namespace.as_deref(), Some("shop"));
        assert_eq!(web.uid.as_deref(), Some("sim-shop-web-0"));
        assert_eq!(web.labels.as_ref().map(|l| l["app"].as_str()), Some("web"));
        assert_eq!(
            web.owner_references.as_ref().map(|o| o[0].kind.as_str()),
            Some("Deployment")
        );
        assert_eq!(
            loaded.pending[3].metadata.namespace.as_deref(),
            Some("default")
        );
        // Requests defaulted from limits, as the API server does.
        let requests = convert::pod(&loaded.pending[0]).requests;
        assert_eq!(requests["cpu"], 250);
        assert_eq!(requests["memory"], 1 << 30);
        assert!(
            loaded
                .warnings
                .iter()
                .any(|w| w.contains("ReplicaSet api-5d8f: owned by Deployment api")),
            "{:?}",
            loaded.warnings
        );
    }

    #[test]
    fn bound_pods_use_up_existing_nodes() {
        let node = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: z1}}
status:
  allocatable: {cpu: "2", memory: 8Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"#;
        let bound = "apiVersion: v1\nkind: Pod\nmetadata: {name: old, namespace: kube-system}\nspec:\n  nodeName: n1\n  containers: [{name: c, resources: {requests: {cpu: 1500m}}}]\n";
        let pending = |name: &str, cpu: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers: [{{name: c, resources: {{requests: {{cpu: {cpu}}}}}}}]\n"
            )
        };
        let (small, big) = (pending("small", "400m"), pending("big", "1")); // 500m free
        let plan = plan(&load(&[
            CATALOG,
            &pool("default", "default"),
            node,
            bound,
            &small,
            &big,
        ]));
        assert_eq!(plan.pods_pending, 2);
        assert_eq!(plan.pods_bound, 1);
        assert_eq!(plan.nodes, 1);
        assert_eq!(plan.existing.len(), 1);
        assert_eq!(plan.existing[0].node, "n1");
        assert_eq!(plan.existing[0].state, "node");
        assert_eq!(plan.existing[0].pods, ["default/small"]);
        assert_eq!(plan.node_claims.len(), 1);
        let claim = &plan.node_claims[0];
        assert_eq!(claim.pods, ["default/big"]);
        assert_eq!(claim.instance_type, "small");
        assert_eq!(claim.node_pool, "default");
        assert!((claim.price_per_hour - 0.1).abs() < 1e-9);
        assert_eq!(plan.total.pods_placed, 2);
        assert!(plan.unplaceable.is_empty());
        let table = render_table(&plan);
        assert!(table.contains("n1    node   1: small"), "{table}");
        assert!(
            table.contains("Total: 1 NodeClaims, 0.1000/h; 2 pods placed"),
            "{table}"
        );
    }

    #[test]
    fn pools_of_a_missing_nodeclass_get_no_instance_types_and_say_why() {
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: 100m}}}]\n";
        let plan = plan(&load(&[CATALOG, &pool("orphan", "gone"), pod]));
        assert!(
            plan.warnings.iter().any(|w| w
                == "NodePool orphan: ClusterAPINodeClass \"gone\" (nodeClassRef) is not in the snapshot: no instance types"),
            "{:?}",
            plan.warnings
        );
        assert_eq!(plan.node_pools[0].instance_types, 0);
        assert!(plan.node_claims.is_empty());
        assert_eq!(plan.unplaceable.len(), 1);
        assert_eq!(plan.unplaceable[0].pod, "default/p");
        assert!(
            plan.unplaceable[0]
                .reason
                .starts_with("nodepool \"orphan\": "),
            "{}",
            plan.unplaceable[0].reason
        );
        assert!(render_table(&plan).contains("warning: NodePool orphan: ClusterAPINodeClass"));
    }

    #[test]
    fn bad_input_names_the_file_document_and_field() {
        let broken = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: [unclosed\n";
        let err = load_yaml(Path::new("snap/broken.yaml"), broken)
            .expect_err("invalid YAML")
            .to_string();
        assert!(
            err.starts_with("snap/broken.yaml: document 2: invalid YAML: "),
            "{err}"
        );
        let replicas = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: three\n  template: {spec: {containers: []}}\n";
        let err = load_yaml(Path::new("w.yaml"), replicas)
            .expect_err("replicas must be a number")
            .to_string();
        assert_eq!(
            err,
            "w.yaml: document 2: Deployment web: spec.replicas: expected a non-negative integer, got \"three\""
        );
        let quantity = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: lots}}}]\n";
        let err = load_yaml(Path::new("p.yaml"), quantity)
            .expect_err("bad quantity")
            .to_string();
        assert!(
            err.starts_with(
                "p.yaml: document 1: Pod x/p: spec.containers[0].resources.requests.cpu: \"lots\" is not a quantity"
            ),
            "{err}"
        );
        // Read into the typed objects the provisioner decides on: the field is named.
        let tolerations = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p, namespace: x}\n  spec:\n    containers: [{name: c}]\n    tolerations: 5\n";
        let err = load_yaml(Path::new("l.yaml"), tolerations)
            .expect_err("tolerations must be a list")
            .to_string();
        assert!(
            err.starts_with("l.yaml: document 1: Pod x/p: spec.tolerations: invalid type: integer `5`, expected a sequence"),
            "{err}"
        );
        let group = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec: {template: {spec: {nodeClassRef: {name: nc}}}}\n";
        let err = load_yaml(Path::new("p.yaml"), group)
            .expect_err("nodeClassRef.group required")
            .to_string();
        assert_eq!(
            err,
            "p.yaml: document 1: NodePool p: spec.template.spec.nodeClassRef: missing field `group`"
        );
        // As the API server: `replicas` is at least 0 (and 0 is a static pool).
        let static_pool = |r: &str| {
            format!(
                "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p}}\nspec: {{replicas: {r}, template: {{spec: {{nodeClassRef: {{group: g, kind: k, name: nc}}}}}}}}\n"
            )
        };
        let err = load_yaml(Path::new("p.yaml"), &static_pool("-1"))
            .expect_err("replicas -1")
            .to_string();
        assert_eq!(
            err,
            "p.yaml: document 1: NodePool p: spec.replicas: expected a non-negative integer, got -1"
        );
        let loaded = load_yaml(Path::new("p.yaml"), &static_pool("0")).expect("replicas 0");
        assert_eq!(loaded.state.nodepools[0].spec.replicas, Some(0));
        let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec: {template: {spec: {}}}\n";
        let err = load_yaml(Path::new("p.yaml"), pool)
            .expect_err("nodeClassRef required")
            .to_string();
        assert!(
            err.contains("spec.template.spec.nodeClassRef.name is required"),
            "{err}"
        );
    }

    /// Found by tests/prop_snapshot.rs: a scalar or list where the reader writes defaults
    /// panicked (serde_json cannot index into it), and a huge replica count ran out of memory.
    #[test]
    fn misshapen_objects_and_huge_workloads_are_errors() {
        for (text, want) in [
            (
                "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds}\nspec: [1]\n",
                "DaemonSet ds: spec: expected a map, got [1]",
            ),
            (
                "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds}\nspec: {template: 7}\n",
                "DaemonSet ds: spec.template: expected a map, got 7",
            ),
            (
                "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: x\n",
                "Node n1: status: expected a map, got \"x\"",
            ),
            (
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 4000000000\n  template: {spec: {containers: []}}\n",
                "Deployment web: 4000000000 pods (replicas, or a Job's parallelism) is more than a simulation expands (100000)",
            ),
        ] {
            let err = load_yaml(Path::new("s.yaml"), text)
                .expect_err("refused")
                .to_string();
            assert_eq!(err, format!("s.yaml: document 1: {want}"));
        }
    }

    #[test]
    fn namespaces_and_unknown_kinds_are_ignored() {
        let loaded = load(&[
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: shop}\n",
        ]);
        assert_eq!(loaded.ignored, ["Namespace shop", "ConfigMap shop/cfg"]);
        assert!(loaded.pending.is_empty());
    }

    #[test]
    fn long_pod_lists_are_shortened() {
        let pods: Vec<String> = (0..40).map(|i| format!("default/web-{i}")).collect();
        let text = pod_list(&pods, POD_LIST_WIDTH);
        assert!(text.starts_with("40: web-0, web-1, "), "{text}");
        assert!(text.ends_with(")") && text.contains(" … (+"), "{text}");
        assert!(text.chars().count() <= POD_LIST_WIDTH + 12, "{text}");
        assert_eq!(pod_list(&["shop/a".to_string()], 10), "1: shop/a");
    }
}
