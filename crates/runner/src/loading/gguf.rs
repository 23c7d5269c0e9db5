//! GGUF files (llama.cpp's single-file format, versions 2 and 3): metadata, tensor infos and the
//! bytes of each tensor, over a memory map.
//!
//! The header is parsed by candle's maintained reader ([`candle_core::quantized::gguf_file`]);
//! this module adds what a loader needs on top: every tensor's byte range checked against the file
//! and against its neighbours once, at open (a truncated file or a tensor whose bytes do not match
//! its shape and type is an error before any weight is read), typed metadata getters that name the
//! key at fault, and tensors as raw `(ggml type id, shape, bytes)` records borrowed from the map.
//!
//! Shapes are in our order, `[rows, cols]` (GGUF lists dimensions fastest first, `ne0 = cols`):
//! a linear weight of `out` rows and `in` columns is `[out, in]`, as in safetensors.
//!
//! Nothing read from the file is unwrapped: every problem is a [`GgufError`] naming the file and
//! the key or tensor at fault.

use std::collections::{BTreeMap, HashMap};
use std::io::Cursor;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
use candle_core::quantized::GgmlDType;
use memmap2::Mmap;

use mtp_core::DType;

use super::error::{LoadError, LoadResult};
use super::tensors::map_file;

/// What can be wrong with a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The header cannot be parsed: not a GGUF file, a truncated header, a bad value type.
    #[error("{}: not a readable GGUF file (truncated or corrupt header?): {reason}", .path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// The file uses a GGUF version this reader does not load.
    #[error("{}: GGUF version {version} is not supported (versions 2 and 3 are)", .path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version in the header.
        version: u32,
    },
    /// A tensor is stored in a ggml type this reader does not know (an `IQ*` or `TQ*` type, ...).
    #[error(
        "{}: a tensor has a ggml type this reader does not know ({reason}); supported: F32, F16, \
         BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K",
        .path.display()
    )]
    UnknownGgmlType {
        /// The file.
        path: PathBuf,
        /// What the parser said (it names the type id).
        reason: String,
    },
    /// A tensor's bytes reach past the end of the file.
    #[error(
        "{}: truncated file: tensor {name} needs bytes {start}..{end} but the file has {file_len}",
        .path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// First byte of the tensor.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A tensor's shape does not fit its type (a row that is not whole blocks), or its bytes
    /// overlap the next tensor's.
    #[error("{}: tensor {name}: {reason}", .path.display())]
    BadTensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A metadata key the loader needs is absent.
    #[error("{}: missing GGUF metadata key {key}", .path.display())]
    MissingKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// A metadata value has the wrong type or an impossible value.
    #[error("{}: GGUF metadata key {key}: {reason}", .path.display())]
    BadValue {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The file's `general.architecture` is not one these models build.
    #[error(
        "{}: GGUF architecture {found:?} is not supported (supported: {supported:?})",
        .path.display()
    )]
    UnsupportedArchitecture {
        /// The file.
        path: PathBuf,
        /// `general.architecture`.
        found: String,
        /// The architectures that load.
        supported: Vec<&'static str>,
    },
    /// A tensor is quantized, and quantized GGUF weights are not yet turned into model weights.
    #[error(
        "tensor {name} is stored as {type_name} (ggml type {ggml_type}): quantized GGUF tensors \
         are not wired into the models yet; only F32, F16 and BF16 tensors load"
    )]
    QuantizedTensor {
        /// The tensor (GGUF name).
        name: String,
        /// The ggml type id.
        ggml_type: u32,
        /// Its name (`Q4_K`, ...).
        type_name: &'static str,
    },
}

impl From<GgufError> for LoadError {
    fn from(e: GgufError) -> Self {
        LoadError::Gguf(Box::new(e))
    }
}

/// A ggml tensor type: its id in ggml's `ggml_type` enum, its name and block geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    /// The `ggml_type` id stored in the file.
    pub id: u32,
    /// ggml's name for it (`F32`, `Q8_0`, `Q4_K`, ...).
    pub name: &'static str,
    /// Elements per block (1 for the float types).
    pub block_elems: usize,
    /// Bytes per block.
    pub block_bytes: usize,
}

