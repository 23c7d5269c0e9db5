//! The `model_type` → model family registry: the one table the loader consults to know which
//! family builds a checkpoint, and the family-neutral [`LoadedTarget`] and [`LoadedDrafter`] a
//! [`Pipeline`] holds.
//!
//! Adding a family is a folder of model code plus, in this file only: a row per `model_type` in
//! [`REGISTRY`] (targets and drafters), a [`Family`] variant, a [`LoadedTarget`] variant and its
//! arm in [`load_target_model`] (and, for a GGUF architecture, in [`GGUF_REGISTRY`]), and for a
//! family with MTP drafters a [`LoadedDrafter`] variant and its arm in [`load_drafter_model`].
//! Everything else — the proposer kind of a `--draft` directory, the CLI's path checks, the
//! `model_type`s each family's config reader accepts, the pipeline — reads this table.
//!
//! [`Pipeline`]: crate::Pipeline

use std::path::Path;

use mtp_core::cache::CacheSet;
use mtp_core::model::{DraftStep, ForwardJob, MtpDrafter, TargetModel, TargetOutput};
use mtp_core::options::MtpDefaults;
use mtp_core::Backend;

use super::gemma3::{self, Gemma3Target};
use super::{AssistantTarget, Gemma4Assistant, Gemma4Target};
use crate::loading::gguf::{is_gguf_path, GgufError, GgufFile};
use crate::loading::{
    load_assistant, load_gguf_assistant, load_gguf_target_file, load_target_reporting,
    read_config_json, LoadError, LoadOptions, LoadReport, LoadResult, TensorProgress, TextLayout,
};

/// A model family: one folder of model code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Gemma 4 (`models/gemma4.rs`, `gemma4_assistant.rs`, `layers.rs`, `moe.rs`).
    Gemma4,
    /// Gemma 3 text (`models/gemma3/`).
    Gemma3,
}

impl Family {
    /// The family's name in messages (`Gemma 4`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Gemma4 => "Gemma 4",
            Self::Gemma3 => "Gemma 3",
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a checkpoint of a `model_type` is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A target model (verifies drafts).
    Target,
    /// An MTP drafter bound to a target of its family.
    Drafter,
}

/// One `model_type` the loader builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// The `model_type` of `config.json`.
    pub model_type: &'static str,
    /// The HF class that writes this layout.
    pub hf_class: &'static str,
    /// The family whose code builds it.
    pub family: Family,
    /// Target or drafter.
    pub role: Role,
    /// For a drafter, the families of the targets it drafts for (it reads their caches and
    /// embeddings); empty for a target.
    pub drafts_for: &'static [Family],
}

/// Every `model_type` the loader builds.
pub const REGISTRY: &[Registration] = &[
    Registration {
        model_type: "gemma4",
        hf_class: "Gemma4ForConditionalGeneration",
        family: Family::Gemma4,
        role: Role::Target,
        drafts_for: &[],
    },
    Registration {
        model_type: "gemma4_text",
        hf_class: "Gemma4ForCausalLM",
        family: Family::Gemma4,
        role: Role::Target,
        drafts_for: &[],
    },
    Registration {
        model_type: "gemma3",
        hf_class: "Gemma3ForConditionalGeneration",
        family: Family::Gemma3,
        role: Role::Target,
        drafts_for: &[],
    },
    Registration {
        model_type: "gemma3_text",
        hf_class: "Gemma3ForCausalLM",
        family: Family::Gemma3,
        role: Role::Target,
        drafts_for: &[],
    },
    Registration {
        model_type: "gemma4_assistant",
        hf_class: "Gemma4AssistantForCausalLM",
        family: Family::Gemma4,
        role: Role::Drafter,
        drafts_for: &[Family::Gemma4, Family::Gemma3],
    },
];

/// GGUF `general.architecture` → the family that builds it (targets only).
pub const GGUF_REGISTRY: &[(&str, Family)] =
    &[("gemma3", Family::Gemma3), ("gemma4", Family::Gemma4)];

/// The registration of `model_type` in `role`, if any.
pub fn lookup(model_type: &str, role: Role) -> Option<&'static Registration> {
    REGISTRY
        .iter()
        .find(|r| r.model_type == model_type && r.role == role)
}

/// The `model_type`s registered for `role`.
pub fn model_types(role: Role) -> Vec<&'static str> {
    REGISTRY
        .iter()
        .filter(|r| r.role == role)
        .map(|r| r.model_type)
        .collect()
}

/// The `model_type`s of the drafters that draft for targets of `family`.
pub fn drafters_for(family: Family) -> Vec<&'static str> {
    REGISTRY
        .iter()
        .filter(|r| r.role == Role::Drafter && r.drafts_for.contains(&family))
        .map(|r| r.model_type)
        .collect()
}

/// The `model_type`s registered to `family` for `role` (what that family's config reader
/// accepts).
pub fn family_model_types(family: Family, role: Role) -> Vec<&'static str> {
    REGISTRY
        .iter()
        .filter(|r| r.family == family && r.role == role)
        .map(|r| r.model_type)
        .collect()
}

