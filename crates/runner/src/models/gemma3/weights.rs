//! Where Gemma 3's weights come from: an HF safetensors checkpoint ([`ArrayLoader`]) or a GGUF
//! file ([`GgufArrays`]), both asked for by HF name, so the model is built by one piece of code.
//!
//! The two differ in one convention. HF's `Gemma3RMSNorm` scales by `1 + w` (the stored weight
//! is an offset from 1); llama.cpp's converter adds the 1 when it writes the GGUF
//! (`conversion/gemma.py`, `Gemma3Model.norm_shift`: every tensor whose name ends in
//! `norm.weight` gets `+ 1.0`), and llama.cpp then multiplies by the stored value. So
//! [`WeightSource::norm_scale`] returns `1 + w` from safetensors and the stored value from GGUF:
//! either way the model multiplies by what HF multiplies by.

use mtp_core::{Backend, DType};

use crate::loading::gguf_names::hf_to_gguf;
use crate::loading::{ArrayLoader, GgufArrays, LoadError, LoadResult};
use crate::models::nn::{Embedding, Linear};

/// A source of Gemma 3 weights, by HF tensor name.
pub(crate) trait WeightSource<B: Backend> {
    /// The compute dtype.
    fn dtype(&self) -> DType;
    /// Whether the source holds tensor `name`.
    fn contains(&mut self, name: &str) -> bool;
    /// Projection `name` of shape `[out, inp]`.
    fn linear(&mut self, name: &str, out: usize, inp: usize) -> LoadResult<Linear<B>>;
    /// Token table `name` of shape `[vocab, width]`.
    fn embedding(&mut self, name: &str, vocab: usize, width: usize) -> LoadResult<Embedding<B>>;
    /// The RMS-norm scale HF multiplies by (`1 + w`) for norm `name` of width `dim`.
    fn norm_scale(&mut self, name: &str, dim: usize) -> LoadResult<B::Array>;
    /// Mark `name` as deliberately unused (if present).
    fn skip(&mut self, name: &str);
    /// A scalar array of the compute dtype.
    fn scalar(&mut self, name: &str, value: f32) -> LoadResult<B::Array>;
}

impl<B: Backend> WeightSource<B> for ArrayLoader<'_, B> {
    fn dtype(&self) -> DType {
        ArrayLoader::dtype(self)
    }

    fn contains(&mut self, name: &str) -> bool {
        self.store().contains(name)
    }

    fn linear(&mut self, name: &str, out: usize, inp: usize) -> LoadResult<Linear<B>> {
        Linear::load(self, name, out, inp)
    }

    fn embedding(&mut self, name: &str, vocab: usize, width: usize) -> LoadResult<Embedding<B>> {
        Embedding::load(self, name, vocab, width)
    }

    fn norm_scale(&mut self, name: &str, dim: usize) -> LoadResult<B::Array> {
        let offsets = self.host(name, &[dim])?;
        let scale: Vec<f32> = offsets.iter().map(|w| 1.0 + w).collect();
        self.from_host(name, &scale, &[dim])
    }

    fn skip(&mut self, name: &str) {
        self.store().skip(name);
    }

    fn scalar(&mut self, name: &str, value: f32) -> LoadResult<B::Array> {
        ArrayLoader::scalar(self, name, value)
    }
}

/// The GGUF name of HF tensor `name` (an error for a name the map does not know: a bug here).
fn gguf_name(name: &str) -> LoadResult<String> {
    hf_to_gguf(name).ok_or_else(|| LoadError::MissingTensor {
        name: format!("{name} (no GGUF name)"),
        expected: Vec::new(),
    })
}

