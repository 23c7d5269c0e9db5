//! Memory-mapped safetensors files: find a tensor by name, check its shape, hand out its bytes.
//!
//! A [`TensorStore`] maps every weight file of a model directory (`model.safetensors`, or the
//! shards listed by `model.safetensors.index.json`), parses each header once, and hands out
//! tensors by name. It can also stand over one GGUF file under HF names
//! ([`TensorStore::from_gguf`]), its quantized tensors handed out as ggml blocks. It records which tensors were taken so that [`TensorStore::finish`] can
//! report tensors the model did not use.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::{Dtype, TensorInfo};
use safetensors::SafeTensors;

use mtp_core::DType;

use super::error::{LoadError, LoadResult};

/// Name of a single-file checkpoint.
const SINGLE_FILE: &str = "model.safetensors";
/// Name of the index of a sharded checkpoint.
const INDEX_FILE: &str = "model.safetensors.index.json";

/// One mapped weight file with its parsed header.
struct MappedFile {
    path: PathBuf,
    map: Mmap,
    /// Byte offset of the data section (8 + header length).
    data_start: usize,
    tensors: BTreeMap<String, TensorInfo>,
}

/// How much of a [`TensorStore`] a model read, and how much it skipped without reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Tensors whose bytes were read.
    pub read_tensors: usize,
    /// Bytes of the tensors read.
    pub read_bytes: u64,
    /// Tensors marked unused and never read (towers, unused KV-shared projections, ...).
    pub skipped_tensors: usize,
    /// Bytes of the skipped tensors (their pages of the memory map are never touched).
    pub skipped_bytes: u64,
}

/// The weight files of one model directory; see the [module docs](crate::loading::tensors).
pub struct TensorStore {
    files: Vec<MappedFile>,
    /// Tensor name → index into `files`.
    index: BTreeMap<String, usize>,
    taken: BTreeSet<String>,
    /// Tensors read through [`TensorStore::raw`] (a subset of `taken`).
    read: BTreeSet<String>,
    /// Quantized GGUF tensors (see [`TensorStore::from_gguf`]), by name: their ggml type id,
    /// shape and byte range in the one mapped file.
    blocks: BTreeMap<String, StoredBlocks>,
}

/// A quantized GGUF tensor in a [`TensorStore`].
#[derive(Debug, Clone)]
struct StoredBlocks {
    ggml_type: u32,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

impl std::fmt::Debug for TensorStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorStore")
            .field(
                "files",
                &self.files.iter().map(|m| &m.path).collect::<Vec<_>>(),
            )
            .field("tensors", &self.index.len())
            .finish()
    }
}

/// Drop the resident pages of `len` bytes at `offset` of a read-only file map (`MADV_DONTNEED`).
/// A failure only means the pages stay resident, so it is logged, not returned.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn drop_pages(map: &Mmap, offset: usize, len: usize) {
    // SAFETY: the map is a read-only (`PROT_READ`, `MAP_SHARED`) view of a file that this store
    // never writes: `MADV_DONTNEED` only evicts its pages from this process, and a later read
    // faults them back in from the file with the same contents. memmap2 marks the advice unsafe
    // for writable private maps, whose unsaved changes it would discard; there are none here.
    let result =
        unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
    if let Err(e) = result {
        tracing::debug!(offset, len, error = %e, "madvise(DONTNEED) failed; pages stay resident");
    }
}

/// Elsewhere the pages stay until the map is dropped.
#[cfg(not(unix))]
pub(crate) fn drop_pages(_map: &Mmap, _offset: usize, _len: usize) {}

