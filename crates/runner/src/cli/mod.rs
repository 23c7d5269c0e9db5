//! The `mtp` command: arguments, the generate command, output, logging and progress.

pub mod args;
pub mod backend;
pub mod generate;
pub mod logging;
pub mod output;
pub mod progress;
