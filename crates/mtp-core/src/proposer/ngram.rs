//! [`NgramProposer`]: prompt lookup decoding — drafts copied from earlier in the sequence.

use std::collections::HashMap;

use super::{Draft, Proposer, ProposerKind, ProposerRun, RoundContext};
use crate::{Backend, CoreError};

/// Default shortest n-gram matched ([`NgramOptions::min`]). HF transformers' prompt lookup
/// matches n-grams of up to 2 tokens, llama.cpp's lookup 1 to 4 and vLLM 5 (both bounds, a
/// value its source calls arbitrary); single-token matches propose mostly noise on text, so
/// we start at 2.
pub const DEFAULT_NGRAM_MIN: usize = 2;
/// Default longest n-gram matched ([`NgramOptions::max`]), llama.cpp's lookup bound.
pub const DEFAULT_NGRAM_MAX: usize = 4;
/// The largest `ngram_max` accepted (each committed token costs one index insert per n).
pub const NGRAM_MAX_LIMIT: usize = 32;

/// The n-gram sizes prompt lookup matches: the history's last `n` tokens for `n` from `max`
/// down to `min`, the longest match winning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NgramOptions {
    /// Shortest suffix matched (≥ 1).
    pub min: usize,
    /// Longest suffix matched (`min ..= NGRAM_MAX_LIMIT`).
    pub max: usize,
}

impl Default for NgramOptions {
    fn default() -> Self {
        Self {
            min: DEFAULT_NGRAM_MIN,
            max: DEFAULT_NGRAM_MAX,
        }
    }
}

impl NgramOptions {
    /// Checked options: `1 ≤ min ≤ max ≤ NGRAM_MAX_LIMIT`, else
    /// [`CoreError::InvalidOption`].
    pub fn new(min: usize, max: usize) -> Result<Self, CoreError> {
        if min == 0 {
            return Err(CoreError::InvalidOption {
                name: "ngram_min",
                value: min.to_string(),
                reason: "must be >= 1",
            });
        }
        if max > NGRAM_MAX_LIMIT {
            return Err(CoreError::InvalidOption {
                name: "ngram_max",
                value: max.to_string(),
                reason: "must be <= 32",
            });
        }
        if max < min {
            return Err(CoreError::InvalidOption {
                name: "ngram_max",
                value: max.to_string(),
                reason: "must be >= ngram_min",
            });
        }
        Ok(Self { min, max })
    }
}

/// Prompt lookup (Saxena 2023, "Prompt Lookup Decoding"; llama.cpp `lookup`, vLLM `ngram`):
/// find the longest suffix of the history, `n` from `max` down to `min` tokens, that occurred
/// before — in the prompt or in generated text — and propose the tokens that followed its most
/// recent earlier occurrence, up to the depth. A continuation that runs into the suffix itself
/// keeps copying from the proposal (as LZ77 does), so a sequence that repeats itself gets long
/// drafts.
///
/// The index is built incrementally: each committed token inserts one n-gram per size, so a
/// round costs `O(max − min + 1)` hash lookups plus the draft length, never a scan of the
/// history. Drafts are host ids without distributions (point masses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NgramProposer {
    options: NgramOptions,
}

impl NgramProposer {
    /// A proposer matching the n-gram sizes of `options`.
    pub fn new(options: NgramOptions) -> Self {
        Self { options }
    }

    /// Its options.
    pub fn options(&self) -> NgramOptions {
        self.options
    }
}

impl<B: Backend> Proposer<B> for NgramProposer {
    fn kind(&self) -> ProposerKind {
        ProposerKind::Ngram
    }

    fn start<'p>(
        &'p self,
        _backend: &B,
        _prompt: &[u32],
    ) -> Result<Box<dyn ProposerRun<B> + 'p>, B::Error> {
        Ok(Box::new(NgramIndex::new(self.options)))
    }
}

/// The n-gram index of one generation's history.
#[derive(Debug)]
pub(crate) struct NgramIndex {
    options: NgramOptions,
    /// History tokens indexed so far.
    indexed: usize,
    /// The last indexed token (a cheap check that the history only grew).
    last: Option<u32>,
    /// Per size `n` (`maps[n - min]`): an n-gram → the end (exclusive) of its most recent
    /// occurrence that a token followed.
    maps: Vec<HashMap<Box<[u32]>, usize>>,
}

impl NgramIndex {
    pub(crate) fn new(options: NgramOptions) -> Self {
        Self {
            options,
            indexed: 0,
            last: None,
            maps: vec![HashMap::new(); options.max - options.min + 1],
        }
    }

