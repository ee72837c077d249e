//! Control loops, one module per loop.
