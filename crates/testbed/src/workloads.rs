//! Workload clusters beside a management testbed, cheaply: each is its own kube-apiserver
//! (with its own certificates, kubeconfig and the components asked for: scheduler, kwok)
//! on the management testbed's etcd under its own key prefix (`--etcd-prefix`), so N
//! clusters cost N API servers and no extra etcd. Each is a [`Testbed`] (its own directory,
//! [`Testbed::restart`] of its kube-apiserver, dropped on its own); the management testbed,
//! whose etcd they use, must outlive them.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{Error, Options, Result, Testbed};

impl Testbed {
    /// The URL of the etcd this testbed's kube-apiserver stores its data in.
    pub fn etcd_url(&self) -> Result<String> {
        let path = self.dir().join("etcd-url");
        std::fs::read_to_string(&path)
            .map(|s| s.trim().to_string())
            .map_err(|source| Error::Io {
                what: format!("reading {}", path.display()),
                source,
            })
    }

    /// Starts `n` workload clusters on this testbed's etcd, each under a key prefix of its
    /// own and with `options` (its components, CRDs, audit log), all at once.
    pub async fn start_workloads(&self, n: usize, options: Options) -> Result<Vec<Testbed>> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let url = self.etcd_url()?;
        let starts = (0..n).map(|_| {
            let prefix = format!(
                "/workload-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            Testbed::start(options.clone().shared_etcd(url.clone(), prefix))
        });
        futures::future::join_all(starts)
            .await
            .into_iter()
            .collect()
    }
}
