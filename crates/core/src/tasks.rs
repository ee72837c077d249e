//! Spawned tasks that end with their owner: tokio's [`JoinSet`] aborts everything it spawned
//! when dropped, so a stopped (or killed) operator leaves no watch or loop running behind it.

use tokio::task::JoinSet;

/// The operator's background tasks (watches, loops); dropping the set aborts them.
pub type Tasks = JoinSet<()>;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropping_aborts() {
        let mut tasks = Tasks::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(tasks);
        assert!(rx.await.is_err(), "the task (and its sender) is gone");
    }
}
