//! A decorator around any provider: every call of the seam timed and its errors counted
//! (Karpenter's `metrics.Decorate`), through a [`CallRecorder`] the caller supplies (the
//! core records `karpenter_cloudprovider_duration_seconds` and
//! `karpenter_cloudprovider_errors_total`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use api::NodeClaim;
use futures::FutureExt;
use futures::future::BoxFuture;

use crate::instance_types::InstanceTypes;
use crate::provider::{CloudProvider, Created, Deletion, Drift, Error, Instance};

/// Where a decorated call is recorded: the method (Karpenter's names: `Create`, `Delete`,
/// `Get`, `List`, `GetInstanceTypes`, `IsDrifted`), the provider's name, how long it took
/// and its error, if any.
pub trait CallRecorder: Send + Sync {
    fn record(
        &self,
        method: &'static str,
        provider: &'static str,
        took: Duration,
        error: Option<&Error>,
    );
}

/// `inner` with every seam call recorded by `recorder`.
pub struct Metered<R> {
    inner: Arc<dyn CloudProvider>,
    recorder: R,
}

impl<R: CallRecorder> Metered<R> {
    pub fn new(inner: Arc<dyn CloudProvider>, recorder: R) -> Metered<R> {
        Metered { inner, recorder }
    }

    /// Runs `call`, recording it as `method`.
    fn timed<'a, T: Send + 'a>(
        &'a self,
        method: &'static str,
        call: BoxFuture<'a, Result<T, Error>>,
    ) -> BoxFuture<'a, Result<T, Error>> {
        let started = Instant::now();
        async move {
            let out = call.await;
            let error = out.as_ref().err();
            self.recorder
                .record(method, self.inner.name(), started.elapsed(), error);
            out
        }
        .boxed()
    }
}

impl<R: CallRecorder> CloudProvider for Metered<R> {
    fn create<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Created, Error>> {
        self.timed("Create", self.inner.create(claim))
    }

    fn delete<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Deletion, Error>> {
        self.timed("Delete", self.inner.delete(claim))
    }

    fn get<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Instance, Error>> {
        self.timed("Get", self.inner.get(claim))
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, Error>> {
        self.timed("List", self.inner.list())
    }

    fn instance_types(&self, nodeclass: &str) -> Option<Arc<InstanceTypes>> {
        let started = Instant::now();
        let out = self.inner.instance_types(nodeclass);
        self.recorder.record(
            "GetInstanceTypes",
            self.inner.name(),
            started.elapsed(),
            None,
        );
        out
    }

    fn is_drifted<'a>(
        &'a self,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<Option<Drift>, Error>> {
        self.timed("IsDrifted", self.inner.is_drifted(claim))
    }

    fn reboot<'a>(
        &'a self,
        claim: &'a NodeClaim,
        operation: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        self.timed("Reboot", self.inner.reboot(claim, operation))
    }

    crate::forward::forward!(inner: settings);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeCloudProvider;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Calls(Mutex<Vec<(&'static str, &'static str, Option<&'static str>)>>);

    impl CallRecorder for Arc<Calls> {
        fn record(
            &self,
            method: &'static str,
            provider: &'static str,
            _: Duration,
            e: Option<&Error>,
        ) {
            let mut calls = self.0.lock().unwrap_or_else(|p| p.into_inner());
            calls.push((method, provider, e.map(Error::metric_label)));
        }
    }

    #[test]
    fn every_call_is_recorded_with_its_error() {
        let fake = Arc::new(FakeCloudProvider::default());
        fake.state(|s| {
            s.create_errors
                .push_back(Error::InsufficientCapacity("none left".into()))
        });
        let calls = Arc::new(Calls::default());
        let metered = Metered::new(fake.clone(), calls.clone());
        let claim = NodeClaim::new("c", Default::default());
        let refused = futures::executor::block_on(metered.create(&claim));
        assert!(refused.is_err());
        let created = futures::executor::block_on(metered.create(&claim));
        assert!(created.is_ok(), "{created:?}");
        assert!(futures::executor::block_on(metered.get(&claim)).is_ok());
        let _ = metered.instance_types("n");
        let recorded = calls.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(
            recorded,
            [
                ("Create", "fake", Some("insufficient_capacity")),
                ("Create", "fake", None),
                ("Get", "fake", None),
                ("GetInstanceTypes", "fake", None),
            ]
        );
        // The fake saw both creates: the decorator passes every call on.
        assert_eq!(fake.state(|s| s.create_calls.len()), 2);
        // Drain rules too: the fake's for this claim, the default for another.
        let rules = crate::DrainRules {
            label: Some("example.com/drain".into()),
            rules: Vec::new(),
        };
        fake.state(|s| s.drain_rules.insert("c".into(), rules.clone()));
        assert_eq!(metered.drain_rules(&claim).ok(), Some(rules));
        let other = NodeClaim::new("d", Default::default());
        assert_eq!(metered.drain_rules(&other).ok(), Some(Default::default()));
    }
}
