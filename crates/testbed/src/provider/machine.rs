//! The TestMachine controller: provisioning, the workload Node, deletion; and the KubeadmConfig
//! stand-in.

use api::duration::parse_duration;

use super::*;

/// How often a TestMachine waiting for its Machine's ownerRef or bootstrap data looks again
/// without an event: the Machine watch wakes it when either is written (`spawn_machines`).
const WAITING_RECHECK: Duration = Duration::from_secs(5);

pub(super) fn elapsed_since(ts: Option<&Timestamp>) -> Duration {
    ts.and_then(|t| Duration::try_from(Timestamp::now().duration_since(*t)).ok())
        .unwrap_or(Duration::ZERO)
}

pub(super) fn has_finalizer(obj: &DynamicObject) -> bool {
    obj.finalizers().iter().any(|f| f == FINALIZER)
}

pub(super) async fn set_finalizers(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    finalizers: Vec<String>,
) -> Result<()> {
    // resourceVersion makes this an optimistic update: a concurrent change makes it fail and retry.
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": obj.resource_version()
        }})),
    )
    .await?;
    Ok(())
}

/// The Machine that owns this object (controller ownerRef set by Cluster API).
pub(super) async fn owner_machine(ctx: &Ctx, obj: &DynamicObject) -> Result<Option<DynamicObject>> {
    let Some(owner) = obj.owner_references().iter().find(|o| {
        o.kind == "Machine"
            && o.api_version.starts_with("cluster.x-k8s.io/")
            && o.controller == Some(true)
    }) else {
        return Ok(None);
    };
    let machines = namespaced(ctx, obj, &machine_resource())?;
    Ok(machines.get_opt(&owner.name).await?)
}

pub(super) fn node_name(obj: &DynamicObject) -> String {
    obj.data["status"]["nodeName"]
        .as_str()
        .or_else(|| obj.data["spec"]["nodeName"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| obj.name_any())
}

pub(super) async fn reconcile_machine(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
    let api = namespaced(&ctx, &obj, &test_machine_resource())?;
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let pid = provider_id(&ns, &name);

    if obj.metadata.deletion_timestamp.is_some() {
        if !has_finalizer(&obj) {
            return Ok(Action::await_change());
        }
        delete_node(&ctx.workload_of(&obj).await, &node_name(&obj), &pid).await?;
        if ctx.config.bare_metal_hosts {
            super::hosts::release(&ctx, &obj).await?;
        }
        let rest: Vec<String> = obj
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        set_finalizers(&api, &obj, rest).await?;
        return Ok(Action::await_change());
    }
    if !has_finalizer(&obj) {
        let mut finalizers = obj.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        set_finalizers(&api, &obj, finalizers).await?;
        return Ok(Action::await_change());
    }
    if obj.data["status"]["initialization"]["provisioned"] != true {
        return provision(&api, &ctx, &obj, &pid).await;
    }
    register_node(&api, &ctx, &obj, &pid).await
}

/// Not provisioned yet: fail on request, wait for the Machine and its bootstrap data and the
/// provision delay, then set the providerID and the provisioned status.
async fn provision(
    api: &Api<DynamicObject>,
    ctx: &Ctx,
    obj: &DynamicObject,
    pid: &str,
) -> Result<Action> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let annotations = obj.annotations();
    if let Some(message) = annotations.get(FAIL_ANNOTATION) {
        let message = if message.is_empty() {
            "provisioning failed"
        } else {
            message.as_str()
        };
        return fail(api, obj, message).await;
    }
    let Some(machine) = owner_machine(ctx, obj).await? else {
        let status = json!({"conditions": [condition(obj, "Ready", false, "WaitingForMachine",
            "waiting for a Machine to own this TestMachine")]});
        patch_status(api, obj, status).await?;
        return Ok(Action::requeue(WAITING_RECHECK));
    };
    if !machine.data["spec"]["bootstrap"]["dataSecretName"].is_string() {
        let status = json!({"conditions": [condition(obj, "Ready", false, "WaitingForBootstrapData",
            "waiting for the Machine's spec.bootstrap.dataSecretName")]});
        patch_status(api, obj, status).await?;
        return Ok(Action::requeue(WAITING_RECHECK));
    }
    if ctx.config.bare_metal_hosts
        && obj.data["spec"]["hostSelector"].is_object()
        && !super::hosts::claim(ctx, obj).await?
    {
        return fail(api, obj, super::hosts::NO_HOST_REASON).await;
    }
    let delay = annotations
        .get(PROVISION_DELAY_ANNOTATION)
        .and_then(|d| parse_duration(d))
        .unwrap_or(ctx.config.provision_delay);
    let age = elapsed_since(obj.metadata.creation_timestamp.as_ref().map(|t| &t.0));
    if age < delay {
        let status = json!({"conditions": [condition(obj, "Ready", false, "Provisioning", "instance is being created")]});
        patch_status(api, obj, status).await?;
        return Ok(Action::requeue(delay - age));
    }
    if annotations.contains_key(NO_PROVIDER_ID_ANNOTATION) {
        let status = json!({"conditions": [condition(obj, "Ready", false, "Provisioning",
            "instance is being created (never gets a providerID)")]});
        patch_status(api, obj, status).await?;
        return Ok(Action::await_change());
    }
    if obj.data["spec"]["providerID"].as_str() != Some(pid) {
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": pid}})),
        )
        .await?;
    }
    let node = node_name(obj);
    let mut status = json!({
        "initialization": {"provisioned": true},
        "ready": true,
        "addresses": [
            {"type": "InternalIP", "address": internal_ip(&ns, &name)},
            {"type": "Hostname", "address": node},
        ],
        "conditions": [condition(obj, "Ready", true, "Provisioned", "")]
    });
    if let Some(fd) = machine.data["spec"]["failureDomain"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        status["failureDomain"] = json!(fd);
    }
    patch_status(api, obj, status).await?;
    Ok(Action::requeue(ctx.config.registration_delay))
}

