//! A Cluster's kubeconfig Secret: the Secret named by annotation
//! `karpenter.cluster.x-k8s.io/kubeconfig-secret`, else Cluster API's `<cluster>-kubeconfig`,
//! in the Cluster's namespace, with the kubeconfig under key `value` (Cluster API's) or
//! `kubeconfig` (what `kubectl create secret generic --from-file=kubeconfig` and our own
//! split-cluster Secret use). Read by the hub to engage a Cluster and by `inspect --mode hub`
//! to say why one waits.

use std::fmt;

use clusterapi_api::Cluster;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};

/// The keys a kubeconfig is read from, in this order.
pub const KEYS: [&str; 2] = ["value", "kubeconfig"];

/// A Cluster's kubeconfig, as read from its Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Kubeconfig {
    /// `<namespace>/<name>` of the Secret.
    pub secret: String,
    /// The Secret's resourceVersion: a change re-engages.
    pub version: String,
    pub kubeconfig: String,
}

impl fmt::Debug for Kubeconfig {
    // The kubeconfig holds credentials: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kubeconfig")
            .field("secret", &self.secret)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Why a Cluster has no kubeconfig to engage it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// There is no Secret `<namespace>/<name>`.
    Secret(String),
    /// The Secret has neither key of [`KEYS`]: its keys.
    Key { secret: String, keys: Vec<String> },
    /// The kubeconfig under `key` is not UTF-8.
    NotText { secret: String, key: String },
}

impl Missing {
    /// A short label for logs and the `inspect` table.
    pub fn kind(&self) -> &'static str {
        match self {
            Missing::Secret(_) => "missing Secret",
            Missing::Key { .. } => "wrong key",
            Missing::NotText { .. } => "not text",
        }
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Secret(s) => write!(
                f,
                "no kubeconfig Secret {s} (Cluster API's <cluster>-kubeconfig, or the Secret named by annotation {})",
                api::consts::annotations::KUBECONFIG_SECRET
            ),
            Missing::Key { secret, keys } => write!(
                f,
                "Secret {secret} has no key `value` or `kubeconfig` (its keys: {})",
                if keys.is_empty() {
                    "none".to_string()
                } else {
                    keys.join(", ")
                }
            ),
            Missing::NotText { secret, key } => {
                write!(f, "Secret {secret}: key `{key}` is not UTF-8 text")
            }
        }
    }
}

/// The name of `cluster`'s kubeconfig Secret (in its namespace).
pub(crate) fn secret_name(cluster: &Cluster) -> String {
    cluster
        .annotations()
        .get(api::consts::annotations::KUBECONFIG_SECRET)
        .filter(|s| !s.is_empty())
        .cloned()
        .unwrap_or_else(|| format!("{}-kubeconfig", cluster.name_any()))
}

/// The kubeconfig in `secret` (named `name`, `<namespace>/<name>`), from the first key of
/// [`KEYS`] it has.
pub(crate) fn kubeconfig_in(name: &str, secret: &Secret) -> Result<Kubeconfig, Missing> {
    let data = secret.data.as_ref();
    let Some((key, bytes)) = KEYS
        .iter()
        .find_map(|k| data.and_then(|d| d.get(*k)).map(|v| (*k, v)))
    else {
        return Err(Missing::Key {
            secret: name.to_string(),
            keys: data
                .map(|d| d.keys().cloned().collect())
                .unwrap_or_default(),
        });
    };
    let kubeconfig = String::from_utf8(bytes.0.clone()).map_err(|_| Missing::NotText {
        secret: name.to_string(),
        key: key.to_string(),
    })?;
    Ok(Kubeconfig {
        secret: name.to_string(),
        version: secret.resource_version().unwrap_or_default(),
        kubeconfig,
    })
}

/// Reads `cluster`'s kubeconfig Secret: `Ok(Err(why))` while there is none to use; an API
/// error (no access, the API server down) is returned as such, never read as "missing".
pub async fn read(
    management: &Client,
    cluster: &Cluster,
) -> Result<Result<Kubeconfig, Missing>, kube::Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = secret_name(cluster);
    let full = format!("{ns}/{name}");
    let secrets: Api<Secret> = Api::namespaced(management.clone(), &ns);
    Ok(match secrets.get_opt(&name).await? {
        Some(secret) => kubeconfig_in(&full, &secret),
        None => Err(Missing::Secret(full)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                resource_version: Some("7".into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn the_kubeconfig_is_under_value_or_kubeconfig() {
        let read = |data: &[(&str, &[u8])]| kubeconfig_in("t/a-kubeconfig", &secret(data));
        let got = read(&[("value", b"capi")]).expect("value");
        assert_eq!(
            (got.kubeconfig.as_str(), got.version.as_str()),
            ("capi", "7")
        );
        let got = read(&[("kubeconfig", b"ours")]).expect("kubeconfig");
        assert_eq!(got.kubeconfig, "ours");
        // Both: Cluster API's key wins.
        let got = read(&[("kubeconfig", b"ours"), ("value", b"capi")]).expect("both");
        assert_eq!(got.kubeconfig, "capi");
        let wrong = read(&[("config", b"x"), ("token", b"y")]).expect_err("wrong key");
        assert_eq!(wrong.kind(), "wrong key");
        assert_eq!(
            wrong.to_string(),
            "Secret t/a-kubeconfig has no key `value` or `kubeconfig` (its keys: config, token)"
        );
        let empty = kubeconfig_in("t/a-kubeconfig", &Secret::default()).expect_err("no data");
        assert!(empty.to_string().ends_with("(its keys: none)"), "{empty}");
        let binary = read(&[("value", &[0xff, 0xfe])]).expect_err("not UTF-8");
        assert_eq!(
            binary.to_string(),
            "Secret t/a-kubeconfig: key `value` is not UTF-8 text"
        );
        assert_eq!(Missing::Secret("t/x".into()).kind(), "missing Secret");
        assert!(
            !format!("{got:?}").contains("capi"),
            "the kubeconfig is never printed"
        );
    }
}
