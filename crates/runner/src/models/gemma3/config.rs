//! Gemma 3 text configuration: HF `config.json` (`model_type: "gemma3_text"`, HF transformers
//! 5.24's `Gemma3TextConfig` and its defaults, old and new RoPE keys) or a GGUF file's `gemma3.*`
//! metadata (read as llama.cpp 0.5's `llama_model_gemma3::load_arch_hparams` reads it), resolved
//! into what the model needs per layer.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::loading::gguf::{GgufError, GgufFile};
use crate::loading::{LoadError, LoadResult};
use crate::models::config::{
    float_problem, rope_inv_freq, ConfigProblem, FloatRule, LayerType, RopeParameters, MAX_LAYERS,
};

fn d_vocab() -> usize {
    262_208
}
fn d_hidden() -> usize {
    2304
}
fn d_intermediate() -> usize {
    9216
}
fn d_layers() -> usize {
    26
}
fn d_heads() -> usize {
    8
}
fn d_kv_heads() -> usize {
    4
}
fn d_head_dim() -> usize {
    256
}
fn d_activation() -> String {
    "gelu_pytorch_tanh".into()
}
fn d_max_pos() -> usize {
    131_072
}
fn d_eps() -> f64 {
    1e-6
}
fn d_true() -> bool {
    true
}
fn d_query_scalar() -> f64 {
    256.0
}
fn d_window() -> Option<usize> {
    Some(4096)
}

/// HF's default RoPE bases of Gemma 3: full (global) and sliding (local) layers.
const DEFAULT_GLOBAL_THETA: f64 = 1_000_000.0;
const DEFAULT_LOCAL_THETA: f64 = 10_000.0;
/// Gemma 3's default sliding pattern: 5 sliding layers, then 1 full (HF and llama.cpp).
const DEFAULT_PATTERN: usize = 6;

/// `config.json` of a Gemma 3 text model (HF `Gemma3ForCausalLM`). Fields not listed are
/// ignored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Gemma3TextConfig {
    /// HF model type (`"gemma3_text"`).
    #[serde(default)]
    pub model_type: Option<String>,
    /// Vocabulary size (rows of the embedding).
    #[serde(default = "d_vocab")]
    pub vocab_size: usize,
    /// Residual width.
    #[serde(default = "d_hidden")]
    pub hidden_size: usize,
    /// MLP inner width.
    #[serde(default = "d_intermediate")]
    pub intermediate_size: usize,
    /// Decoder layers.
    #[serde(default = "d_layers")]
    pub num_hidden_layers: usize,
    /// Query heads.
    #[serde(default = "d_heads")]
    pub num_attention_heads: usize,
    /// KV heads.
    #[serde(default = "d_kv_heads")]
    pub num_key_value_heads: usize,
    /// Head dim.
    #[serde(default = "d_head_dim")]
    pub head_dim: usize,
    /// MLP activation; only `gelu_pytorch_tanh` is implemented.
    #[serde(default = "d_activation")]
    pub hidden_activation: String,
    /// Context length.
    #[serde(default = "d_max_pos")]
    pub max_position_embeddings: usize,
    /// RMS norm epsilon.
    #[serde(default = "d_eps")]
    pub rms_norm_eps: f64,
    /// Whether the LM head is the embedding table.
    #[serde(default = "d_true")]
    pub tie_word_embeddings: bool,
    /// Attention scores are scaled by `query_pre_attn_scalar ^ -0.5`.
    #[serde(default = "d_query_scalar")]
    pub query_pre_attn_scalar: f64,
    /// Sliding window of sliding layers (`null`: none).
    #[serde(default = "d_window")]
    pub sliding_window: Option<usize>,
    /// Per-layer attention kinds (default: [`sliding_window_pattern`](Self::sliding_window_pattern)).
    #[serde(default)]
    pub layer_types: Option<Vec<LayerType>>,
    /// Every `n`th layer is full attention (older configs; HF's default 6).
    #[serde(default, alias = "_sliding_window_pattern")]
    pub sliding_window_pattern: Option<usize>,
    /// RoPE parameters per layer type (HF 5.x).
    #[serde(default)]
    pub rope_parameters: Option<BTreeMap<LayerType, RopeParameters>>,
    /// RoPE base of full layers (older configs).
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// RoPE base of sliding layers (older configs).
    #[serde(default)]
    pub rope_local_base_freq: Option<f64>,
    /// RoPE scaling of full layers (older configs; `linear` only).
    #[serde(default)]
    pub rope_scaling: Option<RopeParameters>,
    /// `tanh(x / c) * c` on the logits.
    #[serde(default)]
    pub final_logit_softcapping: Option<f64>,
    /// Soft-capping of attention scores (Gemma 2; unsupported when set).
    #[serde(default)]
    pub attn_logit_softcapping: Option<f64>,
    /// Biases on the attention projections (unsupported when true).
    #[serde(default)]
    pub attention_bias: bool,
    /// Bidirectional attention (EmbeddingGemma; unsupported when true).
    #[serde(default)]
    pub use_bidirectional_attention: Option<bool>,
}