/// Reports a failed provisioning the way providers do (see [`FAIL_ANNOTATION`]).
async fn fail(api: &Api<DynamicObject>, obj: &DynamicObject, message: &str) -> Result<Action> {
    let status = json!({
        "initialization": {"provisioned": false},
        "ready": false,
        "failureReason": DEPRECATED_FAILURE_REASON,
        "failureMessage": message,
        "conditions": [condition(obj, "Ready", false, FAILURE_REASON, message)]
    });
    patch_status(api, obj, status).await?;
    Ok(Action::await_change())
}

/// Provisioned: the "kubelet" registers the Node once.
async fn register_node(
    api: &Api<DynamicObject>,
    ctx: &Ctx,
    obj: &DynamicObject,
    pid: &str,
) -> Result<Action> {
    let name = obj.name_any();
    let annotations = obj.annotations();
    if annotations.contains_key(NO_NODE_ANNOTATION) || obj.data["status"]["nodeName"].is_string() {
        return Ok(Action::await_change());
    }
    let since = obj.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(|t| t.parse::<Timestamp>().ok());
    let waited = elapsed_since(since.as_ref());
    if waited < ctx.config.registration_delay {
        return Ok(Action::requeue(ctx.config.registration_delay - waited));
    }
    let machine = owner_machine(ctx, obj).await?;
    let node = build_node(ctx, obj, machine.as_ref(), pid).await?;
    let workload = ctx.workload_of(obj).await;
    let nodes: Api<Node> = Api::all(workload.clone());
    let node = match nodes.create(&PostParams::default(), &node).await {
        Ok(created) => created,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = nodes.get(&node.name_any()).await?;
            let existing_pid = existing
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref());
            if existing_pid != Some(pid) {
                return Err(Error::Invalid {
                    kind: "TestMachine",
                    name,
                    message: format!(
                        "Node {} exists with providerID {existing_pid:?}",
                        node.name_any()
                    ),
                });
            }
            existing
        }
        Err(e) => return Err(e.into()),
    };
    if ctx.config.storage {
        super::storage::publish_csinode(ctx, &workload, obj, &node).await?;
    }
    super::dra::publish_slices(ctx, &workload, obj, &node).await?;
    patch_status(api, obj, json!({"nodeName": node.name_any()})).await?;
    Ok(Action::await_change())
}

pub(super) fn internal_ip(ns: &str, name: &str) -> String {
    // A stable fake address in 10.200.0.0/16 derived from the object's identity.
    let h = api::hash::fnv1a_32(format!("{ns}/{name}").as_bytes());
    format!("10.200.{}.{}", (h >> 8) & 0xff, (h & 0xff).max(1))
}

