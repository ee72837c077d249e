//! The kwok provider's parts of an engagement (`karpenter-capi run --provider kwok`): the
//! provider over the instance types, NodePool status's view of KWOKNodeClasses (from a watch
//! of them), no offering changes (every kwok offering is always available) and no loops of
//! its own.

use std::sync::Arc;

use karpenter_core::cache::{Cache, Caches};
use karpenter_core::engagement::ProviderFactory;
use karpenter_core::engagement::ProviderParts;
use karpenter_core::events::Recorder;
use karpenter_core::nodepool_status::{NodeClassLookup, NodeClassReadiness};
use karpenter_core::tasks::Tasks;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::instance_types::InstanceType;
use crate::nodeclass::{self, KWOKNodeClass};
use crate::provider::KwokCloudProvider;

/// The factory the operator builds this provider with, over `types`.
pub fn factory(types: Vec<InstanceType>) -> ProviderFactory {
    let types = Arc::new(types);
    ProviderFactory {
        name: "kwok",
        build: Arc::new(move |tasks, client, caches, recorder| {
            parts(tasks, client, caches, recorder, types.as_ref().clone())
        }),
    }
}

/// The parts of one engagement: its KWOKNodeClass watch runs on `tasks`; the provider reads
/// Nodes and KWOKNodeClasses from the caches.
pub fn parts(
    tasks: &mut Tasks,
    client: &Client,
    caches: &Caches,
    _recorder: Recorder,
    types: Vec<InstanceType>,
) -> ProviderParts {
    let nodeclasses: Cache<KWOKNodeClass> = Cache::start(
        tasks,
        Api::all(client.clone()),
        watcher::Config::default(),
        karpenter_core::trim::keep,
        None,
    );
    ProviderParts {
        provider: Arc::new(
            KwokCloudProvider::new(client.clone(), types)
                .reading(caches.nodes.store(), nodeclasses.store()),
        ),
        nodeclasses: readiness_lookup(nodeclasses.store()),
        offering_changes: Default::default(),
        gauges: None,
        loops: Vec::new(),
    }
}

/// NodePool status's view of the KWOKNodeClasses in `store` (another kind: not found).
pub fn readiness_lookup(store: Store<KWOKNodeClass>) -> NodeClassLookup {
    Arc::new(move |group: &str, kind: &str, name: &str| {
        if group != nodeclass::GROUP || kind != nodeclass::KIND {
            return None;
        }
        let nc = store.get(&ObjectRef::new(name))?;
        Some(NodeClassReadiness {
            generation: nc.metadata.generation,
            conditions: nc
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
        })
    })
}
