//! Host inventory at run time: the watches of host kinds (e.g. Metal3 BareMetalHosts) and
//! the count each template has left of them ([`templates::inventory`] states the rules).
//!
//! - A host kind is watched only once a NodeClass's `spec.inventory` names it
//!   ([`Inventory::tallies`] starts the watch the first time it meets the kind); a preset
//!   knows its plural, an explicit kind is looked up by discovery (retried until served).
//! - Until a kind's first list has completed, its templates count zero: nothing is launched
//!   from an inventory not read yet (the list's arrival is a change: the pending pods are
//!   planned again).
//! - A kind that cannot be read — not served, RBAC forbids it, the list fails — is a
//!   [`HostProblem`] (logged once as a warning, the watch keeps retrying); it and a template
//!   whose host selector cannot be read are the NodeClass's `InventoryReady` condition
//!   ([`Inventory::condition`]), so "0 available" is never the only sign.
//! - Every host event bumps [`Hosts::subscribe`]'s counter: the provisioner plans the
//!   pending pods again and the NodeClass status is rewritten, so a freed host offers its
//!   template at once (no TTL).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clusterapi_api::ClusterAPINodeClass;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use templates::inventory::{HostQuery, HostTally, selector_of, tally};
use templates::model::TemplateRef;
use templates::status::ConditionValue;
use tokio::sync::watch;

use crate::catalogs::Catalogs;

/// A template as counts key it: namespace and name.
pub type TemplateKey = (String, String);

/// Each inventoried template's hosts.
pub type Tallies = HashMap<TemplateKey, HostTally>;

struct Watched {
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
    /// Why the kind cannot be read now (cleared by the next successful event).
    problem: Arc<Mutex<Option<HostProblem>>>,
    task: tokio::task::AbortHandle,
}

/// Why a host kind's hosts cannot be read (its watch keeps retrying).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostProblem {
    /// Discovery or the list says the API server does not serve the kind.
    NotServed(String),
    /// The operator may not list or watch it (RBAC).
    Forbidden(String),
    /// Any other error listing or watching it.
    Failed(String),
}

impl HostProblem {
    fn of(e: &kube::Error) -> HostProblem {
        match e {
            kube::Error::Api(s) => Self::of_status(s.code, Self::said(s)),
            kube::Error::Discovery(_) => HostProblem::NotServed(e.to_string()),
            other => HostProblem::Failed(other.to_string()),
        }
    }

    fn of_status(code: u16, message: String) -> HostProblem {
        match code {
            404 => HostProblem::NotServed(message),
            401 | 403 => HostProblem::Forbidden(message),
            _ => HostProblem::Failed(message),
        }
    }

    fn of_watch(e: &watcher::Error) -> HostProblem {
        match e {
            watcher::Error::InitialListFailed(k)
            | watcher::Error::WatchStartFailed(k)
            | watcher::Error::WatchFailed(k) => Self::of(k),
            watcher::Error::WatchError(s) => Self::of_status(s.code, Self::said(s)),
            other => HostProblem::Failed(other.to_string()),
        }
    }

    /// What the API server said (its message, not the error's debug form).
    fn said(s: &kube::core::Status) -> String {
        match s.message.trim() {
            "" => format!("HTTP {}", s.code),
            m if m.starts_with(&s.code.to_string()) => m.to_string(),
            m => format!("HTTP {}: {m}", s.code),
        }
    }

    /// The `InventoryReady` reason.
    pub fn reason(&self) -> &'static str {
        use api::consts::reasons;
        match self {
            HostProblem::NotServed(_) => reasons::HOST_KIND_NOT_SERVED,
            HostProblem::Forbidden(_) => reasons::HOSTS_FORBIDDEN,
            HostProblem::Failed(_) => reasons::HOSTS_UNREADABLE,
        }
    }

    /// What it says, for `kind` (`BareMetalHost (metal3.io/v1alpha1)`).
    pub fn describe(&self, kind: &str) -> String {
        match self {
            HostProblem::NotServed(e) => {
                format!("the API server does not serve {kind}: {e}; no template counts a host")
            }
            HostProblem::Forbidden(e) => format!(
                "the operator may not list and watch {kind} (RBAC): {e}; no template counts a host"
            ),
            HostProblem::Failed(e) => {
                format!("listing {kind} fails: {e}; no template counts a host")
            }
        }
    }
}

