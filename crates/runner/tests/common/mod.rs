//! Shared helpers of the fixture tests: where the HF fixtures live, reading their reference
//! tensors, and error measures.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use mtp_core::reference::ReferenceBackend;
use mtp_core::Backend;

/// Instantiate generic fixture checks (`fn check<B: Backend>(b: &B)`) once per backend: the host
/// reference backend, candle's CPU device, with the `cuda` feature candle's CUDA device 0 and,
/// with the `mlx` feature, MLX (serialised by [`mlx_serial`]: MLX is not thread-safe).
#[macro_export]
macro_rules! per_backend {
    ($($check:ident),* $(,)?) => {
        $(
            mod $check {
                #[test]
                fn reference() {
                    super::$check(&mtp_core::reference::ReferenceBackend::default());
                }

                #[test]
                fn candle_cpu() {
                    super::$check(&backend_candle::CandleBackend::cpu());
                }

                #[cfg(feature = "cuda")]
                #[test]
                fn candle_cuda() {
                    super::$check(&$crate::common::candle_cuda());
                }

                #[cfg(feature = "mlx")]
                #[test]
                fn mlx() {
                    let _serial = $crate::common::mlx_serial();
                    super::$check(&runner::backend_mlx::MlxBackend::default());
                }
            }
        )*
    };
}

/// Candle on CUDA device 0; a build with the `cuda` feature runs its tests where a GPU is.
#[cfg(feature = "cuda")]
pub fn candle_cuda() -> backend_candle::CandleBackend {
    backend_candle::CandleBackend::from_spec("cuda:0")
        .unwrap_or_else(|e| panic!("no CUDA device for the candle_cuda tests: {e}"))
}

use runner::loading::{load_assistant, load_target, LoadOptions, TensorStore};
use runner::models::{Gemma4Assistant, Gemma4Target};

/// A process-wide lock held by every MLX test, so that MLX runs on one thread at a time even when
/// the test harness runs tests in parallel.
#[cfg(feature = "mlx")]
pub fn mlx_serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The backend of the backend-independent tests (loader errors).
pub type B = ReferenceBackend;

/// The fixture root: `$MTP_GEMMA4_FIXTURES`, else `<workspace>/tests/fixtures/gemma4`.
pub fn fixture_root() -> PathBuf {
    match std::env::var_os("MTP_GEMMA4_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4"),
    }
}

/// Every fixture case directory (sorted). The fixtures are committed, so a missing root is a
/// failure, not a skip. (`Option` keeps the call sites' early-return shape.)
pub fn cases() -> Option<Vec<PathBuf>> {
    let root = fixture_root();
    let entries = std::fs::read_dir(&root).unwrap_or_else(|e| {
        panic!(
            "no Gemma 4 fixtures at {} ({e}); regenerate with tools/gemma4_fixtures",
            root.display()
        )
    });
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("reference.safetensors").is_file())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no fixture case under {}", root.display());
    Some(dirs)
}

/// The case name of a case directory.
pub fn name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The reference tensors of one case.
pub struct Reference {
    store: TensorStore,
}

impl Reference {
    /// Open `dir/reference.safetensors`.
    pub fn open(dir: &Path) -> Self {
        Self::open_file(&dir.join("reference.safetensors"))
    }

    /// Open a reference safetensors file.
    pub fn open_file(path: &Path) -> Self {
        let store = TensorStore::from_files(&[path.to_path_buf()])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self { store }
    }

    /// Float tensor `name` and its shape.
    pub fn floats(&mut self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let shape = self
            .store
            .shape(name)
            .unwrap_or_else(|| panic!("no {name}"));
        (self.store.take_f32(name, &shape).expect(name), shape)
    }

    /// Integer tensor `name` as token ids.
    pub fn ids(&mut self, name: &str) -> Vec<u32> {
        let shape = self
            .store
            .shape(name)
            .unwrap_or_else(|| panic!("no {name}"));
        self.store
            .take_ints(name, &shape)
            .expect(name)
            .into_iter()
            .map(|v| u32::try_from(v).expect("non-negative id"))
            .collect()
    }
}

/// Load the target and assistant of a case (f32).
pub fn load_pair<B: Backend>(b: &B, dir: &Path) -> (Gemma4Target<B>, Gemma4Assistant<B>) {
    let options = LoadOptions::default();
    let target = load_target(b, &dir.join("target"), &options).expect("target loads");
    let assistant =
        load_assistant(b, &dir.join("assistant"), &target, &options).expect("assistant loads");
    (target, assistant)
}

/// Largest `max |ours - theirs| / max |theirs|` over rows of length `row`.
pub fn max_rel_err(ours: &[f32], theirs: &[f32], row: usize) -> f32 {
    assert_eq!(ours.len(), theirs.len(), "lengths differ");
    ours.chunks(row)
        .zip(theirs.chunks(row))
        .map(|(a, b)| {
            let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
            let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            diff / scale
        })
        .fold(0f32, f32::max)
}

/// A `[1, t]` id array.
pub fn ids_array<B: Backend>(b: &B, ids: &[u32]) -> B::Array {
    b.from_u32(ids, &[1, ids.len()]).expect("ids")
}

/// The target's logits over every position of `prompt`, prefilled into fresh caches.
pub fn prefill_logits<B: Backend, T: mtp_core::model::TargetModel<B>>(
    b: &B,
    target: &T,
    prompt: &[u32],
) -> Vec<f32> {
    let mut caches = target.new_caches(b).unwrap();
    let out = target
        .forward(b, &ids_array(b, prompt), 0, &mut caches)
        .unwrap();
    b.to_vec_f32(&target.unembed(b, &out.hidden).unwrap())
        .unwrap()
}

/// Relative tolerance of every fixture comparison.
pub const TOLERANCE: f32 = 1e-4;
