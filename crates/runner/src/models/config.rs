//! The HF configurations of Gemma 4 (`gemma4_text`) and its assistant (`gemma4_assistant`), and
//! their resolution into per-layer specifications.
//!
//! Defaults are HF transformers 5.24's class defaults. Resolution applies what HF's
//! `Gemma4TextConfig.__post_init__` and `kv_sharing_modes` do: default `layer_types` (5 sliding :
//! 1 full), the last layer forced to full attention, default `rope_parameters`, full-attention
//! layers taking `global_head_dim` / `num_global_key_value_heads` (or the explicit
//! `per_layer_config` that newer configs serialise), and the KV-sharing roles of each layer.
//!
//! A published target is a multimodal `Gemma4Config` (`model_type: "gemma4"`) whose text model is
//! the nested `text_config`; [`text_config_of`] finds it.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The attention kind of one decoder layer (`layer_types` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub enum LayerType {
    /// `"sliding_attention"`: causal attention over the last `sliding_window` positions.
    #[serde(rename = "sliding_attention")]
    Sliding,
    /// `"full_attention"`: causal attention over every position.
    #[serde(rename = "full_attention")]
    Full,
}

impl LayerType {
    /// The HF name of the layer type.
    pub fn hf_name(self) -> &'static str {
        match self {
            LayerType::Sliding => "sliding_attention",
            LayerType::Full => "full_attention",
        }
    }
}

/// One entry of `rope_parameters`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RopeParameters {
    /// `"default"` or `"proportional"`.
    pub rope_type: String,
    /// The base wavelength.
    pub rope_theta: f64,
    /// Fraction of the head dim that rotates (proportional RoPE only; HF's default RoPE for
    /// Gemma 4 ignores it).
    #[serde(default)]
    pub partial_rotary_factor: Option<f64>,
    /// Frequency divisor (proportional RoPE only).
    #[serde(default)]
    pub factor: Option<f64>,
}

fn d_vocab() -> usize {
    262_144
}
fn d_hidden() -> usize {
    2304
}
fn d_intermediate() -> usize {
    9216
}
fn d_layers() -> usize {
    30
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
fn d_window() -> usize {
    512
}
fn d_ple_hidden() -> usize {
    256
}
fn d_global_head_dim() -> usize {
    512
}

/// `config.json` of a Gemma 4 text model (`model_type: "gemma4_text"`), and the `text_config` of
/// the assistant. Fields not listed are ignored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Gemma4TextConfig {
    /// HF model type (`"gemma4_text"`).
    #[serde(default)]
    pub model_type: Option<String>,
    /// Vocabulary size.
    #[serde(default = "d_vocab")]
    pub vocab_size: usize,
    /// Residual stream width.
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
    /// KV heads of sliding layers (and of full layers without an override).
    #[serde(default = "d_kv_heads")]
    pub num_key_value_heads: usize,
    /// Head dim of sliding layers.
    #[serde(default = "d_head_dim")]
    pub head_dim: usize,
    /// MLP activation; only `gelu_pytorch_tanh` (GeGLU with tanh GELU) is implemented.
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
    /// RoPE parameters per layer type.
    #[serde(default)]
    pub rope_parameters: Option<BTreeMap<LayerType, RopeParameters>>,
    /// Biases on the attention projections (unsupported when true).
    #[serde(default)]
    pub attention_bias: bool,
    /// Sliding window length.
    #[serde(default = "d_window")]
    pub sliding_window: usize,
    /// Per-layer attention kinds.
    #[serde(default)]
    pub layer_types: Option<Vec<LayerType>>,
    /// Final logit soft-capping.
    #[serde(default)]
    pub final_logit_softcapping: Option<f64>,
    /// `"all"` (unsupported) or `"vision"` (text stays causal).
    #[serde(default)]
    pub use_bidirectional_attention: Option<String>,
    /// PLE vocabulary size.
    #[serde(default = "d_vocab")]
    pub vocab_size_per_layer_input: usize,
    /// PLE width per layer (0 = no PLE).
    #[serde(default = "d_ple_hidden")]
    pub hidden_size_per_layer_input: usize,
    /// Full-attention layers use their keys as values.
    #[serde(default)]
    pub attention_k_eq_v: bool,
    /// The last this-many layers reuse the KV of earlier layers.
    #[serde(default)]
    pub num_kv_shared_layers: usize,
    /// Mixture-of-experts blocks beside the dense MLP of every layer (26B-A4B).
    #[serde(default)]
    pub enable_moe_block: bool,
    /// Experts per MoE block (with `enable_moe_block`).
    #[serde(default)]
    pub num_experts: Option<usize>,
    /// Experts each token is routed to (with `enable_moe_block`).
    #[serde(default)]
    pub top_k_experts: Option<usize>,
    /// Inner width of each expert's MLP (with `enable_moe_block`).
    #[serde(default)]
    pub moe_intermediate_size: Option<usize>,
    /// KV-shared layers have a twice wider MLP.
    #[serde(default)]
    pub use_double_wide_mlp: bool,
    /// Head dim of full-attention layers (HF default 512), when `per_layer_config` is absent.
    #[serde(default = "d_global_head_dim")]
    pub global_head_dim: usize,
    /// KV heads of full-attention layers, when `per_layer_config` is absent (used only with
    /// `attention_k_eq_v`, as in HF).
    #[serde(default)]
    pub num_global_key_value_heads: Option<usize>,
    /// Explicit per-layer overrides (layer index → attributes), as HF 5.x serialises them.
    #[serde(default)]
    pub per_layer_config: Option<BTreeMap<String, BTreeMap<String, serde_json::Value>>>,
    /// Whether `hidden_states[-1]` is the final-normed hidden (HF default: yes).
    #[serde(default)]
    pub tie_last_hidden_states: Option<bool>,
}

