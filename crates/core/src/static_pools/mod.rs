//! Static NodePools (`spec.replicas` set, Karpenter's static capacity): a loop that keeps
//! exactly `replicas` NodeClaims per static pool, within `limits.nodes`. What it decides is
//! [`scale::plan`] (pure); the NodeClaim it creates is [`template::claim`] (the pool's
//! template, every compatible instance type, cheapest first). Deletions go through the
//! normal termination path (the NodeClaim is deleted, its finalizer drains and removes the
//! Node and the Machine).
//!
//! The dynamic provisioner never launches for a static pool (`snapshot::build` leaves them
//! out), but pods may land on their Nodes (they are existing capacity); disruption never
//! consolidates them and replaces drifted ones one for one (`disruption::static_drift`).
//!
//! Read-your-writes: a create is recorded in [`InFlight`] before it is sent and stays there
//! until the cache shows it (or [`IN_FLIGHT_TTL`] passes); a delete is recorded in the
//! writer's [`Expectations`] and the pool waits until the cache shows it. Names are
//! deterministic ([`scale::slot_name`]), so a create repeated from a cache that has not seen
//! the first — a restart, a failover, a lost response — is refused as "exists".

pub mod scale;
pub mod template;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::{NodeClaim, NodePool};
use futures::{FutureExt, StreamExt};
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::{Client, Resource};

use crate::events::Recorder;
use crate::metrics::{CreatedLabels, Metrics};
use crate::nodeclaim::context::publish;
use crate::objects::{deleting, name, pool_condition};
use crate::state::{Cluster, ClusterState};
use crate::write::{Created, Expectations, Writer, manager};
use cloudprovider::CloudProvider;

/// How long a create may stay unseen by the cache before it is no longer counted.
pub(crate) const IN_FLIGHT_TTL: Duration = Duration::from_secs(60);
/// Event reason on a static NodePool that `limits.nodes` keeps below its replicas.
pub(crate) const NODE_LIMIT_REACHED: &str = "NodeLimitReached";
/// Every static pool is looked at least this often (events do the rest).
const TICK: Duration = Duration::from_secs(10);

/// Creates sent (or about to be) that the cache does not show yet: name → (pool, zone,
/// when recorded).
#[derive(Debug, Default)]
pub struct InFlight(Mutex<HashMap<String, Create>>);

/// A create in flight: its pool, its zone, when it was recorded.
type Create = (String, Option<String>, Instant);

