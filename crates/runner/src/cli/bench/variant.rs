//! The decode variants a benchmark compares: plain decode, each draft schedule, each fixed depth.

use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::schedule::ScheduleKind;

/// One way of decoding the prompt set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The target alone, one forward per token.
    Plain,
    /// MTP with a draft schedule at the model's initial and maximum depth.
    Schedule(ScheduleKind),
    /// MTP at a fixed depth (constant schedule, initial = max = k).
    Depth(usize),
}

impl Variant {
    /// A short stable name: `plain`, `mtp-adaptive`, `mtp-k3`.
    pub fn name(&self) -> String {
        match self {
            Variant::Plain => "plain".to_string(),
            Variant::Schedule(kind) => format!("mtp-{kind}"),
            Variant::Depth(k) => format!("mtp-k{k}"),
        }
    }

    /// The request's draft overrides (batched validation for every MTP variant).
    pub fn overrides(&self) -> DraftOverrides {
        match *self {
            Variant::Plain => DraftOverrides {
                enabled: Some(false),
                ..DraftOverrides::default()
            },
            Variant::Schedule(kind) => DraftOverrides {
                schedule: Some(kind),
                validation: Some(ValidationMode::Batched),
                enabled: Some(true),
                ..DraftOverrides::default()
            },
            Variant::Depth(k) => DraftOverrides {
                initial_draft_tokens: Some(k),
                max_draft_tokens: Some(k),
                schedule: Some(ScheduleKind::Constant),
                validation: Some(ValidationMode::Batched),
                enabled: Some(true),
            },
        }
    }
}
