//! Expert stacks: the `[experts, out, in]` projections of a mixture-of-experts layer
//! ([`ArrayLoader::expert_matrices`]).

use std::sync::Arc;

use mtp_core::backend::decode_le_floats;
use mtp_core::quant::{QuantScheme, QuantTensor};
use mtp_core::Backend;

use super::arrays::ArrayLoader;
use super::error::{LoadError, LoadResult};
use super::StoredQuant;

/// An expert stack as loaded.
#[derive(Debug)]
pub enum ExpertMatrices<B: Backend> {
    /// One dense `[experts, out, in]` array of the compute dtype.
    Dense(B::Array),
    /// One quantized `[out, in]` weight per expert, prepared for the backend.
    Quantized(Vec<B::QuantWeight>),
}

impl<B: Backend> ArrayLoader<'_, B> {
    /// The expert stack `name` of shape `[experts, out, in]`:
    ///
    /// * stored MLX affine — a packed `weight` `[experts, out, in * bits / 32]` with `scales` and
    ///   `biases` `[experts, out, in / group_size]` beside it, as mlx-vlm writes its SwitchGLU
    ///   experts — one quantized weight per expert (decoded to dense under `--dequantize`);
    /// * dense under `--quantize`: each expert quantized on its own, converted from the memory
    ///   map one expert at a time (no host copy of the whole stack); a stack whose rows are not
    ///   a whole number of blocks stays dense, reported once;
    /// * else dense, as [`array`](Self::array) loads it.
    pub fn expert_matrices(
        &mut self,
        name: &str,
        shape: [usize; 3],
    ) -> LoadResult<ExpertMatrices<B>> {
        let Some((tensors, stored)) = self.quantized_experts(name, shape)? else {
            return Ok(ExpertMatrices::Dense(self.array(name, &shape)?));
        };
        self.store.release(name);
        let matrices = if stored && self.stored_quant == StoredQuant::Dequantize {
            let values: Vec<f32> = tensors.iter().flat_map(QuantTensor::dequantize).collect();
            ExpertMatrices::Dense(self.from_host(name, &values, &shape)?)
        } else {
            let prepared = tensors
                .into_iter()
                .map(|t| self.backend.quant_weight(Arc::new(t), self.dtype))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| LoadError::Backend {
                    name: name.to_string(),
                    reason: e.to_string(),
                })?;
            ExpertMatrices::Quantized(prepared)
        };
        self.tick();
        Ok(matrices)
    }

    /// The experts of stack `name` as host quantized tensors, and whether the checkpoint stores
    /// them so (else they are quantized here under `--quantize`); `None` for a dense stack
    /// loaded as it is.
    fn quantized_experts(
        &mut self,
        name: &str,
        [experts, rows, cols]: [usize; 3],
    ) -> LoadResult<Option<(Vec<QuantTensor>, bool)>> {
        let invalid = |reason: String| LoadError::InvalidTensor {
            name: name.to_string(),
            reason,
        };
        let module = name.strip_suffix(".weight").unwrap_or(name);
        let (scales, biases) = (format!("{module}.scales"), format!("{module}.biases"));
        if self.store.contains(&scales) {
            let params = self.mlx_params(module, &scales)?;
            let (per_row, groups) = params
                .row_layout(rows, cols)
                .map_err(|e| invalid(e.to_string()))?;
            let words = self.store.take_u32(name, &[experts, rows, per_row])?;
            let s = self.store.take_f32(&scales, &[experts, rows, groups])?;
            let b = self.store.take_f32(&biases, &[experts, rows, groups])?;
            let (word_chunk, group_chunk) = (rows * per_row, rows * groups);
            let tensors = (0..experts)
                .map(|e| {
                    let groups = e * group_chunk..(e + 1) * group_chunk;
                    QuantTensor::affine(
                        params,
                        rows,
                        cols,
                        &words[e * word_chunk..(e + 1) * word_chunk],
                        s[groups.clone()].to_vec(),
                        b[groups].to_vec(),
                    )
                    .map_err(|err| invalid(format!("expert {e}: {err}")))
                })
                .collect::<LoadResult<Vec<_>>>()?;
            return Ok(Some((tensors, true)));
        }
        let Some(scheme) = self.quantize else {
            return Ok(None);
        };
        if !self.quantizable(scheme, name, cols) {
            return Ok(None);
        }
        let (src, bytes) = self.store.take_float_bytes(name, &[experts, rows, cols])?;
        let tensors = quantize_each(scheme, src, bytes, [experts, rows, cols]).map_err(invalid)?;
        Ok(Some((tensors, false)))
    }
}

