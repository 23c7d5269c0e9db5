//! The caches of one sequence, speculated on together.

use super::{KvCache, SpeculationSupport, Truncation};
use crate::{Backend, CoreError};

/// Every layer cache of one sequence. Models index it by their own layer numbering; the engine
/// opens and closes speculation on all layers at once.
#[derive(Debug)]
pub struct CacheSet<B: Backend> {
    layers: Vec<Box<dyn KvCache<B>>>,
}

impl<B: Backend> CacheSet<B> {
    /// A set of the given layer caches.
    pub fn new(layers: Vec<Box<dyn KvCache<B>>>) -> Self {
        Self { layers }
    }

    /// Number of layer caches.
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Positions written (the first layer's length; 0 for an empty set).
    pub fn position(&self) -> usize {
        self.layers.first().map_or(0, |c| c.len())
    }

    /// Layer `index`, read-only.
    pub fn layer(&self, index: usize) -> Result<&dyn KvCache<B>, CoreError> {
        match self.layers.get(index) {
            Some(c) => Ok(c.as_ref()),
            None => Err(CoreError::IndexOutOfRange {
                op: "cache layer",
                index: index as i64,
                size: self.layers.len(),
            }),
        }
    }

    /// Layer `index`, for writing.
    pub fn layer_mut(&mut self, index: usize) -> Result<&mut dyn KvCache<B>, CoreError> {
        let size = self.layers.len();
        match self.layers.get_mut(index) {
            Some(c) => Ok(c.as_mut()),
            None => Err(CoreError::IndexOutOfRange {
                op: "cache layer",
                index: index as i64,
                size,
            }),
        }
    }

    /// Whether every layer can open a speculation transaction.
    pub fn can_speculate(&self) -> bool {
        self.layers.iter().all(|c| c.can_speculate())
    }

    /// Whether any layer has a transaction open.
    pub fn is_speculating(&self) -> bool {
        self.layers.iter().any(|c| c.is_speculating())
    }

    /// Open a transaction on every layer, or on none when some layer cannot roll back.
    pub fn begin_speculation(&mut self, backend: &B) -> Result<SpeculationSupport, B::Error> {
        if !self.can_speculate() {
            return Ok(SpeculationSupport::Unsupported);
        }
        for layer in &mut self.layers {
            if layer.begin_speculation(backend)? == SpeculationSupport::Unsupported {
                return Err(CoreError::Cache(format!(
                    "{:?} cache refused speculation after can_speculate",
                    layer.kind()
                ))
                .into());
            }
        }
        Ok(SpeculationSupport::Started)
    }

    /// Close the transaction on every layer, keeping the first `keep` written positions.
    pub fn commit_speculation(&mut self, backend: &B, keep: usize) -> Result<(), B::Error> {
        for layer in &mut self.layers {
            layer.commit_speculation(backend, keep)?;
        }
        Ok(())
    }

    /// Cut every layer to its first `len` positions when all of them can
    /// ([`KvCache::can_truncate`]); otherwise change nothing and answer
    /// [`Truncation::Impossible`].
    pub fn truncate(&mut self, backend: &B, len: usize) -> Result<Truncation, B::Error> {
        if self
            .layers
            .iter()
            .any(|c| c.can_truncate(len) == Truncation::Impossible)
        {
            return Ok(Truncation::Impossible);
        }
        for layer in &mut self.layers {
            layer.truncate(backend, len)?;
        }
        Ok(Truncation::Possible)
    }

    /// An isolated copy of every layer.
    pub fn fork(&self, backend: &B) -> Result<Self, B::Error> {
        let layers = self
            .layers
            .iter()
            .map(|c| c.fork(backend))
            .collect::<Result<_, _>>()?;
        Ok(Self { layers })
    }
}
