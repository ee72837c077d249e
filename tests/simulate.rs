//! `karpenter-capi simulate` on `examples/snapshot/`: the plan the example README describes,
//! in table and JSON output, plus stdin and error handling. Runs the built binary, offline.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn simulate(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpenter-capi"))
        .arg("simulate")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run karpenter-capi");
    let mut pipe = child.stdin.take().expect("stdin");
    pipe.write_all(stdin.unwrap_or_default().as_bytes())
        .expect("write stdin");
    drop(pipe);
    child.wait_with_output().expect("wait")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).expect("utf-8")
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_str().expect("string"))
        .collect()
}

#[test]
fn example_snapshot_json_plan() {
    let out = simulate(&["-f", "examples/snapshot/", "-o", "json"], None);
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert_eq!(plan["warnings"], serde_json::json!([]), "{plan:#}");
    assert_eq!(plan["podsPending"], 16);
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(claims.len(), 5, "{plan:#}");
    // Where each pod went: zone and host (claim index or Node name).
    let mut placed: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (i, c) in claims.iter().enumerate() {
        for p in strs(&c["pods"]) {
            let zone = c["zone"].as_str().expect("zone").to_string();
            placed.insert(p.to_string(), (zone, format!("claim-{i}")));
        }
        let pods = strs(&c["pods"]);
        // arm64-only pods are on an arm64 instance type of the arm64-spot pool, and nothing
        // else is.
        let api = pods
            .iter()
            .filter(|p| p.starts_with("default/api-"))
            .count();
        if api > 0 {
            assert_eq!(api, pods.len(), "{c:#}");
            assert_eq!(c["nodePool"], "arm64-spot");
            assert_eq!(c["arch"], "arm64");
            assert_eq!(c["instanceType"], "arm-4c16g-spot");
            assert_eq!(c["capacityType"], "spot");
        } else {
            assert_eq!(c["arch"], "amd64", "{c:#}");
        }
        // GPU pods: one per GPU machine of the tainted pool.
        if pods.iter().any(|p| p.starts_with("default/train-")) {
            assert_eq!(c["nodePool"], "gpu");
            assert_eq!(c["instanceType"], "gpu-8c32g-1x");
            assert_eq!(pods.len(), 1);
            assert_eq!(c["requests"]["nvidia.com/gpu"], "1");
        } else {
            assert_ne!(c["nodePool"], "gpu", "{c:#}");
        }
        // The cheapest type is the first candidate.
        assert_eq!(c["instanceTypes"][0], c["instanceType"]);
    }
    for e in plan["existing"].as_array().expect("existing") {
        assert_eq!(e["node"], "shop-md-0-x7k2p");
        assert_eq!(e["state"], "node");
        for p in strs(&e["pods"]) {
            placed.insert(p.to_string(), ("zone-a".into(), "node".into()));
        }
    }
    let api: Vec<&String> = placed.keys().filter(|p| p.contains("/api-")).collect();
    assert_eq!(api.len(), 4);
    // web: 6 replicas, maxSkew 1 over three zones: two per zone.
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for (p, (zone, _)) in &placed {
        if p.starts_with("default/web-") {
            *per_zone.entry(zone.as_str()).or_default() += 1;
        }
    }
    assert_eq!(
        per_zone,
        BTreeMap::from([("zone-a", 2), ("zone-b", 2), ("zone-c", 2)])
    );
    // redis: hostname anti-affinity, three different hosts (one of them the existing Node).
    let redis_hosts: BTreeSet<&str> = placed
        .iter()
        .filter(|(p, _)| p.starts_with("default/redis-"))
        .map(|(_, (_, host))| host.as_str())
        .collect();
    assert_eq!(redis_hosts.len(), 3, "{placed:?}");
    assert!(redis_hosts.contains("node"));
    // The oversized pod, with the solver's reason per pool.
    let unplaceable = plan["unplaceable"].as_array().expect("unplaceable");
    assert_eq!(unplaceable.len(), 1);
    assert_eq!(unplaceable[0]["pod"], "default/analytics-warehouse");
    let reason = unplaceable[0]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("nodepool \"general\": no instance type has enough cpu"),
        "{reason}"
    );
    assert_eq!(plan["total"]["nodeClaims"], 5);
    assert_eq!(plan["total"]["podsPlaced"], 15);
    assert_eq!(plan["total"]["podsUnplaceable"], 1);
    let price = plan["total"]["pricePerHour"].as_f64().expect("price");
    assert!(
        (price - (2.0 * 1.212 + 2.0 * 0.192 + 0.062)).abs() < 1e-9,
        "{price}"
    );
}

