//! A spinner on stderr while the weights load, only when stderr is a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mtp_core::Backend;
use runner::loading::LoadOptions;
use runner::{LoadStage, ModelPaths, Pipeline, PipelineError};

/// Load the pair in `paths` on `backend`, with the spinner on stderr while it loads.
pub fn load_pipeline<B: Backend>(
    backend: B,
    paths: &ModelPaths,
    options: &LoadOptions,
) -> Result<Pipeline<B>, PipelineError> {
    let mut progress = LoadProgress::start();
    let loaded =
        Pipeline::load_with_progress(backend, paths, options, &mut |stage| progress.stage(stage));
    progress.finish();
    loaded
}

/// The loading spinner (hidden when stderr is not a terminal).
pub struct LoadProgress {
    bar: Option<ProgressBar>,
}

impl LoadProgress {
    /// Start the spinner if stderr is a terminal.
    pub fn start() -> Self {
        if !std::io::stderr().is_terminal() {
            return Self { bar: None };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(100));
        Self { bar: Some(bar) }
    }

    /// Show the stage that starts now.
    pub fn stage(&mut self, stage: LoadStage) {
        tracing::info!("{stage}");
        if let Some(bar) = &self.bar {
            bar.set_message(stage.to_string());
        }
    }

    /// Remove the spinner.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
