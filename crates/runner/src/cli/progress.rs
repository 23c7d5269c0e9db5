//! A spinner on stderr while the weights load, with a bar over the target's tensors, only when
//! stderr is a terminal.

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

/// The spinner's template (a stage and the time spent).
const SPINNER: &str = "{spinner} {msg} ({elapsed})";
/// The template while the target's tensors load.
const TENSOR_BAR: &str = "{spinner} {msg} [{bar:30}] {pos}/{len} tensors ({elapsed})";

/// The loading spinner (hidden when stderr is not a terminal).
pub struct LoadProgress {
    bar: Option<ProgressBar>,
    /// Whether the display currently counts tensors.
    counting: bool,
}

fn set_template(bar: &ProgressBar, template: &str) {
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
}

impl LoadProgress {
    /// Start the spinner if stderr is a terminal.
    pub fn start() -> Self {
        if !std::io::stderr().is_terminal() {
            return Self {
                bar: None,
                counting: false,
            };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        set_template(&bar, SPINNER);
        bar.enable_steady_tick(Duration::from_millis(100));
        Self {
            bar: Some(bar),
            counting: false,
        }
    }

    /// Show the stage that starts now (or, for tensor counts, advance the count).
    pub fn stage(&mut self, stage: LoadStage) {
        if let LoadStage::TargetTensors { done, total } = stage {
            if let Some(bar) = &self.bar {
                if !self.counting {
                    set_template(bar, TENSOR_BAR);
                    self.counting = true;
                }
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            }
            return;
        }
        tracing::info!("{stage}");
        if let Some(bar) = &self.bar {
            if self.counting {
                set_template(bar, SPINNER);
                self.counting = false;
            }
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