/// Where a host kind's watch stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostsState {
    /// Listed: its hosts are counted.
    Listed,
    /// Its first list has not completed yet.
    NotListed,
    /// It cannot be read.
    Problem(HostProblem),
}

struct HostsInner {
    client: kube::Client,
    /// By (apiVersion, kind).
    watched: Mutex<HashMap<(String, String), Watched>>,
    changed: watch::Sender<u64>,
}

impl Drop for HostsInner {
    fn drop(&mut self) {
        let watched = self.watched.get_mut().unwrap_or_else(|p| p.into_inner());
        for w in watched.values() {
            w.task.abort();
        }
    }
}

/// The watched host kinds of the management cluster.
#[derive(Clone)]
pub struct Hosts {
    inner: Arc<HostsInner>,
}

/// How long an explicit host kind that is not served is looked up again after.
const DISCOVERY_RETRY: Duration = Duration::from_secs(10);

impl Hosts {
    pub fn new(client: kube::Client) -> Hosts {
        Hosts {
            inner: Arc::new(HostsInner {
                client,
                watched: Mutex::default(),
                changed: watch::Sender::new(0),
            }),
        }
    }

    /// A counter bumped on every host event (and when a kind's first list completes).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// The hosts of `query`'s kind, once listed; starts the watch the first time.
    pub fn store(&self, query: &HostQuery) -> Option<Store<DynamicObject>> {
        self.with(query, |w| {
            w.synced.load(Ordering::Acquire).then(|| w.store.clone())
        })
    }

    /// The hosts of kind `api_version` + `kind` if a NodeClass's inventory already watches
    /// it and its first list has completed; never starts a watch.
    pub fn listed(&self, api_version: &str, kind: &str) -> Option<Store<DynamicObject>> {
        let watched = self.inner.watched.lock().unwrap_or_else(|p| p.into_inner());
        let w = watched.get(&(api_version.to_string(), kind.to_string()))?;
        w.synced.load(Ordering::Acquire).then(|| w.store.clone())
    }

    /// Where `query`'s kind stands; starts the watch the first time. A problem wins over a
    /// completed list (a watch that lost its access after listing).
    pub fn state(&self, query: &HostQuery) -> HostsState {
        self.with(query, |w| {
            let problem = w.problem.lock().unwrap_or_else(|p| p.into_inner()).clone();
            match problem {
                Some(p) => HostsState::Problem(p),
                None if w.synced.load(Ordering::Acquire) => HostsState::Listed,
                None => HostsState::NotListed,
            }
        })
    }

    fn with<T>(&self, query: &HostQuery, f: impl FnOnce(&Watched) -> T) -> T {
        let key = (query.api_version.clone(), query.kind.clone());
        let mut watched = self.inner.watched.lock().unwrap_or_else(|p| p.into_inner());
        f(watched
            .entry(key)
            .or_insert_with(|| self.start(query.clone())))
    }

    fn start(&self, query: HostQuery) -> Watched {
        let (group, version) = match query.api_version.rsplit_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), query.api_version.clone()),
        };
        let gvk = GroupVersionKind::gvk(&group, &version, &query.kind);
        let dyntype = match &query.plural {
            Some(p) => ApiResource::from_gvk_with_plural(&gvk, p),
            None => ApiResource::from_gvk(&gvk),
        };
        let writer = reflector::store::Writer::<DynamicObject>::new(dyntype);
        let store = writer.as_reader();
        let synced = Arc::new(AtomicBool::new(false));
        let problem: Arc<Mutex<Option<HostProblem>>> = Arc::default();
        let client = self.inner.client.clone();
        let changed = self.inner.changed.clone();
        let flag = synced.clone();
        let report = {
            let (problem, changed, kind) = (problem.clone(), changed.clone(), query.kind.clone());
            // A change of problem is a change: the NodeClass status says it at once.
            move |now: Option<HostProblem>| {
                let mut p = problem.lock().unwrap_or_else(|p| p.into_inner());
                if *p == now {
                    return;
                }
                match &now {
                    Some(e) => {
                        tracing::warn!(%kind, reason = e.reason(), "host kind cannot be read (retrying): {}", e.describe(&kind))
                    }
                    None => tracing::info!(%kind, "host kind read again"),
                }
                *p = now;
                changed.send_modify(|n| *n = n.wrapping_add(1));
            }
        };
        let task = tokio::spawn(async move {
            let ar = loop {
                if query.plural.is_some() {
                    break ApiResource::from_gvk_with_plural(
                        &gvk,
                        query.plural.as_deref().unwrap_or_default(),
                    );
                }
                match kube::discovery::pinned_kind(&client, &gvk).await {
                    Ok((ar, _)) => break ar,
                    Err(e) => {
                        report(Some(HostProblem::of(&e)));
                        tokio::time::sleep(DISCOVERY_RETRY).await;
                    }
                }
            };
            let api: Api<DynamicObject> = Api::all_with(client, &ar);
            let events = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(karpenter_core::cache::strip_metadata)
                .reflect(writer);
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        report(None);
                        flag.store(true, Ordering::Release);
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                    Ok(_) => report(None),
                    Err(e) => {
                        report(Some(HostProblem::of_watch(&e)));
                        continue;
                    }
                }
                changed.send_modify(|n| *n = n.wrapping_add(1));
            }
        })
        .abort_handle();
        Watched {
            store,
            synced,
            problem,
            task,
        }
    }
}

