//! Every `LoadError` triggered by a real malformed model directory (malformed copies of a fixture
//! written into a temporary directory), plus the happy paths that need rewriting: sharded
//! checkpoints and half-precision weights.

mod common;

use std::path::{Path, PathBuf};

use common::{cases, ids_array, max_rel_err, Reference, B};
use mtp_core::model::TargetModel;
use mtp_core::{Backend, DType};
use runner::loading::{load_assistant, load_target, LoadError, LoadOptions};
use safetensors::tensor::{Dtype, TensorView};

/// One stored tensor: name, dtype, shape, raw bytes.
type Stored = (String, Dtype, Vec<usize>, Vec<u8>);

fn read_tensors(path: &Path) -> Vec<Stored> {
    let bytes = std::fs::read(path).expect("weights");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid fixture");
    let mut out: Vec<Stored> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn write_tensors(path: &Path, tensors: &[Stored]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).expect("view")))
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// A scratch copy of the first fixture case (`target/`, `assistant/`), or `None` (skip).
struct Scratch {
    _tmp: tempfile::TempDir,
    case: PathBuf,
    target: PathBuf,
    assistant: PathBuf,
}

fn scratch() -> Option<Scratch> {
    let case = cases()?.into_iter().next()?;
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target");
    let assistant = tmp.path().join("assistant");
    copy_dir(&case.join("target"), &target);
    copy_dir(&case.join("assistant"), &assistant);
    Some(Scratch {
        _tmp: tmp,
        case,
        target,
        assistant,
    })
}

fn load_err(dir: &Path) -> LoadError {
    match load_target(&B::default(), dir, &LoadOptions::default()) {
        Ok(_) => panic!("{} loaded although malformed", dir.display()),
        Err(e) => e,
    }
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
}

fn edit_weights(dir: &Path, edit: impl FnOnce(&mut Vec<Stored>)) {
    let path = dir.join("model.safetensors");
    let mut tensors = read_tensors(&path);
    edit(&mut tensors);
    write_tensors(&path, &tensors);
}

#[test]
fn missing_weight_file() {
    let Some(s) = scratch() else { return };
    std::fs::remove_file(s.target.join("model.safetensors")).unwrap();
    let e = load_err(&s.target);
    assert!(matches!(e, LoadError::MissingFile { .. }), "{e}");
}

#[test]
fn bad_json_names_the_file() {
    let Some(s) = scratch() else { return };
    std::fs::write(s.target.join("config.json"), "{ \"model_type\": ").unwrap();
    let e = load_err(&s.target);
    match &e {
        LoadError::BadJson { path, .. } => assert!(path.ends_with("config.json"), "{e}"),
        other => panic!("expected BadJson, got {other}"),
    }
    // Valid JSON of the wrong form is bad JSON too.
    edit_config(&s.assistant, |v| v["text_config"] = serde_json::json!(3));
    let target = load_target(
        &B::default(),
        &s.case.join("target"),
        &LoadOptions::default(),
    )
    .unwrap();
    let e = load_assistant(
        &B::default(),
        &s.assistant,
        &target,
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, LoadError::BadJson { .. }), "{e}");
}

#[test]
fn unknown_model_type() {
    let Some(s) = scratch() else { return };
    edit_config(&s.target, |v| v["model_type"] = "llama".into());
    let e = load_err(&s.target);
    match &e {
        LoadError::UnknownModelType { found, .. } => assert_eq!(found, "llama"),
        other => panic!("expected UnknownModelType, got {other}"),
    }
    // A target config is not an assistant config.
    let target = load_target(
        &B::default(),
        &s.case.join("target"),
        &LoadOptions::default(),
    )
    .unwrap();
    let e = load_assistant(
        &B::default(),
        &s.case.join("target"),
        &target,
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, LoadError::UnknownModelType { .. }), "{e}");
}

#[test]
fn missing_tensor_names_it_and_its_shape() {
    let Some(s) = scratch() else { return };
    edit_weights(&s.target, |t| t.retain(|x| x.0 != "model.norm.weight"));
    let e = load_err(&s.target);
    match &e {
        LoadError::MissingTensor { name, expected } => {
            assert_eq!(name, "model.norm.weight");
            assert_eq!(expected.len(), 1);
        }
        other => panic!("expected MissingTensor, got {other}"),
    }
}