fn d_backbone() -> usize {
    1536
}
fn d_centroids() -> usize {
    2048
}
fn d_centroid_top_k() -> usize {
    32
}

/// `config.json` of a Gemma 4 assistant (`model_type: "gemma4_assistant"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Gemma4AssistantConfig {
    /// HF model type (`"gemma4_assistant"`).
    #[serde(default)]
    pub model_type: Option<String>,
    /// The assistant's own decoder.
    pub text_config: Gemma4TextConfig,
    /// Hidden size of the target it drafts for.
    #[serde(default = "d_backbone")]
    pub backbone_hidden_size: usize,
    /// Logits through the centroid-masked ("ordered") embedding.
    #[serde(default)]
    pub use_ordered_embeddings: bool,
    /// Number of token clusters.
    #[serde(default = "d_centroids")]
    pub num_centroids: usize,
    /// Clusters whose tokens get real logits.
    #[serde(default = "d_centroid_top_k")]
    pub centroid_intermediate_top_k: usize,
    /// Whether the LM head is the embedding table.
    #[serde(default = "d_true")]
    pub tie_word_embeddings: bool,
}

/// How a layer takes part in KV sharing (HF's `kv_sharing_modes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvRole {
    /// Computes and caches its own keys and values.
    Own,
    /// Like `Own`, and the last such layer of its type: later shared layers and the assistant
    /// read its keys and values.
    Store,
    /// Has no K/V projections: attends to the keys and values of its type's `Store` layer.
    Reuse,
}

/// Everything one decoder layer needs to know about its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    /// Sliding or full attention.
    pub layer_type: LayerType,
    /// Head dim of this layer.
    pub head_dim: usize,
    /// KV heads of this layer.
    pub kv_heads: usize,
    /// MLP inner width (doubled for KV-shared layers with `use_double_wide_mlp`).
    pub intermediate: usize,
    /// KV-sharing role.
    pub role: KvRole,
    /// Values are the (un-normed) keys: no `v_proj`.
    pub k_eq_v: bool,
    /// RoPE inverse frequencies (`head_dim / 2` entries, zeros for non-rotating pairs).
    pub inv_freq: Vec<f32>,
}