/// The templates with more free hosts than `seen` recorded (a host was freed or added),
/// `seen` updated to `tallies`.
pub fn freed(seen: &mut HashMap<TemplateKey, u32>, tallies: &Tallies) -> Vec<TemplateKey> {
    let mut out = Vec::new();
    for (key, t) in tallies {
        let free = t.free_in(None);
        if seen
            .insert(key.clone(), free)
            .is_some_and(|before| free > before)
        {
            out.push(key.clone());
        }
    }
    seen.retain(|k, _| tallies.contains_key(k));
    out
}

struct InventoryInner {
    hosts: Hosts,
    nodeclasses: Store<ClusterAPINodeClass>,
    catalogs: Arc<dyn Catalogs>,
}

/// The host inventory of an engagement's NodeClasses; `Default` has none (every count
/// unbounded by hosts).
#[derive(Clone, Default)]
pub struct Inventory(Option<Arc<InventoryInner>>);

impl Inventory {
    pub fn new(
        hosts: Hosts,
        nodeclasses: Store<ClusterAPINodeClass>,
        catalogs: Arc<dyn Catalogs>,
    ) -> Inventory {
        Inventory(Some(Arc::new(InventoryInner {
            hosts,
            nodeclasses,
            catalogs,
        })))
    }

    /// After a host change: ends the launch backoff of the templates a host was freed for
    /// (`seen`: the free hosts per template at the last change).
    pub(crate) fn forgive_freed(
        &self,
        seen: &mut HashMap<TemplateKey, u32>,
        unavailable: &super::unavailable::UnavailableOfferings,
    ) {
        let freed = freed(seen, &self.tallies());
        if freed.is_empty() {
            return;
        }
        let names: Vec<String> = freed
            .iter()
            .map(|(ns, name)| format!("{ns}/{name}"))
            .collect();
        tracing::debug!(templates = %names.join(", "), "hosts freed: launch backoff ended");
        unavailable.forgive(|k| {
            freed.iter().any(|(ns, name)| {
                k.template.namespace.as_deref().unwrap_or_default() == ns
                    && &k.template.name == name
            })
        });
    }

    /// The cached hosts of resource `ar`, when an inventory already watches and has listed
    /// them (no watch is started).
    pub fn listed_hosts(&self, ar: &ApiResource) -> Option<Store<DynamicObject>> {
        self.0.as_ref()?.hosts.listed(&ar.api_version, &ar.kind)
    }