impl GgmlType {
    fn of(dtype: GgmlDType) -> Self {
        let (id, name) = match dtype {
            GgmlDType::F32 => (0, "F32"),
            GgmlDType::F16 => (1, "F16"),
            GgmlDType::Q4_0 => (2, "Q4_0"),
            GgmlDType::Q4_1 => (3, "Q4_1"),
            GgmlDType::Q5_0 => (6, "Q5_0"),
            GgmlDType::Q5_1 => (7, "Q5_1"),
            GgmlDType::Q8_0 => (8, "Q8_0"),
            GgmlDType::Q8_1 => (9, "Q8_1"),
            GgmlDType::Q2K => (10, "Q2_K"),
            GgmlDType::Q3K => (11, "Q3_K"),
            GgmlDType::Q4K => (12, "Q4_K"),
            GgmlDType::Q5K => (13, "Q5_K"),
            GgmlDType::Q6K => (14, "Q6_K"),
            GgmlDType::Q8K => (15, "Q8_K"),
            GgmlDType::BF16 => (30, "BF16"),
        };
        Self {
            id,
            name,
            block_elems: dtype.block_size(),
            block_bytes: dtype.type_size(),
        }
    }

    /// The float dtype of an unquantized type (`F32`, `F16`, `BF16`), else `None`.
    pub fn float_dtype(&self) -> Option<DType> {
        match self.id {
            0 => Some(DType::F32),
            1 => Some(DType::F16),
            30 => Some(DType::BF16),
            _ => None,
        }
    }
}

/// One tensor of a GGUF file, its bytes checked to lie inside the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// Its ggml type.
    pub ggml_type: GgmlType,
    /// Shape in our order (`[rows, cols]` for a matrix; GGUF's dimensions reversed).
    pub shape: Vec<usize>,
    /// Absolute byte offset in the file.
    pub start: usize,
    /// Byte length (`elements / block_elems * block_bytes`).
    pub len: usize,
}

/// A tensor's raw record: type, shape and bytes borrowed from the memory map.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    /// Its ggml type (the quant formats describe the block layout of `bytes`).
    pub ggml_type: GgmlType,
    /// Shape in our order (`[rows, cols]`).
    pub shape: &'a [usize],
    /// The stored bytes, little-endian ggml blocks.
    pub bytes: &'a [u8],
}

/// A memory-mapped GGUF file; see the [module docs](crate::loading::gguf).
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
    version: u32,
    metadata: HashMap<String, Value>,
    tensors: BTreeMap<String, GgufTensorInfo>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// Whether `path` names a GGUF file (by its extension).
pub fn is_gguf_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// candle's message for a ggml type id it does not know starts so (`GgmlDType::from_u32`).
const UNKNOWN_TYPE_MESSAGE: &str = "unknown dtype for tensor";

impl GgufFile {
    /// Map and parse `path`, checking every tensor's byte range.
    pub fn open(path: &Path) -> LoadResult<Self> {
        let map = map_file(path)?;
        Ok(Self::from_map(path, map)?)
    }