#[test]
fn example_snapshot_table() {
    let out = simulate(&["-f", "examples/snapshot/"], None);
    let text = stdout(&out);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with(
            "Snapshot: pods pending 16, bound 2; Nodes 1, in-flight NodeClaims 0, DaemonSets 1\n"
        ),
        "{text}"
    );
    assert!(text.contains("NodeClass default: 5 instance types, zones zone-a,zone-b,zone-c (Cluster capi-shop/shop)"), "{text}");
    let claim_lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("NODEPOOL "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(claim_lines.len(), 5, "{text}");
    let arm = claim_lines
        .iter()
        .find(|l| l.starts_with("arm64-spot "))
        .expect("an arm64-spot NodeClaim");
    assert!(
        arm.contains(" arm-4c16g-spot ")
            && arm.contains(" arm64 ")
            && arm.ends_with("4: api-0, api-1, api-2, api-3"),
        "{arm}"
    );
    for zone in ["zone-b", "zone-c"] {
        assert!(
            claim_lines
                .iter()
                .any(|l| l.starts_with("general ") && l.contains(zone)),
            "{text}"
        );
    }
    assert!(text.contains("shop-md-0-x7k2p  node   3: "), "{text}");
    assert!(
        text.contains("analytics-warehouse  nodepool \"general\": no instance type has enough cpu"),
        "{text}"
    );
    assert!(
        text.ends_with("Total: 5 NodeClaims, 2.8700/h; 15 pods placed (12 on new NodeClaims, 3 on existing capacity), 1 cannot be placed\n"),
        "{text}"
    );
}

#[test]
fn stdin_ignored_kinds_and_invalid_input() {
    // Only a pod and a Namespace on stdin: no NodePool, the pod cannot be placed; still exit 0.
    let yaml = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\nspec: {containers: [{name: c}]}\n";
    let out = simulate(&["-f", "-", "-o", "json"], Some(yaml));
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert_eq!(plan["unplaceable"][0]["pod"], "shop/p");
    assert_eq!(
        plan["unplaceable"][0]["reason"],
        "no existing node has room and no NodePool is defined"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "warning: ignored Namespace shop: not read by the simulation\n"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "kind: Pod\nmetadata: {name: a}\nspec: {containers: []}\n---\nkind: Pod\nmetadata: {name: [oops\n").expect("write");
    let out = simulate(
        &[
            "-f",
            "examples/snapshot/",
            "-f",
            bad.to_str().expect("path"),
        ],
        None,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml: document 2: invalid YAML"), "{err}");
    assert!(out.stdout.is_empty());
    let out = simulate(&["-f", "examples/no-such-dir"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("examples/no-such-dir"));
}

#[test]
fn drifted_nodeclaims_are_listed_with_their_replacements() {
    let dir = tempfile::tempdir().expect("tempdir");
    let drifted = dir.path().join("drifted.yaml");
    std::fs::write(
        &drifted,
        r#"apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: general-old
  labels: {karpenter.sh/nodepool: general, node.kubernetes.io/instance-type: general-4c16g}
spec:
  nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: default}
  requirements: []
status:
  nodeName: general-old
  providerID: docker:////general-old
  conditions:
    - {type: Drifted, status: "True", reason: NodeClassDrifted, message: "Kubernetes version v1.35.0 -> v1.36.0", lastTransitionTime: "2026-11-22T10:00:00Z"}
---
apiVersion: v1
kind: Node
metadata:
  name: general-old
  labels: {kubernetes.io/hostname: general-old, karpenter.sh/nodepool: general, karpenter.sh/initialized: "true"}
spec: {providerID: docker:////general-old}
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: shop, ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: big-1, uid: u1, controller: true}]}
spec:
  nodeName: general-old
  containers: [{name: c, resources: {requests: {cpu: "6", memory: 1Gi}}}]
status: {phase: Running}
"#,
    )
    .expect("write");
    let args = [
        "-f",
        "examples/snapshot/",
        "-f",
        drifted.to_str().expect("path"),
    ];
    let out = simulate(&[&args[..], &["-o", "json"]].concat(), None);
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    let d = &plan["drifted"];
    assert_eq!(d.as_array().map(Vec::len), Some(1), "{d:#}");
    assert_eq!(d[0]["nodeClaim"], "general-old");
    assert_eq!(d[0]["reason"], "NodeClassDrifted");
    assert_eq!(
        d[0]["replacements"].as_array().map(Vec::len),
        Some(1),
        "{d:#}"
    );
    assert_eq!(d[0]["blocked"], serde_json::json!([]));
    let table = stdout(&simulate(&args, None));
    assert!(table.contains("Drifted NodeClaims"), "{table}");
    assert!(table.contains("general-old"), "{table}");
}

