//! The API on a real kube-apiserver (testbed): the CRDs install, Karpenter-style documents
//! are accepted unchanged, invalid ones are rejected naming the field, and the rendered
//! `deploy/base` applies and grants the operator exactly what it needs.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::is_subset;
use common::manifests::{docs, kustomize, pipe, root, wildcards};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use testbed::{Component, Options, Testbed, wait_for};

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/fixtures/api").join(kind))
        .expect("fixture directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn to_yaml(doc: &Value) -> String {
    serde_saphyr::to_string(doc).expect("YAML")
}

fn api_for(client: &Client, doc: &Value) -> Api<DynamicObject> {
    let (group, version) = doc["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .expect("apiVersion group/version");
    let kind = doc["kind"].as_str().expect("kind");
    let plural = match kind {
        "NodePool" => "nodepools",
        "NodeClaim" => "nodeclaims",
        "NodeOverlay" => "nodeoverlays",
        "ClusterAPINodeClass" => "clusterapinodeclasses",
        other => panic!("unexpected kind {other}"),
    };
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::all_with(client.clone(), &ar)
}

/// The API server every test here shares (`testbed::shared`): the tests use distinct
/// object names (the fixtures name theirs apart), so they may run at once. The
/// controller-manager aggregates the provider ClusterRoles the RBAC test checks.
async fn testbed() -> &'static Testbed {
    testbed::shared(Options::default().with(Component::ControllerManager))
        .await
        .expect("testbed")
}

#[tokio::test]
async fn crds_install_and_become_established() {
    let tb = testbed().await;
    let crds = clusterapi_api::crds::crds();
    tb.install_crds(&crds).await.expect("CRDs installed");
    let api: Api<CustomResourceDefinition> = Api::all(tb.client());
    for crd in &crds {
        let got = api.get(&crd.name_any()).await.expect("CRD exists");
        let conditions = got.status.and_then(|s| s.conditions).unwrap_or_default();
        let status = |t: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.clone())
        };
        assert_eq!(
            status("Established").as_deref(),
            Some("True"),
            "{}",
            crd.name_any()
        );
        assert_eq!(
            status("NamesAccepted").as_deref(),
            Some("True"),
            "{}",
            crd.name_any()
        );
        assert_ne!(
            status("NonStructuralSchema").as_deref(),
            Some("True"),
            "{}",
            crd.name_any()
        );
    }
}