/// Quantize each expert of the stored `[experts, rows, cols]` floats `bytes` (of dtype `src`).
fn quantize_each(
    scheme: QuantScheme,
    src: mtp_core::DType,
    bytes: &[u8],
    [experts, rows, cols]: [usize; 3],
) -> Result<Vec<QuantTensor>, String> {
    let per_expert = bytes.len() / experts.max(1);
    bytes
        .chunks_exact(per_expert.max(1))
        .take(experts)
        .enumerate()
        .map(|(e, chunk)| {
            let values = decode_le_floats("quantize", chunk, src).map_err(|err| err.to_string())?;
            scheme
                .quantize(&values, rows, cols)
                .map_err(|err| format!("expert {e}: {err}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use mtp_core::quant::{QuantFormat, QuantScheme};
    use mtp_core::reference::ReferenceBackend;
    use mtp_core::{Backend, DType};

    use super::ExpertMatrices;
    use crate::loading::quantized::MlxQuantization;
    use crate::loading::{ArrayLoader, StoredQuant, TensorStore};

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4")
    }

    /// The formats of a loaded stack: one per expert, or `None` when dense.
    fn formats(
        b: &ReferenceBackend,
        m: &ExpertMatrices<ReferenceBackend>,
    ) -> Option<Vec<QuantFormat>> {
        match m {
            ExpertMatrices::Dense(_) => None,
            ExpertMatrices::Quantized(ws) => {
                Some(ws.iter().map(|w| b.quant_source(w).format()).collect())
            }
        }
    }

    #[test]
    fn quantize_at_load_quantizes_each_expert_whose_rows_are_whole_blocks() {
        let b = ReferenceBackend::default();
        let mut store = TensorStore::open(&fixtures().join("mm_26b_moe/target")).unwrap();
        let mut loader =
            ArrayLoader::new(&b, &mut store, DType::F32).with_quantize(Some(QuantScheme::Q8));
        let layer = "model.language_model.layers.0.experts";
        let gate_up = loader
            .expert_matrices(&format!("{layer}.gate_up_proj"), [8, 32, 32])
            .unwrap();
        let formats = formats(&b, &gate_up).expect("quantized");
        assert_eq!(formats.len(), 8);
        assert!(formats
            .iter()
            .all(|f| *f == QuantFormat::Ggml(QuantScheme::Q8.ggml_type())));
        // Rows of 16 weights are not a whole Q8_0 block: that stack stays dense.
        let down = loader
            .expert_matrices(&format!("{layer}.down_proj"), [8, 32, 16])
            .unwrap();
        match down {
            ExpertMatrices::Dense(w) => assert_eq!(b.shape(&w), vec![8, 32, 16]),
            ExpertMatrices::Quantized(_) => panic!("rows of 16 were quantized"),
        }
    }

    #[test]
    fn mlx_affine_experts_load_per_expert_or_decoded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mlx_q4_mm_26b_moe");
        let b = ReferenceBackend::default();
        let name = "language_model.model.layers.1.experts.switch_glu.up_proj.weight";
        let mlx = MlxQuantization::read(&dir.join("config.json")).unwrap();
        let mut store = TensorStore::open(&dir).unwrap();
        let mut loader =
            ArrayLoader::new(&b, &mut store, DType::F32).with_mlx_quantization(mlx.clone());
        let up = loader.expert_matrices(name, [8, 16, 32]).unwrap();
        let ExpertMatrices::Quantized(ws) = &up else {
            panic!("the affine experts were not kept quantized");
        };
        assert_eq!(ws.len(), 8);
        let kept: Vec<f32> = ws
            .iter()
            .flat_map(|w| b.quant_source(w).dequantize())
            .collect();
        let mut store = TensorStore::open(&dir).unwrap();
        let mut loader = ArrayLoader::new(&b, &mut store, DType::F32)
            .with_mlx_quantization(mlx.clone())
            .with_stored_quant(StoredQuant::Dequantize);
        match loader.expert_matrices(name, [8, 16, 32]).unwrap() {
            ExpertMatrices::Dense(w) => assert_eq!(b.to_vec_f32(&w).unwrap(), kept),
            ExpertMatrices::Quantized(_) => panic!("--dequantize kept the experts quantized"),
        }
        // A stack of the wrong shape is an error naming it, not a panic.
        let mut store = TensorStore::open(&dir).unwrap();
        let mut loader = ArrayLoader::new(&b, &mut store, DType::F32).with_mlx_quantization(mlx);
        let err = loader
            .expert_matrices(name, [8, 16, 64])
            .unwrap_err()
            .to_string();
        assert!(err.contains("up_proj"), "{err}");
    }
}