/// `--log-format pretty` writes no colour codes when stdout is not a terminal (a log file,
/// a collector): here stdout is a pipe.
#[test]
fn pretty_logs_are_plain_text_on_a_pipe() {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-capi"))
        .args([
            "run",
            "--log-format",
            "pretty",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success(), "no cluster to talk to");
    let logs = String::from_utf8_lossy(&out.stdout);
    assert!(logs.contains("starting karpenter-capi"), "{logs}");
    assert!(
        !logs.contains('\u{1b}'),
        "ANSI escape codes on a pipe: {logs:?}"
    );
}

/// `examples/consolidation/`: existing NodeClaims get the disruption loop's verdict — a large
/// node holding small pods is to be replaced by a small one, a do-not-disrupt pod and a PDB
/// allowing 0 keep theirs.
#[test]
fn existing_nodeclaims_get_a_disruption_verdict_in_the_table() {
    let table = stdout(&simulate(&["-f", "examples/consolidation/"], None));
    let section = table
        .split_once("Disruption (existing NodeClaims):\n")
        .map(|(_, s)| s)
        .expect("a Disruption section");
    let row = |claim: &str| {
        section
            .lines()
            .find(|l| l.starts_with(&format!("{claim} ")))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no row for {claim}: {table}"))
    };
    assert_eq!(
        row("default-big"),
        "default-big default large replace default-big small 0.3000 candidate: replace with small (saves 0.30/h)"
    );
    assert_eq!(
        row("default-db"),
        "default-db default small none - - - pod shop/db-0 has do-not-disrupt"
    );
    assert_eq!(
        row("default-queue"),
        "default-queue default small none - - - PDB shop/queue allows 0 (pod shop/queue-0)"
    );
}

#[test]
fn existing_nodeclaims_get_a_disruption_verdict_in_json() {
    let out = simulate(&["-f", "examples/consolidation/", "-o", "json"], None);
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert_eq!(plan["warnings"], serde_json::json!([]), "{plan:#}");
    let by_claim: BTreeMap<&str, &Value> = plan["disruption"]
        .as_array()
        .expect("disruption")
        .iter()
        .map(|d| (d["nodeClaim"].as_str().expect("nodeClaim"), d))
        .collect();
    assert_eq!(
        by_claim.keys().copied().collect::<Vec<_>>(),
        ["default-big", "default-db", "default-queue"]
    );
    let big = by_claim["default-big"];
    assert_eq!(big["action"], "replace");
    assert_eq!(strs(&big["nodes"]), ["default-big"]);
    assert_eq!(big["replacement"], "small");
    assert_eq!(big["node"], "big");
    assert_eq!(big["instanceType"], "large");
    assert_eq!(big["nodePool"], "default");
    let saves = big["savingsPerHour"].as_f64().expect("savingsPerHour");
    assert!((saves - 0.3).abs() < 1e-9, "{saves}");
    assert_eq!(big["blocker"], Value::Null);
    let db = by_claim["default-db"];
    assert_eq!(db["action"], "none");
    assert_eq!(db["nodes"], serde_json::json!([]));
    assert_eq!(db["replacement"], Value::Null);
    assert_eq!(db["savingsPerHour"], Value::Null);
    assert_eq!(db["blocker"], "pod shop/db-0 has do-not-disrupt");
    assert_eq!(
        by_claim["default-queue"]["blocker"],
        "PDB shop/queue allows 0 (pod shop/queue-0)"
    );
}

#[test]
fn a_snapshot_without_nodeclaims_has_no_disruption_section() {
    let table = stdout(&simulate(&["-f", "examples/snapshot/"], None));
    assert!(!table.contains("Disruption"), "{table}");
    let out = simulate(&["-f", "examples/snapshot/", "-o", "json"], None);
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert_eq!(plan["disruption"], serde_json::json!([]));
}

#[test]
fn max_machines_and_the_node_group_max_size_cap_a_template_and_show_its_count() {
    // One 2-cpu template allowing 2 Machines (max-machines 3, the CA max size 2: the smaller
    // wins); 4 pods of 1.5 cpu, one per node.
    let yaml = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata:
  name: metal
  namespace: capi-shop
  labels:
    node.cluster.x-k8s.io/karpenter-member: "true"
    karpenter.cluster.x-k8s.io/nodeclass: default
  annotations:
    capacity.cluster-autoscaler.kubernetes.io/cpu: "2"
    capacity.cluster-autoscaler.kubernetes.io/memory: 8Gi
    karpenter.cluster.x-k8s.io/max-machines: "3"
    cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size: "2"
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: default}
      requirements: []
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, resources: {requests: {cpu: 1500m, memory: 1Gi}}}]
"#;
    let args = [
        "-f",
        "examples/snapshot/00-cluster.yaml",
        "-f",
        "examples/snapshot/01-nodeclass.yaml",
        "-f",
        "-",
    ];
    let json_args: Vec<&str> = args.iter().copied().chain(["-o", "json"]).collect();
    let plan: Value =
        serde_json::from_str(&stdout(&simulate(&json_args, Some(yaml)))).expect("JSON plan");
    assert_eq!(
        plan["nodeClaims"].as_array().map(Vec::len),
        Some(2),
        "{plan:#}"
    );
    let unplaceable = plan["unplaceable"].as_array().expect("unplaceable");
    assert_eq!(unplaceable.len(), 2, "{plan:#}");
    for u in unplaceable {
        let reason = u["reason"].as_str().expect("reason");
        assert!(
            reason.contains("no count left on template DockerMachineTemplate capi-shop/metal, cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size 2"),
            "{reason}"
        );
    }
    assert_eq!(
        plan["countedTemplates"],
        serde_json::json!([{"template": "DockerMachineTemplate capi-shop/metal",
            "source": "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size",
            "limit": 2, "live": 0, "available": 2, "planned": 2}])
    );
    let table = stdout(&simulate(&args, Some(yaml)));
    assert!(
        table.contains("Counted templates:\n  DockerMachineTemplate capi-shop/metal: cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size 2, 0 live, 2 available, 2 planned"),
        "{table}"
    );
}

