//! A sliding-window cache: a ring of the last `window` positions.

use super::{
    cannot_truncate, copy_buffers, write_len, CacheKind, KvCache, KvPair, KvView,
    SpeculationSupport, Truncation,
};
use crate::{Backend, CoreError};

/// State saved when a speculation transaction opens.
#[derive(Debug, Clone)]
struct Snapshot<B: Backend> {
    len: usize,
    /// Whether storage existed at `begin` (a transaction may allocate it).
    allocated: bool,
    /// For every write inside the transaction, in order: the ring slot it started at and the
    /// `(keys, values)` it overwrote there — only the slots the round wrote, never the ring.
    overwritten: Vec<(usize, KvPair<B>)>,
    /// Every `(keys, values)` write made inside the transaction, in order.
    writes: Vec<KvPair<B>>,
}

/// The keys and values of the last `window` positions (sliding-window attention layers).
///
/// # When to use
///
/// For layers whose queries see only the `window` most recent positions (themselves included):
/// memory stays at `2 × window` entries however long the sequence.
///
/// # Layout: a mirrored ring
///
/// Position `p` lives in ring slot `p % window` *and* in slot `p % window + window` of a buffer
/// of `2 × window` positions. Any `n <= window` consecutive stored positions are therefore one
/// contiguous slice of the buffer, in chronological order: a single-token
/// [`KvCache::update`] writes its position (two rows) and returns that slice — O(new tokens),
/// no copy of the history, and the keys stay in the order an ordered attention sums them, so
/// every result is bit-for-bit what a chronological copy gives. A multi-token update (prefill,
/// verification) returns the `window - 1` positions before the write followed by the new ones,
/// so every query of the write sees its full window even when the write wraps the ring; that
/// view is one concatenation.
///
/// # Rollback
///
/// A write can overwrite ring slots that a rolled-back state still needs. Inside a transaction
/// each write first copies the rows it is about to overwrite (O(new tokens), never the ring),
/// and keeps the written keys and values. `commit(keep)` with `keep` below the number written
/// puts the overwritten rows back, newest write first, and replays the first `keep` positions:
/// the result equals a cache that only ever appended the kept positions, wrapped or not.
#[derive(Debug, Clone)]
pub struct RotatingKvCache<B: Backend> {
    window: usize,
    /// `[1, heads, 2 * window, dim]` keys and values (see the layout above).
    buffers: Option<KvPair<B>>,
    len: usize,
    snapshot: Option<Snapshot<B>>,
}

impl<B: Backend> RotatingKvCache<B> {
    /// An empty cache for a window of `window` positions (at least 1).
    pub fn new(window: usize) -> Result<Self, CoreError> {
        if window == 0 {
            return Err(CoreError::InvalidArgument {
                op: "rotating cache",
                message: "the window must hold at least one position".into(),
            });
        }
        if window.checked_mul(2).is_none() {
            return Err(CoreError::InvalidArgument {
                op: "rotating cache",
                message: format!("a window of {window} positions is too large"),
            });
        }
        Ok(Self {
            window,
            buffers: None,
            len: 0,
            snapshot: None,
        })
    }

    /// The window length.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The stored positions `[from, self.len)` in chronological order (`from >= len - window`):
    /// one slice of the mirrored ring, no copy.
    fn linear(&self, backend: &B, from: usize) -> Result<Option<KvPair<B>>, B::Error> {
        let Some((k, v)) = &self.buffers else {
            return Ok(None);
        };
        if from >= self.len {
            return Ok(None);
        }
        let count = self.len - from;
        if count > self.window {
            return Err(CoreError::Cache(format!(
                "rotating cache: {count} positions asked of a window of {}",
                self.window
            ))
            .into());
        }
        let first_slot = from % self.window;
        Ok(Some((
            backend.slice(k, 2, first_slot, count)?,
            backend.slice(v, 2, first_slot, count)?,
        )))
    }

    /// Allocate the mirrored ring on the first write.
    fn allocate(
        &mut self,
        backend: &B,
        keys: &B::Array,
        values: &B::Array,
    ) -> Result<(), B::Error> {
        if self.buffers.is_none() {
            let alloc = |like: &B::Array| -> Result<B::Array, B::Error> {
                let mut shape = backend.shape(like);
                shape[2] = 2 * self.window;
                backend.full(&shape, 0.0, backend.dtype(like))
            };
            self.buffers = Some((alloc(keys)?, alloc(values)?));
        }
        Ok(())
    }

