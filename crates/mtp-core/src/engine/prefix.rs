//! Prefix reuse across requests: the caches of the last generation are kept with the tokens
//! whose keys and values they hold, and a request whose prompt starts with some of those tokens
//! (a chat turn resends the history) prefills only the rest: [`PrefixCache`] states the rule.

use super::sink::{CancelToken, TokenSink};
use super::stats::Response;
use super::{Engine, GenerateRequest};
use crate::cache::{CacheSet, Truncation};
use crate::Backend;

/// Whether a worker keeps its caches between requests for prefix reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefixReuse {
    /// Keep the caches; reuse the longest common prefix (the default).
    #[default]
    On,
    /// Evaluate every prompt from the start.
    Off,
}

/// The caches kept from the last generation and the tokens whose keys and values they hold.
///
/// # The rule
///
/// The keys and values of position `p` depend only on the tokens at positions `0 ..= p`. So
/// for the common prefix `L` of the held tokens and the new prompt (at most the prompt's length
/// minus one: the last prompt token is always evaluated, its logits choose the first token),
/// caches cut back to `L` positions ([`CacheSet::truncate`]) are the caches of a prefill of
/// `prompt[..L]`, and generation continues as if it had evaluated that prefix itself. The held
/// tokens are the prompt and emitted tokens that were actually forwarded (the caches' length,
/// never a draft that was rolled back), so nothing the client was not sent can leak into the
/// next request: a token after a stop string is simply not in the next prompt, and the caches
/// are cut before it.
///
/// When the cut is impossible (a sliding-window cache that wrapped past `L`), the caches are
/// emptied and the prompt is evaluated from the start — never a silent approximation. Numbers
/// differ from a fresh prefill only by the rounding of evaluating the prompt in two forwards
/// instead of one.
#[derive(Debug, Default)]
pub struct PrefixCache<B: Backend> {
    caches: Option<CacheSet<B>>,
    tokens: Vec<u32>,
}

impl<B: Backend> PrefixCache<B> {
    /// Nothing held.
    pub fn new() -> Self {
        Self {
            caches: None,
            tokens: Vec::new(),
        }
    }

    /// The tokens whose keys and values are held (empty when nothing is).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Drop what is held.
    pub fn clear(&mut self) {
        self.caches = None;
        self.tokens.clear();
    }

    /// Caches for `prompt`: the held ones cut to the longest common prefix (below the prompt's
    /// length) when they can be cut, else empty ones.
    fn take_for(
        &mut self,
        engine: &Engine<'_, B>,
        prompt: &[u32],
    ) -> Result<CacheSet<B>, B::Error> {
        let shared = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len().saturating_sub(1));
        let held = self.caches.take();
        self.tokens.clear();
        if let Some(mut caches) = held.filter(|c| !c.is_speculating()) {
            if shared > 0 && caches.truncate(engine.backend, shared)? == Truncation::Possible {
                return Ok(caches);
            }
            if caches.truncate(engine.backend, 0)? == Truncation::Possible {
                return Ok(caches);
            }
        }
        engine.target.new_caches(engine.backend)
    }
}

impl<B: Backend> Engine<'_, B> {
    /// Generate reusing what `held` keeps from the last generation (the rule: [`PrefixCache`]),
    /// and keep this generation's caches in it afterwards.
    /// [`Response::prompt_cached`] says how many prompt positions were reused. On an error
    /// nothing is kept.
    pub fn generate_reusing(
        &self,
        held: &mut PrefixCache<B>,
        request: &GenerateRequest,
        sink: &mut dyn TokenSink,
        cancel: &CancelToken,
    ) -> Result<Response, B::Error> {
        self.check_request(request)?;
        let mut caches = held.take_for(self, &request.prompt)?;
        let response = self.generate_after_cached(&mut caches, request, sink, cancel)?;
        if caches.is_speculating() {
            return Ok(response);
        }
        // A round may have cached accepted drafts past the last emitted token (EOS among them,
        // or a sink that stopped): cut back to what was emitted, or keep nothing.
        let emitted = request.prompt.len() + response.tokens.len();
        let fed = caches.position().min(emitted);
        if caches.truncate(self.backend, fed)? == Truncation::Possible {
            held.tokens = request
                .prompt
                .iter()
                .chain(&response.tokens)
                .take(fed)
                .copied()
                .collect();
            held.caches = Some(caches);
        }
        Ok(response)
    }
}
