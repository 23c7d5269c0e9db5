//! Attention masks: the geometry ([`AttentionMask`]), the table a forward builds from it at most
//! once ([`AttentionBias`], shared through [`ForwardMasks`]), and when no table is needed at all.
//!
//! # Cost
//!
//! A mask is `tq × tk` values. Built per layer per forward it is O(context) per decoded token and
//! O(prompt²) per layer for a prefill. So:
//!
//! * when every query sees every key — a single query on full attention, or a single query on a
//!   sliding layer whose keys are exactly its window — no table is built and attention adds
//!   nothing ([`AttentionMask::is_all_visible`]);
//! * otherwise a model builds the table once per forward for each distinct geometry (in practice
//!   one per layer kind: every layer of a kind has the same query and key ranges) through
//!   [`ForwardMasks`], and every layer of that kind reuses it.
//!
//! Skipping a table whose entries would all be `0` changes nothing: `score + 0 = score` exactly.

use std::cell::Cell;

use crate::{Backend, DType};

/// Whether queries may look at keys later than themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Causality {
    /// A query at position `p` sees keys at positions `<= p` (decoder attention).
    Causal,
    /// Every query sees every key (subject only to the window).
    Bidirectional,
}

/// Which keys each query may attend to, stated in absolute positions.
///
/// Query row `i` sits at position `query_start + i`; key column `j` at `key_start + j`. Key `kp`
/// is visible to query `qp` when the causality allows it (`kp <= qp` when causal) and, with a
/// sliding window `w`, when `|qp - kp| < w` (so a query sees itself and the `w - 1` keys before
/// it — HF transformers' sliding-window rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionMask {
    /// Absolute position of the first query row.
    pub query_start: usize,
    /// Absolute position of the first key column.
    pub key_start: usize,
    /// Causal or bidirectional.
    pub causality: Causality,
    /// Sliding-window length, if any.
    pub window: Option<usize>,
}

impl AttentionMask {
    /// A causal mask without a window.
    pub fn causal(query_start: usize, key_start: usize) -> Self {
        Self {
            query_start,
            key_start,
            causality: Causality::Causal,
            window: None,
        }
    }

    /// The same mask restricted to a sliding window of `window` positions.
    pub fn with_window(mut self, window: Option<usize>) -> Self {
        self.window = window;
        self
    }

    /// Whether the key at absolute position `key` is visible to the query at `query`.
    pub fn allows(&self, query: usize, key: usize) -> bool {
        if self.causality == Causality::Causal && key > query {
            return false;
        }
        match self.window {
            Some(w) => query.abs_diff(key) < w,
            None => true,
        }
    }

    /// Whether each of the `tq` queries sees each of the `tk` keys, so that the mask can be left
    /// out. O(1): visibility is convex in `(query, key)`, so the four corners decide it.
    pub fn is_all_visible(&self, tq: usize, tk: usize) -> bool {
        if tq == 0 || tk == 0 {
            return true;
        }
        let (q0, q1) = (self.query_start, self.query_start + tq - 1);
        let (k0, k1) = (self.key_start, self.key_start + tk - 1);
        [(q0, k0), (q0, k1), (q1, k0), (q1, k1)]
            .iter()
            .all(|&(q, k)| self.allows(q, k))
    }

    /// Whether query row `row` sees none of the `tk` keys (its attention output is zeros).
    pub fn row_is_blind(&self, row: usize, tk: usize) -> bool {
        if tk == 0 {
            return true;
        }
        let q = self.query_start + row;
        let (mut lo, mut hi) = (self.key_start, self.key_start + tk - 1);
        if self.causality == Causality::Causal {
            hi = hi.min(q);
        }
        if let Some(w) = self.window {
            let reach = w.saturating_sub(1);
            lo = lo.max(q.saturating_sub(reach));
            hi = hi.min(q.saturating_add(reach));
            if w == 0 {
                return true;
            }
        }
        lo > hi
    }

    /// Whether some of the `tq` query rows sees no key at all. O(tq).
    pub fn has_blind_rows(&self, tq: usize, tk: usize) -> bool {
        (0..tq).any(|row| self.row_is_blind(row, tk))
    }

    /// The additive mask as a dense row-major `[tq, tk]` table of `0` and `-inf`.
    pub fn to_additive(&self, tq: usize, tk: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(tq * tk);
        for i in 0..tq {
            for j in 0..tk {
                let visible = self.allows(self.query_start + i, self.key_start + j);
                out.push(if visible { 0.0 } else { f32::NEG_INFINITY });
            }
        }
        out
    }
}

thread_local! {
    static TABLES_BUILT: Cell<u64> = const { Cell::new(0) };
}

/// How many additive mask tables [`AttentionBias::new`] has built on the calling thread since it
/// started — a diagnostic for tests and profiling (a decode step that builds none is the goal).
pub fn mask_tables_built() -> u64 {
    TABLES_BUILT.with(Cell::get)
}

/// An [`AttentionMask`] prepared for one attention shape: its `[tq, tk]` additive table on the
/// device, or none when every key is visible (see the [module docs](self)).
///
/// Built by [`AttentionBias::new`] (usually through [`ForwardMasks`]) and consumed by
/// [`Backend::attention_with_bias`].
#[derive(Debug, Clone)]
pub struct AttentionBias<B: Backend> {
    mask: AttentionMask,
    tq: usize,
    tk: usize,
    dtype: DType,
    table: Option<B::Array>,
    blind_rows: bool,
}

