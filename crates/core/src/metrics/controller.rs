//! Which controller is running: Karpenter's `controller` label of the cloud provider metrics
//! (`karpenter_cloudprovider_duration_seconds`, `…_errors_total`), which it takes from the
//! calling controller's context. Ours is a task-local set around each loop (and carried into
//! the blocking work a loop hands off), read by the seam's call recorder.

use std::future::Future;

tokio::task_local! {
    static CONTROLLER: &'static str;
}

/// `f` run as controller `name` (Karpenter's names: `nodeclaim.lifecycle`, `provisioner`, …).
pub async fn run_as<F: Future>(name: &'static str, f: F) -> F::Output {
    CONTROLLER.scope(name, f).await
}

/// Blocking work `f` of the current controller (for `spawn_blocking`: pass [`current`]).
pub fn blocking_as<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    CONTROLLER.sync_scope(name, f)
}

/// The controller this code runs in; empty outside one (as Karpenter's label then is).
pub fn current() -> &'static str {
    CONTROLLER.try_with(|c| *c).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_name_holds_inside_its_scope_and_into_blocking_work_only() {
        assert_eq!(current(), "");
        let (inside, handed) = run_as("provisioner", async {
            let name = current();
            let handed = tokio::task::spawn_blocking(move || blocking_as(name, current))
                .await
                .expect("blocking");
            (current(), handed)
        })
        .await;
        assert_eq!((inside, handed), ("provisioner", "provisioner"));
        // Without carrying it, blocking work runs outside any controller.
        let lost = run_as("provisioner", async {
            tokio::task::spawn_blocking(current)
                .await
                .expect("blocking")
        })
        .await;
        assert_eq!(lost, "");
        assert_eq!(current(), "");
    }
}
