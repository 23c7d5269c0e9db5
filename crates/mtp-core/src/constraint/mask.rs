//! The allowed-token set of a constraint and the logits it masks.

use crate::{Backend, CoreError, DType};

/// A set of token ids below `vocab`, one bit per token (bit `i % 32` of word `i / 32`, the
/// layout llguidance's `SimpleVob` uses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u32>,
    vocab: usize,
}

impl TokenMask {
    /// No token allowed.
    pub fn none(vocab: usize) -> Self {
        Self {
            words: vec![0; vocab.div_ceil(32)],
            vocab,
        }
    }

    /// Every token allowed.
    pub fn all(vocab: usize) -> Self {
        let mut mask = Self::none(vocab);
        for id in 0..vocab {
            mask.allow(id as u32);
        }
        mask
    }

    /// Only `ids` allowed (ids at or above `vocab` are dropped).
    pub fn of(vocab: usize, ids: &[u32]) -> Self {
        let mut mask = Self::none(vocab);
        for &id in ids {
            mask.allow(id);
        }
        mask
    }

    /// A mask from bit words; bits at or above `vocab` are cleared, missing words are zero.
    pub fn from_words(mut words: Vec<u32>, vocab: usize) -> Self {
        words.resize(vocab.div_ceil(32), 0);
        let tail = vocab % 32;
        if tail != 0 {
            if let Some(last) = words.last_mut() {
                *last &= (1u32 << tail) - 1;
            }
        }
        Self { words, vocab }
    }

    /// The vocabulary size.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Allow `id` (ignored at or above the vocabulary size).
    pub fn allow(&mut self, id: u32) {
        let i = id as usize;
        if i < self.vocab {
            self.words[i / 32] |= 1 << (i % 32);
        }
    }

    /// Whether `id` is allowed.
    pub fn allows(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.vocab && self.words[i / 32] & (1 << (i % 32)) != 0
    }

    /// How many tokens are allowed.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether no token is allowed.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The allowed ids, ascending.
    pub fn ids(&self) -> Vec<u32> {
        let mut ids = Vec::new();
        for (w, &word) in self.words.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let b = bits.trailing_zeros();
                ids.push((w * 32) as u32 + b);
                bits &= bits - 1;
            }
        }
        ids
    }

    /// Write `0` for allowed and `−∞` for disallowed tokens into `row` (a logits-wide row;
    /// entries past the mask's vocabulary are disallowed).
    fn write_bias(&self, row: &mut [f32]) {
        for (w, chunk) in row.chunks_mut(32).enumerate() {
            let word = self.words.get(w).copied().unwrap_or(0);
            if word == u32::MAX {
                continue;
            }
            for (b, value) in chunk.iter_mut().enumerate() {
                if word & (1 << b) == 0 {
                    *value = f32::NEG_INFINITY;
                }
            }
        }
    }
}

/// `logits` (`[1, t, v]`) with row `i`'s disallowed tokens (by `masks[i]`) set to `−∞`, in the
/// logits' dtype: a bias of `0` / `−∞` built on the host and added on the device, so every
/// later step (device argmax, device top-k, host reads) works on the masked row unchanged. A
/// `NaN` logit stays `NaN` (the non-finite check still sees it).
pub fn masked_logits<B: Backend>(
    backend: &B,
    logits: &B::Array,
    masks: &[TokenMask],
) -> Result<B::Array, B::Error> {
    let shape = backend.shape(logits);
    let (rows, vocab) = match shape.as_slice() {
        [1, t, v] => (*t, *v),
        _ => {
            return Err(CoreError::ShapeMismatch {
                op: "masked_logits",
                lhs: shape.clone(),
                rhs: vec![1, masks.len(), 0],
            }
            .into())
        }
    };
    if masks.len() != rows {
        return Err(CoreError::ShapeMismatch {
            op: "masked_logits",
            lhs: shape,
            rhs: vec![1, masks.len(), vocab],
        }
        .into());
    }
    let mut bias = vec![0f32; rows * vocab];
    for (row, mask) in bias.chunks_mut(vocab.max(1)).zip(masks) {
        mask.write_bias(row);
    }
    let dtype = backend.dtype(logits);
    let bias = backend.from_f32(&bias, &shape, float_or_f32(dtype))?;
    let bias = if backend.dtype(&bias) == dtype {
        bias
    } else {
        backend.cast(&bias, dtype)?
    };
    backend.add(logits, &bias)
}

fn float_or_f32(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 | DType::F32 => dtype,
        _ => DType::F32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::ReferenceBackend;

    #[test]
    fn bits_round_trip_and_clip_to_the_vocabulary() {
        let mut m = TokenMask::none(70);
        assert!(m.is_empty());
        for id in [0, 31, 32, 69, 70, 1000] {
            m.allow(id);
        }
        assert_eq!(m.ids(), vec![0, 31, 32, 69]);
        assert_eq!(m.count(), 4);
        assert!(m.allows(69) && !m.allows(70) && !m.allows(5));
        let w = TokenMask::from_words(vec![u32::MAX, u32::MAX, u32::MAX], 70);
        assert_eq!(w.count(), 70);
        assert_eq!(w, TokenMask::all(70));
        assert_eq!(TokenMask::of(70, &[3, 3, 99]).ids(), vec![3]);
    }

    #[test]
    fn masked_rows_keep_allowed_logits_and_nan() {
        let b = ReferenceBackend::default();
        let logits = b
            .from_f32(&[1.0, 2.0, 3.0, f32::NAN, 5.0, 6.0], &[1, 2, 3], DType::F32)
            .unwrap();
        let masks = [TokenMask::of(3, &[1]), TokenMask::of(2, &[0, 1])];
        let out = b
            .to_vec_f32(&masked_logits(&b, &logits, &masks).unwrap())
            .unwrap();
        assert_eq!(out[0], f32::NEG_INFINITY);
        assert_eq!(out[1], 2.0);
        assert_eq!(out[2], f32::NEG_INFINITY);
        assert!(out[3].is_nan());
        assert_eq!(out[4], 5.0);
        // Past the mask's vocabulary: disallowed.
        assert_eq!(out[5], f32::NEG_INFINITY);
        assert!(masked_logits(&b, &logits, &masks[..1]).is_err());
    }
}
