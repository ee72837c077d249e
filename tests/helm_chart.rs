//! The Helm chart (charts/karpenter-capi): it lints, renders in every mode, has a value for
//! every `karpenter-capi run` flag, grants exactly the RBAC of deploy/ and applies to a real
//! kube-apiserver. (The operator running under the chart's RBAC: tests/provisioning.rs.)

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::manifests::{
    CHART, NAMESPACE, docs, helm, helm_template, kustomize, output, pipe, root, wildcards,
};
use serde_json::{Value, json};

/// The chart's modes with the kustomize tree granting the same permissions.
const MODES: [(&str, &str); 4] = [
    ("single", "deploy/base"),
    ("hub", "deploy/overlays/hub"),
    ("workload", "deploy/overlays/split-clusters"),
    ("management", "deploy/overlays/split-clusters/management"),
];

fn mode_arg(mode: &str) -> String {
    format!("mode={mode}")
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    match of_kind(docs, kind)[..] {
        [d] => d,
        ref found => panic!("expected one {kind}, found {}", found.len()),
    }
}

fn container(docs: &[Value]) -> &Value {
    &one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn args(docs: &[Value]) -> Vec<String> {
    container(docs)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

/// A flag of `karpenter-capi run -h`: its name without `--`, and its default if shown.
struct Flag {
    name: String,
    default: Option<String>,
}

/// The flags of `karpenter-capi run`, read from its help: a line starting with `-` names a
/// flag, the lines up to the next one describe it.
fn run_flags() -> Vec<Flag> {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter-capi"));
    cmd.args(["run", "-h"]);
    let help = output(cmd);
    let mut flags: Vec<(String, String)> = Vec::new();
    for line in help.lines().map(str::trim_start) {
        match line.split_whitespace().find(|w| w.starts_with("--")) {
            Some(name) if line.starts_with('-') => {
                flags.push((name.trim_start_matches("--").to_string(), line.to_string()))
            }
            _ => {
                if let Some((_, text)) = flags.last_mut() {
                    text.push_str(line);
                }
            }
        }
    }
    let flags: Vec<Flag> = flags
        .into_iter()
        .filter(|(name, _)| name != "help")
        .map(|(name, text)| Flag {
            default: text
                .split_once("[default: ")
                .and_then(|(_, rest)| rest.split_once(']'))
                .map(|(d, _)| d.to_string()),
            name,
        })
        .collect();
    assert!(flags.len() > 5, "flags read from `run -h`:\n{help}");
    flags
}

/// `batch-idle-duration` -> `batchIdleDuration`.
fn camel(flag: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in flag.chars() {
        match c {
            '-' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

fn values() -> Value {
    let text = std::fs::read_to_string(root().join(CHART).join("values.yaml")).expect("values");
    serde_saphyr::from_str(&text).expect("values.yaml parses")
}

/// A YAML scalar as it would appear on the command line.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn helm_lint_passes_in_every_mode() {
    for (mode, _) in MODES {
        let mut cmd = std::process::Command::new(helm());
        cmd.args(["lint", "--strict"])
            .arg(root().join(CHART))
            .args(["--namespace", NAMESPACE, "--set", &mode_arg(mode)]);
        output(cmd);
    }
}

#[test]
fn every_run_flag_has_a_value_with_the_binarys_default() {
    let values = values();
    let settings = values["settings"].as_object().expect("settings map");
    // Deliberate differences from the binary's defaults, with the reason.
    let chart_defaults: BTreeMap<&str, &str> = [
        ("logFormat", "JSON for log collectors in a cluster"),
        (
            "leaderElectionNamespace",
            "null: the release namespace, where the chart's Role grants Leases",
        ),
    ]
    .into();
    let flags = run_flags();
    let mut problems = Vec::new();
    for flag in &flags {
        let key = camel(&flag.name);
        match (settings.get(&key), &flag.default) {
            (None, _) => problems.push(format!(
                "--{}: no `settings.{key}` in values.yaml",
                flag.name
            )),
            (Some(Value::Null), _) => {}
            (Some(v), _) if chart_defaults.contains_key(key.as_str()) => {
                assert!(!v.is_null());
            }
            (Some(v), Some(default)) if scalar(v) != *default => problems.push(format!(
                "settings.{key}: {v} but the binary's default is {default}"
            )),
            (Some(v), None) if !v.is_null() && *v != Value::Bool(false) => problems.push(format!(
                "settings.{key}: {v} where the binary has no default (use null)"
            )),
            _ => {}
        }
    }
    let names: BTreeSet<String> = flags.iter().map(|f| camel(&f.name)).collect();
    for key in settings.keys() {
        if !names.contains(key) {
            problems.push(format!(
                "settings.{key} is not a flag of `karpenter-capi run`"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn settings_become_the_flags_the_binary_parses() {
    let flags: BTreeSet<String> = run_flags().into_iter().map(|f| f.name).collect();
    let rendered = docs(&helm_template(&[
        "--set",
        "replicas=1,settings.disableLeaderElection=true,settings.kubeClientQps=1000000",
        "--set",
        "settings.identity=replica-a,settings.logLevel=info\\,controller=debug",
    ]));
    let args = args(&rendered);
    assert_eq!(args[0], "run");
    for arg in &args[1..] {
        let name = arg.trim_start_matches("--");
        let name = name.split_once('=').map_or(name, |(n, _)| n);
        assert!(flags.contains(name), "{arg} is not a run flag");
    }
    for expected in [
        "--disable-leader-election",
        "--kube-client-qps=1000000",
        "--identity=replica-a",
        "--log-level=info,controller=debug",
        "--log-format=json",
        "--batch-idle-duration=1s",
        "--leader-election-namespace=karpenter",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    // Null settings pass nothing (the binary's default applies).
    assert!(!args.iter().any(|a| a.starts_with("--kubeconfig")));
    // clap parses (and validates) every argument before it meets --help.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter-capi"));
    cmd.args(&args).arg("--help");
    output(cmd);
    let mut bad = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter-capi"));
    bad.args(["run", "--kube-client-qps=0", "--help"]);
    assert!(
        !bad.output().expect("runs").status.success(),
        "values are validated"
    );
}

/// `helm template` with `args`: its success and stdout + stderr.
fn try_template(args: &[&str]) -> (bool, String) {
    let mut cmd = std::process::Command::new(helm());
    cmd.args(["template", "karpenter-capi"])
        .arg(root().join(CHART))
        .args(["--namespace", NAMESPACE])
        .args(args);
    let out = cmd.output().expect("helm runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_static_shard_index_needs_one_replica() {
    // The replicas of one Deployment would all get the same index: the other shards'
    // Clusters would be served by nobody. The chart refuses, naming both values.
    let (ok, text) = try_template(&[
        "--set",
        "mode=hub,replicas=2,settings.shardCount=2,settings.shardIndex=0",
    ]);
    assert!(!ok, "two replicas with one shard index rendered:\n{text}");
    assert!(
        text.contains("settings.shardIndex (0)") && text.contains("replicas: 2"),
        "the refusal names both values: {text}"
    );
    // Positive control: one replica per release (one release per index) renders, and the
    // binary gets that index.
    let (ok, text) = try_template(&[
        "--set",
        "mode=hub,replicas=1,settings.shardCount=2,settings.shardIndex=1",
    ]);
    assert!(ok, "one replica with a shard index: {text}");
    let args = args(&docs(&text));
    for expected in ["--shard-count=2", "--shard-index=1"] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
}

#[test]
fn default_values_render_a_hardened_highly_available_operator() {
    let rendered = docs(&helm_template(&[]));
    let deployment = one(&rendered, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "karpenter-capi");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        spread["labelSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let c = container(&rendered);
    assert_eq!(
        c["image"],
        format!("karpenter-capi:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert!(c["resources"]["limits"].is_object() && c["resources"]["requests"].is_object());
    assert_eq!(
        c["ports"],
        json!([{"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
               {"name": "health", "containerPort": 8081, "protocol": "TCP"}])
    );
    assert_eq!(
        c["env"][0],
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    );
    assert!(!args(&rendered).iter().any(|a| a.contains("management")));
    let pdb = one(&rendered, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"], deployment["spec"]["selector"],
        "the PDB covers the operator's pods"
    );
    let service = one(&rendered, "Service");
    assert_eq!(service["metadata"]["name"], "karpenter-capi-metrics");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
    assert!(of_kind(&rendered, "ServiceMonitor").is_empty());
    // Without --include-crds helm renders no CRDs (they live in crds/).
    assert!(of_kind(&rendered, "CustomResourceDefinition").is_empty());

    let monitored = docs(&helm_template(&["--set", "serviceMonitor.enabled=true"]));
    let monitor = one(&monitored, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        one(&monitored, "Service")["spec"]["selector"]
    );
    // One replica: no PDB (it would block every drain).
    let single = docs(&helm_template(&["--set", "replicas=1"]));
    assert!(of_kind(&single, "PodDisruptionBudget").is_empty());
    let crds = docs(&helm_template(&["--include-crds"]));
    assert_eq!(
        of_kind(&crds, "CustomResourceDefinition").len(),
        clusterapi_api::crds::crds().len()
    );
}

#[test]
fn split_cluster_values_read_the_management_kubeconfig_from_a_secret() {
    let rendered = docs(&helm_template(&[
        "--set",
        "mode=workload,managementCluster.kubeconfigSecret.name=mgmt-kubeconfig",
    ]));
    assert!(
        args(&rendered)
            .iter()
            .any(|a| a == "--management-kubeconfig=/etc/karpenter-capi/management/kubeconfig"),
        "{:?}",
        args(&rendered)
    );
    let pod = &one(&rendered, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"],
        json!([{"name": "management-kubeconfig", "secret": {
            "secretName": "mgmt-kubeconfig", "defaultMode": 0o400,
            "items": [{"key": "kubeconfig", "path": "kubeconfig"}]}}])
    );
    assert_eq!(
        container(&rendered)["volumeMounts"],
        json!([{"name": "management-kubeconfig",
                "mountPath": "/etc/karpenter-capi/management", "readOnly": true}])
    );
    // The Cluster API permissions are granted in the management cluster, not here.
    assert!(
        !rendered.iter().any(|d| d["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.contains("management") || n.contains("provider"))),
        "no Cluster API RBAC in the workload cluster"
    );
    // The management side: the identity and its permissions, no operator.
    let management = docs(&helm_template(&["--set", "mode=management"]));
    assert!(of_kind(&management, "Deployment").is_empty());
    assert!(of_kind(&management, "Service").is_empty());
    assert_eq!(
        one(&management, "ServiceAccount")["metadata"]["name"],
        "karpenter-capi"
    );
    // A typo in the mode is an error, not a silent default.
    let mut cmd = std::process::Command::new(helm());
    cmd.args(["template", "x"])
        .arg(root().join(CHART))
        .args(["--set", "mode=split"]);
    let out = cmd.output().expect("helm runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mode must be"));
}

/// What every binding grants, keyed by the binding: its subjects, the role it names and that
/// role's rules (for an aggregated ClusterRole: the rules of every ClusterRole it selects).
fn grants(docs: &[Value]) -> BTreeMap<String, Value> {
    let role = |kind: &str, name: &Value, namespace: &Value| {
        docs.iter().find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"] == *name
                && (kind == "ClusterRole" || d["metadata"]["namespace"] == *namespace)
        })
    };
    let mut out = BTreeMap::new();
    for b in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        let r = &b["roleRef"];
        let target = role(
            r["kind"].as_str().unwrap_or_default(),
            &r["name"],
            &b["metadata"]["namespace"],
        )
        .unwrap_or_else(|| panic!("{} names a missing role {r}", b["metadata"]["name"]));
        let mut rules = vec![target["rules"].clone()];
        for selector in target["aggregationRule"]["clusterRoleSelectors"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let labels = selector["matchLabels"].as_object().expect("matchLabels");
            let mut selected: Vec<(String, Value)> = of_kind(docs, "ClusterRole")
                .into_iter()
                .filter(|c| labels.iter().all(|(k, v)| c["metadata"]["labels"][k] == *v))
                .map(|c| (scalar(&c["metadata"]["name"]), c["rules"].clone()))
                .collect();
            selected.sort_by(|a, b| a.0.cmp(&b.0));
            rules.push(json!(selected));
        }
        out.insert(
            format!(
                "{} {}/{}",
                b["kind"].as_str().unwrap_or_default(),
                b["metadata"]["namespace"].as_str().unwrap_or_default(),
                b["metadata"]["name"].as_str().unwrap_or_default()
            ),
            json!({"subjects": b["subjects"], "roleRef": r, "rules": rules}),
        );
    }
    out
}

#[test]
fn chart_rbac_equals_deploys_in_every_mode() {
    for (mode, dir) in MODES {
        let chart = docs(&helm_template(&["--set", &mode_arg(mode)]));
        assert!(
            wildcards(&chart).is_empty(),
            "{mode}: {:?}",
            wildcards(&chart)
        );
        let (chart, deploy) = (grants(&chart), grants(&docs(&kustomize(dir))));
        assert!(!chart.is_empty(), "{mode}: the chart binds roles");
        let keys = |g: &BTreeMap<String, Value>| g.keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&chart), keys(&deploy), "{mode} vs {dir}: bindings");
        for (binding, granted) in &chart {
            let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
            assert!(
                *granted == deploy[binding],
                "{mode} vs {dir}: {binding} grants differently\nchart: {}\ndeploy: {}",
                pretty(granted),
                pretty(&deploy[binding])
            );
        }
    }
}

#[test]
fn a_hub_limited_to_namespaces_reads_secrets_only_there() {
    let rendered = docs(&helm_template(&[
        "--set",
        "mode=hub",
        "--set",
        "settings.namespaces=team-a\\,team-b",
    ]));
    let reads_secrets = |rules: &Value| rules.to_string().contains("\"secrets\"");
    let mut scoped = BTreeSet::new();
    for (binding, granted) in grants(&rendered) {
        if !reads_secrets(&granted["rules"]) {
            continue;
        }
        let (kind, rest) = binding.split_once(' ').unwrap_or_default();
        assert_eq!(kind, "RoleBinding", "{binding} grants Secrets cluster-wide");
        assert_eq!(
            granted["rules"],
            json!([[{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]]),
            "{binding}: get only"
        );
        scoped.insert(rest.split_once('/').unwrap_or_default().0.to_string());
    }
    assert_eq!(
        scoped,
        BTreeSet::from(["team-a".to_string(), "team-b".to_string()]),
        "Secrets are read in the hub's namespaces"
    );
    assert!(
        args(&rendered).contains(&"--namespaces=team-a,team-b".to_string()),
        "{:?}",
        args(&rendered)
    );
}

#[test]
fn chart_and_operator_share_the_workspace_version() {
    let text = std::fs::read_to_string(root().join(CHART).join("Chart.yaml")).expect("Chart");
    let chart: Value = serde_saphyr::from_str(&text).expect("Chart.yaml parses");
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

fn example() -> Vec<Value> {
    let path = root().join("examples/helm/helmchartproxy.yaml");
    docs(&std::fs::read_to_string(path).expect("example"))
}

#[test]
fn the_helmchartproxy_example_installs_this_chart_in_workload_mode() {
    let example = example();
    let proxy = one(&example, "HelmChartProxy");
    let text = std::fs::read_to_string(root().join(CHART).join("Chart.yaml")).expect("Chart");
    let chart: Value = serde_saphyr::from_str(&text).expect("Chart.yaml parses");
    assert_eq!(proxy["spec"]["chartName"], chart["name"]);
    assert_eq!(proxy["spec"]["version"], chart["version"]);
    assert_eq!(proxy["spec"]["namespace"], NAMESPACE);
    // CAAPH renders the values as a Go template over the Cluster.
    let values = proxy["spec"]["valuesTemplate"]
        .as_str()
        .expect("valuesTemplate")
        .replace("{{ .Cluster.metadata.name }}", "demo");
    assert!(
        !values.contains("{{"),
        "only .Cluster.metadata.name is templated"
    );
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), values).expect("write values");
    let rendered = docs(&helm_template(&["-f", &file.path().to_string_lossy()]));
    assert!(
        args(&rendered)
            .iter()
            .any(|a| a == "--management-kubeconfig=/etc/karpenter-capi/management/kubeconfig")
    );
    let pod = &one(&rendered, "Deployment")["spec"]["template"];
    assert_eq!(
        pod["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        "demo"
    );
    let volume = &pod["spec"]["volumes"][0]["secret"];
    // The ClusterResourceSet delivers exactly the Secret the chart mounts.
    let set = one(&example, "ClusterResourceSet");
    assert_eq!(
        set["spec"]["clusterSelector"],
        proxy["spec"]["clusterSelector"]
    );
    let resource_set = one(&example, "Secret");
    assert_eq!(resource_set["type"], "addons.cluster.x-k8s.io/resource-set");
    assert_eq!(
        set["spec"]["resources"],
        json!([{"kind": "Secret", "name": resource_set["metadata"]["name"]}])
    );
    let delivered = docs(
        resource_set["stringData"]["objects.yaml"]
            .as_str()
            .expect("objects.yaml"),
    );
    let secret = one(&delivered, "Secret");
    assert_eq!(secret["metadata"]["name"], volume["secretName"]);
    assert_eq!(secret["metadata"]["namespace"], NAMESPACE);
    let key = volume["items"][0]["key"].as_str().expect("key");
    let kubeconfig: Value = serde_saphyr::from_str(
        secret["stringData"][key]
            .as_str()
            .expect("kubeconfig under the mounted key"),
    )
    .expect("kubeconfig parses");
    assert_eq!(kubeconfig["kind"], "Config");
}

/// The rendered chart on a real kube-apiserver: server-side dry run in every mode (and of the
/// example's ClusterResourceSet against the Cluster API CRDs), then the default install.
#[tokio::test]
async fn chart_applies_server_side_to_a_real_api_server() {
    let tb = testbed::Testbed::start(testbed::Options::default())
        .await
        .expect("testbed");
    let apply = |yaml: String, extra: &[&str]| {
        let mut cmd = tb.kubectl();
        cmd.args(["apply", "--server-side", "-f", "-"]).args(extra);
        let (ok, out) = pipe(cmd, &yaml);
        assert!(ok, "kubectl apply {extra:?}:\n{out}");
        out
    };
    apply(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            .to_string(),
        &[],
    );
    // The chart holds no custom resources, so the dry runs need no CRDs.
    for (mode, _) in MODES {
        apply(
            helm_template(&["--set", &mode_arg(mode)]),
            &["--dry-run=server"],
        );
    }
    let delivery: Vec<String> = example()
        .into_iter()
        .filter(|d| d["kind"] != "HelmChartProxy")
        .map(|d| d.to_string())
        .collect();
    apply(
        delivery.join("\n---\n"),
        &["-n", "default", "--dry-run=server"],
    );
    let applied = apply(helm_template(&["--include-crds"]), &[]);
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/nodepools.karpenter.sh serverside-applied",
        "deployment.apps/karpenter-capi serverside-applied",
        "poddisruptionbudget.policy/karpenter-capi serverside-applied",
        "clusterrole.rbac.authorization.k8s.io/karpenter-capi-workload serverside-applied",
    ] {
        assert!(applied.contains(object), "{object} in:\n{applied}");
    }
}

#[test]
fn the_grafana_dashboard_ships_in_the_chart_and_in_deploy() {
    let deploy = std::fs::read_to_string(root().join("deploy/grafana/karpenter-capi.json"))
        .expect("deploy/grafana/karpenter-capi.json");
    let chart = std::fs::read_to_string(root().join(CHART).join("dashboards/karpenter-capi.json"))
        .expect("the chart's dashboards/karpenter-capi.json");
    assert_eq!(
        chart, deploy,
        "the chart ships the dashboard of deploy/grafana"
    );
    let dashboard: Value = serde_json::from_str(&deploy).expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "karpenter-capi");

    assert!(
        of_kind(&docs(&helm_template(&[])), "ConfigMap").is_empty(),
        "off by default"
    );
    let rendered = docs(&helm_template(&["--set", "grafanaDashboard.enabled=true"]));
    let chart_map = one(&rendered, "ConfigMap");
    let kustomized = docs(&kustomize("deploy/grafana"));
    let deploy_map = one(&kustomized, "ConfigMap");
    for map in [chart_map, deploy_map] {
        assert_eq!(map["metadata"]["name"], "karpenter-capi-dashboard");
        assert_eq!(map["metadata"]["namespace"], NAMESPACE);
        assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
        let data: Value = serde_json::from_str(
            map["data"]["karpenter-capi.json"]
                .as_str()
                .expect("the dashboard in the ConfigMap"),
        )
        .expect("JSON");
        assert_eq!(data, dashboard);
    }
    // No ConfigMap where no operator runs.
    let management = docs(&helm_template(&[
        "--set",
        "mode=management,grafanaDashboard.enabled=true",
    ]));
    assert!(of_kind(&management, "ConfigMap").is_empty());
}