    /// The counter of host changes (`None` without an inventory).
    pub fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        self.0.as_ref().map(|i| i.hosts.subscribe())
    }

    /// NodeClass `nc`'s `InventoryReady` condition: `None` without an inventory. False (and
    /// why) when its host kind cannot be read, or a template's host selector cannot be (that
    /// template counts no host; the others are counted); Unknown until the first list.
    pub fn condition(&self, nc: &ClusterAPINodeClass) -> Option<ConditionValue> {
        use api::consts::reasons;
        let inner = self.0.as_ref()?;
        let query = nc.spec.inventory.as_ref().and_then(HostQuery::of)?;
        let kind = format!("{} ({})", query.kind, query.api_version);
        let (status, reason, message) = match inner.hosts.state(&query) {
            HostsState::Problem(p) => ("False", p.reason(), p.describe(&kind)),
            HostsState::NotListed => (
                "Unknown",
                reasons::HOSTS_NOT_LISTED,
                format!("waiting for the first list of {kind}: no template counts a host yet"),
            ),
            HostsState::Listed => {
                let name = nc.metadata.name.as_deref().unwrap_or_default();
                let unreadable: Vec<String> = templates_of(inner, name)
                    .into_iter()
                    .filter_map(|(t, obj)| {
                        let e = selector_of(obj?.as_ref(), &query).err()?;
                        Some(format!("{t}: {e}"))
                    })
                    .collect();
                if unreadable.is_empty() {
                    (
                        "True",
                        reasons::HOSTS_COUNTED,
                        format!("the hosts of {kind} are counted"),
                    )
                } else {
                    (
                        "False",
                        reasons::HOST_SELECTOR_INVALID,
                        format!(
                            "host selector unreadable, the template matches no host: {} (the other templates are counted)",
                            unreadable.join("; ")
                        ),
                    )
                }
            }
        };
        Some(ConditionValue {
            type_: api::consts::conditions::INVENTORY_READY,
            status,
            reason,
            message,
        })
    }

    /// The hosts of every template of every NodeClass with an inventory, now. A template
    /// whose host kind is not listed yet counts none; one whose selector cannot be read
    /// matches none (logged).
    pub fn tallies(&self) -> Tallies {
        let mut out = Tallies::new();
        let Some(inner) = &self.0 else {
            return out;
        };
        let mut nodeclasses = inner.nodeclasses.state();
        nodeclasses.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for nc in nodeclasses {
            let Some(query) = nc.spec.inventory.as_ref().and_then(HostQuery::of) else {
                continue;
            };
            let name = nc.metadata.name.as_deref().unwrap_or_default();
            let hosts = inner.hosts.store(&query).map(|s| s.state());
            for (t, obj) in templates_of(inner, name) {
                let ns = t.namespace.clone().unwrap_or_default();
                let key = (ns.clone(), t.name.clone());
                if out.contains_key(&key) {
                    continue;
                }
                let empty = HostTally::none(query.zone_label.is_some());
                let Some(hosts) = &hosts else {
                    out.insert(key, empty);
                    continue;
                };
                let Some(obj) = obj else {
                    continue;
                };
                // An unreadable selector matches none (the NodeClass's InventoryReady says so).
                let counted = match selector_of(&obj, &query) {
                    Ok(sel) => tally(&query, &sel, &ns, hosts.iter().map(|h| h.as_ref())),
                    Err(_) => empty,
                };
                out.insert(key, counted);
            }
        }
        out
    }
}

