//! Turning stored tensors into backend arrays of the compute dtype.

use std::sync::Arc;

use mtp_core::quant::{AffineParams, QuantScheme, QuantTensor};
use mtp_core::{Backend, DType};

use super::error::{LoadError, LoadResult};
use super::quantized::{unquantizable, MlxQuantization};
use super::tensors::TensorStore;
use super::StoredQuant;

/// Weights widened to `f32` at a time when a matrix is quantized at load (`--quantize`):
/// 16 Mi values, 64 MiB.
pub const QUANTIZE_CHUNK_VALUES: usize = 1 << 24;

/// A matrix as loaded: dense in the compute dtype, or a quantized weight of the backend.
#[derive(Debug)]
pub enum Matrix<B: Backend> {
    /// A dense array of the compute dtype.
    Dense(B::Array),
    /// A quantized weight prepared for the backend.
    Quantized(B::QuantWeight),
}

/// Told `(tensors done, tensors in the files)` after each tensor an [`ArrayLoader`] reads.
pub type TensorProgress<'a> = &'a mut dyn FnMut(usize, usize);

/// Reads tensors from a [`TensorStore`] into arrays of one backend and compute dtype.
pub struct ArrayLoader<'a, B: Backend> {
    pub(super) backend: &'a B,
    pub(super) store: &'a mut TensorStore,
    pub(super) dtype: DType,
    pub(super) progress: Option<TensorProgress<'a>>,
    /// The checkpoint's MLX affine quantization, if it has one.
    pub(super) mlx: Option<MlxQuantization>,
    /// Quantize dense matrices at load.
    pub(super) quantize: Option<QuantScheme>,
    /// Whether a matrix `quantize` could not take was reported already.
    pub(super) told_dense: bool,
    /// Keep or decode matrices the checkpoint stores quantized.
    pub(super) stored_quant: StoredQuant,
}