impl<B: Backend> WeightSource<B> for GgufArrays<'_, B> {
    fn dtype(&self) -> DType {
        GgufArrays::dtype(self)
    }

    fn contains(&mut self, name: &str) -> bool {
        hf_to_gguf(name).is_some_and(|g| GgufArrays::contains(self, &g))
    }

    /// Quantized as stored (any GGUF block type: the backend's quantized matmul), or dense for
    /// an F32 / F16 / BF16 tensor.
    fn linear(&mut self, name: &str, out: usize, inp: usize) -> LoadResult<Linear<B>> {
        let gguf = gguf_name(name)?;
        if let Some(tensor) = self.quantized(&gguf, out, inp)? {
            return Linear::quantized(self.backend(), &gguf, tensor, self.dtype());
        }
        let w = self.array(&gguf, &[out, inp])?;
        Ok(Linear::dense(w, out, inp))
    }

    /// Quantized as stored (a lookup decodes only the rows it reads), or dense.
    fn embedding(&mut self, name: &str, vocab: usize, width: usize) -> LoadResult<Embedding<B>> {
        let gguf = gguf_name(name)?;
        if let Some(tensor) = self.quantized(&gguf, vocab, width)? {
            return Embedding::quantized(self.backend(), &gguf, tensor, self.dtype());
        }
        let table = self.array(&gguf, &[vocab, width])?;
        Ok(Embedding::dense(table, vocab, width))
    }

    /// Stored as `1 + w` by llama.cpp's converter: used as is.
    fn norm_scale(&mut self, name: &str, dim: usize) -> LoadResult<B::Array> {
        self.array(&gguf_name(name)?, &[dim])
    }

    fn skip(&mut self, _name: &str) {}

    fn scalar(&mut self, name: &str, value: f32) -> LoadResult<B::Array> {
        self.from_host(name, &[value], &[])
    }
}

/// The text model of a multimodal checkpoint (`Gemma3ForConditionalGeneration`), asked for by
/// the HF names of `Gemma3ForCausalLM`: `model.X` is read as `prefix + X` (the file's text
/// model: `language_model.model.` as Google's files and `save_pretrained` write it, or
/// `model.language_model.` as transformers names it in memory) and `lm_head.weight` as
/// `lm_head` (absent when tied).
pub(crate) struct TextPart<'w, B: Backend> {
    inner: &'w mut dyn WeightSource<B>,
    prefix: String,
    lm_head: String,
}

impl<'w, B: Backend> TextPart<'w, B> {
    /// The text model under `prefix`, its head named `lm_head`.
    pub(crate) fn new(inner: &'w mut dyn WeightSource<B>, prefix: &str, lm_head: &str) -> Self {
        Self {
            inner,
            prefix: prefix.to_string(),
            lm_head: lm_head.to_string(),
        }
    }

    fn rename(&self, name: &str) -> String {
        match name.strip_prefix("model.") {
            Some(rest) => format!("{}{rest}", self.prefix),
            None if name == "lm_head.weight" => self.lm_head.clone(),
            None => name.to_string(),
        }
    }
}

impl<B: Backend> WeightSource<B> for TextPart<'_, B> {
    fn dtype(&self) -> DType {
        self.inner.dtype()
    }

    fn contains(&mut self, name: &str) -> bool {
        let name = self.rename(name);
        self.inner.contains(&name)
    }

    fn linear(&mut self, name: &str, out: usize, inp: usize) -> LoadResult<Linear<B>> {
        let name = self.rename(name);
        self.inner.linear(&name, out, inp)
    }

    fn embedding(&mut self, name: &str, vocab: usize, width: usize) -> LoadResult<Embedding<B>> {
        let name = self.rename(name);
        self.inner.embedding(&name, vocab, width)
    }

    fn norm_scale(&mut self, name: &str, dim: usize) -> LoadResult<B::Array> {
        let name = self.rename(name);
        self.inner.norm_scale(&name, dim)
    }

    fn skip(&mut self, name: &str) {
        let name = self.rename(name);
        self.inner.skip(&name);
    }

    fn scalar(&mut self, name: &str, value: f32) -> LoadResult<B::Array> {
        self.inner.scalar(name, value)
    }
}
