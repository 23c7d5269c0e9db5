//! The default model pair embedded in the program (feature `embedded-model`, on by default).
//!
//! `cargo install --path crates/runner` installs one file, the binary, so the tiny default pair
//! of `models/default/` (about 10 MB: a Gemma 4 target, its tokenizer and its assistant) is
//! compiled into it with `include_bytes!`. The loader reads model *directories* (memory-mapped
//! safetensors, JSON side files), so on first use the files are written once to a cache
//! directory — `$XDG_CACHE_HOME/mtp-rs`, else `~/.cache/mtp-rs` (`~/Library/Caches/mtp-rs` on
//! macOS), else the system temporary directory — and loaded from there like any other pair.
//! Each file is written to a temporary name and renamed into place, so concurrent first runs
//! never see a partial file; a later run compares the cached bytes with the embedded ones and
//! rewrites any file that differs (an edited cache, or another build's pair).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::defaults::DefaultModelError;

/// One embedded file: its path under the pair directory and its bytes.
struct EmbeddedFile {
    path: &'static str,
    bytes: &'static [u8],
}

macro_rules! embed {
    ($($path:literal),* $(,)?) => {
        &[$(EmbeddedFile {
            path: $path,
            bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default/", $path)),
        }),*]
    };
}

/// Every file of `models/default/{target,assistant}`.
const FILES: &[EmbeddedFile] = embed!(
    "target/config.json",
    "target/generation_config.json",
    "target/model.safetensors",
    "target/tokenizer.json",
    "target/tokenizer_config.json",
    "assistant/config.json",
    "assistant/generation_config.json",
    "assistant/model.safetensors",
);

/// The directory holding `target/` and `assistant/` of the embedded pair, written on first use.
pub fn extracted_pair_dir() -> Result<PathBuf, DefaultModelError> {
    let dir = cache_root().join(format!("default-pair-{}", env!("CARGO_PKG_VERSION")));
    for file in FILES {
        ensure_file(&dir.join(file.path), file.bytes)?;
    }
    Ok(dir)
}

/// The total size of the embedded files in bytes.
pub fn embedded_bytes() -> usize {
    FILES.iter().map(|f| f.bytes.len()).sum()
}

/// `$XDG_CACHE_HOME/mtp-rs`, else the platform's per-user cache, else the temporary directory.
pub fn cache_root() -> PathBuf {
    let non_empty = |key: &str| std::env::var_os(key).filter(|v| !v.is_empty());
    if let Some(xdg) = non_empty("XDG_CACHE_HOME") {
        return PathBuf::from(xdg).join("mtp-rs");
    }
    if let Some(home) = non_empty("HOME") {
        let home = PathBuf::from(home);
        return if cfg!(target_os = "macos") {
            home.join("Library").join("Caches").join("mtp-rs")
        } else {
            home.join(".cache").join("mtp-rs")
        };
    }
    std::env::temp_dir().join("mtp-rs-cache")
}

/// Make `path` hold exactly `bytes`: left alone when it already does, else written to a
/// temporary file beside it and renamed into place.
fn ensure_file(path: &Path, bytes: &[u8]) -> Result<(), DefaultModelError> {
    if std::fs::read(path).is_ok_and(|cached| cached == bytes) {
        return Ok(());
    }
    let fail = |at: &Path, e: std::io::Error| DefaultModelError::Extract {
        path: at.to_path_buf(),
        reason: e.to_string(),
    };
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| fail(parent, e))?;
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_os_string());
    let mut temp_name = name;
    temp_name.push(format!(".partial-{}", std::process::id()));
    let temp = parent.join(temp_name);
    let written = std::fs::File::create(&temp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(fail(&temp, e));
    }
    std::fs::rename(&temp, path).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        fail(path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_once_and_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b.bin");
        ensure_file(&path, b"weights").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"weights");
        std::fs::write(&path, b"edited").unwrap();
        ensure_file(&path, b"weights").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"weights");
        let leftovers = std::fs::read_dir(dir.path().join("a")).unwrap().count();
        assert_eq!(leftovers, 1, "no partial files stay behind");
    }

    #[test]
    fn the_pair_is_embedded() {
        assert!(embedded_bytes() > 5_000_000, "{}", embedded_bytes());
        assert!(FILES.iter().any(|f| f.path == "target/model.safetensors"));
        assert!(FILES
            .iter()
            .any(|f| f.path == "assistant/model.safetensors"));
    }
}