#[test]
fn a_nodeclass_inventory_counts_the_snapshots_free_hosts() {
    // A Metal3 inventory: 3 BareMetalHosts match the template's hostSelector, one of them
    // taken, one in another state; 4 pods of 1.5 cpu, one per 2-cpu node.
    let host = |name: &str, size: &str, consumer: bool, state: &str| {
        let consumer = if consumer {
            "\n  consumerRef: {kind: Metal3Machine, name: taken}"
        } else {
            ""
        };
        format!(
            "---\napiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata: {{name: {name}, namespace: capi-shop, labels: {{size: {size}}}}}\nspec:\n  online: true{consumer}\nstatus: {{provisioning: {{state: {state}}}}}\n"
        )
    };
    let mut yaml = r#"
apiVersion: karpenter.cluster.x-k8s.io/v1alpha1
kind: ClusterAPINodeClass
metadata: {name: default}
spec:
  clusterRef: {name: shop, namespace: capi-shop}
  bootstrap: {dataSecretName: shop-bootstrap}
  inventory: {preset: Metal3}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata:
  name: metal
  namespace: capi-shop
  labels: {node.cluster.x-k8s.io/karpenter-member: "true"}
  annotations:
    capacity.cluster-autoscaler.kubernetes.io/cpu: "2"
    capacity.cluster-autoscaler.kubernetes.io/memory: 8Gi
spec:
  template:
    spec:
      hostSelector: {matchLabels: {size: large}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: default}
      requirements: []
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, resources: {requests: {cpu: 1500m, memory: 1Gi}}}]
"#
    .to_string();
    for h in [
        host("h1", "large", false, "available"),
        host("h2", "large", false, "ready"),
        host("h3", "large", true, "provisioned"),
        host("h4", "large", false, "inspecting"),
        host("h5", "small", false, "available"),
    ] {
        yaml.push_str(&h);
    }
    let args = ["-f", "examples/snapshot/00-cluster.yaml", "-f", "-"];
    let json_args: Vec<&str> = args.iter().copied().chain(["-o", "json"]).collect();
    let plan: Value =
        serde_json::from_str(&stdout(&simulate(&json_args, Some(&yaml)))).expect("JSON plan");
    assert_eq!(
        plan["nodeClaims"].as_array().map(Vec::len),
        Some(2),
        "two free large hosts: {plan:#}"
    );
    assert_eq!(
        plan["unplaceable"].as_array().map(Vec::len),
        Some(2),
        "{plan:#}"
    );
    assert_eq!(
        plan["countedTemplates"],
        serde_json::json!([{"template": "Metal3MachineTemplate capi-shop/metal",
            "source": "inventory", "limit": 4, "live": 0, "available": 2, "planned": 2}])
    );
    assert!(
        !plan["ignored"].to_string().contains("BareMetalHost"),
        "the hosts are read: {}",
        plan["ignored"]
    );
    let table = stdout(&simulate(&args, Some(&yaml)));
    assert!(
        table.contains(
            "Metal3MachineTemplate capi-shop/metal: inventory 4, 0 live, 2 available, 2 planned"
        ),
        "{table}"
    );
}

