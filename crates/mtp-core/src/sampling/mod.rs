//! Host-side sampling over logit rows: dense `&[f32]` rows, or the top candidates of a row read
//! after a device-side top-k when the settings make that exact ([`LogitRow`]) — top-k on, or
//! top-p / min-p with top-k off and a device sum of the row's softmax weight that settles them.
//!
//! The pipeline follows ollama's MLX sampler after its rework (`sample.go` @ `4860130f8`):
//!
//! 1. penalties on the raw logits over the penalty context (repeat, presence, frequency);
//! 2. temperature 0 → a point mass at the argmax of the penalised logits;
//! 3. otherwise top-k, softmax of logits / T (in `f64` over the kept candidates), top-p
//!    (exclusive cumulative rule), min-p, renormalise; a row that nothing truncates is weighed
//!    whole in `f32` by one vectorised pass (the `vector` module states the rounding).
//!
//! [`Sampler`] owns the penalty history and the seeded random stream; its speculative calls
//! ([`Sampler::distribution`], [`Sampler::verification_distributions`]) never mutate state, and
//! [`Sampler::commit`] appends what was accepted. Draft and target distributions go through the
//! same pipeline, which is what lets the acceptance rule in [`crate::acceptance`] preserve the
//! target distribution exactly.
//!
//! [`TokenLogprobs`] are the log-probabilities reported for emitted tokens, from the same
//! distributions (see [`logprobs`] for which: the sampler's transformed distribution, or the
//! penalised logits' `log_softmax` at temperature 0).

mod distribution;
mod host_rows;
pub mod logprobs;
mod nucleus;
mod options;
mod pipeline;
mod row_mass;
mod sampler;
mod select;
mod spare_rows;
mod vector;

pub use distribution::Distribution;
pub(crate) use host_rows::HostRows;
pub use logprobs::{TokenLogprobs, TopLogprob, MAX_TOP_LOGPROBS};
pub use options::SamplerOptions;
pub use pipeline::LogitRow;
pub use sampler::Sampler;
pub use select::best_k;
pub use vector::largest;