    /// Write `rows` consecutive ring slots from `slot` (mod `window`; at most `window` rows), in
    /// both halves of the mirror.
    fn put(
        &mut self,
        backend: &B,
        slot: usize,
        (keys, values): (&B::Array, &B::Array),
        rows: usize,
    ) -> Result<(), B::Error> {
        let w = self.window;
        let Some((k_buf, v_buf)) = self.buffers.as_mut() else {
            return Err(CoreError::Cache("rotating cache: storage missing".into()).into());
        };
        let slot = slot % w;
        // `slot + rows <= 2w`: one contiguous write, then the mirror of each half.
        let head = rows.min(w - slot);
        for (buf, src) in [(k_buf, keys), (v_buf, values)] {
            backend.write_slice(buf, src, 2, slot)?;
            if head == rows {
                backend.write_slice(buf, src, 2, slot + w)?;
            } else {
                let low = backend.slice(src, 2, 0, head)?;
                backend.write_slice(buf, &low, 2, slot + w)?;
                let high = backend.slice(src, 2, head, rows - head)?;
                backend.write_slice(buf, &high, 2, 0)?;
            }
        }
        Ok(())
    }

    /// Copies of the `rows` ring slots from `slot` (before they are overwritten).
    fn read_slots(&self, backend: &B, slot: usize, rows: usize) -> Result<KvPair<B>, B::Error> {
        let Some((k, v)) = &self.buffers else {
            return Err(CoreError::Cache("rotating cache: storage missing".into()).into());
        };
        let slot = slot % self.window;
        Ok((
            backend.deep_copy(&backend.slice(k, 2, slot, rows)?)?,
            backend.deep_copy(&backend.slice(v, 2, slot, rows)?)?,
        ))
    }

    /// Write `keys`/`values` for positions `len .. len + t` into the ring (only the last
    /// `window` of them can survive). Inside a transaction the overwritten rows are saved first.
    fn write_ring(
        &mut self,
        backend: &B,
        keys: &B::Array,
        values: &B::Array,
        t: usize,
    ) -> Result<(), B::Error> {
        self.allocate(backend, keys, values)?;
        let kept = t.min(self.window);
        let skip = t - kept;
        let first_slot = (self.len + skip) % self.window;
        if kept > 0 && self.snapshot.is_some() {
            let old = self.read_slots(backend, first_slot, kept)?;
            if let Some(snapshot) = self.snapshot.as_mut() {
                snapshot.overwritten.push((first_slot, old));
            }
        }
        if kept > 0 {
            let (k, v) = if skip == 0 {
                (keys.clone(), values.clone())
            } else {
                (
                    backend.slice(keys, 2, skip, kept)?,
                    backend.slice(values, 2, skip, kept)?,
                )
            };
            self.put(backend, first_slot, (&k, &v), kept)?;
        }
        self.len += t;
        Ok(())
    }

    /// Ring rows the open transaction has saved (0 when none is open).
    #[cfg(test)]
    pub(super) fn saved_rows(&self, backend: &B) -> usize {
        self.snapshot.as_ref().map_or(0, |s| {
            s.overwritten
                .iter()
                .map(|(_, (k, _))| backend.shape(k)[2])
                .sum()
        })
    }

    fn append(
        &mut self,
        backend: &B,
        keys: &B::Array,
        values: &B::Array,
    ) -> Result<KvView<B>, B::Error> {
        let t = write_len(backend, keys, values)?;
        if t == 1 || self.len + t <= self.window {
            // Write first, then the window ending at the new position is one slice: one query
            // needs only the last `window` positions, and while the ring has room for the
            // whole write (`len + t <= window`) nothing the queries see is overwritten. (Before
            // this, every verify of several tokens copied the whole history of every
            // sliding layer into a fresh view.)
            let from = (self.len + 1).saturating_sub(self.window);
            self.write_ring(backend, keys, values, t)?;
            return match self.linear(backend, from)? {
                Some((k, v)) => Ok(KvView {
                    keys: k,
                    values: v,
                    start: from,
                }),
                None => Err(CoreError::Cache("rotating cache: empty after a write".into()).into()),
            };
        }
        let from = self.len.saturating_sub(self.window - 1);
        // Build the view before writing: on in-place backends the history is a view of the
        // ring, and the write may overwrite the slots it reads (the concatenation copies it).
        let view = match self.linear(backend, from)? {
            Some((hk, hv)) => KvView {
                keys: backend.concat(&[&hk, keys], 2)?,
                values: backend.concat(&[&hv, values], 2)?,
                start: from,
            },
            None => KvView {
                keys: keys.clone(),
                values: values.clone(),
                start: self.len,
            },
        };
        self.write_ring(backend, keys, values, t)?;
        Ok(view)
    }
}