#[test]
fn node_overlays_in_the_snapshot_reprice_templates_and_report_conflicts() {
    // Two templates (the default price: small 0.068, big 0.272); one 1-cpu pod takes `small`
    // unless an overlay prices `big` below it.
    let base = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata:
  name: small
  namespace: capi-shop
  labels: {node.cluster.x-k8s.io/karpenter-member: "true", karpenter.cluster.x-k8s.io/nodeclass: default}
  annotations: {capacity.cluster-autoscaler.kubernetes.io/cpu: "2", capacity.cluster-autoscaler.kubernetes.io/memory: 8Gi}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata:
  name: big
  namespace: capi-shop
  labels: {node.cluster.x-k8s.io/karpenter-member: "true", karpenter.cluster.x-k8s.io/nodeclass: default}
  annotations: {capacity.cluster-autoscaler.kubernetes.io/cpu: "8", capacity.cluster-autoscaler.kubernetes.io/memory: 32Gi}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: default}
      requirements: []
---
apiVersion: v1
kind: Pod
metadata: {name: one, namespace: shop}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#;
    let overlays = r#"
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: cheap-big}
spec:
  requirements: [{key: karpenter.cluster.x-k8s.io/instance-template, operator: In, values: [big]}]
  price: "0.001"
  weight: 10
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: a}
spec:
  requirements: [{key: karpenter.cluster.x-k8s.io/instance-template, operator: In, values: [small]}]
  priceAdjustment: "+10%"
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: b}
spec:
  requirements: []
  priceAdjustment: "-10%"
"#;
    let args = [
        "-f",
        "examples/snapshot/00-cluster.yaml",
        "-f",
        "examples/snapshot/01-nodeclass.yaml",
        "-f",
        "-",
        "-o",
        "json",
    ];
    let plan = |yaml: &str| -> Value {
        serde_json::from_str(&stdout(&simulate(&args, Some(yaml)))).expect("JSON plan")
    };
    let without = plan(base);
    assert_eq!(
        without["nodeClaims"][0]["instanceType"], "small",
        "{without:#}"
    );
    let with = plan(&format!("{base}{overlays}"));
    let claim = &with["nodeClaims"][0];
    assert_eq!(claim["instanceType"], "big", "{with:#}");
    assert_eq!(claim["pricePerHour"], 0.001, "{with:#}");
    assert_eq!(
        with["warnings"],
        serde_json::json!([
            "NodeOverlay a: conflicts with NodeOverlay b (same weight) on the price of small; not applied"
        ])
    );
}

#[test]
fn static_nodepools_get_their_nodeclaims_in_the_plan_within_limits_and_overlays() {
    // A dynamic pool for the pod, a static one of 3 replicas capped at 2 nodes; an overlay
    // prices `big` below `small`, so every claim (static ones too) takes `big`.
    let snapshot = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata:
  name: small
  namespace: capi-shop
  labels: {node.cluster.x-k8s.io/karpenter-member: "true", karpenter.cluster.x-k8s.io/nodeclass: default}
  annotations: {capacity.cluster-autoscaler.kubernetes.io/cpu: "2", capacity.cluster-autoscaler.kubernetes.io/memory: 8Gi}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata:
  name: big
  namespace: capi-shop
  labels: {node.cluster.x-k8s.io/karpenter-member: "true", karpenter.cluster.x-k8s.io/nodeclass: default}
  annotations: {capacity.cluster-autoscaler.kubernetes.io/cpu: "8", capacity.cluster-autoscaler.kubernetes.io/memory: 32Gi}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: default}
      requirements: []
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: fixed, uid: fixed-uid}
spec:
  replicas: 3
  limits: {nodes: "2"}
  template:
    spec:
      nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: default}
      requirements: []
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: cheap-big}
spec:
  requirements: [{key: karpenter.cluster.x-k8s.io/instance-template, operator: In, values: [big]}]
  price: "0.001"