    /// Index the tokens of `history` not indexed yet: appending `history[j]` records, for each
    /// size `n`, that the n-gram ending before `j` was followed by a token.
    fn sync(&mut self, history: &[u32]) {
        let grew = history.len() >= self.indexed
            && (self.indexed == 0 || history.get(self.indexed - 1).copied() == self.last);
        if !grew {
            // Not this generation's history any more: start over.
            *self = Self::new(self.options);
        }
        for j in self.indexed..history.len() {
            for n in self.options.min..=self.options.max.min(j) {
                let key: Box<[u32]> = history[j - n..j].into();
                self.maps[n - self.options.min].insert(key, j);
            }
        }
        self.indexed = history.len();
        self.last = history.last().copied();
    }

    /// Up to `depth` tokens continuing `history` (see [`NgramProposer`]).
    pub(crate) fn lookup(&mut self, history: &[u32], depth: usize) -> Vec<u32> {
        self.sync(history);
        let len = history.len();
        let (min, max) = (self.options.min, self.options.max);
        for n in (min..=max.min(len)).rev() {
            let Some(&end) = self.maps[n - min].get(&history[len - n..]) else {
                continue;
            };
            let mut draft = Vec::with_capacity(depth);
            for i in 0..depth {
                let at = end + i;
                // `end < len`, so a position past the history is an earlier draft.
                let token = match history.get(at) {
                    Some(&t) => t,
                    None => draft[at - len],
                };
                draft.push(token);
            }
            return draft;
        }
        Vec::new()
    }
}

impl<B: Backend> ProposerRun<B> for NgramIndex {
    fn propose(
        &mut self,
        round: &mut RoundContext<'_, B>,
        depth: usize,
    ) -> Result<Option<Draft<B>>, B::Error> {
        let ids = self.lookup(round.history, depth);
        Draft::from_host(round.backend, ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(history: &[u32], options: NgramOptions, depth: usize) -> Vec<u32> {
        let len = history.len();
        for n in (options.min..=options.max.min(len)).rev() {
            let suffix = &history[len - n..];
            // Most recent earlier occurrence followed by at least one token.
            for end in (n..len).rev() {
                if &history[end - n..end] == suffix {
                    let mut seq = history.to_vec();
                    for i in 0..depth {
                        let t = seq[end + i];
                        seq.push(t);
                    }
                    return seq[len..].to_vec();
                }
            }
        }
        Vec::new()
    }

    #[test]
    fn options_are_checked() {
        assert!(NgramOptions::new(0, 3).is_err());
        assert!(NgramOptions::new(3, 2).is_err());
        assert!(NgramOptions::new(1, NGRAM_MAX_LIMIT + 1).is_err());
        assert_eq!(
            NgramOptions::new(1, 1).unwrap(),
            NgramOptions { min: 1, max: 1 }
        );
        let d = NgramOptions::default();
        assert!(NgramOptions::new(d.min, d.max).is_ok());
    }

    #[test]
    fn longest_most_recent_match_and_self_overlap() {
        let mut index = NgramIndex::new(NgramOptions { min: 1, max: 3 });
        // "1 2 3 9 | 1 2 3 4 | 5 2 3" → suffix "2 3" (3-gram "5 2 3" unseen) last seen before 4.
        let h = [1, 2, 3, 9, 1, 2, 3, 4, 5, 2, 3];
        assert_eq!(index.lookup(&h, 3), vec![4, 5, 2]);
        // A run of one token copies itself for as long as asked.
        let mut index = NgramIndex::new(NgramOptions { min: 2, max: 4 });
        assert_eq!(index.lookup(&[7, 7, 7], 5), vec![7; 5]);
        // No match: nothing.
        let mut index = NgramIndex::new(NgramOptions::default());
        assert!(index.lookup(&[1, 2, 3, 4], 4).is_empty());
        assert!(index.lookup(&[], 4).is_empty());
    }

    #[test]
    fn incremental_index_equals_a_scan() {
        let mut state = 0x1234_5678u64;
        let mut next = |m: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % m) as u32
        };
        for options in [
            NgramOptions { min: 1, max: 1 },
            NgramOptions { min: 2, max: 4 },
            NgramOptions { min: 1, max: 5 },
        ] {
            let mut index = NgramIndex::new(options);
            let mut history = Vec::new();
            for _ in 0..400 {
                // Grow by 1..3 tokens from a small alphabet (many repeats).
                for _ in 0..=next(3) {
                    history.push(next(4));
                }
                let depth = 1 + next(6) as usize;
                assert_eq!(
                    index.lookup(&history, depth),
                    naive(&history, options, depth),
                    "{options:?} after {history:?}"
                );
            }
            // A different (shorter) history resets the index.
            assert_eq!(index.lookup(&[3, 3], 2), naive(&[3, 3], options, 2));
        }
    }
}
