//! Where generated tokens go, and how a caller stops generation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::sampling::TokenLogprobs;

/// What a sink wants after receiving a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFlow {
    /// Keep generating.
    Continue,
    /// Stop generating (the response ends as cancelled).
    Stop,
}

/// Receives generated tokens as they are committed, in order. EOS tokens are not sent.
pub trait TokenSink {
    /// One committed token.
    fn token(&mut self, id: u32) -> SinkFlow;

    /// One committed token with its log-probabilities, instead of [`token`](Self::token), when
    /// the request asks for them ([`GenerateRequest::logprobs`](super::GenerateRequest)). The
    /// default ignores them and calls [`token`](Self::token).
    fn scored_token(&mut self, id: u32, logprobs: &TokenLogprobs) -> SinkFlow {
        let _ = logprobs;
        self.token(id)
    }
}

/// A sink from a closure that also receives each token's log-probabilities (`None` when the
/// request did not ask for them).
///
/// ```
/// use mtp_core::engine::{ScoredSink, SinkFlow, TokenSink};
/// use mtp_core::sampling::TokenLogprobs;
///
/// let mut seen = Vec::new();
/// let mut sink = ScoredSink(|id: u32, lp: Option<&TokenLogprobs>| {
///     seen.push((id, lp.map(|l| l.logprob)));
///     SinkFlow::Continue
/// });
/// sink.token(3);
/// sink.scored_token(4, &TokenLogprobs { id: 4, logprob: -0.5, top: Vec::new() });
/// assert_eq!(seen, vec![(3, None), (4, Some(-0.5))]);
/// ```
pub struct ScoredSink<F>(pub F);

impl<F: FnMut(u32, Option<&TokenLogprobs>) -> SinkFlow> TokenSink for ScoredSink<F> {
    fn token(&mut self, id: u32) -> SinkFlow {
        (self.0)(id, None)
    }

    fn scored_token(&mut self, id: u32, logprobs: &TokenLogprobs) -> SinkFlow {
        (self.0)(id, Some(logprobs))
    }
}

impl<F: FnMut(u32) -> SinkFlow> TokenSink for F {
    fn token(&mut self, id: u32) -> SinkFlow {
        self(id)
    }
}

/// Streams tokens into a channel; a closed receiver stops generation.
impl TokenSink for std::sync::mpsc::Sender<u32> {
    fn token(&mut self, id: u32) -> SinkFlow {
        match self.send(id) {
            Ok(()) => SinkFlow::Continue,
            Err(_) => SinkFlow::Stop,
        }
    }
}

/// A sink that ignores tokens (the response still carries them).
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardSink;

impl TokenSink for DiscardSink {
    fn token(&mut self, _id: u32) -> SinkFlow {
        SinkFlow::Continue
    }
}

/// A cancellation flag shared between the caller and a running generation; the engine checks it
/// once per round (once per token in plain decode, and between prefill chunks).
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    flag: Arc<AtomicBool>,
    /// A token whose cancellation cancels this one too (a server's shutdown, say).
    parent: Option<Arc<AtomicBool>>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// A token that is cancelled on its own or when `parent` is (cancelling it leaves
    /// `parent` alone).
    pub fn child_of(parent: &CancelToken) -> Self {
        Self {
            flag: Arc::default(),
            parent: Some(parent.flag.clone()),
        }
    }

    /// Ask the generation to stop at its next check.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Whether [`CancelToken::cancel`] was called on this token or on its parent.
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
            || self
                .parent
                .as_ref()
                .is_some_and(|p| p.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::CancelToken;

    #[test]
    fn a_child_token_follows_its_parent_not_the_other_way() {
        let parent = CancelToken::new();
        let child = CancelToken::child_of(&parent);
        let sibling = CancelToken::child_of(&parent);
        assert!(!child.is_cancelled());
        child.cancel();
        assert!(child.is_cancelled() && !parent.is_cancelled() && !sibling.is_cancelled());
        parent.cancel();
        assert!(sibling.is_cancelled() && parent.is_cancelled());
        assert!(CancelToken::child_of(&parent).is_cancelled());
    }
}
