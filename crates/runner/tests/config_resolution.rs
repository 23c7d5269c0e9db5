//! Config parsing and resolution without fixtures: HF defaults, per-layer overrides, KV-sharing
//! roles, RoPE tables and the checks that reject configurations.

use runner::models::config::{
    rope_inv_freq, ConfigProblem, Gemma4AssistantConfig, Gemma4TextConfig, KvRole, LayerType,
    RopeParameters,
};

fn text(json: serde_json::Value) -> Gemma4TextConfig {
    serde_json::from_value(json).expect("parses")
}

fn small() -> serde_json::Value {
    serde_json::json!({
        "model_type": "gemma4_text",
        "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "hidden_size_per_layer_input": 0, "sliding_window": 4
    })
}

#[test]
fn hf_defaults_layer_pattern_and_global_head_dim() {
    let mut json = small();
    json["num_hidden_layers"] = 7.into();
    json["global_head_dim"] = 16.into();
    json["attention_k_eq_v"] = true.into();
    json["num_global_key_value_heads"] = 1.into();
    let r = text(json).resolve().unwrap();
    let types: Vec<_> = r.layers.iter().map(|l| l.layer_type).collect();
    // 5 sliding : 1 full, and the last layer forced to full.
    use LayerType::{Full as F, Sliding as S};
    assert_eq!(types, vec![S, S, S, S, S, F, F]);
    for l in &r.layers {
        match l.layer_type {
            F => {
                assert_eq!((l.head_dim, l.kv_heads), (16, 1));
                assert!(l.k_eq_v);
                // Proportional RoPE, factor 0.25: 2 of 8 pairs rotate.
                assert_eq!(l.inv_freq.len(), 8);
                assert!(l.inv_freq[..2].iter().all(|&f| f > 0.0));
                assert!(l.inv_freq[2..].iter().all(|&f| f == 0.0));
            }
            S => {
                assert_eq!((l.head_dim, l.kv_heads), (8, 2));
                assert!(!l.k_eq_v);
                assert_eq!(l.inv_freq.len(), 4);
                assert!((l.inv_freq[0] - 1.0).abs() < 1e-7);
            }
        }
    }
    assert_eq!(r.cache_layers, 7);
    assert_eq!(r.store_layers.get(&S), Some(&4));
    assert_eq!(r.store_layers.get(&F), Some(&6));
}

#[test]
fn per_layer_config_overrides_and_kv_sharing_roles() {
    let mut json = small();
    json["layer_types"] = serde_json::json!([
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "full_attention",
        "sliding_attention",
        "full_attention"
    ]);
    json["per_layer_config"] =
        serde_json::json!({"1": {"head_dim": 16}, "3": {"head_dim": 16}, "5": {"head_dim": 16}});
    json["num_kv_shared_layers"] = 2.into();
    json["use_double_wide_mlp"] = true.into();
    let r = text(json).resolve().unwrap();
    let roles: Vec<_> = r.layers.iter().map(|l| l.role).collect();
    assert_eq!(
        roles,
        vec![
            KvRole::Own,
            KvRole::Own,
            KvRole::Store,
            KvRole::Store,
            KvRole::Reuse,
            KvRole::Reuse
        ]
    );
    assert_eq!(r.cache_layers, 4);
    assert_eq!(r.layers[5].head_dim, 16);
    assert_eq!(r.layers[4].head_dim, 8);
    assert_eq!(
        r.layers[4].intermediate, 96,
        "double-wide MLP on shared layers"
    );
    assert_eq!(r.layers[3].intermediate, 48);
}

#[test]
fn proportional_rope_matches_hf_formula() {
    let p = RopeParameters {
        rope_type: "proportional".into(),
        rope_theta: 1_000_000.0,
        partial_rotary_factor: Some(0.25),
        factor: Some(2.0),
    };
    let f = rope_inv_freq(&p, 32).unwrap();
    assert_eq!(f.len(), 16);
    for (i, &v) in f.iter().enumerate() {
        let want = if i < 4 {
            1.0 / 1e6f32.powf(2.0 * i as f32 / 32.0) / 2.0
        } else {
            0.0
        };
        assert!(
            (v - want).abs() <= want.abs() * 1e-6,
            "pair {i}: {v} vs {want}"
        );
    }
    let bad = RopeParameters {
        rope_type: "yarn".into(),
        ..p
    };
    assert!(matches!(
        rope_inv_freq(&bad, 32),
        Err(ConfigProblem::Unsupported(_))
    ));
}

#[test]
fn rejected_configurations() {
    // A MoE block needs its three sizes, consistent.
    let mut moe = small();
    moe["enable_moe_block"] = true.into();
    assert!(matches!(
        text(moe.clone()).resolve(),
        Err(ConfigProblem::Invalid(_))
    ));
    moe["num_experts"] = 4.into();
    moe["top_k_experts"] = 2.into();
    moe["moe_intermediate_size"] = 8.into();
    let spec = text(moe.clone()).resolve().expect("a MoE config").moe;
    assert_eq!(
        spec.map(|m| (m.experts, m.top_k, m.intermediate)),
        Some((4, 2, 8))
    );
    moe["top_k_experts"] = 5.into();
    assert!(matches!(
        text(moe).resolve(),
        Err(ConfigProblem::Invalid(_))
    ));
    // An absurd layer count is refused before anything is sized from it.
    let mut layers = small();
    layers["num_hidden_layers"] = 3_741_319_168u64.into();
    assert!(matches!(
        text(layers).resolve(),
        Err(ConfigProblem::Invalid(m)) if m.contains("layers")
    ));
    let mut heads = small();
    heads["num_key_value_heads"] = 3.into();
    assert!(matches!(
        text(heads).resolve(),
        Err(ConfigProblem::Invalid(_))
    ));
    let mut types = small();
    types["layer_types"] = serde_json::json!(["full_attention"]);
    assert!(matches!(
        text(types).resolve(),
        Err(ConfigProblem::Invalid(_))
    ));
    let mut act = small();
    act["hidden_activation"] = "silu".into();
    assert!(matches!(
        text(act).resolve(),
        Err(ConfigProblem::Unsupported(_))
    ));
    let mut shared = small();
    shared["layer_types"] = serde_json::json!([
        "sliding_attention",
        "sliding_attention",
        "sliding_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention"
    ]);
    shared["num_kv_shared_layers"] = 1.into();
    // The shared full layer has no earlier full layer to share from.
    assert!(matches!(
        text(shared).resolve(),
        Err(ConfigProblem::Invalid(_))
    ));
}

#[test]
fn assistant_defaults_to_all_layers_shared_and_checks_centroids() {
    let mut inner = small();
    inner["num_hidden_layers"] = 2.into();
    inner["layer_types"] = serde_json::json!(["sliding_attention", "full_attention"]);
    let json = serde_json::json!({
        "model_type": "gemma4_assistant", "text_config": inner,
        "backbone_hidden_size": 32, "use_ordered_embeddings": true,
        "num_centroids": 8, "centroid_intermediate_top_k": 2
    });
    let a: Gemma4AssistantConfig = serde_json::from_value(json.clone()).unwrap();
    let r = a.resolve().unwrap();
    assert!(r.layers.iter().all(|l| l.role == KvRole::Reuse));
    let mut bad = json;
    bad["num_centroids"] = 5.into();
    let a: Gemma4AssistantConfig = serde_json::from_value(bad).unwrap();
    assert!(matches!(a.resolve(), Err(ConfigProblem::Invalid(_))));
}
