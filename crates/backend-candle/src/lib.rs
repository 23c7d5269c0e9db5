//! # backend-candle
//!
//! The mtp-core [`Backend`](https://docs.rs/mtp-core) traits implemented on candle-core (CPU,
//! Metal, CUDA) are not written yet: this crate is an empty member of the workspace so that the
//! layout of the design card holds. It exports nothing and claims nothing. Use
//! `mtp_core::reference::ReferenceBackend` until the candle backend lands.