#[tokio::test]
async fn karpenter_v1_documents_are_accepted_unchanged() {
    let tb = testbed().await;
    tb.install_crds(&clusterapi_api::crds::crds())
        .await
        .expect("CRDs");
    let client = tb.client();
    let files = fixtures("valid");
    assert!(files.len() >= 12);
    let mut count = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).expect("fixture");
        for doc in docs(&text) {
            let applied = tb
                .apply_yaml(&to_yaml(&doc), "default")
                .await
                .unwrap_or_else(|e| panic!("{} rejected: {e}", path.display()));
            assert_eq!(applied.len(), 1);
            let name = doc["metadata"]["name"].as_str().expect("name");
            let stored = api_for(&client, &doc).get(name).await.expect("stored");
            let stored = serde_json::to_value(&stored).expect("json");
            assert!(
                is_subset(&doc["spec"], &stored["spec"]),
                "{}: the server changed the spec:\nsent   {}\nstored {}",
                path.display(),
                doc["spec"],
                stored["spec"]
            );
            // And the typed clients read it back.
            match doc["kind"].as_str() {
                Some("NodePool") => {
                    let _: api::NodePool = serde_json::from_value(stored).expect("NodePool");
                }
                Some("NodeClaim") => {
                    let _: api::NodeClaim = serde_json::from_value(stored).expect("NodeClaim");
                }
                Some("NodeOverlay") => {
                    let _: api::NodeOverlay = serde_json::from_value(stored).expect("NodeOverlay");
                }
                _ => {
                    let _: clusterapi_api::ClusterAPINodeClass =
                        serde_json::from_value(stored).expect("ClusterAPINodeClass");
                }
            }
            count += 1;
        }
    }
    assert!(count >= 12);
    // Defaults are applied as Karpenter applies them.
    let pool: Api<api::NodePool> = Api::all(client.clone());
    let never = pool.get("balanced").await.expect("balanced");
    assert_eq!(never.spec.template.spec.expire_after, "720h");
    assert_eq!(never.spec.disruption.budgets[0].nodes, "10%");
    // consolidateAfter is optional (Karpenter v1.15): `0s` when left out.
    let fixed = pool.get("static").await.expect("static");
    assert_eq!(fixed.spec.disruption.consolidate_after, "0s");
    assert_eq!(fixed.spec.replicas, Some(3));
    // The scale subresource: `kubectl scale` sets spec.replicas.
    let out = tb
        .kubectl()
        .args(["scale", "nodepool", "static", "--replicas=4"])
        .output()
        .expect("kubectl scale");
    assert!(
        out.status.success(),
        "kubectl scale: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scaled = pool.get("static").await.expect("static");
    assert_eq!(scaled.spec.replicas, Some(4));
    let class: Api<clusterapi_api::ClusterAPINodeClass> = Api::all(client.clone());
    let c = class.get("default").await.expect("nodeclass");
    assert_eq!(c.spec.launch_timeout, "10m");
    assert_eq!(c.spec.registration_timeout, "15m");

    // The printer columns a user scans: the NodeClass's count of instance types, the
    // NodeClaim's drift and disruption reason.
    let patch = |status: Value| kube::api::Patch::Merge(serde_json::json!({ "status": status }));
    let pp = kube::api::PatchParams::default();
    class
        .patch_status(
            "default",
            &pp,
            &patch(serde_json::json!({
                "instanceTypeCount": 3,
                "instanceTypes": [{"name": "small"}, {"name": "medium"}, {"name": "large"}],
            })),
        )
        .await
        .expect("NodeClass status");
    let claims: Api<api::NodeClaim> = Api::all(client);
    let condition = |type_: &str, reason: &str| {
        serde_json::json!({"type": type_, "status": "True", "reason": reason, "message": "",
            "lastTransitionTime": "2026-11-23T00:00:00Z"})
    };
    claims
        .patch_status(
            "default-x7k2p",
            &pp,
            &patch(serde_json::json!({"conditions": [
                condition("Drifted", "NodeClassDrifted"),
                condition("DisruptionReason", "Drifted"),
            ]})),
        )
        .await
        .expect("NodeClaim status");
    let table = |args: &[&str]| {
        let out = tb.kubectl().args(args).output().expect("kubectl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("utf-8");
        // Columns start where their header does (a value may be empty).
        let mut lines = text.lines();
        let header = lines.next().expect("header");
        let row = lines.next().expect("row");
        let starts: Vec<(usize, &str)> = header
            .split_whitespace()
            .scan(0, |from, h| {
                let at = *from + header[*from..].find(h).expect("in header");
                *from = at + h.len();
                Some((at, h))
            })
            .collect();
        let cell = |i: usize| {
            let end = starts.get(i + 1).map_or(row.len(), |s| s.0.min(row.len()));
            row.get(starts[i].0..end).unwrap_or("").trim().to_string()
        };
        (0..starts.len())
            .map(|i| (starts[i].1.to_string(), cell(i)))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let nc = table(&["get", "clusterapinodeclass", "default"]);
    assert_eq!(nc["TYPES"], "3", "{nc:?}");
    let claim = table(&["get", "nodeclaim", "default-x7k2p"]);
    assert_eq!(claim["DRIFTED"], "True", "{claim:?}");
    assert_eq!(claim["DISRUPTION"], "Drifted", "{claim:?}");
}

fn expectation(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
        .unwrap_or_else(|| panic!("no `# {key}:` line"))
        .trim()
        .to_string()
}

#[tokio::test]
async fn invalid_documents_are_rejected_naming_the_field() {
    let tb = testbed().await;
    tb.install_crds(&clusterapi_api::crds::crds())
        .await
        .expect("CRDs");
    let files = fixtures("invalid");
    assert!(files.len() >= 10);
    let mut failures = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("fixture");
        let field = expectation(&text, "field");
        let expect = expectation(&text, "expect");
        let mut docs = docs(&text);
        let last = docs.pop().expect("a document");
        // Earlier documents set the stage (e.g. the object an update then mutates).
        for doc in &docs {
            tb.apply_yaml(&to_yaml(doc), "default")
                .await
                .unwrap_or_else(|e| panic!("{}: setup document rejected: {e}", path.display()));
        }
        match tb.apply_yaml(&to_yaml(&last), "default").await {
            Ok(_) => failures.push(format!("{}: accepted", path.display())),
            Err(e) => {
                let message = match &e {
                    testbed::Error::Kube(kube::Error::Api(status)) => status.message.clone(),
                    other => other.to_string(),
                };
                if !message.contains(&field) || !message.contains(&expect) {
                    failures.push(format!(
                        "{}: expected field {field:?} and {expect:?} in: {message}",
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn overlays_render() {
    for dir in [
        "deploy/base",
        "deploy/overlays/split-clusters",
        "deploy/overlays/split-clusters/management",
        "deploy/overlays/hub",
    ] {
        let yaml = kustomize(dir);
        let docs = docs(&yaml);
        assert!(!docs.is_empty(), "{dir} renders objects");
        assert!(wildcards(&docs).is_empty(), "{dir}: {:?}", wildcards(&docs));
    }
    assert!(kustomize("deploy/overlays/hub").contains("--mode=hub"));
    let split = kustomize("deploy/overlays/split-clusters");
    assert!(split.contains("--management-kubeconfig=/etc/karpenter-capi/management/kubeconfig"));
    let bindings: Vec<String> = docs(&split)
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding")
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    // In the workload cluster the operator gets no Cluster API permissions.
    assert_eq!(bindings, ["karpenter-capi-workload"]);
    let management = docs(&kustomize("deploy/overlays/split-clusters/management"));
    assert!(management.iter().any(|d| d["kind"] == "ClusterRoleBinding"
        && d["metadata"]["name"] == "karpenter-capi-management"));
    let deployment = docs(&kustomize("deploy/base"))
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let c = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"][0], "run");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["runAsNonRoot"], true);
    assert!(c["resources"]["limits"].is_object() && c["resources"]["requests"].is_object());
    assert!(
        c["ports"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == "metrics"))
    );
}

const SA: &str = "system:serviceaccount:karpenter:karpenter-capi";

/// The infrastructure providers' group.
const INFRASTRUCTURE: &str = "infrastructure.cluster.x-k8s.io";

/// (verb, API group, resource, subresource, namespace; `None` = cluster-wide).
type Access = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

/// What the operator's ServiceAccount must be allowed, one access a row: verb, API group
/// (`core` for the core group), resource, subresource and namespace (`-`: none, cluster-wide).
const NEEDED: &str = "
watch  karpenter.sh                  nodepools                 -          -
patch  karpenter.sh                  nodepools                 status     -
create karpenter.sh                  nodeclaims                -          -
delete karpenter.sh                  nodeclaims                -          -
patch  karpenter.sh                  nodeclaims                status     -
update karpenter.sh                  nodeclaims                finalizers -
list   karpenter.sh                  nodeoverlays              -          -
watch  karpenter.sh                  nodeoverlays              -          -
patch  karpenter.sh                  nodeoverlays              status     -
list   karpenter.cluster.x-k8s.io    clusterapinodeclasses     -          -
patch  karpenter.cluster.x-k8s.io    clusterapinodeclasses     status     -
watch  core                          nodes                     -          -
patch  core                          nodes                     -          -
update core                          nodes                     -          -
delete core                          nodes                     -          -
list   core                          pods                      -          -
watch  core                          pods                      -          -
delete core                          pods                      -          default
create core                          pods                      eviction   default
list   apps                          daemonsets                -          -
watch  apps                          daemonsets                -          -
watch  policy                        poddisruptionbudgets      -          -
list   core                          persistentvolumeclaims    -          -
watch  core                          persistentvolumeclaims    -          -
list   core                          persistentvolumes         -          -
watch  core                          persistentvolumes         -          -
list   storage.k8s.io                storageclasses            -          -
watch  storage.k8s.io                storageclasses            -          -
list   storage.k8s.io                csinodes                  -          -
watch  storage.k8s.io                csinodes                  -          -
list   resource.k8s.io               deviceclasses             -          -
watch  resource.k8s.io               deviceclasses             -          -
list   resource.k8s.io               resourceclaims            -          -
watch  resource.k8s.io               resourceclaims            -          -
list   resource.k8s.io               resourceclaimtemplates    -          -
watch  resource.k8s.io               resourceclaimtemplates    -          -
list   resource.k8s.io               resourceslices            -          -
watch  resource.k8s.io               resourceslices            -          -
create core                          events                    -          default
create events.k8s.io                 events                    -          default
create coordination.k8s.io           leases                    -          karpenter
update coordination.k8s.io           leases                    -          karpenter
create cluster.x-k8s.io              machines                  -          capi-demo
delete cluster.x-k8s.io              machines                  -          capi-demo
patch  cluster.x-k8s.io              machines                  -          capi-demo
watch  cluster.x-k8s.io              machines                  -          -
watch  cluster.x-k8s.io              clusters                  -          -
list   cluster.x-k8s.io              machinedrainrules         -          -
watch  cluster.x-k8s.io              machinedrainrules         -          -
get    core                          namespaces                -          -
list   bootstrap.cluster.x-k8s.io    kubeadmconfigtemplates    -          -
create bootstrap.cluster.x-k8s.io    kubeadmconfigs            -          capi-demo
delete bootstrap.cluster.x-k8s.io    kubeadmconfigs            -          capi-demo
watch  apiextensions.k8s.io          customresourcedefinitions -          -
get    core                          secrets                   -          capi-demo
get    controlplane.cluster.x-k8s.io kubeadmcontrolplanes      -          capi-demo
list   controlplane.cluster.x-k8s.io kubeadmcontrolplanes      -          capi-demo
watch  controlplane.cluster.x-k8s.io kubeadmcontrolplanes      -          capi-demo
";

/// What it must not be allowed (rows as in [`NEEDED`]).
const NOT_NEEDED: &str = "
list     core                            secrets                   -        -
watch    core                            secrets                   -        -
list     core                            secrets                   -        capi-demo
create   core                            secrets                   -        capi-demo
create   core                            nodes                     -        -
get      core                            configmaps                -        default
create   apps                            deployments               -        default
update   cluster.x-k8s.io                machines                  -        capi-demo
create   cluster.x-k8s.io                clusters                  -        capi-demo
delete   cluster.x-k8s.io                clusters                  -        capi-demo
create   cluster.x-k8s.io                machinedeployments        -        capi-demo
create   karpenter.sh                    nodepools                 -        -
delete   karpenter.sh                    nodepools                 -        -
patch    karpenter.sh                    nodeoverlays              -        -
create   karpenter.cluster.x-k8s.io      clusterapinodeclasses     -        -
create   apiextensions.k8s.io            customresourcedefinitions -        -
update   coordination.k8s.io             leases                    -        kube-system
create   rbac.authorization.k8s.io       clusterroles              -        -
escalate rbac.authorization.k8s.io       clusterroles              -        -
update   infrastructure.cluster.x-k8s.io dockermachinetemplates    -        capi-demo
create   infrastructure.cluster.x-k8s.io dockerclusters            -        capi-demo
create   core                            serviceaccounts           token    karpenter
update   metal3.io                       baremetalhosts            -        capi-demo
delete   metal3.io                       baremetalhosts            -        capi-demo
patch    metal3.io                       baremetalhosts            status   capi-demo
";

/// The rows of a table like [`NEEDED`].
fn accesses(table: &'static str) -> Vec<Access> {
    let opt = |v: &'static str| (v != "-").then_some(v);
    table
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&'static str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "row {l:?}");
            let group = if f[1] == "core" { "" } else { f[1] };
            (f[0], group, f[2], opt(f[3]), opt(f[4]))
        })
        .collect()
}

async fn can(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: Option<&str>,
) -> bool {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(SA.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:karpenter".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: subresource.map(Into::into),
                namespace: namespace.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let result = api
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    result.status.is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn deploy_base_applies_and_grants_exactly_what_the_operator_needs() {
    let tb = testbed().await;
    let client = tb.client();
    let yaml = kustomize("deploy/base");
    // Server-side dry run of everything (the namespace must exist for namespaced objects).
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("karpenter".into());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let mut dry = tb.kubectl();
    dry.args(["apply", "--server-side", "--dry-run=server", "-f", "-"]);
    let out = pipe(dry, &yaml);
    assert!(out.0, "dry run failed:\n{}", out.1);
    // Then apply for real (no kubelet runs the Deployment) to check the permissions.
    let mut apply = tb.kubectl();
    apply.args(["apply", "--server-side", "-f", "-"]);
    let out = pipe(apply, &yaml);
    assert!(out.0, "apply failed:\n{}", out.1);

    let allowed = accesses(NEEDED);
    let mut wrong = Vec::new();
    for &(verb, group, resource, sub, ns) in &allowed {
        if !can(&client, verb, group, resource, sub, ns).await {
            wrong.push(format!(
                "denied but needed: {verb} {group}/{resource} {sub:?} in {ns:?}"
            ));
        }
    }
    // Provider kinds arrive through aggregation (controller-manager), so wait for them.
    // Metal3's hosts: read for the inventory, patched for a reboot (annotations).
    for (verb, group, resource) in [
        ("list", INFRASTRUCTURE, "dockermachinetemplates"),
        ("create", INFRASTRUCTURE, "dockermachines"),
        ("watch", INFRASTRUCTURE, "testmachinetemplates"),
        ("delete", INFRASTRUCTURE, "testmachines"),
        ("get", INFRASTRUCTURE, "awsmachinetemplates"),
        ("watch", "metal3.io", "baremetalhosts"),
        ("patch", "metal3.io", "baremetalhosts"),
    ] {
        let client = client.clone();
        let ok = wait_for(
            &format!("aggregated {verb} {resource}"),
            Duration::from_secs(30),
            || {
                let client = client.clone();
                async move {
                    can(&client, verb, group, resource, None, Some("capi-demo"))
                        .await
                        .then_some(())
                }
            },
        )
        .await;
        if ok.is_err() {
            wrong.push(format!("denied but needed: {verb} {group}/{resource}"));
        }
    }
    let denied = accesses(NOT_NEEDED);
    for &(verb, group, resource, sub, ns) in &denied {
        if can(&client, verb, group, resource, sub, ns).await {
            wrong.push(format!(
                "allowed but not needed: {verb} {group}/{resource} {sub:?} in {ns:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