pub(super) async fn delete_node(workload: &Client, name: &str, pid: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(workload.clone());
    let Some(node) = nodes.get_opt(name).await? else {
        return Ok(());
    };
    if node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) != Some(pid) {
        return Ok(());
    }
    super::dra::delete_slices(workload, name).await?;
    match nodes.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Labels and taints requested by bootstrap data or the TestMachine spec.
#[derive(Default)]
pub(super) struct Registration {
    labels: BTreeMap<String, String>,
    taints: Vec<Value>,
}

impl Registration {
    pub(super) fn add_labels(&mut self, labels: &Value) {
        if let Some(map) = labels.as_object() {
            for (k, v) in map {
                if let Some(v) = v.as_str() {
                    self.labels.insert(k.clone(), v.to_string());
                }
            }
        }
    }
    pub(super) fn add_label_list(&mut self, list: &str) {
        for pair in list.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            self.labels
                .insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    pub(super) fn add_taints(&mut self, taints: &Value) {
        for t in taints.as_array().into_iter().flatten() {
            let Some(key) = t["key"].as_str() else {
                continue;
            };
            let effect = t["effect"].as_str().unwrap_or("NoSchedule");
            self.taints
                .retain(|x| !(x["key"] == key && x["effect"] == effect));
            let mut taint = json!({"key": key, "effect": effect});
            if let Some(v) = t["value"].as_str() {
                taint["value"] = json!(v);
            }
            self.taints.push(taint);
        }
    }
    /// A KubeadmConfig's join (or init) nodeRegistration: taints and `node-labels`.
    pub(super) fn add_kubeadm(&mut self, config: &Value) {
        for phase in ["initConfiguration", "joinConfiguration"] {
            let reg = &config["spec"][phase]["nodeRegistration"];
            self.add_taints(&reg["taints"]);
            match &reg["kubeletExtraArgs"] {
                // v1beta2: [{name, value}]
                Value::Array(args) => {
                    for a in args.iter().filter(|a| a["name"] == "node-labels") {
                        if let Some(v) = a["value"].as_str() {
                            self.add_label_list(v);
                        }
                    }
                }
                // v1beta1: {name: value}
                Value::Object(args) => {
                    if let Some(v) = args.get("node-labels").and_then(Value::as_str) {
                        self.add_label_list(v);
                    }
                }
                _ => {}
            }
        }
    }
}

pub(super) async fn build_node(
    ctx: &Ctx,
    obj: &DynamicObject,
    machine: Option<&DynamicObject>,
    pid: &str,
) -> Result<Node> {
    let spec = &obj.data["spec"];
    let name = node_name(obj);
    let mut reg = Registration::default();
    let nodeinfo = &spec["nodeInfo"];
    let arch = nodeinfo["architecture"].as_str().unwrap_or("amd64");
    let os = nodeinfo["operatingSystem"].as_str().unwrap_or("linux");
    reg.labels
        .insert("kubernetes.io/hostname".into(), name.clone());
    reg.labels.insert("kubernetes.io/arch".into(), arch.into());
    reg.labels.insert("kubernetes.io/os".into(), os.into());
    let instance_type = spec["instanceType"].as_str().or_else(|| {
        obj.annotations()
            .get(CLONED_FROM_NAME_ANNOTATION)
            .map(String::as_str)
    });
    if let Some(it) = instance_type {
        reg.labels
            .insert("node.kubernetes.io/instance-type".into(), it.into());
    }
    let zone = obj.data["status"]["failureDomain"]
        .as_str()
        .or_else(|| machine.and_then(|m| m.data["spec"]["failureDomain"].as_str()));
    if let Some(zone) = zone.filter(|z| !z.is_empty()) {
        reg.labels
            .insert("topology.kubernetes.io/zone".into(), zone.into());
    }
    if let Some(machine) = machine {
        let ns = machine.namespace().unwrap_or_default();
        let bootstrap = &machine.data["spec"]["bootstrap"];
        if bootstrap["configRef"]["kind"] == "KubeadmConfig" {
            if let Some(cfg_name) = bootstrap["configRef"]["name"].as_str() {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(ctx.mgmt.clone(), &ns, &kubeadm_config_resource());
                if let Some(cfg) = api.get_opt(cfg_name).await? {
                    reg.add_kubeadm(&cfg.data);
                }
            }
        } else if let Some(secret) = bootstrap["dataSecretName"].as_str() {
            let secrets: Api<Secret> = Api::namespaced(ctx.mgmt.clone(), &ns);
            if let Some(s) = secrets.get_opt(secret).await? {
                let value = s.data.as_ref().and_then(|d| d.get("value"));
                if let Some(doc) = value
                    .and_then(|v| std::str::from_utf8(&v.0).ok())
                    .and_then(|text| serde_saphyr::from_str::<Value>(text).ok())
                {
                    reg.add_labels(&doc["nodeLabels"]);
                    reg.add_taints(&doc["nodeTaints"]);
                }
            }
        }
    }
    reg.add_labels(&spec["nodeLabels"]);
    reg.add_taints(&spec["nodeTaints"]);

    let capacity: BTreeMap<String, String> = match spec["capacity"].as_object() {
        Some(c) if !c.is_empty() => c
            .iter()
            .map(|(k, v)| (k.clone(), quantity_string(v)))
            .collect(),
        _ => ctx.config.default_capacity.clone(),
    };
    let mut allocatable = capacity.clone();
    if let Some(a) = spec["allocatable"].as_object() {
        allocatable.extend(a.iter().map(|(k, v)| (k.clone(), quantity_string(v))));
    }
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": reg.labels,
            "annotations": {
                KWOK_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0"
            }
        },
        "spec": {"providerID": pid, "taints": reg.taints},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "nodeInfo": {
                "architecture": arch, "operatingSystem": os,
                "kubeletVersion": machine.and_then(|m| m.data["spec"]["version"].as_str()).unwrap_or("v1.36.3"),
                "kubeProxyVersion": "", "bootID": super::hosts::first_boot_id(&name), "machineID": "", "systemUUID": "",
                "containerRuntimeVersion": "kwok", "kernelVersion": "", "osImage": "testbed"
            },
            "addresses": [{"type": "InternalIP", "address": internal_ip(&obj.namespace().unwrap_or_default(), &obj.name_any())}]
        }
    });
    Ok(serde_json::from_value(node)?)
}

