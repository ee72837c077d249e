//! The operator's allocator: jemalloc, tuned to give memory back after a burst (the binary
//! installs it; `crates/core/examples/vs_karpenter.rs` times the solver under it too).
//!
//! With glibc's malloc the RSS stayed far above the live heap after a scale-out: a 5000-pod
//! burst left 13 MB live in 55–61 MB resident even with one arena and a `malloc_trim` every
//! 10 s (pages half-used by survivors cannot be returned). jemalloc segregates allocations by
//! size class and purges freed pages itself: a background thread returns dirty pages after
//! [`CONF`]'s 1 s decay (no muzzy stage), one arena serves the few threads the operator
//! has. Same 5000-pod run: idle 28 → 19 MiB, RSS 30 s after the scale to 0 61 → 39 MiB
//! (`docs/performance.md`). Small thread caches (`tcache_max:4096`, at most 20 objects per
//! small size class): the default ones held about 1 MiB of the 1000-pod peak (33 → 32 MiB,
//! idle 17.3 → 16.3 MiB). Without thread caches at all the peak was the same, but every
//! allocation took the arena's lock: the 5000-pod scale-out and scale-in cost 16–22 s and
//! 35–37 s of CPU instead of 10.6 s and 26.5 s. `_RJEM_MALLOC_CONF` in the environment
//! overrides [`CONF`].

/// jemalloc's options (see `man jemalloc`, `MALLOC_CONF`), NUL-terminated.
pub const CONF: &[u8] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:1,tcache_max:4096,tcache_nslots_small_max:20\0";