impl<B: Backend> KvCache<B> for RotatingKvCache<B> {
    fn kind(&self) -> CacheKind {
        CacheKind::Rotating {
            window: self.window,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn update(
        &mut self,
        backend: &B,
        keys: &B::Array,
        values: &B::Array,
    ) -> Result<KvView<B>, B::Error> {
        let view = self.append(backend, keys, values)?;
        if let Some(snapshot) = self.snapshot.as_mut() {
            snapshot.writes.push((keys.clone(), values.clone()));
        }
        Ok(view)
    }

    fn view(&self, backend: &B) -> Result<Option<KvView<B>>, B::Error> {
        let from = self.len.saturating_sub(self.window);
        Ok(self.linear(backend, from)?.map(|(keys, values)| KvView {
            keys,
            values,
            start: from,
        }))
    }

    fn can_speculate(&self) -> bool {
        true
    }

    fn begin_speculation(&mut self, _backend: &B) -> Result<SpeculationSupport, B::Error> {
        if self.snapshot.is_some() {
            return Err(CoreError::Cache("rotating cache: speculation already open".into()).into());
        }
        self.snapshot = Some(Snapshot {
            len: self.len,
            allocated: self.buffers.is_some(),
            overwritten: Vec::new(),
            writes: Vec::new(),
        });
        Ok(SpeculationSupport::Started)
    }

    fn commit_speculation(&mut self, backend: &B, keep: usize) -> Result<(), B::Error> {
        let Some(snapshot) = self.snapshot.take() else {
            return Err(CoreError::Cache("rotating cache: commit without begin".into()).into());
        };
        let written = self.len - snapshot.len;
        if keep > written {
            let message = format!("rotating cache: cannot keep {keep} of {written} positions");
            self.snapshot = Some(snapshot);
            return Err(CoreError::Cache(message).into());
        }
        if keep == written {
            return Ok(());
        }
        // Undo the writes, newest first: every overwritten slot gets its old rows back.
        for (slot, (k, v)) in snapshot.overwritten.iter().rev() {
            let rows = backend.shape(k)[2];
            self.put(backend, *slot, (k, v), rows)?;
        }
        if !snapshot.allocated {
            self.buffers = None;
        }
        self.len = snapshot.len;
        if keep == 0 {
            return Ok(());
        }
        let keys: Vec<&B::Array> = snapshot.writes.iter().map(|(k, _)| k).collect();
        let values: Vec<&B::Array> = snapshot.writes.iter().map(|(_, v)| v).collect();
        let keys = backend.slice(&backend.concat(&keys, 2)?, 2, 0, keep)?;
        let values = backend.slice(&backend.concat(&values, 2)?, 2, 0, keep)?;
        self.write_ring(backend, &keys, &values, keep)
    }

    fn is_speculating(&self) -> bool {
        self.snapshot.is_some()
    }

    fn fork(&self, backend: &B) -> Result<Box<dyn KvCache<B>>, B::Error> {
        if self.is_speculating() {
            return Err(CoreError::Cache("rotating cache: fork while speculating".into()).into());
        }
        let buffers = copy_buffers(backend, &self.buffers)?;
        Ok(Box::new(Self {
            window: self.window,
            buffers,
            len: self.len,
            snapshot: None,
        }))
    }

    /// To its own length, to empty, or to any shorter length while the ring has never wrapped
    /// (every position is still stored). Once it has wrapped, the positions a shorter window
    /// would need were overwritten: impossible.
    fn can_truncate(&self, len: usize) -> Truncation {
        let stored = len == self.len || len == 0 || (len < self.len && self.len <= self.window);
        if self.snapshot.is_none() && stored {
            Truncation::Possible
        } else {
            Truncation::Impossible
        }
    }

    fn truncate(&mut self, _backend: &B, len: usize) -> Result<(), B::Error> {
        if self.can_truncate(len) == Truncation::Impossible {
            return Err(cannot_truncate(self.kind(), self.len, len).into());
        }
        // Position p lives in slots p % window (and its mirror): with no wrap, slots below `len`
        // hold exactly positions 0 .. len; later writes overwrite the rest.
        self.len = len;
        Ok(())
    }
}
