//! What the adaptive draft schedule learned, kept between processes.
//!
//! Each `mtp generate` is a process of its own; without a memory, every run would start its
//! cost-aware controller from nothing and spend its first rounds measuring what the last run
//! already knew (on a short generation, a few percent of the time). The store keeps the
//! controllers' state in one JSON file per *setup* — the models (paths, sizes, modification
//! times), the proposers, the backend and device, the load options, the threads, the CPU and
//! this program's version — under `<cache>/schedules/` (the cache directory of the embedded
//! pair). A different setup gets another file: costs measured on one machine or model say
//! nothing about another. A missing, unreadable or foreign file means starting from nothing
//! (said once as a warning, never an error); each file is written to a temporary name and
//! renamed into place, so concurrent runs never read a partial file.

use std::path::{Path, PathBuf};

use mtp_core::schedule::{DepthController, ScheduleKey, ScheduleMemory};

/// Format version of a store file (a file of another version is ignored).
const STORE_VERSION: u32 = 2;

/// Why the store could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleStoreError {
    /// The file could not be read or written.
    #[error("schedule store {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a store this version reads.
    #[error("schedule store {path}: not a version-{STORE_VERSION} store: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// One setup's file of learned schedule state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleStore {
    path: PathBuf,
    setup: Vec<String>,
}

/// The file's contents.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoreFile {
    version: u32,
    /// The setup the state was learned on, for a person reading the file.
    setup: Vec<String>,
    controllers: Vec<(ScheduleKey, DepthController)>,
}

impl ScheduleStore {
    /// The store of the setup described by `setup` (one line per fact; see the module docs)
    /// under `dir`.
    pub fn new(dir: &Path, setup: Vec<String>) -> Self {
        let name = format!("{:016x}.json", fnv1a(setup.join("\n").as_bytes()));
        Self {
            path: dir.join(name),
            setup,
        }
    }

    /// The store of `setup` in the user's cache directory (`<cache>/schedules/`).
    pub fn in_cache(setup: Vec<String>) -> Self {
        Self::new(&crate::embedded_pair::cache_root().join("schedules"), setup)
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Put the stored state into `memory`; returns how many controllers were taken (0 when
    /// there is no file yet). Invalid entries are skipped.
    pub fn load_into(&self, memory: &ScheduleMemory) -> Result<usize, ScheduleStoreError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(source) => {
                return Err(ScheduleStoreError::Io {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let file: StoreFile =
            serde_json::from_str(&text).map_err(|e| ScheduleStoreError::Format {
                path: self.path.clone(),
                reason: e.to_string(),
            })?;
        if file.version != STORE_VERSION {
            return Err(ScheduleStoreError::Format {
                path: self.path.clone(),
                reason: format!("version {}", file.version),
            });
        }
        Ok(memory.import(file.controllers))
    }

    /// Write `memory`'s state (nothing when it holds none).
    pub fn save(&self, memory: &ScheduleMemory) -> Result<(), ScheduleStoreError> {
        let controllers = memory.export();
        if controllers.is_empty() {
            return Ok(());
        }
        let io = |source| ScheduleStoreError::Io {
            path: self.path.clone(),
            source,
        };
        let file = StoreFile {
            version: STORE_VERSION,
            setup: self.setup.clone(),
            controllers,
        };
        let json = serde_json::to_string(&file).map_err(|e| ScheduleStoreError::Format {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let temporary = self
            .path
            .with_extension(format!("json.{}.tmp", std::process::id()));
        std::fs::write(&temporary, json).map_err(io)?;
        std::fs::rename(&temporary, &self.path).map_err(io)
    }
}

/// A file's identity for the setup: its canonical path, size and modification time (a
/// rewritten model is another model).
pub fn file_identity(path: &Path) -> String {
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let meta = std::fs::metadata(&canonical);
    let size = meta.as_ref().map(|m| m.len()).unwrap_or(0);
    let modified = meta
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    format!(
        "{} ({size} bytes, modified {modified})",
        canonical.display()
    )
}

/// The CPU's model name (Linux: `/proc/cpuinfo`), else the architecture.
pub fn cpu_identity() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        });
    model.unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// FNV-1a, 64 bits: a stable file name for a setup (not a security boundary).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mtp_core::options::{DecodeMode, ValidationMode};
    use mtp_core::schedule::{RoundReport, ScheduleKind};
    use std::time::Duration;

    fn key() -> ScheduleKey {
        ScheduleKey {
            proposer: "mtp".into(),
            backend: "reference".into(),
            mode: DecodeMode::GreedyMtp,
            validation: ValidationMode::Batched,
            overlap: false,
        }
    }

    fn learn(memory: &ScheduleMemory) -> usize {
        let mut s = memory.schedule(&key(), ScheduleKind::Adaptive, 4, 8);
        for _ in 0..150 {
            let d = s.depth();
            s.observe(&RoundReport {
                planned: d,
                asked: d,
                drafted: d,
                judged: d,
                accepted: d,
                elapsed: Duration::from_millis(10),
            });
        }
        s.depth()
    }

    #[test]
    fn a_later_process_starts_where_the_last_one_settled() {
        let dir = std::env::temp_dir().join(format!("mtp-schedule-store-{}", std::process::id()));
        let setup = vec!["model a".to_string(), "cpu x".to_string()];
        let store = ScheduleStore::new(&dir, setup.clone());
        let first = ScheduleMemory::new();
        assert_eq!(store.load_into(&first).expect("no file yet"), 0);
        let learned = learn(&first);
        assert!(learned > 0);
        store.save(&first).expect("save");

        let second = ScheduleMemory::new();
        assert_eq!(store.load_into(&second).expect("load"), 1);
        let mut s = second.schedule(&key(), ScheduleKind::Adaptive, 4, 8);
        assert_eq!(s.depth(), learned);

        // Another setup has another file.
        let other = ScheduleStore::new(&dir, vec!["model b".into(), "cpu x".into()]);
        assert_ne!(other.path(), store.path());
        assert_eq!(other.load_into(&ScheduleMemory::new()).expect("none"), 0);

        // A damaged file is an error to report, not a panic, and teaches nothing.
        std::fs::write(store.path(), "{ not json").expect("write");
        let third = ScheduleMemory::new();
        assert!(matches!(
            store.load_into(&third),
            Err(ScheduleStoreError::Format { .. })
        ));
        assert!(third.export().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_setup_names_the_file_stably() {
        let dir = Path::new("/x");
        let a = ScheduleStore::new(dir, vec!["one".into(), "two".into()]);
        let b = ScheduleStore::new(dir, vec!["one".into(), "two".into()]);
        assert_eq!(a.path(), b.path());
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