/// The mixture-of-experts block of every layer (HF `Gemma4TextRouter` + `Gemma4TextExperts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeSpec {
    /// Experts per block.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Inner width of one expert.
    pub intermediate: usize,
}

/// A [`Gemma4TextConfig`] resolved into per-layer specifications.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedText {
    /// The parsed configuration.
    pub config: Gemma4TextConfig,
    /// One spec per layer.
    pub layers: Vec<LayerSpec>,
    /// The `Store` layer of each layer type present.
    pub store_layers: BTreeMap<LayerType, usize>,
    /// Number of layers that own a cache (`num_hidden_layers - num_kv_shared_layers`).
    pub cache_layers: usize,
    /// The mixture-of-experts block every layer has beside its MLP (`enable_moe_block`).
    pub moe: Option<MoeSpec>,
}

/// Why a configuration cannot be built (turned into a `LoadError` with the file's path).
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigProblem {
    /// Inconsistent values.
    Invalid(String),
    /// A feature these models do not implement.
    Unsupported(String),
}

type Resolved<T> = Result<T, ConfigProblem>;

/// The most layers a configuration may declare (the largest Gemma models have 62); a larger count
/// is a broken file, refused before anything is sized from it. Every family checks it.
pub const MAX_LAYERS: usize = 1024;

/// Why a configuration float cannot be used, or `None` when it can: the RMS norm epsilon must be
/// finite and not negative (a NaN epsilon turns every norm into NaN, a negative one can take the
/// root of a negative number), a RoPE base finite and positive, a softcap finite when given.
pub fn float_problem(name: &str, value: f64, rule: FloatRule) -> Option<String> {
    let ok = value.is_finite()
        && match rule {
            FloatRule::NotNegative => value >= 0.0,
            FloatRule::Positive => value > 0.0,
            FloatRule::Finite => true,
        };
    (!ok).then(|| format!("{name} is {value}: it must be {}", rule.describe()))
}

/// What a configuration float must be (see [`float_problem`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatRule {
    /// Finite and at least 0.
    NotNegative,
    /// Finite and above 0.
    Positive,
    /// Finite.
    Finite,
}

impl FloatRule {
    fn describe(self) -> &'static str {
        match self {
            FloatRule::NotNegative => "finite and at least 0",
            FloatRule::Positive => "finite and above 0",
            FloatRule::Finite => "finite",
        }
    }
}

fn invalid<T>(reason: impl Into<String>) -> Resolved<T> {
    Err(ConfigProblem::Invalid(reason.into()))
}

fn unsupported<T>(feature: impl Into<String>) -> Resolved<T> {
    Err(ConfigProblem::Unsupported(feature.into()))
}

/// RoPE inverse frequencies for one layer type, as HF computes them.
///
/// * `default`: `theta^(-2i/d)` for `i < d/2` (HF's Gemma 4 default RoPE ignores
///   `partial_rotary_factor`);
/// * `proportional`: the first `floor(prf * d / 2)` pairs get `theta^(-2i/d)` (exponent over the
///   whole head dim), the remaining pairs frequency 0 (no rotation); all divided by `factor`.
pub fn rope_inv_freq(params: &RopeParameters, head_dim: usize) -> Resolved<Vec<f32>> {
    if let Some(problem) = float_problem("rope_theta", params.rope_theta, FloatRule::Positive) {
        return invalid(problem);
    }
    let half = head_dim / 2;
    let freq = |i: usize| -> f32 {
        // HF: torch.arange(0, dim, 2).float() / dim, then base ** that, in f32.
        let exponent = (2 * i) as f32 / head_dim as f32;
        1.0 / (params.rope_theta as f32).powf(exponent)
    };
    match params.rope_type.as_str() {
        "default" => Ok((0..half).map(freq).collect()),
        "proportional" => {
            let prf = params.partial_rotary_factor.unwrap_or(1.0);
            let rotated = ((prf * head_dim as f64) / 2.0).floor() as usize;
            if rotated > half {
                return invalid(format!("partial_rotary_factor {prf} exceeds 1"));
            }
            let factor = params.factor.unwrap_or(1.0) as f32;
            Ok((0..half)
                .map(|i| if i < rotated { freq(i) / factor } else { 0.0 })
                .collect())
        }
        other => unsupported(format!("rope_type {other:?}")),
    }
}