/// The distinct templates of NodeClass `nodeclass`'s catalog (none without one), each with
/// its cached object (`None`: not cached).
fn templates_of(
    inner: &InventoryInner,
    nodeclass: &str,
) -> Vec<(TemplateRef, Option<Arc<DynamicObject>>)> {
    let Some(catalog) = inner.catalogs.catalog(nodeclass) else {
        return Vec::new();
    };
    let mut seen = std::collections::HashSet::new();
    catalog
        .instance_types
        .iter()
        .flat_map(|it| it.offerings.iter().map(templates::model::launched_from))
        .filter(|t| seen.insert(t.clone()))
        .map(|t| {
            let ns = t.namespace.as_deref().unwrap_or_default();
            let obj = inner.catalogs.template(t.group(), &t.kind, ns, &t.name);
            (t, obj)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use templates::inventory::HostSelector;

    fn tally_of(free: u32, taken: u32) -> HostTally {
        let q = HostQuery::of(&serde_json::from_value(json!({"preset": "Metal3"})).expect("inv"))
            .expect("query");
        let host = |i: u32, consumer: Option<&str>| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                "metadata": {"name": format!("h{i}"), "namespace": "capi"},
                "spec": {"consumerRef": consumer.map(|c| json!({"name": c}))},
                "status": {"provisioning": {"state": if consumer.is_some() {"provisioned"} else {"available"}}}}))
            .expect("host")
        };
        let hosts: Vec<DynamicObject> = (0..free)
            .map(|i| host(i, None))
            .chain((0..taken).map(|i| host(100 + i, Some("m"))))
            .collect();
        tally(&q, &HostSelector::default(), "capi", &hosts)
    }

    /// Each cause of an unreadable host kind has its own reason; a watch error is read
    /// through to the API server's code.
    #[test]
    fn a_host_kind_that_cannot_be_read_has_one_reason_per_cause() {
        let api = |code: u16, reason: &str| {
            kube::Error::Api(
                kube::core::Status::failure("refused", reason)
                    .with_code(code)
                    .boxed(),
            )
        };
        let reason = |e: &kube::Error| HostProblem::of(e).reason();
        assert_eq!(reason(&api(404, "NotFound")), "HostKindNotServed");
        assert_eq!(reason(&api(403, "Forbidden")), "HostsForbidden");
        assert_eq!(reason(&api(401, "Unauthorized")), "HostsForbidden");
        assert_eq!(reason(&api(500, "InternalError")), "HostsUnreadable");
        let missing =
            kube::Error::Discovery(kube::error::DiscoveryError::MissingKind("Widget".into()));
        assert_eq!(reason(&missing), "HostKindNotServed");
        let listed = watcher::Error::InitialListFailed(api(403, "Forbidden"));
        let p = HostProblem::of_watch(&listed);
        assert_eq!(p.reason(), "HostsForbidden");
        let said = p.describe("BareMetalHost (metal3.io/v1alpha1)");
        assert!(
            said.starts_with(
                "the operator may not list and watch BareMetalHost (metal3.io/v1alpha1) (RBAC): "
            ) && said.ends_with("; no template counts a host"),
            "{said}"
        );
        assert_eq!(
            HostProblem::of(&api(404, "Failed to parse error data")),
            HostProblem::NotServed("HTTP 404: refused".into()),
            "the API server's words, never the error's debug form"
        );
        let during = watcher::Error::WatchError(
            kube::core::Status::failure("gone", "NotFound")
                .with_code(404)
                .boxed(),
        );
        assert_eq!(HostProblem::of_watch(&during).reason(), "HostKindNotServed");
    }

    #[test]
    fn a_freed_or_added_host_is_noticed_once() {
        let key = ("capi".to_string(), "metal".to_string());
        let mut seen = HashMap::new();
        let at = |free, taken| Tallies::from([(key.clone(), tally_of(free, taken))]);
        assert!(
            freed(&mut seen, &at(0, 3)).is_empty(),
            "first look: nothing freed"
        );
        assert!(freed(&mut seen, &at(0, 3)).is_empty());
        assert_eq!(
            freed(&mut seen, &at(1, 2)),
            std::slice::from_ref(&key),
            "a host released"
        );
        assert!(freed(&mut seen, &at(1, 2)).is_empty(), "noticed once");
        assert!(freed(&mut seen, &at(0, 3)).is_empty(), "taken again");
        assert_eq!(
            freed(&mut seen, &at(1, 3)),
            std::slice::from_ref(&key),
            "a host added"
        );
        assert!(freed(&mut seen, &Tallies::new()).is_empty());
        assert!(seen.is_empty(), "a template gone is forgotten");
    }

    #[test]
    fn forgiving_ends_only_the_freed_templates_backoff() {
        use super::super::unavailable::{OfferingKey, UnavailableOfferings};
        let key = |name: &str| OfferingKey {
            template: templates::model::TemplateRef {
                api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
                kind: "Metal3MachineTemplate".into(),
                namespace: Some("capi".into()),
                name: name.into(),
            },
            zone: None,
            capacity_type: "on-demand".into(),
        };
        let u = UnavailableOfferings::default();
        let now = std::time::Instant::now();
        u.mark(key("metal"), "no host", now);
        u.mark(key("other"), "no host", now);
        let freed = [("capi".to_string(), "metal".to_string())];
        u.forgive(|k| {
            freed.iter().any(|(ns, n)| {
                k.template.namespace.as_deref() == Some(ns.as_str()) && &k.template.name == n
            })
        });
        assert!(
            !u.is_unavailable(&key("metal"), now),
            "freed: offered again at once"
        );
        assert!(u.is_unavailable(&key("other"), now));
    }
}
