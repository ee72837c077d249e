//! An operator replica on its own runtime and thread, as if in its own process: killing it
//! drops its runtime with every task at once (a crash: no Lease released, nothing sent
//! after), and when `run_operator` returns on its own the runtime stops too.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// How a replica's `run_operator` ended on its own: when it returned, and the result.
#[derive(Clone, Debug)]
pub struct Exit {
    pub at: Timestamp,
    pub result: Result<(), String>,
}

pub struct Replica {
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    exit: Arc<Mutex<Option<Exit>>>,
}

impl Replica {
    /// Starts `run_operator(config)` on a runtime of its own.
    pub fn start(config: operator::RunConfig) -> Replica {
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let exit = Arc::new(Mutex::new(None));
        let exit_of_thread = exit.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("replica runtime");
            let ended = runtime.block_on(async {
                tokio::select! {
                    result = operator::run_operator(config) => Some(result),
                    _ = killed => None,
                }
            });
            // The end is when `run_operator` returned (the process would exit now), not
            // when the runtime has stopped: what its tasks send while the runtime stops is
            // sent after the end.
            let ended_at = Timestamp::now();
            if let Some(result) = ended {
                *exit_of_thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(Exit {
                    at: ended_at,
                    result: result.map_err(|e| e.to_string()),
                });
            }
            // Every task stops with the runtime: no connection of this replica is left open.
            runtime.shutdown_timeout(Duration::from_secs(5));
        });
        Replica {
            kill: Some(kill),
            thread: Some(thread),
            exit,
        }
    }

    /// Stops the replica as a crash would; returns, once it has stopped, the moment it was
    /// killed (taken before the kill is sent: anything the replica sends while its runtime
    /// stops is sent after its death).
    pub fn kill(&mut self) -> Timestamp {
        let at = Timestamp::now();
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        at
    }

    /// How `run_operator` ended, if it did on its own.
    pub fn exit(&self) -> Option<Exit> {
        self.exit.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}