/// Map `path` read-only (every weight file, safetensors or GGUF, is mapped here).
#[allow(unsafe_code)]
pub(crate) fn map_file(path: &Path) -> LoadResult<Mmap> {
    let file = File::open(path).map_err(|e| LoadError::MissingFile {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    // SAFETY: the map is read-only and private to this store. Memory mapping is sound as long as
    // no other process truncates or rewrites the file while it is mapped; model directories are
    // treated as immutable inputs (the same contract as the safetensors Python loader's mmap).
    // Every read goes through bounds checked slices of the map.
    unsafe { Mmap::map(&file) }.map_err(|e| LoadError::MissingFile {
        path: path.to_path_buf(),
        reason: format!("cannot memory-map: {e}"),
    })
}

/// Append little-endian `bytes` of tensor `name`, stored as F32, F16 or BF16, to `out` as `f32`
/// (exact: every F16 and BF16 value is an `f32`).
fn widen_into(name: &str, dtype: Dtype, bytes: &[u8], out: &mut Vec<f32>) -> LoadResult<()> {
    let pairs = bytes.chunks_exact(2).map(|c| [c[0], c[1]]);
    match dtype {
        Dtype::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        Dtype::F16 => out.extend(pairs.map(|b| half::f16::from_le_bytes(b).to_f32())),
        Dtype::BF16 => out.extend(pairs.map(|b| half::bf16::from_le_bytes(b).to_f32())),
        other => {
            return Err(LoadError::UnsupportedDtype {
                name: name.to_string(),
                dtype: format!("{other:?}"),
                supported: "F32, F16, BF16",
            })
        }
    }
    Ok(())
}

fn open_file(path: &Path) -> LoadResult<MappedFile> {
    let map = map_file(path)?;
    let corrupt = |reason: String| LoadError::CorruptWeights {
        path: path.to_path_buf(),
        reason,
    };
    let (header_len, metadata) =
        SafeTensors::read_metadata(&map).map_err(|e| corrupt(e.to_string()))?;
    let data_start = 8usize
        .checked_add(header_len)
        .ok_or_else(|| corrupt("header length overflows".into()))?;
    let mut tensors = BTreeMap::new();
    for (name, info) in metadata.tensors() {
        let (start, end) = info.data_offsets;
        let fits = start <= end
            && data_start
                .checked_add(end)
                .is_some_and(|last| last <= map.len());
        if !fits {
            return Err(corrupt(format!(
                "tensor {name} points outside the file ({start}..{end})"
            )));
        }
        tensors.insert(name, info.clone());
    }
    Ok(MappedFile {
        path: path.to_path_buf(),
        map,
        data_start,
        tensors,
    })
}

/// The `weight_map` of a `model.safetensors.index.json`: tensor name → shard file name.
fn weight_map(index_path: &Path) -> LoadResult<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(index_path).map_err(|e| LoadError::MissingFile {
        path: index_path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let bad = |reason: String| LoadError::BadJson {
        path: index_path.to_path_buf(),
        reason,
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let Some(map) = value.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(bad("no \"weight_map\" object".into()));
    };
    let mut names = BTreeMap::new();
    for (tensor, file) in map {
        match file.as_str() {
            // A shard name is a file beside the index, never a path elsewhere.
            Some(f) if !f.is_empty() && !f.contains(['/', '\\']) && f != ".." => {
                names.insert(tensor.clone(), f.to_string());
            }
            Some(f) => {
                return Err(bad(format!(
                    "weight_map entry {tensor}: bad file name {f:?}"
                )))
            }
            None => return Err(bad(format!("weight_map entry {tensor} is not a string"))),
        }
    }
    Ok(names)
}

impl TensorStore {
    /// Map the weights of the model directory `dir`: `model.safetensors` when present, otherwise
    /// the shards named by `model.safetensors.index.json`.
    pub fn open(dir: &Path) -> LoadResult<Self> {
        let single = dir.join(SINGLE_FILE);
        let index_path = dir.join(INDEX_FILE);
        if single.is_file() {
            return Self::from_files(&[single]);
        }
        if !index_path.is_file() {
            return Err(LoadError::MissingFile {
                path: single,
                reason: format!("neither {SINGLE_FILE} nor {INDEX_FILE} exists"),
            });
        }
        let map = weight_map(&index_path)?;
        let shards: BTreeSet<&String> = map.values().collect();
        let mut paths = Vec::with_capacity(shards.len());
        for shard in shards {
            let path = dir.join(shard);
            if !path.is_file() {
                return Err(LoadError::MissingFile {
                    path,
                    reason: format!(
                        "the shard is listed by {INDEX_FILE} but absent (an incomplete download?)"
                    ),
                });
            }
            paths.push(path);
        }
        let store = Self::from_files(&paths)?;
        for (tensor, shard) in &map {
            let found = store.index.get(tensor).map(|&f| &store.files[f].path);
            if found != Some(&dir.join(shard)) {
                return Err(LoadError::CorruptWeights {
                    path: index_path.clone(),
                    reason: format!(
                        "{INDEX_FILE} puts {tensor} in {shard}, which does not hold it"
                    ),
                });
            }
        }
        Ok(store)
    }

    /// Map the given safetensors files (a tensor may appear in only one of them).
    pub fn from_files(paths: &[PathBuf]) -> LoadResult<Self> {
        let mut files = Vec::with_capacity(paths.len());
        let mut index = BTreeMap::new();
        for path in paths {
            let file = open_file(path)?;
            for name in file.tensors.keys() {
                if index.insert(name.clone(), files.len()).is_some() {
                    return Err(LoadError::CorruptWeights {
                        path: path.clone(),
                        reason: format!("tensor {name} appears in more than one file"),
                    });
                }
            }
            files.push(file);
        }
        Ok(Self {
            files,
            index,
            taken: BTreeSet::new(),
            read: BTreeSet::new(),
            blocks: BTreeMap::new(),
        })
    }

    /// The tensors of the GGUF file `file` (at `path`) under the names `rename` gives them
    /// (tensors it returns `None` for are not weights and are left out), so a model reads a GGUF
    /// by the names of its HF checkpoint: float tensors as any stored tensor, quantized ones
    /// through [`take_blocks`](Self::take_blocks).
    pub fn from_gguf(
        path: &Path,
        file: &super::gguf::GgufFile,
        rename: impl Fn(&str) -> Option<String>,
    ) -> LoadResult<Self> {
        let mut tensors = BTreeMap::new();
        let mut blocks = BTreeMap::new();
        let mut index = BTreeMap::new();
        for (name, info) in file.tensors() {
            let Some(hf) = rename(name) else {
                continue;
            };
            if index.insert(hf.clone(), 0).is_some() {
                return Err(LoadError::CorruptWeights {
                    path: path.to_path_buf(),
                    reason: format!("two tensors are named {hf}"),
                });
            }
            let (start, end) = (info.start, info.start.saturating_add(info.len));
            let dtype = match info.ggml_type.name {
                "F32" => Dtype::F32,
                "F16" => Dtype::F16,
                "BF16" => Dtype::BF16,
                _ => {
                    let stored = StoredBlocks {
                        ggml_type: info.ggml_type.id,
                        shape: info.shape.clone(),
                        start,
                        end,
                    };
                    blocks.insert(hf, stored);
                    continue;
                }
            };
            let record = TensorInfo {
                dtype,
                shape: info.shape.clone(),
                data_offsets: (start, end),
            };
            tensors.insert(hf, record);
        }
        Ok(Self {
            files: vec![MappedFile {
                path: path.to_path_buf(),
                map: map_file(path)?,
                data_start: 0,
                tensors,
            }],
            index,
            taken: BTreeSet::new(),
            read: BTreeSet::new(),
            blocks,
        })
    }

    /// The quantized GGUF tensor `name` of shape `expected`: its ggml type id and its blocks,
    /// borrowed from the memory map; `None` when `name` is not one (a float tensor, or a store
    /// of safetensors files).
    pub fn take_blocks(
        &mut self,
        name: &str,
        expected: &[usize],
    ) -> LoadResult<Option<(u32, &[u8])>> {
        let Some(stored) = self.blocks.get(name) else {
            return Ok(None);
        };
        if stored.shape != expected {
            return Err(LoadError::ShapeMismatch {
                name: name.to_string(),
                expected: expected.to_vec(),
                found: stored.shape.clone(),
            });
        }
        self.taken.insert(name.to_string());
        self.read.insert(name.to_string());
        let file = &self.files[0];
        match file.map.get(stored.start..stored.end) {
            Some(bytes) => Ok(Some((stored.ggml_type, bytes))),
            None => Err(LoadError::CorruptWeights {
                path: file.path.clone(),
                reason: format!("tensor {name} is truncated"),
            }),
        }
    }

    /// Whether the weights hold a tensor called `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The stored shape of `name`, if present.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let file = &self.files[*self.index.get(name)?];
        file.tensors.get(name).map(|info| info.shape.clone())
    }

    /// Mark `name` as used without reading it (tensors the model deliberately ignores).
    pub fn skip(&mut self, name: &str) {
        if self.contains(name) {
            self.taken.insert(name.to_string());
        }
    }

    /// The float dtype holding most of the weights' bytes (`None` without float tensors): the
    /// checkpoint's own dtype, for choosing a compute dtype.
    pub fn stored_float_dtype(&self) -> Option<DType> {
        let mut bytes: BTreeMap<&'static str, (DType, u64)> = BTreeMap::new();
        for file in &self.files {
            for info in file.tensors.values() {
                let (key, dtype) = match info.dtype {
                    Dtype::F32 => ("f32", DType::F32),
                    Dtype::F16 => ("f16", DType::F16),
                    Dtype::BF16 => ("bf16", DType::BF16),
                    _ => continue,
                };
                let size = (info.data_offsets.1 - info.data_offsets.0) as u64;
                bytes.entry(key).or_insert((dtype, 0)).1 += size;
            }
        }
        bytes
            .into_values()
            .max_by_key(|&(_, size)| size)
            .map(|(dtype, _)| dtype)
    }

    /// How many tensors the weights hold.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the weights hold no tensor at all.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// How many tensors were taken (read or skipped) so far.
    pub fn taken(&self) -> usize {
        self.taken.len()
    }

    /// Every tensor name in the weights (sorted).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }

    /// Mark every tensor whose name starts with `prefix` as used without reading it; returns how
    /// many there were. This is how a model ignores whole parts of a checkpoint (the vision and
    /// audio towers of a multimodal one): their bytes stay unread in the memory map.
    pub fn skip_prefix(&mut self, prefix: &str) -> usize {
        let names: Vec<String> = self
            .index
            .range(prefix.to_string()..)
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(name, _)| name.clone())
            .collect();
        let count = names.len();
        self.taken.extend(names);
        count
    }

    /// The stored byte size of `name` (0 when absent).
    fn byte_len(&self, name: &str) -> u64 {
        self.index
            .get(name)
            .and_then(|&f| self.files[f].tensors.get(name))
            .map_or(0, |info| (info.data_offsets.1 - info.data_offsets.0) as u64)
    }

    /// What was read and what was skipped so far.
    pub fn stats(&self) -> StoreStats {
        let mut stats = StoreStats::default();
        for name in &self.taken {
            let bytes = self.byte_len(name);
            if self.read.contains(name) {
                stats.read_tensors += 1;
                stats.read_bytes += bytes;
            } else {
                stats.skipped_tensors += 1;
                stats.skipped_bytes += bytes;
            }
        }
        stats
    }

    /// Whether the bytes of `name` were read.
    pub fn was_read(&self, name: &str) -> bool {
        self.read.contains(name)
    }

    /// Find `name`, check its shape against `expected`, and return its dtype and raw bytes.
    fn raw(&mut self, name: &str, expected: &[usize]) -> LoadResult<(Dtype, &[u8])> {
        let (dtype, file, range) = self.locate(name, expected)?;
        Ok((dtype, &self.files[file].map[range]))
    }

    /// Where tensor `name` of shape `expected` lies: its stored dtype, its file and its byte range
    /// in that file's map (checked against the shape and the file's length); marks it taken.
    fn locate(
        &mut self,
        name: &str,
        expected: &[usize],
    ) -> LoadResult<(Dtype, usize, std::ops::Range<usize>)> {
        let Some(&file_index) = self.index.get(name) else {
            return Err(LoadError::MissingTensor {
                name: name.to_string(),
                expected: expected.to_vec(),
            });
        };
        self.taken.insert(name.to_string());
        self.read.insert(name.to_string());
        let file = &self.files[file_index];
        let Some(info) = file.tensors.get(name) else {
            return Err(LoadError::MissingTensor {
                name: name.to_string(),
                expected: expected.to_vec(),
            });
        };
        if info.shape != expected {
            return Err(LoadError::ShapeMismatch {
                name: name.to_string(),
                expected: expected.to_vec(),
                found: info.shape.clone(),
            });
        }
        let (start, end) = info.data_offsets;
        let count: usize = expected.iter().product();
        let elem = info.dtype.bitsize() / 8;
        let corrupt = |reason: String| LoadError::CorruptWeights {
            path: file.path.clone(),
            reason,
        };
        if count.checked_mul(elem) != Some(end - start) {
            return Err(corrupt(format!(
                "tensor {name}: {} bytes for {count} elements of {:?}",
                end - start,
                info.dtype
            )));
        }
        let range = file.data_start + start..file.data_start + end;
        if range.end > file.map.len() {
            return Err(corrupt(format!("tensor {name} is truncated")));
        }
        Ok((info.dtype, file_index, range))
    }

    /// Tensor `name` of shape `expected` as its stored float dtype (F32, F16 or BF16) and its raw
    /// little-endian bytes, borrowed from the memory map (no copy).
    pub fn take_float_bytes(
        &mut self,
        name: &str,
        expected: &[usize],
    ) -> LoadResult<(DType, &[u8])> {
        let (dtype, bytes) = self.raw(name, expected)?;
        let dtype = match dtype {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            other => {
                return Err(LoadError::UnsupportedDtype {
                    name: name.to_string(),
                    dtype: format!("{other:?}"),
                    supported: "F32, F16, BF16",
                })
            }
        };
        Ok((dtype, bytes))
    }

    /// Tensor `name` (`[rows, cols]`, stored as F32, F16 or BF16) as `f32`, `chunk_rows` rows at
    /// a time: `each` gets the chunks in order, and each chunk's pages of the map are dropped
    /// after it. A table whose `f32` copy would not fit beside the rest (E2B's 262,144 x 8,960
    /// per-layer embedding is 9.4 GB in `f32`) is never widened whole.
    pub fn take_f32_rows(
        &mut self,
        name: &str,
        [rows, cols]: [usize; 2],
        chunk_rows: usize,
        mut each: impl FnMut(&[f32]) -> LoadResult<()>,
    ) -> LoadResult<()> {
        let (dtype, file, range) = self.locate(name, &[rows, cols])?;
        let map = &self.files[file].map;
        let chunk_bytes = chunk_rows.max(1) * cols.max(1) * (dtype.bitsize() / 8);
        let mut values = Vec::new();
        for (i, chunk) in map[range.clone()].chunks(chunk_bytes).enumerate() {
            values.clear();
            widen_into(name, dtype, chunk, &mut values)?;
            each(&values)?;
            drop_pages(map, range.start + i * chunk_bytes, chunk.len());
        }
        Ok(())
    }

    /// Tell the kernel that the pages of `name` will not be read again (after its bytes were
    /// copied into an array): they leave this process's resident set (the file's page cache is
    /// unchanged), so loading a checkpoint holds the arrays, not the arrays plus the map.
    pub fn release(&self, name: &str) {
        let Some(file) = self.index.get(name).map(|&f| &self.files[f]) else {
            return;
        };
        if let Some(stored) = self.blocks.get(name) {
            drop_pages(&file.map, stored.start, stored.end - stored.start);
            return;
        }
        let Some(info) = file.tensors.get(name) else {
            return;
        };
        let (start, end) = info.data_offsets;
        if end > start {
            drop_pages(&file.map, file.data_start + start, end - start);
        }
    }

    /// Tensor `name` of shape `expected` as `f32` (stored as F32, F16 or BF16).
    pub fn take_f32(&mut self, name: &str, expected: &[usize]) -> LoadResult<Vec<f32>> {
        let (dtype, bytes) = self.raw(name, expected)?;
        let mut values = Vec::with_capacity(expected.iter().product());
        widen_into(name, dtype, bytes, &mut values)?;
        Ok(values)
    }

    /// Integer tensor `name` of shape `expected` (stored as I64, I32 or U32) as `i64`.
    pub fn take_ints(&mut self, name: &str, expected: &[usize]) -> LoadResult<Vec<i64>> {
        let (dtype, bytes) = self.raw(name, expected)?;
        match dtype {
            Dtype::I64 => Ok(bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect()),
            Dtype::I32 => Ok(bytes
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect()),
            Dtype::U32 => Ok(bytes
                .chunks_exact(4)
                .map(|c| i64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect()),
            other => Err(LoadError::UnsupportedDtype {
                name: name.to_string(),
                dtype: format!("{other:?}"),
                supported: "I64, I32, U32",
            }),
        }
    }

    /// `U32` tensor `name` of shape `expected` (the packed words of an MLX quantized weight).
    pub fn take_u32(&mut self, name: &str, expected: &[usize]) -> LoadResult<Vec<u32>> {
        let (dtype, bytes) = self.raw(name, expected)?;
        match dtype {
            Dtype::U32 => Ok(bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()),
            other => Err(LoadError::UnsupportedDtype {
                name: name.to_string(),
                dtype: format!("{other:?}"),
                supported: "U32 (packed quantized words)",
            }),
        }
    }

    /// Fail with [`LoadError::UnexpectedTensor`] if some tensor was neither taken nor skipped;
    /// otherwise say what was read and what was skipped.
    pub fn finish(self) -> LoadResult<StoreStats> {
        for (name, &file) in &self.index {
            if !self.taken.contains(name) {
                return Err(LoadError::UnexpectedTensor {
                    name: name.clone(),
                    path: self.files[file].path.clone(),
                });
            }
        }
        Ok(self.stats())
    }
}
