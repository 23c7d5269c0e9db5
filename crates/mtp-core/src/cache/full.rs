//! A cache that keeps every position, preallocated and written in place.

use super::{
    cannot_truncate, copy_buffers, write_len, CacheKind, KvCache, KvPair, KvView,
    SpeculationSupport, Truncation,
};
use crate::{Backend, CoreError};

/// Positions are allocated in blocks of this many (then capacity doubles).
const BLOCK: usize = 256;

/// The keys and values of every position so far (global attention layers).
///
/// # When to use
///
/// For full-attention layers. Storage is preallocated in blocks and grows by doubling; writes go
/// through [`Backend::write_slice`] (in place on backends with mutable storage). Rollback moves the
/// length back: entries past the length are never read and are overwritten by later writes.
#[derive(Debug, Clone)]
pub struct FullKvCache<B: Backend> {
    buffers: Option<KvPair<B>>,
    capacity: usize,
    len: usize,
    speculation_start: Option<usize>,
}

impl<B: Backend> Default for FullKvCache<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: Backend> FullKvCache<B> {
    /// An empty cache; storage is allocated on the first write, when heads, dims and dtype are
    /// known.
    pub fn new() -> Self {
        Self {
            buffers: None,
            capacity: 0,
            len: 0,
            speculation_start: None,
        }
    }

    /// Make room for `needed` positions, keeping what is stored.
    fn reserve(
        &mut self,
        backend: &B,
        template: (&B::Array, &B::Array),
        needed: usize,
    ) -> Result<(), B::Error> {
        if needed <= self.capacity && self.buffers.is_some() {
            return Ok(());
        }
        let capacity = needed.div_ceil(BLOCK).max(1) * BLOCK;
        let capacity = capacity.max(self.capacity * 2);
        let alloc = |like: &B::Array| -> Result<B::Array, B::Error> {
            let mut shape = backend.shape(like);
            shape[2] = capacity;
            backend.full(&shape, 0.0, backend.dtype(like))
        };
        let mut keys = alloc(template.0)?;
        let mut values = alloc(template.1)?;
        if let Some((old_k, old_v)) = &self.buffers {
            if self.len > 0 {
                backend.write_slice(&mut keys, &backend.slice(old_k, 2, 0, self.len)?, 2, 0)?;
                backend.write_slice(&mut values, &backend.slice(old_v, 2, 0, self.len)?, 2, 0)?;
            }
        }
        self.buffers = Some((keys, values));
        self.capacity = capacity;
        Ok(())
    }

    fn stored(&self, backend: &B) -> Result<Option<KvView<B>>, B::Error> {
        match &self.buffers {
            Some((k, v)) if self.len > 0 => Ok(Some(KvView {
                keys: backend.slice(k, 2, 0, self.len)?,
                values: backend.slice(v, 2, 0, self.len)?,
                start: 0,
            })),
            _ => Ok(None),
        }
    }
}

impl<B: Backend> KvCache<B> for FullKvCache<B> {
    fn kind(&self) -> CacheKind {
        CacheKind::Full
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
        let t = write_len(backend, keys, values)?;
        self.reserve(backend, (keys, values), self.len + t)?;
        let Some((k_buf, v_buf)) = self.buffers.as_mut() else {
            return Err(
                CoreError::Cache("full cache: storage missing after reserve".into()).into(),
            );
        };
        backend.write_slice(k_buf, keys, 2, self.len)?;
        backend.write_slice(v_buf, values, 2, self.len)?;
        self.len += t;
        match self.stored(backend)? {
            Some(view) => Ok(view),
            None => Err(CoreError::Cache("full cache: empty after a write".into()).into()),
        }
    }

    fn view(&self, backend: &B) -> Result<Option<KvView<B>>, B::Error> {
        self.stored(backend)
    }

    fn can_speculate(&self) -> bool {
        true
    }

    fn begin_speculation(&mut self, _backend: &B) -> Result<SpeculationSupport, B::Error> {
        if self.speculation_start.is_some() {
            return Err(CoreError::Cache("full cache: speculation already open".into()).into());
        }
        self.speculation_start = Some(self.len);
        Ok(SpeculationSupport::Started)
    }

    fn commit_speculation(&mut self, _backend: &B, keep: usize) -> Result<(), B::Error> {
        let Some(start) = self.speculation_start else {
            return Err(CoreError::Cache("full cache: commit without begin".into()).into());
        };
        let written = self.len - start;
        if keep > written {
            return Err(CoreError::Cache(format!(
                "full cache: cannot keep {keep} of {written} speculative positions"
            ))
            .into());
        }
        self.len = start + keep;
        self.speculation_start = None;
        Ok(())
    }

    fn is_speculating(&self) -> bool {
        self.speculation_start.is_some()
    }

    fn fork(&self, backend: &B) -> Result<Box<dyn KvCache<B>>, B::Error> {
        if self.is_speculating() {
            return Err(CoreError::Cache("full cache: fork while speculating".into()).into());
        }
        let buffers = copy_buffers(backend, &self.buffers)?;
        Ok(Box::new(Self {
            buffers,
            capacity: self.capacity,
            len: self.len,
            speculation_start: None,
        }))
    }

    /// Any length up to the current one (entries past it are never read again).
    fn can_truncate(&self, len: usize) -> Truncation {
        if self.is_speculating() || len > self.len {
            Truncation::Impossible
        } else {
            Truncation::Possible
        }
    }

    fn truncate(&mut self, _backend: &B, len: usize) -> Result<(), B::Error> {
        if self.can_truncate(len) == Truncation::Impossible {
            return Err(cannot_truncate(CacheKind::Full, self.len, len).into());
        }
        self.len = len;
        Ok(())
    }
}