    fn from_map(path: &Path, map: Mmap) -> Result<Self, GgufError> {
        let path_buf = path.to_path_buf();
        let content = Content::read(&mut Cursor::new(&map[..])).map_err(|e| {
            let reason = e.to_string();
            if reason.contains(UNKNOWN_TYPE_MESSAGE) {
                GgufError::UnknownGgmlType {
                    path: path_buf.clone(),
                    reason,
                }
            } else {
                GgufError::Malformed {
                    path: path_buf.clone(),
                    reason,
                }
            }
        })?;
        let version = match content.magic {
            VersionedMagic::GgufV1 => {
                return Err(GgufError::UnsupportedVersion {
                    path: path_buf,
                    version: 1,
                })
            }
            VersionedMagic::GgufV2 => 2,
            VersionedMagic::GgufV3 => 3,
        };
        let file_len = map.len() as u64;
        let data_start = content.tensor_data_offset;
        let mut tensors = BTreeMap::new();
        // In file order, so that the first problem reported is the first in the file.
        let mut infos: Vec<_> = content.tensor_infos.iter().collect();
        infos.sort_by_key(|(name, info)| (info.offset, name.as_str()));
        for (name, info) in infos {
            let ggml_type = GgmlType::of(info.ggml_dtype);
            let shape = info.shape.dims().to_vec();
            let bad = |reason: String| GgufError::BadTensor {
                path: path_buf.clone(),
                name: name.clone(),
                reason,
            };
            let cols = shape.last().copied().unwrap_or(1);
            if cols % ggml_type.block_elems != 0 {
                return Err(bad(format!(
                    "rows of {cols} elements are not whole {} blocks of {} (shape {shape:?})",
                    ggml_type.name, ggml_type.block_elems
                )));
            }
            let elems = shape
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
                .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
            let len = (elems / ggml_type.block_elems as u64)
                .checked_mul(ggml_type.block_bytes as u64)
                .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
            let start = data_start
                .checked_add(info.offset)
                .ok_or_else(|| bad("offset overflows".into()))?;
            let end = start
                .checked_add(len)
                .ok_or_else(|| bad("offset overflows".into()))?;
            if end > file_len {
                return Err(GgufError::Truncated {
                    path: path_buf,
                    name: name.clone(),
                    start,
                    end,
                    file_len,
                });
            }
            tensors.insert(
                name.clone(),
                GgufTensorInfo {
                    ggml_type,
                    shape,
                    start: start as usize,
                    len: len as usize,
                },
            );
        }
        check_no_overlap(&path_buf, &tensors)?;
        Ok(Self {
            path: path_buf,
            map,
            version,
            metadata: content.metadata,
            tensors,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Every tensor, by GGUF name (sorted).
    pub fn tensors(&self) -> &BTreeMap<String, GgufTensorInfo> {
        &self.tensors
    }

    /// The info of tensor `name` (a GGUF name), if present.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.get(name)
    }

    /// Tensor `name` (a GGUF name) as a raw record borrowed from the map.
    pub fn raw(&self, name: &str) -> Option<RawTensor<'_>> {
        let info = self.tensors.get(name)?;
        // In range: checked at open.
        let bytes = self.map.get(info.start..info.start + info.len)?;
        Some(RawTensor {
            ggml_type: info.ggml_type,
            shape: &info.shape,
            bytes,
        })
    }

    /// Tell the kernel that the bytes of tensor `name` will not be read again (after they were
    /// copied into an array or a quantized tensor): its pages leave this process's resident set,
    /// so loading a GGUF file holds the weights once, not the weights plus the mapped file. A
    /// later read faults them back in from the file.
    pub fn release(&self, name: &str) {
        if let Some(info) = self.tensors.get(name) {
            if info.len > 0 {
                super::tensors::drop_pages(&self.map, info.start, info.len);
            }
        }
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.string("general.architecture")
    }

    /// Whether the metadata holds `key`.
    pub fn has(&self, key: &str) -> bool {
        self.metadata.contains_key(key)
    }

    /// The raw metadata value of `key`, if present.
    pub fn value(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn missing(&self, key: &str) -> GgufError {
        GgufError::MissingKey {
            path: self.path.clone(),
            key: key.to_string(),
        }
    }

    fn bad_value(&self, key: &str, reason: impl Into<String>) -> GgufError {
        GgufError::BadValue {
            path: self.path.clone(),
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    /// Metadata `key` as a non-negative integer (any integer type), if present.
    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>, GgufError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(v) => value_usize(v).map(Some).ok_or_else(|| {
                self.bad_value(key, format!("expected a non-negative integer, found {v:?}"))
            }),
        }
    }

    /// Metadata `key` as a non-negative integer (required).
    pub fn usize(&self, key: &str) -> Result<usize, GgufError> {
        self.opt_usize(key)?.ok_or_else(|| self.missing(key))
    }

    /// Metadata `key` as a float (F32 or F64), if present.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, GgufError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(Value::F32(v)) => Ok(Some(f64::from(*v))),
            Some(Value::F64(v)) => Ok(Some(*v)),
            Some(v) => Err(self.bad_value(key, format!("expected a float, found {v:?}"))),
        }
    }