#[test]
fn unexpected_tensor() {
    let Some(s) = scratch() else { return };
    edit_weights(&s.target, |t| {
        t.push(("model.extra.weight".into(), Dtype::F32, vec![1], vec![0; 4]))
    });
    let e = load_err(&s.target);
    match &e {
        LoadError::UnexpectedTensor { name, .. } => assert_eq!(name, "model.extra.weight"),
        other => panic!("expected UnexpectedTensor, got {other}"),
    }
}

#[test]
fn wrong_shape() {
    let Some(s) = scratch() else { return };
    edit_weights(&s.target, |t| {
        for x in t.iter_mut().filter(|x| x.0 == "model.norm.weight") {
            x.2.push(1);
        }
    });
    let e = load_err(&s.target);
    match &e {
        LoadError::ShapeMismatch {
            name,
            expected,
            found,
        } => {
            assert_eq!(name, "model.norm.weight");
            assert_eq!(found.len(), expected.len() + 1);
        }
        other => panic!("expected ShapeMismatch, got {other}"),
    }
}

#[test]
fn corrupt_safetensors_header() {
    let Some(s) = scratch() else { return };
    let path = s.target.join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    // Garble the JSON header right after its 8-byte length.
    for b in bytes.iter_mut().skip(8).take(16) {
        *b = b'#';
    }
    std::fs::write(&path, &bytes).unwrap();
    let e = load_err(&s.target);
    assert!(matches!(e, LoadError::CorruptWeights { .. }), "{e}");
    // A header length beyond the file.
    std::fs::write(&path, u64::MAX.to_le_bytes()).unwrap();
    let e = load_err(&s.target);
    assert!(matches!(e, LoadError::CorruptWeights { .. }), "{e}");
}

#[test]
fn unsupported_dtype() {
    let Some(s) = scratch() else { return };
    edit_weights(&s.target, |t| {
        for x in t.iter_mut().filter(|x| x.0 == "model.norm.weight") {
            x.1 = Dtype::F64;
            x.3 = x
                .3
                .chunks_exact(4)
                .flat_map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
                .collect();
        }
    });
    let e = load_err(&s.target);
    match &e {
        LoadError::UnsupportedDtype { name, .. } => assert_eq!(name, "model.norm.weight"),
        other => panic!("expected UnsupportedDtype, got {other}"),
    }
}

#[test]
fn unsupported_features_and_invalid_configs() {
    let Some(s) = scratch() else { return };
    edit_config(&s.target, |v| v["attention_bias"] = true.into());
    let e = load_err(&s.target);
    match &e {
        LoadError::UnsupportedFeature { feature, .. } => {
            assert!(feature.contains("attention_bias"), "{e}")
        }
        other => panic!("expected UnsupportedFeature, got {other}"),
    }
    edit_config(&s.target, |v| {
        v["attention_bias"] = false.into();
        v["num_key_value_heads"] = 3.into();
    });
    let e = load_err(&s.target);
    assert!(matches!(e, LoadError::InvalidConfig { .. }), "{e}");
}

#[test]
fn mismatched_drafter() {
    let Some(s) = scratch() else { return };
    let b = B::default();
    let options = LoadOptions::default();
    let target = load_target(&b, &s.target, &options).unwrap();
    edit_config(&s.assistant, |v| {
        let h = v["backbone_hidden_size"].as_u64().unwrap();
        v["backbone_hidden_size"] = (h + 2).into();
    });
    let e = load_assistant(&b, &s.assistant, &target, &options).unwrap_err();
    match &e {
        LoadError::DrafterMismatch { reason } => assert!(reason.contains("backbone"), "{e}"),
        other => panic!("expected DrafterMismatch, got {other}"),
    }
    edit_config(&s.assistant, |v| {
        let h = v["backbone_hidden_size"].as_u64().unwrap();
        v["backbone_hidden_size"] = (h - 2).into();
        let vocab = v["text_config"]["vocab_size"].as_u64().unwrap();
        v["text_config"]["vocab_size"] = (vocab * 2).into();
    });
    let e = load_assistant(&b, &s.assistant, &target, &options).unwrap_err();
    assert!(matches!(e, LoadError::DrafterMismatch { .. }), "{e}");
}