impl InFlight {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Create>) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Records a create of `name` in `pool` before it is sent.
    pub fn record(&self, name: &str, pool: &str, zone: Option<String>, at: Instant) {
        self.with(|m| m.insert(name.to_string(), (pool.to_string(), zone, at)));
    }

    /// The create of `name` was refused: nothing to wait for.
    pub fn forget(&self, name: &str) {
        self.with(|m| m.remove(name));
    }

    /// `pool`'s creates not in `cluster` yet (name → zone); those cached or older than
    /// [`IN_FLIGHT_TTL`] are dropped.
    pub(crate) fn of_pool(
        &self,
        pool: &str,
        cluster: &Cluster,
        now: Instant,
    ) -> BTreeMap<String, Option<String>> {
        self.with(|m| {
            m.retain(|n, (_, _, at)| {
                cluster.nodeclaim(n).is_none() && now.duration_since(*at) < IN_FLIGHT_TTL
            });
            m.iter()
                .filter(|(_, (p, _, _))| p == pool)
                .map(|(n, (_, z, _))| (n.clone(), z.clone()))
                .collect()
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("NodePool {pool}: {why}")]
    Template { pool: String, why: String },
}

/// What the static loop reads and writes.
#[derive(Clone)]
pub struct StaticPools {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub state: ClusterState,
    /// The instance types the pools' claims are planned on, with each offering's
    /// availability and count.
    pub provider: Arc<dyn CloudProvider>,
    pub in_flight: Arc<InFlight>,
    pub expectations: Arc<Expectations>,
    /// No pass while the workload cluster does not answer (see `health`).
    pub connection: crate::health::Connection,
}

impl StaticPools {
    fn writer(&self) -> Writer<NodeClaim> {
        Writer::new(Api::all(self.client.clone()), manager::STATIC)
            .expecting(self.expectations.clone())
    }

    /// One pass over every static pool.
    pub async fn reconcile(&self) {
        let cluster = self.state.current();
        let live: std::collections::HashSet<&str> = cluster
            .nodeclaims
            .iter()
            .filter_map(|c| c.metadata.uid.as_deref())
            .collect();
        self.expectations.retain(|uid| live.contains(uid));
        for pool in cluster
            .nodepools
            .iter()
            .filter(|p| p.spec.replicas.is_some())
        {
            if let Err(e) = self.pool(&cluster, pool).await {
                tracing::warn!(nodepool = %name(pool.as_ref()), error = %e, "static NodePool");
            }
        }
    }

    /// Brings one static pool to its `replicas`.
    async fn pool(&self, cluster: &Cluster, pool: &NodePool) -> Result<(), Error> {
        let pool_name = name(pool);
        let claims: Vec<_> = cluster.claims_of_pool(pool_name).collect();
        if claims
            .iter()
            .any(|(c, _)| self.expectations.stale_object(c.as_ref()))
        {
            return Ok(()); // our last delete is not cached yet
        }
        let spread = api::consts::annotations::STATIC_ZONE_SPREAD;
        if let Err(value) = crate::objects::flag(pool, spread) {
            // Aggregated by the recorder while it repeats.
            publish(
                &self.recorder,
                pool.object_ref(&()),
                EventType::Warning,
                api::consts::events::UNKNOWN_ANNOTATION_VALUE,
                crate::objects::unknown_flag_note(spread, value),
            )
            .await;
        }
        let now = Instant::now();
        let in_flight = self.in_flight.of_pool(pool_name, cluster, now);
        let offerings = crate::model::convert::Availability::Offered;
        let catalog = self
            .provider
            .instance_types(&pool.spec.template.spec.node_class_ref.name);
        let zones = match &catalog {
            Some(c) if template::spreads(pool) => template::zones(pool, c, offerings),
            _ => Vec::new(),
        };
        let plan = scale::plan(
            pool,
            cluster,
            &in_flight,
            &zones,
            k8s_openapi::jiff::Timestamp::now(),
        );
        if plan.at_limit {
            self.at_limit(pool).await;
        }
        for victim in &plan.delete {
            if let Some(c) = cluster.nodeclaim(victim) {
                self.scale_down(pool_name, c).await?;
            }
        }
        // Karpenter creates only for a Ready pool (valid, NodeClass Ready).
        if plan.create.is_empty()
            || deleting(pool)
            || !pool_condition(pool, api::consts::conditions::READY)
        {
            return Ok(());
        }
        let Some(catalog) = catalog else {
            return Err(Error::Template {
                pool: pool_name.into(),
                why: "its NodeClass has no instance types".into(),
            });
        };
        let writer = self.writer();
        for slot in plan.create {
            let obj = template::claim(
                pool,
                &catalog,
                offerings,
                slot.zone.as_deref(),
                Some(&slot.name),
            )
            .map_err(|why| Error::Template {
                pool: pool_name.into(),
                why,
            })?;
            self.create(&writer, pool_name, &slot, &obj).await?;
        }
        Ok(())
    }

    /// Creates one claim, recorded in flight before it is sent.
    async fn create(
        &self,
        writer: &Writer<NodeClaim>,
        pool: &str,
        slot: &scale::Slot,
        obj: &NodeClaim,
    ) -> Result<(), Error> {
        self.in_flight
            .record(&slot.name, pool, slot.zone.clone(), Instant::now());
        match writer.create(obj).await {
            Ok(Created::Created(_)) => {
                tracing::info!(nodeclaim = %slot.name, nodepool = pool, zone = slot.zone.as_deref().unwrap_or("any"),
                    "created static NodeClaim");
                self.metrics
                    .nodeclaims_created
                    .get_or_create(&CreatedLabels {
                        reason: "provisioning".into(),
                        nodepool: pool.to_string(),
                    })
                    .inc();
                Ok(())
            }
            // Created before (a repeated create): it counts, the cache will show it.
            Ok(Created::Exists) => Ok(()),
            // Refused: nothing was created. Any other failure may have created it: it
            // stays in flight until the cache shows it or the TTL passes.
            Err(e @ kube::Error::Api(_)) => {
                self.in_flight.forget(&slot.name);
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Says (an Event on the pool, aggregated while it repeats) that `limits.nodes` keeps
    /// the pool below its replicas.
    async fn at_limit(&self, pool: &NodePool) {
        tracing::debug!(nodepool = %name(pool), "static NodePool: limits.nodes reached");
        publish(
            &self.recorder,
            pool.object_ref(&()),
            EventType::Normal,
            NODE_LIMIT_REACHED,
            format!(
                "limits.nodes {} keeps the NodePool below its {} replicas",
                scale::node_limit(pool).unwrap_or_default(),
                pool.spec.replicas.unwrap_or_default()
            ),
        )
        .await;
    }

    /// Deletes a surplus claim of `pool` (only the object decided on: same uid).
    async fn scale_down(&self, pool: &str, claim: &NodeClaim) -> Result<(), Error> {
        tracing::info!(nodeclaim = %name(claim), nodepool = pool, "deleting static NodeClaim: over replicas");
        if self.writer().delete(claim).await?.written().is_some() {
            publish(
                &self.recorder,
                claim.object_ref(&()),
                EventType::Normal,
                api::consts::events::DISRUPTION_TERMINATING,
                format!("Deleting NodeClaim: NodePool {pool} is over its replicas"),
            )
            .await;
        }
        Ok(())
    }
}

/// Runs until `shutdown`: a pass on every NodePool or NodeClaim event, and every [`TICK`].
pub async fn run(s: StaticPools, shutdown: impl std::future::Future<Output = ()> + Send) {
    tokio::pin!(shutdown);
    let sources = s.state.sources();
    let mut events = futures::stream::select(
        sources.nodepools.subscribe().map(|_| ()).boxed(),
        sources.nodeclaims.subscribe().map(|_| ()).boxed(),
    );
    loop {
        // Disconnected, the caches are stale: nothing is created or deleted.
        if s.state.synced() && s.connection.connected() {
            s.reconcile().await;
        }
        tokio::select! {
            _ = &mut shutdown => return,
            e = events.next() => if e.is_none() { return },
            _ = tokio::time::sleep(TICK) => {}
        }
        // Coalesce a burst of events into one pass.
        while let Some(Some(())) = events.next().now_or_never() {}
    }
}

#[cfg(test)]
mod drift_tests;
#[cfg(test)]
mod tests;