    /// Metadata `key` as a boolean, if present.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(Value::Bool(v)) => Ok(Some(*v)),
            Some(v) => Err(self.bad_value(key, format!("expected a boolean, found {v:?}"))),
        }
    }

    /// Metadata `key` as a string, if present.
    pub fn opt_string(&self, key: &str) -> Result<Option<&str>, GgufError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.bad_value(key, format!("expected a string, found {v:?}"))),
        }
    }

    /// Metadata `key` as a string (required).
    pub fn string(&self, key: &str) -> Result<&str, GgufError> {
        self.opt_string(key)?.ok_or_else(|| self.missing(key))
    }

    /// Metadata `key` as an array (required).
    pub fn array(&self, key: &str) -> Result<&[Value], GgufError> {
        match self.metadata.get(key) {
            None => Err(self.missing(key)),
            Some(Value::Array(v)) => Ok(v),
            Some(v) => Err(self.bad_value(key, format!("expected an array, found {v:?}"))),
        }
    }

    /// Metadata `key` as an array of strings (required).
    pub fn strings(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.as_str()),
                other => Err(self.bad_value(key, format!("entry {i} is not a string: {other:?}"))),
            })
            .collect()
    }

    /// Metadata `key` as an array of floats (required).
    pub fn floats(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::F32(x) => Ok(*x),
                Value::F64(x) => Ok(*x as f32),
                other => Err(self.bad_value(key, format!("entry {i} is not a float: {other:?}"))),
            })
            .collect()
    }

    /// Metadata `key` as an array of integers (required; any integer type, cast to `i64`).
    pub fn ints(&self, key: &str) -> Result<Vec<i64>, GgufError> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                value_i64(v).ok_or_else(|| {
                    self.bad_value(key, format!("entry {i} is not an integer: {v:?}"))
                })
            })
            .collect()
    }

    /// The float dtype holding most of the tensors' bytes, if any tensor is a float (for
    /// choosing a compute dtype).
    pub fn stored_float_dtype(&self) -> Option<DType> {
        let mut bytes: BTreeMap<u32, (DType, usize)> = BTreeMap::new();
        for info in self.tensors.values() {
            if let Some(dtype) = info.ggml_type.float_dtype() {
                bytes.entry(info.ggml_type.id).or_insert((dtype, 0)).1 += info.len;
            }
        }
        bytes
            .into_values()
            .max_by_key(|&(_, size)| size)
            .map(|(dtype, _)| dtype)
    }
}

/// Tensors sorted by offset must not overlap: a tensor whose declared shape needs more bytes than
/// lie before the next tensor has a shape or type that does not match its data.
fn check_no_overlap(
    path: &Path,
    tensors: &BTreeMap<String, GgufTensorInfo>,
) -> Result<(), GgufError> {
    let mut by_start: Vec<(&String, &GgufTensorInfo)> = tensors.iter().collect();
    by_start.sort_by_key(|(_, info)| info.start);
    for pair in by_start.windows(2) {
        let [(name, info), (next_name, next)] = pair else {
            continue;
        };
        if info.start + info.len > next.start {
            return Err(GgufError::BadTensor {
                path: path.to_path_buf(),
                name: (*name).clone(),
                reason: format!(
                    "{} of shape {:?} needs {} bytes, but tensor {next_name} starts {} bytes \
                     after it (the shape or type does not match the data)",
                    info.ggml_type.name,
                    info.shape,
                    info.len,
                    next.start - info.start
                ),
            });
        }
    }
    Ok(())
}

fn value_i64(v: &Value) -> Option<i64> {
    match v {
        Value::U8(x) => Some(i64::from(*x)),
        Value::I8(x) => Some(i64::from(*x)),
        Value::U16(x) => Some(i64::from(*x)),
        Value::I16(x) => Some(i64::from(*x)),
        Value::U32(x) => Some(i64::from(*x)),
        Value::I32(x) => Some(i64::from(*x)),
        Value::U64(x) => i64::try_from(*x).ok(),
        Value::I64(x) => Some(*x),
        _ => None,
    }
}

fn value_usize(v: &Value) -> Option<usize> {
    value_i64(v).and_then(|x| usize::try_from(x).ok())
}