/// The registration of the `model_type` of `dir/config.json` in `role`; any other `model_type`
/// is [`LoadError::UnknownModelType`] listing those registered for `role`.
pub fn registration_of(dir: &Path, role: Role) -> LoadResult<&'static Registration> {
    let path = dir.join("config.json");
    let (_, found) = read_config_json(&path)?;
    lookup(&found, role).ok_or_else(|| LoadError::UnknownModelType {
        path,
        found,
        expected: model_types(role),
    })
}

/// The family registered for the `model_type` of `dir/config.json` in `role`.
fn family_of(dir: &Path, role: Role) -> LoadResult<Family> {
    registration_of(dir, role).map(|r| r.family)
}

/// A loaded target of any registered family.
// One value per pipeline, built once: boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum LoadedTarget<B: Backend> {
    /// A Gemma 4 target (either layout).
    Gemma4(Gemma4Target<B>),
    /// A Gemma 3 text target (safetensors or GGUF).
    Gemma3(Gemma3Target<B>),
}

impl<B: Backend> LoadedTarget<B> {
    /// The family of the model.
    pub fn family(&self) -> Family {
        match self {
            Self::Gemma4(_) => Family::Gemma4,
            Self::Gemma3(_) => Family::Gemma3,
        }
    }

    /// The Gemma 4 target, when it is one.
    pub fn as_gemma4(&self) -> Option<&Gemma4Target<B>> {
        match self {
            Self::Gemma4(model) => Some(model),
            Self::Gemma3(_) => None,
        }
    }

    /// The Gemma 3 target, when it is one.
    pub fn as_gemma3(&self) -> Option<&Gemma3Target<B>> {
        match self {
            Self::Gemma3(model) => Some(model),
            Self::Gemma4(_) => None,
        }
    }

    /// The model as a Gemma 4 assistant sees it (every family can host one).
    pub fn as_assistant_target(&self) -> &dyn AssistantTarget {
        match self {
            Self::Gemma4(model) => model,
            Self::Gemma3(model) => model,
        }
    }

    fn model(&self) -> &dyn TargetModel<B> {
        match self {
            Self::Gemma4(model) => model,
            Self::Gemma3(model) => model,
        }
    }
}

impl<B: Backend> TargetModel<B> for LoadedTarget<B> {
    fn vocab_size(&self) -> usize {
        self.model().vocab_size()
    }

    fn max_context(&self) -> usize {
        self.model().max_context()
    }

    fn new_caches(&self, backend: &B) -> Result<CacheSet<B>, B::Error> {
        self.model().new_caches(backend)
    }

    fn forward(
        &self,
        backend: &B,
        ids: &B::Array,
        start: usize,
        caches: &mut CacheSet<B>,
    ) -> Result<TargetOutput<B>, B::Error> {
        self.model().forward(backend, ids, start, caches)
    }

    fn forward_batch(
        &self,
        backend: &B,
        jobs: &mut [ForwardJob<'_, B>],
    ) -> Result<Vec<TargetOutput<B>>, B::Error> {
        self.model().forward_batch(backend, jobs)
    }

    fn unembed(&self, backend: &B, hidden: &B::Array) -> Result<B::Array, B::Error> {
        self.model().unembed(backend, hidden)
    }

    fn unembed_batch(&self, backend: &B, hiddens: &[&B::Array]) -> Result<Vec<B::Array>, B::Error> {
        self.model().unembed_batch(backend, hiddens)
    }

    fn token_embeddings(&self, backend: &B, ids: &B::Array) -> Result<B::Array, B::Error> {
        self.model().token_embeddings(backend, ids)
    }

    fn mtp_defaults(&self) -> MtpDefaults {
        self.model().mtp_defaults()
    }
}

/// Load the target at `path` with the family it is registered to, telling `progress` each tensor
/// read: an HF model directory (by the `model_type` of its `config.json`) or a `.gguf` file (by
/// its `general.architecture`, [`GGUF_REGISTRY`]).
pub fn load_target_model<B: Backend>(
    backend: &B,
    path: &Path,
    options: &LoadOptions,
    progress: TensorProgress<'_>,
) -> LoadResult<(LoadedTarget<B>, LoadReport)> {
    if is_gguf_path(path) {
        let file = GgufFile::open(path)?;
        return load_gguf_target(backend, &file, options, progress);
    }
    let dir = path;
    match family_of(dir, Role::Target)? {
        Family::Gemma4 => load_target_reporting(backend, dir, options, progress)
            .map(|(model, report)| (LoadedTarget::Gemma4(model), report)),
        Family::Gemma3 => gemma3::load_safetensors(backend, dir, options, progress)
            .map(|(model, stats)| (LoadedTarget::Gemma3(model), text_report(stats))),
    }
}

/// The report of a model whose text model sits at the root (`model.`).
fn text_report(stats: crate::loading::StoreStats) -> LoadReport {
    LoadReport {
        layout: TextLayout {
            prefix: "model.".into(),
            wrapper: None,
        },
        stats,
    }
}

/// Load the target in an opened GGUF file with the family its architecture is registered to.
pub fn load_gguf_target<B: Backend>(
    backend: &B,
    file: &GgufFile,
    options: &LoadOptions,
    progress: TensorProgress<'_>,
) -> LoadResult<(LoadedTarget<B>, LoadReport)> {
    let arch = file.architecture()?;
    let Some((_, family)) = GGUF_REGISTRY.iter().find(|(a, _)| *a == arch) else {
        return Err(GgufError::UnsupportedArchitecture {
            path: file.path().to_path_buf(),
            found: arch.to_string(),
            supported: GGUF_REGISTRY.iter().map(|(a, _)| *a).collect(),
        }
        .into());
    };
    match family {
        Family::Gemma3 => gemma3::load_gguf(backend, file, options, progress)
            .map(|(model, stats)| (LoadedTarget::Gemma3(model), text_report(stats)))
            .map_err(|e| e.in_file(file.path())),
        Family::Gemma4 => load_gguf_target_file(backend, file, options, progress)
            .map(|(model, stats)| (LoadedTarget::Gemma4(model), text_report(stats))),
    }
}

/// A loaded MTP drafter of any registered family, bound to the target it was loaded for.
#[derive(Debug)]
pub enum LoadedDrafter<B: Backend> {
    /// A Gemma 4 assistant (`gemma4_assistant`).
    Gemma4(Gemma4Assistant<B>),
}

impl<B: Backend> LoadedDrafter<B> {
    /// The family of the drafter's code (a Gemma 4 assistant may draft for a Gemma 3 target).
    pub fn family(&self) -> Family {
        match self {
            Self::Gemma4(_) => Family::Gemma4,
        }
    }

