//! Conformance cases of the array ops, one file per group of the [`Backend`] trait.
//!
//! Every case compares the backend under test with the reference backend on seeded random
//! inputs, over several shapes, in every float dtype the op takes, and on contiguous as well as
//! transposed and sliced inputs (see [`Harness::check`]).
//!
//! [`Backend`]: mtp_core::Backend
//! [`Harness::check`]: crate::harness::Harness::check

pub mod creation;
pub mod elementwise;
pub mod errors;
pub mod fused;
pub mod hooks;
pub mod indexing;
pub mod linalg;
pub mod reduce;
pub mod shape;
