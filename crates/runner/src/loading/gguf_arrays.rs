//! Turning the tensors of a [`GgufFile`] into backend arrays of the compute dtype, by GGUF name.
//!
//! F32 / F16 / BF16 tensors load densely, straight from the memory map through
//! [`Backend::from_le_bytes`] (as safetensors weights do). Quantized tensors become host
//! [`QuantTensor`]s ([`GgufArrays::quantized`]) that the models turn into quantized
//! [`Linear`](crate::models::nn::Linear) / [`Embedding`](crate::models::nn::Embedding) weights;
//! asking for one as a dense array is a [`GgufError::QuantizedTensor`] error, unless the arrays
//! decode stored-quantized tensors ([`StoredQuant::Dequantize`], `--dequantize`): then
//! [`quantized`](GgufArrays::quantized) answers `None` and [`array`](GgufArrays::array) decodes
//! the blocks exactly.
//! Like [`TensorStore::finish`](super::TensorStore::finish), [`GgufArrays::finish`] fails on
//! tensors the model did not use.

use std::collections::BTreeSet;
use std::sync::Arc;

use mtp_core::quant::{GgmlType as QuantGgmlType, QuantTensor};
use mtp_core::{Backend, DType};

use super::error::{LoadError, LoadResult};
use super::gguf::{GgufError, GgufFile, RawTensor};
use super::tensors::StoreStats;
use super::{StoredQuant, TensorProgress};

/// The float dtype of `raw`, or the typed error for a quantized tensor.
fn float_dtype(name: &str, raw: &RawTensor<'_>) -> LoadResult<DType> {
    raw.ggml_type.float_dtype().ok_or_else(|| {
        GgufError::QuantizedTensor {
            name: name.to_string(),
            ggml_type: raw.ggml_type.id,
            type_name: raw.ggml_type.name,
        }
        .into()
    })
}

/// Reads tensors of one GGUF file into arrays of one backend and compute dtype.
pub struct GgufArrays<'a, B: Backend> {
    backend: &'a B,
    file: &'a GgufFile,
    dtype: DType,
    taken: BTreeSet<String>,
    read_bytes: u64,
    progress: Option<TensorProgress<'a>>,
    stored_quant: StoredQuant,
}

impl<B: Backend> std::fmt::Debug for GgufArrays<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufArrays")
            .field("file", &self.file.path())
            .field("dtype", &self.dtype)
            .field("taken", &self.taken.len())
            .finish()
    }
}

impl<'a, B: Backend> GgufArrays<'a, B> {
    /// A loader creating arrays of `dtype` (a float dtype) on `backend` from `file`.
    pub fn new(backend: &'a B, file: &'a GgufFile, dtype: DType) -> Self {
        Self {
            backend,
            file,
            dtype,
            taken: BTreeSet::new(),
            read_bytes: 0,
            progress: None,
            stored_quant: StoredQuant::Keep,
        }
    }

    /// Keep quantized tensors quantized (default) or decode them to dense (`--dequantize`).
    pub fn with_stored_quant(mut self, stored_quant: StoredQuant) -> Self {
        self.stored_quant = stored_quant;
        self
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

    /// The file.
    pub fn file(&self) -> &GgufFile {
        self.file
    }

    /// Whether the file holds tensor `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.file.tensor_info(name).is_some()
    }

