//! Shared by the GGUF tests: where the real model and the fixtures live, and a minimal GGUF v3
//! writer for hand-built (and deliberately broken) files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The real model's file name (tools/real_models/fetch.py).
pub const REAL_MODEL_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

/// The real model, when fetched: `$MTP_REAL_MODELS_DIR/…`, else `~/.cache/mtp-rs/models/…`
/// (the fetch script's cache). `None` (with a "skipped" line on stderr) when absent.
pub fn real_model(test: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("MTP_REAL_MODELS_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME") {
            Some(home) => Path::new(&home).join(".cache/mtp-rs/models"),
            None => PathBuf::from("/nonexistent"),
        },
    };
    let path = dir.join(REAL_MODEL_FILE);
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "{test}: skipped: {REAL_MODEL_FILE} not fetched (run tools/real_models/fetch.py; \
             looked in {})",
            dir.display()
        );
        None
    }
}

/// The workspace's `tests/fixtures/<rel>`.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// The llama.cpp reference of the real model (committed).
pub fn llama_cpp_reference() -> serde_json::Value {
    reference("gemma3_270m_llama_cpp.json", "record_llama_cpp.py")
}

/// A recorded JSON array of token ids.
pub fn json_ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// HF transformers' reference of the real model, its GGUF dequantized to f32 (committed).
pub fn hf_transformers_reference() -> serde_json::Value {
    reference("gemma3_270m_hf_transformers.json", "record_hf_gguf.py")
}

fn reference(file: &str, recorder: &str) -> serde_json::Value {
    let path = fixture(&format!("real_models/{file}"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (tools/real_models/{recorder})", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A metadata value of the writer.
#[derive(Debug, Clone)]
pub enum Meta {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    Strs(Vec<String>),
    F32s(Vec<f32>),
    I32s(Vec<i32>),
    Bools(Vec<bool>),
}

/// One tensor of the writer: name, ggml type id, GGUF dims (fastest first) and its bytes.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub name: String,
    pub ggml_type: u32,
    pub dims: Vec<u64>,
    pub data: Vec<u8>,
}

impl Tensor {
    /// An F32 tensor of our shape `[rows, cols]` (written as GGUF dims `[cols, rows]`).
    pub fn f32(name: &str, shape: &[usize], values: &[f32]) -> Self {
        assert_eq!(shape.iter().product::<usize>(), values.len());
        Self {
            name: name.into(),
            ggml_type: 0,
            dims: shape.iter().rev().map(|&d| d as u64).collect(),
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn put_meta(out: &mut Vec<u8>, value: &Meta) {
    let array = |out: &mut Vec<u8>, ty: u32, n: usize| {
        out.extend(9u32.to_le_bytes());
        out.extend(ty.to_le_bytes());
        out.extend((n as u64).to_le_bytes());
    };
    match value {
        Meta::U32(v) => {
            out.extend(4u32.to_le_bytes());
            out.extend(v.to_le_bytes());
        }
        Meta::F32(v) => {
            out.extend(6u32.to_le_bytes());
            out.extend(v.to_le_bytes());
        }
        Meta::Bool(v) => {
            out.extend(7u32.to_le_bytes());
            out.push(u8::from(*v));
        }
        Meta::Str(s) => {
            out.extend(8u32.to_le_bytes());
            put_str(out, s);
        }
        Meta::Strs(v) => {
            array(out, 8, v.len());
            for s in v {
                put_str(out, s);
            }
        }
        Meta::F32s(v) => {
            array(out, 6, v.len());
            for x in v {
                out.extend(x.to_le_bytes());
            }
        }
        Meta::I32s(v) => {
            array(out, 5, v.len());
            for x in v {
                out.extend(x.to_le_bytes());
            }
        }
        Meta::Bools(v) => {
            array(out, 7, v.len());
            out.extend(v.iter().map(|&b| u8::from(b)));
        }
    }
}

/// A GGUF file of `version` with `metadata` and `tensors` (data aligned to 32 bytes).
pub fn gguf_bytes(version: u32, metadata: &[(&str, Meta)], tensors: &[Tensor]) -> Vec<u8> {
    const ALIGN: usize = 32;
    let mut out = Vec::new();
    out.extend(b"GGUF");
    out.extend(version.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_str(&mut out, key);
        put_meta(&mut out, value);
    }
    let mut offset = 0usize;
    for t in tensors {
        put_str(&mut out, &t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.ggml_type.to_le_bytes());
        out.extend((offset as u64).to_le_bytes());
        offset += t.data.len().div_ceil(ALIGN) * ALIGN;
    }
    out.resize(out.len().div_ceil(ALIGN) * ALIGN, 0);
    for t in tensors {
        out.extend(&t.data);
        out.resize(out.len().div_ceil(ALIGN) * ALIGN, 0);
    }
    out
}

/// Write `bytes` to `name` in `dir` and return the path.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}
