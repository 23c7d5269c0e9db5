//! A cache kind that cannot roll back.

use crate::cache::{CacheKind, FullKvCache, KvCache, KvView, SpeculationSupport};
use crate::{Backend, CoreError};

/// A full cache that refuses speculation, standing in for cache kinds that cannot roll back
/// (recurrent states): the engine must validate drafts serially with it.
#[derive(Debug, Clone, Default)]
pub struct SerialOnlyCache<B: Backend> {
    inner: FullKvCache<B>,
}

impl<B: Backend> SerialOnlyCache<B> {
    /// An empty cache.
    pub fn new() -> Self {
        Self {
            inner: FullKvCache::new(),
        }
    }
}

impl<B: Backend> KvCache<B> for SerialOnlyCache<B> {
    fn kind(&self) -> CacheKind {
        CacheKind::Other("serial-only")
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn update(
        &mut self,
        backend: &B,
        keys: &B::Array,
        values: &B::Array,
    ) -> Result<KvView<B>, B::Error> {
        self.inner.update(backend, keys, values)
    }

    fn view(&self, backend: &B) -> Result<Option<KvView<B>>, B::Error> {
        self.inner.view(backend)
    }

    fn can_speculate(&self) -> bool {
        false
    }

    fn begin_speculation(&mut self, _backend: &B) -> Result<SpeculationSupport, B::Error> {
        Ok(SpeculationSupport::Unsupported)
    }

    fn commit_speculation(&mut self, _backend: &B, _keep: usize) -> Result<(), B::Error> {
        Err(CoreError::Cache("serial-only cache: no speculation to commit".into()).into())
    }

    fn is_speculating(&self) -> bool {
        false
    }

    fn fork(&self, backend: &B) -> Result<Box<dyn KvCache<B>>, B::Error> {
        let inner = self.inner.fork(backend)?;
        // Rebuild through the public API: replay the stored history into a fresh cache.
        let mut copy = Self::new();
        if let Some(view) = inner.view(backend)? {
            copy.inner.update(backend, &view.keys, &view.values)?;
        }
        Ok(Box::new(copy))
    }

    fn truncate(&mut self, backend: &B, len: usize) -> Result<(), B::Error> {
        self.inner.truncate(backend, len)
    }
}
