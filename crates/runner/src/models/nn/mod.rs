//! Layers shared by every model family, written once over [`Backend`](mtp_core::Backend).
//!
//! * [`Linear`] — a projection `y = x @ Wᵀ` whose weight `W` (`[out, in]`) is dense or
//!   quantized; models call [`Linear::forward`] and never look inside;
//! * [`Embedding`] — a token table (`[vocab, width]`) looked up by row, dense or quantized (a
//!   quantized table dequantizes only the rows asked for);
//! * [`soft_cap`] — logit soft-capping `cap * tanh(x / cap)`.
//!
//! Both are loaded by name and expected shape through [`ArrayLoader`](crate::loading::ArrayLoader),
//! which decides how the weight is stored.

mod embedding;
mod linear;
mod softcap;

pub use embedding::Embedding;
pub use linear::Linear;
pub use softcap::soft_cap;
