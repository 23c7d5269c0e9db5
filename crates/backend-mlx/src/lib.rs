//! # backend-mlx
//!
//! The mtp-core backend traits implemented on mlx-rs (Metal on macOS, CPU on Linux) are not
//! written yet: this crate is an empty member of the workspace so that the layout of the design
//! card holds. It exports nothing and claims nothing.
