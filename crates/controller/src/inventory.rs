//! Host inventory at run time: the watches of host kinds (e.g. Metal3 BareMetalHosts) and
//! the count each template has left of them ([`templates::inventory`] states the rules).
//!
//! - A host kind is watched only once a NodeClass's `spec.inventory` names it
//!   ([`Inventory::tallies`] starts the watch the first time it meets the kind); a preset
//!   knows its plural, an explicit kind is looked up by discovery (retried until served).
//! - Until a kind's first list has completed, its templates count zero: nothing is launched
//!   from an inventory not read yet (the list's arrival is a change: the pending pods are
//!   planned again).
//! - Every host event bumps [`Hosts::subscribe`]'s counter: the provisioner plans the
//!   pending pods again and the NodeClass status is rewritten, so a freed host offers its
//!   template at once (no TTL).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::ClusterAPINodeClass;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use templates::inventory::{HostQuery, HostTally, selector_of, tally};
use tokio::sync::watch;

use crate::catalogs::Catalogs;

/// A template as counts key it: namespace and name.
pub type TemplateKey = (String, String);

/// Each inventoried template's hosts.
pub type Tallies = HashMap<TemplateKey, HostTally>;

struct Watched {
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
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
        let key = (query.api_version.clone(), query.kind.clone());
        let mut watched = self.inner.watched.lock().unwrap_or_else(|p| p.into_inner());
        let w = watched
            .entry(key)
            .or_insert_with(|| self.start(query.clone()));
        w.synced.load(Ordering::Acquire).then(|| w.store.clone())
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
        let client = self.inner.client.clone();
        let changed = self.inner.changed.clone();
        let flag = synced.clone();
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
                        tracing::debug!(kind = %query.kind, error = %e, "host kind not served yet");
                        tokio::time::sleep(DISCOVERY_RETRY).await;
                    }
                }
            };
            let api: Api<DynamicObject> = Api::all_with(client, &ar);
            let events = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(crate::cache::strip_metadata)
                .reflect(writer);
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => flag.store(true, Ordering::Release),
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(kind = %query.kind, error = %e, "host watch error (retrying)");
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
    pub fn forgive_freed(
        &self,
        seen: &mut HashMap<TemplateKey, u32>,
        unavailable: &crate::unavailable::UnavailableOfferings,
    ) {
        let freed = freed(seen, &self.tallies());
        if freed.is_empty() {
            return;
        }
        tracing::debug!(templates = ?freed, "hosts freed: launch backoff ended");
        unavailable.forgive(|k| {
            freed.iter().any(|(ns, name)| {
                k.template.namespace.as_deref().unwrap_or_default() == ns
                    && &k.template.name == name
            })
        });
    }

    /// The counter of host changes (`None` without an inventory).
    pub fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        self.0.as_ref().map(|i| i.hosts.subscribe())
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
            let Some(catalog) = inner.catalogs.catalog(name) else {
                continue;
            };
            let hosts = inner.hosts.store(&query).map(|s| s.state());
            for it in &catalog.instance_types {
                for t in &it.templates {
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
                    let group = t.api_version.rsplit_once('/').map_or("", |(g, _)| g);
                    let Some(obj) = inner.catalogs.template(group, &t.kind, &ns, &t.name) else {
                        continue;
                    };
                    let counted = match selector_of(&obj, &query) {
                        Ok(sel) => tally(&query, &sel, &ns, hosts.iter().map(|h| h.as_ref())),
                        Err(e) => {
                            tracing::warn!(template = %t, error = %e, "host selector unreadable; no host matches");
                            empty
                        }
                    };
                    out.insert(key, counted);
                }
            }
        }
        out
    }
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
        use crate::unavailable::{OfferingKey, UnavailableOfferings};
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
