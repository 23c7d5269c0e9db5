//! The decode variants a benchmark compares: plain decode, each draft schedule, each fixed depth
//! (with the engine's evaluation overlap, and optionally without it).

use mtp_core::engine::EvalOverlap;
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::schedule::ScheduleKind;

/// One way of decoding the prompt set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The target alone, one forward per token.
    Plain,
    /// [`Variant::Plain`] with the evaluation overlap off ([`EvalOverlap::Never`]): one
    /// forward and one read per token, nothing run ahead.
    PlainSync,
    /// MTP with a draft schedule at the model's initial and maximum depth.
    Schedule(ScheduleKind),
    /// MTP at a fixed depth (constant schedule, initial = max = k).
    Depth(usize),
    /// [`Variant::Depth`] with the evaluation overlap off ([`EvalOverlap::Never`]): the
    /// baseline that shows what the overlap gains on a lazy backend.
    SyncDepth(usize),
}

impl Variant {
    /// A short stable name: `plain`, `mtp-adaptive`, `mtp-k3`, `mtp-k3-sync`.
    pub fn name(&self) -> String {
        match self {
            Variant::Plain => "plain".to_string(),
            Variant::PlainSync => "plain-sync".to_string(),
            Variant::Schedule(kind) => format!("mtp-{kind}"),
            Variant::Depth(k) => format!("mtp-k{k}"),
            Variant::SyncDepth(k) => format!("mtp-k{k}-sync"),
        }
    }

    /// The fixed draft depth, for the fixed-depth variants.
    pub fn depth(&self) -> Option<usize> {
        match *self {
            Variant::Depth(k) | Variant::SyncDepth(k) => Some(k),
            Variant::Plain | Variant::PlainSync | Variant::Schedule(_) => None,
        }
    }

    /// Whether this is plain decode (with or without the overlap).
    pub fn is_plain(&self) -> bool {
        matches!(self, Variant::Plain | Variant::PlainSync)
    }

    /// The variant without the evaluation overlap at fixed depth `k` (0: plain decode).
    pub fn sync_at(k: usize) -> Self {
        match k {
            0 => Variant::PlainSync,
            k => Variant::SyncDepth(k),
        }
    }

    /// The same decode with the evaluation overlap off, for variants that have one measured as
    /// a `-sync` variant.
    pub fn without_overlap(&self) -> Option<Variant> {
        match *self {
            Variant::Plain => Some(Variant::PlainSync),
            Variant::Depth(k) => Some(Variant::SyncDepth(k)),
            Variant::PlainSync | Variant::SyncDepth(_) | Variant::Schedule(_) => None,
        }
    }

    /// The engine's evaluation overlap for this variant.
    pub fn overlap(&self) -> EvalOverlap {
        match self {
            Variant::PlainSync | Variant::SyncDepth(_) => EvalOverlap::Never,
            Variant::Plain | Variant::Schedule(_) | Variant::Depth(_) => EvalOverlap::Auto,
        }
    }

    /// The request's draft overrides (batched validation for every MTP variant).
    pub fn overrides(&self) -> DraftOverrides {
        match *self {
            Variant::Plain | Variant::PlainSync => DraftOverrides {
                enabled: Some(false),
                ..DraftOverrides::default()
            },
            Variant::Schedule(kind) => DraftOverrides {
                schedule: Some(kind),
                validation: Some(ValidationMode::Batched),
                enabled: Some(true),
                ..DraftOverrides::default()
            },
            Variant::Depth(k) | Variant::SyncDepth(k) => DraftOverrides {
                initial_draft_tokens: Some(k),
                max_draft_tokens: Some(k),
                schedule: Some(ScheduleKind::Constant),
                validation: Some(ValidationMode::Batched),
                enabled: Some(true),
            },
        }
    }
}
