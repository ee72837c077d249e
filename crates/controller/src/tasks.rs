//! Spawned tasks that end with their owner: dropping a [`Tasks`] aborts everything it
//! spawned, so a stopped (or killed) operator leaves no watch or loop running behind it.

use std::future::Future;

use tokio::task::{AbortHandle, JoinHandle};

#[derive(Debug, Default)]
pub struct Tasks(Vec<AbortHandle>);

impl Tasks {
    /// Spawns `future` and ties its lifetime to this set.
    pub fn spawn<F>(&mut self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = tokio::spawn(future);
        self.0.push(handle.abort_handle());
        handle
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropping_aborts() {
        let mut tasks = Tasks::default();
        let h = tasks.spawn(std::future::pending::<()>());
        drop(tasks);
        let err = h.await.expect_err("aborted");
        assert!(err.is_cancelled());
    }
}
