//! The `mtp` command: arguments, the generate, bench and serve commands, output, logging and
//! progress.

pub mod args;
#[cfg(test)]
mod args_fuzz;
pub mod backend;
pub mod bench;
pub mod bench_batch;
pub mod console;
pub mod format_args;
pub mod generate;
pub mod load_plan;
pub mod logging;
pub mod model_check;
pub mod output;
pub mod progress;
pub mod proposer_args;
#[cfg(feature = "server")]
pub mod serve;
pub mod threads;
