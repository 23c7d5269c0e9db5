//! The `mtp` command. `mtp generate --help` lists every option with its default.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::args::{Cli, Command};

fn main() -> ExitCode {
    cli::console::install();
    let cli = Cli::parse();
    cli::logging::init(cli.verbose);
    cli::threads::apply(cli.command.threads());
    let result = match cli.command {
        Command::Generate(args) => cli::generate::run(args),
        Command::Bench(args) => cli::bench::run(args),
        Command::BenchBatch(args) => cli::bench_batch::run(args),
        #[cfg(feature = "server")]
        Command::Serve(args) => cli::serve::run(*args),
    };
    match result {
        Ok(code) => code,
        Err(err) if cli::console::closed_pipe_in(&err) => {
            ExitCode::from(cli::console::EXIT_CLOSED_PIPE)
        }
        Err(err) => {
            // A closed stderr leaves nowhere to report to: the status still says it failed.
            let _ = cli::console::err(&format!("error: {err:#}\n"));
            ExitCode::FAILURE
        }
    }
}