---
apiVersion: v1
kind: Pod
metadata: {name: one, namespace: shop}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#;
    let args = [
        "-f",
        "examples/snapshot/00-cluster.yaml",
        "-f",
        "examples/snapshot/01-nodeclass.yaml",
        "-f",
        "-",
        "-o",
        "json",
    ];
    let plan: Value =
        serde_json::from_str(&stdout(&simulate(&args, Some(snapshot)))).expect("JSON plan");
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    let of =
        |pool: &str| -> Vec<&Value> { claims.iter().filter(|c| c["nodePool"] == pool).collect() };
    assert_eq!(of("general").len(), 1, "{plan:#}");
    assert_eq!(
        strs(&of("general")[0]["pods"]),
        vec!["shop/one"],
        "the pod is the dynamic pool's"
    );
    let fixed = of("fixed");
    assert_eq!(fixed.len(), 2, "limits.nodes 2 of 3 replicas: {plan:#}");
    for c in fixed {
        assert_eq!(c["instanceType"], "big", "the overlay applies: {c:#}");
        assert_eq!(c["pods"], serde_json::json!([]));
    }
    assert_eq!(plan["total"]["nodeClaims"], 3);
    assert_eq!(
        plan["warnings"],
        serde_json::json!(["NodePool fixed: limits.nodes keeps it below its 3 replicas"])
    );
    let summary = plan["nodePools"]
        .as_array()
        .expect("nodePools")
        .iter()
        .find(|p| p["name"] == "fixed")
        .expect("fixed summary");
    assert_eq!(summary["instanceTypes"], 2, "{summary:#}");
}

#[test]
fn a_resizable_template_shows_each_nodeclaim_s_chosen_size() {
    // A resizable vSphere template (2-64 vCPU by 2, 4-512Gi by 4Gi); one pod of 5.2 cpu /
    // 18Gi is planned on the smallest size that holds it with the overhead: 6 vCPU / 20Gi.
    let yaml = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: VSphereMachineTemplate
metadata:
  name: vs
  namespace: capi-shop
  labels:
    node.cluster.x-k8s.io/karpenter-member: "true"
    karpenter.cluster.x-k8s.io/nodeclass: default
  annotations:
    karpenter.cluster.x-k8s.io/resizable-cpu: 2-64/2
    karpenter.cluster.x-k8s.io/resizable-memory: 4Gi-512Gi/4Gi
    karpenter.cluster.x-k8s.io/price-per-cpu: "0.02"
    karpenter.cluster.x-k8s.io/price-per-gib: "0.004"
spec:
  template:
    spec: {numCPUs: 2, memoryMiB: 4096}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: default}
      requirements: []
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: c, resources: {requests: {cpu: 5200m, memory: 18Gi}}}]
"#;
    let args = [
        "-f",
        "examples/snapshot/00-cluster.yaml",
        "-f",
        "examples/snapshot/01-nodeclass.yaml",
        "-f",
        "-",
    ];
    let json_args: Vec<&str> = args.iter().copied().chain(["-o", "json"]).collect();
    let plan: Value =
        serde_json::from_str(&stdout(&simulate(&json_args, Some(yaml)))).expect("JSON plan");
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(claims.len(), 1, "{plan:#}");
    assert_eq!(claims[0]["instanceType"], "vs-6c-20gi", "{plan:#}");
    assert_eq!(
        claims[0]["size"],
        serde_json::json!({"cpu": "6", "memory": "20Gi"})
    );
    assert_eq!(claims[0]["instanceTypes"][0], "vs-6c-20gi");
    assert_eq!(claims[0]["pricePerHour"], 0.2);
    let table = stdout(&simulate(&args, Some(yaml)));
    assert!(table.contains("SIZE"), "{table}");
    assert!(
        table.contains("vs-6c-20gi") && table.contains("6cpu/20Gi"),
        "{table}"
    );
}

