//! KV caches with an exact speculation transaction.
//!
//! # The transaction
//!
//! Speculative verification writes the keys and values of `k + 1` positions
//! (`[current, d1 .. dk]`) before it knows how many the target accepts. A cache therefore runs
//! every write between [`KvCache::begin_speculation`] and [`KvCache::commit_speculation`]`(keep)`:
//! afterwards the cache is exactly — element for element — the cache that appended only the first
//! `keep` written positions. There is no silent trim:
//!
//! * [`FullKvCache`] rolls back by moving its length back (the written slots are simply reused);
//! * [`RotatingKvCache`] (sliding window) saves, write by write, the ring rows a speculative write
//!   overwrites (writes may wrap around the ring and overwrite entries the rolled-back state still
//!   needs); a partial commit puts them back and replays the kept positions. Only the slots a
//!   round writes are copied, never the whole ring.
//!
//! A cache kind that cannot roll back answers `false` to [`KvCache::can_speculate`]; the engine
//! then validates drafts serially (forwarding only accepted tokens), as the seed does.
//!
//! # Views
//!
//! * [`KvCache::view`] is the read-only history a drafter (or a KV-shared layer) attends to; for
//!   both cache kinds it is a slice of the stored buffers (no copy), so a drafter may take it
//!   every draft step;
//! * [`KvCache::fork`] is an isolated copy for compare-serial debugging: writes to the fork never
//!   reach the original, and vice versa.

mod full;
mod rotating;
mod set;

pub use full::FullKvCache;
pub use rotating::RotatingKvCache;
pub use set::CacheSet;

use crate::{Backend, CoreError};

/// Keys and values as attention reads them, in chronological order.
#[derive(Debug, Clone)]
pub struct KvView<B: Backend> {
    /// Keys `[1, kv_heads, t, head_dim]`.
    pub keys: B::Array,
    /// Values `[1, kv_heads, t, value_dim]`.
    pub values: B::Array,
    /// Absolute position of the first entry (column 0 of the keys).
    pub start: usize,
}

impl<B: Backend> KvView<B> {
    /// The number of positions in the view (the key columns).
    pub fn len(&self, backend: &B) -> usize {
        backend.shape(&self.keys).get(2).copied().unwrap_or(0)
    }

    /// Whether the view holds no position.
    pub fn is_empty(&self, backend: &B) -> bool {
        self.len(backend) == 0
    }
}

/// A pair of key and value arrays.
pub(crate) type KvPair<B> = (<B as Backend>::Array, <B as Backend>::Array);

/// What kind of cache a layer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// Keeps every position.
    Full,
    /// Keeps the last `window` positions (sliding-window attention).
    Rotating {
        /// Window length in positions.
        window: usize,
    },
    /// Some other cache kind (named), e.g. a recurrent state.
    Other(&'static str),
}

/// Whether a speculation transaction was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeculationSupport {
    /// The transaction is open: write, then commit.
    Started,
    /// This cache cannot roll back; nothing was opened.
    Unsupported,
}

/// Whether a cache can be cut back to a shorter length ([`KvCache::can_truncate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truncation {
    /// The cache can be cut to that length: it will equal a cache that appended only the first
    /// `len` positions.
    Possible,
    /// The positions the shorter cache would need are gone (a sliding window that wrapped), or
    /// this cache kind cannot be cut.
    Impossible,
}

/// One layer's KV cache, written once over [`Backend`].
pub trait KvCache<B: Backend>: std::fmt::Debug {
    /// The cache kind.
    fn kind(&self) -> CacheKind;

    /// Number of positions written so far (including open speculative writes).
    fn len(&self) -> usize;

    /// True when nothing was written.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append `keys` / `values` (`[1, heads, t, dim]`) for the next `t` positions and return what
    /// the queries of those positions attend to (the visible history followed by the new entries).
    fn update(
        &mut self,
        backend: &B,
        keys: &B::Array,
        values: &B::Array,
    ) -> Result<KvView<B>, B::Error>;

    /// The stored history, read-only (for a drafter or a KV-shared layer); `None` when empty.
    fn view(&self, backend: &B) -> Result<Option<KvView<B>>, B::Error>;

    /// Whether this cache can open a speculation transaction.
    fn can_speculate(&self) -> bool;

    /// Open a speculation transaction at the current length.
    fn begin_speculation(&mut self, backend: &B) -> Result<SpeculationSupport, B::Error>;

    /// Close the transaction keeping the first `keep` positions written since it began.
    fn commit_speculation(&mut self, backend: &B, keep: usize) -> Result<(), B::Error>;

    /// Whether a transaction is open.
    fn is_speculating(&self) -> bool;

    /// An isolated copy (no open transaction is carried over: forking while speculating is an
    /// error).
    fn fork(&self, backend: &B) -> Result<Box<dyn KvCache<B>>, B::Error>;

    /// Whether [`truncate`](Self::truncate)`(len)` can cut the cache to `len` positions exactly
    /// (prefix reuse across requests). The default: only to its own length, or to empty.
    fn can_truncate(&self, len: usize) -> Truncation {
        if !self.is_speculating() && (len == self.len() || len == 0) {
            Truncation::Possible
        } else {
            Truncation::Impossible
        }
    }

    /// Cut the cache to its first `len` positions; afterwards it equals a cache that appended
    /// only those. An error when [`can_truncate`](Self::can_truncate) says it is impossible.
    fn truncate(&mut self, backend: &B, len: usize) -> Result<(), B::Error>;
}

/// The error of a truncation the cache cannot do.
pub(crate) fn cannot_truncate(kind: CacheKind, from: usize, to: usize) -> CoreError {
    CoreError::Cache(format!(
        "{kind:?} cache: cannot truncate {from} positions to {to}"
    ))
}

/// Deep copies of stored key/value buffers (for forks and snapshots).
pub(crate) fn copy_buffers<B: Backend>(
    backend: &B,
    buffers: &Option<KvPair<B>>,
) -> Result<Option<KvPair<B>>, B::Error> {
    match buffers {
        Some((k, v)) => Ok(Some((backend.deep_copy(k)?, backend.deep_copy(v)?))),
        None => Ok(None),
    }
}

/// Check the `[1, heads, t, dim]` layout of a write and return `t`.
pub(crate) fn write_len<B: Backend>(
    backend: &B,
    keys: &B::Array,
    values: &B::Array,
) -> Result<usize, B::Error> {
    let ks = backend.shape(keys);
    let vs = backend.shape(values);
    match (&ks[..], &vs[..]) {
        ([1, kh, kt, _], [1, vh, vt, _]) if kh == vh && kt == vt => Ok(*kt),
        _ => Err(crate::CoreError::ShapeMismatch {
            op: "cache update",
            lhs: ks,
            rhs: vs,
        }
        .into()),
    }
}

#[cfg(test)]
mod tests;
