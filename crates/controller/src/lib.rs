//! Control loops, one module per loop, and the runtime pieces they share.

pub mod leader;
pub mod metrics;
pub mod runtime;
pub mod server;
pub mod unavailable;