/// Issue 39's case (`examples/price-aware/`): `small` 2 cpu at 0.05/h, `large` 8 cpu priced at
/// 1.00/h by a NodeOverlay, ten pods of 500m. First-fit would put them on one `large` (1.00/h,
/// shown as what the plan beat); the plan is four `small` (0.20/h).
#[test]
fn price_aware_example_plans_small_nodes() {
    let out = simulate(&["-f", "examples/price-aware/", "-o", "json"], None);
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert_eq!(plan["warnings"], serde_json::json!([]), "{plan:#}");
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    assert_eq!(claims.len(), 4, "{plan:#}");
    for c in claims {
        assert_eq!(c["instanceType"], "small", "{c:#}");
        assert_eq!(c["pricePerHour"], 0.05, "{c:#}");
    }
    let total = &plan["total"];
    assert_eq!(total["podsOnNewNodeClaims"], 10, "{plan:#}");
    let price = total["pricePerHour"].as_f64().expect("price");
    assert!(price <= 0.25 + 1e-9, "{price}");
    // The NodeOverlay did price `large` at 1.00/h: first-fit's one `large` is what it beat.
    let first_fit = total["firstFitPricePerHour"]
        .as_f64()
        .expect("firstFitPricePerHour");
    assert!((first_fit - 1.00).abs() < 1e-9, "{first_fit}");

    let table = stdout(&simulate(&["-f", "examples/price-aware/"], None));
    assert!(
        table.contains(
            "Price-aware packing: 0.2000/h; first-fit packing (Karpenter's) would cost 1.0000/h"
        ),
        "{table}"
    );
}

/// A plan first-fit already makes (the example snapshot) shows no first-fit price.
#[test]
fn first_fit_price_only_when_it_lost() {
    let out = simulate(&["-f", "examples/snapshot/", "-o", "json"], None);
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert!(plan["total"]["pricePerHour"].as_f64().is_some(), "{plan:#}");
    assert_eq!(plan["total"].get("firstFitPricePerHour"), None, "{plan:#}");
}

/// Issue 35's four cases (`examples/volumes/`): a pod goes to its bound volume's zone, to the
/// zone its claim's class allows, not at all when its local volume's host is gone (the reason
/// names the volume), and pods whose claims exceed the template's attach limit (4) are spread
/// over enough NodeClaims at once. The claims, volumes and classes are read, not ignored.
#[test]
fn volumes_example_places_pods_by_their_volumes() {
    let out = simulate(&["-f", "examples/volumes/", "-o", "json"], None);
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert_eq!(plan["warnings"], serde_json::json!([]), "{plan:#}");
    assert_eq!(plan["ignored"], serde_json::json!([]), "{plan:#}");
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    let zone_of = |pod: &str| {
        claims
            .iter()
            .find(|c| strs(&c["pods"]).contains(&format!("default/{pod}").as_str()))
            .map(|c| c["zone"].as_str().expect("zone").to_string())
    };
    assert_eq!(zone_of("db-0").as_deref(), Some("zone-c"), "{plan:#}");
    assert_eq!(zone_of("report").as_deref(), Some("zone-b"), "{plan:#}");
    assert_eq!(zone_of("cache-0"), None, "{plan:#}");
    let unplaceable = plan["unplaceable"].as_array().expect("unplaceable");
    assert_eq!(unplaceable.len(), 1, "{plan:#}");
    assert_eq!(unplaceable[0]["pod"], "default/cache-0");
    let reason = unplaceable[0]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("local-cache-0") && reason.contains("worker-7"),
        "{reason}"
    );
    let logs_per_claim = |claims: &[Value]| -> Vec<usize> {
        claims
            .iter()
            .map(|c| {
                strs(&c["pods"])
                    .iter()
                    .filter(|p| p.starts_with("default/logs-"))
                    .count()
            })
            .filter(|n| *n > 0)
            .collect()
    };
    let logs = logs_per_claim(claims);
    assert_eq!(logs.iter().sum::<usize>(), 10, "{plan:#}");
    assert!(logs.iter().all(|n| *n <= 4), "{logs:?}: {plan:#}");
    // db-0 and report share the driver: no NodeClaim attaches more than 4 volumes.
    for c in claims {
        assert!(strs(&c["pods"]).len() <= 4, "{c:#}");
    }

    // `instance-types` shows the limit the template declares.
    let listed = Command::new(env!("CARGO_BIN_EXE_karpenter-capi"))
        .args([
            "instance-types",
            "-f",
            "examples/volumes/00-snapshot.yaml",
            "-o",
            "json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run instance-types");
    let reports: Value = serde_json::from_str(&stdout(&listed)).expect("JSON");
    assert_eq!(
        reports[0]["catalog"]["instanceTypes"][0]["volumeLimits"],
        serde_json::json!({"disk.csi.example.com": 4}),
        "{reports:#}"
    );

    // The positive control: without the attach limit the same pods pack by cpu alone.
    let text = std::fs::read_to_string("examples/volumes/00-snapshot.yaml").expect("example");
    let unlimited = text.replace(
        "capacity.cluster-autoscaler.kubernetes.io/csi-driver: \"disk.csi.example.com=4\"",
        "capacity.cluster-autoscaler.kubernetes.io/csi-driver: \"disk.csi.example.com=0\"",
    );
    assert_ne!(unlimited, text);
    let out = simulate(&["-f", "-", "-o", "json"], Some(&unlimited));
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    assert!(logs_per_claim(claims).iter().any(|n| *n > 4), "{plan:#}");
}