    /// Tensor `name` of shape `shape` as a raw record (any ggml type), marked as read.
    pub fn raw(&mut self, name: &str, shape: &[usize]) -> LoadResult<RawTensor<'a>> {
        let file = self.file;
        let Some(raw) = file.raw(name) else {
            return Err(LoadError::MissingTensor {
                name: name.to_string(),
                expected: shape.to_vec(),
            });
        };
        if raw.shape != shape {
            return Err(LoadError::ShapeMismatch {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: raw.shape.to_vec(),
            });
        }
        if self.taken.insert(name.to_string()) {
            self.read_bytes += raw.bytes.len() as u64;
        }
        if let Some(progress) = self.progress.as_mut() {
            progress(self.taken.len(), file.tensors().len());
        }
        Ok(raw)
    }

    /// Matrix `name` of shape `[rows, cols]` as a host quantized tensor (its GGUF blocks,
    /// validated against the shape) when it is stored quantized; `None` for an F32 / F16 / BF16
    /// tensor, and for every tensor under [`StoredQuant::Dequantize`]: [`array`](Self::array)
    /// loads those densely.
    pub fn quantized(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> LoadResult<Option<Arc<QuantTensor>>> {
        let raw = self.raw(name, &[rows, cols])?;
        if raw.ggml_type.float_dtype().is_some() || self.stored_quant == StoredQuant::Dequantize {
            return Ok(None);
        }
        self.blocks(name, &raw, rows, cols).map(Some)
    }

    /// The GGUF blocks of quantized tensor `raw` (`name`, `[rows, cols]`), validated.
    fn blocks(
        &self,
        name: &str,
        raw: &RawTensor<'_>,
        rows: usize,
        cols: usize,
    ) -> LoadResult<Arc<QuantTensor>> {
        let tensor = quant_tensor(name, raw.ggml_type.id, raw.bytes, rows, cols)?;
        self.file.release(name);
        Ok(Arc::new(tensor))
    }

    /// Tensor `name` of shape `shape` as a dense array of the compute dtype (stored as F32, F16
    /// or BF16; a quantized matrix decoded exactly under [`StoredQuant::Dequantize`], else a
    /// [`GgufError::QuantizedTensor`] error: read it with [`quantized`](Self::quantized)).
    pub fn array(&mut self, name: &str, shape: &[usize]) -> LoadResult<B::Array> {
        let raw = self.raw(name, shape)?;
        if let (None, StoredQuant::Dequantize, &[rows, cols]) =
            (raw.ggml_type.float_dtype(), self.stored_quant, shape)
        {
            let values = self.blocks(name, &raw, rows, cols)?.dequantize();
            return self
                .backend
                .from_f32(&values, shape, self.dtype)
                .map_err(|e| LoadError::Backend {
                    name: name.to_string(),
                    reason: e.to_string(),
                });
        }
        let src = float_dtype(name, &raw)?;
        let array = self
            .backend
            .from_le_bytes(raw.bytes, src, shape, self.dtype)
            .map_err(|e| LoadError::Backend {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        self.file.release(name);
        Ok(array)
    }

    /// Tensor `name` of shape `shape` as host `f32` values (F32, F16 or BF16).
    pub fn host(&mut self, name: &str, shape: &[usize]) -> LoadResult<Vec<f32>> {
        let raw = self.raw(name, shape)?;
        let src = float_dtype(name, &raw)?;
        let values = mtp_core::backend::decode_le_floats("gguf host tensor", raw.bytes, src)
            .map_err(|e| LoadError::Backend {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
        self.file.release(name);
        Ok(values)
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

    /// Fail with [`LoadError::UnexpectedTensor`] if some tensor of the file was not read;
    /// otherwise say what was read.
    pub fn finish(self) -> LoadResult<StoreStats> {
        if let Some(name) = self
            .file
            .tensors()
            .keys()
            .find(|name| !self.taken.contains(*name))
        {
            return Err(LoadError::UnexpectedTensor {
                name: name.clone(),
                path: self.file.path().to_path_buf(),
            });
        }
        Ok(StoreStats {
            read_tensors: self.taken.len(),
            read_bytes: self.read_bytes,
            skipped_tensors: 0,
            skipped_bytes: 0,
        })
    }
}

/// The host quantized tensor of GGUF blocks `bytes` of ggml type `type_id` holding matrix `name`
/// (`[rows, cols]`), validated against the shape.
pub(super) fn quant_tensor(
    name: &str,
    type_id: u32,
    bytes: &[u8],
    rows: usize,
    cols: usize,
) -> LoadResult<QuantTensor> {
    let invalid = |reason: String| LoadError::InvalidTensor {
        name: name.to_string(),
        reason,
    };
    let ty = QuantGgmlType::from_id(type_id).map_err(|e| invalid(e.to_string()))?;
    QuantTensor::ggml(ty, rows, cols, bytes.to_vec()).map_err(|e| invalid(e.to_string()))
}
