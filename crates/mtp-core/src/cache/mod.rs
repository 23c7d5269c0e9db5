//! KV caches with a speculation transaction (being written).
use crate::Backend;

/// The caches of one sequence (being written).
#[derive(Debug)]
pub struct CacheSet<B: Backend> {
    _layers: Vec<B::Array>,
}