/// Issue 37's case (`examples/dra/`): two pods claiming two GPUs each through a
/// ResourceClaimTemplate get a NodeClaim each of the GPU template (Cluster Autoscaler's
/// dra-driver + gpu-count), and a claim selecting 60Gi GPUs gets the template whose
/// resource-slices annotation declares them. The DRA objects are read, not ignored.
#[test]
fn dra_example_puts_claiming_pods_on_templates_with_their_devices() {
    let types_of = |plan: &Value, pod: &str| -> Vec<String> {
        plan["nodeClaims"]
            .as_array()
            .expect("nodeClaims")
            .iter()
            .filter(|c| strs(&c["pods"]).contains(&pod))
            .map(|c| c["instanceType"].as_str().expect("type").to_string())
            .collect()
    };
    let out = simulate(&["-f", "examples/dra/", "-o", "json"], None);
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert_eq!(plan["ignored"], serde_json::json!([]), "{plan:#}");
    assert_eq!(plan["unplaceable"], serde_json::json!([]), "{plan:#}");
    assert_eq!(types_of(&plan, "ml/train-0"), ["gpu-2x"], "{plan:#}");
    assert_eq!(types_of(&plan, "ml/train-1"), ["gpu-2x"], "{plan:#}");
    assert_eq!(types_of(&plan, "ml/big"), ["a100-80g"], "{plan:#}");
    assert_eq!(plan["total"]["nodeClaims"], 3, "{plan:#}");

    // `instance-types` shows each template's devices and their source.
    let listed = Command::new(env!("CARGO_BIN_EXE_karpenter-capi"))
        .args(["instance-types", "-f", "examples/dra/", "-o", "json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run instance-types");
    let reports: Value = serde_json::from_str(&stdout(&listed)).expect("JSON");
    let types = reports[0]["catalog"]["instanceTypes"]
        .as_array()
        .expect("types");
    let devices = |name: &str| {
        types
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["devices"].clone())
            .expect("type")
    };
    assert_eq!(devices("gpu-2x")["source"], "Declared");
    assert_eq!(
        devices("gpu-2x")["slices"][0]["devices"][1]["name"],
        "gpu-1"
    );
    assert_eq!(
        devices("a100-80g")["slices"][0]["devices"][0]["capacity"]["memory"]["value"],
        "80Gi"
    );
    assert!(devices("cpu-8c").is_null());

    // The positive control: without their claims the pods share the cheap CPU template.
    let text = std::fs::read_to_string("examples/dra/00-snapshot.yaml").expect("example");
    let unclaimed = text.replace("resourceClaims:", "x-resourceClaims:");
    assert_ne!(unclaimed, text);
    let out = simulate(&["-f", "-", "-o", "json"], Some(&unclaimed));
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert_eq!(types_of(&plan, "ml/train-0"), ["cpu-8c"], "{plan:#}");
    assert_eq!(plan["total"]["nodeClaims"], 1, "{plan:#}");

    // Network-attached GPUs (a ResourceSlice for all nodes, four devices): the two training
    // pods' claims take them and need no device of their node, so they join `big`, which
    // still needs its 80Gi device (the fabric's offer no memory): one NodeClaim, not three.
    let fabric = format!(
        "{text}\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: fabric\n\
         spec:\n  driver: gpu.example.com\n  allNodes: true\n  pool: {{name: fabric, generation: 1, resourceSliceCount: 1}}\n\
         \x20 devices: [{{name: f0}}, {{name: f1}}, {{name: f2}}, {{name: f3}}]\n"
    );
    let out = simulate(&["-f", "-", "-o", "json"], Some(&fabric));
    let plan: Value = serde_json::from_str(&stdout(&out)).expect("JSON plan");
    assert_eq!(plan["unplaceable"], serde_json::json!([]), "{plan:#}");
    assert_eq!(types_of(&plan, "ml/train-0"), ["a100-80g"], "{plan:#}");
    assert_eq!(types_of(&plan, "ml/train-1"), ["a100-80g"], "{plan:#}");
    assert_eq!(types_of(&plan, "ml/big"), ["a100-80g"], "{plan:#}");
    assert_eq!(plan["total"]["nodeClaims"], 1, "{plan:#}");
}