#[test]
fn sharded_checkpoint_loads_like_a_single_file() {
    let Some(s) = scratch() else { return };
    let single = s.target.join("model.safetensors");
    let tensors = read_tensors(&single);
    std::fs::remove_file(&single).unwrap();
    let (a, rest) = tensors.split_at(tensors.len() / 2);
    write_tensors(&s.target.join("model-00001-of-00002.safetensors"), a);
    write_tensors(&s.target.join("model-00002-of-00002.safetensors"), rest);
    let mut map = serde_json::Map::new();
    for (part, file) in [
        (a, "model-00001-of-00002.safetensors"),
        (rest, "model-00002-of-00002.safetensors"),
    ] {
        for t in part {
            map.insert(t.0.clone(), file.into());
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(
        s.target.join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let b = B::default();
    let target = load_target(&b, &s.target, &LoadOptions::default()).expect("sharded loads");
    let mut reference = Reference::open(&s.case);
    let prompt = reference.ids("prompt_ids");
    let (want, shape) = reference.floats("target_logits");
    let mut caches = target.new_caches(&b).unwrap();
    let out = target
        .forward(&b, &ids_array(&b, &prompt), 0, &mut caches)
        .unwrap();
    let logits = b
        .to_vec_f32(&target.unembed(&b, &out.hidden).unwrap())
        .unwrap();
    assert!(max_rel_err(&logits, &want, shape[1]) < common::TOLERANCE);

    // A broken index is bad JSON.
    std::fs::write(
        s.target.join("model.safetensors.index.json"),
        "{\"weight_map\": 1}",
    )
    .unwrap();
    let e = load_err(&s.target);
    assert!(matches!(e, LoadError::BadJson { .. }), "{e}");
}

#[test]
fn half_precision_weights_and_compute_dtypes() {
    let Some(s) = scratch() else { return };
    let b = B::default();
    let mut reference = Reference::open(&s.case);
    let prompt = reference.ids("prompt_ids");
    let (want, shape) = reference.floats("target_logits");
    for (dtype, tolerance) in [(Dtype::F16, 2e-2), (Dtype::BF16, 1e-1)] {
        let dir = s.target.with_file_name(format!("target-{dtype:?}"));
        copy_dir(&s.target, &dir);
        edit_weights(&dir, |t| {
            for x in t.iter_mut().filter(|x| x.1 == Dtype::F32) {
                let values =
                    x.3.chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                x.3 = match dtype {
                    Dtype::F16 => values
                        .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
                        .collect(),
                    _ => values
                        .flat_map(|v| half::bf16::from_f32(v).to_le_bytes())
                        .collect(),
                };
                x.1 = dtype;
            }
        });
        for compute in [DType::F32, DType::BF16] {
            let options = LoadOptions::with_dtype(compute);
            let target = load_target(&b, &dir, &options).expect("half weights load");
            let mut caches = target.new_caches(&b).unwrap();
            let out = target
                .forward(&b, &ids_array(&b, &prompt), 0, &mut caches)
                .unwrap();
            let logits = b
                .to_vec_f32(&target.unembed(&b, &out.hidden).unwrap())
                .unwrap();
            let err = max_rel_err(&logits, &want, shape[1]);
            let allowed = if compute == DType::F32 {
                tolerance
            } else {
                2e-1
            };
            eprintln!("{dtype:?} weights, {compute} compute: logits rel err {err:.2e}");
            assert!(err < allowed, "{dtype:?}/{compute}: {err}");
        }
    }
    let e = load_target(&b, &s.target, &LoadOptions::with_dtype(DType::U32)).unwrap_err();
    assert!(matches!(e, LoadError::UnsupportedFeature { .. }), "{e}");
}

/// A scratch copy of the fixture case `name` (`target/`, `assistant/`).
fn scratch_of(name: &str) -> Scratch {
    let case = common::fixture_root().join(name);
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target");
    let assistant = tmp.path().join("assistant");
    copy_dir(&case.join("target"), &target);
    copy_dir(&case.join("assistant"), &assistant);
    Scratch {
        _tmp: tmp,
        case,
        target,
        assistant,
    }
}

#[test]
fn multimodal_config_without_text_config() {
    let s = scratch_of("mm_e2b");
    edit_config(&s.target, |v| {
        v.as_object_mut().unwrap().remove("text_config");
    });
    match load_err(&s.target) {
        LoadError::InvalidConfig { reason, .. } => {
            assert!(reason.contains("text_config"), "{reason}")
        }
        other => panic!("expected InvalidConfig, got {other}"),
    }
    edit_config(&s.target, |v| v["text_config"] = "gemma".into());
    assert!(matches!(
        load_err(&s.target),
        LoadError::InvalidConfig { .. }
    ));
    edit_config(&s.target, |v| {
        v["text_config"] = serde_json::json!({ "model_type": "gemma3_text" })
    });
    assert!(matches!(
        load_err(&s.target),
        LoadError::UnsupportedFeature { .. }
    ));
}

#[test]
fn moe_config_and_expert_shapes_must_agree() {
    let s = scratch_of("mm_26b_moe");
    let original = std::fs::read_to_string(s.target.join("config.json")).unwrap();
    for (key, value, says) in [
        ("num_experts", serde_json::Value::Null, "num_experts"),
        ("top_k_experts", 0.into(), "top_k_experts"),
        ("top_k_experts", 9.into(), "exceeds"),
    ] {
        std::fs::write(s.target.join("config.json"), &original).unwrap();
        edit_config(&s.target, |v| v["text_config"][key] = value.clone());
        match load_err(&s.target) {
            LoadError::InvalidConfig { reason, .. } => assert!(reason.contains(says), "{reason}"),
            other => panic!("{key}: expected InvalidConfig, got {other}"),
        }
    }
    // The config's expert width disagrees with the files' expert tensors.
    std::fs::write(s.target.join("config.json"), &original).unwrap();
    edit_config(&s.target, |v| {
        v["text_config"]["moe_intermediate_size"] = 24.into()
    });
    match load_err(&s.target) {
        LoadError::ShapeMismatch {
            name,
            expected,
            found,
        } => {
            assert!(name.ends_with("experts.gate_up_proj"), "{name}");
            assert_eq!((expected[1], found[1]), (48, 32));
        }
        other => panic!("expected ShapeMismatch, got {other}"),
    }
    // One expert tensor with fewer experts than the config.
    std::fs::write(s.target.join("config.json"), &original).unwrap();
    edit_weights(&s.target, |t| {
        for x in t
            .iter_mut()
            .filter(|x| x.0.ends_with("layers.1.experts.down_proj"))
        {
            let per_expert = x.3.len() / x.2[0];
            x.2[0] -= 1;
            x.3.truncate(per_expert * x.2[0]);
        }
    });
    match load_err(&s.target) {
        LoadError::ShapeMismatch { name, .. } => {
            assert!(name.ends_with("layers.1.experts.down_proj"), "{name}")
        }
        other => panic!("expected ShapeMismatch, got {other}"),
    }
}

#[test]
fn missing_or_inconsistent_shard() {
    let s = scratch_of("mm_e2b_bf16_sharded");
    let b = B::default();
    load_target(&b, &s.target, &LoadOptions::default()).expect("the copy loads");
    let shard = s.target.join("model-00002-of-00003.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::remove_file(&shard).unwrap();
    match load_err(&s.target) {
        LoadError::MissingFile { path, reason } => {
            assert_eq!(path, shard);
            assert!(reason.contains("index"), "{reason}");
        }
        other => panic!("expected MissingFile, got {other}"),
    }
    // The index names a shard that does not hold the tensor.
    std::fs::write(&shard, bytes).unwrap();
    let index_path = s.target.join("model.safetensors.index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    let map = index["weight_map"].as_object_mut().unwrap();
    let (name, file) = map
        .iter()
        .find(|(_, f)| f.as_str() == Some("model-00001-of-00003.safetensors"))
        .map(|(n, f)| (n.clone(), f.clone()))
        .unwrap();
    assert_eq!(file, "model-00001-of-00003.safetensors");
    map.insert(name.clone(), "model-00003-of-00003.safetensors".into());
    std::fs::write(&index_path, index.to_string()).unwrap();
    match load_err(&s.target) {
        LoadError::CorruptWeights { reason, .. } => assert!(reason.contains(&name), "{reason}"),
        other => panic!("expected CorruptWeights, got {other}"),
    }
    // A shard name that leaves the directory.
    map_insert_shard(&index_path, &name, "../model-00001-of-00003.safetensors");
    assert!(matches!(load_err(&s.target), LoadError::BadJson { .. }));
}

fn map_insert_shard(index_path: &Path, tensor: &str, file: &str) {
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(index_path).unwrap()).unwrap();
    index["weight_map"][tensor] = file.into();
    std::fs::write(index_path, index.to_string()).unwrap();
}
