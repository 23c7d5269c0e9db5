//! Rotary-embedding tables computed once per model ([`RopeCache`]) instead of once per layer per
//! forward.
//!
//! A model holds one [`RopeCache`] per distinct frequency set (Gemma: one for sliding layers, one
//! for full layers) shared by its layers. The cache keeps device tables of `cos` and `sin` for
//! positions `0 .. capacity`, grown by doubling when a forward reaches past them, and a forward
//! takes a slice: no host work per layer or per token. The angles are the ones
//! [`RopeTables`](crate::RopeTables) computes (`position as f32 * inv_freq[i]` in `f32`), so the
//! rotation is bit-for-bit the one [`Backend::rope`] applies.

use std::sync::{Arc, Mutex};

use crate::{Backend, CoreError, DType};

/// Positions the first table holds (then capacity doubles).
const FIRST_CAPACITY: usize = 256;

/// The device tables of one dtype.
#[derive(Debug)]
struct Tables<B: Backend> {
    dtype: DType,
    positions: usize,
    /// `[positions, half]`.
    cos: B::Array,
    /// `[positions, half]`.
    sin: B::Array,
}

/// The `cos`/`sin` tables of one frequency set, on the device, grown as positions grow (see the
/// [module docs](self)).
#[derive(Debug)]
pub struct RopeCache<B: Backend> {
    inv_freq: Vec<f32>,
    tables: Mutex<Option<Tables<B>>>,
}

impl<B: Backend> RopeCache<B> {
    /// An empty cache for `inv_freq` (`r / 2` inverse frequencies, half-split layout as in
    /// [`Backend::rope`]); tables are built on first use.
    pub fn new(inv_freq: Vec<f32>) -> Self {
        Self {
            inv_freq,
            tables: Mutex::new(None),
        }
    }

    /// The cache in `shared` with these frequencies, or a new one added to it: layers with equal
    /// frequencies share one table.
    pub fn shared(shared: &mut Vec<Arc<Self>>, inv_freq: &[f32]) -> Arc<Self> {
        if let Some(found) = shared.iter().find(|c| c.inv_freq == inv_freq) {
            return Arc::clone(found);
        }
        let cache = Arc::new(Self::new(inv_freq.to_vec()));
        shared.push(Arc::clone(&cache));
        cache
    }

    /// The inverse frequencies.
    pub fn inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    /// Positions the device tables hold now (0 before first use).
    pub fn capacity(&self) -> usize {
        match self.tables.lock() {
            Ok(guard) => guard.as_ref().map_or(0, |t| t.positions),
            Err(_) => 0,
        }
    }

    /// `cos` and `sin` `[t, half]` for positions `start .. start + t`, in `dtype`: slices of the
    /// device tables, which are (re)built only when they are too short or of another dtype.
    pub fn tables(
        &self,
        backend: &B,
        start: usize,
        t: usize,
        dtype: DType,
    ) -> Result<(B::Array, B::Array), B::Error> {
        let needed = start
            .checked_add(t)
            .ok_or_else(|| CoreError::InvalidArgument {
                op: "rope",
                message: format!("positions {start} + {t} overflow"),
            })?;
        let mut guard = self
            .tables
            .lock()
            .map_err(|_| CoreError::Model("rope cache: a thread panicked holding it".into()))?;
        let fits = guard
            .as_ref()
            .is_some_and(|tables| tables.dtype == dtype && tables.positions >= needed);
        if !fits {
            let grown = guard.as_ref().map_or(0, |tables| 2 * tables.positions);
            let positions = needed.max(grown).max(FIRST_CAPACITY);
            *guard = Some(self.build(backend, positions, dtype)?);
        }
        let Some(tables) = guard.as_ref() else {
            return Err(CoreError::Model("rope cache: tables missing after build".into()).into());
        };
        Ok((
            backend.slice(&tables.cos, 0, start, t)?,
            backend.slice(&tables.sin, 0, start, t)?,
        ))
    }

    /// Tables for positions `0 .. positions`.
    fn build(&self, backend: &B, positions: usize, dtype: DType) -> Result<Tables<B>, B::Error> {
        let half = self.inv_freq.len();
        let shape = [positions, half];
        let rope = crate::RopeTables::new(&[1, 1, positions, 2 * half], 0, &self.inv_freq)?;
        Ok(Tables {
            dtype,
            positions,
            cos: backend.from_f32(&rope.cos, &shape, dtype)?,
            sin: backend.from_f32(&rope.sin, &shape, dtype)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::ReferenceBackend;

    #[test]
    fn cached_rope_equals_rope_and_grows() {
        let b = ReferenceBackend::default();
        let inv_freq = vec![1.0, 0.1, 0.01];
        let cache = RopeCache::<ReferenceBackend>::new(inv_freq.clone());
        assert_eq!(cache.capacity(), 0);
        let (h, d) = (2, 8);
        for (start, t) in [(0, 5), (3, 1), (255, 1), (256, 3), (700, 2)] {
            let data: Vec<f32> = (0..h * t * d).map(|i| (i as f32 * 0.37).sin()).collect();
            let x = b.from_f32(&data, &[1, h, t, d], DType::F32).unwrap();
            let want = b
                .to_vec_f32(&b.rope(&x, start, &inv_freq).unwrap())
                .unwrap();
            let got = b
                .to_vec_f32(&b.rope_cached(&x, start, &cache).unwrap())
                .unwrap();
            assert_eq!(got, want, "positions {start}..{}", start + t);
            assert!(cache.capacity() >= start + t);
        }
        // 256, doubled to 512, then 702 needed: 1024.
        assert_eq!(cache.capacity(), 1024);
        let mut shared = Vec::new();
        let a = RopeCache::<ReferenceBackend>::shared(&mut shared, &inv_freq);
        let again = RopeCache::shared(&mut shared, &inv_freq);
        let other = RopeCache::shared(&mut shared, &[2.0]);
        assert!(Arc::ptr_eq(&a, &again) && !Arc::ptr_eq(&a, &other));
        assert_eq!(shared.len(), 2);
    }
}
