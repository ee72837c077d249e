//! Pure bin-packing and requirements algebra (no I/O).