impl<B: Backend> AttentionBias<B> {
    /// Prepare `mask` for `tq` queries over `tk` keys with scores in `dtype`: the table comes
    /// from [`Backend::mask_table`] unless every key is visible.
    pub fn new(
        backend: &B,
        mask: AttentionMask,
        tq: usize,
        tk: usize,
        dtype: DType,
    ) -> Result<Self, B::Error> {
        let table = if mask.is_all_visible(tq, tk) {
            None
        } else {
            TABLES_BUILT.with(|n| n.set(n.get() + 1));
            Some(backend.mask_table(&mask, tq, tk, dtype)?)
        };
        Ok(Self {
            mask,
            tq,
            tk,
            dtype,
            table,
            blind_rows: mask.has_blind_rows(tq, tk),
        })
    }

    /// The mask this bias was built from.
    pub fn mask(&self) -> &AttentionMask {
        &self.mask
    }

    /// Query rows.
    pub fn tq(&self) -> usize {
        self.tq
    }

    /// Key columns.
    pub fn tk(&self) -> usize {
        self.tk
    }

    /// The dtype of the table.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The `[tq, tk]` additive table (`0` visible, `-inf` hidden); `None` when every key is
    /// visible and nothing needs adding.
    pub fn table(&self) -> Option<&B::Array> {
        self.table.as_ref()
    }

    /// Whether some query row sees no key (its output must be zeros, not softmax's NaN).
    pub fn has_blind_rows(&self) -> bool {
        self.blind_rows
    }

    /// Whether this bias was prepared for `mask` at this shape and dtype.
    fn fits(&self, mask: &AttentionMask, tq: usize, tk: usize, dtype: DType) -> bool {
        self.mask == *mask && self.tq == tq && self.tk == tk && self.dtype == dtype
    }
}

/// The attention biases of one forward: each distinct mask geometry is prepared once and reused
/// by every layer that attends with it (every layer of one kind, in the Gemma models).
#[derive(Debug)]
pub struct ForwardMasks<B: Backend> {
    prepared: Vec<AttentionBias<B>>,
}

impl<B: Backend> Default for ForwardMasks<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: Backend> ForwardMasks<B> {
    /// Nothing prepared yet.
    pub fn new() -> Self {
        Self {
            prepared: Vec::new(),
        }
    }

    /// The bias of `mask` for `tq` queries over `tk` keys in `dtype`, prepared on first use.
    pub fn get(
        &mut self,
        backend: &B,
        mask: AttentionMask,
        tq: usize,
        tk: usize,
        dtype: DType,
    ) -> Result<&AttentionBias<B>, B::Error> {
        let index = match self
            .prepared
            .iter()
            .position(|p| p.fits(&mask, tq, tk, dtype))
        {
            Some(i) => i,
            None => {
                self.prepared
                    .push(AttentionBias::new(backend, mask, tq, tk, dtype)?);
                self.prepared.len() - 1
            }
        };
        Ok(&self.prepared[index])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::ReferenceBackend;

    /// Brute force over every (query, key) pair.
    fn brute(mask: &AttentionMask, tq: usize, tk: usize) -> (bool, Vec<bool>) {
        let all =
            (0..tq).all(|i| (0..tk).all(|j| mask.allows(mask.query_start + i, mask.key_start + j)));
        let blind = (0..tq)
            .map(|i| (0..tk).all(|j| !mask.allows(mask.query_start + i, mask.key_start + j)))
            .collect();
        (all, blind)
    }

    #[test]
    fn visibility_shortcuts_match_brute_force() {
        for causality in [Causality::Causal, Causality::Bidirectional] {
            for window in [None, Some(1), Some(2), Some(3), Some(5)] {
                for query_start in 0..7 {
                    for key_start in 0..7 {
                        for tq in 1..4 {
                            for tk in 1..7 {
                                let mask = AttentionMask {
                                    query_start,
                                    key_start,
                                    causality,
                                    window,
                                };
                                let (all, blind) = brute(&mask, tq, tk);
                                assert_eq!(mask.is_all_visible(tq, tk), all, "{mask:?} {tq}x{tk}");
                                for (row, &b) in blind.iter().enumerate() {
                                    assert_eq!(mask.row_is_blind(row, tk), b, "{mask:?} row {row}");
                                }
                                assert_eq!(mask.has_blind_rows(tq, tk), blind.iter().any(|&b| b));
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn single_query_full_attention_builds_no_table() {
        let b = ReferenceBackend::default();
        let before = mask_tables_built();
        // Decode step at position 9 over keys 0..=9, and a sliding step whose keys are its window.
        let full = AttentionBias::new(&b, AttentionMask::causal(9, 0), 1, 10, DType::F32).unwrap();
        let sliding = AttentionMask::causal(9, 6).with_window(Some(4));
        let ring = AttentionBias::new(&b, sliding, 1, 4, DType::F32).unwrap();
        assert!(full.table().is_none() && ring.table().is_none());
        assert_eq!(mask_tables_built(), before);
        // A verify of 3 rows needs one table, shared by every layer through ForwardMasks.
        let mut masks = ForwardMasks::<ReferenceBackend>::new();
        for _ in 0..5 {
            let bias = masks
                .get(&b, AttentionMask::causal(9, 0), 3, 12, DType::F32)
                .unwrap();
            assert!(bias.table().is_some());
        }
        assert_eq!(mask_tables_built(), before + 1);
    }
}
