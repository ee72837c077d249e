//! The control planes the engagement's Clusters refer to, watched: one reflector per
//! control-plane kind and namespace, started the first time a Cluster of that namespace
//! needs its control plane read (until its first list, that read is a GET). Each change is
//! broadcast ([`ControlPlanes::subscribe`]) so that the provider's `changes` bring back the
//! NodeClaims planned on a Cluster of that control plane: a launch held by a preflight check
//! goes the moment the control plane settles, and version drift is judged again. The
//! watches stop when the engagement's context is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use tokio::sync::broadcast;

/// A control plane object: namespace, kind, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ControlPlaneKey {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

struct Watched {
    store: Store<DynamicObject>,
    listed: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// The watched control planes (see the module).
pub struct ControlPlanes {
    /// By `apiVersion/kind` and namespace.
    watched: Mutex<HashMap<(String, String), Watched>>,
    changes: broadcast::Sender<ControlPlaneKey>,
}

impl Default for ControlPlanes {
    fn default() -> Self {
        ControlPlanes {
            watched: Mutex::default(),
            changes: broadcast::channel(256).0,
        }
    }
}

impl std::fmt::Debug for ControlPlanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlanes").finish_non_exhaustive()
    }
}

impl Drop for ControlPlanes {
    fn drop(&mut self) {
        let watched = self.watched.get_mut().unwrap_or_else(|p| p.into_inner());
        for w in watched.values() {
            w.task.abort();
        }
    }
}

impl ControlPlanes {
    /// Every change of a watched control plane (a lagging receiver skips what it missed).
    pub fn subscribe(&self) -> broadcast::Receiver<ControlPlaneKey> {
        self.changes.subscribe()
    }

    /// Control plane `name` of `ar` in `namespace`: from the watch once it has listed, else
    /// read (and the watch started). `None`: it does not exist.
    pub async fn get(
        &self,
        client: &Client,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<DynamicObject>>, kube::Error> {
        let key = (
            format!("{}/{}", ar.api_version, ar.kind),
            namespace.to_string(),
        );
        {
            let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
            match watched.get(&key) {
                Some(w) if w.listed.load(Ordering::Acquire) => {
                    return Ok(w
                        .store
                        .get(&ObjectRef::new_with(name, ar.clone()).within(namespace)));
                }
                Some(_) => {}
                None => {
                    let w = self.watch(client, ar, namespace);
                    watched.insert(key, w);
                }
            }
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, ar);
        Ok(api.get_opt(name).await?.map(Arc::new))
    }

    fn watch(&self, client: &Client, ar: &ApiResource, namespace: &str) -> Watched {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, ar);
        let writer = Writer::new(ar.clone());
        let store = writer.as_reader();
        let listed = Arc::new(AtomicBool::new(false));
        let (flag, changes) = (listed.clone(), self.changes.clone());
        let (kind, ns) = (ar.kind.clone(), namespace.to_string());
        tracing::info!(kind, namespace = ns, "watching control planes");
        let task = tokio::spawn(async move {
            let events = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer);
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let obj = match event {
                    Ok(Event::InitDone) => {
                        flag.store(true, Ordering::Release);
                        continue;
                    }
                    Ok(Event::Apply(o) | Event::Delete(o) | Event::InitApply(o)) => o,
                    Ok(Event::Init) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, kind, "control plane watch error (retrying)");
                        continue;
                    }
                };
                let key = ControlPlaneKey {
                    namespace: ns.clone(),
                    kind: kind.clone(),
                    name: obj.metadata.name.clone().unwrap_or_default(),
                };
                // No receiver (nothing launching yet) is fine.
                let _ = changes.send(key);
            }
        });
        Watched {
            store,
            listed,
            task,
        }
    }
}