    /// The Gemma 4 assistant, when it is one.
    pub fn as_gemma4(&self) -> Option<&Gemma4Assistant<B>> {
        match self {
            Self::Gemma4(model) => Some(model),
        }
    }

    fn model(&self) -> &dyn MtpDrafter<B> {
        match self {
            Self::Gemma4(model) => model,
        }
    }
}

impl<B: Backend> MtpDrafter<B> for LoadedDrafter<B> {
    fn draft_step(
        &self,
        backend: &B,
        input: &B::Array,
        position: usize,
        target_caches: &CacheSet<B>,
    ) -> Result<DraftStep<B>, B::Error> {
        self.model()
            .draft_step(backend, input, position, target_caches)
    }
}

/// Load the MTP drafter in `dir` for `target` with the family its `model_type` is registered
/// to, which must draft for the target's family ([`Registration::drafts_for`]: a Gemma 4
/// assistant drafts for Gemma 4 and Gemma 3 targets): a drafter reads its target's caches and
/// embeddings, so one that does not draft for the target's family is
/// [`LoadError::DrafterMismatch`] (naming both families and what drafts for the target
/// instead), and a `model_type` registered as no drafter is [`LoadError::UnknownModelType`].
pub fn load_drafter_model<B: Backend>(
    backend: &B,
    dir: &Path,
    target: &LoadedTarget<B>,
    options: &LoadOptions,
) -> LoadResult<LoadedDrafter<B>> {
    load_drafter_with_centroids(backend, dir, target, options, None)
}

/// [`load_drafter_model`] where `path` may also be a GGUF assistant file (`gemma4-assistant`),
/// whose dropped ordered-embedding centroids `centroids` (an HF assistant directory) gives back;
/// `centroids` with an HF drafter directory is refused (it carries its own).
pub fn load_drafter_with_centroids<B: Backend>(
    backend: &B,
    path: &Path,
    target: &LoadedTarget<B>,
    options: &LoadOptions,
    centroids: Option<&Path>,
) -> LoadResult<LoadedDrafter<B>> {
    if is_gguf_path(path) {
        return load_gguf_assistant(
            backend,
            path,
            target.as_assistant_target(),
            options,
            centroids,
        )
        .map(LoadedDrafter::Gemma4);
    }
    if let Some(centroids) = centroids {
        return Err(LoadError::DrafterMismatch {
            reason: format!(
                "centroids from {} apply to a GGUF assistant; the HF assistant {} carries its own",
                centroids.display(),
                path.display()
            ),
        });
    }
    let dir = path;
    let registration = registration_of(dir, Role::Drafter)?;
    if !registration.drafts_for.contains(&target.family()) {
        return Err(family_mismatch(registration, target.family()));
    }
    match registration.family {
        Family::Gemma4 => load_assistant(backend, dir, target.as_assistant_target(), options)
            .map(LoadedDrafter::Gemma4),
        Family::Gemma3 => Err(family_mismatch(registration, target.family())),
    }
}

/// The error of the `drafter` registration given for a target of the `target` family.
fn family_mismatch(drafter: &Registration, target: Family) -> LoadError {
    let drafters = drafters_for(target);
    let instead = if drafters.is_empty() {
        format!("no MTP drafter exists for {target} targets: draft with prompt lookup (--draft-kind ngram)")
    } else {
        format!(
            "a {target} target takes a drafter of model_type {}",
            drafters.join(" or ")
        )
    };
    LoadError::DrafterMismatch {
        reason: format!(
            "a {} drafter (model_type {:?}) cannot draft for a {target} target; {instead}",
            drafter.family, drafter.model_type
        ),
    }
}
