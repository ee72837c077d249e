//! Giving memory back after a burst. glibc's allocator keeps what a scale-out freed in its
//! arenas (one per thread that allocated, up to 8 per core), so the operator's RSS stayed
//! near its peak after a scale back to 0 although the live heap was small again. Here, on
//! glibc: one arena (the solver and the disruption pass run on blocking threads, each of
//! which would otherwise get its own, and what one arena frees is reused by the others'
//! allocations instead of staying resident next to it; `MALLOC_ARENA_MAX` in the
//! environment overrides this), and every [`TRIM_EVERY`] the free pages of
//! every arena are returned to the kernel (`malloc_trim`, well under a millisecond at our
//! heap sizes). Elsewhere (musl, other allocators) nothing is done.

use std::time::Duration;

/// How often free memory is returned to the kernel.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// The allocator's arenas unless `MALLOC_ARENA_MAX` says otherwise.
pub const ARENAS: i32 = 1;

/// Limits the allocator's arenas; call before any thread is started.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before other threads exist.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
    }
}

/// Starts a thread that returns free memory to the kernel every [`TRIM_EVERY`].
pub fn trim_periodically() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let spawned = std::thread::Builder::new()
            .name("malloc-trim".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(TRIM_EVERY);
                    let started = std::time::Instant::now();
                    // SAFETY: malloc_trim only releases free pages of the allocator's arenas.
                    let released = unsafe { libc::malloc_trim(0) };
                    tracing::trace!(
                        released = released != 0,
                        micros = started.elapsed().as_micros() as u64,
                        "returned free memory to the kernel"
                    );
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "not returning free memory to the kernel: no thread");
        }
    }
}
