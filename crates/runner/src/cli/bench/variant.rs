//! The decode variants a benchmark compares: plain decode, each draft schedule, each fixed depth,
//! each with the engine's evaluation overlap or (the `-sync` rows) without it.

use mtp_core::engine::EvalOverlap;
use mtp_core::options::{DraftOverrides, ValidationMode};
use mtp_core::schedule::ScheduleKind;

/// How a variant decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    /// The target alone, one forward per token.
    Plain,
    /// The target alone without the run's structured-output constraint (`plain-free`; only
    /// in a run with one): what the constraint costs plain decoding.
    Unconstrained,
    /// MTP with a draft schedule at the model's initial and maximum depth.
    Schedule(ScheduleKind),
    /// MTP at a fixed depth (constant schedule, initial = max = k).
    Depth(usize),
}

/// Where an adaptive variant's controller comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ControllerChoice {
    /// The engine's, whose learned state carries over from request to request.
    Carried,
    /// A new one per request.
    Fresh,
}

/// One way of decoding the prompt set: a decode and the engine's evaluation overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// How it decodes.
    pub decode: Decode,
    /// Where an adaptive schedule's controller comes from (ignored by the other decodes).
    pub controller: ControllerChoice,
    /// The engine's evaluation overlap ([`EvalOverlap::Auto`], or [`EvalOverlap::Never`] for
    /// the `-sync` baselines that show what the overlap gains on a lazy backend).
    pub overlap: EvalOverlap,
}

impl Variant {
    /// Plain decode with the engine's default overlap: the row every ratio divides by.
    pub const PLAIN: Variant = Variant::new(Decode::Plain);

    /// `decode` with the engine's default overlap.
    pub const fn new(decode: Decode) -> Self {
        Self {
            decode,
            controller: ControllerChoice::Carried,
            overlap: EvalOverlap::Auto,
        }
    }

    /// The same decode with a new controller per request.
    pub fn with_controller(self, controller: ControllerChoice) -> Self {
        Self { controller, ..self }
    }

    /// Whether each request gets a new adaptive controller.
    pub fn fresh_controller(&self) -> bool {
        self.controller == ControllerChoice::Fresh
            && self.decode == Decode::Schedule(ScheduleKind::Adaptive)
    }

    /// The same decode with the evaluation overlap off.
    pub fn without_overlap(self) -> Self {
        Self {
            overlap: EvalOverlap::Never,
            ..self
        }
    }

    /// The `-sync` baseline at fixed depth `k` (0: plain decode).
    pub fn sync_at(k: usize) -> Self {
        let decode = match k {
            0 => Decode::Plain,
            k => Decode::Depth(k),
        };
        Self::new(decode).without_overlap()
    }

    /// A short stable name: `plain`, `mtp-adaptive`, `mtp-adaptive-fresh`, `mtp-k3`,
    /// `mtp-k3-sync`, `plain-sync`.
    pub fn name(&self) -> String {
        let base = match self.decode {
            Decode::Plain => "plain".to_string(),
            Decode::Unconstrained => "plain-free".to_string(),
            Decode::Schedule(kind) if self.fresh_controller() => format!("mtp-{kind}-fresh"),
            Decode::Schedule(kind) => format!("mtp-{kind}"),
            Decode::Depth(k) => format!("mtp-k{k}"),
        };
        match self.overlap {
            EvalOverlap::Never => format!("{base}-sync"),
            EvalOverlap::Auto | EvalOverlap::Always => base,
        }
    }

    /// The fixed draft depth, for the fixed-depth variants.
    pub fn depth(&self) -> Option<usize> {
        match self.decode {
            Decode::Depth(k) => Some(k),
            Decode::Plain | Decode::Unconstrained | Decode::Schedule(_) => None,
        }
    }

    /// Whether this is plain decode (with or without the overlap, the constraint or not).
    pub fn is_plain(&self) -> bool {
        matches!(self.decode, Decode::Plain | Decode::Unconstrained)
    }

    /// Whether the run's structured-output constraint applies (every variant but
    /// `plain-free`).
    pub fn is_constrained(&self) -> bool {
        self.decode != Decode::Unconstrained
    }

    /// The request's draft overrides (batched validation for every MTP variant).
    pub fn overrides(&self) -> DraftOverrides {
        match self.decode {
            Decode::Plain | Decode::Unconstrained => DraftOverrides {
                enabled: Some(false),
                ..DraftOverrides::default()
            },
            Decode::Schedule(kind) => DraftOverrides {
                schedule: Some(kind),
                validation: Some(ValidationMode::Batched),
                enabled: Some(true),
                ..DraftOverrides::default()
            },
            Decode::Depth(k) => DraftOverrides {
                initial_draft_tokens: Some(k),
                max_draft_tokens: Some(k),
                schedule: Some(ScheduleKind::Constant),
                validation: Some(ValidationMode::Batched),
                enabled: Some(true),
            },
        }
    }
}