/// HF's default `rope_parameters` for Gemma 4.
fn default_rope(layer_type: LayerType) -> RopeParameters {
    match layer_type {
        LayerType::Sliding => RopeParameters {
            rope_type: "default".into(),
            rope_theta: 10_000.0,
            partial_rotary_factor: None,
            factor: None,
        },
        LayerType::Full => RopeParameters {
            rope_type: "proportional".into(),
            rope_theta: 1_000_000.0,
            partial_rotary_factor: Some(0.25),
            factor: None,
        },
    }
}

/// Per-layer overrides of head dim, KV heads and MLP width.
#[derive(Debug, Clone, Copy, Default)]
struct Override {
    head_dim: Option<usize>,
    kv_heads: Option<usize>,
    intermediate: Option<usize>,
}

fn as_usize(layer: &str, key: &str, value: &serde_json::Value) -> Resolved<usize> {
    match value.as_u64() {
        Some(v) => Ok(v as usize),
        None => invalid(format!("per_layer_config[{layer}].{key} is not an integer")),
    }
}

impl Gemma4TextConfig {
    /// The layer types after HF's defaults (5:1 pattern) and its last-layer-is-full rule.
    pub fn resolved_layer_types(&self) -> Vec<LayerType> {
        let mut types = match &self.layer_types {
            Some(t) => t.clone(),
            None => (0..self.num_hidden_layers)
                .map(|i| {
                    if (i + 1) % 6 != 0 {
                        LayerType::Sliding
                    } else {
                        LayerType::Full
                    }
                })
                .collect(),
        };
        if let Some(last) = types.last_mut() {
            *last = LayerType::Full;
        }
        types
    }

    fn overrides(&self, types: &[LayerType]) -> Resolved<Vec<Override>> {
        let mut out = vec![Override::default(); types.len()];
        match &self.per_layer_config {
            Some(map) => {
                for (key, attrs) in map {
                    let Ok(index) = key.trim().parse::<usize>() else {
                        return invalid(format!(
                            "per_layer_config key {key:?} is not a layer index"
                        ));
                    };
                    let Some(slot) = out.get_mut(index) else {
                        return invalid(format!("per_layer_config names layer {index}"));
                    };
                    for (attr, value) in attrs {
                        match attr.as_str() {
                            "head_dim" => slot.head_dim = Some(as_usize(key, attr, value)?),
                            "num_key_value_heads" => {
                                slot.kv_heads = Some(as_usize(key, attr, value)?)
                            }
                            "intermediate_size" => {
                                slot.intermediate = Some(as_usize(key, attr, value)?)
                            }
                            other => {
                                return unsupported(format!("per_layer_config attribute {other:?}"))
                            }
                        }
                    }
                }
            }
            None => {
                let kv = if self.attention_k_eq_v {
                    self.num_global_key_value_heads
                } else {
                    None
                };
                for (slot, t) in out.iter_mut().zip(types) {
                    if *t == LayerType::Full {
                        slot.head_dim = Some(self.global_head_dim);
                        slot.kv_heads = kv;
                    }
                }
            }
        }
        Ok(out)
    }

