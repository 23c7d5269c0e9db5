//! A sliding-window cache: a ring of the last `window` positions.

use super::{copy_buffers, write_len, CacheKind, KvCache, KvPair, KvView, SpeculationSupport};
use crate::{Backend, CoreError};

/// State saved when a speculation transaction opens.
#[derive(Debug, Clone)]
struct Snapshot<B: Backend> {
    len: usize,
    buffers: Option<KvPair<B>>,
    /// Every `(keys, values)` write made inside the transaction, in order.
    writes: Vec<KvPair<B>>,
}

/// The keys and values of the last `window` positions (sliding-window attention layers).
///
/// # When to use
///
/// For layers whose queries see only the `window` most recent positions (themselves included):
/// memory stays at `window` entries however long the sequence. Position `p` lives in ring slot
/// `p % window`. [`KvCache::update`] returns the `window - 1` positions before the write followed
/// by the new ones, so every query of a multi-token write (prefill, verification) sees its full
/// window even when the write itself wraps the ring.
///
/// # Rollback
///
/// A write can overwrite ring slots that a rolled-back state still needs, so a transaction
/// snapshots the ring at `begin` (a cheap clone on immutable backends, a copy on in-place ones)
/// and keeps the speculative writes. `commit(keep)` with `keep` below the number written restores
/// the snapshot and replays the first `keep` positions: the result equals a cache that only ever
/// appended the kept positions, wrapped or not.
#[derive(Debug, Clone)]
pub struct RotatingKvCache<B: Backend> {
    window: usize,
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

    /// The stored positions `[from, self.len)` in chronological order (`from >= len - window`).
    fn linear(&self, backend: &B, from: usize) -> Result<Option<KvPair<B>>, B::Error> {
        let Some((k, v)) = &self.buffers else {
            return Ok(None);
        };
        if from >= self.len {
            return Ok(None);
        }
        let count = self.len - from;
        let first_slot = from % self.window;
        let head = count.min(self.window - first_slot);
        let read = |buf: &B::Array| -> Result<B::Array, B::Error> {
            let a = backend.slice(buf, 2, first_slot, head)?;
            if head == count {
                return Ok(a);
            }
            let b = backend.slice(buf, 2, 0, count - head)?;
            backend.concat(&[&a, &b], 2)
        };
        Ok(Some((read(k)?, read(v)?)))
    }

    /// Write `keys`/`values` for positions `len .. len + t` into the ring (only the last
    /// `window` of them can survive).
    fn write_ring(
        &mut self,
        backend: &B,
        keys: &B::Array,
        values: &B::Array,
        t: usize,
    ) -> Result<(), B::Error> {
        if self.buffers.is_none() {
            let alloc = |like: &B::Array| -> Result<B::Array, B::Error> {
                let mut shape = backend.shape(like);
                shape[2] = self.window;
                backend.full(&shape, 0.0, backend.dtype(like))
            };
            self.buffers = Some((alloc(keys)?, alloc(values)?));
        }
        let Some((k_buf, v_buf)) = self.buffers.as_mut() else {
            return Err(CoreError::Cache("rotating cache: storage missing".into()).into());
        };
        let kept = t.min(self.window);
        let skip = t - kept;
        let first_pos = self.len + skip;
        let first_slot = first_pos % self.window;
        let head = kept.min(self.window - first_slot);
        for (buf, src) in [(k_buf, keys), (v_buf, values)] {
            let part = backend.slice(src, 2, skip, head)?;
            backend.write_slice(buf, &part, 2, first_slot)?;
            if head < kept {
                let rest = backend.slice(src, 2, skip + head, kept - head)?;
                backend.write_slice(buf, &rest, 2, 0)?;
            }
        }
        self.len += t;
        Ok(())
    }

    fn append(
        &mut self,
        backend: &B,
        keys: &B::Array,
        values: &B::Array,
    ) -> Result<KvView<B>, B::Error> {
        let t = write_len(backend, keys, values)?;
        let from = self.len.saturating_sub(self.window - 1);
        // Build the view before writing: on in-place backends the history is a view of the
        // ring, and the write may overwrite the slots it reads.
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

    fn begin_speculation(&mut self, backend: &B) -> Result<SpeculationSupport, B::Error> {
        if self.snapshot.is_some() {
            return Err(CoreError::Cache("rotating cache: speculation already open".into()).into());
        }
        let buffers = copy_buffers(backend, &self.buffers)?;
        self.snapshot = Some(Snapshot {
            len: self.len,
            buffers,
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
        self.len = snapshot.len;
        self.buffers = snapshot.buffers;
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
}
