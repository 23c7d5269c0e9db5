//! Turning stored tensors into backend arrays of the compute dtype.

use mtp_core::{Backend, DType};

use super::error::{LoadError, LoadResult};
use super::tensors::TensorStore;

/// Told `(tensors done, tensors in the files)` after each tensor an [`ArrayLoader`] reads.
pub type TensorProgress<'a> = &'a mut dyn FnMut(usize, usize);

/// Reads tensors from a [`TensorStore`] into arrays of one backend and compute dtype.
pub struct ArrayLoader<'a, B: Backend> {
    backend: &'a B,
    store: &'a mut TensorStore,
    dtype: DType,
    progress: Option<TensorProgress<'a>>,
}

impl<B: Backend> std::fmt::Debug for ArrayLoader<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayLoader")
            .field("store", &self.store)
            .field("dtype", &self.dtype)
            .finish()
    }
}

impl<'a, B: Backend> ArrayLoader<'a, B> {
    /// A loader creating arrays of `dtype` (a float dtype) on `backend`.
    pub fn new(backend: &'a B, store: &'a mut TensorStore, dtype: DType) -> Self {
        Self {
            backend,
            store,
            dtype,
            progress: None,
        }
    }

    /// Report each tensor read to `progress` (for a progress bar).
    pub fn with_progress(mut self, progress: TensorProgress<'a>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The backend arrays are created on.
    pub fn backend(&self) -> &B {
        self.backend
    }

    /// The compute dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The underlying store (to probe or skip tensors).
    pub fn store(&mut self) -> &mut TensorStore {
        self.store
    }

    /// Tensor `name` of shape `shape`, as an array of the compute dtype: its stored bytes go
    /// from the memory map to the backend as they are ([`Backend::from_le_bytes`]; no host `f32`
    /// copy on backends that override it), and its pages of the map are released afterwards.
    pub fn array(&mut self, name: &str, shape: &[usize]) -> LoadResult<B::Array> {
        let (src, bytes) = self.store.take_float_bytes(name, shape)?;
        let array = self
            .backend
            .from_le_bytes(bytes, src, shape, self.dtype)
            .map_err(|e| LoadError::Backend {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        self.store.release(name);
        if let Some(progress) = self.progress.as_mut() {
            progress(self.store.taken(), self.store.len());
        }
        Ok(array)
    }

    /// Tensor `name` of shape `shape`, as host `f32` values.
    pub fn host(&mut self, name: &str, shape: &[usize]) -> LoadResult<Vec<f32>> {
        self.store.take_f32(name, shape)
    }

    /// An array of the compute dtype from host values.
    pub fn from_host(&self, name: &str, data: &[f32], shape: &[usize]) -> LoadResult<B::Array> {
        self.backend
            .from_f32(data, shape, self.dtype)
            .map_err(|e| LoadError::Backend {
                name: name.to_string(),
                reason: e.to_string(),
            })
    }

    /// A scalar (0-d) array of the compute dtype.
    pub fn scalar(&self, name: &str, value: f32) -> LoadResult<B::Array> {
        self.from_host(name, &[value], &[])
    }
}