    /// HF's `kv_sharing_modes`: the role of every layer, and the store layer of each type.
    fn roles(&self, types: &[LayerType]) -> Resolved<(Vec<KvRole>, BTreeMap<LayerType, usize>)> {
        let n = types.len();
        if self.num_kv_shared_layers == n {
            return Ok((vec![KvRole::Reuse; n], BTreeMap::new()));
        }
        if self.num_kv_shared_layers > n {
            return invalid(format!(
                "num_kv_shared_layers {} exceeds num_hidden_layers {n}",
                self.num_kv_shared_layers
            ));
        }
        let first_shared = n - self.num_kv_shared_layers;
        let mut roles: Vec<KvRole> = (0..n)
            .map(|i| {
                if i < first_shared {
                    KvRole::Own
                } else {
                    KvRole::Reuse
                }
            })
            .collect();
        let mut stores = BTreeMap::new();
        for t in types {
            match types[..first_shared].iter().rposition(|x| x == t) {
                Some(i) => {
                    stores.insert(*t, i);
                }
                None => {
                    return invalid(format!(
                        "KV-shared {} layers have no earlier layer of that type to share from",
                        t.hf_name()
                    ))
                }
            }
        }
        for &i in stores.values() {
            roles[i] = KvRole::Store;
        }
        Ok((roles, stores))
    }

    /// The MoE block's shape, checked: all three sizes given, non-zero, `top_k <= experts`.
    fn moe_spec(&self) -> Resolved<Option<MoeSpec>> {
        if !self.enable_moe_block {
            return Ok(None);
        }
        let sizes = [
            ("num_experts", self.num_experts),
            ("top_k_experts", self.top_k_experts),
            ("moe_intermediate_size", self.moe_intermediate_size),
        ];
        let mut values = [0usize; 3];
        for ((name, value), slot) in sizes.into_iter().zip(&mut values) {
            match value {
                Some(v) if v > 0 => *slot = v,
                Some(_) => return invalid(format!("enable_moe_block with {name} 0")),
                None => return invalid(format!("enable_moe_block without {name}")),
            }
        }
        let [experts, top_k, intermediate] = values;
        if top_k > experts {
            return invalid(format!(
                "top_k_experts {top_k} exceeds num_experts {experts}"
            ));
        }
        Ok(Some(MoeSpec {
            experts,
            top_k,
            intermediate,
        }))
    }

    /// Check the configuration and resolve every layer.
    pub fn resolve(&self) -> Resolved<ResolvedText> {
        let moe = self.moe_spec()?;
        if self.attention_bias {
            return unsupported("attention_bias");
        }
        if self.use_bidirectional_attention.as_deref() == Some("all") {
            return unsupported("use_bidirectional_attention = \"all\"");
        }
        if self.hidden_activation != "gelu_pytorch_tanh" && self.hidden_activation != "gelu_tanh" {
            return unsupported(format!("hidden_activation {:?}", self.hidden_activation));
        }
        let floats = [
            (
                "rms_norm_eps",
                Some(self.rms_norm_eps),
                FloatRule::NotNegative,
            ),
            (
                "final_logit_softcapping",
                self.final_logit_softcapping,
                FloatRule::Finite,
            ),
        ];
        for (name, value, rule) in floats {
            if let Some(problem) = value.and_then(|v| float_problem(name, v, rule)) {
                return invalid(problem);
            }
        }
        let n = self.num_hidden_layers;
        let nonzero = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", n),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("sliding_window", self.sliding_window),
        ];
        for (name, value) in nonzero {
            if value == 0 {
                return invalid(format!("{name} is 0"));
            }
        }
        if n > MAX_LAYERS {
            return invalid(format!(
                "{n} layers: more than the {MAX_LAYERS} a model may have"
            ));
        }
        let types = self.resolved_layer_types();
        if types.len() != n {
            return invalid(format!(
                "layer_types has {} entries for {n} layers",
                types.len()
            ));
        }
        let overrides = self.overrides(&types)?;
        let (roles, store_layers) = self.roles(&types)?;
        let mut layers = Vec::with_capacity(n);
        for (i, ((&layer_type, o), &role)) in types.iter().zip(&overrides).zip(&roles).enumerate() {
            let head_dim = o.head_dim.unwrap_or(self.head_dim);
            let kv_heads = o.kv_heads.unwrap_or(self.num_key_value_heads);
            if head_dim == 0 || head_dim % 2 != 0 {
                return invalid(format!("layer {i}: head_dim {head_dim} is not even"));
            }
            if kv_heads == 0 || !self.num_attention_heads.is_multiple_of(kv_heads) {
                return invalid(format!(
                    "layer {i}: {} query heads do not group over {kv_heads} KV heads",
                    self.num_attention_heads
                ));
            }
            let rope = match self
                .rope_parameters
                .as_ref()
                .map(|m| m.get(&layer_type).cloned())
            {
                Some(Some(p)) => p,
                Some(None) => {
                    return invalid(format!(
                        "rope_parameters has no entry for {}",
                        layer_type.hf_name()
                    ))
                }
                None => default_rope(layer_type),
            };
            let wide = self.use_double_wide_mlp && role == KvRole::Reuse;
            let base = o.intermediate.unwrap_or(self.intermediate_size);
            layers.push(LayerSpec {
                layer_type,
                head_dim,
                kv_heads,
                intermediate: if wide { 2 * base } else { base },
                role,
                k_eq_v: self.attention_k_eq_v && layer_type == LayerType::Full,
                inv_freq: rope_inv_freq(&rope, head_dim)?,
            });
        }
        Ok(ResolvedText {
            config: self.clone(),
            layers,
            store_layers,
            cache_layers: n - self.num_kv_shared_layers.min(n),
            moe,
        })
    }
}

