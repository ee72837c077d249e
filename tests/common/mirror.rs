//! A local copy of one namespace's pods and of the NodeClaims, kept by watches: a test that
//! follows a move sees every change, one at a time, in the order each kind changed, without
//! polling (nothing sleeps, no transition falls between two samples).

use std::collections::BTreeMap;
use std::time::Instant;

use futures::stream::{self, BoxStream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};

use super::nodeclaims;

/// One event of either watch.
enum Change {
    Pod(Box<Event<Pod>>),
    Claim(Box<Event<DynamicObject>>),
}

/// The objects of one kind, and the list being received while its watch (re)starts.
struct Listed<K> {
    objects: BTreeMap<String, K>,
    listing: Option<BTreeMap<String, K>>,
    synced: bool,
}

impl<K: ResourceExt> Listed<K> {
    fn new() -> Self {
        Listed {
            objects: BTreeMap::new(),
            listing: None,
            synced: false,
        }
    }

    fn apply(&mut self, e: Event<K>) {
        match e {
            Event::Apply(o) => {
                self.objects.insert(o.name_any(), o);
            }
            Event::Delete(o) => {
                self.objects.remove(&o.name_any());
            }
            Event::Init => self.listing = Some(BTreeMap::new()),
            Event::InitApply(o) => {
                if let Some(l) = self.listing.as_mut() {
                    l.insert(o.name_any(), o);
                }
            }
            Event::InitDone => {
                if let Some(l) = self.listing.take() {
                    self.objects = l;
                }
                self.synced = true;
            }
        }
    }
}

/// The pods of a namespace and every NodeClaim, as the watches last said.
pub struct Mirror {
    pods: Listed<Pod>,
    claims: Listed<DynamicObject>,
    changes: BoxStream<'static, Change>,
}

impl Mirror {
    /// Starts the watches of the pods in `ns` and of the NodeClaims; returns once both have
    /// listed what exists.
    pub async fn start(client: &Client, ns: &str) -> Mirror {
        let pods = watcher::watcher(
            Api::<Pod>::namespaced(client.clone(), ns),
            watcher::Config::default(),
        )
        .default_backoff()
        .filter_map(|e| async { e.ok().map(|e| Change::Pod(Box::new(e))) });
        let claims = watcher::watcher(nodeclaims(client), watcher::Config::default())
            .default_backoff()
            .filter_map(|e| async { e.ok().map(|e| Change::Claim(Box::new(e))) });
        let mut m = Mirror {
            pods: Listed::new(),
            claims: Listed::new(),
            changes: stream::select(pods, claims).boxed(),
        };
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        while !(m.pods.synced && m.claims.synced) {
            m.next(deadline)
                .await
                .expect("the pod and NodeClaim watches list");
        }
        m
    }

    /// Waits for the next change (at most until `deadline`) and applies it.
    pub async fn next(&mut self, deadline: Instant) -> Result<(), String> {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, self.changes.next()).await {
            Ok(Some(Change::Pod(e))) => self.pods.apply(*e),
            Ok(Some(Change::Claim(e))) => self.claims.apply(*e),
            Ok(None) => return Err("the watches ended".into()),
            Err(_) => return Err("no change before the deadline".into()),
        }
        Ok(())
    }

    /// The pods of the namespace.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.objects.values()
    }

    /// The pods labelled `app=<app>`.
    pub fn pods_of<'a>(&'a self, app: &'a str) -> impl Iterator<Item = &'a Pod> {
        self.pods()
            .filter(move |p| p.labels().get("app").map(String::as_str) == Some(app))
    }

    /// Every NodeClaim.
    pub fn claims(&self) -> impl Iterator<Item = &DynamicObject> {
        self.claims.objects.values()
    }
}