/// One layer's attention: its kind and RoPE frequencies.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3Layer {
    /// Sliding or full attention.
    pub layer_type: LayerType,
    /// RoPE inverse frequencies (`head_dim / 2` entries).
    pub inv_freq: Vec<f32>,
}

/// What a Gemma 3 text model needs, from either source.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3Resolved {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Residual width.
    pub hidden_size: usize,
    /// MLP inner width.
    pub intermediate_size: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// Head dim.
    pub head_dim: usize,
    /// RMS norm epsilon.
    pub eps: f32,
    /// Attention score scale (`query_pre_attn_scalar ^ -0.5`).
    pub attention_scale: f32,
    /// Sliding window of sliding layers.
    pub sliding_window: usize,
    /// Final logit soft-capping, if any.
    pub final_logit_softcapping: Option<f64>,
    /// LM head = embedding.
    pub tie_word_embeddings: bool,
    /// Context length.
    pub max_position_embeddings: usize,
    /// One entry per layer.
    pub layers: Vec<Gemma3Layer>,
}

fn invalid(path: &Path, reason: impl Into<String>) -> LoadError {
    LoadError::InvalidConfig {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn unsupported(path: &Path, feature: impl Into<String>) -> LoadError {
    LoadError::UnsupportedFeature {
        path: path.to_path_buf(),
        feature: feature.into(),
    }
}

/// `layers` within [`MAX_LAYERS`], else the error naming `path`.
fn check_layer_count(path: &Path, layers: usize) -> LoadResult<()> {
    if layers > MAX_LAYERS {
        return Err(invalid(
            path,
            format!("{layers} layers: more than the {MAX_LAYERS} a model may have"),
        ));
    }
    Ok(())
}

/// HF's default `layer_types`: `full` at every `pattern`th layer (1-based), sliding elsewhere.
fn pattern_layer_types(layers: usize, pattern: usize) -> Vec<LayerType> {
    (0..layers)
        .map(|i| {
            if pattern > 0 && (i + 1) % pattern == 0 {
                LayerType::Full
            } else {
                LayerType::Sliding
            }
        })
        .collect()
}

/// RoPE inverse frequencies: `default` (`theta^(-2i/d)`) or `linear` (the same `/ factor`).
fn inv_freq(path: &Path, params: &RopeParameters, head_dim: usize) -> LoadResult<Vec<f32>> {
    let base = RopeParameters {
        rope_type: "default".into(),
        rope_theta: params.rope_theta,
        partial_rotary_factor: None,
        factor: None,
    };
    let freqs = rope_inv_freq(&base, head_dim).map_err(|problem| match problem {
        ConfigProblem::Invalid(reason) | ConfigProblem::Unsupported(reason) => {
            invalid(path, format!("bad RoPE: {reason}"))
        }
    })?;
    match params.rope_type.as_str() {
        "default" => Ok(freqs),
        "linear" => {
            let factor = params.factor.unwrap_or(1.0);
            if !(factor.is_finite() && factor > 0.0) {
                return Err(invalid(path, format!("linear RoPE factor {factor}")));
            }
            Ok(freqs.into_iter().map(|f| f / factor as f32).collect())
        }
        other => Err(unsupported(
            path,
            format!("rope_type {other:?} (default and linear are)"),
        )),
    }
}

impl Gemma3TextConfig {
    /// The RoPE parameters of each layer type, from `rope_parameters` or the older keys.
    fn rope(&self) -> BTreeMap<LayerType, RopeParameters> {
        let default = |theta: f64| RopeParameters {
            rope_type: "default".into(),
            rope_theta: theta,
            partial_rotary_factor: None,
            factor: None,
        };
        if let Some(params) = &self.rope_parameters {
            let mut params = params.clone();
            params
                .entry(LayerType::Full)
                .or_insert_with(|| default(DEFAULT_GLOBAL_THETA));
            params
                .entry(LayerType::Sliding)
                .or_insert_with(|| default(DEFAULT_LOCAL_THETA));
            return params;
        }
        let mut full = default(self.rope_theta.unwrap_or(DEFAULT_GLOBAL_THETA));
        if let Some(scaling) = &self.rope_scaling {
            full.rope_type = scaling.rope_type.clone();
            full.factor = scaling.factor;
        }
        let sliding = default(self.rope_local_base_freq.unwrap_or(DEFAULT_LOCAL_THETA));
        BTreeMap::from([(LayerType::Full, full), (LayerType::Sliding, sliding)])
    }

    /// Check and resolve (`path` names the file in errors).
    pub fn resolve(&self, path: &Path) -> LoadResult<Gemma3Resolved> {
        if self.hidden_activation != "gelu_pytorch_tanh" {
            return Err(unsupported(
                path,
                format!("hidden_activation {:?}", self.hidden_activation),
            ));
        }
        if self.attention_bias {
            return Err(unsupported(path, "attention_bias"));
        }
        if self.attn_logit_softcapping.is_some() {
            return Err(unsupported(path, "attn_logit_softcapping"));
        }
        if self.use_bidirectional_attention == Some(true) {
            return Err(unsupported(path, "use_bidirectional_attention"));
        }
        check_layer_count(path, self.num_hidden_layers)?;
        let types = match &self.layer_types {
            Some(types) => types.clone(),
            None => pattern_layer_types(
                self.num_hidden_layers,
                self.sliding_window_pattern.unwrap_or(DEFAULT_PATTERN),
            ),
        };
        let rope = self.rope();
        let window = self.sliding_window.unwrap_or(0);
        Resolver {
            path,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            eps: self.rms_norm_eps,
            query_pre_attn_scalar: self.query_pre_attn_scalar,
            window,
            softcap: self.final_logit_softcapping,
            tied: self.tie_word_embeddings,
            context: self.max_position_embeddings,
        }
        .resolve(&types, &rope)
    }
}

/// The sizes both sources resolve from.
struct Resolver<'a> {
    path: &'a Path,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f64,
    query_pre_attn_scalar: f64,
    window: usize,
    softcap: Option<f64>,
    tied: bool,
    context: usize,
}

impl Resolver<'_> {
    fn resolve(
        &self,
        types: &[LayerType],
        rope: &BTreeMap<LayerType, RopeParameters>,
    ) -> LoadResult<Gemma3Resolved> {
        let path = self.path;
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.layers),
            ("num_attention_heads", self.heads),
            ("num_key_value_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.context),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(invalid(path, format!("{name} is 0")));
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(invalid(
                path,
                format!(
                    "{} query heads are not a multiple of {} KV heads",
                    self.heads, self.kv_heads
                ),
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(invalid(path, format!("head_dim {} is odd", self.head_dim)));
        }
        if types.len() != self.layers {
            return Err(invalid(
                path,
                format!("{} layer_types for {} layers", types.len(), self.layers),
            ));
        }
        if types.contains(&LayerType::Sliding) && self.window == 0 {
            return Err(invalid(path, "sliding layers but no sliding_window"));
        }
        let floats = [
            ("rms_norm_eps", Some(self.eps), FloatRule::NotNegative),
            ("final_logit_softcapping", self.softcap, FloatRule::Finite),
            (
                "query_pre_attn_scalar",
                Some(self.query_pre_attn_scalar),
                FloatRule::Positive,
            ),
        ];
        for (name, value, rule) in floats {
            if let Some(problem) = value.and_then(|v| float_problem(name, v, rule)) {
                return Err(invalid(path, problem));
            }
        }
        let mut freqs = BTreeMap::new();
        for (layer_type, params) in rope {
            freqs.insert(*layer_type, inv_freq(path, params, self.head_dim)?);
        }
        let layers = types
            .iter()
            .map(|&layer_type| Gemma3Layer {
                layer_type,
                inv_freq: freqs.get(&layer_type).cloned().unwrap_or_default(),
            })
            .collect();
        Ok(Gemma3Resolved {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            eps: self.eps as f32,
            attention_scale: self.query_pre_attn_scalar.powf(-0.5) as f32,
            sliding_window: self.window,
            final_logit_softcapping: self.softcap.filter(|c| *c > 0.0),
            tie_word_embeddings: self.tied,
            max_position_embeddings: self.context,
            layers,
        })
    }
}

/// The GGUF architectures this family loads.
pub const GGUF_ARCHITECTURES: [&str; 1] = ["gemma3"];

/// llama.cpp's Gemma 3 27B has 62 layers and scales queries by `(hidden / heads) ^ -0.5`; every
/// other size by `head_dim ^ -0.5` (`llama_model_gemma3::load_arch_hparams`).
const LAYERS_27B: usize = 62;

/// The sliding pattern of a GGUF: `gemma3.attention.sliding_window_pattern` as a period (u32) or
/// a per-layer flag array (true = sliding), else llama.cpp's default period 6
/// (`load_swa_pattern(ml, 6)`: layer `i` slides unless `i % 6 == 5`).
fn gguf_layer_types(file: &GgufFile, layers: usize) -> Result<Vec<LayerType>, GgufError> {
    let key = "gemma3.attention.sliding_window_pattern";
    let flags = match file.value(key) {
        Some(candle_core::quantized::gguf_file::Value::Array(values)) => values
            .iter()
            .map(|v| match v {
                candle_core::quantized::gguf_file::Value::Bool(b) => Ok(*b),
                other => Err(GgufError::BadValue {
                    path: file.path().to_path_buf(),
                    key: key.into(),
                    reason: format!("expected booleans, found {other:?}"),
                }),
            })
            .collect::<Result<Vec<bool>, _>>()?,
        _ => {
            let pattern = file.opt_usize(key)?.unwrap_or(DEFAULT_PATTERN);
            return Ok(pattern_layer_types(layers, pattern));
        }
    };
    if flags.len() != layers {
        return Err(GgufError::BadValue {
            path: file.path().to_path_buf(),
            key: key.into(),
            reason: format!("{} flags for {layers} layers", flags.len()),
        });
    }
    Ok(flags
        .into_iter()
        .map(|sliding| {
            if sliding {
                LayerType::Sliding
            } else {
                LayerType::Full
            }
        })
        .collect())
}

/// Resolve the Gemma 3 configuration of a GGUF file (`general.architecture = "gemma3"`), as
/// llama.cpp reads it. The vocabulary size is the embedding's row count.
pub fn resolve_gguf(file: &GgufFile) -> LoadResult<Gemma3Resolved> {
    let arch = file.architecture()?;
    if !GGUF_ARCHITECTURES.contains(&arch) {
        return Err(GgufError::UnsupportedArchitecture {
            path: file.path().to_path_buf(),
            found: arch.to_string(),
            supported: GGUF_ARCHITECTURES.to_vec(),
        }
        .into());
    }
    let key = |k: &str| format!("{arch}.{k}");
    let layers = file.usize(&key("block_count"))?;
    check_layer_count(file.path(), layers)?;
    let hidden = file.usize(&key("embedding_length"))?;
    let heads = file.usize(&key("attention.head_count"))?;
    let kv_heads = file
        .opt_usize(&key("attention.head_count_kv"))?
        .unwrap_or(heads);
    let head_dim = match file.opt_usize(&key("attention.key_length"))? {
        Some(d) => d,
        None if heads > 0 => hidden / heads,
        None => 0,
    };
    if let Some(v) = file.opt_usize(&key("attention.value_length"))? {
        if v != head_dim {
            return Err(invalid(
                file.path(),
                format!("value_length {v} differs from key_length {head_dim}"),
            ));
        }
    }
    let Some(embed) = file.tensor_info("token_embd.weight") else {
        return Err(LoadError::MissingTensor {
            name: "token_embd.weight".into(),
            expected: vec![0, hidden],
        });
    };
    let vocab = embed.shape.first().copied().unwrap_or(0);
    let window = file
        .opt_usize(&key("attention.sliding_window"))?
        .unwrap_or(0);
    let types = if window > 0 {
        gguf_layer_types(file, layers)?
    } else {
        vec![LayerType::Full; layers]
    };
    let theta = |k: &str, default: f64| -> LoadResult<f64> {
        Ok(file.opt_f64(&key(k))?.unwrap_or(default))
    };
    let scaling = file.opt_string(&key("rope.scaling.type"))?;
    let factor = file.opt_f64(&key("rope.scaling.factor"))?;
    let full_type = match (scaling, factor) {
        (None | Some("none"), _) | (_, None) => "default",
        (Some("linear"), Some(_)) => "linear",
        (Some(other), _) => {
            return Err(unsupported(
                file.path(),
                format!("{arch}.rope.scaling.type {other:?} (linear is supported)"),
            ))
        }
    };
    // llama.cpp's defaults: rope_freq_base_train 10000, rope_freq_base_train_swa 10000.
    let rope = BTreeMap::from([
        (
            LayerType::Full,
            RopeParameters {
                rope_type: full_type.into(),
                rope_theta: theta("rope.freq_base", DEFAULT_LOCAL_THETA)?,
                partial_rotary_factor: None,
                factor,
            },
        ),
        (
            LayerType::Sliding,
            RopeParameters {
                rope_type: "default".into(),
                rope_theta: theta("rope.freq_base_swa", DEFAULT_LOCAL_THETA)?,
                partial_rotary_factor: None,
                factor: None,
            },
        ),
    ]);
    let query_pre_attn_scalar = if layers == LAYERS_27B && heads > 0 {
        (hidden / heads) as f64
    } else {
        head_dim as f64
    };
    let Some(eps) = file.opt_f64(&key("attention.layer_norm_rms_epsilon"))? else {
        return Err(GgufError::MissingKey {
            path: file.path().to_path_buf(),
            key: key("attention.layer_norm_rms_epsilon"),
        }
        .into());
    };
    Resolver {
        path: file.path(),
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: file.usize(&key("feed_forward_length"))?,
        layers,
        heads,
        kv_heads,
        head_dim,
        eps,
        query_pre_attn_scalar,
        window,
        softcap: file.opt_f64(&key("final_logit_softcapping"))?,
        tied: !file.tensors().contains_key("output.weight"),
        context: file.usize(&key("context_length"))?,
    }
    .resolve(&types, &rope)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_or_negative_floats_are_refused_by_name() {
        let base = serde_json::json!({
            "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
            "head_dim": 8, "sliding_window": 4, "rope_theta": 1e6, "rope_local_base_freq": 1e4
        });
        let path = Path::new("config.json");
        let config = |patch: serde_json::Value| -> Gemma3TextConfig {
            let mut value = base.clone();
            for (k, v) in patch.as_object().unwrap() {
                value[k] = v.clone();
            }
            serde_json::from_value(value).unwrap()
        };
        assert!(config(serde_json::json!({})).resolve(path).is_ok());
        for (patch, name) in [
            (serde_json::json!({"rms_norm_eps": -1e-6}), "rms_norm_eps"),
            (serde_json::json!({"rope_theta": -5.0}), "rope_theta"),
            (
                serde_json::json!({"rope_local_base_freq": 0.0}),
                "rope_theta",
            ),
            (
                serde_json::json!({"query_pre_attn_scalar": 0.0}),
                "query_pre_attn_scalar",
            ),
        ] {
            let err = match config(patch.clone()).resolve(path) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{patch} was accepted"),
            };
            assert!(err.contains(name), "{patch}: {err}");
        }
        // JSON has no NaN or infinity; a GGUF's f32 metadata can hold them.
        for value in [f64::NAN, f64::INFINITY] {
            let mut c = config(serde_json::json!({}));
            c.rms_norm_eps = value;
            assert!(c.resolve(path).is_err(), "epsilon {value}");
            let mut c = config(serde_json::json!({}));
            c.final_logit_softcapping = Some(value);
            assert!(c.resolve(path).is_err(), "softcap {value}");
            let mut c = config(serde_json::json!({}));
            c.rope_theta = Some(value);
            assert!(c.resolve(path).is_err(), "rope base {value}");
        }
    }

    #[test]
    fn default_pattern_is_five_sliding_then_full() {
        let t = pattern_layer_types(12, 6);
        assert_eq!(t[5], LayerType::Full);
        assert_eq!(t[11], LayerType::Full);
        assert_eq!(t.iter().filter(|&&x| x == LayerType::Full).count(), 2);
    }

    #[test]
    fn old_rope_keys_resolve_like_rope_parameters() {
        let old: Gemma3TextConfig = serde_json::from_value(serde_json::json!({
            "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
            "head_dim": 8, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0, "rope_theta": 0.0}
        }))
        .unwrap();
        let new: Gemma3TextConfig = serde_json::from_value(serde_json::json!({
            "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
            "head_dim": 8, "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
        }))
        .unwrap();
        let path = Path::new("config.json");
        let (a, b) = (old.resolve(path).unwrap(), new.resolve(path).unwrap());
        assert_eq!(a.layers, b.layers);
        assert!((a.layers[1].inv_freq[1] - 1e6f32.powf(-0.25) / 8.0).abs() < 1e-9);
        assert!((a.attention_scale - 256f32.powf(-0.5)).abs() < 1e-9);
    }

    #[test]
    fn unsupported_features_are_errors() {
        for extra in [
            serde_json::json!({"attn_logit_softcapping": 50.0}),
            serde_json::json!({"hidden_activation": "silu"}),
            serde_json::json!({"use_bidirectional_attention": true}),
            serde_json::json!({"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1e6}}}),
        ] {
            let config: Gemma3TextConfig = serde_json::from_value(extra.clone()).unwrap();
            let err = config.resolve(Path::new("c.json")).unwrap_err();
            assert!(
                matches!(err, LoadError::UnsupportedFeature { .. }),
                "{extra}: {err}"
            );
        }
    }
}
