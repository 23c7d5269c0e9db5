//! The `mtp` command: arguments, the generate and bench commands, output, logging and progress.

pub mod args;
pub mod backend;
pub mod bench;
pub mod generate;
pub mod logging;
pub mod output;
pub mod progress;
pub mod proposer_args;