impl<B: Backend> std::fmt::Debug for ArrayLoader<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayLoader")
            .field("store", &self.store)
            .field("dtype", &self.dtype)
            .field("mlx", &self.mlx)
            .field("quantize", &self.quantize)
            .field("stored_quant", &self.stored_quant)
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
            mlx: None,
            quantize: None,
            told_dense: false,
            stored_quant: StoredQuant::Keep,
        }
    }

    /// Read MLX affine quantized matrices (`weight` + `scales` + `biases`) as `mlx` describes.
    pub fn with_mlx_quantization(mut self, mlx: Option<MlxQuantization>) -> Self {
        self.mlx = mlx;
        self
    }

    /// Quantize dense matrices to `scheme` as they load (`--quantize`).
    pub fn with_quantize(mut self, scheme: Option<QuantScheme>) -> Self {
        self.quantize = scheme;
        self
    }

    /// Keep matrices the checkpoint stores quantized, or decode them to dense (`--dequantize`).
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
        self.tick();
        Ok(array)
    }

    /// Matrix `name` (`[rows, cols]`): quantized when the checkpoint stores it so (an MLX affine
    /// matrix, its `scales` and `biases` beside it, or ggml blocks of a GGUF store) and
    /// [`StoredQuant::Keep`] holds, or when the
    /// loader quantizes dense matrices at load ([`with_quantize`](Self::with_quantize)); else
    /// dense in the compute dtype (a stored-quantized matrix decoded exactly under
    /// [`StoredQuant::Dequantize`]).
    pub fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> LoadResult<Matrix<B>> {
        let Some((tensor, stored)) = self.quantized_tensor(name, rows, cols)? else {
            return Ok(Matrix::Dense(self.array(name, &[rows, cols])?));
        };
        self.store.release(name);
        let matrix = if stored && self.stored_quant == StoredQuant::Dequantize {
            Matrix::Dense(self.from_host(name, &tensor.dequantize(), &[rows, cols])?)
        } else {
            Matrix::Quantized(
                self.backend
                    .quant_weight(Arc::new(tensor), self.dtype)
                    .map_err(|e| LoadError::Backend {
                        name: name.to_string(),
                        reason: e.to_string(),
                    })?,
            )
        };
        self.tick();
        Ok(matrix)
    }

    /// Matrix `name` as a host quantized tensor, and whether the checkpoint stores it so (else
    /// it is quantized here under `--quantize`); `None` for a dense matrix loaded as it is.
    fn quantized_tensor(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> LoadResult<Option<(QuantTensor, bool)>> {
        if let Some((ggml_type, bytes)) = self.store.take_blocks(name, &[rows, cols])? {
            let tensor = super::gguf_arrays::quant_tensor(name, ggml_type, bytes, rows, cols)?;
            return Ok(Some((tensor, true)));
        }
        let module = name.strip_suffix(".weight").unwrap_or(name);
        let (scales, biases) = (format!("{module}.scales"), format!("{module}.biases"));
        let found = if self.store.contains(&scales) {
            let params = self.mlx_params(module, &scales)?;
            let invalid = |reason: String| LoadError::InvalidTensor {
                name: name.to_string(),
                reason,
            };
            let (per_row, groups) = params
                .row_layout(rows, cols)
                .map_err(|e| invalid(e.to_string()))?;
            let words = self.store.take_u32(name, &[rows, per_row])?;
            let s = self.store.take_f32(&scales, &[rows, groups])?;
            let b = self.store.take_f32(&biases, &[rows, groups])?;
            let tensor = QuantTensor::affine(params, rows, cols, &words, s, b)
                .map_err(|e| invalid(e.to_string()))?;
            (tensor, true)
        } else if let Some(scheme) = self.quantize {
            if !self.quantizable(scheme, name, cols) {
                return Ok(None);
            }
            (self.quantize_rows(scheme, name, rows, cols)?, false)
        } else {
            return Ok(None);
        };
        Ok(Some(found))
    }

    /// Matrix `name` quantized at load by `scheme`, [`QUANTIZE_CHUNK_VALUES`] weights at a time
    /// (the blocks of a row never cross a chunk, so the bytes are those of quantizing it whole):
    /// loading holds the blocks and one chunk in `f32`, never the whole matrix widened.
    fn quantize_rows(
        &mut self,
        scheme: QuantScheme,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> LoadResult<QuantTensor> {
        let invalid = |e: mtp_core::quant::QuantError| LoadError::InvalidTensor {
            name: name.to_string(),
            reason: e.to_string(),
        };
        let ty = scheme.ggml_type();
        let mut data = Vec::with_capacity(ty.tensor_bytes(rows, cols).map_err(invalid)?);
        let chunk_rows = (QUANTIZE_CHUNK_VALUES / cols.max(1)).max(1);
        self.store
            .take_f32_rows(name, [rows, cols], chunk_rows, |values| {
                let part = scheme
                    .quantize(values, values.len() / cols.max(1), cols)
                    .map_err(invalid)?;
                data.extend_from_slice(part.data());
                Ok(())
            })?;
        QuantTensor::ggml(ty, rows, cols, data).map_err(invalid)
    }

    /// The affine parameters config.json's `quantization` gives `module`, whose `scales` tensor
    /// is there: an error when the config does not quantize it.
    pub(super) fn mlx_params(&self, module: &str, scales: &str) -> LoadResult<AffineParams> {
        self.mlx
            .as_ref()
            .and_then(|m| m.params_for(module))
            .ok_or_else(|| LoadError::InvalidTensor {
                name: scales.to_string(),
                reason: "quantization scales, but config.json's `quantization` does not \
                         quantize this module"
                    .into(),
            })
    }

    /// Whether `--quantize scheme` can take matrix `name` with rows of `cols` weights (a whole
    /// number of blocks); the first matrix it cannot take is reported once, and stays dense.
    pub(super) fn quantizable(&mut self, scheme: QuantScheme, name: &str, cols: usize) -> bool {
        let block = scheme.ggml_type().block_size();
        if cols.is_multiple_of(block) {
            return true;
        }
        if !self.told_dense {
            tracing::warn!("--quantize {scheme}: {}", unquantizable(name, cols, block));
            self.told_dense = true;
        }
        false
    }

    /// Report progress after a tensor was read.
    pub(super) fn tick(&mut self) {
        if let Some(progress) = self.progress.as_mut() {
            progress(self.store.taken(), self.store.len());
        }
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
