//! Full-width Gemma 4 checkpoints regenerated from the weight rule of
//! `tools/gemma4_fixtures/make_real_size.py`, checked byte for byte against the SHA-256 of every
//! tensor HF transformers' `save_pretrained` wrote (the case's committed `manifest.json`).
//!
//! The rule: tensor `name`, element `i` (row-major),
//! `z = splitmix64(fnv1a64(name) + (i + 1) * 0x9E3779B97F4A7C15)`;
//! matrices hold `(2 * (z >> 56) - 255) * 2^-13`, embedding tables the same times 2^-15, norm
//! weights and layer scalars
//! `1 + ((z >> 60) - 8) * 2^-5`, `token_ordering` the indices sorted by `z`. Every value is exact
//! in bf16, so the bf16 files hold the numbers HF's f32 reference was computed from.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde::Deserialize;
use sha2::{Digest, Sha256};

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// One tensor of a case's manifest.
#[derive(Debug, Deserialize)]
pub struct ManifestRow {
    /// `target/model.safetensors` or `assistant/model.safetensors`.
    pub file: String,
    pub name: String,
    /// `BF16` or `I64`.
    pub dtype: String,
    pub shape: Vec<usize>,
    /// `weight`, `embedding`, `scale` or `permutation`.
    pub rule: String,
    pub sha256: String,
}

fn fnv1a64(text: &str) -> u64 {
    text.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

fn splitmix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add((i + 1).wrapping_mul(GAMMA));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The bytes of one tensor by the rule, in its stored dtype.
fn rule_bytes(row: &ManifestRow) -> Vec<u8> {
    let n: usize = row.shape.iter().product();
    let seed = fnv1a64(&row.name);
    match (row.rule.as_str(), row.dtype.as_str()) {
        ("permutation", "I64") => {
            let mut order: Vec<u64> = (0..n as u64).collect();
            order.sort_by_key(|&i| splitmix(seed, i));
            order
                .iter()
                .flat_map(|&i| (i as i64).to_le_bytes())
                .collect()
        }
        (rule @ ("weight" | "embedding" | "scale"), "BF16") => {
            let mut out = Vec::with_capacity(n * 2);
            for i in 0..n as u64 {
                let z = splitmix(seed, i);
                let level = (2 * (z >> 56) as i32 - 255) as f32;
                let value = match rule {
                    "weight" => level * (1.0 / 8192.0),
                    "embedding" => level * (1.0 / 32768.0),
                    _ => 1.0 + ((z >> 60) as i32 - 8) as f32 * (1.0 / 32.0),
                };
                // Exact: every rule value has at most 8 significant bits.
                out.extend_from_slice(&((value.to_bits() >> 16) as u16).to_le_bytes());
            }
            out
        }
        (rule, dtype) => panic!("{}: no rule {rule} for dtype {dtype}", row.name),
    }
}

/// The committed real-size cases' root.
pub fn case_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4_real_size")
}

/// The manifest of case directory `case`.
pub fn manifest(case: &Path) -> Vec<ManifestRow> {
    let text = std::fs::read_to_string(case.join("manifest.json"))
        .unwrap_or_else(|e| panic!("{}: {e}", case.display()));
    serde_json::from_str(&text).expect("manifest.json")
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The checkpoint of case `case` (a directory with `target/` and `assistant/`, HF's configs beside
/// regenerated weights), written once under the test target directory and reused while the
/// manifest is unchanged. Panics naming the tensor whose bytes differ from HF's.
pub fn checkpoint(case: &Path) -> PathBuf {
    static WRITING: Mutex<()> = Mutex::new(());
    let _one_writer = WRITING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let name = case.file_name().expect("case name").to_string_lossy();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gemma4_real_size")
        .join(name.as_ref());
    let manifest_text = std::fs::read(case.join("manifest.json")).expect("manifest.json");
    let stamp = out.join("manifest.sha256");
    let want_stamp = sha256_hex(&manifest_text);
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == want_stamp) {
        return out;
    }
    let rows = manifest(case);
    let started = std::time::Instant::now();
    for role in ["target", "assistant"] {
        let dir = out.join(role);
        std::fs::create_dir_all(&dir).expect("checkpoint dir");
        std::fs::copy(case.join(role).join("config.json"), dir.join("config.json"))
            .expect("config.json");
        let file = format!("{role}/model.safetensors");
        let mine: Vec<&ManifestRow> = rows.iter().filter(|r| r.file == file).collect();
        assert!(!mine.is_empty(), "{file}: no tensors in the manifest");
        let data: Vec<Vec<u8>> = mine.iter().map(|r| rule_bytes(r)).collect();
        for (row, bytes) in mine.iter().zip(&data) {
            assert_eq!(
                sha256_hex(bytes),
                row.sha256,
                "{file}: {} is not the tensor HF saved",
                row.name
            );
        }
        let views = mine.iter().zip(&data).map(|(row, bytes)| {
            let dtype = if row.dtype == "I64" {
                Dtype::I64
            } else {
                Dtype::BF16
            };
            let view = TensorView::new(dtype, row.shape.clone(), bytes).expect("tensor view");
            (row.name.clone(), view)
        });
        let metadata = [("format".to_string(), "pt".to_string())].into();
        safetensors::serialize_to_file(views, Some(metadata), &dir.join("model.safetensors"))
            .expect("write the checkpoint");
    }
    std::fs::write(&stamp, want_stamp).expect("stamp");
    eprintln!(
        "{name}: regenerated {} tensors in {:.1} s into {}",
        rows.len(),
        started.elapsed().as_secs_f64(),
        out.display()
    );
    out
}
