//! `--draft-kind`, `--ngram-min`, `--ngram-max`: what drafts (shared by `generate` and `bench`).

use std::path::Path;

use anyhow::Context;
use clap::{Args, ValueEnum};
use mtp_core::proposer::{NgramOptions, ProposerKind, DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN};
use runner::proposers::ProposerChoice;

/// Proposer kinds on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DraftKindChoice {
    /// An MTP head: the Gemma 4 assistant in --draft DIR.
    Mtp,
    /// A draft model: a small causal LM with the target's vocabulary in --draft DIR.
    Model,
    /// Prompt lookup: drafts copied from earlier in the prompt and output (no model, no
    /// directory).
    Ngram,
}

impl From<DraftKindChoice> for ProposerKind {
    fn from(k: DraftKindChoice) -> Self {
        match k {
            DraftKindChoice::Mtp => ProposerKind::Mtp,
            DraftKindChoice::Model => ProposerKind::Model,
            DraftKindChoice::Ngram => ProposerKind::Ngram,
        }
    }
}

/// What proposes the drafts.
#[derive(Debug, Args)]
#[command(next_help_heading = "Proposers")]
pub struct ProposerArgs {
    /// What drafts: `mtp` (the assistant in --draft DIR), `model` (a draft model in --draft
    /// DIR) or `ngram` (prompt lookup, needs no directory); several, comma-separated (e.g.
    /// `mtp,ngram`), draft side by side: each round drafts with the one whose running expected
    /// accepted length is highest, with statistics per proposer [default: detected from
    /// --draft's config.json model_type].
    #[arg(long, value_enum, value_name = "KIND", value_delimiter = ',')]
    pub draft_kind: Vec<DraftKindChoice>,
    /// Prompt lookup: the shortest suffix of the text matched against earlier text.
    #[arg(long, default_value_t = DEFAULT_NGRAM_MIN, value_name = "N")]
    pub ngram_min: usize,
    /// Prompt lookup: the longest suffix matched (the longest match wins; at most 32).
    #[arg(long, default_value_t = DEFAULT_NGRAM_MAX, value_name = "N")]
    pub ngram_max: usize,
}

impl ProposerArgs {
    /// The proposers for the draft directory `draft_dir` (from `--draft` or the default pair).
    pub fn choice(&self, draft_dir: Option<&Path>) -> anyhow::Result<ProposerChoice> {
        let ngram = NgramOptions::new(self.ngram_min, self.ngram_max)
            .context("invalid prompt-lookup option")?;
        let mut kinds: Vec<ProposerKind> = Vec::new();
        for kind in self.draft_kind.iter().copied().map(ProposerKind::from) {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        Ok(ProposerChoice::resolve(&kinds, draft_dir, ngram)?)
    }
}
