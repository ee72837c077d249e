//! An admission gate: a ValidatingAdmissionPolicy and its binding that refuse the writes a
//! CEL expression rejects, closed and opened only once the API server is seen enforcing it
//! (a dry-run probe is refused, then let through).

use std::future::Future;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use testbed::wait_for;

use super::{ar, from_json};

/// A closed gate (see the module documentation).
pub struct Gate {
    name: String,
}

fn policies(client: &Client) -> (Api<DynamicObject>, Api<DynamicObject>) {
    let group = "admissionregistration.k8s.io";
    (
        Api::all_with(
            client.clone(),
            &ar(
                group,
                "v1",
                "ValidatingAdmissionPolicy",
                "validatingadmissionpolicies",
            ),
        ),
        Api::all_with(
            client.clone(),
            &ar(
                group,
                "v1",
                "ValidatingAdmissionPolicyBinding",
                "validatingadmissionpolicybindings",
            ),
        ),
    )
}

impl Gate {
    /// Installs policy `name`: writes matching `rules` (its `resourceRules`) that
    /// `expression` rejects are refused with `message`. Returns once `probe` is refused with
    /// that message.
    pub async fn close<F, Fut>(
        client: &Client,
        name: &str,
        rules: Value,
        expression: &str,
        message: &str,
        probe: F,
    ) -> Gate
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(), kube::Error>>,
    {
        let (policies, bindings) = policies(client);
        policies
            .create(
                &PostParams::default(),
                &from_json(json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingAdmissionPolicy",
                    "metadata": {"name": name},
                    "spec": {
                        "failurePolicy": "Fail",
                        "matchConstraints": {"resourceRules": rules},
                        "validations": [{"expression": expression, "message": message}]
                    }
                })),
            )
            .await
            .expect("gate policy");
        bindings
            .create(
                &PostParams::default(),
                &from_json(json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": name},
                    "spec": {"policyName": name, "validationActions": ["Deny"]}
                })),
            )
            .await
            .expect("gate binding");
        wait_for("the gate enforced", Duration::from_secs(30), || async {
            match probe().await {
                Err(kube::Error::Api(e)) if e.message.contains(message) => Some(()),
                _ => None,
            }
        })
        .await
        .expect("the API server enforces the gate");
        Gate {
            name: name.to_string(),
        }
    }

    /// Removes the policy and returns once `probe` is no longer refused by it.
    pub async fn open<F, Fut>(self, client: &Client, probe: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(), kube::Error>>,
    {
        let (policies, bindings) = policies(client);
        bindings
            .delete(&self.name, &Default::default())
            .await
            .expect("delete gate binding");
        policies
            .delete(&self.name, &Default::default())
            .await
            .expect("delete gate policy");
        // The probe's last error, named if the gate never opens.
        let last = std::sync::Mutex::new(String::new());
        let opened = wait_for("the gate open", Duration::from_secs(30), || async {
            match probe().await {
                Ok(()) => Some(()),
                Err(e) => {
                    *last.lock().unwrap_or_else(|p| p.into_inner()) = e.to_string();
                    None
                }
            }
        })
        .await;
        if let Err(e) = opened {
            let last = last.lock().unwrap_or_else(|p| p.into_inner()).clone();
            panic!("the API server stops enforcing the gate: {e}; the probe said: {last}");
        }
    }
}