impl Gemma4AssistantConfig {
    /// Check the assistant's own constraints (HF's `validate_architecture`) and resolve its
    /// decoder (every layer KV-shared).
    pub fn resolve(&self) -> Resolved<ResolvedText> {
        let mut text = self.text_config.clone();
        if text.num_kv_shared_layers == 0 {
            text.num_kv_shared_layers = text.num_hidden_layers;
        }
        if text.hidden_size_per_layer_input != 0 {
            return invalid("assistant hidden_size_per_layer_input must be 0");
        }
        if text.use_double_wide_mlp {
            return invalid("assistant use_double_wide_mlp must be false");
        }
        if text.num_kv_shared_layers != text.num_hidden_layers {
            return invalid("every assistant layer must be KV-shared");
        }
        if self.use_ordered_embeddings {
            let fits = self.num_centroids > 0
                && text.vocab_size.is_multiple_of(self.num_centroids)
                && self.centroid_intermediate_top_k > 0
                && self.centroid_intermediate_top_k <= self.num_centroids;
            if !fits {
                return invalid(format!(
                    "{} centroids (top {}) do not partition a vocabulary of {}",
                    self.num_centroids, self.centroid_intermediate_top_k, text.vocab_size
                ));
            }
        }
        if self.backbone_hidden_size == 0 {
            return invalid("backbone_hidden_size is 0");
        }
        text.resolve()
    }
}

/// The text model's configuration inside a target `config.json`: the whole file for
/// `model_type: "gemma4_text"` (HF `Gemma4ForCausalLM`), the nested `text_config` for the
/// multimodal `model_type: "gemma4"` (HF `Gemma4ForConditionalGeneration`; its vision and audio
/// configs are not needed for text). `model_type` is the file's top-level type.
pub fn text_config_of(model_type: &str, value: serde_json::Value) -> Resolved<serde_json::Value> {
    if model_type != "gemma4" {
        return Ok(value);
    }
    match value.get("text_config") {
        Some(text) if text.is_object() => match text.get("model_type").and_then(|m| m.as_str()) {
            None | Some("gemma4_text") => Ok(text.clone()),
            Some(other) => unsupported(format!(
                "a gemma4 text_config of model_type {other:?} (expected \"gemma4_text\")"
            )),
        },
        Some(_) => invalid("text_config of a multimodal gemma4 config is not an object"),
        None => invalid(
            "a multimodal gemma4 config (Gemma4ForConditionalGeneration) without text_config: \
             the text model's configuration is missing",
        ),
    }
}
