//! The solve's second thread: one long-lived worker (a rayon pool of one thread, `packing`),
//! started on first use. A thread started per solve cost ~50 µs to start and began with empty
//! allocation caches; this one is warm. It runs the packing beside first-fit's
//! ([`beside`]) and drops a finished solve's leftovers after the solve has returned
//! ([`dispose`]).
//!
//! One solve at a time has it: a solve that finds it taken (another solve on another thread)
//! runs its packings one after the other, as without a second thread.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a solve has the worker.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The worker; `None` when no thread could be started.
fn worker() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "packing".into())
            .build()
            .ok()
    });
    pool.as_ref()
}

/// Gives the worker back when dropped (also when a job panicked).
struct Hold;

impl Drop for Hold {
    fn drop(&mut self) {
        TAKEN.store(false, Ordering::Release);
    }
}

/// Runs `there` on the worker while `here` runs on this thread; `None` for `there`'s result
/// when the worker is taken or there is none (then `there` did not run). A panic in `there`
/// is raised here once `here` is done.
pub(super) fn beside<T: Send, R>(
    there: impl FnOnce() -> T + Send,
    here: impl FnOnce() -> R,
) -> (R, Option<T>) {
    let Some(pool) = worker().filter(|_| !TAKEN.swap(true, Ordering::Acquire)) else {
        return (here(), None);
    };
    let _hold = Hold;
    let mut out = None;
    let here = pool.in_place_scope(|scope| {
        scope.spawn(|_| out = Some(there()));
        here()
    });
    (here, out)
}

/// Drops `garbage` on the worker, after the caller has moved on (a solve's packings, which
/// take a tenth of a large solve's time to free); here when there is no worker.
pub(super) fn dispose<T: Send + 'static>(garbage: T) {
    match worker() {
        Some(pool) => pool.spawn(move || drop(garbage)),
        None => drop(garbage),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_name() -> Option<String> {
        std::thread::current().name().map(String::from)
    }

    /// `f` once it had the worker (other tests' solves may hold it for a while).
    fn with_worker<T>(mut f: impl FnMut() -> Option<T>) -> T {
        for _ in 0..2000 {
            if let Some(t) = f() {
                return t;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("the worker was never free")
    }

    #[test]
    fn a_job_runs_on_the_worker_and_a_second_solve_meanwhile_runs_alone() {
        let (inner, there) = with_worker(|| {
            let (inner, there) = beside(thread_name, || beside(|| 1, || 2));
            there.map(|t| (inner, t))
        });
        assert_eq!(there.as_deref(), Some("packing"));
        // The worker was held by the outer call: the inner one ran `here` only.
        assert_eq!(inner, (2, None));
        // And given back.
        with_worker(|| beside(|| (), || ()).1);
    }

    #[test]
    fn a_panic_on_the_worker_is_raised_here_and_the_worker_given_back() {
        let caught = with_worker(|| {
            let run = std::panic::catch_unwind(|| beside(|| panic!("on the worker"), || 7));
            match run {
                Ok((_, None)) => None,
                other => Some(other.map(|(here, _)| here)),
            }
        });
        let message = caught.expect_err("the worker's panic is raised");
        assert_eq!(message.downcast_ref::<&str>(), Some(&"on the worker"));
        with_worker(|| beside(|| (), || ()).1);
    }

    #[test]
    fn leftovers_are_dropped_on_the_worker() {
        struct Tell(std::sync::mpsc::Sender<Option<String>>);
        impl Drop for Tell {
            fn drop(&mut self) {
                let _ = self.0.send(thread_name());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        dispose(Tell(tx));
        let dropped_on = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(dropped_on, Ok(Some("packing".to_string())));
    }
}