/// Minimal kubeadm bootstrap stand-in: writes a data Secret in the test bootstrap format
/// and reports `status.initialization.dataSecretCreated` / `status.dataSecretName`.
pub(super) async fn reconcile_kubeadm_config(
    obj: Arc<DynamicObject>,
    ctx: Arc<Ctx>,
) -> Result<Action> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api = namespaced(&ctx, &obj, &kubeadm_config_resource())?;
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let mut reg = Registration::default();
    reg.add_kubeadm(&obj.data);
    let value =
        serde_json::to_string(&json!({"nodeLabels": reg.labels, "nodeTaints": reg.taints}))?;
    let mut labels = BTreeMap::new();
    if let Some(cluster) = obj.labels().get(CLUSTER_NAME_LABEL) {
        labels.insert(CLUSTER_NAME_LABEL.to_string(), cluster.clone());
    }
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": name, "namespace": ns, "labels": labels,
            "ownerReferences": [{
                "apiVersion": format!("bootstrap.cluster.x-k8s.io/{VERSION}"), "kind": "KubeadmConfig",
                "name": name, "uid": obj.metadata.uid.clone().unwrap_or_default(), "controller": true
            }]
        },
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": value, "format": "testbed"}
    }))?;
    let secrets: Api<Secret> = Api::namespaced(ctx.mgmt.clone(), &ns);
    secrets
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    let status = json!({
        "initialization": {"dataSecretCreated": true},
        "ready": true,
        "dataSecretName": name,
        "conditions": [condition(&obj, "Ready", true, "DataSecretAvailable", "")]
    });
    patch_status(&api, &obj, status).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeadm_registration_is_read() {
        let mut reg = Registration::default();
        reg.add_kubeadm(&json!({"spec": {"joinConfiguration": {"nodeRegistration": {
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
            "kubeletExtraArgs": [{"name": "node-labels", "value": "a=b,c=d"}]
        }}}}));
        assert_eq!(reg.labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(reg.labels.get("c").map(String::as_str), Some("d"));
        assert_eq!(
            reg.taints,
            vec![json!({"key": "karpenter.sh/unregistered", "effect": "NoExecute"})]
        );
    }
}
