//! Layers shared by every model family, written once over [`Backend`](mtp_core::Backend).
//!
//! * [`Linear`] — a projection `y = x @ Wᵀ` whose weight `W` (`[out, in]`) is dense or
//!   quantized; models call [`Linear::forward`] and never look inside;
//! * [`Embedding`] — a token table (`[vocab, width]`) looked up by row, dense or quantized (a
//!   quantized table dequantizes only the rows asked for);
//! * [`Experts`] — the stacked projections of a mixture-of-experts layer (`[experts, out, in]`),
//!   dense or one quantized weight per expert, each input row routed to its own expert;
//! * [`soft_cap`] — logit soft-capping `cap * tanh(x / cap)`.
//!
//! Both are loaded by name and expected shape through [`ArrayLoader`](crate::loading::ArrayLoader),
//! which decides how the weight is stored.

mod embedding;
mod experts;
mod linear;
mod softcap;

pub use embedding::Embedding;
pub use experts::Experts;
pub use linear::Linear;
pub use softcap::soft_cap;
